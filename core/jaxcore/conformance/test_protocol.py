"""The buffer and dispatch protocol: malloc/read/refcounts/SlotError, argument checks, dispatch
order, executable reuse and caching, max_args and max_buffer_bytes."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluVar
from jaxcore.backend import Backend, SlotError
from jaxcore.conformance.harness import from_buffer, map_kernel, run_kernel
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel

SLOT_ERROR_TEXT = "Used a buffer that is invalid or already freed"
F32 = DType.float32


def f32(*vals: float) -> bytes:
    return np.array(vals, np.float32).tobytes()


def test_malloc_with_initial_data_reads_back(backend: Backend) -> None:
    data = f32(1, 1, 2, 3, 5, 7)
    slot = backend.malloc(len(data), data)
    try:
        assert backend.read(slot) == data
    finally:
        backend.dec_ref(slot)


def test_read_byte_ranges(backend: Backend) -> None:
    """read(slot, start, count) returns exactly that byte range (jax-js tests 7/8)."""
    data = f32(1, 1, 2, 3, 5, 7)
    slot = backend.malloc(len(data), data)
    try:
        assert backend.read(slot, 12, 8) == f32(3, 5)
        assert backend.read(slot, 4) == data[4:]
        assert backend.read(slot, 0, 0) == b""
        assert backend.read(slot, 24) == b""
        assert backend.read(slot, 3, 2) == data[3:5]  # unaligned partial read
    finally:
        backend.dec_ref(slot)


@pytest.mark.parametrize(("start", "count"), [(0, 25), (20, 8), (25, None), (-1, 4), (4, -1)])
def test_read_outside_the_buffer_raises(backend: Backend, start: int, count: int | None) -> None:
    slot = backend.malloc(24, f32(1, 1, 2, 3, 5, 7))
    try:
        with pytest.raises(ValueError):
            backend.read(slot, start, count)
    finally:
        backend.dec_ref(slot)


@pytest.mark.parametrize("size", [0, 1, 8, 4096])
def test_malloc_sizes(backend: Backend, size: int) -> None:
    """Any non-negative size, including 0 and sizes that are not a multiple of 4."""
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    slot = backend.malloc(size, data)
    try:
        assert backend.read(slot) == data
    finally:
        backend.dec_ref(slot)


@pytest.mark.parametrize("wrong", [0, 3, 5, 100])
def test_malloc_initial_data_of_wrong_size_raises(backend: Backend, wrong: int) -> None:
    with pytest.raises(ValueError):
        backend.malloc(4, bytes(wrong))


def test_malloc_negative_size_raises(backend: Backend) -> None:
    with pytest.raises(ValueError):
        backend.malloc(-4)


def test_malloc_beyond_max_buffer_bytes_raises(backend: Backend) -> None:
    """A buffer above the declared limit is refused with MemoryError (nothing is allocated)."""
    limit = backend.capabilities.max_buffer_bytes
    with pytest.raises(MemoryError):
        backend.malloc(limit + 1)


def test_refcounts(backend: Backend) -> None:
    """inc_ref adds an owner: the buffer lives until as many dec_refs, then any use raises SlotError."""
    slot = backend.malloc(4, f32(9))
    backend.inc_ref(slot)
    backend.inc_ref(slot)
    backend.dec_ref(slot)
    backend.dec_ref(slot)
    assert backend.read(slot) == f32(9), "buffer freed while a reference was still held"
    backend.dec_ref(slot)
    for use in (backend.read, backend.dec_ref, backend.inc_ref):
        with pytest.raises(SlotError) as info:
            use(slot)
        assert SLOT_ERROR_TEXT in str(info.value) and str(slot) in str(info.value), str(info.value)


@pytest.mark.parametrize("slot", [10**9, -1])
def test_unknown_slot_raises_slot_error(backend: Backend, slot: int) -> None:
    for use in (backend.read, backend.dec_ref, backend.inc_ref):
        with pytest.raises(SlotError) as info:
            use(slot)
        assert SLOT_ERROR_TEXT in str(info.value), str(info.value)


def test_slots_are_distinct(backend: Backend) -> None:
    slots = [backend.malloc(4, f32(i)) for i in range(8)]
    try:
        assert len(set(slots)) == 8
        assert [backend.read(s) for s in slots] == [f32(i) for i in range(8)]
    finally:
        for s in slots:
            backend.dec_ref(s)


def _double() -> Kernel:
    return map_kernel([F32], 4, lambda x: AluExp.mul(x, AluExp.f32(2)))


def test_dispatch_with_freed_or_unknown_slot_raises(backend: Backend) -> None:
    exe = backend.prepare_kernel(_double())
    a = backend.malloc(16, f32(1, 2, 3, 4))
    out = backend.malloc(16)
    backend.dec_ref(a)
    try:
        with pytest.raises(SlotError):
            backend.dispatch(exe, [a], [out])
        with pytest.raises(SlotError):
            backend.dispatch(exe, [out], [10**9])
    finally:
        backend.dec_ref(out)


def test_dispatch_argument_checks(backend: Backend) -> None:
    """Wrong number of inputs/outputs, a too-small input or a wrongly sized output raise ValueError."""
    exe = backend.prepare_kernel(_double())
    a = backend.malloc(16, f32(1, 2, 3, 4))
    small = backend.malloc(8, f32(1, 2))
    out = backend.malloc(16)
    big_out = backend.malloc(20)
    try:
        for inputs, outputs in (
            ([], [out]),
            ([a, a], [out]),
            ([a], []),
            ([a], [out, out]),
            ([small], [out]),
            ([a], [big_out]),
        ):
            with pytest.raises(ValueError):
                backend.dispatch(exe, inputs, outputs)
        backend.dispatch(exe, [a], [out])  # and the right call still works afterwards
        assert backend.read(out) == f32(2, 4, 6, 8)
    finally:
        for s in (a, small, out, big_out):
            backend.dec_ref(s)


def test_larger_input_buffer_is_fine(backend: Backend) -> None:
    """An input may be larger than the kernel reads."""
    exe = backend.prepare_kernel(_double())
    a = backend.malloc(32, f32(1, 2, 3, 4, 5, 6, 7, 8))
    out = backend.malloc(16)
    try:
        backend.dispatch(exe, [a], [out])
        assert backend.read(out) == f32(2, 4, 6, 8)
    finally:
        backend.dec_ref(a)
        backend.dec_ref(out)


def test_dispatch_order_chains(backend: Backend) -> None:
    """Dispatches run in order: write then read-modify-write chains through reused buffers."""
    inc = backend.prepare_kernel(map_kernel([F32], 4, lambda x: AluExp.add(x, AluExp.f32(1))))
    dbl = backend.prepare_kernel(_double())
    a = backend.malloc(16, f32(1, 2, 3, 4))
    b = backend.malloc(16)
    c = backend.malloc(16)
    try:
        backend.dispatch(inc, [a], [b])  # b = a + 1
        backend.dispatch(dbl, [b], [c])  # c = 2b
        backend.dispatch(inc, [c], [b])  # b = c + 1 (overwrites b after c read it)
        backend.dispatch(dbl, [b], [a])  # a = 2b (overwrites an input of the first dispatch)
        for _ in range(10):
            backend.dispatch(inc, [a], [c])
            backend.dispatch(inc, [c], [a])
        want = np.array([1, 2, 3, 4], np.float32)
        want = 2 * (2 * (want + 1) + 1) + 20
        assert from_buffer(backend.read(a), F32).tolist() == want.tolist()
        assert from_buffer(backend.read(b), F32).tolist() == (2 * (np.array([1, 2, 3, 4]) + 1) + 1).tolist()
    finally:
        for s in (a, b, c):
            backend.dec_ref(s)


def test_synchronize_is_a_barrier(backend: Backend) -> None:
    """synchronize() and synchronize_async() return once everything dispatched has run: a chain
    of dispatches, then the barrier, then the values; with nothing pending they return at once."""
    import asyncio

    backend.synchronize()
    inc = backend.prepare_kernel(map_kernel([F32], 4, lambda x: AluExp.add(x, AluExp.f32(1))))
    a, b = backend.malloc(16, f32(1, 2, 3, 4)), backend.malloc(16)
    try:
        for i in range(20):
            backend.dispatch(inc, [a] if i % 2 == 0 else [b], [b] if i % 2 == 0 else [a])
        backend.synchronize()
        assert from_buffer(backend.read(a), F32).tolist() == [21, 22, 23, 24]
        backend.dispatch(inc, [a], [b])
        asyncio.run(backend.synchronize_async())
        assert from_buffer(backend.read(b), F32).tolist() == [22, 23, 24, 25]
    finally:
        for s in (a, b):
            backend.dec_ref(s)


def test_prepare_many_prepares_each_in_order(backend: Backend) -> None:
    """jaxcore.prepare_many: every kernel prepared (concurrently where the device can), in the
    order given, each one the executable its own prepare_kernel gives; junk is a TypeError."""
    import jaxcore

    adds = (1.0, 2.0, 3.0, 1.0)
    kernels = [map_kernel([F32], 4, lambda x, c=c: AluExp.add(x, AluExp.f32(c))) for c in adds]
    exes = jaxcore.prepare_many(backend, kernels)
    assert len(exes) == 4
    a, b = backend.malloc(16, f32(1, 2, 3, 4)), backend.malloc(16)
    try:
        for exe, c in zip(exes, (1, 2, 3, 1)):
            backend.dispatch(exe, [a], [b])
            assert from_buffer(backend.read(b), F32).tolist() == [1 + c, 2 + c, 3 + c, 4 + c]
    finally:
        for s in (a, b):
            backend.dec_ref(s)
    with pytest.raises(TypeError, match="Kernels and Routines"):
        jaxcore.prepare_many(backend, [kernels[0], "not a kernel"])  # type: ignore[list-item]


def test_input_freed_right_after_dispatch(backend: Backend) -> None:
    """dec_ref of an input right after dispatch must not corrupt the pending result."""
    exe = backend.prepare_kernel(_double())
    a = backend.malloc(16, f32(1, 2, 3, 4))
    out = backend.malloc(16)
    backend.dispatch(exe, [a], [out])
    backend.dec_ref(a)
    scratch = backend.malloc(16, f32(-1, -1, -1, -1))  # may reuse a's memory
    try:
        assert backend.read(out) == f32(2, 4, 6, 8)
    finally:
        backend.dec_ref(out)
        backend.dec_ref(scratch)


def test_executable_reuse(backend: Backend) -> None:
    """One executable, many dispatches on different buffers; the output is fully rewritten each time."""
    exe = backend.prepare_kernel(_double())
    out = backend.malloc(16, f32(9, 9, 9, 9))
    try:
        for i in range(5):
            a = backend.malloc(16, f32(i, i + 1, i + 2, i + 3))
            backend.dispatch(exe, [a], [out])
            backend.dec_ref(a)
            assert backend.read(out) == f32(2 * i, 2 * i + 2, 2 * i + 4, 2 * i + 6)
    finally:
        backend.dec_ref(out)


def test_prepare_twice_returns_the_same_executable(backend: Backend) -> None:
    """Preparing the same (or a structurally equal) kernel again hits the cache: same or equal executable."""
    k1 = _double()
    k2 = _double()  # built again: equal, not identical
    e1 = backend.prepare_kernel(k1)
    e2 = backend.prepare_kernel(k1)
    e3 = backend.prepare_kernel(k2)
    assert e1 is e2 or e1 == e2
    assert e1 is e3 or e1 == e3
    assert e1.source == k1


def test_nullary_and_zero_size_kernels(backend: Backend) -> None:
    """A kernel with no inputs, and one with zero outputs (a zero-byte output buffer)."""
    got = run_kernel(backend, Kernel(0, 4, AluExp.cast(F32, AluVar.gidx)), [])
    assert got.tolist() == [0, 1, 2, 3]
    assert run_kernel(backend, Kernel(0, 0, AluExp.f32(1)), []).size == 0


def test_unused_input(backend: Backend) -> None:
    """A kernel whose nargs includes a buffer it never reads still takes (and ignores) it."""
    x = np.array([1, 2, 3, 4], np.float32)
    kernel = Kernel(2, 4, AluExp.mul(AluExp.global_index(F32, 1, 4, AluVar.gidx), AluExp.f32(3)))
    got = run_kernel(backend, kernel, [np.zeros(4, np.float32), x])
    assert got.tolist() == [3, 6, 9, 12]


def _sum_of_inputs(n: int) -> Kernel:
    exp = AluExp.global_index(F32, 0, 2, AluVar.gidx)
    for gid in range(1, n):
        exp = AluExp.add(exp, AluExp.global_index(F32, gid, 2, AluVar.gidx))
    return Kernel(n, 2, exp)


def test_max_args_honoured(backend: Backend) -> None:
    """A kernel with max_args inputs works (checked up to 64 inputs); nargs = max_args + 1 fails at
    prepare."""
    limit = backend.max_args
    assert limit == backend.capabilities.max_args and limit >= 1
    n = min(limit, 64)
    inputs = [np.array([i, 2 * i], np.float32) for i in range(n)]
    got = run_kernel(backend, _sum_of_inputs(n), inputs)
    assert got.tolist() == [sum(range(n)), 2 * sum(range(n))]
    too_many = _sum_of_inputs(limit + 1) if limit < 64 else Kernel(limit + 1, 2, _sum_of_inputs(1).exp)
    with pytest.raises(ValueError):
        backend.prepare_kernel(too_many)


def test_same_slot_bound_to_two_inputs(backend: Backend) -> None:
    """One slot passed as both inputs of a two-input kernel (x * x)."""
    exe = backend.prepare_kernel(map_kernel([F32, F32], 4, AluExp.mul))
    a = backend.malloc(16, f32(1, 2, 3, -4))
    out = backend.malloc(16)
    try:
        backend.dispatch(exe, [a, a], [out])
        assert backend.read(out) == f32(1, 4, 9, 16)
    finally:
        backend.dec_ref(a)
        backend.dec_ref(out)


def test_dispatches_are_traced(backend: Backend) -> None:
    """Between start_trace and stop_trace every dispatch is one event naming this device; a backend
    declaring device_timestamps also reports the device's own time."""
    import jaxcore

    exe = backend.prepare_kernel(_double())
    a = backend.malloc(16, f32(1, 2, 3, 4))
    out = backend.malloc(16)
    jaxcore.start_trace()
    try:
        for _ in range(3):
            backend.dispatch(exe, [a], [out])
        backend.read(out)
    finally:
        events = jaxcore.stop_trace()
        backend.dec_ref(a)
        backend.dec_ref(out)
    mine = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("device") == backend.name]
    assert len(mine) == 3, f"expected 3 dispatch events for {backend.name}, got {len(mine)}: {mine}"
    if backend.capabilities.device_timestamps:
        assert all("device_time_us" in e["args"] for e in mine), "device_timestamps=True but no device times"


