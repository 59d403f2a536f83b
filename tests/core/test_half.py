"""float16 held in float32 (jaxcore.half): the three conversion helpers and the float64 rounding
to odd, evaluated by the reference interpreter, against numpy's float16 on every float16 bit
pattern and on float32 values around every rounding boundary."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import half
from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import DType
from jaxcore.interpret import Interpreter
from jaxcore.legalize import TargetTraits, legalize

ALL_F16 = np.arange(1 << 16, dtype=np.uint32)


def _run(name: str, x: np.ndarray) -> np.ndarray:
    dtype, body = half.helper_body(name)
    with np.errstate(all="ignore"):
        return np.asarray(Interpreter({"x": x}).run(legalize(body, TargetTraits())))


def _boundaries() -> np.ndarray:
    """Every float16 value, the float32 neighbours of each and of each midpoint between two,
    values past the range and in float32's subnormals, and NaNs of both signs and many payloads."""
    h = ALL_F16.astype(np.uint16).view(np.float16)
    h = h[np.isfinite(h)].astype(np.float32)
    mids = ((h[:-1].astype(np.float64) + h[1:]) / 2).astype(np.float32)
    base = np.concatenate([h, mids, np.float32([65504, 65519.99, 65520, 65536, 1e30, 3e-8, 2.98e-8, 1e-40])])
    base = np.concatenate([base, -base])
    bits = base.view(np.uint32)
    near = np.concatenate([bits, bits + 1, bits - 1]).view(np.float32)
    nans = np.uint32([0x7F800001, 0x7FC00000, 0x7F802000, 0x7FFFFFFF, 0xFF800001, 0xFFC00123])
    inf = np.float32([np.inf, -np.inf])
    return np.concatenate([near, inf, nans.view(np.float32)])


def test_round_f16_is_numpys_float16_rounding() -> None:
    x = _boundaries()
    got = _run(half.F16_ROUND, x).astype(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.array_equal(np.signbit(got[nan]), np.signbit(x[nan]))  # a NaN keeps its sign


def test_f16_value_is_exact_on_every_pattern() -> None:
    got = _run(half.F16_VALUE, ALL_F16).astype(np.float32).view(np.uint32)
    h = ALL_F16.astype(np.uint16)
    finite = (h & 0x7C00) != 0x7C00
    want = h.view(np.float16).astype(np.float32).view(np.uint32)
    assert np.array_equal(got[finite], want[finite])
    # infinities and NaNs: sign, exponent and the whole payload, moved up by 13 bits
    hs = h[~finite].astype(np.uint32)
    assert np.array_equal(got[~finite], ((hs & 0x8000) << 16) | 0x7F800000 | ((hs & 0x3FF) << 13))


def test_f16_bits_inverts_f16_value_on_every_pattern() -> None:
    values = _run(half.F16_VALUE, ALL_F16).astype(np.float32)
    assert np.array_equal(_run(half.F16_BITS, values).astype(np.uint32), ALL_F16)


def test_float64_to_float16_through_odd_float32_rounds_once() -> None:
    rng = np.random.default_rng(5)
    h = ALL_F16.astype(np.uint16).view(np.float16)
    h = h[np.isfinite(h)].astype(np.float64)
    mids = (h[:-1] + h[1:]) / 2
    # just off each midpoint by less than float32 can see: rounding to float32 first would tie
    x = np.concatenate([mids, mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), rng.standard_normal(2000) * 100])
    x = np.concatenate([x, -x, [np.inf, -np.inf, 1e300, -1e-300, 0.0, -0.0]])
    v = AluExp.variable(DType.float64, "x")
    tree = legalize(AluExp.cast(DType.float16, v), TargetTraits(f16_in_f32=True))
    assert any(n.op == AluOp.Cast and n.src[0].dtype == DType.float64 for n in tree.nodes())
    got = np.asarray(Interpreter({"x": x}).run(tree)).astype(np.float16)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("op", [AluOp.Add, AluOp.Mul, AluOp.Sqrt])
def test_float16_ops_are_computed_in_float32_and_rounded(op: AluOp) -> None:
    a = AluExp.variable(DType.float16, "a")
    e = AluExp(op, DType.float16, (a,) if op == AluOp.Sqrt else (a, a))
    tree = legalize(e, TargetTraits(f16_in_f32=True))
    assert tree.op == AluOp.Cast and tree.dtype == DType.float16
    assert tree.src[0].op == op and tree.src[0].dtype == DType.float32
