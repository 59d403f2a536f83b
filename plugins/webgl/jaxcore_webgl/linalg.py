"""TriangularSolve, Cholesky, LU, Fft and JacobiEigh as render passes over float32 work textures.

Each step of the textbook algorithm is one full-texture draw: back substitution solves one column
of unknowns per pass, Cholesky computes one column of L per pass, LU pivots and eliminates one
column per pass (each fragment finds the pivot itself: the first largest |a_ij|, a NaN never
winning, as the reference does); Fft runs one mixed-radix Stockham pass per factor on (re, im)
pairs, its twiddles cos/sin(2 pi num/den) reduced exactly in integers. Inputs are widened to
float32 words first and the results narrowed at the end, so float16 computes in float32 and rounds
once (the contract's tolerance for float16 linear algebra). Entries that do not change in a step
are copied, ping-ponging between two textures; no shader loops longer than a matrix dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from jaxcore.plugin import DType, FftParams, JacobiEighParams, Routine, Routines, TriangularSolveParams
from jaxcore_webgl.device import TEXEL_BYTES, Device, Program, Texture, texture_dims
from jaxcore_webgl.glsl import HEADER, LANG, input_decls

NAN = "uintBitsToFloat(0x7fc00000u)"
COMMON = f"""bool isnan_(float x) {{ return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }}
float sqrt_(float x) {{ return isnan_(x) || x < 0.0 ? {NAN} : sqrt(x); }}
"""


def _inputs(n: int) -> str:
    """The loaders of `glsl.input_decls` and `r{i}(e)`, word e of input i as a float."""
    floats = [f"float r{i}(int e) {{ return uintBitsToFloat(ld{i}(e)); }}" for i in range(n)]
    return "".join(line + "\n" for line in (*input_decls(n), *floats))


def word_pass(nargs: int, count: int, shift: int, body: str, uniforms: tuple[str, ...] = ()) -> str:
    """A shader writing `count` 32-bit words, word e = `uint f(int e) { body }`."""
    decl = "".join(f"uniform int {u};\n" for u in uniforms)
    return (
        HEADER
        + _inputs(nargs)
        + decl
        + COMMON
        + f"uint f(int e) {{\n  if (e >= {count}) return 0u;\n{body}\n}}\n"
        + "layout(location = 0) out uvec4 o;\nvoid main() {\n"
        + f"  int t = (int(gl_FragCoord.y) << {shift}) + int(gl_FragCoord.x);\n"
        + "  o = uvec4(f(4 * t), f(4 * t + 1), f(4 * t + 2), f(4 * t + 3));\n}\n"
    )


def widen(dtype: DType, count: int, shift: int) -> str:
    """Buffer of `dtype` -> float32 words."""
    if dtype == DType.float16:
        body = "  uint w = ld0(e >> 1);\n  return floatBitsToUint(unpackHalf2x16(w)[e & 1]);"
    else:
        body = "  return ld0(e);"
    return word_pass(1, count, shift, body)


def narrow(dtype: DType, count: int, shift: int) -> str:
    """float32 words -> buffer of `dtype` (float16: two per word, rounded to nearest even)."""
    if dtype != DType.float16:
        return word_pass(1, count, shift, "  return ld0(e);")
    body = (
        f"  float lo = r0(2 * e);\n  float hi = 2 * e + 1 < {count} ? r0(2 * e + 1) : 0.0;\n"
        "  return packHalf2x16(vec2(lo, hi));"
    )
    return word_pass(1, -(-count // 2), shift, body)


@dataclass
class PassPlan:
    """Programs plus a schedule: `steps` runs them on the device with ping-pong work textures."""

    steps: Callable[[Device, list[Texture], list[Texture]], None]
    programs: dict[str, Program] = field(default_factory=dict)

    def run(self, dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        self.steps(dev, inputs, outputs)


def _texels(words: int) -> int:
    return max(1, -(-words * 4 // TEXEL_BYTES))


def _shift(words: int, max_size: int) -> int:
    return texture_dims(words * 4, max_size)[2]


def _out_shift(dtype: DType, count: int, max_size: int) -> int:
    width = 2 if dtype == DType.float16 else 4
    return texture_dims(count * width, max_size)[2]


def _narrow_texels(dtype: DType, count: int) -> int:
    width = 2 if dtype == DType.float16 else 4
    return max(1, -(-count * width // TEXEL_BYTES))


def triangular_solve_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """x a^T = b row by row of b: x_i = (b_i - sum_{j>i} a_ij x_j) / a_ii, i = n-1 .. 0."""
    t = routine.type
    a_shape, b_shape = t.input_shapes
    dtype = t.input_dtypes[1]
    n, m = a_shape[-1], b_shape[-2]
    batch = math.prod(a_shape[:-2])
    params = routine.params
    unit = isinstance(params, TriangularSolveParams) and params.unit_diagonal
    wa, wb = batch * n * n, batch * m * n
    sa, sb = _shift(wa, max_size), _shift(wb, max_size)
    div = "" if unit else f" / r0(bb * {n * n} + i * {n} + i)"
    body = (
        f"  int c = e % {n}; int row = e / {n}; int bb = row / {m};\n"
        "  if (c != u_i) return ld2(e);\n  int i = u_i;\n"
        "  float s = r1(e);\n"
        f"  for (int j = i + 1; j < {n}; j++) s -= r0(bb * {n * n} + i * {n} + j) * r2(row * {n} + j);\n"
        f"  return floatBitsToUint(s{div});"
    )
    progs = {
        "wa": dev.program(widen(dtype, wa, sa), 1),
        "wb": dev.program(widen(dtype, wb, sb), 1),
        "step": dev.program(word_pass(3, wb, sb, body, ("u_i",)), 3, ("u_i",)),
        "out": dev.program(narrow(dtype, wb, _out_shift(dtype, wb, max_size)), 1),
    }

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if wb == 0:
            return
        a, b = dev.alloc(wa * 4), dev.alloc(wb * 4)
        x, y = dev.alloc(wb * 4), dev.alloc(wb * 4)
        try:
            dev.draw(progs["wa"], [inputs[0]], a, _texels(wa))
            dev.draw(progs["wb"], [inputs[1]], b, _texels(wb))
            for i in range(n - 1, -1, -1):
                dev.draw(progs["step"], [a, b, x], y, _texels(wb), {"u_i": i})
                x, y = y, x
            dev.draw(progs["out"], [x], outputs[0], _narrow_texels(dtype, wb))
        finally:
            for tex in (a, b, x, y):
                dev.free(tex)

    return PassPlan(steps, progs)


def cholesky_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Column j of L per pass (reads only the lower triangle of a; the upper is written as 0)."""
    t = routine.type
    shape, dtype = t.input_shapes[0], t.input_dtypes[0]
    n = shape[-1]
    batch = math.prod(shape[:-2])
    w = batch * n * n
    s = _shift(w, max_size)
    body = (
        f"  int c = e % {n}; int r = (e / {n}) % {n}; int base = (e / {n * n}) * {n * n};\n"
        "  if (c != u_j) return ld1(e);\n  int j = u_j;\n"
        "  if (r < j) return 0u;\n"
        f"  float d = r0(base + j * {n} + j);\n"
        f"  for (int k = 0; k < j; k++) {{ float l = r1(base + j * {n} + k); d -= l * l; }}\n"
        "  float p = sqrt_(d);\n  if (r == j) return floatBitsToUint(p);\n"
        f"  float v = r0(base + r * {n} + j);\n"
        f"  for (int k = 0; k < j; k++) v -= r1(base + r * {n} + k) * r1(base + j * {n} + k);\n"
        "  return floatBitsToUint(v / p);"
    )
    progs = {
        "w": dev.program(widen(dtype, w, s), 1),
        "zero": dev.program(word_pass(0, w, s, "  return 0u;"), 0),
        "step": dev.program(word_pass(2, w, s, body, ("u_j",)), 2, ("u_j",)),
        "out": dev.program(narrow(dtype, w, _out_shift(dtype, w, max_size)), 1),
    }

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if w == 0:
            return
        a, x, y = dev.alloc(w * 4), dev.alloc(w * 4), dev.alloc(w * 4)
        try:
            dev.draw(progs["w"], [inputs[0]], a, _texels(w))
            dev.draw(progs["zero"], [], x, _texels(w))
            for j in range(n):
                dev.draw(progs["step"], [a, x], y, _texels(w), {"u_j": j})
                x, y = y, x
            dev.draw(progs["out"], [x], outputs[0], _narrow_texels(dtype, w))
        finally:
            for tex in (a, x, y):
                dev.free(tex)

    return PassPlan(steps, progs)


