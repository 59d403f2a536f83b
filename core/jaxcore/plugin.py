"""The backend author's namespace: everything a device plugin builds with, and nothing else.

`jaxcore.API_VERSION` versions exactly this module: a name importable from `jaxcore.plugin` keeps its
meaning until the API version changes, and the registry refuses a plugin built for another version.
A plugin that imports anything else from jaxcore (`jaxcore.dtype._idiv`, `jaxcore.simplify._rule_*`,
the conformance internals) is on its own: those may change in any release.

What is here, by purpose (docs/backend-reference.md explains each):

- registering: `hookimpl`, `RegisterDevice`, `BackendFactory`, `DeviceUnavailable`, `API_VERSION`
- the backend: `BaseBackend` (subclass it), `Backend` (the protocol), `Capabilities`, `Executable`,
  `Slot`, and the errors `SlotError`, `UnsupportedOpError`, `UnsupportedRoutineError`
- the IR it receives: `Kernel`, `Reduction`, `AluExp`, `AluOp`, `AluGroup`, `AluVar`, `View`,
  `ShapeTracker`, `Routine`, `RoutineType`, `Routines`, `ScatterOp` and the routine params
- lowering: `tune_nullopt`/`tune_gpu` → `TuneResult`/`TuneSize` (`GpuLimits`); `value_range` (range
  analysis); `lowering_digest()` (put it in every on-disk cache key)
- the shared lowering a C-like target renders through (docs/backend-reference.md §8): `legalize`
  with `TargetTraits` (the contract as AluExp rewrites; `opaque`, `is_nan`, `divide_rn`), `expansions`
  / `expansions64` (the float32 / float64 transcendentals as AluExp trees), `softfloat` (float32
  exact where a target flushes subnormals), `ordered_keys` (float32 Min/Max reductions
  folded on integer keys), `CStyleLanguage`/`ExpRenderer` (the renderer a dialect
  subclasses), `matmul_shape` (`detect`, `matmul_kernel`, `MatmulShape`)
- the statement program a kernel lowers to (`program`: `program.build_program` from a `TuneResult`
  by strategies, `Program`, `Param`, the statements `Grid`/`Loop`/`Let`/`Define`/`Accumulate`/`Store`;
  rendered whole by `CStyleLanguage.render_program`)
- the numeric contract as numpy reference code, to test against or to run on the host:
  `idiv`/`mod` (C-style, x/0 = 0), `arith`, `cast` (saturating, NaN→0), `bitcast`, `bit_shift` (counts
  mod 32, arithmetic/logical right shift), `bit_combine`, `compare`, `threefry2x32`, `round_f16`,
  `erf`/`erfc`, `const_value`, `normalize_bool`, `INT32_MIN`/`INT32_MAX`/`UINT32_MAX`
- host fallbacks: `Interpreter` (evaluates any expression by the contract), `run_routine` (every routine
  in numpy, on arrays laid out as the routine's type says; `run_routine_on_buffers` on raw buffers)
- dtypes: `DType`, `byte_width`, `is_float`, `is_int`, `to_numpy`, `from_numpy`, `promote_types`
- settings: `current_settings()` (`.plugin("mydev")`, `.plugin_flag(...)`, `.cache_dir`)
"""

from __future__ import annotations

import numpy as np

