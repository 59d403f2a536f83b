"""Every ALU op in every dtype, on edge values, against numpy/Python (`oracle`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle, values
from jaxcore.conformance.harness import (
    BINARY_BUILDERS,
    UNARY_BUILDERS,
    assert_close,
    map_kernel,
    run_kernel,
    skip_if_undeclared,
)
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel

DTYPES = [str(d) for d in DType]
FLOATS = list(oracle.FLOATS)
INTS = list(oracle.INTS)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [str(op) for op in BINARY_BUILDERS])
def test_binary(backend: Backend, op: str, dtype: str) -> None:
    """All pairs of edge values: wrap, C-style idiv/mod, x/0, INT_MIN/-1, NaN-propagating min/max."""
    a, b = values.pairs(values.arith(dtype), values.arith(dtype))
    kernel = map_kernel([dtype, dtype], len(a), BINARY_BUILDERS[AluOp(op)])
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [a, b])
    assert_close(got, oracle.binary(op, a, b, dtype), op, dtype, backend, inputs=[a, b])


@pytest.mark.parametrize("dtype", FLOATS)
def test_true_division(backend: Backend, dtype: str) -> None:
    """Div: IEEE division, correctly rounded (numpy's bits), on all pairs of edge values (x/0 is
    +-inf, 0/0 NaN) and on random bit patterns, a third of them with quotients among the
    subnormals, where a quotient rounded once and then scaled would be a subnormal ulp off."""
    a, b = values.pairs(values.arith(dtype), values.arith(dtype))
    rng = np.random.default_rng(11)
    width = {"float16": 16, "float32": 32, "float64": 64}[dtype]
    utype = np.dtype(f"<u{width // 8}")
    ra, rb = (
        rng.integers(0, 2**width - 1, 3000, dtype=np.uint64).astype(utype).view(oracle.storage(dtype))
        for _ in "ab"
    )
    tiny = np.finfo(oracle.storage(dtype)).tiny
    ra[:1000] = (rng.random(1000) - 0.5) * np.float64(tiny) * 64
    rb[:1000] = rng.random(1000) * 64 + 1
    a = np.concatenate([a, ra]).astype(oracle.storage(dtype))
    b = np.concatenate([b, rb]).astype(oracle.storage(dtype))
    kernel = map_kernel([dtype, dtype], len(a), AluExp.div)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [a, b])
    assert_close(got, oracle.binary("Div", a, b, dtype), "Div", dtype, backend, inputs=[a, b])


@pytest.mark.parametrize("dtype", [*INTS, "bool"])
@pytest.mark.parametrize("mode", ["and", "or", "xor"])
def test_bit_combine(backend: Backend, mode: str, dtype: str) -> None:
    a, b = values.pairs(values.arith(dtype), values.arith(dtype))
    fn = {"and": AluExp.bit_and, "or": AluExp.bit_or, "xor": AluExp.bit_xor}[mode]
    kernel = map_kernel([dtype, dtype], len(a), fn)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [a, b])
    assert_close(got, oracle.binary(mode, a, b, dtype), "BitCombine", dtype, backend, inputs=[a, b])


def test_bit_combine_vectors(backend: Backend) -> None:
    """jax-js' uint32 vectors: the high bit set in every operand."""
    a = np.array([0xFF00FF00, 0x0F0F0F0F, 0xAAAAAAAA, 7], np.uint32)
    b = np.array([0x00FF00FF, 0xF0F0F0F0, 0x55555555, 3], np.uint32)
    for fn, want in (
        (AluExp.bit_and, [0, 0, 0, 3]),
        (AluExp.bit_or, [0xFFFFFFFF] * 3 + [7]),
        (AluExp.bit_xor, [0xFFFFFFFF] * 3 + [4]),
    ):
        kernel = map_kernel(["uint32", "uint32"], 4, fn)
        skip_if_undeclared(backend, kernel)
        assert_close(
            run_kernel(backend, kernel, [a, b]), np.array(want, np.uint32), "BitCombine", "uint32", backend
        )


