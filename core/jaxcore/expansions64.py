"""float64 transcendentals as AluExp trees: sin/cos/exp/log/atan/asin/erf/erfc for any C-like target
with float64 arithmetic, written once in the IR's own ops (`jaxcore.expansions` does float32).

Why a separate module: a target with float64 arithmetic often has no 64-bit bit access (WGSL's
shader-f64 through naga cannot bitcast an f64) and its built-in transcendentals are 32-bit only. So
nothing here bitcasts a float64 or touches a 64-bit integer; the trees use float64 Add/Sub/Mul,
Reciprocal (an ulp off is fine), Sqrt, Floor, comparisons, Where, casts between float64 and
float32/int32/uint32, and 32-bit integer ops. A float64's class (NaN, infinite) is read from the
bits of its float32 conversion after scaling by 2^-1000 (every finite float64 is finite there); its
exponent (`frexp`) from the float32 conversion, once conditional scalings by 2^+-512, 2^+-256,
2^+-128 and 2^+-64 have brought it into float32's normal range (subnormals down to 2^-1074
included); 2^k is built from float32 bit patterns, squared. Division is a product with a
Reciprocal. No branches: both sides of every Where are computed, so no path may trap.

Algorithms (each series sized well below 1e-15 on its interval). sin/cos: below 2^20 Cody-Waite
reduction by pi/2 in three 33-bit parts (the first two steps opaque: NVIDIA reassociated them);
above, exact Payne-Hanek: the 53-bit integer mantissa times 128 bits of 2/pi from the right place
(`jaxcore.pi_bits`), as 32x32 -> 64-bit limb products, gives the quadrant and 64 bits of fraction;
then Taylor polynomials on |r| <= pi/4, and x itself (or 1) below 1e-9 so -0 stays -0. exp: k =
round(x / ln 2), r = x - k ln 2 in two parts, Taylor to degree 16, 2^k in two halves so the only
rounding (to a subnormal) is the last product. log: frexp, the mantissa folded to [sqrt(1/2),
sqrt(2)), 2 atanh(f / (2 + f)) by its series. atan folded by 1/x and the pi/6 rotation to
[0, tan(pi/12)], Taylor; asin = atan(x / sqrt(1 - x^2)) up to 1/2, above pi/2 - 2 asin(z) with
z = sqrt((1 - |x|) / 2) (no quotient by zero at |x| = 1). erf by its Taylor series up to 2.5 and
1 - erfc above; erfc by 1 - erf up to 2.5 and the continued fraction (40 terms) above.
"""

from __future__ import annotations

import math

from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import DType
from jaxcore.expansions import expansion_table, mul32
from jaxcore.legalize import opaque
from jaxcore.pi_bits import two_over_pi_chunks

F64, F32, U32, I32 = DType.float64, DType.float32, DType.uint32, DType.int32


def _d(v: float) -> AluExp:
    return AluExp.f64(v)


def _u(v: int) -> AluExp:
    return AluExp.u32(v)


def _i(v: int) -> AluExp:
    return AluExp.i32(v)


def _lt(a: AluExp | float, b: AluExp | float) -> AluExp:
    return AluExp.cmplt(a, b)


def _eq(a: AluExp, b: AluExp | int) -> AluExp:
    return AluExp.cmpne(a, b).not_()


def _or(a: AluExp, b: AluExp) -> AluExp:
    return AluExp(AluOp.BitCombine, DType.bool, (a, b), "or")


def _sel(c: AluExp, t: AluExp | float, f: AluExp | float) -> AluExp:
    return AluExp.where(c, t, f)


def _neg_if(c: AluExp, x: AluExp) -> AluExp:
    return _sel(c, x * -1.0, x)


def _abs(x: AluExp) -> AluExp:
    """|x| (-0 stays -0: every caller returns x itself for tiny |x|)."""
    return _neg_if(_lt(x, 0.0), x)


def _recip(x: AluExp) -> AluExp:
    return AluExp.reciprocal(x)


def _mag32(x: AluExp) -> AluExp:
    """The bits of |x| 2^-1000 as a float32: a NaN or infinity keeps its class, every finite float64
    becomes finite (below 2^25)."""
    return AluExp.bit_and(AluExp.bitcast(U32, AluExp.cast(F32, x * 2.0**-1000)), 0x7FFFFFFF)


def _is_nan(x: AluExp) -> AluExp:
    return _lt(_u(0x7F800000), _mag32(x))


def _is_inf(x: AluExp) -> AluExp:
    return _eq(_mag32(x), _u(0x7F800000))


def _not_finite(x: AluExp) -> AluExp:
    return _lt(_u(0x7F7FFFFF), _mag32(x))


