"""Reductions Add/Mul/Min/Max in every dtype, with and without epilogues, identities, f16 in f32."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle
from jaxcore.conformance.harness import assert_close, load, reduce_kernel, run_kernel, skip_if_undeclared
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

DTYPES = [str(d) for d in DType]
OPS = ["Add", "Mul", "Min", "Max"]
NAN, INF = np.nan, np.inf


def reduce_data(op: str, dtype: str) -> np.ndarray:
    """Rows whose exact result is the same in any summation order (so any tree is right), with
    the edge cases of the op: wrap-around, NaN propagation, ±Inf, -0, unsigned order, any/all."""
    rows: list[list[float]]
    if dtype == "bool":
        rows = [[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [1, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 1]]
    elif dtype == "int32":
        big = 2**31 - 1
        rows = [[1, 2, 3, 4], [big, 1, 0, 0], [-(2**31), -1, 0, 0], [65536, 65536, 1, 1], [3, -7, 5, -1]]
        rows += [[46341, 46341, 3, 1], [-5, 0, 5, 2**30], [7, 7, 7, 7]]
    elif dtype == "uint32":
        rows = [
            [1, 2, 3, 4],
            [2**32 - 1, 1, 0, 5],
            [2**31, 2**31, 1, 1],
            [65536, 65536, 2, 3],
            [0x80000000, 1, 7, 9],
        ]
        rows += [[7, 7, 7, 7], [3, 0, 2**32 - 2, 1]]
    else:
        rows = [[1.0, 2.0, 3.0, 4.0], [0.5, -0.25, 8.0, -2.0], [NAN, 1.0, 2.0, 3.0], [1.0, INF, -3.0, 2.0]]
        rows += [
            [INF, -INF, 1.0, 1.0],
            [-0.0, -0.0, -0.0, -0.0],
            [-4.0, -1.5, 6.0, 0.125],
            [2.0, 2.0, 2.0, 2.0],
        ]
        if op in ("Min", "Max"):
            rows += [[-0.0, 0.0, 1.0, 2.0], [1e-40 if dtype != "float16" else 3e-5, 5.0, -5.0, 0.0]]
    return oracle.array(np.array(rows, dtype=object if dtype in oracle.INTS else float), dtype).reshape(
        len(rows), -1
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_reduce(backend: Backend, op: str, dtype: str) -> None:
    x = reduce_data(op, dtype)
    rows, cols = x.shape
    kernel = reduce_kernel(dtype, AluOp(op), rows, cols)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x.ravel()])
    assert_close(got, oracle.reduce_rows(op, x, dtype), f"Reduce{op}", dtype, backend, what=f"Reduce{op}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_reduce_identity(backend: Backend, op: str, dtype: str) -> None:
    """An empty reduction yields the identity: 0, 1, +Inf/INT_MAX/UINT32_MAX/true, -Inf/INT_MIN/0/false."""
    kernel = reduce_kernel(dtype, AluOp(op), 3, 0)
    skip_if_undeclared(backend, kernel)
    want = oracle.array([oracle.IDENTITY[(op, dtype)]] * 3, dtype)
    assert_close(
        run_kernel(backend, kernel, [np.zeros(0, oracle.storage(dtype))]), want, "Const", dtype, backend
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_reduce_epilogue(backend: Backend, op: str, dtype: str) -> None:
    """An epilogue reading acc, gidx and a second global: out = (acc + bias[gidx]) * cast(gidx + 1)."""
    x = reduce_data(op, dtype)
    rows, cols = x.shape
    dt = DType(dtype)
    bias = oracle.array([(i % 3) for i in range(rows)], dtype)

    def epilogue(acc: AluExp) -> AluExp:
        scale = AluExp.cast(dt, AluExp.add(AluVar.gidx, AluExp.i32(1)))
        return AluExp.mul(AluExp.add(acc, load(dt, 1, rows)), scale)

    kernel = reduce_kernel(dtype, AluOp(op), rows, cols, epilogue, extra_inputs=[dtype])
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x.ravel(), bias])
    red = oracle.reduce_rows(op, x, dtype)
    scale = oracle.cast(np.arange(1, rows + 1, dtype=np.int32), "int32", dtype)
    want = oracle.binary("Mul", oracle.binary("Add", red, bias, dtype), scale, dtype)
    assert_close(got, want, f"Reduce{op}", dtype, backend, signed_zero=False, what=f"Reduce{op}+epilogue")


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
def test_reduce_epilogue_changes_dtype(backend: Backend, dtype: str) -> None:
    """An epilogue may compare and cast: out = acc < 5 (bool), and cast<float32>(acc) / 2."""
    x = oracle.array(np.arange(24) % 5, dtype).reshape(6, 4)
    kb = reduce_kernel(dtype, AluOp.Add, 6, 4, lambda acc: AluExp.cmplt(acc, AluExp.const(acc.dtype, 5)))
    skip_if_undeclared(backend, kb)
    sums = x.astype(np.float64).sum(axis=1)
    assert_close(run_kernel(backend, kb, [x.ravel()]), (sums < 5).astype(np.int32), "Cmplt", "bool", backend)
    kf = reduce_kernel(
        dtype, AluOp.Add, 6, 4, lambda acc: AluExp.mul(AluExp.cast(DType.float32, acc), AluExp.f32(0.5))
    )
    skip_if_undeclared(backend, kf)
    assert_close(
        run_kernel(backend, kf, [x.ravel()]), (sums * 0.5).astype(np.float32), "Mul", "float32", backend
    )


def test_reduce_then_epilogue_vector(backend: Backend) -> None:
    """jax-js backend test 9: [1,1,2,3,5,7] as [3,2] sums to [2,5,12]; epilogue acc+1 gives [3,6,13]."""
    x = np.array([1, 1, 2, 3, 5, 7], np.float32)
    plain = reduce_kernel("float32", AluOp.Add, 3, 2)
    assert_close(
        run_kernel(backend, plain, [x]), np.array([2, 5, 12], np.float32), "ReduceAdd", "float32", backend
    )
    plus = reduce_kernel("float32", AluOp.Add, 3, 2, lambda acc: AluExp.add(acc, AluExp.f32(1)))
    assert_close(
        run_kernel(backend, plus, [x]), np.array([3, 6, 13], np.float32), "ReduceAdd", "float32", backend
    )


F16_SUM_CASES = [
    ("2048 + 8 ones", [2048.0] + [1.0] * 8, 2056.0),
    ("16000 + 8 ones", [16000.0] + [1.0] * 8, 16008.0),
    ("4096 ones", [1.0] * 4096, 4096.0),
    ("ones then 0.25s", [1.0] * 1024 + [0.25] * 8, 1026.0),
]


@pytest.mark.parametrize(("label", "data", "want"), F16_SUM_CASES, ids=[c[0] for c in F16_SUM_CASES])
def test_float16_sum_accumulates_in_float32(
    backend: Backend, label: str, data: list[float], want: float
) -> None:
    """f16 Add reductions accumulate in f32 and round once: an f16 accumulator gets stuck at 2048/16000."""
    x = np.array(data, np.float16)
    kernel = reduce_kernel("float16", AluOp.Add, 1, len(x))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert got.dtype == np.float16 and float(got[0]) == want, f"{label}: got {float(got[0])}, want {want}"


def test_float16_dot_accumulates_in_float32(backend: Backend) -> None:
    """dot([100,1 x8], same) = 10008 exactly in f16 (10000 with an f16 accumulator)."""
    x = np.array([100.0] + [1.0] * 8, np.float16)
    item = AluExp.mul(load("float16", 0, 9, AluVar.ridx), load("float16", 1, 9, AluVar.ridx))
    kernel = Kernel(2, 1, item, Reduction(DType.float16, AluOp.Add, 9))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x, x])
    assert float(got[0]) == 10008.0, f"got {float(got[0])}, want 10008"


def test_float64_sum_keeps_precision(backend: Backend) -> None:
    """f64 reductions accumulate in f64: 1 + 1e-12 survives (polymul in jax-js)."""
    x = np.array([1.0, 1e-12], np.float64)
    kernel = reduce_kernel("float64", AluOp.Add, 1, 2)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert got[0] == 1.0 + 1e-12, f"got {got[0]!r}"


@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_integer_sum_wraps_exactly(backend: Backend, dtype: str) -> None:
    """A long int sum and product wrap mod 2^32 exactly (a float64 accumulator loses low bits)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-(2**31) if dtype == "int32" else 0, 2**31, size=(4, 257)).astype(oracle.storage(dtype))
    for op in ("Add", "Mul"):
        kernel = reduce_kernel(dtype, AluOp(op), 4, 257)
        skip_if_undeclared(backend, kernel)
        assert_close(
            run_kernel(backend, kernel, [x.ravel()]), oracle.reduce_rows(op, x, dtype), op, dtype, backend
        )


