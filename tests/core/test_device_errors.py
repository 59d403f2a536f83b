"""Device errors reported after the dispatch that caused them (jaxcore.queue) name that dispatch.

The device here is a real QueuedBackend over host memory whose queue runs when waited for, and which
refuses what a GPU runtime refuses: a batch holding a "poisoned" kernel is rejected at submit (as wgpu
rejects a command buffer that fails validation), or fails when it runs (reported at the wait). The
error must name the kernel and the line of the test that dispatched it, whichever call finds it.
"""

from __future__ import annotations

import gc
import inspect
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from jaxcore import AluExp, AluVar, DType, Kernel, settings, tracing
from jaxcore.backend import Capabilities, DeviceError, Executable
from jaxcore.queue import QueuedBackend, QueuedBuffer

N = 16


class Refused(RuntimeError):
    """What the device raises: its own exception type, which becomes the DeviceError's cause."""


class PickyQueue(QueuedBackend):
    """Computes `out = in + c` for a kernel `in + c`; refuses every batch that holds a poisoned kernel,
    at submit (`when="submit"`) or once it has run (`when="wait"`)."""

    name = "picky"

    def __init__(self, when: str = "submit", fast: bool = True) -> None:
        self.capabilities = Capabilities(dtypes=frozenset({DType.float32}), routines=frozenset(), max_args=4)
        self.when, self.fast = when, fast
        self.poison: set[str] = set()
        self.pending: list[tuple[int, list[Any]]] = []  # submitted batches, not yet run
        self.done: set[int] = set()
        self.tokens = 0
        super().__init__()

    def _create_buffer(self, capacity: int) -> bytearray:
        return bytearray(capacity)

    def _destroy_buffer(self, raw: bytearray) -> None:
        pass

    def _write_buffer(self, buf: QueuedBuffer, data: memoryview) -> None:
        buf.raw[: data.nbytes] = data

    def _read_buffer(self, buf: QueuedBuffer, start: int, count: int) -> bytes:
        self._run_device()
        return bytes(buf.raw[start : start + count])

    def _compile_kernel(self, kernel: Kernel) -> float:
        return float(kernel.exp.src[1].arg)  # the constant c of `in + c`

    def _open_batch(self) -> list[Any]:
        return []

    def _op(self, rec: list[Any], exe: Executable, src: QueuedBuffer, dst: QueuedBuffer) -> None:
        rec.append((exe.source.key(), exe.data, src.raw, dst.raw))

    def _record(self, rec: Any, exe: Executable, inputs: Any, outputs: Any, timed: bool) -> None:
        self._op(rec, exe, inputs[0], outputs[0])

    def _fast_recorder(self, exe: Executable) -> Any:
        if not self.fast:
            return None
        return lambda be, rec, bufs: be._op(rec, exe, bufs[0], bufs[1])

    def _submit(self, rec: list[Any]) -> int:
        if self.when == "submit" and any(key in self.poison for key, *_ in rec):
            raise Refused("validation failed: expects a BindGroup to be set at index 1")
        self.tokens += 1
        self.pending.append((self.tokens, rec))
        return self.tokens

    def _run_device(self) -> None:
        for token, rec in self.pending:
            for _, c, src, dst in rec:
                dst[: 4 * N] = (np.frombuffer(bytes(src[: 4 * N]), np.float32) + np.float32(c)).tobytes()
            self.done.add(token)
        self.pending.clear()

    def _is_done(self, token: int) -> bool:
        return token in self.done

    def _wait(self, token: int) -> None:
        failed = [rec for t, rec in self.pending if t <= token and any(k in self.poison for k, *_ in rec)]
        self._run_device()
        if self.when == "wait" and failed:
            raise Refused("the device lost its work: out-of-bounds access")


def plus(c: float) -> Kernel:
    return Kernel(1, N, AluExp.global_index(DType.float32, 0, N, AluVar.gidx) + c)