def test_routine_dispatch_argument_checks(backend: Backend) -> None:
    """Routines take exactly their declared inputs/outputs, each exactly its size in bytes."""
    from jaxcore.routine import Routine, Routines

    if Routines.Sort not in backend.capabilities.routines:
        pytest.skip("unsupported-declared: routine Sort is not declared")
    exe = backend.prepare_routine(Routine.build(Routines.Sort, [(4,)], [F32]))
    x = backend.malloc(16, f32(3, 1, 2, 0))
    big = backend.malloc(20, f32(3, 1, 2, 0, 9))
    out = backend.malloc(16)
    try:
        for inputs, outputs in (([], [out]), ([x, x], [out]), ([x], []), ([big], [out]), ([x], [big])):
            with pytest.raises(ValueError):
                backend.dispatch(exe, inputs, outputs)
        backend.dispatch(exe, [x], [out])
        assert backend.read(out) == f32(0, 1, 2, 3)
    finally:
        for s in (x, big, out):
            backend.dec_ref(s)


# ---- integer arguments ---------------------------------------------------------------------------


def test_numpy_integers_are_sizes_and_slots(backend: Backend) -> None:
    """Sizes, slots, starts and counts are taken through `operator.index`: numpy integers work."""
    slot = backend.malloc(np.int64(8), f32(3, 4))
    out = backend.malloc(np.uint32(8))
    try:
        assert backend.read(np.int64(slot)) == f32(3, 4)
        assert backend.read(np.int32(slot), np.int64(4), np.uint8(4)) == f32(4)
        exe = backend.prepare_kernel(map_kernel([F32], 2, lambda x: AluExp.add(x, x)))
        backend.dispatch(exe, [np.int64(slot)], [np.int32(out)])
        assert backend.read(out) == f32(6, 8)
        backend.inc_ref(np.int64(slot))
        backend.dec_ref(np.int64(slot))
    finally:
        backend.dec_ref(slot)
        backend.dec_ref(out)


def test_bool_is_not_a_slot(backend: Backend) -> None:
    """True == 1, but a bool never names a slot: read(True) raises, it does not read slot 1."""
    slots = [backend.malloc(4, f32(i)) for i in range(2)]
    try:
        for use in (backend.read, backend.inc_ref, backend.dec_ref):
            with pytest.raises((SlotError, TypeError)):
                use(True)
        exe = backend.prepare_kernel(map_kernel([F32], 1, lambda x: x))
        with pytest.raises((SlotError, TypeError)):
            backend.dispatch(exe, [True], [slots[1]])
        with pytest.raises((TypeError, ValueError)):
            backend.malloc(True)
        assert [backend.read(s) for s in slots] == [f32(0), f32(1)]
    finally:
        for s in slots:
            backend.dec_ref(s)
