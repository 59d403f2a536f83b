"""The one table of tolerances the conformance suite compares with.

Every comparison in the suite asks `lookup(name, dtype)` for `(rtol, atol)`; an element passes when
`|actual - expected| <= atol + rtol * |expected|` (NaN must meet NaN, ±Inf must meet the same Inf).
`name` is an `AluOp` name (``"Sin"``), a reduction (``"ReduceAdd"``, ``"ReduceMul"``, ...) or a routine
name (``"Cholesky"``). Anything not listed here is compared exactly, and every integer and bool
result is always exact.

Why each entry is what it is:

- **Exact** (not listed): Add, Sub, Mul, Min, Max, Idiv (truncation of the correctly rounded quotient),
  Mod (fmod is exact in IEEE arithmetic), Floor, Ceil, Cast, Bitcast, Cmplt, Cmpne, Where, Const,
  BitCombine, BitShift, Threefry2x32, and every int/bool op. The contract rounds per op in the op's
  dtype, so two conforming backends agree bit for bit; only the sign of a zero from Min/Max is free
  (see `SIGN_AGNOSTIC`).
- **float32 transcendentals** (Sin, Cos, Exp, Log, Sqrt, Reciprocal): rtol 1e-6 (a few ulp; f32 eps
  is 1.19e-7). Sin/Cos add atol 1e-6 because their results cross zero (jax-js' bound is 5e-7 absolute
  for |x| <= 10); the suite holds them to it at huge arguments too (up to 3e38, and 1e308 in float64),
  so the argument reduction must be exact (Payne-Hanek or equivalent). Log adds atol 1e-7 near
  log(1) = 0. Exp adds the smallest normal float as atol so a device that flushes denormal *results*
  to zero still passes (denormal inputs and exact ops are checked exactly elsewhere). Asin/Atan:
  rtol 2e-6, atol 1e-6 (jax-js' strict devices are held to ~5e-6).
- **Erf/Erfc**: absolute error only (the contract is an absolute bound, as in jax-js, whose
  Abramowitz-Stegun 7.1.26 formula has max error ~1.5e-7): 5e-7 for float32, 1e-12 for float64.
- **float16**: every transcendental rtol 1e-3, atol 1e-3 (about one f16 ulp, 2^-10 = 9.8e-4): a device
  that computes in float32 and rounds once can land one ulp from the correctly rounded value.
- **float64 transcendentals**: rtol 1e-12, atol 1e-14 (libm quality is < 1 ulp = 2.2e-16; this leaves room
  for other good implementations but catches anything computed in float32).
- **ReduceAdd/ReduceMul on floats**: summation order is the device's choice; the suite feeds values
  whose sums are exact in any order, so the tolerance only absorbs reordered products: f32 rtol 1e-6,
  f16 rtol 1e-3 (f16 products stay in f16), f64 rtol 1e-13. ReduceMin/ReduceMax are exact.
- **Routines**: Sort/Argsort/Scatter are exact. Linear algebra compares reconstructions, so its
  tolerance covers a few rounding steps per element on the suite's small, well-conditioned inputs:
  f32 (1e-5, 1e-5), f16 (2e-2, 2e-2), f64 (1e-10, 1e-10); JacobiEigh f32 (1e-4, 1e-4) because it stops
  at its own convergence tolerance (1e-6); Fft f32 (1e-5, 1e-4) as in jax-js' forward FFT tests.
  Softmax is an exp, a sum in any order, a reciprocal and a product: f32 (1e-5, 1e-6), f16 (2e-3,
  1e-6: computed in float32, rounded once), f64 (1e-12, 1e-14, Log's); the atol is for log-softmax,
  where `log(sum)` of a sum near 1 cancels. A row of n adds the bound of a sum of n non-negative
  terms in any order, (n - 1)·u (u = 2^-24 in float32 work, 2^-53 in float64): to the rtol of
  softmax, the atol of log-softmax (`softmax_tolerance`). A sequential sum of 5,000 nearly equal
  terms is 1.4e-5 off in float32, and no order is the contract's.

A backend may loosen (never tighten) an entry by declaring it in
`Capabilities.tolerances` as ``(name, dtype, rtol, atol)``; the suite takes the larger of the two per
component. ``name == "*"`` applies to every float op of that dtype. Honest backends keep this short
and say why in their own docs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jaxcore.dtype import DType

Tol = tuple[float, float]

EXACT: Tol = (0.0, 0.0)

# Results whose zero sign the contract leaves open (IEEE minNum/maxNum and sort order of ±0).
SIGN_AGNOSTIC: frozenset[str] = frozenset({"Min", "Max", "ReduceMin", "ReduceMax", "Sort", "Argsort"})

F16, F32, F64 = DType.float16, DType.float32, DType.float64
_F32_MIN_NORMAL = 1.1754943508222875e-38

TABLE: dict[tuple[str, DType], Tol] = {
    ("Sin", F32): (1e-6, 1e-6),
    ("Cos", F32): (1e-6, 1e-6),
    ("Asin", F32): (2e-6, 1e-6),
    ("Atan", F32): (2e-6, 1e-6),
    ("Exp", F32): (1e-6, _F32_MIN_NORMAL),
    ("Log", F32): (1e-6, 1e-7),
    ("Sqrt", F32): (1e-6, 0.0),
    ("Reciprocal", F32): (1e-6, 0.0),
    ("Erf", F32): (0.0, 5e-7),
    ("Erfc", F32): (0.0, 5e-7),
    ("Erf", F64): (0.0, 1e-12),
    ("Erfc", F64): (0.0, 1e-12),
    ("ReduceAdd", F32): (1e-6, 0.0),
    ("ReduceMul", F32): (1e-6, 0.0),
    ("ReduceAdd", F16): (1e-3, 0.0),
    ("ReduceMul", F16): (1e-3, 0.0),
    ("ReduceAdd", F64): (1e-13, 0.0),
    ("ReduceMul", F64): (1e-13, 0.0),
    ("JacobiEigh", F32): (1e-4, 1e-4),
    ("Fft", F32): (1e-5, 1e-4),
    ("Fft", F64): (1e-12, 1e-10),
    ("Softmax", F32): (1e-5, 1e-6),
    ("Softmax", F16): (2e-3, 1e-6),
    ("Softmax", F64): (1e-12, 1e-14),
}
for _op in ("Sin", "Cos", "Asin", "Atan", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Erfc"):
    TABLE[(_op, F16)] = (1e-3, 1e-3)
for _op in ("Sin", "Cos", "Asin", "Atan", "Exp", "Log", "Sqrt", "Reciprocal"):
    TABLE[(_op, F64)] = (1e-12, 1e-14)
for _op in ("TriangularSolve", "Cholesky", "LU", "JacobiEigh", "Fft"):
    TABLE.setdefault((_op, F32), (1e-5, 1e-5))
    TABLE.setdefault((_op, F16), (2e-2, 2e-2))
    TABLE.setdefault((_op, F64), (1e-10, 1e-10))
del _op


def softmax_tolerance(dtype: DType | str, n: int, log: bool, backend: Any = None) -> Tol:
    """(rtol, atol) for a Softmax over rows of `n`: the table's, widened by the bound of a sum of n
    non-negative terms in any order, (n - 1)·u, on the rtol (softmax) or the atol (log-softmax)."""
    rtol, atol = lookup("Softmax", dtype, backend)
    u = 2.0**-53 if DType(dtype) == F64 else 2.0**-24
    bound = max(n - 1, 0) * u
    return (rtol, atol + bound) if log else (rtol + bound, atol)


def _declared(backend: Any) -> Iterable[tuple[str, DType, float, float]]:
    caps = getattr(backend, "capabilities", None)
    return tuple(getattr(caps, "tolerances", ()) or ()) if caps is not None else ()


def lookup(name: str, dtype: DType | str, backend: Any = None) -> Tol:
    """(rtol, atol) for `name` on `dtype`: the table's entry, loosened by what `backend` declares."""
    dtype = DType(dtype)
    name = str(name)
    if dtype not in (F16, F32, F64):
        return EXACT
    rtol, atol = TABLE.get((name, dtype), EXACT)
    for op, dt, r, a in _declared(backend):
        if DType(dt) == dtype and str(op) in (name, "*"):
            rtol, atol = max(rtol, float(r)), max(atol, float(a))
    return rtol, atol
