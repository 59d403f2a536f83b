"""The issue-10 targets: the tiled matmul and the WGSL routines, side by side with PyTorch on the same GPU.

    python bench/webgpu_routines.py            # matmul 1024/2048/4096, sort/argsort 1M and 16M,
                                               # Cholesky 64x512x512, Fft 4096x4096 complex,
                                               # Scatter-add of 16M updates
    python bench/webgpu_routines.py --small    # sizes lavapipe finishes in seconds
    python bench/webgpu_routines.py --only matmul --json out.json

Every workload is checked against numpy before it is timed (matmul on a sample of rows). webgpu
times are the GPU timestamps of the dispatch (median over reps; wall time without timestamp
queries). PyTorch is timed with CUDA events on the same GPU when torch and CUDA are there, with
TF32 off for matmul (`torch.backends.cuda.matmul.allow_tf32 = False`); otherwise numpy on the host.
The ratio is reference time / webgpu time (above 1: webgpu is faster).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
from _common import setup_path

setup_path()

from _gpu import Gpu, Row, Torch, check, gi, host_time, print_header, report, run_workloads  # noqa: E402

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel  # noqa: E402
from jaxcore.kernel import Reduction  # noqa: E402
from jaxcore.routine import FftParams, Routine, Routines, ScatterParams  # noqa: E402

F32 = DType.float32


def matmul_case(n: int) -> tuple[Kernel, np.ndarray, np.ndarray]:
    """An n x n float32 product as the kernel a frontend builds, and its two operands."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    gd, r = AluVar.gidx, AluVar.ridx
    exp = gi(0, n * n, AluExp.idiv(gd, AluExp.i32(n)) * AluExp.i32(n) + r) * gi(
        1, n * n, r * AluExp.i32(n) + AluExp.mod(gd, AluExp.i32(n))
    )
    return Kernel(2, n * n, exp, Reduction(F32, AluOp.Add, n)), a, b


def matmul_check(g: Gpu, out: object, a: np.ndarray, b: np.ndarray) -> str:
    """The product against float64 on a sample of rows."""
    n = a.shape[0]
    rows = np.random.default_rng(1).choice(n, size=min(n, 64), replace=False)
    got = g.get(out).reshape(n, n)[rows]
    tol = 1e-5 * np.sqrt(n) * 4
    return check(got, a[rows].astype(np.float64) @ b.astype(np.float64), tol, tol)


def torch_matmul_time(t: Torch, a: np.ndarray, b: np.ndarray, reps: int) -> float:
    """PyTorch's time for a @ b on the GPU, into a preallocated output (t.torch must be there)."""
    ta, tb = t.torch.from_numpy(a).cuda(), t.torch.from_numpy(b).cuda()
    tc = t.torch.empty_like(ta)
    return t.time(lambda: t.torch.matmul(ta, tb, out=tc), reps)


