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

LIB: dict[str, str] = {}
DEPS: dict[str, tuple[str, ...]] = {}


def _def(name: str, src: str, deps: tuple[str, ...] = ()) -> None:
    LIB[name] = src.strip("\n") + "\n"
    DEPS[name] = deps


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
_def(
    "jx_f16",
    """
float jx_f16(float x) { return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x; }
""",
)
_def(
    "jx_h",
    """
float jx_h(uint w, int k) { vec2 v = unpackHalf2x16(w); return k == 0 ? v.x : v.y; }
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
  if (jx_isden(x)) return x < 0.0 || (floatBitsToUint(x) >> 31) != 0u ? -1.0 : 0.0;
  return floor(x);
}
""",
    ("jx_isden",),
)
_def(
    "jx_ceil",
    """
float jx_ceil(float x) {
  if (jx_isden(x)) return (floatBitsToUint(x) >> 31) != 0u ? -0.0 : 1.0;
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
int jx_msb(uint u) { int m = int(floatBitsToUint(float(u)) >> 23) - 127; if (m > 31 || (u >> uint(m)) == 0u) m -= 1; return m; }
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
  float r = a * b;
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
  float r = a / b;
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
  float r = a + b;
  bool tiny = (floatBitsToUint(r) & 0x7f800000u) == 0u && floatBitsToUint(a) != (floatBitsToUint(b) ^ 0x80000000u);
  if (!(jx_isden(a) || jx_isden(b) || tiny)) return r;
  if ((floatBitsToUint(a) & 0x7fffffffu) >= 0x7f800000u || (floatBitsToUint(b) & 0x7fffffffu) >= 0x7f800000u) return r;
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
    "jx_sub",
    """
float jx_sub(float a, float b) { return jx_add(a, jx_neg(b)); }
""",
    ("jx_add", "jx_neg"),
)
# C fmodf: exact, sign of a (musl's shift-subtract loop over the exponent difference).
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
  if (ex == 0) { int msb = int(floatBitsToUint(float(ax)) >> 23) - 127; ex = msb - 22; mx = ax << uint(23 - msb); }
  else mx = (ax & 0x007fffffu) | 0x00800000u;
  if (ey == 0) { int msb = int(floatBitsToUint(float(ay)) >> 23) - 127; ey = msb - 22; my = ay << uint(23 - msb); }
  else my = (ay & 0x007fffffu) | 0x00800000u;
  for (int i = 0; i < 300; i++) {
    if (ex <= ey) break;
    if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); }
    mx <<= 1; ex--;
  }
  if (mx >= my) { mx -= my; if (mx == 0u) return uintBitsToFloat(sx); }
  // normalise: mx < 2^24, value = mx * 2^(ey - 150) (ey is the biased exponent)
  for (int i = 0; i < 24; i++) { if (mx >= 0x00800000u) break; mx <<= 1; ey--; }
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
_def(
    "jx_threefry",
    """
uint jx_rotl(uint x, uint r) { return (x << r) | (x >> (32u - r)); }
uvec2 jx_threefry(uint k0, uint k1, uint c0, uint c1) {
  uint ks0 = k0, ks1 = k1, ks2 = k0 ^ k1 ^ 0x1BD11BDAu;
  uint x0 = c0 + ks0, x1 = c1 + ks1;
  const uint R0[4] = uint[4](13u, 15u, 26u, 6u);
  const uint R1[4] = uint[4](17u, 29u, 16u, 24u);
  for (int g = 1; g <= 5; g++) {
    for (int i = 0; i < 4; i++) {
      uint r = ((g - 1) % 2 == 0) ? R0[i] : R1[i];
      x0 += x1; x1 = jx_rotl(x1, r) ^ x0;
    }
    uint a = (g % 3 == 0) ? ks0 : ((g % 3 == 1) ? ks1 : ks2);
    uint b = ((g + 1) % 3 == 0) ? ks0 : (((g + 1) % 3 == 1) ? ks1 : ks2);
    x0 += a; x1 += b + uint(g);
  }
  return uvec2(x0, x1);
}
""",
)

_CALL = re.compile(r"\b(jx_[a-z0-9_]+)\s*\(")


def library_for(code: str) -> str:
    """The helper definitions `code` calls, dependencies first, each once."""
    order: list[str] = []
    seen: set[str] = set()

    def need(name: str) -> None:
        if name in seen or name not in LIB:
            return
        seen.add(name)
        for d in DEPS[name]:
            need(d)
        for inner in _CALL.findall(LIB[name]):
            if inner != name:
                need(inner)
        order.append(name)

    pending = list(dict.fromkeys(_CALL.findall(code)))
    for name in pending:
        if name == "jx_rotl":
            name = "jx_threefry"
        need(name)
    return "".join(LIB[n] for n in order)
