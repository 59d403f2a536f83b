"""Reference implementations of every routine over numpy arrays (the cpu backend and host fallbacks).

Each routine works on the whole batch at once: the Python loops run over a matrix dimension (or, for
Jacobi, over rotation pairs), never over batch entries or elements. Arithmetic is native in the dtype,
except float16, which computes in float32 and rounds on store. Every output element is written, since
output buffers start with garbage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxcore.dtype import DType, is_float, to_numpy
from jaxcore.routine import (
    FftParams,
    JacobiEighParams,
    Routine,
    Routines,
    ScatterParams,
    SoftmaxParams,
    TriangularSolveParams,
)

_Runner = Callable[[Routine, list[np.ndarray], list[np.ndarray]], None]


def run_routine(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """Run `routine` on arrays shaped and typed as its RoutineType says, writing into `outputs`."""
    _check_arrays(routine, inputs, outputs)
    with np.errstate(all="ignore"):
        _RUNNERS[routine.name](routine, inputs, outputs)


def run_routine_on_buffers(routine: Routine, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    """`run_routine` on raw little-endian buffers (bytearray, memoryview: what a host-memory
    backend holds), each viewed as the routine's type says: the routine fallback of any device
    whose buffers the host can see."""
    t = routine.type

    def views(
        bufs: Sequence[Any], dtypes: Sequence[DType], shapes: Sequence[tuple[int, ...]]
    ) -> list[np.ndarray]:
        return [
            np.frombuffer(b, dtype=to_numpy(d)).reshape(s)
            for b, d, s in zip(bufs, dtypes, shapes, strict=True)
        ]

    run_routine(
        routine,
        views(inputs, t.input_dtypes, t.input_shapes),
        views(outputs, t.output_dtypes, t.output_shapes),
    )


def _check_arrays(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    t = routine.type
    for kind, arrays, shapes, dtypes in (
        ("input", inputs, t.input_shapes, t.input_dtypes),
        ("output", outputs, t.output_shapes, t.output_dtypes),
    ):
        if len(arrays) != len(shapes):
            raise ValueError(
                f"run_routine({routine.name}): expected {len(shapes)} {kind}s, got {len(arrays)}"
            )
        for i, (arr, shape, dtype) in enumerate(zip(arrays, shapes, dtypes)):
            if arr.shape != shape or arr.dtype != to_numpy(dtype):
                raise ValueError(
                    f"run_routine({routine.name}): {kind} {i} is {arr.dtype}{list(arr.shape)}, "
                    f"expected {to_numpy(dtype)}{list(shape)} (for {dtype})"
                )


def _batch(x: np.ndarray, core_dims: int) -> int:
    """Number of matrices/rows in x (explicit, since reshape(-1, ...) fails on empty arrays)."""
    return math.prod(x.shape[:-core_dims])


def _work_dtype(dtype: DType) -> np.dtype:
    """float16 math runs in float32 (numpy's linalg has no float16); everything else is native."""
    return np.dtype(np.float32) if dtype == DType.float16 else to_numpy(dtype)


# --------------------------------------------------------------------------------------------
# Sort / Argsort


def _sort(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    (x,), (y,) = inputs, outputs
    y[...] = x
    y.sort(axis=-1)
    if is_float(routine.type.input_dtypes[0]):
        _negative_zeros_first(y, x)


def _negative_zeros_first(y: np.ndarray, x: np.ndarray) -> None:
    """Within each sorted row's run of zeros put -0 before +0, as the typed-array sort does.

    The count of -0 comes from the input: numpy's SIMD sort uses min/max and may swap zero signs.
    A few long rows find their run of zeros by bisection, so data without zeros costs no pass.
    """
    n = y.shape[-1]
    if y.size == 0:
        return
    rows_y, rows_x = y.reshape(-1, n), x.reshape(-1, n)
    if len(rows_y) <= 16 and np.may_share_memory(rows_y, y):  # a view: writes to the rows reach y
        zero = y.dtype.type(0)  # of the array's own dtype: a Python 0 would make numpy convert the row
        for ry, rx in zip(rows_y, rows_x):
            lo, hi = np.searchsorted(ry, zero, "left"), np.searchsorted(ry, zero, "right")
            if hi > lo:
                neg = int(np.count_nonzero(np.signbit(rx[rx == 0])))
                ry[lo : lo + neg] = -0.0
                ry[lo + neg : hi] = 0.0
        return
    zero = y == 0
    if not zero.any():
        return
    count = ((x == 0) & np.signbit(x)).sum(axis=-1, keepdims=True)
    if not count.any():  # only +0 in the input, and a sort cannot create -0
        return
    first = zero.argmax(axis=-1, keepdims=True)
    rank = np.arange(y.shape[-1]) - first
    y[zero] = np.where(rank < count, -0.0, 0.0).astype(y.dtype)[zero]


def _argsort(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    (x,), (values, indices) = inputs, outputs
    order = _stable_argsort(x, routine.type.input_dtypes[0])
    indices[...] = order
    values[...] = np.take_along_axis(x, order, axis=-1)


def _stable_argsort(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Stable ascending order along the last axis: NaNs last and tied, -0 ties with +0.

    32-bit (and narrower) values are mapped to order-preserving uint32 keys and packed with their
    index into uint64, so one plain (unstable, SIMD) sort gives the stable order about twice as fast
    as numpy's stable argsort. float64 has no room for the index and uses the stable argsort directly.
    """
    n = x.shape[-1]
    if dtype == DType.float64 or n == 0:
        return np.argsort(x, axis=-1, kind="stable").astype(np.int32, copy=False)
    packed = _sort_key32(x, dtype).astype(np.uint64)
    packed <<= np.uint64(32)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort(axis=-1)
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.int32)


def _sort_key32(x: np.ndarray, dtype: DType) -> np.ndarray:
    """uint32 keys whose unsigned order is the value order (floats: -0 == +0, every NaN largest)."""
    if dtype == DType.uint32:
        return x
    if not is_float(dtype):  # int32 and bool (int32 0/1): flip the sign bit
        return np.ascontiguousarray(x).view(np.uint32) ^ np.uint32(0x80000000)
    f = np.add(x, np.float32(0), dtype=np.float32)  # -0 + 0 = +0; float16 widens exactly
    bits = f.view(np.uint32)
    key = np.where(bits >= np.uint32(0x80000000), ~bits, bits | np.uint32(0x80000000))
    key[np.isnan(f)] = np.uint32(0xFFFFFFFF)
    return key


# --------------------------------------------------------------------------------------------
# Linear algebra


def _triangular_solve(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """Substitution, one unknown per step, for every matrix and right-hand side at once: backward
    through an upper op(a), forward through a lower one."""
    (a, b), (x,) = inputs, outputs
    params = routine.params
    assert isinstance(params, TriangularSolveParams)
    wd = _work_dtype(routine.type.input_dtypes[1])
    n = a.shape[-1]
    a = a.astype(wd, copy=False)
    a = a.swapaxes(-1, -2) if params.transpose_a else a
    upper = params.lower == params.transpose_a  # op(a)'s triangle
    xt = np.array(b if params.columns else b.swapaxes(-1, -2), dtype=wd, order="C")  # row i: unknown i
    for i in range(n - 1, -1, -1) if upper else range(n):
        done = slice(i + 1, n) if upper else slice(0, i)
        if done.start < done.stop:
            xt[..., i, :] -= np.matmul(a[..., i : i + 1, done], xt[..., done, :])[..., 0, :]
        if not params.unit_diagonal:
            xt[..., i, :] /= a[..., i, i, None]
    x[...] = xt if params.columns else xt.swapaxes(-1, -2)


def _cholesky(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """LAPACK for the batch when every matrix is positive definite, else our own column algorithm.

    numpy reads only the lower triangle and zeroes the upper one, which is our contract; it raises
    for any non-PD matrix, where the contract wants the NaNs of Cholesky–Banachiewicz instead.
    """
    (a,), (out,) = inputs, outputs
    a = a.astype(_work_dtype(routine.type.input_dtypes[0]), copy=False)
    try:
        lower = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        lower = _cholesky_columns(a)
    out[...] = lower


def _cholesky_columns(a: np.ndarray) -> np.ndarray:
    """L[i,j] = (a[i,j] - L[i,:j]·L[j,:j]) / L[j,j] and L[j,j] = sqrt(...), a column per step.

    The same formulas as the row-by-row Banachiewicz order, so a failing pivot gives NaN exactly where
    it would: on that diagonal, below it, and in the later columns of those rows.
    """
    n = a.shape[-1]
    lower = np.zeros_like(a)
    for j in range(n):
        col = a[..., j:, j] - np.matmul(lower[..., j:, :j], lower[..., j, :j, None])[..., 0]
        pivot = np.sqrt(col[..., 0])
        lower[..., j, j] = pivot
        lower[..., j + 1 :, j] = col[..., 1:] / pivot[..., None]
    return lower


def _lu(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """Gaussian elimination with partial pivoting, one column per step over the whole batch."""
    (a,), (lu_out, pivots_out, perm_out) = inputs, outputs
    m, n = a.shape[-2:]
    k = min(m, n)
    lu = np.array(a, dtype=_work_dtype(routine.type.input_dtypes[0])).reshape(_batch(a, 2), m, n)
    batch = lu.shape[0]
    perm = np.tile(np.arange(m, dtype=np.int32), (batch, 1))
    pivots = np.empty((batch, k), dtype=np.int32)
    for j in range(k):
        p = _pivot_rows(lu[:, j:, j]) + j
        pivots[:, j] = p
        swap = np.flatnonzero(p != j)
        if swap.size:
            rows = p[swap]
            # Advanced indexing copies both sides before either assignment.
            lu[swap, j], lu[swap, rows] = lu[swap, rows], lu[swap, j]
            perm[swap, j], perm[swap, rows] = perm[swap, rows], perm[swap, j]
        _eliminate(lu, j)
    lu_out[...] = lu.reshape(lu_out.shape)
    pivots_out[...] = pivots.reshape(pivots_out.shape)
    perm_out[...] = perm.reshape(perm_out.shape)


def _pivot_rows(column: np.ndarray) -> np.ndarray:
    """Offset of the first max |.| per row of `column`, NaN never beating the current row (strict >)."""
    magnitude = np.abs(column)
    nan = np.isnan(magnitude)
    if not nan.any():
        return magnitude.argmax(axis=-1)
    magnitude[nan] = -1.0
    return np.where(nan[:, 0], 0, magnitude.argmax(axis=-1))


def _eliminate(lu: np.ndarray, j: int) -> None:
    """Store the multipliers below pivot j and update the trailing block; a zero pivot skips both."""
    if j + 1 >= lu.shape[1]:
        return
    diag = lu[:, j, j]
    below = lu[:, j + 1 :, j]
    trailing = lu[:, j + 1 :, j + 1 :]
    ok = diag != 0
    if ok.all():
        below /= diag[:, None]
        trailing -= below[:, :, None] * lu[:, j, None, j + 1 :]
        return
    np.divide(below, diag[:, None], out=below, where=ok[:, None])
    update = below[:, :, None] * lu[:, j, None, j + 1 :]
    np.subtract(trailing, update, out=trailing, where=ok[:, None, None])


def _jacobi_eigh(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """Cyclic Jacobi on the symmetric matrix given by the lower triangle, a sweep over all pairs at a time.

    Each matrix stops when its off-diagonal max is within tolerance·max(1, max|A|) (NaN never
    converges and never starts), so batched results equal per-matrix runs.
    """
    (x,), (diag_out, vecs_out) = inputs, outputs
    params = routine.params
    assert isinstance(params, JacobiEighParams)
    n = x.shape[-1]
    lower = np.tril(x.astype(_work_dtype(routine.type.input_dtypes[0]))).reshape(_batch(x, 2), n, n)
    a = lower + np.tril(lower, -1).swapaxes(-1, -2)  # full symmetric storage; A[p,q] == A[q,p] always
    v = np.tile(np.eye(n, dtype=a.dtype), (a.shape[0], 1, 1))
    if n >= 2:
        largest = np.abs(lower).max(axis=(-2, -1)).astype(np.float64)
        threshold = params.tolerance * np.maximum(1.0, largest)
        active = _max_off_diagonal(a) > threshold
        for _ in range(params.max_sweeps):
            live = np.flatnonzero(active)
            if live.size == 0:
                break
            a_live, v_live = a[live], v[live]
            for p in range(n - 1):
                for q in range(p + 1, n):
                    _rotate(a_live, v_live, p, q)
            a[live], v[live] = a_live, v_live
            active[live] = _max_off_diagonal(a_live) > threshold[live]
    diag_out[...] = np.tril(a).reshape(diag_out.shape)
    vecs_out[...] = v.reshape(vecs_out.shape)


def _max_off_diagonal(a: np.ndarray) -> np.ndarray:
    return np.abs(np.tril(a, -1)).max(axis=(-2, -1))


def _rotate(a: np.ndarray, v: np.ndarray, p: int, q: int) -> None:
    """Zero A[p,q] in every matrix of the batch with one Jacobi rotation (skipped where A[p,q] == 0).

    The coefficients are computed in float64 (as the reference does); a lone matrix uses Python floats,
    which round exactly like the vectorised path but skip a dozen tiny numpy calls per rotation.
    """
    if a.shape[0] == 1:
        x_pq, x_pp, x_qq = float(a[0, q, p]), float(a[0, p, p]), float(a[0, q, q])
        if x_pq == 0:
            return
        c1, s1 = _rotation(x_pp, x_qq, x_pq)
        pp1 = c1 * c1 * x_pp - 2.0 * s1 * c1 * x_pq + s1 * s1 * x_qq
        qq1 = s1 * s1 * x_pp + 2.0 * s1 * c1 * x_pq + c1 * c1 * x_qq
        _apply_rotation(a, v, p, q, c1, s1, pp1, qq1)
        return
    apq = a[:, q, p].astype(np.float64)
    skip = apq == 0
    if skip.all():
        return
    app = a[:, p, p].astype(np.float64)
    aqq = a[:, q, q].astype(np.float64)
    c, s = _rotation(app, aqq, np.where(skip, 1.0, apq))
    if skip.any():
        c[skip], s[skip] = 1.0, 0.0
    new_pp = np.where(skip, app, c * c * app - 2.0 * s * c * apq + s * s * aqq)
    new_qq = np.where(skip, aqq, s * s * app + 2.0 * s * c * apq + c * c * aqq)
    _apply_rotation(a, v, p, q, c.astype(a.dtype)[:, None], s.astype(a.dtype)[:, None], new_pp, new_qq)


def _rotation(app: Any, aqq: Any, apq: Any) -> tuple[Any, Any]:
    """(c, s) of the rotation that zeroes apq: the smaller root t of t² + 2τt − 1 = 0, sgn(0) = +1."""
    tau = (aqq - app) / (2.0 * apq)
    sign = np.where(tau >= 0, 1.0, -1.0) if isinstance(tau, np.ndarray) else (1.0 if tau >= 0 else -1.0)
    t = sign / (abs(tau) + _sqrt(tau * tau + 1.0))
    c = 1.0 / _sqrt(t * t + 1.0)
    return c, t * c


def _sqrt(x: Any) -> Any:
    return np.sqrt(x) if isinstance(x, np.ndarray) else math.sqrt(x)


def _apply_rotation(
    a: np.ndarray, v: np.ndarray, p: int, q: int, c: Any, s: Any, new_pp: Any, new_qq: Any
) -> None:
    """Rotate rows/columns p and q of the symmetric A and columns p and q of V."""
    row_p, row_q = a[:, p, :], a[:, q, :]
    new_p = c * row_p - s * row_q
    new_q = s * row_p + c * row_q
    a[:, p, :] = new_p
    a[:, :, p] = new_p
    a[:, q, :] = new_q
    a[:, :, q] = new_q
    a[:, p, p] = new_pp
    a[:, q, q] = new_qq
    a[:, p, q] = 0
    a[:, q, p] = 0
    col_p, col_q = v[:, :, p], v[:, :, q]
    v[:, :, p], v[:, :, q] = c * col_p - s * col_q, s * col_p + c * col_q


# --------------------------------------------------------------------------------------------
# Fft and Scatter


def _fft(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """pocketfft gives the same DFT as any factor order of the mixed-radix algorithm (factors are free)."""
    (real, imag), (out_real, out_imag) = inputs, outputs
    params = routine.params
    assert isinstance(params, FftParams)
    complex_dtype = np.complex128 if routine.type.input_dtypes[0] == DType.float64 else np.complex64
    z = np.empty(real.shape, dtype=complex_dtype)
    z.real, z.imag = real, imag
    y = np.fft.ifft(z, axis=-1) if params.inverse else np.fft.fft(z, axis=-1)
    out_real[...] = y.real
    out_imag[...] = y.imag


def _scatter(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    updates, *indices = inputs
    (out,) = outputs
    params = routine.params
    assert isinstance(params, ScatterParams)
    targets, valid = _scatter_targets(params, updates.shape, indices)
    values = updates.reshape(-1)
    if not valid.all():
        targets, values = targets[valid], values[valid]
    flat = np.zeros(out.size, dtype=out.dtype)
    is_bool = routine.type.output_dtypes[0] == DType.bool
    if params.accumulate and is_bool:
        flat[targets[values != 0]] = 1  # |= over 0/1 values
    elif params.accumulate:
        np.add.at(flat, targets, values)
    elif params.unique_indices:
        flat[targets] = values
    else:
        _assign_last_wins(flat, targets, values)
    out[...] = flat.reshape(out.shape)


def _assign_last_wins(flat: np.ndarray, targets: np.ndarray, values: np.ndarray) -> None:
    """flat[targets] = values where a repeated target keeps the last value (numpy leaves that unspecified)."""
    last = np.full(flat.size, -1, dtype=np.intp)
    np.maximum.at(last, targets, np.arange(targets.size, dtype=np.intp))
    hit = np.flatnonzero(last >= 0)
    flat[hit] = values[last[hit]]


def _scatter_targets(
    params: ScatterParams, updates_shape: tuple[int, ...], indices: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Flat output offset and in-range flag of every update element (row-major, raveled)."""
    rank = len(updates_shape)
    free_axes = [a for a in range(len(params.shape)) if a not in params.axis]
    index_rank = rank - len(free_axes)
    window_end = params.out_dim + index_rank
    strides = _row_major_strides(params.shape)
    offset = np.zeros((1,) * rank, dtype=np.int64)
    valid = np.ones((1,) * rank, dtype=bool)
    free_dims = [d for d in range(rank) if not params.out_dim <= d < window_end]
    for axis, dim in zip(free_axes, free_dims):
        coord_shape = [1] * rank
        coord_shape[dim] = updates_shape[dim]
        offset = offset + np.arange(updates_shape[dim], dtype=np.int64).reshape(coord_shape) * strides[axis]
    for axis, index in zip(params.axis, indices):
        lead = window_end - index.ndim
        coord = index.astype(np.int64).reshape((1,) * lead + index.shape + (1,) * (rank - window_end))
        valid = valid & (coord >= 0) & (coord < params.shape[axis])
        offset = offset + coord * strides[axis]
    offset = np.broadcast_to(offset, updates_shape).reshape(-1)
    valid = np.broadcast_to(valid, updates_shape).reshape(-1)
    return offset, valid


def _row_major_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _softmax(routine: Routine, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """The row max, `exp(x - max)`, its sum, then `exp(x - max) * (1 / sum)` (log: `(x - max) -
    log(sum)`), each op in the work dtype (float16 in float32, rounded once at the end): the
    kernels `jaxcore.canonical.softmax_kernels` spells, up to the order of the sum."""
    (x,), (y,) = inputs, outputs
    params = routine.params
    assert isinstance(params, SoftmaxParams)
    if y.size == 0:
        return
    w = x.astype(_work_dtype(routine.type.input_dtypes[0]), copy=False)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = w - w.max(axis=-1, keepdims=True)  # numpy's max propagates NaN
        e = np.exp(d)
        s = e.sum(axis=-1, keepdims=True, dtype=w.dtype)
        y[...] = d - np.log(s) if params.log else e * (np.ones_like(s) / s)


_RUNNERS: dict[Routines, _Runner] = {
    Routines.Sort: _sort,
    Routines.Argsort: _argsort,
    Routines.Scatter: _scatter,
    Routines.TriangularSolve: _triangular_solve,
    Routines.Cholesky: _cholesky,
    Routines.LU: _lu,
    Routines.JacobiEigh: _jacobi_eigh,
    Routines.Fft: _fft,
    Routines.Softmax: _softmax,
}

__all__ = ["run_routine"]
