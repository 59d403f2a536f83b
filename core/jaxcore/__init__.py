"""jaxcore: the backend layer of jax-js as a Python framework where every device is a plugin.

Two namespaces: `jaxcore` is for users (pick devices, build kernels and routines, run them);
`jaxcore.plugin` is for backend authors and is what `API_VERSION` versions. A frontend builds its
kernels with `jaxcore.fusion` (`Fused`: values over shapes, views, reductions with epilogues).
"""

from jaxcore import web
from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar
from jaxcore.backend import (
    API_VERSION,
    Backend,
    BaseBackend,
    Capabilities,
    DeviceError,
    Executable,
    Slot,
    SlotError,
    UnsupportedOpError,
    UnsupportedRoutineError,
)
from jaxcore.dtype import DType, byte_width, from_numpy, is_float, promote_types, to_numpy
from jaxcore.fusion import Fused, FusedReduce, Lowered, MatmulShape, accessor_global, detect_matmul
from jaxcore.hookspecs import hookimpl
from jaxcore.kernel import Kernel, Reduction
from jaxcore.prepare import prepare_many, prepare_many_async
from jaxcore.record import record
from jaxcore.registry import (
    DeviceInfo,
    DeviceUnavailable,
    PluginInfo,
    default_device,
    device_info,
    devices,
    get_backend,
    init,
    plugin_info,
    register_plugin,
)
from jaxcore.routine import (
    FftParams,
    JacobiEighParams,
    Routine,
    Routines,
    RoutineType,
    ScatterOp,
    ScatterParams,
    SoftmaxParams,
    TriangularSolveParams,
)
from jaxcore.shape import ShapeTracker, View, unravel_alu
from jaxcore.tracing import start_trace, stop_trace
from jaxcore.tuner import TuneResult, TuneSize, tune_nullopt

__version__ = "0.1.0"

__all__ = [
    "prepare_many",
    "prepare_many_async",
    "DeviceError",
    "API_VERSION",
    "AluExp",
    "AluGroup",
    "AluOp",
    "AluVar",
    "Backend",
    "BaseBackend",
    "Capabilities",
    "DType",
    "DeviceInfo",
    "DeviceUnavailable",
    "Executable",
    "FftParams",
    "SoftmaxParams",
    "Fused",
    "FusedReduce",
    "JacobiEighParams",
    "Kernel",
    "Lowered",
    "MatmulShape",
    "PluginInfo",
    "Reduction",
    "Routine",
    "RoutineType",
    "Routines",
    "ScatterOp",
    "ScatterParams",
    "ShapeTracker",
    "Slot",
    "SlotError",
    "TriangularSolveParams",
    "TuneResult",
    "TuneSize",
    "UnsupportedOpError",
    "UnsupportedRoutineError",
    "View",
    "accessor_global",
    "byte_width",
    "default_device",
    "detect_matmul",
    "device_info",
    "devices",
    "from_numpy",
    "get_backend",
    "hookimpl",
    "init",
    "is_float",
    "plugin_info",
    "promote_types",
    "record",
    "register_plugin",
    "start_trace",
    "stop_trace",
    "to_numpy",
    "tune_nullopt",
    "unravel_alu",
    "web",
]
