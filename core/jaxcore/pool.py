"""A size-bucketed cache of device buffers (tinygrad's LRUAllocator is the model).

Creating and destroying GPU buffers costs a driver call each, and a program that runs the same
shapes again and again frees and allocates the same sizes. `BufferPool` keeps freed buffers in
buckets by capacity and hands one back for the next request of that bucket. Buckets round a
request up (to 256 bytes, then to a quarter of a power of two: at most 25% slack), so that nearly
equal sizes share buffers. The cache is bounded in bytes and gives back its least recently freed
buffers first. When the device runs out of memory, `alloc` empties the cache and tries again;
a queued device first retires its in-flight work (which returns buffers here) — see jaxcore.queue.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

H = TypeVar("H")

_SMALL = 256  # every capacity is a multiple of this


def bucket_size(nbytes: int, limit: int | None = None) -> int:
    """The capacity a request of `nbytes` gets: 256-byte steps up to 4 KiB, then quarter powers of
    two (4, 5, 6, 7, 8, 10, 12, 14, 16 KiB, ...). Never more than `limit` (the device's own cap)."""
    if nbytes <= 4096:
        cap = max(_SMALL, -(-nbytes // _SMALL) * _SMALL)
    else:
        step = 1 << (nbytes.bit_length() - 3)  # a quarter of the power of two below
        cap = -(-nbytes // step) * step
    return cap if limit is None else max(nbytes, min(cap, limit))


class BufferPool(Generic[H]):
    """Device buffers by capacity. `create(capacity)` makes one (raising MemoryError when the
    device is full), `destroy(handle)` gives one back to the device."""

    def __init__(
        self,
        create: Callable[[int], H],
        destroy: Callable[[H], None],
        *,
        max_cached_bytes: int = 1 << 30,
        limit: int | None = None,
    ) -> None:
        self._create, self._destroy = create, destroy
        self.max_cached_bytes, self.limit = max_cached_bytes, limit
        self._free: dict[int, list[H]] = {}
        self._lru: OrderedDict[int, tuple[int, H]] = OrderedDict()  # id(handle) -> (capacity, handle)
        self.cached_bytes = 0
        self._caps: dict[int, int] = {}  # request -> capacity, memoised (the hot path asks often)
        self.hits = self.misses = self.evictions = 0

    def capacity(self, nbytes: int) -> int:
        cap = self._caps.get(nbytes)
        if cap is None:
            cap = self._caps[nbytes] = bucket_size(nbytes, self.limit)
            if len(self._caps) > 4096:
                self._caps.clear()
        return cap

    def alloc(self, nbytes: int, on_oom: Callable[[], None] | None = None) -> tuple[H, int]:
        """(handle, capacity) for at least `nbytes`. On MemoryError: run `on_oom` (the caller's chance
        to retire work that holds buffers), empty the cache, and try once more."""
        cap = self.capacity(nbytes)
        bucket = self._free.get(cap)
        if bucket:
            handle = bucket.pop()
            del self._lru[id(handle)]
            self.cached_bytes -= cap
            self.hits += 1
            return handle, cap
        self.misses += 1
        try:
            return self._create(cap), cap
        except MemoryError:
            if on_oom is not None:
                on_oom()
            self.clear()
            return self._create(cap), cap

    def free(self, handle: H, capacity: int) -> None:
        """Keep `handle` (no work may still use it) for a later request of its bucket."""
        if capacity > self.max_cached_bytes:
            self._destroy(handle)
            return
        self._free.setdefault(capacity, []).append(handle)
        self._lru[id(handle)] = (capacity, handle)
        self.cached_bytes += capacity
        while self.cached_bytes > self.max_cached_bytes:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        _, (cap, handle) = self._lru.popitem(last=False)
        self._free[cap].remove(handle)
        self.cached_bytes -= cap
        self.evictions += 1
        self._destroy(handle)

    def clear(self) -> None:
        """Destroy every cached buffer."""
        while self._lru:
            self._evict_oldest()

    def __len__(self) -> int:
        return len(self._lru)

    def stats(self) -> dict[str, Any]:
        return {
            "cached": len(self._lru),
            "cached_bytes": self.cached_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
        }
