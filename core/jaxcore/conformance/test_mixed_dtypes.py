"""Kernels that mix dtypes where the IR allows it: reductions over items of another dtype, index
expressions of either integer dtype."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle, values
from jaxcore.conformance.harness import assert_close, run_kernel, skip_if_undeclared
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

DTYPES = [str(d) for d in DType]
OPS = ["Add", "Mul", "Min", "Max"]
INDEX_DTYPES = ["int32", "uint32"]
COLS = 4


def item_rows(item: str, op: str) -> np.ndarray:
    """Rows of `item` values whose reduction is exact in any order once cast: every edge value of
    the dtype (NaN, ±Inf, -0, values that saturate, wrap or truncate in a cast) beside three
    fillers that leave a sum or product alone, and rows of small integers that really accumulate."""
    filler = 1 if op in ("Mul", "Min") else 0
    rows = [[v, filler, filler, filler] for v in values.ARITH[item] + values.CAST_EXTRA[item]]
    if item != "bool":
        rows += [[1, 2, 3, 4], [3, 0, 2, 1], [2, 2, 1, 3]]
    kind = object if item in oracle.INTS else float
    return oracle.array(np.array(rows, dtype=kind), item).reshape(len(rows), COLS)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("item", "acc"), [p for p in itertools.product(DTYPES, DTYPES) if p[0] != p[1]], ids="-".join
)
def test_reduce_items_of_another_dtype(backend: Backend, item: str, acc: str, op: str) -> None:
    """A reduction over items of another dtype casts each item to the reduction's dtype (as
    `tuner.tune_nullopt` spells it), then folds: the cast's rules (saturation, NaN -> 0, wrap,
    x != 0 for bool) apply per item. float16 sums accumulate in float32, so their items are cast
    to float32."""
    x = item_rows(item, op)
    rows = x.shape[0]
    read = AluExp.global_index(DType(item), 0, x.size, AluVar.gidx * COLS + AluVar.ridx)
    red = Reduction(DType(acc), AluOp(op), COLS)
    kernel = Kernel(1, rows, read, red)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x.ravel()])
    folded = str(red.dtype)  # float32 for a float16 sum
    want = oracle.reduce_rows(op, oracle.cast(x, item, folded).reshape(rows, COLS), folded)
    if folded != acc:
        want = oracle.cast(want, folded, acc)
    assert_close(got, want, f"Reduce{op}", acc, backend, inputs=[], what=f"Reduce{op}({item} items)")


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of a buffer-typed array (moved values compare bit for bit, NaNs included)."""
    return a.view(f"<u{a.dtype.itemsize}")


def _index(dtype: str, v: int) -> AluExp:
    return AluExp.const(DType(dtype), v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_gather_through_index_of_either_dtype(backend: Backend, index_dtype: str, dtype: str) -> None:
    """out[g] = x[idx[g]], the index read from a buffer of `index_dtype` (reversed, repeated): a
    read moves its value, so the output holds the selected elements' exact bits."""
    x = values.arith(dtype)
    n = len(x)
    idx = np.array([(n - 1 - 3 * g) % n for g in range(n + 5)], dtype=oracle.storage(index_dtype))
    where = AluExp.global_index(DType(index_dtype), 1, len(idx), AluVar.gidx)
    kernel = Kernel(2, len(idx), AluExp.global_index(DType(dtype), 0, n, where))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x, idx])
    want = x[idx.astype(np.int64)]
    bad = np.flatnonzero(_bits(got) != _bits(want))
    assert bad.size == 0, f"gather<{dtype}> through a {index_dtype} index on {backend.name}: " + ", ".join(
        f"out[{i}] = 0x{int(_bits(got)[i]):x}, want 0x{int(_bits(want)[i]):x}" for i in bad[:8]
    )


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_index_arithmetic_in_either_dtype(backend: Backend, index_dtype: str, dtype: str) -> None:
    """Index expressions computed in `index_dtype` (from gidx and ridx cast to it): an elementwise
    strided read (7 * g % n) and a column sum (x[r * rows + g]) over the same buffer."""
    rows, cols = 5, 6
    n = rows * cols
    x = oracle.array(np.arange(n) % 9 - 3, dtype)
    g = AluExp.cast(DType(index_dtype), AluVar.gidx)
    r = AluExp.cast(DType(index_dtype), AluVar.ridx)
    strided = AluExp.mod(g * _index(index_dtype, 7), _index(index_dtype, n))
    elementwise = Kernel(1, n, AluExp.global_index(DType(dtype), 0, n, strided))
    column = AluExp.global_index(DType(dtype), 0, n, r * _index(index_dtype, rows) + g)
    acc = "int32" if dtype == "int32" else "float32"
    summed = Kernel(1, rows, column, Reduction(DType(acc), AluOp.Add, cols))
    for kernel in (elementwise, summed):
        skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, elementwise, [x])
    assert_close(got, x[(np.arange(n) * 7) % n], "Const", dtype, backend, what=f"x[7g % n] ({index_dtype})")
    got = run_kernel(backend, summed, [x])
    want = oracle.reduce_rows(
        "Add", oracle.cast(x.reshape(cols, rows).T, dtype, acc).reshape(rows, cols), acc
    )
    assert_close(got, want, "ReduceAdd", acc, backend, what=f"column sum ({index_dtype} index)")
