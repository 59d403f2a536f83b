"""Fft along the last axis: radix-2 Stockham for powers of two, Bluestein (or, up to 64, a direct
DFT) for other lengths.

The twiddles exp(∓2πi·t/n) come from a table pass that uses the dialect's accurate sin/cos
helpers (WGSL's built-ins are only bounded to 2^-11). A power-of-two length runs log2(n) Stockham
stages, one thread per butterfly, ping-ponging between two complex scratch buffers (the stage's
stride is the pass's uniform, so all stages share one pipeline); no bit reversal is needed; a row
that fits workgroup memory runs every stage there in one dispatch. Short other lengths sum the DFT
directly, one thread per output, with the table index advanced mod n (exact integer arithmetic);
longer ones are Bluestein's chirp convolution over a power-of-two length M >= 2n - 1.
The inverse scales by 1/n at the end, as numpy's ifft. Any factor list
gives the same DFT, so `FftParams.factors` only has to multiply to n.
"""

from __future__ import annotations

import math

from jaxcore.dtype import DType
from jaxcore.routine import FftParams, Routine
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.routines.common import (
    elementwise_pass,
    fold,
    header,
    helpers,
    storage,
    u32s,
    wgsl_type,
    work_dtype,
)

_UNI = "struct U { m: u32, p1: u32, p2: u32, p3: u32 }\n@group(1) @binding(0) var<uniform> u: U;\n"


def _local_stockham(n: int, batch: int, T: str, V: str, hdr: str, ty: str, cvt, outc, scale: str) -> Pass:
    """The whole power-of-two FFT of a row in workgroup memory: one read and one write of the row.

    Each thread owns R butterflies per stage; they read into registers, a barrier, then write
    (so one buffer serves as both Stockham arrays)."""
    half = n // 2
    wg = min(256, half)
    per = half // wg
    decl = hdr + storage(0, "in0", ty, True) + "\n" + storage(1, "in1", ty, True) + "\n"
    decl += storage(2, "out0", ty, False) + "\n" + storage(3, "out1", ty, False) + "\n"
    decl += storage(4, "tw", V, False) + "\n" + f"var<workgroup> sh: array<{V}, {n}>;\n"
    grid = fold(batch)
    regs = "".join(f"    var y0_{r}: {V}; var y1_{r}: {V}; var p_{r}: u32;\n" for r in range(per))
    reads = "".join(
        f"    {{ let t = lid + {r * wg}u; let j = t / m; let k = t % m;\n"
        f"      let c0 = sh[k + j * m]; let c1 = sh[k + j * m + {half}u];\n"
        f"      let w = tw[j * m]; let d = c0 - c1;\n"
        f"      p_{r} = k + 2u * j * m; y0_{r} = c0 + c1;\n"
        f"      y1_{r} = {V}(w.x * d.x - w.y * d.y, w.x * d.y + w.y * d.x); }}\n"
        for r in range(per)
    )
    writes = "".join(f"    sh[p_{r}] = y0_{r}; sh[p_{r} + m] = y1_{r};\n" for r in range(per))
    code = (
        decl
        + f"@compute @workgroup_size({wg}, 1, 1)\n"
        + "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        + "".join(f"  _ = &{x};\n" for x in ("in0", "in1", "out0", "out1", "tw"))
        + f"  let row = wid.x + wid.y * {grid[0]}u;\n  if (row >= {batch}u) {{ return; }}\n"
        + f"  let o = row * {n}u;\n"
        + f"  for (var e = lid; e < {n}u; e = e + {wg}u) {{\n"
        + f"    sh[e] = {V}({cvt('in0[o + e]')}, {cvt('in1[o + e]')});\n  }}\n"
        + "  workgroupBarrier();\n"
        + f"  for (var m = 1u; m < {n}u; m = m * 2u) {{\n"
        + regs
        + reads
        + "    workgroupBarrier();\n"
        + writes
        + "    workgroupBarrier();\n  }\n"
        + f"  for (var e = lid; e < {n}u; e = e + {wg}u) {{\n    let z = sh[e];\n"
        + f"    out0[o + e] = {outc(f'z.x{scale}')};\n    out1[o + e] = {outc(f'z.y{scale}')};\n  }}\n}}\n"
    )
    return Pass(code, grid, (("in", 0), ("in", 1), ("out", 0), ("out", 1), ("scratch", 0)))


