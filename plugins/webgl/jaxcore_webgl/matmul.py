"""Matmul-shaped kernels as a 4x4-block fragment shader with four render targets (gpu-probe.md §5).

Two draws. The block pass covers a (ceil(N/4)) x (batch * ceil(M/4)) grid: the fragment at
(jq, b * Mq + iq) computes C[b, 4iq..4iq+3, 4jq..4jq+3] as four vec4 accumulators and writes row r
of its block to colour attachment r (four RGBA32UI textures holding float bits). The k loop walks
four at a time, reading A and B as whole texels where the layout allows: A contiguous along k
(row-major: one texel per block row) or along m (transposed: one texel per k), B contiguous along
n (row-major: one texel per k) or along k (transposed: one texel per block column); any other
layout reads words. Rows and columns past the edge of a partial block read the last valid ones
(always in bounds) and are never stored. A k remainder (K % 4) runs as up to three word steps.

The gather pass is the plugin's ordinary fragment shader for the output buffer, with `acc` fetched
from the block textures: it renders the epilogue (bias adds, casts, reads of other inputs) through
the GLSL dialect and stores the output dtype, so every epilogue the generic path supports works.

The sum is plain multiply-adds in float32: the contract lets reductions reassociate and fuse,
so it skips the exact denormal helpers the elementwise ops use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxcore.cstyle import ExpRenderer, strip_parens
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.legalize import legalize
from jaxcore.matmul_shape import MatmulShape, Operand, detect
from jaxcore_webgl import glsl
from jaxcore_webgl.device import TEXEL_BYTES, Device, Program, Texture

F32 = DType.float32
MIN_SIDE = 4  # thinner products (matrix-vector) waste most of each 4x4 block
MIN_WORK = 1 << 12  # multiply-adds below which the generic reduction kernel is as good
TARGETS = 4


def _mode(op: Operand, outer: int, k: int) -> str:
    """ "k4" (texels along k), "o4" (texels along m or n) or "s" (words) for one operand."""
    if op.base % 4 or op.s_batch % 4:
        return "s"
    if op.s_k == 1 and k % 4 == 0 and op.s_outer % 4 == 0 and op.s_outer > 0:
        return "k4"
    if op.s_outer == 1 and outer % 4 == 0 and op.s_k % 4 == 0 and op.s_k > 0:
        return "o4"
    return "s"


def block_shader(kernel: Kernel, mm: MatmulShape) -> str:
    """The block pass: four RGBA32UI targets, row r of each fragment's 4x4 block in target r."""
    M, N, K = mm.m, mm.n, mm.k
    mq = -(-M // 4)
    ma, mb = _mode(mm.a, M, K), _mode(mm.b, N, K)
    ga, gb = mm.a.gid, mm.b.gid
    L: list[str] = []
    w = L.append
    for g in sorted({ga, gb}):
        w(f"uniform highp usampler2D in{g};\nuniform int sh{g};")
        w(f"uvec4 tx{g}(int t) {{ return texelFetch(in{g}, ivec2(t & ((1 << sh{g}) - 1), t >> sh{g}), 0); }}")
        w(f"float ld{g}(int w) {{ return uintBitsToFloat(tx{g}(w >> 2)[w & 3]); }}")
    for r in range(TARGETS):
        w(f"layout(location = {r}) out uvec4 o{r};")
    w("void main() {")
    w("  int j0 = int(gl_FragCoord.x) * 4; int y = int(gl_FragCoord.y);")
    w(f"  int bb = y / {mq}; int i0 = (y - bb * {mq}) * 4;")
    w(f"  int ab = {mm.a.base} + bb * {mm.a.s_batch}; int bbase = {mm.b.base} + bb * {mm.b.s_batch};")
    # word offset of each block row of A / column of B at k = 0 (clamped to the last valid one)
    for r in range(4):
        w(f"  int ar{r} = ab + min(i0 + {r}, {M - 1}) * {mm.a.s_outer};")
        w(f"  int bc{r} = bbase + min(j0 + {r}, {N - 1}) * {mm.b.s_outer};")
    for r in range(4):
        w(f"  vec4 c{r} = vec4(0.0);")

    def a_vals(kexp: str, mode: str) -> tuple[list[str], list[list[str]]]:
        """(lines, A[r][kk] expressions) for the 4x4 slab of A at k = kexp."""
        sk = mm.a.s_k
        if mode == "k4":
            lines = [f"    vec4 a{r} = uintBitsToFloat(tx{ga}((ar{r} + {kexp}) >> 2));" for r in range(4)]
            return lines, [[f"a{r}[{kk}]" for kk in range(4)] for r in range(4)]
        if mode == "o4":
            lines = [
                f"    vec4 a{kk} = uintBitsToFloat(tx{ga}((ab + i0 + ({kexp} + {kk}) * {sk}) >> 2));"
                for kk in range(4)
            ]
            return lines, [[f"a{kk}[{r}]" for kk in range(4)] for r in range(4)]
        lines = [
            f"    float a{r}_{kk} = ld{ga}(ar{r} + ({kexp} + {kk}) * {sk});"
            for r in range(4)
            for kk in range(4)
        ]
        return lines, [[f"a{r}_{kk}" for kk in range(4)] for r in range(4)]

    def b_rows(kexp: str, mode: str) -> tuple[list[str], list[str]]:
        """(lines, B row kk as a vec4 over the block's 4 columns) at k = kexp."""
        sk = mm.b.s_k
        if mode == "o4":
            lines = [
                f"    vec4 b{kk} = uintBitsToFloat(tx{gb}((bbase + j0 + ({kexp} + {kk}) * {sk}) >> 2));"
                for kk in range(4)
            ]
            return lines, [f"b{kk}" for kk in range(4)]
        if mode == "k4":
            lines = [f"    vec4 t{c} = uintBitsToFloat(tx{gb}((bc{c} + {kexp}) >> 2));" for c in range(4)]
            return lines, [f"vec4(t0[{kk}], t1[{kk}], t2[{kk}], t3[{kk}])" for kk in range(4)]
        words = [[f"ld{gb}(bc{c} + ({kexp} + {kk}) * {sk})" for c in range(4)] for kk in range(4)]
        lines = [f"    vec4 b{kk} = vec4({', '.join(words[kk])});" for kk in range(4)]
        return lines, [f"b{kk}" for kk in range(4)]

    k4 = K - K % 4
    if k4:
        w(f"  for (int k = 0; k < {k4}; k += 4) {{")
        la, av = a_vals("k", ma)
        lb, bv = b_rows("k", mb)
        L += la + lb
        for r in range(4):
            terms = " + ".join(f"{av[r][kk]} * {bv[kk]}" for kk in range(4))
            w(f"    c{r} += {terms};")
        w("  }")
    for k in range(k4, K):  # the remainder, on words
        w("  {")
        for c in range(4):
            w(f"    float t{c} = ld{gb}(bc{c} + {k * mm.b.s_k});")
        for r in range(4):
            w(f"    c{r} += ld{ga}(ar{r} + {k * mm.a.s_k}) * vec4(t0, t1, t2, t3);")
        w("  }")
    for r in range(4):
        w(f"  o{r} = floatBitsToUint(c{r});")
    w("}")
    return glsl.HEADER + "\n".join(L) + "\n"


def gather_shader(kernel: Kernel, mm: MatmulShape, out_shift: int) -> str:
    """The epilogue pass: the output buffer's own fragment shader, `acc` read from the blocks."""
    M, N = mm.m, mm.n
    mq, n0 = -(-M // 4), kernel.nargs
    fetch = " : ".join(f"r == {r} ? texelFetch(in{n0 + r}, p, 0)" for r in range(3))
    acc_fn = (
        f"float jc_acc(int g) {{ int b = g / {M * N}; int q = g - b * {M * N}; int i = q / {N};"
        f" int j = q - i * {N}; ivec2 p = ivec2(j >> 2, b * {mq} + (i >> 2)); int r = i & 3;"
        f" uvec4 t = {fetch} : texelFetch(in{n0 + 3}, p, 0); return uintBitsToFloat(t[j & 3]); }}"
    )
    extra = tuple(f"uniform highp usampler2D in{n0 + r};" for r in range(TARGETS)) + (acc_fn,)
    epi = legalize(mm.epilogue.rewrite_global_views(), glsl.GLSL_TRAITS)
    r = ExpRenderer(glsl.LANG)
    r.count(epi)
    result = glsl.render_f16_bits(r, epi) if kernel.dtype == DType.float16 else r.render(epi)
    body = ["  float acc = jc_acc(gidx);", *(f"  {ln}" for ln in r.lines)]
    return glsl.assemble(
        kernel.nargs, body, strip_parens(result), kernel.dtype, kernel.size, out_shift, r.used_helpers, extra
    )


@dataclass
class MatmulExe:
    """Both passes of one matmul kernel (run on the GL thread)."""

    mm: MatmulShape
    block: Program
    gather: Program
    grid: tuple[int, int]  # block pass viewport: (ceil(N/4), batch * ceil(M/4))
    texels: int  # output texels of the gather pass
    source: str

    def run(self, dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        w, h = self.grid
        temps = [dev._take(w, h) for _ in range(TARGETS)]
        try:
            dev.draw_targets(self.block, inputs, [t for t, _ in temps], w, h)
            blocks = [Texture(t, f, w, h, 0, w * h * TEXEL_BYTES) for t, f in temps]
            out = outputs[0]
            if out in inputs:  # render elsewhere (no feedback loop), then take its storage
                tmp = dev.alloc(out.nbytes)
                dev.draw(self.gather, [*inputs, *blocks], tmp, self.texels)
                dev.swap(out, tmp)
            else:
                dev.draw(self.gather, [*inputs, *blocks], out, self.texels)
        finally:
            for t, f in temps:  # GL orders the commands: the gather pass reads them first
                dev._give(w, h, t, f)


def plan(kernel: Kernel, dev: Device, max_units: int, out_shift: int) -> MatmulExe | None:
    """The block-matmul executable for `kernel`, or None to leave it to the generic shader."""
    mm = detect(kernel)
    if mm is None or mm.batch * mm.m * mm.n * mm.k < MIN_WORK or min(mm.m, mm.n) < MIN_SIDE:
        return None
    if (mm.product, mm.acc, mm.a.dtype, mm.b.dtype) != (F32,) * 4:
        return None
    if any(n.dtype == DType.float64 for n in mm.epilogue.nodes()):
        return None
    grid = (-(-mm.n // 4), mm.batch * -(-mm.m // 4))
    if max(grid) > dev.max_size or dev.max_draw_buffers < TARGETS or kernel.nargs + TARGETS > max_units:
        return None
    if (mm.k // 4) > glsl.LOOP_LIMIT:  # llvmpipe's loop budget per fragment
        return None
    block = block_shader(kernel, mm)
    gather = gather_shader(kernel, mm, out_shift)
    texels = -(-kernel.bytes // TEXEL_BYTES)
    return MatmulExe(
        mm,
        dev.program(block, kernel.nargs),
        dev.program(gather, kernel.nargs + TARGETS),
        grid,
        texels,
        block + "\n" + gather,
    )


def uses_blocks(exe: Any) -> bool:
    return isinstance(getattr(exe, "data", exe), MatmulExe)


__all__ = ["MIN_SIDE", "MIN_WORK", "MatmulExe", "block_shader", "gather_shader", "plan", "uses_blocks"]
