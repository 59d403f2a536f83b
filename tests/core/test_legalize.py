"""Contract legalization and the transcendental expansions, checked in the reference interpreter.

A legalized tree must compute exactly what the original computes under the contract (the
interpreter *is* the contract), for every op whose native meaning a target may lack; the
expansions must meet the suite's float32 tolerance table.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp
from jaxcore.conformance.tolerances import lookup
from jaxcore.dtype import INT32_MAX, INT32_MIN, DType
from jaxcore.expansions import expand_node
from jaxcore.interpret import Interpreter
from jaxcore.legalize import TargetTraits, is_nan, is_opaque, legalize

F32, F16, F64, I32, U32, BOOL = (
    DType.float32,
    DType.float16,
    DType.float64,
    DType.int32,
    DType.uint32,
    DType.bool,
)
NOTHING_NATIVE = TargetTraits()

_VALUES = {
    F32: [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        7.0,
        3e38,
        -3e38,
        1e-40,
        np.inf,
        -np.inf,
        np.nan,
        2147483520.0,
        2147483648.0,
        -2147483904.0,
        4294967296.0,
        -0.75,
    ],
    F16: [0.0, -0.0, 1.0, -2.5, 65504.0, -65504.0, np.inf, -np.inf, np.nan, 6e-8],
    F64: [0.0, -0.0, 1.5, -1e300, 2147483647.5, -2147483648.5, 4294967295.9, np.inf, np.nan],
    I32: [0, 1, -1, 2, -7, 31, 32, 33, INT32_MAX, INT32_MIN],
    U32: [0, 1, 2, 31, 32, 33, 2**31, 2**32 - 1],
    BOOL: [0, 1],
}


def _arr(dtype: DType) -> np.ndarray:
    from jaxcore.dtype import to_numpy

    return np.asarray(_VALUES[dtype], dtype=np.float64 if dtype in (F32, F16, F64) else np.int64).astype(
        to_numpy(dtype)
    )


def _same(a: np.ndarray, b: np.ndarray) -> None:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        assert np.array_equal(np.isnan(a), np.isnan(b))
        m = ~np.isnan(a)
        np.testing.assert_array_equal(a[m], b[m])
    else:
        np.testing.assert_array_equal(a, b)


def _run(e: AluExp, env: dict) -> np.ndarray:
    with np.errstate(all="ignore"):
        return Interpreter(env).run(e)


@pytest.mark.parametrize("dtype", [F32, F16, F64, I32, U32, BOOL])
@pytest.mark.parametrize(
    "op",
    [AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Mod, AluOp.Min, AluOp.Max, AluOp.Cmplt, AluOp.Cmpne],
)
def test_binary_legalization_is_sound(op: AluOp, dtype: DType) -> None:
    v = _arr(dtype)
    a, b = (x.ravel() for x in np.meshgrid(v, v, indexing="ij"))
    x, y = AluExp.variable(dtype, "a"), AluExp.variable(dtype, "b")
    out = DType.bool if op in (AluOp.Cmplt, AluOp.Cmpne) else dtype
    e = AluExp(op, out, (x, y))
    _same(_flat_eval(legalize(e, NOTHING_NATIVE), {"a": a, "b": b}), _run(e, {"a": a, "b": b}))


@pytest.mark.parametrize("src", [F32, F16, F64, I32, U32, BOOL])
@pytest.mark.parametrize("dst", [F32, F16, F64, I32, U32, BOOL])
def test_cast_legalization_is_sound(src: DType, dst: DType) -> None:
    if src == dst:
        return
    a = _arr(src)
    e = AluExp.cast(dst, AluExp.variable(src, "a"))
    _same(_flat_eval(legalize(e, NOTHING_NATIVE), {"a": a}), _run(e, {"a": a}))


@pytest.mark.parametrize("dtype", [I32, U32])
@pytest.mark.parametrize("mode", ["shl", "shr"])
def test_shift_legalization_masks_the_count(dtype: DType, mode: str) -> None:
    v = _arr(dtype)
    a, b = (x.ravel() for x in np.meshgrid(v, v, indexing="ij"))
    e = AluExp(AluOp.BitShift, dtype, (AluExp.variable(dtype, "a"), AluExp.variable(dtype, "b")), mode)
    le = legalize(e, NOTHING_NATIVE)
    assert le.src[1].op == AluOp.BitCombine
    _same(_run(le, {"a": a, "b": b}), _run(e, {"a": a, "b": b}))


def test_nan_tests_use_bits_not_self_compare() -> None:
    x = AluExp.variable(F32, "x")
    t = is_nan(x, NOTHING_NATIVE)
    assert not t.some(lambda n: n.op == AluOp.Cmpne and n.src[0] is n.src[1])
    assert t.some(lambda n: n.op == AluOp.Bitcast)
    a = _arr(F32)
    np.testing.assert_array_equal(_run(t, {"x": a}) != 0, np.isnan(a))


def test_native_traits_leave_ops_alone() -> None:
    x, y = AluExp.variable(I32, "a"), AluExp.variable(I32, "b")
    e = AluExp.idiv(x, y)
    native = TargetTraits(native_int_div_by_zero_is_zero=True, native_int_min_div_neg1=True)
    assert legalize(e, native) is e or legalize(e, native) == e
    assert legalize(e, NOTHING_NATIVE) != e


def _unary_inputs(op: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    base = [np.linspace(-10, 10, 4001), rng.normal(size=2000) * 3, _VALUES[F32]]
    if op in ("Sin", "Cos"):
        base += [
            rng.uniform(-1, 1, 4000) * 10.0 ** rng.uniform(0, 38.5, 4000),
            np.arange(-100, 100) * math.pi / 4,
        ]
    if op == "Exp":
        base += [np.linspace(-105, 89, 4001)]
    if op == "Log":
        base += [10.0 ** rng.uniform(-45, 38.5, 4000), np.linspace(0.5, 2, 4001)]
    if op == "Asin":
        base += [np.linspace(-1, 1, 4001)]
    if op == "Atan":
        base += [10.0 ** rng.uniform(-10, 38, 2000)]
    if op in ("Erf", "Erfc"):
        base += [np.linspace(-8, 8, 4001)]
    with np.errstate(all="ignore"):
        return np.concatenate([np.asarray(b, np.float64) for b in base]).astype(np.float32)


_REF = {
    "Sin": np.sin,
    "Cos": np.cos,
    "Exp": np.exp,
    "Log": np.log,
    "Atan": np.arctan,
    "Asin": np.arcsin,
    "Erf": np.vectorize(math.erf),
    "Erfc": np.vectorize(math.erfc),
}


@pytest.mark.parametrize("op", sorted(_REF))
def test_expansions_meet_the_float32_table(op: str) -> None:
    e = legalize(expand_node(AluExp(AluOp(op), F32, (AluExp.variable(F32, "x"),))), NOTHING_NATIVE)
    a = _unary_inputs(op)
    got = _flat_eval(e, {"x": a}).astype(np.float64)
    with np.errstate(all="ignore"):
        want = _REF[op](a.astype(np.float64)).astype(np.float32).astype(np.float64)
    rtol, atol = lookup(op, F32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    m = ~np.isnan(want)
    inf = m & np.isinf(want)
    assert np.array_equal(got[inf], want[inf])
    fin = m & ~inf
    assert np.all(np.abs(got[fin] - want[fin]) <= atol + rtol * np.abs(want[fin]))


def test_expansions_skip_float64() -> None:
    assert expand_node(AluExp(AluOp.Sin, F64, (AluExp.variable(F64, "x"),))) is None


def _flat_eval(exp: AluExp, env: dict) -> np.ndarray:
    """Node by node, eagerly (the interpreter's lazy Where re-walks shared subtrees under masks)."""
    vals: dict[str, np.ndarray] = {}
    for n in exp.nodes():
        if not n.src:
            vals[n.key()] = np.asarray(_run(n, env))
            continue
        srcs = tuple(AluExp.variable(s.dtype, f"s{i}") for i, s in enumerate(n.src))
        vals[n.key()] = np.asarray(
            _run(AluExp(n.op, n.dtype, srcs, n.arg), {f"s{i}": vals[s.key()] for i, s in enumerate(n.src)})
        )
    return vals[exp.key()]


def test_float_idiv_is_the_truncated_correctly_rounded_quotient() -> None:
    """From an approximate reciprocal (what Vulkan and GLSL promise), exactly trunc(fl(a / b))."""
    rng = np.random.default_rng(7)
    n = 20000
    a = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.uniform(-40, 38, n), rng.integers(-999, 999, n)])
    b = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.uniform(-40, 38, n), rng.integers(-30, 30, n)])
    a = np.concatenate([a, _VALUES[F32], [6.0, 1.0, 16777215.0, 3e38]]).astype(np.float32)
    b = np.concatenate([b, _VALUES[F32][::-1], [3.0, 3.0, 2.0, 1e-38]]).astype(np.float32)
    x, y = AluExp.variable(F32, "a"), AluExp.variable(F32, "b")
    got = _flat_eval(legalize(AluExp(AluOp.Idiv, F32, (x, y)), NOTHING_NATIVE), {"a": a, "b": b})
    with np.errstate(all="ignore"):
        want = np.trunc(a / b)
    _same(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()


@pytest.mark.parametrize("dtype", [F64, F32])
def test_float_idiv_without_a_native_trunc_truncates_through_floor_and_ceil(dtype: DType) -> None:
    """lavapipe on an x86 without AVX-512 returned WGSL's float64 trunc(q) as q: such a target's
    float Idiv keeps no Idiv node and gives trunc(a / b) bit for bit, -0.0 and NaN included."""
    from dataclasses import replace

    v = _arr(dtype)
    a, b = (x.ravel() for x in np.meshgrid(v, v, indexing="ij"))
    x, y = AluExp.variable(dtype, "a"), AluExp.variable(dtype, "b")
    e = AluExp(AluOp.Idiv, dtype, (x, y))
    legal = legalize(e, replace(NOTHING_NATIVE, native_float_trunc=False, native_correct_division=True))
    assert not legal.some(lambda n: n.op == AluOp.Idiv)
    got, want = _flat_eval(legal, {"a": a, "b": b}), _run(e, {"a": a, "b": b})
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    assert got[~nan].tobytes() == want[~nan].tobytes()


def test_the_normal_range_promise_holds_inside_float_idiv() -> None:
    """Every node the Idiv expansion marks NORMAL_RANGE sees and gives only zeros and normal floats
    (a flushing device computes them natively), on subnormal, huge, zero, inf and NaN operands."""
    from jaxcore.alu import NORMAL_RANGE

    rng = np.random.default_rng(11)
    n = 4000
    a = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.uniform(-45, 38, n), _VALUES[F32]]).astype(
        np.float32
    )
    b = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.uniform(-45, 38, n), _VALUES[F32][::-1]]).astype(
        np.float32
    )
    x, y = AluExp.variable(F32, "a"), AluExp.variable(F32, "b")
    tree = legalize(AluExp(AluOp.Idiv, F32, (x, y)), NOTHING_NATIVE)
    marked = [e for e in tree.nodes() if e.arg == NORMAL_RANGE]
    assert len(marked) > 20
    tiny = np.finfo(np.float32).tiny
    for e in marked:
        for part in (e, *e.src):
            v = np.abs(_flat_eval(part, {"a": a, "b": b}).astype(np.float64))
            assert not ((v > 0) & (v < tiny)).any(), f"{part.op} gives a subnormal"