DIRECT_MAX = 64  # other lengths up to this sum the DFT directly; longer ones go through Bluestein


def _cmul(V: str, a: str, b: str) -> str:
    return f"{V}({a}.x * {b}.x - {a}.y * {b}.y, {a}.x * {b}.y + {a}.y * {b}.x)"


def _table(size: int, sgn: float, idx: int, T: str, V: str, sfx: str) -> Pass:
    """tw[t] = (cos, sgn*sin)(2π t / size) through the dialect's accurate helpers."""
    decl = storage(0, "tw", V, False) + "\n" + helpers([f"jc_sin_{sfx}", f"jc_cos_{sfx}"])
    body = (
        f"  let th = {T}(gid) * ({T}({2 * math.pi!r}) / {T}({size}));\n"
        f"  tw[gid] = {V}(jc_cos_{sfx}(th), {T}({sgn}) * jc_sin_{sfx}(th));\n"
    )
    return elementwise_pass(decl, ["tw"], body, size, [("scratch", idx)])


def _stages(size: int, rows: int, a: int, b: int, tw: int, V: str) -> tuple[list[Pass], int]:
    """Radix-2 Stockham stages of length `size` over `rows` rows, ping-ponging scratch a <-> b."""
    half = size // 2
    decl = storage(0, "src", V, False) + "\n" + storage(1, "dst", V, False) + "\n"
    decl += storage(2, "tw", V, False) + "\n" + _UNI
    body = f"""  let row = gid / {max(half, 1)}u; let t = gid % {max(half, 1)}u;
  let m = u.m; let j = t / m; let k = t % m;
  let o = row * {size}u;
  let c0 = src[o + k + j * m]; let c1 = src[o + k + j * m + {half}u];
  let w = tw[j * m];
  let d = c0 - c1;
  dst[o + k + 2u * j * m] = c0 + c1;
  dst[o + k + 2u * j * m + m] = {_cmul(V, "w", "d")};
"""
    passes, cur, m = [], a, 1
    while m < size:
        other = b if cur == a else a
        bind = [("scratch", cur), ("scratch", other), ("scratch", tw)]
        passes.append(elementwise_pass(decl, ["src", "dst", "tw"], body, rows * half, bind, uniform=u32s(m)))
        cur, m = other, m * 2
    return passes, cur


