"""The standard workloads: real kernels and routines on a device, checked and timed against numpy.

Each workload builds its kernels with the public API, runs once to warm up and is **verified
against numpy** before any time counts. Then the device and numpy run round-robin, alternating
which goes first, and the median of each is reported (a short compute-bound run is timed on the
second of two back-to-back runs, so no side pays for waking threads that slept while others ran).
`speed` is numpy time / device time, so above 1 means the device is faster than numpy here.

Device time is wall time around the dispatches plus a 4-byte read of the last output, which waits
for the work to finish on asynchronous devices.

The `model` family runs the example frontend (examples/frontend in a source checkout) at its full
sizes: an MLP training step, single-head attention, least squares and a sort, each a whole step
through `jaxcore.fusion` with its results read back.

With `--peers`, the libraries a user would pick instead (JAX on CPU, PyTorch on CPU), when they are
installed, run the same workload on the same inputs in the same interleaved rounds (each round
rotates which side goes first). `limit` is the workload's throughput as a fraction of the
machine's: GB/s against the bandwidth of a numpy copy of a 64 MiB array (bytes read + written),
GFLOP/s against the backend's measured arithmetic peak when it declares one (`peak_flops()`), each
measured before and after the workloads (the higher counts: other load only lowers them); a
GFLOP/s workload's own limit is against a short peak probe run right before each of its device
runs (the median), so that both sides of the ratio saw the same share of the machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import numpy as np

from jaxcore import registry, tracing
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend, Slot, UnsupportedOpError, UnsupportedRoutineError
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines

F32 = DType.float32


@dataclass
class Case:
    """A prepared workload: what to run on each side, how to check it, and how much work it is."""

    device: Callable[[], object]  # results are not used: `check` reads them back
    numpy: Callable[[], object]
    check: Callable[[], str | None]  # None when the device output matches numpy, else what differs
    work: float  # bytes moved (GB/s) or flops (GFLOP/s) per run
    unit: str
    per_run: int = 1  # operations per run: times are reported per operation (the dispatch workload)
    # numpy's side runs on a threaded BLAS whose idle workers spin for a while after each call,
    # taking the cores a multi-threaded device needs: let them go to sleep before the device runs.
    blas: bool = False
    # what a peer library runs: an operation name of `Peer.make` and its numpy inputs
    op: str = ""
    inputs: tuple[np.ndarray, ...] = ()
    peers: dict[str, Callable[[], object]] = field(default_factory=dict)  # peer name -> its own run


@dataclass
class Result:
    workload: str
    device: str
    status: str  # ok | WRONG | unsupported | error
    device_s: float | None = None
    numpy_s: float | None = None
    speed: float | None = None  # numpy_s / device_s: > 1 means the device is faster
    throughput: float | None = None
    unit: str = ""
    reps: int = 0
    detail: str = ""
    device_times: list[float] = field(default_factory=list)
    numpy_times: list[float] = field(default_factory=list)
    peers: dict[str, float] = field(default_factory=dict)  # peer -> median seconds per operation
    peer_speed: dict[str, float] = field(default_factory=dict)  # peer_s / device_s
    peer_times: dict[str, list[float]] = field(default_factory=dict)
    limit: float | None = None  # throughput / the machine's limit for this unit
    # GFLOP/s: the backend's peak measured in the same rounds as the device runs (median), when it
    # declares one; `limit` is then the throughput over it
    peak: float | None = None
    peak_samples: list[float] = field(default_factory=list)


class Buffers:
    """Device buffers of one workload, freed together."""

    def __init__(self, backend: Backend) -> None:
        self.be = backend
        self.slots: list[Slot] = []

    def put(self, arr: np.ndarray) -> Slot:
        arr = np.ascontiguousarray(arr)
        slot = self.be.malloc(arr.nbytes, arr.reshape(-1).data.cast("B"))
        self.slots.append(slot)
        return slot

    def empty(self, nbytes: int) -> Slot:
        slot = self.be.malloc(nbytes)
        self.slots.append(slot)
        return slot

    def get(self, slot: Slot, dtype: Any, shape: Sequence[int]) -> np.ndarray:
        return np.frombuffer(self.be.read(slot), dtype=dtype).reshape(shape)

    def wait(self, slot: Slot) -> None:
        self.be.read(slot, 0, 4)

    def free(self) -> None:
        for slot in self.slots:
            self.be.dec_ref(slot)
        self.slots.clear()


def _gi(gid: int, length: int, index: AluExp) -> AluExp:
    return AluExp.global_index(F32, gid, length, index)


def _i32(v: int) -> AluExp:
    return AluExp.i32(v)


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    err = float(np.nanmax(np.abs(got.astype(np.float64) - want)))
    first = f"first at {i}: {got.flat[i]} vs {want.flat[i]}"
    return f"{int(bad.sum())} of {got.size} differ ({first}); max err {err:.3g}"


# ---- workloads --------------------------------------------------------------------------------


def _fma(b: Buffers, rng: np.random.Generator, n: int = 1 << 24) -> Case:
    a, bb, c = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(3))
    ga, gb, gc, out = b.put(a), b.put(bb), b.put(c), b.empty(4 * n)
    g = AluVar.gidx
    exe = b.be.prepare_kernel(Kernel(3, n, _gi(0, n, g) * _gi(1, n, g) + _gi(2, n, g)))
    o = np.empty_like(a)

    def device() -> None:
        b.be.dispatch(exe, [ga, gb, gc], [out])
        b.wait(out)

    def numpy() -> None:
        np.multiply(a, bb, out=o)
        np.add(o, c, out=o)

    check = lambda: _close(b.get(out, np.float32, (n,)), a * bb + c, 1e-5, 1e-6)  # noqa: E731
    return Case(device, numpy, check, 16.0 * n, "GB/s", op="fma", inputs=(a, bb, c))


def _sum(b: Buffers, rng: np.random.Generator, n: int = 1 << 24) -> Case:
    # Small integers: every partial sum is exact in float32, so any summation order gives one answer.
    a = rng.integers(-8, 8, n).astype(np.float32)
    ga, out = b.put(a), b.empty(4)
    exp = _gi(0, n, AluVar.gidx * _i32(n) + AluVar.ridx)
    exe = b.be.prepare_kernel(Kernel(1, 1, exp, Reduction(F32, AluOp.Add, n)))
    want = np.array([a.astype(np.int64).sum()], dtype=np.float64)

    def device() -> None:
        b.be.dispatch(exe, [ga], [out])
        b.wait(out)

    check = lambda: _close(b.get(out, np.float32, (1,)), want, 0, 0)  # noqa: E731
    return Case(device, lambda: a.sum(), check, 4.0 * n, "GB/s", op="sum", inputs=(a,))


def _softmax(b: Buffers, rng: np.random.Generator, rows: int = 4096, cols: int = 4096) -> Case:
    n = rows * cols
    x = rng.normal(0, 2, (rows, cols)).astype(np.float32)
    gx, out = b.put(x), b.empty(4 * n)
    # the routine: the device's own where it has one (a GPU's one pass a row), else the core's
    # three kernels (the row max, the sum of exp with 1 / sum in its epilogue, each element)
    exe = b.be.prepare_routine(Routine.build(Routines.Softmax, [x.shape], [F32]))

    def device() -> None:
        b.be.dispatch(exe, [gx], [out])
        b.wait(out)

    def numpy() -> None:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        e /= e.sum(axis=1, keepdims=True)

    x64 = x.astype(np.float64)
    e64 = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want = e64 / e64.sum(axis=1, keepdims=True)
    check = lambda: _close(b.get(out, np.float32, (rows, cols)), want, 1e-4, 1e-7)  # noqa: E731
    return Case(device, numpy, check, 8.0 * n, "GB/s", op="softmax", inputs=(x,))


def _matmul(n: int) -> Callable[[Buffers, np.random.Generator], Case]:
    def build(b: Buffers, rng: np.random.Generator) -> Case:
        x = rng.normal(0, 1, (n, n)).astype(np.float32)
        y = rng.normal(0, 1, (n, n)).astype(np.float32)
        gx, gy, out = b.put(x), b.put(y), b.empty(4 * n * n)
        g, r = AluVar.gidx, AluVar.ridx
        # out[i, j] = sum_k x[i, k] * y[k, j] with i = gidx / n, j = gidx % n, k = ridx.
        exp = _gi(0, n * n, AluExp.idiv(g, _i32(n)) * _i32(n) + r) * _gi(
            1, n * n, r * _i32(n) + AluExp.mod(g, _i32(n))
        )
        exe = b.be.prepare_kernel(Kernel(2, n * n, exp, Reduction(F32, AluOp.Add, n)))

        def device() -> None:
            b.be.dispatch(exe, [gx, gy], [out])
            b.wait(out)

        want = x.astype(np.float64) @ y.astype(np.float64)
        tol = 1e-5 * np.sqrt(n) * 4
        return Case(
            device,
            lambda: x @ y,
            lambda: _close(b.get(out, np.float32, (n, n)), want, tol, tol),
            2.0 * n**3,
            "GFLOP/s",
            blas=True,
            op="matmul",
            inputs=(x, y),
        )

    return build


def _sort(argsort: bool) -> Callable[[Buffers, np.random.Generator], Case]:
    def build(b: Buffers, rng: np.random.Generator, n: int = 1 << 20) -> Case:
        x = rng.normal(0, 1, n).astype(np.float32)
        gx = b.put(x)
        routine = Routine.build("Argsort" if argsort else "Sort", [(n,)], [F32])
        exe = b.be.prepare_routine(routine)
        outs = [b.empty(4 * n) for _ in routine.type.output_shapes]

        def device() -> None:
            b.be.dispatch(exe, [gx], outs)
            b.wait(outs[-1])

        def check() -> str | None:
            if not argsort:
                return _close(b.get(outs[0], np.float32, (n,)), np.sort(x), 0, 0)
            order = np.argsort(x, kind="stable")
            return _close(b.get(outs[0], np.float32, (n,)), x[order], 0, 0) or _close(
                b.get(outs[1], np.int32, (n,)), order, 0, 0
            )

        numpy = (lambda: np.argsort(x, kind="stable")) if argsort else (lambda: np.sort(x))
        op = "argsort" if argsort else "sort"
        return Case(device, numpy, check, 4.0 * n * (1 + len(outs)), "GB/s", op=op, inputs=(x,))

    return build


def _cholesky(b: Buffers, rng: np.random.Generator, batch: int = 64, n: int = 128) -> Case:
    m = rng.normal(0, 1, (batch, n, n))
    a = (m @ m.transpose(0, 2, 1) / n + np.eye(n)).astype(np.float32)
    ga, out = b.put(a), b.empty(a.nbytes)
    exe = b.be.prepare_routine(Routine.build("Cholesky", [a.shape], [F32]))

    def device() -> None:
        b.be.dispatch(exe, [ga], [out])
        b.wait(out)

    want = np.linalg.cholesky(a.astype(np.float64))
    check = lambda: _close(b.get(out, np.float32, a.shape), want, 1e-3, 1e-4)  # noqa: E731
    work = batch * n**3 / 3.0
    numpy = lambda: np.linalg.cholesky(a)  # noqa: E731
    return Case(device, numpy, check, work, "GFLOP/s", blas=True, op="cholesky", inputs=(a,))


DISPATCHES = 1000


def _dispatch(b: Buffers, rng: np.random.Generator) -> Case:
    x = np.ones(1, dtype=np.float32)
    gx, out = b.put(x), b.empty(4)
    exe = b.be.prepare_kernel(Kernel(1, 1, _gi(0, 1, AluVar.gidx) + AluExp.f32(1)))
    o = np.empty_like(x)

    def device() -> None:
        for _ in range(DISPATCHES):
            b.be.dispatch(exe, [gx], [out])
        b.wait(out)

    def numpy() -> None:
        for _ in range(DISPATCHES):
            np.add(x, 1, out=o)

    check = lambda: _close(b.get(out, np.float32, (1,)), x + 1, 0, 0)  # noqa: E731
    return Case(device, numpy, check, 0.0, "", per_run=DISPATCHES, op="dispatch", inputs=(x,))


class WorkloadUnavailable(Exception):
    """What a workload needs is not here (the model family outside a source checkout)."""


FRONTEND_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "frontend"


def _example_module(name: str, path: Path) -> ModuleType:
    """A module of the example frontend, loaded once by file (the example is no package)."""
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise WorkloadUnavailable(f"cannot load {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return mod


def _model(name: str) -> Callable[[Buffers, np.random.Generator], Case]:
    """One of examples/frontend/workloads.py's workloads at its full size, on the bench's device."""

    def build(b: Buffers, rng: np.random.Generator) -> Case:
        if not (FRONTEND_EXAMPLE / "workloads.py").is_file():
            raise WorkloadUnavailable(f"the model family runs {FRONTEND_EXAMPLE}, which is not here")
        for helper in ("lazy_array", "lazy_jit"):
            _example_module(helper, FRONTEND_EXAMPLE / f"{helper}.py")
        mod = _example_module("jaxcore_example_frontend_workloads", FRONTEND_EXAMPLE / "workloads.py")
        prepared = mod.WORKLOADS[name](b.be.name, False, rng)
        peers = {"torch": prepared.torch} if prepared.torch is not None else {}
        return Case(prepared.step, prepared.numpy, prepared.check, 0.0, "", blas=True, peers=peers)

    return build


@dataclass(frozen=True)
class Workload:
    name: str
    family: str
    description: str
    build: Callable[[Buffers, np.random.Generator], Case]


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("fma", "elementwise", "out = a*b + c, 16M float32, one fused kernel", _fma),
        Workload("sum", "reduction", "sum of 16M float32, one reduction kernel", _sum),
        Workload("softmax", "reduction", "row softmax 4096x4096: max, exp-sum, divide kernels", _softmax),
        Workload("matmul512", "matmul", "512x512 @ 512x512 float32, one reduction kernel", _matmul(512)),
        Workload("matmul1024", "matmul", "1024x1024 matmul, one reduction kernel", _matmul(1024)),
        Workload("matmul2048", "matmul", "2048x2048 matmul, one reduction kernel", _matmul(2048)),
        Workload("sort", "routine", "Sort routine, 1M float32", _sort(False)),
        Workload("argsort", "routine", "Argsort routine (stable), 1M float32", _sort(True)),
        Workload("cholesky", "routine", "Cholesky routine, batch 64x128x128 float32", _cholesky),
        Workload("dispatch", "overhead", "per-dispatch overhead of a 1-element kernel", _dispatch),
        Workload(
            "model-mlp",
            "model",
            "example frontend: MLP training step, batch 256, 784->256->10, softmax cross-entropy, SGD",
            _model("mlp"),
        ),
        Workload("model-attention", "model", "example frontend: attention 512x64", _model("attention")),
        Workload(
            "model-lstsq",
            "model",
            "example frontend: least squares, A 512x256, Cholesky of AᵀA + two triangular solves",
            _model("lstsq"),
        ),
        Workload("model-sort", "model", "example frontend: sort of 1M float32", _model("sort")),
    ]
}
FAMILIES = sorted({w.family for w in WORKLOADS.values()})


# ---- peers: the libraries a user would pick instead ----------------------------------------------


class Peer:
    """A library that runs the workloads' operations on the CPU; `make` returns a callable that runs
    one operation to completion (None when the peer has no such operation)."""

    name = ""
    module = ""

    def available(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def make(self, op: str, inputs: tuple[np.ndarray, ...]) -> Callable[[], object] | None:
        raise NotImplementedError


class JaxPeer(Peer):
    """JAX on its CPU backend: each operation jitted once, timed to `block_until_ready`."""

    name, module = "jax", "jax"

    def make(self, op: str, inputs: tuple[np.ndarray, ...]) -> Callable[[], object] | None:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        import jax.numpy as jnp

        cpu = jax.devices("cpu")[0]
        fns: dict[str, Callable[..., Any]] = {
            "fma": lambda a, b, c: a * b + c,
            "sum": jnp.sum,
            "softmax": lambda x: jax.nn.softmax(x, axis=1),
            "matmul": jnp.matmul,
            "sort": jnp.sort,
            "argsort": lambda x: jnp.argsort(x, stable=True),
            "cholesky": jnp.linalg.cholesky,
            "dispatch": lambda x: x + 1,
        }
        if op not in fns:
            return None
        f = jax.jit(fns[op])
        args = [jax.device_put(a, cpu) for a in inputs]
        if op == "dispatch":

            def loop() -> object:
                for _ in range(DISPATCHES):
                    r = f(*args)
                return r.block_until_ready()

            return loop
        return lambda: f(*args).block_until_ready()


class TorchPeer(Peer):
    """PyTorch on the CPU (eager), with its default intra-op threads. Its OpenMP workers wait
    passively (OMP_WAIT_POLICY=PASSIVE unless set): spinning, they kept the cores busy for the side
    timed next (a wasm sum after a torch one: 1.75 -> 2.9 ms on two cores). The variable is set for
    the whole process, and only takes effect if torch was not imported before."""

    name, module = "torch", "torch"

    def make(self, op: str, inputs: tuple[np.ndarray, ...]) -> Callable[[], object] | None:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch's OpenMP starts
        import torch

        t = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
        if op == "fma":
            o = torch.empty_like(t[0])
            return lambda: torch.addcmul(t[2], t[0], t[1], out=o)
        if op == "sum":
            return lambda: t[0].sum()
        if op == "softmax":
            return lambda: torch.softmax(t[0], dim=1)
        if op == "matmul":
            o = torch.empty_like(t[0])
            return lambda: torch.matmul(t[0], t[1], out=o)
        if op == "sort":
            return lambda: torch.sort(t[0])
        if op == "argsort":
            return lambda: torch.sort(t[0], stable=True)
        if op == "cholesky":
            return lambda: torch.linalg.cholesky(t[0])
        if op == "dispatch":
            o = torch.empty_like(t[0])

            def loop() -> object:
                for _ in range(DISPATCHES):
                    torch.add(t[0], 1, out=o)
                return o

            return loop
        return None


PEERS: dict[str, Peer] = {p.name: p for p in (JaxPeer(), TorchPeer())}


def available_peers(names: Sequence[str] | None = None) -> list[Peer]:
    """The peers named (default: every known one) that are installed here."""
    chosen = list(PEERS) if not names else names
    for n in chosen:
        if n not in PEERS:
            raise SystemExit(f"unknown peer '{n}'; choose from {', '.join(PEERS)}")
    return [PEERS[n] for n in chosen if PEERS[n].available()]


# ---- the machine's limits ----------------------------------------------------------------------

COPY_BYTES = 64 << 20


def copy_bandwidth(nbytes: int = COPY_BYTES, reps: int = 9) -> float:
    """Bytes/s of a numpy copy of a `nbytes` array (bytes read + written; median of `reps`)."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = [_timed(lambda: np.copyto(dst, src)) for _ in range(reps)]
    return 2.0 * nbytes / statistics.median(times)


