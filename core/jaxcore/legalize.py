"""Contract legalization: AluExp rewrites that make a target's native ops compute the contract.

Shader languages leave parts of the contract undefined or define them differently: integer
division by zero (WGSL gives the dividend, GLSL nothing), NaN in `min`/`max`, float-to-int casts
out of range or of NaN, shift counts of 32 or more, and `x != x`, which a compiler may fold away.
A target states what it does natively as `TargetTraits`; `legalize` rewrites every node the
target cannot compute exactly into nodes it can, so one renderer serves every dialect and the
contract is written down once. What an AluExp cannot express (exact `fmod`, accurate
transcendentals) the dialect renders as a helper function; `TargetTraits` says which.

Rewrites run once, after tuning and simplification, and their output is not simplified again:
the simplifier knows the contract, not the target, and could undo a guard.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from jaxcore.alu import NORMAL_RANGE, AluExp, AluOp
from jaxcore.dtype import INT32_MAX, INT32_MIN, UINT32_MAX, DType, is_float, is_int, to_numpy
from jaxcore.floatbits import pack


@dataclass(frozen=True)
class TargetTraits:
    """What a target computes natively, exactly as the contract wants it."""

    native_int_div_by_zero_is_zero: bool = False  # x / 0 == 0 for int32/uint32
    native_int_mod_by_zero_is_zero: bool = False  # x % 0 == 0
    native_int_min_div_neg1: bool = False  # INT_MIN / -1 == INT_MIN and INT_MIN % -1 == 0
    native_int_mod_truncates: bool = True  # integer % takes the dividend's sign
    # float32 a / b is correctly rounded (Vulkan and GLSL ES only promise 2.5 ULP), so float Idiv
    # (the truncated, correctly rounded quotient) can use it as is
    native_correct_division: bool = False
    # the float Idiv the dialect spells (float64's; float32's above) truncates its quotient exactly
    # (lavapipe, Mesa 22.3 on an x86 without AVX-512, returned WGSL's float64 trunc(q) as q)
    native_float_trunc: bool = True
    native_nan_minmax: bool = False  # min/max return NaN when either operand is NaN
    native_saturating_casts: bool = False  # float->int clamps to [MIN, MAX] and NaN -> 0
    native_nan_compare: bool = False  # `a != b` is true for NaN and never folded away
    nan_check_by_bits: bool = True  # test NaN through bitcast (else the dialect's isnan)
    shift_masks_count: bool = False  # `x << 33` == `x << 1`
    native_float_to_bool: bool = False  # bool(x) is x != 0 with NaN true
    has_f16: bool = False
    has_f64: bool = False
    exact_transcendentals: bool = False  # built-in sin/cos/exp/log/... meet the tolerance table
    # Replace f32/f16 transcendentals by AluExp trees (jaxcore.expansions) instead of dialect helpers.
    expand_transcendentals: bool = False
    # The driver simplifies float arithmetic as if there were no NaN, infinity or -0 (x * 0 -> 0,
    # x - x -> 0, x + 0 -> x): an operand that would let it is passed through `opaque`.
    folds_float_identities: bool = False
    # The driver may fuse a float multiply into the add or subtract that uses it (SPIR-V without
    # NoContraction: NVIDIA's Vulkan driver does), rounding once where the contract rounds twice:
    # every such product is passed through `opaque`.
    contracts_mul_add: bool = False
    # The compiler may assume no float is NaN or infinite (WGSL and GLSL allow it) and fold by that
    # what it knows at compile time: constants, what it computes from them, and a reduction's
    # accumulator when the items are constants (the loop unrolls and folds). 0 / acc became 0,
    # NaN - NaN 0 and x / -0.0 +inf on lavapipe. Every operand of float + - * / whose value it
    # may know (but a finite nonzero constant) is passed through `opaque`.
    assumes_finite_math: bool = False
    # The compiler may divide by a constant as a multiplication by its reciprocal, which rounds
    # twice (NVIDIA's Vulkan driver: float64 x / 7 an ulp off): a divisor it may know is opaque.
    divides_by_reciprocal: bool = False
    # The compiler may reassociate float sums around unknown operands ((a - b) - c -> a - (b + c)):
    # NVIDIA's Vulkan driver gave (x - x) - 4 as 4 - 2^-51 and (1 - g) - g / 7 an ulp off (float64).
    # Every sum or difference taken by another is passed through `opaque`.
    reassociates_sums: bool = False
    # In a program that also computes float64, float32 is not IEEE's (NVIDIA's Vulkan driver, only
    # there): quotients an ulp off even spelled exactly. Such a program (`for_kernel`) divides
    # float32 in float64, rounded once (exact: 53 >= 2 * 24 + 2 bits). There `0 < x` and
    # `min(x, 0)` also took a subnormal x as 0, though spelled on its bits: where subnormals are
    # spelled exact, an operand whose bits an op tests goes through `opaque` there (`_bits_hidden`).
    f32_inexact_beside_f64: bool = False
    beside_f64: bool = False  # set by `for_kernel`, never by a dialect
    # float16 is held in float32 (`jaxcore.half`): every float16 op whose float32 result may not be
    # a float16 value is computed in float32 and rounded back (`Cast<float16>`), casts into float16
    # go through float32; the dialect spells float16 as float32, the f32 -> f16 cast as the
    # rounding helper and memory as 16-bit patterns. For a driver whose float16 arithmetic or
    # conversions are not IEEE's (NVIDIA's Vulkan driver), or a target without float16.
    f16_in_f32: bool = False
    # float32 subnormal operands and results may be flushed to zero (WGSL and GLSL ES allow it):
    # the dialect spells float32 + - * 1/x, compares, min/max, floor/ceil/sqrt through the exact
    # helpers of `jaxcore.softfloat` (native where an operand or result is known normal).
    flushes_subnormals: bool = False
    # The compiler's integer algebra crashed cancelling a term across an int32 <-> uint32
    # conversion (NVIDIA's GL driver, SIGSEGV compiling `int(c - uint(x)) + x`): the uint32 side
    # of a conversion of integer arithmetic goes through `opaque` (`_sign_cast_hidden`).
    crashes_cancelling_across_sign_casts: bool = False


OPAQUE = "opaque"


def opaque(x: AluExp) -> AluExp:
    """`x`, through an identity the target's compiler cannot see through (a same-dtype Bitcast
    marked "opaque", which a dialect renders with a value only known at run time, e.g. a uniform
    that is always 0): so `x * opaque(0.0)` stays a multiplication."""
    return AluExp(AluOp.Bitcast, x.dtype, (x,), OPAQUE)


def is_opaque(e: AluExp) -> bool:
    """`e` is an identity made by `opaque`."""
    return e.op == AluOp.Bitcast and e.arg == OPAQUE


def _zero_const(e: AluExp) -> bool:
    return e.op == AluOp.Const and e.arg == 0


def _c(dtype: DType, v: float | int) -> AluExp:
    return AluExp.const(dtype, v)


def _is_nonzero_const(e: AluExp) -> bool:
    return e.op == AluOp.Const and e.arg != 0


def is_nan(x: AluExp, traits: TargetTraits) -> AluExp:
    """`x` is NaN, decided by its bits: exponent all ones and a nonzero mantissa.

    float16 and float64 are widened/narrowed to float32 first, which keeps NaN a NaN (a float64
    too large for float32 becomes an infinity, not a NaN), so one 32-bit test serves all three.
    """
    if not traits.nan_check_by_bits:
        return AluExp(AluOp.Cmpne, DType.bool, (x, x), "isnan")
    x32 = x if x.dtype == DType.float32 else AluExp(AluOp.Cast, DType.float32, (x,))
    bits = AluExp.bit_and(AluExp.bitcast(DType.uint32, x32), _c(DType.uint32, 0x7FFFFFFF))
    return AluExp.cmplt(_c(DType.uint32, 0x7F800000), bits)


def _or(a: AluExp, b: AluExp) -> AluExp:
    return AluExp(AluOp.BitCombine, DType.bool, (a, b), "or")


def _and(a: AluExp, b: AluExp) -> AluExp:
    return AluExp(AluOp.BitCombine, DType.bool, (a, b), "and")


def _ne(a: AluExp, b: AluExp | int) -> AluExp:
    b = b if isinstance(b, AluExp) else _c(a.dtype, b)
    return AluExp(AluOp.Cmpne, DType.bool, (a, b))


def _eq(a: AluExp, b: AluExp | int) -> AluExp:
    return _ne(_ne(a, b), AluExp.bool_(True))


def for_kernel(traits: TargetTraits, exps: Iterable[AluExp]) -> TargetTraits:
    """The traits to legalize one kernel's expressions with: what the target does in a program
    that holds float64 work where that differs (`f32_inexact_beside_f64`)."""
    f64 = DType.float64
    if traits.f32_inexact_beside_f64 and any(
        e.some(lambda n: n.dtype == f64 or any(s.dtype == f64 for s in n.src)) for e in exps
    ):
        return replace(traits, beside_f64=True)
    return traits


def legalize(exp: AluExp, traits: TargetTraits) -> AluExp:
    """Rewrite `exp` so that every node means, on the target, what the contract says."""
    if traits.expand_transcendentals and not traits.exact_transcendentals:
        from jaxcore.expansions import expand_transcendentals

        exp = expand_transcendentals(exp)
    if traits.f16_in_f32:
        exp = exp.rewrite(_hold_f16)
    exp = exp.rewrite(lambda node: _legalize_node(node, traits))
    if traits.crashes_cancelling_across_sign_casts:
        exp = exp.rewrite(_sign_cast_hidden)
    if not (
        traits.crashes_cancelling_across_sign_casts
        or traits.folds_float_identities
        or traits.contracts_mul_add
        or traits.assumes_finite_math
        or traits.divides_by_reciprocal
        or (traits.beside_f64 and traits.flushes_subnormals)  # see _bits_hidden
    ):
        # a compiler that keeps float ops as written needs no opaque identity (the expansions
        # write some), and a dialect for it need not spell one
        return exp.rewrite(lambda node: node.src[0] if is_opaque(node) else None)
    # last, so what the expansions built (Idiv's exact residuals) is guarded too
    known: dict[str, bool] = {}
    return exp.rewrite(lambda node: _guard_known(node, traits, known))


_INT_ARITH = frozenset({AluOp.Add, AluOp.Sub, AluOp.Mul})


def _sign_cast_hidden(e: AluExp) -> AluExp | None:
    """An int32 <-> uint32 conversion of integer arithmetic with its uint32 side through
    `opaque` (see `TargetTraits.crashes_cancelling_across_sign_casts`)."""
    if e.op not in (AluOp.Cast, AluOp.Bitcast) or is_opaque(e):
        return None
    x = e.src[0]
    if not (is_int(e.dtype) and is_int(x.dtype)) or e.dtype == x.dtype or x.op not in _INT_ARITH:
        return None
    if e.dtype == DType.int32:
        return AluExp(e.op, e.dtype, (opaque(x),), e.arg)
    return opaque(e)


# float16 ops whose float32 result, from float16 operands, need not be a float16 value. The rest
# are closed in float16 (min, max, floor, ceil, fmod, select) or legalized by their own rule
# (Idiv rounds its quotient to float16 before truncating it).
_ROUNDED_F16 = frozenset({AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Div, AluOp.Sqrt, AluOp.Reciprocal})


def _hold_f16(e: AluExp) -> AluExp | None:
    """The `f16_in_f32` rewrite of one node (see `TargetTraits.f16_in_f32`)."""
    f16, f32 = DType.float16, DType.float32
    if e.dtype != f16:
        return None
    if e.op in _ROUNDED_F16:
        # Operands and result are never subnormal in float32 (float16's smallest value is 2^-24, a
        # product of two 2^-48), yet not NORMAL_RANGE: a flushing target's helper decides NaN,
        # infinity and zero on the bits, where a compiler that assumes finite math folds the
        # native op (NVIDIA made f16(tiny) * NaN 0, having proved the rounded operand 0 from its
        # integer ops).
        return AluExp.cast(f16, AluExp(e.op, f32, tuple(AluExp.cast(f32, s) for s in e.src)))
    if e.op == AluOp.Cast and e.src[0].dtype == DType.float64:
        from jaxcore.half import odd_f32

        return AluExp.cast(f16, odd_f32(e.src[0]))
    if e.op == AluOp.Cast and e.src[0].dtype in (DType.int32, DType.uint32):
        # exact in float32 up to 2^24; anything larger is past float16's range either way
        return AluExp.cast(f16, AluExp.cast(f32, e.src[0]))
    return None


# What a compiler cannot know before the kernel runs: buffer reads, opaque values, and indices and
# loop variables but two: the epilogue's accumulator (from constant items) and the reduction index,
# which it may know as it unrolls a short reduction loop (lavapipe folded Bitcast<float32>(ridx) * x
# to 0 in the copy where ridx = 0, so 0 * inf gave 0, not NaN).
_READS = frozenset({AluOp.GlobalIndex, AluOp.GlobalView})
ACC = "acc"
_UNROLLED = frozenset({ACC, "ridx"})


def _is_known(e: AluExp, known: dict[str, bool]) -> bool:
    """Whether the compiler may know `e`'s value when it compiles (its operands already judged)."""
    if e.op in _READS or is_opaque(e):
        return False
    if e.op == AluOp.Variable:
        return e.arg in _UNROLLED
    if e.op == AluOp.Special:  # the tuner's grid and loop indices, named first in its arg
        return e.arg[0] == "ridx" or e.arg[1] == 1  # a grid of one: its bounds check tells it 0
    if not is_float(e.dtype) and e.vmin == e.vmax:  # 0 << x, x & 0 (lavapipe: that times NaN gave 0)
        return True
    return all(known.get(s.key(), False) for s in e.src)


