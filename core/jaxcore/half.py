"""float16 held in float32: for a target whose float16 hardware is not exact, or that has none.

Every float16 value is a float32 value (its subnormals are normal there), so a target with the
`f16_in_f32` trait holds float16 values in float32 registers, computes each float16 op in
float32 and rounds the result to float16 right after it (`jaxcore.legalize` inserts the
rounding), and reads and writes memory as 16-bit patterns through integer ops: no float16
conversion or arithmetic of the hardware is used. NVIDIA's Vulkan driver is why: in float16 it
turned NaN into numbers (`%`, sum, sqrt), -inf into finite values and dropped a NaN's sign in
f16 -> f32, while its integer and float32 ops are exact.

Rounding twice is harmless: float32 has 24 >= 2 * 11 + 2 significand bits, so a float32 sum,
difference, product, quotient or square root of float16 values, rounded to float16, is the
correctly rounded float16 result (Figueroa, "When is double rounding innocuous?", 1995). A
float64 is first rounded to float32 *to odd* (`odd_f32`), which keeps that true for casts.

The three helpers are AluExp bodies over a Variable `x`; a dialect renders each once as a
function (`jaxcore.cstyle` generates `jc_f16_round`, `jc_f16_value`, `jc_f16_bits`):

- `round_f16(x)`: float32 -> the nearest float16 value (ties to even), as a float32; overflow
  gives an infinity, a NaN keeps its sign and the top of its payload (quiet if nothing is left);
- `f16_value(h)`: a 16-bit pattern (low half of a uint32) -> its value as a float32, exactly,
  NaN payload and sign included;
- `f16_bits(x)`: a float16 value held in a float32 -> its 16-bit pattern.
"""

from __future__ import annotations

import numpy as np

from jaxcore.alu import NORMAL_RANGE, AluExp, AluOp
from jaxcore.dtype import DType

F16_ROUND = "jc_f16_round"
F16_VALUE = "jc_f16_value"
F16_BITS = "jc_f16_bits"

_U32, _F32 = DType.uint32, DType.float32


def held_bits(v: float) -> int:
    """The float32 bits a float16 constant is held as: its value, or for a NaN its float16 sign
    and payload moved into place (the signalling bit too, which a float conversion would set)."""
    h = int(np.array(v, np.float64).astype(np.float16).view(np.uint16))
    if h & 0x7C00 != 0x7C00:
        return int(np.float32(np.uint16(h).view(np.float16)).view(np.uint32))
    return ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13)


def _u(v: int) -> AluExp:
    return AluExp.const(_U32, v)


def _eq(a: AluExp, v: int) -> AluExp:
    return AluExp(AluOp.Cmpne, DType.bool, (AluExp(AluOp.Cmpne, DType.bool, (a, _u(v))), AluExp.bool_(True)))


def _lt(a: AluExp, v: int) -> AluExp:
    return AluExp.cmplt(a, _u(v))


def _scaled(x: AluExp, factor: float) -> AluExp:
    """`x * factor` for a power of two that keeps every value used normal (spelled natively)."""
    return AluExp(AluOp.Mul, _F32, (x, AluExp.const(_F32, factor)), NORMAL_RANGE)


def round_f16(x: AluExp) -> AluExp:
    """The float16 value nearest float32 `x`, as a float32 (see the module doc)."""
    b = AluExp.bitcast(_U32, x)
    sign = AluExp.bit_and(b, 0x80000000)
    a = AluExp.bit_and(b, 0x7FFFFFFF)
    # Normal float16 range: round the 23-bit mantissa to 10 bits, ties to even; a carry moves
    # into the exponent by itself.
    lsb = AluExp.bit_and(AluExp.shr(a, _u(13)), 1)
    normal = AluExp.bit_and(a + _u(0xFFF) + lsb, 0xFFFFE000)
    # Below 2^-14 the quantum is 2^-24: k = |x| / 2^-24 rounded to an integer, ties to even.
    mant = AluExp.bit_or(AluExp.bit_and(a, 0x7FFFFF), 0x800000)
    shift = _u(126) - AluExp.shr(a, _u(23))  # 14..24 where it is used
    k = AluExp.shr(mant, shift)
    rest = AluExp.bit_and(mant, AluExp.shl(_u(1), shift) - _u(1))
    half = AluExp.shl(_u(1), shift - _u(1))
    up = AluExp(
        AluOp.BitCombine,
        DType.bool,
        (
            AluExp.cmplt(half, rest),
            AluExp(AluOp.BitCombine, DType.bool, (_eq(rest - half, 0), _eq(AluExp.bit_and(k, 1), 1)), "and"),
        ),
        "or",
    )
    k = k + AluExp.where(up, _u(1), _u(0))
    tiny = AluExp.bitcast(_U32, _scaled(AluExp.cast(_F32, k), 2.0**-24))
    nan_mant = AluExp.bit_and(a, 0x7FE000)
    nan = AluExp.bit_or(AluExp.where(_eq(nan_mant, 0), _u(0x400000), nan_mant), 0x7F800000)
    out = AluExp.where(_lt(a, 0x38800000), tiny, normal)
    out = AluExp.where(_lt(a, 0x33000001), _u(0), out)  # up to 2^-25 (a tie with 0): zero
    out = AluExp.where(_lt(a, 0x477FF000), out, _u(0x7F800000))  # from 65520 on: infinity
    out = AluExp.where(_lt(a, 0x7F800001), out, nan)
    return AluExp.bitcast(_F32, AluExp.bit_or(out, sign))


