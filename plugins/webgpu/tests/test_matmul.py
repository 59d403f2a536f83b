"""The tiled matmul path: detection, partial tiles, layouts, batches, epilogues and dtypes vs numpy."""

from __future__ import annotations

import numpy as np
import pytest
from jaxcore_webgpu import matmul
from jaxcore_webgpu.wgsl_helpers import OPAQUE_UNIFORM

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel
from jaxcore.kernel import Reduction
from jaxcore.matmul_shape import detect, matmul_kernel

F32 = DType.float32
RNG = np.random.default_rng(0)
g, r = AluVar.gidx, AluVar.ridx


def gi(gid: int, n: int, idx: AluExp, dtype: DType = F32) -> AluExp:
    return AluExp.global_index(dtype, gid, n, idx)


def run(be, kernel, inputs, out_dtype=np.float32, exe=None):
    """`kernel` prepared (or `exe`, a hand plan of it) run on `inputs`: the executable, the output."""
    slots = [be.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = be.malloc(kernel.bytes, np.full(kernel.bytes, 0xFF, np.uint8).tobytes())  # NaN-poisoned
    exe = exe or be.prepare_kernel(kernel)
    be.dispatch(exe, slots, [out])
    res = np.frombuffer(be.read(out), dtype=out_dtype).copy()
    for s in (*slots, out):
        be.dec_ref(s)
    return exe, res


def tiled(exe) -> bool:
    return any("var<workgroup> As" in c for c in exe.data.codes)


def operands(m, n, kk, batch, ta, tb, dtype=np.float32):
    a = RNG.normal(0, 1, (batch, m, kk)).astype(dtype)
    b = RNG.normal(0, 1, (batch, kk, n)).astype(dtype)
    sa = np.ascontiguousarray(np.swapaxes(a, 1, 2)) if ta else a
    sb = np.ascontiguousarray(np.swapaxes(b, 1, 2)) if tb else b
    return a, b, sa.ravel(), sb.ravel()


def test_detect_shapes():
    mm = detect(matmul_kernel(24, 40, 16, batch=3, transpose_b=True, swap=True))
    assert (mm.batch, mm.m, mm.n, mm.k) == (3, 24, 40, 16)
    assert mm.a.gid == 0 and mm.b.gid == 1 and mm.b.s_k == 1 and mm.b.s_outer == 16
    assert mm.identity
    # not a matmul: an elementwise product summed along one operand only
    k = Kernel(1, 8, gi(0, 64, g * 8 + r) * gi(0, 64, g * 8 + r), Reduction(F32, AluOp.Add, 8))
    assert detect(k) is None or detect(k).a.gid == detect(k).b.gid


@pytest.mark.parametrize(
    "m,n,kk,ta,tb,batch,swap",
    [
        (64, 64, 64, False, False, 1, False),
        (37, 53, 30, False, False, 1, False),  # partial tiles in m, n and k, scalar loads
        (40, 36, 20, True, False, 1, True),  # transposed A (vec4 along m), swapped operands
        (32, 44, 24, False, True, 2, False),  # transposed B (vec4 along k), batch
        (33, 17, 9, True, True, 3, False),  # both transposed, odd everything
        (130, 129, 40, False, False, 1, False),  # beyond one large tile
    ],
)
def test_matmul_layouts(gpu, m, n, kk, ta, tb, batch, swap):
    k = matmul_kernel(m, n, kk, transpose_a=ta, transpose_b=tb, batch=batch, swap=swap)
    a, b, sa, sb = operands(m, n, kk, batch, ta, tb)
    exe, got = run(gpu, k, [sa, sb])
    assert tiled(exe)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.reshape(batch, m, n), want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


@pytest.mark.parametrize("tile", sorted(matmul.TILES))
def test_every_tile_shape(gpu, tile):
    m, n, kk = 70, 140, 36
    k = matmul_kernel(m, n, kk)
    plan = matmul.plan_matmul(k, gpu.target, tile=tile)
    if plan is None:
        pytest.skip(f"tile {tile} does not fit this adapter")
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    _, got = run(gpu, k, [sa, sb], exe=gpu.compile_plan(k, plan))
    np.testing.assert_allclose(got.reshape(m, n), a[0].astype(np.float64) @ b[0], rtol=1e-4, atol=1e-3)


def test_epilogue_reads_a_bias_and_gidx(gpu):
    """acc + bias[j] + gidx: the epilogue reads a third input (scalar binding) and the output index."""
    m, n, kk = 20, 28, 32
    j = AluExp.mod(g, n)
    epi = AluVar.acc(F32) + gi(2, n, j) + AluExp.cast(F32, g)
    k = matmul_kernel(m, n, kk, epilogue=epi, nargs=3)
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    bias = RNG.normal(0, 1, n).astype(np.float32)
    exe, got = run(gpu, k, [sa, sb, bias])
    assert tiled(exe)
    want = a[0].astype(np.float64) @ b[0] + bias + np.arange(m * n).reshape(m, n)
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-3)


