"""GLSL ES 3.00 helpers that give the contract's answers where GLSL leaves them undefined.

Each helper is a named block; a shader includes only the ones it calls (and their dependencies).
Why they exist:
- GLSL ES leaves integer division by zero, `%` of negative operands and out-of-range float-to-int
  conversions undefined; the helpers compute on magnitudes and saturate explicitly.
- Compilers may fold `x != x` and `isnan` away, and `min`/`max` of NaN are undefined: NaN is
  tested on the bits.
- Drivers may flush denormals (llvmpipe does, on inputs and results). Comparisons, min/max,
  floor/ceil and casts therefore work on bits, and add/sub/mul/div take an exact slow path
  (integer mantissa arithmetic) when an operand is denormal or the result underflows.
- `fmod` is exact integer long division (as C's fmodf), since `a - b * trunc(a / b)` is not.
"""

from __future__ import annotations

import re

from jaxcore.pi_bits import two_over_pi_chunks

LIB: dict[str, str] = {}
DEPS: dict[str, tuple[str, ...]] = {}


# two zero words in front: the window for a small exponent starts before the point
_TWO_OVER_PI = ", ".join(f"0x{w:08x}u" for w in [0, 0, *two_over_pi_chunks(10)])


def _def(name: str, src: str, deps: tuple[str, ...] = ()) -> None:
    LIB[name] = src.strip("\n") + "\n"
    DEPS[name] = deps


