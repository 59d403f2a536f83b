"""The Backend protocol, the base class that owns what every backend shares, and its errors.

A plugin subclasses `BaseBackend` and supplies only what is device-specific (tinygrad's
Allocator is the model): raw storage (`_alloc`, `_free`, `_copyin`, `_copyout`), compiling
(`_compile_kernel`, `_compile_routine`), running (`_run`) and waiting (`_synchronize`).
The base class owns slots and refcounts, argument validation, executable caches, the async
defaults and tracing, so that no plugin writes them again.
"""

from __future__ import annotations

import itertools
import json
import operator
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import InitVar, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Protocol, SupportsIndex, TypeVar, runtime_checkable

from jaxcore import settings, split, tracing
from jaxcore.alu import AluExp, AluGroup, AluOp
from jaxcore.canonical import COMPOSED_ROUTINES, canonical_chain, composed_chain, view_bytes
from jaxcore.dtype import DType, byte_width
from jaxcore.kernel import Kernel
from jaxcore.routine import Routine

if TYPE_CHECKING:
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


class DeviceError(RuntimeError):
    """A device error reported later than the dispatch that caused it (at a submit, a wait or a read
    of a queued device), naming that dispatch: `source` is its Kernel or Routine (None when the
    device's report fits no single dispatch), `site` where it was dispatched ("file:line", the first
    dispatch of that executable unless `JAXCORE_SYNC=1`), `device` the device's name. The device's
    own exception is the `__cause__`. With `JAXCORE_SYNC=1` every dispatch waits, so the error is
    raised by the dispatch that causes it."""

    def __init__(
        self, message: str, device: str, source: Kernel | Routine | None = None, site: str | None = None
    ) -> None:
        super().__init__(message)
        self.device, self.source, self.site = device, source, site


# Only `BaseBackend` holds this: an Executable cannot be made (or `dataclasses.replace`d) with a
# `source` that its compiled `data` was not built from, or without the backend that built it.
_PREPARED = object()


@dataclass(frozen=True, eq=False)
class Executable(Generic[T]):
    """A prepared kernel or routine: what it computes (`source`) and the backend's compiled form.

    Made only by `prepare_kernel`/`prepare_routine`, and bound to the backend instance that made it:
    dispatching it on another backend (even another instance of the same device) raises ValueError,
    since its compiled form refers to that backend's memory and runtime.
    """

    source: Kernel | Routine
    data: T
    owner: InitVar[BaseBackend]
    token: InitVar[object]
    backend: str = field(init=False)
    _owner: weakref.ReferenceType[BaseBackend] = field(init=False, repr=False)
    # Kept on the executable, not in a table of its backend, so that they live and die with it: where
    # it was first dispatched (for errors reported later), and what a queued device's fast path needs.
    _site: str | None = field(init=False, default=None, repr=False)
    _fast_path: Any = field(init=False, default=None, repr=False)
    # A part of a kernel split within Capabilities.max_kernel_cost: that kernel, which errors name.
    _part_of: Kernel | Routine | None = field(init=False, default=None, repr=False)

    def __post_init__(self, owner: BaseBackend, token: object) -> None:
        if token is not _PREPARED:
            raise TypeError("an Executable is made by a backend's prepare_kernel or prepare_routine")
        object.__setattr__(self, "backend", owner.name)
        object.__setattr__(self, "_owner", weakref.ref(owner))

    def prepared_by(self, backend: object) -> bool:
        """Whether `backend` (this very instance) prepared this executable."""
        return self._owner() is backend

    @property
    def runs_as_steps(self) -> bool:
        """A routine the base class runs as steps around the device's own layout (`jaxcore.canonical`):
        one dispatch of several programs, which a recorder keeps as its steps."""
        return type(self.data) is _SplitRun and not isinstance(self.source, Kernel)

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
        if src.views is not None:  # a viewed input's buffer holds what its view reads
            need_in = tuple(
                n if v is None else view_bytes(v, d) for n, v, d in zip(need_in, src.views, t.input_dtypes)
            )
        return need_in, need_out, src.views is None


@dataclass(frozen=True)
class Undeclared:
    """Why a `Capabilities` does not cover a kernel or routine: the first thing it lacks.

    `op` is None when the dtype itself is undeclared; `routine` marks a routine that is not listed.
    """

    op: AluOp | Routines | str | None
    dtype: DType | None
    reason: str
    routine: bool = False

    def error(self, device: str) -> Exception:
        """The exception `prepare_*` raises for it on `device`."""
        if self.routine:
            return UnsupportedRoutineError(str(self.op), device)
        return UnsupportedOpError(self.op, self.dtype or "?", device)


# Index arithmetic is int32, and its conditions (clamps, Where in an index) bool, on every device.
_INDEX_DTYPES = frozenset({DType.int32, DType.bool})
_INDEX_VARIABLES = frozenset({"gidx", "ridx"})
_READS = (AluOp.GlobalIndex, AluOp.GlobalView)


