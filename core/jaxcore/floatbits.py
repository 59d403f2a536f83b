"""float32 values taken apart and built from their bits, as AluExp trees: the spelling that
`jaxcore.softfloat`'s helpers and `jaxcore.legalize`'s exact division share. Nothing here is a
float op a device could flush but where marked NORMAL_RANGE.
"""

from __future__ import annotations

from jaxcore.alu import NORMAL_RANGE, AluExp, AluOp
from jaxcore.dtype import DType

F32, F64, U32, I32, BOOL = DType.float32, DType.float64, DType.uint32, DType.int32, DType.bool
SIGN, INF, QNAN = 0x80000000, 0x7F800000, 0x7FC00000


# ---- spelling -----------------------------------------------------------------------------------
def _u(v: int) -> AluExp:
    return AluExp.u32(v)


def _i(v: int) -> AluExp:
    return AluExp.i32(v)


def _var(dtype: DType, name: str) -> AluExp:
    return AluExp.variable(dtype, name)


def _bits(x: AluExp) -> AluExp:
    return AluExp.bitcast(U32, x)


def _float(b: AluExp | int) -> AluExp:
    return AluExp.bitcast(F32, _u(b) if isinstance(b, int) else b)


def _mag(x: AluExp) -> AluExp:
    return AluExp.bit_and(_bits(x), 0x7FFFFFFF)


def _eq(a: AluExp, b: AluExp | int) -> AluExp:
    return _not(_ne(a, b))


def _ne(a: AluExp, b: AluExp | int) -> AluExp:
    return AluExp(AluOp.Cmpne, BOOL, (a, _u(b) if isinstance(b, int) else b))


def _lt(a: AluExp, b: AluExp | int) -> AluExp:
    return AluExp.cmplt(a, _u(b) if isinstance(b, int) else b)


def _not(c: AluExp) -> AluExp:
    return AluExp(AluOp.Cmpne, BOOL, (c, AluExp.bool_(True)))


def _and(*cs: AluExp) -> AluExp:
    out = cs[0]
    for c in cs[1:]:
        out = AluExp(AluOp.BitCombine, BOOL, (out, c), "and")
    return out


def _or(*cs: AluExp) -> AluExp:
    out = cs[0]
    for c in cs[1:]:
        out = AluExp(AluOp.BitCombine, BOOL, (out, c), "or")
    return out


def _native(op: AluOp, *src: AluExp) -> AluExp:
    """A float32 op spelled natively (NORMAL_RANGE), never through the helpers."""
    return AluExp(op, F32, src, NORMAL_RANGE)


def _scale(x: AluExp, factor: float) -> AluExp:
    return _native(AluOp.Mul, x, AluExp.f32(factor))


def _shr(x: AluExp, n: AluExp | int) -> AluExp:
    return AluExp.shr(x, _u(n) if isinstance(n, int) else n)


def _shl(x: AluExp, n: AluExp | int) -> AluExp:
    return AluExp.shl(x, _u(n) if isinstance(n, int) else n)


def _to_u(x: AluExp) -> AluExp:
    return AluExp.bitcast(U32, x)


def _to_i(x: AluExp) -> AluExp:
    return AluExp.bitcast(I32, x)


def _is_den(m: AluExp) -> AluExp:
    """Magnitude bits `m` are a nonzero subnormal (one unsigned compare: 0 - 1 wraps)."""
    return _lt(m - _u(1), 0x007FFFFF)


def _is_normal(m: AluExp) -> AluExp:
    """Magnitude bits `m` are a normal float (neither zero, subnormal, infinite nor NaN)."""
    return _lt(m - _u(0x00800000), 0x7F000000)


def _is_nan(m: AluExp) -> AluExp:
    return _lt(_u(INF), m)


def _exponent_field(x: AluExp) -> AluExp:
    return AluExp.bit_and(_bits(x), INF)


def _msb(v: AluExp) -> AluExp:
    """The index of the highest set bit of a nonzero uint32, from its float32 conversion (rounding
    may carry into the next power of two: the shift corrects that)."""
    e = _shr(_bits(AluExp.cast(F32, v)), 23) - _u(127)
    e = AluExp.min(e, _u(31))
    return AluExp.where(_eq(_shr(v, e), 0), e - _u(1), e)


def _unpack(m: AluExp) -> tuple[AluExp, AluExp]:
    """Magnitude bits of a finite nonzero float -> (mantissa in [2^23, 2^24), unbiased exponent as
    int32): value = mantissa 2^(exponent - 23); a subnormal normalised on its bits."""
    field = _shr(m, 23)
    shift = _u(23) - _msb(m)  # for a subnormal (m < 2^23 converts exactly)
    sub = _eq(field, 0)
    mant = AluExp.where(sub, _shl(m, shift), AluExp.bit_or(AluExp.bit_and(m, 0x007FFFFF), 0x00800000))
    exp = AluExp.where(sub, _i(-126) - _to_i(shift), _to_i(field) - _i(127))
    return mant, exp


# ---- rounding a scaled integer to float32 ----------------------------------------------------------
def pack(sign: AluExp, v: AluExp, e: AluExp) -> AluExp:
    """sign | v 2^e rounded to nearest even, as a float32, subnormals and overflow included; v is a
    uint32 >= 2^25 whose lowest bit is sticky, so at least two bits are dropped and the sticky bit
    is below the guard bit."""
    p = _msb(v)
    ex = _to_i(p) + e  # the exponent of the leading bit
    tiny = AluExp.cmplt(ex, _i(-126))
    drop = AluExp.where(tiny, _i(-149) - e, _to_i(p) - _i(23))  # >= 2
    g = _to_u(AluExp.min(drop, _i(33))) - _u(1)  # the guard bit's index; 32: above v
    gs = AluExp.min(g, _u(31))
    guard = AluExp.where(_lt(g, 32), AluExp.bit_and(_shr(v, gs), 1), _u(0))
    sticky = _ne(AluExp.bit_and(v, _shl(_u(1), gs) - _u(1)), 0)
    q = _shr(_shr(v, gs), 1)
    up = _and(_eq(guard, 1), _or(sticky, _eq(AluExp.bit_and(q, 1), 1)))
    q = q + AluExp.where(up, _u(1), _u(0))
    carry = _lt(_u(0x00FFFFFF), q)  # rounded up to 2^24: one more exponent
    qn = AluExp.where(carry, _shr(q, 1), q)
    en = ex + AluExp.where(carry, _i(1), _i(0))
    normal = AluExp.bit_or(_shl(_to_u(en + _i(127)), 23), AluExp.bit_and(qn, 0x007FFFFF))
    out = AluExp.where(AluExp.cmplt(_i(127), en), _u(INF), normal)
    return _float(AluExp.bit_or(AluExp.where(tiny, q, out), sign))


def _flag(c: AluExp) -> AluExp:
    return AluExp.where(c, _u(1), _u(0))
