"""The GLSL ES 3.00 dialect of the C-style renderer, and the fragment shader around a kernel.

One fragment computes one output texel: four 32-bit words, i.e. four elements of a 4-byte dtype
or eight float16 elements (two per word, `packHalf2x16`). Inputs are `usampler2D` units read
with `texelFetch` at run-time widths (`sh{i}` = log2 of the width), so one program serves
inputs of any size. Values live in GLSL types: float32 and float16 as `float` (float16 rounded
after every op through `packHalf2x16`, which rounds to nearest even; float32 has 2*11+2 bits, so
the double rounding is innocuous), int32 `int`, uint32 `uint`, bool `bool`.

GLSL leaves much of the contract undefined, and drivers flush denormals and fold NaN tests, so
this dialect spells those ops as calls to the exact helpers of `glsl_lib`. Its `TargetTraits`
therefore describe the dialect's spellings, not raw GLSL: `legalize` only has the bool rewrites
left to do.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from jaxcore.cstyle import CStyleLanguage, ExpRenderer, OpRender, strip_parens
from jaxcore.legalize import TargetTraits, legalize
from jaxcore.plugin import INT32_MIN, NORMAL_RANGE, AluExp, AluOp, DType, Kernel, UnsupportedOpError
from jaxcore_webgl import glsl_lib

HEADER = "#version 300 es\nprecision highp float;\nprecision highp int;\nprecision highp usampler2D;\n"
F32, F16, I32, U32, BOOL = DType.float32, DType.float16, DType.int32, DType.uint32, DType.bool
FLOATS = (F32, F16)
# llvmpipe ends a shader's loops after 65535 back-edges in all (one counter per invocation), so a
# reduction unrolls until each of the four per fragment stays under this many iterations.
LOOP_LIMIT = 12000

GLSL_TRAITS = TargetTraits(
    native_int_div_by_zero_is_zero=True,  # jx_idiv_*: magnitudes, x/0 = 0
    native_int_mod_by_zero_is_zero=True,  # jx_mod_*
    native_int_min_div_neg1=True,  # computed on uint magnitudes, wraps back to INT_MIN
    native_int_mod_truncates=True,
    native_nan_minmax=True,  # jx_min/jx_max: bit tests
    native_saturating_casts=True,  # jx_f2i/jx_f2u
    native_nan_compare=True,  # jx_lt/jx_ne: on the bits (NaN, ±0, flushed denormals)
    nan_check_by_bits=True,
    shift_masks_count=True,  # render_bit masks with & 31u
    native_float_to_bool=True,  # render_cast tests the bits
    has_f16=True,
    has_f64=False,
    exact_transcendentals=True,  # jx_exp/jx_log/jx_sin/... (the built-ins are not)
)


def float_literal(v: float) -> str:
    """An exact float32 literal: bits for NaN, infinities and denormals, shortest decimal otherwise."""
    f = np.float32(v)
    bits = struct.unpack("<I", struct.pack("<f", float(f)))[0]
    if not math.isfinite(float(f)) or (bits & 0x7F800000) == 0 and (bits & 0x7FFFFF) != 0:
        return f"uintBitsToFloat(0x{bits:08x}u)"
    text = repr(float(f))
    return text if ("e" in text or "." in text) else text + ".0"


def _h(name: str) -> OpRender:
    """A call of helper `name` on the operands."""
    return lambda r, e, a: f"{r.need(name)}({', '.join(strip_parens(x) for x in a)})"


def _f16(r: ExpRenderer, x: str) -> str:
    return f"{r.need('jx_f16')}({strip_parens(x)})"


def _opaque(r: ExpRenderer, x: str) -> str:
    return f"{r.need('jx_o')}({strip_parens(x)})"


def _arith(op: str, sym: str) -> OpRender:
    """+ - * on every dtype: float32 through the denormal-exact helpers, float16 rounded after."""

    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.dtype == F32 and e.arg == NORMAL_RANGE:  # never subnormal: the helpers' own fast path
            return f"({a[0]} {sym} {_opaque(r, a[1])})"
        if e.dtype == F32:
            return f"{r.need('jx_' + op)}({strip_parens(a[0])}, {strip_parens(a[1])})"
        if e.dtype == F16:  # the opaque operand stops x * 0.0 -> 0.0 and friends
            return _f16(r, f"{a[0]} {sym} {_opaque(r, a[1])}")
        return f"({a[0]} {sym} {a[1]})"

    return render


def _idiv(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    x, y = (strip_parens(v) for v in a)
    if e.dtype == F32:
        return f"trunc({r.need('jx_div')}({x}, {y}))"
    if e.dtype == F16:
        return f"trunc({_f16(r, f'{a[0]} / {_opaque(r, y)}')})"
    return f"{r.need('jx_idiv_i' if e.dtype == I32 else 'jx_idiv_u')}({x}, {y})"


def _mod(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    x, y = (strip_parens(v) for v in a)
    if e.dtype in FLOATS:
        return f"{r.need('jx_fmod')}({x}, {y})"  # exact, so already a float16 value for float16
    return f"{r.need('jx_mod_i' if e.dtype == I32 else 'jx_mod_u')}({x}, {y})"


def _minmax(fn: str) -> OpRender:
    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        x, y = (strip_parens(v) for v in a)
        return f"{r.need('jx_' + fn)}({x}, {y})" if e.dtype in FLOATS else f"{fn}({x}, {y})"

    return render


def _compare(helper: str, sym: str) -> OpRender:
    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.src[0].dtype in FLOATS:
            return f"{r.need(helper)}({strip_parens(a[0])}, {strip_parens(a[1])})"
        return f"({a[0]} {sym} {a[1]})"

    return render


def _unary(helper: str, f16_spelling: str | None = None) -> OpRender:
    """A float32 helper; float16 computes in float32 and rounds once (or uses an exact spelling)."""

    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        x = strip_parens(a[0])
        if e.op == AluOp.Reciprocal and e.dtype == F32 and e.arg == NORMAL_RANGE:
            return f"(1.0 / {_opaque(r, x)})"  # never subnormal: jx_div's own fast path
        if e.dtype == F16:
            if f16_spelling is not None:
                return f16_spelling.format(x=x, o=_opaque(r, x), f16=r.need("jx_f16"))
            return _f16(r, f"{r.need(helper)}({x})")
        return f"{r.need(helper)}({x})"

    return render


def _threefry(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    call = f"{r.need('jx_threefry')}({', '.join(strip_parens(x) for x in a)})"
    if e.arg == "xor":
        return f"{r.need('jx_xor2')}({call})"
    return f"{call}.{'x' if e.arg == 0 else 'y'}"


class GLSLLanguage(CStyleLanguage):
    """GLSL ES 3.00 (what WebGL2 compiles), with the contract's semantics through helpers."""

    name = "webgl"
    type_map = {F32: "float", F16: "float", I32: "int", U32: "uint", BOOL: "bool"}
    traits = GLSL_TRAITS
    let_prefix = "v"
    helpers = {
        **glsl_lib.HELPERS,
        "jx_xor2": ("uint jx_xor2(uvec2 v) { return v.x ^ v.y; }\n", ()),
    }
    code_for_op = {
        AluOp.Add: _arith("add", "+"),
        AluOp.Sub: _arith("sub", "-"),
        AluOp.Mul: _arith("mul", "*"),
        AluOp.Idiv: _idiv,
        AluOp.Mod: _mod,
        AluOp.Min: _minmax("min"),
        AluOp.Max: _minmax("max"),
        AluOp.Cmplt: _compare("jx_lt", "<"),
        AluOp.Cmpne: _compare("jx_ne", "!="),
        AluOp.Sin: _unary("jx_sin"),
        AluOp.Cos: _unary("jx_cos"),
        AluOp.Asin: _unary("jx_asin"),
        AluOp.Atan: _unary("jx_atan"),
        AluOp.Exp: _unary("jx_exp"),
        AluOp.Log: _unary("jx_log"),
        AluOp.Erf: _unary("jx_erf"),
        AluOp.Erfc: _unary("jx_erfc"),
        AluOp.Sqrt: _unary("jx_sqrt", "{f16}(sqrt({x}))"),
        AluOp.Floor: _unary("jx_floor", "floor({x})"),
        AluOp.Ceil: _unary("jx_ceil", "ceil({x})"),
        AluOp.Reciprocal: _unary("jx_rcp", "{f16}(1.0 / {o})"),
        AluOp.Threefry2x32: _threefry,
    }

    def render_const(self, r: ExpRenderer, value: float | int, dtype: DType) -> str:
        if dtype in FLOATS:
            return float_literal(float(value))
        if dtype == I32:
            return "int(0x80000000u)" if int(value) == INT32_MIN else str(int(value))
        if dtype == U32:
            return f"{int(value)}u"
        if dtype == BOOL:
            return "true" if value else "false"
        raise UnsupportedOpError(AluOp.Const, dtype, self.name)

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        operand = x  # as given (parenthesised where it must be), for the operator forms below
        x = strip_parens(x)  # for call arguments
        if src == dst or (src in FLOATS and dst == F32):
            return operand
        if dst == BOOL:
            if src in FLOATS:  # x != 0 with NaN true, on the bits (flushed denormals are nonzero)
                return f"((floatBitsToUint({x}) & 0x7fffffffu) != 0u)"
            return f"({operand} != {self.type_name(src)}(0))"
        if dst in FLOATS:
            if src == BOOL:
                return f"({operand} ? 1.0 : 0.0)"
            # an int through float and back must round: the opaque identity stops int(float(x)) -> x
            if src == U32:  # two exact halves, one rounding (ANGLE rounds float(uint) apart)
                v = _opaque(r, f"{r.need('jx_u2f')}({x})")
            else:
                v = x if src in FLOATS else _opaque(r, f"float({x})")
            return _f16(r, v) if dst == F16 else v
        if src in FLOATS:
            return f"{r.need('jx_f2i' if dst == I32 else 'jx_f2u')}({x})"
        if src == BOOL:  # 0/1 through an AND the compiler cannot drop (NVIDIA made true 0xffffffff)
            u = f"{r.need('jx_b2u')}({x})"
            return u if dst == U32 else f"int({u})"
        return f"{self.type_name(dst)}({x})"  # int <-> uint keeps the bits

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        x = strip_parens(x)
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
            raise UnsupportedOpError(AluOp.Bitcast, dst, self.name, {"from": str(src)})
        return code

    def render_op(self, r: ExpRenderer, e: AluExp, args: list[str]) -> str:
        if e.dtype not in self.type_map:
            raise UnsupportedOpError(e.op, e.dtype, self.name)
        if e.op == AluOp.Where and e.dtype in FLOATS and any(s.op == AluOp.Const for s in e.src[1:]):
            # compilers rewrite c ? -1.0 : 0.0 as -float(c), which is -0.0 when c is false; ANGLE on
            # SwiftShader (Chromium) did the same to c ? float(c) : 0.0 (one constant operand, browser
            # finding F4): every constant operand is opaque
            t, f = (_opaque(r, a) if s.op == AluOp.Const else a for s, a in zip(e.src[1:], args[1:]))
            if all(s.op == AluOp.Const for s in e.src[1:]):
                f = args[2]  # one opaque operand is enough when both are constants (as before)
            return f"({args[0]} ? {t} : {f})"
        return super().render_op(r, e, args)

    def render_bit(self, r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.op == AluOp.BitShift:  # counts mod 32; >> is arithmetic on int, logical on uint
            return f"({a[0]} {'<<' if e.arg == 'shl' else '>>'} (uint({strip_parens(a[1])}) & 31u))"
        return super().render_bit(r, e, a)

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        gid, i = e.arg[0], word_index(e.src[0].dtype, idx)
        if e.dtype == F16:
            return f"{r.need('jx_h')}(ld{gid}(({i}) >> 1), ({i}) & 1)"
        word = f"ld{gid}({i})"
        loads = {F32: f"uintBitsToFloat({word})", I32: f"int({word})", BOOL: f"({word} != 0u)"}
        return loads.get(e.dtype, word)

    def store_word(self, dtype: DType, v: str) -> str:
        """A value as the 32-bit word its buffer holds (bool as 0/1)."""
        return {F32: f"floatBitsToUint({v})", I32: f"uint({v})", U32: v, BOOL: f"({v} ? 1u : 0u)"}[dtype]


LANG = GLSLLanguage()


def _combine(r: ExpRenderer, red_op: AluOp, dtype: DType, acc: str, x: str) -> str:
    """One reduction step, spelled like the op itself (so float steps are exact too)."""
    op = {AluOp.Add: AluOp.Add, AluOp.Mul: AluOp.Mul, AluOp.Min: AluOp.Min, AluOp.Max: AluOp.Max}[red_op]
    if dtype == BOOL:
        return f"({acc} || {x})" if red_op in (AluOp.Add, AluOp.Max) else f"({acc} && {x})"
    return LANG.code_for_op[op](r, AluExp(op, dtype, (AluExp.variable(dtype, "acc"),) * 2), [acc, x])


def _hoist(top: ExpRenderer, exp: AluExp) -> None:
    """Bind the loop-invariant subexpressions of a reduction body (those not reading ridx) in `top`,
    before the loop, so the body looks them up instead of recomputing them every iteration."""
    varies: dict[str, bool] = {}
    for node in exp.nodes():
        v = node.op == AluOp.Variable and node.arg == "ridx"
        varies[node.key()] = v or any(varies[s.key()] for s in node.src)
    leaves = (AluOp.Const, AluOp.Variable, AluOp.Special)
    roots = []
    for node in exp.nodes():
        if varies[node.key()]:
            roots += [s for s in node.src if not varies[s.key()] and s.op not in leaves]
    for node in dict.fromkeys(roots):
        top.count(node)
        top.bind(node)


def word_index(dtype: DType, idx: str) -> str:
    """A read's element index as the `int` the loaders take (a uint32 index keeps its bits; one past
    INT32_MAX is out of range either way)."""
    return strip_parens(idx) if dtype == I32 else f"int({strip_parens(idx)})"


def f16_bits_literal(value: float) -> str:
    return f"{int(np.array(value, np.float16).view(np.uint16))}u"


def render_f16_bits(r: ExpRenderer, e: AluExp) -> str:
    """The 16 bits of float16 expression `e`. Values that are only moved (loads, Where's branches,
    constants, same-width bitcasts) stay on the raw bits, so NaN payloads survive drivers whose
    unpackHalf2x16/packHalf2x16 canonicalise them; only computed values go through a float.
    A node used more than once is bound to a `uint` let, like `ExpRenderer.render` does."""
    key = "f16bits:" + e.key()
    hit = r._lookup(key)
    if hit is not None:
        return hit
    if e.op == AluOp.GlobalIndex and e.dtype == F16:
        i = word_index(e.src[0].dtype, r.render(e.src[0]))
        s = f"{r.need('jx_hb')}(ld{e.arg[0]}(({i}) >> 1), ({i}) & 1)"
    elif e.op == AluOp.Where and e.dtype == F16:
        c = r.render(e.src[0])
        s = f"({c} ? {render_f16_bits(r, e.src[1])} : {render_f16_bits(r, e.src[2])})"
    elif e.op == AluOp.Const and e.dtype == F16:
        return f16_bits_literal(float(e.arg))
    elif e.op in (AluOp.Bitcast, AluOp.Cast) and e.src[0].dtype == F16:
        return render_f16_bits(r, e.src[0])
    else:
        s = f"{r.need('jx_ph')}({strip_parens(r.render(e))})"
    if r.uses.get(e.key(), 0) > 1:
        name = r.fresh()
        r.lines.append(f"uint {name} = {strip_parens(s)};")
        r.names[key] = name
        s = name
    return s


def _per_element(n: int, statement: str, written_out: bool) -> list[str]:
    """`statement` (of `c`, the element of this fragment) for c = 0 .. n-1: a loop, or written out.

    A loop by default: GLSL compilers inline every call, so n written-out calls compile compute()
    (and every helper it inlines) n times, ~6x longer on llvmpipe. Written out for browsers:
    ANGLE on SwiftShader takes minutes on some long compute() bodies inside the loop (one 9 KB
    fuzzed kernel: past 100 s in the loop, 1.1 s written out; tests/browser/FINDINGS.md F5)."""
    if not written_out:
        return [f"  for (int c = 0; c < {n}; c++) {{", f"    {statement}", "  }"]
    return [f"  {{ const int c = {c}; {statement} }}" for c in range(n)]


def kernel_shader(kernel: Kernel, out_shift: int, written_out: bool = False) -> str:
    """The fragment shader computing `kernel` into an output texture of width 2^out_shift
    (`written_out`: the per-word calls written out, as exported for browsers; see `_per_element`)."""
    out_dt = kernel.dtype
    if out_dt not in LANG.type_map:
        raise UnsupportedOpError(None, out_dt, LANG.name)
    red = kernel.reduction
    # a reduction folds its items cast to its own dtype (as tuner.tune_nullopt spells it)
    exp = kernel.exp if red is None else AluExp.cast(red.dtype, kernel.exp)
    exp = legalize(exp.rewrite_global_views(), GLSL_TRAITS)
    top = ExpRenderer(LANG)
    body: list[str] = []
    if red is None:
        top.count(exp)
        result = strip_parens(render_f16_bits(top, exp) if out_dt == F16 else top.render(exp))
        body += [f"  {line}" for line in top.lines]
    else:
        if red.dtype not in LANG.type_map:
            raise UnsupportedOpError(None, red.dtype, LANG.name)
        body.append(f"  {LANG.type_name(red.dtype)} acc = {LANG.render_const(top, red.identity, red.dtype)};")
        _hoist(top, exp)
        body += [f"  {line}" for line in top.lines]
        top.lines.clear()
        inner = top.child()
        inner.count(exp)
        v = inner.render(exp)
        step = [*inner.lines, f"acc = {strip_parens(_combine(inner, red.op, red.dtype, 'acc', v))};"]
        size = red.size
        k = max(1, -(-size // LOOP_LIMIT))
        if k == 1:
            body.append(f"  for (int ridx = 0; ridx < {size}; ridx++) {{")
            body += [f"    {line}" for line in step]
        else:
            body.append(f"  for (int rb = 0; rb < {size}; rb += {k}) {{")
            guard = f" if (ridx < {size})" if size % k else ""
            for j in range(k):
                body.append(f"    {{ int ridx = rb + {j};{guard} {{")
                body += [f"      {line}" for line in step]
                body.append("    }}")
        body.append("  }")
        epi = legalize(red.epilogue.rewrite_global_views(), GLSL_TRAITS)
        after = top.child()
        after.count(epi)
        result = strip_parens(render_f16_bits(after, epi) if out_dt == F16 else after.render(epi))
        body += [f"  {line}" for line in after.lines]
    return assemble(
        kernel.nargs, body, result, out_dt, kernel.size, out_shift, top.used_helpers, written_out=written_out
    )


def input_decls(nargs: int) -> list[str]:
    """The input samplers and their word loaders `ld{i}(word index)`."""
    decls = []
    for i in range(nargs):
        decls.append(f"uniform highp usampler2D in{i};\nuniform int sh{i};")
        decls.append(
            f"uint ld{i}(int w) {{ int t = w >> 2; "
            f"return texelFetch(in{i}, ivec2(t & ((1 << sh{i}) - 1), t >> sh{i}), 0)[w & 3]; }}"
        )
    return decls


def assemble(
    nargs: int,
    body: list[str],
    result: str,
    out_dt: DType,
    size: int,
    out_shift: int,
    helpers: set[str],
    extra_decls: tuple[str, ...] = (),
    written_out: bool = False,
) -> str:
    """The whole fragment shader: `compute(gidx)` (body lines, then `return result`) evaluated for
    the four words of this fragment's output texel (float16: `compute` returns 16 bits)."""
    decls = [*input_decls(nargs), *extra_decls]
    ret = "uint" if out_dt == F16 else LANG.type_name(out_dt)
    fn = [f"{ret} compute(int gidx) {{", *body, f"  return {result};", "}"]
    if out_dt == F16:  # `compute` returns each element's 16 bits: eight per texel, two per word
        n, store = 8, f"int g = 8 * t + c; if (g < {size}) r[c >> 1] |= compute(g) << uint(16 * (c & 1));"
    else:
        n, store = 4, f"int g = 4 * t + c; if (g < {size}) r[c] = {LANG.store_word(out_dt, 'compute(g)')};"
    main = [
        "layout(location = 0) out uvec4 o;",
        "void main() {",
        f"  int t = (int(gl_FragCoord.y) << {out_shift}) + (int(gl_FragCoord.x) & {(1 << out_shift) - 1});",
        "  uvec4 r = uvec4(0u);",
        *_per_element(n, store, written_out),
        "  o = r;",
        "}",
    ]
    code = "\n".join([*decls, *fn, *main])
    return HEADER + LANG.render_helpers(helpers) + code + "\n"
