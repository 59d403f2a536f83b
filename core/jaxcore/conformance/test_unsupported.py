"""What a backend declares it cannot do must fail loudly at prepare time, never with a wrong answer.

For every dtype it does not list, every (op, dtype) in `unsupported_ops` and every routine it does
not list, preparing a kernel/routine that needs it raises UnsupportedOpError/UnsupportedRoutineError.
A case never passes by checking nothing: where a backend declares nothing of its kind (every dtype,
no `unsupported_ops`) the case is skipped and shows as skipped in the summary; where it declares a
restriction, at least one kernel or routine must have been checked for it.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import Backend
from jaxcore.canonical import COMPOSED_ROUTINES
from jaxcore.conformance.harness import expect_unsupported, map_kernel, minimal_kernel, reduce_kernel
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.routine import (
    FftParams,
    Routine,
    Routines,
    ScatterParams,
)

_FLOAT_ROUTINES = {
    Routines.TriangularSolve,
    Routines.Cholesky,
    Routines.LU,
    Routines.JacobiEigh,
    Routines.Fft,
    Routines.Softmax,
}


def sample_routine(name: Routines, dtype: DType) -> Routine | None:
    """A small valid routine of `name` whose data has `dtype` (None if the routine cannot take it)."""
    floaty = dtype in (DType.float16, DType.float32, DType.float64)
    if name in _FLOAT_ROUTINES and not floaty:
        return None
    if name in (Routines.Sort, Routines.Argsort):
        return Routine.build(name, [(2, 4)], [dtype])
    if name == Routines.Scatter:
        return Routine.build(name, [(3,), (3,)], [dtype, DType.int32], ScatterParams("add", (4,), (0,), 0))
    if name == Routines.TriangularSolve:
        return Routine.build(name, [(3, 3), (2, 3)], [dtype, dtype])
    if name == Routines.Fft:
        return Routine.build(name, [(2, 4), (2, 4)], [dtype, dtype], FftParams.default(4))
    return Routine.build(name, [(3, 3)], [dtype])


def undeclared_kernels(dtype: DType) -> list[tuple[str, Kernel]]:
    """Kernels that touch `dtype` in different places: input, output only, intermediate only, accumulator."""
    other = DType.int32 if dtype != DType.int32 else DType.float32
    return [
        ("copy", map_kernel([dtype], 4, lambda x: x)),
        ("constant", Kernel(0, 4, AluExp.const(dtype, 1))),
        ("cast into it", map_kernel([other], 4, lambda x: AluExp.cast(dtype, x))),
        ("intermediate only", map_kernel([other], 4, lambda x: AluExp.cast(other, AluExp.cast(dtype, x)))),
        ("compare only", map_kernel([dtype, dtype], 4, AluExp.cmplt)),
        ("reduction", reduce_kernel(dtype, AluOp.Max, 2, 3)),
    ]


def _expect_unsupported(backend: Backend, source: Kernel | Routine, label: str, failures: list[str]) -> None:
    """`expect_unsupported`, recording a failure under `label` so one case reports every miss."""
    try:
        expect_unsupported(backend, source)
    except AssertionError as exc:
        failures.append(f"{label}: {exc}")


def _nothing_to_check(what: str) -> None:
    pytest.skip(f"nothing to check: the backend declares {what}")


def test_undeclared_dtypes_raise(backend: Backend) -> None:
    """Every kernel and routine touching an undeclared dtype raises UnsupportedOpError at prepare."""
    caps = backend.capabilities
    missing = [dtype for dtype in DType if dtype not in caps.dtypes]
    if not missing:
        _nothing_to_check("every dtype")
    failures: list[str] = []
    for dtype in missing:
        checked = 0
        for label, kernel in undeclared_kernels(dtype):
            _expect_unsupported(backend, kernel, f"{dtype} ({label})", failures)
            checked += 1
        for name in Routines:
            r = sample_routine(name, dtype)
            if r is not None:
                _expect_unsupported(backend, r, f"{name}<{dtype}>", failures)
        assert checked, f"no kernel was checked for undeclared dtype {dtype}"
    assert not failures, "\n".join(failures)


def test_unsupported_ops_raise(backend: Backend) -> None:
    """Every (op, dtype) in unsupported_ops raises at prepare (for Cmplt/Cmpne the operand dtype);
    a routine of `COMPOSED_ROUTINES` runs as kernels instead."""
    pairs = sorted(backend.capabilities.unsupported_ops, key=str)
    if not pairs:
        _nothing_to_check("no unsupported_ops")
    failures: list[str] = []
    for op, dtype in pairs:
        source: Kernel | Routine | None
        if str(op) in set(Routines):
            if Routines(str(op)) in COMPOSED_ROUTINES:
                continue  # the pair leaves it to the core's kernels, which the routine tests check
            source = sample_routine(Routines(str(op)), DType(dtype))
        else:
            source = minimal_kernel(AluOp(op), DType(dtype))
        if source is None:
            failures.append(f"{op}<{dtype}>: no such kernel or routine exists; the pair declares nothing")
            continue
        _expect_unsupported(backend, source, f"{op}<{dtype}>", failures)
    assert not failures, "\n".join(failures)


def test_undeclared_routines_raise(backend: Backend) -> None:
    """Every routine not in capabilities.routines raises UnsupportedRoutineError at prepare (but
    those the core runs as kernels, `COMPOSED_ROUTINES`: the routine tests hold them to values)."""
    caps = backend.capabilities
    missing = [name for name in Routines if name not in caps.routines and name not in COMPOSED_ROUTINES]
    if not missing:
        _nothing_to_check("every routine")
    failures: list[str] = []
    for name in missing:
        samples = [sample_routine(name, dt) for dt in sorted(caps.dtypes, key=str)]
        routines = [r for r in samples if r is not None]
        if not routines:
            failures.append(f"{name}: no sample in a declared dtype, so nothing was checked")
        for r in routines:
            _expect_unsupported(backend, r, f"{name}<{r.type.input_dtypes[0]}>", failures)
    assert not failures, "\n".join(failures)


def test_declared_capabilities_are_consistent(backend: Backend) -> None:
    """Capabilities are data the suite trusts: known dtypes and routines, sane limits, tolerances
    well formed."""
    caps = backend.capabilities
    assert caps.dtypes and all(isinstance(d, DType) for d in caps.dtypes), caps.dtypes
    assert all(r in set(Routines) for r in caps.routines), caps.routines
    assert isinstance(caps.max_args, int) and caps.max_args >= 1
    assert isinstance(caps.max_buffer_bytes, int) and caps.max_buffer_bytes > 0
    for entry in caps.tolerances:
        op, dtype, rtol, atol = entry
        assert DType(dtype) in caps.dtypes and np.isfinite(rtol) and np.isfinite(atol), entry
        assert 0 <= rtol <= 0.1 and 0 <= atol <= 0.1, f"tolerance {entry} is too loose to mean anything"
    for op, dtype in caps.unsupported_ops:
        assert str(op) in set(AluOp) or str(op) in set(Routines), f"unknown op in unsupported_ops: {op}"
        assert DType(dtype) in caps.dtypes, f"({op}, {dtype}): list undeclared dtypes only in `dtypes`"
