"""wasmtime plumbing: one engine, one shared linear memory, per-thread stores, raw calls, a thread pool.

wasmtime-py's `Func.__call__` costs ~40-70 µs (it rebuilds types and converts every argument), so
kernels are called through the C API's `wasmtime_func_call_unchecked` with a preallocated argument
array (~2 µs). Each thread owns a `Lane` (Store plus its instances), because a Store may not be
used by two threads at once; all lanes import the same `SharedMemory`. ctypes releases the GIL
during the call, so lanes run in parallel.
"""

from __future__ import annotations

import atexit
import ctypes
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import wasmtime
from wasmtime import _bindings as ffi
from wasmtime import _ffi

from jaxcore_wasm.module import MAX_PAGES, PAGE


def _patch_shared_memory() -> None:
    """wasmtime-py 50.0.1 passes a pointer-to-pointer for a SharedMemory import; pass the pointer."""

    def _as_extern(self: wasmtime.SharedMemory) -> Any:
        union = _ffi.wasmtime_extern_union(sharedmemory=self.ptr())
        return _ffi.wasmtime_extern_t(_ffi.WASMTIME_EXTERN_SHAREDMEMORY, union)

    wasmtime.SharedMemory._as_extern = _as_extern  # type: ignore[method-assign]


_patch_shared_memory()


def _quiet_exit() -> None:
    """At interpreter exit the OS reclaims every store and module; wasmtime-py's finalizers can run after
    its own ffi module was torn down and print "Exception ignored" noise, so skip them from here on."""
    wasmtime.Managed.__del__ = lambda self: None  # type: ignore[method-assign]


atexit.register(_quiet_exit)

_engine: wasmtime.Engine | None = None
_engine_lock = threading.Lock()

ENGINE_FLAGS = "simd,relaxed-simd,threads,shared-memory,bulk-memory,multi-value,opt=speed"


def engine() -> wasmtime.Engine:
    """The process-wide engine (compiled modules and the disk cache depend on its settings)."""
    global _engine
    with _engine_lock:
        if _engine is None:
            cfg = wasmtime.Config()
            cfg.wasm_simd = True
            cfg.wasm_relaxed_simd = True
            cfg.wasm_threads = True
            cfg.shared_memory = True
            cfg.wasm_bulk_memory = True
            cfg.wasm_multi_value = True
            cfg.cranelift_opt_level = "speed"
            _engine = wasmtime.Engine(cfg)
        return _engine


class WasmTrap(RuntimeError):
    """A kernel trapped (a codegen bug: kernels are written never to trap)."""


_call = ffi._wasmtime_func_call_unchecked
raw_call = _call  # (ctx, func ref, raw args, nargs, trap out) -> error pointer: the dispatch fast path
_Raw = ffi.wasmtime_val_raw_t


MADV_HUGEPAGE = 14  # Linux <sys/mman.h>


def advise_huge_pages(base: int, nbytes: int) -> bool:
    """Ask Linux for transparent huge pages over [base, base + nbytes) (madvise MADV_HUGEPAGE; a
    no-op elsewhere or when refused). Where THP is in `madvise` mode, as it often is, the linear
    memory otherwise gets 4 KiB pages while numpy's large arrays get 2 MiB ones: a 64 MiB stream
    then crosses 16,384 pages (a TLB miss each, and the hardware prefetchers stop at every page
    boundary). Measured on a 16M float32 sum: 21.8 -> 29.9 GB/s. JAXCORE_WASM_HUGE_PAGES=0 turns it off."""
    from jaxcore_wasm.cache import int_setting

    if not sys.platform.startswith("linux") or not int_setting("huge_pages", 1):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return False
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise(base, nbytes, MADV_HUGEPAGE) == 0


