"""Min/Max reductions folded on ordered keys give what the float fold gives: NaN anywhere makes
NaN, subnormals and infinities exact, a zero's sign free; an epilogue sees the float."""

from __future__ import annotations

import numpy as np
import pytest

import jaxcore
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.ordered_keys import fold_on_keys, from_key, order_key

F32 = DType.float32
SPECIAL = np.array(
    [0.0, -0.0, 1e-45, -1e-45, 1e-40, -3e-39, 1.2e-38, -1.2e-38, 1.0, -1.0, 3.4e38, -3.4e38, np.inf, -np.inf],
    np.float32,
)


def _rows(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    x = rng.choice(SPECIAL, size=(rows, n)).astype(np.float32)
    x[rng.random((rows, n)) < 0.3] = rng.standard_normal(int((rng.random((rows, n)) < 0.3).sum()))[:1]
    nan_rows = rng.random(rows) < 0.25
    x[nan_rows, rng.integers(0, n, nan_rows.sum())] = np.float32(np.nan)
    return x


@pytest.mark.parametrize("op", [AluOp.Max, AluOp.Min])
def test_keys_fold_as_floats(op: AluOp) -> None:
    rng = np.random.default_rng(7)
    rows, n = 64, 9
    x = _rows(rng, rows, n)
    item = AluExp.global_index(F32, 0, rows * n, AluVar.gidx * n + AluVar.ridx)
    epilogue = AluVar.acc(F32) * 0.5
    kernel = Kernel(1, rows, item, Reduction(F32, op, n, epilogue))
    keyed = fold_on_keys(kernel)
    assert keyed.reduction is not None and keyed.reduction.dtype == DType.uint32
    cpu = jaxcore.get_backend("cpu")
    src = cpu.malloc(x.nbytes, x.tobytes())
    outs = []
    for k in (kernel, keyed):
        out = cpu.malloc(rows * 4)
        cpu.dispatch(cpu.prepare_kernel(k), [src], [out])
        outs.append(np.frombuffer(cpu.read(out), np.float32))
    want = (np.max if op == AluOp.Max else np.min)(x, axis=1) * np.float32(0.5)
    for got in outs:
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.array_equal(got[ok], want[ok])  # == ignores a zero's sign, which is free


def test_keys_order_every_float_and_map_back() -> None:
    bits = np.concatenate(
        [np.arange(0, 1 << 32, 65521, dtype=np.uint64), [0, 1 << 31, 0x7F800000, 0xFF800000]]
    )
    x = bits.astype(np.uint32).view(np.float32)
    n = len(x)
    v = AluExp.global_index(F32, 0, n, AluVar.gidx)
    cpu = jaxcore.get_backend("cpu")
    src = cpu.malloc(x.nbytes, x.tobytes())
    got = {}
    for name, exp in (("key", order_key(v, 0xFFFFFFFF)), ("back", from_key(order_key(v, 0xFFFFFFFF)))):
        out = cpu.malloc(n * 4)
        cpu.dispatch(cpu.prepare_kernel(Kernel(1, n, exp)), [src], [out])
        got[name] = np.frombuffer(cpu.read(out), np.uint32)
    finite = ~np.isnan(x)
    xf = x[finite]
    order = np.lexsort((~np.signbit(xf), xf))  # -0 before +0
    keys = got["key"][finite][order]
    assert np.all(np.diff(keys.astype(np.int64)) >= 0)
    assert np.all(got["key"][~finite] == 0xFFFFFFFF)
    assert np.array_equal(got["back"][finite], x[finite].view(np.uint32))


def test_other_kernels_are_left_alone() -> None:
    item = AluExp.global_index(F32, 0, 8, AluVar.ridx)
    for red in (
        Reduction(F32, AluOp.Add, 8),
        Reduction(F32, AluOp.Max, 0),
        Reduction(DType.int32, AluOp.Max, 8),
    ):
        exp = item if red.dtype == F32 else AluExp.cast(DType.int32, item)
        k = Kernel(1, 1, exp, red)
        assert fold_on_keys(k) is k
