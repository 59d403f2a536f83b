"""The issue-9 targets on the webgpu device, side by side with PyTorch on the same GPU (or numpy).

    python bench/webgpu.py            # full sizes: 64M-element streams, 4096^2 softmax, 8192^2 matvec
    python bench/webgpu.py --small    # sizes lavapipe finishes in seconds
    python bench/webgpu.py --json out.json
    python bench/webgpu.py --small --only chain   # host cost per dispatch (1,000 dependent ones)
    python bench/webgpu.py --only chain --early-submit 0   # the same without early submits

Every workload is checked against numpy before it is timed. webgpu times are the GPU timestamps of
the batch (median over reps; wall time when the adapter has no timestamp queries); the dispatch
workload is wall time: 1,000 dependent tiny dispatches recorded and then one read, per dispatch.
PyTorch is timed with CUDA events on the same GPU, when torch and CUDA are there; a live CUDA
context is also what gets Vulkan out of its slow memory mode on an H200 (see gpu-probe.md).
Otherwise the reference column is numpy on the host. The ratio is reference time / webgpu time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from _common import setup_path

setup_path()

from _gpu import Gpu, Row, Torch, check, gi, host_time, print_header, report, run_workloads  # noqa: E402

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Routine, Routines  # noqa: E402
from jaxcore.kernel import Reduction  # noqa: E402
from jaxcore.plugin import softmax_kernels  # noqa: E402

F32 = DType.float32


def fma(g: Gpu, t: Torch, n: int, reps: int) -> Row:
    rng = np.random.default_rng(0)
    a, b, c = (rng.random(n, dtype=np.float32) for _ in range(3))
    k = g.be.prepare_kernel(
        Kernel(3, n, gi(0, n, AluVar.gidx) * gi(1, n, AluVar.gidx) + gi(2, n, AluVar.gidx))
    )
    ins, out = [g.put(x) for x in (a, b, c)], g.empty(4 * n)
    g.be.dispatch(k, ins, [out])
    ok = check(g.get(out), a * b + c)
    s = g.time(lambda: g.be.dispatch(k, ins, [out]), reps)
    if t.torch is not None:
        ta, tb, tc = (t.torch.from_numpy(x).cuda() for x in (a, b, c))
        to = t.torch.empty_like(ta)
        ref_s, ref = t.time(lambda: t.torch.addcmul(tc, ta, tb, out=to), reps), "torch"
    else:
        ref_s, ref = host_time(lambda: a * b + c, reps), "numpy"
    g.free()
    return Row(f"a*b+c {n >> 20}M f32", s, ref_s, ref, 16.0 * n, "B", ok)


def total(g: Gpu, t: Torch, n: int, reps: int, op: AluOp = AluOp.Add) -> Row:
    """A full reduction (two passes: split, then the partials), sum or max (max: NaN-propagating)."""
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    k = g.be.prepare_kernel(Kernel(1, 1, gi(0, n, AluVar.ridx), Reduction(F32, op, n)))
    src, out = g.put(x), g.empty(4)
    g.be.dispatch(k, [src], [out])
    want = x.astype(np.float64).sum() if op == AluOp.Add else x.max()
    ok = check(g.get(out), np.array([want], np.float32), rtol=1e-4)
    s = g.time(lambda: g.be.dispatch(k, [src], [out]), reps)
    name = "sum" if op == AluOp.Add else "max"
    if t.torch is not None:
        tx = t.torch.from_numpy(x).cuda()
        ref_s, ref = t.time(lambda: tx.sum() if op == AluOp.Add else tx.max(), reps), "torch"
    else:
        ref_s, ref = host_time(lambda: x.sum() if op == AluOp.Add else x.max(), reps), "numpy"
    g.free()
    return Row(f"{name} {n >> 20}M f32", s, ref_s, ref, 4.0 * n, "B", ok)


def chain(g: Gpu, t: Torch, n: int = 1000, reps: int = 5) -> Row:
    size = 64
    k = g.be.prepare_kernel(Kernel(1, size, gi(0, size, AluVar.gidx) + 1.0))
    x = np.zeros(size, np.float32)

    recording: list[float] = []

    def run() -> np.ndarray:
        cur = g.be.malloc(4 * size, x.tobytes())
        t = time.perf_counter()
        for _ in range(n):
            nxt = g.be.malloc(4 * size)
            g.be.dispatch(k, [cur], [nxt])
            g.be.dec_ref(cur)
            cur = nxt
        recording.append((time.perf_counter() - t) / n)
        data = np.frombuffer(g.be.read(cur), np.float32)
        g.be.dec_ref(cur)
        return data

    ok = check(run(), x + n)
    s = host_time(run, reps) / n
    if t.torch is not None:
        tx = t.torch.zeros(size, device="cuda")

        def torch_run() -> None:
            y = tx
            for _ in range(n):
                y = y + 1
            y.cpu()

        ref_s, ref = host_time(torch_run, reps) / n, "torch"
    else:

        def np_run() -> None:
            y = x
            for _ in range(n):
                y = y + 1

        ref_s, ref = host_time(np_run, reps) / n, "numpy"
    rec = statistics.median(recording[1:] or recording)
    note = f"of which {rec * 1e6:.2f} µs per dispatch is host time recording (malloc, dispatch, dec_ref)"
    return Row(f"{n} dependent tiny dispatches, 1 read", s, ref_s, ref, 1.0, "µs", ok, note)


def softmax(g: Gpu, t: Torch, rows: int, cols: int, reps: int) -> Row:
    """Routines.Softmax (one pass a row on this device), with the three kernels the core spells it
    as elsewhere (`jaxcore.canonical.softmax_kernels`) timed beside it, for the note."""
    n = rows * cols
    x = np.random.default_rng(2).normal(0, 2, (rows, cols)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    routine = Routine.build(Routines.Softmax, [x.shape], [F32])
    fused = g.be.prepare_routine(routine)
    kernels = [g.be.prepare_kernel(k) for k, _ in softmax_kernels(routine)]
    gx, gmax, gscale, out = g.put(x), g.empty(4 * rows), g.empty(4 * rows), g.empty(4 * n)

    def three() -> None:
        g.be.dispatch(kernels[0], [gx], [gmax])
        g.be.dispatch(kernels[1], [gx, gmax], [gscale])
        g.be.dispatch(kernels[2], [gx, gmax, gscale], [out])

    three()
    ok3 = check(g.get(out).reshape(rows, cols), want, rtol=1e-4, atol=1e-7)
    s3 = g.time(three, reps)
    g.be.dispatch(fused, [gx], [out])
    ok = check(g.get(out).reshape(rows, cols), want, rtol=1e-4, atol=1e-7)
    s = g.time(lambda: g.be.dispatch(fused, [gx], [out]), reps)
    note = f"the three kernels it runs as elsewhere: {s3 * 1e3:.3f} ms ({ok3})"
    if t.torch is not None:
        tx = t.torch.from_numpy(x).cuda()
        ref_s, ref = t.time(lambda: t.torch.softmax(tx, dim=1), reps), "torch"
    else:

        def np_run() -> None:
            e = np.exp(x - x.max(axis=1, keepdims=True))
            e / e.sum(axis=1, keepdims=True)

        ref_s, ref = host_time(np_run, reps), "numpy"
    g.free()
    return Row(f"row softmax {rows}x{cols}", s, ref_s, ref, 8.0 * n, "B", ok, note)


def matvec(g: Gpu, t: Torch, m: int, k: int, reps: int) -> Row:
    rng = np.random.default_rng(3)
    a, v = rng.random((m, k), dtype=np.float32), rng.random(k, dtype=np.float32)
    item = gi(0, m * k, AluVar.gidx * AluExp.i32(k) + AluVar.ridx) * gi(1, k, AluVar.ridx)
    kern = g.be.prepare_kernel(Kernel(2, m, item, Reduction(F32, AluOp.Add, k)))
    ga, gv, out = g.put(a), g.put(v), g.empty(4 * m)
    g.be.dispatch(kern, [ga, gv], [out])
    ok = check(g.get(out), (a.astype(np.float64) @ v).astype(np.float32), rtol=1e-4)
    s = g.time(lambda: g.be.dispatch(kern, [ga, gv], [out]), reps)
    if t.torch is not None:
        ta, tv = t.torch.from_numpy(a).cuda(), t.torch.from_numpy(v).cuda()
        ref_s, ref = t.time(lambda: ta @ tv, reps), "torch"
    else:
        ref_s, ref = host_time(lambda: a @ v, reps), "numpy"
    g.free()
    return Row(f"matvec {m}x{k}", s, ref_s, ref, 4.0 * m * k, "B", ok)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="sizes for a software adapter (lavapipe)")
    ap.add_argument("--no-torch", action="store_true", help="compare with numpy even where torch+CUDA exist")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument(
        "--only",
        action="append",
        choices=("fma", "sum", "max", "chain", "softmax", "matvec"),
        help="run only this workload (repeatable); `chain` is the dependent-dispatch one",
    )
    ap.add_argument(
        "--early-submit",
        type=int,
        default=None,
        metavar="N",
        help="submit an open batch to an idle device every N dispatches (0: never; default: the plugin's)",
    )
    args = ap.parse_args(argv)
    torch = Torch(not args.no_torch)
    g = Gpu()
    if args.early_submit is not None:
        g.be.early_submit = args.early_submit
    print_header(g, torch)
    small = args.small
    reps = args.reps or (5 if small else 20)
    stream = (1 << 20) if small else (64 << 20)
    work: list[tuple[str, Callable[[], Row]]] = [
        ("fma", lambda: fma(g, torch, stream, reps)),
        ("sum", lambda: total(g, torch, stream, reps)),
        ("max", lambda: total(g, torch, stream, reps, AluOp.Max)),
        ("chain", lambda: chain(g, torch, 1000, 3 if small else 10)),
        ("softmax", lambda: softmax(g, torch, *((256, 256) if small else (4096, 4096)), reps)),
        ("matvec", lambda: matvec(g, torch, *((1024, 1024) if small else (8192, 8192)), reps)),
    ]
    return report(run_workloads(g, work, set(args.only or ())), args.json)


if __name__ == "__main__":
    sys.exit(main())
