"""WGSL helper functions: constants WGSL cannot write, the opaque identity, exact fmod, the
float32 ops exact on a device that flushes subnormals, threefry, and the float64 transcendentals.

The float32 (and float16) transcendentals are not here: the core renders them from
`jaxcore.expansions` through this dialect (`CStyleLanguage.helper_source`). float64 has no
expansion there, and naga has no f64 bit access while SPIR-V's extended instructions are 32-bit,
so the float64 ones are series in f64 at the end of this file (the dialect's declared f64 path).

- fmod: exact, by binary long division of the mantissas in u32 (as C's fmodf).
- NaN and infinity never come from a const-expression (that is a WGSL shader-creation error):
  helpers bitcast a `let`.
"""

from __future__ import annotations

from jaxcore.dtype import _THREEFRY_ROT
from jaxcore.pi_bits import two_over_pi_chunks

H: dict[str, tuple[str, tuple[str, ...]]] = {}

H["jc_nan_f32"] = ("fn jc_nan_f32() -> f32 { let b = 0x7fc00000u; return bitcast<f32>(b); }", ())
H["jc_inf_f32"] = ("fn jc_inf_f32() -> f32 { let b = 0x7f800000u; return bitcast<f32>(b); }", ())
# Bits as a float32 at run time (a parameter is no const-expression, so a NaN is allowed).
H["jc_bits_f32"] = ("fn jc_bits_f32(b: u32) -> f32 { return bitcast<f32>(b); }", ())
H["jc_isnan_f32"] = (
    "fn jc_isnan_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }",
    (),
)

# An identity the driver cannot see through (legalize.opaque): `jc_zero` is a uniform the runtime
# binds as zeros, so `x * jc_o_f32(0.0f, 1u)` is not folded to 0 (wrong for NaN, Inf and -0). The
# renderer numbers every call site `k` (from 1), so no two sites are the same value to the
# driver: two operands it knows are equal (NaN - NaN after its own constant folding) stay apart,
# and an opaque of an opaque is not merged into one. The other arm is unknown: a constant one made
# {x, 1.0} a set the driver reasoned about (lavapipe turned select(-0.0, 1.0, c) into +0.0).
H["jc_zero"] = ("@group(1) @binding(0) var<uniform> jc_zero: vec4<u32>;", ())
for _t, _other in (
    ("f32", "bitcast<f32>(jc_zero.y)"),
    ("f64", "f64(bitcast<f32>(jc_zero.y))"),
):
    H[f"jc_o_{_t}"] = (
        f"fn jc_o_{_t}(x: {_t}, k: u32) -> {_t} {{ return select(x, {_other}, jc_zero.x == k); }}",
        ("jc_zero",),
    )

H["jc_fmod_f32"] = (
    """
fn jc_fmod_f32(a: f32, b: f32) -> f32 {
  let ua = bitcast<u32>(a);
  let sx = ua & 0x80000000u;
  let ax = ua & 0x7fffffffu;
  let ay = bitcast<u32>(b) & 0x7fffffffu;
  if (ax >= 0x7f800000u || ay > 0x7f800000u || ay == 0u) { return jc_nan_f32(); }
  if (ax < ay) { return a; }
  var ex = i32(ax >> 23u);
  var ey = i32(ay >> 23u);
  var mx = (ax & 0x7fffffu) | 0x800000u;
  var my = (ay & 0x7fffffu) | 0x800000u;
  if (ex == 0) { let s = countLeadingZeros(ax) - 8u; mx = ax << s; ex = 1 - i32(s); }
  if (ey == 0) { let s = countLeadingZeros(ay) - 8u; my = ay << s; ey = 1 - i32(s); }
  loop {
    if (ex <= ey) { break; }
    if (mx >= my) { mx = mx - my; }
    if (mx == 0u) { return bitcast<f32>(sx); }
    mx = mx << 1u;
    ex = ex - 1;
  }
  if (mx >= my) { mx = mx - my; }
  if (mx == 0u) { return bitcast<f32>(sx); }
  let s = countLeadingZeros(mx) - 8u;
  mx = mx << s;
  ex = ex - i32(s);
  var bits: u32;
  if (ex > 0) { bits = (mx - 0x800000u) | (u32(ex) << 23u); } else { bits = mx >> u32(1 - ex); }
  return bitcast<f32>(bits | sx);
}
""",
    ("jc_nan_f32",),
)