def _positional(kernel: Kernel) -> set[str]:
    """Keys of the int32/bool nodes computed from gidx/ridx (and constants) alone: the position."""
    pos: set[str] = set()
    for node in kernel.nodes():  # post-order: sources first
        if node.op == AluOp.Variable:
            ok = node.arg in _INDEX_VARIABLES
        elif node.op in _READS or node.op == AluOp.Const or node.dtype not in _INDEX_DTYPES:
            ok = False
        else:
            srcs = [s.key() for s in node.src]
            ok = any(k in pos for k in srcs) and all(
                k in pos or s.op == AluOp.Const for k, s in zip(srcs, node.src)
            )
        if ok:
            pos.add(node.key())
    return pos


def _index_only(kernel: Kernel) -> set[str]:
    """Keys of the nodes that are index arithmetic (see `Capabilities`): int32 or bool, not buffer
    reads, and reached only through the index operands of GlobalIndex/GlobalView or below a
    non-result node that computes from the position (gidx/ridx) alone."""
    roots = [kernel.exp] + (
        [kernel.reduction.epilogue] if kernel.reduction and kernel.reduction.epilogue else []
    )
    positional = _positional(kernel)
    value: set[str] = set()
    index: dict[str, AluExp] = {}
    stack: list[tuple[AluExp, bool]] = [(r, False) for r in roots]
    while stack:
        node, in_index = stack.pop()
        k = node.key()
        in_index = in_index or (k in positional and node not in roots)
        seen = index if in_index else value
        if k in seen:
            continue
        if in_index:
            index[k] = node
        else:
            value.add(k)
        below_is_index = in_index or node.op in _READS
        stack.extend((src, below_is_index) for src in node.src)
    return {k for k, n in index.items() if k not in value and n.dtype in _INDEX_DTYPES and n.op not in _READS}


def _is_index_variable(node: AluExp) -> bool:
    return (node.op == AluOp.Variable and node.arg in _INDEX_VARIABLES) or node.op == AluOp.Special


