"""Sort and Argsort of 32-bit rows as an LSD radix sort in wasm (one library module per process).

numpy's sort of float32 on this machine is an introsort (33 ms for 1M keys); four counting passes
over bytes of an order-preserving key are linear and stable. Each row:

1. One pass reads the row, writes its keys (and, for Argsort, 0..n-1) to scratch and counts all
   four byte histograms at once.
2. Per byte: exclusive prefix sums, then a stable scatter into the other scratch half; a byte that
   every key shares (one bin holds all n) is skipped.
3. A last pass turns keys back into values (Sort) or gathers the values through the indices
   (Argsort: the bits of NaNs and of -0 come from the input).

Keys (unsigned order): uint32 as is; int32 with the sign bit flipped; float32 through
`b ^ ((b >> 31) & 0x7fffffff)` (the signed order of the numbers, -0 below +0), sign bit flipped,
then 0x7fffff subtracted (mod 2^32) so that negative NaNs, which sat below -inf, wrap around above
the positive ones: every NaN sorts last and the map stays a bijection, so Sort returns each value's
own bits.
For Argsort every NaN takes the largest key and -0 the key of +0: they tie, and stability keeps
their input order, as the contract's stable argsort says.
"""

from __future__ import annotations

from jaxcore_wasm.irtext import I32, Fn, Module, loop, order_key
from jaxcore_wasm.toolchain import TRIPLE, datalayout

MIN_ROW = 1 << 12  # shorter rows stay with the host's numpy sort (the passes' setup dominates)
MODES = {"float32": 0, "int32": 1, "uint32": 2, "bool": 2}
HIST_BYTES = 4 * 256 * 4
ROT = 0x7FFFFF  # subtracted from the float key (see the module docstring)


def scratch_bytes(n: int, argsort: bool) -> int:
    """Scratch for one row of n keys: the histograms, two key halves and (Argsort) two index halves."""
    return HIST_BYTES + (16 if argsort else 8) * n


def _p(f: Fn, ptr: str, idx: str) -> str:
    return f.emit(f"getelementptr inbounds i32, ptr {ptr}, i32 {idx}")


def _ld(f: Fn, ptr: str, idx: str) -> str:
    return f.emit(f"load i32, ptr {_p(f, ptr, idx)}")


def _st(f: Fn, ptr: str, idx: str, v: str) -> None:
    f.raw(f"store i32 {v}, ptr {_p(f, ptr, idx)}")


def _slot(f: Fn, k: str, d: int) -> str:
    """The histogram slot of key k's byte d (histogram d holds slots 256d..256d+255)."""
    byte = f.bin("and", I32, f.bin("lshr", I32, k, str(8 * d)) if d else k, "255")
    return f.bin("add", I32, byte, str(256 * d), "nuw nsw") if d else byte


def _key(f: Fn, b: str, mode: int, argsort: bool) -> str:
    if mode == 2:
        return b
    if mode == 1:
        return f.bin("xor", I32, b, "-2147483648")
    if argsort:  # NaN -> the largest key, -0 -> +0: they tie
        b = f.select(f.icmp("eq", I32, b, "-2147483648"), I32, "0", b)
    k = f.bin("sub", I32, f.bin("xor", I32, order_key(f, b), "-2147483648"), str(ROT))
    if argsort:
        nan = f.icmp("ugt", I32, f.bin("and", I32, b, "2147483647"), "2139095040")
        k = f.select(nan, I32, "-1", k)
    return k


def _unkey(f: Fn, k: str, mode: int) -> str:
    if mode == 2:
        return k
    if mode == 1:
        return f.bin("xor", I32, k, "-2147483648")
    return order_key(f, f.bin("xor", I32, f.bin("add", I32, k, str(ROT)), "-2147483648"))


