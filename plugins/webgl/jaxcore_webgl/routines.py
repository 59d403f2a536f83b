"""Routines as sequences of render passes: Sort and Argsort as a bitonic network.

Each row of n elements is padded to N = 2^ceil(log2 n) and turned into (key, index) pairs, two
pairs per RGBA32UI texel: `key` is an unsigned integer whose order is the contract's order
(floats: negatives reversed, -0 equal to +0, NaN the largest key so it sorts last; int32 with the sign
bit flipped; float16 the same in 16 bits), `index` the position in the row. Pairs compare by key,
then index, so the network is stable (Argsort) and padding (the largest key, indices >= n) lands
after every real element. One pass per comparator column, ping-ponging between two textures;
a last pass decodes the keys (and writes the indices) into the outputs. No loops in any shader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jaxcore.plugin import DType, Routine, Routines
from jaxcore_webgl.device import TEXEL_BYTES, Device, Program, Texture

HEADER = "#version 300 es\nprecision highp float;\nprecision highp int;\nprecision highp usampler2D;\n"
_IN = """uniform highp usampler2D in0;
uniform int sh0;
uint ld0(int w) { int t = w >> 2; return texelFetch(in0, ivec2(t & ((1 << sh0) - 1), t >> sh0), 0)[w & 3]; }
"""
_PAIR = """uvec2 pair(int e) {
  int t = e >> 1;
  uvec4 v = texelFetch(in0, ivec2(t & ((1 << sh0) - 1), t >> sh0), 0);
  return (e & 1) == 0 ? v.xy : v.zw;
}
"""
_MAIN = "layout(location = 0) out uvec4 o;\n"

# (key from the element's bits, bits from the key)
_KEYS = {
    DType.float32: (
        "uint key(uint b) { if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;"
        " if ((b & 0x7fffffffu) == 0u) return 0x80000000u;"
        " return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u); }",
        "uint dec(uint k) { return (k & 0x80000000u) != 0u ? (k & 0x7fffffffu) : ~k; }",
    ),
    DType.float16: (
        "uint key(uint h) { if ((h & 0x7fffu) > 0x7c00u) return 0xffffu;"
        " if ((h & 0x7fffu) == 0u) return 0x8000u;"
        " return (h & 0x8000u) != 0u ? (~h & 0xffffu) : (h | 0x8000u); }",
        "uint dec(uint k) { return (k & 0x8000u) != 0u ? (k & 0x7fffu) : (~k & 0xffffu); }",
    ),
    DType.int32: (
        "uint key(uint b) { return b ^ 0x80000000u; }",
        "uint dec(uint k) { return k ^ 0x80000000u; }",
    ),
    DType.uint32: ("uint key(uint b) { return b; }", "uint dec(uint k) { return k; }"),
    DType.bool: ("uint key(uint b) { return b; }", "uint dec(uint k) { return k; }"),
}


def _row_pos(var: str, n: int, big_n: int) -> str:
    """Map output element `var` (row * n + j) to its pair (row * N + j)."""
    return f"int({var} / {n}) * {big_n} + {var} % {n}"


@dataclass
class SortPlan:
    """Programs and sizes for one (batch, n, dtype) sort."""

    batch: int
    n: int
    big_n: int
    dtype: DType
    argsort: bool
    init: Program
    step: Program
    values: Program
    indices: Program | None

    @property
    def pair_bytes(self) -> int:
        return self.batch * self.big_n * 8

    def run(self, dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if self.batch == 0 or self.n == 0:
            return
        total = self.batch * self.big_n
        texels = -(-total // 2)
        a, b = dev.alloc(self.pair_bytes), dev.alloc(self.pair_bytes)
        try:
            dev.draw(self.init, inputs, a, texels)
            k = 2
            while k <= self.big_n:
                s = k >> 1
                while s >= 1:
                    dev.draw(self.step, [a], b, texels, {"u_k": k, "u_s": s})
                    a, b = b, a
                    s >>= 1
                k <<= 1
            out_n = self.batch * self.n
            width = 2 if self.dtype == DType.float16 else 4
            dev.draw(self.values, [a], outputs[0], -(-out_n * width // TEXEL_BYTES))
            if self.indices is not None:
                dev.draw(self.indices, [a], outputs[1], -(-out_n * 4 // TEXEL_BYTES))
        finally:
            dev.free(a)
            dev.free(b)


def sort_plan(dev: Device, routine: Routine, max_texture_size: int) -> SortPlan:
    """Compile the four shaders of a Sort/Argsort routine."""
    t = routine.type
    shape, dtype = t.input_shapes[0], t.input_dtypes[0]
    n = shape[-1]
    batch = math.prod(shape[:-1])
    big_n = 1 << max(0, math.ceil(math.log2(n))) if n > 1 else 1
    keyfn, decfn = _KEYS[dtype]
    out_shift_of = _out_shift(max_texture_size)
    pair_shift = out_shift_of(batch * big_n * 8)

    # init: (key, index) pairs, padding = (max key, j >= n)
    if dtype == DType.float16:
        load = "uint w = ld0(src >> 1); uint b = (src & 1) == 0 ? (w & 0xffffu) : (w >> 16);"
    else:
        load = "uint b = ld0(src);"
    init = (
        HEADER
        + _IN
        + keyfn
        + "\n"
        + _MAIN
        + "uvec2 make(int e) {\n"
        + f"  int row = e >> {big_n.bit_length() - 1}; int j = e & {big_n - 1};\n"
        + f"  if (j >= {n}) return uvec2(0xffffffffu, uint(j));\n"
        + f"  int src = row * {n} + j;\n  {load}\n  return uvec2(key(b), uint(j));\n}}\n"
        + "void main() {\n"
        + f"  int t = (int(gl_FragCoord.y) << {pair_shift}) + int(gl_FragCoord.x);\n"
        + "  o = uvec4(make(2 * t), make(2 * t + 1));\n}\n"
    )
    step = (
        HEADER
        + "uniform highp usampler2D in0;\nuniform int sh0;\nuniform int u_k;\nuniform int u_s;\n"
        + _PAIR
        + _MAIN
        + "bool less(uvec2 a, uvec2 b) { return a.x < b.x || (a.x == b.x && a.y < b.y); }\n"
        + "uvec2 cas(int e) {\n"
        + "  int p = e ^ u_s;\n  uvec2 a = pair(e), b = pair(p);\n"
        + f"  bool up = (e & u_k & {big_n - 1}) == 0;\n  bool low = e < p;\n"
        + "  bool take_min = up == low;\n  bool bl = less(b, a);\n"
        + "  return take_min ? (bl ? b : a) : (bl ? a : b);\n}\n"
        + "void main() {\n"
        + f"  int t = (int(gl_FragCoord.y) << {pair_shift}) + int(gl_FragCoord.x);\n"
        + "  o = uvec4(cas(2 * t), cas(2 * t + 1));\n}\n"
    )
    out_n = batch * n
    vshift = out_shift_of(out_n * (2 if dtype == DType.float16 else 4))
    if dtype == DType.float16:
        words = []
        for c in range(4):
            lo, hi = 8 * 0 + 2 * c, 2 * c + 1
            words.append(f"  r[{c}] = val(8 * t + {lo}) | (val(8 * t + {hi}) << 16);")
        body = "\n".join(words)
    else:
        body = "\n".join(f"  r[{c}] = val(4 * t + {c});" for c in range(4))
    values = (
        HEADER
        + "uniform highp usampler2D in0;\nuniform int sh0;\n"
        + _PAIR
        + decfn
        + "\n"
        + _MAIN
        + f"uint val(int e) {{\n  if (e >= {out_n}) return 0u;\n"
        + f"  return dec(pair({_row_pos('e', n, big_n)}).x);\n}}\n"
        + "void main() {\n"
        + f"  int t = (int(gl_FragCoord.y) << {vshift}) + int(gl_FragCoord.x);\n"
        + f"  uvec4 r;\n{body}\n  o = r;\n}}\n"
    )
    indices_src = None
    if routine.name == Routines.Argsort:
        ishift = out_shift_of(out_n * 4)
        indices_src = (
            HEADER
            + "uniform highp usampler2D in0;\nuniform int sh0;\n"
            + _PAIR
            + _MAIN
            + f"uint idx(int e) {{\n  if (e >= {out_n}) return 0u;\n"
            + f"  return pair({_row_pos('e', n, big_n)}).y;\n}}\n"
            + "void main() {\n"
            + f"  int t = (int(gl_FragCoord.y) << {ishift}) + int(gl_FragCoord.x);\n"
            + "  o = uvec4(idx(4 * t), idx(4 * t + 1), idx(4 * t + 2), idx(4 * t + 3));\n}\n"
        )
    return SortPlan(
        batch,
        n,
        big_n,
        dtype,
        routine.name == Routines.Argsort,
        dev.program(init, 1),
        dev.program(step, 1, ("u_k", "u_s")),
        dev.program(values, 1),
        dev.program(indices_src, 1) if indices_src is not None else None,
    )


def _out_shift(max_size: int):
    from jaxcore_webgl.device import texture_dims

    return lambda nbytes: texture_dims(nbytes, max_size)[2]