def test_products_feeding_an_add_are_opaque_where_the_driver_contracts() -> None:
    """With contracts_mul_add, no float Add/Sub has a Mul operand left (a driver could fuse it),
    inside expansions too (Idiv's exact residuals); integer products and other traits untouched."""
    x, y, z = (AluExp.variable(F32, v) for v in "xyz")
    traits = TargetTraits(contracts_mul_add=True)

    def fusable(tree: AluExp) -> list[AluExp]:
        return [
            e
            for e in tree.nodes()
            if e.op in (AluOp.Add, AluOp.Sub) and e.dtype == F32 and any(s.op == AluOp.Mul for s in e.src)
        ]

    for exp in (x * y + z, z - x * y, AluExp(AluOp.Idiv, F32, (x, y))):
        assert not fusable(legalize(exp, traits))
        assert fusable(legalize(exp, TargetTraits())) or exp.op == AluOp.Idiv
    kept = legalize(x * y + z, traits)
    assert is_opaque(kept.src[0]) and kept.src[0].src[0] == x * y
    i = AluExp.variable(DType.int32, "i")
    assert legalize(i * i + i, traits) == legalize(i * i + i, TargetTraits())
    # the value is unchanged: opaque is an identity
    vals = {v: np.array([1 + 2.0**-12, 3.0, -0.5], np.float32) for v in "xyz"}
    vals["z"] = np.array([-(1 + 2.0**-11), 1.0, 2.0], np.float32)
    got = _flat_eval(kept, vals)
    _same(got.view(np.uint32), (vals["x"] * vals["y"] + vals["z"]).view(np.uint32))