def _bluestein(n, batch, sign, T, V, sfx, hdr, ty, cvt, outc, elem, inverse) -> Plan:
    """X_k = c_k sum_j (x_j c_j) conj(c_(k-j)) with c_j = exp(±πi j²/n): a circular convolution of
    power-of-two length M >= 2n - 1, done with three Stockham FFTs (the chirp's once per plan)."""
    big = 1 << (2 * n - 2).bit_length()
    A, A2, TWF, TWI, C, B, B2 = range(7)
    passes = [_table(big, -1.0, TWF, T, V, sfx), _table(big, 1.0, TWI, T, V, sfx)]
    # chirp c_j = exp(sign πi (j² mod 2n) / n), j² mod 2n without 32-bit overflow
    decl = storage(0, "C", V, False) + "\n" + helpers([f"jc_sin_{sfx}", f"jc_cos_{sfx}"])
    decl += (
        "fn jc_mulmod(a: u32, b: u32, m: u32) -> u32 {\n"
        "  var r = 0u; var x = a % m; var y = b;\n"
        "  loop { if (y == 0u) { break; } if ((y & 1u) == 1u) { r = r + x; if (r >= m) { r = r - m; } }\n"
        "    x = x + x; if (x >= m) { x = x - m; } y = y >> 1u; }\n  return r;\n}\n"
    )
    body = (
        f"  let q = jc_mulmod(gid, gid, {2 * n}u);\n"
        f"  let th = {T}(q) * ({T}({math.pi!r}) / {T}({n}));\n"
        f"  C[gid] = {V}(jc_cos_{sfx}(th), {T}({sign}) * jc_sin_{sfx}(th));\n"
    )
    passes.append(elementwise_pass(decl, ["C"], body, n, [("scratch", C)]))
    # b = conj(c) wrapped circularly, then its FFT
    decl = storage(0, "C", V, False) + "\n" + storage(1, "Bv", V, False) + "\n"
    body = (
        f"  var z = {V}(0);\n"
        f"  if (gid < {n}u) {{ z = C[gid]; }} else if (gid > {big - n}u) {{ z = C[{big}u - gid]; }}\n"
        "  Bv[gid] = vec2(z.x, -z.y);\n"
    )
    passes.append(elementwise_pass(decl, ["C", "Bv"], body, big, [("scratch", C), ("scratch", B)]))
    st, fb = _stages(big, 1, B, B2, TWF, V)
    passes += st
    # a = x c, zero-padded rows of length M, then its FFT
    decl = hdr + storage(0, "in0", ty, True) + "\n" + storage(1, "in1", ty, True) + "\n"
    decl += storage(2, "C", V, False) + "\n" + storage(3, "A", V, False) + "\n"
    body = (
        f"  let row = gid / {big}u; let t = gid % {big}u;\n  var z = {V}(0);\n"
        f"  if (t < {n}u) {{ let x = {V}({cvt(f'in0[row * {n}u + t]')}, {cvt(f'in1[row * {n}u + t]')});"
        f" let c = C[t]; z = {_cmul(V, 'x', 'c')}; }}\n  A[gid] = z;\n"
    )
    bind = [("in", 0), ("in", 1), ("scratch", C), ("scratch", A)]
    passes.append(elementwise_pass(decl, ["in0", "in1", "C", "A"], body, batch * big, bind))
    st, fa = _stages(big, batch, A, A2, TWF, V)
    passes += st
    decl = storage(0, "A", V, False) + "\n" + storage(1, "FB", V, False) + "\n"
    body = f"  let a = A[gid]; let b = FB[gid % {big}u];\n  A[gid] = {_cmul(V, 'a', 'b')};\n"
    passes.append(elementwise_pass(decl, ["A", "FB"], body, batch * big, [("scratch", fa), ("scratch", fb)]))
    st, fr = _stages(big, batch, fa, A2 if fa == A else A, TWI, V)
    passes += st
    scale = f"{T}({1.0 / big / (n if inverse else 1)!r})"
    decl = hdr + storage(0, "out0", ty, False) + "\n" + storage(1, "out1", ty, False) + "\n"
    decl += storage(2, "C", V, False) + "\n" + storage(3, "R", V, False) + "\n"
    body = (
        f"  let row = gid / {n}u; let k = gid % {n}u;\n"
        f"  let r = R[row * {big}u + k]; let c = C[k];\n  let z = {_cmul(V, 'c', 'r')} * {scale};\n"
        f"  out0[gid] = {outc('z.x')};\n  out1[gid] = {outc('z.y')};\n"
    )
    bind = [("out", 0), ("out", 1), ("scratch", C), ("scratch", fr)]
    passes.append(elementwise_pass(decl, ["out0", "out1", "C", "R"], body, batch * n, bind))
    cb = max(16, batch * big * elem)
    tb = max(16, big * elem)
    return Plan(tuple(passes), (cb, cb, tb, tb, max(16, n * elem), tb, tb))


