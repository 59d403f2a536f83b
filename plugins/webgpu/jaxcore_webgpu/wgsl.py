"""The WGSL dialect of the C-style renderer: types, constants, op spellings and helper functions.

What WGSL defines natively and what it does not (WGSL spec, section 8.7 and 16):
- integer `x / 0` is `x` (not the contract's 0), `x % 0` is 0, `INT_MIN / -1` is `INT_MIN`;
- `min`/`max` of a NaN, float-to-int of a NaN, and `x != x` are not dependable (an implementation
  may assume no NaN or infinity), so those are legalized through bit tests;
- float-to-int clamps at the largest float below 2^31 rather than 2^31 - 1, so casts saturate in
  code;
- float `%` is `a - b * trunc(a / b)` (not exact), so `Mod` on floats is an exact helper;
- `sin`/`cos` are only bounded to 2^-11 absolute on [-pi, pi], and `exp`/`log`/`atan`/... have
  ULP bounds far above the tolerance table: float32 and float16 transcendentals are the core's
  helpers generated from `jaxcore.expansions` (`CStyleLanguage`'s default entries, rendered by this
  dialect); float64 (wgpu-native's `shader-f64`, never in browsers) takes the f64 series in
  `wgsl_helpers` (naga has no f64 bit access and SPIR-V's extended instructions are 32-bit);
- an implementation may assume no overflow, infinity or NaN (WGSL's floating point evaluation):
  `assumes_finite_math` makes legalize pass what the driver could fold through `opaque` (bits
  xor an unknown 0 for float32, a select on it for float64; numbered per call site);
- inf/NaN constants are not const-expressions (a const-expression producing one is a shader-
  creation error), so they come from helpers that bitcast a `let`; INT_MIN is `-2147483647i - 1i`
  (Chromium's Tint rejects an overflowing literal).
"""

from __future__ import annotations

import math

import numpy as np

from jaxcore import half
from jaxcore.alu import AluExp, AluOp
from jaxcore.cstyle import (
    CStyleLanguage,
    ExpRenderer,
    OpRender,
    strip_parens,
)
from jaxcore.dtype import INT32_MIN, DType, held_by_a_constant, is_float, to_numpy
from jaxcore.dtype import bitcast as bitcast_values
from jaxcore.dtype import cast as cast_values
from jaxcore.legalize import TargetTraits
from jaxcore.program import Program, WorkgroupFold
from jaxcore_webgpu import wgsl_helpers

WGSL_TRAITS = TargetTraits(
    native_int_div_by_zero_is_zero=False,  # WGSL: x / 0 == x
    native_int_mod_by_zero_is_zero=True,  # WGSL: x % 0 == 0
    native_int_min_div_neg1=True,  # WGSL: INT_MIN / -1 == INT_MIN, INT_MIN % -1 == 0
    native_nan_minmax=False,
    native_saturating_casts=False,
    native_float_trunc=False,  # lavapipe on an x86 without AVX-512: float64 trunc(q) gave q
    native_nan_compare=False,
    nan_check_by_bits=True,
    shift_masks_count=False,  # WGSL masks, but naga/SPIR-V paths differ; one AND is cheap
    native_float_to_bool=False,
    exact_transcendentals=False,
    contracts_mul_add=True,  # NVIDIA fuses a * b + c (per-op rounding and Dekker's residuals break)
    folds_float_identities=True,  # Mesa's NIR folds x * 0.0 -> 0.0 and x - x -> 0.0 (no SPIR-V exact)
    assumes_finite_math=True,  # WGSL: an implementation may assume no infinity or NaN
    divides_by_reciprocal=True,  # NVIDIA: float64 x / 7 as x * (1/7), an ulp off
    reassociates_sums=True,  # NVIDIA: (x - x) - 4 as x - (x + 4) in float64
    f32_inexact_beside_f64=True,  # NVIDIA: float32 quotients an ulp off beside float64 work
    # NVIDIA's float16 turned NaN into numbers and f32 infinity into finite float16; held in f32,
    # float16 also needs no shader-f16 (every browser runs it)
    f16_in_f32=True,
    flushes_subnormals=True,  # the device that runs an exported program is unknown; a probe may turn it off
)


