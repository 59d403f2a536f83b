"""The async half of the protocol: prepare_kernel_async, prepare_routine_async, read_async."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluVar
from jaxcore.backend import Backend, SlotError, UnsupportedOpError, UnsupportedRoutineError
from jaxcore.conformance.harness import from_buffer, map_kernel
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.routine import Routine, Routines

F32 = DType.float32


def test_prepare_kernel_async_and_read_async(backend: Backend) -> None:
    """A nullary kernel prepared asynchronously, dispatched, read back asynchronously (jax-js test 5)."""

    async def go() -> bytes:
        exe = await backend.prepare_kernel_async(Kernel(0, 200, AluExp.cast(F32, AluVar.gidx)))
        out = backend.malloc(800)
        try:
            backend.dispatch(exe, [], [out])
            return await backend.read_async(out)
        finally:
            backend.dec_ref(out)

    assert from_buffer(asyncio.run(go()), F32).tolist() == list(range(200))


def test_read_async_byte_ranges(backend: Backend) -> None:
    data = np.array([1, 1, 2, 3, 5, 7], np.float32).tobytes()
    slot = backend.malloc(len(data), data)

    async def go() -> tuple[bytes, bytes, bytes]:
        return (
            await backend.read_async(slot),
            await backend.read_async(slot, 12, 8),
            await backend.read_async(slot, 20),
        )

    try:
        full, mid, tail = asyncio.run(go())
        assert full == data and mid == data[12:20] and tail == data[20:]
        with pytest.raises(ValueError):
            asyncio.run(backend.read_async(slot, 20, 8))
    finally:
        backend.dec_ref(slot)
    with pytest.raises(SlotError):
        asyncio.run(backend.read_async(slot))


def test_read_async_checks_arguments_like_read(backend: Backend) -> None:
    """read_async takes numpy integers and refuses bools and floats as offsets, exactly as read does."""
    data = np.arange(4, dtype=np.float32).tobytes()
    slot = backend.malloc(len(data), data)
    try:
        assert asyncio.run(backend.read_async(slot, np.int64(4), np.int32(8))) == data[4:12]
        wrong: list[tuple[Any, ...]] = [(True,), (0, True), (1.0,), (0, 4.0)]  # (start[, count])
        for args in wrong:
            with pytest.raises(TypeError):
                backend.read(slot, *args)
            with pytest.raises(TypeError):
                asyncio.run(backend.read_async(slot, *args))
    finally:
        backend.dec_ref(slot)


def test_async_prepare_matches_sync_cache(backend: Backend) -> None:
    """Concurrent async prepares of distinct kernels give working, distinct executables, and a sync
    prepare afterwards hits the cache."""
    kernels = [map_kernel([F32], 4, lambda x, c=c: AluExp.add(x, AluExp.f32(c + 0.5))) for c in range(6)]

    async def go() -> list:
        return list(await asyncio.gather(*(backend.prepare_kernel_async(k) for k in kernels)))

    exes = asyncio.run(go())
    a = backend.malloc(16, np.array([1, 2, 3, 4], np.float32).tobytes())
    out = backend.malloc(16)
    try:
        for c, (k, exe) in enumerate(zip(kernels, exes)):
            sync = backend.prepare_kernel(k)
            assert sync is exe or sync == exe, "a sync prepare after the async one missed the cache"
            backend.dispatch(exe, [a], [out])
            want = [v + c + 0.5 for v in (1, 2, 3, 4)]
            assert from_buffer(asyncio.run(backend.read_async(out)), F32).tolist() == want
    finally:
        backend.dec_ref(a)
        backend.dec_ref(out)


def test_concurrent_prepares_share_one_executable(backend: Backend) -> None:
    """Eight concurrent prepare_kernel_async calls of one fresh kernel all get the same (or an equal)
    executable: the cache lookup and the compile must be atomic. A race shows only sometimes, so
    the experiment runs 6 rounds on fresh kernels; a correct backend always passes."""
    for round_ in range(6):
        kernels = [
            map_kernel([F32], 4, lambda x, v=7000.25 + 10 * round_ + c: AluExp.add(x, AluExp.f32(v)))
            for c in range(4)
        ]

        async def go(ks: list[Kernel] = kernels) -> list:
            return list(await asyncio.gather(*(backend.prepare_kernel_async(k) for k in ks * 8)))

        exes = asyncio.run(go())
        for i in range(len(kernels)):
            mine = exes[i :: len(kernels)]
            distinct = len({id(e) for e in mine if not (e is mine[0] or e == mine[0])})
            assert distinct == 0, (
                f"round {round_}: 8 concurrent prepares of one kernel returned {distinct + 1} unequal "
                "executables (the kernel was compiled more than once: the cache check and the insert "
                "are not atomic)"
            )


def test_prepare_routine_async(backend: Backend) -> None:
    """A declared routine prepares asynchronously; an undeclared one raises from the coroutine."""
    r = Routine.build(Routines.Sort, [(5,)], [F32])
    if Routines.Sort not in backend.capabilities.routines or F32 not in backend.capabilities.dtypes:
        with pytest.raises((UnsupportedRoutineError, UnsupportedOpError)):
            asyncio.run(backend.prepare_routine_async(r))
        pytest.skip("unsupported-declared: routine Sort is not declared")
    exe = asyncio.run(backend.prepare_routine_async(r))
    x = backend.malloc(20, np.array([3, 1, 4, 1, 5], np.float32).tobytes())
    y = backend.malloc(20)
    try:
        backend.dispatch(exe, [x], [y])
        assert from_buffer(asyncio.run(backend.read_async(y)), F32).tolist() == [1, 1, 3, 4, 5]
    finally:
        backend.dec_ref(x)
        backend.dec_ref(y)


def test_async_prepare_reports_unsupported(backend: Backend) -> None:
    """An undeclared dtype raises UnsupportedOpError from prepare_kernel_async too (if any is undeclared)."""
    missing = [d for d in DType if d not in backend.capabilities.dtypes]
    if not missing:
        return
    kernel = Kernel(0, 4, AluExp.const(missing[0], 1))
    with pytest.raises(UnsupportedOpError):
        asyncio.run(backend.prepare_kernel_async(kernel))
