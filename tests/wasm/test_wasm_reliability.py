"""Regression tests for issue 8's wasm items: constants of inf/NaN, signed zeros of odd functions,
many distinct kernels, concurrent first use, bounded caches, a validated disk cache, deep and large
kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcore import AluExp, AluVar, DType, Kernel

g = AluVar.gidx
FLOATS = {DType.float32: np.float32, DType.float64: np.float64, DType.float16: np.float16}


def run(be, kernel: Kernel, inputs: list[np.ndarray], out_dtype) -> np.ndarray:
    slots = [be.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = be.malloc(kernel.bytes)
    be.dispatch(be.prepare_kernel(kernel), slots, [out])
    res = np.frombuffer(be.read(out), dtype=out_dtype).copy()
    for s in (*slots, out):
        be.dec_ref(s)
    return res


def assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaN where NaN, and the same sign of every zero."""
    np.testing.assert_array_equal(got, want)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


# ---- item 4: division, mod, idiv, multiply by a constant inf or NaN ----------------------------------

X = [-3.5, -0.0, 0.0, 2.0, 7.25, math.inf, -math.inf, math.nan]
OPS = {
    "div": (lambda x, c: x * AluExp.reciprocal(c), lambda x, c: x * np.reciprocal(c)),
    "mod": (AluExp.mod, np.fmod),
    "idiv": (AluExp.idiv, lambda x, c: np.trunc(x / c)),
    "mul": (lambda x, c: x * c, lambda x, c: x * c),
}


@pytest.mark.parametrize("dtype", list(FLOATS), ids=str)
@pytest.mark.parametrize("c", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("op", list(OPS))
def test_float_op_by_constant_inf_or_nan(wasm_backend, dtype: DType, c: float, op: str) -> None:
    # 64 outputs read x[gidx % 8]: big enough for the row-split heuristic, which looks at the divisors
    npd = FLOATS[dtype]
    n = 64
    make, ref = OPS[op]
    x = AluExp.global_index(dtype, 0, len(X), AluExp.mod(g, AluExp.i32(len(X))))
    k = Kernel(1, n, make(x, AluExp.const(dtype, c)))
    xs = np.array(X, npd)
    with np.errstate(all="ignore"):
        want = np.tile(ref(xs, npd(c)).astype(npd), n // len(X))
    assert_same_floats(run(wasm_backend, k, [xs], npd), want)


# ---- item 8: odd functions keep the sign of zero -----------------------------------------------------


@pytest.mark.parametrize("dtype", list(FLOATS), ids=str)
@pytest.mark.parametrize("fn", ["sin", "asin", "atan", "erf", "sqrt", "floor", "ceil"])
def test_odd_functions_keep_negative_zero(wasm_backend, dtype: DType, fn: str) -> None:
    npd = FLOATS[dtype]
    xs = np.array([-0.0, 0.0], npd)
    k = Kernel(1, 2, getattr(AluExp, fn)(AluExp.global_index(dtype, 0, 2, g)))
    assert_same_floats(run(wasm_backend, k, [xs], npd), xs)


@pytest.mark.parametrize("dtype", list(FLOATS), ids=str)
def test_even_functions_of_signed_zero(wasm_backend, dtype: DType) -> None:
    npd = FLOATS[dtype]
    xs = np.array([-0.0, 0.0], npd)
    for fn, want in (("cos", 1.0), ("exp", 1.0), ("erfc", 1.0)):
        k = Kernel(1, 2, getattr(AluExp, fn)(AluExp.global_index(dtype, 0, 2, g)))
        np.testing.assert_array_equal(run(wasm_backend, k, [xs], npd), np.array([want, want], npd))