def _guard_known(e: AluExp, t: TargetTraits, known: dict[str, bool]) -> AluExp:
    """`_guard_float_node`, after passing operands the compiler may know through `opaque` where it
    assumes finite math; records whether the result is known, for the nodes above."""
    if t.assumes_finite_math and is_float(e.dtype) and e.op in _FOLDABLE:
        src = tuple(opaque(s) if known.get(s.key(), False) and not _finite_nonzero(s) else s for s in e.src)
        src = tuple(opaque(s) if _a_choice(s, known) else s for s in src)
        if src != e.src:
            e = AluExp(e.op, e.dtype, src, e.arg)
    elif t.assumes_finite_math and e.op in _SEES_INFINITY and any(_changeable(e, s) for s in e.src):
        # An infinity or NaN it can see is undefined to such a compiler: NVIDIA made
        # select(b, inf, f64(x)) * 0 zero (it may move the product into the select's arms); a -0.0
        # is a zero whose sign it may drop.
        e = AluExp(e.op, e.dtype, tuple(_hidden_const(s) if _changeable(e, s) else s for s in e.src), e.arg)
    if t.assumes_finite_math and e.op == AluOp.Where and is_float(e.dtype):
        e = _unpinned(e)
    if (
        t.divides_by_reciprocal
        and e.op in (AluOp.Idiv, AluOp.Div)
        and is_float(e.dtype)
        and known.get(e.src[1].key(), False)
    ):
        e = AluExp(e.op, e.dtype, (e.src[0], opaque(e.src[1])), e.arg)
    out = _guard_float_node(e, t) or e
    if t.reassociates_sums and out.op in (AluOp.Add, AluOp.Sub) and is_float(out.dtype):
        a, b = out.src
        hid = (_hide(a, b) if _is_sum(a) else a, _hide(b, a) if _is_sum(b) else b)
        if hid != out.src:
            out = AluExp(out.op, out.dtype, hid, out.arg)
    known[out.key()] = _is_known(out, known)
    return out