# Quirks with a common name: what a device's runtime does that the contract does not let a compiler
# do, which its plugin works around. A plugin may report others in the same style; the descriptions
# are what `jaxcore devices` prints beside the names.
QUIRKS: dict[str, str] = {
    "flushes-f32-subnormals": "float32 subnormal inputs and results are taken as 0 (WGSL allows it); "
    "float32 arithmetic is spelled through exact helpers",
    "fuses-mul-add": "the driver may fuse a * b + c into one rounding; products are kept out of its reach",
    "folds-float-identities": "the driver folds float arithmetic as if there were no NaN, Inf or -0 "
    "(x * 0 -> 0, x - x -> 0); operands are hidden from it",
    "no-f16-bitcast": "the shader language cannot reinterpret float16 bits: float16 NaN constants are "
    "the canonical NaN, and NaN signs may not survive",
    "inexact-f64-division": "float64 division is not correctly rounded natively; it is computed in steps",
}


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares it can do; tests, the suite and the CLI read this, never a device name.

    One rule decides what a kernel needs (`undeclared`, used by `BaseBackend` at prepare time and
    by the conformance suite alike):

    - every node needs its dtype in `dtypes`, and (op, dtype) not in `unsupported_ops`; a
      comparison (Cmplt, Cmpne) is declared by its operands' dtype, since its own is always bool;
    - index arithmetic is not governed by `dtypes` or `unsupported_ops`: it is int32 on every
      device, and every device must compute it. That is `gidx`/`ridx`; the int32 (and bool, for
      conditions) nodes that only feed the index operands of GlobalIndex/GlobalView; and the
      int32/bool nodes computed from gidx/ridx and constants alone (a view's mask, a Where that
      selects by position), unless such a node is the kernel's result. A buffer read is data,
      never index arithmetic: a gather through an int32 buffer needs int32 declared. So a
      float32-only device runs every float32 kernel, however its indices are computed;
    - a routine needs its name in `routines`, each input and output dtype in `dtypes`, and no
      (routine name, dtype) pair in `unsupported_ops`; one the core spells as kernels
      (`jaxcore.canonical.COMPOSED_ROUTINES`: Softmax) and the device does not declare needs those kernels.

    `handles_aliasing`: the backend's `_run` computes correctly when an output slot is also an
    input (the result is as if every input were read before the output is written). When False
    (the default), `BaseBackend.dispatch` runs such a dispatch into a temporary and copies it
    over the output with `_copy_buffer`. `tolerances` may loosen the suite's default float
    tolerances per (op name, dtype) as (rtol, atol); an honest backend keeps it small and
    documented. `reference` marks a backend whose results define the contract (the differential
    tests compare other devices against it). `inexact_nan_constants`: dtypes whose NaN constants
    the device's shader language can only spell as its canonical NaN (WGSL through naga has no f64
    or f16 bitcast); the suite then does not hold their constants' payloads to the contract.
    `quirks`: what this device's runtime does that the contract does not let a compiler do, and
    the plugin works around, probed where it can be (names from `QUIRKS`, or the plugin's own in
    the same style). For people reading `jaxcore devices` and the suite's summary: nothing in the
    core decides by it.

    `max_kernel_cost`: the most one kernel may cost (`jaxcore.split.kernel_cost`: distinct nodes
    weighted by how long a GPU dialect spells them, a float32 sin 350, plain float arithmetic 12)
    for this device's compiler to take it in about a second; None (the default) is unlimited.
    `prepare_kernel` splits a costlier kernel into a chain of kernels through temporary buffers
    (`jaxcore.split`: bit for bit the same result), and raises UnsupportedOpError for one that
    cannot be split to within four times the budget (an epilogue that reads `acc` is not cut).
    """

    dtypes: frozenset[DType]
    routines: frozenset[Routines]
    max_args: int
    unsupported_ops: frozenset[tuple[AluOp | Routines, DType]] = frozenset()
    max_buffer_bytes: int = 2**31
    device_timestamps: bool = False
    tolerances: tuple[tuple[str, DType, float, float], ...] = ()
    reference: bool = False
    handles_aliasing: bool = False
    inexact_nan_constants: frozenset[DType] = frozenset()
    description: str = ""
    quirks: tuple[str, ...] = ()
    max_kernel_cost: int | None = None

    def __post_init__(self) -> None:
        quirks = (self.quirks,) if isinstance(self.quirks, str) else tuple(self.quirks)
        bad = [q for q in quirks if not isinstance(q, str) or not q.strip()]
        if bad:
            raise TypeError(f"Capabilities.quirks must be non-empty strings, got {bad!r}")
        object.__setattr__(self, "quirks", quirks)
        cost = self.max_kernel_cost
        if cost is not None and (type(cost) is not int or cost < 1):
            raise TypeError(f"Capabilities.max_kernel_cost must be a positive int or None, got {cost!r}")

    def supports_op(self, op: AluOp, dtype: DType) -> bool:
        return dtype in self.dtypes and (op, dtype) not in self.unsupported_ops

    @staticmethod
    def declared_dtype(node: AluExp) -> DType:
        """The dtype a node is declared by: its operands' for a comparison, else its own."""
        return node.src[0].dtype if node.op in AluGroup.Compare else node.dtype

    def declares(self, node: AluExp) -> bool:
        """Whether one node, taken as data (not index arithmetic), is declared."""
        return self._node_gap(node) is None

    def _node_gap(self, node: AluExp) -> Undeclared | None:
        dtype = self.declared_dtype(node)
        if dtype not in self.dtypes:
            return Undeclared(None, dtype, f"dtype {dtype} is not declared")
        if (node.op, dtype) in self.unsupported_ops:
            return Undeclared(node.op, dtype, f"{node.op}<{dtype}> is in unsupported_ops")
        return None

    def governed_nodes(self, kernel: Kernel) -> Iterator[AluExp]:
        """The nodes of `kernel` its declarations govern: all but index arithmetic (see above)."""
        exempt = _index_only(kernel)
        for node in kernel.nodes():
            if not _is_index_variable(node) and node.key() not in exempt:
                yield node

    def undeclared(self, source: Kernel | Routine) -> Undeclared | None:
        """The first thing `source` needs that these capabilities do not declare, or None."""
        if isinstance(source, Kernel):
            for node in self.governed_nodes(source):
                gap = self._node_gap(node)
                if gap is not None:
                    return gap
            return None
        gap = self._routine_gap(source)
        if gap is None or source.name not in COMPOSED_ROUTINES:
            return gap
        # not the device's own: the core's kernels run it where the device runs each of them
        for step in composed_chain(source).steps:
            step_gap = self.undeclared(step)
            if step_gap is not None:
                return step_gap
        return None

    def native(self, routine: Routine) -> bool:
        """Whether the device runs `routine` as its own (else the core's kernels may: `COMPOSED_ROUTINES`)."""
        return self._routine_gap(routine) is None

    def _routine_gap(self, source: Routine) -> Undeclared | None:
        if source.name not in self.routines:
            return Undeclared(source.name, None, f"routine {source.name} is not declared", routine=True)
        for dt in (*source.type.input_dtypes, *source.type.output_dtypes):
            if dt not in self.dtypes:
                return Undeclared(None, dt, f"dtype {dt} is not declared")
            if (source.name, dt) in self.unsupported_ops or (str(source.name), dt) in self.unsupported_ops:
                return Undeclared(source.name, dt, f"{source.name}<{dt}> is in unsupported_ops")
        return None


