"""Sort and stable Argsort along the last axis over order-preserving u32 keys (`keys`): a bitonic
network for rows shorter than `WgslTarget.radix_sort_from` (`radix.RADIX_MIN` on CPU adapters,
`radix.RADIX_MIN_GPU` on GPUs), the radix sort (`radix`) from there.

Each row is padded to the next power of two P with keys that sort last. Argsort sorts (key,
index) pairs, the index breaking ties, which makes the unstable network stable; its values are
gathered from the input by index, bit for bit. float64 keys need 64-bit bit access that naga
lacks, so float64 is undeclared.
"""

from __future__ import annotations

from jaxcore.dtype import DType
from jaxcore.routine import Routine, Routines
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.routines.common import (
    Buf,
    declare,
    elementwise_pass,
    entry,
    fold,
    header,
    inp,
    outp,
    scratch,
    u32s,
    uniform_block,
    wgsl_type,
)
from jaxcore_webgpu.routines.keys import sort_key, sort_value
from jaxcore_webgpu.routines.radix import MIN_LANES, plan_radix

MULTI = 4  # partner distances handled per global pass (16 keys per thread in registers)
LOCAL = 1024  # threads of a workgroup-memory stage at most (2*LOCAL keys), within the adapter's limits

_UNI = uniform_block("k", "j")


def plan_sort(routine: Routine, target: object = None) -> Plan:
    argsort = routine.name == Routines.Argsort
    dtype, (n,), batch = routine.type.operand(0, 1)
    if n == 0 or batch == 0:
        return Plan(())
    radix_from = getattr(target, "radix_sort_from", 0)
    if radix_from and n >= radix_from:
        keys = getattr(target, "radix_keys_per_thread", 8)
        storage = getattr(target, "max_workgroup_storage", 16384)
        match = getattr(target, "radix_match", False) and getattr(target, "subgroup_size", 0) >= MIN_LANES
        tiles = getattr(target, "radix_tiles_per_block", 1)
        return plan_radix(dtype, batch, n, argsort, keys, storage, match, tiles)
    p = 1 << max(n - 1, 0).bit_length()
    kb = max(16, batch * p * 4)
    work = [scratch("K", "u32", 0), scratch("I", "u32", 1)] if argsort else [scratch("K", "u32", 0)]
    # init: keys (and indices) of every padded position
    kx, fn = sort_key(dtype, f"in0[row * {n}u + c]", argsort)
    body = (
        f"  let row = gid / {p}u; let c = gid % {p}u;\n"
        f"  var key = 0xffffffffu;\n  if (c < {n}u) {{ key = {kx}; }}\n  K[gid] = key;\n"
        + ("  I[gid] = c;\n" if argsort else "")
    )
    passes = [elementwise_pass([inp(0, wgsl_type(dtype)), *work], body, batch * p, header([dtype]), fn)]
    if p >= 2:
        passes += _network(work, p, batch, argsort, target)
    # final: the first n of each padded row
    row = f"  let row = gid / {n}u; let c = gid % {n}u;\n"
    passes.append(_final(dtype, argsort, batch * n, work, f"row * {p}u + c", f"row * {n}u", row))
    return Plan(tuple(passes), (kb, kb) if argsort else (kb,))


def _final(dtype: DType, argsort: bool, threads: int, work: list[Buf], at: str, row: str, pre: str) -> Pass:
    """The output from the sorted keys `K[at]`, or Argsort's indices `I[at]` and the input at them
    (`row`: the row's first input element; `pre`: WGSL that defines what `at` and `row` use)."""
    ty = wgsl_type(dtype)
    if argsort:
        body = f"  let idx = I[{at}];\n  out1[gid] = i32(idx);\n  out0[gid] = in0[{row} + idx];\n"
    else:
        body = f"  let key = K[{at}];\n  out0[gid] = {sort_value(dtype, 'key')};\n"
    outs = [outp(0, ty), outp(1, "i32")] if argsort else [outp(0, ty)]
    return elementwise_pass([inp(0, ty), *outs, *work], pre + body, threads, header([dtype]))


def _compare_swap(keys: str, idx: str, ind: str, argsort: bool) -> str:
    """WGSL: put `keys[i]` and `keys[l]` (and their indices) in the order `asc` says."""
    gt = "(ka > kb) || (ka == kb && ia > ib)" if argsort else "ka > kb"
    ia = f"let ia = {idx}[i]; let ib = {idx}[l];" if argsort else "let ia = 0u; let ib = 0u;"
    swap_i = f"{ind}  {idx}[i] = ib; {idx}[l] = ia;\n" if argsort else ""
    return (
        f"{ind}let ka = {keys}[i]; let kb = {keys}[l];\n{ind}{ia}\n"
        f"{ind}if (({gt}) == asc) {{\n{ind}  {keys}[i] = kb; {keys}[l] = ka;\n{swap_i}{ind}}}\n"
    )