# An identity the compiler cannot see through (jx_z is a uniform that is always 0): without it,
# GLSL compilers fold x * 0.0 to 0.0, x + 0.0 to x and x - x to 0.0, wrong for NaN, Inf and -0.
_def(
    "jx_o",
    """
uniform uint jx_z;
float jx_o(float x) { return uintBitsToFloat(floatBitsToUint(x) ^ jx_z); }
""",
)
# bool -> 0/1: NVIDIA's compiler (GLES 3.2, driver 580) turned uint(b) into 0xffffffff for true
# inside max(acc, uint(b)); an AND with a 1 it cannot see (1 ^ jx_z) keeps the low bit only.
_def("jx_b2u", "uint jx_b2u(bool b) { return uint(b) & (1u ^ jx_z); }", ("jx_o",))
_def(
    "jx_isnan",
    """
bool jx_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
""",
)
_def(
    "jx_isden",
    """
bool jx_isden(float x) { uint b = floatBitsToUint(x) & 0x7fffffffu; return b != 0u && b < 0x00800000u; }
""",
)
# float32 -> float16 bits, rounding to nearest even. packHalf2x16 does that for finite values in
# range, but GLSL ES leaves Inf, NaN and overflow to the implementation: ANGLE on SwiftShader
# (Chromium's software WebGL2) returns 0x27fff for +Inf, 0x2ffff for -Inf and NaN (bit 17 set, which
# spills into the other half of the word) and 0x7c46 for 70000. Those are spelled out here.
_def(
    "jx_ph",
    """
uint jx_ph(float x) {
  uint b = floatBitsToUint(x);
  uint s = (b >> 16) & 0x8000u;
  uint a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return s | 0x7e00u | ((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return s | 0x7c00u;
  return packHalf2x16(vec2(x, 0.0)) & 0xffffu;
}
""",
)
_def(
    "jx_f16",
    """
float jx_f16(float x) { return unpackHalf2x16(jx_ph(x)).x; }
""",
    ("jx_ph",),
)
# uint -> float from two exact 16-bit halves and one rounding: ANGLE on SwiftShader rounds
# float(uint) apart from the contract's nearest-even.
_def(
    "jx_u2f",
    """
float jx_u2f(uint x) { return float(x >> 16u) * 65536.0 + float(x & 0xffffu); }
""",
)
# float16 moves stay on the bits: NVIDIA's unpackHalf2x16/packHalf2x16 canonicalise NaN payloads.
_def(
    "jx_hb",
    """
uint jx_hb(uint w, int k) { return (w >> uint(k << 4)) & 0xffffu; }
""",
)
_def(
    "jx_h",
    """
float jx_h(uint w, int k) {
  uint h = (w >> uint(k << 4)) & 0xffffu;
  // a NaN from its bits (sign and payload, as numpy widens it): NVIDIA's unpackHalf2x16 drops the sign
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u)
    return uintBitsToFloat(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
  vec2 v = unpackHalf2x16(w);
  return k == 0 ? v.x : v.y;
}
""",
)
# Float comparisons on bits: exact whatever the driver does with NaN and denormals.
_def(
    "jx_key",
    """
uint jx_key(float x) { uint b = floatBitsToUint(x); return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u); }
""",
)
_def(
    "jx_lt",
    """
bool jx_lt(float a, float b) {
  if (jx_isnan(a) || jx_isnan(b)) return false;
  uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  if (((ua | ub) & 0x7fffffffu) == 0u) return false;
  return jx_key(a) < jx_key(b);
}
""",
    ("jx_isnan", "jx_key"),
)
_def(
    "jx_ne",
    """
bool jx_ne(float a, float b) {
  if (jx_isnan(a) || jx_isnan(b)) return true;
  uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  return ua != ub && ((ua | ub) & 0x7fffffffu) != 0u;
}
""",
    ("jx_isnan",),
)
_def(
    "jx_min",
    """
float jx_min(float a, float b) { return jx_isnan(a) ? a : (jx_isnan(b) ? b : (jx_lt(b, a) ? b : a)); }
""",
    ("jx_isnan", "jx_lt"),
)
_def(
    "jx_max",
    """
float jx_max(float a, float b) { return jx_isnan(a) ? a : (jx_isnan(b) ? b : (jx_lt(a, b) ? b : a)); }
""",
    ("jx_isnan", "jx_lt"),
)
_def(
    "jx_neg",
    """
float jx_neg(float x) { return uintBitsToFloat(floatBitsToUint(x) ^ 0x80000000u); }
""",
)
# Integer division and remainder: C semantics, x/0 = x%0 = 0, INT_MIN/-1 = INT_MIN.
_def(
    "jx_idiv_u",
    """
uint jx_idiv_u(uint a, uint b) { return b == 0u ? 0u : a / b; }
""",
)
_def(
    "jx_mod_u",
    """
uint jx_mod_u(uint a, uint b) { return b == 0u ? 0u : a % b; }
""",
)
_def(
    "jx_idiv_i",
    """
int jx_idiv_i(int a, int b) {
  if (b == 0) return 0;
  uint ua = a < 0 ? 0u - uint(a) : uint(a);
  uint ub = b < 0 ? 0u - uint(b) : uint(b);
  uint q = ua / ub;
  return (a < 0) != (b < 0) ? int(0u - q) : int(q);
}
""",
)
_def(
    "jx_mod_i",
    """
int jx_mod_i(int a, int b) {
  if (b == 0) return 0;
  uint ua = a < 0 ? 0u - uint(a) : uint(a);
  uint ub = b < 0 ? 0u - uint(b) : uint(b);
  uint r = ua % ub;
  return a < 0 ? int(0u - r) : int(r);
}
""",
)
# Float to integer: truncate, saturate, NaN -> 0.
_def(
    "jx_f2i",
    """
int jx_f2i(float x) {
  if (jx_isnan(x)) return 0;
  if (x >= 2147483648.0) return 2147483647;
  if (x <= -2147483648.0) return int(0x80000000u);
  return int(x);
}
""",
    ("jx_isnan",),
)
_def(
    "jx_f2u",
    """
uint jx_f2u(float x) {
  if (jx_isnan(x) || !(x >= 1.0)) return 0u;
  if (x >= 4294967296.0) return 0xffffffffu;
  return uint(x);
}
""",
    ("jx_isnan",),
)
_def(
    "jx_floor",
    """
float jx_floor(float x) {
  uint sg = floatBitsToUint(x) & 0x80000000u;
  if (jx_isden(x)) return uintBitsToFloat(sg | (sg != 0u ? 0x3f800000u : 0u));
  return floor(x);
}
""",
    ("jx_isden",),
)
_def(
    "jx_ceil",
    """
float jx_ceil(float x) {
  uint sg = floatBitsToUint(x) & 0x80000000u;
  if (jx_isden(x)) return uintBitsToFloat(sg | (sg != 0u ? 0u : 0x3f800000u));
  return ceil(x);
}
""",
    ("jx_isden",),
)
# Unpack a finite nonzero float into (mantissa with the hidden bit, in [2^23, 2^24), exponent):
# x = m * 2^(e - 23). Denormals are normalised through an exact int -> float conversion.
_def(
    "jx_unpack",
    """
uint jx_unpack(float x, out int e) {
  uint b = floatBitsToUint(x) & 0x7fffffffu;
  int be = int(b >> 23);
  uint m = b & 0x007fffffu;
  if (be == 0) {
    int msb = int(floatBitsToUint(float(m)) >> 23) - 127;
    e = msb - 149;
    return m << uint(23 - msb);
  }
  e = be - 127;
  return m | 0x00800000u;
}
""",
)
# Round sign * (v.x:v.y as a 64-bit integer) * 2^e to float (round-half-even, denormals and
# overflow included), building the bits directly: nothing here can be flushed by the driver.
_def(
    "jx_pack",
    """
uvec2 jx_shr64(uvec2 v, int n) {
  if (n <= 0) return v;
  if (n >= 64) return uvec2(0u);
  if (n >= 32) return uvec2(0u, v.x >> uint(n - 32));
  return uvec2(v.x >> uint(n), (v.y >> uint(n)) | (v.x << uint(32 - n)));
}
uvec2 jx_shl64(uvec2 v, int n) {
  if (n <= 0) return v;
  if (n >= 64) return uvec2(0u);
  if (n >= 32) return uvec2(v.y << uint(n - 32), 0u);
  return uvec2((v.x << uint(n)) | (v.y >> uint(32 - n)), v.y << uint(n));
}
float jx_pack(uint sign, uvec2 v, int e) {
  if (v.x == 0u && v.y == 0u) return uintBitsToFloat(sign);
  int p = v.x != 0u ? 32 + jx_msb(v.x) : jx_msb(v.y);
  int E = p + e;
  int drop = E >= -126 ? p - 23 : -149 - e;
  uint q;
  if (drop <= 0) {
    q = v.y << uint(-drop);
  } else {
    q = jx_shr64(v, drop).y;
    uvec2 h = jx_shr64(v, drop - 1);
    bool hbit = (h.y & 1u) != 0u;
    bool sticky = jx_shl64(h, drop - 1) != v;
    if (hbit && (sticky || (q & 1u) != 0u)) q += 1u;
  }
  if (E < -126) return uintBitsToFloat(sign | q);
  if (q >= 0x01000000u) { q >>= 1; E += 1; }
  if (E > 127) return uintBitsToFloat(sign | 0x7f800000u);
  return uintBitsToFloat(sign | (uint(E + 127) << 23) | (q & 0x007fffffu));
}
""",
    ("jx_msb",),
)
# 32x32 -> 64 unsigned multiply from 16-bit halves (umulExtended is GLSL ES 3.10).
_def(
    "jx_umul64",
    """
uvec2 jx_umul64(uint a, uint b) {
  uint al = a & 0xffffu, ah = a >> 16, bl = b & 0xffffu, bh = b >> 16;
  uint ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  uint mid = (ll >> 16) + (lh & 0xffffu) + (hl & 0xffffu);
  uint lo = (ll & 0xffffu) | (mid << 16);
  uint hi = hh + (lh >> 16) + (hl >> 16) + (mid >> 16);
  return uvec2(hi, lo);
}
""",
)
_def(
    "jx_mul_slow",
    """
float jx_mul_slow(float a, float b) {
  uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  int ea, eb;
  uint ma = jx_unpack(a, ea), mb = jx_unpack(b, eb);
  uvec2 p = jx_umul64(ma, mb);  // value = p * 2^(ea + eb - 46)
  return jx_pack(sign, p, ea + eb - 46);
}
""",
    ("jx_unpack", "jx_pack", "jx_umul64"),
)
_def(
    "jx_mul",
    """
float jx_mul(float a, float b) {
  float r = a * jx_o(b);
  uint aa = floatBitsToUint(a) & 0x7fffffffu, ab = floatBitsToUint(b) & 0x7fffffffu;
  bool da = aa != 0u && aa < 0x00800000u, db = ab != 0u && ab < 0x00800000u;
  if (!(da || db || (r == 0.0 && aa != 0u && ab != 0u))) return r;
  if (aa > 0x7f800000u || ab > 0x7f800000u) return r;
  uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  if (aa == 0x7f800000u || ab == 0x7f800000u)
    return uintBitsToFloat((aa == 0u || ab == 0u) ? 0x7fc00000u : (sign | 0x7f800000u));
  if (aa == 0u || ab == 0u) return uintBitsToFloat(sign);
  return jx_mul_slow(a, b);
}
""",
    ("jx_mul_slow",),
)
_def(
    "jx_div_slow",
    """
float jx_div_slow(float a, float b) {
  uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  int ea, eb;
  uint ma = jx_unpack(a, ea), mb = jx_unpack(b, eb);
  // long division: 26 quotient bits (ma/mb in (1/2, 2)), remainder as sticky
  uint q = 0u, r = ma;
  for (int i = 0; i < 26; i++) {
    q <<= 1;
    if (r >= mb) { r -= mb; q |= 1u; }
    r <<= 1;
  }
  // quotient value = q * 2^(ea - eb - 25); put a sticky bit below it
  q = (q << 1) | (r != 0u ? 1u : 0u);
  return jx_pack(sign, uvec2(0u, q), ea - eb - 26);
}
""",
    ("jx_unpack", "jx_pack"),
)
_def(
    "jx_div",
    """
float jx_div(float a, float b) {
  float r = a / jx_o(b);
  uint aa = floatBitsToUint(a) & 0x7fffffffu, ab = floatBitsToUint(b) & 0x7fffffffu;
  bool da = aa != 0u && aa < 0x00800000u, db = ab != 0u && ab < 0x00800000u;
  bool under = (floatBitsToUint(r) & 0x7f800000u) == 0u && aa != 0u;
  if (!(da || db || under)) return r;
  if (aa > 0x7f800000u || ab > 0x7f800000u) return r;
  uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  if (aa == 0x7f800000u) return uintBitsToFloat(ab == 0x7f800000u ? 0x7fc00000u : (sign | 0x7f800000u));
  if (ab == 0x7f800000u) return uintBitsToFloat(sign);
  if (ab == 0u) return uintBitsToFloat(aa == 0u ? 0x7fc00000u : (sign | 0x7f800000u));
  if (aa == 0u) return uintBitsToFloat(sign);
  return jx_div_slow(a, b);
}
""",
    ("jx_div_slow",),
)
# a + b with a denormal operand or a denormal sum: scale by 2^24 (exact), add, scale back. Sums in
# the denormal range are multiples of 2^-149, so they are exact and built from bits.
_def(
    "jx_up24",
    """
float jx_up24(float x) {
  uint b = floatBitsToUint(x);
  if (!jx_isden(x)) return x * 16777216.0;
  float m = float(b & 0x007fffffu) * 2.350988701644575e-38;  // m * 2^-125
  return (b >> 31) != 0u ? -m : m;
}
""",
    ("jx_isden",),
)
_def(
    "jx_add",
    """
float jx_add(float a, float b) {
  float r = a + jx_o(b);
  bool tiny = (floatBitsToUint(r) & 0x7f800000u) == 0u
    && floatBitsToUint(a) != (floatBitsToUint(b) ^ 0x80000000u);
  if (!(jx_isden(a) || jx_isden(b) || tiny)) return r;
  uint aa = floatBitsToUint(a) & 0x7fffffffu, ab = floatBitsToUint(b) & 0x7fffffffu;
  if (aa >= 0x7f800000u || ab >= 0x7f800000u) return r;
  // an operand >= 2^-100 next to a denormal (< 2^-126, under a quarter ulp) is the sum
  if (aa >= 0x0d800000u) return a;
  if (ab >= 0x0d800000u) return b;
  float s = jx_up24(a) + jx_up24(b);
  uint sb = floatBitsToUint(s);
  if (s == 0.0) return uintBitsToFloat(sb);
  if ((sb & 0x7fffffffu) >= 0x0c800000u) return s * 5.9604644775390625e-08;  // |s| >= 2^-102
  uint m = uint(abs(s) * 4.253529586511731e+37);  // |s| * 2^125, an exact integer
  return uintBitsToFloat((sb & 0x80000000u) | m);
}
""",
    ("jx_isden", "jx_up24"),
)
_def(
    "jx_rcp",
    """
float jx_rcp(float x) { return jx_div(1.0, x); }
""",
    ("jx_div",),
)
_def(
    "jx_sub",
    """
float jx_sub(float a, float b) { return jx_add(a, jx_neg(b)); }
""",
    ("jx_add", "jx_neg"),
)
# C fmodf: exact, sign of a (musl's shift-subtract loop over the exponent difference).
_def(
    "jx_msb",
    """
int jx_msb(uint u) {
  int m = int(floatBitsToUint(float(u)) >> 23) - 127;
  if (m > 31 || (u >> uint(m)) == 0u) m -= 1;
  return m;
}
""",
)
_def(
    "jx_fmod",
    """
float jx_fmod(float x, float y) {
  uint ux = floatBitsToUint(x), uy = floatBitsToUint(y);
  uint sx = ux & 0x80000000u;
  uint ax = ux & 0x7fffffffu, ay = uy & 0x7fffffffu;
  if (ay == 0u || ax >= 0x7f800000u || ay > 0x7f800000u) return uintBitsToFloat(0x7fc00000u);
  if (ax < ay) return x;
  int ex = int(ax >> 23), ey = int(ay >> 23);
  uint mx, my;
  if (ex == 0) { int msb = jx_msb(ax); ex = msb - 22; mx = ax << uint(23 - msb); }
  else mx = (ax & 0x007fffffu) | 0x00800000u;
  if (ey == 0) { int msb = jx_msb(ay); ey = msb - 22; my = ay << uint(23 - msb); }
  else my = (ay & 0x007fffffu) | 0x00800000u;
  for (int i = 0; i < 40; i++) {  // 8 steps an iteration: llvmpipe caps loop iterations per shader
    if (ex <= ey) break;
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); } mx <<= 1; ex--; }
  }
  if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); }
  // normalise: mx < 2^24, value = mx * 2^(ey - 150) (ey is the biased exponent)
  int lz = 23 - jx_msb(mx);
  mx <<= uint(lz); ey -= lz;
  uint bits;
  if (ey > 0) bits = (uint(ey) << 23) | (mx & 0x007fffffu);
  else bits = mx >> uint(1 - ey);
  return uintBitsToFloat(sx | bits);
}
""",
)
_def(
    "jx_sqrt",
    """
float jx_sqrt(float x) {
  if (jx_isden(x) && (floatBitsToUint(x) >> 31) == 0u) {
    // x = m * 2^-149 = (2m) * 2^-150: sqrt = sqrt(2m) * 2^-75
    return sqrt(float(floatBitsToUint(x)) * 2.0) * 2.6469779601696886e-23;
  }
  if (jx_isden(x)) return uintBitsToFloat(0x7fc00000u);
  return sqrt(x);
}
""",
    ("jx_isden",),
)