def _mod(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    if e.dtype in (DType.float32, DType.float16):  # float16 held in float32: its fmod is one exactly
        return f"{r.need('jc_fmod_f32')}({strip_parens(a[0])}, {strip_parens(a[1])})"
    if e.dtype == DType.float64:
        return f"{r.need('jc_fmod_f64')}({strip_parens(a[0])}, {strip_parens(a[1])})"
    # Integers: a - (a / b) * b from WGSL's division (x / 0 is x there, INT_MIN / -1 is INT_MIN), and
    # x % 0 = 0 by the contract. Not `%`: NVIDIA's Vulkan driver computed i32 `%` of negative operands
    # as if unsigned (-1 % 7 gave 3 on an H200), while its `/` is right.
    zero = "0u" if e.dtype == DType.uint32 else "0i"
    return f"select({a[0]} - ({a[0]} / {a[1]}) * {a[1]}, {zero}, {a[1]} == {zero})"


def _threefry(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    call = f"{r.need('jc_threefry2x32')}({', '.join(strip_parens(x) for x in a)})"
    if e.arg == "xor":
        return f"{r.need('jc_threefry2x32_xor')}({', '.join(strip_parens(x) for x in a)})"
    return f"{call}.{'x' if e.arg == 0 else 'y'}"


def _minmax(fn: str, sym: str) -> OpRender:
    """Integers by a compare and a select: NVIDIA's Vulkan driver took an int32 min as unsigned
    (min(10, -10) gave 10 in a fuzzed reduction), as it did int32 `%`."""

    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.dtype in (DType.int32, DType.uint32):
            return f"select({strip_parens(a[1])}, {strip_parens(a[0])}, {a[0]} {sym} {a[1]})"
        return f"{fn}({strip_parens(a[0])}, {strip_parens(a[1])})"

    return render


def _cmpne(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    if e.arg == "isnan":  # legalize's non-bit NaN test
        return f"{r.need('jc_isnan_f32')}(f32({strip_parens(a[0])}))"
    return f"({a[0]} != {a[1]})"


_WGSL_BOOL_BIT = (("and", "&"), ("or", "|"), ("xor", "!="))


def f32_literal(v: float) -> str:
    """A WGSL f32 literal that parses back to exactly `v` (shortest round-trip digits)."""
    return f"{np.float32(v)}f"


_BITS_SELECT = "bitcast<f32>(select("


# Subgroup builtins of the entry point (WGSL subgroups; naga takes them without `enable subgroups;`,
# Tint needs it: export.py adds it). subgroup_id/num_subgroups make no assumption about how
# local_invocation_index maps to subgroups, nor that the subgroups are full.
_SUBGROUP_BUILTINS = (
    ", @builtin(subgroup_invocation_id) jc_sgi: u32, @builtin(subgroup_size) jc_sgsz: u32"
    ", @builtin(subgroup_id) jc_sgid: u32, @builtin(num_subgroups) jc_nsg: u32"
)
_SUBGROUP_OP = {
    AluOp.Add: "subgroupAdd",
    AluOp.Mul: "subgroupMul",
    AluOp.Min: "subgroupMin",
    AluOp.Max: "subgroupMax",
}
_SUBGROUP_BOOL = {
    AluOp.Add: "subgroupAny",
    AluOp.Max: "subgroupAny",
    AluOp.Mul: "subgroupAll",
    AluOp.Min: "subgroupAll",
}


def _subgroup_reduce(f: WorkgroupFold, v: str) -> list[str]:
    """Statements setting the accumulator to the subgroup-wide fold of `v` (in uniform control flow).

    Integer ops wrap as the contract's do (SPIR-V/MSL/HLSL integer group ops are two's complement).
    Float min/max run on u32 keys in float order (exact on a device that flushes subnormals; a
    float group op also leaves NaN unspecified), and a NaN is carried beside them by its bits:
    the largest NaN bit pattern of the subgroup (0 when there is none) replaces the result."""
    if f.dtype == DType.bool:
        return [f"{f.name} = {_SUBGROUP_BOOL[f.op]}({v});"]
    op = _SUBGROUP_OP[f.op]
    if f.dtype == DType.float32 and f.op in (AluOp.Min, AluOp.Max):
        return [
            f"let jc_b = bitcast<u32>({v});",
            "let jc_nan = subgroupMax(select(0u, jc_b, (jc_b & 0x7fffffffu) > 0x7f800000u));",
            f"let jc_k = {op}(select(jc_b | 0x80000000u, ~jc_b, jc_b >= 0x80000000u));",
            "let jc_v = select(~jc_k, jc_k & 0x7fffffffu, jc_k >= 0x80000000u);",
            f"{f.name} = bitcast<f32>(select(jc_v, jc_nan, jc_nan != 0u));",
        ]
    return [f"{f.name} = {op}({v});"]


# float16 buffers hold 16-bit patterns, two a u32 word (`f16_in_f32`): `jc_ld16_<buffer>(i)` reads
# element i as its float32 value, `jc_st16_<buffer>(i, v)` writes one half of a word with two
# atomics, so the thread writing the other half cannot undo it.
_LOAD16, _STORE16 = "jc_ld16_", "jc_st16_"


def _half_word_helper(name: str) -> tuple[str, tuple[str, ...]]:
    buf = name[len(_LOAD16) :]
    if name.startswith(_LOAD16):
        src = (
            f"fn {name}(i: u32) -> f32 {{\n"
            f"  return jc_f16_value(({buf}[i >> 1u] >> ((i & 1u) << 4u)) & 0xffffu);\n}}"
        )
        return src, (half.F16_VALUE,)
    src = (
        f"fn {name}(i: u32, v: f32) {{\n"
        "  let s = (i & 1u) << 4u;\n"
        f"  atomicAnd(&{buf}[i >> 1u], ~(0xffffu << s));\n"
        f"  atomicOr(&{buf}[i >> 1u], jc_f16_bits(v) << s);\n}}"
    )
    return src, (half.F16_BITS,)


def _to_storage(dtype: DType, s: str) -> str:
    return f"select(0i, 1i, {s})" if dtype == DType.bool else s


def _from_storage(dtype: DType, s: str) -> str:
    return f"({s} != 0i)" if dtype == DType.bool else s


class WGSLLanguage(CStyleLanguage):
    name = "webgpu"
    type_map = {
        DType.float32: "f32",
        DType.int32: "i32",
        DType.uint32: "u32",
        DType.bool: "bool",
        DType.float16: "f16",
        DType.float64: "f64",
    }
    storage_type_map = {DType.bool: "i32"}
    traits = WGSL_TRAITS
    code_for_op = {
        **CStyleLanguage.code_for_op,
        AluOp.Mod: _mod,
        AluOp.Min: _minmax("min", "<"),
        AluOp.Max: _minmax("max", ">"),
        AluOp.Reciprocal: lambda r, e, a: f"({r.lang.render_const(r, 1.0, e.dtype)} / {a[0]})",
        AluOp.Threefry2x32: _threefry,
        AluOp.Cmpne: _cmpne,
    }
    helpers = wgsl_helpers.HELPERS

    @property
    def exact_subnormals(self) -> bool:
        """float32 spelled exact on subnormals (`TargetTraits.flushes_subnormals`, `jaxcore.softfloat`):
        WGSL lets an implementation flush them (Chromium on SwiftShader, Direct3D, some Metal paths,
        NVIDIA's Vulkan driver do). Exported browser programs need it on."""
        return self.traits.flushes_subnormals

    features: set[str]  # {"f64"} when the program uses float64; the code generator sets it per program
    _opaque_sites: int = 0  # opaque call sites rendered so far (render_opaque)

    def render_const(self, r: ExpRenderer, value: float | int, dtype: DType) -> str:
        if dtype == DType.bool:
            return "true" if value else "false"
        if dtype == DType.int32:
            v: int | float = int(value)  # (the float path below reuses the name)
            if v == INT32_MIN:
                return "(-2147483647i - 1i)"
            return f"{v}i" if v >= 0 else f"(-{-v}i)"
        if dtype == DType.uint32:
            return f"{int(value)}u"
        v = float(value)
        if dtype == DType.float16:
            return self._held_f16_const(r, v)
        sfx = {DType.float32: "f32", DType.float64: "f64"}[dtype]
        if math.isnan(v):
            return self._nan(r, v, dtype, sfx)
        if math.isinf(v):
            s = self._special_float(r, "inf", sfx)
            return s if v > 0 else f"(-{s})"
        if dtype == DType.float32:
            bits = int(np.float32(v).view(np.uint32))
            if v == 0.0 and math.copysign(1.0, v) < 0 or (v != 0.0 and abs(v) < 2.0**-126):
                return f"bitcast<f32>({bits}u)"  # -0 and subnormals: no const-eval flushing
            s = f32_literal(v)
        else:
            if v == 0.0 and math.copysign(1.0, v) < 0:
                return "(-0.0lf)"
            s = f"{v!r}lf"
        return s if v >= 0 else f"({s})"

    def _held_f16_const(self, r: ExpRenderer, v: float) -> str:
        """A float16 constant, held in float32 (`f16_in_f32`); a NaN keeps its float16 bits."""
        if math.isnan(v):
            return f"{r.need('jc_bits_f32')}({half.held_bits(v)}u)"
        return self.render_const(r, float(np.float16(v)), DType.float32)

    def _nan(self, r: ExpRenderer, v: float, dtype: DType, sfx: str) -> str:
        """A NaN constant with its sign and payload (a constant's bits are the contract's, unlike a
        computed NaN's), from a run-time bitcast: a NaN const-expression is a WGSL error."""
        if dtype == DType.float32:
            bits = int(np.array(v, np.float64).astype(np.float32).view(np.uint32))
            if bits != 0x7FC00000:
                return f"{r.need('jc_bits_f32')}({bits}u)"
        # float64: canonical (naga has no f64 bitcast)
        return self._special_float(r, "nan", sfx)

    def _special_float(self, r: ExpRenderer, kind: str, sfx: str) -> str:
        if sfx == "f64":
            return f"f64({r.need(f'jc_{kind}_f32')}())"
        return f"{r.need(f'jc_{kind}_{sfx}')}()"

    def render_op(self, r: ExpRenderer, e: AluExp, args: list[str]) -> str:
        if e.op in (AluOp.Cast, AluOp.Bitcast) and e.arg is None and e.src[0].op == AluOp.Const:
            # A cast of a constant is the constant in the new dtype, converted by the contract here:
            # naga's const-evaluator cannot convert an f64 literal (`f32(5.0lf)` is rejected), and
            # a bitcast to a NaN must keep its bits (render_const spells them at run time).
            (c,) = e.src
            bits = e.op == AluOp.Bitcast and not is_float(c.dtype)
            if bits and not held_by_a_constant(int(c.arg), e.dtype):
                return f"{r.need('jc_bits_f32')}({int(c.arg) & 0xFFFFFFFF}u)"  # a signalling NaN
            convert = cast_values if e.op == AluOp.Cast else bitcast_values
            value = convert(np.array([c.arg], dtype=to_numpy(c.dtype)), c.dtype, e.dtype)[0]
            return self.render_const(r, value.item(), e.dtype)
        floats = (DType.float32, DType.float16)  # float16 is held in float32 (f16_in_f32)
        if e.op == AluOp.Where and e.dtype in floats and any(s.op == AluOp.Const for s in e.src[1:]):
            return self._select_bits(e, args)
        return super().render_op(r, e, args)

    def helper_source(self, name: str) -> tuple[str, tuple[str, ...]]:
        if name.startswith((_LOAD16, _STORE16)):
            return _half_word_helper(name)
        return super().helper_source(name)

    def render_opaque(self, r: ExpRenderer, dtype: DType, x: str) -> str:
        """`jc_o_<t>(x, k)`, `k` this call site's number in the program (see wgsl_helpers)."""
        self._opaque_sites += 1
        return f"{r.need('jc_o_' + self.type_name(dtype))}({strip_parens(x)}, {self._opaque_sites}u)"

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        if dst == DType.bool:
            return f"({x} != {self.render_const(r, 0, src)})"
        return f"{self.type_name(dst)}({strip_parens(x)})"

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        return f"bitcast<{self.type_name(dst)}>({strip_parens(x)})"

    def _select_bits(self, e: AluExp, args: list[str]) -> str:

        # A select with a float constant operand picks between bit patterns, the constants
        # written as u32 literals: Chromium's WebGPU (Tint, SwiftShader) lost the sign of zero
        # constants in such selects (+0.0 for bitcast<f32>(0x80000000u), -0.0 for 0.0f),
        # even through bitcast<u32>(); an integer literal in an integer select keeps every bit.
        # Nested ones stay in u32 (one bitcast per chain: Tint limits the parser's nesting depth).
        def bits(src: AluExp, text: str) -> str:
            if src.op == AluOp.Const and src.dtype == DType.float16:
                return f"{half.held_bits(src.arg)}u"
            if src.op == AluOp.Const:
                return f"{int(np.array(src.arg, dtype=np.float32).view(np.uint32))}u"  # NaN payloads too
            text = strip_parens(text)
            inner = strip_parens(call := text.removeprefix("bitcast<f32>"))
            if src.op == AluOp.Where and text.startswith(_BITS_SELECT) and inner != call:
                return inner  # a nested bit select (one call, the whole text) stays in u32
            return f"bitcast<u32>({text})"

        c = strip_parens(args[0])
        return f"bitcast<f32>(select({bits(e.src[2], args[2])}, {bits(e.src[1], args[1])}, {c}))"

    def render_where(self, r: ExpRenderer, c: str, t: str, f: str) -> str:
        return f"select({strip_parens(f)}, {strip_parens(t)}, {strip_parens(c)})"

    def render_bit(self, r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.op == AluOp.BitShift:
            count = a[1] if e.src[1].dtype == DType.uint32 else f"bitcast<u32>({strip_parens(a[1])})"
            return f"({a[0]} {'<<' if e.arg == 'shl' else '>>'} {count})"
        if e.dtype == DType.bool:
            return f"({a[0]} {dict(_WGSL_BOOL_BIT)[e.arg]} {a[1]})"
        return super().render_bit(r, e, a)

    def function_header(self, name: str, params: list[tuple[str, DType]], ret: DType) -> str:
        args = ", ".join(f"{p}: {self.type_name(dt)}" for p, dt in params)
        return f"fn {name}({args}) -> {self.type_name(ret)} {{"

    def render_let(self, name: str, dtype: DType, value: str) -> str:
        return f"let {name}: {self.type_name(dtype)} = {strip_parens(value)};"

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        if e.dtype == DType.float16:  # 16-bit patterns in u32 words
            return f"{r.need(f'{_LOAD16}in{e.arg[0]}')}(u32({strip_parens(idx)}))"
        load = f"in{e.arg[0]}[{strip_parens(idx)}]"
        return f"({load} != 0i)" if e.dtype == DType.bool else load

    # ---- statements (jaxcore.program) ----
    uses_uniform: bool = False  # whether the last program rendered calls jc_zero (the uniform block)

    def render_source(
        self, program: Program, functions: list[str], helpers: set[str], body: list[str]
    ) -> str:
        """Enables, the storage bindings, helpers, then `main` over the flat workgroup index `wg`
        (a grid folded into 2-D/3-D is linearised here); every binding is used, so `layout="auto"`
        sees them all."""
        decls = []
        for b, p in enumerate(program.params):
            ty = self.storage_type(p.dtype)
            if p.dtype == DType.float16 and not p.scratch:  # 16-bit patterns, two a word
                ty = "atomic<u32>" if p.output else "u32"
            ty = f"vec{p.lanes}<{ty}>" if p.lanes > 1 else ty
            access = "read_write" if p.output or p.scratch else "read"
            decls.append(f"@group(0) @binding({b}) var<storage, {access}> {p.name}: array<{ty}>;")
        self.uses_uniform = "jc_zero" in self.helper_order(helpers)
        gx, gy, _ = program.grid
        folds = [s for s in program.statements() if isinstance(s, WorkgroupFold)]
        sg = _SUBGROUP_BUILTINS if any(f.subgroups for f in folds) else ""
        main = [
            f"@compute @workgroup_size({program.local}, 1, 1)",
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32"
            f"{sg}) {{",
            *(f"  _ = &{p.name};" for p in program.params),
            f"  let wg: u32 = wid.x + wid.y * {gx}u + wid.z * {gx * gy}u;",
            *(f"  {ln}" for ln in body),
            "}",
            "",
        ]
        return "\n".join([*decls, *functions, self.render_helpers(helpers), *main])

    def render_function_def(
        self, name: str, params: list[tuple[str, DType]], ret: DType, lines: list[str], value: str
    ) -> str:
        body = "".join(f"  {ln}\n" for ln in lines)
        return f"{self.function_header(name, params, ret)}\n{body}  return {value};\n}}\n"

    def render_define(self, name: str, dtype: DType, value: str) -> str:
        return f"var {name}: {self.type_name(dtype)} = {value};"

    def render_loop(self, var: str, size: int, step: int) -> tuple[str, str]:
        return f"for (var {var}: i32 = 0i; {var} < {size}i; {var} = {var} + {step}i) {{", "}"

    def render_thread_index(self, var: str, size: int, local: int) -> list[str]:
        u = f"{var}u" if var.startswith("jc_") else f"{var}_u"
        return [
            f"let {u}: u32 = wg * {local}u + lid;",
            f"if ({u} >= {size}u) {{ return; }}",
            f"let {var}: i32 = i32({u});",
        ]

    def render_local_index(self, var: str) -> str:
        return f"let {var}: i32 = i32(lid);"

    def render_workgroup_index(self, var: str, size: int, parts: int, part_var: str) -> list[str]:
        if parts == 1:
            return [f"if (wg >= {size}u) {{ return; }}", f"let {var}: i32 = i32(wg);"]
        return [
            f"if (wg >= {size * parts}u) {{ return; }}",
            f"let {var}: i32 = i32(wg / {parts}u);",
            f"let {part_var}: i32 = i32(wg % {parts}u);",
        ]

    def render_strided_loop(
        self, var: str, size: int, threads: int, parts: int, part_var: str
    ) -> tuple[str, str]:
        start = "i32(lid)" if parts == 1 else f"{part_var} * {threads}i + i32(lid)"
        return f"for (var {var}: i32 = {start}; {var} < {size}i; {var} = {var} + {parts * threads}i) {{", "}"

    def render_local_array(self, name: str, dtype: DType, size: int) -> str:
        return f"var<workgroup> {name}: array<{self.storage_type(dtype)}, {size}>;"

    def render_first_thread(self, subgroups: bool) -> tuple[str, str]:
        return f"if ({'jc_sgid == 0u && jc_sgi == 0u' if subgroups else 'lid == 0u'}) {{", "}"

    def render_store_partial(self, param: str, name: str, dtype: DType, subgroups: bool) -> str:
        head, tail = self.render_first_thread(subgroups)
        return f"{head} {param}[wg] = {_to_storage(dtype, name)}; {tail}"

    def render_element(self, param: str, idx: str, dtype: DType) -> str:
        return _from_storage(dtype, f"{param}[{idx}]")

    def render_workgroup_fold(self, r: ExpRenderer, f: WorkgroupFold) -> list[str]:
        """A tree over the local array (log2(threads) barriers) or, with subgroups, a subgroup op,
        one partial a subgroup in the array, one barrier and a subgroup op over the partials."""
        a, dt = f.array, f.dtype
        if not f.subgroups:
            combined = f"{f.fn}({_from_storage(dt, f'{a}[lid]')}, {_from_storage(dt, f'{a}[lid + s]')})"
            return [
                f"{a}[lid] = {_to_storage(dt, f.name)};",
                "workgroupBarrier();",
                f"for (var s: u32 = {f.threads // 2}u; s > 0u; s = s >> 1u) {{",
                "  if (lid < s) {",
                f"    {a}[lid] = {_to_storage(dt, combined)};",
                "  }",
                "  workgroupBarrier();",
                "}",
                f"{f.name} = {_from_storage(dt, f'{a}[0]')};",
            ]
        # The subgroup size is a run-time value (any of 4..128, the subgroups maybe not full), so the
        # second step folds partials `jc_sgi + i * jc_sgsz` in a loop whose bound is uniform; every
        # subgroup runs it (subgroup ops must be in uniform control flow).
        return [
            "{",
            *(f"  {ln}" for ln in _subgroup_reduce(f, f.name)),
            f"  if (jc_sgi == 0u) {{ {a}[jc_sgid] = {_to_storage(dt, f.name)}; }}",
            "}",
            "workgroupBarrier();",
            "{",
            f"  var jc_p: {self.type_name(dt)} = {r.render(f.identity)};",
            "  for (var jc_i: u32 = 0u; jc_i < jc_nsg; jc_i = jc_i + jc_sgsz) {",
            "    let jc_k = jc_i + jc_sgi;",
            f"    if (jc_k < jc_nsg) {{ jc_p = {f.fn}(jc_p, {_from_storage(dt, f'{a}[jc_k]')}); }}",
            "  }",
            *(f"  {ln}" for ln in _subgroup_reduce(f, "jc_p")),
            "}",
        ]

    def render_vec_load(self, name: str, param: str, idx: str) -> str:
        return f"let {name} = {param}[{strip_parens(idx)}];"

    def render_vec_store(self, r: ExpRenderer, param: str, idx: str, values: list[str], dtype: DType) -> str:
        vec = f"vec{len(values)}<{self.type_name(dtype)}>"
        return f"{param}[{strip_parens(idx)}] = {vec}({', '.join(values)});"

    def render_store(self, r: ExpRenderer, param: str, idx: str, value: str, dtype: DType) -> str:
        if dtype == DType.float16:
            return f"{r.need(_STORE16 + param)}(u32({strip_parens(idx)}), {strip_parens(value)});"
        return f"{param}[{idx}] = {self.store_value(r, dtype, value)};"

    def store_value(self, r: ExpRenderer, dtype: DType, x: str) -> str:
        """A value of `dtype` as its storage type (bool -> i32 0/1)."""
        return f"select(0i, 1i, {strip_parens(x)})" if dtype == DType.bool else strip_parens(x)