H["jc_fmod_f64"] = (
    """
fn jc_fmod_f64(a: f64, b: f64) -> f64 {
  let x0 = abs(a);
  let y = abs(b);
  // NaN by its bits and infinity by an ordered compare with a finite bound: `y == y` and
  // `x - x != 0` are folded away by drivers that assume no NaN (lavapipe), and a NaN lane then
  // never leaves the loops below (taking its neighbours' results with it).
  let dmax = 1.7976931348623157e308lf;
  if (jc_isnan_f32(f32(x0)) || jc_isnan_f32(f32(y)) || y == 0.0lf || x0 > dmax) { return f64(jc_nan_f32()); }
  if (y > dmax || x0 < y) { return a; }
  // t = y 2^k with t <= x < 2t, then subtract the binary digits of the quotient, high to low:
  // every step is exact (t and x share t's exponent range), as in long division.
  var x = x0;
  var t = y;
  loop { if (t + t > x) { break; } t = t + t; }
  loop {
    if (x >= t) { x = x - t; }
    if (t <= y) { break; }
    t = t * 0.5lf;
  }
  return select(x, -x, a < 0.0lf);
}
""",
    ("jc_nan_f32", "jc_isnan_f32"),
)

H["jc_mul32"] = (
    """
fn jc_mul32(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
""",
    (),
)