def test_operands_a_finite_math_compiler_may_know_are_opaque() -> None:
    """With assumes_finite_math, every operand of float + - * / that the compiler can know when it
    compiles (constants but finite nonzero ones, the epilogue's `acc`, what is computed from them)
    is opaque, two equal ones through two different opaques; buffer reads and loop variables stay
    as they are, and the value is unchanged."""
    traits = TargetTraits(assumes_finite_math=True)
    acc, x = AluExp.variable(F64, "acc"), AluExp.global_index(F64, 0, 4, AluExp.i32(0))
    zero, two, nan = AluExp.f64(0.0), AluExp.f64(2.0), AluExp.f64(math.nan)

    def opaque_operands(e: AluExp) -> list[bool]:
        return [is_opaque(s) for s in e.src]

    assert opaque_operands(legalize(AluExp.idiv(zero, acc), traits)) == [True, True]
    assert opaque_operands(legalize(AluExp.idiv(x, zero), traits)) == [False, True]
    assert opaque_operands(legalize(x * two, traits)) == [False, False]
    assert opaque_operands(legalize(AluExp.log(acc) - nan, traits)) == [True, True]
    same = legalize(AluExp.idiv(acc, acc), traits)
    assert opaque_operands(same) == [True, True] and same.src[0] != same.src[1]
    # known from a known value: log(acc) * 2 is opaque; log(x) * 2 is not
    assert opaque_operands(legalize(AluExp.log(acc) * two, traits)) == [True, False]
    assert opaque_operands(legalize(AluExp.log(x) * two, traits)) == [False, False]
    # other names are loop variables, ints are never guarded, and without the trait nothing moves
    assert legalize(AluExp.variable(F64, "a") + AluExp.variable(F64, "b"), traits).src[0].op == AluOp.Variable
    i = AluExp.variable(I32, "acc")
    assert legalize(i * i, traits) == i * i
    assert legalize(AluExp.idiv(zero, acc), TargetTraits()) == AluExp.idiv(zero, acc)
    vals = np.array([0.0, -0.0, np.inf, np.nan, 1e-300, 3.0])
    for e in (AluExp.idiv(zero, acc), AluExp.idiv(acc, acc), acc - acc, acc * zero):
        _same(_run(legalize(e, traits), {"acc": vals}), _run(e, {"acc": vals}))


