"""Data types and the numeric contract every backend follows.

The contract's arithmetic lives here once, written over numpy arrays, so that
`AluExp.evaluate`, constant folding and the cpu backend agree by construction.
Each helper takes operands already in their dtype and returns a result in it:
int32/uint32 wrap, floats round, per op.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from jaxcore.alu import AluOp


class DType(enum.StrEnum):
    float32 = "float32"
    int32 = "int32"
    uint32 = "uint32"
    bool = "bool"
    float16 = "float16"
    float64 = "float64"


_WIDTH = {
    DType.float32: 4,
    DType.int32: 4,
    DType.uint32: 4,
    DType.bool: 4,  # bool buffers hold int32 0/1
    DType.float16: 2,
    DType.float64: 8,
}
_RANK = {
    DType.bool: 0,
    DType.uint32: 1,
    DType.int32: 2,
    DType.float16: 3,
    DType.float32: 4,
    DType.float64: 5,
}
_STORAGE: dict[DType, np.dtype] = {
    DType.float32: np.dtype("<f4"),
    DType.int32: np.dtype("<i4"),
    DType.uint32: np.dtype("<u4"),
    DType.bool: np.dtype("<i4"),
    DType.float16: np.dtype("<f2"),
    DType.float64: np.dtype("<f8"),
}
_FROM_NUMPY = {
    np.dtype("float32"): DType.float32,
    np.dtype("int32"): DType.int32,
    np.dtype("uint32"): DType.uint32,
    np.dtype("bool"): DType.bool,
    np.dtype("float16"): DType.float16,
    np.dtype("float64"): DType.float64,
}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1


def byte_width(dtype: DType) -> int:
    """Bytes per element in a buffer (bool is 4)."""
    try:
        return _WIDTH[DType(dtype)]
    except ValueError:
        raise TypeError(f"Unknown dtype: {dtype}") from None


def is_float(dtype: DType) -> bool:
    return dtype in (DType.float16, DType.float32, DType.float64)


def is_int(dtype: DType) -> bool:
    """int32 or uint32 (bool is neither float nor int here)."""
    return dtype in (DType.int32, DType.uint32)


def promote_types(a: DType, b: DType) -> DType:
    """The higher of two dtypes on jax-js's linear lattice bool < u32 < i32 < f16 < f32 < f64."""
    return a if _RANK[a] >= _RANK[b] else b


def to_numpy(dtype: DType) -> np.dtype:
    """The little-endian numpy dtype a buffer of `dtype` is stored as (bool is int32)."""
    return _STORAGE[DType(dtype)]


def from_numpy(dtype: np.dtype | type | str) -> DType:
    try:
        return _FROM_NUMPY[np.dtype(dtype).newbyteorder("=")]
    except KeyError:
        raise TypeError(f"No jaxcore dtype for numpy dtype {np.dtype(dtype)}") from None


# --------------------------------------------------------------------------------------------
# The contract over numpy arrays. Inputs are arrays (or numpy scalars) of `to_numpy(dtype)`.


def _errstate() -> np.errstate:
    return np.errstate(all="ignore")


def normalize_bool(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x) != 0).astype(np.int32)


def const_value(dtype: DType, value: float | int | bool | np.number) -> float | int:
    """Normalise a Python number to a constant of `dtype`: ints truncate and wrap, bool is 0/1.

    Float constants keep full float64 precision (as jax-js does); they round when used.
    """
    if dtype == DType.bool:
        return 0 if value == 0 or value is False else 1
    if dtype in (DType.int32, DType.uint32):
        v = float(value) if not isinstance(value, int) else value
        if isinstance(v, float):
            if not math.isfinite(v):
                return 0
            v = math.trunc(v)
        if dtype == DType.int32:
            return ((int(v) + 2**31) % 2**32) - 2**31
        return int(v) % 2**32
    return float(value)


