"""Range analysis and rewrite rules for AluExp.

The rules are tinygrad's index algebra as jax-js adopted it, kept only where sound under our
contract: integer rules need the divisor/sign conditions stated in each rule, and floats are
never reassociated or folded through `x*0` / `x+0`, since float32 rounds (and NaN and -0
survive) per op.

int32 and uint32 wrap. A range is of the value a node actually holds: where the exact result of
Add/Sub/Mul/Idiv may leave the dtype, the node may wrap and its range is the dtype's full range.
Rules that reason in Z (dividing a sum term by term, splitting off multiples of a modulus) only
look through nodes that provably do not wrap (`_exact`); Add and Mul are a ring mod 2^32, so
reassociating them is sound either way. Every traversal is iterative: an expression may be
thousands of nodes deep.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce
from typing import NamedTuple

import numpy as np

from jaxcore.alu import AluExp, AluGroup, AluOp, pending
from jaxcore.dtype import INT32_MAX, INT32_MIN, UINT32_MAX, DType, held_by_a_constant, is_float


class Range(NamedTuple):
    """The closed interval `[lo, hi]` an expression's values lie in (`value_range`).

    A NamedTuple, so `lo, hi = value_range(e)` and `value_range(e)[0]` keep working where code
    was written against the plain pair it used to be."""

    lo: float
    hi: float


_Pair = tuple[float, float]  # the rules' working form, before `_set_range` stores a Range
_INF = math.inf
_BOUNDS: dict[DType, tuple[int, int]] = {DType.int32: (INT32_MIN, INT32_MAX), DType.uint32: (0, UINT32_MAX)}
# Ops whose exact integer result can leave the dtype (Idiv only at INT32_MIN / -1).
_WRAPPING = frozenset({AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv})


# Ops whose result a device computes only within a tolerance (conformance/tolerances.py): their
# ranges are widened by this much, relatively and absolutely, so no decision rests on the last ulps.
_APPROX = AluGroup.Approximate
_APPROX_MARGIN = 2.0**-8
_NP_FLOAT: dict[DType, type[np.floating]] = {DType.float16: np.float16, DType.float32: np.float32}


def _round(dtype: DType, v: float) -> float:
    """`v` rounded to nearest in `dtype` (±Inf past its largest value), as the op's result is.

    Rounding is monotone, so an interval of exact results rounds, endpoint by endpoint, to an
    interval that holds every rounded result. (float64 range arithmetic is itself correctly
    rounded, and rounding it again to float32/float16 is innocuous for + - * /.)"""
    t = _NP_FLOAT.get(dtype)
    if t is None:
        return v
    with np.errstate(over="ignore"):
        return float(t(v))


def _trunc_div(a: float, b: float, dtype: DType) -> float:
    """Idiv as the contract defines it: integers truncate; floats truncate the quotient rounded
    to the dtype (-0.5 / 0.1 is -5.0 in float32, so its truncation is -5, not -4)."""
    if isinstance(a, int) and isinstance(b, int) and b != 0:
        n = abs(a) // abs(b)
        return n if (a < 0) == (b < 0) else -n
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(_INF, a) * math.copysign(1, b)
    q = _round(dtype, a / b)
    return math.trunc(q) if math.isfinite(q) else q


def value_range(e: AluExp) -> Range:
    """Conservative [min, max] of the values an expression takes (ints wrapping). Integer ranges
    are finite: an unknown int32 is [INT32_MIN, INT32_MAX].

    A float range bounds the non-NaN values, rounded to the node's dtype, and says nothing about
    NaN: any float node may be NaN (x * 0 is NaN at x = Inf, fmod(Inf, c) is NaN), so no rule may
    use a float range to conclude a value, only to decide a comparison that NaN cannot change."""
    cached = e.__dict__.get("_range")
    if cached is not None:
        return cached
    for node in pending(e, lambda n: "_range" in n.__dict__):
        _set_range(node)
    return e.__dict__["_range"]


def never_wraps(e: AluExp) -> bool:
    """Whether an integer node's value is its op applied to its operands' values in Z (no
    wrap-around): what LLVM's `nsw`/`nuw` flags promise of an add, sub or mul."""
    return _exact(e)


_HUGE = 2**1000


def _exact(e: AluExp) -> bool:
    """Whether the node's value is its op applied to its operands' values in Z: it cannot wrap."""
    value_range(e)
    return not e.__dict__["_wraps"]


def _as_float_bound(v: float) -> float:
    """An integer bound past float64's range (floor() of a huge float is an exact int, and products
    of them grow without limit) as the infinity it stands for."""
    if isinstance(v, int) and not -_HUGE < v < _HUGE:
        return _INF if v > 0 else -_INF
    return v