def _threefry_src() -> str:
    """Threefry-2x32, 20 rounds, written out (no loops: llvmpipe caps a shader's loop iterations)."""
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    lines = [
        "uvec2 jx_threefry(uint k0, uint k1, uint c0, uint c1) {",
        "  uint ks0 = k0, ks1 = k1, ks2 = k0 ^ k1 ^ 0x1BD11BDAu;",
        "  uint x0 = c0 + ks0, x1 = c1 + ks1;",
    ]
    for g in range(1, 6):
        for r in rot[(g - 1) % 2]:
            lines.append(f"  x0 += x1; x1 = ((x1 << {r}u) | (x1 >> {32 - r}u)) ^ x0;")
        lines.append(f"  x0 += ks{g % 3}; x1 += ks{(g + 1) % 3} + {g}u;")
    lines += ["  return uvec2(x0, x1);", "}"]
    return "\n".join(lines)


_def("jx_threefry", _threefry_src())


# ---- float32 transcendentals ---------------------------------------------------------------
# GLSL's built-ins are only loosely specified (llvmpipe's log, atan and asin are off by 1e-5 to
# 1e-3, sin/cos lose the argument above ~1e5), so the contract's accuracy needs our own:
# Cephes-style minimax polynomials after exact argument reduction, Payne-Hanek for large sin/cos.
_def(
    "jx_exp",
    """
float jx_exp(float x) {
  if (jx_isnan(x)) return x;
  if (x > 88.72283935546875) return uintBitsToFloat(0x7f800000u);
  if (x < -104.0) return 0.0;
  float k = floor(x * 1.4426950408889634 + 0.5);
  float r = (x - k * 0.693359375) - k * -2.12194440e-4;
  float z = r * r;
  float p = (((((1.9875691500e-4 * r + 1.3981999507e-3) * r + 8.3334519073e-3) * r + 4.1665795894e-2) * r
             + 1.6666665459e-1) * r + 5.0000001201e-1) * z + r + 1.0;
  int ki = int(k);
  int k1 = ki >> 1;
  int k2 = ki - k1;
  return p * uintBitsToFloat(uint(k1 + 127) << 23) * uintBitsToFloat(uint(k2 + 127) << 23);
}
""",
    ("jx_isnan",),
)
_def(
    "jx_log",
    """
float jx_log(float x) {
  uint b = floatBitsToUint(x);
  uint ax = b & 0x7fffffffu;
  if (ax > 0x7f800000u) return x;
  if (ax == 0u) return uintBitsToFloat(0xff800000u);
  if ((b >> 31) != 0u) return uintBitsToFloat(0x7fc00000u);
  if (ax == 0x7f800000u) return x;
  int e;
  uint m = jx_unpack(x, e);
  float f = float(m) * 5.9604644775390625e-08;  // [0.5, 1)
  int ex = e + 1;
  if (f < 0.70710678118654752) { ex -= 1; f = f + f - 1.0; } else { f = f - 1.0; }
  float z = f * f;
  float y = ((((((((7.0376836292e-2 * f - 1.1514610310e-1) * f + 1.1676998740e-1) * f - 1.2420140846e-1) * f
            + 1.4249322787e-1) * f - 1.6668057665e-1) * f + 2.0000714765e-1) * f - 2.4999993993e-1) * f
            + 3.3333331174e-1) * f * z;
  float fe = float(ex);
  y += -2.12194440e-4 * fe;
  y += -0.5 * z;
  float r = f + y;
  r += 0.693359375 * fe;
  return r;
}
""",
    ("jx_unpack",),
)
_def(
    "jx_trig",
    """
const uint JX_TWO_OVER_PI[12] = uint[12](@TWO_OVER_PI@);
uint jx_tpw(int j, int sh) {  // 32 bits of 2/pi starting at bit j*32+sh of the padded table
  uint a = JX_TWO_OVER_PI[j];
  return sh == 0 ? a : ((a << uint(sh)) | (JX_TWO_OVER_PI[j + 1] >> uint(32 - sh)));
}
// |x| = q * pi/2 + r with |r| <= pi/4 (r carries x's sign); q is returned negated for x < 0.
float jx_trig_reduce(float x, out int q) {
  uint b = floatBitsToUint(x);
  uint ax = b & 0x7fffffffu;
  float a = uintBitsToFloat(ax);
  float r;
  int k;
  if (ax < 0x46000000u) {  // |x| < 8192: three-part pi/2 (Cody-Waite), exact products
    float kf = floor(a * 0.63661977236758134 + 0.5);
    r = ((a - kf * 1.5703125) - kf * 4.837512969970703125e-4) - kf * 7.54978995489188216e-8;
    k = int(kf);
  } else {  // Payne-Hanek: the 96 bits of 2/pi that matter, times the 24-bit mantissa
    int e = int(ax >> 23) - 127;
    uint m = (ax & 0x007fffffu) | 0x00800000u;
    int j0 = e - 23 + 62;
    int w = j0 >> 5, sh = j0 & 31;
    uint W0 = jx_tpw(w, sh), W1 = jx_tpw(w + 1, sh), W2 = jx_tpw(w + 2, sh);
    uvec2 p2 = jx_umul64(m, W2);
    uvec2 p1 = jx_umul64(m, W1);
    uint R2 = p2.y;
    uint R1 = p2.x + p1.y;
    uint R0 = p1.x + m * W0 + (R1 < p2.x ? 1u : 0u);
    k = int(R0 >> 30);
    uint F0 = R0 & 0x3fffffffu, F1 = R1, F2 = R2;
    bool neg = (F0 & 0x20000000u) != 0u;
    if (neg) {  // fraction >= 1/2: round up the quadrant, negate the 94-bit fraction
      k += 1;
      F2 = ~F2 + 1u;
      uint c = F2 == 0u ? 1u : 0u;
      F1 = ~F1 + c;
      c = (c == 1u && F1 == 0u) ? 1u : 0u;
      F0 = (~F0 + c) & 0x3fffffffu;
    }
    float f = (float(F2) * 5.048709793414476e-29 + float(F1) * 2.168404344971009e-19)
      + float(F0) * 9.313225746154785e-10;
    r = f * 1.5707963705062866 + f * -4.371139000186241e-08;
    if (neg) r = -r;
  }
  k &= 3;
  if ((b >> 31) != 0u) { r = -r; k = (4 - k) & 3; }
  q = k;
  return r;
}
float jx_sin_poly(float r, float z) {
  return ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
}
float jx_cos_poly(float z) {
  return ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z
    - 0.5 * z + 1.0;
}
float jx_sin(float x) {
  if ((floatBitsToUint(x) & 0x7fffffffu) >= 0x7f800000u) return uintBitsToFloat(0x7fc00000u);
  int q;
  float r = jx_trig_reduce(x, q);
  float z = r * r;
  float s = jx_sin_poly(r, z), c = jx_cos_poly(z);
  return q == 0 ? s : (q == 1 ? c : (q == 2 ? -s : -c));
}
float jx_cos(float x) {
  if ((floatBitsToUint(x) & 0x7fffffffu) >= 0x7f800000u) return uintBitsToFloat(0x7fc00000u);
  int q;
  float r = jx_trig_reduce(x, q);
  float z = r * r;
  float s = jx_sin_poly(r, z), c = jx_cos_poly(z);
  return q == 0 ? c : (q == 1 ? -s : (q == 2 ? -c : s));
}
""".replace("@TWO_OVER_PI@", _TWO_OVER_PI),
    ("jx_umul64",),
)
_def(
    "jx_atan",
    """
float jx_atan(float x) {
  if (jx_isnan(x)) return x;
  uint sb = floatBitsToUint(x) & 0x80000000u;
  float a = uintBitsToFloat(floatBitsToUint(x) & 0x7fffffffu);
  float y;
  if (a > 2.414213562373095) { y = 1.5707963267948966; a = -1.0 / a; }
  else if (a > 0.4142135623730950) { y = 0.7853981633974483; a = (a - 1.0) / (a + 1.0); }
  else y = 0.0;
  float z = a * a;
  y += (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1)
    * z * a + a;
  return uintBitsToFloat(floatBitsToUint(y) ^ sb);
}
""",
    ("jx_isnan",),
)
_def(
    "jx_asin",
    """
float jx_asin(float x) {
  if (jx_isnan(x)) return x;
  uint sb = floatBitsToUint(x) & 0x80000000u;
  float a = uintBitsToFloat(floatBitsToUint(x) & 0x7fffffffu);
  if (a > 1.0) return uintBitsToFloat(0x7fc00000u);
  float z, s;
  bool big = a > 0.5;
  if (big) { z = 0.5 * (1.0 - a); s = sqrt(z); } else { z = a * a; s = a; }
  float y = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z
             + 1.6666752422e-1) * z * s + s;
  if (big) y = 1.5707963267948966 - (y + y);
  return uintBitsToFloat(floatBitsToUint(y) ^ sb);
}
""",
    ("jx_isnan",),
)
# erf: odd Taylor series to x^13 on |x| < 0.5; Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7) above.
_def(
    "jx_erf",
    """
float jx_erfc_pos(float a) {  // a >= 0.5
  float t = 1.0 / (1.0 + 0.3275911 * a);
  float p = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t;
  return p * jx_exp(-a * a);
}
float jx_erf_small(float x) {
  float z = x * x;
  return x * 1.1283791670955126 * (1.0 + z * (-0.3333333333333333 + z * (0.1 + z * (-0.023809523809523808
         + z * (0.004629629629629629 + z * (-7.575757575757576e-4 + z * 1.0683760683760684e-4))))));
}
float jx_erf(float x) {
  if (jx_isnan(x)) return x;
  float a = abs(x);
  if (a < 0.5) return jx_erf_small(x);
  float r = 1.0 - jx_erfc_pos(a);
  return x < 0.0 ? -r : r;
}
float jx_erfc(float x) {
  if (jx_isnan(x)) return x;
  float a = abs(x);
  if (a < 0.5) return 1.0 - jx_erf_small(x);
  float r = jx_erfc_pos(a);
  return x < 0.0 ? 2.0 - r : r;
}
""",
    ("jx_isnan", "jx_exp"),
)
for _name in ("jx_sin", "jx_cos"):
    LIB[_name] = ""
    DEPS[_name] = ("jx_trig",)
LIB["jx_erfc"] = ""
DEPS["jx_erfc"] = ("jx_erf",)


_CALL = re.compile(r"\b(jx_[a-z0-9_]+)\s*\(")


def _deps(name: str) -> tuple[str, ...]:
    """What a helper calls: its declared dependencies and every other helper named in its source."""
    found = [d for d in _CALL.findall(LIB[name]) if d in LIB and d != name and LIB[d]]
    return tuple(dict.fromkeys([*DEPS[name], *found]))


# name -> (source, helpers it calls): the form `jaxcore.cstyle.CStyleLanguage.helpers` takes.
HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {n: (LIB[n], _deps(n)) for n in LIB}
