"""The tiled matmul's tile shapes side by side: TFLOP/s of each on the same products, PyTorch beside.

    python bench/webgpu_tiles.py                      # 2048 and 4096, every candidate below
    python bench/webgpu_tiles.py --sizes 256,300      # lavapipe: a correctness pass, not a figure
    python bench/webgpu_tiles.py --tiles large,large2

Each tile is planned by hand (`jaxcore_webgpu.matmul.plan_matmul(kernel, target, tile=name)`), so a
shape the chooser would not pick still runs; one the adapter cannot hold is reported, not run. The
product is checked on a sample of rows before it is timed (GPU timestamps, median over reps).
The candidates are the library's own `TILES` and the shapes tried beside them (wider, taller,
thinner slabs); the one `choose_tile` takes is marked.
"""

from __future__ import annotations

import argparse
import sys

from _common import setup_path

setup_path()

from _gpu import Gpu, Torch  # noqa: E402
from jaxcore_webgpu import matmul as M  # noqa: E402
from webgpu_routines import matmul_case, matmul_check, torch_matmul_time  # noqa: E402

from jaxcore.matmul_shape import detect  # noqa: E402

T = M.Tile
CANDIDATES = {
    "bk8": T(128, 128, 8, 8, 8, 1),
    "bk8-double": T(128, 128, 8, 8, 8, 2),
    "wide": T(128, 256, 16, 8, 16, 1),
    "wide-bk8-double": T(128, 256, 8, 8, 16, 2),
    "tall-bk8-double": T(256, 128, 8, 16, 8, 2),
    "64x128": T(64, 128, 16, 4, 8, 1),
}


def sweep(g: Gpu, torch: Torch, n: int, names: list[str], reps: int) -> None:
    """One product size: PyTorch's rate, then each tile's (checked first)."""
    kernel, a, b = matmul_case(n)
    ga, gb, out = g.put(a), g.put(b), g.empty(4 * n * n)
    if torch.torch is not None:
        print(f"n={n} torch {2 * n**3 / torch_matmul_time(torch, a, b, reps) / 1e12:.4g} TFLOP/s")
    chosen = M.choose_tile(detect(kernel), g.be.target)
    for name in names:
        tile = M.TILES[name]
        plan = M.plan_matmul(kernel, g.be.target, name)
        if plan is None:
            print(f"n={n} {name:16} {tile}: does not fit this adapter")
            continue
        exe = g.be.compile_plan(kernel, plan)
        g.be.dispatch(exe, [ga, gb], [out])
        ok = matmul_check(g, out, a, b)
        s = g.time(lambda exe=exe: g.be.dispatch(exe, [ga, gb], [out]), reps)
        mark = "  (chosen)" if tile == chosen else ""
        print(f"n={n} {name:16} {tile}: {2 * n**3 / s / 1e12:.4g} TFLOP/s, {ok}{mark}", flush=True)
    g.free()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2048,4096", help="comma-separated n of the n x n x n products")
    ap.add_argument("--tiles", default="", help="comma-separated tile names (default: all)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    for name, tile in CANDIDATES.items():
        M.TILES.setdefault(name, tile)
    names = [t for t in args.tiles.split(",") if t] or list(M.TILES)
    g, torch = Gpu(), Torch(not args.no_torch)
    print(f"# {g.be.gpu.description}; workgroup storage {g.be.target.max_workgroup_storage} bytes")
    for n in (int(s) for s in args.sizes.split(",")):
        sweep(g, torch, n, names, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