def _set_range(e: AluExp) -> None:
    lo, hi = map(_as_float_bound, _range_inner(e))
    if math.isnan(lo) or math.isnan(hi):
        lo, hi = -_INF, _INF
    if is_float(e.dtype):
        if e.op in _APPROX:
            lo -= abs(lo) * _APPROX_MARGIN + _APPROX_MARGIN
            hi += abs(hi) * _APPROX_MARGIN + _APPROX_MARGIN
            if e.op in (AluOp.Exp, AluOp.Sqrt):
                lo = max(lo, 0)
        lo, hi = _round(e.dtype, lo), _round(e.dtype, hi)
    wraps = False
    if e.dtype == DType.bool:
        # A bool op's value is (its integer result != 0): 0 is possible iff the raw range holds 0.
        lo, hi = (0 if lo <= 0 <= hi else 1), (0 if lo == hi == 0 else 1)
    elif e.dtype in _BOUNDS:
        blo, bhi = _BOUNDS[e.dtype]
        if lo < blo or hi > bhi:
            if e.op in _WRAPPING:
                # The exact result may leave the dtype: it wraps, to anything.
                wraps, lo, hi = True, blo, bhi
            else:
                # Values never leave the dtype; an unbounded estimate just means unknown.
                lo, hi = max(lo, blo), min(hi, bhi)
        if lo > hi:
            lo, hi = blo, bhi
    ones = _ONES if is_float(e.dtype) else _may_be_one(e, lo, hi)
    if not is_float(e.dtype) and (e.dtype == DType.uint32 or ones >> 31 == 0):
        lo, hi = max(lo, 0), min(hi, ones)  # a value with no bit past `ones`' top one is in [0, ones]
    object.__setattr__(e, "_range", Range(lo, hi))
    object.__setattr__(e, "_wraps", wraps)
    object.__setattr__(e, "_ones", ones)


_ONES = 0xFFFFFFFF  # 32 bits, as every integer dtype (and a bool's 0/1) is held


def _may_be_one(e: AluExp, lo: float, hi: float) -> int:
    """The bits an integer or bool node may have set (two's complement): through and/or/xor and
    shifts by a constant from the operands' own, else from its range. A shader compiler tracks
    bits this way: NVIDIA knew `(u << 31) & 0x55555555` was 0 and folded `f64(that) / x` to 0 where
    x = 0 makes NaN, so such a value must be the constant it is before legalize judges it."""
    if e.op == AluOp.Const:
        return int(e.arg) & _ONES
    if e.op == AluOp.BitCombine:
        a, b = (s.__dict__.get("_ones", _ONES) for s in e.src)
        return a & b if e.arg == "and" else a | b
    if e.op == AluOp.BitShift:
        count = e.src[1].__dict__["_range"]
        if count.lo == count.hi and math.isfinite(count.lo):
            k, a = int(count.lo) % 32, e.src[0].__dict__.get("_ones", _ONES)
            if e.arg == "shl":
                return (a << k) & _ONES
            if e.dtype == DType.uint32 or a >> 31 == 0:
                return a >> k
            return (a >> k) | (_ONES ^ (_ONES >> k))  # an arithmetic shift copies the sign bit
    if 0 <= lo and math.isfinite(hi):
        return min((1 << int(hi).bit_length()) - 1, _ONES)
    return _ONES


