"""The simplifier on floats: no rewrite may change a value that NaN, ±Inf, -0 or per-op rounding
reaches (the fuzzer's two bug classes: float rules blind to NaN/Inf, and float ranges worked out in
float64 without rounding to the node's dtype). Expected values come from the conformance oracle
(`test_fuzz.evaluate`, numpy at each op's dtype), never from jaxcore's own interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.conformance import oracle
from jaxcore.conformance.test_fuzz import Env, evaluate
from jaxcore.dtype import DType
from jaxcore.simplify import value_range

A = AluExp
F16, F32, F64, I32, U32, BOOL = (
    DType.float16,
    DType.float32,
    DType.float64,
    DType.int32,
    DType.uint32,
    DType.bool,
)
FLOATS = (F16, F32, F64)

# Lane values of every float input: the specials, values that round differently per dtype, and
# integers around 2^24 and 2^31 (where float32 rounding moves them).
SPECIALS = [
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    0.1,
    2.5,
    -3.0,
    1e-6,
    1.1754943508222875e-38,
    5e-324,
    65504.0,
    65520.0,
    1e10,
    -1e10,
    2.0**24 + 1,
    2.0**31 - 1,
    -(2.0**31),
    3.4028234663852886e38,
    1836024908.0,
]
INT_VALUES = [0, 1, -1, 7, -(2**31), 2**31 - 1, 2**24 + 1, 2**24 + 3, 1836024908, 65520, -70000]
N = len(SPECIALS)
CONSTS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    0.1,
    2.5,
    -3.0,
    1e-6,
    math.inf,
    -math.inf,
    math.nan,
    1e-38,
    65504.0,
    1e10,
]


def _inputs() -> list[np.ndarray]:
    ints = [INT_VALUES[i % len(INT_VALUES)] for i in range(N)]
    return [oracle.array(SPECIALS, str(dt)) for dt in FLOATS] + [oracle.array(ints, "int32")]


def _read(dt: DType) -> AluExp:
    gid = {F16: 0, F32: 1, F64: 2, I32: 3}[dt]
    return A.global_index(dt, gid, N, AluVar.gidx)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def leaf(self, dt: DType) -> AluExp:
        r = self.rng.random()
        if dt == BOOL:
            return A.cmplt(_read(F32), self.leaf(F32)) if r < 0.5 else A.cmpne(_read(F64), self.leaf(F64))
        if dt in (I32, U32):
            if r < 0.5:
                return _read(I32) if dt == I32 else A.cast(U32, _read(I32))
            return A.const(dt, int(self.rng.choice(INT_VALUES)) % (2**32 if dt == U32 else 2**63))
        if r < 0.45:
            return _read(dt)
        if r < 0.6:
            return A.cast(dt, _read(DType(self.rng.choice([F16, F32, F64, I32]))))
        with np.errstate(over="ignore"):
            return A.const(dt, float(self.rng.choice(CONSTS)))

    def tree(self, dt: DType, depth: int) -> AluExp:
        if depth == 0 or self.rng.random() < 0.2:
            return self.leaf(dt)
        rng = self.rng
        sub = lambda t=dt: self.tree(t, depth - 1)  # noqa: E731
        if dt == BOOL:
            src = DType(rng.choice(FLOATS))
            k = rng.integers(3)
            if k == 0:
                return A.cast(BOOL, sub(src))
            return (A.cmplt if k == 1 else A.cmpne)(sub(src), sub(src))
        if dt in (I32, U32):
            return A.cast(dt, self.tree(DType(rng.choice(FLOATS)), depth - 1))
        kind = rng.choice(["bin", "bin", "bin", "unary", "cast", "where", "const_bin"])
        if kind in ("bin", "const_bin"):
            op = rng.choice([A.add, A.sub, A.mul, A.idiv, A.mod, A.min, A.max])
            rhs = self.leaf(dt) if kind == "const_bin" else sub()
            return op(sub(), rhs) if rng.random() < 0.7 else op(rhs, sub())
        if kind == "unary":
            fn = rng.choice([A.exp, A.sqrt, A.floor, A.ceil, A.sin, A.log, A.reciprocal, A.erf])
            return fn(sub())
        if kind == "cast":
            return A.cast(dt, sub(DType(rng.choice([t for t in (*FLOATS, I32, U32, BOOL) if t != dt]))))
        return A.where(sub(BOOL), sub(), sub())


_APPROX = {AluOp.Exp, AluOp.Sqrt, AluOp.Sin, AluOp.Log, AluOp.Reciprocal, AluOp.Erf}


def _zero_sign_fixed(e: AluExp) -> AluExp:
    """Every float Min/Max followed by `+ 0.0`: the contract leaves the sign of a zero they return
    free (the simplifier may swap their operands), so both sides compare it as +0."""

    def fix(n: AluExp) -> AluExp | None:
        if n.op in (AluOp.Min, AluOp.Max) and oracle.is_float(str(n.dtype)):
            return AluExp(AluOp.Add, n.dtype, (n, A.const(n.dtype, 0.0)))
        return None

    return e.rewrite(fix)


def _approx_count(e: AluExp) -> int:
    return sum(1 for n in e.nodes() if n.op in _APPROX)


def _same(got: np.ndarray, want: np.ndarray, dt: str, zero_sign: bool) -> np.ndarray:
    if not oracle.is_float(dt):
        return got.astype(np.int64) == want.astype(np.int64)
    g, w = got.astype(np.float64), want.astype(np.float64)
    ok = (g == w) | (np.isnan(g) & np.isnan(w))
    if zero_sign:
        ok &= ~((g == 0) & (w == 0) & (np.signbit(g) != np.signbit(w)))
    return ok


@pytest.mark.parametrize("dt", [F16, F32, F64, BOOL, I32])
def test_simplify_is_sound_on_floats_with_nan_inf_and_rounding(dt: DType) -> None:
    """Random float trees over NaN, ±Inf, ±0, denormals and values that round per dtype: the
    simplified tree computes what the unsimplified one does, lane for lane, zero signs too (where
    Min/Max leave them free, a lane may instead agree once every Min/Max result is made +0).
    Transcendentals are computed by numpy on both sides, so the check is of the rewrites, not of
    accuracy; a tree in which one folds to a constant (the simplifier rounds the exact value, the
    oracle computes in the dtype) is passed over."""
    gen = _Gen({F16: 1, F32: 2, F64: 3, BOOL: 4, I32: 5}[dt])
    env = Env({"gidx": np.arange(N, dtype=np.int32)}, _inputs())
    changed = 0
    for _ in range(700):
        e = gen.tree(dt, 4)
        s = e.simplify()
        changed += s.key() != e.key()
        if _approx_count(s) < _approx_count(e):
            continue  # a transcendental of a constant folded (correctly rounded): not the oracle's ulp
        want, got = (np.broadcast_to(evaluate(t, env), (N,)) for t in (e, s))
        want0, got0 = (np.broadcast_to(evaluate(_zero_sign_fixed(t), env), (N,)) for t in (e, s))
        ok = _same(got, want, str(dt), True) | _same(got0, want0, str(dt), True)
        bad = np.flatnonzero(~ok)
        assert not bad.size, (
            f"{e}\n  simplified to {s}\n  at {SPECIALS[bad[0]]!r}: {want[bad[0]]!r} became {got[bad[0]]!r}"
        )
        if oracle.is_float(str(dt)) and not e.some(lambda n: n.op in _APPROX):
            finite = want[~np.isnan(want.astype(np.float64))].astype(np.float64)
            lo, hi = value_range(e)
            assert finite.size == 0 or (lo <= finite.min() and finite.max() <= hi), (
                f"range of {e}: [{lo}, {hi}] misses {finite.min()}..{finite.max()}"
            )
    assert changed > 50


FOUND = [
    # (tree, why the old rule was wrong)
    (A.mul(A.cast(F16, _read(F64)), A.f16(0)), "x * 0 is NaN for x = ±Inf/NaN and -0 for x < 0"),
    (A.idiv(A.cast(F16, _read(I32)), A.f16(math.inf)), "±Inf / Inf is NaN"),
    (A.cast(BOOL, A.idiv(A.cast(F16, _read(I32)), A.f16(math.inf))), "NaN is true as a bool"),
    (A.cast(BOOL, A.mul(_read(F32), A.f32(0))), "Inf * 0 is NaN, true as a bool"),
    (A.min(A.mod(A.cast(F16, _read(I32)), A.f16(2.5)), A.f16(-3)), "fmod(Inf, c) is NaN"),
    (A.exp(A.mod(_read(F32), A.f32(1.1754943508222875e-38))), "fmod(Inf, tiny) is NaN, not 0"),
    (A.idiv(A.f32(-0.5), A.f32(0.1)), "-0.5 / 0.1 rounds to -5.0 in float32"),
    (A.cast(F32, A.cast(F16, A.i32(1836024908))), "1836024908 is Inf in float16"),
    (
        A.cmplt(
            A.cast(I32, A.idiv(A.f32(-0.5), A.max(A.min(_read(F32), A.f32(0.1)), A.f32(0.1)))), A.i32(-4)
        ),
        "the range of -0.5 / 0.1 truncates the float32 quotient -5.0, not the float64 -4.99...",
    ),
    (
        A.mod(A.cast(F32, A.max(_read(I32), A.i32(0))), A.f32(2.0**31)),
        "int32 max is 2^31 in float32, and fmod(2^31, 2^31) is 0: the range must round",
    ),
    (
        A.cmplt(A.cast(I32, A.cast(F32, A.min(_read(I32), A.i32(2**24 + 3)))), A.i32(2**24 + 4)),
        "2^24 + 3 rounds up to 2^24 + 4 in float32",
    ),
    (
        A.cast(BOOL, A.cast(F16, A.cast(F32, A.max(_read(I32), A.i32(1))) * A.f32(1e-30))),
        "a tiny product is 0 in float16",
    ),
]


@pytest.mark.parametrize("tree,why", FOUND, ids=[w for _, w in FOUND])
def test_float_rewrites_the_fuzzer_found(tree: AluExp, why: str) -> None:
    env = Env({"gidx": np.arange(N, dtype=np.int32)}, _inputs())
    want = np.broadcast_to(evaluate(tree, env), (N,))
    s = tree.simplify()
    got = np.broadcast_to(evaluate(s, env), (N,))
    bad = np.flatnonzero(~_same(got, want, str(tree.dtype), True))
    assert not bad.size, (
        f"{why}: {tree} simplified to {s}; lane {bad[0]}: {want[bad[0]]!r} -> {got[bad[0]]!r}"
    )
