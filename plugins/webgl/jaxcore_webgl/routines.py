"""Routines as sequences of render passes (`Pass`, `PassPlan`; linalg has the rest): Sort and
Argsort as a bitonic network.

Each row of n elements is padded to N = 2^ceil(log2 n) and turned into (key, index) pairs, two
pairs per RGBA32UI texel: `key` is an unsigned integer whose order is the contract's order
(floats: negatives reversed, -0 equal to +0, every NaN the largest key so it sorts last; int32 with
the sign bit flipped; float16 the same in 16 bits), `index` the position in the row. Pairs compare
by key, then index, so the network is stable (Argsort) and padding (the largest key, indices >= n)
lands after every real element. One pass per comparator column, ping-ponging between two
textures. The last passes read each output element from the input at its sorted index: a sorted
value is only moved, so -0.0 and NaNs keep their bits (a key cannot tell -0 from +0). No loops in
any shader.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from jaxcore.plugin import DType, Routine, Routines
from jaxcore_webgl.device import TEXEL_BYTES, Device, Program, Texture, scratch, texture_dims
from jaxcore_webgl.glsl import fragment, input_decls

# the order key of an element's bits (a 16-bit key for float16)
_KEYS = {
    DType.float32: "uint key(uint b) { uint a = b & 0x7fffffffu; if (a > 0x7f800000u) return 0xffffffffu;"
    " if (a == 0u) return 0x80000000u; return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u); }",
    DType.float16: "uint key(uint h) { uint a = h & 0x7fffu; if (a > 0x7c00u) return 0xffffu;"
    " if (a == 0u) return 0x8000u; return (h & 0x8000u) != 0u ? (~h & 0xffffu) : (h | 0x8000u); }",
    DType.int32: "uint key(uint b) { return b ^ 0x80000000u; }",
    DType.uint32: "uint key(uint b) { return b; }",
    DType.bool: "uint key(uint b) { return b; }",
}
_PAIR = """uvec2 pair(int e) {
  int t = e >> 1;
  uvec4 v = texelFetch(in0, ivec2(t & ((1 << sh0) - 1), t >> sh0), 0);
  return (e & 1) == 0 ? v.xy : v.zw;
}
"""
_STEP = """uniform int u_k;
uniform int u_s;
bool less(uvec2 a, uvec2 b) { return a.x < b.x || (a.x == b.x && a.y < b.y); }
uvec2 cas(int e) {
  int p = e ^ u_s;
  uvec2 a = pair(e), b = pair(p);
  bool take_min = ((e & u_k & @MASK@) == 0) == (e < p);
  bool bl = less(b, a);
  return take_min ? (bl ? b : a) : (bl ? a : b);
}
"""


@dataclass
class Pass:
    """A compiled pass and how many texels of its target it covers."""

    program: Program
    texels: int

    def __call__(self, dev: Device, inputs: list[Texture], out: Texture, **ints: int) -> None:
        dev.draw(self.program, inputs, out, self.texels, ints)


@dataclass
class PassPlan:
    """A routine's schedule of passes (`steps`), run on the device or on export's replay."""

    steps: Callable[[Device, list[Texture], list[Texture]], None]

    def run(self, dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        self.steps(dev, inputs, outputs)


def _element(dtype: DType, gid: int, i: str) -> str:
    """The bits of element `i` of input `gid` (a float16's 16 bits from its half of the word)."""
    if dtype == DType.float16:
        return f"((ld{gid}(({i}) >> 1) >> uint((({i}) & 1) << 4)) & 0xffffu)"
    return f"ld{gid}({i})"


def sort_plan(dev: Device, routine: Routine, max_texture_size: int) -> PassPlan:
    """Sort/Argsort: the (key, index) pairs, one pass per comparator column, then the outputs."""
    dtype, (n,), batch = routine.type.operand(0, 1)
    big_n = 1 << max(0, math.ceil(math.log2(n))) if n > 1 else 1
    f16 = dtype == DType.float16

    def make_pass(nbytes: int, nargs: int, body: str, store: str, uniforms: tuple[str, ...] = ()) -> Pass:
        """A pass writing `nbytes` (texel t: `o = store`), inputs 0 and 1 and the functions in `body`."""
        decls = "\n".join(input_decls(2)) + "\n" + body
        src = fragment(decls, texture_dims(nbytes, max_texture_size)[2], store)
        return Pass(dev.program(src, nargs, uniforms), -(-nbytes // TEXEL_BYTES))

    pairs = batch * big_n * 8
    # init: (key, index) pairs from the input; padding = (max key, j >= n)
    make = (
        f"{_KEYS[dtype]}\nuvec2 make(int e) {{\n"
        f"  int row = e >> {big_n.bit_length() - 1}; int j = e & {big_n - 1};\n"
        f"  if (j >= {n}) return uvec2(0xffffffffu, uint(j));\n"
        f"  return uvec2(key({_element(dtype, 0, f'row * {n} + j')}), uint(j));\n}}\n"
    )
    init = make_pass(pairs, 1, make, "uvec4(make(2 * t), make(2 * t + 1))")
    cas = _PAIR + _STEP.replace("@MASK@", str(big_n - 1))
    step = make_pass(pairs, 1, cas, "uvec4(cas(2 * t), cas(2 * t + 1))", ("u_k", "u_s"))
    out_n = batch * n
    # output element e (row * n + j) sits at pair row * N + j
    where = f"pair((e / {n}) * {big_n} + e % {n})"
    val = (
        f"uint val(int e) {{\n  if (e >= {out_n}) return 0u;\n"
        f"  return {_element(dtype, 1, f'(e / {n}) * {n} + int({where}.y)')};\n}}\n"
    )
    if f16:
        words = ", ".join(f"val(8 * t + {2 * c}) | (val(8 * t + {2 * c + 1}) << 16)" for c in range(4))
    else:
        words = ", ".join(f"val(4 * t + {c})" for c in range(4))
    values = make_pass(out_n * (2 if f16 else 4), 2, _PAIR + val, f"uvec4({words})")
    indices = None
    if routine.name == Routines.Argsort:
        idx = f"uint idx(int e) {{ return e >= {out_n} ? 0u : {where}.y; }}\n"
        store = "uvec4(idx(4 * t), idx(4 * t + 1), idx(4 * t + 2), idx(4 * t + 3))"
        indices = make_pass(out_n * 4, 1, _PAIR + idx, store)

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if out_n == 0:
            return
        with scratch(dev, pairs, pairs) as (a, b):
            init(dev, inputs, a)
            for j in range(1, big_n.bit_length()):  # comparator columns: k = 2^j, s = k/2 .. 1
                for i in reversed(range(j)):
                    step(dev, [a], b, u_k=1 << j, u_s=1 << i)
                    a, b = b, a
            values(dev, [a, inputs[0]], outputs[0])
            if indices is not None:
                indices(dev, [a], outputs[1])

    return PassPlan(steps)
