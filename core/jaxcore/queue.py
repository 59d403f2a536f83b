"""Queued devices: dispatches are recorded, not run, and go to the device in batches.

A GPU pays a fixed price per submit (about 100 µs to encode, submit and wait for one dispatch),
while a dispatch recorded into an open command encoder costs a few µs. `QueuedBackend` is the
base a GPU plugin builds on: `dispatch` records into the open batch; the batch is submitted when
something must be read, when it is full (`batch_limit` dispatches), every `early_submit`
dispatches while the device has nothing left to run, or on `flush()`. Nothing the
caller does waits for the device except a read:

- `dec_ref` never stalls. The buffer goes back to the pool (jaxcore.pool) when the last batch that
  uses it has finished on the device; until then it is parked on that batch. A buffer whose last
  user is the open batch may be taken again by work recorded later in that batch (the device runs
  a batch in order), so a chain of temporaries reuses a few buffers instead of creating one each;
  a host write into such a buffer first submits the batch.
- `read` submits the open batch only when that batch writes the slot; the read itself is then
  queued behind the work already submitted (the device queue runs in order) and waits for it alone.
- Writes (`malloc` with data) go to the device queue, which runs them after the work submitted
  so far and before the next submit; so they need no wait (see above for the one exception).
- With tracing on, each dispatch returns a `tracing.LateTime`, resolved from the batch's
  timestamp queries when the batch completes (or at `stop_trace`).

A plugin supplies the device half, as hooks (it overrides no public method):

    _create_buffer(capacity) -> raw       device storage; MemoryError when the device is full
    _destroy_buffer(raw)
    _write_buffer(buf, data)              a fresh buffer; queued before the next submit
    _read_buffer(buf, start, count)       bytes, queued after submitted work, waited for
    _read_buffer_async(buf, start, count) (optional) the same, awaiting the device's map
    _open_batch() -> rec                  a command recorder for one batch
    _record(rec, exe, inputs, outputs, timed)   one dispatch; `timed` asks for timestamps
    _submit(rec) -> token                 submit the batch; the token tells when it is done
    _is_done(token) -> bool               without blocking
    _wait(token)
    _timings(token) -> [(start_s, seconds)]     per timed dispatch, after the wait (or None)
    _record_copy(rec, src, dst, nbytes)   (optional) a buffer copy in the batch, for `_copy_buffer`
    _compile_kernel_async(kernel)         (optional) `_compile_kernel` awaiting the device (pipelines)

A device error reported later than the dispatch that caused it (by `_submit`, `_wait` or
`_is_done`) is raised as a `DeviceError` naming that dispatch's kernel or routine and where it was
(first) dispatched, with the device's own exception as its cause. Each batch keeps what it recorded
(one list append per dispatch) until it has run. A batch the device rejects at `_submit` has run none
of its work (a hook contract): it is replayed one dispatch per batch, in order, so that the dispatches
before the culprit run and the error names the culprit alone. `JAXCORE_SYNC=1` makes every dispatch
wait, so the error is raised by the dispatch itself.

`_record` may take scratch storage with `_temporary(nbytes)`: free again for work recorded after
it in the batch, and back in the pool once the batch has run. A subclass sets `capabilities`
before calling `QueuedBackend.__init__` (the pool is bounded by `max_buffer_bytes`).

Buffers are `QueuedBuffer`s: the pool's raw storage plus the slot's byte size and the ids of the
last batches that used and wrote it, which is all the hazard tracking there is.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

from jaxcore import tracing
from jaxcore.backend import BaseBackend, DeviceError, Executable, _Buffer
from jaxcore.kernel import Kernel
from jaxcore.pool import BufferPool


class QueuedBuffer:
    """One slot's storage: `raw` (pooled, `capacity` bytes) holding `nbytes` of data."""

    __slots__ = ("raw", "nbytes", "capacity", "used_in", "written_in", "pooled", "__weakref__")

    def __init__(self, raw: Any, nbytes: int, capacity: int, pooled: bool = True) -> None:
        self.raw, self.nbytes, self.capacity, self.pooled = raw, nbytes, capacity, pooled
        self.used_in = 0  # id of the last batch that reads or writes it (0: none)
        self.written_in = 0  # id of the last batch that writes it


