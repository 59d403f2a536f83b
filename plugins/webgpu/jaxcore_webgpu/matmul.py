"""Matmul-shaped kernels as one tiled WGSL shader (the design of the H200 probe, generalised).

A workgroup computes a BM x BN tile of C for one batch entry; each of its (BN/TN) x (BM/TM)
threads owns TM x TN outputs held as vec4 accumulators (register blocking). The K loop walks
BK-deep slabs: A's slab is stored k-major in workgroup memory (`As[k][m]`, vec4 over m), B's as
`Bs[k][n]` (vec4 over n), so the inner product is TM*TN/4 `fma(vec4(a), b, c)` per k with TM/4 +
TN/4 workgroup loads. The next slab is loaded into registers while the current one is multiplied
(register prefetch: one barrier pair per slab, global latency hidden behind the math).

Global loads are vec4 where the layout allows: A contiguous along k (row-major A) or along m
(transposed A), B contiguous along n (row-major B) or along k (transposed B), with the strides and
sizes in whole vec4s; anything else (odd sizes, strided views) loads scalars through the affine
index. Partial tiles load zeros out of bounds and store only in-bounds outputs. The epilogue (an
expression in `acc` and `gidx`, e.g. a bias add) is rendered by the WGSL dialect into a function
called once per output.

Tile shapes: 128x128 (BK 16, 8x8 per thread) when the problem has enough such tiles to fill a big
GPU, its slabs double-buffered where the adapter has 32 KB of workgroup storage (one barrier a slab
instead of two; an exported program keeps to 16 KB, so to one buffer), else 64x128 (8x8 over 128
threads, double-buffered: H100 1024^3 30.3 TFLOP/s against 64x64's 24.1), else 64x64 (BK 16, 4x4),
else 32x32 (BK 16, 4x4 over 64 threads) — bounded by the adapter's workgroup size and workgroup
storage. The slabs are declared [stage][k][register quad][thread], so a multiply's loads index
only the stage and the thread dynamically. float64 runs on smaller tiles. A kernel that touches
float16 is left to the generic compiler, which holds float16 in float32 (`WGSL_TRAITS.f16_in_f32`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from jaxcore.alu import AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.cstyle import ExpRenderer
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.legalize import legalize
from jaxcore.matmul_shape import MatmulShape, Operand, detect
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.wgsl import WGSL_TRAITS, WGSLLanguage
from jaxcore_webgpu.wgsl_helpers import OPAQUE_UNIFORM

FILL_WORKGROUPS = 128  # workgroups that keep a big GPU busy (an H200 has 132 SMs; gpu-probe.md §2)
MIN_SIDE = 16  # thinner products (matrix-vector) stream better as the compiler's grouped reductions
MIN_WORK = 1 << 12  # multiply-adds below which the generic reduction kernel is as good


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    stages: int = 1  # 2: slabs alternate between two buffers, one barrier per slab instead of two

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def storage(self, elem: int) -> int:
        """Bytes of workgroup memory: the A and B slabs, once per stage."""
        return (self.bm + self.bn) * self.bk * elem * self.stages


TILES = {
    "large2": Tile(128, 128, 16, 8, 8, 2),
    "large": Tile(128, 128, 16, 8, 8),
    "mid2": Tile(64, 128, 16, 8, 8, 2),
    "medium": Tile(64, 64, 16, 4, 4),
    "small": Tile(32, 32, 16, 4, 4),
}


def choose_tile(mm: MatmulShape, target: object, name: str | None = None) -> Tile | None:
    """The largest tile that still gives the device enough workgroups and fits its limits."""
    elem = 8 if mm.product == DType.float64 else 4
    max_wg = getattr(target, "max_workgroup_size", 256)
    max_shared = getattr(target, "max_workgroup_storage", 16384)

    def fits(t: Tile) -> bool:
        return t.threads <= max_wg and t.storage(elem) <= max_shared

    if name is not None:
        t = TILES[name]
        return t if fits(t) else None
    order = (
        ["medium", "small"] if mm.product == DType.float64 else ["large2", "large", "mid2", "medium", "small"]
    )
    for key in order:
        t = TILES[key]
        tiles = mm.batch * -(-mm.m // t.bm) * -(-mm.n // t.bn)
        if fits(t) and (key == "small" or tiles >= FILL_WORKGROUPS):
            return t
    return None


def _vec_mode(op: Operand, outer: int, k: int) -> str:
    """How one operand's slab is loaded: "k4" (vec4 along k), "o4" (vec4 along m or n) or "s"."""
    aligned = op.base % 4 == 0 and op.s_batch % 4 == 0 and op.length % 4 == 0
    if not aligned:
        return "s"
    if op.s_k == 1 and k % 4 == 0 and op.s_outer % 4 == 0 and op.s_outer > 0:
        return "k4"
    if op.s_outer == 1 and outer % 4 == 0 and op.s_k % 4 == 0 and op.s_k > 0:
        return "o4"
    return "s"