# ---- float32 on an implementation that flushes subnormals -----------------------------------
# WGSL lets an implementation flush subnormal inputs and results to zero (Chromium's WebGPU on
# SwiftShader does, Direct3D and some Metal paths too); the contract keeps them. So float32
# comparisons, min/max, floor/ceil and the float -> bool test work on the bits, and + - * / take
# the native result only for finite operands, neither subnormal, and a result that does not
# underflow (a test on the exponent bits); an exact slow path computes the rest on the integer
# mantissas and builds the result's bits: nothing there is a float op a device could flush.
# Zeros, infinities and NaN operands of * and / (and infinities and NaN of +) are decided on the
# bits as well: a compiler that assumes finite math folded the native 0 * inf of the fast path to 0
# (lavapipe, with the operands opaque). `(m - 1u) < 0x7fffffu` is "m is a nonzero subnormal
# magnitude" in one compare.
H["jc_isden_f32"] = (
    "fn jc_isden_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) - 1u < 0x007fffffu; }",
    (),
)
H["jc_key_f32"] = (
    """
// An unsigned key in float order (negatives reversed below positives).
fn jc_key_f32(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
""",
    (),
)
H["jc_lt_f32"] = (
    """
fn jc_lt_f32(a: f32, b: f32) -> bool {
  let ua = bitcast<u32>(a) & 0x7fffffffu;
  let ub = bitcast<u32>(b) & 0x7fffffffu;
  if (ua > 0x7f800000u || ub > 0x7f800000u || (ua | ub) == 0u) { return false; }
  return jc_key_f32(a) < jc_key_f32(b);
}
""",
    ("jc_key_f32",),
)
H["jc_ne_f32"] = (
    """
fn jc_ne_f32(a: f32, b: f32) -> bool {
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  if ((ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u) { return true; }
  return ua != ub && ((ua | ub) & 0x7fffffffu) != 0u;
}
""",
    (),
)
H["jc_min_f32"] = (
    """
fn jc_min_f32(a: f32, b: f32) -> f32 {
  if (jc_isnan_f32(a)) { return a; }
  if (jc_isnan_f32(b)) { return b; }
  return select(a, b, jc_lt_f32(b, a));
}
""",
    ("jc_isnan_f32", "jc_lt_f32"),
)
H["jc_max_f32"] = (
    """
fn jc_max_f32(a: f32, b: f32) -> f32 {
  if (jc_isnan_f32(a)) { return a; }
  if (jc_isnan_f32(b)) { return b; }
  return select(a, b, jc_lt_f32(a, b));
}
""",
    ("jc_isnan_f32", "jc_lt_f32"),
)
H["jc_floor_f32"] = (
    """
fn jc_floor_f32(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) - 1u < 0x007fffffu) {  // subnormal: +0 or -1
    // (on the bits, not a select of two constants: lavapipe folds that to -b2f(c), -0 for +0)
    return bitcast<f32>((b >> 31u) * 0xbf800000u);
  }
  return floor(x);
}
""",
    (),
)
H["jc_ceil_f32"] = (
    """
fn jc_ceil_f32(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) - 1u < 0x007fffffu) {  // subnormal: 1 or -0
    return bitcast<f32>((b & 0x80000000u) | (((b >> 31u) ^ 1u) * 0x3f800000u));
  }
  return ceil(x);
}
""",
    (),
)
H["jc_f64_f32"] = (
    """
// float32 -> float64 with a subnormal taken from its bits (a flushing device reads it as 0)
fn jc_f64_f32(x: f32) -> f64 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) - 1u < 0x007fffffu) {
    let m = f64(b & 0x007fffffu) * 1.401298464324817e-45lf;  // m 2^-149, normal in float64
    return select(m, -m, b >= 0x80000000u);
  }
  return f64(x);
}
""",
    (),
)
H["jc_sqrt_f32"] = (
    """
fn jc_sqrt_f32(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) - 1u < 0x007fffffu) {
    // x = m 2^-149 = (2m) 2^-150: sqrt(x) = sqrt(2m) 2^-75 (2m is an exact integer below 2^24)
    if (b >= 0x80000000u) { return jc_nan_f32(); }
    return sqrt(f32(b) * 2.0f) * 2.6469779601696886e-23f;
  }
  return sqrt(x);
}
""",
    ("jc_nan_f32",),
)
H["jc_unpack_f32"] = (
    """
struct JcUnpack32 { m: u32, e: i32 }

// A finite nonzero x as m 2^(e - 23) with m in [2^23, 2^24) (subnormals normalised on the bits).
fn jc_unpack_f32(x: f32) -> JcUnpack32 {
  let b = bitcast<u32>(x) & 0x7fffffffu;
  let be = i32(b >> 23u);
  if (be == 0) {
    let s = countLeadingZeros(b) - 8u;
    return JcUnpack32(b << s, -126 - i32(s));
  }
  return JcUnpack32((b & 0x007fffffu) | 0x00800000u, be - 127);
}
""",
    (),
)
H["jc_pack_f32"] = (
    """
fn jc_shr64(v: vec2<u32>, n: i32) -> vec2<u32> {  // v = (high word, low word)
  if (n <= 0) { return v; }
  if (n >= 64) { return vec2<u32>(0u, 0u); }
  if (n >= 32) { return vec2<u32>(0u, v.x >> u32(n - 32)); }
  return vec2<u32>(v.x >> u32(n), (v.y >> u32(n)) | (v.x << u32(32 - n)));
}

fn jc_shl64(v: vec2<u32>, n: i32) -> vec2<u32> {
  if (n <= 0) { return v; }
  if (n >= 64) { return vec2<u32>(0u, 0u); }
  if (n >= 32) { return vec2<u32>(v.y << u32(n - 32), 0u); }
  return vec2<u32>((v.x << u32(n)) | (v.y >> u32(32 - n)), v.y << u32(n));
}

// sign | (v as a 64-bit integer) * 2^e, rounded to nearest even (subnormals and overflow
// included), built as bits.
fn jc_pack_f32(sign: u32, v: vec2<u32>, e: i32) -> f32 {
  if (v.x == 0u && v.y == 0u) { return bitcast<f32>(sign); }
  var p = 31 - i32(countLeadingZeros(v.y));
  if (v.x != 0u) { p = 63 - i32(countLeadingZeros(v.x)); }
  var ex = p + e;
  var drop = p - 23;
  if (ex < -126) { drop = -149 - e; }
  var q: u32;
  if (drop <= 0) {
    q = v.y << u32(-drop);
  } else {
    q = jc_shr64(v, drop).y;
    let h = jc_shr64(v, drop - 1);
    let sticky = any(jc_shl64(h, drop - 1) != v);
    if ((h.y & 1u) != 0u && (sticky || (q & 1u) != 0u)) { q = q + 1u; }
  }
  if (ex < -126) { return bitcast<f32>(sign | q); }
  if (q >= 0x01000000u) { q = q >> 1u; ex = ex + 1; }
  if (ex > 127) { return bitcast<f32>(sign | 0x7f800000u); }
  return bitcast<f32>(sign | (u32(ex + 127) << 23u) | (q & 0x007fffffu));
}
""",
    (),
)
H["jc_mul_f32"] = (
    """
fn jc_mul_slow_f32(a: f32, b: f32) -> f32 {
  let sign = (bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u;
  let ua = jc_unpack_f32(a);
  let ub = jc_unpack_f32(b);
  let p = jc_mul32(ua.m, ub.m);  // (low, high): the product is p 2^(ea + eb - 46)
  return jc_pack_f32(sign, vec2<u32>(p.y, p.x), ua.e + ub.e - 46);
}

fn jc_mul_f32(a: f32, b: f32) -> f32 {
  let r = a * b;
  let aa = bitcast<u32>(a) & 0x7fffffffu;
  let ab = bitcast<u32>(b) & 0x7fffffffu;
  let normal = aa - 0x00800000u < 0x7f000000u && ab - 0x00800000u < 0x7f000000u;
  if (normal && (bitcast<u32>(r) & 0x7f800000u) != 0u) { return r; }  // a normal (or overflowing) product
  if (aa > 0x7f800000u || ab > 0x7f800000u) { return jc_nan_f32(); }
  let sign = (bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u;
  if (aa == 0x7f800000u || ab == 0x7f800000u) {
    return bitcast<f32>(select(sign | 0x7f800000u, 0x7fc00000u, aa == 0u || ab == 0u));
  }
  if (aa == 0u || ab == 0u) { return bitcast<f32>(sign); }
  return jc_mul_slow_f32(a, b);
}
""",
    ("jc_unpack_f32", "jc_pack_f32", "jc_mul32", "jc_nan_f32"),
)
H["jc_div_f32"] = (
    """
fn jc_div_slow_f32(a: f32, b: f32) -> f32 {
  let sign = (bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u;
  let ua = jc_unpack_f32(a);
  let ub = jc_unpack_f32(b);
  // long division: 26 quotient bits (ma / mb in (1/2, 2)), the remainder as a sticky bit
  var q = 0u;
  var r = ua.m;
  for (var i = 0; i < 26; i = i + 1) {
    q = q << 1u;
    if (r >= ub.m) { r = r - ub.m; q = q | 1u; }
    r = r << 1u;
  }
  q = (q << 1u) | select(0u, 1u, r != 0u);
  return jc_pack_f32(sign, vec2<u32>(0u, q), ua.e - ub.e - 26);
}

fn jc_div_f32(a: f32, b: f32) -> f32 {
  let r = a / b;
  let aa = bitcast<u32>(a) & 0x7fffffffu;
  let ab = bitcast<u32>(b) & 0x7fffffffu;
  let normal = aa - 0x00800000u < 0x7f000000u && ab - 0x00800000u < 0x7f000000u;
  if (normal && (bitcast<u32>(r) & 0x7f800000u) != 0u) { return r; }  // a normal (or overflowing) quotient
  if (aa > 0x7f800000u || ab > 0x7f800000u) { return jc_nan_f32(); }
  let sign = (bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u;
  if (aa == 0x7f800000u) { return bitcast<f32>(select(sign | 0x7f800000u, 0x7fc00000u, ab == 0x7f800000u)); }
  if (ab == 0x7f800000u) { return bitcast<f32>(sign); }
  if (ab == 0u) { return bitcast<f32>(select(sign | 0x7f800000u, 0x7fc00000u, aa == 0u)); }
  if (aa == 0u) { return bitcast<f32>(sign); }
  return jc_div_slow_f32(a, b);
}
""",
    ("jc_unpack_f32", "jc_pack_f32", "jc_nan_f32"),
)
H["jc_add_f32"] = (
    """
// x 2^24, exactly, for |x| < 2^-100 (a subnormal from its bits).
fn jc_up24_f32(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) - 1u >= 0x007fffffu) { return x * 16777216.0f; }
  let m = f32(b & 0x007fffffu) * 2.350988701644575e-38f;  // m 2^-125
  return select(m, -m, b >= 0x80000000u);
}

fn jc_add_f32(a: f32, b: f32) -> f32 {
  let r = a + b;
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  let aa = ua & 0x7fffffffu;
  let ab = ub & 0x7fffffffu;
  let den = aa - 1u < 0x007fffffu || ab - 1u < 0x007fffffu;
  let finite = aa < 0x7f800000u && ab < 0x7f800000u;
  if (!den && finite && (bitcast<u32>(r) & 0x7f800000u) != 0u) { return r; }
  if (!finite) {
    let nan = aa > 0x7f800000u || ab > 0x7f800000u || ua == (ub ^ 0x80000000u);  // inf - inf too
    if (nan) { return jc_nan_f32(); }
    return select(b, a, aa == 0x7f800000u);
  }
  if (ua == (ub ^ 0x80000000u)) { return 0.0f; }  // x + -x, +0 + -0
  if ((aa | ab) == 0u) { return a; }
  // an operand >= 2^-100 next to one below 2^-126 (under a quarter of its ulp) is the sum
  if (aa >= 0x0d800000u) { return a; }
  if (ab >= 0x0d800000u) { return b; }
  // scaled by 2^24 both are normal and their sum is exact or rounds as the true sum does
  let s = jc_up24_f32(a) + jc_up24_f32(b);
  let sb = bitcast<u32>(s);
  if ((sb & 0x7fffffffu) == 0u) { return bitcast<f32>(sb); }
  if ((sb & 0x7fffffffu) >= 0x0c800000u) { return s * 5.9604644775390625e-08f; }  // |s| >= 2^-102
  let m = u32(abs(s) * 4.253529586511731e+37f);  // |s| 2^125, an exact integer below 2^23
  return bitcast<f32>((sb & 0x80000000u) | m);
}
""",
    ("jc_nan_f32",),
)
H["jc_sub_f32"] = (
    "fn jc_sub_f32(a: f32, b: f32) -> f32 {"
    " return jc_add_f32(a, bitcast<f32>(bitcast<u32>(b) ^ 0x80000000u)); }",
    ("jc_add_f32",),
)


