"""The C dialect: what C99 on x86-64 (gcc -O2, no -ffast-math) computes natively, and how to spell it.

`C_TRAITS` is honest: IEEE float arithmetic, comparisons and division are exact in C without fast
math; integer `x / 0` and `INT_MIN / -1` are undefined (the latter traps on x86), float-to-int
casts out of range are undefined, shifts by 32 or more are undefined, and `fminf` ignores a NaN.
`legalize` turns each of those into guarded C from the core. Signed overflow is undefined too, so
int32 add, sub, mul and left shift are spelled on uint32 and converted back (gcc defines that
conversion as wrapping). float16 is stored as uint16 and computed in float, rounded to half after
every op (float's 24 bits make the double rounding of + - * / sqrt innocuous). The float32
transcendentals are the core's generated helpers; float64 ones are glibc's libm (a few ulp).
Every read is bounds-checked against the buffer's real size, so an out-of-range index reads 0.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

import numpy as np

from jaxcore.plugin import (
    INT32_MIN,
    AluExp,
    AluOp,
    CStyleLanguage,
    DType,
    ExpRenderer,
    TargetTraits,
    program,
    strip_parens,
)

C_TRAITS = TargetTraits(
    native_correct_division=True,
    native_nan_compare=True,
    nan_check_by_bits=False,  # x != x is a NaN test without -ffast-math
    native_float_to_bool=True,  # (x != 0) is true for NaN
    has_f16=False,  # no half arithmetic: float16 is computed in float, rounded per op
    has_f64=True,
)

F16, F32, F64 = DType.float16, DType.float32, DType.float64
I32, U32, BOOL = DType.int32, DType.uint32, DType.bool
_SFX = {F16: "f16", F32: "f32", F64: "f64", I32: "i32", U32: "u32", BOOL: "i32"}
_LIBM = ("sin", "cos", "asin", "atan", "exp", "log", "erf", "erfc")

_HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {
    **{  # bitcasts through memcpy (a union or pointer cast would break strict aliasing)
        name: (f"static inline {dst} {name}({src} x) {{ {dst} y; memcpy(&y, &x, {w}); return y; }}", ())
        for name, dst, src, w in (
            ("jc_f32_bits", "float", "uint32_t", 4),
            ("jc_bits_f32", "uint32_t", "float", 4),
            ("jc_f64_bits", "double", "uint64_t", 8),
        )
    },
    "jc_h2f": (  # float16 bits -> float, exactly (NaN payloads too)
        """static inline float jc_h2f(uint32_t h) {
  uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return jc_f32_bits(s | jc_bits_f32((float)m * 0x1p-24f));
  return jc_f32_bits(s | (e == 31 ? 0x7f800000u : (e + 112u) << 23) | (m << 13));
}""",
        ("jc_f32_bits", "jc_bits_f32"),
    ),
    "jc_d2h": (  # double -> float16 bits, one rounding to nearest even
        """static inline uint32_t jc_rne(uint64_t m, int sh) {
  uint64_t q = m >> sh, rem = m & ((1ull << sh) - 1), half = 1ull << (sh - 1);
  return (uint32_t)(q + (rem > half || (rem == half && (q & 1))));
}
static uint16_t jc_d2h(double d) {
  uint64_t b; memcpy(&b, &d, 8);
  uint32_t s = (uint32_t)(b >> 48) & 0x8000u;
  uint64_t a = b & 0x7fffffffffffffffull;
  if (a > 0x7ff0000000000000ull) return (uint16_t)(s | 0x7e00u);
  if (a >= 0x40effe0000000000ull) return (uint16_t)(s | 0x7c00u);
  if (a <= 0x3e60000000000000ull) return (uint16_t)s;
  if (a < 0x3f10000000000000ull)
    return (uint16_t)(s | jc_rne((a & 0xfffffffffffffull) | 0x10000000000000ull, 1051 - (int)(a >> 52)));
  return (uint16_t)(s | jc_rne(a - 0x3f00000000000000ull, 42));
}""",
        (),
    ),
    "jc_rf16": ("static inline float jc_rf16(double x) { return jc_h2f(jc_d2h(x)); }", ("jc_h2f", "jc_d2h")),
    "jc_f2h": (  # a half-valued float -> its bits, keeping a moved NaN's payload
        """static inline uint16_t jc_f2h(float f) {
  uint32_t b = jc_bits_f32(f), m = (b >> 13) & 0x3ffu;
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((b >> 16) & 0x8000u) | 0x7c00u | (m ? m : 0x200u));
  return jc_d2h(f);
}""",
        ("jc_bits_f32", "jc_d2h"),
    ),
    "jc_threefry": (
        """static uint32_t jc_threefry(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, int mode) {
  static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu}, x0 = c0 + k0, x1 = c1 + k1;
  for (int g = 1; g <= 5; g++) {
    for (int i = 0, r; i < 4; i++)
      r = rot[(g - 1) % 2][i], x0 += x1, x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0;
    x0 += ks[g % 3], x1 += ks[(g + 1) % 3] + (uint32_t)g;
  }
  return mode == 0 ? x0 : mode == 1 ? x1 : x0 ^ x1;
}""",
        (),
    ),
    **{
        f"jc_{op}_{t}": (f"static inline {ty} jc_{op}_{t}({ty} a, {ty} b) {{ return a {c} b ? a : b; }}", ())
        for t, ty in (("i32", "int32_t"), ("u32", "uint32_t"))
        for op, c in (("min", "<"), ("max", ">"))
    },
    **{
        f"jc_ld_{t}": (  # a bounds-checked read: out of range gives 0, never another buffer's bytes
            f"static inline {ty} jc_ld_{t}(const void* p, uint64_t nb, int32_t i) {{\n"
            f"  return (uint32_t)i < nb / {w} ? {conv}(((const {st}*)p)[(uint32_t)i]) : 0;\n}}",
            ("jc_h2f",) if t == "f16" else (),
        )
        for t, ty, st, w, conv in (
            ("f16", "float", "uint16_t", 2, "jc_h2f"),
            ("f32", "float", "float", 4, ""),
            ("f64", "double", "double", 8, ""),
            ("i32", "int32_t", "int32_t", 4, ""),
            ("u32", "uint32_t", "uint32_t", 4, ""),
        )
    },
    **{f"jc_{f}_f64": (f"static double jc_{f}_f64(double x) {{ return {f}(x); }}", ()) for f in _LIBM},
}


Render = Callable[[ExpRenderer, AluExp, list[str]], str]


def _arith(sym: str) -> Render:
    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.dtype == I32:  # signed overflow is undefined in C: wrap on uint32
            return f"((int32_t)((uint32_t){a[0]} {sym} (uint32_t){a[1]}))"
        return _round(r, e.dtype, f"({a[0]} {sym} {a[1]})")

    return render


def _round(r: ExpRenderer, dtype: DType, x: str) -> str:
    """`x` (computed in float) rounded to half when the node is float16."""
    return f"{r.need('jc_rf16')}({strip_parens(x)})" if dtype == F16 else x


def _libm(f32: str, f64: str, rounds: bool = True) -> Render:
    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        call = f"{f64 if e.dtype == F64 else f32}({', '.join(strip_parens(x) for x in a)})"
        return _round(r, e.dtype, call) if rounds else call

    return render


def _minmax(name: str, f32: str, f64: str) -> Render:
    def render(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.dtype in (I32, U32):  # legalize has taken the NaNs out of the float ones
            return f"{r.need(f'jc_{name}_{_SFX[e.dtype]}')}({strip_parens(a[0])}, {strip_parens(a[1])})"
        return _libm(f32, f64, False)(r, e, a)

    return render


def _idiv(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    if e.dtype in (I32, U32):  # legalize has guarded x / 0 and INT_MIN / -1
        return f"({a[0]} / {a[1]})"
    trunc = "trunc" if e.dtype == F64 else "truncf"
    return f"{trunc}({strip_parens(_round(r, e.dtype, f'({a[0]} / {a[1]})'))})"


_fmod = _libm("fmodf", "fmod", False)  # exact in IEEE, so float16 needs no rounding
_MODES = {"xor": 2, 0: 0, 1: 1}


class CLanguage(CStyleLanguage):
    name = "c"
    type_map = {F16: "float", F32: "float", F64: "double", I32: "int32_t", U32: "uint32_t", BOOL: "int32_t"}
    storage_type_map = {F16: "uint16_t"}
    traits = C_TRAITS
    helpers = _HELPERS
    code_for_op = {
        **CStyleLanguage.code_for_op,
        AluOp.Add: _arith("+"),
        AluOp.Sub: _arith("-"),
        AluOp.Mul: _arith("*"),
        AluOp.Idiv: _idiv,
        AluOp.Mod: lambda r, e, a: f"({a[0]} % {a[1]})" if e.dtype in (I32, U32) else _fmod(r, e, a),
        AluOp.Min: _minmax("min", "fminf", "fmin"),
        AluOp.Max: _minmax("max", "fmaxf", "fmax"),
        AluOp.Sqrt: _libm("sqrtf", "sqrt"),
        AluOp.Floor: _libm("floorf", "floor", False),
        AluOp.Ceil: _libm("ceilf", "ceil", False),
        AluOp.Reciprocal: lambda r, e, a: _round(
            r, e.dtype, f"({'1.0' if e.dtype == F64 else '1.0f'} / {a[0]})"
        ),
        AluOp.Threefry2x32: lambda r, e, a: f"{r.need('jc_threefry')}({', '.join(a)}, {_MODES[e.arg]})",
    }

    def render_const(self, r: ExpRenderer, value: float | int, dtype: DType) -> str:
        if dtype in (I32, U32, BOOL):
            v = int(value)
            return "(-2147483647 - 1)" if v == INT32_MIN else f"{v}u" if dtype == U32 else f"({v})"
        f = float(value)
        if math.isfinite(f):
            return f"({f.hex()}{'' if dtype == F64 else 'f'})"
        # inf and NaN by their bits (a NaN constant keeps its sign and payload)
        if dtype == F64:
            return f"{r.need('jc_f64_bits')}({struct.unpack('<Q', struct.pack('<d', f))[0]:#x}ull)"
        if dtype == F16:
            return f"{r.need('jc_h2f')}({int(np.array(f).astype(np.float16).view(np.uint16)):#x}u)"
        return f"{r.need('jc_f32_bits')}({int(np.array(f).astype(np.float32).view(np.uint32)):#x}u)"

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        if dst == src or (dst == F32 and src == F16):
            return x  # already a float: kept whole (its parentheses bind it)
        x = strip_parens(x)
        if dst == F16:  # one rounding from the exact double value
            return f"{r.need('jc_rf16')}({x})" if src != BOOL else f"((float)({x}))"
        if dst == BOOL:
            return f"(({x}) != 0)"
        return f"(({self.type_name(dst)})({x}))"

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        x = strip_parens(x)
        if src == F32:
            x = f"{r.need('jc_bits_f32')}({x})"
        if dst == F32:
            return f"{r.need('jc_f32_bits')}((uint32_t)({x}))"
        return f"(({self.type_name(dst)})({x}))"

    def render_bit(self, r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.op == AluOp.BitShift and e.arg == "shl" and e.dtype == I32:
            return f"((int32_t)((uint32_t){a[0]} << {a[1]}))"
        return super().render_bit(r, e, a)

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        gid = e.arg[0]
        return f"{r.need('jc_ld_' + _SFX[e.dtype])}(in{gid}, nb{gid}, {strip_parens(idx)})"

    def function_header(self, name: str, params: list[tuple[str, DType]], ret: DType) -> str:
        return "static " + super().function_header(name, params, ret)

    # ---- statements ----
    def render_prelude(self) -> str:
        return "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"

    def render_kernel(self, name: str, params: tuple[program.Param, ...], body: list[str]) -> str:
        """`void name(void* const* bufs, const uint64_t* nbytes)`: inputs in order, then the output."""
        lines = [f"void {name}(void* const* bufs, const uint64_t* nbytes) {{"]
        for i, p in enumerate(params):
            if p.output:
                st = self.storage_type(p.dtype)
                lines.append(f"  {st}* restrict {p.name} = ({st}*)bufs[{i}];")
            else:
                g = p.index
                lines.append(f"  const void* in{g} = bufs[{i}]; const uint64_t nb{g} = nbytes[{i}];")
        return "\n".join([*lines, *(f"  {ln}" for ln in body), "}", ""])

    def render_store(self, r: ExpRenderer, param: str, idx: str, value: str, dtype: DType) -> str:
        v = f"{r.need('jc_f2h')}({strip_parens(value)})" if dtype == F16 else strip_parens(value)
        return f"{param}[{strip_parens(idx)}] = {v};"