FastRecord = Callable[[Any, Any, list[QueuedBuffer]], None]
# What a batch recorded, in order, for naming and replaying its work: (exe, bufs) from the fast path,
# (exe, inputs, outputs) from `_run`, (src, dst, nbytes) from `_copy_buffer`.
Op = tuple[Any, ...]


@dataclass
class _Batch:
    id: int
    rec: Any = None
    count: int = 0
    token: Any = None
    releases: list[QueuedBuffer] = field(default_factory=list)
    late: list[tracing.LateTime] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)


class QueuedBackend(BaseBackend):
    """BaseBackend with recorded dispatches, batched submits, deferred frees and a buffer pool."""

    batch_limit: int = 2048  # dispatches per batch (also bounded by a plugin's timestamp slots)
    # Every this many dispatches the open batch is submitted if the device has run all the work
    # before it, so that the device starts on a long chain while the host records the rest instead
    # of after the read (host and device time overlap, not add). It pays where a submit's fixed
    # host cost is small against what the device overlaps (lavapipe: 1,000 dependent tiny
    # dispatches 40-42 -> 36-39 µs each at 64; an H100, whose submit costs about 60 µs of host time:
    # 7.40 -> 7.71 µs at 64, 6.15 at 256). 0, the default: only full batches, reads and flush().
    early_submit: int = 0
    max_in_flight: int = 8  # submitted batches the host may run ahead of the device
    max_cached_bytes: int = 1 << 30  # freed buffers the pool keeps for reuse

    def __init__(self, cache_size: int | None = None) -> None:
        super().__init__(cache_size)
        # One lock for the slot table and the queue: the fast paths below (malloc, dispatch, dec_ref)
        # each take it once for all they touch, where two locks would need two acquisitions.
        self._qlock = self._lock
        self._next_batch = 1
        self._open: _Batch | None = None
        self._in_flight: deque[_Batch] = deque()
        self._done_through = 0  # every batch with id <= this has finished on the device
        self._recycled: dict[int, list[QueuedBuffer]] = {}  # freed, last used by the open batch
        self._scratch: list[QueuedBuffer] = []
        self._precompiled: dict[str, Any] = {}  # kernel key -> compiled ahead by prepare_kernel_async
        self._skip = _package_dir(type(self))  # frames of the plugin's own package are not call sites
        self.pool: BufferPool[Any] = BufferPool(
            self._create_buffer,
            self._destroy_buffer,
            max_cached_bytes=self.max_cached_bytes,
            limit=self.capabilities.max_buffer_bytes,
        )
        self.stats.extra.update(submits=0, flushes_for_read=0, deferred_frees=0)
        ref = weakref.ref(self)

        def finish_for_trace() -> None:  # through a weak reference: tracing must not keep us alive
            backend = ref()
            if backend is not None:
                backend.finish()

        tracing.on_flush_trace(finish_for_trace)

    # ---- device hooks (see the module docstring) -------------------------------------------
    def _create_buffer(self, capacity: int) -> Any:
        raise NotImplementedError

    def _destroy_buffer(self, raw: Any) -> None:
        raise NotImplementedError

    def _write_buffer(self, buf: QueuedBuffer, data: memoryview) -> None:
        raise NotImplementedError

    def _read_buffer(self, buf: QueuedBuffer, start: int, count: int) -> bytes:
        raise NotImplementedError

    async def _read_buffer_async(self, buf: QueuedBuffer, start: int, count: int) -> bytes:
        from jaxcore.backend import _in_thread

        return await _in_thread(self._read_buffer, buf, start, count)

    def _open_batch(self) -> Any:
        raise NotImplementedError

    def _record(
        self, rec: Any, exe: Executable, inputs: list[QueuedBuffer], outputs: list[QueuedBuffer], timed: bool
    ) -> None:
        raise NotImplementedError

    def _fast_recorder(self, exe: Executable) -> FastRecord | None:
        """(optional) A function that records `exe` as `_record` would, untimed, for `exe`'s inputs
        then its one output, called as `fn(self, rec, bufs)`: made once per executable, for a
        dispatch path without per-call work. None: every dispatch of `exe` goes through `_record`."""
        return None

    def _submit(self, rec: Any) -> Any:
        raise NotImplementedError

    def _is_done(self, token: Any) -> bool:
        raise NotImplementedError

    def _wait(self, token: Any) -> None:
        raise NotImplementedError

    def _timings(self, token: Any) -> list[tuple[float | None, float]] | None:
        return None

    def _zero_buffer(self) -> QueuedBuffer:
        """The storage behind every 0-byte slot (a binding cannot be empty): made once, never pooled."""
        zero = self.__dict__.get("_zero")
        if zero is None:
            zero = self.__dict__["_zero"] = QueuedBuffer(self._create_buffer(16), 0, 16, pooled=False)
        return zero

    @property
    def _fast(self) -> _FastView:
        """What the dispatch fast path learned, by executable (a view: the facts live on each
        Executable, so that a dropped one is freed with what its recorder holds)."""
        return _FastView(self)

    # ---- fast paths of the public methods ----------------------------------------------------
    # Each takes the one lock once and does what BaseBackend's method and the hooks below would do
    # together; anything unusual (numpy-integer slots, data to write, a bad argument, tracing) goes
    # to BaseBackend's method, which makes every check and raises every error as before.
    def malloc(self, size: SupportsIndex, initial_data: bytes | bytearray | memoryview | None = None) -> int:
        if (
            initial_data is not None
            or type(size) is not int
            or size <= 0
            or size > self.capabilities.max_buffer_bytes
        ):
            return super().malloc(size, initial_data)
        # No lock when a buffer freed in the open batch is there: `list.pop` is atomic, so of the
        # threads popping one list (malloc here, `_alloc` and `flush` under the lock) exactly one gets
        # each buffer; if the batch was submitted meanwhile, the buffer is still ours to reuse (the
        # device runs batches in order). The slot id and the slot table store are atomic too.
        pool = self.pool
        cap = pool._caps.get(size) or pool.capacity(size)  # the memo first: a method call costs
        reuse = self._recycled.get(cap)
        handle: QueuedBuffer | None = None
        if reuse:
            try:
                handle = reuse.pop()
            except IndexError:  # another thread took the last one
                pass
        if handle is None:
            handle = self._alloc(size)
        else:
            handle.nbytes, handle.written_in = size, 0
        slot = next(self._slot_ids)
        self._buffers[slot] = _Buffer(handle, size)
        return slot

    def dec_ref(self, slot: SupportsIndex) -> None:
        if type(slot) is not int:
            return super().dec_ref(slot)
        with self._lock:
            buf = self._buffers.get(slot)
            if buf is None:
                buf = self._bad_slot(slot)  # raises
            buf.refs -= 1
            if buf.refs > 0:
                return
            del self._buffers[slot]
            handle = buf.handle
            batch = self._open
            if batch is not None and handle.used_in == batch.id and handle.pooled:  # as in `_release`
                reuse = self._recycled.get(handle.capacity)
                if reuse is None:
                    self._recycled[handle.capacity] = [handle]
                else:
                    reuse.append(handle)
                return
            self._release(handle)

    def dispatch(
        self, exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
    ) -> None:
        """BaseBackend's dispatch, with a fast path for an executable that has dispatched here before.

        Facts cached per executable make some checks redundant, and only those are skipped: it was
        made by this backend (an Executable is frozen and its owner reference cannot change to
        another live backend), its byte sizes, and that the plugin can record it without `_record`.
        Counts, slots, sizes, distinct outputs and aliasing are checked on every call."""
        fast: Any = exe._fast_path if type(exe) is Executable else False
        if not fast or tracing._active:
            if fast is None and exe._site is None and exe.prepared_by(self):  # before the dispatch,
                object.__setattr__(exe, "_site", tracing.call_site(self._skip))  # which may submit and fail
            super().dispatch(exe, inputs, outputs)
            if fast is None:  # its first dispatch here, and it passed every check: this backend made it
                self._learn(exe)
            return
        need_in, need_out, exact_in, record = fast
        if (
            (type(inputs) is not list and type(inputs) is not tuple)
            or (type(outputs) is not list and type(outputs) is not tuple)
            or len(inputs) != len(need_in)
            or len(outputs) != 1
        ):
            return super().dispatch(exe, inputs, outputs)
        get = self._buffers.get
        # No lock for the lookups, as in BaseBackend._validate_dispatch: each is one atomic dict read.
        out = outputs[0]
        obuf = get(out) if type(out) is int else None
        if obuf is None or obuf.size != need_out or out in inputs:  # aliased: the general path copies
            return super().dispatch(exe, inputs, outputs)
        handle = obuf.handle
        if len(need_in) == 1:  # the usual elementwise kernel: no loop
            slot, need = inputs[0], need_in[0]
            buf = get(slot) if type(slot) is int else None
            if buf is None or buf.size < need or (exact_in and buf.size != need):
                return super().dispatch(exe, inputs, outputs)
            first = buf.handle
            bufs = [first, handle]
            with self._lock:
                batch = self._open
                if batch is None:
                    batch = self._open = _Batch(self._next_batch, self._open_batch())
                    self._next_batch += 1
                record(self, batch.rec, bufs)
                batch.ops.append((exe, bufs))
                first.used_in = handle.used_in = handle.written_in = batch.id
                batch.count += 1
                if self._submit_due(batch.count):
                    self.flush()
            return
        else:
            bufs = []
            for slot, need in zip(inputs, need_in):
                buf = get(slot) if type(slot) is int else None
                if buf is None or buf.size < need or (exact_in and buf.size != need):
                    return super().dispatch(exe, inputs, outputs)
                bufs.append(buf.handle)
            bufs.append(handle)
        with self._lock:
            batch = self._open
            if batch is None:
                batch = self._open = _Batch(self._next_batch, self._open_batch())
                self._next_batch += 1
            record(self, batch.rec, bufs)
            batch.ops.append((exe, bufs))
            bid = batch.id
            for b in bufs:
                b.used_in = bid
            handle.written_in = bid
            batch.count += 1
            if self._submit_due(batch.count):
                self.flush()

    def _submit_due(self, count: int) -> bool:
        """Whether an open batch of `count` dispatches goes to the device now: it is full, or
        `count` is a multiple of `early_submit` and every batch submitted before has run. Call
        with the lock held."""
        if count >= self.batch_limit:
            return True
        early = self.early_submit
        if not early or count % early:
            return False
        return not self._in_flight or self._is_done(self._in_flight[-1].token)

    def _learn(self, exe: Executable) -> None:
        """Keep on `exe` what `dispatch`'s fast path needs (False: none), after a dispatch of it
        succeeded here (so this backend made it)."""
        if not exe.prepared_by(self):
            return
        fast: Any = False
        need_in, need_out, exact_in = exe._io_bytes
        record = self._fast_recorder(exe) if len(need_out) == 1 else None
        if record is not None:
            fast = (need_in, need_out[0], exact_in, record)
        object.__setattr__(exe, "_fast_path", fast)

    # ---- BaseBackend storage hooks ---------------------------------------------------------
    def _alloc(self, size: int) -> QueuedBuffer:
        if size == 0:
            return self._zero_buffer()
        with self._qlock:
            cap = self.pool.capacity(size)
            reuse = self._recycled.get(cap)
            if reuse:  # freed earlier in the open batch: later work in the same batch may reuse it
                try:
                    buf = reuse.pop()  # no slot refers to it any more: the object itself is reused
                except IndexError:  # a lock-free malloc took the last one
                    pass
                else:
                    buf.nbytes, buf.written_in = size, 0
                    return buf
            self._retire()
            raw, cap = self.pool.alloc(size, on_oom=self._drain)
        return QueuedBuffer(raw, size, cap)

    def _free(self, handle: QueuedBuffer) -> None:
        if handle.pooled:
            self.pool.free(handle.raw, handle.capacity)

    def _release(self, handle: QueuedBuffer) -> None:
        """Deferred free: park the buffer on the last batch that uses it, if that is not done yet."""
        if not handle.pooled:
            return
        with self._qlock:
            used = handle.used_in
            if self._open is not None and used == self._open.id:
                # The open batch is its last user: dispatches recorded after this point run after that
                # use, so they may take it (a write into it from the host would not, see _copyin).
                self._recycled.setdefault(handle.capacity, []).append(handle)
                return
            if used > self._done_through:
                batch = self._batch(used)
                if batch is not None:
                    batch.releases.append(handle)
                    self.stats.extra["deferred_frees"] += 1
                    return
            self._free(handle)

    def _copyin(self, handle: QueuedBuffer, data: memoryview) -> None:
        with self._qlock:
            if self._open is not None and handle.used_in == self._open.id:
                # Storage reused within the open batch: a host write runs before the batch's work,
                # so that work must be submitted first.
                self.flush()
        self._write_buffer(handle, data)

    def _synchronize(self, handle: QueuedBuffer | None = None) -> None:
        """Make pending writes to `handle` visible to a read queued next (or finish everything)."""
        if handle is None:
            self.finish()
            return
        with self._qlock:
            batch = self._open
            if batch is not None and handle.written_in == batch.id:
                self.stats.extra["flushes_for_read"] += 1
                self.flush()

    def _copyout(self, handle: QueuedBuffer, start: int, count: int) -> bytes:
        data = self._read_buffer(handle, start, count)
        with self._qlock:
            self._retire()
        return data

    async def read_async(
        self, slot: SupportsIndex, start: SupportsIndex = 0, count: SupportsIndex | None = None
    ) -> bytes:
        buf, begin, n = self._read_range(slot, start, count)  # the same checks and errors as `read`
        if not n:
            return b""
        self._synchronize(buf.handle)
        return bytes(await self._read_buffer_async(buf.handle, begin, n))

    # ---- async compiling -----------------------------------------------------------------
    async def _compile_kernel_async(self, kernel: Kernel) -> Any:
        """The compiled form of `kernel`, awaiting the device; the default compiles in a thread."""
        from jaxcore.backend import _in_thread

        return await _in_thread(self._compile_kernel, kernel)

    async def prepare_kernel_async(self, kernel: Kernel) -> Executable:
        """Compile through `_compile_kernel_async` (the event loop runs while the device builds
        pipelines), then prepare as usual: the executable, its cache and its checks stay the base's."""
        from jaxcore.backend import _in_thread

        live = kernel.live() if isinstance(kernel, Kernel) else None  # what prepare_kernel compiles
        # a kernel over the device's budget is prepared as parts: compiling it whole ahead would
        # take the time that splitting it saves
        ahead = live is not None and kernel.key() not in self._kernel_cache and not self._over_budget(live)
        if live is not None and ahead and live.key() not in self._precompiled:
            try:
                self._precompiled[live.key()] = await self._compile_kernel_async(live)
            except Exception:
                pass  # prepare_kernel below raises the error in its usual place and form
        try:
            return await _in_thread(self.prepare_kernel, kernel)
        finally:
            if live is not None:
                self._precompiled.pop(live.key(), None)

    def _take_precompiled(self, kernel: Kernel) -> Any | None:
        """What `prepare_kernel_async` compiled ahead for `kernel`, if anything (for `_compile_kernel`)."""
        return self._precompiled.pop(kernel.key(), None)

    # ---- recording -----------------------------------------------------------------------
    def _run(
        self, exe: Executable, inputs: list[QueuedBuffer], outputs: list[QueuedBuffer]
    ) -> tracing.LateTime | None:
        timed = tracing.is_tracing() and self.capabilities.device_timestamps
        with self._qlock:
            batch = self._open
            if batch is None:
                batch = self._open = _Batch(self._next_batch, self._open_batch())
                self._next_batch += 1
            self._record(batch.rec, exe, inputs, outputs, timed)
            batch.ops.append((exe, inputs, outputs))
            while self._scratch:
                self._release(self._scratch.pop())
            bid = batch.id
            for b in inputs:
                b.used_in = bid
            for b in outputs:
                b.used_in = b.written_in = bid
            batch.count += 1
            late = None
            if timed:
                late = tracing.LateTime()
                batch.late.append(late)
            if self._submit_due(batch.count):
                self.flush()
        return late

    def _temporary(self, nbytes: int) -> QueuedBuffer:
        """Scratch storage for the dispatch being recorded (call from `_record`): from the pool, and
        back to it when the open batch has run."""
        with self._qlock:
            buf = self._alloc(nbytes)
            if self._open is not None:
                buf.used_in = buf.written_in = self._open.id
            self._scratch.append(buf)  # released when the dispatch is recorded
            return buf

    def _copy_buffer(self, src: QueuedBuffer, dst: QueuedBuffer, nbytes: int) -> None:
        """Record a device copy of `nbytes` from `src` to `dst` in the open batch (aliasing support)."""
        with self._qlock:
            batch = self._open
            if batch is None:
                batch = self._open = _Batch(self._next_batch, self._open_batch())
                self._next_batch += 1
            self._record_copy(batch.rec, src, dst, nbytes)
            batch.ops.append((src, dst, nbytes))
            src.used_in = batch.id
            dst.used_in = dst.written_in = batch.id

    def _record_copy(self, rec: Any, src: QueuedBuffer, dst: QueuedBuffer, nbytes: int) -> None:
        raise NotImplementedError

    def pending_dispatches(self) -> int:
        """Dispatches recorded but not yet submitted."""
        return self._open.count if self._open is not None else 0

    def flush(self) -> None:
        """Submit the open batch (if any); returns without waiting for the device."""
        with self._qlock:
            batch, self._open = self._open, None
            if batch is None:
                return
            recycled, self._recycled = self._recycled, {}
            for bufs in recycled.values():
                while bufs:  # pop, not extend: a lock-free malloc may be popping these lists too
                    try:
                        batch.releases.append(bufs.pop())
                    except IndexError:
                        break
            try:
                batch.token = self._submit(batch.rec)
            except Exception as exc:
                batch.rec = None
                raise self._rejected(batch, exc) from exc
            batch.rec = None
            self.stats.extra["submits"] += 1
            self._in_flight.append(batch)
            self._retire()
            while len(self._in_flight) > self.max_in_flight:
                self._wait_for([self._in_flight[0]])
                self._retire()

    def finish(self) -> None:
        """Submit everything and wait until the device has run it (buffers return to the pool)."""
        with self._qlock:
            self.flush()
            self._drain()

    def _drain(self) -> None:
        """Wait for every submitted batch and retire it."""
        with self._qlock:
            if self._open is not None and self._open.count:
                self.flush()
            while self._in_flight:  # in order, so that a device error is the first failed batch's
                head = self._in_flight[0]
                self._wait_for([head])
                self._retire(through=head.id)

    def _retire(self, through: int = 0) -> None:
        """Retire finished batches in order (those up to id `through` are known to be finished):
        resolve their times, return their parked buffers."""
        while self._in_flight:
            batch = self._in_flight[0]
            try:
                if batch.id > through and not self._is_done(batch.token):
                    return
                if batch.late:
                    self._wait(batch.token)
                    times = self._timings(batch.token) or []
                    for late, (start, seconds) in zip(batch.late, times):
                        late.resolve(seconds, start)
            except Exception as exc:
                raise self._failed([batch], exc) from exc
            self._in_flight.popleft()
            self._done_through = batch.id
            for buf in batch.releases:
                self._free(buf)

    def _batch(self, bid: int) -> _Batch | None:
        if self._open is not None and self._open.id == bid:
            return self._open
        for batch in self._in_flight:
            if batch.id == bid:
                return batch
        return None

    # ---- device errors -------------------------------------------------------------------
    def _wait_for(self, batches: list[_Batch]) -> None:
        """Wait for the last of `batches`, the in-flight ones up to it (the device runs them in order)."""
        try:
            self._wait(batches[-1].token)
        except Exception as exc:
            raise self._failed(batches, exc) from exc

    def _failed(self, batches: list[_Batch], exc: Exception) -> DeviceError:
        """The error for in-flight batches (a prefix of them) whose wait failed. They are retired: the
        device has given its verdict on them, and a later call must not fail on them again."""
        for batch in batches:
            self._in_flight.popleft()
            self._done_through = batch.id
            for buf in batch.releases:
                self._free(buf)
        ops = [op for batch in batches for op in batch.ops]
        return self._device_error(exc, ops, 0 if len(ops) == 1 else None, "reported an error running")

    def _rejected(self, batch: _Batch, exc: Exception) -> DeviceError:
        """The error for a batch the device refused at `_submit`, which ran none of it: its work is
        replayed one dispatch per batch, in order, until the device refuses one alone (the culprit;
        the dispatches before it have run, those after it do not)."""
        ops, culprit, error = batch.ops, None, exc
        if len(ops) == 1:
            culprit = 0
        else:
            for i, op in enumerate(ops):
                alone = self._replay(op)
                if alone is not None:
                    culprit, error = i, alone
                    break
        for buf in batch.releases:  # nothing of the batch is pending on the device
            self._free(buf)
        return self._device_error(error, ops, culprit, "rejected")

    def _replay(self, op: Op) -> Exception | None:
        """Record `op` in a batch of its own, submit it and wait: the device's error, if any."""
        first = op[0]
        rec = self._open_batch()
        try:
            if type(first) is QueuedBuffer:
                self._record_copy(rec, first, op[1], op[2])
            elif len(op) == 2:
                first._fast_path[3](self, rec, op[1])
            else:
                self._record(rec, first, op[1], op[2], False)
            self._wait(self._submit(rec))
        except Exception as exc:
            return exc
        finally:
            while self._scratch:
                self._release(self._scratch.pop())
        return None

    def _device_error(self, exc: Exception, ops: list[Op], culprit: int | None, verb: str) -> DeviceError:
        """A DeviceError naming the dispatch `ops[culprit]` (or, when the device's report fits no one
        dispatch, every executable in `ops`) and where it was dispatched."""
        why = f"{type(exc).__name__}: {exc}"
        hint = "" if self._sync else " (JAXCORE_SYNC=1 raises a device error at the dispatch that causes it)"
        exes = [op[0] for op in ops if type(op[0]) is not QueuedBuffer]
        # the parts of a kernel split within Capabilities.max_kernel_cost stand for it: its first part
        first: dict[int, Executable] = {}
        exes = [e if e._part_of is None else first.setdefault(id(e._part_of), e) for e in exes]
        if culprit is not None and type(ops[culprit][0]) is not QueuedBuffer:
            exe: Executable = ops[culprit][0]
            if exe._part_of is not None:
                exe = first.get(id(exe._part_of), exe)
            site = tracing.call_site(self._skip) if self._sync else exe._site
            where = f"dispatched at {site or 'an unknown place'}" + (
                "" if self._sync else " (first dispatch)"
            )
            msg = f"{self.name}: the device {verb} {tracing.describe(_named(exe))}, {where}: {why}"
            later = len(ops) - culprit - 1
            if later:
                msg += f". The {later} dispatch{'es' if later > 1 else ''} recorded after it did not run"
            return DeviceError(msg + hint, self.name, _named(exe), site)
        unique = list(dict.fromkeys(exes))  # Executables hash by identity
        if len(unique) == 1:
            exe = unique[0]
            msg = (
                f"{self.name}: the device {verb} a batch of {len(ops)} dispatches of "
                f"{tracing.describe(_named(exe))}, first dispatched at {exe._site or 'an unknown place'}: "
                f"{why}"
            )
            return DeviceError(msg + hint, self.name, _named(exe), exe._site)
        lines = [
            f"\n  {tracing.describe(_named(e))} ({exes.count(e)}x, first dispatched at {e._site})"
            for e in unique[:_NAMED]
        ]
        more = f"\n  and {len(unique) - _NAMED} more" if len(unique) > _NAMED else ""
        msg = f"{self.name}: the device {verb} a batch of {len(ops)} dispatches: {why}. The batch held:"
        return DeviceError(msg + "".join(lines) + more + "\n" + hint.strip(), self.name)


_NAMED = 8  # executables an error lists when the device's report fits no single dispatch


def _named(exe: Executable) -> Kernel | Any:
    """What an error names for `exe`: its source, or the kernel it is a part of."""
    return exe._part_of or exe.source


class _FastView:
    """`QueuedBackend._fast`: what the fast path learned for an executable of this backend (None: no
    fast path), read from the executable itself; `in` says whether it was learned at all."""

    def __init__(self, backend: QueuedBackend) -> None:
        self._backend = backend

    def _learned(self, exe: object) -> Any:
        if type(exe) is Executable and exe.prepared_by(self._backend):
            return exe._fast_path
        return None

    def get(self, exe: object, default: Any = None) -> Any:
        fast = self._learned(exe)
        return default if fast is None else (fast or None)

    def __contains__(self, exe: object) -> bool:
        return self._learned(exe) is not None


def _package_dir(cls: type) -> tuple[str, ...]:
    """The folder of the package that defines `cls`: a plugin's own frames are not its callers' call
    sites. None for a class of a top-level module (a script or a test)."""
    top, _, rest = cls.__module__.partition(".")
    path = getattr(sys.modules.get(top), "__file__", None) if rest else None
    return (os.path.dirname(os.path.abspath(path)) + os.sep,) if path else ()