def machine_limits(backend: Backend, units: set[str]) -> dict[str, float]:
    """unit -> the machine's limit in that unit: copy bandwidth (GB/s), the backend's peak (GFLOP/s)."""
    limits: dict[str, float] = {}
    if "GB/s" in units:
        limits["GB/s"] = copy_bandwidth() / 1e9
    peak = getattr(backend, "peak_flops", None)
    if "GFLOP/s" in units and callable(peak):
        limits["GFLOP/s"] = float(peak()) / 1e9
    return limits


# A short peak probe (about 3 ms on the 2-core machine) right before each device run of a
# compute-bound workload: on a machine shared with other work the arithmetic a backend gets moves
# between runs (the 2-core VM: 2-thread peak 60-125 GFLOP/s from one second to the next, as other
# processes take a core and give it back), so a GFLOP/s workload is set against the peak measured
# in its own rounds; the peak before and after the workloads stays the footnote's figure.
PEAK_PROBE_ITERS = 1 << 20


def peak_probe(backend: Backend) -> Callable[[], float] | None:
    """The backend's short peak probe in flop/s, or None when it declares no `peak_flops()`."""
    peak = getattr(backend, "peak_flops", None)
    if not callable(peak):
        return None
    return lambda: float(peak(iters=PEAK_PROBE_ITERS, rounds=1))


