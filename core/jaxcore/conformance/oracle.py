"""Expected values, computed independently of jaxcore with Python ints, numpy and scipy.

Nothing here imports `jaxcore.dtype` helpers or asks any backend: a bug shared by the contract
helpers and the reference device must not be able to confirm itself. Dtypes are passed as their
string names. Integer semantics use Python's unbounded ints and wrap explicitly; float results are
computed in numpy at the op's dtype (correctly rounded for + - * / fmod), or in float64 and rounded
once (transcendentals), which is within half an ulp of the true value.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1

STORAGE: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"),
    "bool": np.dtype("<i4"),
    "float16": np.dtype("<f2"),
    "float64": np.dtype("<f8"),
}
FLOATS = ("float16", "float32", "float64")
INTS = ("int32", "uint32")


def storage(dtype: str) -> np.dtype:
    """The little-endian numpy dtype of a buffer of `dtype` (bool is int32 0/1)."""
    return STORAGE[str(dtype)]


def is_float(dtype: str) -> bool:
    return str(dtype) in FLOATS


def array(values: npt.ArrayLike, dtype: str) -> np.ndarray:
    """Values as a buffer-typed array; floats round to the dtype, ints wrap, bool becomes 0/1."""
    dtype = str(dtype)
    if dtype == "bool":
        return np.array([1 if v else 0 for v in np.asarray(values).ravel()], dtype=np.int32)
    if dtype in INTS:
        return np.array(
            [wrap(int(v), dtype) for v in np.asarray(values, dtype=object).ravel()], storage(dtype)
        )
    with np.errstate(all="ignore"):
        return np.asarray(values, dtype=np.float64).astype(storage(dtype))


# ---- integers -------------------------------------------------------------------------------


def wrap(v: int, dtype: str) -> int:
    """Two's-complement wrap of a Python int into int32 or uint32 (bool: nonzero -> 1)."""
    if dtype == "int32":
        return ((v + 2**31) % 2**32) - 2**31
    if dtype == "uint32":
        return v % 2**32
    if dtype == "bool":
        return 1 if v else 0
    raise ValueError(dtype)


def c_div(a: int, b: int) -> int:
    """C division: truncates toward zero; x/0 is 0 by the contract."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    """C remainder: takes the dividend's sign; x%0 is 0 by the contract."""
    return 0 if b == 0 else a - b * c_div(a, b)


_INT_BINARY: dict[str, Callable[[int, int], int]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Idiv": c_div,
    "Mod": c_mod,
    "Min": min,
    "Max": max,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}


def _ints(x: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(x).ravel()]


