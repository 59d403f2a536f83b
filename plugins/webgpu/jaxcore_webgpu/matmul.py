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
expression in `acc` and `gidx`, e.g. a bias add or a cast to float16) is rendered by the WGSL
dialect into a function called once per output.

Tile shapes: 128x128 (BK 16, 8x8 per thread) when the problem has enough such tiles to fill a big
GPU, else 64x64 (BK 16, 4x4), else 32x32 (BK 16, 4x4 over 64 threads) — bounded by the adapter's
workgroup size and workgroup storage. float16 products are rounded in float16 and summed in
float32; float64 runs on smaller tiles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jaxcore.alu import AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.cstyle import ExpRenderer
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.legalize import legalize
from jaxcore.matmul_shape import MatmulShape, Operand, detect
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.wgsl import WGSL_TRAITS, WGSLLanguage

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

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


TILES = {
    "large": Tile(128, 128, 16, 8, 8),
    "medium": Tile(64, 64, 16, 4, 4),
    "small": Tile(32, 32, 16, 4, 4),
}


def choose_tile(mm: MatmulShape, target: object, name: str | None = None) -> Tile | None:
    """The largest tile that still gives the device enough workgroups and fits its limits."""
    elem = 8 if mm.product == DType.float64 else 4
    max_wg = getattr(target, "max_workgroup_size", 256)
    max_shared = getattr(target, "max_workgroup_storage", 16384)

    def fits(t: Tile) -> bool:
        return t.threads <= max_wg and (t.bm + t.bn) * t.bk * elem <= max_shared

    if name is not None:
        t = TILES[name]
        return t if fits(t) else None
    order = ["large", "medium", "small"]
    if mm.product == DType.float64:
        order = ["medium", "small"]
    for key in order:
        t = TILES[key]
        tiles = mm.batch * -(-mm.m // t.bm) * -(-mm.n // t.bn)
        enough = tiles >= FILL_WORKGROUPS if key != "small" else True
        if fits(t) and enough:
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
    if (
        mm is None
        or (mm.m * mm.n * mm.k * mm.batch < MIN_WORK or min(mm.m, mm.n) < MIN_SIDE)
        and tile is None
    ):
        return None
    # every dtype the shader declares (render's `enable f16;` and f64 come from all of these, not
    # only the product): a float16 operand widened to float32 or an epilogue's cast needs them too
    dtypes = {mm.product, mm.acc, mm.out, mm.a.dtype, mm.b.dtype} | {e.dtype for e in mm.epilogue.nodes()}
    if DType.float16 in dtypes and not getattr(target, "has_f16", False):
        return None
    if DType.float64 in dtypes and not getattr(target, "has_f64", False):
        return None
    t = choose_tile(mm, target, tile)
    if t is None:
        return None
    max_dim = getattr(target, "max_workgroups_per_dim", 65535)
    grid = (-(-mm.n // t.bn), -(-mm.m // t.bm), mm.batch)
    if max(grid) > max_dim:
        return None
    if kernel.nargs + 1 > getattr(target, "max_storage_buffers_per_stage", 8):
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
    product under WGSL_TRAITS) read the always-zero `jc_zero` there. A pass built without it
    compiles, but every dispatch is rejected by wgpu validation ("expects a BindGroup to be set at
    index 1"), reported only at the next read. Decided by the declaration itself, not by the
    helper's name or spelling, so whatever declares group 1 gets it bound."""
    return bytes(16) if _GROUP1.search(code) else None


def render(kernel: Kernel, mm: MatmulShape, t: Tile, exact_subnormals: bool = True) -> str:
    lang = WGSLLanguage(WGSL_TRAITS)
    lang.exact_subnormals = exact_subnormals  # the epilogue's ops (the inner products are fma)
    epi = legalize(mm.epilogue, WGSL_TRAITS)
    uses_f64 = DType.float64 in {mm.product, mm.acc, mm.out} | {n.dtype for n in epi.nodes()}
    uses_f16 = DType.float16 in {mm.product, mm.a.dtype, mm.b.dtype, mm.out} | {n.dtype for n in epi.nodes()}
    lang.features = {"f64"} if uses_f64 else set()
    P = lang.type_name(mm.product)
    ACC = lang.type_name(mm.acc)
    wx, wy = t.bn // t.tn, t.bm // t.tm
    nt = wx * wy
    av, bv = t.tm // 4, t.tn // 4

    # Which inputs the epilogue reads (they must stay scalar arrays), and each one's dtype.
    epi_reads: dict[int, DType] = {}
    for node in epi.nodes():
        if node.op == AluOp.GlobalIndex:
            epi_reads[node.arg[0]] = node.dtype
    ma, mb = _vec_mode(mm.a, mm.m, mm.k), _vec_mode(mm.b, mm.n, mm.k)
    # A buffer is bound as vec4 only when every read of it is a vec4 slab load.
    scalar = set(epi_reads) | {op.gid for op, mode in ((mm.a, ma), (mm.b, mb)) if mode == "s"}
    ma = "s" if mm.a.gid in scalar else ma
    mb = "s" if mm.b.gid in scalar else mb

    vec_out = mm.n % 4 == 0  # each thread's 4 adjacent columns are one aligned vec4 store
    out_elem = f"vec4<{lang.storage_type(mm.out)}>" if vec_out else lang.storage_type(mm.out)
    L: list[str] = []
    w = L.append
    if uses_f16:
        w("enable f16;")
    vec_in = set()
    if ma != "s":
        vec_in.add(mm.a.gid)
    if mb != "s":
        vec_in.add(mm.b.gid)
    dtypes = {mm.a.gid: mm.a.dtype, mm.b.gid: mm.b.dtype, **epi_reads}
    for g in range(kernel.nargs):
        dt = dtypes.get(g, DType.uint32)
        ty = lang.storage_type(dt)
        ty = f"vec4<{ty}>" if g in vec_in else ty
        w(f"@group(0) @binding({g}) var<storage, read> in{g}: array<{ty}>;")
    w(f"@group(0) @binding({kernel.nargs}) var<storage, read_write> out0: array<{out_elem}>;")
    w(f"var<workgroup> As: array<vec4<{P}>, {t.bk * t.bm // 4}>;")
    w(f"var<workgroup> Bs: array<vec4<{P}>, {t.bk * t.bn // 4}>;")

    # The epilogue, as a function of the sum and the output index.
    r = ExpRenderer(lang)
    r.count(epi)
    val = r.render(epi)
    body = "".join(f"  {ln}\n" for ln in r.lines)
    epi_fn = (
        f"fn jc_epi(acc: {ACC}, gidx: i32) -> {lang.storage_type(mm.out)} {{\n{body}"
        f"  return {lang.store_value(r, mm.out, val)};\n}}"
    )
    helpers = lang.render_helpers(r.used_helpers)
    if helpers:
        w(helpers)
    w(epi_fn)

    M, N, K = mm.m, mm.n, mm.k
    w(f"@compute @workgroup_size({wx}, {wy}, 1)")
    w(
        "fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,"
        " @builtin(local_invocation_index) tidu: u32) {"
    )
    for g in range(kernel.nargs):
        w(f"  _ = &in{g};")
    w("  let tid = i32(tidu); let tx = i32(lid.x); let ty = i32(lid.y);")
    w(f"  let m0 = i32(wid.y) * {t.bm}; let n0 = i32(wid.x) * {t.bn}; let bb = i32(wid.z);")

    # ---- slab loaders: per operand, the register loads (`load`) and the shared stores (`put`)
    def loader(op: Operand, mode: str, is_a: bool) -> tuple[list[str], list[str], list[str]]:
        """(setup lines, load lines (k0 is the slab start), store lines) for one operand."""
        name = "a" if is_a else "b"
        outer_tile = t.bm if is_a else t.bn
        outer_dim = M if is_a else N
        o0 = "m0" if is_a else "n0"
        sh = "As" if is_a else "Bs"
        src = f"in{op.gid}"
        conv = (lambda x: x) if op.dtype == mm.product else (lambda x: f"{P}({x})")
        vconv = (lambda x: x) if op.dtype == mm.product else (lambda x: f"vec4<{P}>({x})")
        setup: list[str] = []
        load, put = [], []
        base = f"({op.base} + bb * {op.s_batch})"
        full_outer, full_k = outer_dim % outer_tile == 0, K % t.bk == 0

        def trim(ok: str) -> str:
            """Drop the bound checks that whole tiles make true (the common aligned case)."""
            keep = []
            for term in ok.split(" && "):
                if term.endswith(f"g{u}") and f"{name}g{u} = true;" in "".join(setup):
                    continue
                if full_outer and term.startswith(o0):
                    continue
                if full_k and term.startswith("KSLAB"):
                    continue
                keep.append(term)
            return " && ".join(keep) or "true"

        if mode == "s":
            n_el = outer_tile * t.bk
            per = -(-n_el // nt)
            k_fast = op.s_k == 1
            for u in range(per):
                e = f"(tid + {u * nt})"
                guard = f"{e} < {n_el}" if n_el % nt else "true"
                if k_fast:
                    o, kk = f"({e} / {t.bk})", f"({e} % {t.bk})"
                else:
                    o, kk = f"({e} % {outer_tile})", f"({e} / {outer_tile})"
                setup.append(f"  let {name}o{u} = {o}; let {name}k{u} = {kk}; let {name}g{u} = {guard};")
                setup.append(f"  var r{name}{u}: {P} = {P}(0);")
                ok = f"{name}g{u} && {o0} + {name}o{u} < {outer_dim} && KSLAB + {name}k{u} < {K}"
                idx = f"{base} + ({o0} + {name}o{u}) * {op.s_outer} + (KSLAB + {name}k{u}) * {op.s_k}"
                load.append(
                    f"    r{name}{u} = {P}(0); if ({trim(ok)}) {{ r{name}{u} = {conv(f'{src}[{idx}]')}; }}"
                )
                put.append(
                    f"    if ({name}g{u}) {{ "
                    f"{sh}[{name}k{u} * {outer_tile // 4} + {name}o{u} / 4][{name}o{u} % 4]"
                    f" = r{name}{u}; }}"
                )
            return setup, load, put
        n_vec = outer_tile * t.bk // 4
        per = -(-n_vec // nt)
        for u in range(per):
            e = f"(tid + {u * nt})"
            guard = f"{e} < {n_vec}" if n_vec % nt else "true"
            setup.append(f"  var r{name}{u}: vec4<{P}> = vec4<{P}>(0);")
            if mode == "k4":  # vec4 along k: unit = (outer o, k quad q)
                setup.append(
                    f"  let {name}o{u} = {e} / {t.bk // 4}; let {name}q{u} = {e} % {t.bk // 4};"
                    f" let {name}g{u} = {guard};"
                )
                ok = f"{name}g{u} && {o0} + {name}o{u} < {outer_dim} && KSLAB + {name}q{u} * 4 < {K}"
                idx = f"({base} + ({o0} + {name}o{u}) * {op.s_outer}) / 4 + KSLAB / 4 + {name}q{u}"
                load.append(
                    f"    r{name}{u} = vec4<{P}>(0); "
                    f"if ({trim(ok)}) {{ r{name}{u} = {vconv(f'{src}[{idx}]')}; }}"
                )
                put.append(f"    if ({name}g{u}) {{")
                for c, comp in enumerate("xyzw"):
                    put.append(
                        f"      {sh}[({name}q{u} * 4 + {c}) * {outer_tile // 4} + {name}o{u} / 4]"
                        f"[{name}o{u} % 4] = r{name}{u}.{comp};"
                    )
                put.append("    }")
            else:  # "o4": vec4 along m/n: unit = (k, outer quad q)
                setup.append(
                    f"  let {name}k{u} = {e} / {outer_tile // 4}; let {name}q{u} = {e} % {outer_tile // 4};"
                    f" let {name}g{u} = {guard};"
                )
                ok = f"{name}g{u} && {o0} + {name}q{u} * 4 < {outer_dim} && KSLAB + {name}k{u} < {K}"
                idx = f"({base} + (KSLAB + {name}k{u}) * {op.s_k}) / 4 + {o0} / 4 + {name}q{u}"
                load.append(
                    f"    r{name}{u} = vec4<{P}>(0); "
                    f"if ({trim(ok)}) {{ r{name}{u} = {vconv(f'{src}[{idx}]')}; }}"
                )
                put.append(
                    f"    if ({name}g{u}) {{ "
                    f"{sh}[{name}k{u} * {outer_tile // 4} + {name}q{u}] = r{name}{u}; }}"
                )
        return setup, load, put

    sa, la, pa = loader(mm.a, ma, True)
    sb, lb, pb = loader(mm.b, mb, False)
    L += sa + sb
    for rr in range(t.tm):
        for h in range(bv):
            w(f"  var c{rr}_{h}: vec4<{ACC}> = vec4<{ACC}>(0);")
    w("  var k0 = 0;")
    L += [ln[2:].replace("KSLAB", "k0") for ln in la + lb]
    w(f"  for (; k0 < {K}; k0 = k0 + {t.bk}) {{")
    L += pa + pb
    w("    workgroupBarrier();")
    w(f"    if (k0 + {t.bk} < {K}) {{")
    w(f"      let k1 = k0 + {t.bk};")
    L += ["  " + ln.replace("KSLAB", "k1") for ln in la + lb]
    w("    }")
    fused = mm.product == mm.acc
    for k in range(t.bk):
        for v in range(av):
            w(f"    let a{v}_{k} = As[{k * t.bm // 4 + v * wy} + ty];")
        for v in range(bv):
            w(f"    let b{v}_{k} = Bs[{k * t.bn // 4 + v * wx} + tx];")
        for rr in range(t.tm):
            v, comp = divmod(rr, 4)
            for h in range(bv):
                a = f"vec4<{P}>(a{v}_{k}.{'xyzw'[comp]})"
                if fused:
                    w(f"    c{rr}_{h} = fma({a}, b{h}_{k}, c{rr}_{h});")
                else:
                    w(f"    c{rr}_{h} = c{rr}_{h} + vec4<{ACC}>({a} * b{h}_{k});")
    w("    workgroupBarrier();")
    w("  }")
    # ---- stores: row m0 + 4*(v*wy + ty) + c, columns n0 + 4*(h*wx + tx) + j
    w(f"  let cb = bb * {M * N};")
    for rr in range(t.tm):
        v, comp = divmod(rr, 4)
        w(f"  {{ let row = m0 + {4 * v * wy} + ty * 4 + {comp};")
        w(f"    if ({'true' if M % t.bm == 0 else f'row < {M}'}) {{")
        col_ok = "true" if N % t.bn == 0 else f"col < {N}"
        for h in range(bv):
            if vec_out:
                w(f"      {{ let col = n0 + {4 * h * wx} + tx * 4;")
                c = f"c{rr}_{h}"
                vals = ", ".join(f"jc_epi({c}.{cj}, g + {j})" for j, cj in enumerate("xyzw"))
                store = (
                    f"let g = cb + row * {N} + col; out0[g / 4] = vec4<{lang.storage_type(mm.out)}>({vals});"
                )
                w(f"        if ({col_ok}) {{ {store} }} }}")
                continue
            for j, cj in enumerate("xyzw"):
                w(f"      {{ let col = n0 + {4 * h * wx} + tx * 4 + {j};")
                store = f"let g = cb + row * {N} + col; out0[g] = jc_epi(c{rr}_{h}.{cj}, g);"
                w(f"        if ({col_ok}) {{ {store} }} }}")
        w("    }")
        w("  }")
    w("}")
    return "\n".join(L) + "\n"


__all__ = ["MIN_WORK", "TILES", "Tile", "choose_tile", "plan_matmul", "render", "zero_uniform"]