def _network(work: list[Buf], p: int, batch: int, argsort: bool, target: object) -> list[Pass]:
    """The bitonic stages over rows of p keys: those whose partner distance fits a block of 2t
    keys run in workgroup memory, in one dispatch (the first sorts every block outright); wider
    ones take a global pass for up to MULTI distances."""
    max_wg = getattr(target, "max_workgroup_size", 256)
    shared = getattr(target, "max_workgroup_storage", 16384)
    t = min(LOCAL, max_wg, shared // (16 if argsort else 8), p // 2)
    t = 1 << (t.bit_length() - 1)
    blk = 2 * t
    lcode, grid = _local(work, p, t, batch, argsort)

    def local(k_lo: int, k_hi: int) -> Pass:
        return Pass(lcode, grid, tuple(b.binding for b in work), uniform=u32s(k_lo, k_hi))

    def step(k: int, j: int, levels: int) -> Pass:
        if levels > 1:
            body = _multi_body(p, argsort, levels)
        else:
            body = (
                "  let j = u.j; let k = u.k;\n"
                "  let i = ((gid & ~(j - 1u)) << 1u) | (gid & (j - 1u)); let l = i + j;\n"
                f"  let asc = ((i & {p - 1}u) & k) == 0u;\n" + _compare_swap("K", "I", "  ", argsort)
            )
        return elementwise_pass(work, body, batch * p >> levels, tail=_UNI, uniform=u32s(k, j))

    passes = [local(2, min(blk, p))]
    k = 2 * blk
    while k <= p:
        j = k // 2
        while j >= blk:
            levels = min(MULTI, (j // blk).bit_length())
            passes.append(step(k, j, levels))
            j >>= levels
        passes.append(local(k, k))
        k *= 2
    return passes


def _local(work: list[Buf], p: int, t: int, batch: int, argsort: bool) -> tuple[str, tuple[int, int, int]]:
    """The workgroup-memory stages of a block of 2t keys: k from u.k to u.j (doubling), j from
    min(k/2, t) down to 1. Its WGSL and grid."""
    blk = 2 * t
    n_blocks = batch * p // blk
    grid = fold(n_blocks)
    pairs = [("sk", "K"), ("si", "I")][: len(work)]
    code = (
        declare(work)
        + _UNI
        + "".join(f"var<workgroup> {s}: array<u32, {blk}>;\n" for s, _ in pairs)
        + entry(t, [b.name for b in work])
        + f"  let wgi = wid.x + wid.y * {grid[0]}u;\n"
        + f"  if (wgi >= {n_blocks}u) {{ return; }}\n"
        + f"  let base = wgi * {blk}u;\n"
        + "".join(
            f"  {s}[lid] = {g}[base + lid]; {s}[lid + {t}u] = {g}[base + lid + {t}u];\n" for s, g in pairs
        )
        + "  workgroupBarrier();\n"
        + "  for (var k = u.k; k <= u.j; k = k << 1u) {\n"
        + f"    for (var j = min(k >> 1u, {t}u); j > 0u; j = j >> 1u) {{\n"
        + "      let i = ((lid & ~(j - 1u)) << 1u) | (lid & (j - 1u)); let l = i + j;\n"
        + f"      let asc = (((base + i) & {p - 1}u) & k) == 0u;\n"
        + _compare_swap("sk", "si", "      ", argsort)
        + "      workgroupBarrier();\n    }\n  }\n"
        + "".join(
            f"  {g}[base + lid] = {s}[lid]; {g}[base + lid + {t}u] = {s}[lid + {t}u];\n" for s, g in pairs
        )
        + "}\n"
    )
    return code, grid


def _multi_body(p: int, argsort: bool, levels: int) -> str:
    """Distances j, j/2, .. j/2^(levels-1) in one pass: 2^levels keys per thread in registers."""
    ne = 1 << levels
    lines = ["  let j = u.j; let k = u.k; let hb = countTrailingZeros(j);", "  var i = gid;"]
    for b in range(levels):
        q: str | int = f"(hb - {levels - 1 - b}u)"  # (an int shift count below)
        lines.append(f"  {{ let q = {q}; i = ((i >> q) << (q + 1u)) | (i & ((1u << q) - 1u)); }}")
    lines.append(f"  let asc = ((i & {p - 1}u) & k) == 0u;")
    offs = []
    for e in range(ne):
        terms = [f"(j >> {levels - 1 - q}u)" for q in range(levels) if e >> q & 1]
        offs.append(" + ".join(terms) if terms else "0u")
        lines.append(f"  var k{e} = K[i + {offs[e]}];")
        if argsort:
            lines.append(f"  var i{e} = I[i + {offs[e]}];")
    for st in range(levels):
        q = levels - 1 - st
        for e in range(ne):
            if e >> q & 1:
                continue
            f = e | (1 << q)
            gt = f"(k{e} > k{f}) || (k{e} == k{f} && i{e} > i{f})" if argsort else f"k{e} > k{f}"
            sw = f"let tk = k{e}; k{e} = k{f}; k{f} = tk;"
            if argsort:
                sw += f" let ti = i{e}; i{e} = i{f}; i{f} = ti;"
            lines.append(f"  if (({gt}) == asc) {{ {sw} }}")
    for e in range(ne):
        lines.append(f"  K[i + {offs[e]}] = k{e};")
        if argsort:
            lines.append(f"  I[i + {offs[e]}] = i{e};")
    return "\n".join(lines) + "\n"