def matmul(g: Gpu, t: Torch, n: int, reps: int) -> Row:
    kernel, a, b = matmul_case(n)
    k = g.be.prepare_kernel(kernel)
    ga, gb, out = g.put(a), g.put(b), g.empty(4 * n * n)
    g.be.dispatch(k, [ga, gb], [out])
    ok = matmul_check(g, out, a, b)
    s = g.time(lambda: g.be.dispatch(k, [ga, gb], [out]), reps)
    if t.torch is not None:
        ref_s, ref = torch_matmul_time(t, a, b, reps), "torch"
    else:
        ref_s, ref = host_time(lambda: a @ b, max(2, reps // 4)), "numpy"
    g.free()
    return Row(f"matmul f32 {n}", s, ref_s, ref, 2.0 * n**3, "FLOP", ok)


def sort(g: Gpu, t: Torch, n: int, reps: int, argsort: bool) -> Row:
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    name = Routines.Argsort if argsort else Routines.Sort
    exe = g.be.prepare_routine(Routine.build(name, [(n,)], ["float32"]))
    src = g.put(x)
    outs = [g.empty(4 * n)] + ([g.empty(4 * n)] if argsort else [])
    g.be.dispatch(exe, [src], outs)
    if argsort:
        want = np.argsort(x, kind="stable").astype(np.int32)
        ok = check(g.get(outs[1], np.int32), want, 0, 0)
    else:
        ok = check(g.get(outs[0]), np.sort(x), 0, 0)
    s = g.time(lambda: g.be.dispatch(exe, [src], outs), reps)
    if t.torch is not None:
        tx = t.torch.from_numpy(x).cuda()
        ref_s, ref = t.time(lambda: t.torch.sort(tx, stable=argsort), reps), "torch"
    else:
        fn = (lambda: np.argsort(x, kind="stable")) if argsort else (lambda: np.sort(x))
        ref_s, ref = host_time(fn, max(2, reps // 4)), "numpy"
    g.free()
    label = "argsort" if argsort else "sort"
    return Row(
        f"{label} {n >> 20}M f32" if n >= 1 << 20 else f"{label} {n} f32", s, ref_s, ref, n, "elem", ok
    )


def cholesky(g: Gpu, t: Torch, batch: int, n: int, reps: int) -> Row:
    rng = np.random.default_rng(3)
    m = rng.uniform(-1, 1, (batch, n, n)).astype(np.float32)
    a = (m @ m.transpose(0, 2, 1) + n * np.eye(n, dtype=np.float32)).astype(np.float32)
    exe = g.be.prepare_routine(Routine.build(Routines.Cholesky, [a.shape], ["float32"]))
    src, out = g.put(a), g.empty(a.nbytes)
    g.be.dispatch(exe, [src], [out])
    ok = check(g.get(out).reshape(a.shape), np.linalg.cholesky(a.astype(np.float64)), 1e-3, 1e-3)
    s = g.time(lambda: g.be.dispatch(exe, [src], [out]), reps)
    if t.torch is not None:
        ta = t.torch.from_numpy(a).cuda()
        ref_s, ref = t.time(lambda: t.torch.linalg.cholesky(ta), reps), "torch"
    else:
        ref_s, ref = host_time(lambda: np.linalg.cholesky(a), max(2, reps // 4)), "numpy"
    g.free()
    return Row(f"cholesky {batch}x{n}x{n} f32", s, ref_s, ref, batch * n**3 / 3, "FLOP", ok)


def fft(g: Gpu, t: Torch, rows: int, n: int, reps: int) -> Row:
    rng = np.random.default_rng(4)
    re = rng.standard_normal((rows, n)).astype(np.float32)
    im = rng.standard_normal((rows, n)).astype(np.float32)
    exe = g.be.prepare_routine(
        Routine.build(Routines.Fft, [re.shape, im.shape], ["float32", "float32"], FftParams.default(n))
    )
    ins, outs = [g.put(re), g.put(im)], [g.empty(re.nbytes), g.empty(im.nbytes)]
    g.be.dispatch(exe, ins, outs)
    z = np.fft.fft(re.astype(np.float64) + 1j * im, axis=-1)
    tol = 1e-5 * np.sqrt(n) * 8
    ok = check(g.get(outs[0]).reshape(rows, n), z.real, tol, tol)
    if ok == "ok":
        ok = check(g.get(outs[1]).reshape(rows, n), z.imag, tol, tol)
    s = g.time(lambda: g.be.dispatch(exe, ins, outs), reps)
    if t.torch is not None:
        tz = t.torch.complex(t.torch.from_numpy(re).cuda(), t.torch.from_numpy(im).cuda())
        ref_s, ref = t.time(lambda: t.torch.fft.fft(tz, dim=-1), reps), "torch"
    else:
        zc = (re + 1j * im).astype(np.complex64)
        ref_s, ref = host_time(lambda: np.fft.fft(zc, axis=-1), max(2, reps // 4)), "numpy"
    g.free()
    return Row(f"fft {rows}x{n} c64", s, ref_s, ref, 5.0 * rows * n * np.log2(n), "FLOP", ok)


def scatter_add(g: Gpu, t: Torch, updates: int, size: int, reps: int) -> Row:
    rng = np.random.default_rng(5)
    upd = rng.standard_normal(updates).astype(np.float32)
    idx = rng.integers(0, size, updates).astype(np.int32)
    p = ScatterParams("add", (size,), (0,), 0)
    exe = g.be.prepare_routine(
        Routine.build(Routines.Scatter, [(updates,), (updates,)], ["float32", "int32"], p)
    )
    ins, out = [g.put(upd), g.put(idx)], g.empty(4 * size)
    g.be.dispatch(exe, ins, [out])
    want = np.zeros(size, np.float64)
    np.add.at(want, idx, upd)
    ok = check(g.get(out), want, 1e-3, 1e-3)
    s = g.time(lambda: g.be.dispatch(exe, ins, [out]), reps)
    if t.torch is not None:
        tu, ti = t.torch.from_numpy(upd).cuda(), t.torch.from_numpy(idx).long().cuda()
        to = t.torch.zeros(size, device="cuda")
        ref_s, ref = t.time(lambda: to.zero_().index_add_(0, ti, tu), reps), "torch"
    else:

        def host() -> None:
            o = np.zeros(size, np.float32)
            np.add.at(o, idx, upd)

        ref_s, ref = host_time(host, max(2, reps // 4)), "numpy"
    g.free()
    return Row(f"scatter-add {updates >> 20}M into {size >> 20}M" if updates >= 1 << 20 else
               f"scatter-add {updates} into {size}", s, ref_s, ref, updates, "elem", ok)  # fmt: skip


_SORTS = (("sort", False), ("argsort", True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="sizes for a software adapter (lavapipe)")
    ap.add_argument("--no-torch", action="store_true", help="compare with numpy even where torch+CUDA exist")
    ap.add_argument("--only", default="", help="comma-separated workload names (matmul,sort,argsort,...)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument(
        "--sort-lengths",
        default="",
        help="comma-separated row lengths for sort and argsort (default 2^20,2^24; 2^16 with --small): where "
        "the radix sort (JAXCORE_WEBGPU_RADIX_SORT_FROM) and the network cross",
    )
    args = ap.parse_args(argv)
    torch = Torch(not args.no_torch)
    g = Gpu()
    print_header(g, torch, " (TF32 off)")
    small = args.small
    reps = args.reps or (3 if small else 20)
    sizes = (128, 256) if small else (1024, 2048, 4096)
    default = [1 << 16] if small else [1 << 20, 16 << 20]
    lengths = [int(n) for n in args.sort_lengths.split(",") if n] or default
    work: list[tuple[str, Callable[[], Row]]] = [
        *(("matmul", lambda n=n: matmul(g, torch, n, reps)) for n in sizes),
        *((kind, lambda n=n, a=a: sort(g, torch, n, reps, a)) for n in lengths for kind, a in _SORTS),
        ("cholesky", lambda: cholesky(g, torch, *((4, 64) if small else (64, 512)), reps)),
        ("fft", lambda: fft(g, torch, *((64, 256) if small else (4096, 4096)), reps)),
        (
            "scatter",
            lambda: scatter_add(g, torch, *((1 << 18, 1 << 14) if small else (16 << 20, 1 << 20)), reps),
        ),
    ]
    only = {w for w in args.only.split(",") if w}
    return report(run_workloads(g, work, only), args.json)


if __name__ == "__main__":
    sys.exit(main())
