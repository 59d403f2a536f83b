"""The cpu executor's fast paths give the reference's bits.

Quasi-affine indices become strided views over boxes of lanes aligned to row lengths, index
subexpressions become broadcast aranges, non-negative int divisions skip the int64 detour, and
float matrix-product reductions go to BLAS. Each is checked against per-lane `AluExp.evaluate`
or against numpy, with tiny block budgets so that boxes split rows, rows split boxes, and views
of padded or flipped buffers sit right at the buffer's ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_reference import scalar_reference

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType, to_numpy
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker, unravel_alu
from jaxcore_cpu import executor
from jaxcore_cpu.affine import QuasiAffine, Term, quasi_affine
from jaxcore_cpu.blocks import Block, Box, Layouts, boxes
from jaxcore_cpu.executor import plan_kernel, run_kernel

F32, I32 = DType.float32, DType.int32
G, R = AluVar.gidx, AluVar.ridx
Tracked = tuple[tuple[int, ...], ShapeTracker]  # a buffer's shape and a view of it
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- helpers -----------------------------------------------------------------------------------


def run(kernel: Kernel, inputs: list[np.ndarray], budget: int | None = None) -> np.ndarray:
    """Plan (with `budget` lanes per block, if given) and run the kernel on the executor."""
    old = executor.BLOCK_LANES
    executor.BLOCK_LANES = budget if budget is not None else old
    try:
        plan = plan_kernel(kernel)
    finally:
        executor.BLOCK_LANES = old
    raw = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in inputs]
    out = np.full(kernel.bytes, 0xAB, np.uint8)  # garbage, so unwritten lanes show
    run_kernel(plan, raw, out)
    return out.view(to_numpy(kernel.dtype))


def gv(dtype: DType, gid: int, tracker: ShapeTracker, indices: list[AluExp]) -> AluExp:
    return AluExp.global_view(dtype, gid, tracker, indices)


def gi(dtype: DType, gid: int, length: int, index: AluExp) -> AluExp:
    return AluExp.global_index(dtype, gid, length, index)


def i32(v: int) -> AluExp:
    return AluExp.i32(v)


def small_floats(rng: np.random.Generator, shape: tuple[int, ...] | int) -> np.ndarray:
    """Integer-valued float32: every sum is exact, so any summation order gives the same bits."""
    return rng.integers(-8, 9, shape).astype(np.float32)


def spy_matmul(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records whether each reduction ran as matrix products."""
    calls: list[bool] = []
    real = executor._run_matmul

    def wrapped(*args: object) -> bool:
        calls.append(real(*args))  # type: ignore[arg-type]
        return calls[-1]

    monkeypatch.setattr(executor, "_run_matmul", wrapped)
    return calls


# ---- the analysis ------------------------------------------------------------------------------


def _form(e: AluExp, size: int, rsize: int = 0) -> QuasiAffine | None:
    gidx = AluExp.special(I32, "gidx", size)
    ridx = AluExp.special(I32, "ridx", rsize)
    tuned = e.substitute({"gidx": gidx, "ridx": ridx}).simplify()
    return quasi_affine(tuned, {"gidx": size, "ridx": rsize}, {})


def test_quasi_affine_forms() -> None:
    mm = AluExp.idiv(G, i32(64)) * i32(32) + R + AluExp.mod(G, i32(64)) * i32(-3) + i32(5)
    assert _form(mm, 64 * 64, 32) == QuasiAffine(
        5, ((Term("gidx", 1, 64), -3), (Term("gidx", 64, 0), 32), (Term("ridx", 1, 0), 1))
    )
    # Nested digits, and normalisation by the variable's range: % 10 cannot wrap below 60.
    nested = AluExp.mod(AluExp.idiv(G, i32(6)), i32(10)) + AluExp.mod(G, i32(6))
    assert _form(nested, 60) == QuasiAffine(0, ((Term("gidx", 1, 6), 1), (Term("gidx", 6, 0), 1)))
    assert _form(AluExp.idiv(AluExp.mod(G, i32(12)), i32(4)), 100) == QuasiAffine(
        0, ((Term("gidx", 4, 3), 1),)
    )
    # Not quasi-affine: products of lanes, dividends that are sums, non-constant divisors.
    assert _form(G * G, 10) is None
    assert _form(AluExp.idiv(G + i32(1), i32(2)), 10) is None
    assert _form(AluExp.idiv(i32(100), G + i32(1)), 10) is None