@pytest.mark.parametrize("count_dtype", INTS)
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("mode", ["shl", "shr"])
def test_bit_shift(backend: Backend, mode: str, dtype: str, count_dtype: str) -> None:
    """Counts mod 32 (>= 32 and negative ones too); shr is arithmetic on int32, logical on uint32."""
    a, c = values.pairs(values.arith(dtype), oracle.array(values.SHIFT_COUNTS, count_dtype))
    fn = AluExp.shl if mode == "shl" else AluExp.shr
    kernel = map_kernel([dtype, count_dtype], len(a), fn)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [a, c])
    assert_close(got, oracle.shift(mode, a, c, dtype), "BitShift", dtype, backend, inputs=[a, c])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["Cmplt", "Cmpne"])
def test_compare(backend: Backend, op: str, dtype: str) -> None:
    """NaN compares unequal and not less; uint32 compares unsigned; the result is bool 0/1."""
    a, b = values.pairs(values.arith(dtype), values.arith(dtype))
    kernel = map_kernel([dtype, dtype], len(a), AluExp.cmplt if op == "Cmplt" else AluExp.cmpne)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [a, b])
    assert_close(got, oracle.compare(op, a, b, dtype), op, "bool", backend, inputs=[a, b])


@pytest.mark.parametrize("dtype", DTYPES)
def test_where(backend: Backend, dtype: str) -> None:
    """Where picks per element and passes NaN, -0 and bit patterns through untouched."""
    vals = values.arith(dtype)
    a, b = vals, vals[::-1].copy()
    cond = (np.arange(len(a)) % 3 == 0).astype(np.int32)
    kernel = map_kernel(["bool", dtype, dtype], len(a), AluExp.where)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [cond, a, b])
    assert_close(got, np.where(cond != 0, a, b), "Where", dtype, backend, inputs=[cond, a, b])


@pytest.mark.parametrize("dtype", DTYPES)
def test_where_on_nan_test(backend: Backend, dtype: str) -> None:
    """`where(x != x, 0, x)` after fusion (jax-js issue #85: GPU compilers drop NaN tests)."""
    x = values.arith(dtype)
    kernel = map_kernel(
        [dtype], len(x), lambda v: AluExp.where(AluExp.cmpne(v, v), AluExp.const(v.dtype, 0), v)
    )
    skip_if_undeclared(backend, kernel)
    want = np.where(np.isnan(x), 0, x).astype(x.dtype) if oracle.is_float(dtype) else x
    assert_close(run_kernel(backend, kernel, [x]), want, "Where", dtype, backend, inputs=[x])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", [str(op) for op in UNARY_BUILDERS])
def test_unary(backend: Backend, op: str, dtype: str) -> None:
    """Float unary ops over their domain plus NaN, ±Inf, ±0 and denormals (tolerances.py)."""
    x = values.unary_domain(op, dtype)
    kernel = map_kernel([dtype], len(x), UNARY_BUILDERS[AluOp(op)])
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert_close(got, oracle.unary(op, x, dtype), op, dtype, backend, inputs=[x])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_unary_of_a_rounded_product(backend: Backend, op: str, dtype: str) -> None:
    """sin/cos of x * y take the rounded product: fused into the argument reduction x - k pi/2,
    the unrounded one moves a large argument by up to half its ulp (2.4e-4 at 7535 in float32)."""
    rng = np.random.default_rng(7535)
    hi = {"float16": 2000.0, "float32": 8000.0, "float64": 8000.0}[dtype]
    x = oracle.array(rng.uniform(-hi, hi, 256), dtype)
    y = oracle.array(rng.uniform(0.9, 1.1, 256), dtype)
    kernel = map_kernel([dtype, dtype], 256, lambda a, b: UNARY_BUILDERS[AluOp(op)](AluExp.mul(a, b)))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x, y])
    want = oracle.unary(op, oracle.binary("Mul", x, y, dtype), dtype)
    assert_close(got, want, op, dtype, backend, inputs=[x, y], what=f"{op}(x * y)")


