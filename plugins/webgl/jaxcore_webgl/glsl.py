"""GLSL ES 3.00 fragment shaders for jaxcore kernels.

One fragment computes one output texel: four 32-bit words, i.e. four elements of a 4-byte dtype
or eight float16 elements (two per word, `packHalf2x16`). Inputs are `usampler2D` units read
with `texelFetch` at run-time widths (`sh{i}` = log2 of the width), so one program serves
inputs of any size. Values live in GLSL types: float32 and float16 as `float` (float16 rounded
after every op through `packHalf2x16`, which rounds to nearest even: float32 has 2*11+2 bits,
so the double rounding is innocuous), int32 `int`, uint32 `uint`, bool `bool`.

Every node becomes one SSA `const` local (common subexpressions once); ops that GLSL leaves
undefined call the helpers of `glsl_lib`.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import UnsupportedOpError
from jaxcore.dtype import INT32_MIN, DType
from jaxcore.kernel import Kernel
from jaxcore_webgl.glsl_lib import library_for

HEADER = "#version 300 es\nprecision highp float;\nprecision highp int;\nprecision highp usampler2D;\n"

TYPES = {
    DType.float32: "float",
    DType.float16: "float",
    DType.int32: "int",
    DType.uint32: "uint",
    DType.bool: "bool",
}
F32, F16, I32, U32, BOOL = DType.float32, DType.float16, DType.int32, DType.uint32, DType.bool
FLOATS = (F32, F16)
LOOP_LIMIT = 12000

# float32 unary ops: our own helpers wherever the GLSL built-in is inexact or undefined.
_UNARY_F32 = {
    AluOp.Sin: "jx_sin({})",
    AluOp.Cos: "jx_cos({})",
    AluOp.Asin: "jx_asin({})",
    AluOp.Atan: "jx_atan({})",
    AluOp.Exp: "jx_exp({})",
    AluOp.Log: "jx_log({})",
    AluOp.Sqrt: "jx_sqrt({})",
    AluOp.Floor: "jx_floor({})",
    AluOp.Ceil: "jx_ceil({})",
    AluOp.Reciprocal: "jx_div(1.0, {})",
    AluOp.Erf: "jx_erf({})",
    AluOp.Erfc: "jx_erfc({})",
}


def float_literal(v: float) -> str:
    """An exact float32 literal: bits for NaN, infinities and denormals, shortest decimal otherwise."""
    f = np.float32(v)
    bits = struct.unpack("<I", struct.pack("<f", float(f)))[0]
    if not math.isfinite(float(f)) or (bits & 0x7F800000) == 0 and (bits & 0x7FFFFF) != 0:
        return f"uintBitsToFloat(0x{bits:08x}u)"
    text = repr(float(f))
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return text


def const_literal(dtype: DType, v: float | int) -> str:
    if dtype in FLOATS:
        return float_literal(float(v))
    if dtype == I32:
        return "int(0x80000000u)" if int(v) == INT32_MIN else str(int(v))
    if dtype == U32:
        return f"{int(v)}u"
    return "true" if v else "false"


class Renderer:
    """AluExp -> GLSL statements: one SSA local per node, memoised by structure."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.lines: list[str] = []
        self.names: dict[str, str] = {}
        self.count = 0

    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def expr(self, e: AluExp, indent: str) -> str:
        """The GLSL name (or literal) holding `e`, emitting the statements it needs."""
        k = e.key()
        hit = self.names.get(k)
        if hit is not None:
            return hit
        if e.op == AluOp.Const:
            return const_literal(e.dtype, e.arg)
        if e.op == AluOp.Variable:
            return str(e.arg)
        srcs = [self.expr(s, indent) for s in e.src]
        code = self.render(e, srcs)
        name = self.fresh()
        self.lines.append(f"{indent}{TYPES[e.dtype]} {name} = {code};")
        self.names[k] = name
        return name

    def unsupported(self, e: AluExp) -> UnsupportedOpError:
        return UnsupportedOpError(e.op, e.dtype, self.device)

    def render(self, e: AluExp, s: list[str]) -> str:
        op, dt = e.op, e.dtype
        if dt not in TYPES:
            raise UnsupportedOpError(op, dt, self.device)
        half = dt == F16
        if op in (AluOp.Add, AluOp.Sub, AluOp.Mul):
            a, b = s
            if dt == BOOL:
                return {AluOp.Add: f"({a} || {b})", AluOp.Mul: f"({a} && {b})"}.get(op, f"({a} != {b})")
            if dt == F32:
                return f"jx_{op.value.lower()}({a}, {b})"
            sym = {AluOp.Add: "+", AluOp.Sub: "-", AluOp.Mul: "*"}[op]
            return f"jx_f16({a} {sym} jx_o({b}))" if half else f"({a} {sym} {b})"
        if op == AluOp.Idiv:
            a, b = s
            if dt == F32:
                return f"trunc(jx_div({a}, {b}))"
            if half:
                return f"trunc(jx_f16({a} / jx_o({b})))"
            return {I32: f"jx_idiv_i({a}, {b})", U32: f"jx_idiv_u({a}, {b})", BOOL: f"({a} && {b})"}[dt]
        if op == AluOp.Mod:
            a, b = s
            if dt in FLOATS:
                return f"jx_fmod({a}, {b})"
            return {I32: f"jx_mod_i({a}, {b})", U32: f"jx_mod_u({a}, {b})", BOOL: "false"}[dt]
        if op in (AluOp.Min, AluOp.Max):
            a, b = s
            fn = op.value.lower()
            if dt in FLOATS:
                return f"jx_{fn}({a}, {b})"
            if dt == BOOL:
                return f"({a} && {b})" if op == AluOp.Min else f"({a} || {b})"
            return f"{fn}({a}, {b})"
        if op == AluOp.BitCombine:
            a, b = s
            if dt == BOOL:
                return {"and": f"({a} && {b})", "or": f"({a} || {b})", "xor": f"({a} != {b})"}[e.arg]
            return f"({a} {dict(zip(('and', 'or', 'xor'), '&|^'))[e.arg]} {b})"
        if op == AluOp.BitShift:
            a, b = s
            cnt = f"(uint({b}) & 31u)"
            return f"({a} << {cnt})" if e.arg == "shl" else f"({a} >> {cnt})"
        if op in (AluOp.Cmplt, AluOp.Cmpne):
            a, b = s
            sd = e.src[0].dtype
            if sd in FLOATS:
                return f"jx_lt({a}, {b})" if op == AluOp.Cmplt else f"jx_ne({a}, {b})"
            if sd == BOOL:
                return f"(!{a} && {b})" if op == AluOp.Cmplt else f"({a} != {b})"
            return f"({a} < {b})" if op == AluOp.Cmplt else f"({a} != {b})"
        if op == AluOp.Where:
            c, a, b = s
            if dt in FLOATS and e.src[1].op == AluOp.Const and e.src[2].op == AluOp.Const:
                # compilers rewrite c ? -1.0 : 0.0 as -float(c), which is -0.0 for false
                a = f"jx_o({a})"
            return f"({c} ? {a} : {b})"
        if op in _UNARY_F32:
            x = s[0]
            code = _UNARY_F32[op].format(x)
            if half:
                if op in (AluOp.Floor, AluOp.Ceil):
                    return f"{op.value.lower()}({x})"
                if op == AluOp.Reciprocal:
                    return f"jx_f16(1.0 / jx_o({x}))"
                if op == AluOp.Sqrt:
                    return f"jx_f16(sqrt({x}))"
                return f"jx_f16({code})"
            return code
        if op == AluOp.Cast:
            return self.cast(e.src[0].dtype, dt, s[0])
        if op == AluOp.Bitcast:
            return self.bitcast(e.src[0].dtype, dt, s[0], e)
        if op == AluOp.Threefry2x32:
            call = f"jx_threefry({', '.join(s)})"
            return {"xor": "(jx_tf.x ^ jx_tf.y)", 0: "jx_tf.x", 1: "jx_tf.y"}[e.arg].replace("jx_tf", call)
        if op == AluOp.GlobalIndex:
            gid = e.arg[0]
            i = s[0]
            if half:
                return f"jx_h(ld{gid}(({i}) >> 1), ({i}) & 1)"
            word = f"ld{gid}({i})"
            loads = {F32: f"uintBitsToFloat({word})", I32: f"int({word})", BOOL: f"({word} != 0u)"}
            return loads.get(dt, word)
        raise self.unsupported(e)

    def cast(self, src: DType, dst: DType, x: str) -> str:
        if src == dst or (src in FLOATS and dst == F32):
            return x
        if dst == BOOL:
            if src in FLOATS:
                return f"((floatBitsToUint({x}) & 0x7fffffffu) != 0u)"
            return f"({x} != {TYPES[src]}(0))"
        if dst == F16:
            if src == BOOL:
                return f"({x} ? 1.0 : 0.0)"
            return f"jx_f16({x})" if src == F32 else f"jx_f16(float({x}))"
        if dst == F32:
            return f"({x} ? 1.0 : 0.0)" if src == BOOL else f"float({x})"
        if dst == I32:
            return f"jx_f2i({x})" if src in FLOATS else f"int({x})"
        if dst == U32:
            return f"jx_f2u({x})" if src in FLOATS else f"uint({x})"
        raise UnsupportedOpError(AluOp.Cast, dst, self.device)

    def bitcast(self, src: DType, dst: DType, x: str, e: AluExp) -> str:
        if src == dst:
            return x
        table = {
            (I32, F32): f"intBitsToFloat({x})",
            (U32, F32): f"uintBitsToFloat({x})",
            (F32, I32): f"floatBitsToInt({x})",
            (F32, U32): f"floatBitsToUint({x})",
            (I32, U32): f"uint({x})",
            (U32, I32): f"int({x})",
        }
        code = table.get((src, dst))
        if code is None:
            raise UnsupportedOpError(AluOp.Bitcast, dst, self.device, {"from": str(src)})
        return code