def _range_inner(e: AluExp) -> _Pair:
    op = e.op
    s = [x.__dict__["_range"] for x in e.src]  # `pending` ranged the operands first
    try:
        if op == AluOp.Const:
            return (e.arg, e.arg)
        if op == AluOp.Special:
            return (0, e.arg[1] - 1)
        if op == AluOp.Add:
            return (s[0][0] + s[1][0], s[0][1] + s[1][1])
        if op == AluOp.Sub:
            if e.src[0] == e.src[1] and not is_float(e.dtype):  # inf - inf is NaN for floats
                return (0, 0)
            return (s[0][0] - s[1][1], s[0][1] - s[1][0])
        if op == AluOp.Mul:
            c = [a * b for a in s[0] for b in s[1]]
            return (min(c), max(c))
        if op == AluOp.Idiv:
            if s[1][0] <= 0 <= s[1][1]:
                return (-_INF, _INF)
            c = [_trunc_div(a, b, e.dtype) for a in s[0] for b in s[1]]
            return (min(c), max(c))
        if op == AluOp.Div:  # floats only
            if s[1][0] <= 0 <= s[1][1]:
                return (-_INF, _INF)
            c = [a / b for a in s[0] for b in s[1]]
            return (-_INF, _INF) if any(map(math.isnan, c)) else (min(c), max(c))
        if op == AluOp.Mod:
            dlo, dhi = s[1]
            if dlo <= 0 <= dhi:
                if is_float(e.dtype):
                    return (-_INF, _INF)  # fmod(x, 0) is NaN
                dlo, dhi = 0, max(-dlo, dhi)
            elif dhi < 0:
                dlo, dhi = -dhi, -dlo
            m = dhi if is_float(e.dtype) else max(dhi - 1, 0)  # integer x % 0 is 0
            return (min(max(s[0][0], -m), 0), min(max(s[0][1], 0), m))
        if op == AluOp.Min:
            return (min(s[0][0], s[1][0]), min(s[0][1], s[1][1]))
        if op == AluOp.Max:
            return (max(s[0][0], s[1][0]), max(s[0][1], s[1][1]))
        if op in (AluOp.Sin, AluOp.Cos):
            return (-1, 1)
        if op in (AluOp.Asin, AluOp.Atan):
            return (-math.pi / 2, math.pi / 2)
        if op in (AluOp.Exp, AluOp.Sqrt, AluOp.Floor, AluOp.Ceil, AluOp.Log, AluOp.Erf):
            f = {
                AluOp.Exp: lambda v: math.exp(v) if v < 710 else _INF,
                AluOp.Sqrt: lambda v: math.sqrt(v) if v >= 0 else math.nan,
                AluOp.Floor: lambda v: math.floor(v) if math.isfinite(v) else v,
                AluOp.Ceil: lambda v: math.ceil(v) if math.isfinite(v) else v,
                AluOp.Log: lambda v: math.log(v) if v > 0 else (-_INF if v == 0 else math.nan),
                AluOp.Erf: math.erf,
            }[op]
            return (f(s[0][0]), f(s[0][1]))
        if op == AluOp.Erfc:
            return (math.erfc(s[0][1]), math.erfc(s[0][0]))
        if op == AluOp.Reciprocal:
            if s[0][0] <= 0 <= s[0][1]:
                return (-_INF, _INF)
            return (1 / s[0][1], 1 / s[0][0])
        if op == AluOp.Cast:
            return _cast_range(e.dtype, e.src[0].dtype, s[0])
        if op in (AluOp.Cmplt, AluOp.Cmpne):
            return (0, 1)
        if op == AluOp.Where:
            return (min(s[1][0], s[2][0]), max(s[1][1], s[2][1]))
        if (op == AluOp.BitShift and s[0] == (0, 0)) or (e.arg == "and" and (0, 0) in s):
            return (0, 0)  # 0 shifted, or anything and 0: a shader compiler knows it too
    except (OverflowError, ValueError):
        return (-_INF, _INF)
    return (-_INF, _INF)


def _cast_range(dst: DType, src: DType, r: _Pair) -> _Pair:
    lo, hi = r
    if dst == DType.bool:
        if lo == 0 and hi == 0 and not is_float(src):  # a float "0" may be NaN, which is true
            return (0, 0)
        return (0, 1) if lo <= 0 <= hi else (1, 1)
    if dst in (DType.int32, DType.uint32):
        bounds = (INT32_MIN, INT32_MAX) if dst == DType.int32 else (0, UINT32_MAX)
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            return (-_INF, _INF) if dst == DType.int32 else (0, _INF)
        a, b = (max(bounds[0], min(bounds[1], math.trunc(v))) for v in (lo, hi))
        if not is_float(src) and (lo < bounds[0] or hi > bounds[1]):
            return (-_INF, _INF) if dst == DType.int32 else (0, _INF)  # wraps
        if is_float(src):
            a, b = min(a, 0), max(b, 0)  # NaN casts to 0, and float ranges do not exclude NaN
        return (a, b)
    return r


# ---- helpers ---------------------------------------------------------------------------------


def _is_const_int(e: AluExp) -> bool:
    return e.op == AluOp.Const and e.dtype in (DType.int32, DType.uint32)


def _const_factor(e: AluExp) -> int:
    """A constant that visibly divides `e` (through Adds and Muls that do not wrap)."""
    memo: dict[int, int] = {}
    for n in pending(e, lambda n: not _looked_through(n)):
        memo[id(n)] = _const_factor_one(n, memo)
    return memo[id(e)] if id(e) in memo else _const_factor_one(e, memo)


def _looked_through(e: AluExp) -> bool:
    return e.op in (AluOp.Add, AluOp.Mul) and _exact(e)


def _const_factor_one(e: AluExp, memo: dict[int, int]) -> int:
    if e.op == AluOp.Const and not is_float(e.dtype):
        return abs(int(e.arg))
    if not _exact(e):
        return 1
    if e.op == AluOp.Add:
        return math.gcd(*(memo[id(s)] if id(s) in memo else _const_factor_one(s, memo) for s in e.src))
    if e.op == AluOp.Mul:
        if _is_const_int(e.src[0]):
            return abs(int(e.src[0].arg))
        if _is_const_int(e.src[1]):
            return abs(int(e.src[1].arg))
    return 1


