"""The machine-limit probe (`peak_flops`) and the bench's peers and limits on the wasm device."""

from __future__ import annotations

import io
import math

import numpy as np

from jaxcore import bench
from jaxcore.plugin import DType
from jaxcore_wasm import peak, runtime
from jaxcore_wasm.backend import WasmBackend


def test_peak_loop_computes_its_recurrence() -> None:
    """The peak loop is real arithmetic: every chain holds acc*x + y iterated n times."""
    be = WasmBackend(threads=1)
    mod = be.compiler.library("peak", peak.plan_key(), peak.peak_ir)
    buf = be.allocator.alloc(peak.SCRATCH_BYTES)
    words = peak.SCRATCH_BYTES // 4
    for name in ("peak_fma", "peak_muladd"):
        v = be.array(buf, DType.float32, (words,))
        v[:4], v[4:8], v[8:] = 0.5, 0.25, np.arange(words - 8, dtype=np.float32)
        start = v[8:].copy()
        be.lane.call(be.lane.funcs(mod)[name], runtime.make_args([buf, 7]), 2)
        want = start
        for _ in range(7):
            want = (want * np.float32(0.5) + np.float32(0.25)).astype(np.float32)
        np.testing.assert_array_equal(v[8:], want)
    be.allocator.free(buf)


def test_peak_flops_is_a_finite_positive_rate() -> None:
    be = WasmBackend(threads=2)
    one = be.peak_flops(1, iters=1 << 14, rounds=2)
    assert math.isfinite(one) and one > 1e8


class _NumpyPeer(bench.Peer):
    name, module = "fake", "numpy"

    def make(self, op: str, inputs: tuple[np.ndarray, ...]):  # noqa: ANN201
        return (lambda: inputs[0].sum()) if op == "sum" else None


def test_bench_times_peers_in_the_same_rounds_and_reports_the_limit() -> None:
    be = WasmBackend(threads=1)
    prog = bench.Progress(1, io.StringIO())
    res = bench.run_workload(bench.WORKLOADS["sum"], be, 3, prog, peers=[_NumpyPeer()])
    assert res.status == "ok", res.detail
    assert len(res.peer_times["fake"]) == 3 and res.peers["fake"] > 0
    assert res.peer_speed["fake"] == res.peers["fake"] / res.device_s
    limits = bench.machine_limits(be, {"GB/s"})
    res.limit = res.throughput / limits["GB/s"]
    table = bench.format_table([res], limits)
    assert "vs fake" in table.splitlines()[0] and "limit = throughput" in table


def test_compute_bound_limit_is_against_the_peak_probed_in_its_rounds() -> None:
    """A GFLOP/s workload's limit divides by the median of a peak probe run right before each of
    its device runs; a memory-bound one is never probed."""
    be = WasmBackend(threads=2)
    prog = bench.Progress(2, io.StringIO())
    calls: list[int] = []
    probe = bench.peak_probe(be)
    assert probe is not None and probe() > 0

    def counted() -> float:
        calls.append(1)
        return 50e9 + 10e9 * len(calls)  # 60, 70, 80 GFLOP/s

    res = bench.run_workload(bench.WORKLOADS["matmul512"], be, 3, prog, budget_s=60, peak=counted)
    assert res.status == "ok", res.detail
    assert res.peak_samples == [60.0, 70.0, 80.0] and res.peak == 70.0
    assert res.throughput is not None and res.limit == res.throughput / 70.0
    assert "probed in the same rounds (70.0-70.0" in bench.format_table([res], {"GFLOP/s": 100.0})
    calls.clear()
    mem = bench.run_workload(bench.WORKLOADS["sum"], be, 2, prog, peak=counted)
    assert mem.status == "ok" and not calls and mem.peak is None
