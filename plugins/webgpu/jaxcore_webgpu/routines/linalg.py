"""TriangularSolve, Cholesky, LU and JacobiEigh in WGSL.

Matrices are worked on in a copy in the work dtype (float16 runs in float32 and rounds on store,
as the host reference does): a scratch buffer, or for Cholesky in float32/float64 the output
itself; each routine's passes write every output element.

- Cholesky: blocked right-looking, by block columns of NB: the first diagonal block
  (`_chol_diag`), then two passes a block, the panel below it (`_chol_panel`) and the trailing
  update (`_chol_update`), whose first tile's workgroup factors the next diagonal block (a
  target without `cholesky_lookahead` runs a diagonal pass of its own, three passes a block). Each
  element gets the reference column algorithm's formulas (s = A[i,j] - sum_p L[i,p] L[j,p],
  L[j,j] = sqrt(s_jj), L[i,j] = s / L[j,j]) over the same dependencies, only the subtraction
  order differs, so a non-positive-definite pivot gives NaN in the same places. The block's
  offset is the passes' uniform, so the passes of a kind share one pipeline.
- TriangularSolve: one thread per right-hand-side row, back substitution over the upper triangle.
- LU: one workgroup per matrix; per column, thread 0 finds the first largest |value| (a NaN never
  wins, a NaN diagonal stays), the rows swap in parallel, the multipliers and the trailing update
  run over all threads; a zero pivot skips the elimination.
- JacobiEigh: one thread per matrix, cyclic sweeps over all (p, q) pairs until the largest
  off-diagonal value is within tolerance * max(1, max|A|) (a NaN never starts).
"""

from __future__ import annotations

from jaxcore.dtype import DType, byte_width
from jaxcore.routine import JacobiEighParams, Routine, TriangularSolveParams
from jaxcore_webgpu.program import Binding, Pass, Plan
from jaxcore_webgpu.routines.common import (
    Buf,
    declare,
    elementwise_pass,
    entry,
    fold,
    header,
    helpers,
    inp,
    nbytes,
    outp,
    scratch,
    u32s,
    uniform_block,
    wgsl_type,
    work_dtype,
)

LOCAL = 256
SYNC = "storageBarrier(); workgroupBarrier();"

NB = 32  # block width of the blocked Cholesky (a diagonal block is a workgroup's rows)
TILE = NB  # trailing-update tile (TILE x TILE outputs a workgroup, 4 x 4 a thread): tile 0 = next diagonal
PANEL_ROWS = 64  # panel rows per workgroup (a thread per row)
WG_STORAGE = 16384  # WebGPU's default workgroup storage limit: the WGSL must run in browsers too
_CHOL_UNI = uniform_block("k0", "kb", "tiles")


def _types(dtype: DType) -> tuple[str, str, DType]:
    wd = work_dtype(dtype)
    return wgsl_type(dtype), wgsl_type(wd), wd


def _cvt(dtype: DType, x: str) -> str:
    return f"f32({x})" if dtype == DType.float16 else x


def _out(dtype: DType, x: str) -> str:
    return f"f16({x})" if dtype == DType.float16 else x


def _isnan(wd: DType) -> tuple[str, str]:
    """(helper name, helpers text) of the NaN test for the work dtype."""
    name = "jc_isnan_f64" if wd == DType.float64 else "jc_isnan_f32"
    return name, helpers([name])


def _group_pass(bufs: list[Buf], body: str, batch: int, head: str, tail: str) -> Pass:
    """A workgroup of LOCAL threads per matrix: `b` the matrix, `lid` the thread (both i32)."""
    grid = fold(batch)
    code = (
        head
        + declare(bufs)
        + tail
        + entry(LOCAL, [b.name for b in bufs], "lidu")
        + f"  let b = i32(wid.x + wid.y * {grid[0]}u);\n  let lid = i32(lidu);\n"
        + f"  if (b >= {batch}) {{ return; }}\n"
        + body
        + "}\n"
    )
    return Pass(code, grid, tuple(b.binding for b in bufs))


