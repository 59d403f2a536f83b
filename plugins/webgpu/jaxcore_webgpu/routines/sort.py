"""Sort and stable Argsort along the last axis over order-preserving u32 keys: a bitonic network
for rows shorter than `WgslTarget.radix_sort_from` (`RADIX_MIN` on CPU adapters, `RADIX_MIN_GPU`
on GPUs), a stable LSD radix sort (`_radix`) from there.

Each row is padded to the next power of two P with keys that sort last. Values become u32 keys
whose unsigned order is the contract's order (floats: sign-magnitude flipped, every NaN the
largest key; Sort keeps -0 below +0, Argsort ties them). Argsort sorts (key, index) pairs, the
index breaking ties, which makes the unstable network stable; its values are gathered from the
input by index, bit for bit. float64 keys need 64-bit bit access that naga lacks, so float64 is
undeclared.
"""

from __future__ import annotations

from jaxcore.dtype import DType, is_float
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
    main,
    outp,
    scratch,
    storage,
    u32s,
    uniform_block,
    wgsl_type,
)

MULTI = 4  # partner distances handled per global pass (16 keys per thread in registers)
LOCAL = 1024  # threads of a workgroup-memory stage at most (2*LOCAL keys), within the adapter's limits

_UNI = uniform_block("k", "j")


def _key(dtype: DType, x: str, fold_zero: bool) -> tuple[str, str]:
    """The u32 key of `x` and the WGSL helper it calls (or "")."""
    if dtype == DType.uint32:
        return x, ""
    if not is_float(dtype):
        return f"(bitcast<u32>({x}) ^ 0x80000000u)", ""
    f = f"f32({x})" if dtype == DType.float16 else x
    fz = "if ((b & 0x7fffffffu) == 0u) { b = 0u; }" if fold_zero else ""
    return (
        f"jc_key({f})",
        "fn jc_key(x: f32) -> u32 {\n  var b = bitcast<u32>(x);\n"
        f"  {fz}\n  if ((b & 0x7fffffffu) > 0x7f800000u) {{ return 0xffffffffu; }}\n"
        "  return select(b | 0x80000000u, ~b, b >= 0x80000000u);\n}\n",
    )


def _unkey(dtype: DType, k: str) -> str:
    if dtype == DType.uint32:
        return k
    if not is_float(dtype):
        return f"bitcast<i32>({k} ^ 0x80000000u)"
    bits = f"select(~{k}, {k} ^ 0x80000000u, {k} >= 0x80000000u)"
    v = f"bitcast<f32>({bits})"
    return f"f16({v})" if dtype == DType.float16 else v


def plan_sort(routine: Routine, target: object = None) -> Plan:
    argsort = routine.name == Routines.Argsort
    dtype, (n,), batch = routine.type.operand(0, 1)
    if n == 0 or batch == 0:
        return Plan(())
    radix_from = getattr(target, "radix_sort_from", 0)
    if radix_from and n >= radix_from:
        return _radix(dtype, batch, n, argsort)
    p = 1 << max(n - 1, 0).bit_length()
    kb = max(16, batch * p * 4)
    work = [scratch("K", "u32", 0), scratch("I", "u32", 1)] if argsort else [scratch("K", "u32", 0)]
    # init: keys (and indices) of every padded position
    kx, fn = _key(dtype, f"in0[row * {n}u + c]", argsort)
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


def _final(
    dtype: DType, argsort: bool, threads: int, work: list[Buf], at: str, row: str, pre: str = ""
) -> Pass:
    """The output from the sorted keys `K[at]`, or Argsort's indices `I[at]` and the input at them
    (`row`: the row's first input element)."""
    ty = wgsl_type(dtype)
    if argsort:
        body = f"  let idx = I[{at}];\n  out1[gid] = i32(idx);\n  out0[gid] = in0[{row} + idx];\n"
    else:
        body = f"  let key = K[{at}];\n  out0[gid] = {_unkey(dtype, 'key')};\n"
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


# ---- Argsort of long rows: a stable LSD radix sort ------------------------------------------------

