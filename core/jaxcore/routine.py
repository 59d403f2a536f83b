"""Routines: ops that do not fit AluExp (sorting, linear algebra, FFT, scatter).

A `Routine` names the op, its `RoutineType` (contiguous row-major input/output shapes and dtypes),
its typed params and, optionally, a view per input (a transposed or strided operand, read in place
of a copy the frontend would make: the base class makes it, `jaxcore.canonical`). Construction
validates everything once, so backends can trust a `Routine` they are handed; `Routine.build`
infers the outputs the way the frontend's abstract-eval rules do.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from jaxcore.dtype import DType, is_float
from jaxcore.shape import ShapeTracker

Shape = tuple[int, ...]


class Routines(enum.StrEnum):
    Sort = "Sort"
    Argsort = "Argsort"
    Scatter = "Scatter"
    TriangularSolve = "TriangularSolve"
    Cholesky = "Cholesky"
    LU = "LU"
    JacobiEigh = "JacobiEigh"
    Fft = "Fft"
    Softmax = "Softmax"


class ScatterOp(enum.StrEnum):
    update = "update"
    add = "add"


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _as_shape(shape: Any) -> Shape:
    """Normalise a list/tuple of ints to a tuple, rejecting negatives and non-integers."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, got {shape!r}") from None
    out = []
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise TypeError(f"shape must be a sequence of ints, got {shape!r}")
        if int(d) < 0:
            raise ValueError(f"shape dimensions must be non-negative, got {_fmt_shape(dims)}")
        out.append(int(d))
    return tuple(out)


def _as_dtype(dtype: Any) -> DType:
    try:
        return DType(dtype)
    except ValueError:
        raise TypeError(f"Unknown dtype: {dtype}") from None


def _as_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{what} must be a bool, got {value!r}")
    return bool(value)


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------
# Types and params


@dataclass(frozen=True)
class RoutineType:
    """Shapes and dtypes of a routine's contiguous inputs and outputs (lists are normalised to tuples)."""

    input_shapes: tuple[Shape, ...]
    input_dtypes: tuple[DType, ...]
    output_shapes: tuple[Shape, ...]
    output_dtypes: tuple[DType, ...]

    def __post_init__(self) -> None:
        for shapes_f, dtypes_f in (("input_shapes", "input_dtypes"), ("output_shapes", "output_dtypes")):
            shapes = tuple(_as_shape(s) for s in getattr(self, shapes_f))
            dtypes = tuple(_as_dtype(d) for d in getattr(self, dtypes_f))
            if len(shapes) != len(dtypes):
                raise ValueError(
                    f"RoutineType: {len(shapes)} {shapes_f} but {len(dtypes)} {dtypes_f}; they must pair up"
                )
            object.__setattr__(self, shapes_f, shapes)
            object.__setattr__(self, dtypes_f, dtypes)

    def operand(self, i: int = 0, core: int = 2) -> tuple[DType, Shape, int]:
        """Input `i`'s dtype, its last `core` axes (a matrix's two, a row's one) and how many of
        those it holds (the product of the axes before them): what a batched routine loops over."""
        shape = self.input_shapes[i]
        lead = len(shape) - core
        return self.input_dtypes[i], shape[lead:], math.prod(shape[:lead])

    def __str__(self) -> str:
        def side(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...]) -> str:
            return "(" + ", ".join(f"{d}{_fmt_shape(s)}" for s, d in zip(shapes, dtypes)) + ")"

        return (
            f"{side(self.input_shapes, self.input_dtypes)} -> {side(self.output_shapes, self.output_dtypes)}"
        )


@dataclass(frozen=True)
class TriangularSolveParams:
    """For each right-hand side v (a row of b, or a column with `columns`), x solves op(a)·x = v:
    op(a) is the upper triangle of a (the lower with `lower`), transposed with `transpose_a`, its
    diagonal taken as 1 with `unit_diagonal`. Devices run the default layout; the base class runs
    the others through it (`jaxcore.canonical`)."""

    unit_diagonal: bool = False
    lower: bool = False
    transpose_a: bool = False
    columns: bool = False

    def __post_init__(self) -> None:
        for name in ("unit_diagonal", "lower", "transpose_a", "columns"):
            object.__setattr__(self, name, _as_bool(getattr(self, name), name))