def _horner(x: AluExp, coeffs: list[float]) -> AluExp:
    """coeffs[0] + coeffs[1] x + ... (lowest degree first)."""
    acc = _d(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


def _pow2_f32(k: AluExp) -> AluExp:
    """2^k as a float32, for int32 k in [-126, 127], from its bits."""
    return AluExp.bitcast(F32, AluExp.shl(AluExp.bitcast(U32, k + 127), _u(23)))


def _pow2(k: AluExp) -> AluExp:
    """2^k as a float64 for int32 k in [-1008, 1023]: (2^j)^8 2^r with k = 8 j + r, 0 <= r < 8."""
    kk = k + 1024  # nonnegative, so the shift needs no sign
    t = AluExp.cast(F64, _pow2_f32(AluExp.shr(kk, _u(3)) - 128))
    t = t * t
    t = t * t
    t = t * t
    return t * AluExp.cast(F64, _pow2_f32(AluExp.bit_and(kk, 7)))


def frexp(x: AluExp) -> tuple[AluExp, AluExp]:
    """(m, e) with x = m 2^e, m in [0.5, 1), e an int32, for finite x > 0 (subnormals included)."""
    y, e = x, _i(0)
    for s in (512, 256, 128, 64):  # y <= 2^64 after these
        big = _lt(2.0**s, y)
        y, e = _sel(big, y * 2.0**-s, y), _sel(big, e + s, e)
    for s in (512, 256, 128, 64):  # y >= 2^-114 after these (2^-1074 at worst, times 2^960)
        small = _lt(y, 2.0**-s)
        y, e = _sel(small, y * 2.0**s, y), _sel(small, e - s, e)
    b = AluExp.bitcast(U32, AluExp.cast(F32, y))
    e32 = AluExp.bitcast(I32, AluExp.shr(b, _u(23))) - 126  # f32(y) = m' 2^e32, m' in [0.5, 1)
    m = y * AluExp.cast(F64, _pow2_f32(_i(0) - e32))
    low = _lt(m, 0.5)  # f32(y) rounded up to a power of two (never down): m in [0.25, 0.5) here
    return _sel(low, m * 2.0, m), _sel(low, e + e32 - 1, e + e32)


# ---- sin / cos --------------------------------------------------------------------------------

# 33 bits each: k PIO2_n is exact for |k| < 2^20
PIO2_1 = float.fromhex("0x1.921fb54400000p+0")
PIO2_2 = float.fromhex("0x1.0b4611a600000p-34")
PIO2_3 = float.fromhex("0x1.3198a2e037073p-69")
_CODY_WAITE_LIMIT = 2.0**20

# Two zero words in front: for |x| >= 2^20 the window starts up to 33 bits before the point.
_TT = [0, 0, *two_over_pi_chunks(35)]


def _word(w: AluExp, j: int) -> AluExp:
    """_TT[w + j], compared through w alone so the five lookups share their tests (an out-of-range
    index gives the last word; such lanes are discarded)."""
    out = _u(_TT[-1])
    for i in range(len(_TT) - 2, j - 1, -1):
        out = _sel(_eq(w, _u(i - j)), _u(_TT[i]), out)
    return out


def _windows(p: AluExp) -> list[AluExp]:
    """Four consecutive 32-bit words of the table, starting at bit p (from the MSB of word 0)."""
    sh = AluExp.bit_and(p, 31)
    words = [_word(AluExp.shr(p, _u(5)), j) for j in range(5)]
    joined = [
        AluExp.bit_or(AluExp.shl(hi, sh), AluExp.shr(lo, _u(32) - sh)) for hi, lo in zip(words, words[1:])
    ]
    return [_sel(_eq(sh, _u(0)), hi, j) for hi, j in zip(words, joined)]


def _add_at(limbs: list[AluExp | None], k: int, words: list[AluExp]) -> None:
    """limbs (uint32, lowest first, a number mod 2^128) += words placed from limb k on."""
    carry: AluExp | None = None
    for j in range(k, 4):
        terms = [t for t in (words[j - k] if j - k < len(words) else None, carry) if t is not None]
        if not terms:
            return
        cur, carry = limbs[j], None
        for t in terms:
            if cur is None:
                cur = t
                continue
            cur = cur + t
            if j < 3:  # the carry out of limb 3 is past 2^128
                c = AluExp.cast(U32, _lt(cur, t))
                carry = c if carry is None else carry + c  # at most one of them is 1
        limbs[j] = cur


def _payne_hanek(ax: AluExp) -> tuple[AluExp, AluExp]:
    """(r, q) with ax = q pi/2 + r (mod 2 pi), |r| <= pi/4, for finite ax >= 2^20."""
    m, e = frexp(ax)
    mi = m * 2.0**53  # ax = mi 2^(e - 53), mi a 53-bit integer
    mhf = AluExp.floor(mi * 2.0**-32)
    mh, ml = AluExp.cast(U32, mhf), AluExp.cast(U32, mi - mhf * 2.0**32)
    # 128 bits of 2/pi from the one of weight 2^(54 - e) (table bit e + 9): then x 2/pi mod 4 is
    # mi * W 2^-126 mod 4, to 2^-126
    w0, w1, w2, w3 = _windows(AluExp.bitcast(U32, e + 9))
    limbs: list[AluExp | None] = [None, None, None, None]
    for a, b, k in ((ml, w3, 0), (ml, w2, 1), (mh, w3, 1), (ml, w1, 2), (mh, w2, 2)):
        _add_at(limbs, k, list(mul32(a, b)))
    _add_at(limbs, 3, [ml * w0 + mh * w1])
    l0, l1, l2, l3 = (v for v in limbs if v is not None)
    # the fraction's top 96 bits (exact to ~2^-73: W stops at 128 bits), taken from -1/2 to 1/2
    fh, fl, fll = (
        AluExp.bit_or(AluExp.shl(hi, _u(2)), AluExp.shr(lo, _u(30)))
        for hi, lo in ((l3, l2), (l2, l1), (l1, l0))
    )
    q = AluExp.shr(l3, _u(30)) + AluExp.shr(fh, _u(31))  # a fraction >= 1/2 is taken as f - 1
    low = AluExp.cast(F64, fl) + AluExp.cast(F64, fll) * 2.0**-32
    fr = AluExp.cast(F64, AluExp.bitcast(I32, fh)) + low * 2.0**-32
    return fr * (2.0**-32 * math.pi / 2), q


def trig_reduce(x: AluExp) -> tuple[AluExp, AluExp]:
    """(r, q) with x = q pi/2 + r (mod 2 pi), |r| <= pi/4 (about), q a uint32 in 0..3."""
    k = AluExp.floor(x * (2 / math.pi) + 0.5)
    r1 = opaque(x - k * PIO2_1)  # exact
    r2 = opaque(r1 - k * PIO2_2)
    r_small = r2 - k * PIO2_3
    q_small = AluExp.bit_and(AluExp.bitcast(U32, AluExp.cast(I32, k)), 3)
    neg = _lt(x, 0.0)
    r_big, q_big = _payne_hanek(_abs(x))
    r_big = _neg_if(neg, r_big)
    q_big = AluExp.bit_and(_sel(neg, _u(4) - AluExp.bit_and(q_big, 3), q_big), 3)
    big = _lt(_abs(x), _CODY_WAITE_LIMIT).not_()
    return _sel(big, r_big, r_small), _sel(big, q_big, q_small)


_SIN = [(-1) ** k / math.factorial(2 * k + 1) for k in range(10)]  # in r^2, times r
_COS = [(-1) ** k / math.factorial(2 * k) for k in range(10)]


def sin_cos(x: AluExp, cos: bool) -> AluExp:
    r, q = trig_reduce(x)
    z = r * r
    if cos:
        q = AluExp.bit_and(q + 1, 3)
    v = _sel(_eq(AluExp.bit_and(q, 1), _u(1)), _horner(z, _COS), r * _horner(z, _SIN))
    v = _neg_if(_lt(_u(1), q), v)
    v = _sel(_lt(_abs(x), 1e-9), _d(1.0) if cos else x, v)  # x or 1 to the last bit; -0 kept
    return _sel(_not_finite(x), _d(math.nan), v)


# ---- exp / log --------------------------------------------------------------------------------

# 42 bits: k LN2_HI is exact for |k| < 2^11
LN2_HI = float.fromhex("0x1.62e42fefa3800p-1")
LN2_LO = float.fromhex("0x1.ef35793c76730p-45")
_EXP = [1 / math.factorial(k) for k in range(17)]
_EXP_MAX, _EXP_MIN = 709.782712893384, -745.2


def exp(x: AluExp) -> AluExp:
    k = AluExp.floor(x * (1 / math.log(2)) + 0.5)
    r = opaque(x - k * LN2_HI) - k * LN2_LO
    p = _horner(r, _EXP)
    ki = AluExp.cast(I32, k)
    k1 = AluExp.idiv(ki, _i(2))
    v = (p * _pow2(k1)) * _pow2(ki - k1)  # p 2^k1 is normal: a subnormal result rounds once
    v = _sel(_lt(_EXP_MAX, x), _d(math.inf), v)
    v = _sel(_lt(x, _EXP_MIN), _d(0.0), v)
    return _sel(_is_nan(x), x, v)


_LOG = [2 / (2 * k + 1) for k in range(12)]  # 2 atanh(s) = s (2 + 2 s^2 / 3 + ...)


def log(x: AluExp) -> AluExp:
    m, e = frexp(x)
    low = _lt(m, math.sqrt(0.5))
    m, e = _sel(low, m * 2.0, m), _sel(low, e - 1, e)
    f = m - 1.0
    s = f * _recip(f + 2.0)
    fe = AluExp.cast(F64, e)
    v = fe * LN2_HI + (s * _horner(s * s, _LOG) + fe * LN2_LO)
    v = _sel(_is_inf(x), x, v)
    v = _sel(_eq(x, _d(0.0)), _d(-math.inf), v)
    return _sel(_or(_is_nan(x), _lt(x, 0.0)), _d(math.nan), v)


# ---- atan / asin ------------------------------------------------------------------------------

_ATAN = [(-1) ** k / (2 * k + 1) for k in range(17)]  # in t^2, times t
_SQRT3 = math.sqrt(3)


def _atan_pos(a: AluExp) -> AluExp:
    """atan(a) for a >= 0, +inf included."""
    inv = _lt(1.0, a)
    t = _sel(inv, _recip(a), a)
    mid = _lt(math.tan(math.pi / 12), t)  # atan t = pi/6 + atan((t sqrt3 - 1) / (t + sqrt3))
    t = _sel(mid, (t * _SQRT3 - 1.0) * _recip(t + _SQRT3), t)
    y = _sel(mid, _d(math.pi / 6), _d(0.0)) + t * _horner(t * t, _ATAN)
    return _sel(inv, math.pi / 2 - y, y)


def atan(x: AluExp) -> AluExp:
    v = _neg_if(_lt(x, 0.0), _atan_pos(_abs(x)))
    v = _sel(_lt(_abs(x), 1e-9), x, v)  # atan x = x to the last bit; -0 kept
    return _sel(_is_nan(x), x, v)


def asin(x: AluExp) -> AluExp:
    a = _abs(x)
    big = _lt(0.5, a)
    w = _sel(big, AluExp.sqrt((1.0 - a) * 0.5), a)  # 1 - a is exact above 1/2
    y = _atan_pos(w * _recip(AluExp.sqrt((1.0 - w) * (1.0 + w))))  # asin w, w <= 1/2
    y = _sel(big, math.pi / 2 - (y + y), y)
    v = _sel(_lt(a, 1e-9), x, _neg_if(_lt(x, 0.0), y))
    return _sel(_or(_is_nan(x), _lt(1.0, a)), _d(math.nan), v)


# ---- erf / erfc -------------------------------------------------------------------------------

_ERF = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(46)]
_ERF_SPLIT = 2.5