def _unpinned(e: AluExp) -> AluExp:
    """A select whose arms convert to float an integer its condition pins (to one or two values
    in an arm), with each such conversion near the arm's top through `opaque`: the compiler may
    take the integer's value in that arm from the test. NVIDIA's Vulkan driver made `select(0,
    f64(x) * f64(u), u == 0)` zero for an infinite x (u is 0 in that arm, and x * 0 is 0 to it).
    The search is bounded (`_PIN_DEPTH` levels, as `_near`'s), so nested selects stay linear."""
    cond, *arms = e.src
    pinned = {x for n in cond.nodes() for x in _pins(n)}
    if not pinned:
        return e
    memo: dict[tuple[str, int], AluExp] = {}

    def hide(n: AluExp, depth: int) -> AluExp:
        if depth == 0 or is_opaque(n) or not n.src:
            return n
        key = (n.key(), depth)
        if key not in memo:
            if n.op == AluOp.Cast and is_float(n.dtype) and not is_float(n.src[0].dtype):
                out = opaque(n) if pinned & _below(n.src[0], _PIN_DEPTH) else n
            else:
                src = tuple(hide(s, depth - 1) for s in n.src)
                out = n if src == n.src else AluExp(n.op, n.dtype, src, n.arg)
            memo[key] = out
        return memo[key]

    new = tuple(hide(a, _PIN_DEPTH) for a in arms)
    return e if new == tuple(arms) else AluExp(e.op, e.dtype, (cond, *new), e.arg)


_PIN_DEPTH = 4


def _below(e: AluExp, depth: int) -> set[AluExp]:
    """`e` and the nodes below it, `depth` levels down."""
    out, level = {e}, [e]
    for _ in range(depth):
        level = [s for n in level for s in n.src]
        out.update(level)
    return out


