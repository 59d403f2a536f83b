"""Every routine as WGSL passes: `plan_routine(routine, target)` gives the runtime's `Plan`.

One module per family (sort, scatter, linalg, fft, softmax); `DECLARED` lists the routines this device
runs and `UNDECLARED_DTYPES` the (routine, dtype) pairs it does not (float64 keys and atomics
have no WGSL). A routine not listed raises UnsupportedRoutineError at prepare, never a host run.
"""

from __future__ import annotations

import importlib
from typing import Any

from jaxcore.backend import UnsupportedRoutineError
from jaxcore.dtype import DType
from jaxcore.routine import Routine, Routines
from jaxcore_webgpu.program import Plan

# the module and function that plan each declared routine (imported on first use)
_PLANNERS: dict[Routines, tuple[str, str]] = {
    Routines.Sort: ("sort", "plan_sort"),
    Routines.Argsort: ("sort", "plan_sort"),
    Routines.Scatter: ("scatter", "plan_scatter"),
    Routines.TriangularSolve: ("linalg", "plan_triangular_solve"),
    Routines.Cholesky: ("linalg", "plan_cholesky"),
    Routines.LU: ("linalg", "plan_lu"),
    Routines.JacobiEigh: ("linalg", "plan_jacobi_eigh"),
    Routines.Fft: ("fft", "plan_fft"),
    Routines.Softmax: ("softmax", "plan_softmax"),
}
DECLARED: frozenset[Routines] = frozenset(_PLANNERS)

UNDECLARED_DTYPES: frozenset[tuple[Routines, DType]] = frozenset(
    {
        (Routines.Sort, DType.float64),  # 64-bit keys: naga has no f64 bit access
        (Routines.Argsort, DType.float64),
        (Routines.Scatter, DType.float64),  # no 64-bit atomics for add
        (Routines.Softmax, DType.float16),  # these two run as the core's kernels
        (Routines.Softmax, DType.float64),
    }
)


def plan_routine(routine: Routine, target: Any) -> Plan:
    if routine.name not in _PLANNERS:
        raise UnsupportedRoutineError(routine.name, "webgpu")
    module, function = _PLANNERS[routine.name]
    plan: Plan = getattr(importlib.import_module(f"{__name__}.{module}"), function)(routine, target)
    return plan
