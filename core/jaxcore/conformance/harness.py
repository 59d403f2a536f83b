"""Helpers for conformance cases, usable by third parties in their own backend tests.

Everything goes through the public `Backend` protocol (malloc, prepare, dispatch, read, dec_ref)
so the helpers work for any backend, subclass of `BaseBackend` or not. Nothing here names a device:
what a backend can do is read from `backend.capabilities`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend, UnsupportedOpError, UnsupportedRoutineError
from jaxcore.conformance import oracle
from jaxcore.conformance.tolerances import SIGN_AGNOSTIC, lookup
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine

# What the suite imports besides jaxcore and numpy (module -> requirement); the `conformance` extra
# of core/pyproject.toml installs exactly these.
REQUIREMENTS = {"pytest": "pytest>=8", "scipy": "scipy>=1.11", "hypothesis": "hypothesis>=6.100"}
INSTALL_HINT = "pip install 'jaxcore[conformance]'"


def missing_requirements() -> list[str]:
    """The suite's own dependencies that cannot be imported here: a run stops and names them, rather
    than reporting the cases that import them (TriangularSolve's oracle is scipy's) as the device's
    failures."""
    return [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]


def requirements_message(missing: Sequence[str]) -> str:
    return (
        f"the jaxcore conformance suite needs {', '.join(missing)}, which "
        f"{'is' if len(missing) == 1 else 'are'} not installed here: {INSTALL_HINT}"
    )


def default_reference() -> tuple[str, str] | None:
    """The device differential checks trust, and why it was chosen: `jaxcore.reference_backend()`
    if the registry has one, else the device whose capabilities say `reference=True` (searched from
    the lowest priority up), else the lowest-priority ready device; None when nothing is ready."""
    import jaxcore

    fn = getattr(jaxcore, "reference_backend", None)
    if callable(fn):
        return fn().name, "jaxcore.reference_backend()"
    lowest_first = list(reversed(jaxcore.device_info()))
    for info in lowest_first:
        if info.status == "not-initialised":
            jaxcore.init([info.name])
            info = jaxcore.device_info(info.name)
        if info.status == "ready" and getattr(info.capabilities, "reference", False):
            return info.name, "capabilities.reference=True"
    ready = [i.name for i in lowest_first if jaxcore.device_info(i.name).status == "ready"]
    return (ready[0], "lowest-priority ready device") if ready else None


# The reason prefix of a case skipped because the backend declared it cannot run it (after the
# suite checked that it indeed raises at prepare time); the summary table counts these apart.
UNSUPPORTED = "unsupported-declared"

# Output buffers start out as this byte pattern so a device that skips elements is caught
# (float32 1.5e16, int32 1515870810, float16 203.25): malloc contents are unspecified.
GARBAGE_BYTE = 0x5A


def to_buffer(a: np.ndarray) -> bytes:
    """The bytes a buffer holds for array `a`: little-endian, bool as int32 0/1."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        a = a.astype(np.int32)
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False)).tobytes()


def from_buffer(raw: bytes, dtype: DType | str, shape: Sequence[int] | None = None) -> np.ndarray:
    """An array over the bytes of a `dtype` buffer (bool comes back as its int32 0/1 storage)."""
    arr = np.frombuffer(raw, dtype=oracle.storage(str(DType(dtype)))).copy()
    return arr.reshape(tuple(shape)) if shape is not None else arr


def garbage(nbytes: int) -> bytes:
    return bytes([GARBAGE_BYTE]) * nbytes


# The kernel or routine the running case last handed to a helper, and its inputs: a failure report
# leads with the first, and `assert_close` lists the second beside mismatches when not given any.
_last_source: list[Kernel | Routine] = []
_last_inputs: list[np.ndarray] = []


def note_source(source: Kernel | Routine, inputs: Sequence[np.ndarray] = ()) -> None:
    """Remember `source` (and its inputs) as what the running case computes."""
    _last_source[:] = [source]
    _last_inputs[:] = [np.asarray(a) for a in inputs]


def last_source() -> Kernel | Routine | None:
    return _last_source[0] if _last_source else None


def forget_source() -> None:
    _last_source.clear()
    _last_inputs.clear()


def _upload(backend: Backend, arrays: Sequence[np.ndarray], slots: list[int]) -> list[int]:
    out = []
    for a in arrays:
        raw = to_buffer(a)
        slot = backend.malloc(len(raw), raw)
        slots.append(slot)
        out.append(slot)
    return out