class Memory:
    """The shared linear memory: grows on demand, never moves (shared memories are reserved up front)."""

    def __init__(self, eng: wasmtime.Engine) -> None:
        ty = wasmtime.MemoryType(wasmtime.Limits(1, MAX_PAGES), shared=True)
        self.shared = wasmtime.SharedMemory(eng, ty)
        self.base = ctypes.cast(self.shared.data_ptr(), ctypes.c_void_p).value or 0
        # the whole reservation: pages committed later by `grow` keep the advice
        self.huge_pages = advise_huge_pages(self.base, MAX_PAGES * PAGE)
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.shared.data_len()

    def ensure(self, nbytes: int) -> None:
        """Grow to at least `nbytes` (rounded to whole pages)."""
        if nbytes <= self.nbytes:
            return
        with self._lock:
            have = self.nbytes // PAGE
            need = -(-nbytes // PAGE)
            if need > have:
                if need > MAX_PAGES:
                    raise MemoryError(f"wasm: {nbytes} bytes exceed the 4 GiB wasm32 memory limit")
                try:
                    self.shared.grow(need - have)
                except wasmtime.WasmtimeError as e:
                    raise MemoryError(f"wasm: cannot grow linear memory to {nbytes} bytes: {e}") from None

    def view(self, ptr: int, nbytes: int) -> memoryview:
        """A writable view of bytes [ptr, ptr+nbytes) (valid until the memory is freed; it never moves)."""
        if ptr + nbytes > self.nbytes:
            raise ValueError(f"wasm: range [{ptr}, {ptr + nbytes}) is outside the linear memory")
        return memoryview((ctypes.c_ubyte * nbytes).from_address(self.base + ptr)).cast("B")


# Instances per Store before a Lane starts a fresh Store. wasmtime caps a Store at 10,000 instances
# and frees an instance only with its Store, so a Lane that instantiated every kernel it ever ran
# into one Store failed on the 10,001st distinct kernel and kept every evicted module alive. The
# default follows the compiler's memory cache (JAXCORE_WASM_MEMORY_CACHE), so that no more modules
# stay alive through a lane than the cache keeps; JAXCORE_WASM_STORE_INSTANCES overrides it.
WASMTIME_STORE_LIMIT = 10_000


def store_instances() -> int:
    from jaxcore_wasm.cache import int_setting
    from jaxcore_wasm.compiler import memory_cache_size

    n = int_setting("store_instances", min(memory_cache_size(), WASMTIME_STORE_LIMIT), minimum=1)
    if n > WASMTIME_STORE_LIMIT:
        raise ValueError(f"JAXCORE_WASM_STORE_INSTANCES={n} is more than wasmtime's {WASMTIME_STORE_LIMIT}")
    return n


class Lane:
    """A Store with its instances; used by one thread at a time.

    Once the Store holds `limit` instances, the next new module starts a fresh Store (the old one,
    with every instance in it, is dropped) and `generation` goes up: function references taken from
    an older generation belong to a dropped Store and must be looked up again (calling one would
    make wasmtime abort the process).
    """

    def __init__(self, eng: wasmtime.Engine, memory: Memory, limit: int | None = None) -> None:
        self.engine = eng
        self.memory = memory
        self.limit = store_instances() if limit is None else max(1, limit)
        self.generation = -1
        self.instantiations = 0
        self._trap = ctypes.POINTER(ffi.wasm_trap_t)()
        self._trap_ref = ctypes.byref(self._trap)
        self._new_store()

    def _new_store(self) -> None:
        self.store = wasmtime.Store(self.engine)
        self.ctx = self.store._context()
        self._funcs: dict[int, dict[str, Any]] = {}  # id(module) -> export name -> byref(func)
        self._keep: list[Any] = []  # keeps each module alive while its id is a key above
        self.generation += 1

    @property
    def instances(self) -> int:
        return len(self._funcs)

    def funcs(self, module: wasmtime.Module) -> dict[str, Any]:
        got = self._funcs.get(id(module))
        if got is None:
            if len(self._funcs) >= self.limit:
                self._new_store()
            inst = wasmtime.Instance(self.store, module, [self.memory.shared])
            self.instantiations += 1
            exports = inst.exports(self.store)
            got = {}
            for exp in module.exports:
                f = exports[exp.name]
                if isinstance(f, wasmtime.Func):
                    got[exp.name] = ctypes.byref(f._func)
                    self._keep.append(f)
            self._keep.append((module, inst))
            self._funcs[id(module)] = got
        return got

    def call(self, fref: Any, args: ctypes.Array, nargs: int) -> None:
        err = _call(self.ctx, fref, args, nargs, self._trap_ref)
        if err or self._trap:
            self._raise(err)

    def _raise(self, err: Any) -> None:
        if err:
            raise WasmTrap(str(wasmtime.WasmtimeError._from_ptr(err)))
        trap = wasmtime.Trap._from_ptr(self._trap)
        self._trap = ctypes.POINTER(ffi.wasm_trap_t)()
        self._trap_ref = ctypes.byref(self._trap)
        raise WasmTrap(f"wasm kernel trapped: {trap.message}")


def make_args(values: Sequence[int]) -> ctypes.Array:
    arr = (_Raw * max(1, len(values)))()
    for i, v in enumerate(values):
        arr[i].i32 = v
    return arr


class Pool:
    """Worker threads, each with its own Lane, that run one callable per job in parallel."""

    def __init__(self, eng: wasmtime.Engine, memory: Memory, workers: int) -> None:
        self._queues: list[queue.SimpleQueue] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self.size = workers
        for i in range(workers):
            q: queue.SimpleQueue = queue.SimpleQueue()
            t = threading.Thread(
                target=self._worker, args=(eng, memory, q), name=f"jaxcore-wasm-{i}", daemon=True
            )
            t.start()
            self._queues.append(q)
        self._lock = threading.Lock()

    def _worker(self, eng: wasmtime.Engine, memory: Memory, q: queue.SimpleQueue) -> None:
        lane = Lane(eng, memory)
        while True:
            job = q.get()
            if job is None:
                return
            try:
                job(lane)
                self._done.put(None)
            except BaseException as e:  # noqa: BLE001 - handed back to the dispatching thread
                self._done.put(e)

    def run(self, jobs: Sequence[Callable[[Lane], None]], main: Callable[[], None] | None = None) -> None:
        """Run `jobs` on the workers (at most one each) and `main` on this thread; wait for all."""
        with self._lock:
            for q, job in zip(self._queues, jobs):
                q.put(job)
            err: BaseException | None = None
            try:
                if main is not None:
                    main()
            except BaseException as e:  # noqa: BLE001
                err = e
            for _ in range(min(len(jobs), len(self._queues))):
                r = self._done.get()
                if r is not None and err is None:
                    err = r
            if err is not None:
                raise err

    def close(self) -> None:
        for q in self._queues:
            q.put(None)
