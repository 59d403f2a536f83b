"""Sort and stable Argsort of long rows: an LSD radix sort over 8-bit digits of u32 keys.

Four passes, each a reduce-then-scan: `_histogram` counts the digits of every block of keys
(H[row][digit][block]), `_chunk_sums` and `_offsets` turn a row's counts into exclusive offsets in
(digit, block) order, and `_scatter` sorts each block by its digit in workgroup memory and writes
it out at those offsets. Global memory is read and written only in order (thread `lid` of a block
takes keys lid, lid + RT, ..), so both are coalesced; the digit's order within a block comes from
two stable 4-bit counting splits in workgroup memory (per-thread counters packed two to a word,
one workgroup scan a split), or, where the adapter's subgroups have at least 8 lanes and 25 KB of
workgroup storage is there, from subgroup match (`_scatter_match`: ballots find the lanes that hold
one digit, so each key's rank comes from one atomic add by the lowest of them). Every step keeps
equal digits in input order, so the sort is stable. With the splits, a workgroup may take several
consecutive blocks (`_tiles`): H then counts per workgroup, and the scatter moves each digit's
place in the row on from one of its blocks to the next.

The first pass reads the input and makes its keys as it goes; the last one writes the outputs
(Sort's values from the keys; Argsort's indices, and its values from the keys but where a key is
no one value's, +0 or NaN, gathered from the input at their index, bit for bit).
Argsort moves a block's (digit, position) pairs through workgroup memory and reads each key and
index again at its position when it writes it (the block's lines are in cache by then).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jaxcore.dtype import DType, is_float
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.routines.common import (
    Buf,
    declare,
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
from jaxcore_webgpu.routines.keys import sort_key, sort_value

# Row lengths from which the radix sort beats the bitonic network (WgslTarget.radix_sort_from): on a
# CPU adapter (lavapipe: 65536 keys 129 ms by the network, 14 by this), and on a GPU, where the
# fixed cost of four passes (about 0.11 ms) loses below 1M keys (H100: 1M 0.164 ms against the
# network's 0.223, 16M 1.65 against 3.9-4.3; at 256K the network's 0.094 beat every variant tried).
RADIX_MIN = 1 << 13
RADIX_MIN_GPU = 1 << 20
RT = 256  # threads of a radix block (the WebGPU default limit; one digit each)
RK = 8  # keys a thread holds, unless the target asks for 16 and has the storage (WgslTarget)
BITS = 8
DIGITS = 1 << BITS  # == RT: a thread per digit where a block's counts are read or written
PASSES = 32 // BITS
_SCAN = 256  # threads of an offset-scan workgroup
_PER = 4  # counts a thread of it scans
_CHUNK = _SCAN * _PER  # counts a workgroup scans (a row's DIGITS * blocks are cut into chunks)
_UNI = uniform_block("shift")
_Z, _LO, _HI = "vec4<u32>(0u)", "vec4<u32>(0u, 1u, 2u, 3u)", "vec4<u32>(4u, 5u, 6u, 7u)"
# a split's counters: value v (0..15) is half v & 1 of word v >> 1 of (c0, c1)
_COUNTERS = (
    "fn jc_one(v: u32, w: vec4<u32>) -> vec4<u32> {\n"
    f"  return select({_Z}, vec4<u32>(1u << ((v & 1u) << 4u)), vec4<u32>(v >> 1u) == w);\n}}\n"
    "fn jc_at(v: u32, o0: vec4<u32>, o1: vec4<u32>) -> u32 {\n"
    "  let w = vec4<u32>(v >> 1u);\n"
    f"  let m = select({_Z}, o0, w == {_LO}) | select({_Z}, o1, w == {_HI});\n"
    "  return ((m.x | m.y | m.z | m.w) >> ((v & 1u) << 4u)) & 0xffffu;\n}\n"
)


@dataclass(frozen=True)
class _Rows:
    """What the shaders are cut to: `batch` rows of `n` keys, blocks of RT threads holding `rk`
    keys each, so `rb` keys a block (two block-sized arrays of workgroup memory) and `bpr` blocks
    a row (none straddles two rows); a workgroup takes `tiles` consecutive blocks of a row, so a
    row is `wpr` workgroups (H has a count per digit and workgroup)."""

    batch: int
    n: int
    rk: int = RK
    tiles: int = 1

    @property
    def wpr(self) -> int:
        return -(-self.bpr // self.tiles)

    @property
    def rb(self) -> int:
        return RT * self.rk

    @property
    def bpr(self) -> int:
        return -(-self.n // self.rb)

    @property
    def swizzle(self) -> str:
        """WGSL `jc_sw`: a block index in workgroup memory, bank-swizzled so that a thread's rk
        consecutive keys, and RT threads' keys at one stride, each hit distinct banks."""
        return f"fn jc_sw(q: u32) -> u32 {{ return q ^ ((q >> 5u) & {self.rk - 1}u); }}\n"


