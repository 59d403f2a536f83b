"""Quick numbers for the webgl device next to numpy: a*b+c (bandwidth), a naive matmul through the
generic reduction kernel, and Sort. Sizes from the environment: BENCH_N (a*b+c elements, default
2^24), BENCH_M (matmul size, default 512), BENCH_SORT (default 2^20)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

import jaxcore
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.conformance.harness import map_kernel
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines


def timeit(f: Callable[[], object], reps: int = 3) -> float:
    f()
    t = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t) / reps


def main() -> None:
    b = jaxcore.get_backend("webgl")
    print(b.capabilities.description)
    n = int(os.environ.get("BENCH_N", 1 << 24))
    x = np.random.rand(n).astype(np.float32)
    ins = [b.malloc(4 * n, x.tobytes()) for _ in range(3)]
    out = b.malloc(4 * n)
    exe = b.prepare_kernel(map_kernel(["float32"] * 3, n, lambda p, q, r: AluExp.add(AluExp.mul(p, q), r)))
    dt = timeit(lambda: (b.dispatch(exe, ins, [out]), b.read(out, 0, 4)))
    tn = timeit(lambda: x * x + x)
    print(f"a*b+c {n} f32: {dt * 1e3:.1f} ms = {16 * n / dt / 1e9:.2f} GB/s (numpy {tn * 1e3:.1f} ms)")
    m = int(os.environ.get("BENCH_M", 512))
    a_ = np.random.rand(m, m).astype(np.float32)
    b_ = np.random.rand(m, m).astype(np.float32)
    ia, ib, oc = b.malloc(a_.nbytes, a_.tobytes()), b.malloc(b_.nbytes, b_.tobytes()), b.malloc(a_.nbytes)
    g, r = AluVar.gidx, AluVar.ridx
    row, col = AluExp.idiv(g, AluExp.i32(m)), AluExp.mod(g, AluExp.i32(m))
    item = AluExp.mul(
        AluExp.global_index("float32", 0, m * m, AluExp.add(AluExp.mul(row, AluExp.i32(m)), r)),
        AluExp.global_index("float32", 1, m * m, AluExp.add(AluExp.mul(r, AluExp.i32(m)), col)),
    )
    mm = b.prepare_kernel(Kernel(2, m * m, item, Reduction("float32", AluOp.Add, m)))
    dt = timeit(lambda: (b.dispatch(mm, [ia, ib], [oc]), b.read(oc, 0, 4)), 2)
    got = np.frombuffer(b.read(oc), np.float32).reshape(m, m)
    err = np.abs(got - a_ @ b_).max()
    gflops = 2 * m**3 / dt / 1e9
    print(f"matmul {m} (generic kernel): {dt * 1e3:.1f} ms = {gflops:.2f} GFLOP/s, max err {err:.1e}")
    k = int(os.environ.get("BENCH_SORT", 1 << 20))
    s = np.random.rand(k).astype(np.float32)
    si, so = b.malloc(4 * k, s.tobytes()), b.malloc(4 * k)
    srt = b.prepare_routine(Routine.build(Routines.Sort, [(k,)], ["float32"]))
    dt = timeit(lambda: (b.dispatch(srt, [si], [so]), b.read(so, 0, 4)), 2)
    ok = np.array_equal(np.frombuffer(b.read(so), np.float32), np.sort(s))
    tn = timeit(lambda: np.sort(s))
    print(f"sort {k} f32: {dt * 1e3:.0f} ms (numpy {tn * 1e3:.1f} ms, {dt / tn:.0f}x), correct={ok}")


if __name__ == "__main__":
    main()
