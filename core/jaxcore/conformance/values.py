"""Edge values per dtype, and the input domain of each float unary op.

Chosen from the places backends get wrong (jax-js' catalogue, §4): signed zeros, NaN, ±Inf,
denormals, the largest finite values, the int32/uint32 limits and the float values around them that
casts must saturate or truncate, and shift counts outside [0, 32).
"""

from __future__ import annotations

import math

import numpy as np

from jaxcore.conformance.oracle import INT32_MAX, INT32_MIN, UINT32_MAX, array

INF, NAN = math.inf, math.nan
F32_MAX = 3.4028234663852886e38
F32_MIN_NORMAL = 1.1754943508222875e-38
F32_MIN_DENORMAL = 1.401298464324817e-45
F16_MAX = 65504.0
F16_MIN_NORMAL = 2.0**-14
F16_MIN_DENORMAL = 2.0**-24
F64_MAX = 1.7976931348623157e308
F64_MIN_NORMAL = 2.2250738585072014e-308
F64_MIN_DENORMAL = 5e-324

_COMMON = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.0, -3.0, 7.0, -7.0, 0.1, 3.7, -3.7, INF, -INF, NAN]

# Values for arithmetic (binary ops take every pair).
ARITH: dict[str, list[float]] = {
    "float32": _COMMON
    + [1e10, -1e20, F32_MAX, -F32_MAX, F32_MIN_NORMAL, 1e-40, -1e-40, F32_MIN_DENORMAL, 16777217.0],
    "float16": _COMMON + [1000.0, -2048.0, F16_MAX, -F16_MAX, F16_MIN_NORMAL, 3e-5, -1e-6, F16_MIN_DENORMAL],
    "float64": _COMMON
    + [1e10, -1e20, 1e300, -1e300, F64_MAX, -F64_MAX, F64_MIN_NORMAL, 1e-310, F64_MIN_DENORMAL, 1 + 2**-52],
    "int32": [
        *(0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 32, 100, -100, 65536, 46341, -46341, 0x55555555),
        *(INT32_MAX, INT32_MAX - 1, INT32_MIN, INT32_MIN + 1, 16777217),
    ],
    "uint32": [
        *(0, 1, 2, 3, 7, 31, 32, 100, 65536, 46341, 0x55555555, 0xFF00FF00),
        *(0x7FFFFFFF, 0x80000000, 0x80000001, 0xAAAAAAAA, UINT32_MAX - 1, UINT32_MAX, 16777217),
    ],
    "bool": [0, 1],
}

# Extra sources for casts: the float values around the int32/uint32 limits (saturation, truncation).
CAST_EXTRA: dict[str, list[float]] = {
    "float32": [2.0**31, 2147483520.0, -(2.0**31), -2147483904.0, 2.0**32, 4294967040.0, 3e9, 5e9]
    + [1e20, -1e20, 1e10, -1e10, 1e5, -1e5, 0.99999994, -0.99999994, 65519.0, 65520.0, 1e-8],
    "float16": [65504.0, -65504.0, 1e-8, 0.99951171875, -0.99951171875, 2049.0, 33000.0],
    "float64": [2.0**31, 2.0**31 - 0.5, 2.0**31 - 1, -(2.0**31) - 0.5, -(2.0**31) - 1, 2.0**32]
    + [2.0**32 - 0.5, 2.0**32 - 1, 1e20, -1e20, 3e9, 1 + 1e-15, 16777217.0, 1e-46, 65520.0],
    "int32": [16777216, 16777217, 33554435, 65504, 65520, -65520, 2049],
    "uint32": [16777217, 4294967040, 4294967295, 65520, 2049],
    "bool": [],
}

SHIFT_COUNTS: list[int] = [0, 1, 7, 8, 16, 31, 32, 33, 63, 64, -1, -31, -32, -33, INT32_MIN, INT32_MAX]

_SPECIAL = [0.0, -0.0, INF, -INF, NAN]

# Inputs per float unary op. Sin/Cos are held to their tolerance at every finite argument: the large
# ones catch an argument reduction that runs out of pi's bits (Cody-Waite beyond ~1e6; 1e22 lies near
# a multiple of pi/2, sin(1e22) = -0.8522008497671888; 6381956970095103 * 2^797 is the double closest
# to a multiple of pi/2). Values beyond a dtype's range round to inf there, where the result is NaN.
_PERIODIC = [*np.linspace(-10, 10, 41), math.pi, -math.pi, math.pi / 2, 2 * math.pi, 1e-3, 1e-20]
_PERIODIC += [1e5, -3e5, 1.6e6, 2.0**20 + 0.5, 1e7, -1e9, 2.0**31, 1e15, 1e22, -1e22, 3e30, 3e38, -3e38]
_PERIODIC += [1e100, -1e200, 1e300, 6381956970095103 * 2.0**797, F64_MAX]
_ROUNDING = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.3, -2.3, 3.7, -2.8, 8388607.5, -8388607.5]
_ROUNDING += [1e20, 1e-20, -1e-20]
_ERF = [-10.0, -5.0, -3.0, -2.0, -1.0, -0.5, -0.1, 1e-3, 0.1, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 2.5, 3.0]
UNARY_DOMAIN: dict[str, list[float]] = {
    "Sin": _PERIODIC,
    "Cos": _PERIODIC,
    "Asin": [*np.linspace(-1, 1, 21), 1.5, -1.5, 0.999, -0.999, 1e-20],
    "Atan": [1000.0, -1000.0, 100.0, -50.0, 10.0, -5.0, 2.0, 1.0, -1.0, 0.5, -0.1, 0.01, 1e30, -1e30, 1e-20],
    "Exp": [*np.linspace(-20, 20, 41), -100.0, -104.0, 88.0, 88.7, 89.0, -1000.0, 1000.0, 1e-3, 1e-20],
    "Log": [0.01, 0.1, 0.5, 1.0, 1.5, 2.0, math.e, 5.0, 10.0, 100.0, 1e10, 1e30, -1.0, -1e-20, 1e-20],
    "Erf": [*_ERF, 5.0, 10.0, 1e-20],
    "Erfc": [*_ERF, 5.0, 10.0],
    "Sqrt": [0.25, 2.0, 3.0, 4.0, 16.0, 1e10, 1e30, -1.0, -1e-20, 1e-20, 1e-40],
    "Floor": _ROUNDING,
    "Ceil": _ROUNDING,
    "Reciprocal": [2.0, -4.0, 3.0, 0.1, -7.0, 1e-30, 1e30, 3e38, 1e-40, -1e-40, 1e-5, 65504.0],
}
_DENORMAL = {"float32": [F32_MIN_DENORMAL, -1e-40], "float16": [F16_MIN_DENORMAL, -3e-5], "float64": [1e-310]}


def arith(dtype: str) -> np.ndarray:
    return array(ARITH[dtype], dtype)


def cast_sources(dtype: str) -> np.ndarray:
    return array(ARITH[dtype] + CAST_EXTRA[dtype], dtype)


def unary_domain(op: str, dtype: str) -> np.ndarray:
    """The op's domain plus NaN, ±Inf, ±0 and denormals, rounded to `dtype`."""
    return array(UNARY_DOMAIN[op] + _SPECIAL + _DENORMAL[dtype], dtype)


def pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (a[i], b[j]) pair, flattened: the cartesian product of two value sets."""
    return np.repeat(a, len(b)), np.tile(b, len(a))