@given(st.integers(0, 400), st.lists(st.integers(2, 5), max_size=3), st.integers(1, 70))
def test_boxes_partition_lanes_at_aligned_rows(size: int, radices: list[int], budget: int) -> None:
    chain = tuple(math.prod(radices[:i]) for i in range(len(radices) + 1))
    got = list(boxes("gidx", size, chain, budget))
    assert [b.start for b in got] == [0, *(b.stop for b in got)][: len(got)]
    assert (got[-1].stop if got else 0) == size
    for b in got:
        assert b.lanes <= budget and b.lanes == math.prod(b.shape)
        level = b.levels[0]
        assert b.start % chain[level] == 0
        if level + 1 < len(chain):  # every digit above the box is constant over it
            assert b.start // chain[level + 1] == (b.stop - 1) // chain[level + 1]


@SETTINGS
@given(
    st.integers(1, 300),
    st.lists(st.integers(2, 5), min_size=1, max_size=3),
    st.integers(1, 50),
    st.data(),
)
def test_linear_forms_match_terms_on_every_lane(
    size: int, radices: list[int], budget: int, data: st.DataObject
) -> None:
    chain = tuple(math.prod(radices[:i]) for i in range(len(radices) + 1))
    s = data.draw(st.integers(0, len(chain) - 1))
    t = data.draw(st.integers(s + 1, len(chain)))
    term = Term("gidx", chain[s], chain[t] // chain[s] if t < len(chain) else 0)
    form = QuasiAffine(7, ((term, 3),))
    for box in boxes("gidx", size, chain, budget):
        base, coefs = Block((box,), Layouts({"gidx": chain, "ridx": (1,)})).linear(form)
        digits = np.indices(box.shape).reshape(len(box.shape), -1)
        got = base + np.tensordot(coefs, digits, 1)
        lanes = box.start + np.tensordot(box.periods, digits, 1)
        want = 7 + 3 * ((lanes // term.div) % (term.mod or 1 << 40))
        np.testing.assert_array_equal(got, want)


# ---- random views against the scalar reference --------------------------------------------------


@st.composite
def trackers(draw: st.DrawFn, max_size: int = 120) -> Tracked:
    """A buffer shape and a chain of movement ops over it (pads, flips, shrinks, expands...)."""
    base = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    tr = ShapeTracker.from_shape(base)
    for _ in range(draw(st.integers(0, 4))):
        shape, nd = tr.shape, tr.ndim
        kind = draw(st.sampled_from(["permute", "flip", "shrink", "pad", "reshape", "expand"]))
        if kind == "permute":
            tr = tr.permute(draw(st.permutations(range(nd))))
        elif kind == "flip":
            tr = tr.flip([draw(st.booleans()) for _ in range(nd)])
        elif kind == "shrink":
            arg = []
            for s in shape:
                b = draw(st.integers(0, max(0, s - 1)))
                arg.append((b, draw(st.integers(min(b + 1, s), s))))
            tr = tr.shrink(arg)
        elif kind == "pad" and tr.size * 4 <= max_size:
            tr = tr.pad([(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(nd)])
        elif kind == "reshape":
            tr = tr.reshape(draw(factorings(tr.size)))
        elif kind == "expand" and tr.size * 3 <= max_size:
            at = draw(st.integers(0, nd))
            tr = tr.reshape(shape[:at] + (1,) + shape[at:])
            tr = tr.expand(shape[:at] + (draw(st.integers(2, 3)),) + shape[at:])
    return base, tr


@st.composite
def factorings(draw: st.DrawFn, n: int) -> tuple[int, ...]:
    dims: list[int] = []
    rest = n
    for _ in range(draw(st.integers(0, 2))):
        d = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0] or [1]))
        dims.append(d)
        rest //= max(d, 1)
    return (*dims, rest)


BUDGETS = st.sampled_from([1, 2, 3, 5, 7, 16, 64, 1 << 18])


@SETTINGS
@given(trackers(), BUDGETS, st.booleans(), st.integers(0, 2**31))
def test_elementwise_views_match_scalar(tb: Tracked, budget: int, compute: bool, seed: int) -> None:
    base, tr = tb
    x = small_floats(np.random.default_rng(seed), base)
    read = gv(F32, 0, tr, unravel_alu(tr.shape, G))
    exp = read * AluExp.f32(3) - AluExp.f32(1) if compute else read  # a bare read runs as one block
    kernel = Kernel(1, tr.size, exp)
    np.testing.assert_array_equal(run(kernel, [x], budget), scalar_reference(kernel, [x]), str(tr))


@SETTINGS
@given(
    trackers(), BUDGETS, st.sampled_from([AluOp.Add, AluOp.Max, AluOp.Min, AluOp.Mul]), st.integers(0, 2**31)
)
def test_reductions_over_views_match_scalar(tb: Tracked, budget: int, op: AluOp, seed: int) -> None:
    base, tr = tb
    rng = np.random.default_rng(seed)
    x = small_floats(rng, base) if op != AluOp.Mul else rng.integers(-2, 3, base).astype(np.float32)
    *outer, n = tr.shape
    item = gv(F32, 0, tr, [*unravel_alu(outer, G), R]) if outer else gv(F32, 0, tr, [R])
    epilogue = AluVar.acc(F32) * AluExp.f32(2) + AluExp.cast(F32, G)
    kernel = Kernel(
        1, math.prod(outer), AluExp.exp(item * AluExp.f32(0)) * item, Reduction(F32, op, n, epilogue)
    )
    np.testing.assert_array_equal(run(kernel, [x], budget), scalar_reference(kernel, [x]), str(tr))


@SETTINGS
@given(st.data(), BUDGETS, st.sampled_from([F32, I32]), st.integers(0, 2**31))
def test_products_of_two_views_match_scalar(
    data: st.DataObject, budget: int, dtype: DType, seed: int
) -> None:
    """`Σ a*b` over two unrelated views: matrix products (f32) or exact wrapping (i32)."""
    base_a, ta = data.draw(trackers(60))
    base_b, tb = data.draw(trackers(60))
    # Give b's view a's shape by reshaping (or broadcasting) b's flat data.
    shape = ta.shape
    if not shape or tb.size == 0 or math.prod(shape) == 0:
        return
    flat = tb.reshape((tb.size,))
    tb2 = flat.shrink([(0, 1)]).reshape((1,) * len(shape)).expand(shape)
    if tb.size >= math.prod(shape):
        tb2 = flat.shrink([(0, math.prod(shape))]).reshape(shape)
    rng = np.random.default_rng(seed)
    a, b = (small_floats(rng, s).astype(to_numpy(dtype)) for s in (base_a, base_b))
    if dtype == I32:
        a, b = a * 1_000_003, b * 999_983  # products wrap
    *outer, n = shape
    idx = [*unravel_alu(outer, G), R]
    exp = gv(dtype, 0, ta, idx) * gv(dtype, 1, tb2, idx)
    kernel = Kernel(2, math.prod(outer), exp, Reduction(dtype, AluOp.Add, n))
    np.testing.assert_array_equal(run(kernel, [a, b], budget), scalar_reference(kernel, [a, b]))


# ---- index arithmetic that is not a view ---------------------------------------------------------


@pytest.mark.parametrize("budget", [1, 5, 12, 1 << 18])
def test_non_chain_and_non_affine_indices(budget: int) -> None:
    """Divisors that are no chain (3 and 4), dividends that are sums, a flipped reshape."""
    x = small_floats(np.random.default_rng(1), 60)
    n = 48
    mixed = AluExp.mod(G, i32(3)) * i32(4) + AluExp.mod(G, i32(4))  # < 12
    shifted = AluExp.idiv(G + i32(5), i32(4))  # < 14
    flipped = (
        ShapeTracker.from_shape((6, 8)).flip((True, False)).reshape((48,)).reshape((3, 16)).permute((1, 0))
    )
    exp = gi(F32, 0, 60, mixed) + gi(F32, 0, 60, shifted) * gv(F32, 0, flipped, unravel_alu((16, 3), G))
    kernel = Kernel(1, n, exp)
    plan = plan_kernel(kernel)
    assert plan.fast_div  # the sums' divisions take the non-negative fast path
    np.testing.assert_array_equal(run(kernel, [x], budget), scalar_reference(kernel, [x]))


def test_int32_division_fast_path_wraps_like_the_contract() -> None:
    """A dividend that may overflow int32 must not take the fast path (wrapping makes it negative)."""
    big = AluExp.idiv(G * i32(1 << 29), i32(3))
    kernel = Kernel(0, 16, big)
    assert not plan_kernel(kernel).fast_div
    np.testing.assert_array_equal(run(kernel, []), scalar_reference(kernel, []))
    ok = Kernel(0, 1000, AluExp.idiv(G * i32(7) + i32(3), i32(10)) + AluExp.mod(G * G, i32(9)))
    assert plan_kernel(ok).fast_div
    np.testing.assert_array_equal(run(ok, [], 64), scalar_reference(ok, []))


# ---- bounds: padding, flips and the buffer's ends ------------------------------------------------


@pytest.mark.parametrize("budget", [1, 3, 8, 1 << 18])
def test_padded_flipped_reads_stay_in_bounds(budget: int) -> None:
    x = small_floats(np.random.default_rng(2), (5, 7))
    tr = ShapeTracker.from_shape((5, 7)).pad(((2, 1), (3, 2))).flip((True, True))
    kernel = Kernel(1, tr.size, gv(F32, 0, tr, unravel_alu(tr.shape, G)) + AluExp.f32(1))
    got = run(kernel, [x], budget).reshape(tr.shape)
    want = np.flip(np.pad(x, ((2, 1), (3, 2))), (0, 1)) + 1
    np.testing.assert_array_equal(got, want)


def test_out_of_bounds_live_read_gives_zero() -> None:
    """An unmasked read past the buffer gives 0 (the contract: never a crash, never other data)."""
    x = np.arange(10, dtype=np.float32)
    kernel = Kernel(1, 12, gi(F32, 0, 12, G) * AluExp.f32(2))
    np.testing.assert_array_equal(run(kernel, [x], 4), np.concatenate([x * 2, np.zeros(2, np.float32)]))


def test_masked_read_of_a_buffer_end_is_never_issued() -> None:
    """Lanes past the data are masked: the view would leave the buffer, so those blocks gather."""
    x = small_floats(np.random.default_rng(3), 10)
    valid = AluExp.cmplt(G, i32(10))
    exp = AluExp.where(valid, gi(F32, 0, 10, G - i32(0)), AluExp.f32(-1))
    kernel = Kernel(1, 16, exp)
    for budget in (1, 4, 16, 1 << 18):
        np.testing.assert_array_equal(run(kernel, [x], budget), np.concatenate([x, -np.ones(6, np.float32)]))


# ---- empty sizes -------------------------------------------------------------------------------


def test_empty_kernels_and_reductions() -> None:
    x = small_floats(np.random.default_rng(4), 12)
    assert run(Kernel(1, 0, gi(F32, 0, 12, G) * AluExp.f32(2)), [x]).size == 0
    epilogue = AluVar.acc(F32) + gi(F32, 0, 12, G * i32(4))
    empty_sum = Kernel(1, 3, gi(F32, 0, 12, G * i32(4) + R), Reduction(F32, AluOp.Add, 0, epilogue))
    np.testing.assert_array_equal(run(empty_sum, [x]), x[::4])
    empty_k = Kernel(2, 4, gi(F32, 0, 4, G + R) * gi(F32, 1, 4, R + G), Reduction(F32, AluOp.Add, 0))
    np.testing.assert_array_equal(run(empty_k, [x, x]), np.zeros(4, np.float32))
    tr = ShapeTracker.from_shape((3, 4)).shrink(((0, 3), (2, 2)))  # (3, 0)
    assert run(Kernel(1, 0, gv(F32, 0, tr, unravel_alu(tr.shape, G)) + AluExp.f32(1)), [x]).size == 0


# ---- the standard workloads: softmax and matmul --------------------------------------------------


def softmax_kernels(rows: int, cols: int, views: bool) -> list[Kernel]:
    """Row max; exp-sum with exp(x - max) inside and 1/sum in the epilogue; exp(x - max) / sum."""
    n = rows * cols
    if views:
        sx = ShapeTracker.from_shape((rows, cols))
        srow = ShapeTracker.from_shape((rows,)).reshape((rows, 1)).expand((rows, cols))
        ri, ei = [*unravel_alu([rows], G), R], unravel_alu((rows, cols), G)
        item, mx_r = gv(F32, 0, sx, ri), gv(F32, 1, srow, ri)
        x, mx, inv = gv(F32, 0, sx, ei), gv(F32, 1, srow, ei), gv(F32, 2, srow, ei)
    else:
        row = AluExp.idiv(G, i32(cols))
        item, mx_r = gi(F32, 0, n, G * i32(cols) + R), gi(F32, 1, rows, G)
        x, mx, inv = gi(F32, 0, n, G), gi(F32, 1, rows, row), gi(F32, 2, rows, row)
    recip = AluExp.reciprocal(AluVar.acc(F32))
    return [
        Kernel(1, rows, item, Reduction(F32, AluOp.Max, cols)),
        Kernel(2, rows, AluExp.exp(item - mx_r), Reduction(F32, AluOp.Add, cols, recip)),
        Kernel(3, n, AluExp.exp(x - mx) * inv),
    ]


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("rows,cols,budget", [(37, 300, 1000), (20, 300, 100), (9, 4096, 1 << 18)])
def test_softmax_matches_numpy(views: bool, rows: int, cols: int, budget: int) -> None:
    x = np.random.default_rng(5).normal(0, 2, (rows, cols)).astype(np.float32)
    k_max, k_sum, k_div = softmax_kernels(rows, cols, views)
    mx = run(k_max, [x], budget)
    np.testing.assert_array_equal(mx, x.max(axis=1))
    inv = run(k_sum, [x, mx], budget)
    e = np.exp(x - mx[:, None])
    np.testing.assert_allclose(inv, np.reciprocal(e.sum(axis=1)), rtol=2e-6)  # summation order only
    got = run(k_div, [x, mx, inv], budget).reshape(rows, cols)
    np.testing.assert_array_equal(got, e * inv[:, None])  # elementwise: bit for bit


def matmul_kernel(m: int, k: int, n: int, dtype: DType, views: bool, transpose_a: bool = False) -> Kernel:
    idx = [*unravel_alu((m, n), G), R]
    if views:
        sa = ShapeTracker.from_shape((k, m) if transpose_a else (m, k))
        sa = (sa.permute((1, 0)) if transpose_a else sa).reshape((m, 1, k)).expand((m, n, k))
        sb = ShapeTracker.from_shape((k, n)).permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
        exp = gv(dtype, 0, sa, idx) * gv(dtype, 1, sb, idx)
    else:
        i, j = AluExp.idiv(G, i32(n)), AluExp.mod(G, i32(n))
        a_idx = R * i32(m) + i if transpose_a else i * i32(k) + R
        exp = gi(dtype, 0, m * k, a_idx) * gi(dtype, 1, k * n, R * i32(n) + j)
    return Kernel(2, m * n, exp, Reduction(dtype, AluOp.Add, k))


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("dtype", [F32, DType.float64])
@pytest.mark.parametrize("m,k,n", [(7, 5, 3), (64, 33, 17), (1, 40, 9), (9, 40, 1), (1, 1, 1)])
def test_matmul_uses_blas_and_matches(
    monkeypatch: pytest.MonkeyPatch, views: bool, dtype: DType, m: int, k: int, n: int
) -> None:
    calls = spy_matmul(monkeypatch)
    rng = np.random.default_rng(6)
    a, b = (
        small_floats(rng, (m, k)).astype(to_numpy(dtype)),
        small_floats(rng, (k, n)).astype(to_numpy(dtype)),
    )
    kernel = matmul_kernel(m, k, n, dtype, views)
    got = run(kernel, [a, b], 16).reshape(m, n)
    assert calls == [True]
    np.testing.assert_array_equal(got, a @ b)  # integer-valued: exact in any order
    if m * n * k <= 200:
        np.testing.assert_array_equal(got.reshape(-1), scalar_reference(kernel, [a, b]))


def test_matmul_random_floats_and_transposed_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy_matmul(monkeypatch)
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(96, 80)).astype(np.float32), rng.normal(size=(96, 70)).astype(np.float32)
    got = run(matmul_kernel(80, 96, 70, F32, True, transpose_a=True), [a, b]).reshape(80, 70)
    assert calls == [True]
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_batched_matmul_with_cast_operand_and_epilogue(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy_matmul(monkeypatch)
    rng = np.random.default_rng(8)
    bt, m, k, n = 3, 5, 6, 4
    a = rng.integers(-9, 10, (bt, m, k)).astype(np.int32)
    b = small_floats(rng, (bt, k, n))
    idx = [*unravel_alu((bt, m, n), G), R]
    sa = ShapeTracker.from_shape((bt, m, k)).reshape((bt, m, 1, k)).expand((bt, m, n, k))
    sb = ShapeTracker.from_shape((bt, k, n)).permute((0, 2, 1)).reshape((bt, 1, n, k)).expand((bt, m, n, k))
    exp = AluExp.cast(F32, gv(I32, 0, sa, idx)) * gv(F32, 1, sb, idx)
    epilogue = AluVar.acc(F32) + gv(F32, 1, ShapeTracker.from_shape((bt * m * n,)), [G])
    kernel = Kernel(2, bt * m * n, exp, Reduction(F32, AluOp.Add, k, epilogue))
    got = run(kernel, [a, b])
    assert calls == [True]
    np.testing.assert_array_equal(got, scalar_reference(kernel, [a, b]))


def test_non_product_reductions_stay_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    """f16 products round in f16; a padded operand is masked; ints wrap: none of them go to BLAS."""
    calls = spy_matmul(monkeypatch)
    rng = np.random.default_rng(9)
    h = rng.normal(size=(6, 6)).astype(np.float16)
    half = matmul_kernel(6, 6, 6, DType.float16, True)
    assert plan_kernel(half).matmul is None
    np.testing.assert_array_equal(run(half, [h, h]), scalar_reference(half, [h, h]))
    w = (rng.integers(-(2**20), 2**20, (8, 8))).astype(np.int32)
    ints = matmul_kernel(8, 8, 8, I32, False)
    assert plan_kernel(ints).matmul is None
    want = ((w.astype(np.int64) @ w.astype(np.int64)) % 2**32).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(run(ints, [w, w]).reshape(8, 8), want)
    idx = [*unravel_alu((4, 4), G), R]
    sa = ShapeTracker.from_shape((4, 3)).pad(((0, 0), (1, 0))).reshape((4, 1, 4)).expand((4, 4, 4))
    sb = ShapeTracker.from_shape((4, 4)).permute((1, 0)).reshape((1, 4, 4)).expand((4, 4, 4))
    x = small_floats(rng, 16)
    padded = Kernel(2, 16, gv(F32, 0, sa, idx) * gv(F32, 1, sb, idx), Reduction(F32, AluOp.Add, 4))
    assert plan_kernel(padded).matmul is None
    np.testing.assert_array_equal(run(padded, [x, x]), scalar_reference(padded, [x, x]))
    dots = Kernel(
        2, 4, gi(F32, 0, 16, G * i32(4) + R) * gi(F32, 1, 16, G * i32(4) + R), Reduction(F32, AluOp.Add, 4)
    )
    np.testing.assert_array_equal(run(dots, [x, x]), scalar_reference(dots, [x, x]))
    assert calls == [False]  # the batch of row dot products declined


def test_rows_longer_than_the_budget() -> None:
    """n above the block budget: every block lies inside one row, and row terms are constants."""
    rows, cols = 3, 1000
    x = small_floats(np.random.default_rng(10), (rows, cols))
    k_max, _, k_div = softmax_kernels(rows, cols, True)
    mx = run(k_max, [x], 64)
    np.testing.assert_array_equal(mx, x.max(axis=1))
    inv = np.full(rows, 0.5, np.float32)
    got = run(k_div, [x, mx, inv], 64).reshape(rows, cols)
    np.testing.assert_array_equal(got, np.exp(x - mx[:, None]) * np.float32(0.5))


def test_sum_of_many_items_is_one_pairwise_reduction() -> None:
    n = 100_003
    x = small_floats(np.random.default_rng(11), n)
    kernel = Kernel(1, 1, gi(F32, 0, n, G * i32(n) + R), Reduction(F32, AluOp.Add, n))
    assert plan_kernel(kernel).budget == executor.UNBOUNDED
    np.testing.assert_array_equal(run(kernel, [x]), [x.sum()])


def _blocks(plan: executor.KernelPlan) -> Iterator[Box]:
    return boxes("gidx", plan.kernel.size, plan.chains["gidx"], plan.budget)


def test_softmax_blocks_are_whole_rows() -> None:
    kernel = softmax_kernels(4096, 4096, False)[2]
    plan = plan_kernel(kernel)
    assert plan.chains["gidx"] == (1, 4096)
    shapes = {b.shape for b in _blocks(plan)}
    assert shapes == {(executor.BLOCK_LANES // 4096, 4096)}


@pytest.mark.parametrize("budget", [7, 50, 1 << 18])
def test_float_products_fold_in_sequence(budget: int) -> None:
    """numpy's float16 multiply.reduce accumulates in float32; the contract rounds every step."""
    rng = np.random.default_rng(12)
    h = rng.uniform(0.9, 1.1, 4 * 50).astype(np.float16)
    read = gi(DType.float16, 0, 200, G * i32(50) + R)
    kernel = Kernel(1, 4, read, Reduction(DType.float16, AluOp.Mul, 50))
    np.testing.assert_array_equal(run(kernel, [h], budget), scalar_reference(kernel, [h]))
    f = rng.uniform(0.5, 1.5, 4 * 50).astype(np.float32)
    kernel = Kernel(1, 4, gi(F32, 0, 200, G * i32(50) + R) * AluExp.f32(1.25), Reduction(F32, AluOp.Mul, 50))
    np.testing.assert_array_equal(run(kernel, [f], budget), scalar_reference(kernel, [f]))


def test_items_over_several_digits_keep_the_block_budget() -> None:
    """A bare read whose items span two digit axes is folded flat: a copy, so blocks stay bounded."""
    x = small_floats(np.random.default_rng(13), (4, 6, 5))
    tr = ShapeTracker.from_shape((4, 6, 5)).permute((1, 0, 2)).reshape((6, 20))
    kernel = Kernel(1, 6, gv(F32, 0, tr, [G, R]), Reduction(F32, AluOp.Add, 20))
    plan = plan_kernel(kernel)
    assert plan.chains["ridx"] == (1, 5) and plan.budget == executor.BLOCK_LANES
    np.testing.assert_array_equal(run(kernel, [x], 10), x.transpose(1, 0, 2).reshape(6, 20).sum(axis=1))


def test_output_that_is_also_an_input_reads_the_old_values() -> None:
    """An in-place dispatch reads its input as it was, whatever order the blocks run in."""
    x = small_floats(np.random.default_rng(14), (8, 8))
    flipped = ShapeTracker.from_shape((8, 8)).flip((True, True))
    kernel = Kernel(1, 64, gv(F32, 0, flipped, unravel_alu((8, 8), G)) + AluExp.f32(1))
    executor.BLOCK_LANES, old = 8, executor.BLOCK_LANES
    try:
        plan = plan_kernel(kernel)
    finally:
        executor.BLOCK_LANES = old
    buf = x.copy().reshape(-1).view(np.uint8)
    run_kernel(plan, [buf], buf)
    np.testing.assert_array_equal(buf.view(np.float32).reshape(8, 8), x[::-1, ::-1] + 1)
    a, b = small_floats(np.random.default_rng(15), (2, 6, 6))
    both = np.concatenate([a.reshape(-1), b.reshape(-1)]).view(np.uint8)
    mm = matmul_kernel(6, 6, 6, F32, False)
    run_kernel(plan_kernel(mm), [both[:144], both[144:]], both[:144])
    np.testing.assert_array_equal(both[:144].view(np.float32).reshape(6, 6), a @ b)