def _pins(n: AluExp) -> tuple[AluExp, ...]:
    """The integer that test `n` pins to at most two values when it is true or when it is false:
    `x != c`, `bool(x)` (x != 0), and `x < c` or `c < x` next to an end of x's range."""
    if n.op == AluOp.Cast and n.dtype == DType.bool and not is_float(n.src[0].dtype):
        return (n.src[0],)
    if n.op not in (AluOp.Cmpne, AluOp.Cmplt) or is_float(n.src[0].dtype):
        return ()
    a, b = n.src
    if n.op == AluOp.Cmpne:
        return tuple(x for x, c in ((a, b), (b, a)) if c.op == AluOp.Const and x.op != AluOp.Const)
    if b.op == AluOp.Const and a.op != AluOp.Const:  # a < c: [vmin, c - 1] or [c, vmax]
        return (a,) if b.arg - a.vmin <= 2 or a.vmax - b.arg <= 1 else ()
    if a.op == AluOp.Const and b.op != AluOp.Const:  # c < b: [c + 1, vmax] or [vmin, c]
        return (b,) if b.vmax - a.arg <= 2 or a.arg - b.vmin <= 1 else ()
    return ()


def _is_sum(e: AluExp) -> bool:
    return _bare(e).op in (AluOp.Add, AluOp.Sub)


def _a_choice(e: AluExp, known: dict[str, bool]) -> bool:
    """A float the compiler knows up to a run-time choice: a bool cast to it (0 or 1), a select
    between values it knows (through casts between floats). NVIDIA's Vulkan driver made
    `x * f64(b)` a select of x and 0, so that NaN * 0 gave 0, and `select(b, 0, 0) / 0` 0."""
    e = _bare(e)
    if e.op == AluOp.Cast:  # through a chain of casts: f64(u32(b)) too (NVIDIA: NaN * f64(u32(0)) = 0)
        while e.op == AluOp.Cast and e.src[0].dtype != DType.bool:
            e = e.src[0]
            # an integer of two values is a choice too: NVIDIA made f64(max(u32(b), 0)) * inf 0
            if not is_float(e.dtype) and e.vmax - e.vmin <= 1:
                return True
        return e.op == AluOp.Cast
    # a select of such values too: NVIDIA proved select(b, 0, f64(b)) zero and made its / 0 zero;
    # and a select with one arm it knows (a masked read, select(c, x[i], 0)): lavapipe moved
    # `v / o(v)` into the arms and made the masked 0 / 0 zero
    return e.op == AluOp.Where and any(known.get(v.key(), False) or _a_choice(v, known) for v in e.src[1:])


# Ops that pass or compare a float without rounding it: + - * / are handled above.
_SEES_INFINITY = frozenset({AluOp.Where, AluOp.Min, AluOp.Max, AluOp.Cmplt, AluOp.Cmpne})


def _non_finite_const(e: AluExp) -> bool:
    """An infinity, a NaN or -0.0: constants such a compiler may change (lavapipe made
    `select(c, -0.0, 1.0)` the float of `!c`, +0.0 where -0.0 was due)."""
    b = _bare(e)
    if b.op != AluOp.Const or not is_float(b.dtype):
        return False
    return not math.isfinite(b.arg) or (b.arg == 0 and math.copysign(1.0, b.arg) < 0)


def _changeable(e: AluExp, s: AluExp) -> bool:
    """Whether operand `s` of `e` is a constant a finite-math compiler may change there: a
    non-finite or -0.0 one anywhere, and a zero in a select of two float constants, which lavapipe
    made -b2f(!c) (select(c, 0.0, -1.0) gave -0.0; a float32 select of constants is an integer
    select of their bits by then, which NIR matches all the same)."""
    if _non_finite_const(s):
        return True
    arms = e.src[1:] if e.op == AluOp.Where else ()
    return (
        s in arms
        and all(_bare(a).op == AluOp.Const and is_float(a.dtype) for a in arms)
        and _bare(s).arg == 0
    )


def _hidden_const(s: AluExp) -> AluExp:
    """`opaque(s)`; a float zero as an opaque of its float32 bits (cast, exactly, to its dtype), so
    that no float zero literal reaches the compiler: Chromium's WebGPU gave an opaque 0.0 the sign
    of a -0.0 elsewhere in the program."""
    b = _bare(s)
    if not is_float(s.dtype) or b.op != AluOp.Const or b.arg != 0:
        return opaque(s)
    bits = AluExp.const(DType.uint32, int(np.float32(b.arg).view(np.uint32)))
    zero = AluExp(AluOp.Bitcast, DType.float32, (opaque(bits),))
    return zero if s.dtype == DType.float32 else AluExp(AluOp.Cast, s.dtype, (zero,))


def _finite_nonzero(e: AluExp) -> bool:
    return e.op == AluOp.Const and math.isfinite(e.arg) and e.arg != 0


