"""GLSL ES 3.00 helpers for what the drivers force on the dialect, below what the contract says.

The contract itself (integer x/0, x%0, INT_MIN/-1, NaN in min/max and compares, saturating casts,
shift counts, float -> bool) is spelled by `jaxcore.legalize` from the dialect's honest traits, and
the transcendentals are generated from `jaxcore.expansions`. What is left here, each for a reason
a driver gave:

- an opaque identity (`jx_o`) and a 0/1 bool (`jx_b2u`) that compilers cannot fold;
- float16 on the bits (`jx_ph`, `jx_h`): packHalf2x16/unpackHalf2x16 of Inf, NaN and
  overflow are the implementation's (ANGLE on SwiftShader corrupts the other half-word; NVIDIA
  drops a NaN's sign), so specials are spelled out and moved values never leave their bits;
- float32 that is exact with denormals: llvmpipe flushes subnormal operands and results (GLSL ES
  allows it), so + - * /, compares, min/max, floor/ceil and sqrt test the bits and take an exact
  integer path when a subnormal is involved (native otherwise);
- `jx_u2f`: ANGLE on SwiftShader rounds float(uint) apart from nearest-even;
- `jx_fmod`: exact fmodf (GLSL's mod() is floored and rounds), which no AluExp spells;
- `jx_threefry`, written out: llvmpipe caps the loop iterations of a shader.

The library is one GLSL text; each definition (from an unindented line to the next) is a helper,
and a shader includes only the ones it calls (found in the text). Lines starting `//` are notes
for this file's readers and stay out of the shaders.
"""

from __future__ import annotations

import re

