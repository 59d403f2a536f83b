"""What the GPU bench scripts share: PyTorch on CUDA as the peer, host and device timers, and a
small webgpu buffer helper that frees what a workload allocated."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import jaxcore
from jaxcore import AluExp, DType, tracing
from jaxcore.backend import Slot
from jaxcore.bench import Buffers


def gi(gid: int, length: int, index: AluExp) -> AluExp:
    """A float32 read of input `gid` (length elements) at `index`."""
    return AluExp.global_index(DType.float32, gid, length, index)


class Torch:
    """PyTorch on CUDA, if present, with TF32 off: the context stays open for the whole run (a live
    CUDA context is also what gets Vulkan out of its slow memory mode on an H200)."""

    def __init__(self, enabled: bool) -> None:
        self.torch = None
        if not enabled:
            return
        try:
            import torch

            if torch.cuda.is_available():
                torch.zeros(1, device="cuda")
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                self.torch = torch
        except Exception:
            self.torch = None

    def time(self, fn: Callable[[], object], reps: int) -> float:
        """Median CUDA-event time of `fn`, after one warm-up call."""
        torch = self.torch
        assert torch is not None
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return statistics.median(times)


def host_time(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of `fn` on the host, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def check(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return "ok" if not bad.any() else f"WRONG ({int(bad.sum())} of {bad.size} differ)"


class Gpu(Buffers):
    """The webgpu backend with the slots a workload allocated (freed together)."""

    def __init__(self) -> None:
        super().__init__(jaxcore.get_backend("webgpu"))

    def get(self, slot: Slot, dtype: Any = np.float32, shape: Sequence[int] = (-1,)) -> np.ndarray:
        return super().get(slot, dtype, shape)

    def free(self) -> None:
        super().free()
        self.be.finish()

    def time(self, run: Callable[[], None], reps: int) -> float:
        """Median device time of one `run` (the sum of its dispatches' GPU timestamps; wall time
        per run where the adapter has no timestamp queries)."""
        run()
        self.be.finish()
        if not self.be.capabilities.device_timestamps:
            t = time.perf_counter()
            for _ in range(reps):
                run()
            self.be.finish()
            return (time.perf_counter() - t) / reps
        per_run = []
        for _ in range(reps):
            tracing.start_trace()
            run()
            events = tracing.stop_trace()
            per_run.append(sum(e["args"].get("device_time_us", 0.0) for e in events if e.get("ph") == "X"))
        return statistics.median(per_run) / 1e6


@dataclass
class Row:
    """One workload's result: webgpu's time and the peer's, the work done (bytes, FLOPs or
    elements, per `unit`) and the correctness check."""

    workload: str
    webgpu_s: float
    ref_s: float | None
    ref: str
    work: float
    unit: str  # "B", "FLOP", "elem", or "µs" (a per-item time, no rate)
    ok: str
    note: str = ""

    def rate(self, s: float | None) -> str:
        if s is None or not self.work:
            return "-"
        v = self.work / s
        if self.unit == "µs":
            return f"{s * 1e6:.2f} µs"
        if self.unit == "FLOP":
            return f"{v / 1e12:.2f} TFLOP/s" if v >= 1e11 else f"{v / 1e9:.2f} GFLOP/s"
        return f"{v / 1e9:.1f} G{self.unit}/s" if self.unit == "B" else f"{v / 1e9:.3f} G{self.unit}/s"


def print_header(g: Gpu, torch: Torch, peer_note: str = "") -> None:
    print(f"webgpu: {g.be.capabilities.description}")
    print(f"subgroups: {'on' if g.be.target.has_subgroups else 'off'} (JAXCORE_WEBGPU_SUBGROUPS=0: off)")
    ref_name = f"PyTorch {torch.torch.__version__} on CUDA{peer_note}" if torch.torch else "numpy on the host"
    print(f"reference: {ref_name}")


def run_workloads(g: Gpu, work: list[tuple[str, Callable[[], Row]]], only: set[str]) -> list[Row]:
    """Each workload named in `only` (all when empty); one that fails is reported, not fatal."""
    rows: list[Row] = []
    for name, fn in work:
        if only and name not in only:
            continue
        try:
            rows.append(fn())
            print(f"  done: {rows[-1].workload}", file=sys.stderr)
        except Exception as e:  # one failing workload does not hide the others
            print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
            g.slots.clear()
    return rows


def report(rows: list[Row], json_path: str | None) -> int:
    """The side-by-side table (and notes); 0 when every check passed."""
    ref = rows[0].ref if rows else "ref"
    print(f"\n| workload | webgpu | {ref} | webgpu time | {ref} time | {ref}/webgpu time | check |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = f"{r.ref_s / r.webgpu_s:.2f}x" if r.ref_s else "-"
        w, rt = f"{r.webgpu_s * 1e3:.3f} ms", f"{r.ref_s * 1e3:.3f} ms" if r.ref_s else "-"
        print(f"| {r.workload} | {r.rate(r.webgpu_s)} | {r.rate(r.ref_s)} | {w} | {rt} | {ratio} | {r.ok} |")
    for r in rows:
        if r.note:
            print(f"{r.workload}: {r.note}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return 0 if all(r.ok == "ok" for r in rows) else 1