@dataclass(frozen=True)
class _Side:
    """Where a pass reads its keys (and Argsort's indices): buffers and WGSL, `{x}` a flat index."""

    bufs: tuple[Buf, ...]
    key: str  # the key at `{x}`
    idx: str  # Argsort: the row index of the key at block position `pos`
    helper: str = ""


@dataclass(frozen=True)
class _Out:
    """Where `_scatter` puts a block's keys: `store` is WGSL run with `dst` (flat index) and `e`
    (the element moved; Argsort has `k` and `idx` too, read again at its position)."""

    bufs: tuple[Buf, ...]
    store: str
    needs_in0: bool = False  # Argsort's last pass gathers values from the input at their index


def plan_radix(
    dtype: DType,
    batch: int,
    n: int,
    argsort: bool,
    keys_per_thread: int = RK,
    storage: int = 16384,
    match: bool = False,
    tiles: int = 1,
) -> Plan:
    """The passes that sort `batch` rows of `n` values of `dtype` (see the module's docstring):
    `keys_per_thread` 8 or 16, if `storage` bytes of workgroup memory hold its two arrays; with
    `match` (subgroups of at least MIN_LANES lanes), blocks sorted by `_scatter_match` where the storage
    holds it (RK keys a thread); a workgroup of the counting splits' passes takes `tiles`
    consecutive blocks."""
    match = match and MATCH_STORAGE <= storage
    rk = RK if match else keys_per_thread if 2 * 4 * RT * keys_per_thread <= storage else RK
    rows = _Rows(batch, n, rk, 1 if match else max(1, tiles))
    wpr = rows.wpr  # H's counts per digit and row
    nc = -(-DIGITS * wpr // _CHUNK)  # offset-scan chunks per row
    kb, hb, tb = max(16, batch * n * 4), max(16, batch * DIGITS * wpr * 4), max(16, batch * nc * 4)
    ty = wgsl_type(dtype)
    per = 2 if argsort else 1  # scratch buffers a side: keys (and indices), twice; then H and T
    h, tot = Buf("H", "u32", ("scratch", 2 * per)), Buf("T", "u32", ("scratch", 2 * per + 1))
    key, helper = sort_key(dtype, "in0[{x}]", argsort)
    first = _Side((inp(0, ty),), key, "b0 + pos", helper)
    # the two scratch sides, each read as Kin (Iin) and written as Kout (Iout): a pass's WGSL
    # names roles, not buffers, so the middle passes share their pipelines
    sides = [tuple(per * i + j for j in range(per)) for i in (0, 1)]
    reads = [
        _Side(tuple(scratch(f"{n_}in", "u32", b) for n_, b in zip("KI", s)), "Kin[{x}]", "Iin[base + pos]")
        for s in sides
    ]
    blocks = fold(batch * wpr)
    scan = [Pass(_chunk_sums(batch, wpr, nc), fold(batch * nc), (h.binding, tot.binding))] if nc > 1 else []
    scan.append(Pass(_offsets(batch, wpr, nc), fold(batch * nc), (h.binding, tot.binding)))
    passes, src = [], first
    for p in range(PASSES):
        shift = u32s(BITS * p)
        bufs = [src.bufs[0], h]
        code = _histogram(src, bufs, rows, dtype)
        passes.append(Pass(code, blocks, tuple(b.binding for b in bufs), uniform=shift))
        passes += scan
        dst = (p + 1) % 2
        out = _final(dtype, argsort) if p == PASSES - 1 else _moved(sides[dst])
        bufs = [*src.bufs, *([inp(0, ty)] if out.needs_in0 else []), *out.bufs, replace(h, read_only=True)]
        code = (_scatter_match if match else _scatter)(src, out, bufs, rows, argsort, dtype)
        passes.append(Pass(code, blocks, tuple(b.binding for b in bufs), uniform=shift))
        src = reads[dst]
    return Plan(tuple(passes), (kb,) * 2 * per + (hb, tb))


def _moved(side: tuple[int, ...]) -> _Out:
    """A middle pass writes keys (and Argsort's indices) to the other side's scratch buffers."""
    bufs = tuple(scratch(f"{n}out", "u32", b) for n, b in zip("KI", side))
    return _Out(bufs, "Kout[dst] = k; Iout[dst] = idx;" if len(bufs) == 2 else "Kout[dst] = e;")


def _final(dtype: DType, argsort: bool) -> _Out:
    """The last pass writes the outputs: Sort's values, Argsort's indices and values."""
    ty = wgsl_type(dtype)
    if argsort:
        # A value is its key's, but where Argsort's key is not one value's: +0 (-0 folded into
        # it) and NaN (any payload) are gathered from the input at their index, bits and all;
        # float16 always is (its value from a key is a float32 -> float16 conversion, which a
        # driver may flush where a subnormal results; a move keeps it).
        gather = "out0[dst] = in0[rowbase + idx];"
        value = f"out0[dst] = {sort_value(dtype, 'k')};"
        if dtype == DType.float16:
            value = gather
        elif is_float(dtype):
            value = f"if (k == 0x80000000u || k == 0xffffffffu) {{ {gather} }} else {{ {value} }}"
        store = f"out1[dst] = i32(idx); {value}"
        return _Out((outp(0, ty), outp(1, "i32")), store, is_float(dtype))
    return _Out((outp(0, ty),), f"out0[dst] = {sort_value(dtype, 'e')};")


def _block(rows: _Rows) -> str:
    """WGSL: a block's row, its first key `base` (flat) and `b0` (in the row), its key count `nk`;
    with several tiles a workgroup, the workgroup's row and `blk` (see `_tiles` for the rest)."""
    n, bpr, rb = rows.n, rows.bpr, rows.rb
    if rows.tiles > 1:
        wpr = rows.wpr
        return (
            f"  if (wgi >= {rows.batch * wpr}u) {{ return; }}\n"
            f"  let row = wgi / {wpr}u; let blk = wgi % {wpr}u; let rowbase = row * {n}u;\n"
            f"  let hat = (row * {DIGITS}u + lid) * {wpr}u + blk;  // this thread's digit's count in H\n"
        )
    return (
        f"  if (wgi >= {rows.batch * bpr}u) {{ return; }}\n"
        f"  let row = wgi / {bpr}u; let blk = wgi % {bpr}u;\n"
        f"  let b0 = blk * {rb}u; let rowbase = row * {n}u; let base = rowbase + b0;\n"
        f"  let nk = min({rb}u, {n}u - b0);\n"
        f"  let hat = (row * {DIGITS}u + lid) * {bpr}u + blk;  // this thread's digit's count in H\n"
    )


def _tiles(rows: _Rows, body: str) -> str:
    """WGSL: `body` for each of the workgroup's blocks in turn, with its `b0`, `base` and `nk`."""
    n, rb, t = rows.n, rows.rb, rows.tiles
    return (
        f"  for (var tile = blk * {t}u; tile < min(blk * {t}u + {t}u, {rows.bpr}u); tile = tile + 1u) {{\n"
        f"  let b0 = tile * {rb}u; let base = rowbase + b0; let nk = min({rb}u, {n}u - b0);\n"
        f"{body}  }}\n"
    )


# A scatter's thread reads its digit's offset in the row first: the load's latency then passes
# during the block's sort, not after it.
_OFFSET = "  let offset = H[hat];\n"


def _preload(key: str, rk: int) -> str:
    """WGSL: a thread's rk keys k{j}, at block positions q{j}, all read before any is used, so
    their loads can be in flight together (with a load and its use at a time, an H100's
    histograms read keys at about 1 TB/s, a third of its bandwidth); a position past the block's
    end reads the block's last key."""
    return "".join(
        f"  let q{j} = {j * RT}u + lid; let k{j} = {key.format(x=f'base + min(q{j}, nk - 1u)')};\n"
        for j in range(rk)
    )


def _histogram(src: _Side, bufs: list[Buf], rows: _Rows, dtype: DType) -> str:
    """H[row][digit][block]: how many keys of each block have each digit. (Counting into eight
    copies, a copy a warp, to spare a digit most keys share the contention took an H100's
    histograms of 16M keys from 0.25 to 0.32 ms.)"""
    count = "".join(
        f"  if (q{j} < nk) {{ atomicAdd(&cnt[(k{j} >> u.shift) & {DIGITS - 1}u], 1u); }}\n"
        for j in range(rows.rk)
    )
    zero = "  atomicStore(&cnt[lid], 0u);\n  workgroupBarrier();\n"
    if rows.tiles > 1:  # counted over the workgroup's blocks
        body = _block(rows) + zero + _tiles(rows, _preload(src.key, rows.rk) + count)
    else:
        body = _block(rows) + _preload(src.key, rows.rk) + zero + count
    body += "  workgroupBarrier();\n  H[hat] = atomicLoad(&cnt[lid]);"
    code = header([dtype]) + declare(bufs) + _UNI + src.helper
    code += f"var<workgroup> cnt: array<atomic<u32>, {DIGITS}>;\n"
    return code + main(RT, fold(rows.batch * rows.wpr), [b.name for b in bufs], body)


@dataclass(frozen=True)
class _Moved:
    """What a scatter moves through workgroup memory: `elem` (a format string of the key `{k}` at
    block position `{q}`: the key, or Argsort's (digit << 16) | q), `pad` past the block's end
    (sorts last; a format string of `{q}`), `digit` (a format string of `{e}`), and `reread`,
    Argsort's key and index again at the element's position."""

    digit: str
    elem: str
    pad: str
    reread: str

    @classmethod
    def of(cls, src: _Side, argsort: bool) -> _Moved:
        if not argsort:
            return cls(f"(({{e}} >> u.shift) & {DIGITS - 1}u)", "{k}", "0xffffffffu", "")
        again = f"    let pos = e & 0xffffu; let k = {src.key.format(x='base + pos')}; let idx = {src.idx};\n"
        elem = f"((({{k}} >> u.shift) & {DIGITS - 1}u) << 16u) | {{q}}"
        return cls("({e} >> 16u)", elem, "0xff0000u | {q}", again)

    def elem_of(self, j: int) -> str:
        """The element of `_preload`'s key k{j} at q{j}."""
        return self.elem.format(k=f"k{j}", q=f"q{j}")

    def pad_at(self, j: int) -> str:
        """`pad` at `_preload`'s position q{j}."""
        return self.pad.format(q=f"q{j}")

    def write_out(self, rk: int, sorted_at: str, moves: str, store: str) -> str:
        """WGSL: the sorted block (`sorted_at`, of q) to the row, digit d's elements moved by
        `moves`[d] (its offset in the row minus where it starts in the block), in order."""
        return (
            f"  for (var i = 0u; i < {rk}u; i = i + 1u) {{\n    let q = i * {RT}u + lid;\n"
            f"    if (q >= nk) {{ break; }}\n    let e = {sorted_at};\n"
            f"    let dst = rowbase + {moves}[{self.digit.format(e='e')}] + q;\n"
            f"{self.reread}    {store}\n  }}"
        )


def _scatter(src: _Side, out: _Out, bufs: list[Buf], rows: _Rows, argsort: bool, dtype: DType) -> str:
    """Each block sorted by its digit in workgroup memory (A), then written at its offsets."""
    mv = _Moved.of(src, argsort)
    digit = mv.digit
    sort = (
        _preload(src.key, rows.rk)
        + "".join(
            f"  A[jc_sw(q{j})] = select({mv.pad_at(j)}, {mv.elem_of(j)}, q{j} < nk);\n"
            for j in range(rows.rk)
        )
        + "  workgroupBarrier();\n"
        + _split("A", "B", digit, 0, rows.rk)
        + _split("B", "A", digit, 4, rows.rk)
    )
    write = mv.write_out(rows.rk, "A[jc_sw(q)]", "B", out.store)
    if rows.tiles > 1:
        body = (
            _block(rows)
            + "  var offset = H[hat];\n"
            + _tiles(rows, sort + _moves_tiled(rows, digit) + write + _NEXT)
        )
    else:
        body = (
            _block(rows)
            + _OFFSET
            + sort
            # where each digit starts in the sorted block (digits absent from it are never read) ..
            + _digit_bounds(rows, digit, ends=False)
            # .. becomes how far its keys move: the digit's offset in the row minus that start
            + "  B[lid] = offset - B[lid];\n  workgroupBarrier();\n"
            + write
        )
    code = header([dtype]) + declare(bufs) + _UNI + src.helper + rows.swizzle + _COUNTERS
    code += f"var<workgroup> A: array<u32, {rows.rb}>;\nvar<workgroup> B: array<u32, {rows.rb}>;\n"
    return code + main(RT, fold(rows.batch * rows.wpr), [b.name for b in bufs], body)


_NEXT = "\n  workgroupBarrier();\n"  # a block's write-out read A and B: the next block's sort writes them


def _digit_bounds(rows: _Rows, digit: str, ends: bool) -> str:
    """WGSL: where each digit starts in the block sorted in A (B[d]), and with `ends` where it
    ends (B[DIGITS + d]); a digit the block lacks is left as it was."""
    d_at = [digit.format(e=f"A[jc_sw({q})]") for q in ("q", "q - 1u", "q + 1u")]
    end = f"      if (q + 1u == nk || {d_at[2]} != d) {{ B[{DIGITS}u + d] = q + 1u; }}\n" if ends else ""
    return (
        f"  for (var i = 0u; i < {rows.rk}u; i = i + 1u) {{\n    let q = i * {RT}u + lid;\n"
        f"    if (q < nk) {{\n      let d = {d_at[0]};\n"
        f"      if (q == 0u || {d_at[1]} != d) {{ B[d] = q; }}\n{end}    }}\n  }}\n"
        "  workgroupBarrier();\n"
    )


def _moves_tiled(rows: _Rows, digit: str) -> str:
    """WGSL, one of a workgroup's blocks sorted in A: where each digit starts (B[d]) and ends
    (B[DIGITS + d]) in it, both 0 for a digit it lacks; then B[d], how far digit d's keys move,
    from `offset`, the digit's next place in the row, which moves past them."""
    return (
        f"  B[lid] = 0u; B[{DIGITS}u + lid] = 0u;\n  workgroupBarrier();\n"
        + _digit_bounds(rows, digit, ends=True)
        + f"  let start = B[lid]; let count = B[{DIGITS}u + lid] - start;\n"
        "  B[lid] = offset - start; offset = offset + count;\n  workgroupBarrier();\n"
    )


MIN_LANES = 8  # the smallest subgroup `_scatter_match` takes: its counts need RT / 8 groups' room
_GROUPS = RT // MIN_LANES
MATCH_STORAGE = 4 * (RK * RT + _GROUPS * DIGITS // 2 + DIGITS)  # bytes: S, G and D below
# lane masks as a subgroup ballot gives them (vec4<u32>: lanes 0..127): the lanes below lane s,
# and the lowest lane of a mask
_LANES = (
    "fn jc_below(s: u32) -> vec4<u32> {\n"
    "  let lo = vec4<u32>(0u, 32u, 64u, 96u);\n"
    "  let part = (vec4<u32>(1u) << (vec4<u32>(s) - lo)) - vec4<u32>(1u);\n"
    "  return select(select(vec4<u32>(0u), part, vec4<u32>(s) > lo), vec4<u32>(0xffffffffu),"
    " vec4<u32>(s) >= lo + vec4<u32>(32u));\n}\n"
    "fn jc_lowest(m: vec4<u32>) -> u32 {\n"
    "  if (m.x != 0u) { return firstTrailingBit(m.x); }\n"
    "  if (m.y != 0u) { return 32u + firstTrailingBit(m.y); }\n"
    "  if (m.z != 0u) { return 64u + firstTrailingBit(m.z); }\n"
    "  return 96u + firstTrailingBit(m.w);\n}\n"
    "fn jc_count(m: vec4<u32>) -> u32 { let c = countOneBits(m); return c.x + c.y + c.z + c.w; }\n"
)


def _scatter_match(src: _Side, out: _Out, bufs: list[Buf], rows: _Rows, argsort: bool, dtype: DType) -> str:
    """`_scatter` by subgroup match (the multisplit of the one-sweep radix sorts): each subgroup
    takes sgs·rk consecutive keys of the block, sgs at a time; the lanes holding one digit find
    each other by eight ballots, and the lowest of them adds their number to the subgroup's count
    of that digit (G: u16 counts, two digits a word), so each key's rank among its subgroup's equal
    digits comes out in order. A scan over subgroups, then over digits, places every key in the
    sorted block (S) with no counting splits. Needs subgroups of at least MIN_LANES lanes."""
    mv = _Moved.of(src, argsort)
    digit, pad = mv.digit, mv.pad
    elem = mv.elem.format(k=src.key.format(x="base + q"), q="q")
    rk = rows.rk
    half = "((d & 1u) << 4u)"  # the shift of digit d's u16 in its word of G
    gw = f"g * {DIGITS // 2}u + d / 2u"  # subgroup g's word for digit d
    body = (
        _block(rows)
        + _OFFSET
        + f"  for (var i = lid; i < {_GROUPS * DIGITS // 2}u; i = i + {RT}u) {{ atomicStore(&G[i], 0u); }}\n"
        + "  if (lid == 0u) { atomicStore(&nsub, 0u); }\n  workgroupBarrier();\n"
        # subgroups numbered as they come, not by lid: WGSL does not say which lids share one
        + "  var first = 0u;\n  if (sid == 0u) { first = atomicAdd(&nsub, 1u); }\n"
        + f"  let g = subgroupBroadcastFirst(first); let ng = {RT}u / sgs;\n"
        + "  let below = jc_below(sid); let live = subgroupBallot(true);\n"
        + "".join(_match_round(j, rk, pad, elem, digit, gw, half) for j in range(rk))
        + "  workgroupBarrier();\n"
        # each digit pair's counts over the subgroups become exclusive prefixes; D gets the totals
        + f"  if (lid < {DIGITS // 2}u) {{\n    var run = 0u;\n"
        + "    for (var h = 0u; h < ng; h = h + 1u) {\n"
        + f"      let at = h * {DIGITS // 2}u + lid; let c = atomicLoad(&G[at]);\n"
        + "      atomicStore(&G[at], run); run = run + c;\n    }\n"
        + "    D[2u * lid] = run & 0xffffu; D[2u * lid + 1u] = run >> 16u;\n  }\n"
        + "  workgroupBarrier();\n"
        + "  let cnt = D[lid];\n"
        + _inclusive_scan("D", DIGITS, "cnt")
        # D[d]: where digit d starts in the sorted block
        + "  let start = D[lid] - cnt;\n  workgroupBarrier();\n  D[lid] = start;\n  workgroupBarrier();\n"
        + "".join(
            f"  {{ let d = {digit.format(e=f'e{j}')}; let pre = (atomicLoad(&G[{gw}]) >> {half}) & 0xffffu;\n"
            f"    S[D[d] + pre + r{j}] = e{j}; }}\n"
            for j in range(rk)
        )
        + "  workgroupBarrier();\n"
        # .. then how far digit d's keys move: its offset in the row minus where it starts
        + "  D[lid] = offset - D[lid];\n  workgroupBarrier();\n"
        + mv.write_out(rk, "S[q]", "D", out.store)
    )
    code = header([dtype]) + declare(bufs) + _UNI + src.helper + _LANES
    code += f"var<workgroup> S: array<u32, {rows.rb}>;\n"
    code += f"var<workgroup> G: array<atomic<u32>, {_GROUPS * DIGITS // 2}>;\n"
    code += f"var<workgroup> D: array<u32, {DIGITS}>;\nvar<workgroup> nsub: atomic<u32>;\n"
    more = ", @builtin(subgroup_invocation_id) sid: u32, @builtin(subgroup_size) sgs: u32"
    return code + main(RT, fold(rows.batch * rows.wpr), [b.name for b in bufs], body, more)


def _match_round(j: int, rk: int, pad: str, elem: str, digit: str, gw: str, half: str) -> str:
    """WGSL: round j of `_scatter_match`: key e{j} of this lane and r{j}, its rank among the equal
    digits its subgroup has taken so far (this round's lower lanes included)."""
    ballots = "".join(
        f"    {{ let bit = ((d >> {b}u) & 1u) == 1u; let w = subgroupBallot(bit);"
        " peers &= select(~w, w, bit); }\n"
        for b in range(BITS)
    )
    return (
        f"  var e{j}: u32;\n  var r{j} = 0u;\n  {{\n"
        f"    let q = g * sgs * {rk}u + {j}u * sgs + sid;\n"
        f"    var e = {pad.format(q='q')};\n    if (q < nk) {{ e = {elem}; }}\n    e{j} = e;\n"
        f"    let d = {digit.format(e='e')};\n    var peers = live;\n{ballots}"
        "    let lead = jc_lowest(peers);\n    var old = 0u;\n"
        f"    if (sid == lead) {{ old = atomicAdd(&G[{gw}], jc_count(peers) << {half}); }}\n"
        "    old = subgroupShuffle(old, lead);\n"
        f"    r{j} = ((old >> {half}) & 0xffffu) + jc_count(peers & below);\n  }}\n"
    )


def _split(src: str, dst: str, digit: str, lo: int, rk: int) -> str:
    """WGSL: the block in `src` (each thread's rk consecutive elements) moved to `dst` in the
    order of bits lo..lo+3 of its digit, stably. The per-thread counts of the 16 values, packed
    two 16-bit halves a word (c0, c1: 8 words), are scanned across threads (`_scan`) first."""
    nib = [f"(({digit.format(e=f'e{j}')} >> {lo}u) & 15u)" for j in range(rk)]
    g = [f"g{w // 4}.{'xyzw'[w % 4]}" for w in range(8)]
    r = [f"r{v - 1} + ({g[(v - 1) // 2]} {'>> 16u' if (v - 1) % 2 else '& 0xffffu'})" for v in range(16)]
    packed = [f"r{2 * w} | (r{2 * w + 1} << 16u)" for w in range(8)]
    return "\n".join(
        [
            "  {",
            *(f"    let e{j} = {src}[jc_sw(lid * {rk}u + {j}u)];" for j in range(rk)),
            f"    var c0 = {_Z}; var c1 = {_Z};",
            *(f"    c0 += jc_one({nib[j]}, {_LO}); c1 += jc_one({nib[j]}, {_HI});" for j in range(rk)),
            _scan(dst),
            # the exclusive prefix over values of the block's counts (g), packed as the counts are
            "    let r0 = 0u;",
            *(f"    let r{v} = {r[v]};" for v in range(1, 16)),
            f"    var o0 = vec4<u32>({', '.join(packed[:4])}) + s0 - c0;",
            f"    var o1 = vec4<u32>({', '.join(packed[4:])}) + s1 - c1;",
            *(
                f"    {{ let v = {nib[j]}; {dst}[jc_sw(jc_at(v, o0, o1))] = e{j};"
                f" o0 += jc_one(v, {_LO}); o1 += jc_one(v, {_HI}); }}"
                for j in range(rk)
            ),
            "    workgroupBarrier();\n  }\n",
        ]
    )


def _scan(dst: str) -> str:
    """WGSL: (s0, s1), the inclusive scan of the counts (c0, c1) across threads in `lid` order
    (Hillis-Steele in `dst`: word w of thread t at w * RT + t), and (g0, g1) the block's totals.
    (A subgroup scan and a pass over the subgroups' totals in its place ran no faster on an H100.)"""

    def vec8(at: str) -> str:  # the two vec4s of dst's words at thread `at`
        rd = [f"{dst}[{w * RT}u + {at}]" for w in range(8)]
        return f"vec4<u32>({', '.join(rd[:4])}), vec4<u32>({', '.join(rd[4:])})"

    def put(v: str) -> str:
        return " ".join(f"{dst}[{w * RT}u + lid] = {v}{w // 4}.{'xyzw'[w % 4]};" for w in range(8))

    return "\n".join(
        [
            f"    {put('c')}\n    workgroupBarrier();",
            "    var s0 = c0; var s1 = c1;",
            f"    for (var o = 1u; o < {RT}u; o = o << 1u) {{",
            f"      var t = array<vec4<u32>, 2>({_Z}, {_Z});",
            f"      if (lid >= o) {{ t = array<vec4<u32>, 2>({vec8('lid - o')}); }}",
            "      workgroupBarrier();",
            f"      s0 += t[0]; s1 += t[1];\n      {put('s')}\n      workgroupBarrier();\n    }}",
            f"    let g = array<vec4<u32>, 2>({vec8(f'{RT - 1}u')});",
            "    let g0 = g[0]; let g1 = g[1];\n    workgroupBarrier();",
        ]
    )


# ---- the offset scan: a row's (digit, block) counts become exclusive offsets ---------------------


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


def _inclusive_scan(arr: str, size: int, v: str) -> str:
    """WGSL: `arr[lid]` becomes the inclusive prefix sum of every thread's `v` (Hillis-Steele)."""
    return (
        f"  {arr}[lid] = {v};\n  workgroupBarrier();\n"
        f"  for (var o = 1u; o < {size}u; o = o << 1u) {{\n"
        f"    var t = 0u;\n    if (lid >= o) {{ t = {arr}[lid - o]; }}\n"
        f"    workgroupBarrier();\n    {arr}[lid] = {arr}[lid] + t;\n    workgroupBarrier();\n  }}\n"
    )
