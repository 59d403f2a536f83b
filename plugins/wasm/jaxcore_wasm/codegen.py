"""Tuned kernel (AluExp trees) -> LLVM IR text for wasm32: the loops and entry points.

The generic plan is the one every kernel can take: a loop over output elements [begin, end), and
for reductions an inner loop over the reduced axis with an accumulator, then the epilogue and a
typed store. Loops are simple counted loops over SSA phis, so LLVM's vectoriser turns contiguous
reads into v128 code (with runtime alias checks), and float sums carry `reassoc` so they vectorise
into several accumulators. Small reductions over long axes also get `partial`/`finish` entry points
so the runtime can split the reduced axis across threads. The values inside the loops come from
`emitter`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jaxcore import settings
from jaxcore.matmul_shape import gidx_divisors
from jaxcore.plugin import TRANSCENDENTALS, AluExp, AluOp, DType, Kernel, legalize, tune_nullopt
from jaxcore_wasm import matmul
from jaxcore_wasm.emitter import DEVICE, WASM_TRAITS, Emitter, accumulate, reg_type
from jaxcore_wasm.irtext import F32, F64, I32, Fn, Module, loop, order_key
from jaxcore_wasm.matmul import MatmulPlan
from jaxcore_wasm.toolchain import TRIPLE, datalayout

# Reductions with at most this many outputs over at least SPLIT_MIN_REDUCE items get split-K entries.
SPLIT_MAX_OUTPUTS = 64
SPLIT_MIN_REDUCE = 1 << 15
MATMUL_MIN_WORK = 1 << 15
REDUCE_INTERLEAVE = 4  # vector accumulators per reduction loop (hides the add latency)
# ... where each item is cheap: an item with a transcendental's expansion in it takes 2, which keeps
# its registers within x86's 16 (softmax's exp-sum of 4096x4096 float32: 21 -> 14 ms on 2 threads)
COSTLY_ITEM_INTERLEAVE = 2
# a split part of a sum of these reads two halves side by side (_reduce_two_streams)
TWO_STREAM_DTYPES = (DType.float32, DType.float64, DType.int32, DType.uint32)
TILE = 4096  # outputs per tile of a column reduction (16-32 KiB of accumulators in scratch)
ROW_GROUP = 8  # rows a column reduction adds per pass over its accumulators
# A thread's scratch (the backend allocates at least this much): a column reduction's TILE
# accumulators of up to 8 bytes, or TILE float32 ones and TILE i32 NaN flags
SCRATCH_BYTES = TILE * 8
# Big kernels compile differently, because LLVM's wasm backend is superlinear in a function's size
# and in its dependence chains (WebAssembly Register Stackify, machine sinking): past INLINE_BUDGET
# instructions (counting every helper inlined) the helpers stay calls, and past that or
# DEPTH_BUDGET nodes of expression depth the machine code is made at -O0 (which skips those passes;
# Cranelift optimises the wasm anyway). A 12k-node kernel of transcendentals took 26 s inlined,
# a 500-deep chain 8.7 s at -O3 (0.25 s at -O0). Typical kernels (a few transcendentals: under
# 5,000 instructions, depth under 50) are not affected.
INLINE_BUDGET = 40_000
DEPTH_BUDGET = 200


Body = Callable[[str], None]  # emits one iteration of a loop over output elements, given gidx


@dataclass(frozen=True)
class KernelPlan:
    """What the runtime needs to know about the generated entry points."""

    nargs: int
    size: int
    reduce: int  # 0 for a map kernel
    split: bool  # has partial/finish entries
    acc_bytes: int  # bytes of one accumulator in the split scratch
    out_dtype: DType
    matmul: MatmulPlan | None = None  # run as SGEMM (+ an `epilogue` map unless direct)


def _order_key(bits: int) -> int:
    """The signed order key of float32 `bits` (the same map turns a key back into bits)."""
    b = bits - (1 << 32) if bits >= 1 << 31 else bits
    return b ^ ((b >> 31) & 0x7FFFFFFF)


# ---- function builders -----------------------------------------------------------------------------


class _KernelWriter:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.tuned = tune_nullopt(kernel)
        # the contract spelled for LLVM by the core (what wasm does natively: emitter.WASM_TRAITS)
        self.exp = legalize(self.tuned.exp, WASM_TRAITS)
        epilogue = self.tuned.epilogue
        self.epilogue = legalize(epilogue, WASM_TRAITS) if epilogue is not None else None
        self.mod = Module(TRIPLE, datalayout())
        self.red = kernel.reduction
        self.nargs = kernel.nargs

    def _fn(self, name: str, extra: list[tuple[str, str]]) -> Fn:
        # noalias: dispatch never lets the output be an input (it computes into a temporary then),
        # which lets LLVM vectorise without runtime overlap checks, even around gathers.
        params = [("ptr noalias", f"%in{i}") for i in range(self.nargs)]
        params += [("ptr noalias" if t == "ptr" else t, n) for t, n in extra]
        attrs = self.mod.attr_group(f'nounwind "wasm-export-name"="{name}"')
        return Fn(name, "void", params, attrs)

    def _emitter(self, fn: Fn, env: dict[str, str]) -> Emitter:
        return Emitter(self.mod, fn, [f"%in{i}" for i in range(self.nargs)], env)

    def _loop(self, fn: Fn, start: str, stop: str, body: Body) -> None:
        """for gidx in [start, stop): body(gidx), where the caller checked start < stop."""

        def each(gidx: str, _: list[str]) -> list[str]:
            body(gidx)
            return []

        loop(fn, start, stop, "1", each, name="gidx", entered=True)

    def _reduce(self, fn: Fn, gidx: str, rstart: str, rstop: str) -> str:
        """Emit the reduction loop for one gidx; returns the final accumulator."""
        red, exp = self.red, self.exp
        assert red is not None  # only a reduction has a ridx loop
        if red.dtype == DType.float32 and red.op in (AluOp.Min, AluOp.Max) and red.size:
            return self._reduce_minmax(fn, gidx, rstart, rstop)
        ident = Emitter.const(red.dtype, red.identity)
        if rstart == "0" and rstop == str(red.size) and red.size == 0:
            return ident

        def step(ridx: str, acc: list[str]) -> list[str]:
            em = self._emitter(fn, {"gidx": gidx, "ridx": ridx})
            return [accumulate(em, red.op, red.dtype, acc[0], em.value(exp))]

        # several vector accumulators hide the add latency (float sums carry `reassoc`)
        md = self.mod.loop_md(interleave=self.interleave) if red.size >= 64 else ""
        carried = [(reg_type(red.dtype), ident)]
        (acc,) = loop(fn, rstart, rstop, "1", step, carried, "r", entered=True, flags="nuw nsw", metadata=md)
        return acc

    @property
    def interleave(self) -> int:
        """Vector accumulators of a reduction loop: fewer where the item is costly."""
        costly = self.exp.some(lambda n: n.op in TRANSCENDENTALS)
        return COSTLY_ITEM_INTERLEAVE if costly else REDUCE_INTERLEAVE

    def two_streams(self) -> bool:
        """A long sum into few outputs (a split plan's): read by _reduce_two_streams."""
        red = self.red
        return (
            red is not None
            and red.op == AluOp.Add
            and red.dtype in TWO_STREAM_DTYPES
            and red.size >= SPLIT_MIN_REDUCE
            and 0 < self.kernel.size <= SPLIT_MAX_OUTPUTS
        )

    def _reduce_two_streams(self, fn: Fn, gidx: str, rstart: str, rstop: str) -> str:
        """A split part's sum as two halves read side by side in one loop (the odd last item after),
        then added: two memory streams keep more lines in flight than one, which one thread with
        16-byte loads needs to read at the memory's rate (16M float32 summed on 2 threads: 2.10 ->
        1.74 ms, where PyTorch took 2.01). The caller guarantees rstart < rstop."""
        red, exp = self.red, self.exp
        assert red is not None  # only a reduction has a ridx loop
        ident = Emitter.const(red.dtype, red.identity)
        ty = reg_type(red.dtype)
        half = fn.bin("lshr", I32, fn.bin("sub", I32, rstop, rstart, "nsw"), "1")
        mid = fn.bin("add", I32, rstart, half, "nsw")

        def pair(j: str, acc: list[str]) -> list[str]:
            out = []
            for a, start in zip(acc, (rstart, mid), strict=True):
                em = self._emitter(fn, {"gidx": gidx, "ridx": fn.bin("add", I32, start, j, "nuw nsw")})
                out.append(accumulate(em, red.op, red.dtype, a, em.value(exp)))
            return out

        pre, body, after = fn.block, fn.label("two"), fn.label("two_x")
        fn.cbr(fn.icmp("sgt", I32, half, "0"), body, after)
        fn.start(body)
        md = self.mod.loop_md(interleave=self.interleave)
        carried = [(ty, ident), (ty, ident)]
        got = loop(fn, "0", half, "1", pair, carried, "r2", entered=True, flags="nuw nsw", metadata=md)
        last = fn.block
        fn.br(after)
        fn.start(after)
        acc = [fn.phi(ty, [(ident, pre), (g, last)]) for g in got]
        total = accumulate(self._emitter(fn, {}), red.op, red.dtype, acc[0], acc[1])

        def odd(ridx: str, a: list[str]) -> list[str]:
            em = self._emitter(fn, {"gidx": gidx, "ridx": ridx})
            return [accumulate(em, red.op, red.dtype, a[0], em.value(exp))]

        (total,) = loop(fn, fn.bin("add", I32, mid, half, "nsw"), rstop, "1", odd, [(ty, total)], "r1")
        return total

    def _reduce_minmax(self, fn: Fn, gidx: str, rstart: str, rstop: str) -> str:
        """float32 min/max as a signed-integer min/max of order-preserving keys, NaN tracked aside.

        wasm's f32x4.min/max propagate NaN and order -0 < +0, which Cranelift lowers on x86 to a
        dependent sequence of ~8 instructions per vector: the reduction ran at a third of memory
        speed. The key `b ^ ((b >> 31) & 0x7fffffff)` of the bits b orders every non-NaN float as
        numbers do (-0 < +0 too), so i32x4.max_s (one instruction) finds the same element; an OR of
        `x != x` remembers whether any item was NaN, which then is the result (as the contract says).
        """
        red, exp = self.red, self.exp
        assert red is not None  # only a reduction has a ridx loop
        smm = self.mod.intrinsic(f"llvm.{'smax' if red.op == AluOp.Max else 'smin'}.i32")
        ident = _order_key(0xFF800000 if red.op == AluOp.Max else 0x7F800000)

        def step(ridx: str, carried: list[str]) -> list[str]:
            acc, nan = carried
            em = self._emitter(fn, {"gidx": gidx, "ridx": ridx})
            x = em.value(exp)
            key = fn.call(I32, smm, [(I32, acc), (I32, order_key(fn, fn.cast("bitcast", F32, x, I32)))])
            isnan = fn.cast("zext", "i1", fn.fcmp("uno", F32, x, x), I32)
            return [key, fn.bin("or", I32, nan, isnan)]

        md = self.mod.loop_md(interleave=self.interleave) if red.size >= 64 else ""
        carried = [(I32, str(ident)), (I32, "0")]
        key, nan = loop(
            fn, rstart, rstop, "1", step, carried, "r", entered=True, flags="nuw nsw", metadata=md
        )
        val = fn.cast("bitcast", I32, order_key(fn, key), F32)
        # an empty range [rstart, rstop) never enters the loop body's result: the caller guards it
        return fn.select(fn.icmp("ne", I32, nan, "0"), F32, "0x7FF8000000000000", val)

    def interchange(self) -> bool:
        """A column reduction: reads run along gidx but not along ridx. Looping ridx outside gidx
        (accumulators for a tile of outputs in scratch) then reads memory in order and vectorises."""
        k, red = self.kernel, self.red
        if red is None or k.size < 16 or red.size < 2:
            return False
        idxs = [n.src[0] for n in self.tuned.exp.nodes() if n.op == AluOp.GlobalIndex]
        if not idxs:
            return False
        g0, r0 = min(3, k.size - 2), min(3, red.size - 2)
        along_g = along_r = False
        try:
            for ix in idxs:
                base = ix.evaluate({"gidx": g0, "ridx": r0})
                along_g |= ix.evaluate({"gidx": g0 + 1, "ridx": r0}) - base == 1
                along_r |= ix.evaluate({"gidx": g0, "ridx": r0 + 1}) - base == 1
        except Exception:  # noqa: BLE001 - a heuristic only; the generic loop is always correct
            return False
        return along_g and not along_r

    def row_split(self) -> tuple[int, AluExp] | None:
        """For a map that indexes with gidx / C or gidx % C (broadcasts): write gidx = o*C + i, so the
        simplifier turns those into o and i, and loop i innermost (contiguous, vectorisable)."""
        k, exp = self.kernel, self.tuned.exp
        if k.size < 16:
            return None

        def divs(e: AluExp) -> int:
            return sum(1 for n in e.nodes() if n.op in (AluOp.Idiv, AluOp.Mod) and n.dtype == DType.int32)

        best, best_n = None, divs(exp)
        if best_n == 0:
            return None
        for c in sorted(gidx_divisors(exp)):
            if c < 8 or k.size % c or c == k.size:
                continue
            o = AluExp.special(DType.int32, "jc_o", k.size // c)
            i = AluExp.special(DType.int32, "jc_i", c)
            g = o * AluExp.i32(c) + i
            e2 = exp.rewrite(
                lambda z, g=g: g if z.op == AluOp.Special and z.arg[0] == "gidx" else None  # type: ignore[misc]  # a lambda with a default
            ).simplify()
            n2 = divs(e2)
            if n2 < best_n:
                best, best_n = (c, legalize(e2, WASM_TRAITS)), n2  # legalized after simplifying
        return best

    def _row_split(self, fn: Fn, c: int, exp: AluExp) -> None:
        k = self.kernel
        lo = fn.bin("udiv", I32, "%begin", str(c))
        hi = fn.bin("udiv", I32, fn.bin("add", I32, "%end", str(c - 1), "nuw nsw"), str(c))

        def row(o: str, _: list[str]) -> list[str]:
            base = fn.bin("mul", I32, o, str(c), "nuw nsw")
            smax, smin = self.mod.intrinsic("llvm.smax.i32"), self.mod.intrinsic("llvm.smin.i32")
            i_lo = fn.call(I32, smax, [(I32, fn.bin("sub", I32, "%begin", base, "nsw")), (I32, "0")])
            i_hi = fn.call(I32, smin, [(I32, fn.bin("sub", I32, "%end", base, "nsw")), (I32, str(c))])

            def col(i: str, _: list[str]) -> list[str]:
                g = fn.bin("add", I32, base, i, "nuw nsw")
                em = self._emitter(fn, {"jc_o": o, "jc_i": i, "gidx": g})
                em.store("%out", g, k.dtype, em.value(exp))
                return []

            loop(fn, i_lo, i_hi, "1", col, name="rc")
            return []

        loop(fn, lo, hi, "1", row, name="ro")
        fn.raw("ret void")

    def _interchanged(self, fn: Fn) -> None:
        """for each tile of TILE outputs: acc[] = identity; for r: for g in tile: acc[g] op= exp(g, r);
        then out[g] = epilogue(acc[g]). The accumulators live in the caller's scratch (L1-sized)."""
        k, red = self.kernel, self.red
        assert red is not None  # interchange() checked it
        ty = reg_type(red.dtype)
        ident = Emitter.const(red.dtype, red.identity)

        # float32 min/max: wasm's f32x4.max/min (NaN-propagating, -0 < +0) cost Cranelift ~8 x86
        # instructions a vector. `acc < x ? x : acc` (max; `x < acc ? x : acc` for min) becomes
        # f32x4.relaxed_max/min (one maxps/minps): what it does with a NaN does not matter, since an
        # OR of `x != x` in a flag beside each accumulator makes the result NaN, and ReduceMax/Min
        # leave the zero sign open
        flags = red.dtype == DType.float32 and red.op in (AluOp.Min, AluOp.Max)

        def combine(em: Emitter, acc: str, x: str) -> str:
            if not flags:
                return accumulate(em, red.op, red.dtype, acc, x)
            a, b = (acc, x) if red.op == AluOp.Max else (x, acc)
            return fn.select(fn.fcmp("olt", F32, a, b), F32, x, acc)

        def acc_ptr(g: str, c0: str) -> str:
            return fn.emit(
                f"getelementptr inbounds {ty}, ptr %scratch, i32 {fn.bin('sub', I32, g, c0, 'nsw')}"
            )

        def flag_ptr(g: str, c0: str) -> str:  # i32 flags after the TILE float32 accumulators
            i = fn.bin("add", I32, fn.bin("sub", I32, g, c0, "nsw"), str(TILE), "nsw")
            return fn.emit(f"getelementptr inbounds i32, ptr %scratch, i32 {i}")

        def tile(c0: str, _: list[str]) -> list[str]:
            c1 = fn.call(
                I32,
                self.mod.intrinsic("llvm.smin.i32"),
                [(I32, fn.bin("add", I32, c0, str(TILE), "nsw")), (I32, "%end")],
            )

            def init(g: str, _: list[str]) -> list[str]:
                fn.raw(f"store {ty} {ident}, ptr {acc_ptr(g, c0)}")
                if flags:
                    fn.raw(f"store i32 0, ptr {flag_ptr(g, c0)}")
                return []

            loop(fn, c0, c1, "1", init, name="ti")

            def rows(count: int) -> Callable[[str, list[str]], list[str]]:
                """`count` rows r.. at a time: one load and store of each accumulator per group."""

                def row(r: str, _: list[str]) -> list[str]:
                    def col(g: str, _: list[str]) -> list[str]:
                        p = acc_ptr(g, c0)
                        acc = fn.emit(f"load {ty}, ptr {p}")
                        nan = fn.emit(f"load i32, ptr {flag_ptr(g, c0)}") if flags else ""
                        for i in range(count):  # in row order: the same sums as one row at a time
                            ri = fn.bin("add", I32, r, str(i), "nuw nsw") if i else r
                            em = self._emitter(fn, {"gidx": g, "ridx": ri})
                            x = em.value(self.exp)
                            acc = combine(em, acc, x)
                            if flags:
                                isnan = fn.cast("sext", "i1", fn.fcmp("uno", F32, x, x), I32)
                                nan = fn.bin("or", I32, nan, isnan)
                        fn.raw(f"store {ty} {acc}, ptr {p}")
                        if flags:
                            fn.raw(f"store i32 {nan}, ptr {flag_ptr(g, c0)}")
                        return []

                    loop(fn, c0, c1, "1", col, name="tc")
                    return []

                return row

            grouped = red.size - red.size % ROW_GROUP
            if grouped:
                loop(fn, "0", str(grouped), str(ROW_GROUP), rows(ROW_GROUP), name="tr")
            if grouped < red.size:
                loop(fn, str(grouped), str(red.size), "1", rows(1), name="tq")

            def fin(g: str, _: list[str]) -> list[str]:
                acc = fn.emit(f"load {ty}, ptr {acc_ptr(g, c0)}")
                if flags:
                    nan = fn.icmp("ne", I32, fn.emit(f"load i32, ptr {flag_ptr(g, c0)}"), "0")
                    acc = fn.select(nan, F32, "0x7FF8000000000000", acc)
                em = self._emitter(fn, {"gidx": g, "acc": acc})
                assert self.epilogue is not None  # a reduction's
                em.store("%out", g, k.dtype, em.value(self.epilogue))
                return []

            loop(fn, c0, c1, "1", fin, name="tf")
            return []

        loop(fn, "%begin", "%end", str(TILE), tile, name="tile")
        fn.raw("ret void")

    def _guarded(self, fn: Fn, start: str, stop: str, body: Body) -> None:
        entry_exit = fn.label("done")
        go = fn.label("go")
        fn.cbr(fn.icmp("slt", I32, start, stop), go, entry_exit)
        fn.start(go)
        self._loop(fn, start, stop, body)
        fn.br(entry_exit)
        fn.start(entry_exit)
        fn.raw("ret void")

    def kernel_fn(self) -> None:
        k, red = self.kernel, self.red
        fn = self._fn("kernel", [("ptr", "%out"), (I32, "%begin"), (I32, "%end"), ("ptr", "%scratch")])

        def body(gidx: str) -> None:
            if red is None:
                em = self._emitter(fn, {"gidx": gidx})
                v = em.value(self.exp)
                em.store("%out", gidx, k.dtype, v)
                return
            if self.two_streams():
                acc = self._reduce_two_streams(fn, gidx, "0", str(red.size))
            else:
                acc = self._reduce(fn, gidx, "0", str(red.size))
            em = self._emitter(fn, {"gidx": gidx, "acc": acc})
            assert self.epilogue is not None  # a reduction's
            em.store("%out", gidx, k.dtype, em.value(self.epilogue))

        if self.interchange():
            self._interchanged(fn)
        elif (rows := self.row_split() if red is None else None) is not None:
            self._row_split(fn, *rows)
        else:
            self._guarded(fn, "%begin", "%end", body)
        self.mod.functions.append(fn.render())

    def epilogue_fn(self) -> None:
        """epilogue(ins, out, accs, begin, end): out[g] = epilogue(acc = accs[g]) (f32 sums from SGEMM)."""
        k = self.kernel
        fn = self._fn("epilogue", [("ptr", "%out"), ("ptr", "%accs"), (I32, "%begin"), (I32, "%end")])

        def body(gidx: str) -> None:
            p = fn.emit(f"getelementptr inbounds float, ptr %accs, i32 {gidx}")
            acc = fn.emit(f"load float, ptr {p}, align 4")
            em = self._emitter(fn, {"gidx": gidx, "acc": acc})
            assert self.epilogue is not None  # a reduction's
            em.store("%out", gidx, k.dtype, em.value(self.epilogue))

        self._guarded(fn, "%begin", "%end", body)
        self.mod.functions.append(fn.render())

    def split_fns(self) -> None:
        """partial(ins, scratch, rbegin, rend): raw accumulators of every output over [rbegin, rend);
        finish(ins, out, scratch, nparts, begin, end): fold the parts in order, then the epilogue."""
        k, red = self.kernel, self.red
        assert red is not None  # a split plan is a reduction's
        ty = reg_type(red.dtype)
        acc_dt = {F32: DType.float32, F64: DType.float64, I32: DType.int32}[ty]
        fn = self._fn("partial", [("ptr", "%scratch"), (I32, "%rbegin"), (I32, "%rend")])

        def pbody(gidx: str) -> None:
            if self.two_streams():
                acc = self._reduce_two_streams(fn, gidx, "%rbegin", "%rend")
            else:
                acc = self._reduce(fn, gidx, "%rbegin", "%rend")
            em = self._emitter(fn, {})
            em.store("%scratch", gidx, acc_dt, acc)

        ok = fn.label("ok")
        skip = fn.label("skip")
        fn.cbr(fn.icmp("slt", I32, "%rbegin", "%rend"), ok, skip)
        fn.start(ok)
        self._loop(fn, "0", str(k.size), pbody)
        fn.br(skip)
        fn.start(skip)
        fn.raw("ret void")
        self.mod.functions.append(fn.render())

        fn = self._fn(
            "finish", [("ptr", "%out"), ("ptr", "%scratch"), (I32, "%nparts"), (I32, "%begin"), (I32, "%end")]
        )

        def fbody(gidx: str) -> None:
            def part(p: str, acc: list[str]) -> list[str]:
                idx = fn.bin("add", I32, fn.bin("mul", I32, p, str(k.size)), gidx)
                ptr = fn.emit(f"getelementptr inbounds {ty}, ptr %scratch, i32 {idx}")
                x = fn.emit(f"load {ty}, ptr {ptr}")
                return [accumulate(self._emitter(fn, {}), red.op, red.dtype, acc[0], x)]

            # the runtime always has at least one part
            ident = Emitter.const(red.dtype, red.identity)
            (acc,) = loop(fn, "0", "%nparts", "1", part, [(ty, ident)], "p", entered=True, flags="nuw nsw")
            em = self._emitter(fn, {"gidx": gidx, "acc": acc})
            assert self.epilogue is not None  # a reduction's
            em.store("%out", gidx, k.dtype, em.value(self.epilogue))

        self._guarded(fn, "%begin", "%end", fbody)
        self.mod.functions.append(fn.render())


@dataclass(frozen=True)
class Generated:
    """A kernel's IR text, its plan, and how hard LLVM may work on it."""

    text: str
    plan: KernelPlan
    codegen_opt: int = 3  # the machine-code optimisation level (0 for big kernels)


def depth(exp: AluExp) -> int:
    """Nodes on the longest path from `exp` to a leaf (without recursion)."""
    d: dict[str, int] = {}
    for n in exp.nodes():
        d[n.key()] = 1 + max((d[s.key()] for s in n.src), default=0)
    return d[exp.key()]


def _generated(w: _KernelWriter, p: KernelPlan) -> Generated:
    if not w.mod.functions:
        return Generated("", p)
    exps = [w.exp, w.epilogue] if w.epilogue is not None else [w.exp]
    small = w.mod.inlined_size() <= INLINE_BUDGET
    shallow = max(depth(e) for e in exps) <= DEPTH_BUDGET
    return Generated(w.mod.render(inline=small), p, 3 if small and shallow else 0)


def _matmul_plan(w: _KernelWriter) -> MatmulPlan | None:
    kernel, red = w.kernel, w.red
    matmul_enabled = settings.current().plugin_flag(DEVICE, "matmul", default=True)
    if red is not None and matmul_enabled and kernel.size * red.size >= MATMUL_MIN_WORK:
        return matmul.detect(kernel)
    return None


def _plan(w: _KernelWriter, mm: MatmulPlan | None) -> KernelPlan:
    kernel, red = w.kernel, w.red
    if mm is not None:
        assert red is not None  # a matmul is a reduction
        return KernelPlan(kernel.nargs, kernel.size, red.size, False, 4, kernel.dtype, mm)
    split = bool(red and red.size >= SPLIT_MIN_REDUCE and 0 < kernel.size <= SPLIT_MAX_OUTPUTS)
    acc_bytes = 8 if red and red.dtype == DType.float64 else 4
    return KernelPlan(kernel.nargs, kernel.size, red.size if red else 0, split, acc_bytes, kernel.dtype)


def plan(kernel: Kernel) -> KernelPlan:
    """The plan `generate` gives `kernel`, without writing any IR (checks a disk-cache entry)."""
    w = _KernelWriter(kernel)
    return _plan(w, _matmul_plan(w))


def entry_points(p: KernelPlan) -> dict[str, int]:
    """The functions a kernel's module exports for plan `p`, with their (i32) parameter counts."""
    if p.matmul is not None:
        return {} if p.matmul.direct else {"epilogue": p.nargs + 4}
    out = {"kernel": p.nargs + 4}
    if p.split:
        out |= {"partial": p.nargs + 3, "finish": p.nargs + 5}
    return out


def generate(kernel: Kernel) -> Generated:
    """IR text for `kernel` (exports `kernel`, and `partial`/`finish` for split reductions).

    A matmul-like kernel runs on the SGEMM library instead; its module only holds the `epilogue`
    map (text is "" when the epilogue is the identity and there is nothing to compile).
    """
    w = _KernelWriter(kernel)
    mm = _matmul_plan(w)
    p = _plan(w, mm)
    if mm is not None:
        if not mm.direct:
            w.epilogue_fn()
        return _generated(w, p)
    w.kernel_fn()
    if p.split:
        w.split_fns()
    return _generated(w, p)
