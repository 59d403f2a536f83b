"""The fuzz judge compares two devices' float sums by what reassociation allows: n u sum|x| of the
exact sum each, not a bound relative to the result (which a cancelling sum makes tiny)."""

from __future__ import annotations

import numpy as np

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.conformance.test_fuzz import Case, Env, judge
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

F32 = DType.float32


def _sum_case(n: int, sum_abs: float) -> Case:
    item = AluExp.global_index(F32, 0, n, AluVar.ridx)
    k = Kernel(1, 1, item, Reduction(F32, AluOp.Add, n))
    return Case(k, [], np.zeros(1), "sum", item, Env({}, []), "sum", sum_abs=np.array([sum_abs]))


def test_cancelling_sums_of_two_devices_agree_within_the_reassociation_bound() -> None:
    case = _sum_case(64, 1.0e8)  # items of 1e8 that cancel to about 1
    a, b = np.array([0.5], np.float32), np.array([2.0], np.float32)
    assert judge(case, a, None, b) is None  # each may be 64 * 2^-24 * 1e8 = 381 off the exact sum
    far = np.array([2000.0], np.float32)  # more than both bounds together
    assert judge(case, far, None, b) is not None


def test_without_the_magnitudes_the_bound_is_relative() -> None:
    case = _sum_case(8, 1.0)
    case.sum_abs = None
    assert judge(case, np.array([1.0], np.float32), None, np.array([1.0000005], np.float32)) is None
    assert judge(case, np.array([1.0], np.float32), None, np.array([1.01], np.float32)) is not None
