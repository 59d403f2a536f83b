"""Every routine against numpy/scipy: Sort/Argsort, TriangularSolve, Cholesky, LU, JacobiEigh, Fft,
Scatter, Softmax. Outputs start as garbage, so a routine must write every element."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest

from jaxcore.backend import Backend
from jaxcore.conformance import oracle, values
from jaxcore.conformance.harness import (
    assert_close,
    from_buffer,
    garbage,
    run_routine,
    skip_if_undeclared,
    to_buffer,
)
from jaxcore.conformance.tolerances import softmax_tolerance
from jaxcore.dtype import DType
from jaxcore.routine import (
    FftParams,
    Routine,
    Routines,
    ScatterOp,
    ScatterParams,
    SoftmaxParams,
    TriangularSolveParams,
)

DTYPES = [str(d) for d in DType]
FLOATS = list(oracle.FLOATS)


def routine(
    name: Routines, arrays: Sequence[np.ndarray], dtypes: Sequence[str], params: object = None
) -> Routine:
    return Routine.build(name, [a.shape for a in arrays], list(dtypes), params)  # type: ignore[arg-type]


def prepared(backend: Backend, r: Routine) -> Routine:
    skip_if_undeclared(backend, r)
    return r


# ---- Sort / Argsort -------------------------------------------------------------------------


def sort_rows(dtype: str) -> np.ndarray:
    """Three rows of edge values in scrambled orders, with duplicates (stability shows in argsort)."""
    vals = list(values.ARITH[dtype])
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(3):
        row = vals + vals[: len(vals) // 2]
        rows.append([row[i] for i in rng.permutation(len(row))])
    return oracle.array(np.array(rows, dtype=object if dtype in oracle.INTS else float), dtype).reshape(3, -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort(backend: Backend, dtype: str) -> None:
    """Ascending along the last axis, NaN last, uint32 unsigned, bool false first."""
    x = sort_rows(dtype)
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Sort, [x], [dtype])), [x])
    assert_close(got, np.sort(x, axis=-1), "Sort", dtype, backend)


@pytest.mark.parametrize("dtype", DTYPES)
def test_argsort(backend: Backend, dtype: str) -> None:
    """Stable: equal values (and -0 with +0, NaN with NaN) keep their input order; NaN last."""
    x = sort_rows(dtype)
    r = prepared(backend, routine(Routines.Argsort, [x], [dtype]))
    got_vals, got_idx = run_routine(backend, r, [x])
    want_idx = np.argsort(x, axis=-1, kind="stable").astype(np.int32)
    assert_close(got_idx, want_idx, "Argsort", "int32", backend, what="Argsort indices")
    assert_close(
        got_vals, np.take_along_axis(x, want_idx, axis=-1), "Argsort", dtype, backend, what="Argsort values"
    )


def test_argsort_stability_vector(backend: Backend) -> None:
    """jax-js: [3,1,1,NaN,inf,2,NaN,1,0,-0,inf] -> [8,9,1,2,7,5,0,4,10,3,6]."""
    x = np.array([3, 1, 1, np.nan, np.inf, 2, np.nan, 1, 0, -0.0, np.inf], np.float32)
    _, idx = run_routine(backend, prepared(backend, routine(Routines.Argsort, [x], ["float32"])), [x])
    assert idx.tolist() == [8, 9, 1, 2, 7, 5, 0, 4, 10, 3, 6], idx.tolist()


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"<u{a.dtype.itemsize}")


def signed_zero_and_nan_rows(dtype: str) -> np.ndarray:
    """Rows mixing -0.0 and +0.0, NaNs of either sign and several payloads, and ordinary values."""
    st = oracle.storage(dtype)
    width = 8 * st.itemsize
    exp_bits = {16: 0x7C00, 32: 0x7F800000, 64: 0x7FF0000000000000}[width]
    nans = [exp_bits | 1 << (width - 12 if width > 16 else 9), exp_bits | 1, 1 << (width - 1) | exp_bits | 5]
    nan_vals = list(np.array(nans, f"<u{st.itemsize}").view(st))
    base = [-0.0, 0.0, 1.5, -0.0, -2.0, 0.0, np.inf, -np.inf, 0.25, -0.0]
    rows = [base + nan_vals, nan_vals[::-1] + base[::-1], [0.0, -0.0] * 6 + nan_vals[:1]]
    return np.array(rows, dtype=object).astype(st)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sort_keeps_the_bits_of_signed_zeros(backend: Backend, dtype: str) -> None:
    """Sort and Argsort move values, so -0.0 and +0.0 (equal keys) keep their bits, with NaNs of
    any sign last. Argsort is stable: its values are exactly x[stable order]. Sort may order equal
    keys either way, so its run of zeros must hold the input's zeros, sign for sign."""
    x = signed_zero_and_nan_rows(dtype)
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Sort, [x], [dtype])), [x])
    want = np.sort(x, axis=-1)
    assert_close(got, want, "Sort", dtype, backend)
    for r, (g, w, src) in enumerate(zip(got, want, x)):
        have, need = sorted(_bits(g[w == 0]).tolist()), sorted(_bits(src[src == 0]).tolist())
        assert have == need, f"Sort<{dtype}> row {r}: the zeros came out as bits {have}, not {need}"
    vals, idx = run_routine(backend, prepared(backend, routine(Routines.Argsort, [x], [dtype])), [x])
    want_idx = np.argsort(x, axis=-1, kind="stable").astype(np.int32)
    assert_close(idx, want_idx, "Argsort", "int32", backend, what="Argsort indices")
    moved = np.take_along_axis(x, want_idx, axis=-1)
    assert_close(vals, moved, "Argsort", dtype, backend, what="Argsort values")
    bad = np.argwhere((_bits(vals) != _bits(moved)) & ~np.isnan(moved))
    assert bad.size == 0, f"Argsort<{dtype}> values lost their bits at {bad[:6].tolist()}: {vals} != {moved}"


