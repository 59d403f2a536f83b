"""Four threads using one backend at once: malloc, prepare, dispatch, read and free, with kernels
that every thread shares and kernels only one thread uses, and an input buffer that all threads
read and hold references to. Every result must be exact and nothing may leak or deadlock.

A backend may serialise internally (a lock around its device); it may not corrupt its slot table,
compile the same kernel into two different Executables that disagree, or hand one thread's
buffer to another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend, Executable
from jaxcore.conformance.harness import garbage
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

THREADS = 4
ROUNDS = 60
N = 64


def _affine(scale: int, shift: int) -> Kernel:
    """out = x * scale + shift + shared[gidx] (int32, exact)."""
    x = AluExp.global_index(DType.int32, 0, N, AluVar.gidx)
    s = AluExp.global_index(DType.int32, 1, N, AluVar.gidx)
    return Kernel(2, N, x * AluExp.i32(scale) + AluExp.i32(shift) + s)


def _row_sums() -> Kernel:
    item = AluExp.global_index(DType.int32, 0, N, AluVar.gidx * 8 + AluVar.ridx)
    return Kernel(2, N // 8, item, Reduction(DType.int32, AluOp.Add, 8))


def _run_threads(work: Callable[[int], None], timeout: float = 120.0) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def body(t: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(t)
        except BaseException as exc:  # reported below, with the thread's number
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    hung = [th.name for th in threads if th.is_alive()]
    assert not hung, f"threads {hung} did not finish within {timeout} s (deadlock?)"
    if errors:
        raise errors[0]


def test_four_threads_share_one_backend(backend: Backend) -> None:
    """4 threads x 60 rounds of malloc/prepare/dispatch/read/free: shared and private kernels, a
    shared input held with inc_ref/dec_ref, every result exact, no slot left behind."""
    live = getattr(backend, "live_slots", lambda: None)()
    shared = np.arange(N, dtype=np.int32) * 3 - 50
    shared_slot = backend.malloc(N * 4, shared.tobytes())
    shared_kernels = [_affine(2, 1), _affine(-3, 7), _row_sums()]
    results = [0] * THREADS

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        for r in range(ROUNDS):
            x = rng.integers(-1000, 1000, N, dtype=np.int32)
            pick = r % 4
            if pick < 3:
                kernel = shared_kernels[pick]
            else:  # a kernel only this thread (and this round) compiles
                kernel = _affine(100 + t, r)
            if kernel.reduction is not None:
                want = x.reshape(N // 8, 8).sum(axis=1, dtype=np.int64).astype(np.int32)
            else:
                scale, shift = {0: (2, 1), 1: (-3, 7)}.get(pick, (100 + t, r))
                want = (x.astype(np.int64) * scale + shift + shared).astype(np.int32)
            backend.inc_ref(shared_slot)
            a = backend.malloc(N * 4, x.tobytes())
            o = backend.malloc(kernel.bytes, garbage(kernel.bytes))
            try:
                exe = backend.prepare_kernel(kernel)
                backend.dispatch(exe, [a, shared_slot], [o])
                got = np.frombuffer(backend.read(o), np.int32)
            finally:
                backend.dec_ref(a)
                backend.dec_ref(o)
                backend.dec_ref(shared_slot)
            assert np.array_equal(got, want), (
                f"thread {t} round {r} on {backend.name}: got {got[:8].tolist()}..., "
                f"want {want[:8].tolist()}..."
            )
            results[t] += 1

    try:
        _run_threads(work)
    finally:
        assert np.array_equal(np.frombuffer(backend.read(shared_slot), np.int32), shared), (
            "shared input changed"
        )
        backend.dec_ref(shared_slot)
    assert results == [ROUNDS] * THREADS
    if live is not None:
        now = getattr(backend, "live_slots", lambda: None)()
        assert now == live, f"{now - live} slots leaked"


def test_four_threads_prepare_the_same_kernels(backend: Backend) -> None:
    """Threads racing to prepare the same new kernels get one Executable per kernel, and it works."""
    kernels = [_affine(7, k) for k in range(1000, 1012)]
    seen: list[dict[int, Executable]] = [{} for _ in range(THREADS)]

    def work(t: int) -> None:
        order = range(len(kernels)) if t % 2 == 0 else reversed(range(len(kernels)))
        for k in order:
            seen[t][k] = backend.prepare_kernel(kernels[k])

    _run_threads(work)
    for k in range(len(kernels)):
        exes = {id(seen[t][k]) for t in range(THREADS)}
        assert len(exes) == 1, f"kernel {k} was compiled into {len(exes)} different Executables"
    x = np.arange(N, dtype=np.int32)
    s = np.zeros(N, np.int32)
    a, b = backend.malloc(N * 4, x.tobytes()), backend.malloc(N * 4, s.tobytes())
    o = backend.malloc(N * 4)
    try:
        backend.dispatch(seen[0][5], [a, b], [o])
        assert np.array_equal(np.frombuffer(backend.read(o), np.int32), x * 7 + 1005)
    finally:
        for slot in (a, b, o):
            backend.dec_ref(slot)
