"""AluExp nodes -> LLVM IR values inside one function, per the contract.

Registers: float32 and float16 values live in `float` (a float16 value is always one that float16
can hold: every float16 op rounds its result), float64 in `double`, int32/uint32/bool in `i32`
(bool as 0/1). The expressions arrive legalized by the core for `WASM_TRAITS`, which say what LLVM
does natively: float->int saturates with NaN -> 0 (`fptosi.sat`), min/max propagate NaN
(`llvm.minimum`), compares are IEEE and never folded, float division is correctly rounded; integer
division by zero and INT_MIN / -1 trap and shifts of 32 or more are poison, so `legalize` guards
those and the emitter writes the bare instructions. Out-of-range reads are clamped to element 0
unless the core's range analysis (`value_range`, over the lane Specials' extents) proves them in
range.
"""

from __future__ import annotations

import numpy as np

from jaxcore.plugin import (
    AluExp,
    AluOp,
    DType,
    TargetTraits,
    UnsupportedOpError,
    byte_width,
    is_float,
    pending,
    value_range,
)
from jaxcore.simplify import never_wraps
from jaxcore_wasm import builtins
from jaxcore_wasm.irtext import F32, F64, I1, I32, Fn, Module, fconst, iconst, suffix

DEVICE = "wasm"

WASM_TRAITS = TargetTraits(
    native_int_mod_truncates=True,  # srem
    native_correct_division=True,  # fdiv is IEEE
    native_nan_minmax=True,  # llvm.minimum / llvm.maximum
    native_saturating_casts=True,  # llvm.fpto[su]i.sat
    native_nan_compare=True,  # fcmp olt / une
    native_float_to_bool=True,  # fcmp une x, 0.0
    has_f16=True,  # computed in float32, rounded per op
    has_f64=True,
    exact_transcendentals=True,  # builtins.py: the wasm SIMD expansions, within the tolerance table
)


def reg_type(dtype: DType) -> str:
    if dtype == DType.float64:
        return F64
    if dtype in (DType.float32, DType.float16):
        return F32
    return I32


def _mem_type(dtype: DType) -> str:
    return {DType.float32: F32, DType.float64: F64, DType.float16: "i16"}.get(dtype, I32)


class Emitter:
    """Lowers AluExp nodes into one function, with common subexpressions computed once."""

    def __init__(self, mod: Module, fn: Fn, inputs: list[str], env: dict[str, str]) -> None:
        self.mod, self.f, self.inputs, self.env = mod, fn, inputs, env
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
            # Operands first, in the order `_lower` asks for them, so it never recurses deeply.
            for n in pending(e, lambda n: n.key() in self.memo):
                self.memo[n.key()] = self._lower(n)
            v = self.memo[k]
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
        r = value_range(e.src[0])
        if r.lo < 0 or r.hi >= length:
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
        if e.dtype not in (DType.int32, DType.uint32) or not never_wraps(e):
            return ""
        if e.dtype == DType.int32:
            nonneg = all(value_range(s).lo >= 0 for s in (*e.src, e))
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
            if op == AluOp.Div:
                return self.round16(f.fdiv(ty, a, b), d)
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
        if op == AluOp.BitShift:  # legalize masked a count that may reach 32
            if e.arg == "shl":
                return f.bin("shl", I32, a, b)
            return f.bin("ashr" if signed else "lshr", I32, a, b)
        raise UnsupportedOpError(op, d, DEVICE)

    def _intdiv(self, e: AluExp, a: str, b: str, signed: bool) -> str:
        """The bare instruction: `legalize` made the divisor nonzero and INT_MIN / -1 impossible."""
        div = e.op == AluOp.Idiv
        if not signed or (value_range(e.src[1]).lo > 0 and value_range(e.src[0]).lo >= 0):
            return self.f.bin("udiv" if div else "urem", I32, a, b)  # no sign fix-ups
        return self.f.bin("sdiv" if div else "srem", I32, a, b)

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


def accumulate(em: Emitter, op: AluOp, dtype: DType, acc: str, x: str) -> str:
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
