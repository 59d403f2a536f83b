"""A tiny writer of LLVM IR text (faster to produce and to control than llvmlite.ir).

Values are strings: an SSA name ("%t3") or a literal ("1", "0x3FF0000000000000").
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence

import numpy as np

F32, F64, I32, I64, I16, I1 = "float", "double", "i32", "i64", "i16", "i1"


def fconst(value: float, ty: str) -> str:
    """A float literal with its exact bits, NaN sign and payload included (a bitcast constant
    folded by the simplifier must keep them). LLVM writes every float type's literal as the bits
    of a double that converts exactly; for a float NaN that is its sign and 23-bit payload at the
    top of the double's mantissa (the parser moves them back, signalling bit and all)."""
    bits = struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    if ty == F32:
        if (bits >> 52) & 0x7FF == 0x7FF and bits & (1 << 52) - 1:
            # a NaN narrows bit for bit (a float16 value in a float register keeps its signalling
            # bit this way); hardware narrowing would quiet it
            man = (bits >> 29) & 0x7FFFFF or 0x400000
            bits = (bits >> 63 << 63) | (0x7FF << 52) | (man << 29)
        else:
            with np.errstate(over="ignore"):
                bits = struct.unpack("<Q", struct.pack("<d", float(np.float32(float(value)))))[0]
    return f"0x{bits:016X}"


def iconst(value: int, ty: str = I32) -> str:
    bits = {I32: 32, I64: 64, I16: 16, I1: 1}[ty]
    v = int(value) & ((1 << bits) - 1)
    if ty == I1:
        return "true" if v else "false"
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


class Phi:
    """A phi whose incoming edges are added as the blocks that feed it are written: a loop's back
    edge carries a value that exists only once the body is emitted."""

    def __init__(self, name: str, ty: str, incoming: list[tuple[str, str]]) -> None:
        self.name, self.ty, self.incoming = name, ty, list(incoming)

    def add(self, value: str, block: str) -> None:
        self.incoming.append((value, block))

    def __str__(self) -> str:
        return f"  {self.name} = phi {self.ty} " + ", ".join(f"[ {v}, %{b} ]" for v, b in self.incoming)


