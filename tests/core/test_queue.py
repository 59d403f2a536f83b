"""jaxcore.queue on a fake device whose queue runs only when told: what is deferred, and until when."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import AluExp, AluVar, DType, Kernel, tracing
from jaxcore.backend import Capabilities
from jaxcore.queue import QueuedBackend

N = 16


class FakeQueue(QueuedBackend):
    """Storage is host memory; a submitted batch runs when the test calls `run_device()` or waits."""

    name = "fakeq"

    def __init__(self, memory: int = 1 << 20) -> None:
        self.capabilities = Capabilities(
            dtypes=frozenset({DType.float32, DType.int32}),
            routines=frozenset(),
            max_args=4,
            device_timestamps=True,
        )
        self.memory, self.used = memory, 0
        self.queue: list[tuple[int, list]] = []  # (token, ops) submitted, not yet run
        self.ran: set[int] = set()
        self.tokens = 0
        super().__init__()

    def _create_buffer(self, capacity):
        if self.used + capacity > self.memory:
            raise MemoryError("fake device is full")
        self.used += capacity
        return bytearray(capacity)

    def _destroy_buffer(self, raw):
        self.used -= len(raw)

    def _write_buffer(self, buf, data):
        # Like queue.write_buffer: runs after the work submitted so far, before later submits.
        def op(dst=buf.raw, data=bytes(data)):
            dst[: len(data)] = data

        self.queue.append((0, [op]))

    def _read_buffer(self, buf, start, count):
        self.run_device()  # a read is queued behind everything submitted, and waits for it
        return bytes(buf.raw[start : start + count])

    def _compile_kernel(self, kernel):
        return None  # every kernel here is "out = in + 1" on N float32s

    def _open_batch(self):
        return []

    def _record(self, rec, exe, inputs, outputs, timed):
        def op(src=inputs[0].raw, dst=outputs[0].raw):
            dst[: 4 * N] = (np.frombuffer(bytes(src[: 4 * N]), np.float32) + 1).tobytes()

        rec.append(op)

    def _submit(self, rec):
        self.tokens += 1
        self.queue.append((self.tokens, rec))
        return self.tokens

    def run_device(self):
        for token, ops in self.queue:
            for op in ops:
                op()
            self.ran.add(token)
        self.queue.clear()

    def _is_done(self, token):
        return token in self.ran

    def _wait(self, token):
        self.run_device()

    def _timings(self, token):
        return [(None, 1e-6 * (i + 1)) for i in range(4 * N)]


@pytest.fixture
def q():
    return FakeQueue()


@pytest.fixture
def plus1(q):
    return q.prepare_kernel(Kernel(1, N, AluExp.global_index(DType.float32, 0, N, AluVar.gidx) + 1.0))


def put(q, x):
    return q.malloc(x.nbytes, x.tobytes())


def test_dispatch_records_and_a_read_of_its_output_submits(q, plus1):
    x = np.arange(N, dtype=np.float32)
    a, out = put(q, x), q.malloc(4 * N)
    q.dispatch(plus1, [a], [out])
    assert q.pending_dispatches() == 1 and q.tokens == 0
    assert q.read(a) == x.tobytes() and q.tokens == 0  # a is not written by the open batch
    np.testing.assert_array_equal(np.frombuffer(q.read(out), np.float32), x + 1)
    assert q.tokens == 1 and q.stats.extra["flushes_for_read"] == 1


def test_a_long_chain_goes_to_an_idle_device_every_early_submit_dispatches(q, plus1):
    """The device starts on a chain while the host records the rest, but only when it has run
    what it was given (a busy device gets one batch at the read, as before)."""
    q.early_submit = 4
    x = np.zeros(N, np.float32)
    cur = put(q, x)
    tokens = []
    for i in range(1, 13):
        nxt = q.malloc(4 * N)
        q.dispatch(plus1, [cur], [nxt])
        q.dec_ref(cur)
        cur = nxt
        tokens.append(q.tokens)
        if i == 8:
            q.run_device()  # the device catches up: the next multiple of 4 submits again
    assert tokens == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2]  # at 8 the first batch had not run
    np.testing.assert_array_equal(np.frombuffer(q.read(cur), np.float32), x + 12)
    q.early_submit = 0
    for _ in range(8):
        nxt = q.malloc(4 * N)
        q.dispatch(plus1, [cur], [nxt])
        q.dec_ref(cur)
        cur = nxt
    assert q.tokens == 2 and q.pending_dispatches() == 8  # off: only a read will submit
    q.dec_ref(cur)


def test_dec_ref_parks_storage_until_the_batch_has_run(q, plus1):
    a, out = put(q, np.zeros(N, np.float32)), q.malloc(4 * N)
    q.dispatch(plus1, [a], [out])
    q.flush()  # submitted, not run
    raw = q._buffer(a).handle.raw
    q.dec_ref(a)
    assert q.stats.extra["deferred_frees"] == 1 and q.queue  # nothing waited
    b = q.malloc(4 * N, b"\7" * 4 * N)
    assert q._buffer(b).handle.raw is not raw  # a's storage is still in use by the device
    q.run_device()
    c = q.malloc(4 * N)
    assert q._buffer(c).handle.raw is raw  # back in the pool once the batch ran


def test_storage_freed_inside_the_open_batch_is_reused_by_later_work_there(q, plus1):
    q.early_submit = 0  # one open batch throughout
    cur = put(q, np.zeros(N, np.float32))
    for _ in range(100):
        nxt = q.malloc(4 * N)
        q.dispatch(plus1, [cur], [nxt])
        q.dec_ref(cur)
        cur = nxt
    assert q.pool.misses <= 3 and q.tokens == 0
    np.testing.assert_array_equal(np.frombuffer(q.read(cur), np.float32), np.full(N, 100, np.float32))


def test_a_host_write_into_storage_the_open_batch_used_submits_first(q, plus1):
    x = np.arange(N, dtype=np.float32)
    a, out = put(q, x), q.malloc(4 * N)
    q.dispatch(plus1, [a], [out])
    q.dec_ref(a)  # recycled inside the open batch
    b = put(q, np.full(N, 9, np.float32))  # would overwrite a before the dispatch read it
    assert q.tokens == 1
    np.testing.assert_array_equal(np.frombuffer(q.read(out), np.float32), x + 1)
    np.testing.assert_array_equal(np.frombuffer(q.read(b), np.float32), np.full(N, 9, np.float32))


def test_out_of_memory_waits_for_in_flight_frees_and_retries():
    q = FakeQueue(memory=3 * 256)
    k = q.prepare_kernel(Kernel(1, N, AluExp.global_index(DType.float32, 0, N, AluVar.gidx) + 1.0))
    a, out = q.malloc(4 * N), q.malloc(4 * N)
    q.dispatch(k, [a], [out])
    q.flush()
    q.dec_ref(a)  # parked on the in-flight batch
    q.malloc(4 * N)
    assert q.queue  # the batch has not run
    q.malloc(4 * N)  # the device is full: the batch is waited for, a's storage freed, and it fits
    assert not q.queue and q.used == q.memory
    with pytest.raises(MemoryError):  # three live buffers: really full
        q.malloc(4 * N)


def test_late_device_times_resolve_at_stop_trace(q, plus1):
    a, out = q.malloc(4 * N), q.malloc(4 * N)
    tracing.start_trace()
    for _ in range(3):
        q.dispatch(plus1, [a], [out])
    assert q.tokens == 0
    events = [e for e in tracing.stop_trace() if e.get("cat") == "kernel"]
    assert [e["args"]["device_time_us"] for e in events] == [1.0, 2.0, 3.0]


def test_read_async_takes_and_checks_its_range_as_read_does(q, plus1):
    """The queued read_async shares read's checks: numpy integers are slot and range numbers, a bool
    is refused (it once read from byte 1), and an out-of-range read names the range."""
    import asyncio

    x = np.arange(N, dtype=np.float32)
    a, out = put(q, x), q.malloc(4 * N)
    q.dispatch(plus1, [a], [out])
    got = asyncio.run(q.read_async(np.int64(out), np.uint32(8), np.int32(8)))
    assert got == (x + 1).tobytes()[8:16] == q.read(out, 8, 8)
    with pytest.raises(TypeError, match="bool"):
        asyncio.run(q.read_async(out, True))
    with pytest.raises(ValueError, match=r"\[60, 68\)"):
        asyncio.run(q.read_async(out, 60, 8))
    assert asyncio.run(q.read_async(out, 64)) == b""