@runtime_checkable
class Backend(Protocol):
    """What the frontend, the suite and the CLI need from a device; `BaseBackend` implements all of it.

    Optional beyond it: `export(exe)` (a prepared executable as a program for a web page) and
    `export_runtime()` (the ES module that runs such programs), which `jaxcore.record` exports use.

    Threads: every method may be called from several threads at once. Dispatch order is kept: a
    dispatch sees the writes of every dispatch issued before it on this backend (from one thread, in
    call order; across threads, in the order the calls happened), however asynchronous the device.
    """

    name: str
    """The device name it was registered as (the registry checks that they match)."""

    capabilities: Capabilities
    """What it computes, as data: the registry, the suite and frontends read this, never the name."""

    @property
    def max_args(self) -> int:
        """The most input buffers one kernel may read (`capabilities.max_args`)."""
        ...

    def malloc(self, size: SupportsIndex, initial_data: bytes | bytearray | memoryview | None = None) -> Slot:
        """A new buffer of `size` bytes (0 allowed) with refcount 1.

        Without `initial_data` its contents are unspecified (it may hold a freed buffer's bytes); with
        it, `initial_data` must be exactly `size` bytes (ValueError). A negative or non-integer size is a
        ValueError; one above `capabilities.max_buffer_bytes` a MemoryError.
        """
        ...

    def inc_ref(self, slot: SupportsIndex) -> None:
        """Add a reference to a live slot; SlotError if it is unknown or freed."""
        ...

    def dec_ref(self, slot: SupportsIndex) -> None:
        """Drop a reference; at zero the buffer is freed once pending work that writes it is done.
        SlotError if the slot is unknown or already freed."""
        ...

    def read(
        self, slot: SupportsIndex, start: SupportsIndex = 0, count: SupportsIndex | None = None
    ) -> bytes:
        """Bytes [start, start+count) of the slot (to its end when count is None).

        Waits for pending work that writes this slot (everything dispatched before), and only for
        that. A range outside the buffer is a ValueError; an unknown or freed slot a SlotError.
        """
        ...

    def prepare_kernel(self, kernel: Kernel) -> Executable:
        """Compile a kernel (cached by `kernel.key()`; safe to call from several threads at once).

        Raises UnsupportedOpError here, at prepare time, for any dtype or (op, dtype) the
        capabilities do not declare (never a wrong answer later), and ValueError when
        `kernel.nargs > max_args`.
        """
        ...

    def prepare_routine(self, routine: Routine) -> Executable:
        """Prepare a routine; UnsupportedRoutineError if it is not declared, UnsupportedOpError if one
        of its dtypes is not."""
        ...

    def dispatch(
        self, exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
    ) -> None:
        """Run `exe` (made by this backend) on input slots, writing output slots; may return before the
        device finishes (`read` waits).

        Checks counts and sizes first (ValueError): a kernel input holds at least what it reads, its one
        output exactly `kernel.bytes`; routine buffers exactly their shapes. An output may also be an
        input: the result is as if every input were read before any output is written. Runs after every
        earlier dispatch on this backend.
        """
        ...

    def synchronize(self) -> None:
        """Return when every operation dispatched before the call has finished on the device; a
        pending device error is raised here (a DeviceError naming its kernel and dispatch site).
        For timing and error checks: `read` already waits for what it reads."""
        ...

    async def synchronize_async(self) -> None:
        """`synchronize` without blocking the event loop (same errors)."""
        ...

    async def read_async(
        self, slot: SupportsIndex, start: SupportsIndex = 0, count: SupportsIndex | None = None
    ) -> bytes:
        """`read` without blocking the event loop (same result and errors)."""
        ...

    async def prepare_kernel_async(self, kernel: Kernel) -> Executable:
        """`prepare_kernel` without blocking the event loop (same result and errors)."""
        ...

    async def prepare_routine_async(self, routine: Routine) -> Executable:
        """`prepare_routine` without blocking the event loop (same result and errors)."""
        ...


class _Buffer:
    """A live slot: the device handle, its byte size and its refcount (slots: made per malloc)."""

    __slots__ = ("handle", "size", "refs")

    def __init__(self, handle: Any, size: int, refs: int = 1) -> None:
        self.handle, self.size, self.refs = handle, size, refs


