"""Run the example frontend's workloads on a device: each checked against numpy, then timed per
step beside numpy (and PyTorch, when installed).

    python examples/frontend/run.py --device wasm           # the full sizes
    python examples/frontend/run.py --device webgl --small  # small sizes (what `make test` runs)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when imported from elsewhere

import lazy_array as lz  # noqa: E402
import numpy as np  # noqa: E402
import workloads  # noqa: E402

import jaxcore  # noqa: E402


@dataclass
class Row:
    workload: str
    sizes: str
    dispatches: str  # kernels + routines per step
    first: float  # the first step: compiles included
    times: dict[str, float]  # side -> median seconds per step
    check: str


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.2f} ms"


def run_one(name: str, device: str, small: bool, reps: int) -> Row:
    """Warm up (compiles), check against numpy, then time `reps` rounds of every side, each
    round starting with the next side (a machine shared with others is fairer to all that way)."""
    prepared = workloads.WORKLOADS[name](device, small, np.random.default_rng(0))
    t0 = time.perf_counter()
    prepared.step()
    first = time.perf_counter() - t0
    problem = prepared.check()
    before = dict(lz.STATS)
    prepared.step()
    counts = f"{lz.STATS['kernels'] - before['kernels']} + {lz.STATS['routines'] - before['routines']}"
    sides = {device: prepared.step, "numpy": prepared.numpy}
    if prepared.eager is not None:
        prepared.eager()  # its own warm-up (the jitted step built its kernels: they are cached)
        sides["eager"] = prepared.eager
    if prepared.torch is not None:
        prepared.torch()
        sides["torch"] = prepared.torch
    times: dict[str, list[float]] = {k: [] for k in sides}
    order = list(sides)
    for i in range(reps):
        for side in order[i % len(order) :] + order[: i % len(order)]:
            t0 = time.perf_counter()
            sides[side]()
            times[side].append(time.perf_counter() - t0)
    check = problem or prepared.check() or "ok"  # checked again after the timed steps
    medians = {k: statistics.median(v) for k, v in times.items()}
    return Row(name, prepared.sizes, counts, first, medians, check)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="jaxcore device (default: the default device)")
    p.add_argument("--small", action="store_true", help="small sizes: seconds on any device")
    p.add_argument("--reps", type=int, default=5, help="timed steps per side (default 5)")
    p.add_argument("--workload", action="append", choices=list(workloads.WORKLOADS), help="repeatable")
    args = p.parse_args(argv)
    backend = jaxcore.get_backend(args.device)
    live = getattr(backend, "live_slots", lambda: -1)
    live_before = live()
    rows = [run_one(w, backend.name, args.small, args.reps) for w in args.workload or workloads.WORKLOADS]
    gc.collect()
    sizes = "small" if args.small else "full"
    print(f"example frontend on {backend.name} ({sizes} sizes): median of {args.reps} steps")
    print(f"each step waits for its results (the MLP's reads its loss); {backend.name}: jitted, eager: not")
    head = ("workload", "sizes", "kernels + routines", "first step", backend.name, "eager", "numpy", "torch")
    head += ("check",)
    table = [head] + [
        (r.workload, r.sizes, r.dispatches, _fmt(r.first))
        + tuple(_fmt(r.times.get(side)) for side in (backend.name, "eager", "numpy", "torch"))
        + (r.check,)
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"device buffers live: {live_before} before, {live()} after (every array dropped)")
    return 0 if all(r.check == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
