"""jaxcore.fusion: values over shapes lowered to kernels, checked against numpy on the cpu device."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import jaxcore
from jaxcore import AluExp, AluOp, DType, ShapeTracker, to_numpy
from jaxcore.backend import Backend
from jaxcore.fusion import Fused, FusedReduce, Lowered, detect_matmul, indices

F32 = DType.float32


@pytest.fixture(scope="module")
def backend() -> Backend:
    return jaxcore.get_backend("cpu")


def put(backend: Backend, a: np.ndarray) -> int:
    a = np.ascontiguousarray(a)
    return int(backend.malloc(a.nbytes, a.tobytes()))


def run(backend: Backend, value: Fused | FusedReduce) -> np.ndarray:
    kernel, inputs = value.kernel()
    out = backend.malloc(kernel.bytes)
    backend.dispatch(backend.prepare_kernel(kernel), list(inputs), [out])
    got = np.frombuffer(backend.read(out), to_numpy(kernel.dtype)).reshape(value.shape).copy()
    backend.dec_ref(out)
    return got


X = np.arange(24, dtype=np.float32).reshape(4, 6) / 7 - 1

MOVES: list[tuple[str, Callable[[Fused], Fused], Callable[[np.ndarray], np.ndarray]]] = [
    ("permute", lambda f: f.permute((1, 0)), lambda a: a.T),
    ("flip", lambda f: f.flip((0, 1)), lambda a: a[::-1, ::-1]),
    ("flip-neg", lambda f: f.flip((-1,)), lambda a: a[:, ::-1]),
    ("pad", lambda f: f.pad(((1, 2), (0, 3))), lambda a: np.pad(a, ((1, 2), (0, 3)))),
    ("shrink", lambda f: f.shrink(((1, 3), (2, 5))), lambda a: a[1:3, 2:5]),
    (
        "expand",
        lambda f: f.reshape((4, 1, 6)).expand((4, 3, 6)),
        lambda a: np.broadcast_to(a[:, None], (4, 3, 6)),
    ),
    (
        "reshapes",
        lambda f: f.reshape((3, 8)).permute((1, 0)).reshape((2, 12)),
        lambda a: a.reshape(3, 8).T.reshape(2, 12),
    ),
    (
        "pad-flip-shrink",
        lambda f: f.pad(((2, 0), (1, 1))).flip((0,)).shrink(((1, 5), (0, 7))),
        lambda a: np.pad(a, ((2, 0), (1, 1)))[::-1][1:5, :7],
    ),
    (
        "pad-reshape",
        lambda f: f.pad(((0, 0), (0, 2))).reshape((32,)),
        lambda a: np.pad(a, ((0, 0), (0, 2))).reshape(32),
    ),
    ("to-0d", lambda f: f.shrink(((2, 3), (4, 5))).reshape(()), lambda a: a[2, 4]),
]


@pytest.mark.parametrize("name", [m[0] for m in MOVES])
def test_moves_of_a_read_and_of_an_expression(backend: Backend, name: str) -> None:
    _, move, ref = next(m for m in MOVES if m[0] == name)
    x = Fused.read(put(backend, X), F32, X.shape)
    np.testing.assert_array_equal(run(backend, move(x)), ref(X))
    # exp(x) + column index: the read takes the movement into its view, the iota is rewritten,
    # and a pad masks the whole expression (exp(0) + j is not 0)
    expr = Fused.map(lambda a, j: AluExp.exp(a) + AluExp.cast(F32, j), x, Fused.iota(X.shape, 1))
    want = ref(np.exp(X.astype(np.float64)) + np.arange(6))
    np.testing.assert_allclose(run(backend, move(expr)), want, rtol=1e-6)


def test_a_moved_read_stays_one_read_through_its_view(backend: Backend) -> None:
    x = Fused.read(put(backend, X), F32, X.shape)
    moved = x.pad(((1, 0), (0, 0))).permute((1, 0)).flip((0,))
    assert moved.exp.op == AluOp.GlobalView and moved.exp.src == indices(moved.shape)
    assert moved.exp.arg[1] == ShapeTracker.from_shape(X.shape).pad(((1, 0), (0, 0))).permute((1, 0)).flip(
        (True, False)
    )


def test_the_same_buffer_is_one_input(backend: Backend) -> None:
    slot = put(backend, X[:, :4].copy())
    a = Fused.read(slot, F32, (4, 4))
    y = Fused.map(AluExp.sub, a, a.permute((1, 0)))
    kernel, inputs = y.kernel()
    assert kernel.nargs == 1 and inputs == (slot,)
    np.testing.assert_array_equal(run(backend, y), X[:, :4] - X[:, :4].T)


def test_inputs_are_renumbered_in_order_of_first_use(backend: Backend) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=(3, 5)).astype(np.float32) for _ in range(3)]
    s0, s1, s2 = (put(backend, a) for a in arrays)
    r0, r1, r2 = (Fused.read(s, F32, (3, 5)) for s in (s0, s1, s2))
    left = Fused.map(AluExp.mul, r1, r2)  # inputs (s1, s2)
    right = Fused.map(AluExp.sub, r2, r0)  # inputs (s2, s0)
    y = Fused.map(AluExp.add, left, right)
    assert y.inputs == (s1, s2, s0)
    a0, a1, a2 = arrays
    np.testing.assert_allclose(run(backend, y), a1 * a2 + (a2 - a0), rtol=1e-6)


def test_reduction_with_an_epilogue_reading_another_buffer(backend: Backend) -> None:
    rng = np.random.default_rng(2)
    x, w, b = rng.normal(size=(6, 7)), rng.normal(size=(7, 5)), rng.normal(size=5)
    x, w, b = (a.astype(np.float32) for a in (x, w, b))
    fx, fw, fb = Fused.read(put(backend, x), F32, x.shape), Fused.read(put(backend, w), F32, w.shape), None
    fb = Fused.read(put(backend, b), F32, b.shape)
    items = Fused.map(
        AluExp.mul,
        fx.reshape((6, 1, 7)).expand((6, 5, 7)),
        fw.permute((1, 0)).reshape((1, 5, 7)).expand((6, 5, 7)),
    )
    y = items.reduce(AluOp.Add, 2).map(
        lambda acc, bias: AluExp.max(acc + bias, 0.0), fb.reshape((1, 5)).expand((6, 5))
    )
    kernel, inputs = y.kernel()
    assert kernel.nargs == 3 and len(inputs) == 3
    assert detect_matmul(kernel) is not None  # the devices' GEMM path sees it
    np.testing.assert_allclose(run(backend, y), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("op", [AluOp.Add, AluOp.Max, AluOp.Min, AluOp.Mul])
def test_reduce_any_axis(backend: Backend, axis: int, op: AluOp) -> None:
    x = np.random.default_rng(3).uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    f = Fused.read(put(backend, x), F32, x.shape)
    fold = {AluOp.Add: np.sum, AluOp.Max: np.max, AluOp.Min: np.min, AluOp.Mul: np.prod}[op]
    np.testing.assert_allclose(run(backend, f.reduce(op, axis)), fold(x, axis=axis), rtol=1e-5)


def test_epilogue_shares_the_bodys_buffer_and_reduces_to_a_scalar(backend: Backend) -> None:
    x = np.random.default_rng(4).normal(size=(8, 16)).astype(np.float32)
    f = Fused.read(put(backend, x), F32, x.shape)
    row_max = f.reduce(AluOp.Max, 1)
    # softmax denominator with the max fused into the body: sum_j exp(x - max) per row, one input
    shifted = Fused.map(
        lambda a, m: AluExp.exp(a - m),
        f,
        Fused.read(put(backend, x.max(1)), F32, (8,)).reshape((8, 1)).expand((8, 16)),
    )
    denom = shifted.reduce(AluOp.Add, 1).map(AluExp.log)
    np.testing.assert_allclose(run(backend, row_max), x.max(1))
    np.testing.assert_allclose(
        run(backend, denom), np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)), rtol=1e-5, atol=1e-6
    )
    total = (
        f.reshape((128,))
        .reduce(AluOp.Add, 0)
        .map(lambda acc, first: acc - first, f.shrink(((0, 1), (0, 1))).reshape(()))
    )
    assert total.shape == ()
    np.testing.assert_allclose(run(backend, total), x.sum() - x[0, 0], rtol=1e-5, atol=1e-5)


def test_float16_sums_in_float32(backend: Backend) -> None:
    x = np.full(4096, 1.0, np.float16)
    f = Fused.read(put(backend, x), DType.float16, x.shape)
    assert run(backend, f.reduce(AluOp.Add, 0)) == np.float16(4096)  # a float16 running sum stops at 2048


def test_full_and_iota(backend: Backend) -> None:
    causal = Fused.map(
        lambda i, j: AluExp.where(AluExp.cmplt(i, j), AluExp.f32(-np.inf), AluExp.f32(0)),
        Fused.iota((3, 3), 0),
        Fused.iota((3, 3), 1),
    )
    np.testing.assert_array_equal(run(backend, causal), np.where(np.triu(np.ones((3, 3)), 1) > 0, -np.inf, 0))
    seven = Fused.full((2, 2), 7, DType.int32).pad(((1, 0), (0, 1)))
    np.testing.assert_array_equal(run(backend, seven), np.pad(np.full((2, 2), 7), ((1, 0), (0, 1))))


def test_rebuilding_returns_the_same_kernel() -> None:
    def program() -> Lowered:
        x, w = Fused.read("x", F32, (8, 3)), Fused.read("w", F32, (3, 4))
        items = Fused.map(
            AluExp.mul,
            x.reshape((8, 1, 3)).expand((8, 4, 3)),
            w.permute((1, 0)).reshape((1, 4, 3)).expand((8, 4, 3)),
        )
        return items.reduce(AluOp.Add, 2).map(lambda acc: AluExp.max(acc, 0.0)).kernel()

    first, second = program(), program()
    assert second.kernel is first.kernel and second.inputs == ("x", "w")
    renamed = Fused.read("y", F32, (8, 3))  # other buffers, same program: the same kernel
    assert (
        Fused.map(AluExp.exp, renamed).kernel().kernel
        is Fused.map(AluExp.exp, Fused.read("x", F32, (8, 3))).kernel().kernel
    )


def test_threads_build_the_same_programs() -> None:
    keys: list[str] = []
    start = threading.Barrier(6)

    def work(n: int) -> None:
        start.wait()
        for i in range(20):
            x = Fused.read("x", F32, (n, 4 + i % 3))
            keys.append(Fused.map(AluExp.sqrt, x.permute((1, 0)).flip((0,))).kernel().kernel.key())

    threads = [threading.Thread(target=work, args=(2 + t % 2,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 120 and len(set(keys)) == 6


def test_mistakes_are_named() -> None:
    x = Fused.read("x", F32, (4, 6))
    with pytest.raises(ValueError, match="differ in shape"):
        Fused.map(AluExp.add, x, x.permute((1, 0)))
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape((5, 5))
    with pytest.raises(ValueError, match="cannot expand"):
        x.expand((4, 7))
    with pytest.raises(ValueError, match="invalid permutation"):
        x.permute((0, 0))
    with pytest.raises(ValueError, match="invalid shrink"):
        x.shrink(((0, 5), (0, 6)))
    with pytest.raises(ValueError, match="invalid pad"):
        x.pad(((0, -1), (0, 0)))
    with pytest.raises(ValueError, match="only Add, Mul, Min and Max"):
        x.reduce(AluOp.Sub, 0)
    with pytest.raises(ValueError, match="0-d"):
        x.reshape((24,)).reduce(AluOp.Add, 0).epilogue.reduce(AluOp.Add, 0)
    with pytest.raises(TypeError, match="must return an AluExp"):
        Fused.map(lambda a: 1.0, x)  # type: ignore[arg-type, return-value]
    stray = Fused((4, 6), x.exp + AluExp.cast(F32, indices((9,))[0]), x.inputs)
    with pytest.raises(ValueError, match="another shape"):
        stray.kernel()


def test_view_and_source_say_what_a_value_reads() -> None:
    x = Fused.read("x", F32, (4, 6))
    assert x.source == "x" and x.view == ShapeTracker.from_shape((4, 6))
    t = x.permute((1, 0))
    assert t.source is None and t.view == ShapeTracker.from_shape((4, 6)).permute((1, 0))
    assert Fused.map(AluExp.exp, x).view is None and Fused.map(AluExp.exp, x).source is None
    assert x.shrink(((0, 2), (0, 6))).source == "x"  # a prefix of the buffer: row-major from its start
    assert x.shrink(((1, 3), (0, 6))).source is None


def test_repeated_moves_are_told_apart(backend: Backend) -> None:
    """A movement seen before is a lookup; flip's axes (0, 1) must not be taken for its flags
    (False, True), which compare equal in Python."""
    x = Fused.read(put(backend, X), F32, X.shape)
    for _ in range(2):
        np.testing.assert_array_equal(run(backend, x.flip((0, 1))), X[::-1, ::-1])
        np.testing.assert_array_equal(run(backend, x.flip((1,))), X[:, ::-1])
        np.testing.assert_array_equal(run(backend, x.flip([1])), X[:, ::-1])
        np.testing.assert_array_equal(run(backend, x.pad([(1, 0), (0, 1)])), np.pad(X, ((1, 0), (0, 1))))
        np.testing.assert_array_equal(run(backend, x.pad(((1, 0), [0, 1]))), np.pad(X, ((1, 0), (0, 1))))