THREEFRY_VECTORS = [
    ((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0x13198A2E, 0x03707344, 0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ((0xFFFFFFFF,) * 4, (0x1CB996FC, 0xBB002BE7)),
]


def test_threefry_oracle_matches_known_vectors() -> None:
    """The suite's own Threefry reproduces the Random123 known-answer vectors (no device involved)."""
    for args, want in THREEFRY_VECTORS:
        assert oracle.threefry2x32_pair(*args) == want


@pytest.mark.parametrize("mode", ["xor", 0, 1])
def test_threefry2x32(backend: Backend, mode: str | int) -> None:
    """Bit-exact against the known-answer vectors and the Python oracle on varied keys/counters."""
    rng = np.random.default_rng(7)
    known = np.array([a for a, _ in THREEFRY_VECTORS], np.uint32)
    rand = rng.integers(0, 2**32, size=(61, 4), dtype=np.uint64).astype(np.uint32)
    args = np.concatenate([known, rand]).T.copy()
    kernel = map_kernel(
        ["uint32"] * 4, args.shape[1], lambda k0, k1, c0, c1: AluExp.threefry2x32(k0, k1, c0, c1, mode=mode)
    )
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, list(args))
    want = oracle.threefry2x32(args[0], args[1], args[2], args[3], mode=mode)
    for i, (_, (x0, x1)) in enumerate(THREEFRY_VECTORS):
        assert int(want[i]) == (x0 ^ x1 if mode == "xor" else (x0 if mode == 0 else x1))
    assert_close(got, want, "Threefry2x32", "uint32", backend, inputs=list(args))


@pytest.mark.parametrize("dtype", DTYPES)
def test_constants(backend: Backend, dtype: str) -> None:
    """Constants keep their exact value through codegen: -0, NaN, ±Inf, denormals, int limits."""
    vals = values.arith(dtype)
    exp = AluExp.const(DType(dtype), vals[-1].item())
    for i in range(len(vals) - 2, -1, -1):
        exp = AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(i + 1)), AluExp.const(DType(dtype), vals[i].item()), exp
        )
    kernel = Kernel(0, len(vals), exp)
    skip_if_undeclared(backend, kernel)
    assert_close(run_kernel(backend, kernel, []), vals, "Const", dtype, backend)