def run_kernel(
    backend: Backend, kernel: Kernel, inputs: Sequence[np.ndarray], *, prefill: bool = True
) -> np.ndarray:
    """Prepare and dispatch `kernel` on `inputs`, return the output as a flat storage-typed array.

    Buffers are malloc'd with their initial data (the output with garbage unless `prefill=False`)
    and released with dec_ref whatever happens, so a failing case leaks nothing.
    """
    note_source(kernel, inputs)
    exe = backend.prepare_kernel(kernel)
    slots: list[int] = []
    try:
        in_slots = _upload(backend, inputs, slots)
        out = backend.malloc(kernel.bytes, garbage(kernel.bytes) if prefill else None)
        slots.append(out)
        backend.dispatch(exe, in_slots, [out])
        raw = backend.read(out)
    finally:
        for s in slots:
            backend.dec_ref(s)
    return from_buffer(raw, kernel.dtype)


def run_routine(
    backend: Backend, routine: Routine, inputs: Sequence[np.ndarray], *, prefill: bool = True
) -> list[np.ndarray]:
    """Prepare and dispatch `routine`; outputs come back shaped and storage-typed per its type.

    Outputs start as garbage (unless `prefill=False`): routines must write every element.
    """
    note_source(routine, inputs)
    exe = backend.prepare_routine(routine)
    t = routine.type
    slots: list[int] = []
    try:
        in_slots = _upload(backend, inputs, slots)
        out_slots = []
        for shape, dt in zip(t.output_shapes, t.output_dtypes):
            n = int(np.prod(shape, dtype=np.int64)) * oracle.storage(str(dt)).itemsize
            slot = backend.malloc(n, garbage(n) if prefill else None)
            slots.append(slot)
            out_slots.append(slot)
        backend.dispatch(exe, in_slots, out_slots)
        raws = [backend.read(s) for s in out_slots]
    finally:
        for s in slots:
            backend.dec_ref(s)
    return [from_buffer(r, dt, shape) for r, shape, dt in zip(raws, t.output_shapes, t.output_dtypes)]


def tolerance(op: AluOp | str, dtype: DType | str, backend: Backend | None = None) -> tuple[float, float]:
    """(rtol, atol) from the suite's table (`tolerances.py`), loosened by the backend's declaration."""
    return lookup(str(op), dtype, backend)


def _fmt(v: Any, dtype: str) -> str:
    if oracle.is_float(dtype):
        f = float(v)
        bits = np.asarray(v, oracle.storage(dtype)).view(f"<u{oracle.storage(dtype).itemsize}")
        return f"{f!r} (0x{int(bits):0{2 * oracle.storage(dtype).itemsize}x})"
    return str(int(v))


def assert_close(
    actual: np.ndarray,
    expected: np.ndarray,
    op: AluOp | str,
    dtype: DType | str,
    backend: Backend | None = None,
    *,
    inputs: Sequence[np.ndarray] = (),
    signed_zero: bool | None = None,
    tol: tuple[float, float] | None = None,
    what: str = "",
) -> None:
    """Compare per the contract: ints and bools exactly, floats within `tolerance(op, dtype)`.

    NaN must meet NaN and ±Inf the same Inf. Where the tolerance is exact, the sign of a zero must
    match too (`signed_zero=None` decides by op; Min/Max/Sort leave it open). `tol` overrides the
    table for one comparison (differential tests compare two approximations). Mismatches are listed
    with their inputs (by default those of the last `run_kernel`/`run_routine`, where they have the
    output's size) so the failure report is a reproducible bug report.
    """
    if not inputs:
        inputs = list(_last_inputs)
    dtype = str(DType(dtype))
    op = str(op)
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what or op}: shape {actual.shape}, expected {expected.shape}"
    if not oracle.is_float(dtype):
        a, e = actual.astype(np.int64), expected.astype(np.int64)
        bad = a != e
        tol_text = "exact"
    else:
        rtol, atol = tol if tol is not None else tolerance(op, dtype, backend)
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        nan_a, nan_e = np.isnan(a), np.isnan(e)
        inf = (np.isinf(a) | np.isinf(e)) & ~nan_a & ~nan_e
        finite = ~(nan_a | nan_e | inf)
        with np.errstate(all="ignore"):
            far = ~(np.abs(a - e) <= atol + rtol * np.abs(e))
        bad = (nan_a != nan_e) | (inf & (a != e)) | (finite & far)
        if signed_zero is None:
            signed_zero = rtol == 0 and atol == 0 and op not in SIGN_AGNOSTIC
        if signed_zero:
            bad |= (a == 0) & (e == 0) & (np.signbit(a) != np.signbit(e))
        tol_text = f"rtol={rtol:g}, atol={atol:g}" + (", signed zeros" if signed_zero else "")
    if not bad.any():
        return
    idx = np.argwhere(bad)
    same = [np.asarray(x).reshape(actual.shape) for x in inputs if np.asarray(x).size == actual.size]
    lines = []
    for pos in idx[:12]:
        p = tuple(int(i) for i in pos)
        ins = ", ".join(_fmt(x[p], _dt_name(x)) for x in same)
        arg = f" inputs=({ins})" if same else ""
        lines.append(
            f"  at {list(p)}:{arg} expected {_fmt(expected[p], dtype)}, got {_fmt(actual[p], dtype)}"
        )
    device = getattr(backend, "name", "?")
    head = f"{what or op}<{dtype}> on {device}: {len(idx)} of {bad.size} elements differ ({tol_text})"
    raise AssertionError("\n".join([head, *lines, *(["  ..."] if len(idx) > 12 else [])]))