@dataclass(frozen=True)
class JacobiEighParams:
    max_sweeps: int
    tolerance: float

    def __post_init__(self) -> None:
        sweeps = _as_int(self.max_sweeps, "jacobi_eigh: max_sweeps")
        if sweeps < 0:
            raise ValueError(f"jacobi_eigh: max_sweeps must be >= 0, got {sweeps}")
        tol = float(self.tolerance)
        if not tol >= 0:  # also rejects NaN
            raise ValueError(f"jacobi_eigh: tolerance must be >= 0, got {self.tolerance!r}")
        object.__setattr__(self, "max_sweeps", sweeps)
        object.__setattr__(self, "tolerance", tol)

    @classmethod
    def default(cls, n: int, dtype: DType) -> JacobiEighParams:
        """The frontend's choice: enough sweeps for quadratic convergence, tolerance near the dtype's eps."""
        return cls(max_sweeps=max(8, 2 * n), tolerance=1e-12 if dtype == DType.float64 else 1e-6)


@dataclass(frozen=True)
class FftParams:
    factors: tuple[int, ...]
    inverse: bool = False

    def __post_init__(self) -> None:
        factors = tuple(_as_int(f, "fft: factor") for f in self.factors)
        if any(f < 1 for f in factors):
            raise ValueError(f"fft: factors must be positive, got {list(factors)}")
        object.__setattr__(self, "factors", factors)
        object.__setattr__(self, "inverse", _as_bool(self.inverse, "fft: inverse"))

    @classmethod
    def default(cls, n: int, inverse: bool = False) -> FftParams:
        return cls(factor_fft_size(n), inverse)


@dataclass(frozen=True)
class SoftmaxParams:
    """Softmax over the last axis, or its logarithm with `log` (`log_softmax`)."""

    log: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "log", _as_bool(self.log, "softmax: log"))


@dataclass(frozen=True)
class ScatterParams:
    """Scatter into an output of `shape`: output axes `axis` are indexed by the index inputs (in order).

    The updates have the non-indexed output dims with the broadcast index shape inserted at `out_dim`,
    the same shape `gather` produces.
    """

    op: ScatterOp | Literal["update", "add"]
    shape: Shape
    axis: tuple[int, ...]
    out_dim: int
    unique_indices: bool = False

    def __post_init__(self) -> None:
        try:
            op = ScatterOp(self.op)
        except ValueError:
            raise ValueError(f"scatter: op must be 'update' or 'add', got {self.op!r}") from None
        shape = _as_shape(self.shape)
        axis = tuple(_as_int(a, "scatter: axis") for a in self.axis)
        if len(set(axis)) != len(axis) or any(not 0 <= a < len(shape) for a in axis):
            raise ValueError(
                f"scatter: axis {list(axis)} must be distinct axes of the output shape {_fmt_shape(shape)}"
            )
        out_dim = _as_int(self.out_dim, "scatter: out_dim")
        free = len(shape) - len(axis)
        if not 0 <= out_dim <= free:
            raise ValueError(f"scatter: out_dim must be in [0, {free}], got {out_dim}")
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "axis", axis)
        object.__setattr__(self, "out_dim", out_dim)
        object.__setattr__(self, "unique_indices", _as_bool(self.unique_indices, "scatter: unique_indices"))

    @property
    def accumulate(self) -> bool:
        """Add with possibly repeated indices accumulates; everything else assigns (last write wins)."""
        return self.op == ScatterOp.add and not self.unique_indices


RoutineParams = TriangularSolveParams | JacobiEighParams | FftParams | ScatterParams | SoftmaxParams


def factor_fft_size(n: int) -> tuple[int, ...]:
    """Radices for a mixed-radix FFT of size n: 4s first (fewest stages), then 2, 3, 5, 7, then odd primes."""
    n = _as_int(n, "fft: size")
    if n < 1:
        raise ValueError(f"fft: size must be positive, got {n}")
    factors: list[int] = []
    for radix in (4, 2, 3, 5, 7):
        while n % radix == 0:
            factors.append(radix)
            n //= radix
    d = 11
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 2
    if n > 1:
        factors.append(n)
    return tuple(factors)


# --------------------------------------------------------------------------------------------
# Per-routine checks: validate inputs and params, return (params, output shapes, output dtypes).

