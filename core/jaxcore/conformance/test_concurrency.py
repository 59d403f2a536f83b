"""Four threads using one backend at once: malloc, prepare, dispatch, read and free, with kernels
that every thread shares and kernels only one thread uses, and an input buffer that all threads
read and hold references to. Every result must be exact and nothing may leak or deadlock.
The data is int32, or float32/float64 where int32 is not declared (every value is a small integer,
exact in either); the index arithmetic is int32 on every device.

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
from jaxcore.conformance import oracle
from jaxcore.conformance.harness import garbage, skip_if_undeclared
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

THREADS = 4
ROUNDS = 60
N = 64


def _affine(dt: DType, scale: int, shift: int) -> Kernel:
    """out = x * scale + shift + shared[gidx] (exact: small integers)."""
    x = AluExp.global_index(dt, 0, N, AluVar.gidx)
    s = AluExp.global_index(dt, 1, N, AluVar.gidx)
    return Kernel(2, N, x * AluExp.const(dt, scale) + AluExp.const(dt, shift) + s)


def _row_sums(dt: DType) -> Kernel:
    item = AluExp.global_index(dt, 0, N, AluVar.gidx * 8 + AluVar.ridx)
    return Kernel(2, N // 8, item, Reduction(dt, AluOp.Add, 8))


def _dtype(backend: Backend) -> DType:
    """The data dtype: int32, else float32 or float64 (which hold these integers exactly); where
    none is declared, int32, so that `skip_if_undeclared` checks the refusal and skips."""
    from jaxcore.conformance.test_fuzz import data_dtype

    return data_dtype(backend, (DType.int32, DType.float32, DType.float64))


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
    dt = _dtype(backend)
    st = oracle.storage(str(dt))
    shared_kernels = [_affine(dt, 2, 1), _affine(dt, -3, 7), _row_sums(dt)]
    for k in shared_kernels:
        skip_if_undeclared(backend, k)
    live = getattr(backend, "live_slots", lambda: None)()
    shared = (np.arange(N) * 3 - 50).astype(st)
    shared_slot = backend.malloc(shared.nbytes, shared.tobytes())
    results = [0] * THREADS

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        for r in range(ROUNDS):
            x = rng.integers(-1000, 1000, N).astype(st)
            pick = r % 4
            if pick < 3:
                kernel = shared_kernels[pick]
            else:  # a kernel only this thread (and this round) compiles
                kernel = _affine(dt, 100 + t, r)
            if kernel.reduction is not None:
                want = x.astype(np.int64).reshape(N // 8, 8).sum(axis=1).astype(st)
            else:
                scale, shift = {0: (2, 1), 1: (-3, 7)}.get(pick, (100 + t, r))
                want = (x.astype(np.int64) * scale + shift + shared.astype(np.int64)).astype(st)
            backend.inc_ref(shared_slot)
            a = backend.malloc(x.nbytes, x.tobytes())
            o = backend.malloc(kernel.bytes, garbage(kernel.bytes))
            try:
                exe = backend.prepare_kernel(kernel)
                backend.dispatch(exe, [a, shared_slot], [o])
                got = np.frombuffer(backend.read(o), st)
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
        assert np.array_equal(np.frombuffer(backend.read(shared_slot), st), shared), "shared input changed"
        backend.dec_ref(shared_slot)
    assert results == [ROUNDS] * THREADS
    if live is not None:
        now = getattr(backend, "live_slots", lambda: None)()
        assert now == live, f"{now - live} slots leaked"


def test_four_threads_prepare_the_same_kernels(backend: Backend) -> None:
    """Threads racing to prepare the same new kernels get one Executable per kernel, and it works."""
    dt = _dtype(backend)
    st = oracle.storage(str(dt))
    kernels = [_affine(dt, 7, k) for k in range(1000, 1012)]
    skip_if_undeclared(backend, kernels[0])
    seen: list[dict[int, Executable]] = [{} for _ in range(THREADS)]

    def work(t: int) -> None:
        order = range(len(kernels)) if t % 2 == 0 else reversed(range(len(kernels)))
        for k in order:
            seen[t][k] = backend.prepare_kernel(kernels[k])

    _run_threads(work)
    for k in range(len(kernels)):
        exes = {id(seen[t][k]) for t in range(THREADS)}
        assert len(exes) == 1, f"kernel {k} was compiled into {len(exes)} different Executables"
    x = np.arange(N).astype(st)
    s = np.zeros(N, st)
    a, b = backend.malloc(x.nbytes, x.tobytes()), backend.malloc(s.nbytes, s.tobytes())
    o = backend.malloc(x.nbytes)
    try:
        backend.dispatch(seen[0][5], [a, b], [o])
        assert np.array_equal(np.frombuffer(backend.read(o), st), x * 7 + 1005)
    finally:
        for slot in (a, b, o):
            backend.dec_ref(slot)