def f16_value(h: AluExp) -> AluExp:
    """float16 bits `h` (a uint32 below 2^16) -> the value as a float32."""
    sign = AluExp.shl(AluExp.bit_and(h, 0x8000), _u(16))
    exp = AluExp.bit_and(AluExp.shr(h, _u(10)), 0x1F)
    mant = AluExp.bit_and(h, 0x3FF)
    normal = AluExp.bit_or(AluExp.shl(exp + _u(112), _u(23)), AluExp.shl(mant, _u(13)))
    special = AluExp.bit_or(AluExp.shl(mant, _u(13)), 0x7F800000)
    tiny = AluExp.bitcast(_U32, _scaled(AluExp.cast(_F32, mant), 2.0**-24))
    out = AluExp.where(_eq(exp, 0), tiny, AluExp.where(_eq(exp, 31), special, normal))
    return AluExp.bitcast(_F32, AluExp.bit_or(out, sign))


def f16_bits(x: AluExp) -> AluExp:
    """A float16 value held in float32 `x` -> its 16-bit pattern (in a uint32)."""
    b = AluExp.bitcast(_U32, x)
    sign = AluExp.bit_and(AluExp.shr(b, _u(16)), 0x8000)
    a = AluExp.bit_and(b, 0x7FFFFFFF)
    normal = AluExp.shr(a - _u(0x38000000), _u(13))
    special = AluExp.bit_or(AluExp.bit_and(AluExp.shr(a, _u(13)), 0x3FF), 0x7C00)
    # below 2^-14: a multiple k of 2^-24, k = the 24-bit mantissa shifted right by 126 - exponent
    mant = AluExp.bit_or(AluExp.bit_and(a, 0x7FFFFF), 0x800000)
    tiny = AluExp.where(_lt(a, 0x33800000), _u(0), AluExp.shr(mant, _u(126) - AluExp.shr(a, _u(23))))
    out = AluExp.where(_lt(a, 0x38800000), tiny, AluExp.where(_lt(a, 0x7F800000), normal, special))
    return AluExp.bit_or(out, sign)


def odd_f32(x: AluExp) -> AluExp:
    """float64 `x` rounded to float32 *to odd*: truncated, with the last bit set when inexact, so
    that rounding it once more (to float16) gives `x` correctly rounded."""
    t = AluExp.cast(_F32, x)
    back = AluExp.cast(DType.float64, t)
    bits = AluExp.bitcast(_U32, t)
    neg = AluExp.cmplt(x, AluExp.const(DType.float64, 0.0))
    away = AluExp.where(neg, AluExp.cmplt(back, x), AluExp.cmplt(x, back))  # |t| > |x|
    bits = AluExp.where(away, bits - _u(1), bits)
    inexact = AluExp(AluOp.Cmpne, DType.bool, (back, x))
    return AluExp.bitcast(_F32, AluExp.where(inexact, AluExp.bit_or(bits, 1), bits))


# name -> (parameter dtype, body over Variable "x")
HELPERS = {
    F16_ROUND: (_F32, round_f16),
    F16_VALUE: (_U32, f16_value),
    F16_BITS: (_F32, f16_bits),
}


def helper_body(name: str) -> tuple[DType, AluExp]:
    """(parameter dtype, body) of one of the three helpers, over a Variable named `x`."""
    dtype, build = HELPERS[name]
    return dtype, build(AluExp.variable(dtype, "x"))
