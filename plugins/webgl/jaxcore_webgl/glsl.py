"""The GLSL ES 3.00 dialect of the C-style renderer, and the fragment shader around a kernel.

One fragment computes one output texel: four 32-bit words, i.e. four elements of a 4-byte dtype
or eight float16 elements (two per word, `packHalf2x16`). Inputs are `usampler2D` units read
with `texelFetch` at run-time widths (`sh{i}` = log2 of the width), so one program serves
inputs of any size. Values live in GLSL types: float32 and float16 as `float` (float16 rounded
after every op through `packHalf2x16`, which rounds to nearest even; float32 has 2*11+2 bits, so
the double rounding is innocuous), int32 `int`, uint32 `uint`, bool `bool`.

`GLSL_TRAITS` says what GLSL ES 3.00 defines, so `jaxcore.legalize` spells the rest of the
contract; the transcendentals are the core's generated helpers. What the drivers force below the
contract (denormal-exact float32, float16 on the bits, opaque identities) is `glsl_lib`.

A kernel is a statement program of the core (`jaxcore.program`: a Grid over the outputs, the
reduction's Define/Loop/Let/Accumulate, the Store) rendered by this dialect's statement hooks: the
grid is the function `compute(gidx)`, which returns one output's word, and `program_shader` wraps it
in the fragment whose main() calls it for each element of the texel.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from jaxcore.cstyle import OpRender
from jaxcore.plugin import (
    INT32_MIN,
    AluExp,
    AluOp,
    AluVar,
    CStyleLanguage,
    DType,
    ExpRenderer,
    Kernel,
    Reduction,
    TargetTraits,
    UnsupportedOpError,
    legalize,
    strip_parens,
)
from jaxcore.program import Accumulate, Define, Grid, Let, Loop, Param, Program, Stmt, Store, combine
from jaxcore_webgl import glsl_lib

HEADER = "#version 300 es\nprecision highp float;\nprecision highp int;\nprecision highp usampler2D;\n"
F32, F16, I32, U32, BOOL = DType.float32, DType.float16, DType.int32, DType.uint32, DType.bool
FLOATS = (F32, F16)
# llvmpipe ends a shader's loops after 65535 back-edges in all (one counter per invocation), so a
# reduction unrolls until each of the four per fragment stays under this many iterations.
LOOP_LIMIT = 12000
F16_BITS = "f16 bits"  # the arg of a Cast float16 -> uint32 that is the value's bits (f16_bits)
_LEAVES = (AluOp.Const, AluOp.Variable, AluOp.Special)

# What GLSL ES 3.00 (sections 4.5.1 and 5.9 of its spec) defines; every rule it leaves open
# (integer x/0, x%0 and INT_MIN/-1, NaN in min/max and compares, float -> int out of range, shifts
# by 32 or more, float -> bool) takes the TargetTraits default, False, so legalize spells it. The
# spec also leaves the rounding of `/` of negative integers open; every driver truncates it as C
# does (llvmpipe, NVIDIA, ANGLE on SwiftShader; legalize has no trait for it).
GLSL_TRAITS = TargetTraits(
    native_int_mod_truncates=False,  # Mesa's `%` of a negative int32 is the unsigned remainder
    has_f16=True,
    # highp need not support NaN and Inf (4.5.1): compilers fold x * 0.0, x - x and c ? -1.0 : 0.0
    # as if they were absent, and whatever they know when they compile
    folds_float_identities=True,
    assumes_finite_math=True,
    # ES 3.00 has no `precise`: Mesa fuses a * b + c into one rounding (divide_rn's exact
    # residuals were an ulp off on llvmpipe)
    contracts_mul_add=True,
    flushes_subnormals=True,  # llvmpipe and NVIDIA do (GLSL ES allows it)
    crashes_cancelling_across_sign_casts=True,  # NVIDIA's GL driver
)


def lower(exp: AluExp) -> AluExp:
    """`exp` as the dialect renders it: views as reads, then legalized for GLSL_TRAITS."""
    return legalize(exp.rewrite_global_views(), GLSL_TRAITS)


def _call(r: ExpRenderer, helper: str, a: list[str]) -> str:
    return f"{r.need(helper)}({', '.join(strip_parens(x) for x in a)})"


def _opaque(r: ExpRenderer, x: str) -> str:
    return _call(r, "jx_o", [x])


def _arith(sym: str, exact: str) -> OpRender:
    """+ - * natively (float32 where it may flush is `jaxcore.softfloat`'s); float16 through the
    float32 helper `exact`, rounded after: NVIDIA's compiler folded the native f16(tiny) * NaN to 0,
    having proved the rounded operand 0 (the helper decides NaN and zero on the bits)."""

    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.dtype == F16:
            return _call(r, "jx_f16", [_call(r, exact, a)])
        return f"({a[0]} {sym} {a[1]})"

    return render


def _unary(f16: str, f32: str) -> OpRender:
    """sqrt and 1/x of float16 (rounded after) and of a float32 marked normal; a shader declares
    only the helpers its template calls."""

    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        x = strip_parens(a[0])
        text = f16 if e.dtype == F16 else f32
        fields = {"x": x}
        if "{f16}" in text:
            fields["f16"] = r.need("jx_f16")
        if "{h}" in text:
            fields["h"] = r.need("jc_sqrt_f32")
        if "{o}" in text:
            fields["o"] = _opaque(r, x)
        return text.format(**fields)

    return render


def _mod(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    # exact fmodf (of float16 values too: the remainder is one); integers are guarded by legalize
    return _call(r, "jc_fmod_f32", a) if e.dtype in FLOATS else f"({a[0]} % {a[1]})"


def _threefry(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    call = _call(r, "jx_threefry", a)
    return _call(r, "jx_xor2", [call]) if e.arg == "xor" else f"{call}.{'x' if e.arg == 0 else 'y'}"


class GLSLLanguage(CStyleLanguage):
    """GLSL ES 3.00 (what WebGL2 compiles)."""

    name = "webgl"
    type_map = {F32: "float", F16: "float", I32: "int", U32: "uint", BOOL: "bool"}
    traits = GLSL_TRAITS
    let_prefix = "v"
    helpers = glsl_lib.HELPERS
    code_for_op = {
        **CStyleLanguage.code_for_op,
        AluOp.Add: _arith("+", "jc_add_f32"),
        AluOp.Sub: _arith("-", "jc_sub_f32"),
        AluOp.Mul: _arith("*", "jc_mul_f32"),
        AluOp.Mod: _mod,
        AluOp.Sqrt: _unary("{f16}({h}({x}))", "sqrt({x})"),
        AluOp.Reciprocal: _unary("{f16}(1.0 / {o})", "(1.0 / {o})"),
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

    def render_opaque(self, r: ExpRenderer, dtype: DType, x: str) -> str:
        if dtype not in FLOATS and dtype != U32:
            return super().render_opaque(r, dtype, x)
        return _opaque(r, x)

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        """The casts legalize leaves: float <-> float, int -> float, float -> int in range, bool ->
        number, int <-> uint (-> bool is a compare by then)."""
        if src == dst or (src in FLOATS and dst == F32):
            return x
        if dst in FLOATS and src == BOOL:
            return f"({x} ? 1.0 : 0.0)"
        x = strip_parens(x)
        if dst in FLOATS:
            # opaque: compilers fold int(float(i)) to i, which must round; ANGLE on SwiftShader
            # rounds float(uint) apart from nearest-even, so a uint converts in two exact halves
            if src == U32:
                x = _opaque(r, _call(r, "jx_u2f", [x]))
            elif src == I32:
                x = _opaque(r, f"float({x})")
            return _call(r, "jx_f16", [x]) if dst == F16 else x
        if src == BOOL:  # 0/1 through an AND the compiler cannot drop (NVIDIA made true 0xffffffff)
            u = _call(r, "jx_b2u", [x])
            return u if dst == U32 else f"int({u})"
        return f"{self.type_name(dst)}({x})"  # float -> int in range truncates; int <-> uint keeps bits

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        x = strip_parens(x)
        fn = {(I32, F32): "intBitsToFloat", (U32, F32): "uintBitsToFloat", (F32, I32): "floatBitsToInt"}
        fn |= {(F32, U32): "floatBitsToUint", (I32, U32): "uint", (U32, I32): "int"}
        if (src, dst) not in fn:
            raise UnsupportedOpError(AluOp.Bitcast, dst, self.name, {"from": str(src)})
        return f"{fn[(src, dst)]}({x})"

    def render_op(self, r: ExpRenderer, e: AluExp, args: list[str]) -> str:
        if e.dtype not in self.type_map:
            raise UnsupportedOpError(e.op, e.dtype, self.name)
        if e.op == AluOp.Cast and e.arg == F16_BITS:
            return _call(r, "jx_ph", args)
        if e.op == AluOp.Where and e.dtype in FLOATS and any(s.op == AluOp.Const for s in e.src[1:]):
            # compilers rewrite c ? -1.0 : 0.0 as -float(c), which is -0.0 when c is false; ANGLE on
            # SwiftShader (Chromium) did the same to c ? float(c) : 0.0 (one constant operand, browser
            # finding F4): a constant operand is opaque (one is enough when both are constants)
            t, f = (_opaque(r, a) if s.op == AluOp.Const else a for s, a in zip(e.src[1:], args[1:]))
            if e.src[1].op == e.src[2].op == AluOp.Const:
                f = args[2]
            return f"({args[0]} ? {t} : {f})"
        return super().render_op(r, e, args)

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        # the element index as the `int` the loaders take (a uint32 index keeps its bits; one past
        # INT32_MAX is out of range either way)
        gid, i = e.arg[0], strip_parens(idx) if e.src[0].dtype == I32 else f"int({strip_parens(idx)})"
        if e.dtype == F16:
            return f"{r.need('jx_h')}(ld{gid}(({i}) >> 1), ({i}) & 1)"
        word = f"ld{gid}({i})"
        loads = {F32: f"uintBitsToFloat({word})", I32: f"int({word})", BOOL: f"({word} != 0u)"}
        return loads.get(e.dtype, word)

    # The statements of a kernel's program (jaxcore.program): its grid is `compute(gidx)`, which
    # returns the output word (a float16's bits); `program_shader` calls it in main.
    def render_loop(self, var: str, size: int, step: int) -> tuple[str, str]:
        """The reduction loop runs to a bound the compiler cannot know (`jx_z` is a uniform 0):
        NVIDIA's GLSL compiler crashed the process (SIGSEGV in the first draw) on reduction loops
        it unrolled and found constant (a product reaching 0 at the first item, an and reaching
        false). Other loops (the helpers') keep their constant bound."""
        if var != "ridx":
            return super().render_loop(var, size, step)
        return f"for (int {var} = 0; {var} < {size} + int(jx_z); {var} += {step}) {{", "}"

    def render_source(
        self, program: Program, functions: list[str], helpers: set[str], body: list[str]
    ) -> str:
        if any("jx_z" in line for line in body):
            helpers = helpers | {"jx_z"}
        return super().render_source(program, functions, helpers, body)

    def render_grid(self, var: str, size: int) -> tuple[str, str]:
        return f"uint compute(int {var}) {{", "}"

    def render_store(self, r: ExpRenderer, param: str, idx: str, value: str, dtype: DType) -> str:
        v = strip_parens(value)
        word = {F32: f"floatBitsToUint({v})", I32: f"uint({v})", U32: v, BOOL: f"({value} ? 1u : 0u)"}[dtype]
        return f"return {word};"

    def render_kernel(self, name: str, params: tuple[Param, ...], body: list[str]) -> str:
        return "\n".join(body)


LANG = GLSLLanguage()


def float_literal(v: float) -> str:
    """An exact float32 literal: bits for NaN, infinities and denormals, shortest decimal otherwise."""
    f = np.float32(v)
    bits = struct.unpack("<I", struct.pack("<f", float(f)))[0]
    if not math.isfinite(float(f)) or (bits & 0x7F800000) == 0 and (bits & 0x7FFFFF) != 0:
        return f"uintBitsToFloat(0x{bits:08x}u)"
    text = repr(float(f))
    return text if ("e" in text or "." in text) else text + ".0"


def f16_bits(e: AluExp, memo: dict[str, AluExp] | None = None) -> AluExp:
    """The 16 bits of float16 `e` as a uint32 expression. Values that are only moved (loads, Where's
    branches, constants, same-width bitcasts) stay on the raw bits, so NaN payloads survive drivers
    whose unpackHalf2x16/packHalf2x16 canonicalise them; only computed values go through a float,
    and `jx_ph` (a Cast marked F16_BITS)."""
    memo = {} if memo is None else memo
    k = e.key()
    if k in memo:
        return memo[k]
    if e.op == AluOp.GlobalIndex:  # half (i & 1) of word i >> 1
        i = e.src[0]
        word = AluExp.global_index(U32, e.arg[0], -(-e.arg[1] // 2), AluExp.shr(i, 1))
        memo[k] = AluExp.bit_and(AluExp.shr(word, AluExp.shl(AluExp.bit_and(i, 1), 4)), 0xFFFF)
    elif e.op == AluOp.Where:
        memo[k] = AluExp.where(e.src[0], f16_bits(e.src[1], memo), f16_bits(e.src[2], memo))
    elif e.op == AluOp.Const:
        memo[k] = AluExp.u32(int(np.array(e.arg, np.float16).view(np.uint16)))
    elif e.op in (AluOp.Bitcast, AluOp.Cast) and e.src[0].dtype == F16:
        memo[k] = f16_bits(e.src[0], memo)
    else:
        memo[k] = AluExp(AluOp.Cast, U32, (e,), F16_BITS)
    return memo[k]


def _hoist(items: AluExp) -> tuple[list[Stmt], AluExp]:
    """The loop-invariant parts of a reduction's items (those not reading ridx) as lets before the
    loop, and the items reading them, so no trip computes them again."""
    varies: dict[str, bool] = {}
    roots: set[str] = set()
    for node in items.nodes():
        varies[node.key()] = node == AluVar.ridx or any(varies[s.key()] for s in node.src)
        if varies[node.key()]:
            roots |= {s.key() for s in node.src if not varies[s.key()] and s.op not in _LEAVES}
    names: dict[str, AluExp] = {}
    lets: list[Stmt] = []
    for node in items.nodes():  # operands first: a root inside another is read by it
        if node.key() in roots:
            value = node.rewrite(lambda n: names.get(n.key()))
            names[value.key()] = AluExp.variable(node.dtype, f"h{len(lets)}")
            lets.append(Let(f"h{len(lets)}", value))
    return lets, items.rewrite(lambda n: names.get(n.key()))


def _fold(items: AluExp, red: Reduction) -> list[Stmt]:
    """`acc` from the identity over the items in order: k a trip, k the least that keeps each of a
    fragment's loops within llvmpipe's budget, the last size % k written out after the loop."""
    lets, items = _hoist(items)
    acc, k = AluExp.variable(red.dtype, "acc"), max(1, -(-red.size // LOOP_LIMIT))
    main = red.size - red.size % k

    def item(j: int, ridx: AluExp) -> list[Stmt]:
        x = AluExp.variable(red.dtype, f"x{j}")
        step = combine(red.op, acc, x, GLSL_TRAITS)
        return [Let(x.arg, items.substitute({"ridx": ridx})), Accumulate("acc", red.op, step)]

    trip = [s for j in range(k) for s in item(j, AluVar.ridx + j if j else AluVar.ridx)]
    rest = [s for j in range(main, red.size) for s in item(j, AluExp.i32(j))]
    loop = Loop("ridx", main, tuple(trip), k)
    return [Define("acc", AluExp.const(red.dtype, red.identity)), *lets, loop, *rest]


def output_program(nargs: int, dtype: DType, size: int, value: AluExp, body: list[Stmt]) -> Program:
    """The grid over `size` outputs of `dtype`, reading `nargs` inputs: `body`, then the lowered
    `value` stored (float16 as its bits)."""
    params = [Param(f"in{i}", i, (U32,), 0) for i in range(nargs)]
    store = Store("out0", AluVar.gidx, f16_bits(value) if dtype == F16 else value)
    grid = Grid("gidx", size, (*body, store))
    return Program("compute", (*params, Param("out0", 0, (dtype,), size, True)), (grid,))


def kernel_shader(kernel: Kernel, out_shift: int, written_out: bool = False) -> str:
    """The fragment shader computing `kernel` into an output texture of width 2^out_shift
    (`written_out`: the per-word calls written out, as exported for browsers; see `program_shader`)."""
    red = kernel.reduction
    body = _fold(lower(AluExp.cast(red.dtype, kernel.exp)), red) if red else []
    value = lower(red.epilogue if red else kernel.exp)
    program = output_program(kernel.nargs, kernel.dtype, kernel.size, value, body)
    return program_shader(program, out_shift, (), written_out)


def program_shader(
    program: Program, out_shift: int, decls: tuple[str, ...] = (), written_out: bool = False
) -> str:
    """The whole fragment shader: the program's `compute(gidx)` (after the inputs and `decls`),
    called for each element of this fragment's output texel (four words; float16: eight halves).

    In a loop by default: GLSL compilers inline every call, so n written-out calls compile compute()
    (and every helper it inlines) n times, ~6x longer on llvmpipe. Written out for browsers: ANGLE
    on SwiftShader takes minutes on some long compute() bodies inside the loop (one 9 KB fuzzed
    kernel: past 100 s in the loop, 1.1 s written out; tests/browser/FINDINGS.md F5)."""
    out = program.params[-1]
    n = 8 if out.dtype == F16 else 4  # float16: `compute` returns 16 bits, two elements a word
    word = "r[c >> 1] |= compute(g) << uint(16 * (c & 1))" if n == 8 else "r[c] = compute(g)"
    each = f"int g = {n} * t + c; if (g < {out.elements}) {word};"
    if written_out:
        main = [f"  {{ const int c = {c}; {each} }}" for c in range(n)]
    else:
        main = [f"  for (int c = 0; c < {n}; c++) {{", f"    {each}", "  }"]
    head = [*input_decls(len(program.params) - 1), *decls, LANG.render_program(program)]
    return fragment("\n".join(head) + "\n", out_shift, "r", ("  uvec4 r = uvec4(0u);", *main))


def input_decls(nargs: int) -> list[str]:
    """The input samplers and their word loaders `ld{i}(word index)`."""
    return [
        f"uniform highp usampler2D in{i};\nuniform int sh{i};\nuint ld{i}(int w) {{ int t = w >> 2; "
        f"return texelFetch(in{i}, ivec2(t & ((1 << sh{i}) - 1), t >> sh{i}), 0)[w & 3]; }}"
        for i in range(nargs)
    ]


def fragment(decls: str, shift: int, store: str, body: tuple[str, ...] = ()) -> str:
    """A fragment shader writing texel t = (y << shift) + x of its target: `decls` (inputs,
    helpers, functions), then main's `body` lines and `o = store`."""
    t = f"  int t = (int(gl_FragCoord.y) << {shift}) + (int(gl_FragCoord.x) & {(1 << shift) - 1});"
    main = ["layout(location = 0) out uvec4 o;", "void main() {", t, *body, f"  o = {store};", "}"]
    return HEADER + decls + "\n".join(main) + "\n"
