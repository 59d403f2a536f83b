"""float32 transcendentals as AluExp trees: accurate sin/cos/exp/log/asin/atan/erf/erfc for any
C-like target, written once in the IR's own ops.

Shader built-ins are too loose for the tolerance table (WGSL's sin/cos: 2^-11 absolute on
[-pi, pi]; GLSL ES leaves precision to the driver). Every C-style dialect renders these trees as
helper functions (`jaxcore.cstyle`: `jc_sin_f32` and the others, generated from `expand_node` and
legalized for the dialect's traits); a target without functions may set
`TargetTraits.expand_transcendentals` instead, and `legalize` inlines each tree. They are built
from Add/Mul/Where/Bitcast/shifts/Floor/Sqrt only, so a renderer needs nothing new, and have no
branches, so both sides of every choice are computed (Payne-Hanek runs for every sin/cos): a few
hundred ALU ops, cheap beside a memory access.

Algorithms. sin/cos: Cody-Waite reduction by pi/2 in three parts (k pi/2 subtracted exactly, the
parts' low bits zero) for |x| < 8192; above it, exact Payne-Hanek: |x| = m 2^e, and the 96 bits of
2/pi from bit e - 1 on (a window of the table in `jaxcore.pi_bits`) times m, as 32x32 -> 64-bit
products in 16-bit halves, give the quadrant and the fraction to ~2^-64; then the Cephes minimax
polynomials on |r| <= pi/4, sin x = x below 2^-12 (so -0 stays -0). exp: k = round(x / ln 2), r = x
- k ln2 in two parts, a degree-6 polynomial, and 2^k built from bits in two halves so neither
overflows before the product. log: the exponent from the bits (a subnormal's integer mantissa
converted to float first), the mantissa folded to [sqrt(1/2), sqrt(2)), a degree-9 polynomial.
atan folded to [0, tan(pi/8)] by 1/x and (x-1)/(x+1); asin through sqrt((1-|x|)/2) above 1/2;
erf by its Taylor series below 1/2 and 1 - erfc above; erfc by Abramowitz-Stegun 7.1.26
(|error| < 1.5e-7) with exp.
Every op in these trees is exact or correctly rounded in float32 (no fused multiply-add assumed).
float16 ops are computed in float32 and rounded once.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import DType
from jaxcore.pi_bits import two_over_pi_chunks

F32, U32, I32 = DType.float32, DType.uint32, DType.int32


def _f(v: float) -> AluExp:
    return AluExp.f32(v)


def _u(v: int) -> AluExp:
    return AluExp.u32(v)


def _bits(x: AluExp) -> AluExp:
    return AluExp.bitcast(U32, x)


def _float(b: AluExp) -> AluExp:
    return AluExp.bitcast(F32, b)


def _lt(a: AluExp, b: AluExp | float) -> AluExp:
    return AluExp.cmplt(a, b)


def _eq(a: AluExp, b: AluExp | int) -> AluExp:
    return AluExp.cmpne(a, b).not_()


def _or(a: AluExp, b: AluExp) -> AluExp:
    return AluExp(AluOp.BitCombine, DType.bool, (a, b), "or")


def _sel(c: AluExp, t: AluExp, f: AluExp) -> AluExp:
    return AluExp.where(c, t, f)


def _abs(x: AluExp) -> AluExp:
    return _float(AluExp.bit_and(_bits(x), 0x7FFFFFFF))


def _neg_if(c: AluExp, x: AluExp) -> AluExp:
    """x with its sign flipped where `c` (a bit flip: exact, and -0 stays signed)."""
    return _float(AluExp.bit_xor(_bits(x), _sel(c, _u(0x80000000), _u(0))))


def _sign_bit(x: AluExp) -> AluExp:
    return AluExp.cmpne(AluExp.bit_and(_bits(x), 0x80000000), _u(0))


def _not_finite(x: AluExp) -> AluExp:
    return _lt(_u(0x7F7FFFFF), AluExp.bit_and(_bits(x), 0x7FFFFFFF))


def _is_nan(x: AluExp) -> AluExp:
    return _lt(_u(0x7F800000), AluExp.bit_and(_bits(x), 0x7FFFFFFF))


def _horner(x: AluExp, coeffs: list[float]) -> AluExp:
    """coeffs[0] x^(n-1) + ... + coeffs[-1] (highest degree first)."""
    acc = _f(coeffs[0])
    for c in coeffs[1:]:
        acc = acc * x + _f(c)
    return acc


def _round(x: AluExp) -> AluExp:
    return AluExp.floor(x + 0.5)


def _pow2i(k: AluExp) -> AluExp:
    """2^k for int32 k in [-126, 127], from its bits."""
    return _float(AluExp.shl(AluExp.bitcast(U32, k + 127), _u(23)))


# ---- sin / cos --------------------------------------------------------------------------------


_TT = [0, *two_over_pi_chunks(8)]  # one zero word: windows start up to 11 bits before the point


def _table(w: AluExp) -> AluExp:
    """_TT[w] for w in 0..8 (out-of-range w gives the last word; such lanes are discarded)."""
    out = _u(_TT[-1])
    for i in range(len(_TT) - 2, -1, -1):
        out = _sel(_eq(w, _u(i)), _u(_TT[i]), out)
    return out


def _window(p: AluExp) -> AluExp:
    """32 bits of the table starting at bit p (from the MSB of word 0)."""
    w = AluExp.shr(p, _u(5))
    sh = AluExp.bit_and(p, 31)
    hi, lo = _table(w), _table(w + 1)
    joined = AluExp.bit_or(AluExp.shl(hi, sh), AluExp.shr(lo, _u(32) - sh))
    return _sel(_eq(sh, _u(0)), hi, joined)


def mul32(a: AluExp, b: AluExp) -> tuple[AluExp, AluExp]:
    """The 64-bit product of two u32s as (low, high) words, through 16-bit halves."""
    a0, a1 = AluExp.bit_and(a, 0xFFFF), AluExp.shr(a, _u(16))
    b0, b1 = AluExp.bit_and(b, 0xFFFF), AluExp.shr(b, _u(16))
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = AluExp.shr(p00, _u(16)) + AluExp.bit_and(p01, 0xFFFF) + AluExp.bit_and(p10, 0xFFFF)
    lo = AluExp.bit_or(AluExp.bit_and(p00, 0xFFFF), AluExp.shl(mid, _u(16)))
    hi = p11 + AluExp.shr(p01, _u(16)) + AluExp.shr(p10, _u(16)) + AluExp.shr(mid, _u(16))
    return lo, hi


PIO2 = (1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8)


def trig_reduce(x: AluExp) -> tuple[AluExp, AluExp]:
    """(r, q) with x = q pi/2 + r (mod 2 pi), |r| <= pi/4 (about), q a uint32 in 0..3."""
    ax = _abs(x)
    k = _round(x * float(2 / math.pi))
    r_small = ((x - k * PIO2[0]) - k * PIO2[1]) - k * PIO2[2]
    q_small = AluExp.bit_and(AluExp.bitcast(U32, AluExp.cast(I32, k)), 3)
    # Payne-Hanek: |x| = m 2^e, P = m * W mod 2^96 with W the 2/pi bits from e - 1 on.
    b = _bits(ax)
    m = AluExp.bit_or(AluExp.bit_and(b, 0x7FFFFF), 0x800000)
    p0 = AluExp.shr(b, _u(23)) - 120  # e + 30 (e = exponent - 150), in u32
    w0, w1, w2 = _window(p0), _window(p0 + 32), _window(p0 + 64)
    a_lo, a_hi = mul32(m, w2)
    b_lo, b_hi = mul32(m, w1)
    q1 = a_hi + b_lo
    q2 = b_hi + m * w0 + AluExp.cast(U32, _lt(q1, a_hi))
    frac = AluExp.bit_or(AluExp.shl(q2, _u(2)), AluExp.shr(q1, _u(30)))
    low = AluExp.bit_or(AluExp.shl(q1, _u(2)), AluExp.shr(a_lo, _u(30)))
    q_big = AluExp.shr(q2, _u(30)) + AluExp.shr(frac, _u(31))
    r_big = (AluExp.cast(F32, AluExp.bitcast(I32, frac)) + AluExp.cast(F32, low) * 2.0**-32) * float(
        math.pi / 2 * 2.0**-32
    )
    neg = _sign_bit(x)
    r_big = _neg_if(neg, r_big)
    q_big = AluExp.bit_and(_sel(neg, _u(4) - AluExp.bit_and(q_big, 3), q_big), 3)
    big = _lt(_u(0x45FFFFFF), b)  # |x| >= 8192
    return _sel(big, r_big, r_small), _sel(big, q_big, q_small)


def _sin_poly(r: AluExp, z: AluExp) -> AluExp:
    return _horner(z, [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]) * z * r + r


def _cos_poly(z: AluExp) -> AluExp:
    p = _horner(z, [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2])
    return (p * z * z - z * 0.5) + 1.0


def sin_cos(x: AluExp, cos: bool) -> AluExp:
    r, q = trig_reduce(x)
    z = r * r
    if cos:
        q = AluExp.bit_and(q + 1, 3)
    v = _sel(_eq(AluExp.bit_and(q, 1), _u(1)), _cos_poly(z), _sin_poly(r, z))
    v = _neg_if(_lt(_u(1), q), v)
    tiny = _lt(_bits(_abs(x)), _u(0x39800000))  # |x| < 2^-12: sin x = x, cos x = 1
    v = _sel(tiny, _f(1.0) if cos else x, v)
    return _sel(_not_finite(x), _f(math.nan), v)


# ---- exp / log --------------------------------------------------------------------------------


def exp(x: AluExp) -> AluExp:
    xc = AluExp.min(AluExp.max(x, _f(-103.972084045410)), _f(88.72283935546875))
    k = _round(xc * float(1 / math.log(2)))
    r = (xc - k * 0.693359375) - k * -2.12194440e-4
    p = _horner(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 0.5])
    e = (p * (r * r) + r) + 1.0
    ki = AluExp.cast(I32, k)
    k1 = AluExp.idiv(ki, AluExp.i32(2))
    v = (e * _pow2i(k1)) * _pow2i(ki - k1)
    v = _sel(_lt(_f(88.72283935546875), x), _f(math.inf), v)
    v = _sel(_lt(x, _f(-103.972084045410)), _f(0.0), v)
    return _sel(_is_nan(x), x, v)


def log(x: AluExp) -> AluExp:
    b0 = _bits(x)
    sub = _lt(b0, _u(0x00800000))
    # a subnormal x is b0 * 2^-149: its integer mantissa as a float is exact and normal, so no float
    # op ever sees the subnormal (a device that flushes them would read 0)
    b = _sel(sub, _bits(AluExp.cast(F32, b0)), b0)
    e = AluExp.bitcast(I32, AluExp.shr(b, _u(23))) - _sel(sub, AluExp.i32(275), AluExp.i32(126))
    m0 = _float(AluExp.bit_or(AluExp.bit_and(b, 0x007FFFFF), 0x3F000000))
    low = _lt(m0, _f(0.707106781186547524))
    e = _sel(low, e - 1, e)
    m = _sel(low, (m0 + m0) - 1.0, m0 - 1.0)
    z = m * m
    coeffs = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1]
    coeffs += [-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]
    y = _horner(m, coeffs) * m * z
    fe = AluExp.cast(F32, e)
    y = y + fe * -2.12194440e-4
    y = y + z * -0.5
    v = (m + y) + fe * 0.693359375
    v = _sel(_eq(b0, _u(0x7F800000)), x, v)
    zero = _or(_eq(AluExp.bit_and(b0, 0x7FFFFFFF), _u(0)), _eq(b, _u(0)))  # b: a flushed subnormal
    v = _sel(zero, _f(-math.inf), v)
    return _sel(_or(_is_nan(x), _lt(_u(0x80000000), b0)), _f(math.nan), v)


# ---- atan / asin ------------------------------------------------------------------------------


def atan(x: AluExp) -> AluExp:
    a = _abs(x)
    big = _lt(_f(2.414213562373095), a)
    mid = _lt(_f(0.4142135623730950), a)
    xr = _sel(big, _f(-1.0) * AluExp.reciprocal(a), _sel(mid, (a - 1.0) * AluExp.reciprocal(a + 1.0), a))
    y0 = _sel(big, _f(math.pi / 2), _sel(mid, _f(math.pi / 4), _f(0.0)))
    z = xr * xr
    p = _horner(z, [8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1])
    v = y0 + (p * z * xr + xr)
    return _sel(_is_nan(x), x, _neg_if(_sign_bit(x), v))


def asin(x: AluExp) -> AluExp:
    a = _abs(x)
    big = _lt(_f(0.5), a)
    zb = (_f(1.0) - a) * 0.5
    z = _sel(big, zb, a * a)
    xx = _sel(big, AluExp.sqrt(zb), a)
    p = _horner(z, [4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1])
    y = p * z * xx + xx
    y = _sel(big, _f(math.pi / 2) - (y + y), y)
    bad = _or(_is_nan(x), _lt(_f(1.0), a))
    return _sel(bad, _f(math.nan), _neg_if(_sign_bit(x), y))


# ---- erf / erfc -------------------------------------------------------------------------------


def _erfc_pos(a: AluExp) -> AluExp:
    t = AluExp.reciprocal(a * 0.3275911 + 1.0)
    p = _horner(t, [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592]) * t
    return p * exp(_f(0.0) - a * a)


# erf's Taylor series on |x| < 1/2, where 1 - erfc's float32 rounding would cost ~3e-7.
_ERF_TAYLOR = [
    -1.492565035840625e-05,
    0.00012055332981789664,
    -0.0008548327023450852,
    0.005223977625442188,
    -0.026866170645131252,
    0.11283791670955126,
    -0.37612638903183754,
    1.1283791670955126,
]


def _erf_small(x: AluExp) -> AluExp:
    return _horner(x * x, _ERF_TAYLOR) * x


def erf(x: AluExp) -> AluExp:
    v = _neg_if(_sign_bit(x), _f(1.0) - _erfc_pos(_abs(x)))
    v = _sel(_lt(_abs(x), _f(0.5)), _erf_small(x), v)
    return _sel(_is_nan(x), x, v)


def erfc(x: AluExp) -> AluExp:
    v = _erfc_pos(_abs(x))
    v = _sel(_lt(x, _f(0.0)), _f(2.0) - v, v)
    v = _sel(_lt(_abs(x), _f(0.5)), _f(1.0) - _erf_small(x), v)
    return _sel(_is_nan(x), x, v)


Expansion = Callable[[AluExp], AluExp]


def expansion_table(sin_cos: Callable[[AluExp, bool], AluExp], *rest: Expansion) -> dict[AluOp, Expansion]:
    """op -> expansion, from one precision's functions: sin_cos, then exp, log, atan, asin, erf, erfc."""
    table: dict[AluOp, Expansion] = {
        AluOp.Sin: lambda x: sin_cos(x, False),
        AluOp.Cos: lambda x: sin_cos(x, True),
    }
    ops = (AluOp.Exp, AluOp.Log, AluOp.Atan, AluOp.Asin, AluOp.Erf, AluOp.Erfc)
    table.update(zip(ops, rest, strict=True))
    return table


_EXPAND = expansion_table(sin_cos, exp, log, atan, asin, erf, erfc)


def expand_node(e: AluExp) -> AluExp | None:
    """The float32 (or float16, through float32) expansion of one transcendental node, else None."""
    fn = _EXPAND.get(e.op)
    if fn is None or e.dtype not in (DType.float32, DType.float16):
        return None
    (x,) = e.src
    if e.dtype == DType.float16:
        return AluExp.cast(DType.float16, fn(AluExp.cast(F32, x)))
    return fn(x)


def expand_transcendentals(exp: AluExp) -> AluExp:
    """`exp` with every float32/float16 transcendental replaced by its AluExp expansion."""
    return exp.rewrite(expand_node)