def here() -> int:
    """The line of the caller, for the site an error must name."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def values(q: QueuedBackend, slot: int) -> np.ndarray:
    return np.frombuffer(q.read(slot), np.float32)


@pytest.fixture(params=[True, False], ids=["fast-path", "general-path"])
def fast(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_a_batch_refused_at_submit_names_the_kernel_and_the_line_that_dispatched_it(fast: bool) -> None:
    q = PickyQueue("submit", fast)
    good, bad, later = (q.prepare_kernel(plus(c)) for c in (1.0, 2.0, 3.0))
    q.poison.add(bad.source.key())
    x = q.malloc(4 * N, np.arange(N, dtype=np.float32).tobytes())
    a, b, c = q.malloc(4 * N), q.malloc(4 * N), q.malloc(4 * N)
    for _ in range(2):  # twice: the second dispatch of each takes the fast path, where there is one
        q.dispatch(good, [x], [a])
        line = here() + 1
        q.dispatch(bad, [x], [b])
        q.dispatch(later, [x], [c])
        assert q.pending_dispatches() == 3 and not q.pending  # nothing submitted yet
        with pytest.raises(DeviceError) as info:
            q.read(b)
        err = info.value
        msg = str(err)
        assert err.source is bad.source and err.device == "picky"
        assert f"{__file__}:{line}" in msg and err.site == f"{__file__}:{line}"
        assert tracing.describe(bad.source) in msg and "(G_0<float32>[$gidx:int32] + 2)" in msg
        assert "rejected" in msg and "expects a BindGroup" in msg and isinstance(err.__cause__, Refused)
        assert "The 1 dispatch recorded after it did not run" in msg and "JAXCORE_SYNC=1" in msg
        np.testing.assert_array_equal(values(q, a), np.arange(N) + 1)  # the dispatch before it ran
    # the backend carries on: the refused batch is gone, its buffers are back in the pool
    q.poison.clear()
    q.dispatch(bad, [x], [b])
    np.testing.assert_array_equal(values(q, b), np.arange(N) + 2)


def test_the_site_is_the_first_dispatch_of_the_executable_unless_sync() -> None:
    q = PickyQueue("submit")
    bad = q.prepare_kernel(plus(2.0))
    q.poison.add(bad.source.key())
    x, y = q.malloc(4 * N), q.malloc(4 * N)
    first = here() + 1
    q.dispatch(bad, [x], [y])
    with pytest.raises(DeviceError, match=f"{__file__}:{first} \\(first dispatch\\)"):
        q.flush()
    q.dispatch(bad, [x], [y])  # a later dispatch from another line is still named by the first
    with pytest.raises(DeviceError, match=f"{__file__}:{first} \\(first dispatch\\)"):
        q.flush()


def test_an_error_reported_at_the_wait_names_the_kernel_and_retires_the_batch() -> None:
    q = PickyQueue("wait")
    good, bad = q.prepare_kernel(plus(1.0)), q.prepare_kernel(plus(5.0))
    q.poison.add(bad.source.key())
    x = q.malloc(4 * N, np.zeros(N, np.float32).tobytes())
    a, b = q.malloc(4 * N), q.malloc(4 * N)
    line = here() + 1
    q.dispatch(bad, [x], [b])
    q.flush()  # submitted: the device has not said anything yet
    q.dispatch(good, [x], [a])  # recorded in the next batch
    with pytest.raises(DeviceError) as info:
        q.finish()
    msg = str(info.value)
    assert "reported an error running" in msg and "out-of-bounds" in msg
    assert info.value.source is bad.source and f"{__file__}:{line}" in msg
    q.finish()  # the failed batch was retired: the next call does not fail on it again
    np.testing.assert_array_equal(values(q, a), np.ones(N))


def test_an_error_that_fits_no_single_dispatch_lists_the_batch() -> None:
    q = PickyQueue("wait")
    exes = [q.prepare_kernel(plus(float(c))) for c in range(1, 4)]
    q.poison.add(exes[1].source.key())
    x, y = q.malloc(4 * N), q.malloc(4 * N)
    lines = []
    for exe in exes:
        lines.append(here() + 1)
        q.dispatch(exe, [x], [y])
    with pytest.raises(DeviceError) as info:
        q.finish()
    msg = str(info.value)
    assert info.value.source is None and "a batch of 3 dispatches" in msg
    for exe, line in zip(exes, lines):
        assert f"{tracing.describe(exe.source)} (1x, first dispatched at {__file__}:{line})" in msg


@pytest.fixture
def sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("JAXCORE_SYNC", "1")
    settings.reload()
    yield
    monkeypatch.undo()  # the environment as it was, then the settings read from it
    settings.reload()


def test_sync_raises_at_the_dispatch_that_causes_the_error(sync: None, fast: bool) -> None:
    assert settings.current().sync
    q = PickyQueue("submit", fast)
    good, bad = q.prepare_kernel(plus(1.0)), q.prepare_kernel(plus(2.0))
    q.poison.add(bad.source.key())
    x, a, b = q.malloc(4 * N, bytes(4 * N)), q.malloc(4 * N), q.malloc(4 * N)
    for _ in range(2):
        q.dispatch(good, [x], [a])
        assert q.pending_dispatches() == 0 and not q.pending  # it has run
        with pytest.raises(DeviceError) as info:
            line = here() + 1
            q.dispatch(bad, [x], [b])
        msg = str(info.value)
        assert f"{__file__}:{line}" in msg and "(first dispatch)" not in msg and "JAXCORE_SYNC" not in msg
        assert info.value.source is bad.source


def test_sync_costs_nothing_when_off() -> None:
    assert not settings.current().sync
    q = PickyQueue()
    assert "dispatch" not in q.__dict__ and type(q).dispatch is QueuedBackend.dispatch


def test_a_dropped_executable_is_freed_once_its_batch_has_run(fast: bool) -> None:
    """The fast path's facts live on the executable (a table of them in the backend kept every
    executable ever dispatched alive, with what its recorder holds: a GPU pipeline)."""
    q = PickyQueue("submit", fast)
    x, y = q.malloc(4 * N), q.malloc(4 * N)
    refs = []
    for c in range(20):
        exe = q.prepare_kernel(plus(float(c)))
        q.dispatch(exe, [x], [y])
        q.dispatch(exe, [x], [y])
        refs.append(weakref.ref(exe))
    del exe
    assert (refs[-1]() in q._fast) and (q._fast.get(refs[-1]()) is not None) == fast
    q.finish()
    q._kernel_cache.clear()
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_the_site_is_the_first_frame_outside_jaxcore() -> None:
    """A dispatch made by jaxcore's own helpers (here the conformance harness) is named by the line of
    the code that called them, not by a line inside jaxcore."""
    from jaxcore.conformance import harness

    q = PickyQueue("submit")
    kernel = plus(7.0)
    q.poison.add(kernel.key())
    with pytest.raises(DeviceError) as info:
        line = here() + 1
        harness.run_kernel(q, kernel, [np.zeros(N, np.float32)])
    assert info.value.site == f"{__file__}:{line}" and info.value.source is not None