# Row lengths from which the radix sort beats the bitonic network (WgslTarget.radix_sort_from): on
# a CPU adapter 8192 (lavapipe: 65536 keys 129 -> 25 ms); on a GPU never (0), until we know why two
# H100 runs of the same plans disagree: 16M keys in 3.11 ms (argsort 5.48) against the network's
# 4.25 in one, 14.9 (18.4) against 3.93 in the other, slower from 1M up (8M argsort 8.97 vs 3.24).
RADIX_MIN = 1 << 13
RADIX_MIN_GPU = 0
RT = 128  # threads of a radix block
RK = 16  # keys per thread, contiguous (the block's order is the input's: the sort stays stable)
RB = RT * RK  # keys per block (a row is cut into blocks, none straddles two rows)
DIGITS = 16  # 4-bit digits: 8 passes, and 16 * RT counters fit 16 KiB of workgroup memory
_SCAN = 256  # threads of an offset-scan workgroup
_PER = 4  # counts a thread of it scans
_CHUNK = _SCAN * _PER  # counts a workgroup scans (a row's DIGITS * blocks are cut into chunks)


def _radix(dtype: DType, batch: int, n: int, argsort: bool) -> Plan:
    """Eight stable counting-sort passes over 4-bit digits of the keys (and their indices).

    The bitonic network moves every key log2(n)^2 / 2 times; this moves it eight times. Each pass:
    `_histogram` counts the digits of every block (H[row][digit][block]), `_chunk_sums` and
    `_offsets` turn a row's counts into exclusive offsets in (digit, block) order (a scan over
    many workgroups: one a row was a serial loop that took most of the sort's time), and `_rank`
    ranks each block's keys (per thread counts, a workgroup scan in (digit, thread) order: equal
    digits keep their input order) and writes them at their offsets. Argsort's ties (and -0 with
    +0, NaN with NaN: one key each) keep the input order because every pass is stable."""
    bpr = -(-n // RB)  # blocks per row
    nc = -(-DIGITS * bpr // _CHUNK)  # offset-scan chunks per row
    kb, hb, tb = max(16, batch * n * 4), max(16, batch * DIGITS * bpr * 4), max(16, batch * nc * 4)
    # scratch: keys and indices, twice (ping-pong), H, then the chunk totals T; Sort has no indices
    sizes = (kb, kb, kb, kb, hb, tb) if argsort else (kb, kb, hb, tb)
    k0, i0, k1, i1, h = (0, 1, 2, 3, 4) if argsort else (0, -1, 1, -1, 2)
    tot = h + 1
    work = [scratch("K", "u32", k0), scratch("I", "u32", i0)] if argsort else [scratch("K", "u32", k0)]
    kx, fn = _key(dtype, "in0[gid]", argsort)
    body = f"  K[gid] = {kx};\n" + (f"  I[gid] = gid % {n}u;\n" if argsort else "")
    passes = [elementwise_pass([inp(0, wgsl_type(dtype)), *work], body, batch * n, header([dtype]), fn)]
    grid = fold(batch * bpr)
    hcode, xcode = _histogram(n, batch, bpr), _rank(n, batch, bpr, argsort)
    tcode, scode = _chunk_sums(batch, bpr, nc), _offsets(batch, bpr, nc)
    for p in range(32 // 4):
        (ks, is_), (kd, id_) = ((k0, i0), (k1, i1)) if p % 2 == 0 else ((k1, i1), (k0, i0))
        uniform = u32s(4 * p)
        passes.append(Pass(hcode, grid, (("scratch", ks), ("scratch", h)), uniform=uniform))
        if nc > 1:
            passes.append(Pass(tcode, fold(batch * nc), (("scratch", h), ("scratch", tot))))
        passes.append(Pass(scode, fold(batch * nc), (("scratch", h), ("scratch", tot))))
        moved = [ks, is_, kd, id_, h] if argsort else [ks, kd, h]
        passes.append(Pass(xcode, grid, tuple(("scratch", w) for w in moved), uniform=uniform))
    # eight passes (even): the keys are back in K0 (and I0)
    passes.append(_final(dtype, argsort, batch * n, work[-1:], "gid", f"(gid / {n}u) * {n}u"))
    return Plan(tuple(passes), sizes)


_RADIX_UNI = uniform_block("shift")


def _block(n: int, batch: int, bpr: int) -> str:
    """WGSL: a radix block's `row`, `blk`, this thread's first key `start`, and digit counts `c`."""
    return (
        f"  if (wgi >= {batch * bpr}u) {{ return; }}\n"
        f"  let row = wgi / {bpr}u; let blk = wgi % {bpr}u;\n"
        f"  let start = blk * {RB}u + lid * {RK}u; let base = row * {n}u;\n"
        f"  var c: array<u32, {DIGITS}>;\n"
    )


def _histogram(n: int, batch: int, bpr: int) -> str:
    """H[row][digit][block]: how many keys of each block have each digit."""
    mask = DIGITS - 1
    hist = (
        f"  if (lid < {DIGITS}u) {{ atomicStore(&cnt[lid], 0u); }}\n"
        "  workgroupBarrier();\n"
        f"  for (var i = 0u; i < {RK}u; i = i + 1u) {{\n"
        f"    if (start + i < {n}u) {{\n"
        f"      let d = (K[base + start + i] >> u.shift) & {mask}u; c[d] = c[d] + 1u;\n"
        "    }\n  }\n"
        f"  for (var d = 0u; d < {DIGITS}u; d = d + 1u) {{\n"
        "    if (c[d] != 0u) { atomicAdd(&cnt[d], c[d]); }\n  }\n"
        "  workgroupBarrier();\n"
        f"  if (lid < {DIGITS}u) {{ H[(row * {DIGITS}u + lid) * {bpr}u + blk] = atomicLoad(&cnt[lid]); }}"
    )
    code = storage(0, "K", "u32", True) + "\n" + storage(1, "H", "u32", False) + "\n" + _RADIX_UNI
    code += f"var<workgroup> cnt: array<atomic<u32>, {DIGITS}>;\n"
    return code + main(RT, fold(batch * bpr), ["K", "H"], _block(n, batch, bpr) + hist)


def _chunk(batch: int, bpr: int, nc: int) -> str:
    """WGSL: this workgroup's `row` and chunk `ch` of H, and `s`, the sum of this thread's
    `_PER` counts `v` (consecutive, so a workgroup reads its chunk in one sweep)."""
    m = DIGITS * bpr  # counts per row
    return (
        f"  if (wgi >= {batch * nc}u) {{ return; }}\n"
        f"  let row = wgi / {nc}u; let ch = wgi % {nc}u;\n"
        f"  let lo = ch * {_CHUNK}u + lid * {_PER}u; let base = row * {m}u;\n"
        f"  var v: array<u32, {_PER}>;\n  var s = 0u;\n"
        f"  for (var i = 0u; i < {_PER}u; i = i + 1u) {{\n"
        f"    if (lo + i < {m}u) {{ v[i] = H[base + lo + i]; s = s + v[i]; }}\n  }}\n"
    )


def _chunk_sums(batch: int, bpr: int, nc: int) -> str:
    """T[row][chunk]: the total of each chunk of a row's counts."""
    body = _chunk(batch, bpr, nc) + _inclusive_scan("sums", _SCAN, "s")
    body += f"  if (lid == {_SCAN - 1}u) {{ T[wgi] = sums[lid]; }}"
    return _scan_shader(batch * nc, body, writes_h=False)


def _offsets(batch: int, bpr: int, nc: int) -> str:
    """A row's counts H become exclusive offsets in (digit, block) order: each chunk adds the
    totals of the row's earlier chunks (T) to its own scan."""
    m = DIGITS * bpr
    body = (
        _chunk(batch, bpr, nc)
        + "  var before = 0u;\n"
        + f"  for (var c = lid; c < ch; c = c + {_SCAN}u) {{ before = before + T[row * {nc}u + c]; }}\n"
        + _inclusive_scan("sums", _SCAN, "before")
        + f"  let head = sums[{_SCAN - 1}u];\n  workgroupBarrier();\n"
        + _inclusive_scan("sums", _SCAN, "s")
        + "  var run = head + sums[lid] - s;\n"
        f"  for (var i = 0u; i < {_PER}u; i = i + 1u) {{\n"
        f"    if (lo + i < {m}u) {{ H[base + lo + i] = run; run = run + v[i]; }}\n  }}"
    )
    return _scan_shader(batch * nc, body, writes_h=True)


def _scan_shader(groups: int, body: str, writes_h: bool) -> str:
    """An offset-scan shader over H (counts) and T (chunk totals): the one it writes is read_write."""
    code = storage(0, "H", "u32", not writes_h) + "\n" + storage(1, "T", "u32", writes_h) + "\n"
    code += f"var<workgroup> sums: array<u32, {_SCAN}>;\n"
    return code + main(_SCAN, fold(groups), ["H", "T"], body)


def _rank(n: int, batch: int, bpr: int, argsort: bool) -> str:
    """Each block's keys (and indices) moved to their offsets, equal digits in input order."""
    mask = DIGITS - 1
    move_i = " Iout[dst] = Iin[base + start + i];" if argsort else ""
    rank = (
        f"  var ks: array<u32, {RK}>;\n"
        f"  for (var i = 0u; i < {RK}u; i = i + 1u) {{\n"
        f"    if (start + i < {n}u) {{\n"
        f"      let k = Kin[base + start + i]; ks[i] = k;\n"
        f"      let d = (k >> u.shift) & {mask}u; c[d] = c[d] + 1u;\n"
        "    }\n  }\n"
        f"  for (var d = 0u; d < {DIGITS}u; d = d + 1u) {{ S[d * {RT}u + lid] = c[d]; }}\n"
        "  workgroupBarrier();\n"
        # S in (digit, thread) order, DIGITS entries a thread: an exclusive scan
        "  var s = 0u;\n"
        f"  for (var i = 0u; i < {DIGITS}u; i = i + 1u) {{ s = s + S[lid * {DIGITS}u + i]; }}\n"
        + _inclusive_scan("sums", RT, "s")
        + "  var run = sums[lid] - s;\n"
        f"  for (var i = 0u; i < {DIGITS}u; i = i + 1u) {{\n"
        f"    let v = S[lid * {DIGITS}u + i]; S[lid * {DIGITS}u + i] = run; run = run + v;\n  }}\n"
        "  workgroupBarrier();\n"
        f"  if (lid < {DIGITS}u) {{\n"
        f"    bb[lid] = H[(row * {DIGITS}u + lid) * {bpr}u + blk] - S[lid * {RT}u];\n  }}\n"
        "  workgroupBarrier();\n"
        f"  for (var d = 0u; d < {DIGITS}u; d = d + 1u) {{ c[d] = S[d * {RT}u + lid] + bb[d]; }}\n"
        f"  for (var i = 0u; i < {RK}u; i = i + 1u) {{\n"
        f"    if (start + i < {n}u) {{\n"
        f"      let k = ks[i]; let d = (k >> u.shift) & {mask}u; let dst = base + c[d]; c[d] = c[d] + 1u;\n"
        f"      Kout[dst] = k;{move_i}\n"
        "    }\n  }"
    )
    bufs = ["Kin", "Iin", "Kout", "Iout", "H"] if argsort else ["Kin", "Kout", "H"]
    code = (
        "".join(storage(b, name, "u32", not name.endswith("out")) + "\n" for b, name in enumerate(bufs))
        + _RADIX_UNI
        + f"var<workgroup> S: array<u32, {DIGITS * RT}>;\nvar<workgroup> sums: array<u32, {RT}>;\n"
    )
    code += f"var<workgroup> bb: array<u32, {DIGITS}>;\n"
    return code + main(RT, fold(batch * bpr), bufs, _block(n, batch, bpr) + rank)


def _inclusive_scan(arr: str, size: int, v: str) -> str:
    """WGSL: `arr[lid]` becomes the inclusive prefix sum of every thread's `v` (Hillis-Steele)."""
    return (
        f"  {arr}[lid] = {v};\n  workgroupBarrier();\n"
        f"  for (var o = 1u; o < {size}u; o = o << 1u) {{\n"
        f"    var t = 0u;\n    if (lid >= o) {{ t = {arr}[lid - o]; }}\n"
        f"    workgroupBarrier();\n    {arr}[lid] = {arr}[lid] + t;\n    workgroupBarrier();\n  }}\n"
    )