def _erf_series(x: AluExp) -> AluExp:
    """erf x by its Taylor series (|x| <= 2.5)."""
    return x * _horner(x * x, _ERF)


def _erfc_cf(a: AluExp) -> AluExp:
    """erfc a by its continued fraction (a > 2.5; a = +inf gives 0)."""
    k = a
    for n in range(40, 0, -1):
        k = a + (0.5 * n) * _recip(k)
    return exp(a * a * -1.0) * _recip(k * math.sqrt(math.pi))


def erf(x: AluExp) -> AluExp:
    a = _abs(x)
    v = _sel(_lt(_ERF_SPLIT, a), _neg_if(_lt(x, 0.0), 1.0 - _erfc_cf(a)), _erf_series(x))
    v = _sel(_is_inf(x), _neg_if(_lt(x, 0.0), _d(1.0)), v)
    return _sel(_is_nan(x), x, v)


def erfc(x: AluExp) -> AluExp:
    a = _abs(x)
    tail = _erfc_cf(a)
    v = _sel(_lt(_ERF_SPLIT, a), _sel(_lt(x, 0.0), 2.0 - tail, tail), 1.0 - _erf_series(x))
    v = _sel(_is_inf(x), _sel(_lt(x, 0.0), _d(2.0), _d(0.0)), v)
    return _sel(_is_nan(x), x, v)


_EXPAND = expansion_table(sin_cos, exp, log, atan, asin, erf, erfc)


def expand_node64(e: AluExp) -> AluExp | None:
    """The float64 expansion of one transcendental node, else None."""
    fn = _EXPAND.get(e.op)
    if fn is None or e.dtype != F64:
        return None
    (x,) = e.src
    # Opaque: the expansion is a helper function, and a driver that inlines it sees the argument's
    # own arithmetic; NVIDIA reassociated (f64(u) * -DBL_MAX) * 2^-1000 (the class test's scaling)
    # past the overflow, and sin(-inf) came back -0.
    return fn(opaque(x))