def _threefry_src() -> str:
    lines = [
        "fn jc_threefry2x32(k0: u32, k1: u32, c0: u32, c1: u32) -> vec2<u32> {",
        "  let ks = array<u32, 3>(k0, k1, k0 ^ k1 ^ 0x1BD11BDAu);",
        "  var x0 = c0 + k0;",
        "  var x1 = c1 + k1;",
    ]
    for g in range(1, 6):
        for r in _THREEFRY_ROT[(g - 1) % 2]:
            lines.append(f"  x0 = x0 + x1; x1 = ((x1 << {r}u) | (x1 >> {32 - r}u)) ^ x0;")
        lines.append(f"  x0 = x0 + ks[{g % 3}]; x1 = x1 + ks[{(g + 1) % 3}] + {g}u;")
    lines += ["  return vec2<u32>(x0, x1);", "}"]
    return "\n".join(lines)


H["jc_threefry2x32"] = (_threefry_src(), ())
H["jc_threefry2x32_xor"] = (
    "fn jc_threefry2x32_xor(k0: u32, k1: u32, c0: u32, c1: u32) -> u32 {"
    " let v = jc_threefry2x32(k0, k1, c0, c1); return v.x ^ v.y; }",
    ("jc_threefry2x32",),
)

HELPERS = H


