"""Every routine as WGSL passes: `plan_routine(routine, target)` gives the runtime's `Plan`.

One module per family (sort, scatter, linalg, fft); `DECLARED` lists the routines this device
runs and `UNDECLARED_DTYPES` the (routine, dtype) pairs it does not (float64 keys and atomics
have no WGSL). A routine not listed raises UnsupportedRoutineError at prepare, never a host run.
"""

from __future__ import annotations

from typing import Any

from jaxcore.backend import UnsupportedRoutineError
from jaxcore.dtype import DType
from jaxcore.routine import Routine, Routines
from jaxcore_webgpu.program import Plan

DECLARED: frozenset[Routines] = frozenset(
    {
        Routines.Sort,
        Routines.Argsort,
        Routines.Scatter,
        Routines.TriangularSolve,
        Routines.Cholesky,
        Routines.LU,
        Routines.JacobiEigh,
        Routines.Fft,
    }
)

UNDECLARED_DTYPES: frozenset[tuple[Routines, DType]] = frozenset(
    {
        (Routines.Sort, DType.float64),  # 64-bit keys: naga has no f64 bit access
        (Routines.Argsort, DType.float64),
        (Routines.Scatter, DType.float64),  # no 64-bit atomics for add
    }
)


def plan_routine(routine: Routine, target: Any) -> Plan:
    name = routine.name
    if name not in DECLARED:
        raise UnsupportedRoutineError(name, "webgpu")
    if name in (Routines.Sort, Routines.Argsort):
        from jaxcore_webgpu.routines.sort import plan_sort

        return plan_sort(routine, target)
    if name == Routines.Scatter:
        from jaxcore_webgpu.routines.scatter import plan_scatter

        return plan_scatter(routine)
    if name == Routines.Fft:
        from jaxcore_webgpu.routines.fft import plan_fft

        return plan_fft(routine, target)
    from jaxcore_webgpu.routines import linalg

    return linalg.plan_linalg(routine)
