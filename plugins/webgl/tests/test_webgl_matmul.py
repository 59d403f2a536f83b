"""The block matmul path (several render targets): tiles, layouts, partial blocks, epilogues vs numpy."""

from __future__ import annotations

import numpy as np
import pytest
from jaxcore_webgl import matmul

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel
from jaxcore.kernel import Reduction
from jaxcore.matmul_shape import detect, matmul_kernel
from jaxcore.shape import ShapeTracker

F32 = DType.float32
RNG = np.random.default_rng(0)
g, r = AluVar.gidx, AluVar.ridx


def gi(gid: int, n: int, idx: AluExp, dtype: DType = F32) -> AluExp:
    return AluExp.global_index(dtype, gid, n, idx)


def run(be, kernel, inputs, out_dtype=np.float32):
    slots = [be.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = be.malloc(kernel.bytes, np.full(kernel.bytes, 0xFF, np.uint8).tobytes())  # NaN-poisoned
    exe = be.prepare_kernel(kernel)
    be.dispatch(exe, slots, [out])
    res = np.frombuffer(be.read(out), dtype=out_dtype).copy()
    for s in (*slots, out):
        be.dec_ref(s)
    return exe, res


def operands(m, n, kk, batch, ta, tb):
    a = RNG.normal(0, 1, (batch, m, kk)).astype(np.float32)
    b = RNG.normal(0, 1, (batch, kk, n)).astype(np.float32)
    sa = np.ascontiguousarray(np.swapaxes(a, 1, 2)) if ta else a
    sb = np.ascontiguousarray(np.swapaxes(b, 1, 2)) if tb else b
    return a, b, sa.ravel(), sb.ravel()


@pytest.fixture(scope="module", params=matmul.TILES, ids=lambda t: f"{t.rows}x{t.cols}")
def tiled(request):
    """A backend of its own (its kernel cache) for the tile `request.param`."""
    from jaxcore_webgl.backend import WebGLBackend

    be = WebGLBackend(platform="egl")
    yield be, request.param
    be.close()


@pytest.mark.parametrize(
    "m,n,kk,ta,tb,batch,swap,modes",
    [
        (64, 64, 64, False, False, 1, False, ("k4", "o4")),
        (37, 53, 30, False, False, 1, False, ("s", "s")),  # partial blocks in m and n, k remainder
        (40, 36, 20, True, False, 1, True, ("o4", "o4")),  # transposed A, swapped operands
        (32, 44, 24, False, True, 2, False, ("k4", "k4")),  # transposed B, batch
        (33, 17, 9, True, True, 3, False, ("s", "s")),  # both transposed, odd everything
        (130, 129, 40, False, False, 1, False, ("k4", "s")),
        (44, 36, 16, True, False, 1, False, ("o4", "o4")),  # texel rows past a partial 8-row block
        (28, 44, 12, False, False, 2, False, ("k4", "o4")),  # texel columns past a partial 8-column one
    ],
)
def test_matmul_layouts(tiled, monkeypatch, m, n, kk, ta, tb, batch, swap, modes):
    be, tile = tiled
    monkeypatch.setattr(matmul, "TILES", (tile,))
    k = matmul_kernel(m, n, kk, transpose_a=ta, transpose_b=tb, batch=batch, swap=swap)
    mm = detect(k)
    assert (matmul._mode(mm.a, m, kk), matmul._mode(mm.b, n, kk)) == modes
    a, b, sa, sb = operands(m, n, kk, batch, ta, tb)
    exe, got = run(be, k, [sa, sb])
    assert matmul.uses_blocks(exe) and exe.data.tile == tile
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.reshape(batch, m, n), want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


def test_epilogue_relu_to_float16(gl):
    m = n = kk = 48
    epi = AluExp.cast(DType.float16, AluExp.max(AluVar.acc(F32), AluExp.f32(0.0)))
    k = matmul_kernel(m, n, kk, epilogue=epi)
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    exe, got = run(gl, k, [sa, sb], np.float16)
    assert matmul.uses_blocks(exe)
    want = np.maximum(a[0] @ b[0], 0).astype(np.float16)
    np.testing.assert_allclose(
        got.reshape(m, n).astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3
    )


def test_epilogue_reads_a_bias_and_gidx(gl):
    """acc + bias[j] + gidx: the epilogue reads a third input and the output index."""
    m, n, kk = 20, 28, 32
    epi = AluVar.acc(F32) + gi(2, n, AluExp.mod(g, n)) + AluExp.cast(F32, g)
    k = matmul_kernel(m, n, kk, epilogue=epi, nargs=3)
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    bias = RNG.normal(0, 1, n).astype(np.float32)
    exe, got = run(gl, k, [sa, sb, bias])
    assert matmul.uses_blocks(exe)
    want = a[0].astype(np.float64) @ b[0] + bias + np.arange(m * n).reshape(m, n)
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-3)