def test_nan_and_inf_propagate(gpu):
    m = n = kk = 32
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    sa = sa.copy()
    sa[5 * kk + 3] = np.nan
    sa[7 * kk + 1] = np.inf
    exe, got = run(gpu, matmul_kernel(m, n, kk), [sa, sb])
    got = got.reshape(m, n)
    assert np.isnan(got[5]).all()
    want = sa.reshape(m, kk).astype(np.float64) @ b[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", ["relu_to_f16", "f16", "f16_to_f32"])
def test_float16_matmuls_take_the_generic_path(gpu, case):
    """float16 is held in float32 on this device: a matmul touching it is left to the generic
    compiler (the tiles would be WGSL f16), and its values are still right."""
    m, n, kk = 36, 40, 48
    if case == "relu_to_f16":
        epi = AluExp.cast(DType.float16, AluExp.max(AluVar.acc(F32), AluExp.f32(0.0)))
        k, dt = matmul_kernel(m, n, kk, epilogue=epi), np.float32
    else:
        dt = np.float16
        k = matmul_kernel(m, n, kk, dtype=DType.float16, cast_to=F32 if case == "f16_to_f32" else None)
    a, b, sa, sb = operands(m, n, kk, 1, False, False, dt)
    exe, got = run(gpu, k, [sa, sb], np.float32 if case == "f16_to_f32" else np.float16)
    assert not tiled(exe)
    want = a[0].astype(np.float64) @ b[0].astype(np.float64)
    if case == "relu_to_f16":
        want = np.maximum(want, 0)
    np.testing.assert_allclose(got.reshape(m, n).astype(np.float64), want, rtol=5e-3, atol=5e-2)


def test_float64(gpu):
    if DType.float64 not in gpu.capabilities.dtypes:
        pytest.skip("no shader-f64")
    m, n, kk = 40, 24, 36
    k = matmul_kernel(m, n, kk, dtype=DType.float64)
    a, b, sa, sb = operands(m, n, kk, 1, False, False, np.float64)
    exe, got = run(gpu, k, [sa, sb], np.float64)
    assert tiled(exe)
    np.testing.assert_allclose(got.reshape(m, n), a[0] @ b[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("b_transposed", [False, True])
def test_global_views_as_the_frontend_builds_them(gpu, b_transposed):
    """A[M,K] and B[K,N] (or B stored as [N,K]) broadcast to [M,N,K] by ShapeTracker views."""
    from jaxcore.shape import ShapeTracker

    m, n, kk = 36, 44, 52
    st_a = ShapeTracker.from_shape((m, kk)).reshape((m, 1, kk)).expand((m, n, kk))
    if b_transposed:
        st_b = ShapeTracker.from_shape((n, kk)).reshape((1, n, kk)).expand((m, n, kk))
    else:
        st_b = ShapeTracker.from_shape((kk, n)).permute((1, 0)).reshape((1, n, kk)).expand((m, n, kk))
    idx = [AluExp.idiv(g, AluExp.i32(n)), AluExp.mod(g, AluExp.i32(n)), r]
    exp = AluExp.global_view(F32, 0, st_a, idx) * AluExp.global_view(F32, 1, st_b, idx)
    k = Kernel(2, m * n, exp, Reduction(F32, AluOp.Add, kk))
    a, b, sa, sb = operands(m, n, kk, 1, False, b_transposed)
    exe, got = run(gpu, k, [sa, sb])
    assert tiled(exe)
    np.testing.assert_allclose(got.reshape(m, n), a[0].astype(np.float64) @ b[0], rtol=1e-4, atol=1e-3)


def test_matrix_vector_stays_a_grouped_reduction(gpu):
    """M or N = 1 is matmul-shaped, but a tile would waste its rows: the compiler's reduction runs it."""
    m, kk = 64, 256
    exp = gi(0, m * kk, g * kk + r) * gi(1, kk, r)
    k = Kernel(2, m, exp, Reduction(F32, AluOp.Add, kk))
    assert detect(k) is not None and min(detect(k).m, detect(k).n) == 1
    a, v = RNG.normal(0, 1, (m, kk)).astype(np.float32), RNG.normal(0, 1, kk).astype(np.float32)
    exe, got = run(gpu, k, [a.ravel(), v])
    assert not tiled(exe)
    np.testing.assert_allclose(got, a.astype(np.float64) @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True])
def test_one_buffer_as_both_operands(gpu, transposed):
    """A @ A (vec4 along k and along n from one binding) and A @ A^T (a Gram matrix)."""
    n = 48
    i, j = AluExp.idiv(g, n), AluExp.mod(g, n)
    b_idx = j * n + r if transposed else r * n + j
    k = Kernel(1, n * n, gi(0, n * n, i * n + r) * gi(0, n * n, b_idx), Reduction(F32, AluOp.Add, n))
    a = RNG.normal(0, 1, (n, n)).astype(np.float32)
    exe, got = run(gpu, k, [a.ravel()])
    assert tiled(exe)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got.reshape(n, n), a64 @ (a64.T if transposed else a64), rtol=1e-4, atol=1e-3)


def test_flipped_and_batch_broadcast_operands(gpu):
    """B read with a negative k stride (a flipped view) and shared by every batch entry (stride 0)."""
    batch, m, n, kk = 3, 20, 24, 28
    ib, i, j = AluExp.idiv(g, m * n), AluExp.mod(AluExp.idiv(g, n), m), AluExp.mod(g, n)
    a_idx = ib * (m * kk) + i * kk + r
    b_idx = (AluExp.i32(kk - 1) - r) * n + j
    k = Kernel(
        2, batch * m * n, gi(0, batch * m * kk, a_idx) * gi(1, kk * n, b_idx), Reduction(F32, AluOp.Add, kk)
    )
    mm = detect(k)
    assert mm is not None and mm.b.s_k == -n and mm.b.s_batch == 0
    a = RNG.normal(0, 1, (batch, m, kk)).astype(np.float32)
    b = RNG.normal(0, 1, (kk, n)).astype(np.float32)
    exe, got = run(gpu, k, [a.ravel(), b.ravel()])
    assert tiled(exe)
    want = a.astype(np.float64) @ b[::-1].astype(np.float64)
    np.testing.assert_allclose(got.reshape(batch, m, n), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("mnk", [(64, 64, 64), (256, 256, 784)], ids=["64^3", "256x256x784"])
@pytest.mark.parametrize("c_first", [False, True], ids=["C-acc*0.1", "acc*0.1-C"])
def test_epilogue_product_beside_another_input(gpu, mnk, c_first):
    """C - acc * 0.1 and acc * 0.1 - C (a training step's W - lr * grad): the epilogue's opaque
    operands read the zero uniform at @group(1), which the tiled pass must bind; without it every
    dispatch failed wgpu validation ("expects a BindGroup to be set at index 1")."""
    m, n, kk = mnk
    acc, c = AluVar.acc(F32), gi(2, m * n, g)
    epi = c - acc * 0.1 if c_first else acc * 0.1 - c
    k = matmul_kernel(m, n, kk, epilogue=epi, nargs=3)
    plan = matmul.plan_matmul(k, gpu.target)
    assert plan is not None and plan.passes[0].uniform == OPAQUE_UNIFORM
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    cc = RNG.normal(0, 1, (m, n)).astype(np.float32)
    exe, got = run(gpu, k, [sa, sb, cc.ravel()])
    assert tiled(exe)
    prod = (a[0].astype(np.float64) @ b[0]) * np.float32(0.1)
    want = cc - prod if c_first else prod - cc
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


def test_uniform_bound_exactly_when_declared(gpu):
    """A pass carries the zero uniform exactly when its shader declares @group(1): epilogues with
    and without opaque operands, and the plain product, which keeps the one-pass fast path."""
    acc, m = AluVar.acc(F32), 48
    c = gi(2, m * m, g)
    epilogues = {
        "identity": None,
        "relu": AluExp.max(acc, AluExp.f32(0.0)),
        "acc+C": acc + c,
        "C-acc*0.1": c - acc * 0.1,
        "where": AluExp.where(AluExp.cmplt(AluExp.f32(0.0), c), acc, -acc),
        "half": acc * 0.5,
    }
    for name, epi in epilogues.items():
        k = matmul_kernel(m, m, m, epilogue=epi, nargs=3)
        plan = matmul.plan_matmul(k, gpu.target)
        assert plan is not None, name
        (p,) = plan.passes
        assert (p.uniform is not None) == ("@group(1)" in p.code), name
    exe = gpu.prepare_kernel(matmul_kernel(m, m, m))
    assert exe.data.single is not None  # no uniform: the short recording path


def test_no_tile_for_float16_nor_for_float64_the_adapter_lacks(gpu):
    """A float16 operand widened to float32 or a float16 store: the generic compiler, which holds
    float16 in float32; a float64 step in the epilogue: the tile only where the adapter has f64."""
    from dataclasses import replace

    acc = AluVar.acc(F32)
    for name, k in {
        "f16 widened": matmul_kernel(64, 64, 64, dtype=DType.float16, cast_to=F32),
        "f16 store": matmul_kernel(64, 64, 64, epilogue=AluExp.cast(DType.float16, acc)),
    }.items():
        assert matmul.plan_matmul(k, gpu.target) is None, name
    k = matmul_kernel(64, 64, 64, epilogue=AluExp.cast(F32, AluExp.cast(DType.float64, acc) * 0.5))
    assert matmul.plan_matmul(k, replace(gpu.target, has_f64=False)) is None
    if gpu.target.has_f64:
        assert matmul.plan_matmul(k, gpu.target) is not None


def test_double_buffered_slabs_natively_one_buffer_for_a_browser(gpu):
    """Where the adapter has 32 KB of workgroup storage a big product takes the double-buffered
    tile (one barrier a slab); its browser program keeps to WebGPU's default 16 KB, planned again
    with one buffer, and both compute the product."""
    from jaxcore_webgpu.export import _workgroup_bytes as storage

    m, n, kk = 1024, 2048, 12  # 128 tiles of 128 x 128: enough that the large tile is chosen
    k = matmul_kernel(m, n, kk)
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    exe, got = run(gpu, k, [sa, sb])
    want = a[0].astype(np.float64) @ b[0]
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-3)
    (native,) = exe.data.codes
    assert storage(native) == (32768 if gpu.target.max_workgroup_storage >= 32768 else 16384)
    browser = gpu.browser_plan(exe)
    (p,) = browser.passes if browser is not None else (None,)
    code = p.code if p is not None else native
    assert "var ph" not in code and storage(code) == 16384
    if p is not None:  # the browser's pass, run here
        again = gpu.compile_plan(k, browser)
        assert list(again.data.codes) == [p.code]
        _, again_got = run(gpu, k, [sa, sb], exe=again)
        np.testing.assert_allclose(again_got.reshape(m, n), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "storage, mnk, tile",
    [
        (32768, (1024, 1024, 1024), "mid2"),  # 64 tiles of 128 x 128, 128 of 64 x 128
        (16384, (1024, 1024, 1024), "medium"),  # the 64 x 128 double buffer needs 24 KB
        (32768, (2048, 2048, 64), "large2"),
        (32768, (256, 256, 256), "small"),
    ],
)
def test_tile_choice_fills_the_gpu_within_the_storage(storage, mnk, tile):
    """The largest tile that still makes FILL_WORKGROUPS workgroups, and fits the storage."""
    from jaxcore_webgpu.codegen import WgslTarget

    m, n, kk = mnk
    target = WgslTarget(max_workgroup_storage=storage)
    assert matmul.choose_tile(detect(matmul_kernel(m, n, kk)), target) == matmul.TILES[tile]