# numpy's ufuncs already compute these natively per dtype: wrapping ints, rounding floats, NaN-propagating
# minimum/maximum. Idiv and Mod need the contract's C-style, zero-safe versions below.
_ARITH_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
_BIT_UFUNCS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def arith(op: AluOp | str, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Binary arithmetic `op` natively in `dtype`: an `AluOp` (Add, Sub, Mul, Idiv, Div, Mod, Min, Max),
    as a backend holds it in its IR, or its lowercase name ("add", ..., "max").

    `AluOp` is a str enum whose values are capitalised ("Add"), so both spellings are taken
    case-insensitively rather than making every caller translate one into the other."""
    name = str(op).lower()
    with _errstate():
        if dtype == DType.bool:
            r = arith(name, a.astype(np.int32), b.astype(np.int32), DType.int32)
            return normalize_bool(r)
        ufunc = _ARITH_UFUNCS.get(name)
        if ufunc is not None:
            return ufunc(a, b)
        if name == "idiv":
            return _idiv(a, b, dtype)
        if name == "div" and is_float(dtype):  # IEEE: correctly rounded, x/0 = +-inf, 0/0 = NaN
            return np.divide(a, b)
        if name == "mod":
            return _mod(a, b, dtype)
    raise ValueError(f"unknown arithmetic op {op!r}: one of {sorted([*_ARITH_UFUNCS, 'div', 'idiv', 'mod'])}")


def _idiv(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    if is_float(dtype):
        return np.trunc(np.divide(a, b))
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    zero = b == 0
    safe = np.where(zero, 1, b)
    if dtype == DType.int32:
        # Work in int64: exact truncation, and INT_MIN / -1 wraps back to INT_MIN on the cast.
        q = np.abs(a.astype(np.int64)) // np.abs(safe.astype(np.int64))
        q = np.where((a < 0) != (safe < 0), -q, q)
        return np.where(zero, 0, q).astype(np.int32)
    return np.where(zero, 0, a // safe).astype(np.uint32)


def _mod(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    if is_float(dtype):
        return np.fmod(a, b)
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    zero = b == 0
    safe = np.where(zero, 1, b)
    if dtype == DType.int32:
        r = np.fmod(a.astype(np.int64), safe.astype(np.int64))
        return np.where(zero, 0, r).astype(np.int32)
    return np.where(zero, 0, a % safe).astype(np.uint32)


def bit_combine(mode: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return _BIT_UFUNCS[mode](a, b)
    except KeyError:
        raise ValueError(f"unknown BitCombine mode {mode!r}") from None


def bit_shift(mode: str, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """Shift counts are taken mod 32; `shr` is arithmetic on int32 and logical on uint32."""
    count = (np.asarray(b).astype(np.int64) & 31).astype(np.uint32)
    if mode == "shl":
        r = np.left_shift(np.asarray(a).astype(np.uint32), count)
        return r.astype(to_numpy(dtype))
    if mode == "shr":
        return np.right_shift(np.asarray(a), count.astype(to_numpy(dtype)))
    raise ValueError(f"unknown BitShift mode {mode!r}")


def compare(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`lt` or `ne` as int32 0/1; NaN compares unequal and not less."""
    with _errstate():
        r = np.less(a, b) if op == "lt" else np.not_equal(a, b)
    return r.astype(np.int32)


def cast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """Convert per the contract: float→int truncates and saturates (NaN→0), float→bool is x != 0."""
    x = np.asarray(x)
    with _errstate():
        if dst == DType.bool:
            return normalize_bool(x)
        if is_float(dst):
            return x.astype(to_numpy(dst))
        if is_float(src):
            lo, hi = (INT32_MIN, INT32_MAX) if dst == DType.int32 else (0, UINT32_MAX)
            x64 = np.trunc(x.astype(np.float64))
            x64 = np.where(np.isnan(x64), 0.0, np.clip(x64, lo, hi))
            return x64.astype(np.int64).astype(to_numpy(dst))
        return x.astype(np.int64).astype(to_numpy(dst))  # int→int wraps


def bitcast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x).astype(to_numpy(src))).view(to_numpy(dst))


def held_by_a_constant(bits: int, dtype: DType) -> bool:
    """Whether a float constant (a Python float) can hold the value of these bits of `dtype`
    exactly: not a float32 signalling NaN (a float32 -> float64 conversion sets its quiet bit),
    which stays a Bitcast of its integer bits instead."""
    if dtype != DType.float32:
        return True
    bits &= 0xFFFFFFFF
    return (bits & 0x7F800000) != 0x7F800000 or not bits & 0x7FFFFF or bool(bits & 0x400000)


def erf(x: np.ndarray) -> np.ndarray:
    """erf to float64 accuracy (|error| < 1e-15), rounded to the input's dtype."""
    x = np.asarray(x)
    return _erf_like(x, math.erf)


def erfc(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return _erf_like(x, math.erfc)


def _erf_like(x: np.ndarray, fn) -> np.ndarray:
    flat = x.astype(np.float64).ravel()
    out = np.fromiter((fn(v) for v in flat), dtype=np.float64, count=flat.size)
    return out.reshape(x.shape).astype(x.dtype)


_THREEFRY_ROT = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(k0, k1, c0, c1, mode: str | int = "xor") -> np.ndarray:
    """Threefry-2x32 with 20 rounds (JAX's PRNG core); `mode` picks x0, x1 or x0 ^ x1."""
    with _errstate():
        a, b, c, d = (np.asarray(v, dtype=np.uint32) for v in (k0, k1, c0, c1))
        return _threefry(a, b, c, d, mode)


def _threefry(k0: np.ndarray, k1: np.ndarray, c0: np.ndarray, c1: np.ndarray, mode: str | int) -> np.ndarray:
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
    x0 = c0 + ks[0]
    x1 = c1 + ks[1]
    for g in range(1, 6):
        for r in _THREEFRY_ROT[(g - 1) % 2]:
            x0 = x0 + x1
            x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
        x0 = x0 + ks[g % 3]
        x1 = x1 + ks[(g + 1) % 3] + np.uint32(g)
    if mode == "xor":
        return x0 ^ x1
    if mode == 0:
        return x0
    if mode == 1:
        return x1
    raise ValueError(f"Invalid Threefry2x32 mode: {mode}")