def test_nan_and_inf_propagate(gl):
    m = n = kk = 32
    a, b, sa, sb = operands(m, n, kk, 1, False, False)
    sa = sa.copy()
    sa[5 * kk + 3] = np.nan
    sa[7 * kk + 1] = np.inf
    exe, got = run(gl, matmul_kernel(m, n, kk), [sa, sb])
    assert matmul.uses_blocks(exe)
    got = got.reshape(m, n)
    want = sa.reshape(m, kk).astype(np.float64) @ b[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("b_transposed", [False, True])
def test_global_views_as_the_frontend_builds_them(gl, b_transposed):
    """A[M,K] and B[K,N] (or B stored as [N,K]) broadcast to [M,N,K] by ShapeTracker views."""
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
    exe, got = run(gl, k, [sa, sb])
    assert matmul.uses_blocks(exe)
    np.testing.assert_allclose(got.reshape(m, n), a[0].astype(np.float64) @ b[0], rtol=1e-4, atol=1e-3)


def test_matrix_vector_stays_a_plain_reduction(gl):
    m, kk = 64, 256
    k = Kernel(2, m, gi(0, m * kk, g * kk + r) * gi(1, kk, r), Reduction(F32, AluOp.Add, kk))
    a, v = RNG.normal(0, 1, (m, kk)).astype(np.float32), RNG.normal(0, 1, kk).astype(np.float32)
    exe, got = run(gl, k, [a.ravel(), v])
    assert not matmul.uses_blocks(exe)
    np.testing.assert_allclose(got, a.astype(np.float64) @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True])
def test_one_buffer_as_both_operands(gl, transposed):
    n = 48
    i, j = AluExp.idiv(g, n), AluExp.mod(g, n)
    b_idx = j * n + r if transposed else r * n + j
    k = Kernel(1, n * n, gi(0, n * n, i * n + r) * gi(0, n * n, b_idx), Reduction(F32, AluOp.Add, n))
    a = RNG.normal(0, 1, (n, n)).astype(np.float32)
    exe, got = run(gl, k, [a.ravel()])
    assert matmul.uses_blocks(exe)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got.reshape(n, n), a64 @ (a64.T if transposed else a64), rtol=1e-4, atol=1e-3)


def test_flipped_and_batch_broadcast_operands(gl):
    """B read with a negative k stride (a flipped view) and shared by every batch entry (stride 0)."""
    batch, m, n, kk = 3, 20, 24, 28
    ib, i, j = AluExp.idiv(g, m * n), AluExp.mod(AluExp.idiv(g, n), m), AluExp.mod(g, n)
    a_idx = ib * (m * kk) + i * kk + r
    b_idx = (AluExp.i32(kk - 1) - r) * n + j
    k = Kernel(
        2, batch * m * n, gi(0, batch * m * kk, a_idx) * gi(1, kk * n, b_idx), Reduction(F32, AluOp.Add, kk)
    )
    a = RNG.normal(0, 1, (batch, m, kk)).astype(np.float32)
    b = RNG.normal(0, 1, (kk, n)).astype(np.float32)
    exe, got = run(gl, k, [a.ravel(), b.ravel()])
    assert matmul.uses_blocks(exe)
    want = a.astype(np.float64) @ b[::-1].astype(np.float64)
    np.testing.assert_allclose(got.reshape(batch, m, n), want, rtol=1e-4, atol=1e-3)


def test_output_aliasing_an_input(gl):
    """C = A @ B written over A: every input is read before the output is written."""
    n = 32
    k = matmul_kernel(n, n, n)
    a, b, sa, sb = operands(n, n, n, 1, False, False)
    ia, ib = gl.malloc(sa.nbytes, sa.tobytes()), gl.malloc(sb.nbytes, sb.tobytes())
    exe = gl.prepare_kernel(k)
    assert matmul.uses_blocks(exe)
    gl.dispatch(exe, [ia, ib], [ia])
    got = np.frombuffer(gl.read(ia), np.float32).reshape(n, n)
    for s in (ia, ib):
        gl.dec_ref(s)
    np.testing.assert_allclose(got, a[0].astype(np.float64) @ b[0], rtol=1e-4, atol=1e-3)


def test_block_shader_stays_within_webgl2():
    src = matmul.block_shader(matmul_kernel(64, 64, 64), detect(matmul_kernel(64, 64, 64)))
    assert src.startswith("#version 300 es\n")
    assert "layout(location = 3) out uvec4 o3;" in src and "texelFetch" in src


@pytest.mark.parametrize(
    "m,n,max_targets,want",
    [(64, 64, 8, (8, 4)), (64, 64, 4, (4, 4)), (6, 64, 8, (4, 8)), (6, 6, 8, (4, 4)), (64, 64, 7, (4, 4))],
)
def test_choose_tile_fits_the_draw_buffers_and_the_product(m, n, max_targets, want):
    tile = matmul.choose_tile(m, n, max_targets)
    assert (tile.rows, tile.cols) == want and tile.targets <= max(max_targets, 4)


def test_eight_row_tile_writes_eight_targets():
    k = matmul_kernel(64, 64, 64)
    src = matmul.block_shader(k, detect(k), matmul.Tile(8, 1))
    assert "layout(location = 7) out uvec4 o7;" in src and "location = 8" not in src
