"""The queued fast paths (jaxcore.queue: malloc, dispatch, dec_ref) keep every check once an
executable's facts are cached, and stay exact under threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from webgpu_standin import get, put

import jaxcore
from jaxcore import AluExp, AluVar, DType, Kernel, SlotError, tracing

N = 64


@pytest.fixture
def plus1(gpu):
    k = gpu.prepare_kernel(Kernel(1, N, AluExp.global_index(DType.float32, 0, N, AluVar.gidx) + 1.0))
    x = put(gpu, np.zeros(N, np.float32))
    y = gpu.malloc(4 * N)
    gpu.dispatch(k, [x], [y])  # the first dispatch: the fast path is learned after it
    assert gpu._fast.get(k) is not None
    gpu.dec_ref(x)
    gpu.dec_ref(y)
    return k


def test_checks_hold_on_the_fast_path(gpu, plus1):
    x = put(gpu, np.arange(N, dtype=np.float32))
    small = gpu.malloc(4 * N - 4)
    with pytest.raises(ValueError, match="exactly"):
        gpu.dispatch(plus1, [x], [small])  # wrong output size
    with pytest.raises(ValueError):
        gpu.dispatch(plus1, [small], [gpu.malloc(4 * N)])  # input too small
    with pytest.raises(ValueError):
        gpu.dispatch(plus1, [x, x], [small])  # wrong count
    freed = gpu.malloc(4 * N)
    gpu.dec_ref(freed)
    with pytest.raises(SlotError, match="freed"):
        gpu.dispatch(plus1, [freed], [gpu.malloc(4 * N)])
    with pytest.raises(SlotError):
        gpu.dec_ref(freed)
    with pytest.raises(SlotError, match="never allocated"):
        gpu.dispatch(plus1, [x], [10**9])
    out = gpu.malloc(4 * N)
    gpu.dispatch(plus1, [np.int64(x)], (out,))  # a numpy integer slot takes the general path
    np.testing.assert_array_equal(get(gpu, out), np.arange(N) + 1)
    gpu.dispatch(plus1, [out], [out])  # aliased: as if the input were read first
    np.testing.assert_array_equal(get(gpu, out), np.arange(N) + 2)
    for s in (x, small, out):
        gpu.dec_ref(s)


def test_an_executable_of_another_backend_is_refused(gpu, plus1):
    cpu = jaxcore.get_backend("cpu")
    k = cpu.prepare_kernel(plus1.source)
    x, y = put(cpu, np.zeros(N, np.float32)), cpu.malloc(4 * N)
    cpu.dispatch(k, [x], [y])
    a, b = gpu.malloc(4 * N), gpu.malloc(4 * N)
    with pytest.raises(ValueError, match="prepared by"):
        gpu.dispatch(k, [a], [b])
    assert k not in gpu._fast
    for be, s in ((cpu, x), (cpu, y), (gpu, a), (gpu, b)):
        be.dec_ref(s)


def test_tracing_still_records_learned_executables(gpu, plus1):
    x, y = put(gpu, np.zeros(N, np.float32)), gpu.malloc(4 * N)
    tracing.start_trace()
    try:
        gpu.dispatch(plus1, [x], [y])
    finally:
        gpu.finish()
        events = tracing.stop_trace()
    kernels = [e for e in events if e.get("ph") == "X" and e["cat"] == "kernel"]
    assert len(kernels) == 1 and kernels[0]["args"]["device_time_us"] > 0
    gpu.dec_ref(x)
    gpu.dec_ref(y)


def test_threads_running_chains_stay_exact(gpu, plus1):
    gpu.batch_limit, limit = 16, gpu.batch_limit  # many flushes race with lock-free mallocs
    errors: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def chain(t: int) -> None:
        try:
            cur = put(gpu, np.full(N, t, np.float32))
            for _ in range(400):
                nxt = gpu.malloc(4 * N)
                gpu.dispatch(plus1, [cur], [nxt])
                gpu.dec_ref(cur)
                cur = nxt
            results[t] = get(gpu, cur)
            gpu.dec_ref(cur)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    live = gpu.live_slots()
    try:
        threads = [threading.Thread(target=chain, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        gpu.batch_limit = limit
    assert not errors, errors
    for t in range(4):
        np.testing.assert_array_equal(results[t], np.full(N, t + 400, np.float32))
    assert gpu.live_slots() == live