def plan_matmul(kernel: Kernel, target: object, tile: str | None = None) -> Plan | None:
    """A one-pass plan for a matmul-shaped kernel, or None to leave it to the generic compiler."""
    mm = detect(kernel)
    if mm is None:
        return None
    if (mm.m * mm.n * mm.k * mm.batch < MIN_WORK or min(mm.m, mm.n) < MIN_SIDE) and tile is None:
        return None
    # every dtype the shader declares: an operand widened to float32 or an epilogue's cast counts
    dtypes = {mm.product, mm.acc, mm.out, mm.a.dtype, mm.b.dtype} | {e.dtype for e in mm.epilogue.nodes()}
    if DType.float16 in dtypes or DType.float64 in dtypes and not getattr(target, "has_f64", False):
        return None
    t = choose_tile(mm, target, tile)
    if t is None:
        return None
    grid = (-(-mm.n // t.bn), -(-mm.m // t.bm), mm.batch)
    too_wide = max(grid) > getattr(target, "max_workgroups_per_dim", 65535)
    if too_wide or kernel.nargs + 1 > getattr(target, "max_storage_buffers_per_stage", 8):
        return None
    try:
        code = render(kernel, mm, t, getattr(target, "exact_subnormals", True))
    except UnsupportedOpError:
        return None
    bindings = tuple(("in", g) for g in range(kernel.nargs)) + (("out", 0),)
    return Plan((Pass(code, grid, bindings, uniform=zero_uniform(code)),))


_GROUP1 = re.compile(r"@group\(\s*1\s*\)")


def zero_uniform(code: str) -> bytes | None:
    """The bytes of the uniform block a shader needs bound at `@group(1) @binding(0)`, or None.

    The epilogue's opaque operands (legalize.opaque: every float + - * on `acc` or a constant
    product under WGSL_TRAITS) read `jc_zero` there (wgsl_helpers.OPAQUE_UNIFORM). A pass built without it
    compiles, but every dispatch is rejected by wgpu validation ("expects a BindGroup to be set at
    index 1"), reported only at the next read. Decided by the declaration itself, not by the
    helper's name or spelling, so whatever declares group 1 gets it bound."""
    return OPAQUE_UNIFORM if _GROUP1.search(code) else None


def render(kernel: Kernel, mm: MatmulShape, t: Tile, exact_subnormals: bool = True) -> str:
    # the epilogue's ops exact on subnormals where the device flushes them (the inner products are fma)
    lang = WGSLLanguage(replace(WGSL_TRAITS, flushes_subnormals=exact_subnormals))
    epi = legalize(mm.epilogue, WGSL_TRAITS)
    epi_dtypes = {n.dtype for n in epi.nodes()}
    lang.features = {"f64"} if DType.float64 in {mm.product, mm.acc, mm.out} | epi_dtypes else set()
    P, ACC, out_ty = lang.type_name(mm.product), lang.type_name(mm.acc), lang.storage_type(mm.out)
    # Which inputs the epilogue reads (they must stay scalar arrays), and each one's dtype.
    epi_reads = {node.arg[0]: node.dtype for node in epi.nodes() if node.op == AluOp.GlobalIndex}
    ma, mb = _vec_mode(mm.a, mm.m, mm.k), _vec_mode(mm.b, mm.n, mm.k)
    # A buffer is bound as vec4 only when every read of it is a vec4 slab load.
    scalar = set(epi_reads) | {op.gid for op, mode in ((mm.a, ma), (mm.b, mb)) if mode == "s"}
    ma = "s" if mm.a.gid in scalar else ma
    mb = "s" if mm.b.gid in scalar else mb
    vec_in = {op.gid for op, mode in ((mm.a, ma), (mm.b, mb)) if mode != "s"}
    vec_out = mm.n % 4 == 0  # each thread's 4 adjacent columns are one aligned vec4 store
    L: list[str] = []
    dtypes = {mm.a.gid: mm.a.dtype, mm.b.gid: mm.b.dtype, **epi_reads}
    for g in range(kernel.nargs):
        ty = lang.storage_type(dtypes.get(g, DType.uint32))
        ty = f"vec4<{ty}>" if g in vec_in else ty
        L.append(f"@group(0) @binding({g}) var<storage, read> in{g}: array<{ty}>;")
    out_elem = f"vec4<{out_ty}>" if vec_out else out_ty
    L.append(f"@group(0) @binding({kernel.nargs}) var<storage, read_write> out0: array<{out_elem}>;")
    wx, wy = t.bn // t.tn, t.bm // t.tm
    for sh, w, q in (("As", wy, t.tm // 4), ("Bs", wx, t.tn // 4)):  # [stage][k][register quad][thread]
        L.append(f"var<workgroup> {sh}: array<array<array<array<vec4<{P}>, {w}>, {q}>, {t.bk}>, {t.stages}>;")
    # The epilogue, as a function of the sum and the output index.
    r = ExpRenderer(lang)
    r.count(epi)
    val = r.render(epi)
    body = "".join(f"  {ln}\n" for ln in r.lines) + f"  return {lang.store_value(r, mm.out, val)};\n"
    epi_fn = f"fn jc_epi(acc: {ACC}, gidx: i32) -> {out_ty} {{\n{body}}}"
    helpers = lang.render_helpers(r.used_helpers)
    L += [helpers, epi_fn] if helpers else [epi_fn]
    L.append(f"@compute @workgroup_size({wx}, {wy}, 1)")
    L.append(
        "fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,"
        " @builtin(local_invocation_index) tidu: u32) {"
    )
    L += [f"  _ = &in{g};" for g in range(kernel.nargs)]
    L.append("  let tid = i32(tidu); let tx = i32(lid.x); let ty = i32(lid.y);")
    L.append(f"  let m0 = i32(wid.y) * {t.bm}; let n0 = i32(wid.x) * {t.bn}; let bb = i32(wid.z);")
    a, b = _Slab(mm, t, P, mm.a, ma, True), _Slab(mm, t, P, mm.b, mb, False)
    L += a.setup + b.setup + _k_loop(mm, t, P, ACC, a, b) + _stores(mm, t, out_ty if vec_out else None)
    return "\n".join(L) + "\n"


class _Slab:
    """One operand's slab loader: `setup` lines, `load` lines (into registers, from the slab at
    KSLAB) and `put` lines (registers into workgroup memory, As[k][m] or Bs[k][n]; with two stages,
    into the half `ph` of the array)."""

    def __init__(self, mm: MatmulShape, t: Tile, P: str, op: Operand, mode: str, is_a: bool) -> None:
        self.setup: list[str] = []
        self.load: list[str] = []
        self.put: list[str] = []
        name, sh, o0 = ("a", "As", "m0") if is_a else ("b", "Bs", "n0")
        outer_tile, outer_dim = (t.bm, mm.m) if is_a else (t.bn, mm.n)
        nt, ot4 = (t.bm // t.tm) * (t.bn // t.tn), outer_tile // 4
        Z = P if mode == "s" else f"vec4<{P}>"  # a register's type
        base = f"({op.base} + bb * {op.s_batch})"
        self.sh, self.w = sh, (t.bm // t.tm if is_a else t.bn // t.tn)
        self.ph = "ph" if t.stages > 1 else "0"
        at = self.slot
        units = outer_tile * t.bk // (1 if mode == "s" else 4)
        for u in range(-(-units // nt)):
            e = f"(tid + {u * nt})"
            guard = f"{e} < {units}" if units % nt else "true"
            o, k, q, g = (f"{name}{x}{u}" for x in "okqg")  # outer, k, quad, guard
            r = f"r{name}{u}"
            if mode == "s":
                if op.s_k == 1:
                    po, pk = f"({e} / {t.bk})", f"({e} % {t.bk})"
                else:
                    po, pk = f"({e} % {outer_tile})", f"({e} / {outer_tile})"
                self.setup.append(f"  let {o} = {po}; let {k} = {pk}; let {g} = {guard};")
                self.setup.append(f"  var {r}: {Z} = {Z}(0);")
                oi, ki = o, k
                idx = f"{base} + ({o0} + {o}) * {op.s_outer} + (KSLAB + {k}) * {op.s_k}"
                self.put.append(f"    if ({g}) {{ {at(k, f'{o} / 4')}[{o} % 4] = {r}; }}")
            elif mode == "k4":  # vec4 along k: unit = (outer o, k quad q)
                self.setup.append(f"  var {r}: {Z} = {Z}(0);")
                self.setup.append(
                    f"  let {o} = {e} / {t.bk // 4}; let {q} = {e} % {t.bk // 4}; let {g} = {guard};"
                )
                oi, ki = o, f"{q} * 4"
                idx = f"({base} + ({o0} + {o}) * {op.s_outer}) / 4 + KSLAB / 4 + {q}"
                self.put.append(f"    if ({g}) {{")
                self.put += [
                    f"      {at(f'{q} * 4 + {c}', f'{o} / 4')}[{o} % 4] = {r}.{comp};"
                    for c, comp in enumerate("xyzw")
                ]
                self.put.append("    }")
            else:  # "o4": vec4 along m/n: unit = (k, outer quad q)
                self.setup.append(f"  var {r}: {Z} = {Z}(0);")
                self.setup.append(f"  let {k} = {e} / {ot4}; let {q} = {e} % {ot4}; let {g} = {guard};")
                oi, ki = f"{q} * 4", k
                idx = f"({base} + (KSLAB + {k}) * {op.s_k}) / 4 + {o0} / 4 + {q}"
                self.put.append(f"    if ({g}) {{ {at(k, q)} = {r}; }}")
            # the bound checks that whole tiles make true are left out (the common aligned case)
            ok = [g] if guard != "true" else []
            ok += [f"{o0} + {oi} < {outer_dim}"] if outer_dim % outer_tile else []
            ok += [f"KSLAB + {ki} < {mm.k}"] if mm.k % t.bk else []
            value = f"in{op.gid}[{idx}]" if op.dtype == mm.product else f"{Z}(in{op.gid}[{idx}])"
            self.load.append(f"    {r} = {Z}(0); if ({' && '.join(ok) or 'true'}) {{ {r} = {value}; }}")

    def slot(self, k: str, quad: str) -> str:
        """The vec4 of workgroup memory at slab row k, quad `quad` of the tile's outer side, in the
        slab in use: quad splits into (register quad, thread)."""
        quad = quad if quad.isidentifier() else f"({quad})"
        return f"{self.sh}[{self.ph}][{k}][{quad} / {self.w}][{quad} % {self.w}]"

    def read(self, k: int, v: int, lane: str) -> str:
        """A thread's register quad v at slab row k: only the stage and the thread (`lane`, tx or
        ty) are dynamic indices, so the bounds clamps WGSL compilers put on dynamic indices of
        workgroup arrays are a thread's once, not a load's (H100: 37.3 -> 38.1 TFLOP/s at 2048)."""
        return f"{self.sh}[{self.ph}][{k}][{v}][{lane}]"


def _k_loop(mm: MatmulShape, t: Tile, P: str, ACC: str, a: _Slab, b: _Slab) -> list[str]:
    """The accumulators and the K loop: slab k0 in workgroup memory, k1 loading into registers.

    One stage: a barrier after the slab is stored and one after it is used (the next store
    overwrites it). Two: slab i goes to half i % 2, so a thread storing slab i + 1 only needs
    every thread past slab i's store barrier, which each reaches after it used slab i - 1. (Two
    slabs a loop trip, each half's stage a constant, ran slower on an H100: 34.0 against 38.1
    TFLOP/s at 2048.)"""
    L = [f"  var c{rr}_{h}: vec4<{ACC}> = vec4<{ACC}>(0);" for rr in range(t.tm) for h in range(t.tn // 4)]
    L.append("  var k0 = 0;")
    L += ["  var ph = 0;"] if t.stages > 1 else []
    L += [ln[2:].replace("KSLAB", "k0") for ln in a.load + b.load]
    L.append(f"  for (; k0 < {mm.k}; k0 = k0 + {t.bk}) {{")
    L += a.put + b.put
    L += ["    workgroupBarrier();", f"    if (k0 + {t.bk} < {mm.k}) {{", f"      let k1 = k0 + {t.bk};"]
    L += ["  " + ln.replace("KSLAB", "k1") for ln in a.load + b.load]
    L.append("    }")
    for k in range(t.bk):
        L += [f"    let a{v}_{k} = {a.read(k, v, 'ty')};" for v in range(t.tm // 4)]
        L += [f"    let b{v}_{k} = {b.read(k, v, 'tx')};" for v in range(t.tn // 4)]
        for rr in range(t.tm):
            v, comp = divmod(rr, 4)
            for h in range(t.tn // 4):
                av = f"vec4<{P}>(a{v}_{k}.{'xyzw'[comp]})"
                if mm.product == mm.acc:
                    L.append(f"    c{rr}_{h} = fma({av}, b{h}_{k}, c{rr}_{h});")
                else:
                    L.append(f"    c{rr}_{h} = c{rr}_{h} + vec4<{ACC}>({av} * b{h}_{k});")
    return L + (["    ph = 1 - ph;", "  }"] if t.stages > 1 else ["    workgroupBarrier();", "  }"])


def _stores(mm: MatmulShape, t: Tile, vec_ty: str | None) -> list[str]:
    """Row m0 + 4*(v*wy + ty) + c, columns n0 + 4*(h*wx + tx) + j: through jc_epi, in bounds
    (as vec4<vec_ty> where the row's columns are whole vec4s)."""
    M, N = mm.m, mm.n
    wx, wy = t.bn // t.tn, t.bm // t.tm
    col_ok = "true" if N % t.bn == 0 else f"col < {N}"
    L = [f"  let cb = bb * {M * N};"]
    for rr in range(t.tm):
        v, comp = divmod(rr, 4)
        L.append(f"  {{ let row = m0 + {4 * v * wy} + ty * 4 + {comp};")
        L.append(f"    if ({'true' if M % t.bm == 0 else f'row < {M}'}) {{")
        for h in range(t.tn // 4):
            if vec_ty is not None:
                vals = ", ".join(f"jc_epi(c{rr}_{h}.{cj}, g + {j})" for j, cj in enumerate("xyzw"))
                L.append(f"      {{ let col = n0 + {4 * h * wx} + tx * 4;")
                store = f"let g = cb + row * {N} + col; out0[g / 4] = vec4<{vec_ty}>({vals});"
                L.append(f"        if ({col_ok}) {{ {store} }} }}")
                continue
            for j, cj in enumerate("xyzw"):
                L.append(f"      {{ let col = n0 + {4 * h * wx} + tx * 4 + {j};")
                store = f"let g = cb + row * {N} + col; out0[g] = jc_epi(c{rr}_{h}.{cj}, g);"
                L.append(f"        if ({col_ok}) {{ {store} }} }}")
        L += ["    }", "  }"]
    return L + ["}"]


__all__ = ["MIN_WORK", "TILES", "Tile", "choose_tile", "plan_matmul", "render", "zero_uniform"]
