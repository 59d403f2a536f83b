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

import itertools
from dataclasses import dataclass

from jaxcore.plugin import DType, FftParams, JacobiEighParams, Routine, Routines, TriangularSolveParams
from jaxcore_webgl.device import TEXEL_BYTES, Device, Texture, scratch, texture_dims
from jaxcore_webgl.glsl import LANG, fragment, input_decls
from jaxcore_webgl.routines import Pass, PassPlan

F16 = DType.float16
COMMON = """bool isnan_(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
float sqrt_(float x) { return isnan_(x) || x < 0.0 ? uintBitsToFloat(0x7fc00000u) : sqrt(x); }
"""
# complex value e of input 0, a (re, im) pair of float32 words
PAIR = """vec2 c(int e) { int t = e >> 1;
  uvec4 v = texelFetch(in0, ivec2(t & ((1 << sh0) - 1), t >> sh0), 0);
  return uintBitsToFloat((e & 1) == 0 ? v.xy : v.zw); }
"""


@dataclass
class Passes:
    """Compiles the passes of one routine on `dev`, each writing `count` words (or pairs) of a
    texture laid out for `max_size`: value e = `f(e)`, whose body reads `ld{i}`/`r{i}` (word e of
    input i as bits or float), the uniforms and `decls`."""

    dev: Device
    max_size: int

    def __call__(
        self,
        nargs: int,
        count: int,
        body: str,
        uniforms: tuple[str, ...] = (),
        decls: str = "",
        pairs: bool = False,
    ) -> Pass:
        nbytes = count * (8 if pairs else 4)
        floats = [f"float r{i}(int e) {{ return uintBitsToFloat(ld{i}(e)); }}" for i in range(nargs)]
        head = [*input_decls(nargs), *floats, *(f"uniform int {u};" for u in uniforms), COMMON + decls]
        if pairs:
            fn = f"vec2 f(int e) {{\n  if (e >= {count}) return vec2(0.0);\n{body}\n}}\n"
            store = "uvec4(floatBitsToUint(f(2 * t)), floatBitsToUint(f(2 * t + 1)))"
        else:
            fn = f"uint f(int e) {{\n  if (e >= {count}) return 0u;\n{body}\n}}\n"
            store = "uvec4(f(4 * t), f(4 * t + 1), f(4 * t + 2), f(4 * t + 3))"
        src = fragment("\n".join(head) + fn, texture_dims(nbytes, self.max_size)[2], store)
        return Pass(self.dev.program(src, nargs, uniforms), max(1, -(-nbytes // TEXEL_BYTES)))

    def widen(self, dtype: DType, count: int) -> Pass:
        """A buffer of `dtype` -> float32 words."""
        if dtype == F16:
            return self(1, count, "  return floatBitsToUint(unpackHalf2x16(ld0(e >> 1))[e & 1]);")
        return self(1, count, "  return ld0(e);")

    def narrow(self, dtype: DType, count: int, value: str = "r0({})", decls: str = "") -> Pass:
        """`count` float32 values (`value` of their index; words of input 0 by default) -> a buffer
        of `dtype` (float16: two a word, rounded to nearest even)."""
        if dtype != F16:
            word = "ld0(e)" if value == "r0({})" else f"floatBitsToUint({value.format('e')})"
            return self(1, count, f"  return {word};", decls=decls)
        lo, hi = value.format("2 * e"), value.format("2 * e + 1")
        body = f"  return packHalf2x16(vec2({lo}, 2 * e + 1 < {count} ? {hi} : 0.0));"
        return self(1, -(-count // 2), body, decls=decls)


def triangular_solve_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """x a^T = b row by row of b: x_i = (b_i - sum_{j>i} a_ij x_j) / a_ii, i = n-1 .. 0."""
    _, (_, n), batch = routine.type.operand(0)
    dtype, (m, _), _ = routine.type.operand(1)
    unit = isinstance(routine.params, TriangularSolveParams) and routine.params.unit_diagonal
    wa, wb = batch * n * n, batch * m * n
    div = "" if unit else f" / r0(bb * {n * n} + i * {n} + i)"
    body = (
        f"  int c = e % {n}; int row = e / {n}; int bb = row / {m};\n"
        "  if (c != u_i) return ld2(e);\n  int i = u_i;\n  float s = r1(e);\n"
        f"  for (int j = i + 1; j < {n}; j++) s -= r0(bb * {n * n} + i * {n} + j) * r2(row * {n} + j);\n"
        f"  return floatBitsToUint(s{div});"
    )
    p = Passes(dev, max_size)
    widen_a, widen_b = p.widen(dtype, wa), p.widen(dtype, wb)
    step, out = p(3, wb, body, ("u_i",)), p.narrow(dtype, wb)

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if wb == 0:
            return
        with scratch(dev, wa * 4, wb * 4, wb * 4, wb * 4) as (a, b, x, y):
            widen_a(dev, [inputs[0]], a)
            widen_b(dev, [inputs[1]], b)
            for i in range(n - 1, -1, -1):
                step(dev, [a, b, x], y, u_i=i)
                x, y = y, x
            out(dev, [x], outputs[0])

    return PassPlan(steps)


def cholesky_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Column j of L per pass (reads only the lower triangle of a; the upper is written as 0)."""
    dtype, (_, n), batch = routine.type.operand(0)
    w = batch * n * n
    body = (
        f"  int c = e % {n}; int r = (e / {n}) % {n}; int base = (e / {n * n}) * {n * n};\n"
        "  if (c != u_j) return ld1(e);\n  int j = u_j;\n  if (r < j) return 0u;\n"
        f"  float d = r0(base + j * {n} + j);\n"
        f"  for (int k = 0; k < j; k++) {{ float l = r1(base + j * {n} + k); d -= l * l; }}\n"
        "  float p = sqrt_(d);\n  if (r == j) return floatBitsToUint(p);\n"
        f"  float v = r0(base + r * {n} + j);\n"
        f"  for (int k = 0; k < j; k++) v -= r1(base + r * {n} + k) * r1(base + j * {n} + k);\n"
        "  return floatBitsToUint(v / p);"
    )
    p = Passes(dev, max_size)
    widen, zero = p.widen(dtype, w), p(0, w, "  return 0u;")
    step, out = p(2, w, body, ("u_j",)), p.narrow(dtype, w)

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if w == 0:
            return
        with scratch(dev, w * 4, w * 4, w * 4) as (a, x, y):
            widen(dev, [inputs[0]], a)
            zero(dev, [], x)
            for j in range(n):
                step(dev, [a, x], y, u_j=j)
                x, y = y, x
            out(dev, [x], outputs[0])

    return PassPlan(steps)


def lu_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Step j: pivot p = first max |lu[i][j]| over i >= j (NaN never wins; a NaN at j stays), swap
    rows j and p, then (if the pivot is nonzero) store multipliers below it and update the rest."""
    dtype, (m, n), batch = routine.type.operand(0)
    k = min(m, n)
    w, wp, wv = batch * m * n, batch * m, batch * k  # the matrix, perm and pivots (int32 words)
    pivot = (
        "int pivot(int base, int j) {\n"
        f"  float best = abs(r0(base + j * {n} + j));\n  if (isnan_(best)) return j;\n  int p = j;\n"
        f"  for (int i = j + 1; i < {m}; i++) {{ float v = abs(r0(base + i * {n} + j));"
        " if (!isnan_(v) && v > best) { best = v; p = i; } }\n  return p;\n}\n"
    )
    swap = "  int j = u_j; int p = pivot(base, j);\n  int rr = r == j ? p : (r == p ? j : r);\n"
    body = (  # the row of the swapped matrix: rows j and p trade places
        f"  int c = e % {n}; int r = (e / {n}) % {m}; int base = (e / {m * n}) * {m * n};\n{swap}"
        f"  float v = r0(base + rr * {n} + c);\n  if (r <= j || c < j) return floatBitsToUint(v);\n"
        f"  float d = r0(base + p * {n} + j);\n  if (d == 0.0) return floatBitsToUint(v);\n"
        f"  float l = r0(base + rr * {n} + j) / d;\n  if (c == j) return floatBitsToUint(l);\n"
        f"  return floatBitsToUint(v - l * r0(base + p * {n} + c));"
    )
    perm = f"  int r = e % {m}; int base = (e / {m}) * {m * n};\n{swap}  return ld1((e / {m}) * {m} + rr);"
    piv = f"  int base = (e / {k}) * {m * n};\n  return e % {k} != u_j ? ld1(e) : uint(pivot(base, u_j));"
    p = Passes(dev, max_size)
    widen, step, out = p.widen(dtype, w), p(1, w, body, ("u_j",), pivot), p.narrow(dtype, w)
    perm0, perm_step = p(0, wp, f"  return uint(e % {m});"), p(2, wp, perm, ("u_j",), pivot)
    piv_step = p(2, wv, piv, ("u_j",), pivot)
    copy_p, copy_v = p(1, wp, "  return ld0(e);"), p(1, wv, "  return ld0(e);")

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if w == 0:
            if wp:
                perm0(dev, [], outputs[2])
            return
        with scratch(dev, w * 4, w * 4, wp * 4, wp * 4, max(wv, 1) * 4, max(wv, 1) * 4) as tex:
            x, y, p0, p1, v0, v1 = tex
            widen(dev, [inputs[0]], x)
            perm0(dev, [], p0)
            for j in range(k):  # perm and pivots read the matrix before this step's swap
                perm_step(dev, [x, p0], p1, u_j=j)
                piv_step(dev, [x, v0], v1, u_j=j)
                step(dev, [x], y, u_j=j)
                x, y, p0, p1, v0, v1 = y, x, p1, p0, v1, v0
            out(dev, [x], outputs[0])
            if wv:
                copy_v(dev, [v0], outputs[1])
            copy_p(dev, [p0], outputs[2])

    return PassPlan(steps)


# cos and sin of 2*pi*num/den for 0 <= num < den: the angle in eighths of a turn, reduced exactly
# in integers to [0, pi/4], then the core's generated float32 sin and cos.
CIS = """vec2 cis(int num, int den) {
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
    dtype, (n,), rows = routine.type.operand(0, 1)
    params = routine.params
    assert isinstance(params, FftParams)
    total = rows * n
    p = Passes(dev, max_size)
    half = "unpackHalf2x16(ld{}(e >> 1))[e & 1]"
    load = f"vec2({half.format(0)}, {half.format(1)})" if dtype == F16 else "vec2(r0(e), r1(e))"
    pack = p(2, total, f"  return {load};", pairs=True)
    trig = LANG.render_helpers(["jc_cos_f32", "jc_sin_f32"]) + CIS + PAIR
    stages, ns = [], 1
    for r in params.factors:
        d = ns * r
        body = (
            f"  int row = e / {n}; int o = e % {n};\n"
            f"  int k = o % {ns}; int rr = (o / {ns}) % {r}; int j = (o / {d}) * {ns} + k;\n"
            f"  int step = k + rr * {ns};\n  vec2 acc = vec2(0.0);\n"
            f"  for (int q = 0; q < {r}; q++) {{\n    vec2 x = c(row * {n} + j + q * {n // r});\n"
            f"    vec2 w = cis((q * step) % {d}, {d});\n    w.y *= {1.0 if params.inverse else -1.0!r};\n"
            "    acc += vec2(x.x * w.x - x.y * w.y, x.x * w.y + x.y * w.x);\n  }\n  return acc;"
        )
        stages.append(p(1, total, body, decls=trig, pairs=True))
        ns = d
    scale = f" * {1.0 / n!r}" if params.inverse else ""
    parts = [p.narrow(dtype, total, f"c({{}}).{part}{scale}", PAIR) for part in "xy"]

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if total == 0:
            return
        with scratch(dev, total * 8, total * 8) as (x, y):
            pack(dev, inputs, x)
            for stage in stages:
                stage(dev, [x], y)
                x, y = y, x
            for part, out in zip(parts, outputs):
                part(dev, [x], out)

    return PassPlan(steps)


def _jacobi_passes(p: Passes, n: int, batch: int, tol: float) -> dict[str, Pass]:
    """The passes of a cyclic Jacobi sweep over `batch` symmetric n x n float32 matrices."""
    nn, w = n * n, batch * n * n
    head = f"  int c = e % {n}; int r = (e / {n}) % {n}; int b = e / {nn}; int base = b * {nn};\n"
    rot = f"""  float apq = r0(base + u_q * {n} + u_p);
  if (ld1(b) == 0u || apq == 0.0) return ld{{src}}(e);
  float app = r0(base + u_p * {n} + u_p), aqq = r0(base + u_q * {n} + u_q);
  float tau = (aqq - app) / (2.0 * apq);
  float t = (tau >= 0.0 ? 1.0 : -1.0) / (abs(tau) + sqrt(tau * tau + 1.0));
  float cs = 1.0 / sqrt(t * t + 1.0), sn = t * cs;
"""
    a_body = f"""{head}{rot.replace("{src}", "0")}\
  if ((r == u_p && c == u_q) || (r == u_q && c == u_p)) return 0u;
  float k = 2.0 * sn * cs * apq;
  if (r == u_p && c == u_p) return floatBitsToUint(cs * cs * app - k + sn * sn * aqq);
  if (r == u_q && c == u_q) return floatBitsToUint(sn * sn * app + k + cs * cs * aqq);
  int o = r == u_p || r == u_q ? c : r;  // the index along the rotated row or column
  bool isp = r == u_p || c == u_p;
  if (!(isp || r == u_q || c == u_q)) return ld0(e);
  float xp = r0(base + u_p * {n} + o), xq = r0(base + u_q * {n} + o);
  return floatBitsToUint(isp ? cs * xp - sn * xq : sn * xp + cs * xq);"""
    v_body = f"""{head}{rot.replace("{src}", "2")}\
  if (c != u_p && c != u_q) return ld2(e);
  float vp = r2(base + r * {n} + u_p), vq = r2(base + r * {n} + u_q);
  return floatBitsToUint(c == u_p ? cs * vp - sn * vq : sn * vp + cs * vq);"""

    def max_abs(first: str, last: str, at: str) -> str:
        """max |x| over a row (NaN wins): per row of a matrix, or of the per-row maxima."""
        return (
            f"  {first}\n  float m = 0.0;\n  for ({last}) {{ float v = abs(r0({at}));"
            " if (isnan_(v)) return 0x7fc00000u; m = max(m, v); }\n  return floatBitsToUint(m);"
        )

    row = f"int r = e % {n}; int base = (e / {n}) * {nn};"
    flag = (  # in0: per-matrix max offdiag, in1: threshold base, in2: previous flag
        f"  float m = r0(e), thr = {tol!r} * max(1.0, r1(e));\n  if (isnan_(m) || isnan_(thr)) return 0u;\n"
        "  return (u_first != 0 || ld2(e) != 0u) && m > thr ? 1u : 0u;"
    )
    pq = ("u_p", "u_q")
    return {  # A in full from its lower triangle; V = I; the strict lower |max| per row (low: c <= r)
        "init_a": p(1, w, head + f"  return floatBitsToUint(r >= c ? r0(e) : r0(base + c * {n} + r));"),
        "init_v": p(0, w, head + "  return floatBitsToUint(r == c ? 1.0 : 0.0);"),
        "rot_a": p(2, w, a_body, pq),
        "rot_v": p(3, w, v_body, pq),
        "row_max": p(1, batch * n, max_abs(row, "int c = 0; c < r; c++", f"base + r * {n} + c")),
        "low_max": p(1, batch * n, max_abs(row, "int c = 0; c <= r; c++", f"base + r * {n} + c")),
        "mat_max": p(1, batch, max_abs("", f"int r = 0; r < {n}; r++", f"e * {n} + r")),
        "flag": p(3, batch, flag, ("u_first",)),
        "tril": p(1, w, head + "  return c > r ? 0u : ld0(e);"),
    }


def jacobi_eigh_plan(dev: Device, routine: Routine, max_size: int) -> PassPlan:
    """Cyclic Jacobi: one pass pair per rotation (V first, since it needs A before the rotation),
    a convergence flag per matrix after every sweep (read back to stop early; a converged or NaN
    matrix is copied untouched), the threshold tolerance * max(1, max |lower|) fixed at the start."""
    dtype, (_, n), batch = routine.type.operand(0)
    params = routine.params
    assert isinstance(params, JacobiEighParams)
    w = batch * n * n
    p = Passes(dev, max_size)
    widen, out = p.widen(dtype, w), p.narrow(dtype, w)
    ps = _jacobi_passes(p, n, batch, float(params.tolerance))

    def steps(dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if w == 0:
            return
        sizes = [w * 4] * 5 + [max(batch * n, 1) * 4] + [batch * 4] * 4
        with scratch(dev, *sizes) as (raw, a, a2, v, v2, rows, thr, mx, f0, f1):
            widen(dev, [inputs[0]], raw)
            ps["init_a"](dev, [raw], a)
            ps["init_v"](dev, [], v)
            if n >= 2:
                ps["low_max"](dev, [raw], rows)
                ps["mat_max"](dev, [rows], thr)
                for sweeps in range(params.max_sweeps + 1):
                    ps["row_max"](dev, [a], rows)
                    ps["mat_max"](dev, [rows], mx)
                    ps["flag"](dev, [mx, thr, f0], f1, u_first=int(sweeps == 0))
                    f0, f1 = f1, f0
                    if sweeps == params.max_sweeps or not any(dev.download(f0, 0, batch * 4)):
                        break
                    for i, j in itertools.combinations(range(n), 2):  # a sweep: rotate (i, j), i < j
                        ps["rot_v"](dev, [a, f0, v], v2, u_p=i, u_q=j)
                        ps["rot_a"](dev, [a, f0], a2, u_p=i, u_q=j)
                        a, a2, v, v2 = a2, a, v2, v
            ps["tril"](dev, [a], a2)
            out(dev, [a2], outputs[0])
            out(dev, [v], outputs[1])

    return PassPlan(steps)


PLANS = {
    Routines.TriangularSolve: triangular_solve_plan,
    Routines.Cholesky: cholesky_plan,
    Routines.LU: lu_plan,
    Routines.Fft: fft_plan,
    Routines.JacobiEigh: jacobi_eigh_plan,
}
