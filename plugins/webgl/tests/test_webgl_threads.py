"""Four threads on one webgl backend: every GL call runs on the context's one thread, so they queue
there; a mix of operations must finish (no deadlock, no queue that slows as it grows) and be exact.

4 threads x 1,000 rounds of the conformance suite's concurrency test stalled for minutes: not a
deadlock, and not the queue: that test compiles a new kernel every fourth round (1,000 programs), and
llvmpipe compiles a program's machine code at its first draw (~0.1 s here, on the GL thread).
This test keeps new programs few, so its time measures the queue."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np

from jaxcore.alu import AluExp
from jaxcore.conformance.harness import map_kernel
from jaxcore.conformance.test_concurrency import _run_threads
from jaxcore.routine import Routine, Routines

# JAXCORE_THREAD_ROUNDS=2000 for the robustness figure (4 threads x 2,000 operations; its time is printed)
ROUNDS = int(os.environ.get("JAXCORE_THREAD_ROUNDS", "300"))
N = 256


def test_four_threads_of_mixed_operations(gl) -> None:
    kernels = [
        map_kernel(["float32"] * 2, N, lambda a, b: AluExp.add(AluExp.mul(a, AluExp.f32(2)), b)),
        map_kernel(["float32"] * 2, N, lambda a, b: AluExp.sub(a, b)),
        map_kernel(["float32"] * 2, N, lambda a, b: AluExp.max(a, b)),
    ]
    want = [lambda a, b: a * 2 + b, lambda a, b: a - b, np.maximum]
    sort = Routine.build(Routines.Sort, [(N,)], ["float32"])
    shared = np.arange(N, dtype=np.float32) - 100
    shared_slot = gl.malloc(shared.nbytes, shared.tobytes())
    live = gl.live_slots()
    done = [0] * 4

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        for r in range(ROUNDS):
            x = rng.integers(-1000, 1000, N).astype(np.float32)
            a = gl.malloc(x.nbytes, x.tobytes())
            gl.inc_ref(shared_slot)
            try:
                pick = r % 6
                if pick < 3:  # shared kernels, a read now or after a later dispatch
                    o = gl.malloc(x.nbytes)
                    gl.dispatch(gl.prepare_kernel(kernels[pick]), [a, shared_slot], [o])
                    got = np.frombuffer(gl.read(o) if r % 2 else asyncio.run(gl.read_async(o)), np.float32)
                    gl.dec_ref(o)
                    expect = want[pick](x, shared)
                elif pick == 3:  # in place: the output is also an input
                    gl.dispatch(gl.prepare_kernel(kernels[1]), [a, shared_slot], [a])
                    got, expect = np.frombuffer(gl.read(a), np.float32), x - shared
                elif pick == 4:
                    o = gl.malloc(x.nbytes)
                    gl.dispatch(gl.prepare_routine(sort), [a], [o])
                    got, expect = np.frombuffer(gl.read(o), np.float32), np.sort(x)
                    gl.dec_ref(o)
                else:  # a kernel of this thread's own (a few new programs in all)
                    c = AluExp.f32(t + r % 2)
                    k = map_kernel(["float32"], N, lambda v, c=c: AluExp.add(v, c))
                    gl.dispatch(gl.prepare_kernel(k), [a], [a])
                    got, expect = np.frombuffer(gl.read(a, 0, 64), np.float32), x[:16] + t + r % 2
            finally:
                gl.dec_ref(a)
                gl.dec_ref(shared_slot)
            assert got.tolist() == expect.tolist(), (t, r, pick)
            done[t] += 1

    start = time.monotonic()
    _run_threads(work, timeout=max(120, ROUNDS // 2))
    elapsed = time.monotonic() - start
    print(f"\n4 threads x {ROUNDS} mixed operations on webgl: {elapsed:.1f} s")
    assert done == [ROUNDS] * 4
    assert gl.live_slots() == live
    assert np.frombuffer(gl.read(shared_slot), np.float32).tolist() == shared.tolist()
    gl.dec_ref(shared_slot)
    assert elapsed < 60, elapsed
