"""The Backend protocol, the base class that owns what every backend shares, and its errors.

A plugin subclasses `BaseBackend` and supplies only what is device-specific (tinygrad's
Allocator is the model): raw storage (`_alloc`, `_free`, `_copyin`, `_copyout`), compiling
(`_compile_kernel`, `_compile_routine`), running (`_run`) and waiting (`_synchronize`).
The base class owns slots and refcounts, argument validation, executable caches, the async
defaults and tracing, so that no plugin writes them again.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from jaxcore import tracing
from jaxcore.alu import AluGroup
from jaxcore.dtype import DType, byte_width
from jaxcore.kernel import Kernel
from jaxcore.routine import Routine

if TYPE_CHECKING:
    from jaxcore.alu import AluOp
    from jaxcore.routine import Routines

Slot = int
T = TypeVar("T")

# The core API version plugins declare they were built for (bumped on breaking changes).
API_VERSION = 1


class SlotError(Exception):
    """A slot that was never allocated, or was freed (dec_ref to zero), was used."""

    def __init__(self, slot: object, why: str = "") -> None:
        self.slot = slot
        msg = f"Used a buffer that is invalid or already freed: {slot}"
        super().__init__(f"{msg} ({why})" if why else msg)


class UnsupportedOpError(Exception):
    """Raised at prepare time when a backend cannot compute an op or dtype."""

    def __init__(self, op: AluOp | str | None, dtype: DType | str, device: str, arg: Any = None) -> None:
        self.op, self.dtype, self.device, self.arg = op, dtype, device, arg
        msg = f"{op or ''}<{dtype}> not supported in {device} backend"
        if arg is not None:
            msg += f" with arg {json.dumps(arg, default=str)}"
        super().__init__(msg)


class UnsupportedRoutineError(Exception):
    """Raised at prepare time when a backend cannot run a routine."""

    def __init__(self, name: str, device: str) -> None:
        self.name, self.device = name, device
        super().__init__(f"routine '{name}' is not supported in {device} backend")


@dataclass(frozen=True)
class Executable(Generic[T]):
    """A prepared kernel or routine: what it computes (`source`) and the backend's compiled form."""

    source: Kernel | Routine
    data: T

    @cached_property
    def _io_bytes(self) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
        """(bytes per input, bytes per output, whether inputs must be exactly that size): what every
        dispatch checks, worked out on the first. A kernel's inputs need only hold what it reads."""
        src = self.source
        if isinstance(src, Kernel):
            return tuple(src.input_bytes()), (src.bytes,), False
        t = src.type
        need_in = tuple(_nbytes(s, d) for s, d in zip(t.input_shapes, t.input_dtypes))
        need_out = tuple(_nbytes(s, d) for s, d in zip(t.output_shapes, t.output_dtypes))
        return need_in, need_out, True


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares it can do; tests, the suite and the CLI read this, never a device name.

    `unsupported_ops` lists (op, dtype) pairs that raise `UnsupportedOpError` although the dtype
    is otherwise supported (a comparison by its operands' dtype; a routine name by any of its
    input or output dtypes). `tolerances` may loosen the suite's default float tolerances per
    (op name, dtype) as (rtol, atol); an honest backend keeps it small and documented.
    `reference` marks a backend whose results define the contract (the differential tests
    compare other devices against it).
    """

    dtypes: frozenset[DType]
    routines: frozenset[Routines]
    max_args: int
    unsupported_ops: frozenset[tuple[AluOp | Routines, DType]] = frozenset()
    max_buffer_bytes: int = 2**31
    device_timestamps: bool = False
    tolerances: tuple[tuple[str, DType, float, float], ...] = ()
    reference: bool = False
    description: str = ""

    def supports_dtype(self, dtype: DType) -> bool:
        return dtype in self.dtypes

    def supports_op(self, op: AluOp, dtype: DType) -> bool:
        return dtype in self.dtypes and (op, dtype) not in self.unsupported_ops


@runtime_checkable
class Backend(Protocol):
    """What the frontend, the suite and the CLI need from a device."""

    name: str
    capabilities: Capabilities

    @property
    def max_args(self) -> int: ...

    def malloc(self, size: int, initial_data: bytes | bytearray | memoryview | None = None) -> Slot: ...
    def inc_ref(self, slot: Slot) -> None: ...
    def dec_ref(self, slot: Slot) -> None: ...
    def read(self, slot: Slot, start: int = 0, count: int | None = None) -> bytes: ...
    def prepare_kernel(self, kernel: Kernel) -> Executable: ...
    def prepare_routine(self, routine: Routine) -> Executable: ...
    def dispatch(self, exe: Executable, inputs: list[Slot], outputs: list[Slot]) -> None: ...
    async def read_async(self, slot: Slot, start: int = 0, count: int | None = None) -> bytes: ...
    async def prepare_kernel_async(self, kernel: Kernel) -> Executable: ...
    async def prepare_routine_async(self, routine: Routine) -> Executable: ...


@dataclass
class _Buffer:
    handle: Any
    size: int
    refs: int = 1


@dataclass
class BackendStats:
    """Counters a backend keeps for tests and the CLI (cache behaviour, traffic)."""

    kernel_compiles: int = 0
    kernel_cache_hits: int = 0
    dispatches: int = 0
    extra: dict[str, int] = field(default_factory=dict)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking work off the event loop; asyncio is imported here, where only async callers pay."""
    import asyncio

    return await asyncio.to_thread(fn, *args)