_LIBRARY = """
// jx_z is a uniform that is always 0: adding it to the bits is an identity no compiler can see
// through, and twice is not once (x | z | z and x ^ z ^ z folded back to one value, then x - x to 0).
uniform uint jx_z;
// Without it GLSL compilers fold x * 0.0 to 0.0, x - x to 0.0 and c ? -1.0 : 0.0 to -float(c).
float jx_o(float x) { return uintBitsToFloat(floatBitsToUint(x) + jx_z); }
// NVIDIA's compiler (GLES 3.2, driver 580) made uint(true) 0xffffffff inside max(acc, uint(b)).
uint jx_b2u(bool b) { return uint(b) & (1u ^ jx_z); }
uint jx_ph(float x) {  // float32 -> float16 bits, nearest even; NaN, Inf and overflow by hand
  uint b = floatBitsToUint(x);
  uint s = (b >> 16) & 0x8000u;
  uint a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return s | 0x7e00u | ((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return s | 0x7c00u;
  return packHalf2x16(vec2(x, 0.0)) & 0xffffu;
}
float jx_f16(float x) { return unpackHalf2x16(jx_ph(x)).x; }
float jx_h(uint w, int k) {  // a NaN from its bits: NVIDIA's unpackHalf2x16 drops the sign
  uint h = (w >> uint(k << 4)) & 0xffffu;
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u)
    return uintBitsToFloat(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
  return unpackHalf2x16(h).x;
}
float jx_u2f(uint x) { return float(x >> 16u) * 65536.0 + float(x & 0xffffu); }

// ---- float32 exact with denormals
bool jx_isden(float x) { uint b = floatBitsToUint(x) & 0x7fffffffu; return b - 1u < 0x007fffffu; }
float jx_neg(float x) { return uintBitsToFloat(floatBitsToUint(x) ^ 0x80000000u); }
// Order on the bits, ±0 equal. NaN operands are the legalizer's (it tests them beside these).
uint jx_key(uint b) { return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u); }
bool jx_lt(float a, float b) {
  uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  return ((ua | ub) & 0x7fffffffu) != 0u && jx_key(ua) < jx_key(ub);
}
bool jx_ne(float a, float b) {
  uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  return ua != ub && ((ua | ub) & 0x7fffffffu) != 0u;
}
float jx_min(float a, float b) { return jx_lt(b, a) ? b : a; }
float jx_max(float a, float b) { return jx_lt(a, b) ? b : a; }
float jx_floor(float x) {  // of a subnormal: ±0 or ±1 from its sign
  uint sg = floatBitsToUint(x) & 0x80000000u;
  if (jx_isden(x)) return uintBitsToFloat(sg | (sg != 0u ? 0x3f800000u : 0u));
  return floor(x);
}
float jx_ceil(float x) {  // of a subnormal: ±0 or ±1 from its sign
  uint sg = floatBitsToUint(x) & 0x80000000u;
  if (jx_isden(x)) return uintBitsToFloat(sg | (sg != 0u ? 0u : 0x3f800000u));
  return ceil(x);
}
float jx_sqrt(float x) {  // of a subnormal from its integer; of a negative NaN (GLSL: undefined)
  uint b = floatBitsToUint(x);
  if (b > 0x80000000u) return uintBitsToFloat(0x7fc00000u);
  if (jx_isden(x)) return sqrt(float(b) * 2.0) * 2.6469779601696886e-23;  // sqrt(2m) * 2^-75
  return sqrt(x);
}
int jx_msb(uint u) {
  int m = int(floatBitsToUint(float(u)) >> 23) - 127;
  if (m > 31 || (u >> uint(m)) == 0u) m -= 1;
  return m;
}
// x = m * 2^(e - 23), m in [2^23, 2^24), for finite nonzero x (subnormals normalised on the bits).
uint jx_unpack(float x, out int e) {
  uint b = floatBitsToUint(x) & 0x7fffffffu;
  uint m = b & 0x007fffffu;
  if ((b >> 23) == 0u) { int msb = jx_msb(m); e = msb - 149; return m << uint(23 - msb); }
  e = int(b >> 23) - 127;
  return m | 0x00800000u;
}
// sign * (v.x:v.y, a 64-bit integer) * 2^e rounded to float32 (nearest even, subnormals and
// overflow included), built on the bits: nothing here can be flushed.
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
    bool sticky = jx_shl64(h, drop - 1) != v;
    if ((h.y & 1u) != 0u && (sticky || (q & 1u) != 0u)) q += 1u;
  }
  if (E < -126) return uintBitsToFloat(sign | q);
  if (q >= 0x01000000u) { q >>= 1; E += 1; }
  if (E > 127) return uintBitsToFloat(sign | 0x7f800000u);
  return uintBitsToFloat(sign | (uint(E + 127) << 23) | (q & 0x007fffffu));
}
// The exact slow paths, taken only when an operand or the result is subnormal (or zero, Inf, NaN).
uvec2 jx_umul64(uint a, uint b) {  // 32x32 -> 64 bits from 16-bit halves (umulExtended is ES 3.10)
  uint al = a & 0xffffu, ah = a >> 16, bl = b & 0xffffu, bh = b >> 16;
  uint ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  uint mid = (ll >> 16) + (lh & 0xffffu) + (hl & 0xffffu);
  return uvec2(hh + (lh >> 16) + (hl >> 16) + (mid >> 16), (ll & 0xffffu) | (mid << 16));
}
float jx_mul(float a, float b) {
  float r = a * jx_o(b);
  uint aa = floatBitsToUint(a) & 0x7fffffffu, ab = floatBitsToUint(b) & 0x7fffffffu;
  if (!(jx_isden(a) || jx_isden(b) || (r == 0.0 && aa != 0u && ab != 0u))) return r;
  if (aa > 0x7f800000u || ab > 0x7f800000u) return r;
  uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  if (aa == 0x7f800000u || ab == 0x7f800000u)
    return uintBitsToFloat((aa == 0u || ab == 0u) ? 0x7fc00000u : (sign | 0x7f800000u));
  if (aa == 0u || ab == 0u) return uintBitsToFloat(sign);
  int ea, eb;
  uint ma = jx_unpack(a, ea), mb = jx_unpack(b, eb);
  return jx_pack(sign, jx_umul64(ma, mb), ea + eb - 46);
}
float jx_div(float a, float b) {
  float r = a / jx_o(b);
  uint aa = floatBitsToUint(a) & 0x7fffffffu, ab = floatBitsToUint(b) & 0x7fffffffu;
  bool under = (floatBitsToUint(r) & 0x7f800000u) == 0u && aa != 0u;
  if (!(jx_isden(a) || jx_isden(b) || under)) return r;
  if (aa > 0x7f800000u || ab > 0x7f800000u) return r;
  uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  if (aa == 0x7f800000u) return uintBitsToFloat(ab == 0x7f800000u ? 0x7fc00000u : (sign | 0x7f800000u));
  if (ab == 0x7f800000u) return uintBitsToFloat(sign);
  if (ab == 0u) return uintBitsToFloat(aa == 0u ? 0x7fc00000u : (sign | 0x7f800000u));
  if (aa == 0u) return uintBitsToFloat(sign);
  int ea, eb;
  uint ma = jx_unpack(a, ea), mb = jx_unpack(b, eb);
  uint q = 0u, rem = ma;  // long division: 26 quotient bits (ma/mb in (1/2, 2)), then a sticky bit
  for (int i = 0; i < 26; i++) {
    q <<= 1;
    if (rem >= mb) { rem -= mb; q |= 1u; }
    rem <<= 1;
  }
  return jx_pack(sign, uvec2(0u, (q << 1) | (rem != 0u ? 1u : 0u)), ea - eb - 26);
}
float jx_rcp(float x) { return jx_div(1.0, x); }
// a + b with a subnormal operand or sum: scaled by 2^24 (exact), added, scaled back; sums in the
// subnormal range are multiples of 2^-149, so exact, and built from bits.
float jx_up24(float x) {
  uint b = floatBitsToUint(x);
  if (!jx_isden(x)) return x * 16777216.0;
  float m = float(b & 0x007fffffu) * 2.350988701644575e-38;  // m * 2^-125
  return (b >> 31) != 0u ? -m : m;
}
float jx_add(float a, float b) {
  float r = a + jx_o(b);
  bool tiny = (floatBitsToUint(r) & 0x7f800000u) == 0u
    && floatBitsToUint(a) != (floatBitsToUint(b) ^ 0x80000000u);
  if (!(jx_isden(a) || jx_isden(b) || tiny)) return r;
  uint aa = floatBitsToUint(a) & 0x7fffffffu, ab = floatBitsToUint(b) & 0x7fffffffu;
  if (aa >= 0x7f800000u || ab >= 0x7f800000u) return r;
  // an operand >= 2^-100 next to a subnormal (< 2^-126, under a quarter ulp) is the sum
  if (aa >= 0x0d800000u) return a;
  if (ab >= 0x0d800000u) return b;
  float s = jx_up24(a) + jx_up24(b);
  uint sb = floatBitsToUint(s);
  if (s == 0.0) return uintBitsToFloat(sb);
  if ((sb & 0x7fffffffu) >= 0x0c800000u) return s * 5.9604644775390625e-08;  // |s| >= 2^-102
  uint m = uint(abs(s) * 4.253529586511731e+37);  // |s| * 2^125, an exact integer
  return uintBitsToFloat((sb & 0x80000000u) | m);
}
float jx_sub(float a, float b) { return jx_add(a, jx_neg(b)); }
// C's fmodf, exact, with the sign of x: shift-subtract over the exponent difference, eight steps an
// iteration (llvmpipe caps the loop iterations of a whole shader).
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
  for (int i = 0; i < 40 && ex > ey; i++) {
@STEPS@  }
  if (mx >= my) mx -= my;
  if (mx == 0u) return uintBitsToFloat(sx);
  int lz = 23 - jx_msb(mx);  // normalise: mx < 2^24, value = mx * 2^(ey - 150)
  mx <<= uint(lz); ey -= lz;
  uint bits = ey > 0 ? (uint(ey) << 23) | (mx & 0x007fffffu) : mx >> uint(1 - ey);
  return uintBitsToFloat(sx | bits);
}
uint jx_xor2(uvec2 v) { return v.x ^ v.y; }
"""
_STEP = "    if (ex > ey) { if (mx >= my) { mx -= my; if (mx == 0u) break; } mx <<= 1; ex--; }\n"
_NAME = re.compile(r"\bjx_[a-z0-9_]+\b")


def _threefry() -> str:
    """Threefry-2x32, 20 rounds, written out (llvmpipe caps the loop iterations of a shader)."""
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
    return "\n".join([*lines, "  return uvec2(x0, x1);", "}"])


def _definitions(text: str) -> dict[str, str]:
    """Each definition of the library by its name: an unindented line and those after it up to
    the next (blank and `//` lines left out)."""
    defs: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines():
        if line and not line.startswith("//"):
            if not (line[0].isspace() or line == "}"):
                name = _NAME.findall(line)[0]
            defs.setdefault(name, []).append(line)
    return {n: "\n".join(lines) + "\n" for n, lines in defs.items()}


LIB = _definitions(_LIBRARY.replace("@STEPS@", _STEP * 8) + _threefry())
# name -> (source, helpers it uses): the form `jaxcore.cstyle.CStyleLanguage.helpers` takes.
HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {
    n: (src, tuple(sorted({d for d in _NAME.findall(src) if d in LIB and d != n}))) for n, src in LIB.items()
}