def test_an_infinity_a_finite_math_compiler_may_see_is_opaque() -> None:
    """With assumes_finite_math, no select, min/max, compare or arithmetic takes an infinity or NaN
    constant (through float casts) but through `opaque`: NVIDIA made select(b, inf, f64(x)) * 0
    zero. Finite constants stay as they are, and the value is unchanged."""
    traits = TargetTraits(assumes_finite_math=True)
    x = AluExp.variable(F64, "x")
    b = AluExp.cmplt(x, AluExp.f64(1.0))
    inf, nan = AluExp.f64(math.inf), AluExp.cast(F64, AluExp.f32(math.nan))
    ops = {AluOp.Where, AluOp.Min, AluOp.Max, AluOp.Cmplt, AluOp.Cmpne, AluOp.Add, AluOp.Mul, AluOp.Idiv}

    def exposed(e: AluExp) -> list[AluExp]:
        def bare_const(s: AluExp) -> bool:
            while s.op == AluOp.Cast and s.dtype != DType.bool:
                s = s.src[0]
            return s.op == AluOp.Const and not math.isfinite(s.arg)

        return [n for n in e.nodes() if n.op in ops and any(map(bare_const, n.src))]

    cases = [
        AluExp.where(b, inf, x) * AluExp.f64(0.0),
        AluExp(AluOp.Max, F64, (x, nan)),
        AluExp.cmplt(x, inf),
        AluExp.idiv(x, inf),
    ]
    vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.0])
    for e in cases:
        assert exposed(e) and not exposed(legalize(e, traits)), e
        _same(_run(legalize(e, traits), {"x": vals}), _run(e, {"x": vals}))
    finite = legalize(AluExp.where(b, AluExp.f64(2.0), x), traits)
    assert not finite.some(is_opaque)
    plain = legalize(AluExp.where(b, inf, x), TargetTraits())  # a compiler that keeps infinities
    assert not plain.some(is_opaque)