def binary(op: str, a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """Add/Sub/Mul/Idiv/Mod/Min/Max (and BitCombine modes and/or/xor) natively in `dtype`; Div for floats."""
    dtype = str(dtype)
    if dtype == "bool":
        # bool arithmetic is int32 arithmetic on 0/1, then `!= 0` (so Add is OR and Mul is AND).
        out = [wrap(wrap(_INT_BINARY[op](x, y), "int32"), "bool") for x, y in zip(_ints(a), _ints(b))]
        return np.array(out, dtype=np.int32)
    if dtype in INTS:
        out = [wrap(_INT_BINARY[op](x, y), dtype) for x, y in zip(_ints(a), _ints(b))]
        return np.array(out, dtype=storage(dtype))
    a, b = np.asarray(a, storage(dtype)), np.asarray(b, storage(dtype))
    with np.errstate(all="ignore"):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        if op == "Idiv":
            return np.trunc(a / b)
        if op == "Div":
            return a / b
        if op == "Mod":
            return np.fmod(a, b)
        if op == "Min":
            return np.minimum(a, b)  # propagates NaN
        if op == "Max":
            return np.maximum(a, b)
    raise ValueError(f"{op} is not a float op")


def shift(mode: str, a: np.ndarray, count: np.ndarray, dtype: str) -> np.ndarray:
    """shl/shr with the count taken mod 32; shr is arithmetic on int32 and logical on uint32."""
    out = []
    for x, c in zip(_ints(a), _ints(count)):
        c &= 31  # Python's & on a negative int is two's complement, so -1 & 31 == 31
        out.append(wrap(x << c, dtype) if mode == "shl" else wrap(x >> c, dtype))
    return np.array(out, dtype=storage(dtype))


def compare(op: str, a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """Cmplt/Cmpne as int32 0/1: NaN is unequal to everything and less than nothing."""
    if not is_float(dtype):
        pairs = zip(_ints(a), _ints(b))
        return np.array([int(x < y) if op == "Cmplt" else int(x != y) for x, y in pairs], np.int32)
    a, b = np.asarray(a, storage(dtype)), np.asarray(b, storage(dtype))
    with np.errstate(all="ignore"):
        r = (a < b) if op == "Cmplt" else (a != b)
    return r.astype(np.int32)


# ---- casts ----------------------------------------------------------------------------------


def cast(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Cast per the contract: float->int truncates and saturates (NaN -> 0); ->bool is `x != 0`."""
    src, dst = str(src), str(dst)
    x = np.asarray(x)
    if dst == "bool":
        with np.errstate(all="ignore"):
            return (x != 0).astype(np.int32)  # NaN != 0 is True
    if is_float(dst):
        if is_float(src):
            with np.errstate(all="ignore"):
                return x.astype(storage(dst))
        # Python float of an int below 2^53 is exact, so this rounds once.
        with np.errstate(all="ignore"):
            return np.array([float(v) for v in _ints(x)], np.float64).astype(storage(dst))
    lo, hi = (INT32_MIN, INT32_MAX) if dst == "int32" else (0, UINT32_MAX)
    out = []
    for v in x.ravel():
        if is_float(src):
            f = float(v)
            out.append(0 if math.isnan(f) else (lo if f <= lo else hi if f >= hi else math.trunc(f)))
        else:
            out.append(wrap(int(v), dst))
    return np.array(out, dtype=storage(dst))


def bitcast(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, storage(src))).view(storage(dst))


# ---- float unary ops ------------------------------------------------------------------------


def _erf64(x: np.ndarray, complement: bool) -> np.ndarray:
    try:
        from scipy import special

        return special.erfc(x) if complement else special.erf(x)
    except ImportError:  # math.erf is accurate to < 1 ulp in float64 as well
        fn = math.erfc if complement else math.erf
        return np.array([fn(v) for v in x.ravel()], np.float64).reshape(x.shape)


_UNARY64: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sin": np.sin,
    "Cos": np.cos,
    "Asin": np.arcsin,
    "Atan": np.arctan,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Erf": lambda x: _erf64(x, False),
    "Erfc": lambda x: _erf64(x, True),
}


def unary(op: str, x: np.ndarray, dtype: str) -> np.ndarray:
    """A float unary op: exact ones at the dtype, transcendentals in float64 rounded once."""
    x = np.asarray(x, storage(dtype))
    with np.errstate(all="ignore"):
        if op == "Floor":
            return np.floor(x)
        if op == "Ceil":
            return np.ceil(x)
        if op == "Reciprocal":
            return (np.ones_like(x) / x).astype(storage(dtype))
        return _UNARY64[op](x.astype(np.float64)).astype(storage(dtype))


# ---- threefry -------------------------------------------------------------------------------

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_M32 = 0xFFFFFFFF


def threefry2x32_pair(k0: int, k1: int, c0: int, c1: int) -> tuple[int, int]:
    """Threefry-2x32, 20 rounds (Random123 / JAX), on Python ints."""
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & _M32, (c1 + ks[1]) & _M32
    for g in range(1, 6):
        for r in _ROTATIONS[(g - 1) % 2]:
            x0 = (x0 + x1) & _M32
            x1 = (((x1 << r) | (x1 >> (32 - r))) & _M32) ^ x0
        x0 = (x0 + ks[g % 3]) & _M32
        x1 = (x1 + ks[(g + 1) % 3] + g) & _M32
    return x0, x1


def threefry2x32(
    k0: np.ndarray, k1: np.ndarray, c0: np.ndarray, c1: np.ndarray, mode: str | int
) -> np.ndarray:
    out = []
    for a, b, c, d in zip(_ints(k0), _ints(k1), _ints(c0), _ints(c1)):
        x0, x1 = threefry2x32_pair(a, b, c, d)
        out.append(x0 ^ x1 if mode == "xor" else (x0 if mode == 0 else x1))
    return np.array(out, dtype=np.uint32)


# ---- reductions -----------------------------------------------------------------------------

IDENTITY: dict[tuple[str, str], float | int] = {
    ("Add", "bool"): 0,
    ("Mul", "bool"): 1,
    ("Min", "bool"): 1,
    ("Max", "bool"): 0,
    ("Add", "int32"): 0,
    ("Mul", "int32"): 1,
    ("Min", "int32"): INT32_MAX,
    ("Max", "int32"): INT32_MIN,
    ("Add", "uint32"): 0,
    ("Mul", "uint32"): 1,
    ("Min", "uint32"): UINT32_MAX,
    ("Max", "uint32"): 0,
}
for _f in FLOATS:
    IDENTITY |= {("Add", _f): 0.0, ("Mul", _f): 1.0, ("Min", _f): math.inf, ("Max", _f): -math.inf}


def reduce_rows(op: str, x: np.ndarray, dtype: str) -> np.ndarray:
    """Fold each row of a 2-D array with Add/Mul/Min/Max from the identity.

    Float sums and products are formed in float64 and rounded once (the suite's inputs are exact
    in any order); float16 sums therefore come out as float32 accumulation would give them.
    """
    x = np.asarray(x)
    rows = x.reshape(x.shape[0], -1)
    if not is_float(dtype):
        out = []
        for row in rows:
            acc = int(IDENTITY[(op, dtype)])
            for v in _ints(row):
                if dtype == "bool":
                    acc = (acc or v) if op in ("Add", "Max") else (acc and v)
                    acc = 1 if acc else 0
                else:
                    acc = wrap(_INT_BINARY[op](acc, v), dtype)
            out.append(acc)
        return np.array(out, dtype=storage(dtype))
    r64 = rows.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "Add":
            res = np.sum(r64, axis=1) if r64.shape[1] else np.zeros(len(r64))
        elif op == "Mul":
            res = np.prod(r64, axis=1) if r64.shape[1] else np.ones(len(r64))
        elif op == "Min":
            res = np.min(r64, axis=1, initial=math.inf)
            res = np.where(np.isnan(r64).any(axis=1), np.nan, res)
        else:
            res = np.max(r64, axis=1, initial=-math.inf)
            res = np.where(np.isnan(r64).any(axis=1), np.nan, res)
        return res.astype(storage(dtype))
