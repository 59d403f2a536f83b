"""float32 min/max reductions over integer order keys: the same answer as IEEE maximum/minimum
(NaN propagates, -0 < +0), for rows long enough to vectorise and for the split-K path."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction
from jaxcore_wasm import codegen
from jaxcore_wasm.backend import WasmBackend

F32 = DType.float32


def _want(a: np.ndarray, op: AluOp) -> np.ndarray:
    """IEEE 754-2019 maximum/minimum per row, in float64 (exact for float32 inputs)."""
    out = []
    for row in a:
        if np.isnan(row).any():
            out.append(np.nan)
            continue
        v = row.max() if op == AluOp.Max else row.min()
        if v == 0:  # signed zeros: max prefers +0, min prefers -0
            has_pos, has_neg = (row == 0)[~np.signbit(row)].any(), (row == 0)[np.signbit(row)].any()
            v = (0.0 if has_pos else -0.0) if op == AluOp.Max else (-0.0 if has_neg else 0.0)
        out.append(v)
    return np.array(out, np.float32)


@pytest.mark.parametrize("op", [AluOp.Max, AluOp.Min])
@pytest.mark.parametrize("rows,cols", [(3, 7), (5, 100), (2, 1 << 16)])
def test_minmax_reduction_matches_ieee(op: AluOp, rows: int, cols: int) -> None:
    rng = np.random.default_rng(rows * cols)
    n = rows * cols
    zeros = np.where(rng.random(n) < 0.5, np.float32(-0.0), np.float32(0.0))
    cases = [
        rng.normal(0, 3, n).astype(np.float32),
        zeros,
        np.full(n, -0.0, np.float32),
        np.full(n, 0.0, np.float32),
        np.where(rng.random(n) < 0.5, np.float32(np.inf), np.float32(-np.inf)),
        -np.abs(rng.normal(0, 3, n)).astype(np.float32) - 1,
    ]
    nan = rng.normal(0, 3, n).astype(np.float32)
    nan[n // 2] = np.nan
    neg_nan = rng.normal(0, 3, n).astype(np.float32)
    neg_nan[-1] = -np.nan
    cases += [nan, neg_nan]
    be = WasmBackend(threads=2)
    item = AluExp.global_index(F32, 0, n, AluVar.gidx * AluExp.i32(cols) + AluVar.ridx)
    kernel = Kernel(1, rows, item, Reduction(F32, op, cols))
    assert "smax" in codegen.generate(kernel).text or "smin" in codegen.generate(kernel).text
    exe = be.prepare_kernel(kernel)
    for a in cases:
        s, o = be.malloc(a.nbytes, a.tobytes()), be.malloc(4 * rows)
        be.dispatch(exe, [s], [o])
        got = np.frombuffer(be.read(o), np.float32)
        want = _want(a.reshape(rows, cols), op)
        assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
        ok = ~np.isnan(want)
        assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32)), (got, want)
        be.dec_ref(s)
        be.dec_ref(o)
