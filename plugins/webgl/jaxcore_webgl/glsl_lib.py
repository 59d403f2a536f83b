"""GLSL ES 3.00 helpers for what the drivers force on the dialect, below what the contract says.

The contract itself (integer x/0, x%0, INT_MIN/-1, NaN in min/max and compares, saturating casts,
shift counts, float -> bool) is spelled by `jaxcore.legalize` from the dialect's honest traits, and
the transcendentals are generated from `jaxcore.expansions`. What is left here, each for a reason
a driver gave:

- an opaque identity (`jx_o`) and a 0/1 bool (`jx_b2u`) that compilers cannot fold;
- float16 on the bits (`jx_ph`, `jx_h`, `jx_f16`): through the core's generated integer-op
  conversions (`jaxcore.half`), not packHalf2x16/unpackHalf2x16, whose subnormals, Inf, NaN and
  overflow are the implementation's; moved values never leave their bits;
- `jx_u2f`: ANGLE on SwiftShader rounds float(uint) apart from nearest-even;
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
uint jx_o(uint x) { return x + jx_z; }
// NVIDIA's compiler (GLES 3.2, driver 580) made uint(true) 0xffffffff inside max(acc, uint(b)).
uint jx_b2u(bool b) { return uint(b) & (1u ^ jx_z); }
// float16 by the core's integer-op conversions (jaxcore.half): NVIDIA's packHalf2x16 flushes
// float16 subnormals to zero and its unpackHalf2x16 drops a NaN's sign; ANGLE on SwiftShader
// corrupts the other half-word.
uint jx_ph(float x) { return jc_f16_bits(jc_f16_round(x)); }
float jx_f16(float x) { return jc_f16_round(x); }
float jx_h(uint w, int k) { return jc_f16_value((w >> uint(k << 4)) & 0xffffu); }
float jx_u2f(uint x) { return float(x >> 16u) * 65536.0 + float(x & 0xffffu); }

uint jx_xor2(uvec2 v) { return v.x ^ v.y; }
"""
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


LIB = _definitions(_LIBRARY + _threefry())
# name -> (source, helpers it uses): the form `jaxcore.cstyle.CStyleLanguage.helpers` takes.
_CORE = re.compile(r"\bjc_f16_[a-z]+\b")  # the float16 conversions the core generates (jaxcore.half)
HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {
    n: (src, tuple(sorted({d for d in _NAME.findall(src) if d in LIB and d != n} | set(_CORE.findall(src)))))
    for n, src in LIB.items()
}
