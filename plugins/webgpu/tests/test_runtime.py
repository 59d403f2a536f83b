"""What batching, deferred frees and pooling can break, on a real WebGPU device."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import numpy as np
import pytest
from jaxcore_webgpu.device import choose_adapter
from jaxcore_webgpu.program import Pass
from webgpu_standin import elementwise, get, put

import jaxcore
from jaxcore import AluExp, AluVar, DType, Kernel, tracing
from jaxcore.kernel import Reduction

N = 1000


@pytest.fixture
def plus1(gpu):
    return elementwise(gpu, N, 1, "in0[i] + 1.0")


def test_long_dependent_chain_read_midway(gpu, plus1):
    gpu.batch_limit, limit = 64, gpu.batch_limit  # crosses several batches
    try:
        x = np.arange(N, dtype=np.float32)
        cur = put(gpu, x)
        for step in range(1, 301):
            nxt = gpu.malloc(4 * N)
            gpu.dispatch(plus1, [cur], [nxt])
            gpu.dec_ref(cur)
            cur = nxt
            if step in (1, 150, 299):
                np.testing.assert_array_equal(get(gpu, cur), x + step)
        np.testing.assert_array_equal(get(gpu, cur), x + 300)
        gpu.dec_ref(cur)
    finally:
        gpu.batch_limit = limit


def test_free_right_after_a_dispatch_that_reads_it_then_reallocate(gpu, plus1):
    x = np.arange(N, dtype=np.float32)
    other = np.full(N, -7.0, np.float32)
    a = put(gpu, x)
    out = gpu.malloc(4 * N)
    gpu.dispatch(plus1, [a], [out])
    gpu.dec_ref(a)  # the dispatch has not run yet
    assert gpu.pending_dispatches() == 1  # dec_ref did not submit or wait
    b = put(gpu, other)  # same size: must not land in a's storage before the dispatch read it
    c = gpu.malloc(4 * N)  # same size, no data: may reuse a's storage inside the batch
    gpu.dispatch(plus1, [b], [c])
    np.testing.assert_array_equal(get(gpu, out), x + 1)
    np.testing.assert_array_equal(get(gpu, b), other)
    np.testing.assert_array_equal(get(gpu, c), other + 1)
    for s in (out, b, c):
        gpu.dec_ref(s)


def test_write_after_read_of_the_same_buffer(gpu, plus1):
    times2 = elementwise(gpu, N, 1, "in0[i] * 2.0")
    x = np.arange(N, dtype=np.float32)
    a, y = put(gpu, x), put(gpu, x + 100)
    out = gpu.malloc(4 * N)
    gpu.dispatch(plus1, [a], [out])  # reads a
    gpu.dispatch(times2, [y], [a])  # then overwrites a
    np.testing.assert_array_equal(get(gpu, out), x + 1)
    np.testing.assert_array_equal(get(gpu, a), (x + 100) * 2)
    # host read, then a dispatch writes the buffer, then a host read again
    np.testing.assert_array_equal(get(gpu, out), x + 1)
    gpu.dispatch(times2, [a], [out])
    np.testing.assert_array_equal(get(gpu, out), (x + 100) * 4)
    for s in (a, y, out):
        gpu.dec_ref(s)


def test_read_byte_ranges_at_odd_offsets_and_lengths(gpu):
    data = bytes(range(37)) * 3  # 111 bytes: not a multiple of 4 either
    s = gpu.malloc(len(data), data)
    assert gpu.read(s) == data
    for start in range(9):
        for count in (0, 1, 2, 3, 5, 7, 13, len(data) - start):
            assert gpu.read(s, start, count) == data[start : start + count], (start, count)
    with pytest.raises(ValueError, match="outside slot"):
        gpu.read(s, 100, 20)
    gpu.dec_ref(s)


def test_read_of_a_slot_the_open_batch_does_not_write_does_not_submit_it(gpu, plus1):
    x = np.arange(N, dtype=np.float32)
    a = put(gpu, x)
    out = gpu.malloc(4 * N)
    gpu.finish()
    gpu.dispatch(plus1, [a], [out])
    submits = gpu.stats.extra["submits"]
    np.testing.assert_array_equal(get(gpu, a), x)  # a is only read by the open batch
    assert gpu.pending_dispatches() == 1 and gpu.stats.extra["submits"] == submits
    np.testing.assert_array_equal(get(gpu, out), x + 1)  # out is written by it: submitted now
    assert gpu.pending_dispatches() == 0 and gpu.stats.extra["submits"] == submits + 1
    gpu.dec_ref(a)
    gpu.dec_ref(out)


def test_thousands_of_live_small_buffers(gpu):
    add = elementwise(gpu, 3, 2, "in0[i] + in1[i]", jaxcore.DType.int32)
    rows = [np.array([i, -i, 3 * i], np.int32) for i in range(3000)]
    slots = [put(gpu, r) for r in rows]
    outs = []
    for i in range(0, 3000, 2):
        o = gpu.malloc(12)
        gpu.dispatch(add, [slots[i], slots[i + 1]], [o])
        outs.append(o)
    for i, r in enumerate(rows):
        np.testing.assert_array_equal(get(gpu, slots[i], np.int32), r)
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(get(gpu, o, np.int32), rows[2 * k] + rows[2 * k + 1])
    for s in slots + outs:
        gpu.dec_ref(s)


def test_pool_reuses_freed_buffers(gpu):
    gpu.finish()
    before = gpu.pool.stats()
    for _ in range(50):
        s = gpu.malloc(5000, b"\1" * 5000)
        assert gpu.read(s, 4990, 10) == b"\1" * 10
        gpu.dec_ref(s)
    after = gpu.pool.stats()
    assert after["misses"] - before["misses"] <= 1
    assert after["hits"] - before["hits"] >= 49
    assert gpu.pool.capacity(5000) == 5120  # bucketed: nearby sizes share buffers
    s = gpu.malloc(5100)
    assert gpu.pool.stats()["misses"] == after["misses"]
    gpu.dec_ref(s)


def test_memory_error_past_the_binding_limit_names_it(gpu):
    limit = gpu.capabilities.max_buffer_bytes
    with pytest.raises(MemoryError, match=str(limit)):
        gpu.malloc(limit + 4)
    with pytest.raises(MemoryError, match="max_storage_buffer_binding_size"):
        gpu._create_buffer(gpu.binding_limit + 4)


def test_zero_size_buffers(gpu):
    s = gpu.malloc(0)
    assert gpu.read(s) == b""
    gpu.dec_ref(s)


def test_read_async_maps_without_blocking_the_loop(gpu, plus1):
    x = np.arange(N, dtype=np.float32)
    a, out = put(gpu, x), gpu.malloc(4 * N)
    gpu.dispatch(plus1, [a], [out])

    async def main():
        return await gpu.read_async(out, 8, 12)

    assert asyncio.run(main()) == (x + 1).tobytes()[8:20]
    gpu.dec_ref(a)
    gpu.dec_ref(out)


def test_trace_gets_device_times_when_the_batch_resolves(gpu, plus1):
    assert gpu.capabilities.device_timestamps
    x = np.arange(N, dtype=np.float32)
    a, out = put(gpu, x), gpu.malloc(4 * N)
    tracing.start_trace()
    for _ in range(5):
        gpu.dispatch(plus1, [a], [out])
    assert gpu.pending_dispatches() == 5  # tracing did not force a submit per dispatch
    events = tracing.stop_trace()
    kernels = [e for e in events if e.get("ph") == "X" and e["cat"] == "kernel"]
    assert len(kernels) == 5
    assert all(e["args"]["device_time_us"] > 0 for e in kernels)
    starts = [e["args"]["device_ts_us"] for e in kernels]
    assert starts == sorted(starts)  # the device ran them in order, on the trace's clock
    np.testing.assert_array_equal(get(gpu, out), x + 1)
    gpu.dec_ref(a)
    gpu.dec_ref(out)


def test_pipelines_are_cached_by_wgsl_text(gpu):
    from jaxcore_webgpu.program import Plan

    first = elementwise(gpu, 17, 1, "in0[i] - 3.0")
    before = gpu.pipelines.compiles
    plan = Plan(tuple(Pass(c, p.grid, p.bindings) for c, p in zip(first.data.codes, first.data.passes)))
    other = Kernel(1, 17, AluExp.global_index(DType.float32, 0, 17, AluVar.gidx) * 5.0)  # another key
    exe = gpu.compile_plan(other, plan)
    assert exe is not first and gpu.pipelines.compiles == before  # same WGSL: the same pipeline
    assert exe.data.passes[0].pipeline is first.data.passes[0].pipeline


def test_bad_wgsl_is_a_clear_error(gpu):
    from jaxcore_webgpu.program import ShaderError

    with pytest.raises(ShaderError, match="rejected"):
        elementwise(gpu, 4, 1, "in0[i] + undefined_name")


def test_decline_without_an_adapter():
    with pytest.raises(jaxcore.DeviceUnavailable, match="no WebGPU adapter") as e:
        choose_adapter([], None)
    assert "mesa-vulkan-drivers" in e.value.hint
    with pytest.raises(jaxcore.DeviceUnavailable, match="not one of"):
        choose_adapter([], "opengl")


def test_an_impossible_backend_setting_declines_through_the_registry():
    code = (
        "import jaxcore\n"
        "jaxcore.init()\n"
        "info = jaxcore.device_info('webgpu')\n"
        "print(info.status, '|', info.reason, '|', info.hint)\n"
    )
    backend = "d3d12" if sys.platform != "win32" else "metal"
    env = dict(os.environ, JAXCORE_WEBGPU_BACKEND=backend, JAXCORE_DEVICES="webgpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    status, reason, hint = (p.strip() for p in out.stdout.split("|"))
    assert status == "unavailable", out.stdout
    assert "D3D12" in reason or "Metal" in reason
    assert "apt-get install mesa-vulkan-drivers" in hint


def test_dump_dir_gets_every_shader(gpu, tmp_path, monkeypatch):
    from jaxcore_webgpu.program import PipelineCache, dump_dir_from_env

    monkeypatch.setenv("JAXCORE_WEBGPU_DUMP", str(tmp_path / "wgsl"))
    cache = PipelineCache(gpu.device, dump_dir_from_env())
    code = elementwise(gpu, 9, 1, "in0[i] * 7.0").data.codes[0]
    cache.pipeline(code, "main")
    files = list((tmp_path / "wgsl").glob("*.wgsl"))
    assert [f.read_text() for f in files] == [code]


def test_compiled_kernels_run_through_the_queue(gpu):
    """The real compiler (jaxcore_webgpu.codegen) behind the queue: a fused a*b+c, a sum big enough
    to need scratch passes, read back exactly."""
    n = 1 << 18
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(-4, 5, n).astype(np.float32) for _ in range(3))  # |sums| < 2^24: exact
    g = [AluExp.global_index(DType.float32, i, n, AluVar.gidx) for i in range(3)]
    fma = gpu.prepare_kernel(Kernel(3, n, g[0] * g[1] + g[2]))
    total = gpu.prepare_kernel(
        Kernel(
            1, 1, AluExp.global_index(DType.float32, 0, n, AluVar.ridx), Reduction(DType.float32, "Add", n)
        )
    )
    assert len(total.data.passes) == 2 and total.data.scratch  # partials in a scratch buffer
    ins, out, s = [put(gpu, x) for x in (a, b, c)], gpu.malloc(4 * n), gpu.malloc(4)
    gpu.dispatch(fma, ins, [out])
    gpu.dispatch(total, [out], [s])
    want = a * b + c
    np.testing.assert_array_equal(get(gpu, out), want)
    assert get(gpu, s)[0] == np.float32(want.astype(np.float64).sum())  # integers: exact in any order
    for slot in (*ins, out, s):
        gpu.dec_ref(slot)


def test_timestamps_one_pass_per_dispatch_without_inside_pass_queries(gpu, plus1, monkeypatch):
    """Adapters without `timestamp-query-inside-passes` time each dispatch as its own pass."""
    monkeypatch.setattr(gpu, "timestamps_in_pass", False)
    x = np.arange(N, dtype=np.float32)
    a, b = put(gpu, x), gpu.malloc(4 * N)
    gpu.dispatch(plus1, [a], [b])  # untimed, in the batch's shared pass
    tracing.start_trace()
    gpu.dispatch(plus1, [b], [a])
    gpu.dispatch(plus1, [a], [b])
    events = [e for e in tracing.stop_trace() if e.get("cat") == "kernel"]
    assert len(events) == 2 and all(e["args"]["device_time_us"] > 0 for e in events)
    gpu.dispatch(plus1, [b], [a])  # after the timed passes: a fresh shared pass
    np.testing.assert_array_equal(get(gpu, a), x + 4)
    gpu.dec_ref(a)
    gpu.dec_ref(b)


def test_device_copies_are_ordered_with_dispatches_in_the_batch(gpu, plus1):
    """`_copy_buffer` (how BaseBackend lands an aliased dispatch's temporary) is recorded between
    dispatches of the open batch: it ends the compute pass and the next dispatch starts another."""
    x = np.arange(N, dtype=np.float32)
    a, b, c = put(gpu, x), gpu.malloc(4 * N), gpu.malloc(4 * N)
    gpu.dispatch(plus1, [a], [b])
    gpu._copy_buffer(gpu._buffer(b).handle, gpu._buffer(c).handle, 4 * N)
    gpu.dispatch(plus1, [c], [a])
    assert gpu.pending_dispatches() == 2
    np.testing.assert_array_equal(get(gpu, c), x + 1)
    np.testing.assert_array_equal(get(gpu, a), x + 2)
    for s in (a, b, c):
        gpu.dec_ref(s)


def test_prepare_kernel_async_builds_pipelines_while_the_loop_runs(gpu):
    n = 33
    k = Kernel(1, n, AluExp.global_index(DType.float32, 0, n, AluVar.gidx) * 3.0 - 1.0)
    ticks = []

    async def main():
        async def ticker():
            for _ in range(1000):
                ticks.append(1)
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        exe = await gpu.prepare_kernel_async(k)
        t.cancel()
        return exe

    compiles = gpu.pipelines.compiles
    exe = asyncio.run(main())
    assert exe is gpu.prepare_kernel(k) and gpu.pipelines.compiles == compiles + 1
    assert ticks  # the loop was not blocked
    x = np.arange(n, dtype=np.float32)
    a, out = put(gpu, x), gpu.malloc(4 * n)
    gpu.dispatch(exe, [a], [out])
    np.testing.assert_array_equal(get(gpu, out), x * 3 - 1)
    gpu.dec_ref(a)
    gpu.dec_ref(out)
    many = gpu.capabilities.max_args + 1  # past what this adapter binds (31 on lavapipe, 524287 on an H200)
    with pytest.raises(ValueError, match="inputs"):  # errors keep prepare_kernel's form
        asyncio.run(
            gpu.prepare_kernel_async(
                Kernel(many, 1, AluExp.global_index(DType.float32, many - 1, 1, AluVar.gidx))
            )
        )


def test_read_async_checks_its_arguments_as_read_does(gpu):
    slot = gpu.malloc(np.int64(16), bytes(range(16)))
    try:
        got = asyncio.run(gpu.read_async(np.int32(slot), np.uint8(3), np.int64(5)))
        assert got == bytes(range(3, 8))
        for start, count in ((True, None), (0, True), (1.0, None)):
            with pytest.raises(TypeError, match="read (start|count) must be an integer"):
                asyncio.run(gpu.read_async(slot, start, count))
    finally:
        gpu.dec_ref(slot)
