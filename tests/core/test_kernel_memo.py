"""Building a kernel twice: the second build reuses the first's simplified expression and checks
(a memo keyed by the unsimplified tree's digest), gives an equal kernel, still rejects what the first
rejected, and is safe from many threads at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction, ShapeTracker
from jaxcore import kernel as kernel_module
from jaxcore.shape import unravel_alu

F32 = DType.float32


def mlp_layer(batch: int = 8, fan_in: int = 12, fan_out: int = 5) -> Kernel:
    """relu(x @ w + b) as a frontend writes it, every node built afresh."""
    idx = [*unravel_alu([batch, fan_out], AluVar.gidx), AluVar.ridx]
    x = ShapeTracker.from_shape([batch, fan_in]).reshape([batch, 1, fan_in]).expand([batch, fan_out, fan_in])
    w = ShapeTracker.from_shape([fan_in, fan_out]).permute([1, 0]).reshape([1, fan_out, fan_in])
    w = w.expand([batch, fan_out, fan_in])
    item = AluExp.global_view(F32, 0, x, idx) * AluExp.global_view(F32, 1, w, idx)
    b = ShapeTracker.from_shape([fan_out]).reshape([1, fan_out]).expand([batch, fan_out])
    bias = AluExp.global_view(F32, 2, b, unravel_alu([batch, fan_out], AluVar.gidx))
    epilogue = AluExp.max(AluVar.acc(F32) + bias, AluExp.f32(0))
    return Kernel(3, batch * fan_out, item, Reduction(F32, AluOp.Add, fan_in, epilogue))


def test_rebuild_shares_the_simplified_expression() -> None:
    first, second = mlp_layer(), mlp_layer()
    assert first.key() == second.key() and first == second
    # the memo hands out the very same simplified trees, so nothing was simplified again
    assert second.exp is first.exp
    assert second.reduction is not None and first.reduction is not None
    assert second.reduction.epilogue is first.reduction.epilogue


def test_rebuild_computes_the_same_values() -> None:
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(8, 12)), rng.normal(size=(12, 5)), rng.normal(size=5)
    flat = [a.astype(np.float32).ravel() for a in (x, w, b)]
    want = np.maximum(x @ w + b, 0)
    for kernel in (mlp_layer(), mlp_layer()):
        tuned_exp = kernel.exp.rewrite_global_views()
        red = kernel.reduction
        assert red is not None
        out = []
        for g in range(kernel.size):
            acc = sum(
                float(tuned_exp.evaluate({"gidx": g, "ridx": r}, lambda gid, i: flat[gid][i]))
                for r in range(red.size)
            )
            epi = red.epilogue.rewrite_global_views()
            out.append(epi.evaluate({"gidx": g, "acc": acc}, lambda gid, i: flat[gid][i]))
        np.testing.assert_allclose(np.array(out).reshape(8, 5), want, rtol=1e-5, atol=1e-5)


def test_rebuild_still_checks() -> None:
    read = AluExp.global_index(F32, 2, 4, AluVar.gidx)
    for _ in range(2):  # the second time the facts come from the memo
        with pytest.raises(ValueError, match="reads input 2 but has nargs=2"):
            Kernel(2, 4, read)
        with pytest.raises(ValueError, match="may use only"):
            Kernel(3, 4, read + AluExp.cast(F32, AluVar.ridx))
        with pytest.raises(ValueError, match="epilogue may use only"):
            Reduction(F32, AluOp.Add, 4, AluVar.acc(F32) + AluExp.cast(F32, AluVar.ridx))
        with pytest.raises(TypeError, match=r"reads \$acc as int32"):
            Reduction(F32, AluOp.Add, 4, AluExp.cast(F32, AluVar.acc(DType.int32)))
    Kernel(3, 4, read)  # the same tree is fine where it reads within nargs


def test_epilogue_gids_are_checked_against_nargs() -> None:
    epilogue = AluVar.acc(F32) + AluExp.global_index(F32, 3, 4, AluVar.gidx)
    red = Reduction(F32, AluOp.Add, 4, epilogue)
    item = AluExp.global_index(F32, 0, 16, AluVar.gidx * AluExp.i32(4) + AluVar.ridx)
    for _ in range(2):
        with pytest.raises(ValueError, match="reads input 3 but has nargs=2"):
            Kernel(2, 4, item, red)
    assert Kernel(4, 4, item, red).nargs == 4


def test_many_threads_build_the_same_kernels() -> None:
    kernel_module._FACTS.clear()
    keys: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work() -> None:
        try:
            start.wait()
            for size in (3, 4, 5, 3, 4, 5):
                keys.append(mlp_layer(fan_out=size).key())
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(keys) == 48 and len(set(keys)) == 3


def test_memo_is_bounded() -> None:
    memo: kernel_module._Memo[int, int] = kernel_module._Memo(4)
    for i in range(10):
        memo.put(i, i * i)
    assert len(memo) == 4
    assert memo.get(0) is None and memo.get(9) == 81