def _guard_float_node(e: AluExp, t: TargetTraits) -> AluExp | None:
    """Operands made opaque where the driver would rewrite the float arithmetic the contract
    rounds per op: products it fuses into the add or subtract that uses them, and identities it
    folds (x - x, x * 0, (x + y) - y, constant chains)."""
    op, dt = e.op, e.dtype
    if not is_float(dt) or op not in _FOLDABLE:
        return None
    out = None
    if t.contracts_mul_add and op in (AluOp.Add, AluOp.Sub) and any(s.op == AluOp.Mul for s in e.src):
        out = e = AluExp(op, dt, tuple(opaque(s) if s.op == AluOp.Mul else s for s in e.src), e.arg)
    if not (t.folds_float_identities or t.assumes_finite_math):
        return out
    a, b = e.src
    # what the driver sees through: a float16 held in float32 is cast for free (f16_in_f32)
    ba, bb = _bare(a), _bare(b)
    in_a, in_b = {_bare(s) for s in ba.src}, {_bare(s) for s in bb.src}
    # (x * c1) * c2 -> x * (c1 * c2), (x + c1) - c2 -> x + (c1 - c2): a constant folded into
    # another changes the rounding (x + 2^24 - 2^24 is no longer x rounded) and overflow
    # (0 * 3e38 * 10 becomes 0 * inf = NaN); so does one reassociated, (x - y) + c -> x - (y - c)
    # Beside an op of its own family the compound operand is hidden, not the constant: NVIDIA
    # reassociated (-6 - x) - o(0.1) into -6 - (x + o(0.1)) (float64), an unknown being no obstacle
    # to its algebra. Across families ((x * c1) + c2) the constant is: an opaque constant is
    # computed once, an opaque product per element (5 % of a softmax on the H200).
    if _const_over_const(op, b, a):
        same = _FAMILY.get(a.op) == _FAMILY[op]
        return AluExp(op, dt, (_hide(a, b), b) if same else (a, _hide(b, a)), e.arg)
    if _const_over_const(op, a, b):
        same = _FAMILY.get(b.op) == _FAMILY[op]
        return AluExp(op, dt, (a, _hide(b, a)) if same else (_hide(a, b), b), e.arg)
    # x - x, x / x, x * 0, x + 0, x - (x - y); x[i] - x[j] where it may prove i = j
    if ba == bb or _zero_const(b) or ba in in_b or (op in _CANCELS and _one_buffer(ba, bb)):
        return AluExp(op, dt, (a, _hide(b, a)), e.arg)
    if _shares_a_term(op, ba, bb):  # (c1 - x) - (c2 - x) -> c1 - c2 (NVIDIA, float64)
        return AluExp(op, dt, (a, _hide(b, a)), e.arg)
    if _zero_const(a) or bb in in_a:  # 0 * x, 0 + x, 0 - x; (x + y) - y, select(c, x, x) - x
        return AluExp(op, dt, (_hide(a, b), b), e.arg)
    if bb in _near(ba, 3):  # (select(c, x, x) * 0) / x -> 0 (NVIDIA, float64)
        return AluExp(op, dt, (a, _hide(b, a)), e.arg)
    if ba in _near(bb, 3):
        return AluExp(op, dt, (_hide(a, b), b), e.arg)
    return out


_CANCELS = frozenset({AluOp.Sub, AluOp.Idiv, AluOp.Div})


def _one_buffer(a: AluExp, b: AluExp) -> bool:
    """Two reads of one buffer, whose indices the driver may prove equal: NVIDIA's Vulkan driver
    made float64 `x[min(g, 10)] / x[g]` 1 for x = 0, its grid telling it g < 10."""
    return a.op in _READS and b.op in _READS and a.arg[0] == b.arg[0]


def _hide(x: AluExp, beside: AluExp) -> AluExp:
    """`opaque(x)`, distinct from an opaque of `x` that the other operand already holds: the
    renderer computes one node once, and lavapipe folded (x - o(x)) + o(x) to x (inf for NaN)."""
    o = opaque(x)
    seen = _below(beside, 3)
    while o in seen:
        o = opaque(o)
    return o


def _near(e: AluExp, depth: int) -> set[AluExp]:
    """The operands of float arithmetic, selects and floor/ceil below `e`, `depth` levels down
    (through casts between floats): terms a driver's algebra reaches when it cancels (x * y) / x.
    Mesa drops a floor of what it knows is whole (f32(i) - 5) and then cancels through it."""
    out: set[AluExp] = set()
    level = [e]
    for _ in range(depth):
        level = [_bare(s) for n in level if n.op in _FOLDABLE or n.op in _SEEN_THROUGH for s in n.src]
        out.update(level)
    return out


def _legalize_node(e: AluExp, t: TargetTraits) -> AluExp | None:
    hidden = _bits_hidden(e) if t.beside_f64 and t.flushes_subnormals else None
    if hidden is None:
        return _legalize_rules(e, t)
    return _legalize_rules(hidden, t) or hidden


def _bits_hidden(e: AluExp) -> AluExp | None:
    """`e` with its float32 operands through `opaque`, where it tests their bits in a program that
    also computes float64. There NVIDIA's Vulkan driver took a subnormal x as 0 in `0 < x` and
    `min(x, 0)`, though they were spelled on x's bits, as helpers and inline alike (it turns
    integer tests of a float's bits back into float compares, which flush there); an xor with an
    unknown zero leaves it no float to compare. The arithmetic helpers' fast-path tests are such
    tests too: there `0 + x` gave 0 for a subnormal x read from a buffer."""
    from jaxcore.softfloat import SPELLED_EXACT  # (it imports this module through jaxcore.program)

    tested = (e.op in SPELLED_EXACT and e.arg != NORMAL_RANGE) or (
        e.op in (AluOp.Cast, AluOp.Bitcast)
        and not is_opaque(e)
        and (e.op == AluOp.Cast or not is_float(e.dtype))
    )
    if not tested or not e.src or e.src[0].dtype != DType.float32:
        return None
    src = tuple(s if s.op == AluOp.Const else opaque(s) for s in e.src)
    return AluExp(e.op, e.dtype, src, e.arg)


