"""A size-class allocator over the one linear memory (pointers are byte offsets in it).

Blocks are 64-byte aligned (a cache line, and v128 loads never straddle one). Small sizes round to
a multiple of 64 up to 512 bytes, then to a power of two up to 64 KiB, then to whole 64 KiB pages.
Each class keeps a LIFO free list, so a buffer freed and allocated again at the same size reuses
its block (and its already-faulted pages). Memory only grows, on demand, up to the 4 GiB wasm32
limit; when it would not fit, free blocks are coalesced and the best fit is split before giving up
with MemoryError. Pointer 0 (the reserved first 64 bytes) is the empty allocation.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

from jaxcore_wasm.module import MAX_PAGES, PAGE

ALIGN = 64
LIMIT = MAX_PAGES * PAGE  # bytes addressable by wasm32


def size_class(size: int) -> int:
    """The block size a request of `size` bytes gets."""
    if size <= 512:
        return max(ALIGN, -(-size // ALIGN) * ALIGN)
    if size <= PAGE:
        return 1 << (size - 1).bit_length()
    return -(-size // PAGE) * PAGE


class Allocator:
    """malloc/free of byte ranges; `grow(nbytes)` makes the memory at least that large."""

    def __init__(self, grow: Callable[[int], None], limit: int = LIMIT) -> None:
        self._grow = grow
        self._limit = limit
        self._head = ALIGN  # bump pointer; [0, 64) is reserved
        self._free: dict[int, list[int]] = {}  # class size -> free pointers (LIFO)
        self._live: dict[int, int] = {}  # pointer -> class size
        self._lock = threading.Lock()
        self.in_use = 0

    def alloc(self, size: int) -> int:
        if size <= 0:
            return 0
        cls = size_class(size)
        with self._lock:
            stack = self._free.get(cls)
            ptr: int | None
            if stack:
                ptr = stack.pop()
            else:
                ptr = self._bump(cls)
                if ptr is None:
                    ptr = self._reclaim(cls)
                if ptr is None:
                    raise MemoryError(
                        f"wasm: cannot allocate {size} bytes: the linear memory would exceed the 4 GiB "
                        f"wasm32 limit ({self.in_use} bytes are in use)"
                    )
            self._live[ptr] = cls
            self.in_use += cls
            return ptr

    def free(self, ptr: int) -> None:
        if ptr == 0:
            return
        with self._lock:
            cls = self._live.pop(ptr, None)
            if cls is None:
                raise ValueError(f"wasm: free of pointer {ptr} that is not allocated")
            self.in_use -= cls
            self._free.setdefault(cls, []).append(ptr)

    def size_of(self, ptr: int) -> int:
        return self._live[ptr]

    # ---- internals -------------------------------------------------------------------------
    def _bump(self, cls: int) -> int | None:
        end = self._head + cls
        if end > self._limit:
            return None
        self._grow(end)
        ptr, self._head = self._head, end
        return ptr

    def _reclaim(self, cls: int) -> int | None:
        """Coalesce free blocks, give the top of the heap back to the bump pointer, then best-fit."""
        blocks = sorted((p, c) for c, ps in self._free.items() for p in ps)
        self._free = {}
        merged: list[list[int]] = []
        for p, c in blocks:
            if merged and merged[-1][0] + merged[-1][1] == p:
                merged[-1][1] += c
            else:
                merged.append([p, c])
        if merged and merged[-1][0] + merged[-1][1] == self._head:
            self._head = merged.pop()[0]
        ptr = self._bump(cls)
        if ptr is None:
            sizes = [c for _, c in merged]
            order = sorted(range(len(merged)), key=lambda i: sizes[i])
            keys = [sizes[i] for i in order]
            j = bisect.bisect_left(keys, cls)
            if j < len(keys):
                blk = merged.pop(order[j])
                ptr = blk[0]
                if blk[1] > cls:
                    merged.append([blk[0] + cls, blk[1] - cls])
        for p, c in merged:
            self._free.setdefault(c, []).append(p)
        return ptr
