"""Tuned kernel (AluExp trees) -> LLVM IR text for wasm32.

The generic plan is the one every kernel can take: a loop over output elements [begin, end), and
for reductions an inner loop over the reduced axis with an accumulator, then the epilogue and a
typed store. Loops are simple counted loops over SSA phis, so LLVM's vectoriser turns contiguous
reads into v128 code (with runtime alias checks), and float sums carry `reassoc` so they vectorise
into several accumulators. Small reductions over long axes also get `partial`/`finish` entry points
so the runtime can split the reduced axis across threads.

Registers: float32 and float16 values live in `float` (a float16 value is always one that float16
can hold: every float16 op rounds its result), float64 in `double`, int32/uint32/bool in `i32`
(bool as 0/1). Every op follows the contract: integer division by zero gives 0 and never traps,
INT_MIN / -1 = INT_MIN, shifts count mod 32, float->int saturates with NaN -> 0, min/max propagate
NaN, out-of-range reads are clamped to element 0 unless range analysis proves them in range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jaxcore import settings
from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.dtype import INT32_MAX, INT32_MIN, UINT32_MAX, DType, byte_width, is_float
from jaxcore.kernel import Kernel
from jaxcore.tuner import tune_nullopt
from jaxcore_wasm import builtins, matmul
from jaxcore_wasm.irtext import F32, F64, I1, I32, Fn, Module, fconst, iconst, loop, suffix
from jaxcore_wasm.matmul import MatmulPlan
from jaxcore_wasm.toolchain import TRIPLE, datalayout

DEVICE = "wasm"
# Reductions with at most this many outputs over at least SPLIT_MIN_REDUCE items get split-K entries.
SPLIT_MAX_OUTPUTS = 64
SPLIT_MIN_REDUCE = 1 << 15
MATMUL_ENABLED = settings.current().plugin(DEVICE).get("matmul", "1").strip() not in ("0", "false", "off")
MATMUL_MIN_WORK = 1 << 15
REDUCE_INTERLEAVE = 4  # vector accumulators per reduction loop (hides the add latency)
INTERCHANGE = True
MAP_INTERLEAVE = 1  # 2 and 4 measured the same on memory-bound maps
ROW_SPLIT = True
TILE = 4096  # outputs per tile of a column reduction (16-32 KiB of accumulators in scratch)
SCRATCH_BYTES = TILE * 8  # outputs x reduction items below which the generic loop is cheaper


def reg_type(dtype: DType) -> str:
    if dtype == DType.float64:
        return F64
    if dtype in (DType.float32, DType.float16):
        return F32
    return I32


def _mem_type(dtype: DType) -> str:
    return {DType.float32: F32, DType.float64: F64, DType.float16: "i16"}.get(dtype, I32)


_BOUNDS = {DType.int32: (INT32_MIN, INT32_MAX), DType.uint32: (0, UINT32_MAX), DType.bool: (0, 1)}


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


class Ranges:
    """Exact integer ranges for subtrees that provably never wrap (None when they might)."""

    def __init__(self, env: dict[str, tuple[int, int]]) -> None:
        self.env = env
        self.memo: dict[str, tuple[int, int] | None] = {}

    def get(self, e: AluExp) -> tuple[int, int] | None:
        k = e.key()
        if k not in self.memo:
            self.memo[k] = self._compute(e)
        return self.memo[k]

    def _compute(self, e: AluExp) -> tuple[int, int] | None:
        if e.dtype not in _BOUNDS:
            return None
        lo_b, hi_b = _BOUNDS[e.dtype]
        op = e.op
        if op == AluOp.Const:
            return (int(e.arg), int(e.arg))
        if op == AluOp.Special:
            return self.env.get(e.arg[0], (0, e.arg[1] - 1))
        if op == AluOp.Variable:
            return self.env.get(e.arg)
        if op in (AluOp.Cmplt, AluOp.Cmpne) or e.dtype == DType.bool:
            return (0, 1)
        s = [self.get(x) if x.dtype == e.dtype else None for x in e.src]
        if op == AluOp.Where:
            a, b = self.get(e.src[1]), self.get(e.src[2])
            return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
        if op == AluOp.BitCombine and e.arg == "and":
            ms = [x for x in s if x is not None and x[0] >= 0]
            return (0, min(x[1] for x in ms)) if ms else None
        if any(x is None for x in s) or not s:
            return None
        if op == AluOp.Add:
            r = (s[0][0] + s[1][0], s[0][1] + s[1][1])
        elif op == AluOp.Sub:
            r = (s[0][0] - s[1][1], s[0][1] - s[1][0])
        elif op == AluOp.Mul:
            c = [a * b for a in s[0] for b in s[1]]
            r = (min(c), max(c))
        elif op == AluOp.Idiv:
            if s[1][0] <= 0 <= s[1][1]:
                return None
            c = [int(a / b) if abs(a) < 2**52 else a // b for a in s[0] for b in s[1]]
            r = (min(c), max(c))
        elif op == AluOp.Mod:
            m = max(abs(s[1][0]), abs(s[1][1])) - 1
            if m < 0:
                return (0, 0)
            r = (0 if s[0][0] >= 0 else -m, min(s[0][1], m) if s[0][1] >= 0 else 0)
        elif op == AluOp.Min:
            r = (min(s[0][0], s[1][0]), min(s[0][1], s[1][1]))
        elif op == AluOp.Max:
            r = (max(s[0][0], s[1][0]), max(s[0][1], s[1][1]))
        else:
            return None
        return r if lo_b <= r[0] and r[1] <= hi_b else None


class Emitter:
    """Lowers AluExp nodes into one function, with common subexpressions computed once."""

    def __init__(self, mod: Module, fn: Fn, inputs: list[str], env: dict[str, str], ranges: Ranges) -> None:
        self.mod, self.f, self.inputs, self.env, self.ranges = mod, fn, inputs, env, ranges
        self.memo: dict[str, str] = {}

    # ---- helpers -----------------------------------------------------------------------------
    def intr(self, name: str, ret: str, args: list[tuple[str, str]]) -> str:
        return self.f.call(ret, self.mod.intrinsic(name), args)

    def round16(self, v: str, dtype: DType) -> str:
        return self.f.call(F32, builtins.round_half(self.mod), [(F32, v)]) if dtype == DType.float16 else v

    def bool_of(self, pred_i1: str) -> str:
        return self.f.cast("zext", I1, pred_i1, I32)

    def truthy(self, v: str) -> str:
        return self.f.icmp("ne", I32, v, "0")

    @staticmethod
    def const(dtype: DType, value: float | int) -> str:
        if is_float(dtype):
            v = float(value)
            if dtype == DType.float16:
                v = float(np.float16(v))
            return fconst(v, reg_type(dtype))
        return iconst(int(value))

    # ---- main ----------------------------------------------------------------------------------
    def value(self, e: AluExp) -> str:
        k = e.key()
        v = self.memo.get(k)
        if v is None:
            v = self._lower(e)
            self.memo[k] = v
        return v

    def _lower(self, e: AluExp) -> str:
        op, d, f = e.op, e.dtype, self.f
        if op == AluOp.Const:
            return self.const(d, e.arg)
        if op in (AluOp.Special, AluOp.Variable):
            name = e.arg[0] if op == AluOp.Special else e.arg
            if name not in self.env:
                raise UnsupportedOpError(op, d, DEVICE, name)
            return self.env[name]
        if op == AluOp.GlobalIndex:
            return self._load(e)
        if op == AluOp.GlobalView:
            raise UnsupportedOpError(op, d, DEVICE)
        if op == AluOp.Where:
            c = self.truthy(self.value(e.src[0]))
            return f.select(c, reg_type(d), self.value(e.src[1]), self.value(e.src[2]))
        if op in (AluOp.Cmplt, AluOp.Cmpne):
            return self._compare(e)
        if op == AluOp.Cast:
            return self.cast(self.value(e.src[0]), e.src[0].dtype, d)
        if op == AluOp.Bitcast:
            return self._bitcast(e)
        if op == AluOp.Threefry2x32:
            args = [(I32, self.value(s)) for s in e.src]
            pair = f.call("{i32, i32}", builtins.threefry(self.mod), args)
            x0 = f.emit(f"extractvalue {{i32, i32}} {pair}, 0")
            x1 = f.emit(f"extractvalue {{i32, i32}} {pair}, 1")
            return {0: x0, 1: x1}.get(e.arg) or f.bin("xor", I32, x0, x1)
        if len(e.src) == 2:
            a = self.value(e.src[0])
            b = self.value(e.src[1])
            if e.src[1].dtype != d and op != AluOp.BitShift:
                b = self.cast(b, e.src[1].dtype, d)
            return self._binary(e, a, b)
        if len(e.src) == 1:
            return self._unary(e, self.value(e.src[0]))
        raise UnsupportedOpError(op, d, DEVICE)

    # ---- memory ----------------------------------------------------------------------------------
    def _load(self, e: AluExp) -> str:
        f = self.f
        gid, length = e.arg
        idx = self.value(e.src[0])
        r = self.ranges.get(e.src[0])
        if r is None or r[0] < 0 or r[1] >= length:
            ok = f.icmp("ult", I32, idx, str(max(length, 1)))
            idx = f.select(ok, I32, idx, "0")
        mt = _mem_type(e.dtype)
        p = f.emit(f"getelementptr inbounds {mt}, ptr {self.inputs[gid]}, i32 {idx}")
        v = f.emit(f"load {mt}, ptr {p}, align {byte_width(e.dtype)}")
        if e.dtype == DType.float16:
            return f.call(F32, builtins.half_to_float(self.mod), [(I32, f.cast("zext", "i16", v, I32))])
        if e.dtype == DType.bool:
            return self.bool_of(self.truthy(v))
        return v

    def store(self, ptr: str, idx: str, dtype: DType, v: str) -> None:
        f = self.f
        mt = _mem_type(dtype)
        if dtype == DType.float16:
            h = f.call(I32, builtins.float_to_half(self.mod), [(F32, v)])
            v = f.cast("trunc", I32, h, "i16")
        p = f.emit(f"getelementptr inbounds {mt}, ptr {ptr}, i32 {idx}")
        f.raw(f"store {mt} {v}, ptr {p}, align {byte_width(dtype)}")

    # ---- ops ---------------------------------------------------------------------------------------
    def _flags(self, e: AluExp) -> str:
        if e.dtype not in (DType.int32, DType.uint32) or self.ranges.get(e) is None:
            return ""
        srcs = [self.ranges.get(s) for s in e.src]
        if e.dtype == DType.int32:
            nonneg = all(s is not None and s[0] >= 0 for s in srcs) and self.ranges.get(e)[0] >= 0
            return "nuw nsw" if nonneg else "nsw"
        return "nuw"

    def _binary(self, e: AluExp, a: str, b: str) -> str:
        op, d, f = e.op, e.dtype, self.f
        if is_float(d):
            ty = reg_type(d)
            if op == AluOp.Add:
                return self.round16(f.fadd(ty, a, b), d)
            if op == AluOp.Sub:
                return self.round16(f.fsub(ty, a, b), d)
            if op == AluOp.Mul:
                return self.round16(f.fmul(ty, a, b), d)
            if op == AluOp.Idiv:
                q = self.round16(f.fdiv(ty, a, b), d)
                return self.intr(f"llvm.trunc.{suffix(ty)}", ty, [(ty, q)])
            if op == AluOp.Mod:
                return f.call(ty, builtins.fmod(self.mod, ty), [(ty, a), (ty, b)])
            if op in (AluOp.Min, AluOp.Max):
                name = "minimum" if op == AluOp.Min else "maximum"
                return self.intr(f"llvm.{name}.{suffix(ty)}", ty, [(ty, a), (ty, b)])
            raise UnsupportedOpError(op, d, DEVICE)
        if d == DType.bool:
            table = {AluOp.Add: "or", AluOp.Sub: "xor", AluOp.Mul: "and", AluOp.Idiv: "and"}
            table |= {AluOp.Min: "and", AluOp.Max: "or"}
            if op in table:
                return f.bin(table[op], I32, a, b)
            if op == AluOp.Mod:
                return "0"
            if op == AluOp.BitCombine:
                return f.bin(e.arg, I32, a, b)
            raise UnsupportedOpError(op, d, DEVICE)
        signed = d == DType.int32
        if op in (AluOp.Add, AluOp.Sub, AluOp.Mul):
            name = {AluOp.Add: "add", AluOp.Sub: "sub", AluOp.Mul: "mul"}[op]
            return f.bin(name, I32, a, b, self._flags(e))
        if op in (AluOp.Idiv, AluOp.Mod):
            return self._intdiv(e, a, b, signed)
        if op in (AluOp.Min, AluOp.Max):
            name = ("s" if signed else "u") + ("min" if op == AluOp.Min else "max")
            return self.intr(f"llvm.{name}.i32", I32, [(I32, a), (I32, b)])
        if op == AluOp.BitCombine:
            return f.bin(e.arg, I32, a, b)
        if op == AluOp.BitShift:
            cnt = f.bin("and", I32, b, "31")
            if e.arg == "shl":
                return f.bin("shl", I32, a, cnt)
            return f.bin("ashr" if signed else "lshr", I32, a, cnt)
        raise UnsupportedOpError(op, d, DEVICE)

    def _intdiv(self, e: AluExp, a: str, b: str, signed: bool) -> str:
        f = self.f
        ra, rb = self.ranges.get(e.src[0]), self.ranges.get(e.src[1])
        div = e.op == AluOp.Idiv
        if rb is not None and rb[0] > 0 and (not signed or (ra is not None and ra[0] >= 0)):
            return f.bin("udiv" if div else "urem", I32, a, b)  # no zero divisor, no sign fix-ups
        zero = f.icmp("eq", I32, b, "0")
        safe = f.select(zero, I32, "1", b)
        if signed:
            ovf = f.bin("and", I1, f.icmp("eq", I32, a, iconst(INT32_MIN)), f.icmp("eq", I32, b, "-1"))
            safe = f.select(ovf, I32, "1", safe)
            q = f.bin("sdiv" if div else "srem", I32, a, safe)
            if not div:
                q = f.select(ovf, I32, "0", q)
        else:
            q = f.bin("udiv" if div else "urem", I32, a, safe)
        return f.select(zero, I32, "0", q)

    def _unary(self, e: AluExp, x: str) -> str:
        op, d, f = e.op, e.dtype, self.f
        if not is_float(d):
            raise UnsupportedOpError(op, d, DEVICE)
        ty = reg_type(d)
        if op.value in builtins.UNARY:
            return self.round16(f.call(ty, builtins.unary(self.mod, op.value, ty), [(ty, x)]), d)
        if op == AluOp.Sqrt:
            return self.round16(self.intr(f"llvm.sqrt.{suffix(ty)}", ty, [(ty, x)]), d)
        if op in (AluOp.Floor, AluOp.Ceil):
            return self.intr(f"llvm.{op.value.lower()}.{suffix(ty)}", ty, [(ty, x)])
        if op == AluOp.Reciprocal:
            return self.round16(f.fdiv(ty, fconst(1.0, ty), x), d)
        raise UnsupportedOpError(op, d, DEVICE)

    def _compare(self, e: AluExp) -> str:
        f = self.f
        s = e.src[0].dtype
        a, b = self.value(e.src[0]), self.value(e.src[1])
        if e.src[1].dtype != s:
            b = self.cast(b, e.src[1].dtype, s)
        lt = e.op == AluOp.Cmplt
        if is_float(s):
            c = f.fcmp("olt" if lt else "une", reg_type(s), a, b)
        else:
            c = f.icmp(("slt" if s == DType.int32 else "ult") if lt else "ne", I32, a, b)
        return self.bool_of(c)

    def cast(self, v: str, src: DType, dst: DType) -> str:
        f = self.f
        if src == dst:
            return v
        st, dt = reg_type(src), reg_type(dst)
        if dst == DType.bool:
            if is_float(src):
                return self.bool_of(f.fcmp("une", st, v, fconst(0.0, st)))
            return self.bool_of(self.truthy(v))
        if dst in (DType.int32, DType.uint32):
            if is_float(src):
                kind = "fptosi" if dst == DType.int32 else "fptoui"
                return self.intr(f"llvm.{kind}.sat.i32.{suffix(st)}", I32, [(st, v)])
            return v  # int <-> int keeps the bits (wraps)
        # float destinations
        if is_float(src):
            if st == dt:
                out = v  # float16 <-> float32 share the register type
            elif dt == F64:
                out = f.cast("fpext", F32, v, F64)
            elif dst == DType.float16:
                h = f.call(I32, builtins.double_to_half(self.mod), [(F64, v)])
                return f.call(F32, builtins.half_to_float(self.mod), [(I32, h)])
            else:
                out = f.cast("fptrunc", F64, v, F32)
        else:
            out = f.cast("uitofp" if src in (DType.uint32, DType.bool) else "sitofp", I32, v, dt)
        return self.round16(out, dst)

    def _bitcast(self, e: AluExp) -> str:
        src, dst = e.src[0].dtype, e.dtype
        v = self.value(e.src[0])
        st, dt = reg_type(src), reg_type(dst)
        if st == dt and src != DType.float16 and dst != DType.float16:
            return v
        if {st, dt} == {F32, I32} and DType.float16 not in (src, dst):
            return self.f.cast("bitcast", st, v, dt)
        raise UnsupportedOpError(AluOp.Bitcast, dst, DEVICE, str(src))


# ---- accumulation ------------------------------------------------------------------------------


def _accumulate(em: Emitter, op: AluOp, dtype: DType, acc: str, x: str) -> str:
    f = em.f
    ty = reg_type(dtype)
    if is_float(dtype):
        if op == AluOp.Add:
            return em.round16(f.bin("fadd", ty, acc, x, "reassoc"), dtype)
        if op == AluOp.Mul:
            return em.round16(f.bin("fmul", ty, acc, x, "reassoc" if dtype != DType.float16 else ""), dtype)
        name = "minimum" if op == AluOp.Min else "maximum"
        return em.intr(f"llvm.{name}.{suffix(ty)}", ty, [(ty, acc), (ty, x)])
    if dtype == DType.bool:
        return f.bin({AluOp.Add: "or", AluOp.Mul: "and", AluOp.Min: "and", AluOp.Max: "or"}[op], I32, acc, x)
    if op == AluOp.Add:
        return f.bin("add", I32, acc, x)
    if op == AluOp.Mul:
        return f.bin("mul", I32, acc, x)
    name = ("s" if dtype == DType.int32 else "u") + ("min" if op == AluOp.Min else "max")
    return em.intr(f"llvm.{name}.i32", I32, [(I32, acc), (I32, x)])


# ---- function builders -----------------------------------------------------------------------------


class _KernelWriter:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.tuned = tune_nullopt(kernel)
        self.mod = Module(TRIPLE, datalayout())
        self.red = kernel.reduction
        self.nargs = kernel.nargs
        # exact ranges of the lane variables, for the emitters' no-wrap analysis
        self.granges = {"gidx": (0, max(kernel.size - 1, 0))}
        self.rranges = dict(self.granges, ridx=(0, max(self.red.size - 1, 0))) if self.red else self.granges

    def _fn(self, name: str, extra: list[tuple[str, str]]) -> Fn:
        # noalias: dispatch never lets the output be an input (it computes into a temporary then),
        # which lets LLVM vectorise without runtime overlap checks, even around gathers.
        params = [("ptr noalias", f"%in{i}") for i in range(self.nargs)]
        params += [("ptr noalias" if t == "ptr" else t, n) for t, n in extra]
        attrs = self.mod.attr_group(f'nounwind "wasm-export-name"="{name}"')
        return Fn(name, "void", params, attrs)

    def _emitter(self, fn: Fn, env: dict[str, str], ranges: dict[str, tuple[int, int]]) -> Emitter:
        return Emitter(self.mod, fn, [f"%in{i}" for i in range(self.nargs)], env, Ranges(ranges))

    def _loop(self, fn: Fn, var: str, start: str, stop: str, body, start_block: str) -> None:
        """for var in [start, stop): body(var). Assumes start < stop was checked or is static."""
        head = fn.label(f"{var}_body")
        latch = fn.label(f"{var}_latch")
        exit_ = fn.label(f"{var}_exit")
        fn.br(head)
        fn.start(head)
        nxt = f"%{var}_next{fn.label('')}"
        iv = fn.phi(I32, [(start, start_block), (nxt, latch)])
        body(iv)
        fn.br(latch)
        fn.start(latch)
        fn.lines.append(f"  {nxt} = add nsw i32 {iv}, 1")
        cond = fn.icmp("slt", I32, nxt, stop)
        md = self.mod.loop_md(interleave=MAP_INTERLEAVE) if MAP_INTERLEAVE > 1 else ""
        fn.raw(f"br i1 {cond}, label %{head}, label %{exit_}" + (f", !llvm.loop {md}" if md else ""))
        fn.start(exit_)

    def _reduce(self, fn: Fn, gidx: str, rstart: str, rstop: str) -> str:
        """Emit the reduction loop for one gidx; returns the final accumulator."""
        red, exp = self.red, self.tuned.exp
        ty = reg_type(red.dtype)
        ident = Emitter.const(red.dtype, red.identity)
        if rstart == "0" and rstop == str(red.size) and red.size == 0:
            return ident
        pre = fn.block
        head, latch, exit_ = fn.label("r_body"), fn.label("r_latch"), fn.label("r_exit")
        nxt, tok = f"%ridx_next{fn.label('')}", f"@@acc{fn.label('')}@@"
        fn.br(head)
        fn.start(head)
        ridx = fn.phi(I32, [(rstart, pre), (nxt, latch)])
        acc = fn.phi(ty, [(ident, pre), (tok, latch)])
        slot = len(fn.lines) - 1
        em = self._emitter(fn, {"gidx": gidx, "ridx": ridx}, self.rranges)
        new = _accumulate(em, red.op, red.dtype, acc, em.value(exp))
        fn.lines[slot] = fn.lines[slot].replace(tok, new)
        fn.br(latch)
        fn.start(latch)
        fn.lines.append(f"  {nxt} = add nuw nsw i32 {ridx}, 1")
        cond = fn.icmp("slt", I32, nxt, rstop)
        # several vector accumulators hide the add latency (float sums carry `reassoc`)
        md = self.mod.loop_md(interleave=REDUCE_INTERLEAVE) if red.size >= 64 else ""
        fn.raw(f"br i1 {cond}, label %{head}, label %{exit_}" + (f", !llvm.loop {md}" if md else ""))
        fn.start(exit_)
        return new

    def interchange(self) -> bool:
        """A column reduction: reads run along gidx but not along ridx. Looping ridx outside gidx
        (accumulators for a tile of outputs in scratch) then reads memory in order and vectorises."""
        k, red = self.kernel, self.red
        if red is None or k.size < 16 or red.size < 2 or not INTERCHANGE:
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
        if not ROW_SPLIT or k.size < 16:
            return None

        def divs(e: AluExp) -> int:
            return sum(1 for n in e.nodes() if n.op in (AluOp.Idiv, AluOp.Mod) and n.dtype == DType.int32)

        best, best_n = None, divs(exp)
        if best_n == 0:
            return None
        for c in sorted(matmul.divisors(exp)):
            if c < 8 or k.size % c or c == k.size:
                continue
            o = AluExp.special(DType.int32, "jc_o", k.size // c)
            i = AluExp.special(DType.int32, "jc_i", c)
            g = o * AluExp.i32(c) + i
            e2 = exp.rewrite(
                lambda z, g=g: g if z.op == AluOp.Special and z.arg[0] == "gidx" else None
            ).simplify()
            n2 = divs(e2)
            if n2 < best_n:
                best, best_n = (c, e2), n2
        return best

    def _row_split(self, fn: Fn, c: int, exp: AluExp) -> None:
        k = self.kernel
        lo = fn.bin("udiv", I32, "%begin", str(c))
        hi = fn.bin("udiv", I32, fn.bin("add", I32, "%end", str(c - 1), "nuw nsw"), str(c))
        ranges = {"jc_o": (0, k.size // c - 1), "jc_i": (0, c - 1), "gidx": (0, k.size - 1)}

        def row(o: str, _):
            base = fn.bin("mul", I32, o, str(c), "nuw nsw")
            smax, smin = self.mod.intrinsic("llvm.smax.i32"), self.mod.intrinsic("llvm.smin.i32")
            i_lo = fn.call(I32, smax, [(I32, fn.bin("sub", I32, "%begin", base, "nsw")), (I32, "0")])
            i_hi = fn.call(I32, smin, [(I32, fn.bin("sub", I32, "%end", base, "nsw")), (I32, str(c))])

            def col(i: str, _):
                g = fn.bin("add", I32, base, i, "nuw nsw")
                em = self._emitter(fn, {"jc_o": o, "jc_i": i, "gidx": g}, ranges)
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
        ty = reg_type(red.dtype)
        ident = Emitter.const(red.dtype, red.identity)

        def acc_ptr(g: str, c0: str) -> str:
            return fn.emit(
                f"getelementptr inbounds {ty}, ptr %scratch, i32 {fn.bin('sub', I32, g, c0, 'nsw')}"
            )

        def tile(c0: str, _):
            c1 = fn.call(
                I32,
                self.mod.intrinsic("llvm.smin.i32"),
                [(I32, fn.bin("add", I32, c0, str(TILE), "nsw")), (I32, "%end")],
            )

            def init(g: str, _):
                fn.raw(f"store {ty} {ident}, ptr {acc_ptr(g, c0)}")
                return []

            loop(fn, c0, c1, "1", init, name="ti")

            def row(r: str, _):
                def col(g: str, _):
                    em = self._emitter(fn, {"gidx": g, "ridx": r}, self.rranges)
                    p = acc_ptr(g, c0)
                    old = fn.emit(f"load {ty}, ptr {p}")
                    new = _accumulate(em, red.op, red.dtype, old, em.value(self.tuned.exp))
                    fn.raw(f"store {ty} {new}, ptr {p}")
                    return []

                loop(fn, c0, c1, "1", col, name="tc")
                return []

            loop(fn, "0", str(red.size), "1", row, name="tr")

            def fin(g: str, _):
                acc = fn.emit(f"load {ty}, ptr {acc_ptr(g, c0)}")
                em = self._emitter(fn, {"gidx": g, "acc": acc}, self.granges)
                em.store("%out", g, k.dtype, em.value(self.tuned.epilogue))
                return []

            loop(fn, c0, c1, "1", fin, name="tf")
            return []

        loop(fn, "%begin", "%end", str(TILE), tile, name="tile")
        fn.raw("ret void")

    def _guarded(self, fn: Fn, start: str, stop: str, body) -> None:
        entry_exit = fn.label("done")
        go = fn.label("go")
        fn.cbr(fn.icmp("slt", I32, start, stop), go, entry_exit)
        fn.start(go)
        self._loop(fn, "gidx", start, stop, body, go)
        fn.br(entry_exit)
        fn.start(entry_exit)
        fn.raw("ret void")

    def kernel_fn(self) -> None:
        k, red = self.kernel, self.red
        fn = self._fn("kernel", [("ptr", "%out"), (I32, "%begin"), (I32, "%end"), ("ptr", "%scratch")])

        def body(gidx: str) -> None:
            if red is None:
                em = self._emitter(fn, {"gidx": gidx}, self.granges)
                v = em.value(self.tuned.exp)
                em.store("%out", gidx, k.dtype, v)
                return
            acc = self._reduce(fn, gidx, "0", str(red.size))
            em = self._emitter(fn, {"gidx": gidx, "acc": acc}, self.granges)
            em.store("%out", gidx, k.dtype, em.value(self.tuned.epilogue))

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
            em = self._emitter(fn, {"gidx": gidx, "acc": acc}, self.granges)
            em.store("%out", gidx, k.dtype, em.value(self.tuned.epilogue))

        self._guarded(fn, "%begin", "%end", body)
        self.mod.functions.append(fn.render())

    def split_fns(self) -> None:
        """partial(ins, scratch, rbegin, rend): raw accumulators of every output over [rbegin, rend);
        finish(ins, out, scratch, nparts, begin, end): fold the parts in order, then the epilogue."""
        k, red = self.kernel, self.red
        ty = reg_type(red.dtype)
        acc_dt = {F32: DType.float32, F64: DType.float64, I32: DType.int32}[ty]
        fn = self._fn("partial", [("ptr", "%scratch"), (I32, "%rbegin"), (I32, "%rend")])

        def pbody(gidx: str) -> None:
            acc = self._reduce(fn, gidx, "%rbegin", "%rend")
            em = self._emitter(fn, {}, {})
            em.store("%scratch", gidx, acc_dt, acc)

        ok = fn.label("ok")
        skip = fn.label("skip")
        fn.cbr(fn.icmp("slt", I32, "%rbegin", "%rend"), ok, skip)
        fn.start(ok)
        self._loop(fn, "gidx", "0", str(k.size), pbody, ok)
        fn.br(skip)
        fn.start(skip)
        fn.raw("ret void")
        self.mod.functions.append(fn.render())

        fn = self._fn(
            "finish", [("ptr", "%out"), ("ptr", "%scratch"), (I32, "%nparts"), (I32, "%begin"), (I32, "%end")]
        )

        def fbody(gidx: str) -> None:
            ident = Emitter.const(red.dtype, red.identity)
            pre = fn.block
            head, exit_ = fn.label("p_body"), fn.label("p_exit")
            nxt, accn = f"%p_next{fn.label('')}", f"%pacc{fn.label('')}"
            fn.br(head)
            fn.start(head)
            p = fn.phi(I32, [("0", pre), (nxt, head)])
            acc = fn.phi(ty, [(ident, pre), (accn, head)])
            slot = len(fn.lines) - 1
            em = self._emitter(fn, {}, {})
            idx = fn.bin("add", I32, fn.bin("mul", I32, p, str(k.size)), gidx)
            ptr = fn.emit(f"getelementptr inbounds {ty}, ptr %scratch, i32 {idx}")
            x = fn.emit(f"load {ty}, ptr {ptr}")
            new = _accumulate(em, red.op, red.dtype, acc, x)
            fn.lines[slot] = fn.lines[slot].replace(accn, new)
            accn = new
            fn.lines.append(f"  {nxt} = add nuw nsw i32 {p}, 1")
            fn.cbr(fn.icmp("slt", I32, nxt, "%nparts"), head, exit_)
            fn.start(exit_)
            em = self._emitter(fn, {"gidx": gidx, "acc": accn}, self.granges)
            em.store("%out", gidx, k.dtype, em.value(self.tuned.epilogue))

        self._guarded(fn, "%begin", "%end", fbody)
        self.mod.functions.append(fn.render())


def generate(kernel: Kernel) -> tuple[str, KernelPlan]:
    """IR text for `kernel` (exports `kernel`, and `partial`/`finish` for split reductions).

    A matmul-like kernel runs on the SGEMM library instead; its module only holds the `epilogue`
    map (text is "" when the epilogue is the identity and there is nothing to compile).
    """
    w = _KernelWriter(kernel)
    red = kernel.reduction
    mm = None
    if red is not None and MATMUL_ENABLED and kernel.size * red.size >= MATMUL_MIN_WORK:
        mm = matmul.detect(kernel, w.tuned.exp, w.tuned.epilogue)
    if mm is not None:
        if not mm.direct:
            w.epilogue_fn()
        text = w.mod.render() if w.mod.functions else ""
        return text, KernelPlan(kernel.nargs, kernel.size, red.size, False, 4, kernel.dtype, mm)
    w.kernel_fn()
    split = bool(red and red.size >= SPLIT_MIN_REDUCE and 0 < kernel.size <= SPLIT_MAX_OUTPUTS)
    if split:
        w.split_fns()
    acc_bytes = 8 if red and red.dtype == DType.float64 else 4
    plan = KernelPlan(kernel.nargs, kernel.size, red.size if red else 0, split, acc_bytes, kernel.dtype)
    return w.mod.render(), plan