class Fn:
    """One function being written: fresh names, instructions, basic blocks."""

    def __init__(
        self, name: str, ret: str, params: list[tuple[str, str]], attrs: str = "", linkage: str = ""
    ) -> None:
        self.name, self.ret, self.params, self.attrs, self.linkage = name, ret, params, attrs, linkage
        self.lines: list[str | Phi] = []
        self._n = 0
        self.block = "entry"

    def fresh(self, prefix: str = "t") -> str:
        self._n += 1
        return f"%{prefix}{self._n}"

    def label(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def emit(self, text: str, prefix: str = "t") -> str:
        name = self.fresh(prefix)
        self.lines.append(f"  {name} = {text}")
        return name

    def raw(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def start(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def br(self, label: str) -> None:
        self.raw(f"br label %{label}")

    def cbr(self, cond: str, t: str, f: str) -> None:
        self.raw(f"br i1 {cond}, label %{t}, label %{f}")

    # ---- common instructions -------------------------------------------------------------
    def bin(self, op: str, ty: str, a: str, b: str, flags: str = "") -> str:
        return self.emit(f"{op}{' ' + flags if flags else ''} {ty} {a}, {b}")

    def fadd(self, ty: str, a: str, b: str) -> str:
        return self.bin("fadd", ty, a, b)

    def fsub(self, ty: str, a: str, b: str) -> str:
        return self.bin("fsub", ty, a, b)

    def fmul(self, ty: str, a: str, b: str) -> str:
        return self.bin("fmul", ty, a, b)

    def fdiv(self, ty: str, a: str, b: str) -> str:
        return self.bin("fdiv", ty, a, b)

    def fcmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self.emit(f"fcmp {pred} {ty} {a}, {b}")

    def icmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self.emit(f"icmp {pred} {ty} {a}, {b}")

    def select(self, cond: str, ty: str, a: str, b: str) -> str:
        return self.emit(f"select i1 {cond}, {ty} {a}, {ty} {b}")

    def cast(self, op: str, src_ty: str, v: str, dst_ty: str) -> str:
        return self.emit(f"{op} {src_ty} {v} to {dst_ty}")

    def call(self, ret: str, fn: str, args: list[tuple[str, str]]) -> str:
        a = ", ".join(f"{t} {v}" for t, v in args)
        return self.emit(f"call {ret} @{fn}({a})")

    def phi(self, ty: str, incoming: list[tuple[str, str]]) -> str:
        inc = ", ".join(f"[ {v}, %{b} ]" for v, b in incoming)
        return self.emit(f"phi {ty} {inc}")

    def open_phi(self, ty: str, incoming: list[tuple[str, str]], prefix: str = "t") -> Phi:
        """A phi to which later blocks add their edges (`Phi.add`)."""
        phi = Phi(self.fresh(prefix), ty, incoming)
        self.lines.append(phi)
        return phi

    def render(self) -> str:
        params = ", ".join(f"{t} {n}" for t, n in self.params)
        link = f"{self.linkage} " if self.linkage else ""
        head = f"define {link}{self.ret} @{self.name}({params}) {self.attrs} {{"
        body = "\n".join(map(str, self.lines))
        return f"{head}\nentry:\n{body}\n}}\n"


INTRINSICS = {
    "llvm.minimum.f32": "declare float @llvm.minimum.f32(float, float)",
    "llvm.maximum.f32": "declare float @llvm.maximum.f32(float, float)",
    "llvm.minimum.f64": "declare double @llvm.minimum.f64(double, double)",
    "llvm.maximum.f64": "declare double @llvm.maximum.f64(double, double)",
    "llvm.smin.i32": "declare i32 @llvm.smin.i32(i32, i32)",
    "llvm.smax.i32": "declare i32 @llvm.smax.i32(i32, i32)",
    "llvm.umin.i32": "declare i32 @llvm.umin.i32(i32, i32)",
    "llvm.umax.i32": "declare i32 @llvm.umax.i32(i32, i32)",
    "llvm.fshl.i32": "declare i32 @llvm.fshl.i32(i32, i32, i32)",
    "llvm.fptosi.sat.i32.f32": "declare i32 @llvm.fptosi.sat.i32.f32(float)",
    "llvm.fptoui.sat.i32.f32": "declare i32 @llvm.fptoui.sat.i32.f32(float)",
    "llvm.fptosi.sat.i32.f64": "declare i32 @llvm.fptosi.sat.i32.f64(double)",
    "llvm.fptoui.sat.i32.f64": "declare i32 @llvm.fptoui.sat.i32.f64(double)",
}
for _ty, _s in ((F32, "f32"), (F64, "f64")):
    for _f in ("sqrt", "floor", "ceil", "trunc", "roundeven", "fabs"):
        INTRINSICS[f"llvm.{_f}.{_s}"] = f"declare {_ty} @llvm.{_f}.{_s}({_ty})"
    INTRINSICS[f"llvm.copysign.{_s}"] = f"declare {_ty} @llvm.copysign.{_s}({_ty}, {_ty})"
    INTRINSICS[f"llvm.fmuladd.{_s}"] = f"declare {_ty} @llvm.fmuladd.{_s}({_ty}, {_ty}, {_ty})"


def suffix(ty: str) -> str:
    return {F32: "f32", F64: "f64", I32: "i32"}[ty]


class Module:
    """Functions plus the intrinsic declarations and helper functions they use."""

    def __init__(self, triple: str, datalayout: str) -> None:
        self.head = f'target triple = "{triple}"\ntarget datalayout = "{datalayout}"\n'
        self.decls: set[str] = set()
        self.helpers: dict[str, str] = {}
        self.functions: list[str] = []
        self.attributes: list[str] = []
        self.metadata: list[str] = []

    def loop_md(self, interleave: int) -> str:
        """A distinct `!llvm.loop` node asking the vectoriser to interleave; returns its reference."""
        base = len(self.metadata)
        self.metadata.append(f"!{base} = distinct !{{!{base}, !{base + 1}}}")
        self.metadata.append(f'!{base + 1} = !{{!"llvm.loop.interleave.count", i32 {interleave}}}')
        return f"!{base}"

    def intrinsic(self, name: str) -> str:
        self.decls.add(INTRINSICS[name])
        return name

    def attr_group(self, text: str) -> str:
        self.attributes.append(text)
        return f"#{len(self.attributes) - 1}"

    def inlined_size(self) -> int:
        """Instructions the module's exported functions would hold once every helper is inlined."""
        memo: dict[str, int] = {}

        def size(text: str) -> int:
            own = text.count("\n")
            return own + sum(helper(m) for m in _HELPER_CALL.findall(text))

        def helper(name: str) -> int:
            if name not in memo:
                memo[name] = 0  # no recursion among helpers, but never loop if there were
                memo[name] = size(self.helpers[name]) if name in self.helpers else 0
            return memo[name]

        return sum(size(f) for f in self.functions)

    def render(self, inline: bool = True) -> str:
        """The module's text; `inline=False` makes the helpers plain calls (`noinline`): LLVM's
        wasm backend (register stackify, machine sinking) is superlinear in a function's size, so
        a huge kernel with hundreds of inlined transcendentals would take minutes to compile."""
        helpers = list(self.helpers.values())
        if not inline:
            helpers = [_noinline(h) for h in helpers]
        parts = [self.head, *sorted(self.decls), "", *helpers, *self.functions]
        parts += [f"attributes #{i} = {{ {a} }}" for i, a in enumerate(self.attributes)]
        parts += self.metadata
        return "\n".join(parts) + "\n"


_HELPER_CALL = re.compile(r"call [^@\n]*@([A-Za-z0-9_.]+)\(")


def _noinline(helper: str) -> str:
    """The helper as a real function, unless it returns an aggregate: the wasm C ABI returns those
    through the stack, which a kernel module does not have."""
    head, sep, body = helper.partition("\n")
    ret = head.split("@", 1)[0]
    if "{" in ret:
        return helper
    return head.replace("alwaysinline", "noinline") + sep + body


LoopBody = Callable[[str, list[str]], list[str]]


def order_key(f: Fn, bits: str) -> str:
    """The order key of float32 `bits` (an i32 value), `b ^ ((b >> 31) & 0x7fffffff)`: as signed
    integers the keys order every non-NaN float as numbers do (-0 below +0). The map is its own
    inverse, so the same call turns a key back into bits."""
    return f.bin("xor", I32, bits, f.bin("and", I32, f.bin("ashr", I32, bits, "31"), "2147483647"))


def loop(
    f: Fn,
    start: str,
    end: str,
    step: str,
    body: LoopBody,
    carried: Sequence[tuple[str, str]] = (),
    name: str = "l",
    *,
    entered: bool = False,
    flags: str = "nsw",
    metadata: str = "",
) -> list[str]:
    """Counted loop `for iv = start; iv < end; iv += step` (signed i32).

    `body(iv, values)` emits the body (it may open blocks) and returns the new values of the
    `carried` (type, initial value) pairs; the result is their values after the loop. Top-tested,
    unless the caller knows it is `entered` (start < end): then the test is at the bottom, where
    `metadata` (an `!llvm.loop` node) goes, and the result is the last iteration's values.
    """
    pre = f.block
    head = f.label(f"{name}_h")
    bodyl = head if entered else f.label(f"{name}_b")
    latch, exit_ = f.label(f"{name}_l"), f.label(f"{name}_x")
    f.br(head)
    f.start(head)
    iv = f.open_phi(I32, [(start, pre)], "iv")
    phis = [f.open_phi(ty, [(init, pre)], "c") for ty, init in carried]
    if not entered:
        f.cbr(f.icmp("slt", I32, iv.name, end), bodyl, exit_)
        f.start(bodyl)
    new = list(body(iv.name, [p.name for p in phis]) or [])
    f.br(latch)
    f.start(latch)
    nxt = f.bin("add", I32, iv.name, step, flags)
    for phi, value in zip([iv, *phis], [nxt, *new], strict=True):
        phi.add(value, latch)
    if entered:
        tail = f", !llvm.loop {metadata}" if metadata else ""
        f.raw(f"br i1 {f.icmp('slt', I32, nxt, end)}, label %{head}, label %{exit_}{tail}")
    else:
        f.br(head)
    f.start(exit_)
    return new if entered else [p.name for p in phis]
