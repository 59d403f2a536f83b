"""The WGSL routines beyond the conformance suite's sizes: multi-stage sorts, wide matrices, long FFTs,
collision-heavy scatters; every output starts as garbage (0xFF bytes: NaN for floats)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcore.host_routines import run_routine
from jaxcore.routine import FftParams, Routine, Routines, ScatterParams, TriangularSolveParams

RNG = np.random.default_rng(7)
NP = {
    "float32": np.float32,
    "float16": np.float16,
    "float64": np.float64,
    "int32": np.int32,
    "uint32": np.uint32,
}


def run(be, name, arrays, dtypes, params=None):
    r = Routine.build(name, [a.shape for a in arrays], dtypes, params)
    exe = be.prepare_routine(r)
    ins = [be.malloc(a.nbytes, np.ascontiguousarray(a).tobytes()) for a in arrays]
    outs = []
    for shape, dt in zip(r.type.output_shapes, r.type.output_dtypes):
        n = int(np.prod(shape)) * np.dtype(NP.get(str(dt), np.int32)).itemsize
        outs.append(be.malloc(n, b"\xff" * n))
    be.dispatch(exe, ins, outs)
    res = [
        np.frombuffer(be.read(o), NP.get(str(dt), np.int32)).reshape(shape).copy()
        for o, shape, dt in zip(outs, r.type.output_shapes, r.type.output_dtypes)
    ]
    for s in (*ins, *outs):
        be.dec_ref(s)
    return res


@pytest.mark.parametrize("shape", [(3, 1500), (2, 2048), (1, 9000), (5, 7), (1, 513), (4, 1)])
def test_sort_multi_stage_with_nans(gpu, shape):
    """Lengths past one workgroup block (global stages), padding, NaN last, -0 before +0."""
    x = RNG.normal(0, 10, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::17] = np.nan
    flat[3::29] = -0.0
    flat[5::31] = np.inf
    (got,) = run(gpu, Routines.Sort, [x], ["float32"])
    want = np.sort(x, axis=-1)
    np.testing.assert_array_equal(got, want)
    zeros = got == 0
    for row in range(shape[0]):
        z = got[row][zeros[row]]
        assert not any(np.signbit(z[i]) and not np.signbit(z[i - 1]) for i in range(1, len(z))), (
            "-0 before +0"
        )


@pytest.mark.parametrize("dtype", ["int32", "uint32", "float16"])
def test_sort_other_dtypes(gpu, dtype):
    if dtype == "float16" and "float16" not in {str(d) for d in gpu.capabilities.dtypes}:
        pytest.skip("no shader-f16")
    info = np.iinfo(NP[dtype]) if dtype != "float16" else None
    if info is not None:
        x = RNG.integers(info.min, info.max, (2, 1100), dtype=np.int64).astype(NP[dtype])
    else:
        x = RNG.normal(0, 100, (2, 1100)).astype(np.float16)
    (got,) = run(gpu, Routines.Sort, [x], [dtype])
    np.testing.assert_array_equal(got, np.sort(x, axis=-1))


def _assert_stable_argsort(x: np.ndarray, vals: np.ndarray, idx: np.ndarray) -> None:
    """Argsort's indices are numpy's stable ones along the last axis, its values the input at them,
    bit for bit."""
    want = np.argsort(x, axis=-1, kind="stable").astype(np.int32)
    np.testing.assert_array_equal(idx, want)
    bits = np.dtype(f"u{x.dtype.itemsize}")
    np.testing.assert_array_equal(vals.view(bits), np.take_along_axis(x, want, -1).view(bits))


def test_argsort_stable_with_many_ties(gpu):
    x = RNG.integers(0, 5, (3, 3000)).astype(np.float32)
    x[:, ::7] = np.nan
    x[:, 1::11] = -0.0
    vals, idx = run(gpu, Routines.Argsort, [x], ["float32"])
    _assert_stable_argsort(x, vals, idx)


# from a CPU adapter's radix length up, and past a GPU's (1M): several blocks, partial last ones, rows
RADIX_SHAPES = [(1, 8192), (2, 8193), (3, 20000), (1, (1 << 17) + 5), (4, 2048 * 5 + 2047), (2, 600001)]
RADIX_SHAPES.append((1, (1 << 20) + 3))


def _radix_values(dtype: str, shape: tuple[int, int]) -> np.ndarray:
    """Few distinct values (long runs of ties) with the extremes of the dtype's key order, and
    NaNs of several payloads."""
    if dtype in ("float32", "float16"):
        x = RNG.integers(-40, 40, shape).astype(np.float32) / 4
        flat = x.reshape(-1)
        flat[::7] = np.nan
        flat[1::11] = -0.0
        flat[2::13] = np.inf
        flat[3::17] = -np.inf
        tiny = np.finfo(NP[dtype]).smallest_subnormal
        flat[5::31], flat[6::37] = np.finfo(NP[dtype]).max, -tiny  # the largest and a subnormal
        x = x.astype(NP[dtype])
        # NaNs of other signs and payloads (a float32 signalling one too): moved bit for bit
        pay = [0xFFC00001, 0x7FC12345, 0x7F800001] if dtype == "float32" else [0xFE01, 0x7E55, 0x7C01]
        bits = x.reshape(-1).view(np.uint32 if dtype == "float32" else np.uint16)
        for i, p in enumerate(pay):
            bits[4 + i :: 29 + 2 * i] = p
        return x
    info = np.iinfo(NP[dtype])
    x = RNG.integers(-3, 4, shape).astype(np.int64) * (info.max // 4) + RNG.integers(0, 3, shape)
    x = np.clip(x, info.min, info.max)
    x.reshape(-1)[::19] = info.max
    x.reshape(-1)[1::23] = info.min
    return x.astype(NP[dtype])


@pytest.fixture(params=["split", "match"])
def radix_path(request, gpu, retarget):
    """The radix sort's blocks sorted by counting splits, or by subgroup match where the adapter's
    subgroups have 8 lanes or more, whichever the adapter would take by itself."""
    from jaxcore_webgpu.device import subgroup_lanes

    match = request.param == "match"
    lanes = subgroup_lanes(gpu.gpu.device) if gpu.target.has_subgroups else 0
    if match and lanes < 8:
        pytest.skip(f"subgroups of 8 lanes or more needed (this adapter's: {lanes})")
    retarget(radix_match=match, subgroup_size=lanes)
    return request.param


@pytest.mark.parametrize("shape", RADIX_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "float16"])
def test_radix_argsort_is_stable(gpu, radix_path, dtype, shape):
    """Rows from the radix sort's length up (several blocks, a partial last one, rows of a batch):
    stable ties, -0 tied with +0, NaN last and in input order, values bit for bit."""
    if not 0 < gpu.target.radix_sort_from <= shape[-1]:
        pytest.skip("this adapter sorts rows of this length by the bitonic network")
    if dtype == "float16" and "float16" not in {str(d) for d in gpu.capabilities.dtypes}:
        pytest.skip("no shader-f16")
    x = _radix_values(dtype, shape)
    vals, idx = run(gpu, Routines.Argsort, [x], [dtype])
    _assert_stable_argsort(x, vals, idx)


@pytest.mark.parametrize("shape", RADIX_SHAPES[:3])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "float16"])
def test_radix_sort(gpu, radix_path, dtype, shape):
    """Sort on the radix path: NaN last, -0 before +0 (Sort's keys keep them apart)."""
    if dtype == "float16" and "float16" not in {str(d) for d in gpu.capabilities.dtypes}:
        pytest.skip("no shader-f16")
    x = _radix_values(dtype, shape)
    (got,) = run(gpu, Routines.Sort, [x], [dtype])
    np.testing.assert_array_equal(got, np.sort(x, axis=-1))
    if dtype in ("float32", "float16"):
        for row in got:
            z = np.signbit(row[row == 0])
            assert not (z[1:] & ~z[:-1]).any(), "-0 before +0"


@pytest.mark.parametrize("keys", [8, 16])
def test_radix_keys_per_thread(gpu, retarget, keys):
    """A radix block's threads hold 8 keys (16 KB of workgroup storage) or 16 (32 KB: a CPU
    adapter's choice), and a browser's 16 KB gets 8 whatever the device asked for. Either sorts
    stably, several blocks and rows at once."""
    from jaxcore_webgpu.export import _workgroup_bytes
    from jaxcore_webgpu.routines import plan_routine

    storage = 2 * 4 * 256 * keys
    if storage > gpu.target.max_workgroup_storage:
        pytest.skip(f"the adapter has {gpu.target.max_workgroup_storage} bytes of workgroup storage")
    target = retarget(radix_keys_per_thread=keys, radix_sort_from=4096, radix_match=False)
    x = _radix_values("float32", (3, 3 * 4096 + 5))
    r = Routine.build(Routines.Argsort, [x.shape], ["float32"])

    def most(t):
        return max(_workgroup_bytes(p.code) for p in plan_routine(r, t).passes)

    assert (most(target), most(target.browser())) == (storage, 16384)
    vals, idx = run(gpu, Routines.Argsort, [x], ["float32"])
    _assert_stable_argsort(x, vals, idx)


@pytest.mark.parametrize("tiles", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_radix_tiles_per_block(gpu, retarget, tiles, dtype):
    """A workgroup of the counting splits' passes takes several consecutive blocks (counts per
    workgroup in H, each digit's place in the row carried from block to block): stable, with rows
    whose blocks do not divide evenly among the workgroups, a partial last block, and a row of
    fewer blocks than a workgroup takes."""
    from jaxcore_webgpu.routines import plan_routine

    target = retarget(
        radix_sort_from=2048, radix_match=False, radix_keys_per_thread=8, radix_tiles_per_block=tiles
    )
    for shape in [(3, 5 * 2048 + 77), (2, 2048 * tiles + 1), (1, 3000), (2, 7 * 2048)]:
        x = _radix_values(dtype, shape)
        r = Routine.build(Routines.Argsort, [x.shape], [dtype])
        plan = plan_routine(r, target)
        wpr = math.ceil(math.ceil(shape[1] / 2048) / tiles)  # workgroups a row (blocks of 2048 keys)
        assert plan.scratch[-2] == max(16, shape[0] * 256 * wpr * 4)  # H: a count per digit and workgroup
        vals, idx = run(gpu, Routines.Argsort, [x], [dtype])
        _assert_stable_argsort(x, vals, idx)
        (got,) = run(gpu, Routines.Sort, [x], [dtype])
        np.testing.assert_array_equal(got, np.sort(x, axis=-1))


def test_scatter_add_collisions_float32_and_float16(gpu):
    n_up, size = 20000, 37
    idx = RNG.integers(-3, size + 3, n_up).astype(np.int32)
    for dt in ("float32", "float16"):
        if dt == "float16" and "float16" not in {str(d) for d in gpu.capabilities.dtypes}:
            continue
        upd = RNG.integers(-3, 4, n_up).astype(NP[dt])  # small integers: exact in any order
        (got,) = run(gpu, Routines.Scatter, [upd, idx], [dt, "int32"], ScatterParams("add", (size,), (0,), 0))
        want = np.zeros(size, np.float64)
        ok = (idx >= 0) & (idx < size)
        np.add.at(want, idx[ok], upd[ok].astype(np.float64))
        np.testing.assert_array_equal(got.astype(np.float64), want)


def test_scatter_add_float32_atomics_and_small_updates_collide(gpu):
    """Even slots take small integers (the float atomics where the device has them), odd slots
    integer multiples of 2^-140 (the flagged compare-and-swap pass): both exact in any order."""
    n_up, size = 30000, 41
    idx = RNG.integers(0, size, n_up).astype(np.int32)
    upd = RNG.integers(-3, 4, n_up).astype(np.float64)
    upd[idx % 2 == 1] *= 2.0**-140
    (got,) = run(gpu, Routines.Scatter, [upd.astype(np.float32), idx], ["float32", "int32"],
                 ScatterParams("add", (size,), (0,), 0))  # fmt: skip
    want = np.zeros(size, np.float64)
    np.add.at(want, idx, upd)
    np.testing.assert_array_equal(got.astype(np.float64), want)


def test_scatter_add_float32_atomics_stay_native():
    """The float atomics where the target has them; a browser's plan (no such feature) goes
    without, and flushing targets add the small updates with the exact helper."""
    from jaxcore_webgpu.codegen import WgslTarget
    from jaxcore_webgpu.routines import plan_routine

    r = Routine.build(
        Routines.Scatter, [(8,), (8,)], ["float32", "int32"], ScatterParams("add", (4,), (0,), 0)
    )
    native = plan_routine(r, WgslTarget(has_f32_atomics=True, exact_subnormals=True)).passes
    browser = plan_routine(r, WgslTarget(exact_subnormals=True)).passes
    assert [("atomic<f32>" in p.code, "jc_add_f32(" in p.code) for p in native] == [
        (False, False), (True, False), (False, True)
    ]  # fmt: skip
    assert not any("atomic<f32>" in p.code for p in browser) and "jc_add_f32(" in browser[-1].code


def test_scatter_add_browser_plan_has_no_float_atomics(gpu):
    r = Routine.build(
        Routines.Scatter, [(8,), (8,)], ["float32", "int32"], ScatterParams("add", (4,), (0,), 0)
    )
    plan = gpu.browser_plan(gpu.prepare_routine(r))
    assert plan is not None and not any("atomic<f32>" in p.code for p in plan.passes)


def test_scatter_update_last_wins_2d(gpu):
    upd = RNG.normal(0, 1, (500, 6)).astype(np.float32)
    idx = RNG.integers(0, 9, 500).astype(np.int32)
    (got,) = run(
        gpu, Routines.Scatter, [upd, idx], ["float32", "int32"], ScatterParams("update", (9, 6), (0,), 0)
    )
    want = np.zeros((9, 6), np.float32)
    for i, r in enumerate(idx):
        want[r] = upd[i]
    np.testing.assert_array_equal(got, want)


@pytest.fixture(params=["lookahead", "diagonal-passes"])
def cholesky_path(request, retarget):
    """The blocked Cholesky with each diagonal block factored by the update before it, or by a
    pass of its own, whichever the adapter would take by itself."""
    retarget(cholesky_lookahead=request.param == "lookahead")
    return request.param


def test_cholesky_wider_than_a_workgroup(gpu, cholesky_path):
    n = 300
    m = RNG.uniform(-1, 1, (2, n, n))
    a = (m @ m.transpose(0, 2, 1) + n * np.eye(n)).astype(np.float32)
    (got,) = run(gpu, Routines.Cholesky, [a], ["float32"])
    np.testing.assert_allclose(got, np.linalg.cholesky(a.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_cholesky_not_positive_definite_gives_nan(gpu):
    a = np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)
    (got,) = run(gpu, Routines.Cholesky, [a], ["float32"])
    assert got[0, 0] == 1 and got[1, 0] == 2 and np.isnan(got[1, 1]) and got[0, 1] == 0


def _spd(batch, n, dtype):
    """Positive definite matrices, with garbage above the diagonal (which Cholesky never reads)."""
    m = RNG.uniform(-1, 1, (batch, n, n))
    a = np.tril(m @ m.transpose(0, 2, 1) + n * np.eye(n))
    return (a + np.triu(RNG.uniform(-9, 9, (batch, n, n)), 1)).astype(dtype)


def _host_cholesky(a, dtype):
    """The host reference (the cpu plugin's Cholesky): LAPACK, or the column algorithm if not PD."""
    r = Routine.build(Routines.Cholesky, [a.shape], [dtype])
    out = np.empty(a.shape, NP[dtype])
    run_routine(r, [a], [out])
    return out


@pytest.mark.parametrize("batch,n", [(1, 33), (2, 64), (3, 100), (2, 129), (1, 200)])
def test_cholesky_blocked_matches_numpy(gpu, cholesky_path, batch, n):
    """Past one 32-column block: a partial last block and partial trailing tiles unless n % 32 == 0."""
    a = _spd(batch, n, np.float32)
    (got,) = run(gpu, Routines.Cholesky, [a], ["float32"])
    lower = np.tril(a.astype(np.float64))
    want = np.linalg.cholesky(lower + np.tril(lower, -1).transpose(0, 2, 1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (np.triu(got, 1) == 0).all()


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_cholesky_blocked_float16_float64(gpu, cholesky_path, dtype):
    """float16 works in float32 and rounds on store, as the host does; float64 stays float64."""
    if dtype not in {str(d) for d in gpu.capabilities.dtypes}:
        pytest.skip(f"no {dtype} on this adapter")
    a = _spd(2, 100, NP[dtype])
    (got,) = run(gpu, Routines.Cholesky, [a], [dtype])
    want = _host_cholesky(a, dtype)
    tol = 2e-3 if dtype == "float16" else 1e-12
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert (np.triu(got, 1) == 0).all()


def test_cholesky_blocked_not_positive_definite_nan_pattern(gpu, cholesky_path):
    """NaN where the host's column algorithm puts it: a negative pivot in a later block (NaN from
    it on), a NaN below the diagonal (its row, then everything from its row's pivot on), a zero
    pivot (0 on the diagonal, 0/0 below it)."""
    n = 150
    a = _spd(3, n, np.float32)
    a[0, 90, 90] = -1e4
    a[1, 40, 7] = np.nan
    a[2] = np.eye(n)
    a[2, 100, 99] = 1  # s at (100, 100) is 1 - 1*1 = 0
    (got,) = run(gpu, Routines.Cholesky, [a], ["float32"])
    want = _host_cholesky(a, "float32")
    assert np.isnan(want).any(axis=(1, 2)).all() and want[2, 100, 100] == 0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)


def test_cholesky_blocked_passes_share_pipelines(gpu, cholesky_path):
    """The block offset is a uniform: a 200x200 plan (7 blocks) is the copy, the first diagonal
    block, then a panel and an update a block but the last (with look-ahead the update factors the
    next diagonal block; without, a diagonal pass of its own follows), in 4 distinct shaders."""
    from jaxcore_webgpu.routines import plan_routine

    plan = plan_routine(Routine.build(Routines.Cholesky, [(2, 200, 200)], ["float32"]), gpu.target)
    lookahead = cholesky_path == "lookahead"
    assert len(plan.passes) == 1 + (1 if lookahead else 7) + 6 + 6
    diag = plan.passes[1].code
    uniforms = {c: [p.uniform for p in plan.passes if p.code == c] for c in {p.code for p in plan.passes[1:]}}
    assert len(uniforms) == 3 and len(uniforms[diag]) == (1 if lookahead else 7)
    assert sorted(len(u) for c, u in uniforms.items() if c != diag) == [6, 6]
    assert all(len(set(u)) == len(u) for u in uniforms.values())


def test_triangular_solve_batched(gpu):
    from scipy.linalg import solve_triangular

    n, m, batch = 45, 7, 3
    a = np.triu(RNG.uniform(-1, 1, (batch, n, n))) + 4 * np.eye(n)
    b = RNG.uniform(-1, 1, (batch, m, n))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    (got,) = run(
        gpu, Routines.TriangularSolve, [a32, b32], ["float32", "float32"], TriangularSolveParams(False)
    )
    want = np.stack(
        [solve_triangular(a32[i].astype(np.float64), b32[i].T.astype(np.float64)).T for i in range(batch)]
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(70, 50), (3, 40, 64)])
def test_lu_larger(gpu, shape):
    a = RNG.uniform(-1, 1, shape).astype(np.float32)
    lu, piv, perm = run(gpu, Routines.LU, [a], ["float32"])
    m, n = shape[-2:]
    k = min(m, n)
    a3, lu3 = a.reshape(-1, m, n).astype(np.float64), lu.reshape(-1, m, n).astype(np.float64)
    for b, pm in enumerate(perm.reshape(-1, m)):
        low = np.tril(lu3[b], -1)[:, :k] + np.eye(m, k)
        up = np.triu(lu3[b])[:k, :]
        assert np.abs(low).max() <= 1 + 1e-6
        np.testing.assert_allclose(low @ up, a3[b][pm], rtol=1e-4, atol=1e-4)
    assert piv.shape == (*shape[:-2], k)


def test_jacobi_eigh_8x8(gpu):
    s = RNG.uniform(-1, 1, (3, 8, 8))
    sym = ((s + s.transpose(0, 2, 1)) / 2).astype(np.float32)
    d, v = run(gpu, Routines.JacobiEigh, [sym], ["float32"])
    w = np.diagonal(d, axis1=-2, axis2=-1).astype(np.float64)
    np.testing.assert_allclose(np.sort(w, -1), np.linalg.eigvalsh(sym.astype(np.float64)), atol=1e-4)
    v64 = v.astype(np.float64)
    np.testing.assert_allclose(v64 @ (w[..., :, None] * v64.transpose(0, 2, 1)), sym, atol=1e-4)


def fft_case(be, shape, dtype, inverse, scale=1.0):
    """Run Fft on normal(0, scale) planes of `shape`; return (got, want) as complex arrays."""
    re = (RNG.normal(0, scale, shape)).astype(NP[dtype])
    im = (RNG.normal(0, scale, shape)).astype(NP[dtype])
    gr, gim = run(be, Routines.Fft, [re, im], [dtype, dtype], FftParams.default(shape[-1], inverse))
    z = re.astype(np.float64) + 1j * im.astype(np.float64)
    want = np.fft.ifft(z, axis=-1) if inverse else np.fft.fft(z, axis=-1)
    return gr.astype(np.float64) + 1j * gim.astype(np.float64), want


def need(be, dtype):
    if dtype not in {str(d) for d in be.capabilities.dtypes}:
        pytest.skip(f"no {dtype} on this adapter")


FFT_LENGTHS = [
    *(8, 1024, 2048, 4096, 8192, 65536),  # powers of two: one pass up to 4096, then the four-step
    *(2, 3, 5, 7, 15, 30, 360, 1000, 3000, 4410, 143, 20000),  # 13-smooth: mixed-radix stages
    *(17, 97, 1009, 4099),  # a larger prime factor: a direct DFT up to 64, else Bluestein
]


@pytest.mark.parametrize("n", FFT_LENGTHS)
@pytest.mark.parametrize("inverse", [False, True])
def test_fft_lengths(gpu, n, inverse):
    got, want = fft_case(gpu, (3, n), "float32", inverse)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("shape", [(300, 8), (37, 360), (2, 3, 1000), (5, 8192), (1, 7), (4, 1)])
def test_fft_batches(gpu, shape):
    """Batches that leave the last workgroup partly empty, and several batch axes."""
    got, want = fft_case(gpu, shape, "float32", False)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("n", [64, 100, 2048, 4096, 3000, 1009])
@pytest.mark.parametrize("inverse", [False, True])
def test_fft_float64(gpu, n, inverse):
    """float64 keeps 2048 a pass (4096 is four-step there): errors near 1e-16 relative."""
    need(gpu, "float64")
    got, want = fft_case(gpu, (2, n), "float64", inverse)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(want).max())


@pytest.mark.parametrize("n", [90, 256, 4096, 8192, 1000])
def test_fft_float16(gpu, n):
    """float16 computes in float32 and rounds once on store."""
    need(gpu, "float16")
    got, want = fft_case(gpu, (2, n), "float16", True, scale=0.5)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())


@pytest.mark.parametrize(
    ("n", "passes"),
    [(4096, 1), (2048, 1), (3000, 1), (360, 1), (8192, 2), (65536, 2), (4410, 2), (1 << 24, 3), (1009, 4)],
)
def test_fft_pass_counts(n, passes):
    """Plus one twiddle-table pass: a row in workgroup memory is one pass, the four-step two."""
    from jaxcore_webgpu.routines.fft import plan_fft

    r = Routine.build(Routines.Fft, [(2, n), (2, n)], ["float32", "float32"], FftParams.default(n))
    assert len(plan_fft(r).passes) == 1 + passes


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_fft_shaders_keep_webgpu_default_limits(dtype):
    """16 KB of workgroup storage, 256 invocations, 8 storage buffers, barriers only at the top
    level of main (so in uniform control flow, as Tint demands), whatever the adapter offers."""
    import re

    from jaxcore_webgpu.routines.fft import plan_fft

    width = {"float32": 4, "float16": 4, "float64": 8}[dtype]
    for n in (2, 12, 360, 1000, 2048, 3000, 4096, 8192, 65536, 1009, 1 << 22):
        r = Routine.build(Routines.Fft, [(3, n), (3, n)], [dtype, dtype], FftParams.default(n, True))
        big = type("T", (), {"max_workgroup_storage": 1 << 16, "max_workgroup_size": 1024})()
        for p in plan_fft(r, big).passes:
            size = re.search(r"@workgroup_size\((\d+), 1, 1\)", p.code)
            assert size and int(size.group(1)) <= 256
            for ty, count in re.findall(r"var<workgroup> \w+: array<(\w+|vec2<\w+>), (\d+)>", p.code):
                assert int(count) * width * (2 if ty.startswith("vec2") else 1) <= 16384, (n, ty, count)
            assert len(p.bindings) == len(set(re.findall(r"@binding\((\d+)\)", p.code))) <= 8
            for line in p.code.splitlines():
                if "Barrier" in line:
                    assert line == "  workgroupBarrier();", line


def test_fft_export_keeps_16kb(gpu):
    """A 4096-point row exported for a page: its workgroup storage is stated, and is 16 KB."""
    from jaxcore_webgpu.export import export

    r = Routine.build(Routines.Fft, [(2, 4096)] * 2, ["float32"] * 2, FftParams.default(4096))
    program = export(gpu, gpu.prepare_routine(r))
    assert "var<workgroup> sh: array<f32, 4096>;" in "".join(program["shaders"])  # the halves in turn
    assert program["limits"]["maxComputeWorkgroupStorageSize"] == 16384  # stated for the page


def test_export_states_workgroup_storage():
    """The storage an exported program states is what its shaders declare, laid out as WGSL lays
    out arrays (a vec3 takes a vec4's stride) and summed over a shader's variables."""
    from jaxcore_webgpu.export import ExportError, _workgroup_bytes

    code = (
        "var<workgroup> a: array<vec2<f32>, 4096>;\nvar<workgroup> n: atomic<u32>;\n"
        "var<workgroup> b : array<vec3<f32>, 10>;\nvar<workgroup> c: array<array<f16, 3>, 4u>;\n"
    )
    assert _workgroup_bytes(code) == 32768 + 4 + 160 + 4 * 6
    assert _workgroup_bytes("fn main() {}") == 0
    with pytest.raises(ExportError, match="array<f32, N>"):
        _workgroup_bytes("const N = 4;\nvar<workgroup> a: array<f32, N>;")


def test_float64_sort_is_undeclared(gpu):
    from jaxcore.backend import UnsupportedOpError, UnsupportedRoutineError

    with pytest.raises((UnsupportedOpError, UnsupportedRoutineError)):
        gpu.prepare_routine(Routine.build(Routines.Sort, [(4,)], ["float64"]))


@pytest.mark.parametrize("argsort", [False, True])
def test_sort_small_workgroups_take_four_distances_per_pass(gpu, retarget, argsort):
    """An adapter with 32-thread workgroups: 64-key blocks, so most stages run as 4-level global passes."""
    retarget(max_workgroup_size=32)
    x = RNG.integers(0, 50, (2, 3001)).astype(np.float32)
    x[:, ::13] = np.nan
    if argsort:
        vals, idx = run(gpu, Routines.Argsort, [x], ["float32"])
        np.testing.assert_array_equal(idx, np.argsort(x, axis=-1, kind="stable"))
    else:
        (vals,) = run(gpu, Routines.Sort, [x], ["float32"])
    np.testing.assert_array_equal(vals, np.sort(x, axis=-1))