def test_a_sum_beside_a_constant_of_its_family_is_opaque() -> None:
    """(x - y) + c and (x * y) * c: the sum beside the constant is opaque, as a driver may
    reassociate the two ops (with an opaque constant too: NVIDIA, float64); a constant beside
    another family ((x * y) + c) is left alone."""
    traits = TargetTraits(folds_float_identities=True)
    x, y, c = AluExp.variable(F32, "x"), AluExp.variable(F32, "y"), AluExp.f32(2.5)
    for e, inner in (((x - y) + c, x - y), (c + (x + y), x + y), ((x * y) * c, x * y)):
        kept = legalize(e, traits)
        assert c in kept.src, e
        assert any(is_opaque(s) and s.src[0] == inner for s in kept.src), e
    assert legalize((x * y) + c, traits) == (x * y) + c


def test_a_known_float_divisor_is_opaque_where_the_compiler_divides_by_reciprocals() -> None:
    """x / 7 as x * (1/7) rounds twice (NVIDIA's Vulkan driver, float64): with the trait, every
    divisor the compiler may know is passed through opaque; a divisor read from memory is not."""
    x = AluExp.variable(F64, "x")
    recip = TargetTraits(divides_by_reciprocal=True)

    def divisor(e: AluExp) -> AluExp:
        return e.src[1]

    by_const = legalize(AluExp(AluOp.Idiv, F64, (x, AluExp.const(F64, 7.0))), recip)
    assert is_opaque(divisor(by_const))
    assert (
        legalize(AluExp(AluOp.Idiv, F64, (x, AluExp.const(F64, 7.0))), TargetTraits()).src[1].op
        == AluOp.Const
    )
    y = AluExp.global_index(F64, 0, 4, AluExp.variable(DType.int32, "i"))
    assert legalize(AluExp(AluOp.Idiv, F64, (x, y)), recip).src[1] == y


def test_mod_through_the_quotient_keeps_x_mod_zero_zero() -> None:
    """A target whose % does not truncate gets a - (a / b) * b; by zero that must still be 0."""
    traits = TargetTraits(native_int_mod_truncates=False)
    a, b = AluExp.variable(I32, "a"), AluExp.variable(I32, "b")
    e = legalize(AluExp(AluOp.Mod, I32, (a, b)), traits)
    av = np.array([7, -7, 7, -7, INT32_MIN, 5, -5], np.int32)
    bv = np.array([0, 0, -3, 3, -1, 2, 0], np.int32)
    np.testing.assert_array_equal(_run(e, {"a": av, "b": bv}), [0, 0, 1, -1, 0, 1, 0])


