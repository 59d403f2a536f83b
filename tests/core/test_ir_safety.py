"""Issue 8's IR items, end to end on every in-tree device: wrap-around, depth, ill-typed nodes.

Each case failed before its fix: the simplifier folded wrapping int32/uint32 arithmetic as if
it were exact (wrong answers, an out-of-bounds read), a few hundred nested nodes raised
RecursionError (or prepared on cpu and then failed at dispatch), and ill-typed nodes were
accepted and then failed deep in LLVM on wasm while cpu computed something.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.dtype import DType, to_numpy
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker

A = AluExp
g = AluVar.gidx
N = 64


@pytest.fixture(scope="module", params=["cpu", "wasm"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "cpu":
        from jaxcore_cpu.backend import CpuBackend

        return CpuBackend()
    from jaxcore_wasm.backend import WasmBackend

    return WasmBackend(threads=1)


def run(backend: Backend, kernel: Kernel, inputs: list[np.ndarray]) -> np.ndarray:
    slots = [backend.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = backend.malloc(max(kernel.bytes, 4))
    backend.dispatch(backend.prepare_kernel(kernel), slots, [out])
    got = np.frombuffer(backend.read(out), to_numpy(kernel.dtype))[: kernel.size].copy()
    for s in (*slots, out):
        backend.dec_ref(s)
    return got


# ---- 1. int32/uint32 wrap ------------------------------------------------------------------------

lanes = np.arange(N, dtype=np.int64)


def wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + 2**31) % 2**32 - 2**31).astype(np.int32)


def c_div(a: np.ndarray, b: int) -> np.ndarray:
    return np.sign(a) * (np.abs(a) // abs(b)) * np.sign(b)


def c_mod(a: np.ndarray, b: int) -> np.ndarray:
    return a - c_div(a, b) * b


WRAP_CASES = {
    # gidx * 2^30 wraps negative for odd gidx: it was folded to false.
    "mul_wraps_negative": (
        A.cmplt(g * A.i32(2**30), A.i32(0)),
        wrap32(lanes * 2**30) < 0,
    ),
    # uint32(gidx) - 5 wraps to huge for gidx < 5: it was folded to true.
    "uint32_sub_wraps": (
        A.cmplt(A.cast(DType.uint32, g) - A.u32(5), A.u32(64)),
        ((lanes - 5) % 2**32) < 64,
    ),
    # Truncating division of a wrapped product is not the product of the divided factor.
    "idiv_of_wrapped_mul": (
        A.idiv(g * A.i32(6 << 27), A.i32(3)),
        c_div(wrap32(lanes * (6 << 27)).astype(np.int64), 3),
    ),
    # (x*A + y) % B with B | A only holds while x*A + y does not wrap (and B does not divide 2^32).
    "uint32_mod_of_wrapped_sum": (
        A.mod(A.cast(DType.uint32, g) * A.u32(3 << 30) + A.u32(1), A.u32(3)),
        ((lanes * (3 << 30) + 1) % 2**32) % 3,
    ),
    "wrapped_sum_compared": (
        A.cmplt(g + A.i32(2**31 - 40), A.i32(0)),
        wrap32(lanes + 2**31 - 40) < 0,
    ),
}


@pytest.mark.parametrize("name", list(WRAP_CASES))
def test_wrapping_arithmetic_is_not_folded_as_exact(backend: Backend, name: str) -> None:
    exp, expected = WRAP_CASES[name]
    got = run(backend, Kernel(0, N, exp), [])
    np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype), err_msg=str(exp))


def test_index_in_bounds_by_construction_stays_in_bounds(backend: Backend) -> None:
    # ((gidx * 2^29 + 5) / 3 % 5 + 5) % 5 is in [0, 5) for every int32 value of the sum; the
    # simplifier used to split 5 = 3 + 2 out of a sum that wraps, reading out of bounds.
    w = A.idiv(g * A.i32(2**29) + A.i32(5), A.i32(3))
    index = A.mod(A.mod(w, A.i32(5)) + A.i32(5), A.i32(5))
    data = np.arange(10, 15, dtype=np.float32)
    got = run(backend, Kernel(1, N, A.global_index(DType.float32, 0, 5, index)), [data])
    wv = c_div(wrap32(lanes * 2**29 + 5).astype(np.int64), 3)
    expected = data[c_mod(c_mod(wv, 5) + 5, 5)]
    np.testing.assert_array_equal(got, expected)


# ---- 6. depth ----------------------------------------------------------------------------------------


def float_chain(depth: int) -> tuple[AluExp, np.ndarray]:
    """x -> x * 0.75 + 1 -> ... read from input 0: depth-many float32 ops, each rounding."""
    x = A.global_index(DType.float32, 0, N, g)
    data = np.linspace(-3, 3, N).astype(np.float32)
    ref = data.copy()
    for i in range(depth):
        c = float(np.float32(1 + (i % 7) / 8))
        x = x * A.f32(0.75) + A.f32(c) if i % 2 == 0 else A.max(x - A.f32(c), A.f32(-50.0))
        c32 = np.float32(c)
        ref = ref * np.float32(0.75) + c32 if i % 2 == 0 else np.maximum(ref - c32, np.float32(-50))
    return x, (data, ref)


def int_chain(depth: int) -> AluExp:
    """An int32 chain that wraps on the way: gidx -> (x * 3 + 2^30) ^ gidx ... (mod 2^32)."""
    x = g
    for i in range(depth):
        x = A.bit_xor(x * A.i32(3) + A.i32(2**30 + i), g) if i % 3 else A.idiv(x, A.i32(7)) + g
    return x


def int_chain_ref(depth: int) -> np.ndarray:
    x = lanes.copy()
    for i in range(depth):
        x = wrap32(x * 3 + 2**30 + i).astype(np.int64) ^ lanes if i % 3 else c_div(x, 7) + lanes
        x = wrap32(x).astype(np.int64)
    return x.astype(np.int32)


def test_deep_expression_ir_traversals() -> None:
    depth = 10_000
    e = int_chain(depth)
    assert e.key() == int_chain(depth).key() and hash(e) == hash(int_chain(depth))
    assert len(list(e.nodes())) > depth
    text = str(e)
    assert text.count("^") == sum(1 for i in range(depth) if i % 3)
    s = e.substitute({"gidx": A.special(DType.int32, "gidx", N)})
    assert s.simplify().evaluate({"gidx": 5}) == e.evaluate({"gidx": 5}) == int_chain_ref(depth)[5]
    assert s.vmin <= int_chain_ref(depth).min() and int_chain_ref(depth).max() <= s.vmax
    reads = A.global_view(DType.float32, 0, ShapeTracker.from_shape((N,)), [A.mod(e, A.i32(N))])
    lowered = (reads + A.f32(1)).rewrite_global_views()
    assert lowered.some(lambda n: n.op == AluOp.GlobalIndex)


@pytest.mark.parametrize("depth", [300, 10_000])
def test_deep_kernels_prepare_and_dispatch(backend: Backend, depth: int) -> None:
    float_depth = int_depth = depth
    if backend.name == "wasm" and depth > 2000:
        # wasm's compile time grows faster than linearly with kernel size (another item of issue 8).
        float_depth, int_depth = 2000, 1000
    exp, (data, ref) = float_chain(float_depth)
    got = run(backend, Kernel(1, N, exp), [data])
    np.testing.assert_array_equal(got, ref)
    got = run(backend, Kernel(0, N, int_chain(int_depth)), [])
    np.testing.assert_array_equal(got, int_chain_ref(int_depth))


def test_deep_reduction_epilogue(backend: Backend) -> None:
    depth = 2000
    epi = AluVar.acc(DType.int32)
    for i in range(depth):
        epi = epi + A.i32(i % 5 - 2) if i % 2 else epi * A.i32(3)
    red = Reduction(DType.int32, AluOp.Add, 4, epi)
    got = run(backend, Kernel(0, 8, g + AluVar.ridx, red), [])
    acc = np.arange(8, dtype=np.int64) * 4 + 6
    for i in range(depth):
        acc = wrap32(acc + (i % 5 - 2) if i % 2 else acc * 3).astype(np.int64)
    np.testing.assert_array_equal(got, acc.astype(np.int32))


# ---- 7. ill-typed nodes are rejected when built --------------------------------------------------

i, f, u, b = A.i32(1), A.f32(1), A.u32(1), A.bool_(True)
read_i = A.global_index(DType.int32, 0, 4, A.i32(0))

ILL_TYPED = [
    (lambda: A.where(b, f, i), "Where -> float32 takes two branches of its own dtype.*bool, float32, int32"),
    (lambda: A.where(i, f, f), "Where -> float32 needs a bool condition.*int32"),
    (lambda: A.global_index(DType.float32, 0, 4, f), "GlobalIndex -> float32 needs an int32 or uint32 index"),
    (lambda: A.global_index(DType.float32, 0, 4, b), "GlobalIndex"),
    (lambda: A.add(i, f), "Add -> int32 takes two operands of its own dtype.*int32, float32"),
    (lambda: A.mul(f, u), "Mul -> float32"),
    (lambda: A.idiv(u, i), "Idiv -> uint32"),
    (lambda: A.mod(read_i, f), "Mod"),
    (lambda: A.min(b, i), "Min"),
    (lambda: A.max(f, A.f64(1)), "Max"),
    (lambda: A.sub(i, u), "Sub"),
    (lambda: A.cmplt(i, f), "Cmplt -> bool compares two operands of one dtype.*int32, float32"),
    (lambda: A.cmpne(u, i), "Cmpne"),
    (lambda: AluExp(AluOp.Cmplt, DType.int32, (i, i)), "Cmplt produces bool, not int32"),
    (lambda: AluExp(AluOp.Add, DType.float32, (i, i)), "Add -> float32"),
    (lambda: AluExp(AluOp.Sin, DType.float32, (A.f64(1),)), "Sin -> float32 produces its operand's dtype"),
    (lambda: AluExp(AluOp.Where, DType.int32, (b, f, f)), "Where -> int32"),
    (lambda: AluExp(AluOp.BitCombine, DType.uint32, (i, i), "and"), "BitCombine -> uint32"),
    (lambda: AluExp(AluOp.BitShift, DType.uint32, (i, u), "shl"), "BitShift -> uint32"),
    (lambda: A.shl(i, b), "BitShift\\[shl\\] requires two integral, non-bool dtypes"),
    (lambda: A.bit_or(i, u), "BitCombine\\[or\\] requires matching integral dtype"),
    (lambda: A.sqrt(i), "Unsupported dtype for Sqrt: int32"),
    (lambda: AluExp(AluOp.Floor, DType.int32, (i,)), "Unsupported dtype for Floor"),
    (lambda: A.threefry2x32(u, u, u, i), "Threefry2x32 requires uint32"),
    (lambda: AluExp(AluOp.Const, DType.int32, (), 2**40), "Const 1099511627776 is not a value of int32"),
    (lambda: AluExp(AluOp.Const, DType.int32, (), 1.5), "Const 1.5 is not a value of int32"),
    (lambda: AluExp(AluOp.Const, DType.uint32, (), -1), "Const -1 is not a value of uint32"),
    (lambda: AluExp(AluOp.Const, DType.bool, (), 2), "Const 2 is not a value of bool"),
    (lambda: A.special(DType.float32, "gidx", 4), "Special needs an integer dtype"),
    (lambda: AluExp(AluOp.Special, DType.int32, (), ("gidx", -1)), "Special"),
    (lambda: AluExp(AluOp.Variable, DType.int32, (), 3), "Variable needs a name"),
    (
        lambda: A.global_view(DType.float32, 0, ShapeTracker.from_shape((4,)), [u]),
        "GlobalView -> float32 needs int32 indices",
    ),
    (lambda: AluExp(AluOp.Add, DType.int32, (i, 1)), "Add operands must be AluExp, got int"),
]


@pytest.mark.parametrize(
    "build,message", ILL_TYPED, ids=[f"{m.split(' ')[0]}-{k}" for k, (_, m) in enumerate(ILL_TYPED)]
)
def test_ill_typed_nodes_are_rejected_when_built(build, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        build()


def test_well_typed_mixtures_still_build() -> None:
    # Python numbers take the other operand's dtype; BitShift counts may be either integer type.
    assert A.add(f, 2).src[1].dtype == DType.float32 and A.cmplt(3, u).src[0].dtype == DType.uint32
    assert A.where(b, 1.5, f).dtype == DType.float32
    assert A.shl(u, i).dtype == DType.uint32 and A.shr(i, u).dtype == DType.int32
    assert A.add(b, b).dtype == DType.bool and A.global_index(DType.float32, 0, 4, u).dtype == DType.float32
    assert A.cast(DType.float32, b).dtype == DType.float32 and A.bitcast(DType.int32, f).dtype == DType.int32
