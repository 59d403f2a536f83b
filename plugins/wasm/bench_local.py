"""Quick side-by-side timings of the wasm backend against numpy (for iterating on performance).

    PYTHONPATH=core:plugins/cpu:plugins/wasm python plugins/wasm/bench_local.py [names...]

Each case runs device and numpy round-robin, reports medians. Names: fma sum matmul matmul1t
dispatch prepare. OPENBLAS_THREAD_TIMEOUT=4 is set (unless given): OpenBLAS's worker threads
otherwise busy-wait after every numpy matmul and steal the second core from the wasm run after it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # before numpy loads OpenBLAS
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction
from jaxcore_wasm.backend import WasmBackend

F32 = DType.float32


def gi(gid: int, n: int, idx: AluExp) -> AluExp:
    return AluExp.global_index(F32, gid, n, idx)


def bench(fns: dict, reps: int = 9, warmup: int = 2) -> dict[str, float]:
    for _ in range(warmup):
        for f in fns.values():
            f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def put(be, a: np.ndarray) -> int:
    return be.malloc(a.nbytes, a.tobytes())


def report(label: str, r: dict[str, float]) -> None:
    wasm, numpy = r["wasm"], r["numpy"]
    print(f"{label}: wasm {wasm * 1e3:.2f} ms  numpy {numpy * 1e3:.2f} ms  speedup {numpy / wasm:.2f}x")


def case_fma(be, n: int = 1 << 24) -> None:
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(3))
    g = AluVar.gidx
    exe = be.prepare_kernel(Kernel(3, n, gi(0, n, g) * gi(1, n, g) + gi(2, n, g)))
    sa, sb, sc, so = put(be, a), put(be, b), put(be, c), be.malloc(4 * n)
    o = np.empty_like(a)

    def np_fma():
        np.multiply(a, b, out=o)
        np.add(o, c, out=o)

    r = bench({"wasm": lambda: be.dispatch(exe, [sa, sb, sc], [so]), "numpy": np_fma})
    report("fma 16M", r)


def case_sum(be, n: int = 1 << 24) -> None:
    a = np.random.default_rng(0).integers(-8, 8, n).astype(np.float32)
    exe = be.prepare_kernel(
        Kernel(1, 1, gi(0, n, AluVar.gidx * n + AluVar.ridx), Reduction(F32, AluOp.Add, n))
    )
    sa, so = put(be, a), be.malloc(4)
    r = bench({"wasm": lambda: be.dispatch(exe, [sa], [so]), "numpy": lambda: a.sum()})
    report("sum 16M", r)


def case_matmul(be, n: int = 1024, label: str = "") -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, (n, n)).astype(np.float32), rng.normal(0, 1, (n, n)).astype(np.float32)
    g, r = AluVar.gidx, AluVar.ridx
    exp = gi(0, n * n, AluExp.idiv(g, n) * n + r) * gi(1, n * n, r * n + AluExp.mod(g, n))
    exe = be.prepare_kernel(Kernel(2, n * n, exp, Reduction(F32, AluOp.Add, n)))
    sx, sy, so = put(be, x), put(be, y), be.malloc(4 * n * n)
    fl = 2 * n**3 / 1e9
    res = bench({"wasm": lambda: be.dispatch(exe, [sx, sy], [so]), "np": lambda: x @ y}, reps=5)
    code = (
        f"import numpy as np, time, statistics; x=np.ones(({n},{n}),np.float32); x@x; t=[]\n"
        f"for _ in range(5): t0=time.perf_counter(); x@x; t.append(time.perf_counter()-t0)\n"
        f"print(statistics.median(t))"
    )
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    np1 = float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)
    print(
        f"matmul {n}{label}: wasm {fl / res['wasm']:.1f} GFLOP/s  "
        f"numpy (default threads) {fl / res['np']:.1f}  numpy 1 thread {fl / np1:.1f}"
    )


def case_dispatch(be) -> None:
    x = np.ones(1, np.float32)
    exe = be.prepare_kernel(Kernel(1, 1, gi(0, 1, AluVar.gidx) + AluExp.f32(1)))
    sx, so = put(be, x), be.malloc(4)
    n = 20000
    for _ in range(1000):
        be.dispatch(exe, [sx], [so])
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            be.dispatch(exe, [sx], [so])
        ts.append((time.perf_counter() - t0) / n)
    print(f"dispatch 1-element kernel: {statistics.median(ts) * 1e6:.2f} us")


PREP_SCRIPT = """
import time, sys
t0 = time.perf_counter()
from jaxcore import AluExp, AluVar, DType, Kernel
from jaxcore_wasm.backend import WasmBackend
be = WasmBackend()
t1 = time.perf_counter()
g = AluVar.gidx
x, y = (AluExp.global_index(DType.float32, i, 1000, g) for i in (0, 1))
k = Kernel(2, 1000, x * 3.5 + y)
t2 = time.perf_counter()
exe = be.prepare_kernel(k)
t3 = time.perf_counter()
print(f"{(t3-t2)*1e3:.2f} {exe.data.source} {(t1-t0)*1e3:.0f}")
"""


def case_prepare(be) -> None:
    g = AluVar.gidx
    salt = time.time_ns() % 1000003
    k = Kernel(2, 1000 + salt % 97, gi(0, 1000, g) * (1.5 + salt) + gi(1, 1000, g))
    os.environ["JAXCORE_WASM_DISK_CACHE"] = "0"
    be.compiler.disk.enabled = False
    t0 = time.perf_counter()
    exe = be.prepare_kernel(k)
    t1 = time.perf_counter()
    be._kernel_cache.clear()
    t2 = time.perf_counter()
    be.prepare_kernel(k)
    t3 = time.perf_counter()
    for _ in range(1000):
        be.prepare_kernel(k)
    t4 = time.perf_counter()
    print(
        f"prepare elementwise: first {(t1 - t0) * 1e3:.1f} ms ({exe.data.source}); "
        f"process-cached {(t3 - t2) * 1e6:.0f} us; backend-cached {(t4 - t3) / 1000 * 1e6:.1f} us"
    )
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, JAXCORE_CACHE_DIR=d, JAXCORE_WASM_DISK_CACHE="1")
        outs = [
            subprocess.run(
                [sys.executable, "-c", PREP_SCRIPT], env=env, capture_output=True, text=True
            ).stdout
            for _ in range(3)
        ]
        print(
            "prepare in a new process (first: LLVM, then disk cache): "
            + " | ".join(
                f"{o.split()[0]} ms ({o.split()[1]}, import+init {o.split()[2]} ms)"
                for o in outs
                if o.strip()
            )
        )


CASES = {
    "fma": case_fma,
    "sum": case_sum,
    "matmul": case_matmul,
    "matmul1t": lambda be: case_matmul(WasmBackend(threads=1), 1024, " (1 thread)"),
    "dispatch": case_dispatch,
    "prepare": case_prepare,
}

if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    be = WasmBackend()
    print(f"threads={be.threads} loadavg={open('/proc/loadavg').read().split()[:3]}")
    for nm in names:
        CASES[nm](be)