def _function(mod: Module, mode: int, argsort: bool) -> str:
    """`sort_<mode>(src, dst, n, scratch)` or `argsort_<mode>(src, dst, idx, n, scratch)`."""
    name = f"{'argsort' if argsort else 'sort'}_{mode}"
    params = [("ptr", "%src"), ("ptr", "%dst")] + ([("ptr", "%idx")] if argsort else [])
    params += [(I32, "%n"), ("ptr", "%S")]
    f = Fn(name, "void", params, mod.attr_group(f'nounwind "wasm-export-name"="{name}"'))
    hist = "%S"
    ka = f.emit("getelementptr inbounds i8, ptr %S, i32 " + str(HIST_BYTES))
    kb = _p(f, ka, "%n")
    ia = _p(f, kb, "%n")  # the index halves (Argsort only)
    ib = _p(f, ia, "%n")

    def zero(i: str, _: list[str]) -> list[str]:
        _st(f, hist, i, "0")
        return []

    loop(f, "0", "1024", "1", zero, name="hz")

    def count(i: str, _: list[str]) -> list[str]:
        k = _key(f, _ld(f, "%src", i), mode, argsort)
        _st(f, ka, i, k)
        if argsort:
            _st(f, ia, i, i)
        for d in range(4):
            slot = _slot(f, k, d)
            _st(f, hist, slot, f.bin("add", I32, _ld(f, hist, slot), "1"))
        return []

    loop(f, "0", "%n", "1", count, name="hc")
    cur_k, alt_k, cur_i, alt_i = ka, kb, ia, ib
    for d in range(4):
        # exclusive prefix sums of byte d; `trivial` when one bin holds every key (nothing moves)
        def prefix(b: str, acc: list[str], d: int = d) -> list[str]:
            slot = f.bin("add", I32, b, str(256 * d), "nuw nsw") if d else b
            c = _ld(f, hist, slot)
            _st(f, hist, slot, acc[0])
            return [f.bin("add", I32, acc[0], c), f.bin("or", "i1", acc[1], f.icmp("eq", I32, c, "%n"))]

        _, trivial = loop(f, "0", "256", "1", prefix, carried=[(I32, "0"), ("i1", "false")], name=f"px{d}")
        go, skip, join = f.label(f"sc{d}"), f.label(f"sk{d}"), f.label(f"sj{d}")
        f.cbr(trivial, skip, go)
        f.start(go)

        def scatter(i: str, _: list[str], d: int = d, src_k: str = cur_k, dst_k: str = alt_k,
                    src_i: str = cur_i, dst_i: str = alt_i) -> list[str]:  # fmt: skip
            k = _ld(f, src_k, i)
            slot = _slot(f, k, d)
            pos = _ld(f, hist, slot)
            _st(f, hist, slot, f.bin("add", I32, pos, "1", "nuw nsw"))
            _st(f, dst_k, pos, k)
            if argsort:
                _st(f, dst_i, pos, _ld(f, src_i, i))
            return []

        loop(f, "0", "%n", "1", scatter, name=f"s{d}")
        done = f.block
        f.br(join)
        f.start(skip)
        f.br(join)
        f.start(join)
        moved = [(alt_k, done), (cur_k, skip)], [(cur_k, done), (alt_k, skip)]
        cur_k, alt_k = f.phi("ptr", moved[0]), f.phi("ptr", moved[1])
        if argsort:
            cur_i, alt_i = (
                f.phi("ptr", [(alt_i, done), (cur_i, skip)]),
                f.phi("ptr", [(cur_i, done), (alt_i, skip)]),
            )

    def finish(i: str, _: list[str]) -> list[str]:
        if argsort:
            j = _ld(f, cur_i, i)
            _st(f, "%idx", i, j)
            _st(f, "%dst", i, _ld(f, "%src", j))
        else:
            _st(f, "%dst", i, _unkey(f, _ld(f, cur_k, i), mode))
        return []

    loop(f, "0", "%n", "1", finish, name="fin")
    f.raw("ret void")
    return f.render()


def radix_ir() -> str:
    mod = Module(TRIPLE, datalayout())
    for mode in sorted(set(MODES.values())):
        for argsort in (False, True):
            mod.functions.append(_function(mod, mode, argsort))
    return mod.render()


def plan_key() -> str:
    return f"radix|rot={ROT}|v1"


__all__ = ["MIN_ROW", "MODES", "plan_key", "radix_ir", "scratch_bytes"]