def _legalize_rules(e: AluExp, t: TargetTraits) -> AluExp | None:
    op, dt = e.op, e.dtype
    if dt == DType.bool and op in (AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Min, AluOp.Max):
        # Bool arithmetic is arithmetic on 0/1 normalised back to bool.
        a, b = e.src
        mode = {AluOp.Add: "or", AluOp.Max: "or", AluOp.Mul: "and", AluOp.Min: "and", AluOp.Sub: "xor"}[op]
        return AluExp(AluOp.BitCombine, DType.bool, (a, b), mode)
    if dt == DType.bool and op in (AluOp.Idiv, AluOp.Mod):
        a, b = e.src
        return _and(a, b) if op == AluOp.Idiv else AluExp.bool_(False)
    if op == AluOp.Cmplt and e.src[0].dtype == DType.bool:
        a, b = e.src  # false < true is the only true case
        return _and(_ne(a, AluExp.bool_(True)), b)
    if op in (AluOp.Idiv, AluOp.Div) and dt in _HALF_SINGLE and not t.native_correct_division:
        return _float_quotient(e, t)
    if op == AluOp.Idiv and is_float(dt) and not t.native_float_trunc:
        return _trunc(AluExp(AluOp.Div, dt, e.src))
    if op in (AluOp.Idiv, AluOp.Mod) and dt in (DType.int32, DType.uint32):
        return _int_divmod(e, t)
    if op in (AluOp.Min, AluOp.Max) and is_float(dt) and not t.native_nan_minmax:
        a, b = e.src
        # min(a, b) that propagates NaN: pick a NaN operand over the native result.
        return AluExp.where(is_nan(a, t), a, AluExp.where(is_nan(b, t), b, e))
    if op == AluOp.Cmpne and is_float(e.src[0].dtype) and not t.native_nan_compare:
        a, b = e.src
        return _or(e, _or(is_nan(a, t), is_nan(b, t)))
    if op == AluOp.Cmplt and is_float(e.src[0].dtype) and not t.native_nan_compare:
        a, b = e.src
        return _and(e, _ne(_or(is_nan(a, t), is_nan(b, t)), AluExp.bool_(True)))
    if op == AluOp.Cast:
        return _cast(e, t)
    if op == AluOp.BitShift and not t.shift_masks_count:
        a, b = e.src
        if b.op == AluOp.Const and 0 <= b.arg < 32:
            return None
        return AluExp(AluOp.BitShift, dt, (a, AluExp.bit_and(b, _c(b.dtype, 31))), e.arg)
    return None


_HALF_SINGLE = (DType.float16, DType.float32)
_FOLDABLE = frozenset({AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Div})
_SEEN_THROUGH = frozenset({AluOp.Where, AluOp.Floor, AluOp.Ceil})


# Ops a driver reassociates with each other: (x - y) + c -> x - (y - c) (lavapipe gave 0, not 2.5,
# for (x - x) + 2.5 at x = 3e38), (x * y) * c -> x * (y * c).
_FAMILY = {
    AluOp.Add: "sum", AluOp.Sub: "sum", AluOp.Mul: "product", AluOp.Idiv: "quotient", AluOp.Div: "quotient"
}  # fmt: skip


def _bare(e: AluExp) -> AluExp:
    """`e` without the casts between floats on top of it."""
    while e.op == AluOp.Cast and is_float(e.dtype) and is_float(e.src[0].dtype):
        e = e.src[0]
    return e


def _shares_a_term(op: AluOp, a: AluExp, b: AluExp) -> bool:
    """A sum or difference of two operands with a common term (through sums, products and
    selects), which a driver cancels by reassociating: `(2.5 - x) - (c - x)` came back as `2.5 - c`
    at x = 2.2e7, `select(c, x, x) - (x + 8)` as -8 at x = 1e300."""
    if op not in (AluOp.Add, AluOp.Sub):
        return False
    mine, theirs = _near(a, 2) | {a}, _near(b, 2) | {b}
    return any(n.op != AluOp.Const for n in mine & theirs)


def _const_over_const(op: AluOp, c: AluExp, other: AluExp) -> bool:
    """`c` is a constant operand of `op` and `other` the arithmetic node beside it that the driver
    could fold it into: one with a constant operand of its own, or one of `op`'s family, which it
    may reassociate."""
    if c.op != AluOp.Const:
        return False
    if other.op == AluOp.Where:  # the driver moves `op c` into the branches: select(b, y + c1, k) + c2
        return any(_const_over_const(op, c, _bare(v)) for v in other.src[1:])
    if other.op not in _FOLDABLE:
        return False
    return any(s.op == AluOp.Const for s in other.src) or _FAMILY[other.op] == _FAMILY[op]


def _float_quotient(e: AluExp, t: TargetTraits) -> AluExp:
    """A float32 or float16 Div correctly rounded, an Idiv that quotient truncated: float16 through
    float32 (which has 2*11+2 bits, so rounding its quotient to float16 is exact). Idiv's truncation
    hides a subnormal quotient's double rounding, so it takes divide_rn's cheaper form."""
    a, b = e.src
    if t.beside_f64:
        f64 = DType.float64
        wide = AluExp(AluOp.Div, f64, (AluExp.cast(f64, a), AluExp.cast(f64, b)))
        q = AluExp.cast(e.dtype, wide if e.dtype == DType.float32 else AluExp.cast(DType.float32, wide))
        return _trunc(q) if e.op == AluOp.Idiv else q
    if _bare(b).op == AluOp.Const:
        # A constant divisor as an unknown, against a compiler that folds divide_rn's work on it.
        # (Tried first for NVIDIA's quotients an ulp off beside float64 work; it did not fix them,
        # the float64 path above did, and this has run there since.)
        b = opaque(b)
    if e.dtype == DType.float16:
        f32 = DType.float32
        q = AluExp.cast(DType.float16, divide_rn(AluExp.cast(f32, a), AluExp.cast(f32, b)))
    else:
        q = divide_rn(a, b, exact_subnormal=e.op == AluOp.Div)
    return _trunc(q) if e.op == AluOp.Idiv else q


def _trunc(q: AluExp) -> AluExp:
    return AluExp.where(AluExp.cmplt(q, _c(q.dtype, 0.0)), AluExp.ceil(q), AluExp.floor(q))


def _u32(v: int) -> AluExp:
    return _c(DType.uint32, v)


def _n(op: AluOp, a: AluExp, b: AluExp | float) -> AluExp:
    """float32 `a op b` whose operands and result are zero or normal (NORMAL_RANGE): inside
    divide_rn every value is a scaled mantissa near 1 or an exact residual above 2^-60, so a
    target that flushes subnormals may compute it natively instead of through its exact helpers."""
    f32 = DType.float32
    bb = b if isinstance(b, AluExp) else _c(f32, b)
    return AluExp(op, f32, (a, bb), NORMAL_RANGE)


