"""NaN, infinities and signed zeros through reduction epilogues, float arithmetic and the
transcendentals: values a compiler that assumes finite math would fold away.

A shader compiler may assume that no float is NaN or infinite (WGSL and GLSL both allow it), and
then folds `0 / x` to 0, `x - x` to 0 and `x / x` to 1. It can only do so for values it knows when
it compiles: constants, and what it computes from them itself, such as the accumulator of a
reduction whose items are constants (the loop unrolls and folds). The cases below put NaN, ±Inf
and ±0 exactly there, once as constants and once read from a buffer, and compare with numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle
from jaxcore.conformance.harness import (
    UNARY_BUILDERS,
    assert_close,
    load,
    map_kernel,
    run_kernel,
    skip_if_undeclared,
)
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

FLOATS = ["float32", "float16", "float64"]
NAN, INF = math.nan, math.inf
ROWS, COLS = 2, 3

# A value whose cube underflows to zero in each dtype (float16 products accumulate in float32 and
# round once, which is 0 as well).
TINY = {"float32": 1e-20, "float16": 1e-3, "float64": 1e-200}


def _c(dtype: str, v: float) -> AluExp:
    return AluExp.const(DType(dtype), v)


@dataclass(frozen=True)
class EpilogueCase:
    """Reduce rows of one repeated `item` with `op`, then `epilogue(acc)`; `want(acc)` is the
    epilogue in numpy (float64, rounded to the dtype by the caller)."""

    op: str
    item: float | None  # None: TINY of the dtype
    epilogue: Callable[[AluExp], AluExp]
    want: Callable[[np.ndarray], np.ndarray]


def _where_minus_log(acc: AluExp) -> AluExp:
    zero = AluExp.const(acc.dtype, 0.0)
    return AluExp.where(AluExp.cmplt(zero, acc), zero, acc) - AluExp.log(acc)


EPILOGUES: dict[str, EpilogueCase] = {
    # 0 / max(0, 0, 0): 0/0 is NaN (a finite-math compiler folds 0 / x to 0)
    "zero_over_max_of_zeros": EpilogueCase(
        "Max", 0.0, lambda acc: AluExp.idiv(_c(str(acc.dtype), 0.0), acc), lambda a: np.trunc(0.0 / a)
    ),
    # where(0 < NaN, 0, NaN) - log(NaN): NaN - NaN is NaN, not 0
    "where_minus_log_of_nan": EpilogueCase(
        "Min", NAN, _where_minus_log, lambda a: np.where(0 < a, 0.0, a) - np.log(a)
    ),
    # a product that underflows to 0, divided by itself: NaN, not 1
    "underflowed_product_over_itself": EpilogueCase(
        "Mul", None, lambda acc: AluExp.idiv(acc, acc), lambda a: np.trunc(a / a)
    ),
    "inf_minus_itself": EpilogueCase("Max", INF, lambda acc: acc - acc, lambda a: a - a),
    "inf_times_zero": EpilogueCase("Max", INF, lambda acc: acc * _c(str(acc.dtype), 0.0), lambda a: a * 0.0),
    "inf_over_itself": EpilogueCase("Max", INF, lambda acc: AluExp.idiv(acc, acc), lambda a: np.trunc(a / a)),
}


def _epilogue_kernel(case: EpilogueCase, dtype: str, from_buffer: bool) -> Kernel:
    dt = DType(dtype)
    value = TINY[dtype] if case.item is None else case.item
    item = load(dt, 0, ROWS * COLS, AluVar.gidx * COLS + AluVar.ridx) if from_buffer else _c(dtype, value)
    epi = case.epilogue(AluVar.acc(dt))
    return Kernel(1 if from_buffer else 0, ROWS, item, Reduction(dt, AluOp(case.op), COLS, epi))


@pytest.mark.parametrize("from_buffer", [False, True], ids=["constant", "buffer"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(EPILOGUES))
def test_epilogue_specials(backend: Backend, name: str, dtype: str, from_buffer: bool) -> None:
    """NaN and ±Inf in the accumulator reach the epilogue's arithmetic unfolded."""
    case = EPILOGUES[name]
    kernel = _epilogue_kernel(case, dtype, from_buffer)
    skip_if_undeclared(backend, kernel)
    value = TINY[dtype] if case.item is None else case.item
    rows = oracle.array(np.full(ROWS * COLS, value), dtype).reshape(ROWS, COLS)
    acc = oracle.reduce_rows(case.op, rows, dtype).astype(np.float64)
    with np.errstate(all="ignore"):
        want = oracle.array(case.want(acc), dtype)
    got = run_kernel(backend, kernel, [rows.ravel()] if from_buffer else [])
    assert_close(
        got,
        want,
        "Sub",
        dtype,
        backend,
        inputs=[],
        what=f"{name} ({'buffer' if from_buffer else 'constant'})",
    )