def _tiled_main(wg: int, batch: int, nn: int, body: str) -> str:
    """An entry point of `u.tiles` workgroups per matrix, folded into x and y: gives `b` (the
    matrix), `t` (the workgroup's tile), `base` (the matrix's first element) and `lid`."""
    return (
        f"@compute @workgroup_size({wg}, 1, 1)\n"
        "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
        "        @builtin(local_invocation_index) lid: u32) {\n"
        "  let wgi = wid.x + wid.y * nwg.x;\n"
        f"  if (wgi >= u.tiles * {batch}u) {{ return; }}\n"
        "  let b = wgi / u.tiles;\n  let t = wgi % u.tiles;\n"
        f"  let base = b * {nn}u;\n" + body + "}\n"
    )


def _chol_diag(T: str, n: int, batch: int) -> str:
    """A diagonal block's pass (`_diag_body` at u.k0, u.kb wide): the first one's, or with no
    look-ahead every one's."""
    decls, body = _diag_body(T, n, "u.k0", "u.kb")
    return decls + _tiled_main(NB, batch, n * n, body)


def _diag_bytes(wd: DType) -> int:
    """Workgroup storage `_diag_body` takes: NB rows of NB // 4 vec4s, and 4 vec4s."""
    return (NB * NB // 4 + 4) * 4 * byte_width(wd)


def _diag_body(T: str, n: int, k0: str, kb: str) -> tuple[str, str]:
    """(declarations, WGSL block) that factor the diagonal block at (k0, k0), kb wide (NB threads
    or more, in uniform control flow): a thread per row, holding its row
    as vec4s of 4 columns; four columns per step, two barriers each. In step g every row below
    subtracts the finished rows' earlier groups from its group-g columns (vec4 dot products), the
    group's 4 rows publish theirs, every thread factors that 4 x 4 diagonal block (the same
    values in each), and the rows below solve against it as the panel does; then each row
    publishes its group g for the steps after."""
    g4 = NB // 4
    v = f"vec4<{T}>"
    body = f"""  {{
  let k0 = {k0}; let kb = {kb};
  let row = base + (k0 + lid) * {n}u + k0;
  let mine = lid < kb;
  var x: array<{v}, {g4}>;
  if (mine) {{ for (var c = 0u; c <= lid; c = c + 1u) {{ x[c / 4u][c % 4u] = W[row + c]; }} }}
  for (var g = 0u; g < (kb + 3u) / 4u; g = g + 1u) {{
    let g0 = 4u * g;
    let below = mine && lid >= g0;  // a row of this group or under it
    var y = x[g];
    if (below) {{
      for (var q = 0u; q < g; q = q + 1u) {{
        let xq = x[q]; let r = g0 * {g4}u + q;
        y = y - {v}(dot(lrow[r], xq), dot(lrow[r + {g4}u], xq),
                    dot(lrow[r + {2 * g4}u], xq), dot(lrow[r + {3 * g4}u], xq));
      }}
      if (lid < g0 + 4u) {{ ly[lid - g0] = y; }}
    }}
    workgroupBarrier();
    let a0 = ly[0]; let a1 = ly[1]; let a2 = ly[2]; let a3 = ly[3];
    let l00 = sqrt(a0.x);
    let l10 = a1.x / l00;
    let l11 = sqrt(a1.y - l10 * l10);
    let l20 = a2.x / l00;
    let l21 = (a2.y - l20 * l10) / l11;
    let l22 = sqrt(a2.z - l20 * l20 - l21 * l21);
    let l30 = a3.x / l00;
    let l31 = (a3.y - l30 * l10) / l11;
    let l32 = (a3.z - l30 * l20 - l31 * l21) / l22;
    let l33 = sqrt(a3.w - l30 * l30 - l31 * l31 - l32 * l32);
    if (below) {{
      let c = lid - g0;
      if (c == 0u) {{ y = {v}(l00, 0, 0, 0); }}
      else if (c == 1u) {{ y = {v}(l10, l11, 0, 0); }}
      else if (c == 2u) {{ y = {v}(l20, l21, l22, 0); }}
      else if (c == 3u) {{ y = {v}(l30, l31, l32, l33); }}
      else {{
        y.x = y.x / l00;
        y.y = (y.y - y.x * l10) / l11;
        y.z = (y.z - y.x * l20 - y.y * l21) / l22;
        y.w = (y.w - y.x * l30 - y.y * l31 - y.z * l32) / l33;
      }}
      x[g] = y;
      lrow[lid * {g4}u + g] = y;
    }}
    workgroupBarrier();
  }}
  if (mine) {{ for (var c = 0u; c <= lid; c = c + 1u) {{ W[row + c] = x[c / 4u][c % 4u]; }} }}
  }}
"""
    decls = f"var<workgroup> lrow: array<{v}, {NB * g4}>;\nvar<workgroup> ly: array<{v}, 4>;\n"
    return decls, body


def _chol_panel(T: str, n: int, batch: int, rows: int) -> str:
    """The panel below the diagonal block, `rows` rows a workgroup: each thread solves its row
    against L_kk by forward substitution (L[i,j] = (A[i,j] - sum_p<j L[i,p] L[j,p]) / L[j,j]),
    four columns at a time: the row is vec4s of 4 columns, and lk[g*NB + p] holds L[4g..4g+3, p],
    so each earlier column p is one vec4 multiply-subtract; then the 4 x 4 triangle in the group.
    Each column still subtracts p = 0, 1, ... in order."""
    g4 = NB // 4
    v = f"vec4<{T}>"
    body = f"""  let k0 = u.k0;
  let i = k0 + {NB}u + t * {rows}u + lid;
  let row = base + i * {n}u + k0;
  var x: array<{v}, {g4}>;
  if (i < {n}u) {{  // the row first: its loads are in flight while L_kk comes in
    for (var g = 0u; g < {g4}u; g = g + 1u) {{
      let e = row + 4u * g;
      x[g] = {v}(W[e], W[e + 1u], W[e + 2u], W[e + 3u]);
    }}
  }}
  for (var e = lid; e < {g4 * NB}u; e = e + {rows}u) {{
    let r = k0 + 4u * (e / {NB}u); let c = k0 + e % {NB}u;
    lk[e] = {v}(W[base + r * {n}u + c], W[base + (r + 1u) * {n}u + c],
                W[base + (r + 2u) * {n}u + c], W[base + (r + 3u) * {n}u + c]);
  }}
  workgroupBarrier();
  if (i < {n}u) {{
    for (var g = 0u; g < {g4}u; g = g + 1u) {{
      let l = g * {NB}u;
      var y = x[g];
      for (var q = 0u; q < g; q = q + 1u) {{
        let xq = x[q];
        y = y - xq.x * lk[l + 4u * q];
        y = y - xq.y * lk[l + 4u * q + 1u];
        y = y - xq.z * lk[l + 4u * q + 2u];
        y = y - xq.w * lk[l + 4u * q + 3u];
      }}
      let l0 = lk[l + 4u * g]; let l1 = lk[l + 4u * g + 1u]; let l2 = lk[l + 4u * g + 2u];
      y.x = y.x / l0.x;
      y.y = (y.y - y.x * l0.y) / l1.y;
      y.z = (y.z - y.x * l0.z - y.y * l1.z) / l2.z;
      y.w = (y.w - y.x * l0.w - y.y * l1.w - y.z * l2.w) / lk[l + 4u * g + 3u].w;
      x[g] = y;
    }}
    for (var g = 0u; g < {g4}u; g = g + 1u) {{
      let e = row + 4u * g;
      W[e] = x[g].x; W[e + 1u] = x[g].y; W[e + 2u] = x[g].z; W[e + 3u] = x[g].w;
    }}
  }}
"""
    decls = f"var<workgroup> lk: array<{v}, {g4 * NB}>;\n"
    return decls + _tiled_main(rows, batch, n * n, body)


def _chol_update(T: str, n: int, batch: int, kc: int, lookahead: bool) -> str:
    """A[i,j] -= sum_p L[i,p] L[j,p] over the block's NB columns, for one TILE x TILE tile of the
    trailing lower triangle (tile t of the row-major lower triangle of tiles; above-diagonal
    elements of a diagonal tile are not stored). The block's columns come through workgroup
    memory `kc` at a time as vec4s of 4 rows; each thread keeps a 4 x 4 block of outputs (rows
    4ty.., columns 4tx..) in registers, so a step is two vec4 loads and four vec4 multiply-adds.
    With `lookahead`, tile 0, the next diagonal block (TILE == NB), is factored by its workgroup
    once updated (no other tile reads it), which spares a pass and its wait a block."""
    s = TILE // 4 + 1  # vec4 column stride of `li`, `lj` (padded: the load writes across columns)
    v = f"vec4<{T}>"
    xyzw = "xyzw"
    load = "".join(
        f"      if (ri + {d}u < {n}u) {{ vi.{xyzw[d]} = W[base + (ri + {d}u) * {n}u + col]; }}\n"
        f"      if (rj + {d}u < {n}u) {{ vj.{xyzw[d]} = W[base + (rj + {d}u) * {n}u + col]; }}\n"
        for d in range(4)
    )
    fmas = "".join(f"      c{d} = c{d} + a.{xyzw[d]} * bv;\n" for d in range(4))
    stores = "".join(
        f"  if (i + {r}u < {n}u && j + {c}u <= i + {r}u) {{ W[e + {r * n + c}u] -= c{r}.{xyzw[c]}; }}\n"
        for r in range(4)
        for c in range(4)
    )
    body = f"""  var ti = u32((sqrt(8.0 * f32(t) + 1.0) - 1.0) * 0.5);
  loop {{ if (ti * (ti + 1u) / 2u <= t) {{ break; }} ti = ti - 1u; }}
  loop {{ if ((ti + 1u) * (ti + 2u) / 2u > t) {{ break; }} ti = ti + 1u; }}
  let tj = t - ti * (ti + 1u) / 2u;
  let k0 = u.k0;
  let i0 = k0 + {NB}u + ti * {TILE}u;
  let j0 = k0 + {NB}u + tj * {TILE}u;
  let tx = lid % {TILE // 4}u; let ty = lid / {TILE // 4}u;
  var c0 = {v}(0); var c1 = {v}(0); var c2 = {v}(0); var c3 = {v}(0);
  for (var q = 0u; q < {NB}u; q = q + {kc}u) {{
    for (var e = lid; e < {TILE // 4 * kc}u; e = e + {TILE * TILE // 16}u) {{
      let r = e / {kc}u; let p = e % {kc}u; let col = k0 + q + p;
      let ri = i0 + 4u * r; let rj = j0 + 4u * r;
      var vi = {v}(0); var vj = {v}(0);
{load}      li[p * {s}u + r] = vi; lj[p * {s}u + r] = vj;
    }}
    workgroupBarrier();
    for (var p = 0u; p < {kc}u; p = p + 1u) {{
      let a = li[p * {s}u + ty]; let bv = lj[p * {s}u + tx];
{fmas}    }}
    workgroupBarrier();
  }}
  let i = i0 + 4u * ty; let j = j0 + 4u * tx;
  let e = base + i * {n}u + j;
{stores}"""
    decls = f"var<workgroup> li: array<{v}, {kc * s}>;\nvar<workgroup> lj: array<{v}, {kc * s}>;\n"
    if lookahead:
        ddecls, dbody = _diag_body(T, n, f"u.k0 + {NB}u", f"min({NB}u, {n}u - u.k0 - {NB}u)")
        body += f"  if (t == 0u) {{\n  {SYNC}\n{dbody}  }}\n"
        decls += ddecls
    return decls + _tiled_main(TILE * TILE // 16, batch, n * n, body)


def plan_cholesky(routine: Routine, target: object = None) -> Plan:
    """The first diagonal block (a workgroup per matrix), then per block the panel below it (row
    tiles x batch) and the trailing lower triangle (tiles x batch; tile 0 factors the next
    diagonal block, or without look-ahead a diagonal pass comes next). Row-major throughout;
    float32/float64 work in place in the output (the first pass copies the lower triangle, zeros
    above), float16 in a float32 scratch that a last pass rounds into the output."""
    dtype, (_, n), batch = routine.type.operand(0)
    if n == 0 or batch == 0:
        return Plan(())
    ty, T, wd = _types(dtype)
    nn, total = n * n, batch * n * n
    work: Binding = ("out", 0) if wd == dtype else ("scratch", 0)
    lower = f"e % {n}u <= e / {n}u"
    init_body = f"  let e = gid % {nn}u;\n  W[gid] = select({T}(0), {_cvt(dtype, 'in0[gid]')}, {lower});\n"
    passes = [elementwise_pass([inp(0, ty), Buf("W", T, work)], init_body, total, header([dtype]))]

    kc = NB  # block columns per trailing-update step: two TILE x kc tiles in workgroup memory
    lookahead = getattr(target, "cholesky_lookahead", True)
    while 2 * kc * (TILE + 4) * byte_width(wd) + (_diag_bytes(wd) if lookahead else 0) > WG_STORAGE:
        kc //= 2
    decls = declare([Buf("W", T, work)]) + _CHOL_UNI
    diag, panel, update = (
        decls + _chol_diag(T, n, batch),
        decls + _chol_panel(T, n, batch, PANEL_ROWS),
        decls + _chol_update(T, n, batch, kc, lookahead),
    )

    def run(code: str, tiles: int, k0: int, kb: int) -> Pass:
        return Pass(code, fold(tiles * batch), (work,), uniform=u32s(k0, kb, tiles))

    for k0 in range(0, n, NB):
        kb = min(NB, n - k0)
        if k0 == 0 or not lookahead:
            passes.append(run(diag, 1, k0, kb))
        m = n - k0 - kb  # rows below the block: none for the last one, so the others are NB wide
        if m:
            passes.append(run(panel, -(-m // PANEL_ROWS), k0, kb))
            nt = -(-m // TILE)
            passes.append(run(update, nt * (nt + 1) // 2, k0, kb))
    if wd == dtype:
        return Plan(tuple(passes))
    bufs = [Buf("W", T, ("scratch", 0), True), outp(0, ty)]
    passes.append(elementwise_pass(bufs, f"  out0[gid] = {_out(dtype, 'W[gid]')};\n", total, header([dtype])))
    return Plan(tuple(passes), (nbytes(wd, total),))


def plan_triangular_solve(routine: Routine, target: object = None) -> Plan:
    params = routine.params
    assert isinstance(params, TriangularSolveParams)
    _, (_, n), batch = routine.type.operand(0)
    dtype, (m, _), _ = routine.type.operand(1)
    rows = batch * m
    if rows == 0 or n == 0:
        return Plan(())
    ty, T, wd = _types(dtype)
    div = "" if params.unit_diagonal else f"    s = s / {_cvt(dtype, f'in0[ab + i * {n} + i]')};\n"
    body = f"""  let g = i32(gid);
  let ab = (g / {m}) * {n * n};
  let xb = g * {n};
  for (var i = {n - 1}; i >= 0; i = i - 1) {{
    var s = {_cvt(dtype, "in1[xb + i]")};
    for (var p = i + 1; p < {n}; p = p + 1) {{ s = s - {_cvt(dtype, f"in0[ab + i * {n} + p]")} * W[xb + p]; }}
{div}    W[xb + i] = s;
  }}
  for (var i = 0; i < {n}; i = i + 1) {{ out0[xb + i] = {_out(dtype, "W[xb + i]")}; }}
"""
    bufs = [inp(0, ty), inp(1, ty), outp(0, ty), scratch("W", T, 0)]
    p = elementwise_pass(bufs, body, rows, header([dtype]), wg=64)
    return Plan((p,), (nbytes(wd, rows * n),))


def plan_lu(routine: Routine, target: object = None) -> Plan:
    dtype, (m, n), batch = routine.type.operand(0)
    k = min(m, n)
    if batch == 0 or m == 0:
        return Plan(())
    ty, T, wd = _types(dtype)
    isnan, hs = _isnan(wd)
    nonzero = "(bitcast<u32>(d) & 0x7fffffffu) != 0u" if wd == DType.float32 else "d != 0.0"
    mn = m * n
    body = f"""  let base = b * {mn};
  let pb = b * {m};
  for (var e = lid; e < {mn}; e = e + {LOCAL}) {{ W[base + e] = {_cvt(dtype, "in0[base + e]")}; }}
  for (var r = lid; r < {m}; r = r + {LOCAL}) {{ out2[pb + r] = r; }}
  {SYNC}
  for (var j = 0; j < {k}; j = j + 1) {{
    if (lid == 0) {{
      var best = j;
      let x0 = W[base + j * {n} + j];
      if (!{isnan}(x0)) {{
        var bm = abs(x0);
        for (var i = j + 1; i < {m}; i = i + 1) {{
          let v = abs(W[base + i * {n} + j]);
          if (!{isnan}(v) && v > bm) {{ bm = v; best = i; }}
        }}
      }}
      piv = best;
      out1[b * {k} + j] = best;
    }}
    {SYNC}
    let p = workgroupUniformLoad(&piv);
    if (p != j) {{
      for (var c = lid; c < {n}; c = c + {LOCAL}) {{
        let t = W[base + j * {n} + c];
        W[base + j * {n} + c] = W[base + p * {n} + c];
        W[base + p * {n} + c] = t;
      }}
      if (lid == 0) {{ let t = out2[pb + j]; out2[pb + j] = out2[pb + p]; out2[pb + p] = t; }}
    }}
    {SYNC}
    let d = W[base + j * {n} + j];
    let ok = {nonzero};
    for (var i = j + 1 + lid; i < {m}; i = i + {LOCAL}) {{
      if (ok) {{ W[base + i * {n} + j] = W[base + i * {n} + j] / d; }}
    }}
    {SYNC}
    let w = {n} - j - 1;
    let cnt = ({m} - j - 1) * w;
    for (var e = lid; e < cnt; e = e + {LOCAL}) {{
      let i = j + 1 + e / w; let c = j + 1 + e % w;
      let ix = base + i * {n} + c;
      if (ok) {{ W[ix] = W[ix] - W[base + i * {n} + j] * W[base + j * {n} + c]; }}
    }}
    {SYNC}
  }}
  for (var e = lid; e < {mn}; e = e + {LOCAL}) {{ out0[base + e] = {_out(dtype, "W[base + e]")}; }}
"""
    bufs = [inp(0, ty), outp(0, ty), outp(1, "i32"), outp(2, "i32"), scratch("W", T, 0)]
    p = _group_pass(bufs, body, batch, header([dtype]), "var<workgroup> piv: i32;\n" + hs)
    return Plan((p,), (nbytes(wd, batch * mn),))


def plan_jacobi_eigh(routine: Routine, target: object = None) -> Plan:
    params = routine.params
    assert isinstance(params, JacobiEighParams)
    dtype, (_, n), batch = routine.type.operand(0)
    if batch == 0 or n == 0:
        return Plan(())
    ty, T, wd = _types(dtype)
    isnan, hs = _isnan(wd)
    bufs = [inp(0, ty), outp(0, ty), outp(1, ty), scratch("W", T, 0), scratch("V", T, 1)]
    body = _jacobi_body(dtype, T, n, params, isnan)
    p = elementwise_pass(bufs, body, batch, header([dtype]), hs + _jacobi_off(T, n, isnan), wg=64)
    size = nbytes(wd, batch * n * n)
    return Plan((p,), (size, size))


def _jacobi_off(T: str, n: int, isnan: str) -> str:
    """WGSL `off(base)`: the largest |off-diagonal| of the matrix at `base`, or a NaN in it."""
    return f"""fn off(base: i32) -> {T} {{
  var mx = {T}(0);
  for (var i = 1; i < {n}; i = i + 1) {{
    for (var j = 0; j < i; j = j + 1) {{
      let v = abs(W[base + i * {n} + j]);
      if ({isnan}(v)) {{ return v; }}
      mx = max(mx, v);
    }}
  }}
  return mx;
}}
"""


def _jacobi_body(dtype: DType, T: str, n: int, params: JacobiEighParams, isnan: str) -> str:
    """One thread per matrix: cyclic sweeps of rotations over W, accumulated in V."""
    return f"""  let base = i32(gid) * {n * n};
  var largest = {T}(0);
  var nan = false;
  for (var i = 0; i < {n}; i = i + 1) {{
    for (var j = 0; j < {n}; j = j + 1) {{
      V[base + i * {n} + j] = select({T}(0), {T}(1), i == j);
      if (j <= i) {{
        let v = {_cvt(dtype, f"in0[base + i * {n} + j]")};
        W[base + i * {n} + j] = v; W[base + j * {n} + i] = v;
        if ({isnan}(v)) {{ nan = true; }} else {{ largest = max(largest, abs(v)); }}
      }}
    }}
  }}
  let thr = {T}({float(params.tolerance)!r}) * max({T}(1), largest);
  for (var sweep = 0; sweep < {params.max_sweeps} && {n} >= 2 && !nan; sweep = sweep + 1) {{
    let o = off(base);
    if ({isnan}(o) || !(o > thr)) {{ break; }}
    for (var p = 0; p < {n - 1}; p = p + 1) {{
      for (var q = p + 1; q < {n}; q = q + 1) {{
        let apq = W[base + q * {n} + p];
        if (apq == {T}(0)) {{ continue; }}
        let app = W[base + p * {n} + p]; let aqq = W[base + q * {n} + q];
        let tau = (aqq - app) / ({T}(2) * apq);
        let sg = select({T}(-1), {T}(1), tau >= {T}(0));
        let t = sg / (abs(tau) + sqrt(tau * tau + {T}(1)));
        let c = {T}(1) / sqrt(t * t + {T}(1));
        let s = t * c;
        let npp = c * c * app - {T}(2) * s * c * apq + s * s * aqq;
        let nqq = s * s * app + {T}(2) * s * c * apq + c * c * aqq;
        for (var r = 0; r < {n}; r = r + 1) {{
          let wp = W[base + p * {n} + r]; let wq = W[base + q * {n} + r];
          W[base + p * {n} + r] = c * wp - s * wq; W[base + q * {n} + r] = s * wp + c * wq;
        }}
        for (var r = 0; r < {n}; r = r + 1) {{
          W[base + r * {n} + p] = W[base + p * {n} + r]; W[base + r * {n} + q] = W[base + q * {n} + r];
        }}
        W[base + p * {n} + p] = npp; W[base + q * {n} + q] = nqq;
        W[base + p * {n} + q] = {T}(0); W[base + q * {n} + p] = {T}(0);
        for (var r = 0; r < {n}; r = r + 1) {{
          let vp = V[base + r * {n} + p]; let vq = V[base + r * {n} + q];
          V[base + r * {n} + p] = c * vp - s * vq; V[base + r * {n} + q] = s * vp + c * vq;
        }}
      }}
    }}
  }}
  for (var i = 0; i < {n}; i = i + 1) {{
    for (var j = 0; j < {n}; j = j + 1) {{
      let e = base + i * {n} + j;
      out0[e] = {_out(dtype, f"select({T}(0), W[e], j <= i)")};
      out1[e] = {_out(dtype, "V[e]")};
    }}
  }}
"""