class BaseBackend:
    """Slot table, validation, caching, async defaults and tracing; subclasses supply the device."""

    name: str = "base"
    capabilities: Capabilities

    def __init__(self) -> None:
        self._buffers: dict[Slot, _Buffer] = {}
        self._next_slot: Slot = 1
        self._lock = threading.RLock()
        self._kernel_cache: dict[Any, Executable] = {}
        self._routine_cache: dict[Any, Executable] = {}
        self._compile_locks: dict[Any, threading.Lock] = {}
        self.stats = BackendStats()

    # ---- device-specific hooks -------------------------------------------------------------
    def _alloc(self, size: int) -> Any:
        raise NotImplementedError

    def _free(self, handle: Any) -> None:
        raise NotImplementedError

    def _copyin(self, handle: Any, data: memoryview) -> None:
        raise NotImplementedError

    def _copyout(self, handle: Any, start: int, count: int) -> bytes:
        raise NotImplementedError

    def _compile_kernel(self, kernel: Kernel) -> Any:
        """Compile a kernel; raise `UnsupportedOpError` for anything the device cannot do."""
        raise NotImplementedError

    def _compile_routine(self, routine: Routine) -> Any:
        raise UnsupportedRoutineError(routine.name, self.name)

    def _run(self, exe: Executable, inputs: list[Any], outputs: list[Any]) -> None:
        raise NotImplementedError

    def _synchronize(self, handle: Any | None = None) -> None:
        """Wait until pending work that writes `handle` (or all work) is done. Sync devices need nothing."""

    def _release(self, handle: Any) -> None:
        """Give back the storage of a slot whose last reference went. By default wait for pending work
        on it, then free; a queued device (jaxcore.queue) defers the free instead, so it never stalls."""
        self._synchronize(handle)
        self._free(handle)

    # ---- slots ---------------------------------------------------------------------------
    @property
    def max_args(self) -> int:
        return self.capabilities.max_args

    def malloc(self, size: int, initial_data: bytes | bytearray | memoryview | None = None) -> Slot:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"malloc size must be a non-negative int, got {size!r}")
        if size > self.capabilities.max_buffer_bytes:
            raise MemoryError(
                f"{self.name}: buffer of {size} bytes exceeds the device limit of "
                f"{self.capabilities.max_buffer_bytes} bytes"
            )
        data = None
        if initial_data is not None:
            data = memoryview(initial_data).cast("B")
            if data.nbytes != size:
                raise ValueError(
                    f"initial_data size does not match buffer size: got {data.nbytes} bytes, expected {size}"
                )
        handle = self._alloc(size)
        if data is not None and size:
            self._copyin(handle, data)
        with self._lock:
            slot = self._next_slot
            self._next_slot += 1
            self._buffers[slot] = _Buffer(handle, size)
        return slot

    def _buffer(self, slot: Slot) -> _Buffer:
        buf = self._buffers.get(slot) if isinstance(slot, int) else None
        if buf is None:
            why = "freed" if isinstance(slot, int) and 0 < slot < self._next_slot else "never allocated"
            raise SlotError(slot, why)
        return buf

    def inc_ref(self, slot: Slot) -> None:
        with self._lock:
            self._buffer(slot).refs += 1

    def dec_ref(self, slot: Slot) -> None:
        with self._lock:
            buf = self._buffer(slot)
            buf.refs -= 1
            if buf.refs > 0:
                return
            del self._buffers[slot]
        self._release(buf.handle)

    def size_of(self, slot: Slot) -> int:
        """The byte size of a live slot."""
        return self._buffer(slot).size

    def live_slots(self) -> int:
        return len(self._buffers)

    def read(self, slot: Slot, start: int = 0, count: int | None = None) -> bytes:
        buf = self._buffer(slot)
        if count is None:
            count = buf.size - start
        if start < 0 or count < 0 or start + count > buf.size:
            raise ValueError(
                f"read of bytes [{start}, {start + count}) is outside slot {slot} of {buf.size} bytes"
            )
        self._synchronize(buf.handle)
        return bytes(self._copyout(buf.handle, start, count)) if count else b""

    # ---- prepare -------------------------------------------------------------------------
    def _cached(self, cache: dict[Any, Executable], key: Any, build: Callable[[], Executable]) -> Executable:
        """One executable per key, even when several threads prepare the same thing at once."""
        exe = cache.get(key)
        if exe is not None:
            return exe
        with self._lock:
            key_lock = self._compile_locks.setdefault(key, threading.Lock())
        with key_lock:
            exe = cache.get(key)
            if exe is None:
                exe = build()
                cache[key] = exe
        with self._lock:
            self._compile_locks.pop(key, None)
        return exe

    def prepare_kernel(self, kernel: Kernel) -> Executable:
        if not isinstance(kernel, Kernel):
            raise TypeError(f"prepare_kernel takes a Kernel, got {type(kernel).__name__}")
        key = kernel.key()
        if key in self._kernel_cache:
            self.stats.kernel_cache_hits += 1

        def build() -> Executable:
            if kernel.nargs > self.max_args:
                raise ValueError(
                    f"kernel has {kernel.nargs} inputs; {self.name} takes at most {self.max_args}"
                )
            self._check_ops(kernel)
            exe = Executable(kernel, self._compile_kernel(kernel))
            self.stats.kernel_compiles += 1
            return exe

        return self._cached(self._kernel_cache, key, build)

    def _check_ops(self, kernel: Kernel) -> None:
        """Raise UnsupportedOpError for any dtype or (op, dtype) the capabilities exclude.

        A comparison is declared by its operands' dtype, since its own dtype is always bool.
        """
        caps = self.capabilities
        for node in kernel.nodes():
            dtype = node.src[0].dtype if node.op in AluGroup.Compare else node.dtype
            if dtype not in caps.dtypes:
                raise UnsupportedOpError(None, dtype, self.name)
            if not caps.supports_op(node.op, dtype):
                raise UnsupportedOpError(node.op, dtype, self.name)

    def prepare_routine(self, routine: Routine) -> Executable:
        if not isinstance(routine, Routine):
            raise TypeError(f"prepare_routine takes a Routine, got {type(routine).__name__}")

        def build() -> Executable:
            caps = self.capabilities
            if routine.name not in caps.routines:
                raise UnsupportedRoutineError(routine.name, self.name)
            for dt in (*routine.type.input_dtypes, *routine.type.output_dtypes):
                if dt not in caps.dtypes or (routine.name, dt) in caps.unsupported_ops:
                    raise UnsupportedOpError(None, dt, self.name)
            return Executable(routine, self._compile_routine(routine))

        return self._cached(self._routine_cache, routine.key(), build)

    async def prepare_kernel_async(self, kernel: Kernel) -> Executable:
        return await _in_thread(self.prepare_kernel, kernel)

    async def prepare_routine_async(self, routine: Routine) -> Executable:
        return await _in_thread(self.prepare_routine, routine)

    async def read_async(self, slot: Slot, start: int = 0, count: int | None = None) -> bytes:
        return await _in_thread(self.read, slot, start, count)

    # ---- dispatch ------------------------------------------------------------------------
    def dispatch(self, exe: Executable, inputs: list[Slot], outputs: list[Slot]) -> None:
        in_handles, out_handles = self._validate_dispatch(exe, list(inputs), list(outputs))
        self.stats.dispatches += 1
        if not tracing.is_tracing():
            self._run(exe, in_handles, out_handles)
            return
        start = time.perf_counter()
        device_time = self._run(exe, in_handles, out_handles)
        end = time.perf_counter()
        tracing.record_dispatch(self.name, exe.source, start, end, device_time)

    def _validate_dispatch(
        self, exe: Executable, inputs: list[Slot], outputs: list[Slot]
    ) -> tuple[list[Any], list[Any]]:
        if not isinstance(exe, Executable):
            raise TypeError(f"dispatch takes an Executable, got {type(exe).__name__}")
        need_in, need_out, exact_in = exe._io_bytes
        if len(inputs) != len(need_in) or len(outputs) != len(need_out):
            raise ValueError(_wrong_count(exe.source, len(inputs), len(outputs)))
        with self._lock:
            in_bufs = [self._buffer(s) for s in inputs]
            out_bufs = [self._buffer(s) for s in outputs]
        for i, (buf, need) in enumerate(zip(in_bufs, need_in)):
            if buf.size < need or (exact_in and buf.size != need):
                raise ValueError(
                    f"input {i} (slot {inputs[i]}) has {buf.size} bytes; "
                    f"{'exactly' if exact_in else 'at least'} {need} are needed"
                )
        for i, (buf, need) in enumerate(zip(out_bufs, need_out)):
            if buf.size != need:
                raise ValueError(
                    f"output {i} (slot {outputs[i]}) has {buf.size} bytes; exactly {need} are needed"
                )
        return [b.handle for b in in_bufs], [b.handle for b in out_bufs]


def _wrong_count(src: Kernel | Routine, n_in: int, n_out: int) -> str:
    if isinstance(src, Kernel):
        if n_in != src.nargs:
            return f"kernel takes {src.nargs} input buffers, got {n_in}"
        return f"a kernel writes exactly 1 output buffer, got {n_out}"
    t = src.type
    return (
        f"routine {src.name} takes {len(t.input_shapes)} inputs and {len(t.output_shapes)} "
        f"outputs, got {n_in} and {n_out}"
    )


def _nbytes(shape: tuple[int, ...], dtype: DType) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * byte_width(dtype)