# ---- float64 (wgpu-native's shader-f64; browsers have no f64) ---------------------------------
# WGSL has no f64 bit access in naga (no bitcast to vec2<u32>) and SPIR-V's GLSL.std.450
# transcendentals are 32-bit only, so these use ldexp, f32 conversions for exponents, and series
# in f64 sized for the table's 1e-12 (each well below 1e-15 on its interval).


def _lf(v: float) -> str:
    return f"{v!r}lf"


def _horner(var: str, coeffs: list[float]) -> str:
    """coeffs[0] + var*(coeffs[1] + var*(...)), as WGSL f64."""
    s = _lf(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        s = f"({_lf(c)} + {var} * {s})"
    return s


_F = [1.0]
for _i in range(1, 40):
    _F.append(_F[-1] * _i)
_SIN64 = [(-1) ** k / _F[2 * k + 1] for k in range(10)]  # r * P(r^2)
_COS64 = [(-1) ** k / _F[2 * k] for k in range(10)]
_EXP64 = [1.0 / _F[k] for k in range(17)]
_LOG64 = [1.0 / (2 * k + 1) for k in range(12)]  # atanh series in z = s^2
_ATAN64 = [(-1) ** k / (2 * k + 1) for k in range(17)]

PIO2_1 = float.fromhex("0x1.921fb54400000p+0")  # 33 bits each: k*PIO2_n exact for |k| < 2^20
PIO2_2 = float.fromhex("0x1.0b4611a600000p-34")
PIO2_3 = float.fromhex("0x1.3198a2e037073p-69")
LN2_HI = float.fromhex("0x1.62e42fefa3800p-1")
LN2_LO = float.fromhex("0x1.ef35793c76730p-45")

# Opaque-call site numbers of the float64 reductions, far above a program's own (numbered from 1).
_CW_SITE = 4000000000

# Two zero words in front: the window for |x| >= 2^20 starts up to 33 bits before the point.
_TT64 = [0, 0, *two_over_pi_chunks(36)]
_TT64_SRC = ", ".join(f"0x{w:08x}u" for w in _TT64)

H["jc_frexp_f64"] = (
    """
struct JcFrexp64 { m: f64, e: i32 }

// x > 0 finite: x = m 2^e with m in [0.5, 1). The exponent comes from the f32 conversion.
fn jc_frexp_f64(x: f64) -> JcFrexp64 {
  var y = x;
  var e0 = 0i;
  // Steps of 2^120 land in f32's normal range without overshooting it.
  loop { if (y <= 1e38lf) { break; } y = ldexp(y, -120i); e0 = e0 + 120i; }
  loop { if (y >= 1e-37lf) { break; } y = ldexp(y, 120i); e0 = e0 - 120i; }
  let b = bitcast<u32>(f32(y));
  var e = i32((b >> 23u) & 0xffu) - 126i;
  var m = ldexp(y, -e);
  if (m >= 1.0lf) { m = m * 0.5lf; e = e + 1i; }
  if (m < 0.5lf) { m = m * 2.0lf; e = e - 1i; }
  return JcFrexp64(m, e + e0);
}
""",
    (),
)

H["jc_isnan_f64"] = ("fn jc_isnan_f64(x: f64) -> bool { return jc_isnan_f32(f32(x)); }", ("jc_isnan_f32",))


def _ph64_src() -> str:
    # P = mi * W mod 2^128 in four u32 limbs l0 (low) .. l3; mi = mh 2^32 + ml, W = w0 w1 w2 w3.
    lines = []
    prods = [("ml", "w3", 0), ("ml", "w2", 1), ("ml", "w1", 2), ("mh", "w3", 1), ("mh", "w2", 2)]
    for a, b, k in prods:
        v = f"p_{a}_{b}"
        lines.append(f"  let {v} = jc_mul32({a}, {b});")
        lines.append(f"  c = 0u; t = l{k} + {v}.x; c = select(0u, 1u, t < {v}.x); l{k} = t;")
        lines.append(f"  t = l{k + 1} + {v}.y; c2 = select(0u, 1u, t < {v}.y); t = t + c;")
        lines.append(f"  c2 = c2 + select(0u, 1u, t < c); l{k + 1} = t; c = c2;")
        for j in range(k + 2, 4):
            lines.append(f"  t = l{j} + c; c = select(0u, 1u, t < c); l{j} = t;")
    lines.append("  l3 = l3 + ml * w0 + mh * w1;")
    return "\n".join(lines)


H["jc_trig_reduce_f64"] = (
    f"""
fn jc_tt64_window(p: u32) -> u32 {{
  var tt = array<u32, {len(_TT64)}>({_TT64_SRC});
  let w = p >> 5u;
  let sh = p & 31u;
  let hi = tt[w];
  let lo = tt[min(w + 1u, {len(_TT64) - 1}u)];
  return select((hi << sh) | (lo >> (32u - sh)), hi, sh == 0u);
}}

struct JcTrig64 {{ r: f64, q: u32 }}

// x = q pi/2 + r, |r| <= pi/4: Cody-Waite below 2^20, Payne-Hanek (exact) above.
fn jc_trig_reduce_f64(x: f64) -> JcTrig64 {{
  let ax = abs(x);
  if (ax < 1048576.0lf) {{
    let k = round(x * {_lf(2 / 3.141592653589793)});
    // each step opaque: NVIDIA reassociated the steps, x - k (P1 + P2 + P3), 4e-13 off at 1e4
    let r1 = jc_o_f64(x - k * {_lf(PIO2_1)}, {_CW_SITE}u);
    let r2 = jc_o_f64(r1 - k * {_lf(PIO2_2)}, {_CW_SITE + 1}u);
    let r = r2 - k * {_lf(PIO2_3)};
    return JcTrig64(r, u32(i32(k) & 3i));
  }}
  let fx = jc_frexp_f64(ax);
  let mi = ldexp(fx.m, 53i);
  let mhf = floor(mi * {_lf(2.0**-32)});
  let mh = u32(mhf);
  let ml = u32(mi - mhf * 4294967296.0lf);
  let e2 = fx.e - 53i;
  let p0 = u32(e2 - 1i + 63i);
  let w0 = jc_tt64_window(p0);
  let w1 = jc_tt64_window(p0 + 32u);
  let w2 = jc_tt64_window(p0 + 64u);
  let w3 = jc_tt64_window(p0 + 96u);
  var l0 = 0u; var l1 = 0u; var l2 = 0u; var l3 = 0u;
  var c = 0u; var t = 0u; var c2 = 0u;
{_ph64_src()}
  let fh = (l3 << 2u) | (l2 >> 30u);
  let fl = (l2 << 2u) | (l1 >> 30u);
  var q = (l3 >> 30u) + (fh >> 31u);
  let fr = (f64(bitcast<i32>(fh)) + f64(fl) * {_lf(2.0**-32)}) * {_lf(2.0**-32)};
  var r = fr * {_lf(3.141592653589793 / 2)};
  if (x < 0.0lf) {{ r = -r; q = 4u - (q & 3u); }}
  return JcTrig64(r, q & 3u);
}}
""",
    ("jc_mul32", "jc_frexp_f64", "jc_o_f64"),
)


def _trig64(name: str, is_cos: bool) -> str:
    q = "((red.q + 1u) & 3u)" if is_cos else "red.q"
    tiny = "1.0lf" if is_cos else "x"
    return f"""
fn {name}(x: f64) -> f64 {{
  if (jc_isnan_f64(x) || abs(x) > 1.7976931348623157e308lf) {{ return f64(jc_nan_f32()); }}
  if (abs(x) < 1e-9lf) {{ return {tiny}; }}  // x or 1 to the last bit, and sin(-0) = -0
  let red = jc_trig_reduce_f64(x);
  let r = red.r;
  let z = r * r;
  let q = {q};
  let s = r * {_horner("z", _SIN64)};
  let c = {_horner("z", _COS64)};
  let v = select(s, c, (q & 1u) == 1u);
  return select(v, -v, q >= 2u);
}}
"""


H["jc_sin_f64"] = (_trig64("jc_sin_f64", False), ("jc_trig_reduce_f64", "jc_isnan_f64", "jc_nan_f32"))
H["jc_cos_f64"] = (_trig64("jc_cos_f64", True), ("jc_trig_reduce_f64", "jc_isnan_f64", "jc_nan_f32"))

H["jc_exp_f64"] = (
    f"""
fn jc_exp_f64(x: f64) -> f64 {{
  if (jc_isnan_f64(x)) {{ return x; }}
  if (x > 709.782712893384lf) {{ return f64(jc_inf_f32()); }}
  if (x < -745.2lf) {{ return 0.0lf; }}
  let k = round(x * {_lf(1 / 0.6931471805599453)});
  let r = jc_o_f64(x - k * {_lf(LN2_HI)}, {_CW_SITE + 2}u) - k * {_lf(LN2_LO)};
  let p = {_horner("r", _EXP64)};
  let ki = i32(k);
  let k1 = ki / 2i;
  return ldexp(ldexp(p, k1), ki - k1);
}}
""",
    ("jc_isnan_f64", "jc_inf_f32", "jc_o_f64"),
)

H["jc_log_f64"] = (
    f"""
fn jc_log_f64(x: f64) -> f64 {{
  if (jc_isnan_f64(x) || x < 0.0lf) {{ return f64(jc_nan_f32()); }}
  if (x == 0.0lf) {{ return -f64(jc_inf_f32()); }}
  if (x > 1.7976931348623157e308lf) {{ return x; }}
  let fx = jc_frexp_f64(x);
  var m = fx.m;
  var e = fx.e;
  if (m < 0.7071067811865476lf) {{ m = m * 2.0lf; e = e - 1i; }}
  let f = m - 1.0lf;
  let s = f / (2.0lf + f);
  let z = s * s;
  let r = 2.0lf * s * {_horner("z", _LOG64)};
  let fe = f64(e);
  return fe * {_lf(LN2_HI)} + (r + fe * {_lf(LN2_LO)});
}}
""",
    ("jc_isnan_f64", "jc_nan_f32", "jc_inf_f32", "jc_frexp_f64"),
)

H["jc_atan_f64"] = (
    f"""
fn jc_atan_f64(x0: f64) -> f64 {{
  if (jc_isnan_f64(x0) || abs(x0) < 1e-9lf) {{ return x0; }}  // atan(x) = x to the last bit; -0 kept
  var a = abs(x0);
  let inv = a > 1.0lf;
  if (inv) {{ a = 1.0lf / a; }}
  var y = 0.0lf;
  if (a > {_lf(0.2679491924311227)}) {{
    a = (a * {_lf(1.7320508075688772)} - 1.0lf) / (a + {_lf(1.7320508075688772)});
    y = {_lf(0.5235987755982988)};
  }}
  let z = a * a;
  y = y + a * {_horner("z", _ATAN64)};
  if (inv) {{ y = {_lf(1.5707963267948966)} - y; }}
  return select(y, -y, x0 < 0.0lf);
}}
""",
    ("jc_isnan_f64",),
)

H["jc_asin_f64"] = (
    """
// asin(x) = atan(x / sqrt(1 - x^2)) for |x| <= 1/2; above, pi/2 - 2 asin(z) with z = sqrt((1 - |x|) / 2)
// <= 1/2 (1 - |x| is exact there): no quotient by zero, so nothing a finite-math driver can drop
// (NVIDIA's gave asin(1) = 0 for atan(1 / 0)).
fn jc_asin_f64(x: f64) -> f64 {
  let a = abs(x);
  if (jc_isnan_f64(x) || a > 1.0lf) { return f64(jc_nan_f32()); }
  if (a <= 0.5lf) { return jc_atan_f64(x / sqrt((1.0lf - x) * (1.0lf + x))); }
  let z = sqrt((1.0lf - a) * 0.5lf);
  let v = 1.5707963267948966lf - 2.0lf * jc_atan_f64(z / sqrt((1.0lf - z) * (1.0lf + z)));
  return select(v, -v, x < 0.0lf);
}
""",
    ("jc_isnan_f64", "jc_nan_f32", "jc_atan_f64"),
)

H["jc_erf_series_f64"] = (
    f"""
// erf(x) for |x| <= 2.5 by its Taylor series; erfc(x) for x > 2.5 by its continued fraction.
fn jc_erf_series_f64(x: f64) -> f64 {{
  let z = x * x;
  var t = x;
  var s = 0.0lf;
  for (var n = 0i; n < 46i; n = n + 1i) {{
    s = s + t / f64(2i * n + 1i);
    t = -t * z / f64(n + 1i);
  }}
  return s * {_lf(2 / 1.7724538509055159)};
}}

fn jc_erfc_cf_f64(x: f64) -> f64 {{
  var k = x;
  for (var n = 40i; n > 0i; n = n - 1i) {{ k = x + (0.5lf * f64(n)) / k; }}
  return jc_exp_f64(-(x * x)) / (k * {_lf(1.7724538509055159)});
}}
""",
    ("jc_exp_f64",),
)
H["jc_erf_f64"] = (
    """
fn jc_erf_f64(x: f64) -> f64 {
  if (jc_isnan_f64(x)) { return x; }
  let a = abs(x);
  if (a < 1e-9lf) { return x * 1.1283791670955126lf; }  // 2x/sqrt(pi) to the last bit; -0 kept
  if (a <= 2.5lf) { return jc_erf_series_f64(x); }
  let v = 1.0lf - jc_erfc_cf_f64(a);
  return select(v, -v, x < 0.0lf);
}
""",
    ("jc_isnan_f64", "jc_erf_series_f64"),
)
H["jc_erfc_f64"] = (
    """
fn jc_erfc_f64(x: f64) -> f64 {
  if (jc_isnan_f64(x)) { return x; }
  let a = abs(x);
  if (a <= 2.5lf) { return 1.0lf - jc_erf_series_f64(x); }
  let v = jc_erfc_cf_f64(a);
  return select(v, 2.0lf - v, x < 0.0lf);
}
""",
    ("jc_isnan_f64", "jc_erf_series_f64"),
)