def _divides(e: AluExp, v: int) -> AluExp | None:
    """e / v as an exact expression, or None when v does not visibly divide e.

    Only Adds and Muls that do not wrap are looked through: (x*y mod 2^32) / v is not (x/v)*y."""
    if v == 1:
        return e
    if v == 0:
        return None
    memo: dict[int, AluExp | None] = {}
    for n in pending(e, lambda n: not _looked_through(n)):
        memo[id(n)] = _divides_one(n, v, memo)
    return memo[id(e)] if id(e) in memo else _divides_one(e, v, memo)


def _divides_one(e: AluExp, v: int, memo: dict[int, AluExp | None]) -> AluExp | None:
    if e.op == AluOp.Const and not is_float(e.dtype):
        return AluExp.const(e.dtype, int(e.arg) // v) if int(e.arg) % v == 0 else None
    if e.op not in (AluOp.Add, AluOp.Mul) or not _exact(e):
        return None
    a, b = (memo[id(s)] if id(s) in memo else _divides_one(s, v, memo) for s in e.src)
    if e.op == AluOp.Add:
        return AluExp.add(a, b) if a is not None and b is not None else None
    if a is not None:
        return AluExp.mul(a, e.src[1])
    if b is not None:
        return AluExp.mul(e.src[0], b)
    return None


def _split(e: AluExp, op: AluOp) -> list[AluExp]:
    """The operands of a tree of `op` nodes, left to right; a node that may wrap is one operand."""
    out: list[AluExp] = []
    stack = [e]
    while stack:
        n = stack.pop()
        if n.op == op and _exact(n):
            stack.extend(reversed(n.src))
        else:
            out.append(n)
    return out


def _sum_right(terms: list[AluExp]) -> AluExp:
    return reduce(lambda acc, t: AluExp.add(t, acc), reversed(terms[:-1]), terms[-1])


def _sum_left(terms: list[AluExp]) -> AluExp:
    return reduce(AluExp.add, terms[1:], terms[0])


def _fits(dtype: DType, v: float) -> bool:
    lo, hi = _BOUNDS.get(dtype, (0, 1))
    return lo <= v <= hi


def _scaled(c: int, t: AluExp) -> AluExp:
    return t if c == 1 else AluExp.mul(AluExp.const(t.dtype, c), t)


_MAX_TERMS = 64  # sums of more terms are left alone


def _minus_one(e: AluExp) -> bool:
    return e.op == AluOp.Const and e.arg == (-1 if e.dtype == DType.int32 else UINT32_MAX)


def _negated(e: AluExp) -> bool:
    """A Sub or a -1 * x: only a sum with such a term can cancel (tested before walking it)."""
    return e.op == AluOp.Sub or (e.op == AluOp.Mul and (_minus_one(e.src[0]) or _minus_one(e.src[1])))


def _cancel_terms(e: AluExp) -> AluExp | None:
    """`e`, an int32/uint32 sum, with the terms that cancel removed; None if none do."""
    dtype = e.dtype
    plus: dict[AluExp, int] = {}
    minus: dict[AluExp, int] = {}
    leaves = 0
    stack = [(e, 1)]
    while stack:
        n, sign = stack.pop()
        if n.op in (AluOp.Add, AluOp.Sub):
            stack.append((n.src[1], sign if n.op == AluOp.Add else -sign))
            stack.append((n.src[0], sign))
            continue
        if n.op == AluOp.Mul and (_minus_one(n.src[0]) or _minus_one(n.src[1])):  # -1 * x
            a, b = n.src
            stack.append((a if _minus_one(b) else b, -sign))
            continue
        leaves += 1
        if leaves > _MAX_TERMS:
            return None
        side = plus if sign > 0 else minus
        side[n] = side.get(n, 0) + 1
    if not any(t in minus for t in plus):
        return None
    out: AluExp | None = None
    for t in dict.fromkeys([*plus, *minus]):  # first appearance order
        c = plus.get(t, 0) - minus.get(t, 0)
        if c == 0:
            continue
        if out is None:
            out = t if c == 1 else AluExp.mul(t, AluExp.const(dtype, c))
        elif c == 1:
            out = AluExp.add(out, t)
        elif c == -1:
            out = AluExp.sub(out, t)
        else:
            out = AluExp.add(out, AluExp.mul(t, AluExp.const(dtype, c)))
    return AluExp.const(dtype, 0) if out is None else out


# ---- the driver ------------------------------------------------------------------------------


def simplify(e: AluExp, cache: dict[str, AluExp] | None = None) -> AluExp:
    """Rewrite to a fixed point of the rules; equal results are shared through `cache`."""
    memo = e.__dict__.get("_simplified")
    if memo is not None:
        return memo
    if cache is None:
        cache = {}
    # Operands first, bottom-up, so that rules never recurse down a deep expression.
    for node in pending(e, lambda n: "_simplified" in n.__dict__ or n.key() in cache):
        _simplify_node(node, cache)
    return _simplify_node(e, cache)


def _simplify_node(e: AluExp, cache: dict[str, AluExp]) -> AluExp:
    memo = e.__dict__.get("_simplified")
    if memo is not None:
        return memo
    h = e.key()
    hit = cache.get(h)
    if hit is not None:
        object.__setattr__(e, "_simplified", hit)
        return hit
    s = _simplify_inner(e, cache)
    hs = s.key()
    if hs in cache:
        s = cache[hs]
    else:
        cache[hs] = s
    cache[h] = s
    object.__setattr__(e, "_simplified", s)
    return s


def _simplify_inner(e: AluExp, cache: dict[str, AluExp]) -> AluExp:
    src = [simplify(s, cache) for s in e.src]

    def again(x: AluExp) -> AluExp:
        return simplify(x, cache)

    for rules in _RULES:
        out = rules(e, src, again)
        if out is not None:
            return out
    if any(a is not b for a, b in zip(src, e.src)):
        return AluExp(e.op, e.dtype, tuple(src), e.arg)
    return e


def _fold(e: AluExp, src: list[AluExp], again: Callable[[AluExp], AluExp]) -> AluExp | None:
    """Constant folding (R1) and single-valued integer ranges (R2)."""
    op, dtype = e.op, e.dtype
    # R1: constant folding
    if src and op not in AluGroup.Variable and all(s.op == AluOp.Const for s in src):
        c = src[0]
        if op == AluOp.Bitcast and not is_float(c.dtype) and not held_by_a_constant(int(c.arg), dtype):
            return None  # a float32 signalling NaN: its bits stay where they are
        return AluExp.const(dtype, AluExp(op, dtype, tuple(src), e.arg).evaluate({}))
    # R2: a single-valued range is a constant (not for floats: ranges do not exclude NaN, and
    # Max(sin(x), 1) is NaN at x = inf). This takes integer x - x to 0 too, which NVIDIA's GLSL
    # compiler crashed on when left to it (docs/backend-reference.md §6).
    if op != AluOp.Const and not is_float(dtype):
        lo, hi = value_range(e)
        if lo == hi and math.isfinite(lo):
            return AluExp.const(dtype, lo)
    return None


def _identities(e: AluExp, src: list[AluExp], again: Callable[[AluExp], AluExp]) -> AluExp | None:
    """No-op constants (R3: a sound subset for floats) and min/max of one value (R3a)."""
    op, dtype = e.op, e.dtype
    flt = is_float(dtype)
    # R3: no-op constants (sound subset for floats: x*1, x-0, x+(-0))
    if op in AluGroup.Binary:
        for i in (0, 1):
            c = src[i]
            if c.op != AluOp.Const:
                continue
            other = src[1 - i]
            v = c.arg
            if op == AluOp.Add and v == 0 and (not flt or math.copysign(1, v) < 0):
                return other
            if op == AluOp.Sub and i == 1 and v == 0 and (not flt or math.copysign(1, v) > 0):
                return other
            if op == AluOp.Mul and v == 1:
                return other
            if op == AluOp.Mul and v == 0 and not flt:
                return AluExp.const(dtype, 0)
            if op == AluOp.Idiv and i == 1 and v == 1 and not flt:
                return other
            if op == AluOp.Div and i == 1 and v == 1:
                return other
    # R3c: a bool and/or/xor with a constant operand (false && x is false: a reduction whose
    # accumulator only such a term reads is then dead, which Kernel.live drops before a driver sees it)
    if op == AluOp.BitCombine and dtype == DType.bool:
        for i in (0, 1):
            if src[i].op == AluOp.Const:
                v, other = bool(src[i].arg), src[1 - i]
                if e.arg == "and":
                    return other if v else AluExp.bool_(False)
                if e.arg == "or":
                    return AluExp.bool_(True) if v else other
                if not v:  # xor
                    return other
    # R3a: min(x, x) = max(x, x) = x, in every dtype (NaN and -0 included); x | x = x & x = x and
    # x ^ x = 0 (a compiler decides them, then folds what they feed: lavapipe made
    # bitcast<f32>(v | v) - bitcast<f32>(v) zero for a NaN v)
    if op in (AluOp.Min, AluOp.Max) and src[0] == src[1]:
        return src[0]
    if op == AluOp.BitCombine and src[0] == src[1]:
        return src[0] if e.arg in ("and", "or") else AluExp.const(dtype, 0)
    # a bitcast of an int32 <-> uint32 cast is one of its operand: the cast keeps the bits (lavapipe
    # made bitcast<f32>(i32(u)) - bitcast<f32>(u) zero for a NaN pattern u)
    if op == AluOp.Bitcast and e.arg is None and src[0].op == AluOp.Cast:
        inner = src[0].src[0]
        if {src[0].dtype, inner.dtype} <= {DType.int32, DType.uint32}:
            return again(AluExp.bitcast(dtype, inner))
    # and a bitcast of a bitcast is one bitcast (lavapipe decided it, making bitcast<f32>(i32(x))
    # - bitcast<f32>(u32(x)) zero for a NaN x; here it is x - x, which legalize keeps apart)
    if op == AluOp.Bitcast and e.arg is None and src[0].op == AluOp.Bitcast and src[0].arg is None:
        inner = src[0].src[0]
        return inner if inner.dtype == dtype else again(AluExp.bitcast(dtype, inner))
    return None


def _cancellations(e: AluExp, src: list[AluExp], again: Callable[[AluExp], AluExp]) -> AluExp | None:
    """Integer terms that cancel (R3b) and negated terms (R4)."""
    op, dtype = e.op, e.dtype
    flt = is_float(dtype)
    # R3b: integer terms that cancel (x - x, x + (0 - x), -1 * x + x, (x + y) - x): Add and Sub
    # wrap as a ring, so this is sound; NVIDIA's GLSL compiler crashed on such sums left to it
    if op in (AluOp.Add, AluOp.Sub) and dtype in _BOUNDS and (op == AluOp.Sub or any(map(_negated, src))):
        cancelled = _cancel_terms(AluExp(op, dtype, tuple(src), e.arg))
        if cancelled is not None:
            return again(cancelled)
    # R4: x + (-1*y) -> x - y ; x - (-1*y) -> x + y
    if op in (AluOp.Add, AluOp.Sub) and src[1].op == AluOp.Mul and not flt:
        m = src[1]
        y = None
        if m.src[0].op == AluOp.Const and m.src[0].arg == -1:
            y = m.src[1]
        elif m.src[1].op == AluOp.Const and m.src[1].arg == -1:
            y = m.src[0]
        if y is not None:
            return AluExp(AluOp.Sub if op == AluOp.Add else AluOp.Add, dtype, (src[0], y))
    return None


def _decided(e: AluExp, src: list[AluExp], again: Callable[[AluExp], AluExp]) -> AluExp | None:
    """Where/comparisons decided by value ranges (R5-R8)."""
    op, dtype = e.op, e.dtype
    # R5: where(c, 1, 0) -> cast(c); not where(c, 1, -0.0), whose false lanes keep the sign
    if op == AluOp.Where and src[1].op == AluOp.Const and src[2].op == AluOp.Const:
        if src[1].arg == 1 and src[2].arg == 0 and math.copysign(1.0, src[2].arg) > 0:
            return AluExp.cast(dtype, src[0])
    # A select of one value is that value, and x != x is false for an integer or a bool: a compiler
    # decides both, and then folds what they feed (lavapipe: f16(select(c, v, v)) - f16(v) gave 0
    # where inf - inf is NaN), so the legalizer must see what the compiler will
    if op == AluOp.Where and src[1] == src[2]:
        return src[1]
    if op == AluOp.Cmpne and src[0] == src[1] and not is_float(src[0].dtype):
        return AluExp.bool_(False)
    # R6, R7: comparisons decided by ranges; x < x is false in every dtype (NaN < NaN too), which
    # a compiler assuming finite math would decide itself, and then fold what the select feeds
    # (lavapipe: select(x < x, y, 0) * f16(NaN) gave 0)
    if op == AluOp.Cmplt and src[0] == src[1]:
        return AluExp.bool_(False)
    if op == AluOp.Cmplt:
        (a0, a1), (b0, b1) = value_range(src[0]), value_range(src[1])
        if a0 >= b1:
            return AluExp.bool_(False)
        if a1 < b0 and not is_float(src[0].dtype):  # NaN < y is false whatever the ranges say
            return AluExp.bool_(True)
    if op == AluOp.Cmpne:
        (a0, a1), (b0, b1) = value_range(src[0]), value_range(src[1])
        if a1 < b0 or a0 > b1:
            return AluExp.bool_(True)
    # R8: where with a decided condition
    if op == AluOp.Where:
        c0, c1 = value_range(src[0])
        if c1 == 0:
            return src[2]
        if c0 == 1:
            return src[1]
    return None


def _index_algebra(e: AluExp, src: list[AluExp], again: Callable[[AluExp], AluExp]) -> AluExp | None:
    """Index arithmetic: remainders and quotients of affine terms (R9-R13)."""
    op, dtype = e.op, e.dtype
    # R9: x % C where 0 <= x < C
    if op == AluOp.Mod and src[1].op == AluOp.Const:
        x0, x1 = value_range(src[0])
        if x0 >= 0 and x1 < src[1].arg:
            return src[0]
    # R10: (x % A) % B -> x % min(A, B) when one divides the other
    if op == AluOp.Mod and _is_const_int(src[1]) and src[0].op == AluOp.Mod and _is_const_int(src[0].src[1]):
        a, b = int(src[0].src[1].arg), int(src[1].arg)
        if a > 0 and b > 0 and (a % b == 0 or b % a == 0):
            return simplify(AluExp.mod(src[0].src[0], AluExp.const(dtype, min(a, b))), {})
    # R11: (x / A) * A + x % A -> x ; ((x / A) % B) * A + x % A -> x % (A*B)
    if op == AluOp.Add and src[0].op == AluOp.Mul and src[1].op == AluOp.Mod:
        mul, md = src[0], src[1]
        a_mul, a_mod = mul.src[1], md.src[1]
        if _is_const_int(a_mul) and _is_const_int(a_mod) and a_mul.arg == a_mod.arg != 0:
            u, x, a = mul.src[0], md.src[0], int(a_mul.arg)
            if u.op == AluOp.Idiv and _is_const_int(u.src[1]) and u.src[1].arg == a and u.src[0] == x:
                return x
            if (
                u.op == AluOp.Mod
                and _is_const_int(u.src[1])
                and u.src[0].op == AluOp.Idiv
                and _is_const_int(u.src[0].src[1])
                and u.src[0].src[1].arg == a
                and u.src[0].src[0] == x
                and _fits(dtype, a * int(u.src[1].arg))
            ):
                return again(AluExp.mod(x, AluExp.const(dtype, a * int(u.src[1].arg))))
    # R12: (x*A + y) / B with B | A (sound for truncating division)
    if op == AluOp.Idiv and _is_const_int(src[1]) and int(src[1].arg) != 0 and _exact(src[0]):
        r = _rule_idiv_factor(src[0], int(src[1].arg), dtype)
        if r is not None:
            return again(r)
    # R13: (x*A + y) % B with B | A, everything non-negative
    if op == AluOp.Mod and _is_const_int(src[1]) and int(src[1].arg) > 0 and value_range(src[0])[0] >= 0:
        # (x*A + y) mod 2^32 is not congruent to y modulo B: the numerator must not wrap.
        r = _rule_mod_factor(src[0], int(src[1].arg), dtype) if _exact(src[0]) else None
        if r is not None:
            return again(r)
    return None


def _canonical(e: AluExp, src: list[AluExp], again: Callable[[AluExp], AluExp]) -> AluExp | None:
    """Commutative canonicalisation (R14) and integer division by constants (R15, R16)."""
    op, dtype = e.op, e.dtype
    flt = is_float(dtype)
    # R14: commutative canonicalisation (constants right; integers only are reassociated)
    if op in AluGroup.Commutative:
        p = lambda a, b: AluExp(op, dtype, (a, b))  # noqa: E731
        if src[0].op == AluOp.Const and src[1].op != AluOp.Const:
            return again(p(src[1], src[0]))
        if not flt:
            if src[0].op == op and src[0].src[1].op == AluOp.Const:
                x, k = src[0].src
                if src[1].op == AluOp.Const:
                    return again(p(x, p(k, src[1])))
                return again(p(p(x, src[1]), k))
            if src[1].op == op and src[1].src[1].op == AluOp.Const:
                y, k = src[1].src
                return again(p(p(src[0], y), k))
    # R15, R16: integer division/remainder by a constant
    if op in (AluOp.Idiv, AluOp.Mod) and _is_const_int(src[1]) and not flt:
        r = _divide_by_gcd(op, src[0], int(src[1].arg), dtype)
        if r is not None:
            return again(r)
        r = _simplify_remainder(op, src[0], int(src[1].arg), dtype)
        if r is not None:
            return again(r)
    return None


_RULES = (_fold, _identities, _cancellations, _decided, _index_algebra, _canonical)


def _rule_idiv_factor(numer: AluExp, b: int, dtype: DType) -> AluExp | None:
    def q_of(m: AluExp, i: int) -> AluExp | None:
        c = m.src[i]
        if _is_const_int(c) and int(c.arg) % b == 0:
            k = int(c.arg) // b
            x = m.src[1 - i]
            return x if k == 1 else AluExp.mul(x, AluExp.const(dtype, k))
        return None

    for i in (0, 1):
        if numer.op == AluOp.Mul:
            q = q_of(numer, i)
            if q is not None:
                return q
        if numer.op == AluOp.Add:
            for j in (0, 1):
                m = numer.src[j]
                if m.op != AluOp.Mul or not _exact(m):
                    continue
                q = q_of(m, i)
                if q is None:
                    continue
                y = numer.src[1 - j]
                exact = _divides(y, b)
                if exact is not None:
                    return AluExp.add(q, exact)
                (q0, q1), (y0, y1) = value_range(q), value_range(y)
                if b > 0 and ((q0 >= 0 and y0 >= 0) or (q1 <= 0 and y1 <= 0)):
                    return AluExp.add(q, AluExp.idiv(y, AluExp.const(dtype, b)))
    return None


def _rule_mod_factor(numer: AluExp, b: int, dtype: DType) -> AluExp | None:
    for i in (0, 1):
        if numer.op == AluOp.Add:
            t, x = numer.src[i], numer.src[1 - i]
            if value_range(x)[0] < 0:
                continue
            if _is_const_int(t) and int(t.arg) % b == 0:
                return AluExp.mod(x, AluExp.const(dtype, b))
            if t.op == AluOp.Mul and _exact(t):
                for j in (0, 1):
                    c = t.src[j]
                    if _is_const_int(c) and int(c.arg) % b == 0:
                        return AluExp.mod(x, AluExp.const(dtype, b))
        if numer.op == AluOp.Mul and _is_const_int(numer.src[i]):
            a = int(numer.src[i].arg)
            if a % b == 0:
                return AluExp.const(dtype, 0)
            if a % b == 1 and value_range(numer.src[1 - i])[0] >= 0:  # (-x*-5) % 3 is not -x % 3
                return AluExp.mod(numer.src[1 - i], AluExp.const(dtype, b))
    return None


def _divide_by_gcd(op: AluOp, x: AluExp, y: int, dtype: DType) -> AluExp | None:
    terms = _split(x, AluOp.Add)
    factors = [_const_factor(t) for t in terms]
    g = reduce(math.gcd, factors, abs(y))
    if g in (0, 1):
        return None
    parts = []
    for t, f in zip(terms, factors):
        d = _divides(t, f)
        if d is None:
            return None
        parts.append(_scaled(f // g, d) if f // g != 1 else d)
    inner = AluExp(op, dtype, (_sum_right(parts), AluExp.const(dtype, y // g)))
    return AluExp.mul(inner, AluExp.const(dtype, g)) if op == AluOp.Mod else inner


def _simplify_remainder(op: AluOp, x: AluExp, y: int, dtype: DType) -> AluExp | None:
    if y <= 0 or value_range(x)[0] < 0:
        return None
    const_val = 0
    rest = x
    if x.op == AluOp.Add and x.src[1].op == AluOp.Const and _exact(x):
        const_val, rest = int(x.src[1].arg), x.src[0]
    terms, factors = [], []
    for u in _split(rest, AluOp.Add):
        f = _const_factor(u)
        d = _divides(u, f)
        terms.append(d if d is not None else u)
        factors.append(f if d is not None else 1)
    quots = [f // y for f in factors]
    rems = [f % y for f in factors]
    g = reduce(math.gcd, rems, y)
    fire = const_val % y != const_val or g != 1 or any(r == 0 for r in rems)
    fire = fire or (op == AluOp.Mod and any(r != f for r, f in zip(rems, factors)))
    if not fire:
        return None
    quo_terms = [AluExp.const(dtype, const_val // y)]
    rem_terms = [AluExp.const(dtype, (const_val % y) // g)]
    rem_lo: float = (const_val % y) // g
    rem_hi: float = rem_lo
    for t, f, q, r in zip(terms, factors, quots, rems):
        c = f // g if op == AluOp.Idiv and r != 0 else r // g
        rem_terms.append(_scaled(c, t))
        t_lo, t_hi = value_range(t)
        rem_lo, rem_hi = rem_lo + min(c * t_lo, c * t_hi), rem_hi + max(c * t_lo, c * t_hi)
        if not (op == AluOp.Idiv and r != 0):
            quo_terms.append(_scaled(q, t))
    # The remainder is divided (or reduced) below, so its exact value must fit, and be >= 0.
    # The quotient is only added: a ring operation, right modulo 2^32 whatever it wraps through.
    if rem_lo < 0 or not _fits(dtype, rem_hi):
        return None
    rem = _sum_left(rem_terms)
    quo = _sum_left(quo_terms)
    if op == AluOp.Mod:
        return AluExp.add(
            AluExp.mul(AluExp.const(dtype, g), AluExp.mod(rem, AluExp.const(dtype, y // g))),
            AluExp.const(dtype, const_val % g),
        )
    return AluExp.add(AluExp.idiv(rem, AluExp.const(dtype, y // g)), quo)
