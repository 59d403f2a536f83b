"""Recorded pipelines in the page: a chain of kernels and routines recorded on webgpu and on webgl
(`jaxcore.record`), bundled (`jaxcore.web.write_bundle`), imported as an ES module over a local
http:// server and run in headless Chromium; the outputs equal the Python device's, with one upload
per input and one read per output per run. Also: "auto" falls back, and run() checks its inputs.
The classic-script transform and the bundle's TypeScript types are checked here too."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import numpy as np
import pytest

import jaxcore
from jaxcore import (
    AluExp,
    AluOp,
    DType,
    FftParams,
    Fused,
    Routine,
    Routines,
    ScatterParams,
    TriangularSolveParams,
)
from jaxcore.conformance.harness import assert_close, from_buffer
from jaxcore.conformance.tolerances import lookup
from jaxcore.web import classic_script

F32, I32, U32, F64 = DType.float32, DType.int32, DType.uint32, DType.float64
B, D, H, C = 4, 16, 32, 10  # batch, input width, hidden width, classes
DEVICES = ("webgpu", "webgl")
TSC_CACHE = Path(os.environ.get("JAXCORE_TSC_CACHE", Path.home() / ".cache" / "jaxcore-tsc"))
TSC_INSTALL = f"npm install --prefix {TSC_CACHE} typescript@5"


# ---- the recorded computation: an MLP, a softmax and what a page might want of it ----------------
def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)

    w = {"w1": f(D, H), "b1": f(H), "w2": f(H, H), "b2": f(H), "w3": f(H, C), "b3": f(C)}
    return {**w, "idx": np.array([2, 0, 2, 1], np.int32)}


def _realize(backend: Any, value: Any, out: int | None = None) -> int:
    kernel, inputs = value.kernel()
    out = backend.malloc(kernel.bytes) if out is None else out
    backend.dispatch(backend.prepare_kernel(kernel), list(inputs), [out])
    return out


def _routine(backend: Any, name: Routines, slots: list[int], shape: tuple[int, ...]) -> list[int]:
    return _call(backend, Routine.build(name, [shape], [F32]), slots)


def _dense(
    backend: Any, a: int, w: int, b: int, n: tuple[int, int], act: Callable[..., AluExp], dt=F32
) -> int:
    """act(a @ w, bias): a GEMM through broadcast views, its bias and activation in the epilogue."""
    k, m = n
    at = Fused.read(a, F32, (B, k)).reshape((B, 1, k)).expand((B, m, k))
    wt = Fused.read(w, F32, (k, m)).permute((1, 0)).reshape((1, m, k)).expand((B, m, k))
    bias = Fused.read(b, F32, (m,)).reshape((1, m)).expand((B, m))
    if dt != F32:  # computed in dt: the operands cast (no longer plain reads, so no GEMM: fine)
        at, wt, bias = (v.astype(dt) for v in (at, wt, bias))
    return _realize(backend, Fused.map(AluExp.mul, at, wt).reduce(AluOp.Add, 2).map(act, bias))


def forward(backend: Any, x: int, w: dict[str, int]) -> dict[str, tuple[int, DType, tuple[int, ...]]]:
    """17 dispatches (15 kernels, Sort and Argsort), one of them in place; {output: (slot, dtype, shape)}."""
    h1 = _dense(backend, x, w["w1"], w["b1"], (D, H), lambda acc, b: AluExp.max(acc + b, AluExp.f32(0)))
    h2 = _dense(backend, h1, w["w2"], w["b2"], (H, H), lambda acc, b: AluExp.erf(acc + b))
    logits = _dense(backend, h2, w["w3"], w["b3"], (H, C), lambda acc, b: acc + b)
    lg = Fused.read(logits, F32, (B, C))

    def rows(slot: int) -> Fused:  # a (B,) buffer broadcast along the classes
        return Fused.read(slot, F32, (B,)).reshape((B, 1)).expand((B, C))

    m = _realize(backend, lg.reduce(AluOp.Max, 1))
    e = _realize(backend, Fused.map(lambda u, v: AluExp.exp(u - v), lg, rows(m)))
    s = _realize(backend, Fused.read(e, F32, (B, C)).reduce(AluOp.Add, 1))
    probs = _realize(
        backend, Fused.map(lambda u, v: u * AluExp.reciprocal(v), Fused.read(e, F32, (B, C)), rows(s))
    )
    # written over its own slot: an output that aliases the input (a new version of the slot)
    scaled = Fused.map(lambda u: u * AluExp.f32(2.0), Fused.read(probs, F32, (B, C)))
    _realize(backend, Fused.map(lambda u: u * AluExp.f32(0.5), scaled), out=probs)
    lse = _realize(
        backend, Fused.map(lambda a, b: AluExp.log(a) + b, Fused.read(s, F32, (B,)), Fused.read(m, F32, (B,)))
    )
    sq = Fused.map(lambda u: u * u, Fused.read(h1, F32, (B, H)))
    norm = _realize(backend, sq.reduce(AluOp.Add, 1).map(AluExp.sqrt))
    (srt,) = _routine(backend, Routines.Sort, [probs], (B, C))
    _, idx = _routine(backend, Routines.Argsort, [logits], (B, C))
    label = _realize(backend, Fused.read(idx, I32, (B, C)).shrink(((0, B), (C - 1, C))).reshape((B,)))
    mask = _realize(
        backend, Fused.map(lambda u: AluExp.cmplt(AluExp.f32(0.1), u), Fused.read(probs, F32, (B, C)))
    )
    count = _realize(backend, Fused.read(mask, DType.bool, (B, C)).astype(U32).reduce(AluOp.Add, 1))
    half = _realize(backend, Fused.read(probs, F32, (B, C)).astype(DType.float16))
    logp = _realize(backend, Fused.map(lambda u, v: u - v, lg, rows(lse)))
    return {
        "logits": (logits, F32, (B, C)),
        "probs": (probs, F32, (B, C)),
        "logp": (logp, F32, (B, C)),
        "norm": (norm, F32, (B,)),
        "sorted": (srt, F32, (B, C)),
        "label": (label, I32, (B,)),
        "mask": (mask, DType.bool, (B, C)),
        "count": (count, U32, (B,)),
        "half": (half, DType.float16, (B, C)),
    }


def forward64(
    backend: Any, x: int, w: dict[str, int], dt: DType
) -> dict[str, tuple[int, DType, tuple[int, ...]]]:
    """One layer computed in `dt` (float64 on webgpu: no browser's WebGPU has it), float32 out."""
    y = _dense(backend, x, w["w1"], w["b1"], (D, H), lambda acc, b: AluExp.cast(F32, acc + b), dt)
    return {"y": (y, F32, (B, H))}


def forward_routines(
    backend: Any, x: int, w: dict[str, int]
) -> dict[str, tuple[int, DType, tuple[int, ...]]]:
    """Routines on device buffers: Cholesky, TriangularSolve, LU, Fft and Scatter of x's Gram matrix."""
    xt = Fused.read(x, F32, (B, D)).permute((1, 0))
    gram = Fused.map(
        AluExp.mul, xt.reshape((D, 1, B)).expand((D, D, B)), xt.reshape((1, D, B)).expand((D, D, B))
    )
    eye = Fused.map(
        lambda i, j: AluExp.cast(F32, AluExp.cmpne(i, j).not_()), Fused.iota((D, D), 0), Fused.iota((D, D), 1)
    )
    a = _realize(backend, gram.reduce(AluOp.Add, 2).map(lambda acc, e: acc + e * AluExp.f32(D), eye))
    (chol,) = _call(backend, Routine.build(Routines.Cholesky, [(D, D)], [F32]), [a])
    # a lower solve runs as copies around the device's upper one: each is a step of the export
    lower = TriangularSolveParams(lower=True)
    tri = Routine.build(Routines.TriangularSolve, [(D, D), (B, D)], [F32, F32], lower)
    (solve,) = _call(backend, tri, [chol, x])
    lu, piv, perm = _call(backend, Routine.build(Routines.LU, [(D, D)], [F32]), [a])
    zeros = _realize(backend, Fused.full((B, D), 0.0, F32))
    fft = Routine.build(Routines.Fft, [(B, D), (B, D)], [F32, F32], FftParams.default(D, False))
    re, im = _call(backend, fft, [x, zeros])
    col = _realize(backend, Fused.read(x, F32, (B, D)).shrink(((0, B), (0, 1))).reshape((B,)))
    scatter = Routine.build(Routines.Scatter, [(B,), (B,)], [F32, I32], ScatterParams("add", (3,), (0,), 0))
    (scat,) = _call(backend, scatter, [col, w["idx"]])
    return {
        "chol": (chol, F32, (D, D)),
        "solve": (solve, F32, (B, D)),
        "lu": (lu, F32, (D, D)),
        "piv": (piv, I32, (D,)),
        "perm": (perm, I32, (D,)),
        "re": (re, F32, (B, D)),
        "im": (im, F32, (B, D)),
        "scat": (scat, F32, (3,)),
    }


def _call(backend: Any, r: Routine, slots: list[int]) -> list[int]:
    t = r.type
    outs = [
        backend.malloc(int(np.prod(s)) * jaxcore.byte_width(d))
        for s, d in zip(t.output_shapes, t.output_dtypes)
    ]
    backend.dispatch(backend.prepare_routine(r), slots, outs)
    return outs


@dataclass
class Recorded:
    pipeline: Any
    expected: dict[str, np.ndarray]
    dispatches: int


def record(device: str, fn: Callable[..., Any], x: np.ndarray, *args: Any) -> Recorded:
    """`fn` run on `device` inside jaxcore.record and exported (x the input, the weights constants),
    with what the Python device computed for x."""
    try:
        backend = jaxcore.get_backend(device)
    except Exception as e:  # the device is not available here
        if harness.in_ci():
            raise
        pytest.skip(f"{device}: {e}")
    w = {k: backend.malloc(v.nbytes, v.tobytes()) for k, v in _weights().items()}
    xs = backend.malloc(x.nbytes, x.tobytes())
    with jaxcore.record(backend) as rec:
        outs = fn(backend, xs, w, *args)
    pipe = rec.export(inputs={"x": jaxcore.record.BufferSpec(xs, F32, x.shape)}, outputs=outs)
    expected = {k: from_buffer(backend.read(s), dt, shape) for k, (s, dt, shape) in outs.items()}
    return Recorded(pipe, expected, len(rec.dispatches))


X = np.random.default_rng(1).normal(size=(B, D)).astype(np.float32)
X2 = np.random.default_rng(2).normal(size=(B, D)).astype(np.float32)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Bundles written into a directory served over http://127.0.0.1 (a secure context, so WebGPU
    is there; module imports from file:// pages may be refused): `model` (the chain on both APIs),
    `f64` (webgpu computing in float64, then webgl), `gpu64` (the float64 webgpu one alone)."""
    root = tmp_path_factory.mktemp("site")
    rec = {d: record(d, forward, X) for d in DEVICES}
    rec2 = {}
    for d in DEVICES:  # the same pipeline's answer for a second input: run it again, unrecorded
        rec2[d] = record(d, forward, X2).expected
    assert all(r.dispatches >= 13 for r in rec.values())
    jaxcore.web.write_bundle(root, [rec[d].pipeline for d in DEVICES], name="model")
    r64 = record("webgpu", forward64, X, F64)
    r32 = record("webgl", forward64, X, F32)
    jaxcore.web.write_bundle(root, [r64.pipeline, r32.pipeline], name="f64")
    jaxcore.web.write_bundle(root, [r64.pipeline], name="gpu64")
    rr = {d: record(d, forward_routines, X) for d in DEVICES}
    jaxcore.web.write_bundle(root, [rr[d].pipeline for d in DEVICES], name="routines")
    (root / "index.html").write_text("<!doctype html><meta charset=utf-8><title>jaxcore pipeline</title>\n")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
    yield {"root": root, "url": url, "rec": rec, "rec2": rec2, "r32": r32, "routines": rr}
    server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Page:
    """A page of its own in the session's Chromium (the parity page is left as it is)."""

    browser: Any
    page: Any
    console: list[str]

    def evaluate(self, js: str, arg: Any = None, timeout: float = 240.0) -> Any:
        return self.browser.thread.call(lambda: self.page.evaluate(js, arg), timeout)


@pytest.fixture(scope="module")
def page(browser: Any, site: dict[str, Any]) -> Iterator[Page]:
    console: list[str] = []

    def open_page() -> Any:
        pg = browser.browser.new_page()
        pg.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        pg.goto(site["url"])
        return pg

    pg = browser.thread.call(open_page, 60)
    yield Page(browser, pg, console)
    browser.thread.call(pg.close, 30)


# In the page: load a bundle, warm it up, run it on each input, and hand back the outputs as bytes.
RUN_JS = """
async ({bundle, device, inputs, hideGpu}) => {
  const { load } = await import(new URL("jaxcore-web/index.js", location.href).href);
  const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const enc = (a) => {
    const u = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    let s = "";
    for (let i = 0; i < u.length; i += 0x8000) s += String.fromCharCode(...u.subarray(i, i + 0x8000));
    return btoa(s);
  };
  const pack = (out) => Object.entries(out).map(([k, a]) => [k, { type: a.constructor.name, b64: enc(a) }]);
  if (hideGpu) Object.defineProperty(navigator, "gpu", { value: undefined, configurable: true });
  try {
    const t0 = performance.now();
    const model = await load(bundle, { device });
    const tLoad = performance.now() - t0;
    const runs = [];
    const times = [];
    for (const x of inputs) {
      const t = performance.now();
      const out = await model.run({ x: new Float32Array(b64(x).buffer) });
      times.push(performance.now() - t);
      runs.push(Object.fromEntries(pack(out)));
    }
    const { device: on, skipped, inputs: ins, outputs: outs } = model;
    const stats = { ...model.stats };
    const result = { device: on, skipped, inputs: ins, outputs: outs, stats, runs, tLoad, times };
    model.dispose();
    return result;
  } finally {
    if (hideGpu) delete navigator.gpu;
  }
}
"""

ARRAY_CLASS = {
    "float32": "Float32Array",
    "int32": "Int32Array",
    "uint32": "Uint32Array",
    "bool": "Int32Array",
}
ARRAY_CLASS["float16"] = "Uint16Array"
# The loosest op on each float output's path, its table tolerance doubled (the page and the Python
# device each within it of the exact answer); several rounding steps feed each, hence the factor 4.
PATHS = {
    "chol": "Cholesky",
    "solve": "TriangularSolve",
    "lu": "LU",
    "re": "Fft",
    "im": "Fft",
    "scat": "ReduceAdd",
    "y": "ReduceAdd",
    "logits": "Erf",
    "probs": "Exp",
    "logp": "Log",
    "norm": "Sqrt",
    "sorted": "Exp",
    "half": "Exp",
}


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(a.tobytes()).decode()


def _check_outputs(
    device: str, got: dict[str, Any], want: dict[str, np.ndarray], specs: dict[str, Any]
) -> None:
    assert set(got) == set(want)
    for name, exp in want.items():
        dtype = specs[name]["dtype"]
        assert got[name]["type"] == ARRAY_CLASS[dtype], (name, got[name])
        arr = from_buffer(base64.b64decode(got[name]["b64"]), dtype, exp.shape)
        if dtype in ("float32", "float16"):
            rtol, atol = lookup(PATHS[name], DType(dtype))
            tol = (8 * rtol, 8 * max(atol, 1e-7 if dtype == "float32" else 1e-3))
            assert_close(
                arr, exp, PATHS[name], dtype, tol=tol, inputs=[X], what=f"{device} {name}: page vs Python"
            )
        else:
            np.testing.assert_array_equal(arr, exp, err_msg=f"{device} {name}: page vs Python")


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_pipeline_runs_in_the_page(device: str, page: Page, site: dict[str, Any]) -> None:
    rec = site["rec"][device]
    n_in, n_out = len(rec.pipeline.inputs), len(rec.pipeline.outputs)
    got = page.evaluate(RUN_JS, {"bundle": "model.json", "device": device, "inputs": [_b64(X), _b64(X2)]})
    assert got["device"] == device and got["skipped"] == []
    assert got["inputs"] == {"x": {"dtype": "float32", "shape": [B, D]}}
    assert got["outputs"]["label"] == {"dtype": "int32", "shape": [B]}
    stats = got["stats"]
    assert stats["runs"] == 2 and stats["uploads"] == 2 * n_in and stats["reads"] == 2 * n_out, stats
    assert stats["constants"] == 6 and stats["dispatches"] == 2 * len(rec.pipeline.steps)
    _check_outputs(device, got["runs"][0], rec.expected, got["outputs"])
    _check_outputs(device, got["runs"][1], site["rec2"][device], got["outputs"])
    print(
        f"\n{device}: {len(rec.pipeline.steps)} dispatches, load {got['tLoad']:.0f} ms, runs {got['times']}"
    )


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_routines_run_in_the_page(device: str, page: Page, site: dict[str, Any]) -> None:
    rec = site["routines"][device]
    got = page.evaluate(RUN_JS, {"bundle": "routines.json", "device": device, "inputs": [_b64(X)]})
    assert got["device"] == device and got["stats"]["reads"] == len(rec.pipeline.outputs)
    _check_outputs(device, got["runs"][0], rec.expected, got["outputs"])


def test_bundle_layout(site: dict[str, Any]) -> None:
    root = site["root"]
    doc = json.loads((root / "model.json").read_text())
    assert [t["device"] for t in doc["targets"]] == list(DEVICES)
    weights = _weights()
    # every constant once: both targets' weights share the bytes
    assert (
        doc["binaryBytes"]
        == (root / "model.bin").stat().st_size
        == sum(w.nbytes for k, w in weights.items() if k != "idx")
    )
    for t in doc["targets"]:
        assert len(t["steps"]) >= 13 and len(t["constants"]) == 6
    pkg = json.loads((root / "jaxcore-web" / "package.json").read_text())
    assert pkg["type"] == "module" and pkg["types"] == "./index.d.ts" and "./webgl.js" in pkg["exports"]
    assert {p.name for p in (root / "jaxcore-web").iterdir()} == {
        "index.js",
        "index.d.ts",
        "package.json",
        "webgpu.js",
        "webgl.js",
    }


def test_auto_falls_back_to_webgl(page: Page, site: dict[str, Any]) -> None:
    # WebGPU gone from the page: the webgpu target cannot open
    got = page.evaluate(
        RUN_JS, {"bundle": "model.json", "device": "auto", "inputs": [_b64(X)], "hideGpu": True}
    )
    assert got["device"] == "webgl"
    assert got["skipped"][0]["device"] == "webgpu" and "navigator.gpu" in got["skipped"][0]["reason"]
    _check_outputs("webgl", got["runs"][0], site["rec"]["webgl"].expected, got["outputs"])
    # a program the browser's WGSL compiler rejects (a shader edited into nonsense)
    doc = json.loads((site["root"] / "model.json").read_text())
    doc["targets"][0]["programs"][0]["shaders"][0] = "fn broken( {"
    doc["binary"] = "model.bin"
    (site["root"] / "broken.json").write_text(json.dumps(doc))
    got = page.evaluate(RUN_JS, {"bundle": "broken.json", "device": "auto", "inputs": [_b64(X)]})
    assert got["device"] == "webgl" and "program 0 did not compile" in got["skipped"][0]["reason"], got[
        "skipped"
    ]
    # a float64 program: the browser's WebGPU refuses it
    got = page.evaluate(RUN_JS, {"bundle": "f64.json", "device": "auto", "inputs": [_b64(X)]})
    assert got["device"] == "webgl"
    assert "f64" in got["skipped"][0]["reason"], got["skipped"]
    _check_outputs("webgl", got["runs"][0], site["r32"].expected, got["outputs"])


NO_TARGET_JS = """
async ({bundle, hideGl}) => {
  const { load } = await import(new URL("jaxcore-web/index.js", location.href).href);
  const saved = [HTMLCanvasElement.prototype.getContext, OffscreenCanvas.prototype.getContext];
  if (hideGl) {
    for (const C of [HTMLCanvasElement, OffscreenCanvas]) {
      const own = C.prototype.getContext;
      C.prototype.getContext = function (kind, ...rest) {
        return kind === "webgl2" ? null : own.call(this, kind, ...rest);
      };
    }
  }
  try { await load(bundle); return null; } catch (e) { return e.message; }
  finally { [HTMLCanvasElement.prototype.getContext, OffscreenCanvas.prototype.getContext] = saved; }
}
"""


def test_no_target_lists_every_reason(page: Page) -> None:
    msg = page.evaluate(NO_TARGET_JS, {"bundle": "f64.json", "hideGl": True})
    assert msg is not None and "no target of f64 can run here" in msg, msg
    assert "webgpu: program 0: the program needs f64" in msg, msg
    assert "webgl: WebGL2 is not available" in msg, msg
    msg = page.evaluate(NO_TARGET_JS, {"bundle": "gpu64.json", "hideGl": False})
    assert "webgpu: program 0: the program needs f64" in msg and "webgl" not in msg, msg
    msg = page.evaluate(
        "async () => { const { load } = await import(new URL('jaxcore-web/index.js', location.href).href);"
        "try { await load('model.json', { device: 'metal' }); } catch (e) { return e.message; } }"
    )
    assert 'no "metal" target (it has: webgpu, webgl)' in msg, msg


VALIDATE_JS = """
async ({device}) => {
  const { load } = await import(new URL("jaxcore-web/index.js", location.href).href);
  const model = await load("model.json", { device });
  const tries = {
    wrongClass: { x: new Float64Array(64) },
    wrongLength: { x: new Float32Array(63) },
    missing: {},
    extra: { x: new Float32Array(64), y: new Float32Array(1) },
    notArray: { x: [1, 2, 3] },
  };
  const out = {};
  for (const [k, inputs] of Object.entries(tries)) {
    try { await model.run(inputs); out[k] = null; } catch (e) { out[k] = e.message; }
  }
  const ok = await model.run({ x: new Float32Array(64) });  // still runs after the refusals
  out.after = Object.keys(ok).length;
  out.stats = { ...model.stats };
  model.dispose();
  try { await model.run({ x: new Float32Array(64) }); } catch (e) { out.disposed = e.message; }
  return out;
}
"""


@pytest.mark.parametrize("device", DEVICES)
def test_run_validates_its_inputs(device: str, page: Page, site: dict[str, Any]) -> None:
    got = page.evaluate(VALIDATE_JS, {"device": device})
    want = "Float32Array of 64 elements (float32 [4, 16])"
    assert got["wrongClass"] == f'jaxcore-web: input "x": expected a {want}, got Float64Array'
    assert got["wrongLength"] == f'jaxcore-web: input "x": expected a {want}, got 63 elements'
    assert got["missing"] == f'jaxcore-web: input "x" is missing: expected a {want}'
    assert got["extra"] == 'jaxcore-web: unknown input "y" (the model takes: x)'
    assert got["notArray"] == f'jaxcore-web: input "x": expected a {want}, got Array'
    assert got["after"] == 9 and got["stats"]["uploads"] == 1 and got["stats"]["runs"] == 1
    assert got["disposed"] == "jaxcore-web: the model was disposed"


def test_docs_recording_example_runs_in_the_page(page: Page, site: dict[str, Any], monkeypatch: Any) -> None:
    """docs/browser-export.md's recording example (its second python block) writes a bundle that
    gives numpy's logits in the page on both APIs."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "browser-export.md").read_text()
    code = re.findall(r"```python\n(.*?)```", doc, re.S)[1]
    monkeypatch.chdir(site["root"])
    scope: dict[str, Any] = {}
    exec(compile(code, "browser-export.md", "exec"), scope)
    x = np.random.default_rng(3).normal(size=784).astype(np.float32)
    want = x @ scope["w"] + scope["b"]
    for device in DEVICES:
        got = page.evaluate(RUN_JS, {"bundle": "site/model.json", "device": device, "inputs": [_b64(x)]})
        logits = from_buffer(base64.b64decode(got["runs"][0]["logits"]["b64"]), F32)
        np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4, err_msg=device)


SHARED_JS = """
async ({device}) => {
  const url = (f) => new URL(`jaxcore-web/${f}`, location.href).href;
  const { load } = await import(url("index.js"));
  const rt = await import(url(`${device}.js`));  // the module index.js imports: one instance
  const own = device === "webgpu" ? { device: await rt.requestDevice() } : { gl: rt.createContext() };
  const a = await load("model.json", { device, [device]: own });
  const b = await load("model.json", { device, [device]: own });
  const x = new Float32Array(64).fill(0.5);
  const first = Array.from((await a.run({ x })).logits);
  a.dispose();  // b shares the context: its buffers and programs stay
  const second = Array.from((await b.run({ x })).logits);
  b.dispose();
  // the context given is still usable
  const alive = own.device ? !!own.device.createBuffer({ size: 16, usage: 8 }) : !own.gl.isContextLost();
  return { first, second, alive };
}
"""


@pytest.mark.parametrize("device", DEVICES)
def test_models_sharing_a_context(device: str, page: Page) -> None:
    got = page.evaluate(SHARED_JS, {"device": device})
    assert got["first"] == got["second"] and len(got["first"]) == B * C and got["alive"]


# ---- no browser needed ------------------------------------------------------------------------
def test_classic_script_of_a_module() -> None:
    module = (
        "// jaxcore-demo: a header\n//\n\n"
        "export const FORMAT = 'x';\nconst hidden = 1;\n"
        "export function f(a) {\n  return a + hidden;\n}\n"
        "export async function g() {\n  return f(1);\n}\nexport class K {}\n"
    )
    text = classic_script(module, "Demo")
    assert text.startswith("// jaxcore-demo: a header\n//\n\n(function (root) {")
    assert "export" not in text.replace("// jaxcore", "")
    assert "root.Demo = { FORMAT, f, g, K };" in text
    assert text.endswith('})(typeof globalThis !== "undefined" ? globalThis : this);\n')
    for bad in (
        "import x from './y.js';\n",
        "export default 1;\n",
        "export { a };\n",
        "export * from 'z';\n",
    ):
        with pytest.raises(ValueError, match="cannot make a classic script"):
            classic_script(module + bad, "Demo")
    with pytest.raises(ValueError, match="identifier"):
        classic_script(module, "not-a-name")
    if shutil.which("node"):  # the derived script defines the global with every export
        js = text + "console.log(JSON.stringify([typeof Demo.f, Demo.f(2), Demo.FORMAT, typeof Demo.K]));"
        out = subprocess.run(["node", "-e", js], capture_output=True, text=True, check=True).stdout
        assert json.loads(out) == ["function", 3, "x", "function"]


@pytest.mark.parametrize("device", DEVICES)
def test_runner_js_is_the_module_as_a_classic_script(device: str) -> None:
    """One source per device: the bundled module and the classic runner.js are the same code."""
    mod = __import__(f"jaxcore_{device}.export", fromlist=["runner_js", "RUNNER"])
    module = mod.RUNNER.read_text()
    classic = mod.runner_js()
    assert classic.startswith("// jaxcore-") and "\nexport " not in classic
    glob = {"webgpu": "JaxcoreWebGPU", "webgl": "JaxcoreWebGL"}[device]
    assert f"root.{glob} = {{ FORMAT, NAME," in classic
    for name in (
        "open",
        "unsupported",
        "compileAll",
        "upload",
        "dispatch",
        "read",
        "free",
        "begin",
        "end",
        "close",
    ):
        assert f"export function {name}(" in module or f"export async function {name}(" in module, name


def _tsc() -> Path | None:
    """TypeScript's compiler: on PATH, or installed into TSC_CACHE (once, from the npm registry)."""
    found = shutil.which("tsc")
    if found:
        return Path(found)
    local = TSC_CACHE / "node_modules" / ".bin" / "tsc"
    if local.exists():
        return local
    if shutil.which("npm") is None:
        return None
    TSC_CACHE.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(TSC_INSTALL.split(), capture_output=True, text=True, timeout=300)
    return local if proc.returncode == 0 and local.exists() else None


USAGE_TS = """
import { load, type Model, type TensorInfo, type TypedArray } from "./jaxcore-web/index.js";

async function main(): Promise<number> {
  const model: Model = await load("model.json", { device: "auto" });
  const info: TensorInfo = model.inputs.x;
  const n: number = info.shape.reduce((a, b) => a * b, 1);
  await model.warmup();
  const out: Record<string, TypedArray> = await model.run({ x: new Float32Array(n) });
  const device: string = model.device;
  const uploads: number = model.stats.uploads;
  model.dispose();
  return out.logits.length + uploads + device.length;
}
main();
"""


def test_types_check_with_tsc(site: dict[str, Any], tmp_path: Path) -> None:
    tsc = _tsc()
    if tsc is None:
        if harness.in_ci():
            pytest.fail(f"CI: TypeScript's tsc is missing; install it with `{TSC_INSTALL}`")
        pytest.skip(f"no tsc (install it with `{TSC_INSTALL}`)")
    shutil.copytree(site["root"] / "jaxcore-web", tmp_path / "jaxcore-web")
    (tmp_path / "usage.ts").write_text(USAGE_TS)
    args = [
        "--noEmit",
        "--strict",
        "--target",
        "es2022",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
    ]
    args += ["--lib", "es2022,dom", "usage.ts"]
    proc = subprocess.run([str(tsc), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = USAGE_TS.replace("new Float32Array(n)", "42")
    (tmp_path / "usage.ts").write_text(bad)
    proc = subprocess.run([str(tsc), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "usage.ts" in proc.stdout  # the types do catch a wrong input