def _split(x: AluExp) -> tuple[AluExp, AluExp]:
    """Veltkamp: x = hi + lo with 12-bit halves, so their products are exact."""
    c = _n(AluOp.Mul, x, 4097.0)
    hi = _n(AluOp.Sub, c, _n(AluOp.Sub, c, x))
    return hi, _n(AluOp.Sub, x, hi)


def _residual(x: AluExp, y: AluExp, q: AluExp) -> AluExp:
    """x - q*y, exactly, for x, y, q in [0.25, 4] (Dekker's product, no fused multiply-add)."""
    add, sub, mul = (lambda a, b, op=op: _n(op, a, b) for op in (AluOp.Add, AluOp.Sub, AluOp.Mul))
    p = mul(q, y)
    qh, ql = _split(q)
    yh, yl = _split(y)
    err = add(add(add(sub(mul(qh, yh), p), mul(qh, yl)), mul(ql, yh)), mul(ql, yl))
    return sub(sub(x, p), err)


def _mantissa_exponent(x: AluExp) -> tuple[AluExp, AluExp]:
    """|x| = m 2^e with m in [1, 2) (subnormals normalised first), for finite nonzero x."""
    f32, u32 = DType.float32, DType.uint32
    mag = AluExp.bit_and(AluExp.bitcast(u32, x), 0x7FFFFFFF)
    sub = AluExp.cmplt(mag, _u32(0x00800000))
    xs = AluExp.where(sub, AluExp.bitcast(f32, mag) * 16777216.0, AluExp.bitcast(f32, mag))
    bits = AluExp.bitcast(u32, xs)
    e = AluExp.bitcast(DType.int32, AluExp.shr(bits, _u32(23))) - AluExp.where(
        sub, _c(DType.int32, 151), _c(DType.int32, 127)
    )
    m = AluExp.bitcast(f32, AluExp.bit_or(AluExp.bit_and(bits, 0x007FFFFF), 0x3F800000))
    return m, e


def _pow2(k: AluExp) -> AluExp:
    return AluExp.bitcast(DType.float32, AluExp.shl(AluExp.bitcast(DType.uint32, k + 127), _u32(23)))


def divide_rn(a: AluExp, b: AluExp, exact_subnormal: bool = False) -> AluExp:
    """a / b correctly rounded, from an approximate reciprocal: both operands scaled to [1, 2),
    two Newton steps on the exact residual, then the neighbour with the smaller exact residual
    (ties to even), scaled back. Zeros, infinities and NaN are spelled out. Scaled into the
    subnormal range the quotient rounds twice (one subnormal ulp off at a tie), which Idiv's
    truncation hides; with `exact_subnormal` (true division) such a quotient is rounded once, on
    its integer mantissa with the residual's sign as the sticky bit (`softfloat.pack`)."""
    f32, u32, i32 = DType.float32, DType.uint32, DType.int32
    ma, ea = _mantissa_exponent(a)
    mb, eb = _mantissa_exponent(b)
    # Opaque: a compiler that knows `a` up to a choice of values knows the mantissa (1.0 for both 0
    # and 1), and folded the residuals' steps by it (NVIDIA: `f32(b) / x` an ulp off).
    ma, mb = opaque(ma), opaque(mb)
    y = AluExp(AluOp.Reciprocal, f32, (mb,), NORMAL_RANGE)
    # Two Newton steps on the exact residual: a driver's reciprocal may be ulps off (NVIDIA's is,
    # when it picks its approximate one), and after one step the quotient could still be more than
    # one neighbour away from the correctly rounded one (NVIDIA: f32(u) / -5.43 an ulp off).
    q1 = _n(AluOp.Mul, ma, y)
    for _ in range(2):
        q1 = _n(AluOp.Add, q1, _n(AluOp.Mul, _residual(ma, mb, q1), y))
    r1 = _residual(ma, mb, q1)
    up = AluExp.cmplt(_c(f32, 0.0), r1)
    q1b = AluExp.bitcast(u32, q1)
    q2 = AluExp.bitcast(f32, AluExp.where(up, q1b + 1, q1b - 1))
    r2 = _residual(ma, mb, q2)
    ar1 = AluExp.bitcast(f32, AluExp.bit_and(AluExp.bitcast(u32, r1), 0x7FFFFFFF))
    ar2 = AluExp.bitcast(f32, AluExp.bit_and(AluExp.bitcast(u32, r2), 0x7FFFFFFF))
    q2_even = _eq(AluExp.bit_and(AluExp.bitcast(u32, q2), 1), 0)
    take2 = _or(
        AluExp.cmplt(ar2, ar1), _and(_eq(AluExp.bitcast(u32, ar2), AluExp.bitcast(u32, ar1)), q2_even)
    )
    pick2 = _and(take2, _ne(r1, _c(f32, 0.0)))
    q = AluExp.where(pick2, q2, q1)
    # Past +-(the range) the result is inf or 0 anyway; the clamp keeps 2^k1 and 2^(k-k1) normal.
    k = AluExp.min(AluExp.max(ea - eb, _c(i32, -160)), _c(i32, 130))
    k1 = AluExp.idiv(k, _c(i32, 2))
    sign = AluExp.bit_and(AluExp.bit_xor(AluExp.bitcast(u32, a), AluExp.bitcast(u32, b)), 0x80000000)
    scaled = AluExp.bitcast(f32, AluExp.bit_or(AluExp.bitcast(u32, (q * _pow2(k1)) * _pow2(k - k1)), sign))
    q = _subnormal_quotient(q, AluExp.where(pick2, r2, r1), k, sign, scaled) if exact_subnormal else scaled
    # Zeros, infinities and NaN, spelled out (a * (1/b) would make 0 / 1e-40 a NaN).
    mags = [AluExp.bit_and(AluExp.bitcast(u32, x), 0x7FFFFFFF) for x in (a, b)]
    zero = [_eq(m, _u32(0)) for m in mags]
    inf = [_eq(m, _u32(0x7F800000)) for m in mags]
    nan = [AluExp.cmplt(_u32(0x7F800000), m) for m in mags]
    signed = AluExp.bitcast(f32, sign)
    signed_inf = AluExp.bitcast(f32, AluExp.bit_or(sign, 0x7F800000))
    q = AluExp.where(_or(zero[0], inf[1]), signed, q)
    q = AluExp.where(_or(zero[1], inf[0]), signed_inf, q)
    invalid = _or(_or(nan[0], nan[1]), _or(_and(zero[0], zero[1]), _and(inf[0], inf[1])))
    return AluExp.where(invalid, _c(f32, math.nan), q)