def _dt_name(x: np.ndarray) -> str:
    kind = np.asarray(x).dtype
    for name, st in oracle.STORAGE.items():
        if st == kind.newbyteorder("<") and name != "bool":
            return name
    return "int32"


# ---- declared capabilities -----------------------------------------------------------------


def undeclared(backend: Backend, source: Kernel | Routine) -> str | None:
    """Why `backend` declares it cannot run `source`, or None if its capabilities cover it.

    The rule is `Capabilities.undeclared`, the same one `BaseBackend` applies at prepare time:
    comparisons by their operands' dtype, index arithmetic (int32 on every device) exempt, a
    routine by its name and its input and output dtypes.
    """
    gap = backend.capabilities.undeclared(source)
    return None if gap is None else gap.reason


def expect_unsupported(backend: Backend, source: Kernel | Routine) -> Exception:
    """Assert that preparing `source` raises UnsupportedOpError/UnsupportedRoutineError naming this device.

    The contract: a backend that cannot do something says so at prepare time, never with a wrong
    answer later.
    """
    note_source(source)
    is_kernel = isinstance(source, Kernel)
    errors: tuple[type[Exception], ...] = (
        (UnsupportedOpError,) if is_kernel else (UnsupportedOpError, UnsupportedRoutineError)
    )
    try:
        exe = (
            backend.prepare_kernel(source) if isinstance(source, Kernel) else backend.prepare_routine(source)
        )
    except errors as exc:
        device = getattr(exc, "device", None)
        assert device == backend.name, f"{type(exc).__name__} names device {device!r}, not {backend.name!r}"
        return exc
    why = undeclared(backend, source) or "declared unsupported"
    raise AssertionError(
        f"{backend.name} declares it cannot run this ({why}),"
        f" but prepare returned {type(exe).__name__} instead of raising "
        f"{' or '.join(e.__name__ for e in errors)}:\n{source}"
    )


def skip_if_undeclared(backend: Backend, source: Kernel | Routine) -> None:
    """For a case the backend declares it cannot run: check it raises at prepare, then skip the case."""
    note_source(source)
    why = undeclared(backend, source)
    if why is None:
        return
    expect_unsupported(backend, source)
    pytest.skip(f"{UNSUPPORTED}: {why}")


# ---- building kernels -----------------------------------------------------------------------


def load(dtype: DType | str, gid: int, length: int, index: AluExp | None = None) -> AluExp:
    """Read element `index` (default: the output index gidx) of input `gid`, `length` elements long."""
    return AluExp.global_index(DType(dtype), gid, length, AluVar.gidx if index is None else index)


def map_kernel(dtypes: Sequence[DType | str], size: int, fn: Callable[..., AluExp]) -> Kernel:
    """An elementwise kernel: `fn` applied to one element of each input (all `size` long)."""
    args = [load(dt, i, size) for i, dt in enumerate(dtypes)]
    return Kernel(len(args), size, fn(*args))