@dataclass
class BackendStats:
    """Counters a backend keeps, by name, for tests that pin its behaviour (a queued device counts
    submits, flushes for reads and deferred frees). Off the dispatch path unless a backend adds one."""

    extra: dict[str, int] = field(default_factory=dict)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking work off the event loop; asyncio is imported here, where only async callers pay."""
    import asyncio

    return await asyncio.to_thread(fn, *args)


class LruCache:
    """Prepared Executables by key, the `capacity` most recently used kept (a get or a store is a
    use): a long-running process preparing ever new kernels holds a bounded number. Thread-safe;
    dropping an entry only forgets it, so an Executable a caller still holds keeps working."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an executable cache holds at least 1 entry, not {capacity}")
        self.capacity = capacity
        self.evictions = 0
        self._items: OrderedDict[Any, Executable] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Executable | None:
        with self._lock:
            exe = self._items.get(key)
            if exe is not None:
                self._items.move_to_end(key)
            return exe

    def __setitem__(self, key: Any, exe: Executable) -> None:
        with self._lock:
            self._items[key] = exe
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
                self.evictions += 1

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def forget(self, key: Any) -> None:
        """Drop `key`'s entry, if any (the next prepare of it builds again)."""
        with self._lock:
            self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class _Pending:
    """A prepare in progress for one key: its lock, how many threads wait on it, and the result."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiters = 0
        self.exe: Executable | None = None


class BaseBackend:
    """Slot table, validation, caching, async defaults and tracing; subclasses supply the device."""

    name: str = "base"
    capabilities: Capabilities

    def __init__(self, cache_size: int | None = None) -> None:
        """`cache_size`: the most prepared kernels, and routines, kept (least recently used go
        first); default the `JAXCORE_KERNEL_CACHE` setting. A plugin whose Executables are heavy
        may pass less."""
        self._buffers: dict[Slot, _Buffer] = {}
        # Slot ids: `next` on a count is atomic in CPython (one C call under the GIL), as is a dict
        # store, so malloc takes no lock for its slot.
        self._slot_ids = itertools.count(1)
        self._lock = threading.RLock()
        size = settings.current().kernel_cache if cache_size is None else cache_size
        self._kernel_cache = LruCache(size)
        self._routine_cache = LruCache(size)
        self._compile_locks: dict[Any, _Pending] = {}
        self.stats = BackendStats()
        self._sync = settings.current().sync
        if self._sync:  # an instance attribute: costs nothing when the setting is off
            self.__dict__["dispatch"] = self._dispatch_and_wait

    def _dispatch_and_wait(
        self, exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
    ) -> None:
        """`dispatch` under JAXCORE_SYNC=1: this class's dispatch, then a wait for all work, so that
        a device error is raised here, by the dispatch that caused it."""
        type(self).dispatch(self, exe, inputs, outputs)
        self._synchronize(None)

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

    def _run(self, exe: Executable, inputs: list[Any], outputs: list[Any]) -> tracing.DeviceTime:
        """Run a compiled kernel or routine on handles; may return the device time in seconds (or a
        `tracing.LateTime` resolved when the device reports it)."""
        raise NotImplementedError

    def _synchronize(self, handle: Any | None = None) -> None:
        """Wait until pending work that writes `handle` (or all work) is done. Sync devices need nothing."""

    def _copy_buffer(self, src_handle: Any, dst_handle: Any, nbytes: int) -> None:
        """Copy the first `nbytes` of one device buffer over another's, in dispatch order (how an
        aliased dispatch's temporary reaches its output). The default goes through the host; a
        device overrides it with a copy on the device."""
        self._synchronize(src_handle)
        self._copyin(dst_handle, memoryview(self._copyout(src_handle, 0, nbytes)))

    def _release(self, handle: Any) -> None:
        """Give back the storage of a slot whose last reference went. By default wait for pending work
        on it, then free; a queued device (jaxcore.queue) defers the free instead, so it never stalls."""
        self._synchronize(handle)
        self._free(handle)

    # ---- slots ---------------------------------------------------------------------------
    @property
    def max_args(self) -> int:
        return self.capabilities.max_args

    def malloc(self, size: SupportsIndex, initial_data: bytes | bytearray | memoryview | None = None) -> Slot:
        if type(size) is not int or size < 0:  # the common case skips operator.index
            size = _count("malloc size", size)
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
        slot = next(self._slot_ids)
        self._buffers[slot] = _Buffer(handle, size)
        return slot

    def _slots_made(self) -> int:
        """The next slot id, without taking it (for error messages: freed or never allocated)."""
        return int(repr(self._slot_ids)[len("count(") : -1])

    def _buffer(self, slot: object) -> _Buffer:
        if type(slot) is int:
            buf = self._buffers.get(slot)
            if buf is not None:
                return buf
        return self._bad_slot(slot)

    def _bad_slot(self, slot: object) -> _Buffer:
        """Raise the SlotError for `slot`; a numpy integer that names a live slot is that slot."""
        if isinstance(slot, bool):
            raise SlotError(slot, "a bool is not a slot")
        try:
            index = operator.index(slot)  # type: ignore[arg-type]
        except TypeError:
            raise SlotError(slot, f"a slot is an integer, not {type(slot).__name__}") from None
        buf = None if type(slot) is int else self._buffers.get(index)
        if buf is None:
            raise SlotError(slot, "freed" if 0 < index < self._slots_made() else "never allocated")
        return buf

    def inc_ref(self, slot: SupportsIndex) -> None:
        with self._lock:
            self._buffer(slot).refs += 1

    def dec_ref(self, slot: SupportsIndex) -> None:
        with self._lock:
            buf = self._buffers.get(slot) if type(slot) is int else None
            if buf is None:
                buf = self._bad_slot(slot)
            buf.refs -= 1
            if buf.refs > 0:
                return
            del self._buffers[slot if type(slot) is int else operator.index(slot)]
        self._release(buf.handle)

    def size_of(self, slot: SupportsIndex) -> int:
        """The byte size of a live slot."""
        return self._buffer(slot).size

    def live_slots(self) -> int:
        return len(self._buffers)

    def export_runtime(self) -> tuple[str, str] | None:
        """(file name, text) of the ES module that runs this device's exported programs in a web
        page (the interface jaxcore.web's index.js drives: docs/browser-export.md), or None: the
        device has no browser runtime. Optional: `jaxcore.record` exports need it and `export`."""
        return None

    def read(
        self, slot: SupportsIndex, start: SupportsIndex = 0, count: SupportsIndex | None = None
    ) -> bytes:
        buf, begin, n = self._read_range(slot, start, count)
        self._synchronize(buf.handle)
        return bytes(self._copyout(buf.handle, begin, n)) if n else b""

    def _read_range(
        self, slot: SupportsIndex, start: SupportsIndex, count: SupportsIndex | None
    ) -> tuple[_Buffer, int, int]:
        """The slot's buffer and the checked byte range [start, start+count) a read asks for."""
        buf = self._buffer(slot)
        begin = _integer("read start", start)
        n = buf.size - begin if count is None else _integer("read count", count)
        if begin < 0 or n < 0 or begin + n > buf.size:
            raise ValueError(
                f"read of bytes [{begin}, {begin + n}) is outside slot {slot} of {buf.size} bytes"
            )
        return buf, begin, n

    # ---- prepare -------------------------------------------------------------------------
    def _cached(self, cache: LruCache, key: Any, build: Callable[[], Executable]) -> Executable:
        """One executable per key, even when several threads prepare the same thing at once: one
        builds, the others wait on the key and take what it built (not a second look in the cache,
        which may already have dropped it)."""
        exe = cache.get(key)
        if exe is not None:
            return exe
        with self._lock:
            pending = self._compile_locks.get(key)
            if pending is None:
                pending = self._compile_locks[key] = _Pending()
            pending.waiters += 1
        try:
            with pending.lock:
                if pending.exe is None:  # first here, or the builder before us failed
                    exe = cache.get(key)
                    if exe is None:
                        exe = build()
                        cache[key] = exe
                    pending.exe = exe
                return pending.exe
        finally:
            with self._lock:
                pending.waiters -= 1
                if not pending.waiters:
                    del self._compile_locks[key]

    def prepare_kernel(self, kernel: Kernel) -> Executable:
        if not isinstance(kernel, Kernel):
            raise TypeError(f"prepare_kernel takes a Kernel, got {type(kernel).__name__}")
        key = kernel.key()

        def build() -> Executable:
            if kernel.nargs > self.max_args:
                raise ValueError(
                    f"kernel has {kernel.nargs} inputs; {self.name} takes at most {self.max_args}"
                )
            self._check_ops(kernel)
            live = kernel.live()
            if self._over_budget(live):
                plan = self._kernel_split_plan(kernel, live)
                if plan is not None:
                    return self._prepare_kernel_split(kernel, plan)
            if live is not kernel:  # one part, so that every compiled object sits beside its source
                return self._prepare_kernel_split(kernel, split.whole(live))
            return Executable(kernel, self._compile_kernel(kernel), self, _PREPARED)

        return self._cached(self._kernel_cache, key, build)

    def _check_ops(self, kernel: Kernel) -> None:
        """Raise UnsupportedOpError for what the capabilities do not declare (`Capabilities.undeclared`:
        comparisons by operand dtype; index arithmetic is int32 everywhere and exempt)."""
        gap = self.capabilities.undeclared(kernel)
        if gap is not None:
            raise gap.error(self.name)

    def prepare_routine(self, routine: Routine) -> Executable:
        if not isinstance(routine, Routine):
            raise TypeError(f"prepare_routine takes a Routine, got {type(routine).__name__}")

        def build() -> Executable:
            gap = self.capabilities.undeclared(routine)
            if gap is not None:
                raise gap.error(self.name)
            # a layout the device runs through its own, or the core's kernels for one it lacks
            chain = canonical_chain(routine, self.capabilities.native(routine))
            if chain is not None:
                return self._prepare_steps(routine, chain.steps, chain.reads, chain.frees, chain.nargs)
            return Executable(routine, self._compile_routine(routine), self, _PREPARED)

        return self._cached(self._routine_cache, routine.key(), build)

    async def prepare_kernel_async(self, kernel: Kernel) -> Executable:
        return await _in_thread(self.prepare_kernel, kernel)

    async def prepare_routine_async(self, routine: Routine) -> Executable:
        return await _in_thread(self.prepare_routine, routine)

    def synchronize(self) -> None:
        self._synchronize(None)

    async def synchronize_async(self) -> None:
        await _in_thread(self.synchronize)

    async def read_async(
        self, slot: SupportsIndex, start: SupportsIndex = 0, count: SupportsIndex | None = None
    ) -> bytes:
        return await _in_thread(self.read, slot, start, count)

    # ---- dispatch ------------------------------------------------------------------------
    def dispatch(
        self, exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
    ) -> None:
        """Run `exe`; the result is as if every input were read before any output is written,
        so an output slot may also be an input (in-place updates)."""
        if type(inputs) is not list and type(inputs) is not tuple:
            inputs = list(inputs)
        if type(outputs) is not list and type(outputs) is not tuple:
            outputs = list(outputs)
        in_handles, out_handles = self._validate_dispatch(exe, inputs, outputs)
        aliased = None
        if not self.capabilities.handles_aliasing:
            for slot in outputs:  # a loop, not any(): this is the dispatch hot path
                if slot in inputs:
                    aliased = [i for i, s in enumerate(outputs) if s in inputs and exe._io_bytes[1][i]]
                    break
        if type(exe.data) is _SplitRun:
            self._dispatch_kernel_split(exe, in_handles, out_handles, aliased)
            return
        if not tracing.is_tracing():
            if aliased:
                self._run_aliased(exe, in_handles, out_handles, aliased)
            else:
                self._run(exe, in_handles, out_handles)
            return
        start = time.perf_counter()
        if aliased:
            device_time = self._run_aliased(exe, in_handles, out_handles, aliased)
        else:
            device_time = self._run(exe, in_handles, out_handles)
        end = time.perf_counter()
        tracing.record_dispatch(self.name, exe.source, start, end, device_time)

    def _run_aliased(
        self, exe: Executable, ins: list[Any], outs: list[Any], aliased: list[int]
    ) -> tracing.DeviceTime:
        """`_run`, with each output in `aliased` (also an input) computed into a temporary, then copied."""
        sizes = exe._io_bytes[1]
        temps = {i: self._alloc(sizes[i]) for i in aliased}
        try:
            device_time = self._run(exe, ins, [temps.get(i, h) for i, h in enumerate(outs)])
            for i, tmp in temps.items():
                self._copy_buffer(tmp, outs[i], sizes[i])
        finally:
            for tmp in temps.values():
                self._release(tmp)
        return device_time

    # ---- kernels split within the device's budget (Capabilities.max_kernel_cost) -----------------
    def _over_budget(self, live: Kernel) -> bool:
        """Whether `prepare_kernel` splits `live` (a kernel as compiled): it costs more than the
        device's `max_kernel_cost`. (A compile ahead of prepare should not take it whole.)"""
        budget = self.capabilities.max_kernel_cost
        return budget is not None and split.kernel_cost(live) > budget

    def _kernel_split_plan(self, kernel: Kernel, live: Kernel) -> split.Split | None:
        """How to run `kernel` (compiled as `live`, over the budget) as a chain of kernels within
        it. None: compile it whole (no cut is possible, and it is within four times the budget or
        over it by one costly node alone); else UnsupportedOpError."""
        caps = self.capabilities
        budget = caps.max_kernel_cost
        assert budget is not None
        plan = split.split_kernel(
            live, budget, max_args=self.max_args, dtypes=caps.dtypes, max_buffer_bytes=caps.max_buffer_bytes
        )
        if plan is not None and any(caps.undeclared(p.kernel) is not None for p in plan.parts):
            plan = None  # a cut the declarations do not cover (defensive: split keeps to them)
        for part in plan.parts if plan is not None else (split.Part(live, (), split.kernel_cost(live)),):
            if part.cost > 4 * budget and part.cost - max(map(split.node_cost, part.kernel.nodes())) > budget:
                why = f"costs {part.cost}, over max_kernel_cost={budget}, and no cut brings it within"
                raise UnsupportedOpError("Kernel", kernel.dtype, self.name, why)
        return plan

    def _prepare_kernel_split(self, kernel: Kernel, plan: split.Split) -> Executable:
        """The executable of `kernel` as `plan`'s parts."""
        parts = tuple(p.kernel for p in plan.parts)
        return self._prepare_steps(kernel, parts, tuple(p.reads for p in plan.parts), plan.frees, plan.nargs)

    def _prepare_steps(
        self,
        source: Kernel | Routine,
        steps: Sequence[Kernel | Routine],
        reads: tuple[tuple[int, ...], ...],
        frees: tuple[tuple[int, ...], ...],
        nargs: int,
    ) -> Executable:
        """The executable of `source` as a chain of kernels and routines through temporaries
        (`_SplitRun`), each distinct step compiled once."""
        made: dict[object, Executable] = {}
        parts = []
        for step in steps:
            exe = made.get(step.key())
            if exe is None:
                if isinstance(step, Kernel):
                    live = step.live()  # what a plugin's _run sees as the source is what it compiled
                    exe = Executable(live, self._compile_kernel(live), self, _PREPARED)
                else:
                    exe = Executable(step, self._compile_routine(step), self, _PREPARED)
                object.__setattr__(exe, "_part_of", source)
                made[step.key()] = exe
            parts.append(exe)
        whole = Executable(source, _SplitRun(tuple(parts), reads, frees, nargs), self, _PREPARED)
        object.__setattr__(whole, "_fast_path", False)  # a queued device records its parts, never it
        return whole

    def _dispatch_kernel_split(
        self, exe: Executable, ins: list[Any], outs: list[Any], aliased: list[int] | None
    ) -> None:
        """Run a split kernel's parts in order, each temporary from `_alloc` and given back with
        `_release` (a queued device defers that past the work that uses it) after its last reader.
        Only the last part writes the output, after every input was read, so an output that is
        also an input works as in any dispatch. Tracing records each part under the kernel."""
        run: _SplitRun = exe.data
        if exe._site is None:  # where it was first dispatched, for errors its parts meet later
            site = tracing.call_site(getattr(self, "_skip", ()))
            for e in (exe, *run.parts):
                object.__setattr__(e, "_site", site)
        nargs, last = run.nargs, len(run.parts) - 1
        bufs: list[Any] = [*ins, *([None] * last)]
        traced = tracing.is_tracing()
        try:
            for i, part in enumerate(run.parts):
                args = [bufs[b] for b in run.reads[i]]
                start = time.perf_counter() if traced else 0.0
                if i < last:
                    bufs[nargs + i] = tmp = self._alloc(part._io_bytes[1][0])
                    device_time = self._run(part, args, [tmp])
                elif aliased:
                    device_time = self._run_aliased(part, args, outs, aliased)
                else:
                    device_time = self._run(part, args, outs)
                if traced:
                    tracing.record_dispatch(self.name, exe.source, start, time.perf_counter(), device_time)
                for t in run.frees[i]:
                    tmp, bufs[nargs + t] = bufs[nargs + t], None
                    self._release(tmp)
        finally:
            for tmp in bufs[nargs:]:
                if tmp is not None:
                    self._release(tmp)

    def _validate_dispatch(
        self, exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
    ) -> tuple[list[Any], list[Any]]:
        """The handles behind `inputs` and `outputs`, after every check `dispatch` promises. The hot
        path: one dict lookup per slot and a size comparison; the error messages are built only on
        failure (`_dispatch_error`)."""
        if type(exe) is not Executable and not isinstance(exe, Executable):
            raise TypeError(
                f"dispatch takes an Executable from this backend's prepare_*, got {type(exe).__name__}"
            )
        if exe._owner() is not self:
            raise ValueError(
                f"this Executable was prepared by {_describe(exe._owner(), exe.backend)}, not by "
                f"{_describe(self, self.name)} that dispatches it: prepare it on the backend that runs it"
            )
        need_in, need_out, exact_in = exe._io_bytes
        if len(inputs) != len(need_in) or len(outputs) != len(need_out):
            raise ValueError(_wrong_count(exe.source, len(inputs), len(outputs)))
        if len(outputs) > 1 and len(set(outputs)) != len(outputs):
            raise ValueError(
                f"output slots must be distinct (one slot cannot hold two results), got {list(outputs)}"
            )
        # No lock: each lookup is one atomic dict read, and a slot freed by another thread right
        # after it is as (un)safe as one freed right after a locked lookup of every slot.
        get = self._buffers.get
        in_handles = []
        for slot, need in zip(inputs, need_in):
            buf = get(slot) if type(slot) is int else None
            if buf is None or buf.size < need or (exact_in and buf.size != need):
                return self._checked_handles(exe, inputs, outputs)
            in_handles.append(buf.handle)
        out_handles = []
        for slot, need in zip(outputs, need_out):
            buf = get(slot) if type(slot) is int else None
            if buf is None or buf.size != need:
                return self._checked_handles(exe, inputs, outputs)
            out_handles.append(buf.handle)
        return in_handles, out_handles

    def _checked_handles(
        self, exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
    ) -> tuple[list[Any], list[Any]]:
        """The slow path of `_validate_dispatch`: numpy-integer slots, and the error for the first bad
        slot or size."""
        need_in, need_out, exact_in = exe._io_bytes
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


@dataclass(frozen=True)
class _SplitRun:
    """The compiled form of a kernel split within `Capabilities.max_kernel_cost`, or of a routine
    run through the device's own layout (`jaxcore.canonical`): its parts' executables in order
    (part j < last writes temporary j), the buffers each reads (an input below `nargs`, else
    temporary `b - nargs`), and the temporaries free after each."""

    parts: tuple[Executable, ...]
    reads: tuple[tuple[int, ...], ...]
    frees: tuple[tuple[int, ...], ...]
    nargs: int


def _describe(backend: object, name: str) -> str:
    if backend is None:
        return f"a {name} backend that no longer exists"
    return f"the {name} backend {type(backend).__name__} at 0x{id(backend):x}"


def _integer(what: str, value: object) -> int:
    """An integer argument, taken through `operator.index` (numpy integers work); bool is refused."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}: {value!r}") from None


def _count(what: str, value: object) -> int:
    """A non-negative integer argument (a size)."""
    n = _integer(what, value)
    if n < 0:
        raise ValueError(f"{what} must be non-negative, got {n}")
    return n


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


class HostMemory:
    """BaseBackend's four storage hooks over host bytes (a bytearray per buffer), for backends
    whose memory is the host's: interpreters, test doubles, a new device's first step. Mix it in
    before the base: `class MyBackend(HostMemory, BaseBackend)`."""

    def _alloc(self, size: int) -> bytearray:
        return bytearray(size)  # contents unspecified by the contract; zeroed here

    def _free(self, handle: bytearray) -> None:
        pass  # the garbage collector frees it

    def _copyin(self, handle: bytearray, data: memoryview) -> None:
        handle[:] = data

    def _copyout(self, handle: bytearray, start: int, count: int) -> bytes:
        return bytes(handle[start : start + count])