def _subnormal_quotient(q: AluExp, r: AluExp, k: AluExp, sign: AluExp, scaled: AluExp) -> AluExp:
    """`scaled` (q 2^k with the sign), but where that is below the normal range: q's 24-bit mantissa
    times 4, one less or more as the exact quotient lies below or above q (residual `r`), rounded
    once to nearest even at its subnormal position."""
    u32, i32 = DType.uint32, DType.int32
    bits = AluExp.bitcast(u32, q)
    mant = AluExp.bit_or(AluExp.bit_and(bits, 0x007FFFFF), 0x00800000)
    e = AluExp.bitcast(i32, AluExp.shr(bits, _u32(23))) - _c(i32, 127) + k  # the result's exponent
    nudge = AluExp.where(AluExp.cmplt(_c(DType.float32, 0.0), r), _u32(1), _u32(0)) - AluExp.where(
        AluExp.cmplt(r, _c(DType.float32, 0.0)), _u32(1), _u32(0)
    )
    once = pack(sign, AluExp.shl(mant, _u32(2)) + nudge, e - _c(i32, 25))
    return AluExp.where(AluExp.cmplt(e, _c(i32, -126)), once, scaled)


def _int_divmod(e: AluExp, t: TargetTraits) -> AluExp | None:
    a, b = e.src
    dt = e.dtype
    is_div = e.op == AluOp.Idiv
    guard_zero = not (t.native_int_div_by_zero_is_zero if is_div else t.native_int_mod_by_zero_is_zero)
    guard_neg1 = dt == DType.int32 and not t.native_int_min_div_neg1
    if b.op == AluOp.Const:
        guard_zero = guard_zero and b.arg == 0
        guard_neg1 = guard_neg1 and b.arg == -1
        if b.arg == 0:
            return _c(dt, 0)
    if not t.native_int_mod_truncates and not is_div and dt == DType.int32:
        # a % b = a - (a / b) * b, with the quotient truncating toward zero.
        q = _int_divmod(AluExp(AluOp.Idiv, dt, (a, b)), t) or AluExp(AluOp.Idiv, dt, (a, b))
        r = AluExp.sub(a, AluExp.mul(q, b))
        # the guarded quotient of x / 0 is 0, which would leave x; the contract's x % 0 is 0
        return r if _is_nonzero_const(b) else AluExp.where(_eq(b, 0), _c(dt, 0), r)
    if not guard_zero and not guard_neg1:
        return None
    bad = None
    if guard_zero:
        bad = _eq(b, 0)
    if guard_neg1:
        neg1 = _eq(b, -1)
        bad = neg1 if bad is None else _or(bad, neg1)
    assert bad is not None  # one of the two guards is on (checked above)
    safe_b = AluExp.where(bad, _c(dt, 1), b)
    native = AluExp(e.op, dt, (a, safe_b))
    if is_div:
        # x / 0 = 0; x / -1 = 0 - x (wraps INT_MIN to itself).
        special = _c(dt, 0)
        if guard_neg1:
            special = AluExp.where(_eq(b, -1), AluExp.sub(_c(dt, 0), a), special)
        return AluExp.where(bad, special, native)
    return AluExp.where(bad, _c(dt, 0), native)


def _in_range(dtype: DType, v: float) -> float:
    """`v`, or the infinity it rounds to in `dtype` (float16 cannot hold 2^31)."""
    return v if abs(v) <= float(np.finfo(to_numpy(dtype)).max) else math.copysign(math.inf, v)


def _cast(e: AluExp, t: TargetTraits) -> AluExp | None:
    (x,) = e.src
    src, dst = x.dtype, e.dtype
    if src == dst:
        return x
    if dst == DType.bool:
        if is_float(src) and t.native_float_to_bool:
            return None
        if is_float(src):
            return _or(AluExp(AluOp.Cmpne, DType.bool, (x, _c(src, 0))), is_nan(x, t))
        return _ne(x, 0)
    if is_float(src) and dst in (DType.int32, DType.uint32) and not t.native_saturating_casts:
        lo, hi = (INT32_MIN, INT32_MAX) if dst == DType.int32 else (0, UINT32_MAX)
        # Thresholds in the source dtype: x >= 2^31 (or 2^32) saturates high; x below the lowest
        # value that truncates into range saturates low; NaN gives 0.
        top = _c(src, _in_range(src, float(hi + 1)))
        low = _in_range(src, float(lo) if dst == DType.int32 else 0.0)
        # float16 cannot hold INT32_MIN: there only -inf is below the range
        low_ok = _c(src, low if low != -math.inf else -float(np.finfo(to_numpy(src)).max))
        native = e
        too_low = AluExp.cmplt(x, low_ok) if dst == DType.int32 else AluExp.cmplt(x, _c(src, 1.0))
        out = AluExp.where(too_low, _c(dst, lo), native)
        out = AluExp.where(_ne(AluExp.cmplt(x, top), AluExp.bool_(True)), _c(dst, hi), out)
        return AluExp.where(is_nan(x, t), _c(dst, 0), out)
    return None