_Outputs = tuple[RoutineParams | None, list[Shape], list[DType]]
_Checker = Callable[[tuple[Shape, ...], tuple[DType, ...], Any], _Outputs]

_LABEL = {
    Routines.Sort: "sort",
    Routines.Argsort: "argsort",
    Routines.Scatter: "scatter",
    Routines.TriangularSolve: "triangular_solve",
    Routines.Cholesky: "cholesky",
    Routines.LU: "lu",
    Routines.JacobiEigh: "jacobi_eigh",
    Routines.Fft: "fft",
    Routines.Softmax: "softmax",
}


def _expect_inputs(label: str, shapes: tuple[Shape, ...], count: int, what: str = "") -> None:
    if len(shapes) != count:
        noun = "input" if count == 1 else "inputs"
        raise ValueError(f"{label}: expected {count} {noun}{what}, got {len(shapes)}")


def _no_params(label: str, params: Any) -> None:
    if params is not None:
        raise TypeError(f"{label}: takes no params, got {params!r}")


def _params_of(label: str, params: Any, cls: type, default: Callable[[], Any] | None) -> Any:
    if params is None:
        if default is None:
            raise TypeError(f"{label}: params ({cls.__name__}) are required")
        return default()
    if not isinstance(params, cls):
        raise TypeError(f"{label}: expected {cls.__name__} params, got {type(params).__name__}")
    return params


def _require_float(label: str, dtype: DType) -> None:
    if not is_float(dtype):
        raise TypeError(f"{label}: input must be floating-point, got {dtype}")


def _matrix(label: str, shape: Shape) -> None:
    if len(shape) < 2:
        raise ValueError(f"{label}: input must be at least 2D, got {_fmt_shape(shape)}")


def _square(label: str, shape: Shape) -> int:
    _matrix(label, shape)
    if shape[-1] != shape[-2]:
        raise ValueError(f"{label}: input must be square, got {_fmt_shape(shape[-2:])}")
    return shape[-1]


def _sortable(label: str, shapes: tuple[Shape, ...], params: Any) -> Shape:
    _expect_inputs(label, shapes, 1)
    if len(shapes[0]) == 0:
        raise ValueError(f"{label}: cannot sort a scalar")
    _no_params(label, params)
    return shapes[0]


