"""Speed of the WGSL the compiler generates, side by side with PyTorch on the same GPU.

    python plugins/webgpu/bench_codegen.py [--small]

Runs each generated `ShaderPlan` through a bare wgpu harness (the runtime is measured by the
plugin's own benchmarks): `reps` dispatches recorded into one compute pass, one submit, timed by
GPU timestamps at the pass's start and end when the adapter has `timestamp-query` (wall clock
otherwise). PyTorch, when importable with CUDA, runs the same workloads in the same process, so a
CUDA context is alive for both (see gpu-probe.md, pitfall 1). Results are checked against numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg")
os.makedirs(os.environ["XDG_RUNTIME_DIR"], exist_ok=True)

import wgpu  # noqa: E402
from jaxcore_webgpu.codegen import ShaderPlan, WgslTarget, compile_kernel  # noqa: E402

from jaxcore.alu import AluExp, AluOp, AluVar  # noqa: E402
from jaxcore.dtype import DType  # noqa: E402
from jaxcore.kernel import Kernel, Reduction  # noqa: E402
from jaxcore.shape import ShapeTracker  # noqa: E402

F32 = DType.float32


class Gpu:
    def __init__(self) -> None:
        adapters = wgpu.gpu.enumerate_adapters_sync()
        vk = [a for a in adapters if a.info.get("backend_type") == "Vulkan"] or adapters
        ad = sorted(vk, key=lambda a: a.info.get("adapter_type") != "DiscreteGPU")[0]
        self.name = ad.info["device"]
        lim = ad.limits
        feats = [f for f in ("shader-f16", "timestamp-query") if f in ad.features]
        keys = (
            "max-storage-buffer-binding-size",
            "max-buffer-size",
            "max-storage-buffers-per-shader-stage",
            "max-compute-workgroup-storage-size",
            "max-compute-invocations-per-workgroup",
            "max-compute-workgroup-size-x",
        )
        self.dev = ad.request_device_sync(required_features=feats, required_limits={k: lim[k] for k in keys})
        self.ts = "timestamp-query" in feats
        self.max_binding = lim["max-storage-buffer-binding-size"]
        self.target = WgslTarget(
            has_f16="shader-f16" in feats,
            max_workgroup_size=min(
                lim["max-compute-invocations-per-workgroup"], lim["max-compute-workgroup-size-x"]
            ),
            max_workgroups_per_dim=lim["max-compute-workgroups-per-dimension"],
            max_storage_buffers_per_stage=lim["max-storage-buffers-per-shader-stage"],
            max_workgroup_storage=lim["max-compute-workgroup-storage-size"],
        )

    def buffer(self, data: np.ndarray | None, nbytes: int):
        u = wgpu.BufferUsage
        buf = self.dev.create_buffer(size=max(4, nbytes), usage=u.STORAGE | u.COPY_SRC | u.COPY_DST)
        if data is not None:
            self.dev.queue.write_buffer(buf, 0, data.tobytes())
        return buf

    def time(self, plan: ShaderPlan, ins: list, out, reps: int) -> float:
        """Seconds per run of the plan (median of 3 batches of `reps`)."""
        scratch = [self.buffer(None, n) for n in plan.scratch]
        steps = []
        for prog in plan.passes:
            mod = self.dev.create_shader_module(code=prog.code)
            pipe = self.dev.create_compute_pipeline(
                layout="auto", compute={"module": mod, "entry_point": "main"}
            )
            pick = {"in": lambda i: ins[i], "out": lambda i: out, "scratch": lambda i: scratch[i]}
            entries = [
                {"binding": b.binding, "resource": {"buffer": pick[b.kind](b.index)}} for b in prog.bindings
            ]
            bg = self.dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
            steps.append((pipe, bg, prog.grid))
        qs = self.dev.create_query_set(type="timestamp", count=2) if self.ts else None
        u = wgpu.BufferUsage
        resolve = self.dev.create_buffer(size=16, usage=u.QUERY_RESOLVE | u.COPY_SRC) if self.ts else None
        times = []
        for batch in range(4):
            enc = self.dev.create_command_encoder()
            tw = {"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
            cp = enc.begin_compute_pass(timestamp_writes=tw if self.ts else None)
            for _ in range(reps if batch else 1):
                for pipe, bg, grid in steps:
                    cp.set_pipeline(pipe)
                    cp.set_bind_group(0, bg)
                    cp.dispatch_workgroups(*grid)
            cp.end()
            if self.ts:
                enc.resolve_query_set(qs, 0, 2, resolve, 0)
            t0 = time.perf_counter()
            self.dev.queue.submit([enc.finish()])
            if self.ts:
                t = np.frombuffer(self.dev.queue.read_buffer(resolve), np.uint64)
                dt = (int(t[1]) - int(t[0])) * 1e-9
            else:
                self.dev.queue.read_buffer(out, 0, 4)
                dt = time.perf_counter() - t0
            if batch:
                times.append(dt / reps)
        return float(np.median(times))

    def read(self, buf, dtype, n) -> np.ndarray:
        return np.frombuffer(self.dev.queue.read_buffer(buf, 0, n * np.dtype(dtype).itemsize), dtype).copy()


def gv2(gid: int, shape: list[int], idx: list[AluExp], st: ShapeTracker | None = None) -> AluExp:
    return AluExp.global_view(F32, gid, st or ShapeTracker.from_shape(shape), idx)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="sizes for a CPU (lavapipe) adapter")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    g = Gpu()
    n = (1 << 20) if args.small else (1 << 26)
    rows = 512 if args.small else 4096
    mv = 1024 if args.small else 8192
    reps = 3 if args.small else 30
    rng = np.random.default_rng(0)
    torch = None
    try:
        import torch as _t

        if _t.cuda.is_available():
            torch = _t
            torch.zeros(1, device="cuda")
    except Exception:
        pass
    res = {"device": g.name, "rows": []}

    def row(name: str, secs: float, nbytes: int, tsecs: float | None, note: str = "") -> None:
        gbs = nbytes / secs / 1e9
        r = {"what": name, "us": secs * 1e6, "GB/s": gbs}
        if tsecs:
            r |= {"torch_us": tsecs * 1e6, "torch_GB/s": nbytes / tsecs / 1e9, "ratio": tsecs / secs}
        r["note"] = note
        res["rows"].append(r)
        print(json.dumps(r), flush=True)

    def ttime(fn) -> float | None:
        if torch is None:
            return None
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3 / reps

    # a*b+c
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    x = [gv2(i, [n], [AluVar.gidx]) for i in range(3)]
    plan = compile_kernel(Kernel(3, n, x[0] * x[1] + x[2]), g.target)
    ins = [g.buffer(v, v.nbytes) for v in (a, b, c)]
    out = g.buffer(None, 4 * n)
    t = g.time(plan, ins, out, reps)
    ok = np.allclose(g.read(out, np.float32, n), a * b + c, rtol=1e-6, atol=1e-6)
    tt = None
    if torch:
        ta, tb, tc = (torch.from_numpy(v).cuda() for v in (a, b, c))
        tt = ttime(lambda: torch.addcmul(tc, ta, tb))
    row(f"a*b+c {n}", t, 16 * n, tt, f"ok={ok} grid={plan.passes[0].grid}")

    # sum
    k = Kernel(1, 1, gv2(0, [n], [AluVar.ridx]), Reduction(F32, AluOp.Add, n))
    ints = rng.integers(-8, 9, n).astype(np.float32)
    plan = compile_kernel(k, g.target)
    ins = [g.buffer(ints, ints.nbytes)]
    out = g.buffer(None, 4)
    t = g.time(plan, ins, out, reps)
    ok = g.read(out, np.float32, 1)[0] == ints.astype(np.float64).sum()
    tt = None
    if torch:
        ti = torch.from_numpy(ints).cuda()
        tt = ttime(lambda: ti.sum())
    sz = plan.tune.size
    row(f"sum {n}", t, 4 * n, tt, f"ok={ok} passes={len(plan.passes)} groups={sz.groups} split={sz.split}")

    # row softmax pieces: max over rows, sum of exp(x - max), x / sum
    m = rows
    xs = rng.standard_normal((m, m)).astype(np.float32)
    ins = [g.buffer(xs, xs.nbytes)]
    rmax = g.buffer(None, 4 * m)
    kmax = Kernel(1, m, gv2(0, [m, m], [AluVar.gidx, AluVar.ridx]), Reduction(F32, AluOp.Max, m))
    pmax = compile_kernel(kmax, g.target)
    t1 = g.time(pmax, ins, rmax, reps)
    ok1 = np.array_equal(g.read(rmax, np.float32, m), xs.max(1))
    xm = gv2(0, [m, m], [AluVar.gidx, AluVar.ridx])
    mx = gv2(
        1, [m, m], [AluVar.gidx, AluVar.ridx], ShapeTracker.from_shape([m]).reshape([m, 1]).expand([m, m])
    )
    ksum = Kernel(2, m, AluExp.exp(xm - mx), Reduction(F32, AluOp.Add, m))
    psum = compile_kernel(ksum, g.target)
    rsum = g.buffer(None, 4 * m)
    t2 = g.time(psum, [ins[0], rmax], rsum, reps)
    want = np.exp(xs - xs.max(1, keepdims=True)).sum(1)
    ok2 = np.allclose(g.read(rsum, np.float32, m), want, rtol=1e-5)
    e0 = gv2(0, [m * m], [AluVar.gidx])
    gi = AluVar.gidx
    r_i = AluExp.idiv(gi, AluExp.i32(m))
    mxi = AluExp.global_view(F32, 1, ShapeTracker.from_shape([m]), [r_i])
    smi = AluExp.global_view(F32, 2, ShapeTracker.from_shape([m]), [r_i])
    kdiv = Kernel(3, m * m, AluExp.exp(e0 - mxi) * AluExp.reciprocal(smi))
    pdiv = compile_kernel(kdiv, g.target)
    sm = g.buffer(None, 4 * m * m)
    t3 = g.time(pdiv, [ins[0], rmax, rsum], sm, reps)
    tt = None
    if torch:
        tx = torch.from_numpy(xs).cuda()
        tt = ttime(lambda: torch.softmax(tx, 1))
    note = f"ok={ok1 and ok2} max {t1 * 1e6:.1f}us + sum {t2 * 1e6:.1f}us + map {t3 * 1e6:.1f}us"
    note += f"; reduce groups={psum.tune.size.groups}"
    row(f"softmax rows {m}x{m} (3 kernels)", t1 + t2 + t3, 8 * m * m, tt, note)

    # matvec
    am = rng.standard_normal((mv, mv)).astype(np.float32)
    vv = rng.standard_normal(mv).astype(np.float32)
    ae = gv2(0, [mv, mv], [AluVar.gidx, AluVar.ridx])
    ve = AluExp.global_view(F32, 1, ShapeTracker.from_shape([mv]), [AluVar.ridx])
    kmv = Kernel(2, mv, ae * ve, Reduction(F32, AluOp.Add, mv))
    pmv = compile_kernel(kmv, g.target)
    ins = [g.buffer(am, am.nbytes), g.buffer(vv, vv.nbytes)]
    out = g.buffer(None, 4 * mv)
    t = g.time(pmv, ins, out, reps)
    ok = np.allclose(g.read(out, np.float32, mv), am.astype(np.float64) @ vv, rtol=1e-4, atol=1e-3)
    tt = None
    if torch:
        ta, tv = torch.from_numpy(am).cuda(), torch.from_numpy(vv).cuda()
        tt = ttime(lambda: ta @ tv)
    row(f"matvec {mv}x{mv}", t, 4 * mv * mv, tt, f"ok={ok} groups={pmv.tune.size.groups}")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