def test_division_is_correctly_rounded_among_the_subnormals() -> None:
    """Div legalized for a target whose `/` is not correctly rounded gives numpy's bits, subnormal
    quotients included (rounded once, not scaled after rounding), and zeros, infinities and NaN."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    b = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    a[:10000] = ((rng.random(10000) - 0.5) * 2.0**-120).astype(np.float32)
    b[:10000] = (rng.random(10000) * 64 + 1).astype(np.float32)
    a[:8], b[:8] = [0, -0.0, 1, np.inf, np.nan, 0, np.inf, -1], [0, 1, 0, np.inf, 1, -np.inf, 2, -0.0]
    x, y = AluExp.variable(DType.float32, "a"), AluExp.variable(DType.float32, "b")
    got = Interpreter({"a": a, "b": b}).run(legalize(AluExp.div(x, y), TargetTraits()))
    with np.errstate(all="ignore"):
        want = a / b
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), np.flatnonzero(~same)[:5]
    assert (np.abs(want[:10000]) < np.finfo(np.float32).tiny).sum() > 5000  # the subnormal half is


def test_the_interpreter_memoises_under_masks() -> None:
    """A DAG shared below nested Wheres is evaluated once per mask, not walked as a tree (a
    legalized float division has both; unmemoised it took 43 s for 3 lanes)."""
    x, y = AluExp.variable(DType.float32, "a"), AluExp.variable(DType.float32, "b")
    exp = legalize(AluExp.div(x, y), TargetTraits())
    interp = Interpreter({"a": np.float32([1, 2, 3]), "b": np.float32([3, 7, 0.5])})
    calls = 0
    inner = interp._eval

    def counting(e: AluExp, mask: np.ndarray | None) -> object:
        nonlocal calls
        calls += 1
        return inner(e, mask)

    interp._eval = counting  # type: ignore[method-assign]
    interp.run(exp)
    assert calls < 20 * len(list(exp.nodes())), calls


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op", [AluOp.Div, AluOp.Idiv])
def test_float32_division_beside_float64_goes_through_float64(dtype: DType, op: AluOp) -> None:
    """A target whose float32 quotients are inexact in a program that also computes float64
    (NVIDIA's Vulkan driver) divides there in float64, rounded once: bit for bit the contract's
    quotient; a kernel without float64 keeps the float32 spelling."""
    from dataclasses import replace

    from jaxcore.legalize import for_kernel

    traits = replace(NOTHING_NATIVE, f32_inexact_beside_f64=True)
    x, y = AluExp.variable(dtype, "a"), AluExp.variable(dtype, "b")
    e = AluExp(op, dtype, (x, y))
    assert for_kernel(traits, [e]) is traits
    beside = for_kernel(traits, [e, AluExp.cast(F64, x)])
    assert beside.beside_f64
    legal = legalize(e, beside)
    assert legal.some(lambda n: n.op == AluOp.Div and n.dtype == F64)
    v = _arr(dtype)
    a, b = (w.ravel() for w in np.meshgrid(v, v, indexing="ij"))
    got, want = _flat_eval(legal, {"a": a, "b": b}), _run(e, {"a": a, "b": b})
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    assert got[~nan].tobytes() == want[~nan].tobytes()


def test_a_sum_taken_by_another_sum_is_opaque_where_sums_reassociate() -> None:
    """(x - x) - c: NVIDIA's driver computed x - (x + c) (4 - 2^-51 for 4 at x = 1e20); on a target
    that reassociates sums, the inner difference reaches the outer one only through `opaque`."""
    from dataclasses import replace

    x, c = AluExp.variable(F64, "x"), AluExp.variable(F64, "c")
    e = (x - x) - c
    plain = legalize(e, replace(NOTHING_NATIVE, folds_float_identities=True))
    legal = legalize(e, replace(NOTHING_NATIVE, folds_float_identities=True, reassociates_sums=True))
    assert plain.src[0].op == AluOp.Sub
    assert is_opaque(legal.src[0])
    xs, cs = np.array([1e20, 3.0, -7.5e15]), np.array([-4.0, 7.0, 1.0])
    assert _flat_eval(legal, {"x": xs, "c": cs}).tolist() == [4.0, -7.0, -1.0]


@pytest.mark.parametrize(
    "build",
    [
        lambda x: AluExp.cmplt(AluExp.f32(0.0), x),
        lambda x: AluExp.min(x, AluExp.f32(0.0)),
        lambda x: AluExp.max(x, x * x),
        lambda x: AluExp.cast(DType.bool, x),
        lambda x: AluExp.bitcast(DType.uint32, x),
    ],
    ids=["0 < x", "min(x, 0)", "max(x, x*x)", "bool(x)", "bits(x)"],
)
def test_a_float32_whose_bits_are_tested_beside_float64_is_opaque(build: Callable[[AluExp], AluExp]) -> None:
    """NVIDIA's Vulkan driver took a subnormal x as 0 in `0 < x` and `min(x, 0)` in a program that
    also computes float64, spelled on x's bits or not: there a float32 operand whose bits an op
    tests reaches it through `opaque` (constants need not); nowhere else."""
    from dataclasses import replace

    from jaxcore.legalize import for_kernel

    x = AluExp.variable(F32, "x")
    e = build(x)
    traits = replace(NOTHING_NATIVE, f32_inexact_beside_f64=True, flushes_subnormals=True)
    beside = for_kernel(traits, [e, AluExp.cast(F64, x)])

    def hidden(n: AluExp) -> bool:
        return is_opaque(n) and n.src[0].op != AluOp.Const

    assert legalize(e, beside).some(hidden)
    assert not legalize(e, traits).some(hidden)
    assert not legalize(e, replace(beside, flushes_subnormals=False)).some(hidden)


@pytest.mark.parametrize(
    "chain", [[F64], [U32, F64], [I32, F32, F64]], ids=["f64(b)", "f64(u32(b))", "f64(f32(i32(b)))"]
)
def test_a_product_with_a_bool_cast_to_float_is_opaque(chain: list[DType]) -> None:
    """NVIDIA's Vulkan driver made `x * f64(u32(b))` a select of x and 0 (NaN * 0 gave 0): with
    assumes_finite_math a float from a bool, through any chain of casts, reaches + - * / opaque."""
    x = AluExp.variable(F64, "x")
    b = AluExp.cmplt(x, AluExp.f64(1.0))
    v = b
    for dt in chain:
        v = AluExp.cast(dt, v)
    legal = legalize(x * v, TargetTraits(assumes_finite_math=True))
    assert any(is_opaque(s) for s in legal.src), legal
    vals = np.array([0.0, np.nan, -np.inf, 3.0])
    _same(_run(legal, {"x": vals}), _run(x * v, {"x": vals}))


def test_a_product_with_an_integer_of_two_values_is_opaque() -> None:
    """NVIDIA made `f64(max(u32(b), 0)) * inf` 0 where b was false: an integer the compiler can
    bound to two values is a choice as a cast bool is, so the float made of it reaches * opaque."""
    x = AluExp.variable(F64, "x")
    two = AluExp(AluOp.Max, U32, (AluExp.cast(U32, AluExp.cmplt(x, AluExp.f64(1.0))), AluExp.u32(0)))
    legal = legalize(x * AluExp.cast(F64, two), TargetTraits(assumes_finite_math=True))
    assert any(is_opaque(s) for s in legal.src), legal
    wide = AluExp.cast(F64, AluExp.cast(U32, AluExp.variable(I32, "i")))
    assert not any(is_opaque(s) for s in legalize(x * wide, TargetTraits(assumes_finite_math=True)).src)


def test_a_float_of_an_integer_a_select_tests_is_opaque_in_its_arms() -> None:
    """NVIDIA made `select(0, f64(x) * f64(u), u == 0)` zero for an infinite x: in an arm of a
    select, a float converted from an integer the condition pins (here through a multiple of it)
    is opaque; one the condition does not test, or tests without pinning it, is left alone."""
    x, i, j = AluExp.variable(F64, "x"), AluExp.variable(I32, "i"), AluExp.variable(I32, "j")
    cond = AluExp.cmpne(i, AluExp.i32(0)).not_()
    tested = AluExp.cast(F64, i * AluExp.i32(3))
    exp = AluExp.where(cond, x * tested + AluExp.cast(F64, j), AluExp.f64(0.0))
    legal = legalize(exp, TargetTraits(assumes_finite_math=True))
    casts = legal.collect(lambda n: n.op == AluOp.Cast and n.dtype == F64)
    parents = legal.collect(lambda n: any(s in casts for s in n.src))
    hidden = {s for n in parents if is_opaque(n) for s in n.src}
    assert tested.key() in {c.key() for c in hidden} and AluExp.cast(F64, j) not in hidden, legal
    env = {"x": np.array([np.inf, np.nan, 2.0, -np.inf]), "i": np.array([0, 0, 1, 0]), "j": np.zeros(4, int)}
    _same(_run(legal, env), _run(exp, env))
    wide = AluExp.where(AluExp.cmplt(i, AluExp.i32(1000)), x * AluExp.cast(F64, i), AluExp.f64(0.0))
    assert not legalize(wide, TargetTraits(assumes_finite_math=True)).some(is_opaque)


@pytest.mark.parametrize("op", [AluOp.Sub, AluOp.Div, AluOp.Idiv, AluOp.Add, AluOp.Mul])
def test_two_reads_of_one_buffer_are_kept_apart_where_they_could_cancel(op: AluOp) -> None:
    """NVIDIA's Vulkan driver proved x[min(g, 10)] and x[g] equal (g < 10 by its grid) and made
    their float64 quotient 1 where x = 0: two reads of one buffer in - / Idiv are kept apart by an
    opaque; reads of two buffers, and + *, which cannot cancel, are left alone."""
    traits = TargetTraits(assumes_finite_math=True)
    g = AluExp.variable(I32, "g")
    xa = AluExp.global_index(F64, 0, 10, AluExp.min(g, AluExp.i32(10)))
    xb, yb = AluExp.global_index(F64, 0, 10, g), AluExp.global_index(F64, 1, 10, g)
    legal = legalize(AluExp(op, F64, (xa, xb)), traits)
    hidden = [is_opaque(s) for s in legal.src]
    assert hidden == [False, op in (AluOp.Sub, AluOp.Div, AluOp.Idiv)]
    assert legalize(AluExp(op, F64, (xa, yb)), traits).src == (xa, yb)
    assert legalize(AluExp(op, F64, (xa, xb)), TargetTraits()).src == (xa, xb)


def test_integer_arithmetic_across_a_sign_cast_is_opaque_where_the_compiler_crashes_on_it() -> None:
    """NVIDIA's GL compiler crashed (SIGSEGV) on `int(c - uint(x)) + x`: with the trait, the
    uint32 side of an int32 <-> uint32 conversion of integer arithmetic is opaque, in both
    directions; a conversion of a plain read is left alone, and the value is unchanged."""
    traits = TargetTraits(crashes_cancelling_across_sign_casts=True)
    x = AluExp.variable(I32, "x")
    e = AluExp.cast(I32, AluExp.u32(3102103486) - AluExp.cast(U32, x)) + x
    legal = legalize(e, traits)
    to_int = legal.src[0]
    assert to_int.op == AluOp.Cast and is_opaque(to_int.src[0])
    back = legalize(AluExp.cast(U32, x * AluExp.i32(3)), traits)
    assert is_opaque(back) and back.dtype == U32
    assert legalize(AluExp.cast(U32, x), traits) == AluExp.cast(U32, x)
    assert legalize(e, TargetTraits()) == e
    vals = np.array([INT32_MIN, -7, 0, 5, INT32_MAX], dtype=np.int32)
    np.testing.assert_array_equal(_run(legal, {"x": vals}), _run(e, {"x": vals}))
