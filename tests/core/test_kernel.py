"""Kernel, Reduction and tune_nullopt: validation, identities, f16 accumulation, printing, cache keys."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker, unravel_alu
from jaxcore.tuner import tune_nullopt


def _row_sum_kernel() -> Kernel:
    st = ShapeTracker.from_shape((3, 4))
    idx = [*unravel_alu([3], AluVar.gidx), AluVar.ridx]
    exp = AluExp.global_view(DType.float32, 0, st, idx)
    epilogue = AluVar.acc(DType.float32) * AluExp.f32(2)
    return Kernel(1, 3, exp, Reduction(DType.float32, AluOp.Add, 4, epilogue))


def test_kernel_prints_like_jax_js() -> None:
    assert str(_row_sum_kernel()) == (
        "{ exp = GV_0<float32>{3,4:4,1:c}[$gidx:int32 % 3, $ridx:int32]\n"
        "  size = 3\n"
        "  reduction = Add{4} -> ($acc:float32 * 2) }"
    )


def test_tune_nullopt_lowers_views() -> None:
    tuned = tune_nullopt(_row_sum_kernel())
    assert str(tuned.exp) == "G_0<float32>[(#gidx{3} * 4) + #ridx{4}]"
    assert str(tuned.epilogue) == "($acc:float32 * 2)"
    assert tuned.thread_count == 3 and tuned.size.reduce == 4
    assert str(tuned.output_idx_exp) == "#gidx{3}"


def test_float16_sum_accumulates_in_float32() -> None:
    exp = AluExp.global_index(DType.float16, 0, 128, AluVar.gidx * AluExp.i32(8) + AluVar.ridx)
    k = Kernel(1, 16, exp, Reduction(DType.float16, AluOp.Add, 8))
    assert k.reduction is not None and k.reduction.dtype == DType.float32
    assert k.dtype == DType.float16 and k.bytes == 32
    assert str(k.reduction) == "Add{8} -> Cast<float16>($acc:float32)"
    assert str(tune_nullopt(k).exp) == "Cast<float32>(G_0<float16>[(#gidx{16} * 8) + #ridx{8}])"
    # Other float16 reductions stay in float16.
    assert Reduction(DType.float16, AluOp.Max, 8).dtype == DType.float16


@pytest.mark.parametrize(
    "dtype,op,identity",
    [
        (DType.bool, AluOp.Add, 0),
        (DType.bool, AluOp.Mul, 1),
        (DType.bool, AluOp.Min, 1),
        (DType.bool, AluOp.Max, 0),
        (DType.int32, AluOp.Min, 2**31 - 1),
        (DType.int32, AluOp.Max, -(2**31)),
        (DType.uint32, AluOp.Min, 2**32 - 1),
        (DType.uint32, AluOp.Max, 0),
        (DType.float32, AluOp.Min, math.inf),
        (DType.float64, AluOp.Max, -math.inf),
        (DType.float32, AluOp.Mul, 1),
    ],
)
def test_reduction_identities(dtype: DType, op: AluOp, identity: float) -> None:
    assert Reduction(dtype, op, 4).identity == identity


def test_malformed_kernels_are_rejected() -> None:
    read = AluExp.global_index(DType.float32, 2, 4, AluVar.gidx)
    with pytest.raises(ValueError, match="reads input 2 but has nargs=2"):
        Kernel(2, 4, read)
    with pytest.raises(TypeError, match="Unsupported reduction: Sub"):
        Reduction(DType.float32, AluOp.Sub, 4)
    with pytest.raises(ValueError, match="may use only"):
        Kernel(0, 4, AluVar.ridx)
    with pytest.raises(ValueError, match="epilogue may use only"):
        Reduction(DType.float32, AluOp.Add, 4, AluExp.variable(DType.float32, "other"))
    with pytest.raises(TypeError, match="accumulates"):
        Reduction(DType.float32, AluOp.Add, 4, AluExp.cast(DType.float32, AluVar.acc(DType.int32)))
    with pytest.raises(ValueError, match="size"):
        Kernel(0, -1, AluExp.f32(1))
    with pytest.raises(TypeError, match="exp must be an AluExp"):
        Kernel(0, 1, 1.0)  # type: ignore[arg-type]


def test_kernel_keys_and_input_sizes() -> None:
    a, b = _row_sum_kernel(), _row_sum_kernel()
    assert a == b and a.key() == b.key() and hash(a) == hash(b)
    assert Kernel(1, 3, a.exp, Reduction(DType.float32, AluOp.Max, 4)).key() != a.key()
    assert a.input_bytes() == [48]
    assert a.exp.simplify() is a.exp  # the constructor simplified it already


def test_kernel_says_its_inputs_dtypes() -> None:
    """Each input's dtype comes from the reads of it, in the items and in the epilogue (through a
    view too); an input never read is None, and one read as two dtypes is an error."""
    st = ShapeTracker.from_shape((3, 4))
    item = AluExp.cast(
        DType.float32, AluExp.global_view(DType.int32, 0, st, [*unravel_alu([3], AluVar.gidx), AluVar.ridx])
    ) * AluExp.global_index(DType.float32, 2, 12, AluVar.gidx * AluExp.i32(4) + AluVar.ridx)
    row = AluExp.global_index(DType.uint32, 3, 3, AluVar.gidx)
    epilogue = AluExp.cast(DType.float64, AluVar.acc(DType.float32)) + AluExp.cast(DType.float64, row)
    k = Kernel(4, 3, item, Reduction(DType.float32, AluOp.Add, 4, epilogue))
    assert k.input_dtypes == (DType.int32, None, DType.float32, DType.uint32)
    assert Kernel(0, 2, AluExp.f32(1)).input_dtypes == ()
    as_f32 = AluExp.global_index(DType.float32, 0, 4, AluVar.gidx)
    as_i32 = AluExp.global_index(DType.int32, 0, 4, AluVar.gidx)
    twice = Kernel(1, 4, as_f32 + AluExp.cast(DType.float32, as_i32))
    with pytest.raises(ValueError, match="reads input 0 as both float32 and int32"):
        _ = twice.input_dtypes


def test_live_drops_a_reduction_whose_epilogue_ignores_acc() -> None:
    g, r = AluVar.gidx, AluVar.ridx
    item = AluExp.global_index(DType.float32, 0, 12, g * 4 + r)
    dead = Kernel(1, 3, item, Reduction(DType.float32, AluOp.Add, 4, AluExp.cast(DType.float32, g)))
    live = dead.live()
    assert live.reduction is None and live.exp == AluExp.cast(DType.float32, g) and live.dtype == dead.dtype
    used = Kernel(1, 3, item, Reduction(DType.float32, AluOp.Add, 4, AluVar.acc(DType.float32) * 2.0))
    assert used.live() is used


def test_live_drops_a_reduction_only_a_decided_bool_term_reads() -> None:
    # `false && (acc != 0)` and `true || (acc != 0)` (fuzzed on an H200, whose GLSL compiler
    # crashed on the loop it found dead): the simplifier decides them, and the loop goes
    g, r = AluVar.gidx, AluVar.ridx
    item = AluExp.global_index(DType.uint32, 0, 12, g * 4 + r)
    used = AluExp(AluOp.Cmpne, DType.bool, (AluVar.acc(DType.uint32), AluExp.u32(0)))
    for mode, const, want in (("and", False, False), ("or", True, True)):
        epilogue = AluExp(AluOp.BitCombine, DType.bool, (AluExp.bool_(const), used), mode)
        live = Kernel(1, 3, item, Reduction(DType.uint32, AluOp.Min, 4, epilogue)).live()
        assert live.reduction is None and live.exp == AluExp.bool_(want)


def test_live_folds_a_reduction_of_items_that_read_nothing() -> None:
    # the items are the same for every output (no read, no gidx): the fold is a constant, computed
    # by the contract in the reduction's dtype (float32 rounding per step)
    r = AluVar.ridx
    item = AluExp.cast(DType.float32, r) * AluExp.f32(0.1)
    epilogue = AluVar.acc(DType.float32) + AluExp.cast(DType.float32, AluVar.gidx)
    live = Kernel(0, 3, item, Reduction(DType.float32, AluOp.Add, 7, epilogue)).live()
    acc = np.float32(0)
    for i in range(7):
        acc = np.float32(acc + np.float32(np.float32(i) * np.float32(0.1)))
    assert live.reduction is None
    assert live.exp.evaluate({"gidx": 0}) == float(acc) and live.exp.evaluate({"gidx": 2}) == float(acc + 2)
    # items that read a buffer, or vary with the output, are folded by the device
    read = AluExp.global_index(DType.float32, 0, 7, r)
    k = Kernel(1, 3, read, Reduction(DType.float32, AluOp.Add, 7, epilogue))
    assert k.live() is k
    k = Kernel(
        0, 3, item * AluExp.cast(DType.float32, AluVar.gidx), Reduction(DType.float32, AluOp.Add, 7, epilogue)
    )
    assert k.live() is k


def test_a_range_past_float64_builds() -> None:
    # a float Idiv's range bounds are exact ints (the truncated quotient of 1e300 by -8); times a
    # uint32 range they passed float64's range, and the range analysis raised OverflowError building
    # the kernel (fuzzed)
    f64 = DType.float64
    pick = AluExp.where(
        AluExp.global_index(DType.bool, 1, 2, AluVar.gidx), AluExp.f64(1e300), AluExp.f64(-8.0)
    )
    q = AluExp.idiv(pick, AluExp.f64(-8.0))
    e = AluExp.cast(f64, AluExp.global_index(DType.uint32, 0, 2, AluVar.gidx)) * q
    k = Kernel(2, 2, AluExp.cmplt(AluExp.f64(0.0) - AluExp.cast(f64, AluVar.gidx), AluExp.min(e, 0.0)))
    assert k.dtype == DType.bool