# ---- running ----------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.done = max(total, 1), 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, label: str, advance: int = 1) -> None:
        self.done = min(self.total, self.done + advance)
        if self.tty:
            width = 30
            fill = round(width * self.done / self.total)
            bar = "#" * fill + "." * (width - fill)
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} {label:<32.32}")
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif advance:
            self.stream.write(f"[{self.done}/{self.total}] {label}\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 80 + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()


# Longer than OpenBLAS's default spin (2**28 cycles, about 0.1 s at 2.5 GHz) before its workers sleep.
BLAS_SETTLE_S = 0.15
# A compute-bound side (GFLOP/s) whose run is shorter than this is timed on its second of two
# back-to-back runs: threads that slept while the other sides ran (a virtual machine's idle vCPUs
# are descheduled) take a millisecond or two to wake, which a 3 ms matmul would otherwise count
# (512: 91 -> 54 GFLOP/s after 0.2 s idle on the 2-core CI machine). Every side, numpy and the
# peers too, gets the same. Memory-bound workloads are not primed: a second pass over the same
# 64 MiB would partly read it from cache, and they are meant to be timed from memory.
PRIME_BELOW_S = 0.1


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_workload(
    w: Workload,
    backend: Backend,
    reps: int,
    progress: Progress,
    budget_s: float = 30.0,
    seed: int = 0,
    peers: Sequence[Peer] = (),
    peak: Callable[[], float] | None = None,
) -> Result:
    """Warm up, verify, then time device, numpy and `peers` in interleaved rounds (each round starts
    with the next side); `budget_s` caps the timed reps. `peak` (flop/s), when given, is probed
    right before each device run of a compute-bound workload (see PEAK_PROBE_ITERS)."""
    res = Result(w.name, backend.name, "ok")
    bufs = Buffers(backend)
    try:
        progress.step(f"{w.name}: setup", 0)
        try:
            case = w.build(bufs, np.random.default_rng(seed))
        except (UnsupportedOpError, UnsupportedRoutineError) as exc:
            res.status, res.detail = "unsupported", str(exc)
            return res
        except WorkloadUnavailable as exc:
            res.status, res.detail = "unavailable", str(exc)
            return res
        warm = _timed(case.device)
        case.numpy()
        problem = case.check()
        if problem is not None:
            res.status, res.detail = "WRONG", problem
            return res
        sides: dict[str, Callable[[], object]] = {"device": case.device, "numpy": case.numpy}
        for peer in peers:
            fn = case.peers.get(peer.name) or (peer.make(case.op, case.inputs) if case.op else None)
            if fn is not None:
                fn()  # warm-up: compiles (jax.jit) before any time counts
                sides[peer.name] = fn
        times: dict[str, list[float]] = {k: [] for k in sides}
        primed = warm < PRIME_BELOW_S and case.unit == "GFLOP/s"  # see PRIME_BELOW_S
        n = min(reps, int(budget_s / max(warm * (2 if primed else 1), 1e-9)))
        if n < reps:
            res.detail = f"{n} of {reps} reps (time budget {budget_s:g}s)"
        if n == 0:  # one run already exceeds the budget: report the warm-up run itself
            res.detail = f"timed from the warm-up run, which exceeds the {budget_s:g}s budget"
            times["device"].append(warm)
            for k, fn in sides.items():
                if k != "device":
                    times[k].append(_timed(fn))
        order = list(sides)
        probe = peak if case.unit == "GFLOP/s" else None
        for i in range(n):
            first = i % len(order)
            for name in order[first:] + order[:first]:
                if probe is not None and name == "device":
                    res.peak_samples.append(probe() / 1e9)
                if primed:
                    sides[name]()
                times[name].append(_timed(sides[name]))
                if case.blas and name != "device":
                    time.sleep(BLAS_SETTLE_S)
            progress.step(f"{w.name}: rep {i + 1}/{n}", 0)
        res.device_times, res.numpy_times = times.pop("device"), times.pop("numpy")
        res.peer_times = times
        res.reps = max(n, 1)
        res.device_s = statistics.median(res.device_times) / case.per_run
        res.numpy_s = statistics.median(res.numpy_times) / case.per_run
        res.speed = res.numpy_s / res.device_s if res.device_s > 0 else None
        for name, ts in times.items():
            res.peers[name] = statistics.median(ts) / case.per_run
            if res.device_s > 0:
                res.peer_speed[name] = res.peers[name] / res.device_s
        res.unit = case.unit
        if res.device_s > 0 and case.work:
            res.throughput = case.work / res.device_s / 1e9
        if res.peak_samples and res.throughput is not None:
            res.peak = statistics.median(res.peak_samples)
            res.limit = res.throughput / res.peak
    except Exception as exc:  # noqa: BLE001 - a crash in one workload is a result, not the end of the run
        res.status, res.detail = "error", f"{type(exc).__name__}: {exc}"
    finally:
        bufs.free()
        progress.step(w.name)
    return res


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def format_table(results: list[Result], limits: dict[str, float] | None = None) -> str:
    peers = list(dict.fromkeys(p for r in results for p in r.peers))
    head: tuple[str, ...] = ("workload", "device", "time", "numpy", "speed")
    for p in peers:
        head += (p, f"vs {p}")
    head += ("throughput", "limit", "check")
    rows: list[tuple[str, ...]] = [head]
    for r in results:
        thr = "-" if r.throughput is None else f"{r.throughput:.2f} {r.unit}"
        check = r.status if not r.detail or r.status == "ok" else f"{r.status}: {r.detail}"
        if r.status == "ok" and r.detail:
            check = f"ok ({r.detail})"
        speed = "-" if r.speed is None else f"{r.speed:.2f}x"
        row: tuple[str, ...] = (r.workload, r.device, _fmt_time(r.device_s), _fmt_time(r.numpy_s), speed)
        for p in peers:
            ps = r.peer_speed.get(p)
            row += (_fmt_time(r.peers.get(p)), "-" if ps is None else f"{ps:.2f}x")
        lim = "-" if r.limit is None else f"{100 * r.limit:.0f}%"
        rows.append((*row, thr, lim, check))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1] for row in rows]
    lines.append(
        "speed = numpy time / device time: above 1x the device is faster than numpy (median of reps)"
    )
    if peers:
        lines.append("vs PEER = peer time / device time, timed in the same interleaved rounds")
    if limits:
        parts = [f"{v:.1f} {u}" for u, v in limits.items()]
        what = {"GB/s": "numpy copy, read+written", "GFLOP/s": "the backend's measured peak"}
        lines.append(
            "limit = throughput / the machine's: "
            + "; ".join(f"{p} ({what.get(u, u)})" for p, u in zip(parts, limits))
        )
    paired = [r.peak for r in results if r.peak is not None]
    if paired:
        lines.append(
            f"GFLOP/s limits are against the peak probed in the same rounds "
            f"({min(paired):.1f}-{max(paired):.1f} GFLOP/s, median per workload)"
        )
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device", action="append", default=None, help="device to run on (repeatable; default device)"
    )
    p.add_argument(
        "--workload",
        action="append",
        default=None,
        help=f"workload or family (repeatable): {', '.join(WORKLOADS)}; families {', '.join(FAMILIES)}",
    )
    p.add_argument("--reps", type=int, default=5, help="timed repetitions after one warm-up (default 5)")
    p.add_argument(
        "--budget", type=float, default=30.0, help="seconds of timed reps per workload (default 30)"
    )
    p.add_argument(
        "--peers",
        nargs="?",
        const="all",
        default=None,
        metavar="NAMES",
        help=f"also time the installed peers, comma-separated ({', '.join(PEERS)}; default all)",
    )
    p.add_argument(
        "--no-limits", action="store_true", help="do not measure the machine's limits (copy bandwidth, peak)"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable results on stdout")
    p.add_argument("--trace", metavar="FILE", help="record a Chrome trace of the device dispatches to FILE")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")


def select(names: Sequence[str] | None) -> list[Workload]:
    """The workloads and families named; by default every one (the model family only where the
    example frontend it runs is here)."""
    if not names:
        here = (FRONTEND_EXAMPLE / "workloads.py").is_file()
        return [w for w in WORKLOADS.values() if here or w.family != "model"]
    out: list[Workload] = []
    for name in names:
        group = [w for w in WORKLOADS.values() if w.family == name]
        if name in WORKLOADS:
            group = [WORKLOADS[name]]
        if not group:
            raise SystemExit(
                f"unknown workload '{name}'; choose from {', '.join(WORKLOADS)} or {', '.join(FAMILIES)}"
            )
        out += [w for w in group if w not in out]
    return out


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the selected workloads; 0 when every result is ok, unsupported or unavailable, else 1."""
    out = out if out is not None else sys.stdout
    if args.list:
        for w in WORKLOADS.values():
            out.write(f"{w.name:<12} {w.family:<12} {w.description}\n")
        return 0
    if args.reps < 1:
        raise SystemExit("--reps must be at least 1")
    workloads = select(args.workload)
    devices = args.device or [registry.default_device()]
    backends = [registry.get_backend(d) for d in devices]
    peer_names = getattr(args, "peers", None)
    wanted = [] if not peer_names else list(PEERS) if peer_names == "all" else peer_names.split(",")
    peers = available_peers(wanted) if wanted else []
    if wanted:
        missing = sorted(set(wanted) - {p.name for p in peers})
        if missing:
            sys.stderr.write(f"peers not installed (skipped): {', '.join(missing)}\n")
    progress = Progress(len(workloads) * len(backends))
    limits: dict[str, float] = {}
    if args.trace:
        tracing.start_trace()
    results: list[Result] = []
    try:
        for be in backends:
            info = registry.device_info(be.name)
            progress.note(
                f"jaxcore bench on {be.name} ({info.plugin} {info.version}), {args.reps} reps + warm-up"
            )
            first = len(results)
            measure = not getattr(args, "no_limits", False)
            units = {"GB/s", "GFLOP/s"}
            # measured before and after the workloads, the best of both: a busy machine reads low
            before = machine_limits(be, units) if measure else {}
            probe = peak_probe(be) if measure else None
            for w in workloads:
                results.append(run_workload(w, be, args.reps, progress, args.budget, peers=peers, peak=probe))
            if measure:
                ours = results[first:]
                after = machine_limits(be, {r.unit for r in ours if r.throughput is not None})
                limits = {u: max(v, before.get(u, 0.0)) for u, v in after.items()}
                for r in ours:
                    if r.throughput is not None and r.unit in limits and r.peak is None:
                        r.limit = r.throughput / limits[r.unit]
    finally:
        if args.trace:
            events = tracing.stop_trace(args.trace)
            progress.note(f"trace: {sum(e['ph'] == 'X' for e in events)} dispatches written to {args.trace}")
    if args.json:
        infos = [registry.device_info(be.name) for be in backends]
        doc = {
            "devices": {d.name: {"plugin": d.plugin, "version": d.version} for d in infos},
            "reps": args.reps,
            "limits": limits,
            "speed": "numpy_s / device_s (above 1: the device is faster)",
            "results": [asdict(r) for r in results],
        }
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write(format_table(results, limits) + "\n")
    return 0 if all(r.status in ("ok", "unsupported", "unavailable") for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jaxcore bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))