def reduce_kernel(
    dtype: DType | str,
    op: AluOp,
    rows: int,
    cols: int,
    epilogue: Callable[[AluExp], AluExp] | None = None,
    extra_inputs: Sequence[DType | str] = (),
) -> Kernel:
    """Reduce each row of a `rows x cols` input (gid 0) with `op`; `epilogue(acc)` may read
    `gidx` and the extra inputs (gids 1.., each `rows` long, via `load(dt, gid, rows)`)."""
    dtype = DType(dtype)
    item = load(dtype, 0, rows * cols, AluVar.gidx * cols + AluVar.ridx)
    epi = epilogue(AluVar.acc(dtype)) if epilogue is not None else None
    return Kernel(1 + len(extra_inputs), rows, item, Reduction(dtype, op, cols, epi))


UNARY_BUILDERS: dict[AluOp, Callable[[AluExp], AluExp]] = {
    AluOp.Sin: AluExp.sin,
    AluOp.Cos: AluExp.cos,
    AluOp.Asin: AluExp.asin,
    AluOp.Atan: AluExp.atan,
    AluOp.Exp: AluExp.exp,
    AluOp.Log: AluExp.log,
    AluOp.Erf: AluExp.erf,
    AluOp.Erfc: AluExp.erfc,
    AluOp.Sqrt: AluExp.sqrt,
    AluOp.Floor: AluExp.floor,
    AluOp.Ceil: AluExp.ceil,
    AluOp.Reciprocal: AluExp.reciprocal,
}
BINARY_BUILDERS: dict[AluOp, Callable[[AluExp, AluExp], AluExp]] = {
    AluOp.Add: AluExp.add,
    AluOp.Sub: AluExp.sub,
    AluOp.Mul: AluExp.mul,
    AluOp.Idiv: AluExp.idiv,
    AluOp.Mod: AluExp.mod,
    AluOp.Min: AluExp.min,
    AluOp.Max: AluExp.max,
}


def minimal_kernel(op: AluOp, dtype: DType) -> Kernel | None:
    """The smallest kernel with an `op` node of `dtype` (for Cmplt/Cmpne: operands of `dtype`),
    or None when no such node can exist (e.g. Sin on int32)."""
    op, dtype = AluOp(op), DType(dtype)
    n = 4
    if op in BINARY_BUILDERS:
        return map_kernel([dtype, dtype], n, BINARY_BUILDERS[op])
    if op == AluOp.Div:
        return map_kernel([dtype, dtype], n, AluExp.div) if oracle.is_float(str(dtype)) else None
    if op in UNARY_BUILDERS:
        if not oracle.is_float(str(dtype)):
            return None
        return map_kernel([dtype], n, UNARY_BUILDERS[op])
    if op in (AluOp.Cmplt, AluOp.Cmpne):
        fn = AluExp.cmplt if op == AluOp.Cmplt else AluExp.cmpne
        return map_kernel([dtype, dtype], n, fn)
    if op == AluOp.BitCombine:
        return None if oracle.is_float(str(dtype)) else map_kernel([dtype, dtype], n, AluExp.bit_xor)
    if op == AluOp.BitShift:
        ok = dtype in (DType.int32, DType.uint32)
        return map_kernel([dtype, dtype], n, AluExp.shl) if ok else None
    if op == AluOp.Where:
        return map_kernel([DType.bool, dtype, dtype], n, AluExp.where)
    if op == AluOp.Cast:
        cast_src = DType.int32 if dtype != DType.int32 else DType.float32
        return map_kernel([cast_src], n, lambda x: AluExp.cast(dtype, x))
    if op == AluOp.Bitcast:
        partner = {DType.float32: DType.int32, DType.int32: DType.float32, DType.uint32: DType.float32}
        src = partner.get(dtype)
        return None if src is None else map_kernel([src], n, lambda x: AluExp.bitcast(dtype, x))
    if op == AluOp.Threefry2x32:
        if dtype != DType.uint32:
            return None
        return map_kernel([DType.uint32] * 4, n, AluExp.threefry2x32)
    if op == AluOp.Const:
        return Kernel(0, n, AluExp.const(dtype, 1))
    if op in (AluOp.GlobalIndex, AluOp.GlobalView, AluOp.Variable, AluOp.Special):
        return map_kernel([dtype], n, lambda x: x)
    return None
