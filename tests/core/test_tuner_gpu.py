"""tune_gpu: the thread plan follows how the reads move in memory; tune_nullopt is unchanged."""

from __future__ import annotations

import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker
from jaxcore.tuner import GpuLimits, TuneSize, read_strides, tune_gpu, tune_nullopt

F32 = DType.float32


def _rows(rows: int, cols: int, transpose: bool = False) -> Kernel:
    st = (
        ShapeTracker.from_shape([cols, rows]).permute([1, 0])
        if transpose
        else ShapeTracker.from_shape([rows, cols])
    )
    x = AluExp.global_view(F32, 0, st, [AluVar.gidx, AluVar.ridx])
    return Kernel(1, rows, x, Reduction(F32, AluOp.Add, cols))


def test_nullopt_plan_is_the_plain_one() -> None:
    t = tune_nullopt(_rows(8, 16))
    assert t.size == TuneSize(reduce=16) and t.thread_count == 8


def test_read_strides_measure_the_views() -> None:
    (s,) = read_strides(_rows(64, 32))
    assert (s.d_gidx, s.d_ridx) == (32, 1)
    (s,) = read_strides(_rows(64, 32, transpose=True))
    assert (s.d_gidx, s.d_ridx) == (1, 64)


def test_long_contiguous_rows_are_grouped() -> None:
    t = tune_gpu(_rows(4096, 4096))
    assert t.size.groups >= 32 and t.size.split == 1 and t.size.local == t.size.groups


def test_columns_stay_one_thread_per_output() -> None:
    t = tune_gpu(_rows(1 << 16, 512, transpose=True))
    assert t.size.groups == 1 and t.size.unroll == 4


def test_a_full_sum_splits_across_workgroups() -> None:
    t = tune_gpu(_rows(1, 1 << 26), GpuLimits())
    assert t.size.groups == 256 and t.size.split >= 512


def test_matmul_upcasts_along_the_reused_operand() -> None:
    m = k = n = 512
    ia, ja = AluExp.idiv(AluVar.gidx, AluExp.i32(n)), AluExp.mod(AluVar.gidx, AluExp.i32(n))
    a = AluExp.global_view(F32, 0, ShapeTracker.from_shape([m, k]), [ia, AluVar.ridx])
    b = AluExp.global_view(F32, 1, ShapeTracker.from_shape([k, n]), [AluVar.ridx, ja])
    t = tune_gpu(Kernel(2, m * n, a * b, Reduction(F32, AluOp.Add, k)))
    assert t.size.upcast == 4 and t.size.groups == 1 and t.thread_count == m * n // 4


@pytest.mark.parametrize(
    ("max_copies", "unroll", "upcast"), [(16, 4, 4), (8, 2, 4), (4, 1, 4), (2, 2, 1), (1, 1, 1)]
)
def test_max_copies_bounds_unroll_times_upcast(max_copies: int, unroll: int, upcast: int) -> None:
    """A device that compiles long loop bodies slowly asks for fewer copies: unroll goes first."""
    m = k = n = 512
    ia, ja = AluExp.idiv(AluVar.gidx, AluExp.i32(n)), AluExp.mod(AluVar.gidx, AluExp.i32(n))
    a = AluExp.global_view(F32, 0, ShapeTracker.from_shape([m, k]), [ia, AluVar.ridx])
    b = AluExp.global_view(F32, 1, ShapeTracker.from_shape([k, n]), [AluVar.ridx, ja])
    t = tune_gpu(Kernel(2, m * n, a * b, Reduction(F32, AluOp.Add, k)), GpuLimits(max_copies=max_copies))
    assert (t.size.unroll, t.size.upcast) == (unroll, upcast)
    assert t.thread_count == m * n // upcast


def test_elementwise_plan() -> None:
    x = AluExp.global_view(F32, 0, ShapeTracker.from_shape([100]), [AluVar.gidx])
    t = tune_gpu(Kernel(1, 100, x + 1.0), GpuLimits(local=64))
    assert t.size.local == 64 and t.thread_count == 100