def plan_fft(routine: Routine, target: object = None) -> Plan:
    params = routine.params
    assert isinstance(params, FftParams)
    dtype = routine.type.input_dtypes[0]
    shape = routine.type.input_shapes[0]
    n = shape[-1]
    batch = math.prod(shape[:-1])
    if batch == 0:
        return Plan(())
    ty = wgsl_type(dtype)
    wd = work_dtype(dtype)
    T = wgsl_type(wd)
    V = f"vec2<{T}>"
    hdr = header([dtype])
    cvt = (lambda x: f"f32({x})") if dtype == DType.float16 else (lambda x: x)
    outc = (lambda x: f"f16({x})") if dtype == DType.float16 else (lambda x: x)
    sign = 1.0 if params.inverse else -1.0
    elem = 16 if wd == DType.float64 else 8
    cbytes = max(16, batch * n * elem)
    scratch = (cbytes, cbytes, max(16, n * elem))
    sfx = "f64" if wd == DType.float64 else "f32"
    passes: list[Pass] = []
    if n & (n - 1) and n > DIRECT_MAX:
        return _bluestein(n, batch, sign, T, V, sfx, hdr, ty, cvt, outc, elem, params.inverse)

    # twiddle table: tw[t] = (cos, sign*sin)(2π t / n)
    decl = storage(0, "tw", V, False) + "\n" + helpers([f"jc_sin_{sfx}", f"jc_cos_{sfx}"])
    two_pi = f"{T}({2 * math.pi!r})"
    body = (
        f"  let th = {T}(gid) * ({two_pi} / {T}({n}));\n"
        f"  tw[gid] = {V}(jc_cos_{sfx}(th), {T}({sign}) * jc_sin_{sfx}(th));\n"
    )
    passes.append(elementwise_pass(decl, ["tw"], body, n, [("scratch", 2)]))
    scale = f" / {T}({n})" if params.inverse else ""
    shared = getattr(target, "max_workgroup_storage", 16384)
    if n >= 2 and n & (n - 1) == 0 and n * elem <= shared:
        tw_only = Pass(passes[0].code, passes[0].grid, (("scratch", 0),))
        local = _local_stockham(n, batch, T, V, hdr, ty, cvt, outc, scale)
        return Plan((tw_only, local), (max(16, n * elem),))
    # load
    decl = hdr + storage(0, "in0", ty, True) + "\n" + storage(1, "in1", ty, True) + "\n"
    decl += storage(2, "S", V, False) + "\n"
    body = f"  S[gid] = {V}({cvt('in0[gid]')}, {cvt('in1[gid]')});\n"
    passes.append(
        elementwise_pass(decl, ["in0", "in1", "S"], body, batch * n, [("in", 0), ("in", 1), ("scratch", 0)])
    )
    cur = 0
    if n & (n - 1) == 0:
        half = n // 2
        decl = storage(0, "src", V, False) + "\n" + storage(1, "dst", V, False) + "\n"
        decl += storage(2, "tw", V, False) + "\n" + _UNI
        body = f"""  let row = gid / {max(half, 1)}u; let t = gid % {max(half, 1)}u;
  let m = u.m; let j = t / m; let k = t % m;
  let o = row * {n}u;
  let c0 = src[o + k + j * m]; let c1 = src[o + k + j * m + {half}u];
  let w = tw[j * m];
  let d = c0 - c1;
  dst[o + k + 2u * j * m] = c0 + c1;
  dst[o + k + 2u * j * m + m] = {V}(w.x * d.x - w.y * d.y, w.x * d.y + w.y * d.x);
"""
        m = 1
        while m < n:
            bind = [("scratch", cur), ("scratch", 1 - cur), ("scratch", 2)]
            passes.append(
                elementwise_pass(decl, ["src", "dst", "tw"], body, batch * half, bind, uniform=u32s(m))
            )
            cur = 1 - cur
            m *= 2
    else:
        decl = storage(0, "src", V, False) + "\n" + storage(1, "dst", V, False) + "\n"
        decl += storage(2, "tw", V, False) + "\n"
        body = f"""  let row = gid / {n}u; let kk = gid % {n}u;
  let o = row * {n}u;
  var acc = {V}(0);
  var idx = 0u;
  for (var j = 0u; j < {n}u; j = j + 1u) {{
    let x = src[o + j]; let w = tw[idx];
    acc = acc + {V}(w.x * x.x - w.y * x.y, w.x * x.y + w.y * x.x);
    idx = idx + kk; if (idx >= {n}u) {{ idx = idx - {n}u; }}
  }}
  dst[gid] = acc;
"""
        passes.append(
            elementwise_pass(
                decl, ["src", "dst", "tw"], body, batch * n, [("scratch", 0), ("scratch", 1), ("scratch", 2)]
            )
        )
        cur = 1
    # store (the inverse scales by 1/n)
    decl = hdr + storage(0, "out0", ty, False) + "\n" + storage(1, "out1", ty, False) + "\n"
    decl += storage(2, "S", V, False) + "\n"
    body = f"  let z = S[gid];\n  out0[gid] = {outc(f'z.x{scale}')};\n  out1[gid] = {outc(f'z.y{scale}')};\n"
    passes.append(
        elementwise_pass(
            decl, ["out0", "out1", "S"], body, batch * n, [("out", 0), ("out", 1), ("scratch", cur)]
        )
    )
    return Plan(tuple(passes), scratch)
