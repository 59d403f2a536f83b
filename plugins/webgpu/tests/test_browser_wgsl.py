"""The WGSL we generate passes Chromium's WGSL compiler (Tint), which rejects more than naga.

Every kernel shape the codegen tests run (each op and dtype a browser has: no f64, no f16 on
SwiftShader) is compiled into a shader module and a compute pipeline in headless Chromium's
WebGPU (SwiftShader), inside a validation error scope. Needs `/usr/bin/chromium` and Playwright
(`apt-get install chromium`, `pip install playwright`); skipped without them unless
CI=true or JAXCORE_BROWSER_TESTS=1 says they must be there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from jaxcore_webgpu.codegen import WgslTarget, compile_kernel
from jaxcore_webgpu.export import browser_wgsl

from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
F32, I32, U32, BOOL = DType.float32, DType.int32, DType.uint32, DType.bool

_JS = """async (codes) => {
  const ad = await navigator.gpu.requestAdapter();
  if (!ad) return {"<adapter>": ["no WebGPU adapter"]};
  const dev = await ad.requestDevice({requiredLimits: {maxStorageBuffersPerShaderStage:
      ad.limits.maxStorageBuffersPerShaderStage},
      requiredFeatures: ["subgroups"].filter(f => ad.features.has(f))});
  const res = {};
  for (const [k, code] of Object.entries(codes)) {
    dev.pushErrorScope("validation");
    const m = dev.createShaderModule({code});
    const info = await m.getCompilationInfo();
    let errs = info.messages.filter(x => x.type == "error")
      .map(x => `${x.lineNum}:${x.linePos} ${x.message}`);
    try {
      await dev.createComputePipelineAsync({layout: "auto", compute: {module: m, entryPoint: "main"}});
    } catch (e) { errs.push("pipeline: " + e.message); }
    const err = await dev.popErrorScope();
    if (err) errs.push(err.message);
    if (errs.length) res[k] = errs;
  }
  return res;
}"""


def _gv(dtype: DType, gid: int, n: int) -> AluExp:
    return AluExp.global_view(dtype, gid, ShapeTracker.from_shape([n]), [AluVar.gidx])


def _kernels() -> dict[str, Kernel]:
    n = 1000
    out: dict[str, Kernel] = {}
    for dtype in (F32, I32, U32, BOOL):
        x, y = _gv(dtype, 0, n), _gv(dtype, 1, n)
        for op in (AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Mod, AluOp.Min, AluOp.Max):
            out[f"{op}-{dtype}"] = Kernel(2, n, AluExp(op, dtype, (x, y)))
        for op in (AluOp.Cmplt, AluOp.Cmpne):
            out[f"{op}-{dtype}"] = Kernel(2, n, AluExp(op, BOOL, (x, y)))
        if dtype != F32:
            for mode in ("and", "or", "xor"):
                out[f"bit{mode}-{dtype}"] = Kernel(2, n, AluExp(AluOp.BitCombine, dtype, (x, y), mode))
        if dtype in (I32, U32):
            for mode in ("shl", "shr"):
                out[f"{mode}-{dtype}"] = Kernel(2, n, AluExp(AluOp.BitShift, dtype, (x, y), mode))
        for dst in (F32, I32, U32, BOOL):
            if dst != dtype:
                out[f"cast-{dtype}-{dst}"] = Kernel(1, n, AluExp.cast(dst, x))
        for op in (AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max):
            xr = AluExp.global_view(dtype, 0, ShapeTracker.from_shape([8, 4096]), [AluVar.gidx, AluVar.ridx])
            out[f"reduce{op}-{dtype}-grouped"] = Kernel(1, 8, xr, Reduction(dtype, op, 4096))
            xc = AluExp.global_view(
                dtype, 0, ShapeTracker.from_shape([1, 1 << 20]), [AluVar.gidx, AluVar.ridx]
            )
            out[f"reduce{op}-{dtype}-split"] = Kernel(1, 1, xc, Reduction(dtype, op, 1 << 20))
            xt = AluExp.global_view(
                dtype, 0, ShapeTracker.from_shape([64, 100]).permute([1, 0]), [AluVar.gidx, AluVar.ridx]
            )
            out[f"reduce{op}-{dtype}-loop"] = Kernel(1, 100, xt, Reduction(dtype, op, 64))
    xf = _gv(F32, 0, n)
    for op in sorted(AluGroup.RequiredFloat):
        out[f"{op}-f32"] = Kernel(1, n, AluExp(op, F32, (xf,)))
    for src, dst in ((F32, I32), (I32, F32), (U32, I32), (F32, U32)):
        out[f"bitcast-{src}-{dst}"] = Kernel(1, n, AluExp.bitcast(dst, _gv(src, 0, n)))
    u = _gv(U32, 0, n)
    out["threefry"] = Kernel(1, n, AluExp.threefry2x32(u, AluExp.u32(7), AluExp.cast(U32, AluVar.gidx), u))
    consts = [0.0, -0.0, 1e-45, 3.4028234663852886e38, float("inf"), float("-inf"), float("nan"), 0.1]
    e = AluExp.f32(consts[-1])
    for i, c in enumerate(consts[:-1]):
        e = AluExp.where(AluExp.cmplt(AluVar.gidx, AluExp.i32(i + 1)), AluExp.f32(c), e)
    out["consts-f32"] = Kernel(0, 16, e)
    ie = AluExp.where(AluExp.cmplt(AluVar.gidx, AluExp.i32(1)), AluExp.i32(-(2**31)), AluExp.i32(2**31 - 1))
    out["consts-i32"] = Kernel(0, 16, ie + AluExp.i32(-5))
    m, k = 256, 64
    ia, ja = AluExp.idiv(AluVar.gidx, AluExp.i32(m)), AluExp.mod(AluVar.gidx, AluExp.i32(m))
    ea = AluExp.global_view(F32, 0, ShapeTracker.from_shape([m, k]), [ia, AluVar.ridx])
    eb = AluExp.global_view(F32, 1, ShapeTracker.from_shape([k, m]), [AluVar.ridx, ja])
    out["matmul-upcast"] = Kernel(2, m * m, ea * eb, Reduction(F32, AluOp.Add, k))
    big = 65536 * 256 + 4
    out["grid-2d-vec4"] = Kernel(2, big, _gv(F32, 0, big) * _gv(F32, 1, big) + 1.0)
    return out


def _browser_required() -> bool:
    """In CI (and with JAXCORE_BROWSER_TESTS=1) a missing browser fails these tests, never skips them."""
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    return ci or os.environ.get("JAXCORE_BROWSER_TESTS") == "1"


def _browser_available() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return Path(CHROMIUM).exists()


def _evaluate(tmp_path: Path, js: str, arg: object, scripts: tuple[str, ...] = ()) -> dict:
    """`js` (an async function of `arg`) evaluated in headless Chromium's WebGPU on SwiftShader,
    after `scripts` are loaded into the page."""
    from playwright.sync_api import sync_playwright

    page = tmp_path / "index.html"
    page.write_text("<html><body>jaxcore</body></html>")
    args = [
        "--no-sandbox",
        "--enable-unsafe-webgpu",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            pg = browser.new_page()
            pg.goto(page.as_uri())  # a secure context: about:blank has no navigator.gpu
            for script in scripts:
                pg.add_script_tag(content=script)
            return pg.evaluate(js, arg)
        finally:
            browser.close()


@pytest.mark.skipif(
    not _browser_available() and not _browser_required(),
    reason="needs chromium and playwright (apt-get install chromium; pip install playwright)",
)
def test_generated_wgsl_compiles_in_chromium(tmp_path: Path) -> None:
    """Both reduction paths: the workgroup-memory tree and the subgroup fold (as exported)."""
    codes: dict[str, str] = {}
    for sub in (False, True):
        target = WgslTarget(max_storage_buffers_per_stage=8, has_subgroups=sub)
        for name, kernel in _kernels().items():
            for i, prog in enumerate(compile_kernel(kernel, target).passes):
                codes.setdefault(browser_wgsl(prog.code), f"{name}#{i}{'-subgroups' * sub}")
    codes = {name: code for code, name in codes.items()}
    assert sum("subgroupAdd" in c for c in codes.values()) >= 6
    # The check itself must be able to fail: a shader Tint rejects comes back as an error.
    canary = {"<canary>": "@compute @workgroup_size(1) fn main() { let x: u32 = 1i; }"}
    errors = _evaluate(tmp_path, _JS, {**canary, **codes})
    assert errors.pop("<canary>", None), "Chromium accepted a shader with a type error"
    assert not errors, json.dumps(errors, indent=1)[:4000]
    assert len(codes) > 100


_RUN_JS = """async (jobs) => {
  const ad = await navigator.gpu.requestAdapter();
  const dev = await ad.requestDevice({requiredFeatures: ["subgroups"].filter(f => ad.features.has(f))});
  const U = GPUBufferUsage;
  const b64 = (s) => Uint8Array.from(atob(s), c => c.charCodeAt(0));
  const mk = (bytes, n) => {
    const size = Math.max(16, Math.ceil(n / 16) * 16);
    const buf = dev.createBuffer({size, usage: U.STORAGE | U.COPY_SRC | U.COPY_DST});
    if (bytes) { const p = new Uint8Array(Math.ceil(bytes.length / 4) * 4); p.set(bytes);
                 dev.queue.writeBuffer(buf, 0, p); }
    return buf;
  };
  const out = {};
  for (const [name, job] of Object.entries(jobs)) {
    dev.pushErrorScope("validation");
    const ins = job.inputs.map(s => { const b = b64(s); return mk(b, b.length); });
    const res = mk(null, job.out_bytes);
    const scratch = job.scratch.map(n => mk(null, n));
    const enc = dev.createCommandEncoder();
    for (const p of job.passes) {
      const pipe = dev.createComputePipeline({layout: "auto",
        compute: {module: dev.createShaderModule({code: p.code}), entryPoint: "main"}});
      const pick = {in: i => ins[i], out: i => res, scratch: i => scratch[i]};
      const bg = dev.createBindGroup({layout: pipe.getBindGroupLayout(0),
        entries: p.bindings.map(([b, kind, i]) => ({binding: b, resource: {buffer: pick[kind](i)}}))});
      const cp = enc.beginComputePass();
      cp.setPipeline(pipe); cp.setBindGroup(0, bg);
      if (p.uniform) {  // 16 bytes at @group(1) @binding(0): given (base64), else the opaque zero
        const ub = dev.createBuffer({size: 16, usage: U.UNIFORM | U.COPY_DST});
        if (typeof p.uniform === "string") dev.queue.writeBuffer(ub, 0, b64(p.uniform));
        cp.setBindGroup(1, dev.createBindGroup({layout: pipe.getBindGroupLayout(1),
          entries: [{binding: 0, resource: {buffer: ub}}]}));
      }
      cp.dispatchWorkgroups(...p.grid); cp.end();
    }
    const rd = dev.createBuffer({size: res.size, usage: U.MAP_READ | U.COPY_DST});
    enc.copyBufferToBuffer(res, 0, rd, 0, res.size);
    dev.queue.submit([enc.finish()]);
    await rd.mapAsync(GPUMapMode.READ);
    const bytes = new Uint8Array(rd.getMappedRange().slice(0, job.out_bytes));
    rd.unmap();
    const err = await dev.popErrorScope();
    let bin = "";  // in pieces: one call with every byte as an argument overflows the stack
    for (let i = 0; i < bytes.length; i += 8192) bin += String.fromCharCode(...bytes.subarray(i, i + 8192));
    out[name] = err ? {error: err.message} : {data: btoa(bin)};
  }
  return out;
}"""


@pytest.mark.skipif(
    not _browser_available() and not _browser_required(),
    reason="needs chromium and playwright (apt-get install chromium; pip install playwright)",
)
def test_generated_wgsl_runs_exactly_in_chromium(tmp_path: Path) -> None:
    """Contract edge cases (x/0, INT_MIN/-1, NaN min/max and casts, shifts >= 32, -0, huge sin)
    computed by Tint + SwiftShader match the reference interpreter bit for bit (within the table
    for transcendentals)."""
    import base64

    import numpy as np
    import test_codegen as tc

    jobs, expect = {}, {}

    def normal(*arrays: np.ndarray) -> list[np.ndarray]:
        """Drop lanes with a subnormal float input: SwiftShader flushes them (as WGSL allows)."""
        keep = np.ones(len(arrays[0]), bool)
        for a in arrays:
            if a.dtype.kind == "f":
                with np.errstate(invalid="ignore"):
                    keep &= ~((a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny))
        return [a[keep].copy() for a in arrays]

    def add(name: str, kernel: Kernel, inputs: list[np.ndarray], tol: str = "", sub: bool = False) -> None:
        plan = compile_kernel(kernel, WgslTarget(max_storage_buffers_per_stage=8, has_subgroups=sub))
        jobs[name] = {
            "inputs": [base64.b64encode(a.tobytes()).decode() for a in inputs],
            "out_bytes": kernel.size * np.dtype(tc.to_numpy(kernel.dtype)).itemsize,
            "scratch": list(plan.scratch),
            "passes": [
                {
                    "code": browser_wgsl(p.code),
                    "grid": list(p.grid),
                    "bindings": [[b.binding, b.kind, b.index] for b in p.bindings],
                    "uniform": p.uniform is not None,
                }
                for p in plan.passes
            ],
        }
        expect[name] = (tc.reference(kernel, inputs), kernel.dtype, tol)

    for dtype in (F32, I32, U32, BOOL):
        a, b = normal(*tc.pairs(dtype))
        nn = len(a)
        x, y = tc.gv(dtype, 0, nn), tc.gv(dtype, 1, nn)
        for op in tc.BINARY + [AluOp.Cmplt, AluOp.Cmpne]:
            od = BOOL if op in (AluOp.Cmplt, AluOp.Cmpne) else dtype
            add(f"{op}-{dtype}", Kernel(2, nn, AluExp(op, od, (x, y))), [a, b])
        if dtype in (I32, U32):
            for mode in ("shl", "shr"):
                add(f"{mode}-{dtype}", Kernel(2, nn, AluExp(AluOp.BitShift, dtype, (x, y), mode)), [a, b])
        (v,) = normal(tc.values(dtype))
        for dst in (F32, I32, U32, BOOL):
            if dst != dtype:
                add(f"cast-{dtype}-{dst}", Kernel(1, len(v), AluExp.cast(dst, tc.gv(dtype, 0, len(v)))), [v])
    for op in tc.UNARY:
        (a,) = normal(tc._unary_inputs(op, F32))
        add(f"{op}-f32", Kernel(1, len(a), AluExp(op, F32, (tc.gv(F32, 0, len(a)),))), [a], op.value)
    for op in (AluOp.Add, AluOp.Min, AluOp.Max):
        a = tc._reduce_values(F32, 3 * 3000, op)
        a[7] = np.nan
        add(f"reduce{op}", tc._reduce_kernel(F32, op, 3, 3000), [a], "Reduce" + op.value)
    # The subgroup folds (SwiftShader's subgroups are 4 wide): grouped rows and a two-pass sum.
    for dtype in (F32, I32, U32, BOOL):
        for op in (AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max):
            for rows, cols in ((3, 3000), (1, 1 << 16)):  # 1 << 16: still split in two passes
                a = tc._reduce_values(dtype, rows * cols, op)
                if dtype == F32 and op in (AluOp.Min, AluOp.Max):
                    a[7] = np.nan
                k = tc._reduce_kernel(dtype, op, rows, cols)
                add(f"subgroup-reduce{op}-{dtype}-{rows}", k, [a], "Reduce" + op.value, sub=True)

    results = _evaluate(tmp_path, _RUN_JS, jobs)
    failures = []
    for name, (want, dtype, tol) in expect.items():
        r = results[name]
        if "error" in r:
            failures.append(f"{name}: {r['error']}")
            continue
        got = np.frombuffer(base64.b64decode(r["data"]), tc.to_numpy(dtype)).copy()
        if dtype == F32:  # a subnormal result may come back flushed to zero
            with np.errstate(invalid="ignore"):
                flushed = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny) & (got == 0)
            got[flushed] = want[flushed]
        try:
            tc.assert_close(got, want, dtype, tol)
        except BaseException as e:  # pytest.fail raises outside Exception
            failures.append(f"{name}: {str(e)[:300]}")
    assert not failures, "\n".join(failures)


_EXPORTED_JS = """async (jobs) => {
  const dec = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const enc = (b) => { let s = ""; for (let i = 0; i < b.length; i += 8192)
    s += String.fromCharCode(...b.subarray(i, i + 8192)); return btoa(s); };
  const device = await JaxcoreWebGPU.requestDevice();
  const results = await JaxcoreWebGPU.runMany(device,
    jobs.map((j) => ({program: j.program, inputs: j.inputs.map(dec)})));
  return results.map((r) => ({...r, outputs: r.outputs ? r.outputs.map(enc) : null}));
}"""


def _run_exported(gpu, tmp_path: Path, cases: dict[str, tuple[Any, list[Any]]]) -> dict[str, list[Any]]:
    """Each routine prepared on `gpu`, exported (jaxcore_webgpu.export) and run on its inputs in
    the page by the shipped runner.js: {name: outputs as float32 arrays}; compiler messages fail."""
    import base64

    import numpy as np
    from jaxcore_webgpu.export import export, runner_js

    jobs = []
    for routine, inputs in cases.values():
        program = export(gpu, gpu.prepare_routine(routine))
        jobs.append({"program": program, "inputs": [base64.b64encode(a.tobytes()).decode() for a in inputs]})
    got = _evaluate(tmp_path, _EXPORTED_JS, jobs, (runner_js(),))
    out = {}
    for name, r in zip(cases, got):
        assert r.get("ok") and not r.get("messages") and not r.get("error"), (name, r)
        out[name] = [np.frombuffer(base64.b64decode(o), np.float32) for o in r["outputs"]]
    return out


@pytest.mark.skipif(
    not _browser_available() and not _browser_required(),
    reason="needs chromium and playwright (apt-get install chromium; pip install playwright)",
)
def test_blocked_cholesky_runs_in_chromium(gpu, tmp_path: Path) -> None:
    """The blocked Cholesky's passes (block offsets in a uniform, barriers in loops, private
    arrays, WebGPU's default workgroup limits) pass Tint and factor as the host does, NaNs too."""
    import numpy as np

    from jaxcore.host_routines import run_routine
    from jaxcore.routine import Routine, Routines

    n = 70  # three blocks: the last one partial
    m = np.random.default_rng(0).uniform(-1, 1, (2, n, n))
    a = (m @ m.transpose(0, 2, 1) + n * np.eye(n)).astype(np.float32)
    a[1, 50, 50] = -1e4  # not positive definite from pivot 50 on
    routine = Routine.build(Routines.Cholesky, [a.shape], ["float32"])
    (got,) = _run_exported(gpu, tmp_path, {"cholesky": (routine, [a])})["cholesky"]
    got = got.reshape(a.shape)
    want = np.empty_like(a)
    run_routine(routine, [a], [want])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    not _browser_available() and not _browser_required(),
    reason="needs chromium and playwright (apt-get install chromium; pip install playwright)",
)
def test_fft_runs_in_chromium(gpu, tmp_path: Path) -> None:
    """The Fft plans (one workgroup pass, four-step, Bluestein, a direct DFT) compile under Tint
    and WebGPU's default limits, and their results match numpy in the browser too."""
    import numpy as np

    from jaxcore.routine import FftParams, Routine, Routines

    rng = np.random.default_rng(3)
    cases, want = {}, {}
    for n, inverse in ((8, False), (360, True), (4096, False), (8192, True), (1009, False), (17, True)):
        x = rng.normal(0, 1, (2, 3, n)).astype(np.float32)
        name = f"{n}{'i' if inverse else ''}"
        r = Routine.build(Routines.Fft, [x.shape[1:]] * 2, ["float32"] * 2, FftParams.default(n, inverse))
        cases[name] = (r, [x[0], x[1]])
        z = x[0].astype(np.float64) + 1j * x[1]
        want[name] = np.fft.ifft(z) if inverse else np.fft.fft(z)
    got = _run_exported(gpu, tmp_path, cases)
    for name, w in want.items():
        re, im = (o.reshape(w.shape) for o in got[name])
        np.testing.assert_allclose(
            re + 1j * im.astype(np.float64), w, rtol=0, atol=1e-5 * np.abs(w).max(), err_msg=name
        )