from jaxcore import expansions, expansions64, matmul_shape, ordered_keys, program, softfloat
from jaxcore.alu import NORMAL_RANGE, AluExp, AluGroup, AluOp, AluVar, pending
from jaxcore.backend import (
    API_VERSION,
    QUIRKS,
    Backend,
    BaseBackend,
    Capabilities,
    DeviceError,
    Executable,
    HostMemory,
    Slot,
    SlotError,
    Undeclared,
    UnsupportedOpError,
    UnsupportedRoutineError,
)
from jaxcore.canonical import COMPOSED_ROUTINES, softmax_kernels
from jaxcore.cstyle import TRANSCENDENTALS, CStyleLanguage, ExpRenderer, strip_parens
from jaxcore.digest import lowering_digest
from jaxcore.dtype import (
    INT32_MAX,
    INT32_MIN,
    UINT32_MAX,
    DType,
    arith,
    bit_combine,
    bit_shift,
    bitcast,
    byte_width,
    cast,
    compare,
    const_value,
    erf,
    erfc,
    from_numpy,
    is_float,
    is_int,
    normalize_bool,
    promote_types,
    threefry2x32,
    to_numpy,
)
from jaxcore.hookspecs import BackendFactory, RegisterDevice, hookimpl
from jaxcore.host_routines import run_routine, run_routine_on_buffers
from jaxcore.interpret import Interpreter
from jaxcore.kernel import Kernel, Reduction
from jaxcore.legalize import TargetTraits, divide_rn, is_nan, legalize, opaque
from jaxcore.matmul_shape import MatmulShape
from jaxcore.registry import DeviceUnavailable
from jaxcore.routine import (
    FftParams,
    JacobiEighParams,
    Routine,
    RoutineParams,
    Routines,
    RoutineType,
    ScatterOp,
    ScatterParams,
    Shape,
    SoftmaxParams,
    TriangularSolveParams,
)
from jaxcore.settings import Settings
from jaxcore.settings import current as current_settings
from jaxcore.shape import ShapeTracker, View
from jaxcore.simplify import Range, value_range
from jaxcore.tuner import GpuLimits, TuneResult, TuneSize, tune_gpu, tune_nullopt


def idiv(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Idiv by the contract: truncates toward zero (floats too), integer x/0 = 0, INT_MIN/-1 = INT_MIN."""
    return arith("idiv", a, b, dtype)


def mod(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Mod by the contract: the result takes the dividend's sign (C fmod), integer x%0 = 0."""
    return arith("mod", a, b, dtype)


def round_f16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest float16 (ties to even, overflow to ±inf), in one step from any float input."""
    with np.errstate(all="ignore"):
        return np.asarray(x).astype(np.float16)


__all__ = [
    "DeviceError",
    "QUIRKS",
    "expansions",
    "expansions64",
    "matmul_shape",
    "CStyleLanguage",
    "ExpRenderer",
    "strip_parens",
    "TRANSCENDENTALS",
    "TargetTraits",
    "divide_rn",
    "is_nan",
    "legalize",
    "opaque",
    "MatmulShape",
    "ordered_keys",
    "program",
    "softfloat",
    "GpuLimits",
    "tune_gpu",
    "API_VERSION",
    "INT32_MAX",
    "INT32_MIN",
    "NORMAL_RANGE",
    "UINT32_MAX",
    "AluExp",
    "AluGroup",
    "AluOp",
    "AluVar",
    "pending",
    "Backend",
    "BackendFactory",
    "BaseBackend",
    "COMPOSED_ROUTINES",
    "softmax_kernels",
    "HostMemory",
    "Capabilities",
    "DType",
    "DeviceUnavailable",
    "Executable",
    "FftParams",
    "SoftmaxParams",
    "Interpreter",
    "JacobiEighParams",
    "Kernel",
    "Range",
    "Reduction",
    "RegisterDevice",
    "Routine",
    "RoutineParams",
    "RoutineType",
    "Routines",
    "ScatterOp",
    "ScatterParams",
    "Settings",
    "Shape",
    "ShapeTracker",
    "Slot",
    "SlotError",
    "TriangularSolveParams",
    "TuneResult",
    "TuneSize",
    "UnsupportedOpError",
    "Undeclared",
    "UnsupportedRoutineError",
    "View",
    "arith",
    "bit_combine",
    "bit_shift",
    "bitcast",
    "byte_width",
    "cast",
    "compare",
    "const_value",
    "current_settings",
    "erf",
    "erfc",
    "from_numpy",
    "hookimpl",
    "idiv",
    "is_float",
    "is_int",
    "lowering_digest",
    "mod",
    "normalize_bool",
    "promote_types",
    "round_f16",
    "run_routine",
    "run_routine_on_buffers",
    "threefry2x32",
    "to_numpy",
    "tune_nullopt",
    "value_range",
]
