"""Matmul-shaped kernels as a block fragment shader with several render targets (gpu-probe.md §5).

Two draws. The block pass covers a (ceil(N/cols)) x (batch * ceil(M/rows)) grid: the fragment at
(jq, b * Mq + iq) computes the `Tile` of C at rows rows*iq.., columns cols*jq.. as vec4
accumulators and writes row r's vec v to colour attachment r * vecs + v (RGBA32UI textures holding
float bits); `choose_tile` says which tile. The k loop walks four at a time, reading A and B as
whole texels where the layout allows (`_mode`), words otherwise. Rows and columns past the edge of
a partial block read the last valid ones (always in bounds) and are never stored. A k remainder
(K % 4) runs as up to three word steps.

The gather pass is the plugin's ordinary fragment shader for the output buffer, with `acc` read
from the block textures: it renders the epilogue (bias adds, casts, reads of other inputs) through
the GLSL dialect and stores the output dtype, so every epilogue the generic path supports works.

The sum is plain multiply-adds in float32: the contract lets reductions reassociate and fuse,
so it skips the exact denormal helpers the elementwise ops use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxcore.alu import AluExp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.matmul_shape import MatmulShape, Operand, detect
from jaxcore.program import Let
from jaxcore_webgl import glsl
from jaxcore_webgl.device import TEXEL_BYTES, Device, Program, Texture

F32 = DType.float32
MIN_SIDE = 4  # thinner products (matrix-vector) waste most of each 4x4 block
MIN_WORK = 1 << 12  # multiply-adds below which the generic reduction kernel is as good


@dataclass(frozen=True)
class Tile:
    """A fragment's block of C: `rows` x 4 * `vecs` outputs, row r's vec v in target r * vecs + v."""

    rows: int
    vecs: int

    @property
    def cols(self) -> int:
        return 4 * self.vecs

    @property
    def targets(self) -> int:
        return self.rows * self.vecs


BASE_TILE = Tile(4, 1)  # what WebGL2 guarantees (four draw buffers)
TILES = (Tile(8, 1), Tile(4, 2), BASE_TILE)  # preferred first; see choose_tile


def choose_tile(m: int, n: int, max_targets: int) -> Tile:
    """The largest tile the context's draw buffers allow that the product fills: a 4x4 block
    fetches 8 texels per 64 multiply-adds, an 8x4 one 12 per 128 (fragment shaders on big GPUs
    are bound by texture fetches, gpu-probe.md §5)."""
    for t in TILES:
        if t.targets <= max_targets and t.rows <= m and t.cols <= n:
            return t
    return BASE_TILE


def _mode(op: Operand, outer: int, k: int) -> str:
    """ "k4" (texels along k: A row-major, B transposed), "o4" (texels along m or n: A transposed, B
    row-major) or "s" (words) for one operand."""
    if op.base % 4 or op.s_batch % 4:
        return "s"
    if op.s_k == 1 and k % 4 == 0 and op.s_outer % 4 == 0 and op.s_outer > 0:
        return "k4"
    if op.s_outer == 1 and outer % 4 == 0 and op.s_k % 4 == 0 and op.s_k > 0:
        return "o4"
    return "s"


def _texel(gid: int, word: str) -> str:
    """The four floats of the texel holding word `word` (a multiple of 4) of input `gid`."""
    return f"uintBitsToFloat(tx{gid}(({word}) >> 2))"


def _edge(start: str, offset: int, size: int) -> str:
    """The first of four rows (columns) `start + offset` read as one texel, clamped to the last
    whole texel (`size` is a multiple of 4 in the texel modes): past the edge, never stored."""
    return f"min({start} + {offset}, {size - 4})" if offset else start


def _a_slab(mm: MatmulShape, tile: Tile, kexp: str) -> tuple[list[str], list[list[str]]]:
    """(lines, A[r][kk] expressions) for the rows x 4 slab of A at k = kexp."""
    R, ga, sk = tile.rows, mm.a.gid, mm.a.s_k
    mode = _mode(mm.a, mm.m, mm.k)
    if mode == "k4":
        lines = [f"    vec4 a{r} = {_texel(ga, f'ar{r} + {kexp}')};" for r in range(R)]
        return lines, [[f"a{r}[{kk}]" for kk in range(4)] for r in range(R)]
    if mode == "o4":  # texel q of column k + kk holds rows 4q..4q+3
        rows = [_edge("i0", 4 * q, mm.m) for q in range(R // 4)]
        lines = [
            f"    vec4 a{q}_{kk} = {_texel(ga, f'ab + {rows[q]} + ({kexp} + {kk}) * {sk}')};"
            for q in range(R // 4)
            for kk in range(4)
        ]
        return lines, [[f"a{r // 4}_{kk}[{r % 4}]" for kk in range(4)] for r in range(R)]
    lines = [
        f"    float a{r}_{kk} = ld{ga}(ar{r} + ({kexp} + {kk}) * {sk});" for r in range(R) for kk in range(4)
    ]
    return lines, [[f"a{r}_{kk}" for kk in range(4)] for r in range(R)]


def _b_slab(mm: MatmulShape, tile: Tile, kexp: str) -> tuple[list[str], list[list[str]]]:
    """(lines, B[kk][v]: row kk of the 4 x cols slab as vec4s) at k = kexp."""
    V, C, gb, sk = tile.vecs, tile.cols, mm.b.gid, mm.b.s_k
    mode = _mode(mm.b, mm.n, mm.k)
    names = [[f"b{kk}_{v}" for v in range(V)] for kk in range(4)]
    if mode == "o4":
        cols = [_edge("j0", 4 * v, mm.n) for v in range(V)]
        lines = [
            f"    vec4 b{kk}_{v} = {_texel(gb, f'bbase + {cols[v]} + ({kexp} + {kk}) * {sk}')};"
            for kk in range(4)
            for v in range(V)
        ]
        return lines, names
    if mode == "k4":
        lines = [f"    vec4 t{c} = {_texel(gb, f'bc{c} + {kexp}')};" for c in range(C)]
        parts = [[", ".join(f"t{4 * v + c}[{kk}]" for c in range(4)) for v in range(V)] for kk in range(4)]
        return lines, [[f"vec4({parts[kk][v]})" for v in range(V)] for kk in range(4)]
    words = [
        [", ".join(f"ld{gb}(bc{4 * v + c} + ({kexp} + {kk}) * {sk})" for c in range(4)) for v in range(V)]
        for kk in range(4)
    ]
    return [f"    vec4 b{kk}_{v} = vec4({words[kk][v]});" for kk in range(4) for v in range(V)], names


def block_shader(kernel: Kernel, mm: MatmulShape, tile: Tile = BASE_TILE) -> str:
    """The block pass: `tile.targets` RGBA32UI targets, each a vec4 of one row of the block."""
    M, N, K = mm.m, mm.n, mm.k
    R, V, C = tile.rows, tile.vecs, tile.cols
    mq = -(-M // R)
    ga, gb = mm.a.gid, mm.b.gid
    L: list[str] = []
    w = L.append
    for g in sorted({ga, gb}):
        w(f"uniform highp usampler2D in{g};\nuniform int sh{g};")
        w(f"uvec4 tx{g}(int t) {{ return texelFetch(in{g}, ivec2(t & ((1 << sh{g}) - 1), t >> sh{g}), 0); }}")
        w(f"float ld{g}(int w) {{ return uintBitsToFloat(tx{g}(w >> 2)[w & 3]); }}")
    for t in range(tile.targets):
        w(f"layout(location = {t}) out uvec4 o{t};")
    w("void main() {")
    w(f"  int j0 = int(gl_FragCoord.x) * {C}; int y = int(gl_FragCoord.y);")
    w(f"  int bb = y / {mq}; int i0 = (y - bb * {mq}) * {R};")
    w(f"  int ab = {mm.a.base} + bb * {mm.a.s_batch}; int bbase = {mm.b.base} + bb * {mm.b.s_batch};")
    # word offset of each block row of A / column of B at k = 0 (clamped to the last valid one)
    for r in range(R):
        w(f"  int ar{r} = ab + min(i0 + {r}, {M - 1}) * {mm.a.s_outer};")
    for c in range(C):
        w(f"  int bc{c} = bbase + min(j0 + {c}, {N - 1}) * {mm.b.s_outer};")
    L += [f"  vec4 c{r}_{v} = vec4(0.0);" for r in range(R) for v in range(V)]

    k4 = K - K % 4
    if k4:
        w(f"  for (int k = 0; k < {k4}; k += 4) {{")
        la, av = _a_slab(mm, tile, "k")
        lb, bv = _b_slab(mm, tile, "k")
        L += la + lb
        for r in range(R):
            for v in range(V):
                terms = " + ".join(f"{av[r][kk]} * {bv[kk][v]}" for kk in range(4))
                w(f"    c{r}_{v} += {terms};")
        w("  }")
    for k in range(k4, K):  # the remainder, on words
        w("  {")
        for c in range(C):
            w(f"    float t{c} = ld{gb}(bc{c} + {k * mm.b.s_k});")
        for r in range(R):
            w(f"    float a{r} = ld{ga}(ar{r} + {k * mm.a.s_k});")
            for v in range(V):
                cs = ", ".join(f"t{4 * v + c}" for c in range(4))
                w(f"    c{r}_{v} += a{r} * vec4({cs});")
        w("  }")
    L += [f"  o{r * V + v} = floatBitsToUint(c{r}_{v});" for r in range(R) for v in range(V)]
    return glsl.HEADER + "\n".join([*L, "}"]) + "\n"


def gather_shader(kernel: Kernel, mm: MatmulShape, out_shift: int, tile: Tile = BASE_TILE) -> str:
    """The epilogue pass: the output buffer's own fragment shader, `acc` read from the blocks as one
    more input (its loader `ld{nargs}` maps element g of C to its word of a block texture)."""
    M, N = mm.m, mm.n
    R, V, C = tile.rows, tile.vecs, tile.cols
    mq, n0, nt = -(-M // R), kernel.nargs, tile.targets
    fetch = " : ".join(f"t == {t} ? texelFetch(in{n0 + t}, p, 0)" for t in range(nt - 1))
    loader = (
        f"uint ld{n0}(int g) {{ int b = g / {M * N}; int q = g - b * {M * N}; int i = q / {N};"
        f" int j = q - i * {N}; ivec2 p = ivec2(j / {C}, b * {mq} + i / {R});"
        f" int t = (i % {R}) * {V} + (j % {C}) / 4;"
        f" uvec4 u = {fetch} : texelFetch(in{n0 + nt - 1}, p, 0); return u[j & 3]; }}"
    )
    decls = (*(f"uniform highp usampler2D in{n0 + t};" for t in range(nt)), loader)
    acc = Let("acc", AluExp.global_index(F32, n0, mm.batch * M * N, AluVar.gidx))
    program = glsl.output_program(n0, kernel.dtype, kernel.size, glsl.lower(mm.epilogue), [acc])
    return glsl.program_shader(program, out_shift, decls)


@dataclass
class MatmulExe:
    """Both passes of one matmul kernel (run on the GL thread)."""

    mm: MatmulShape
    block: Program
    gather: Program
    tile: Tile
    grid: tuple[int, int]  # block pass viewport: (ceil(N / cols), batch * ceil(M / rows))
    texels: int  # output texels of the gather pass
    source: str

    def run(self, dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        w, h = self.grid
        blocks = [dev.alloc_grid(w, h) for _ in range(self.tile.targets)]
        try:
            dev.draw_targets(self.block, inputs, blocks)
            dev.draw(self.gather, [*inputs, *blocks], outputs[0], self.texels)
        finally:
            for t in blocks:  # GL orders the commands: the gather pass reads them first
                dev.free(t)


def plan(kernel: Kernel, dev: Device, max_units: int, out_shift: int) -> MatmulExe | None:
    """The block-matmul executable for `kernel`, or None to leave it to the generic shader."""
    mm = detect(kernel)
    if mm is None or mm.batch * mm.m * mm.n * mm.k < MIN_WORK or min(mm.m, mm.n) < MIN_SIDE:
        return None
    if (mm.product, mm.acc, mm.a.dtype, mm.b.dtype) != (F32,) * 4 or dev.max_draw_buffers < BASE_TILE.targets:
        return None
    if any(n.dtype == DType.float64 for n in mm.epilogue.nodes()):
        return None
    tile = choose_tile(mm.m, mm.n, min(dev.max_draw_buffers, max_units - kernel.nargs))
    grid = (-(-mm.n // tile.cols), mm.batch * -(-mm.m // tile.rows))
    if max(grid) > dev.max_size or kernel.nargs + tile.targets > max_units:
        return None
    if (mm.k // 4) > glsl.LOOP_LIMIT:  # llvmpipe's loop budget per fragment
        return None
    block, gather = block_shader(kernel, mm, tile), gather_shader(kernel, mm, out_shift, tile)
    programs = dev.program(block, kernel.nargs), dev.program(gather, kernel.nargs + tile.targets)
    return MatmulExe(mm, *programs, tile, grid, -(-kernel.bytes // TEXEL_BYTES), block + "\n" + gather)


def uses_blocks(exe: Any) -> bool:
    return isinstance(getattr(exe, "data", exe), MatmulExe)
