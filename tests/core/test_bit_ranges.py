"""Value ranges through bit ops: which bits an integer may have set (simplify._may_be_one).

A shader compiler tracks bits (NVIDIA folded `f64((u << 31) & 0x55555555) / x` to 0, knowing the
numerator 0), so the core must know such a value as the constant it is; each case is checked
against every value the expression can take on a sample of inputs."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import AluExp, AluVar, DType
from jaxcore.simplify import value_range

U32, I32 = DType.uint32, DType.int32


def _u() -> AluExp:
    return AluExp.global_index(U32, 0, 64, AluVar.gidx)


def _i() -> AluExp:
    return AluExp.global_index(I32, 0, 64, AluVar.gidx)


CASES = {
    "shl31_and_even_bits": (
        lambda: AluExp.bit_and(AluExp.shl(_u(), AluExp.u32(31)), AluExp.u32(0x55555555)),
        (0, 0),
    ),
    "shl_count_taken_mod_32": (
        lambda: AluExp.bit_and(AluExp.shl(_u(), AluExp.u32(2**31 - 1)), AluExp.u32(0x7FFFFFFF)),
        (0, 0),
    ),
    "and_low_byte": (lambda: AluExp.bit_and(_u(), AluExp.u32(0xFF)), (0, 255)),
    "shr_28": (lambda: AluExp.shr(_u(), AluExp.u32(28)), (0, 15)),
    "or_of_masked": (
        lambda: AluExp.bit_or(AluExp.bit_and(_u(), AluExp.u32(0xF0)), AluExp.bit_and(_u(), AluExp.u32(0x0F))),
        (0, 255),
    ),
    "int_and_clears_sign": (lambda: AluExp.bit_and(_i(), AluExp.i32(0x7F)), (0, 127)),
    "int_arithmetic_shift_keeps_sign": (lambda: AluExp.shr(_i(), AluExp.i32(28)), (-8, 7)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bit_ranges(name: str) -> None:
    make, want = CASES[name]
    e = make()
    lo, hi = value_range(e)
    assert lo <= want[0] and want[1] <= hi, (lo, hi)  # sound: holds the values it can take
    if want[0] == want[1]:
        assert (lo, hi) == want and e.simplify().op.name == "Const"
    rng = np.random.default_rng(0)
    dt = np.uint32 if e.dtype == U32 else np.int32
    xs = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, 256, dtype=dt, endpoint=True)
    values = [
        e.evaluate({"gidx": 0}, lambda gid, i, x=int(x): x) for x in [*xs, 0, -1 if dt == np.int32 else 0]
    ]
    assert lo <= min(values) and max(values) <= hi, (min(values), max(values), lo, hi)