@pytest.mark.parametrize("n", [1, 8191, 8192])
def test_sort_lengths(backend: Backend, n: int) -> None:
    """Lengths that are not (or are) a power of two and exceed one GPU workgroup; reversed input."""
    x = np.arange(n, 0, -1).astype(np.float32)
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Sort, [x], ["float32"])), [x])
    assert_close(got, np.sort(x), "Sort", "float32", backend)
    _, idx = run_routine(backend, prepared(backend, routine(Routines.Argsort, [x], ["float32"])), [x])
    assert_close(idx, np.arange(n - 1, -1, -1, dtype=np.int32), "Argsort", "int32", backend)


def test_sort_long_rows(backend: Backend) -> None:
    """A row past a million keys (where GPUs sort by radix, not by network), with long runs of ties,
    NaN and -0.0: Sort ascending with NaN last, Argsort stable, its values moved bit for bit."""
    rng = np.random.default_rng(11)
    x = (rng.integers(-60, 60, (1 << 20) + 3) / 4).astype(np.float32)
    x[::9] = np.nan
    x[1::10] = -0.0
    x[2::11] = np.inf
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Sort, [x], ["float32"])), [x])
    assert_close(got, np.sort(x), "Sort", "float32", backend)
    vals, idx = run_routine(backend, prepared(backend, routine(Routines.Argsort, [x], ["float32"])), [x])
    want = np.argsort(x, kind="stable").astype(np.int32)
    assert_close(idx, want, "Argsort", "int32", backend, what="Argsort indices")
    assert (_bits(vals) == _bits(x[want])).all(), "Argsort values lost their bits"


def test_sort_zero_size(backend: Backend) -> None:
    """Rows of length 0 keep their shape (Sort and Argsort)."""
    x = np.zeros((3, 0), np.float32)
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Sort, [x], ["float32"])), [x])
    assert got.shape == (3, 0)
    vals, idx = run_routine(backend, prepared(backend, routine(Routines.Argsort, [x], ["float32"])), [x])
    assert vals.shape == idx.shape == (3, 0)


# ---- linear algebra -------------------------------------------------------------------------


def spd(batch: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, size=(batch, n, n))
    return a @ a.transpose(0, 2, 1) + n * np.eye(n)


def lower_only(a: np.ndarray, junk: float = 3e4) -> np.ndarray:
    """`a` with its strict upper triangle replaced by junk that a routine must not read."""
    out = a.copy()
    iu = np.triu_indices(a.shape[-1], 1)
    out[..., iu[0], iu[1]] = junk
    return out


def assert_upper_zero(got: np.ndarray, what: str) -> None:
    iu = np.triu_indices(got.shape[-1], 1)
    upper = got[..., iu[0], iu[1]]
    assert (upper == 0).all(), f"{what}: strict upper triangle must be written as 0, got {upper}"


@pytest.mark.parametrize("dtype", FLOATS)
def test_cholesky_known(backend: Backend, dtype: str) -> None:
    """[[4,2],[2,3]] into a garbage-filled output gives [[2,0],[1,sqrt 2]] (upper written as 0)."""
    a = oracle.array([[4, 2], [2, 3]], dtype).reshape(2, 2)
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Cholesky, [a], [dtype])), [a])
    assert_upper_zero(got, "Cholesky")
    want = oracle.array([[2, 0], [1, np.sqrt(2)]], dtype).reshape(2, 2)
    assert_close(got, want, "Cholesky", dtype, backend)