def lu_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Step j: pivot p = first max |lu[i][j]| over i >= j (NaN never wins; a NaN at j stays), swap
    rows j and p, then (if the pivot is nonzero) store multipliers below it and update the rest."""
    t = routine.type
    shape, dtype = t.input_shapes[0], t.input_dtypes[0]
    m, n = shape[-2:]
    k = min(m, n)
    batch = math.prod(shape[:-2])
    w = batch * m * n
    s = _shift(w, max_size)
    pivot = (
        "int pivot(int base, int j) {\n"
        f"  float best = abs(r0(base + j * {n} + j));\n  if (isnan_(best)) return j;\n  int p = j;\n"
        f"  for (int i = j + 1; i < {m}; i++) {{ float v = abs(r0(base + i * {n} + j));"
        " if (!isnan_(v) && v > best) { best = v; p = i; } }\n"
        "  return p;\n}\n"
    )
    # the row of the swapped matrix: rows j and p trade places
    body = (
        f"  int c = e % {n}; int r = (e / {n}) % {m}; int base = (e / {m * n}) * {m * n};\n"
        "  int j = u_j; int p = pivot(base, j);\n"
        "  int rr = r == j ? p : (r == p ? j : r);\n"
        f"  float v = r0(base + rr * {n} + c);\n"
        "  if (r <= j || c < j) return floatBitsToUint(v);\n"
        f"  float d = r0(base + p * {n} + j);\n"
        "  if (d == 0.0) return floatBitsToUint(v);\n"
        f"  float l = r0(base + rr * {n} + j) / d;\n"
        "  if (c == j) return floatBitsToUint(l);\n"
        f"  return floatBitsToUint(v - l * r0(base + p * {n} + c));"
    )
    # perm (m words per matrix) and pivots (k words per matrix), int32 words, updated per step
    wp, wv = batch * m, batch * k
    sp, sv = _shift(wp, max_size), _shift(wv, max_size)
    perm_body = (
        f"  int r = e % {m}; int base = (e / {m}) * {m * n};\n"
        "  int j = u_j; int p = pivot(base, j);\n"
        f"  int rr = r == j ? p : (r == p ? j : r);\n  return ld1((e / {m}) * {m} + rr);"
    )
    piv_body = (
        f"  int jj = e % {k}; int base = (e / {k}) * {m * n};\n"
        "  if (jj != u_j) return ld1(e);\n  return uint(pivot(base, u_j));"
    )

    def with_pivot(src: str) -> str:
        return src.replace("uint f(int e) {", pivot + "uint f(int e) {", 1)

    progs = {
        "w": dev.program(widen(dtype, w, s), 1),
        "step": dev.program(with_pivot(word_pass(1, w, s, body, ("u_j",))), 1, ("u_j",)),
        "perm0": dev.program(word_pass(0, wp, sp, f"  return uint(e % {m});"), 0),
        "perm": dev.program(with_pivot(word_pass(2, wp, sp, perm_body, ("u_j",))), 2, ("u_j",)),
        "piv": dev.program(with_pivot(word_pass(2, wv, sv, piv_body, ("u_j",))), 2, ("u_j",)),
        "out": dev.program(narrow(dtype, w, _out_shift(dtype, w, max_size)), 1),
        "copy_p": dev.program(word_pass(1, wp, sp, "  return ld0(e);"), 1),
        "copy_v": dev.program(word_pass(1, wv, sv, "  return ld0(e);"), 1),
    }

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if batch == 0 or m == 0 or n == 0:
            if wp:
                dev.draw(progs["perm0"], [], outputs[2], _texels(wp))
            return
        x, y = dev.alloc(w * 4), dev.alloc(w * 4)
        p0, p1 = dev.alloc(wp * 4), dev.alloc(wp * 4)
        v0, v1 = dev.alloc(max(wv, 1) * 4), dev.alloc(max(wv, 1) * 4)
        try:
            dev.draw(progs["w"], [inputs[0]], x, _texels(w))
            dev.draw(progs["perm0"], [], p0, _texels(wp))
            for j in range(k):
                # perm and pivots read the matrix before this step's swap
                dev.draw(progs["perm"], [x, p0], p1, _texels(wp), {"u_j": j})
                dev.draw(progs["piv"], [x, v0], v1, _texels(wv), {"u_j": j})
                dev.draw(progs["step"], [x], y, _texels(w), {"u_j": j})
                x, y, p0, p1, v0, v1 = y, x, p1, p0, v1, v0
            dev.draw(progs["out"], [x], outputs[0], _narrow_texels(dtype, w))
            if wv:
                dev.draw(progs["copy_v"], [v0], outputs[1], _texels(wv))
            dev.draw(progs["copy_p"], [p0], outputs[2], _texels(wp))
        finally:
            for tex in (x, y, p0, p1, v0, v1):
                dev.free(tex)

    return PassPlan(steps, progs)


PLANS = {
    Routines.TriangularSolve: triangular_solve_plan,
    Routines.Cholesky: cholesky_plan,
    Routines.LU: lu_plan,
}


def _pair_pass(nargs: int, count: int, shift: int, body: str, uniforms: tuple[str, ...] = ()) -> str:
    """A shader writing `count` complex values as (re, im) word pairs, two per texel:
    `vec2 f(int e) { body }`."""
    decl = "".join(f"uniform int {u};\n" for u in uniforms)
    return (
        HEADER
        + _inputs(nargs)
        + decl
        + COMMON
        + LANG.render_helpers(["jc_cos_f32", "jc_sin_f32"])
        + FFT_TRIG
        + "vec2 c(int e) { int t = e >> 1;\n"
        "  uvec4 v = texelFetch(in0, ivec2(t & ((1 << sh0) - 1), t >> sh0), 0);\n"
        "  return uintBitsToFloat((e & 1) == 0 ? v.xy : v.zw); }\n"
        + f"vec2 f(int e) {{\n  if (e >= {count}) return vec2(0.0);\n{body}\n}}\n"
        + "layout(location = 0) out uvec4 o;\nvoid main() {\n"
        + f"  int t = (int(gl_FragCoord.y) << {shift}) + int(gl_FragCoord.x);\n"
        + "  o = uvec4(floatBitsToUint(f(2 * t)), floatBitsToUint(f(2 * t + 1)));\n}\n"
    )


# cos and sin of 2*pi*num/den for 0 <= num < den: the angle in eighths of a turn, reduced exactly
# in integers to [0, pi/4], then the core's generated float32 sin and cos.
FFT_TRIG = """vec2 cis(int num, int den) {
  int n8 = 8 * num;
  int oct = n8 / den;
  float fr = float(n8 - oct * den) / float(den);  // [0, 1)
  bool mirror = (oct & 1) == 1;
  float x = (mirror ? 1.0 - fr : fr) * 0.7853981633974483;  // [0, pi/4]
  float s = jc_sin_f32(x), co = jc_cos_f32(x);
  // octant k: angle = k*pi/4 + x (even k) or (k+1)*pi/4 - x (odd k)
  int q = oct >> 1;  // whole quarter turns
  vec2 v = mirror ? vec2(s, co) : vec2(co, s);  // (cos, sin) of the angle within its quarter
  if (q == 1) v = vec2(-v.y, v.x);
  else if (q == 2) v = -v;
  else if (q == 3) v = vec2(v.y, -v.x);
  return v;
}
"""


def fft_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Mixed-radix Stockham passes (natural order out, any factor order); the inverse scales by 1/n."""
    t = routine.type
    shape, dtype = t.input_shapes[0], t.input_dtypes[0]
    params = routine.params
    assert isinstance(params, FftParams)
    n = shape[-1]
    rows = math.prod(shape[:-1])
    total = rows * n
    sign = 1.0 if params.inverse else -1.0
    ps = texture_dims(total * 8, max_size)[2]
    if dtype == DType.float16:
        load = (
            "  uint a = ld0(e >> 1), b = ld1(e >> 1);\n"
            "  return vec2(unpackHalf2x16(a)[e & 1], unpackHalf2x16(b)[e & 1]);"
        )
    else:
        load = "  return vec2(r0(e), r1(e));"
    pack = (
        HEADER
        + _inputs(2)
        + f"vec2 f(int e) {{\n  if (e >= {total}) return vec2(0.0);\n{load}\n}}\n"
        + "layout(location = 0) out uvec4 o;\nvoid main() {\n"
        + f"  int t = (int(gl_FragCoord.y) << {ps}) + int(gl_FragCoord.x);\n"
        + "  o = uvec4(floatBitsToUint(f(2 * t)), floatBitsToUint(f(2 * t + 1)));\n}\n"
    )
    stages = []
    ns = 1
    for r in params.factors:
        d = ns * r
        body = (
            f"  int row = e / {n}; int o = e % {n};\n"
            f"  int k = o % {ns}; int rr = (o / {ns}) % {r}; int j = (o / {d}) * {ns} + k;\n"
            f"  int step = k + rr * {ns};\n  vec2 acc = vec2(0.0);\n"
            f"  for (int q = 0; q < {r}; q++) {{\n"
            f"    vec2 x = c(row * {n} + j + q * {n // r});\n"
            f"    vec2 w = cis((q * step) % {d}, {d});\n    w.y *= {sign!r};\n"
            "    acc += vec2(x.x * w.x - x.y * w.y, x.x * w.y + x.y * w.x);\n  }\n  return acc;"
        )
        stages.append(dev.program(_pair_pass(1, total, ps, body), 1))
        ns = d
    scale = f" * {1.0 / n!r}" if params.inverse else ""
    out_progs = []
    for part in ("x", "y"):
        if dtype == DType.float16:
            words = -(-total // 2)
            body = (
                f"  float lo = c(2 * e).{part}{scale};\n"
                f"  float hi = 2 * e + 1 < {total} ? c(2 * e + 1).{part}{scale} : 0.0;\n"
                "  return packHalf2x16(vec2(lo, hi));"
            )
        else:
            words = total
            body = f"  return floatBitsToUint(c(e).{part}{scale});"
        src = word_pass(1, words, _out_shift(dtype, total, max_size), body)
        src = src.replace(
            "uint f(int e) {",
            "vec2 c(int e) { int t = e >> 1; uvec4 v = texelFetch(in0, "
            "ivec2(t & ((1 << sh0) - 1), t >> sh0), 0); return uintBitsToFloat((e & 1) == 0 ? "
            "v.xy : v.zw); }\nuint f(int e) {",
            1,
        )
        out_progs.append(dev.program(src, 1))
    packer = dev.program(pack, 2)

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if total == 0:
            return
        x, y = dev.alloc(total * 8), dev.alloc(total * 8)
        texels = -(-total // 2)
        try:
            dev.draw(packer, inputs, x, texels)
            for prog in stages:
                dev.draw(prog, [x], y, texels)
                x, y = y, x
            for prog, out in zip(out_progs, outputs):
                dev.draw(prog, [x], out, _narrow_texels(dtype, total))
        finally:
            dev.free(x)
            dev.free(y)

    return PassPlan(steps, {})


PLANS[Routines.Fft] = fft_plan


def jacobi_eigh_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Cyclic Jacobi: one pass pair per rotation (V first, since it needs A before the rotation),
    a convergence flag per matrix after every sweep (read back to stop early; a converged or NaN
    matrix is copied untouched), the threshold tolerance * max(1, max |lower|) fixed at the start."""
    t = routine.type
    shape, dtype = t.input_shapes[0], t.input_dtypes[0]
    params = routine.params
    assert isinstance(params, JacobiEighParams)
    n = shape[-1]
    batch = math.prod(shape[:-2])
    nn = n * n
    w = batch * nn
    s = _shift(w, max_size)
    sb, sr = _shift(batch, max_size), _shift(batch * n, max_size)
    head = f"  int c = e % {n}; int r = (e / {n}) % {n}; int b = e / {nn}; int base = b * {nn};\n"
    # symmetric full storage from the lower triangle; V = I
    init_a = head + f"  return floatBitsToUint(r >= c ? r0(e) : r0(base + c * {n} + r));"
    init_v = head + "  return floatBitsToUint(r == c ? 1.0 : 0.0);"
    rot = (
        "  float apq = r0(base + u_q * {n} + u_p);\n"
        "  if (ld1(b) == 0u || apq == 0.0) return ld{src}(e);\n"
        "  float app = r0(base + u_p * {n} + u_p), aqq = r0(base + u_q * {n} + u_q);\n"
        "  float tau = (aqq - app) / (2.0 * apq);\n"
        "  float t = (tau >= 0.0 ? 1.0 : -1.0) / (abs(tau) + sqrt(tau * tau + 1.0));\n"
        "  float cs = 1.0 / sqrt(t * t + 1.0), sn = t * cs;\n"
    )
    a_body = (
        head
        + rot.format(n=n, src=0)
        + "  if ((r == u_p && c == u_q) || (r == u_q && c == u_p)) return 0u;\n"
        + "  float k = 2.0 * sn * cs * apq;\n"
        + "  if (r == u_p && c == u_p) return floatBitsToUint(cs * cs * app - k + sn * sn * aqq);\n"
        + "  if (r == u_q && c == u_q) return floatBitsToUint(sn * sn * app + k + cs * cs * aqq);\n"
        + "  int o = r == u_p || r == u_q ? c : r;  // the index along the rotated row or column\n"
        + "  bool isp = r == u_p || c == u_p;\n"
        + "  if (!(isp || r == u_q || c == u_q)) return ld0(e);\n"
        + f"  float xp = r0(base + u_p * {n} + o), xq = r0(base + u_q * {n} + o);\n"
        + "  return floatBitsToUint(isp ? cs * xp - sn * xq : sn * xp + cs * xq);"
    )
    v_body = (
        head
        + rot.format(n=n, src=2)
        + "  if (c != u_p && c != u_q) return ld2(e);\n"
        + f"  float vp = r2(base + r * {n} + u_p), vq = r2(base + r * {n} + u_q);\n"
        + "  return floatBitsToUint(c == u_p ? cs * vp - sn * vq : sn * vp + cs * vq);"
    )
    # per row max |strict lower| of A, then per matrix; flags: active and still above threshold
    row_max = (
        f"  int r = e % {n}; int base = (e / {n}) * {nn};\n  float m = 0.0;\n"
        f"  for (int c = 0; c < r; c++) {{ float v = abs(r0(base + r * {n} + c));"
        " if (isnan_(v)) return 0x7fc00000u; m = max(m, v); }\n"
        "  return floatBitsToUint(m);"
    )
    low_max = (  # max |lower| of the input (threshold), per row over c <= r
        f"  int r = e % {n}; int base = (e / {n}) * {nn};\n  float m = 0.0;\n"
        f"  for (int c = 0; c <= r; c++) {{ float v = abs(r0(base + r * {n} + c));"
        " if (isnan_(v)) return 0x7fc00000u; m = max(m, v); }\n"
        "  return floatBitsToUint(m);"
    )
    per_matrix = (
        "  float m = 0.0;\n"
        f"  for (int r = 0; r < {n}; r++) {{ float v = r0(e * {n} + r);"
        " if (isnan_(v)) return 0x7fc00000u; m = max(m, v); }\n"
        "  return floatBitsToUint(m);"
    )
    tol = float(params.tolerance)
    flag = (  # in0: per-matrix max offdiag, in1: threshold base, in2: previous flag
        f"  float m = r0(e), thr = {tol!r} * max(1.0, r1(e));\n"
        "  if (isnan_(m) || isnan_(thr)) return 0u;\n"
        "  return (u_first != 0 || ld2(e) != 0u) && m > thr ? 1u : 0u;"
    )
    progs = {
        "w": dev.program(widen(dtype, w, s), 1),
        "init_a": dev.program(word_pass(1, w, s, init_a), 1),
        "init_v": dev.program(word_pass(0, w, s, init_v), 0),
        "rot_a": dev.program(word_pass(2, w, s, a_body, ("u_p", "u_q")), 2, ("u_p", "u_q")),
        "rot_v": dev.program(word_pass(3, w, s, v_body, ("u_p", "u_q")), 3, ("u_p", "u_q")),
        "row_max": dev.program(word_pass(1, batch * n, sr, row_max), 1),
        "low_max": dev.program(word_pass(1, batch * n, sr, low_max), 1),
        "mat_max": dev.program(word_pass(1, batch, sb, per_matrix), 1),
        "flag": dev.program(word_pass(3, batch, sb, flag, ("u_first",)), 3, ("u_first",)),
        "tril": dev.program(word_pass(1, w, s, head + "  return c > r ? 0u : ld0(e);"), 1),
        "out": dev.program(narrow(dtype, w, _out_shift(dtype, w, max_size)), 1),
    }

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if w == 0:
            return
        tex = [dev.alloc(w * 4) for _ in range(5)]
        raw, a, a2, v, v2 = tex
        small = [dev.alloc(max(batch * n, 1) * 4)] + [dev.alloc(batch * 4) for _ in range(4)]
        rows, thr, mx, f0, f1 = small
        tw = _texels(w)
        try:
            dev.draw(progs["w"], [inputs[0]], raw, tw)
            dev.draw(progs["init_a"], [raw], a, tw)
            dev.draw(progs["init_v"], [], v, tw)
            if n >= 2:
                dev.draw(progs["low_max"], [raw], rows, _texels(batch * n))
                dev.draw(progs["mat_max"], [rows], thr, _texels(batch))

                def update_flags(first: int) -> None:
                    nonlocal f0, f1
                    dev.draw(progs["row_max"], [a], rows, _texels(batch * n))
                    dev.draw(progs["mat_max"], [rows], mx, _texels(batch))
                    dev.draw(progs["flag"], [mx, thr, f0], f1, _texels(batch), {"u_first": first})
                    f0, f1 = f1, f0

                update_flags(1)
                for _ in range(params.max_sweeps):
                    if not any(dev.download(f0, 0, batch * 4)):
                        break
                    for p in range(n - 1):
                        for q in range(p + 1, n):
                            pq = {"u_p": p, "u_q": q}
                            dev.draw(progs["rot_v"], [a, f0, v], v2, tw, pq)
                            dev.draw(progs["rot_a"], [a, f0], a2, tw, pq)
                            a, a2, v, v2 = a2, a, v2, v
                    update_flags(0)
            dev.draw(progs["tril"], [a], a2, tw)
            dev.draw(progs["out"], [a2], outputs[0], _narrow_texels(dtype, w))
            dev.draw(progs["out"], [v], outputs[1], _narrow_texels(dtype, w))
        finally:
            for x in tex + small:
                dev.free(x)

    return PassPlan(steps, progs)


PLANS[Routines.JacobiEigh] = jacobi_eigh_plan
