"""jaxcore.pool: bucketed capacities, reuse, the byte bound, and the retry after an out-of-memory error."""

from __future__ import annotations

import pytest

from jaxcore.pool import BufferPool, bucket_size


def test_bucket_sizes_round_up_by_at_most_a_quarter():
    assert [bucket_size(n) for n in (0, 1, 256, 257, 4096)] == [256, 256, 256, 512, 4096]
    assert [bucket_size(n) for n in (4097, 5000, 5121, 8192, 8193)] == [5120, 5120, 6144, 8192, 10240]
    for n in range(1, 1 << 22, 977):
        cap = bucket_size(n)
        assert n <= cap <= max(256, n * 1.25 + 1)
    assert bucket_size(1000, limit=600) == 1000  # never below the request
    assert bucket_size(5000, limit=5004) == 5004  # clamped to the device's cap


class Device:
    def __init__(self, capacity: int = 1 << 20) -> None:
        self.capacity, self.used, self.made, self.destroyed = capacity, 0, 0, 0

    def create(self, n: int) -> list[int]:
        if self.used + n > self.capacity:
            raise MemoryError(f"out of device memory ({n} bytes)")
        self.used += n
        self.made += 1
        return [n]

    def destroy(self, h: list[int]) -> None:
        self.used -= h[0]
        self.destroyed += 1


def test_freed_buffers_are_reused_by_their_bucket():
    dev = Device()
    pool = BufferPool(dev.create, dev.destroy)
    h, cap = pool.alloc(5000)
    pool.free(h, cap)
    h2, cap2 = pool.alloc(5100)  # same bucket
    assert h2 is h and cap2 == cap == 5120 and dev.made == 1
    h3, _ = pool.alloc(6000)  # another bucket
    assert h3 is not h and dev.made == 2
    assert pool.stats()["hits"] == 1


def test_cache_is_bounded_least_recently_freed_first():
    dev = Device()
    pool = BufferPool(dev.create, dev.destroy, max_cached_bytes=1024)
    hs = [pool.alloc(256) for _ in range(6)]
    for h, cap in hs:
        pool.free(h, cap)
    assert pool.cached_bytes == 1024 and dev.destroyed == 2
    assert pool.alloc(256)[0] is hs[-1][0]  # the most recently freed comes back first


def test_out_of_memory_runs_the_callback_empties_the_cache_and_retries():
    dev = Device(capacity=4096)
    pool = BufferPool(dev.create, dev.destroy)
    held = [pool.alloc(1024) for _ in range(3)]
    pool.free(*held.pop())  # 1024 cached, 2048 live
    called = []
    h, cap = pool.alloc(2048, on_oom=lambda: called.append(1))
    assert called == [1] and cap == 2048 and len(pool) == 0
    with pytest.raises(MemoryError):
        pool.alloc(4096)
