"""What the GPU bench scripts share: PyTorch on CUDA as the peer, host and device timers, and a
small webgpu buffer helper that frees what a workload allocated."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

import jaxcore
from jaxcore import AluExp, DType, tracing


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


class Gpu:
    """The webgpu backend with the slots a workload allocated (freed together)."""

    def __init__(self) -> None:
        self.be = jaxcore.get_backend("webgpu")
        self.slots: list[int] = []

    def put(self, x: np.ndarray) -> int:
        s = self.be.malloc(x.nbytes, np.ascontiguousarray(x).tobytes())
        self.slots.append(s)
        return s

    def empty(self, nbytes: int) -> int:
        s = self.be.malloc(nbytes)
        self.slots.append(s)
        return s

    def get(self, slot: int, dtype: type = np.float32) -> np.ndarray:
        return np.frombuffer(self.be.read(slot), dtype)

    def free(self) -> None:
        for s in self.slots:
            self.be.dec_ref(s)
        self.slots.clear()
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