SIGNED_NUMERATORS = [1.0, -1.0, 0.0, -0.0, 2.5, -2.5, INF, -INF, NAN]


@pytest.mark.parametrize("zero", [0.0, -0.0], ids=["pos", "neg"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_division_by_signed_zero(backend: Backend, dtype: str, zero: float) -> None:
    """Cast<dtype>(x) / ±0 and x * (1 / ±0): infinities signed by both operands, NaN for 0/0."""
    x = np.array(SIGNED_NUMERATORS, np.float32)
    dt = DType(dtype)
    z = _c(dtype, zero)
    wide = oracle.cast(x, "float32", dtype)
    zeros = oracle.array([zero] * len(x), dtype)
    for what, fn, want in [
        ("Idiv", lambda v: AluExp.idiv(AluExp.cast(dt, v), z), oracle.binary("Idiv", wide, zeros, dtype)),
        (
            "Mul",
            lambda v: AluExp.cast(dt, v) * AluExp.reciprocal(z),
            oracle.binary("Mul", wide, oracle.unary("Reciprocal", zeros, dtype), dtype),
        ),
    ]:
        kernel = map_kernel(["float32"], len(x), fn)
        skip_if_undeclared(backend, kernel)
        got = run_kernel(backend, kernel, [x])
        assert_close(got, want, what, dtype, backend, inputs=[x], what=f"Cast<{dtype}>(x) {what} {zero}")


@pytest.mark.parametrize("numerator", [0.0, -0.0, INF, NAN], ids=["zero", "negzero", "inf", "nan"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_constant_over_specials(backend: Backend, dtype: str, numerator: float) -> None:
    """A special constant divided by every special value read from a buffer."""
    x = oracle.array(SIGNED_NUMERATORS, dtype)
    kernel = map_kernel([dtype], len(x), lambda v: AluExp.idiv(_c(dtype, numerator), v))
    skip_if_undeclared(backend, kernel)
    want = oracle.binary("Idiv", oracle.array([numerator] * len(x), dtype), x, dtype)
    got = run_kernel(backend, kernel, [x])
    assert_close(got, want, "Idiv", dtype, backend, inputs=[x], what=f"{numerator} / x")


SMALLEST = {
    "float32": (1e-45, 1.2e-38, 1e-30),
    "float16": (6e-8, 6.2e-5, 1e-4),
    "float64": (5e-324, 2.3e-308, 1e-200),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["Sin", "Asin", "Atan", "Erf", "Cos", "Erfc", "Exp", "Log"])
def test_transcendentals_at_signed_zero(backend: Backend, op: str, dtype: str) -> None:
    """f(±0) and f(±tiny): an odd function keeps the sign of a zero bit for bit (sin(-0) = -0),
    read from a buffer and as a constant operand."""
    tiny = SMALLEST[dtype]
    x = oracle.array([0.0, -0.0, *tiny, *(-t for t in tiny)], dtype)
    want = oracle.unary(op, x, dtype)
    build = UNARY_BUILDERS[AluOp(op)]
    kernel = map_kernel([dtype], len(x), build)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert_close(got, want, op, dtype, backend, inputs=[x], signed_zero=True)
    items = [build(_c(dtype, v.item())) for v in x]
    exp = items[-1]
    for i in range(len(items) - 2, -1, -1):
        exp = AluExp.where(AluExp.cmplt(AluVar.gidx, AluExp.i32(i + 1)), items[i], exp)
    folded = run_kernel(backend, Kernel(0, len(items), exp), [])
    assert_close(folded, want, op, dtype, backend, inputs=[x], signed_zero=True, what=f"{op} of constants")


# (a - b) + c and (a * b) * c, each rounded as written: a driver that reassociates them,
# a - (b - c) and a * (b * c), loses c next to a huge a, or the overflow of a * b.
REASSOCIATED = {
    "float32": ((3e38, 3e38, 2.5), (1e30, 1e10, 1e-20)),
    "float16": ((60000.0, 60000.0, 2.5), (300.0, 300.0, 1e-3)),
    "float64": ((1e308, 1e308, 2.5), (1e300, 1e10, 1e-20)),
}


@pytest.mark.parametrize("dtype", FLOATS)
def test_sums_and_products_round_as_written(backend: Backend, dtype: str) -> None:
    """(a - b) + c and (a * b) * c with a constant c, exactly as the contract rounds them."""
    for (a, b, c), (fn, ops) in zip(
        REASSOCIATED[dtype],
        [(lambda x, y, k: (x - y) + k, ("Sub", "Add")), (lambda x, y, k: (x * y) * k, ("Mul", "Mul"))],
    ):
        x, y = oracle.array([a, -a, a, 0.0], dtype), oracle.array([b, -b, -b, 1.0], dtype)
        kernel = map_kernel([dtype, dtype], len(x), lambda u, v, fn=fn, c=c: fn(u, v, _c(dtype, c)))
        skip_if_undeclared(backend, kernel)
        cs = oracle.array([c] * len(x), dtype)
        want = oracle.binary(ops[1], oracle.binary(ops[0], x, y, dtype), cs, dtype)
        got = run_kernel(backend, kernel, [x, y])
        assert_close(got, want, ops[1], dtype, backend, inputs=[x, y], what=f"(a {ops[0]} b) {ops[1]} {c}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_products_with_a_cast_bool_keep_nan_and_inf(backend: Backend, dtype: str) -> None:
    """x * Cast(b) and x * Where(c, 1, 0), with x NaN or ±Inf and the flag false: NaN, not 0 (a
    compiler that assumes finite math turns the product into a select of x and 0)."""
    x = oracle.array([NAN, INF, -INF, NAN, 2.5, -0.0], dtype)
    flags = np.array([0, 0, 0, 1, 0, 0], np.int32)
    dt = DType(dtype)
    one, zero = _c(dtype, 1.0), _c(dtype, 0.0)
    for what, fn in [
        ("x * Cast(b)", lambda v, b: v * AluExp.cast(dt, b)),
        ("x * Where(b, 1, 0)", lambda v, b: v * AluExp.where(b, one, zero)),
    ]:
        kernel = map_kernel([dtype, "bool"], len(x), fn)
        skip_if_undeclared(backend, kernel)
        want = oracle.binary("Mul", x, oracle.cast(flags, "int32", dtype), dtype)
        got = run_kernel(backend, kernel, [x, flags])
        assert_close(got, want, "Mul", dtype, backend, inputs=[x, flags], what=what)


LARGE = {"float32": 2.2e7, "float16": 2000.0, "float64": 2.2e7}


@pytest.mark.parametrize("dtype", FLOATS)
def test_differences_sharing_a_term_round_as_written(backend: Backend, dtype: str) -> None:
    """(2.5 - x) - (c - x): each difference rounds first; a driver that cancels the shared x
    (NVIDIA, float64) returns 2.5 - c."""
    c = 22376236.611642238 if dtype != "float16" else 2013.7
    x = oracle.array([LARGE[dtype], -LARGE[dtype], 3.0, 1e-3], dtype)
    kernel = map_kernel([dtype], len(x), lambda v: (_c(dtype, 2.5) - v) - (_c(dtype, c) - v))
    skip_if_undeclared(backend, kernel)
    left, right = (oracle.binary("Sub", oracle.array([k] * len(x), dtype), x, dtype) for k in (2.5, c))
    want = oracle.binary("Sub", left, right, dtype)
    got = run_kernel(backend, kernel, [x])
    assert_close(got, want, "Sub", dtype, backend, inputs=[x], what="(2.5 - x) - (c - x)")


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_select_of_one_value_minus_that_value(backend: Backend, dtype: str) -> None:
    """Where(c, x, x) - x is x - x: NaN for NaN and ±Inf, not 0 (fuzzed on NVIDIA, float16)."""
    x = oracle.array([NAN, INF, -INF, 2.5, -0.0, 0.0], dtype)
    flags = np.array([1, 0, 1, 0, 1, 0], np.int32)
    kernel = map_kernel([dtype, "bool"], len(x), lambda v, b: AluExp.where(b, v, v) - v)
    skip_if_undeclared(backend, kernel)
    want = oracle.binary("Sub", x, x, dtype)
    got = run_kernel(backend, kernel, [x, flags])
    assert_close(got, want, "Sub", dtype, backend, inputs=[x, flags], what="Where(c, x, x) - x")