@pytest.mark.parametrize("dtype", FLOATS)
def test_cholesky_batched_reads_lower_only(backend: Backend, dtype: str) -> None:
    a64 = spd(3, 5, seed=1)
    a = lower_only(a64).astype(oracle.storage(dtype))
    (got,) = run_routine(backend, prepared(backend, routine(Routines.Cholesky, [a], [dtype])), [a])
    assert_upper_zero(got, "Cholesky")
    want = np.linalg.cholesky(a64.astype(oracle.storage(dtype)).astype(np.float64))
    assert_close(got, want.astype(oracle.storage(dtype)), "Cholesky", dtype, backend)


@pytest.mark.parametrize("unit", [False, True], ids=["diag", "unit_diagonal"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_triangular_solve(backend: Backend, dtype: str, unit: bool) -> None:
    """Upper-triangular a [B,n,n], rows of b [B,m,n]: solves a x^T = b^T; the strict lower triangle of a
    (and with unit_diagonal, its diagonal) hold junk that must not be read."""
    from scipy.linalg import solve_triangular

    rng = np.random.default_rng(2)
    n, m, batch = 4, 3, 2
    upper = np.triu(rng.uniform(-1, 1, size=(batch, n, n)), 1) + np.eye(n) * rng.uniform(
        2, 3, size=(batch, 1, n)
    )
    a = upper.copy()
    il = np.tril_indices(n, -1)
    a[..., il[0], il[1]] = 3e4  # junk (finite even in float16)
    if unit:
        a[..., np.arange(n), np.arange(n)] = 1e3
    b = rng.uniform(-2, 2, size=(batch, m, n))
    st = oracle.storage(dtype)
    a_t, b_t = a.astype(st), b.astype(st)
    r = prepared(
        backend, routine(Routines.TriangularSolve, [a_t, b_t], [dtype, dtype], TriangularSolveParams(unit))
    )
    (got,) = run_routine(backend, r, [a_t, b_t])
    ref_a = np.triu(a_t.astype(np.float64), 1) + (np.eye(n) if unit else upper.astype(st) * np.eye(n))
    want = np.stack(
        [
            solve_triangular(ref_a[i], b_t[i].astype(np.float64).T, lower=False, unit_diagonal=unit).T
            for i in range(batch)
        ]
    )
    assert_close(got, want.astype(st), "TriangularSolve", dtype, backend)


_LAYOUTS = [(lo, tr, col) for lo in (False, True) for tr in (False, True) for col in (False, True)][1:]


@pytest.mark.parametrize(
    ("dtype", "lower", "transpose_a", "columns"),
    [("float32", *lay) for lay in _LAYOUTS] + [(d, True, False, True) for d in FLOATS if d != "float32"],
)
def test_triangular_solve_layouts(
    backend: Backend, dtype: str, lower: bool, transpose_a: bool, columns: bool
) -> None:
    """LAPACK trsm's layouts: a lower or upper `a` (the other triangle junk), op(a) = a or aᵀ, the
    right-hand sides as b's rows or columns (a batch of 2, n = 5, m = 3, unit diagonal with a lower a)."""
    from scipy.linalg import solve_triangular

    rng = np.random.default_rng(5)
    n, m, batch, unit = 5, 3, 2, lower and not transpose_a
    tri = np.tril if lower else np.triu
    a = tri(rng.uniform(-1, 1, size=(batch, n, n))) + np.eye(n) * rng.uniform(2, 3, size=(batch, 1, n))
    junk = (np.triu if lower else np.tril)(np.full((n, n), 3e4), 1 if lower else -1)
    a = a + junk + (np.eye(n) * 1e3 if unit else 0)
    b = rng.uniform(-2, 2, size=(batch, n, m) if columns else (batch, m, n))
    st = oracle.storage(dtype)
    a_t, b_t = a.astype(st), b.astype(st)
    params = TriangularSolveParams(unit, lower=lower, transpose_a=transpose_a, columns=columns)
    r = prepared(backend, routine(Routines.TriangularSolve, [a_t, b_t], [dtype, dtype], params))
    (got,) = run_routine(backend, r, [a_t, b_t])
    want = np.stack(
        [
            solve_triangular(
                a_t[i].astype(np.float64),
                b_t[i].astype(np.float64) if columns else b_t[i].astype(np.float64).T,
                trans=int(transpose_a),
                lower=lower,
                unit_diagonal=unit,
            )
            for i in range(batch)
        ]
    )
    want = want if columns else want.swapaxes(-1, -2)
    assert_close(got, want.astype(st), "TriangularSolve", dtype, backend)


def test_routines_read_inputs_through_views(backend: Backend) -> None:
    """A routine input given a view reads what the view reads, from a buffer that holds more: Sort
    of every other element of each row, Cholesky of a transposed matrix (its upper triangle is
    read as the lower), a TriangularSolve whose one right-hand side row is broadcast to three."""
    from jaxcore.shape import ShapeTracker

    rng = np.random.default_rng(9)
    x = rng.normal(size=(4, 10)).astype(np.float32)
    every_other = ShapeTracker.from_shape((4, 10)).reshape((4, 5, 2)).shrink(((0, 4), (0, 5), (0, 1)))
    r = Routine.build(Routines.Sort, [(4, 5)], ["float32"], views=[every_other.reshape((4, 5))])
    (got,) = run_routine(backend, prepared(backend, r), [x])
    np.testing.assert_array_equal(got, np.sort(x[:, ::2], axis=-1))

    spd_t = spd(1, 4, seed=3)[0].astype(np.float32)
    stored = np.triu(spd_t) + np.tril(np.full((4, 4), 3e4, np.float32), -1)  # junk where the view never reads
    r = Routine.build(
        Routines.Cholesky, [(4, 4)], ["float32"], views=[ShapeTracker.from_shape((4, 4)).permute((1, 0))]
    )
    (got,) = run_routine(backend, prepared(backend, r), [stored])
    want = np.linalg.cholesky(spd_t.astype(np.float64)).astype(np.float32)
    assert_close(got, want, "Cholesky", "float32", backend)

    a = (np.triu(rng.uniform(-1, 1, (4, 4))) + 3 * np.eye(4)).astype(np.float32)
    row = rng.uniform(-1, 1, (1, 4)).astype(np.float32)
    wide = ShapeTracker.from_shape((1, 4)).expand((3, 4))
    params = TriangularSolveParams(lower=False, columns=False)
    r = Routine.build(Routines.TriangularSolve, [(4, 4), (3, 4)], ["float32"] * 2, params, views=[None, wide])
    (got,) = run_routine(backend, prepared(backend, r), [a, row])
    want = np.broadcast_to(np.linalg.solve(a.astype(np.float64), row[0].astype(np.float64)), (3, 4))
    assert_close(got, want.astype(np.float32), "TriangularSolve", "float32", backend)


LU_KNOWN = [
    ([[4, 3], [6, 3]], [[6, 3], [2 / 3, 1]], [1, 1], [1, 0]),
    ([[1, 2], [3, 4], [5, 6]], [[5, 6], [0.2, 0.8], [0.6, 0.5]], [2, 2], [2, 0, 1]),
    ([[0, 1], [0, 2]], [[0, 1], [0, 2]], [0, 1], [0, 1]),  # a zero pivot column: no elimination, no NaN
]


@pytest.mark.parametrize("case", range(len(LU_KNOWN)))
@pytest.mark.parametrize("dtype", FLOATS)
def test_lu_known(backend: Backend, dtype: str, case: int) -> None:
    """Pivot convention: first max |value| (strict >), pivots = row swapped at step j, perm with
    eye[perm] A = LU."""
    a_list, lu_list, piv, perm = LU_KNOWN[case]
    a = oracle.array(np.array(a_list, float), dtype).reshape(np.array(a_list).shape)
    lu, pivots, permutation = run_routine(backend, prepared(backend, routine(Routines.LU, [a], [dtype])), [a])
    assert pivots.tolist() == piv and permutation.tolist() == perm, (pivots.tolist(), permutation.tolist())
    want = oracle.array(np.array(lu_list, float), dtype).reshape(a.shape)
    assert_close(lu, want, "LU", dtype, backend)


@pytest.mark.parametrize("shape", [(2, 6, 6), (5, 3), (3, 5)], ids=["6x6x2", "5x3", "3x5"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_lu_reconstructs(backend: Backend, dtype: str, shape: tuple[int, ...]) -> None:
    """P A = L U with P = eye(m)[perm]; |L| <= 1; pivots replay to perm."""
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, size=shape).astype(oracle.storage(dtype))
    lu, pivots, perm = run_routine(backend, prepared(backend, routine(Routines.LU, [a], [dtype])), [a])
    m, n = shape[-2:]
    k = min(m, n)
    a3, lu3 = a.reshape(-1, m, n).astype(np.float64), lu.reshape(-1, m, n).astype(np.float64)
    for b, (pv, pm) in enumerate(zip(pivots.reshape(-1, k), perm.reshape(-1, m))):
        replay = list(range(m))
        for j, p in enumerate(pv):
            replay[j], replay[p] = replay[p], replay[j]
        assert replay == pm.tolist(), f"batch {b}: pivots {pv.tolist()} do not give perm {pm.tolist()}"
        low = np.tril(lu3[b], -1)[:, :k] + np.eye(m, k)
        up = np.triu(lu3[b])[:k, :]
        assert np.all(np.abs(low) <= 1 + 1e-6), "partial pivoting keeps |L| <= 1"
        assert_close(
            (low @ up).astype(a.dtype), a3[b][pm].astype(a.dtype), "LU", dtype, backend, what="P A = L U"
        )


@pytest.mark.parametrize("dtype", FLOATS)
def test_jacobi_eigh_reconstructs(backend: Backend, dtype: str) -> None:
    """Eigenvectors as columns, eigenvalues on the diagonal (unsorted), strict upper exactly 0; only the
    lower triangle of the input is read."""
    rng = np.random.default_rng(6)
    n = 4
    s = rng.uniform(-1, 1, size=(2, n, n))
    sym = ((s + s.transpose(0, 2, 1)) / 2).astype(oracle.storage(dtype))
    a = lower_only(sym.astype(np.float64), junk=100.0).astype(oracle.storage(dtype))
    d, v = run_routine(backend, prepared(backend, routine(Routines.JacobiEigh, [a], [dtype])), [a])
    assert_upper_zero(d, "JacobiEigh diag")
    d64, v64, sym64 = d.astype(np.float64), v.astype(np.float64), sym.astype(np.float64)
    w = np.diagonal(d64, axis1=-2, axis2=-1)
    eye = np.broadcast_to(np.eye(n), v64.shape)
    st = oracle.storage(dtype)
    assert_close(
        np.sort(w, -1).astype(st), np.linalg.eigvalsh(sym64).astype(st), "JacobiEigh", dtype, backend
    )
    assert_close((v64.transpose(0, 2, 1) @ v64).astype(st), eye.astype(st), "JacobiEigh", dtype, backend)
    recon = v64 @ (w[..., :, None] * v64.transpose(0, 2, 1))
    assert_close(recon.astype(st), sym64.astype(st), "JacobiEigh", dtype, backend, what="V diag(w) V^T")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jacobi_eigh_degenerate(backend: Backend, dtype: str) -> None:
    """Repeated and nearly repeated eigenvalues (1, 3, 3 and a 1e-7 split) still give an orthonormal V."""
    st = oracle.storage(dtype)
    a = np.array(
        [
            [[2, 1, 0, 0], [1, 2, 0, 0], [0, 0, 3, 0], [0, 0, 0, 3]],
            [[1, 1e-7, 0, 0], [1e-7, 1, 0, 0], [0, 0, 5, 2], [0, 0, 2, 5]],
        ],
        np.float64,
    ).astype(st)
    d, v = run_routine(backend, prepared(backend, routine(Routines.JacobiEigh, [a], [dtype])), [a])
    v64, w = v.astype(np.float64), np.diagonal(d.astype(np.float64), axis1=-2, axis2=-1)
    eye = np.broadcast_to(np.eye(4), v64.shape).astype(st)
    assert_close((v64.transpose(0, 2, 1) @ v64).astype(st), eye, "JacobiEigh", dtype, backend, what="V^T V")
    recon = (v64 @ (w[..., :, None] * v64.transpose(0, 2, 1))).astype(st)
    assert_close(recon, a, "JacobiEigh", dtype, backend, what="V diag(w) V^T")


@pytest.mark.parametrize("dtype", FLOATS)
def test_jacobi_eigh_diagonal_input(backend: Backend, dtype: str) -> None:
    """An already diagonal matrix is left unchanged and V = I exactly (no rotation when a_pq == 0)."""
    a = oracle.array(np.diag([3.0, 1.0, 2.0]), dtype).reshape(3, 3)
    d, v = run_routine(backend, prepared(backend, routine(Routines.JacobiEigh, [a], [dtype])), [a])
    assert_close(d, a, "Const", dtype, backend)
    assert_close(v, np.eye(3).astype(a.dtype), "Const", dtype, backend)


FFT_CASES = [(1, None), (4, None), (5, None), (6, None), (8, None), (12, (3, 4)), (12, (2, 2, 3)), (7, (7,))]


@pytest.mark.parametrize("inverse", [False, True], ids=["fft", "ifft"])
@pytest.mark.parametrize(("n", "factors"), FFT_CASES, ids=[f"n{n}-{f}" for n, f in FFT_CASES])
@pytest.mark.parametrize("dtype", FLOATS)
def test_fft(backend: Backend, dtype: str, n: int, factors: tuple[int, ...] | None, inverse: bool) -> None:
    """Along the last axis of a batch; any factor order; the inverse includes 1/n (numpy's fft/ifft)."""
    rng = np.random.default_rng(n)
    scale = 1.0 if dtype == "float16" else 3.0
    st = oracle.storage(dtype)
    re = (rng.uniform(-scale, scale, size=(3, n))).astype(st)
    im = (rng.uniform(-scale, scale, size=(3, n))).astype(st)
    params = FftParams(factors, inverse) if factors is not None else FftParams.default(n, inverse)
    r = prepared(backend, routine(Routines.Fft, [re, im], [dtype, dtype], params))
    got_re, got_im = run_routine(backend, r, [re, im])
    z = re.astype(np.float64) + 1j * im.astype(np.float64)
    want = np.fft.ifft(z, axis=-1) if inverse else np.fft.fft(z, axis=-1)
    assert_close(got_re, want.real.astype(st), "Fft", dtype, backend, what="Fft real")
    assert_close(got_im, want.imag.astype(st), "Fft", dtype, backend, what="Fft imag")


# ---- Scatter --------------------------------------------------------------------------------


def scatter_oracle(
    updates: np.ndarray, indices: Sequence[np.ndarray], p: ScatterParams, dtype: str
) -> np.ndarray:
    """Zero-fill, then place every update element (row-major); out-of-range coordinates drop the update."""
    shape = tuple(p.shape)
    free_axes = [a for a in range(len(shape)) if a not in p.axis]
    rank = updates.ndim - len(free_axes)
    accumulate = str(p.op) == "add" and not p.unique_indices
    out: dict[tuple[int, ...], int | float] = {}
    for pos in itertools.product(*(range(d) for d in updates.shape)):
        window = pos[p.out_dim : p.out_dim + rank]
        free = iter(pos[: p.out_dim] + pos[p.out_dim + rank :])
        coord = [0] * len(shape)
        for a in free_axes:
            coord[a] = next(free)
        for arr, a in zip(indices, p.axis):
            w = window[rank - arr.ndim :]
            coord[a] = int(arr[tuple(0 if d == 1 else i for d, i in zip(arr.shape, w))])
        if any(not 0 <= c < s for c, s in zip(coord, shape)):
            continue
        key, v = tuple(coord), updates[pos]
        if accumulate and key in out:
            out[key] = oracle.binary("Add", np.array([out[key]]), np.array([v]), dtype)[0]
        else:
            out[key] = v
    full = np.zeros(shape, oracle.storage(dtype))
    for key, v in out.items():
        full[key] = v
    return full


def run_scatter(
    backend: Backend, dtype: str, updates: np.ndarray, indices: Sequence[np.ndarray], p: ScatterParams
) -> np.ndarray:
    idx_dtypes = ["uint32" if i.dtype == np.uint32 else "int32" for i in indices]
    r = prepared(backend, routine(Routines.Scatter, [updates, *indices], [dtype, *idx_dtypes], p))
    (got,) = run_routine(backend, r, [updates, *indices])
    return got


def test_scatter_clears_destination_and_reuses_executable(backend: Backend) -> None:
    """Update [7] at [1] into 9s -> [0,7,0,0]; the same executable, same output, index [2] -> [0,0,7,0]."""
    p = ScatterParams("update", (4,), (0,), 0, True)
    r = prepared(backend, Routine.build(Routines.Scatter, [(1,), (1,)], ["float32", "int32"], p))
    exe = backend.prepare_routine(r)
    upd = backend.malloc(4, to_buffer(np.array([7], np.float32)))
    out = backend.malloc(16, to_buffer(np.full(4, 9, np.float32)))
    slots = [upd, out]
    try:
        for index, want in ((1, [0, 7, 0, 0]), (2, [0, 0, 7, 0])):
            idx = backend.malloc(4, to_buffer(np.array([index], np.int32)))
            slots.append(idx)
            backend.dispatch(exe, [upd, idx], [out])
            assert from_buffer(backend.read(out), "float32").tolist() == want
        empty = prepared(backend, Routine.build(Routines.Scatter, [(0,), (0,)], ["float32", "int32"], p))
        e_upd, e_idx = backend.malloc(0), backend.malloc(0)
        slots += [e_upd, e_idx]
        backend.dispatch(backend.prepare_routine(empty), [e_upd, e_idx], [out])
        assert from_buffer(backend.read(out), "float32").tolist() == [0, 0, 0, 0]
    finally:
        for s in slots:
            backend.dec_ref(s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_add_repeated_indices(backend: Backend, dtype: str) -> None:
    """Repeated indices accumulate ([1,2,3] at [1,1,3] -> [0,3,0,3]); bool accumulates with OR."""
    updates = oracle.array([0, 1, 1] if dtype == "bool" else [1, 2, 3], dtype)
    idx = np.array([1, 1, 3], np.int32)
    p = ScatterParams("add", (4,), (0,), 0)
    got = run_scatter(backend, dtype, updates, [idx], p)
    want = oracle.array([0, 1, 0, 1] if dtype == "bool" else [0, 3, 0, 3], dtype)
    assert_close(got, want, "Scatter", dtype, backend)
    assert_close(
        got, scatter_oracle(updates, [idx], p, dtype), "Scatter", dtype, backend, what="Scatter oracle"
    )


def test_scatter_float16_adjacent_slots(backend: Backend) -> None:
    """f16 [1,2,3,4] added at [0,1,0,1] -> [4,6]: neighbouring half-words must not clobber each other."""
    got = run_scatter(
        backend,
        "float16",
        np.array([1, 2, 3, 4], np.float16),
        [np.array([0, 1, 0, 1], np.int32)],
        ScatterParams("add", (2,), (0,), 0),
    )
    assert got.tolist() == [4, 6]


def test_scatter_add_float32_small_and_subnormal_updates(backend: Backend) -> None:
    """Float32 adds exact on subnormals whatever the order: subnormal updates sum exactly, a tiny
    normal minus a subnormal lands below the normal range, large updates beside them stay exact."""
    tiny = [2.0**-140, 2.0**-140, 2.0**-141, 2.0**-126, -(2.0**-140), 2.0**-102, 3 * 2.0**-103]
    big = [1.5, 2.25, -0.5, 2.0**-90, 2.0**100, float("inf")]
    updates = np.array([*tiny, *big, 2.0**-130, 8.0], np.float32)
    idx = np.array([0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 6, 6], np.int32)
    want = np.array(
        [2.5 * 2.0**-140, 2.0**-126 - 2.0**-140, 2.5 * 2.0**-102, 3.25, 2.0**-90 + 2.0**100, np.inf, 8.0],
        np.float32,
    )
    got = run_scatter(backend, "float32", updates, [idx], ScatterParams("add", (7,), (0,), 0))
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (got, want)


@pytest.mark.parametrize("op", ["update", "add"])
def test_scatter_out_of_range_dropped(backend: Backend, op: str) -> None:
    """Negative and too-large indices (int32 and uint32) drop their update; unique add assigns."""
    updates = np.array([1, 2, 3, 4, 5, 6], np.float32)
    for idx in (
        np.array([-1, 4, 100, 2, -2147483648, 0], np.int32),
        np.array([4294967295, 4, 1, 2, 3, 2147483648], np.uint32),
    ):
        p = ScatterParams(ScatterOp(op), (4,), (0,), 0)
        got = run_scatter(backend, "float32", updates, [idx], p)
        assert_close(
            got, scatter_oracle(updates, [idx], p, "float32"), "Scatter", "float32", backend, inputs=[]
        )


def test_scatter_multi_axis(backend: Backend) -> None:
    """jax-js array test 2: out[idx1[j], i, idx0[j]] = upd[i, j] with axis (2, 0), out_dim 1."""
    updates = np.array([[10, 20], [30, 40], [50, 60]], np.float32)
    idx = [np.array([1, 3], np.int32), np.array([0, 1], np.int32)]
    p = ScatterParams("update", (2, 3, 4), (2, 0), 1, True)
    got = run_scatter(backend, "float32", updates, idx, p)
    want = np.array(
        [[[0, 10, 0, 0], [0, 30, 0, 0], [0, 50, 0, 0]], [[0, 0, 0, 20], [0, 0, 0, 40], [0, 0, 0, 60]]],
        np.float32,
    )
    assert_close(got, want, "Scatter", "float32", backend)
    assert_close(got, scatter_oracle(updates, idx, p, "float32"), "Scatter", "float32", backend)


BROADCAST_WANT = {
    "add": [[1, 5, 0, 0], [0, 0, 0, 0], [4, 11, 0, 0]],
    "update": [[1, 3, 0, 0], [0, 0, 0, 0], [4, 6, 0, 0]],
}


@pytest.mark.parametrize("op", ["add", "update"])
def test_scatter_broadcast_indices(backend: Backend, op: str) -> None:
    """jax-js array test 6: index arrays [[0],[2]] and [[0,1,1]] broadcast to [2,3] into a [3,4] output;
    add accumulates, update keeps the last write in row-major order."""
    updates = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    idx = [np.array([[0], [2]], np.int32), np.array([[0, 1, 1]], np.int32)]
    p = ScatterParams(ScatterOp(op), (3, 4), (0, 1), 0)
    got = run_scatter(backend, "float32", updates, idx, p)
    assert_close(got, np.array(BROADCAST_WANT[op], np.float32), "Scatter", "float32", backend)
    assert_close(
        got, scatter_oracle(updates, idx, p, "float32"), "Scatter", "float32", backend, what="oracle"
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_random_against_oracle(backend: Backend, dtype: str) -> None:
    """A [4,5] output, rows indexed by a repeated, partly out-of-range index array, add and update."""
    rng = np.random.default_rng(9)
    idx = np.array([0, 3, 3, -1, 2, 7, 0], np.int32)
    updates = oracle.array(rng.integers(0, 2 if dtype == "bool" else 9, size=(7, 5)), dtype).reshape(7, 5)
    for op, unique in (("add", False), ("update", False)):
        p = ScatterParams(ScatterOp(op), (4, 5), (0,), 0, unique)
        got = run_scatter(backend, dtype, updates, [idx], p)
        assert_close(
            got, scatter_oracle(updates, [idx], p, dtype), "Scatter", dtype, backend, what=f"Scatter {op}"
        )


def test_garbage_helper_is_not_zero() -> None:
    """The garbage prefill really differs from zeros (else 'writes every element' would prove nothing)."""
    assert np.frombuffer(garbage(4), np.float32)[0] != 0


# ---- Softmax --------------------------------------------------------------------------------


def softmax_oracle(x: np.ndarray, log: bool) -> np.ndarray:
    """Softmax over the last axis in float64 (NaN where a row holds NaN or +inf, or only -inf)."""
    w = x.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        d = w - w.max(axis=-1, keepdims=True)
        s = np.exp(d).sum(axis=-1, keepdims=True)
        return d - np.log(s) if log else np.exp(d) / s


SOFTMAX_SHAPES = [(3, 1), (4, 7), (2, 3, 33), (3, 96), (5, 256), (2, 4096), (2, 4100), (1, 8192)]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=["x".join(map(str, s)) for s in SOFTMAX_SHAPES])
@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax(backend: Backend, dtype: str, shape: tuple[int, ...], log: bool) -> None:
    """Over the last axis, rows of one to 8,192 (past one GPU workgroup's stride, and not a multiple
    of four), batch axes flattened; log-softmax with `log`."""
    st = oracle.storage(dtype)
    x = (np.random.default_rng(len(shape) * 7919 + shape[-1]).normal(0, 3, shape)).astype(st)
    r = prepared(backend, routine(Routines.Softmax, [x], [dtype], SoftmaxParams(log)))
    (got,) = run_routine(backend, r, [x])
    tol = softmax_tolerance(dtype, shape[-1], log, backend)
    want = softmax_oracle(x, log).astype(st)
    assert_close(got, want, "Softmax", dtype, backend, tol=tol, what=f"log={log}")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_special_rows(backend: Backend, dtype: str, log: bool) -> None:
    """A NaN or +inf makes its row NaN; -inf entries give exact zeros (-inf for log), a row of only
    -inf is NaN; equal entries give exactly 1/n; values far below the max underflow to exact zeros;
    huge magnitudes do not overflow (the max is subtracted first)."""
    st = oracle.storage(dtype)
    inf, nan = np.inf, np.nan
    big = 6e4 if dtype == "float16" else 1e30
    x = np.array(
        [
            [nan, 1.0, 2.0, 0.0, -1.0, 3.0, 0.5, 2.0],
            [inf, 1.0, 2.0, 0.0, -1.0, 3.0, 0.5, 2.0],
            [-inf, 0.0, -inf, 1.0, -inf, -inf, -inf, -inf],
            [-inf] * 8,
            [2.5] * 8,
            [0.0, -big, -big, -big, -big, -big, -big, -big],
            [big, -big, big, -big, big, -big, big, -big],
        ],
        st,
    )
    r = prepared(backend, routine(Routines.Softmax, [x], [dtype], SoftmaxParams(log)))
    (got,) = run_routine(backend, r, [x])
    want = softmax_oracle(x, log).astype(st)
    tol = softmax_tolerance(dtype, x.shape[-1], log, backend)
    assert_close(got, want, "Softmax", dtype, backend, tol=tol, what=f"log={log}")
    assert np.isnan(got[:2]).all() and np.isnan(got[3]).all(), got[:4]
    if not log:
        assert (got[2][[0, 2, 4, 5, 6, 7]] == 0).all() and (got[4] == 0.125).all(), (got[2], got[4])
        assert (got[5] == np.array([1] + [0] * 7, st)).all(), got[5]
        assert (got[6] == np.array([0.25, 0] * 4, st)).all(), got[6]
    else:
        assert (got[2][[0, 2, 4, 5, 6, 7]] == -inf).all() and got[4][0] == want[4][0], (got[2], got[4])


def test_softmax_reads_its_input_through_a_view(backend: Backend) -> None:
    """A transposed operand: the softmax of each column of the buffer, read in place."""
    from jaxcore.shape import ShapeTracker

    base = np.random.default_rng(5).normal(0, 2, (9, 6)).astype(np.float32)
    view = ShapeTracker.from_shape(base.shape).permute((1, 0))
    r = prepared(backend, Routine.build(Routines.Softmax, [(6, 9)], ["float32"], views=[view]))
    (got,) = run_routine(backend, r, [base])
    tol = softmax_tolerance("float32", 9, False, backend)
    assert_close(
        got, softmax_oracle(base.T, False).astype(np.float32), "Softmax", "float32", backend, tol=tol
    )


@pytest.mark.parametrize("shape", [(3, 0), (0, 5)], ids=["3x0", "0x5"])
def test_softmax_zero_size(backend: Backend, shape: tuple[int, ...]) -> None:
    """Rows of length 0, or no rows: an empty result, and nothing to run."""
    x = np.zeros(shape, np.float32)
    r = prepared(backend, routine(Routines.Softmax, [x], ["float32"]))
    (got,) = run_routine(backend, r, [x])
    assert got.shape == shape