LARGE = [(1, 300001), (3, 100000), (512, 1024), (1025, 129), (20000, 3)]


@pytest.mark.parametrize(("rows", "cols"), LARGE, ids=[f"{r}x{c}" for r, c in LARGE])
def test_large_reductions(backend: Backend, rows: int, cols: int) -> None:
    """Long rows (split across threads or workgroups) and many short rows: exact integer-valued f32
    sums, int32 sums that wrap, and f32 max."""
    rng = np.random.default_rng(rows)
    x = rng.integers(-8, 9, size=(rows, cols)).astype(np.float32)
    for op, dtype, data in (("Add", "float32", x), ("Max", "float32", x), ("Add", "int32", None)):
        if data is None:
            data = rng.integers(-(2**31), 2**31, size=(rows, cols), dtype=np.int64).astype(np.int32)
        kernel = reduce_kernel(dtype, AluOp(op), rows, cols)
        skip_if_undeclared(backend, kernel)
        got = run_kernel(backend, kernel, [data.ravel()])
        if dtype == "int32":
            want = (data.astype(np.int64).sum(axis=1) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        else:
            want = (data.astype(np.float64).sum(axis=1) if op == "Add" else data.max(axis=1)).astype(
                np.float32
            )
        assert_close(got, want, f"Reduce{op}", dtype, backend, what=f"Reduce{op} {rows}x{cols}")


@pytest.mark.parametrize("dtype", oracle.FLOATS)
def test_sum_of_products_keeps_nan(backend: Backend, dtype: str) -> None:
    """sum(x * inf) over rows where 0 * inf or inf - inf is NaN: a driver that fuses the product
    into the accumulation loses it (lavapipe gave inf for such a row)."""
    rows, cols = 3, 4
    x = oracle.array([-1, 0, 1, 2, 5, -3, 1, 1, 4, 4, 4, 4], dtype)
    item = load(DType(dtype), 0, rows * cols, AluVar.gidx * cols + AluVar.ridx)
    for c in (float("inf"), float("-inf")):
        kernel = Kernel(
            1, rows, AluExp.mul(item, AluExp.const(DType(dtype), c)), Reduction(DType(dtype), AluOp.Add, cols)
        )
        skip_if_undeclared(backend, kernel)
        with np.errstate(invalid="ignore"):
            want = (x.astype(np.float64).reshape(rows, cols) * c).sum(axis=1)
        got = run_kernel(backend, kernel, [x])
        assert_close(got, want.astype(x.dtype), "ReduceAdd", dtype, backend, what=f"sum(x * {c})")
