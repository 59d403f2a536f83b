"""WGSL helper functions: constants WGSL cannot write, the opaque identity, float64's fmod, threefry.

The transcendentals (float32 from `jaxcore.expansions`, float64 from `jaxcore.expansions64`) and
the float32 ops exact on subnormals (`jaxcore.softfloat`) are the core's, rendered by this dialect.

- NaN and infinity never come from a const-expression (that is a WGSL shader-creation error):
  helpers bitcast a `let`.
"""

from __future__ import annotations

from jaxcore.dtype import _THREEFRY_ROT

H: dict[str, tuple[str, tuple[str, ...]]] = {}

H["jc_nan_f32"] = ("fn jc_nan_f32() -> f32 { let b = 0x7fc00000u; return bitcast<f32>(b); }", ())
H["jc_inf_f32"] = ("fn jc_inf_f32() -> f32 { let b = 0x7f800000u; return bitcast<f32>(b); }", ())
# Bits as a float32 at run time (a parameter is no const-expression, so a NaN is allowed).
H["jc_bits_f32"] = ("fn jc_bits_f32(b: u32) -> f32 { return bitcast<f32>(b); }", ())
H["jc_isnan_f32"] = (
    "fn jc_isnan_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }",
    (),
)
# (a float64 NaN converts to a float32 NaN; naga has no f64 bit access)
H["jc_isnan_f64"] = ("fn jc_isnan_f64(x: f64) -> bool { return jc_isnan_f32(f32(x)); }", ("jc_isnan_f32",))

# An identity the driver cannot see through (legalize.opaque): `jc_zero` is a uniform the runtime
# binds as zeros (OPAQUE_UNIFORM), so `x * jc_o_f32(0.0f, 1u)` is not folded to 0 (wrong for NaN,
# Inf and -0). float32 goes through its bits, xor an unknown 0: an integer op no driver can fold
# a float a * b + c through nor flush (a select's arms it could; on the H200 this did not mend the
# quotients an ulp off beside float64 work, README). float64 has no bit access in naga: a select
# whose other arm is unknown too (a constant one made {x, 1.0} a set lavapipe reasoned about; a
# product with an unknown 1.0 let it fold 0.0 * u). The renderer numbers every call site `k` (from
# 1), so no two sites are the same value to the driver: two operands it knows are equal (NaN - NaN
# after its own constant folding) stay apart, and an opaque of an opaque is not merged into one.
OPAQUE_UNIFORM = bytes(16)
H["jc_zero"] = ("@group(1) @binding(0) var<uniform> jc_zero: vec4<u32>;", ())
H["jc_o_f32"] = (
    "fn jc_o_f32(x: f32, k: u32) -> f32 { return bitcast<f32>(bitcast<u32>(x) ^ (jc_zero.x * k)); }",
    ("jc_zero",),
)
H["jc_o_u32"] = ("fn jc_o_u32(x: u32, k: u32) -> u32 { return x ^ (jc_zero.x * k); }", ("jc_zero",))
H["jc_o_f64"] = (
    "fn jc_o_f64(x: f64, k: u32) -> f64 { return select(x, f64(bitcast<f32>(jc_zero.y)), jc_zero.x == k); }",
    ("jc_zero",),
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