def _store_word(dtype: DType, v: str) -> str:
    return {F32: f"floatBitsToUint({v})", I32: f"uint({v})", U32: v, BOOL: f"({v} ? 1u : 0u)"}[dtype]


def _identity(kernel: Kernel) -> str:
    red = kernel.reduction
    assert red is not None
    return const_literal(red.dtype, red.identity)


def _combine(red_op: AluOp, dtype: DType, acc: str, x: str) -> str:
    if dtype == BOOL:
        return f"({acc} || {x})" if red_op in (AluOp.Add, AluOp.Max) else f"({acc} && {x})"
    if red_op in (AluOp.Min, AluOp.Max):
        fn = red_op.value.lower()
        return f"jx_{fn}({acc}, {x})" if dtype in FLOATS else f"{fn}({acc}, {x})"
    if dtype == F32:
        return f"jx_{'add' if red_op == AluOp.Add else 'mul'}({acc}, {x})"
    sym = "+" if red_op == AluOp.Add else "*"
    if dtype == F16:
        return f"jx_f16({acc} {sym} jx_o({x}))"
    return f"({acc} {sym} {x})"


def kernel_shader(kernel: Kernel, out_shift: int, device: str) -> str:
    """The fragment shader computing `kernel` into an output texture of width 2^out_shift."""
    exp = kernel.exp.rewrite_global_views()
    out_dt = kernel.dtype
    if out_dt not in TYPES:
        raise UnsupportedOpError(None, out_dt, device)
    r = Renderer(device)
    body: list[str] = []
    red = kernel.reduction
    if red is None:
        v = r.expr(exp, "  ")
        body += r.lines
        result = v
    else:
        acc_t = TYPES[red.dtype]
        if red.dtype not in TYPES:
            raise UnsupportedOpError(None, red.dtype, device)
        body.append(f"  {acc_t} acc = {_identity(kernel)};")
        # llvmpipe ends a shader's loops after 65535 back-edges in all (one counter per
        # invocation), so long reductions unroll: each of the 4 per fragment stays under LOOP_LIMIT.
        size = red.size
        k = max(1, -(-size // LOOP_LIMIT))
        v = r.expr(exp, "      ")
        step = [*r.lines, f"      acc = {_combine(red.op, red.dtype, 'acc', v)};"]
        if k == 1:
            body.append(f"  for (int ridx = 0; ridx < {size}; ridx++) {{")
            body += [line[2:] for line in step]
        else:
            body.append(f"  for (int rb = 0; rb < {size}; rb += {k}) {{")
            for j in range(k):
                guard = f" if (ridx < {size})" if size % k else ""
                body.append(f"    {{ int ridx = rb + {j};{guard} {{")
                body += step
                body.append("    }}")
        body.append("  }")
        # the epilogue reads acc and gidx, never the loop's locals
        r2 = Renderer(device)
        r2.count = r.count
        epi = red.epilogue.rewrite_global_views()
        result = r2.expr(epi, "  ")
        body += r2.lines
    ret_t = TYPES[out_dt]
    nargs = kernel.nargs
    decls = []
    for i in range(nargs):
        decls.append(f"uniform highp usampler2D in{i};\nuniform int sh{i};")
        decls.append(
            f"uint ld{i}(int w) {{ int t = w >> 2; "
            f"return texelFetch(in{i}, ivec2(t & ((1 << sh{i}) - 1), t >> sh{i}), 0)[w & 3]; }}"
        )
    fn = [f"{ret_t} compute(int gidx) {{", *body, f"  return {result};", "}"]
    size = kernel.size
    mask = (1 << out_shift) - 1
    main = [
        "layout(location = 0) out uvec4 o;",
        "void main() {",
        f"  int t = (int(gl_FragCoord.y) << {out_shift}) + (int(gl_FragCoord.x) & {mask});",
        "  uvec4 r = uvec4(0u);",
    ]
    for c in range(4):
        if out_dt == F16:
            lo = f"(8 * t + {2 * c} < {size} ? compute(8 * t + {2 * c}) : 0.0)"
            hi = f"(8 * t + {2 * c + 1} < {size} ? compute(8 * t + {2 * c + 1}) : 0.0)"
            main.append(f"  r[{c}] = packHalf2x16(vec2({lo}, {hi}));")
        else:
            word = _store_word(out_dt, f"compute(4 * t + {c})")
            main.append(f"  if (4 * t + {c} < {size}) r[{c}] = {word};")
    main += ["  o = r;", "}"]
    code = "\n".join([*decls, *fn, *main])
    return HEADER + library_for(code) + code + "\n"


__all__ = ["AluVar", "kernel_shader", "Renderer", "const_literal", "float_literal"]