def _check_sort(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    shape = _sortable("sort", shapes, params)
    return None, [shape], [dtypes[0]]


def _check_argsort(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    shape = _sortable("argsort", shapes, params)
    return None, [shape, shape], [dtypes[0], DType.int32]


def _check_triangular_solve(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    _expect_inputs("triangular_solve", shapes, 2, " (a, b)")
    a, b = shapes
    params = _params_of("triangular_solve", params, TriangularSolveParams, TriangularSolveParams)
    if len(a) < 2:
        raise ValueError(f"triangular_solve: a must be at least 2D, got {_fmt_shape(a)}")
    if len(b) < 2:
        raise ValueError(f"triangular_solve: b must be at least 2D, got {_fmt_shape(b)}")
    n_b = b[-2] if params.columns else b[-1]
    if not (a[-1] == a[-2] == n_b and a[:-2] == b[:-2]):
        layout = "columns" if params.columns else "rows"
        raise ValueError(
            f"triangular_solve: incompatible shapes a={_fmt_shape(a)}, b={_fmt_shape(b)} "
            f"(right-hand sides as {layout})"
        )
    if not (is_float(dtypes[0]) and dtypes[0] == dtypes[1]):
        raise TypeError(
            f"triangular_solve: expected matching floating-point a/b arrays, got {dtypes[0]} and {dtypes[1]}"
        )
    return params, [b], [dtypes[1]]


def _check_cholesky(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    _expect_inputs("cholesky", shapes, 1)
    _square("cholesky", shapes[0])
    _require_float("cholesky", dtypes[0])
    _no_params("cholesky", params)
    return None, [shapes[0]], [dtypes[0]]


def _check_lu(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    _expect_inputs("lu", shapes, 1)
    shape = shapes[0]
    _matrix("lu", shape)
    _require_float("lu", dtypes[0])
    _no_params("lu", params)
    batch, (m, n) = shape[:-2], shape[-2:]
    return None, [shape, (*batch, min(m, n)), (*batch, m)], [dtypes[0], DType.int32, DType.int32]


def _check_jacobi_eigh(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    _expect_inputs("jacobi_eigh", shapes, 1)
    n = _square("jacobi_eigh", shapes[0])
    _require_float("jacobi_eigh", dtypes[0])
    params = _params_of(
        "jacobi_eigh", params, JacobiEighParams, lambda: JacobiEighParams.default(n, dtypes[0])
    )
    return params, [shapes[0], shapes[0]], [dtypes[0], dtypes[0]]


def _check_fft(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    _expect_inputs("fft", shapes, 2, " (real, imag)")
    real, imag = shapes
    if len(real) == 0 or len(imag) == 0:
        raise ValueError("fft: input must be at least 1D")
    if real != imag:
        raise ValueError(f"fft: real and imag shapes differ, got {_fmt_shape(real)} and {_fmt_shape(imag)}")
    n = real[-1]
    if n < 1:
        raise ValueError(f"fft: final axis must be non-empty, got {n}")
    if not (is_float(dtypes[0]) and dtypes[0] == dtypes[1]):
        raise TypeError(
            f"fft: expected matching floating-point real/imag arrays, got {dtypes[0]} and {dtypes[1]}"
        )
    params = _params_of("fft", params, FftParams, lambda: FftParams.default(n))
    if math.prod(params.factors) != n:
        raise ValueError(
            f"fft: factors {list(params.factors)} multiply to {math.prod(params.factors)}, expected n = {n}"
        )
    return params, [real, real], [dtypes[0], dtypes[0]]


def _check_scatter(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    params = _params_of("scatter", params, ScatterParams, None)
    k = len(params.axis)
    _expect_inputs("scatter", shapes, 1 + k, f" (updates and {k} index arrays)")
    updates, indices = shapes[0], shapes[1:]
    for i, dt in enumerate(dtypes[1:]):
        if dt not in (DType.int32, DType.uint32):
            raise TypeError(f"scatter: index array {i} must be int32 or uint32, got {dt}")
    free_axes = [a for a in range(len(params.shape)) if a not in params.axis]
    index_rank = len(updates) - len(free_axes)
    window = updates[params.out_dim : params.out_dim + index_rank]
    free_dims = updates[: params.out_dim] + updates[params.out_dim + index_rank :]
    fits = (
        index_rank >= max((len(s) for s in indices), default=0)
        and free_dims == tuple(params.shape[a] for a in free_axes)
        and all(d in (1, w) for s in indices for d, w in zip(s, window[index_rank - len(s) :]))
    )
    if not fits:
        raise ValueError(
            f"scatter: updates shape {_fmt_shape(updates)} does not fit output {_fmt_shape(params.shape)} "
            f"with axis {list(params.axis)}, out_dim {params.out_dim} and index shapes "
            f"{[list(s) for s in indices]}"
        )
    return params, [params.shape], [dtypes[0]]


def _check_softmax(shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], params: Any) -> _Outputs:
    _expect_inputs("softmax", shapes, 1)
    if len(shapes[0]) == 0:
        raise ValueError("softmax: input must be at least 1D")
    _require_float("softmax", dtypes[0])
    return _params_of("softmax", params, SoftmaxParams, SoftmaxParams), [shapes[0]], [dtypes[0]]


_CHECKS: dict[Routines, _Checker] = {
    Routines.Sort: _check_sort,
    Routines.Argsort: _check_argsort,
    Routines.Scatter: _check_scatter,
    Routines.TriangularSolve: _check_triangular_solve,
    Routines.Cholesky: _check_cholesky,
    Routines.LU: _check_lu,
    Routines.JacobiEigh: _check_jacobi_eigh,
    Routines.Fft: _check_fft,
    Routines.Softmax: _check_softmax,
}


def _check_views(
    label: str, shapes: tuple[Shape, ...], views: Sequence[ShapeTracker | None] | None
) -> tuple[ShapeTracker | None, ...] | None:
    """The views, each of its input's shape; None when every one is None or row-major."""
    if views is None:
        return None
    views = tuple(views)
    if len(views) != len(shapes):
        raise ValueError(f"{label}: {len(views)} views for {len(shapes)} inputs")
    for i, (v, s) in enumerate(zip(views, shapes)):
        if v is not None and not isinstance(v, ShapeTracker):
            raise TypeError(f"{label}: view {i} must be a ShapeTracker or None, got {type(v).__name__}")
        if v is not None and v.shape != s:
            raise ValueError(
                f"{label}: view {i} has shape {_fmt_shape(v.shape)}, input {i} is {_fmt_shape(s)}"
            )
    kept = tuple(None if v is None or v.contiguous else v for v in views)
    return None if all(v is None for v in kept) else kept


def _as_routine_name(name: Any) -> Routines:
    try:
        return Routines(name)
    except ValueError:
        raise ValueError(f"Unknown routine: {name}") from None


def _plain(value: Any) -> Any:
    """Enum members become their string values so keys print and compare the same everywhere."""
    return value.value if isinstance(value, enum.Enum) else value


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Routine:
    """A validated routine; params=None is replaced by the routine's defaults where it has any."""

    name: Routines
    type: RoutineType
    params: RoutineParams | None = None
    # input i is read through views[i] (its buffer holds what the view reads), None: row-major
    views: tuple[ShapeTracker | None, ...] | None = None

    def __post_init__(self) -> None:
        name = _as_routine_name(self.name)
        if not isinstance(self.type, RoutineType):
            raise TypeError(f"{_LABEL[name]}: type must be a RoutineType, got {type(self.type).__name__}")
        t = self.type
        params, out_shapes, out_dtypes = _CHECKS[name](t.input_shapes, t.input_dtypes, self.params)
        label = _LABEL[name]
        if len(t.output_shapes) != len(out_shapes):
            raise ValueError(f"{label}: expected {len(out_shapes)} outputs, got {len(t.output_shapes)}")
        for i, (got_s, got_d, want_s, want_d) in enumerate(
            zip(t.output_shapes, t.output_dtypes, out_shapes, out_dtypes)
        ):
            if got_s != want_s:
                raise ValueError(
                    f"{label}: output {i} shape {_fmt_shape(got_s)} does not match the expected "
                    f"{_fmt_shape(want_s)}"
                )
            if got_d != want_d:
                raise ValueError(f"{label}: output {i} dtype {got_d} does not match the expected {want_d}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "views", _check_views(label, t.input_shapes, self.views))

    @classmethod
    def build(
        cls,
        name: Routines | str,
        input_shapes: Sequence[Sequence[int]],
        input_dtypes: Sequence[DType | str],
        params: RoutineParams | None = None,
        views: Sequence[ShapeTracker | None] | None = None,
    ) -> Routine:
        """Infer the outputs (and default params) from the inputs, as the frontend's abstract eval does."""
        rname = _as_routine_name(name)
        shapes = tuple(_as_shape(s) for s in input_shapes)
        dtypes = tuple(_as_dtype(d) for d in input_dtypes)
        if len(shapes) != len(dtypes):
            raise ValueError(f"{_LABEL[rname]}: {len(shapes)} input shapes but {len(dtypes)} input dtypes")
        params, out_shapes, out_dtypes = _CHECKS[rname](shapes, dtypes, params)
        t = RoutineType(shapes, dtypes, tuple(out_shapes), tuple(out_dtypes))
        return cls(rname, t, params, None if views is None else tuple(views))

    def key(self) -> tuple:
        """A hashable, process-independent cache key made only of str/int/float/bool/None and tuples."""
        t = self.type
        params = None
        if self.params is not None:
            params = (type(self.params).__name__,) + tuple(
                (f.name, _plain(getattr(self.params, f.name))) for f in dataclasses.fields(self.params)
            )
        key = (
            self.name.value,
            t.input_shapes,
            tuple(d.value for d in t.input_dtypes),
            t.output_shapes,
            tuple(d.value for d in t.output_dtypes),
            params,
        )
        if self.views is None:
            return key
        return (*key, tuple(None if v is None else v.key() for v in self.views))

    def __str__(self) -> str:
        head = self.name.value
        if self.params is not None:
            items = ", ".join(  # the fields set away from their defaults
                f"{f.name}={_plain(getattr(self.params, f.name))!r}"
                for f in dataclasses.fields(self.params)
                if getattr(self.params, f.name) != f.default
            )
            head += f"({items})" if items else ""
        if self.views is not None:
            head += " [" + ", ".join(f"input {i} through {v}" for i, v in enumerate(self.views) if v) + "]"
        return f"{head}: {self.type}"