@pytest.mark.parametrize("dtype", FLOATS)
def test_constant_operands(backend: Backend, dtype: str) -> None:
    """An op with a constant operand: x + (-0) keeps -0, x * 1 keeps NaN, x - Inf, x * 0."""
    x = values.arith(dtype)
    for op, c in (
        ("Add", -0.0),
        ("Mul", 1.0),
        ("Sub", np.inf),
        ("Mul", 0.0),
        ("Max", -np.inf),
        ("Idiv", 0.0),
    ):
        kernel = map_kernel(
            [dtype], len(x), lambda v, op=op, c=c: BINARY_BUILDERS[AluOp(op)](v, AluExp.const(v.dtype, c))
        )
        skip_if_undeclared(backend, kernel)
        want = oracle.binary(op, x, oracle.array([c] * len(x), dtype), dtype)
        assert_close(
            run_kernel(backend, kernel, [x]), want, op, dtype, backend, inputs=[x], what=f"x {op} {c}"
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_cast(backend: Backend, dtype: str) -> None:
    """A nullary kernel over the output index: cast(gidx) for 200 elements (jax-js backend test 5)."""
    kernel = Kernel(0, 200, AluExp.cast(DType(dtype), AluVar.gidx))
    skip_if_undeclared(backend, kernel)
    want = oracle.cast(np.arange(200, dtype=np.int32), "int32", dtype)
    assert_close(run_kernel(backend, kernel, []), want, "Cast", dtype, backend)


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_buffer_read_three_times(backend: Backend, dtype: str) -> None:
    """One input read three times in one expression (a + a + a)."""
    x = oracle.array([1, 2, 3, 0, 1], dtype)
    kernel = Kernel(1, 5, AluExp.add(AluExp.add(_g(dtype), _g(dtype)), _g(dtype)))
    skip_if_undeclared(backend, kernel)
    want = oracle.binary("Add", oracle.binary("Add", x, x, dtype), x, dtype)
    assert_close(run_kernel(backend, kernel, [x]), want, "Add", dtype, backend, inputs=[x])


def _g(dtype: str) -> AluExp:
    return AluExp.global_index(DType(dtype), 0, 5, AluVar.gidx)


@pytest.mark.parametrize("n", [(1 << 17) + 3, 1 << 18])
def test_large_elementwise(backend: Backend, n: int) -> None:
    """Sizes past one thread/workgroup/SIMD block, with a ragged tail: a fused multiply-add per element."""
    rng = np.random.default_rng(n)
    a = rng.integers(-1000, 1000, n).astype(np.float32)
    b = rng.integers(-1000, 1000, n).astype(np.float32)
    kernel = map_kernel(["float32", "float32"], n, lambda x, y: AluExp.add(AluExp.mul(x, y), x))
    skip_if_undeclared(backend, kernel)
    assert_close(run_kernel(backend, kernel, [a, b]), a * b + a, "Add", "float32", backend)
    xi = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    ki = map_kernel(["int32"], n, lambda x: AluExp.add(AluExp.mul(x, AluExp.i32(3)), AluVar.gidx))
    skip_if_undeclared(backend, ki)
    want = ((xi.astype(np.int64) * 3 + np.arange(n)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    assert_close(run_kernel(backend, ki, [xi]), want, "Add", "int32", backend)


PER_OP: dict[str, tuple[list[float], list[float], list[float]]] = {
    # (x op1 y) op2 z, each op rounded/wrapped in the dtype; a fused or wider evaluation differs.
    "float16": ([300.0, 1.0, 2048.0, 0.1], [300.0, 2048.0, 1.0, 3.0], [60000.0, 2048.0, 2048.0, 0.3]),
    "float32": ([1e30, 1.0, 16777216.0, 0.1], [1e10, 1e8, 1.0, 3.0], [1e38, 1e8, 16777216.0, 0.3]),
    "float64": ([1e300, 1.0, 2.0**53, 0.1], [1e10, 1e17, 1.0, 3.0], [1e308, 1e17, 2.0**53, 0.3]),
    "int32": ([65536, 2**31 - 1, -(2**31), 46341], [65536, 2, -1, 46341], [2, 3, 7, 5]),
    "uint32": ([65536, 2**32 - 1, 3, 0x80000000], [65536, 2, 5, 2], [2, 3, 7, 5]),
}


@pytest.mark.parametrize("dtype", list(PER_OP))
def test_per_op_rounding(backend: Backend, dtype: str) -> None:
    """(x * y) - z and (x + y) - z round (or wrap) after every op: f16 300*300 is inf, f32 1 + 1e8 - 1e8
    is 0, int32 65536*65536/2 is 0. A device that keeps intermediates wider gives other answers."""
    x, y, z = (oracle.array(v, dtype) for v in PER_OP[dtype])
    for first, second in (("Mul", "Sub"), ("Add", "Sub"), ("Mul", "Idiv")):
        build = BINARY_BUILDERS[AluOp(first)], BINARY_BUILDERS[AluOp(second)]
        kernel = map_kernel([dtype] * 3, 4, lambda a, b, c, f=build: f[1](f[0](a, b), c))
        skip_if_undeclared(backend, kernel)
        want = oracle.binary(second, oracle.binary(first, x, y, dtype), z, dtype)
        got = run_kernel(backend, kernel, [x, y, z])
        assert_close(got, want, second, dtype, backend, inputs=[x, y, z], what=f"(x {first} y) {second} z")


CONST_CHAINS: dict[str, list[tuple[str, float, str, float]]] = {
    # (x op1 c1) op2 c2 with both constants in the kernel: a compiler that folds c1 op c2 first
    # changes the answer (f32 x + 2^24 - 2^24 rounds x to an integer; 0 * 3e38 * 10 is 0, not NaN).
    "float16": [("Add", 2048.0, "Sub", 2048.0), ("Mul", -65504.0, "Mul", 2.5), ("Mul", 1e-4, "Mul", 1e-4)],
    "float32": [
        ("Add", 16777216.0, "Sub", 16777216.0),
        ("Add", 16777216.0, "Add", -16777216.0),
        ("Mul", 3e38, "Mul", 10.0),
        ("Mul", 1e-30, "Mul", 1e-30),
        ("Mul", 1e-30, "Mul", 1e30),
    ],
    "float64": [("Add", 2.0**53, "Sub", 2.0**53), ("Mul", 1e300, "Mul", 1e10)],
}


def _chain(op1: str, c1: float, op2: str, c2: float, swapped: bool) -> Callable[[AluExp], AluExp]:
    """(x op1 c1) op2 c2, or with every operand order swapped: c2 op2 (c1 op1 x)."""
    f1, f2 = BINARY_BUILDERS[AluOp(op1)], BINARY_BUILDERS[AluOp(op2)]

    def build(v: AluExp) -> AluExp:
        k1, k2 = AluExp.const(v.dtype, c1), AluExp.const(v.dtype, c2)
        return f2(k2, f1(k1, v)) if swapped else f2(f1(v, k1), k2)

    return build


@pytest.mark.parametrize("dtype", list(CONST_CHAINS))
def test_constant_chains_round_per_op(backend: Backend, dtype: str) -> None:
    """Two constants in a row round per op as written: (x + c1) - c2, (x * c1) * c2, c2 * (c1 * x)."""
    x = oracle.array([0.0, -0.0, 1.0, -1.0, 0.5, 0.75, 3.0, -2.5], dtype)
    for op1, c1, op2, c2 in CONST_CHAINS[dtype]:
        first = oracle.binary(op1, x, oracle.array([c1] * len(x), dtype), dtype)
        want = oracle.binary(op2, first, oracle.array([c2] * len(x), dtype), dtype)
        for swapped in (False, True) if op1 == op2 == "Mul" else (False,):
            kernel = map_kernel([dtype], len(x), _chain(op1, c1, op2, c2, swapped))
            skip_if_undeclared(backend, kernel)
            what = f"{c2} {op2} ({c1} {op1} x)" if swapped else f"(x {op1} {c1}) {op2} {c2}"
            assert_close(run_kernel(backend, kernel, [x]), want, op2, dtype, backend, inputs=[x], what=what)


def select_by_index(items: list[AluExp]) -> AluExp:
    """out[gidx] = items[gidx]: a chain of Where over gidx (each item may fold to a constant)."""
    exp = items[-1]
    for i in range(len(items) - 2, -1, -1):
        exp = AluExp.where(AluExp.cmplt(AluVar.gidx, AluExp.i32(i + 1)), items[i], exp)
    return exp


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [*[str(op) for op in BINARY_BUILDERS], "Cmplt", "Cmpne"])
def test_constant_operands_fold_per_contract(backend: Backend, op: str, dtype: str) -> None:
    """The same op on constant operands (folded by the core's simplifier before the device sees it)
    gives the contract's answer too: x/0, INT_MIN/-1, negative mod, NaN, -0."""
    a, b = values.pairs(values.arith(dtype), values.arith(dtype))
    rng = np.random.default_rng(len(a))
    pick = rng.choice(len(a), size=min(len(a), 48), replace=False)
    a, b = a[pick], b[pick]
    dt = DType(dtype)
    if op in ("Cmplt", "Cmpne"):
        fn = AluExp.cmplt if op == "Cmplt" else AluExp.cmpne
        want, out_dt = oracle.compare(op, a, b, dtype), "bool"
    else:
        fn = BINARY_BUILDERS[AluOp(op)]
        want, out_dt = oracle.binary(op, a, b, dtype), dtype
    items = [fn(AluExp.const(dt, x.item()), AluExp.const(dt, y.item())) for x, y in zip(a, b)]
    kernel = Kernel(0, len(items), select_by_index(items))
    skip_if_undeclared(backend, kernel)
    assert_close(
        run_kernel(backend, kernel, []), want, op, out_dt, backend, inputs=[a, b], what=f"folded {op}"
    )


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_constant_casts_fold_per_contract(backend: Backend, src: str, dst: str) -> None:
    """Casts of constants (folded by the core) saturate, truncate and map NaN like device casts."""
    x = values.cast_sources(src)
    items = [AluExp.cast(DType(dst), AluExp.const(DType(src), v.item())) for v in x]
    kernel = Kernel(0, len(items), select_by_index(items))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [])
    assert_close(
        got, oracle.cast(x, src, dst), "Cast", dst, backend, inputs=[x], what=f"folded Cast {src}->{dst}"
    )
