"""Quick numbers for the webgl device next to numpy, as a table: matmul float32 through the block
path (GFLOP/s, checked against numpy; `--tiles 8x4,4x4` also times each block tile alone),
`a*b+c` over float32 (GB/s, 16 bytes per element) and Sort of float32 (ms against numpy's).
`--small` sizes it for llvmpipe; `--generic` also times matmul through the generic reduction
kernel (JAXCORE_WEBGL_MATMUL=0 routes every matmul there).

Timing: each figure is the best of a few repetitions of `reps` back-to-back dispatches followed by
one read of a single word (which waits for them), so per-call readback does not dominate.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import jaxcore
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.conformance.harness import map_kernel
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines


def best(f: Callable[[], object], reps: int, tries: int = 3) -> float:
    """Seconds per call of `f` (`reps` calls per try, the best try)."""
    f()
    times = []
    for _ in range(tries):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        times.append((time.perf_counter() - t) / reps)
    return min(times)


def matmul_kernel(m: int) -> Kernel:
    g, r = AluVar.gidx, AluVar.ridx
    row, col = AluExp.idiv(g, AluExp.i32(m)), AluExp.mod(g, AluExp.i32(m))
    item = AluExp.mul(
        AluExp.global_index("float32", 0, m * m, AluExp.add(AluExp.mul(row, AluExp.i32(m)), r)),
        AluExp.global_index("float32", 1, m * m, AluExp.add(AluExp.mul(r, AluExp.i32(m)), col)),
    )
    return Kernel(2, m * m, item, Reduction("float32", AluOp.Add, m))


def bench_matmul(
    b, m: int, reps: int, rows: list[tuple[str, str, str]], generic: bool = False, label: str | None = None
) -> None:
    from jaxcore_webgl import matmul

    rng = np.random.default_rng(0)
    a_ = rng.standard_normal((m, m), dtype=np.float32)
    b_ = rng.standard_normal((m, m), dtype=np.float32)
    ia, ib, oc = b.malloc(a_.nbytes, a_.tobytes()), b.malloc(b_.nbytes, b_.tobytes()), b.malloc(a_.nbytes)
    exe = b.prepare_kernel(matmul_kernel(m))
    data = getattr(exe, "data", exe)
    path = f"{data.tile.rows}x{data.tile.cols} tile" if matmul.uses_blocks(exe) else "generic"
    if label is not None and path != label:
        raise RuntimeError(f"asked for the {label}, planned the {path}")

    def go() -> None:
        for _ in range(reps):
            b.dispatch(exe, [ia, ib], [oc])
        b.read(oc, 0, 4)

    if generic:  # the same kernel through the plugin's generic reduction shader, drawn directly
        from jaxcore_webgl import glsl
        from jaxcore_webgl.device import texture_dims

        k = matmul_kernel(m)
        src = glsl.kernel_shader(k, texture_dims(k.bytes, b.info.max_texture_size)[2])
        prog = b.thread.call(lambda: b.device.program(src, 2))
        ta, tb, tc = (b._buffer(s).handle for s in (ia, ib, oc))
        path = "generic"

        def go() -> None:
            for _ in range(reps):
                b.thread.post(lambda: b.device.draw(prog, [ta, tb], tc, -(-k.bytes // 16)))
            b.read(oc, 0, 4)

    dt = best(go, 1, 2) / reps
    got = np.frombuffer(b.read(oc), np.float32).reshape(m, m)
    tn = best(lambda: a_ @ b_, 1, 2)
    want = a_.astype(np.float64) @ b_.astype(np.float64)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    rows.append(
        (
            f"matmul f32 {m} ({path})",
            f"{2 * m**3 / dt / 1e9:.1f} GFLOP/s ({dt * 1e3:.2f} ms, rel err {err:.1e})",
            f"{2 * m**3 / tn / 1e9:.1f} GFLOP/s",
        )
    )
    for s in (ia, ib, oc):
        b.dec_ref(s)


def bench_tile(spec: str, sizes: list[int], small: bool, rows: list[tuple[str, str, str]]) -> None:
    """Matmul on a backend of its own whose block pass may use only the tile `spec` ("RxC")."""
    from jaxcore_webgl import matmul
    from jaxcore_webgl.backend import WebGLBackend

    r, c = (int(x) for x in spec.split("x"))
    saved, matmul.TILES = matmul.TILES, (matmul.Tile(r, c // 4),)
    be = WebGLBackend()
    try:
        for m in sizes:
            bench_matmul(be, m, 1 if small or m >= 4096 else 3, rows, label=f"{spec} tile")
    finally:
        be.close()
        matmul.TILES = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="sizes for llvmpipe (a CPU rasteriser)")
    ap.add_argument("--generic", action="store_true", help="also time matmul through the generic kernel")
    ap.add_argument("--sizes", type=str, default=None, help="matmul sizes, comma-separated")
    ap.add_argument(
        "--tiles", type=str, default=None, help="also time matmul with only these block tiles (e.g. 8x4,4x4)"
    )
    args = ap.parse_args()
    small = args.small
    b = jaxcore.get_backend("webgl")
    print(b.capabilities.description)
    rows: list[tuple[str, str, str]] = []
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([128, 256] if small else [1024, 2048, 4096])
    )
    for m in sizes:
        bench_matmul(b, m, 1 if small or m >= 4096 else 3, rows)
    if args.generic:
        bench_matmul(b, sizes[0], 1, rows, generic=True)
    for spec in args.tiles.split(",") if args.tiles else []:
        bench_tile(spec, sizes, small, rows)

    n = 1 << (20 if small else 26)
    x = np.random.rand(n).astype(np.float32)
    ins = [b.malloc(4 * n, x.tobytes()) for _ in range(3)]
    out = b.malloc(4 * n)
    exe = b.prepare_kernel(map_kernel(["float32"] * 3, n, lambda p, q, r: AluExp.add(AluExp.mul(p, q), r)))
    reps = 2 if small else 10

    def fma() -> None:
        for _ in range(reps):
            b.dispatch(exe, ins, [out])
        b.read(out, 0, 4)

    dt = best(fma, 1) / reps
    ok = np.array_equal(np.frombuffer(b.read(out), np.float32), x * x + x)
    tn = best(lambda: x * x + x, 1)
    rows.append(
        (
            f"a*b+c f32 {n}",
            f"{16 * n / dt / 1e9:.1f} GB/s ({dt * 1e3:.2f} ms, exact={ok})",
            f"{16 * n / tn / 1e9:.1f} GB/s",
        )
    )
    for s in (*ins, out):
        b.dec_ref(s)

    k = 1 << (16 if small else 20)
    s = np.random.rand(k).astype(np.float32)
    si, so = b.malloc(4 * k, s.tobytes()), b.malloc(4 * k)
    srt = b.prepare_routine(Routine.build(Routines.Sort, [(k,)], ["float32"]))
    dt = best(lambda: (b.dispatch(srt, [si], [so]), b.read(so, 0, 4)), 1)
    ok = np.array_equal(np.frombuffer(b.read(so), np.float32), np.sort(s))
    tn = best(lambda: np.sort(s), 1)
    rows.append(
        (f"sort f32 {k}", f"{dt * 1e3:.1f} ms ({dt / tn:.1f}x numpy, correct={ok})", f"{tn * 1e3:.2f} ms")
    )

    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'workload':<{w0}} | {'webgl':<{w1}} | numpy")
    print(f"{'-' * w0}-+-{'-' * w1}-+-------")
    for r in rows:
        print(f"{r[0]:<{w0}} | {r[1]:<{w1}} | {r[2]}")


if __name__ == "__main__":
    main()