@pytest.mark.skipif(
    not _browser_available() and not _browser_required(),
    reason="needs chromium and playwright (apt-get install chromium; pip install playwright)",
)
@pytest.mark.parametrize("tiles", [1, 3])
def test_radix_sort_runs_in_chromium(gpu, tmp_path: Path, retarget, tiles: int) -> None:
    """The radix sort's passes (vector selects, workgroup scans, a bank swizzle, 16 KB of
    workgroup memory; one block a workgroup, or a loop over three) pass Tint, and Sort and stable
    Argsort match numpy in the browser."""
    import numpy as np

    from jaxcore.routine import Routine, Routines

    retarget(radix_tiles_per_block=tiles)

    n = max(gpu.target.radix_sort_from, 8192) + 77  # several blocks, a partial last one
    x = np.random.default_rng(5).integers(-50, 50, (2, n)).astype(np.float32) / 4
    x[:, ::13] = np.nan
    x[:, 1::17] = -0.0
    cases = {
        "sort": (Routine.build(Routines.Sort, [x.shape], ["float32"]), [x]),
        "argsort": (Routine.build(Routines.Argsort, [x.shape], ["float32"]), [x]),
    }
    got = _run_exported(gpu, tmp_path, cases)
    np.testing.assert_array_equal(got["sort"][0].reshape(x.shape), np.sort(x, axis=-1))
    want = np.argsort(x, axis=-1, kind="stable").astype(np.int32)
    np.testing.assert_array_equal(got["argsort"][1].view(np.int32).reshape(x.shape), want)
    vals = got["argsort"][0].view(np.uint32).reshape(x.shape)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, want, -1).view(np.uint32))
