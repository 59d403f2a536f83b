"""The SGEMM's row blocks shared among threads (matmul.sgemm_ir): results with several threads on one
matrix and on whole matrices, the wait of a later K block for the same rows of the one before, the
abort word, and a thread that fails without leaving the others waiting."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from jaxcore import DType
from jaxcore.matmul_shape import matmul_kernel
from jaxcore_wasm import matmul, runtime
from jaxcore_wasm.backend import WasmBackend, _i32

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def be3() -> WasmBackend:
    return WasmBackend(threads=3)


def _run(be: WasmBackend, m: int, n: int, kk: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    x = RNG.normal(0, 1, (batch, m, kk)).astype(np.float32)
    y = RNG.normal(0, 1, (batch, kk, n)).astype(np.float32)
    exe = be.prepare_kernel(matmul_kernel(m, n, kk, batch=batch))
    assert exe.data.plan.matmul is not None
    slots = [be.malloc(a.nbytes, a.tobytes()) for a in (x, y)]
    out = be.malloc(4 * batch * m * n)
    be.dispatch(exe, slots, [out])
    got = np.frombuffer(be.read(out), np.float32).reshape(batch, m, n).copy()
    for s in (*slots, out):
        be.dec_ref(s)
    return got, x.astype(np.float64) @ y.astype(np.float64)


@pytest.mark.parametrize(
    "m,n,kk,batch",
    [
        (151, 1100, 602, 1),  # three threads share 3 row blocks of 2 N blocks x 2 K blocks
        (181, 40, 1100, 2),  # batch below the threads: each matrix shared, 3 K blocks
        (64, 128, 600, 4),  # batch at least the threads: whole matrices per thread
        (7, 300, 1030, 1),  # one row block: one thread
    ],
)
def test_shared_sgemm_matches_numpy(be3: WasmBackend, m: int, n: int, kk: int, batch: int) -> None:
    for _ in range(3):  # the order threads take blocks in differs from run to run
        got, want = _run(be3, m, n, kk, batch)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


def _call_later_k_block(be: WasmBackend, release: str) -> tuple[float, np.ndarray]:
    """sgemm with the first K block's row blocks marked taken but not done: the call must wait for
    the host to set the done flags (`release="flags"`) or the abort word (`"abort"`)."""
    m, n, kk = 2 * matmul.MC, 2 * matmul.NR, matmul.KC + 8
    words = matmul.sync_words(m, n, kk)
    ptrs = [be.allocator.alloc(nb) for nb in (4 * m * kk, 4 * kk * n, 4 * m * n, 4 * words)]
    a, b, c, y = ptrs
    be.array(a, DType.float32, (m * kk,))[:] = 1.0
    be.array(b, DType.float32, (kk * n,))[:] = 1.0
    be.array(c, DType.float32, (m * n,))[:] = 5.0
    sync = be.array(y, DType.int32, (words,))
    sync[:] = 0
    mblocks = -(-m // matmul.MC)
    sync[1] = mblocks  # K block 0: every row block taken; their done flags stay 0
    flags0 = 1 + 2  # one N block, two K blocks: the flags of K block 0 start after the two counters

    def release_later() -> None:
        time.sleep(0.1)
        if release == "flags":
            sync[flags0 : flags0 + mblocks] = 1
        else:
            sync[0] = 1

    helper = threading.Thread(target=release_later)
    args = [a, kk, 1, b, n, 1, c, n, m, n, kk, be._scratch_for(0), y]
    fref = be.lane.funcs(be._sgemm())["sgemm"]
    helper.start()
    t0 = time.perf_counter()
    be.lane.call(fref, runtime.make_args([_i32(v) for v in args]), 13)
    waited = time.perf_counter() - t0
    helper.join()
    out = be.array(c, DType.float32, (m, n)).copy()
    for p in ptrs:
        be.allocator.free(p)
    return waited, out


def test_later_k_block_waits_for_the_rows_before(be3: WasmBackend) -> None:
    waited, out = _call_later_k_block(be3, "flags")
    assert waited >= 0.09
    np.testing.assert_array_equal(out, 5.0 + 8.0)  # only K block 1 (8 items) added, after the wait


def test_abort_word_ends_the_wait(be3: WasmBackend) -> None:
    waited, out = _call_later_k_block(be3, "abort")
    assert 0.09 <= waited < 5.0
    np.testing.assert_array_equal(out, 5.0)  # nothing added


def test_failing_thread_does_not_leave_the_others_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    be = WasmBackend(threads=2)
    be.pool()  # the workers' lanes exist before the patch
    real = runtime.Lane.funcs

    def funcs(self: runtime.Lane, module: object) -> object:
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)  # the main thread is into the later K blocks by now
            raise RuntimeError("worker lost")
        return real(self, module)

    monkeypatch.setattr(runtime.Lane, "funcs", funcs)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="worker lost"):
        _run(be, 300, 200, 1100, 1)
    assert time.perf_counter() - t0 < 30
