"""Routine types (validation, output inference, keys) and the numpy reference implementations."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.linalg

from jaxcore.dtype import DType, to_numpy
from jaxcore.host_routines import run_routine
from jaxcore.routine import (
    FftParams,
    JacobiEighParams,
    Routine,
    Routines,
    RoutineType,
    ScatterOp,
    ScatterParams,
    TriangularSolveParams,
    factor_fft_size,
)

ALL_DTYPES = list(DType)
FLOATS = [DType.float16, DType.float32, DType.float64]
# Relative tolerances for results computed through O(n) roundings in the dtype.
RTOL = {DType.float16: 2e-2, DType.float32: 1e-4, DType.float64: 1e-10}
GARBAGE = 77  # outputs start out filled with this, so an unwritten element shows up


def run(routine: Routine, *inputs: np.ndarray) -> list[np.ndarray]:
    """Run `routine` into garbage-filled outputs and return them."""
    t = routine.type
    ins = [np.asarray(x, dtype=to_numpy(d)) for x, d in zip(inputs, t.input_dtypes)]
    outs = [np.full(s, GARBAGE, dtype=to_numpy(d)) for s, d in zip(t.output_shapes, t.output_dtypes)]
    before = [x.copy() for x in ins]
    run_routine(routine, ins, outs)
    for x, b in zip(ins, before):  # inputs are never modified
        np.testing.assert_array_equal(x, b)
    return outs


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values, NaN where NaN, and the same sign on zeros."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)
    if actual.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


def sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """Values that exercise each dtype's ordering: signs, ties, large unsigned, specials for floats."""
    if dtype == DType.bool:
        return rng.integers(0, 2, shape).astype(np.int32)
    if dtype == DType.uint32:
        return rng.choice(np.array([0, 1, 7, 2**31 - 1, 2**31, 2**32 - 1], np.uint32), shape)
    if dtype == DType.int32:
        return rng.choice(np.array([-(2**31), -5, -1, 0, 1, 5, 2**31 - 1], np.int32), shape)
    pool = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -1.5, 1.5, 3.0, -2.0, 0.25])
    x = np.where(rng.random(shape) < 0.5, rng.choice(pool, shape), rng.standard_normal(shape))
    return x.astype(to_numpy(dtype))


# ============================================================================================
# Types, params, validation


def test_routines_enum_values_equal_names() -> None:
    assert [r.value for r in Routines] == [r.name for r in Routines]
    assert set(Routines) == {
        Routines.Sort,
        Routines.Argsort,
        Routines.Scatter,
        Routines.TriangularSolve,
        Routines.Cholesky,
        Routines.LU,
        Routines.JacobiEigh,
        Routines.Fft,
        Routines.Softmax,
    }


def test_routine_type_normalises_to_hashable_tuples() -> None:
    t = RoutineType([[3, 3]], ["float32"], [np.array([3, 3])], [DType.float32])
    assert t.input_shapes == ((3, 3),) and t.output_shapes == ((3, 3),)
    assert t.input_dtypes == (DType.float32,) and isinstance(t.input_dtypes[0], DType)
    assert hash(t) == hash(RoutineType(((3, 3),), (DType.float32,), ((3, 3),), (DType.float32,)))
    assert str(t) == "(float32[3, 3]) -> (float32[3, 3])"
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.input_shapes = ()  # type: ignore[misc]


def test_routine_type_rejects_bad_fields() -> None:
    with pytest.raises(ValueError, match="1 input_shapes but 2 input_dtypes"):
        RoutineType([[3]], ["float32", "int32"], [], [])
    with pytest.raises(TypeError, match="Unknown dtype: int8"):
        RoutineType([[3]], ["int8"], [], [])
    with pytest.raises(ValueError, match="non-negative"):
        RoutineType([[-1]], ["int32"], [], [])
    with pytest.raises(TypeError, match="sequence of ints"):
        RoutineType([[1.5]], ["int32"], [], [])


@pytest.mark.parametrize(
    ("name", "shapes", "dtypes", "params", "error", "message"),
    [
        ("Sort", [()], ["float32"], None, ValueError, "sort: cannot sort a scalar"),
        ("Argsort", [()], ["int32"], None, ValueError, "argsort: cannot sort a scalar"),
        ("Sort", [(3,), (3,)], ["float32"] * 2, None, ValueError, "sort: expected 1 input, got 2"),
        ("Cholesky", [(3,)], ["float32"], None, ValueError, "cholesky: input must be at least 2D"),
        (
            "Cholesky",
            [(3, 4)],
            ["float32"],
            None,
            ValueError,
            r"cholesky: input must be square, got \[3, 4\]",
        ),
        (
            "Cholesky",
            [(3, 3)],
            ["int32"],
            None,
            TypeError,
            "cholesky: input must be floating-point, got int32",
        ),
        (
            "TriangularSolve",
            [(3,), (2, 3)],
            ["float32"] * 2,
            None,
            ValueError,
            r"triangular_solve: a must be at least 2D, got \[3\]",
        ),
        (
            "TriangularSolve",
            [(3, 3), (3,)],
            ["float32"] * 2,
            None,
            ValueError,
            r"triangular_solve: b must be at least 2D, got \[3\]",
        ),
        (
            "TriangularSolve",
            [(3, 3), (2, 4)],
            ["float32"] * 2,
            None,
            ValueError,
            r"triangular_solve: incompatible shapes a=\[3, 3\], b=\[2, 4\]",
        ),
        (
            "TriangularSolve",
            [(3, 4), (2, 4)],
            ["float32"] * 2,
            None,
            ValueError,
            r"triangular_solve: incompatible shapes a=\[3, 4\], b=\[2, 4\]",
        ),
        (
            "TriangularSolve",
            [(2, 3, 3), (5, 2, 3)],
            ["float32"] * 2,
            None,
            ValueError,
            r"triangular_solve: incompatible shapes a=\[2, 3, 3\], b=\[5, 2, 3\]",
        ),
        (
            "TriangularSolve",
            [(3, 3), (2, 3)],
            ["float32", "float64"],
            None,
            TypeError,
            "triangular_solve: expected matching floating-point a/b arrays, got float32 and float64",
        ),
        (
            "TriangularSolve",
            [(3, 3), (2, 3)],
            ["int32"] * 2,
            None,
            TypeError,
            "triangular_solve: expected matching floating-point",
        ),
        ("LU", [(4,)], ["float32"], None, ValueError, r"lu: input must be at least 2D, got \[4\]"),
        ("LU", [(2, 2)], ["uint32"], None, TypeError, "lu: input must be floating-point, got uint32"),
        ("JacobiEigh", [(3, 3)], ["int32"], None, TypeError, "jacobi_eigh: input must be floating-point"),
        ("JacobiEigh", [(3, 3)], ["bool"], None, TypeError, "jacobi_eigh: input must be floating-point"),
        ("JacobiEigh", [(3,)], ["float32"], None, ValueError, "jacobi_eigh: input must be at least 2D"),
        (
            "JacobiEigh",
            [(4, 2, 3)],
            ["float32"],
            None,
            ValueError,
            r"jacobi_eigh: input must be square, got \[2, 3\]",
        ),
        ("Fft", [(), ()], ["float32"] * 2, None, ValueError, "fft: input must be at least 1D"),
        (
            "Fft",
            [(2, 0), (2, 0)],
            ["float32"] * 2,
            None,
            ValueError,
            "fft: final axis must be non-empty, got 0",
        ),
        (
            "Fft",
            [(4,), (4,)],
            ["float32", "float64"],
            None,
            TypeError,
            "fft: expected matching floating-point real/imag arrays",
        ),
        ("Fft", [(4,), (4,)], ["int32"] * 2, None, TypeError, "fft: expected matching floating-point"),
        ("Fft", [(4,), (5,)], ["float32"] * 2, None, ValueError, "fft: real and imag shapes differ"),
        (
            "Fft",
            [(12,), (12,)],
            ["float32"] * 2,
            FftParams((4, 2)),
            ValueError,
            r"fft: factors \[4, 2\] multiply to 8, expected n = 12",
        ),
        ("Fft", [(4,)], ["float32"], None, ValueError, r"fft: expected 2 inputs \(real, imag\), got 1"),
        (
            "Scatter",
            [(3,), (3,)],
            ["float32", "int32"],
            None,
            TypeError,
            r"scatter: params \(ScatterParams\)",
        ),
        (
            "Scatter",
            [(3,), (3,)],
            ["float32", "float32"],
            ScatterParams("add", (4,), (0,), 0),
            TypeError,
            "scatter: index array 0 must be int32 or uint32, got float32",
        ),
        (
            "Scatter",
            [(3,)],
            ["float32"],
            ScatterParams("add", (4,), (0,), 0),
            ValueError,
            r"scatter: expected 2 inputs \(updates and 1 index arrays\), got 1",
        ),
        (
            "Scatter",
            [(3, 5), (3,)],
            ["float32", "int32"],
            ScatterParams("add", (4, 6), (0,), 0),
            ValueError,
            r"scatter: updates shape \[3, 5\] does not fit output \[4, 6\]",
        ),
        (
            "Scatter",
            [(3,), (2,)],
            ["float32", "int32"],
            ScatterParams("add", (4,), (0,), 0),
            ValueError,
            r"scatter: updates shape \[3\] does not fit",
        ),
        (
            "Cholesky",
            [(2, 2)],
            ["float32"],
            FftParams((2,)),
            TypeError,
            "cholesky: takes no params, got FftParams",
        ),
        (
            "Fft",
            [(2,), (2,)],
            ["float32"] * 2,
            JacobiEighParams(8, 1e-6),
            TypeError,
            "fft: expected FftParams params, got JacobiEighParams",
        ),
        (
            "TriangularSolve",
            [(2, 2), (1, 2)],
            ["float32"] * 2,
            FftParams((2,)),
            TypeError,
            "triangular_solve: expected TriangularSolveParams params, got FftParams",
        ),
        ("Nope", [(2,)], ["float32"], None, ValueError, "Unknown routine: Nope"),
    ],
)
def test_validation_errors(name, shapes, dtypes, params, error, message) -> None:
    with pytest.raises(error, match=message):
        Routine.build(name, shapes, dtypes, params)


def test_direct_construction_validates_the_same_way() -> None:
    t = RoutineType([(3, 4)], ["float32"], [(3, 4)], ["float32"])
    with pytest.raises(ValueError, match=r"^cholesky: input must be square, got \[3, 4\]$"):
        Routine(Routines.Cholesky, t)
    t = RoutineType([(3, 3)], ["int32"], [(3, 3), (3, 3)], ["int32", "int32"])
    with pytest.raises(TypeError, match="^jacobi_eigh: input must be floating-point"):
        Routine(Routines.JacobiEigh, t)


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ([((5,), "float32")], "argsort: expected 2 outputs, got 1"),
        (
            [((5,), "float32"), ((4,), "int32")],
            r"argsort: output 1 shape \[4\] does not match the expected \[5\]",
        ),
        (
            [((5,), "float32"), ((5,), "float32")],
            "argsort: output 1 dtype float32 does not match the expected int32",
        ),
        (
            [((5,), "float64"), ((5,), "int32")],
            "argsort: output 0 dtype float64 does not match the expected float32",
        ),
    ],
)
def test_output_mismatch_is_named(outputs, message) -> None:
    t = RoutineType([(5,)], ["float32"], [s for s, _ in outputs], [d for _, d in outputs])
    with pytest.raises(ValueError, match=message):
        Routine(Routines.Argsort, t)


def test_param_validation() -> None:
    p = ScatterParams("add", [3, 4], [1], 0)
    assert p.op is ScatterOp.add and p.op == "add" and p.shape == (3, 4) and p.axis == (1,)
    assert p.accumulate and not ScatterParams("add", (3,), (0,), 0, unique_indices=True).accumulate
    assert not ScatterParams("update", (3,), (0,), 0).accumulate
    assert FftParams([4, 3]).factors == (4, 3)
    with pytest.raises(ValueError, match="op must be 'update' or 'add'"):
        ScatterParams("mul", (3,), (0,), 0)
    with pytest.raises(ValueError, match=r"axis \[0, 0\] must be distinct axes"):
        ScatterParams("add", (3, 3), (0, 0), 0)
    with pytest.raises(ValueError, match=r"axis \[2\] must be distinct axes of the output shape \[3, 3\]"):
        ScatterParams("add", (3, 3), (2,), 0)
    with pytest.raises(ValueError, match=r"out_dim must be in \[0, 1\], got 2"):
        ScatterParams("add", (3, 3), (0,), 2)
    with pytest.raises(ValueError, match="factors must be positive"):
        FftParams((0, 4))
    with pytest.raises(ValueError, match="max_sweeps must be >= 0"):
        JacobiEighParams(-1, 1e-6)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        JacobiEighParams(8, float("nan"))
    with pytest.raises(TypeError, match="unit_diagonal must be a bool"):
        TriangularSolveParams("yes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Output inference and defaults


@pytest.mark.parametrize(
    ("name", "shapes", "dtypes", "params", "out_shapes", "out_dtypes"),
    [
        ("Sort", [(2, 5)], ["uint32"], None, [(2, 5)], ["uint32"]),
        ("Argsort", [(2, 5)], ["float16"], None, [(2, 5), (2, 5)], ["float16", "int32"]),
        ("Argsort", [(0,)], ["bool"], None, [(0,), (0,)], ["bool", "int32"]),
        ("TriangularSolve", [(2, 4, 4), (2, 3, 4)], ["float64"] * 2, None, [(2, 3, 4)], ["float64"]),
        ("Cholesky", [(7, 3, 3)], ["float16"], None, [(7, 3, 3)], ["float16"]),
        ("LU", [(2, 5, 3)], ["float32"], None, [(2, 5, 3), (2, 3), (2, 5)], ["float32", "int32", "int32"]),
        ("LU", [(3, 5)], ["float64"], None, [(3, 5), (3,), (3,)], ["float64", "int32", "int32"]),
        ("JacobiEigh", [(4, 4)], ["float32"], None, [(4, 4), (4, 4)], ["float32", "float32"]),
        ("Fft", [(3, 12), (3, 12)], ["float64"] * 2, None, [(3, 12), (3, 12)], ["float64", "float64"]),
        (
            "Scatter",
            [(2, 3), (2, 1), (1, 3)],
            ["int32", "int32", "uint32"],
            ScatterParams("add", (3, 4), (0, 1), 0),
            [(3, 4)],
            ["int32"],
        ),
        (
            "Scatter",
            [(3, 2), (2,), (2,)],
            ["bool", "int32", "int32"],
            ScatterParams("update", (2, 3, 4), (2, 0), 1),
            [(2, 3, 4)],
            ["bool"],
        ),
    ],
)
def test_build_infers_outputs(name, shapes, dtypes, params, out_shapes, out_dtypes) -> None:
    r = Routine.build(name, shapes, dtypes, params)
    assert r.name is Routines(name)
    assert r.type.output_shapes == tuple(tuple(s) for s in out_shapes)
    assert r.type.output_dtypes == tuple(DType(d) for d in out_dtypes)
    # Constructing directly from the inferred type round-trips to an equal routine.
    assert Routine(r.name, r.type, r.params) == r


def test_default_params() -> None:
    assert (
        Routine.build("TriangularSolve", [(2, 2), (1, 2)], ["float32"] * 2).params == TriangularSolveParams()
    )
    assert Routine.build("Fft", [(12,), (12,)], ["float32"] * 2).params == FftParams((4, 3))
    assert Routine.build("Fft", [(1,), (1,)], ["float32"] * 2).params == FftParams(())
    assert Routine.build("JacobiEigh", [(3, 3)], ["float32"]).params == JacobiEighParams(8, 1e-6)
    assert Routine.build("JacobiEigh", [(2, 10, 10)], ["float64"]).params == JacobiEighParams(20, 1e-12)
    assert Routine.build("JacobiEigh", [(5, 5)], ["float16"]).params == JacobiEighParams(10, 1e-6)
    assert Routine.build("Sort", [(3,)], ["float32"]).params is None
    # A direct construction with params=None gets the same defaults.
    t = RoutineType([(2, 2), (1, 2)], ["float32"] * 2, [(1, 2)], ["float32"])
    assert Routine(Routines.TriangularSolve, t).params == TriangularSolveParams(unit_diagonal=False)


@pytest.mark.parametrize(
    ("n", "factors"),
    [
        (1, ()),
        (2, (2,)),
        (8, (4, 2)),
        (16, (4, 4)),
        (12, (4, 3)),
        (30, (2, 3, 5)),
        (7, (7,)),
        (49, (7, 7)),
        (121, (11, 11)),
        (221, (13, 17)),
        (242, (2, 11, 11)),
        (97, (97,)),
        (1000, (4, 2, 5, 5, 5)),
        (2 * 3 * 1009, (2, 3, 1009)),
    ],
)
def test_factor_fft_size(n: int, factors: tuple[int, ...]) -> None:
    assert factor_fft_size(n) == factors
    assert math.prod(factors) == n


def _plain_only(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_plain_only(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_key_is_stable_and_distinguishes_routines() -> None:
    a = Routine.build("Fft", [(2, 12), (2, 12)], ["float32"] * 2)
    b = Routine.build(Routines.Fft, [[2, 12], [2, 12]], [DType.float32] * 2, FftParams((4, 3)))
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert _plain_only(a.key())
    assert a.key() == (
        "Fft",
        ((2, 12), (2, 12)),
        ("float32", "float32"),
        ((2, 12), (2, 12)),
        ("float32", "float32"),
        ("FftParams", ("factors", (4, 3)), ("inverse", False)),
    )
    inverse = Routine.build("Fft", [(2, 12), (2, 12)], ["float32"] * 2, FftParams((4, 3), inverse=True))
    other_factors = Routine.build("Fft", [(2, 12), (2, 12)], ["float32"] * 2, FftParams((3, 4)))
    other_dtype = Routine.build("Fft", [(2, 12), (2, 12)], ["float64"] * 2)
    keys = {a.key(), inverse.key(), other_factors.key(), other_dtype.key()}
    assert len(keys) == 4
    scatter = Routine.build(
        "Scatter", [(3,), (3,)], ["float32", "int32"], ScatterParams(ScatterOp.add, (4,), (0,), 0)
    )
    assert scatter.key()[-1] == (
        "ScatterParams",
        ("op", "add"),
        ("shape", (4,)),
        ("axis", (0,)),
        ("out_dim", 0),
        ("unique_indices", False),
    )
    assert repr(scatter.key()) == repr(
        Routine.build("Scatter", [(3,), (3,)], ["float32", "int32"], ScatterParams("add", [4], [0], 0)).key()
    )
    assert Routine.build("Sort", [(3,)], ["float32"]).key()[-1] is None
    cache = {a.key(): 1}
    assert cache[b.key()] == 1


def test_str() -> None:
    r = Routine.build("TriangularSolve", [(4, 4), (2, 4)], ["float32"] * 2, TriangularSolveParams(True))
    assert str(r) == "TriangularSolve(unit_diagonal=True): (float32[4, 4], float32[2, 4]) -> (float32[2, 4])"
    assert str(Routine.build("LU", [(3, 2)], ["float64"])) == (
        "LU: (float64[3, 2]) -> (float64[3, 2], int32[2], int32[3])"
    )


def test_run_routine_checks_arrays() -> None:
    r = Routine.build("Sort", [(4,)], ["float32"])
    with pytest.raises(ValueError, match="expected 1 outputs, got 0"):
        run_routine(r, [np.zeros(4, np.float32)], [])
    with pytest.raises(ValueError, match=r"input 0 is float64\[4\], expected float32\[4\]"):
        run_routine(r, [np.zeros(4)], [np.zeros(4, np.float32)])
    with pytest.raises(ValueError, match=r"output 0 is float32\[5\]"):
        run_routine(r, [np.zeros(4, np.float32)], [np.zeros(5, np.float32)])


# ============================================================================================
# Sort / Argsort


def _order_key(v: float | int) -> tuple:
    """Total order of the contract: NaN last, -0 before +0."""
    if isinstance(v, float) and math.isnan(v):
        return (1, 0.0, 0)
    return (0, v, 0 if math.copysign(1.0, v) < 0 else 1)


def _stable_key(v: float | int) -> tuple:
    """Argsort's order: NaNs tie last, -0 ties with +0."""
    if isinstance(v, float) and math.isnan(v):
        return (1, 0.0)
    return (0, v)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(37,), (3, 4, 17), (5, 1), (2, 0), (0, 6)])
def test_sort(dtype: DType, shape: tuple[int, ...]) -> None:
    x = sample(np.random.default_rng(1), shape, dtype)
    (y,) = run(Routine.build("Sort", [shape], [dtype]), x)
    rows = x.reshape(math.prod(shape[:-1]), shape[-1])
    expected = np.array([sorted(row.tolist(), key=_order_key) for row in rows], dtype=x.dtype).reshape(shape)
    assert_same_bits(y, expected)


def test_sort_nan_last_and_negative_zero_first() -> None:
    x = np.array([[np.nan, 0.0, -0.0, 1.0, -np.inf, 0.0, -0.0, np.inf], [3, 2, 1, 0, -0.0, np.nan, -1, 0]])
    for dtype in FLOATS:
        (y,) = run(Routine.build("Sort", [x.shape], [dtype]), x)
        expected = np.array(
            [[-np.inf, -0.0, -0.0, 0.0, 0.0, 1.0, np.inf, np.nan], [-1, -0.0, 0, 0, 1, 2, 3, np.nan]],
            dtype=to_numpy(dtype),
        )
        assert_same_bits(y, expected)


def test_sort_integers_signed_and_unsigned() -> None:
    x = np.array([2**32 - 1, 0, 2**31, 5], np.uint32)
    (y,) = run(Routine.build("Sort", [(4,)], ["uint32"]), x)
    np.testing.assert_array_equal(y, [0, 5, 2**31, 2**32 - 1])
    x = np.array([5, -(2**31), -1, 2**31 - 1], np.int32)
    (y,) = run(Routine.build("Sort", [(4,)], ["int32"]), x)
    np.testing.assert_array_equal(y, [-(2**31), -1, 5, 2**31 - 1])
    (y,) = run(Routine.build("Sort", [(5,)], ["bool"]), np.array([1, 0, 1, 0, 0], np.int32))
    np.testing.assert_array_equal(y, [0, 0, 0, 1, 1])


def _stable_order(row: list) -> list[int]:
    return sorted(range(len(row)), key=lambda i: _stable_key(row[i]))  # Python's sort is stable


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(41,), (3, 2, 23), (4, 1), (3, 0)])
def test_argsort(dtype: DType, shape: tuple[int, ...]) -> None:
    x = sample(np.random.default_rng(2), shape, dtype)
    values, indices = run(Routine.build("Argsort", [shape], [dtype]), x)
    rows = x.reshape(math.prod(shape[:-1]), shape[-1])
    expected = np.array([_stable_order(row.tolist()) for row in rows], dtype=np.int32).reshape(shape)
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(indices, expected)
    assert_same_bits(values, np.take_along_axis(x, expected.astype(np.intp), axis=-1))


def test_argsort_ties_nans_and_signed_zeros_are_stable() -> None:
    x = [3.0, np.nan, -0.0, 1.0, 0.0, np.nan, -0.0, 3.0, -np.inf, np.inf]
    for dtype in FLOATS:
        values, indices = run(Routine.build("Argsort", [(10,)], [dtype]), np.array(x))
        np.testing.assert_array_equal(indices, [8, 2, 4, 6, 3, 0, 7, 9, 1, 5])
        assert_same_bits(values, np.array(x, to_numpy(dtype))[[8, 2, 4, 6, 3, 0, 7, 9, 1, 5]])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_argsort_many_ties_matches_numpy_stable(dtype: DType) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2 if dtype == DType.bool else 9, (4, 5000)).astype(to_numpy(dtype))
    _, indices = run(Routine.build("Argsort", [x.shape], [dtype]), x)
    np.testing.assert_array_equal(indices, np.argsort(x, axis=-1, kind="stable"))


# ============================================================================================
# TriangularSolve


def _upper(rng: np.random.Generator, batch: tuple[int, ...], n: int) -> np.ndarray:
    """Well-conditioned upper-triangular matrices with garbage below the diagonal (never read)."""
    a = rng.uniform(-1, 1, (*batch, n, n)) / n
    a += np.eye(n) * rng.uniform(1.0, 2.0, (*batch, 1, n)) * rng.choice([-1, 1], (*batch, 1, n))
    return a + np.tril(np.full((n, n), 1e3), -1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize(("batch", "m", "n"), [((), 4, 5), ((2, 3), 3, 6), ((2,), 0, 3), ((), 2, 1)])
def test_triangular_solve(dtype: DType, unit: bool, batch: tuple[int, ...], m: int, n: int) -> None:
    rng = np.random.default_rng(4)
    a = _upper(rng, batch, n).astype(to_numpy(dtype))
    if unit:
        a[..., np.arange(n), np.arange(n)] = 1e3  # the diagonal is not read either
    b = rng.standard_normal((*batch, m, n)).astype(to_numpy(dtype))
    r = Routine.build("TriangularSolve", [a.shape, b.shape], [dtype] * 2, TriangularSolveParams(unit))
    (x,) = run(r, a, b)
    count = math.prod(batch)
    a64, b64 = a.astype(np.float64).reshape(count, n, n), b.astype(np.float64).reshape(count, m, n)
    expected = np.stack(
        [
            scipy.linalg.solve_triangular(ai, bi.T, lower=False, unit_diagonal=unit).T
            for ai, bi in zip(a64, b64)
        ]
    ).reshape(b.shape)
    np.testing.assert_allclose(x.astype(np.float64), expected, rtol=RTOL[dtype], atol=RTOL[dtype])


# ============================================================================================
# Cholesky


def _spd(rng: np.random.Generator, batch: tuple[int, ...], n: int) -> np.ndarray:
    g = rng.standard_normal((*batch, n, n))
    return g @ np.swapaxes(g, -1, -2) / n + np.eye(n)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("batch", "n"), [((), 1), ((), 5), ((3, 2), 6), ((0,), 4), ((2,), 0)])
def test_cholesky(dtype: DType, batch: tuple[int, ...], n: int) -> None:
    rng = np.random.default_rng(5)
    a = _spd(rng, batch, n).astype(to_numpy(dtype))
    garbage_upper = a + np.triu(np.full((n, n), 1e3), 1)  # only the lower triangle is read
    (lower,) = run(Routine.build("Cholesky", [a.shape], [dtype]), garbage_upper)
    assert np.all(np.triu(lower, 1) == 0)  # exact zeros over the garbage fill
    expected = np.linalg.cholesky(a.astype(np.float64))
    np.testing.assert_allclose(lower.astype(np.float64), expected, rtol=RTOL[dtype], atol=RTOL[dtype])


def test_cholesky_exact_small_case() -> None:
    for dtype in FLOATS:
        (lower,) = run(Routine.build("Cholesky", [(2, 2)], [dtype]), np.array([[4.0, 2.0], [2.0, 3.0]]))
        assert_same_bits(lower, np.array([[2, 0], [1, math.sqrt(2)]], to_numpy(dtype)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_cholesky_not_positive_definite_gives_nan(dtype: DType) -> None:
    rng = np.random.default_rng(6)
    good = _spd(rng, (), 3)
    bad = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.5, 0.5, 4.0]])  # fails at row 1
    a = np.stack([good, bad, good]).astype(to_numpy(dtype))
    (lower,) = run(Routine.build("Cholesky", [a.shape], [dtype]), a)
    assert np.all(np.triu(lower, 1) == 0)
    # The PD matrices of the batch are unaffected.
    expected = np.linalg.cholesky(a[0].astype(np.float64))
    for i in (0, 2):
        np.testing.assert_allclose(lower[i].astype(np.float64), expected, rtol=RTOL[dtype], atol=RTOL[dtype])
    # Banachiewicz: row 0 is fine, then sqrt(1 - 4) is NaN and spreads to what depends on it.
    assert lower[1, 0, 0] == 1 and lower[1, 1, 0] == 2
    assert np.isnan(lower[1, 1, 1]) and np.isnan(lower[1, 2, 1]) and np.isnan(lower[1, 2, 2])
    assert lower[1, 2, 0] == 0.5


# ============================================================================================
# LU


def test_lu_reference_example() -> None:
    for dtype in FLOATS:
        lu, pivots, perm = run(Routine.build("LU", [(3, 2)], [dtype]), np.array([[1, 2], [3, 4], [5, 6]]))
        np.testing.assert_allclose(lu, [[5, 6], [0.2, 0.8], [0.6, 0.5]], rtol=RTOL[dtype] / 10)
        np.testing.assert_array_equal(pivots, [2, 2])
        np.testing.assert_array_equal(perm, [2, 0, 1])
        assert pivots.dtype == perm.dtype == np.int32


def _check_lu(a: np.ndarray, lu: np.ndarray, pivots: np.ndarray, perm: np.ndarray, rtol: float) -> None:
    m, n = a.shape[-2:]
    k = min(m, n)
    for ai, lui, pi, permi in zip(
        a.reshape(-1, m, n), lu.reshape(-1, m, n), pivots.reshape(-1, k), perm.reshape(-1, m)
    ):
        lower = np.tril(lui.astype(np.float64), -1)[:, :k] + np.eye(m, k)
        upper = np.triu(lui.astype(np.float64))[:k, :]
        np.testing.assert_allclose(lower @ upper, ai.astype(np.float64)[permi], rtol=rtol, atol=rtol)
        rows = list(range(m))  # applying the LAPACK-style swaps in order gives perm
        for j, p in enumerate(pi):
            rows[j], rows[p] = rows[p], rows[j]
        np.testing.assert_array_equal(permi, rows)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("batch", "m", "n"), [((), 4, 4), ((2, 3), 5, 3), ((2,), 3, 5), ((0,), 2, 2)])
def test_lu_matches_lapack(dtype: DType, batch: tuple[int, ...], m: int, n: int) -> None:
    a = np.random.default_rng(7).standard_normal((*batch, m, n)).astype(to_numpy(dtype))
    lu, pivots, perm = run(Routine.build("LU", [a.shape], [dtype]), a)
    _check_lu(a, lu, pivots, perm, RTOL[dtype])
    for ai, lui, pi in zip(a.reshape(-1, m, n), lu.reshape(-1, m, n), pivots.reshape(-1, min(m, n))):
        lu_ref, piv_ref = scipy.linalg.lu_factor(ai.astype(np.float64), check_finite=False)
        np.testing.assert_array_equal(pi, piv_ref)
        np.testing.assert_allclose(lui.astype(np.float64), lu_ref, rtol=RTOL[dtype], atol=RTOL[dtype])


def test_lu_zero_pivot_skips_elimination() -> None:
    lu, pivots, perm = run(
        Routine.build("LU", [(2, 2, 2)], ["float32"]), np.array([[[0, 1], [0, 2]], [[0, 0], [0, 1]]])
    )
    np.testing.assert_array_equal(lu, [[[0, 1], [0, 2]], [[0, 0], [0, 1]]])  # no NaN from 0/0
    np.testing.assert_array_equal(pivots, [[0, 1], [0, 1]])
    np.testing.assert_array_equal(perm, [[0, 1], [0, 1]])


def test_lu_zero_pivot_leaves_nan_below_untouched() -> None:
    # |0| is not < NaN, so row 0 stays the pivot; its zero pivot skips the update (no NaN * 1 into row 1).
    lu, pivots, perm = run(Routine.build("LU", [(2, 2)], ["float64"]), np.array([[0, 1], [np.nan, 2]]))
    assert_same_bits(lu, np.array([[0, 1], [np.nan, 2]]))
    np.testing.assert_array_equal(pivots, [0, 1])
    np.testing.assert_array_equal(perm, [0, 1])


def test_lu_nan_never_wins_the_pivot() -> None:
    a = np.array([[[1, 0], [np.nan, 0], [3, 0]], [[np.nan, 1], [5, 2], [1, 1]]])
    lu, pivots, perm = run(Routine.build("LU", [a.shape], ["float64"]), a)
    assert pivots[0, 0] == 2 and perm[0].tolist()[0] == 2  # |3| beats 1; NaN is skipped
    assert pivots[1, 0] == 0  # a NaN on the diagonal keeps its row (nothing is > NaN)
    assert np.isnan(lu[1, 1, 0]) and np.isnan(lu[1, 2, 0])


# ============================================================================================
# JacobiEigh


def _symmetric(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    g = rng.standard_normal(shape)
    return (g + np.swapaxes(g, -1, -2)) / 2


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(6, 6), (2, 3, 5, 5), (1, 1), (0, 3, 3)])
def test_jacobi_eigh(dtype: DType, shape: tuple[int, ...]) -> None:
    n = shape[-1]
    a = _symmetric(np.random.default_rng(8), shape).astype(to_numpy(dtype))
    garbage_upper = a + np.triu(np.full((n, n), 1e3), 1)  # only the lower triangle is read
    diag, vecs = run(Routine.build("JacobiEigh", [shape], [dtype]), garbage_upper)
    assert np.all(np.triu(diag, 1) == 0)
    a64, v64 = a.astype(np.float64), vecs.astype(np.float64)
    eig = np.diagonal(diag, axis1=-2, axis2=-1).astype(np.float64)
    tol = {DType.float16: 5e-2, DType.float32: 1e-4, DType.float64: 1e-10}[dtype]
    np.testing.assert_allclose(np.swapaxes(v64, -1, -2) @ v64, np.broadcast_to(np.eye(n), a.shape), atol=tol)
    np.testing.assert_allclose((v64 * eig[..., None, :]) @ np.swapaxes(v64, -1, -2), a64, atol=tol * 4)
    np.testing.assert_allclose(np.sort(eig, axis=-1), np.linalg.eigvalsh(a64), atol=tol * 4)
    # The residuals left below the diagonal are within the tolerance the sweeps stop at.
    assert np.all(np.abs(np.tril(diag.astype(np.float64), -1)) <= tol)


def _naive_jacobi(x: np.ndarray, max_sweeps: int, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """One float64 matrix, element by element, straight from the spec (lower-triangle storage)."""
    n = x.shape[0]
    a = np.tril(x).astype(np.float64)
    v = np.eye(n)

    def sym(i: int, j: int) -> tuple[int, int]:
        return (i, j) if i >= j else (j, i)

    threshold = tolerance * max(1.0, max(abs(a[i, j]) for i in range(n) for j in range(i + 1)))

    def off() -> float:
        return max((abs(a[i, j]) for i in range(n) for j in range(i)), default=0.0)

    sweep = 0
    while sweep < max_sweeps and off() > threshold:
        for p in range(n - 1):
            for q in range(p + 1, n):
                app, aqq, apq = a[p, p], a[q, q], a[sym(p, q)]
                if apq == 0:
                    continue
                tau = (aqq - app) / (2 * apq)
                t = (1.0 if tau >= 0 else -1.0) / (abs(tau) + math.sqrt(tau * tau + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):
                    if k in (p, q):
                        continue
                    akp, akq = a[sym(k, p)], a[sym(k, q)]
                    a[sym(k, p)], a[sym(k, q)] = c * akp - s * akq, s * akp + c * akq
                a[p, p] = c * c * app - 2 * s * c * apq + s * s * aqq
                a[q, q] = s * s * app + 2 * s * c * apq + c * c * aqq
                a[sym(p, q)] = 0
                vp, vq = v[:, p].copy(), v[:, q].copy()
                v[:, p], v[:, q] = c * vp - s * vq, s * vp + c * vq
        sweep += 1
    return a, v


@pytest.mark.parametrize(
    ("max_sweeps", "tolerance"), [(1, 1e-12), (2, 1e-12), (10, 1e-12), (10, 0.05), (10, 0.3)]
)
def test_jacobi_matches_naive_cyclic_jacobi(max_sweeps: int, tolerance: float) -> None:
    """Same rotation order, same stopping rule: the number of sweeps each matrix gets must agree."""
    a = _symmetric(np.random.default_rng(14), (3, 5, 5))
    a[2] *= 0.01  # converges (under a loose tolerance) sooner than its neighbours
    r = Routine.build("JacobiEigh", [a.shape], ["float64"], JacobiEighParams(max_sweeps, tolerance))
    diag, vecs = run(r, a)
    for i in range(3):
        d_ref, v_ref = _naive_jacobi(a[i], max_sweeps, tolerance)
        np.testing.assert_allclose(diag[i], d_ref, rtol=0, atol=1e-13)
        np.testing.assert_allclose(vecs[i], v_ref, rtol=0, atol=1e-13)


def test_jacobi_two_by_two_exact_rotation() -> None:
    diag, vecs = run(Routine.build("JacobiEigh", [(2, 2)], ["float64"]), np.array([[2.0, 1.0], [1.0, 2.0]]))
    np.testing.assert_allclose(diag, [[1, 0], [0, 3]], atol=1e-15)
    c = 1 / math.sqrt(2)
    np.testing.assert_allclose(vecs, [[c, c], [-c, c]], atol=1e-15)


def test_jacobi_batched_equals_one_matrix_at_a_time() -> None:
    rng = np.random.default_rng(9)
    a = _symmetric(rng, (4, 7, 7))
    a[1] = np.diag(np.arange(7.0))  # already diagonal: zero sweeps
    a[2] *= 1e-3
    batched = run(Routine.build("JacobiEigh", [a.shape], ["float32"]), a.astype(np.float32))
    for i in range(4):
        single = run(Routine.build("JacobiEigh", [(7, 7)], ["float32"]), a[i].astype(np.float32))
        assert_same_bits(batched[0][i], single[0])
        assert_same_bits(batched[1][i], single[1])
    assert_same_bits(batched[0][1], np.diag(np.arange(7.0)).astype(np.float32))
    assert_same_bits(batched[1][1], np.eye(7, dtype=np.float32))


def test_jacobi_max_sweeps_zero_returns_lower_triangle_and_identity() -> None:
    a = _symmetric(np.random.default_rng(10), (3, 4, 4)) + np.triu(np.full((4, 4), 9.0), 1)
    r = Routine.build("JacobiEigh", [a.shape], ["float64"], JacobiEighParams(0, 1e-12))
    diag, vecs = run(r, a)
    assert_same_bits(diag, np.tril(a))
    assert_same_bits(vecs, np.broadcast_to(np.eye(4), a.shape).copy())


def test_jacobi_nan_input_does_not_sweep() -> None:
    a = np.array([[1.0, 0.0], [np.nan, 2.0]])
    diag, vecs = run(Routine.build("JacobiEigh", [(2, 2)], ["float64"]), a)
    assert_same_bits(diag, np.array([[1.0, 0.0], [np.nan, 2.0]]))
    assert_same_bits(vecs, np.eye(2))


# ============================================================================================
# Fft


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    ("n", "factors"),
    [(12, (4, 3)), (12, (3, 4)), (12, (2, 2, 3)), (7, (7,)), (1, ()), (30, (2, 3, 5)), (16, None)],
)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_fft(
    dtype: DType, n: int, factors: tuple[int, ...] | None, inverse: bool, batch: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(11)
    real = rng.standard_normal((*batch, n)).astype(to_numpy(dtype))
    imag = rng.standard_normal((*batch, n)).astype(to_numpy(dtype))
    params = FftParams(factor_fft_size(n) if factors is None else factors, inverse)
    out_real, out_imag = run(Routine.build("Fft", [real.shape] * 2, [dtype] * 2, params), real, imag)
    assert out_real.dtype == out_imag.dtype == to_numpy(dtype)
    z = real.astype(np.float64) + 1j * imag.astype(np.float64)
    expected = np.fft.ifft(z, axis=-1) if inverse else np.fft.fft(z, axis=-1)
    scale = (1 / math.sqrt(n) if inverse else math.sqrt(n)) * RTOL[dtype]
    np.testing.assert_allclose(out_real, expected.real, atol=scale * 4, rtol=0)
    np.testing.assert_allclose(out_imag, expected.imag, atol=scale * 4, rtol=0)


def test_fft_round_trip_and_exact_small_case() -> None:
    fwd = Routine.build("Fft", [(4,), (4,)], ["float64"] * 2)
    re, im = run(fwd, np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4))
    np.testing.assert_allclose(re, [10, -2, -2, -2], atol=1e-14)
    np.testing.assert_allclose(im, [0, 2, 0, -2], atol=1e-14)
    inv = Routine.build("Fft", [(4,), (4,)], ["float64"] * 2, FftParams((4,), inverse=True))
    re2, im2 = run(inv, re, im)
    np.testing.assert_allclose(re2, [1, 2, 3, 4], atol=1e-14)
    np.testing.assert_allclose(im2, 0, atol=1e-14)


# ============================================================================================
# Scatter


def _scatter(
    op: str, shape, axis, out_dim, updates, *indices, dtype=DType.float32, unique=False, idx="int32"
):
    updates = np.asarray(updates)
    indices = [np.asarray(i) for i in indices]
    params = ScatterParams(op, shape, axis, out_dim, unique)
    r = Routine.build(
        "Scatter", [updates.shape, *(i.shape for i in indices)], [dtype] + [idx] * len(indices), params
    )
    (out,) = run(r, updates, *indices)
    return out


def test_scatter_broadcast_index_arrays() -> None:
    upd, idx0, idx1 = [[1, 2, 3], [4, 5, 6]], [[0], [2]], [[0, 1, 1]]
    # Update (i, j) goes to (idx0[i, 0], idx1[0, j]): (0,0) (0,1) (0,1) (2,0) (2,1) (2,1).
    # (spec-core §7 lists [1,5,0, 0,0,0, 0,4,11] for this input; that is not what the algorithm it
    # describes gives, nor what numpy's broadcast fancy indexing gives: row 2 gets 4 at column 0.)
    add = _scatter("add", (3, 3), (0, 1), 0, upd, idx0, idx1)
    np.testing.assert_array_equal(add.ravel(), [1, 5, 0, 0, 0, 0, 4, 11, 0])
    update = _scatter("update", (3, 3), (0, 1), 0, upd, idx0, idx1)
    np.testing.assert_array_equal(update.ravel(), [1, 3, 0, 0, 0, 0, 4, 6, 0])
    # The upstream jax-js test (array.test.ts, "scatterAdd broadcasts index arrays") uses shape [3, 4].
    wide = _scatter("add", (3, 4), (0, 1), 0, upd, idx0, idx1)
    np.testing.assert_array_equal(wide, [[1, 5, 0, 0], [0, 0, 0, 0], [4, 11, 0, 0]])
    # Independent oracle: numpy's unbuffered add over broadcast fancy indices.
    expected = np.zeros((3, 3), np.float32)
    np.add.at(expected, (np.array(idx0), np.array(idx1)), np.array(upd, np.float32))
    np.testing.assert_array_equal(add, expected)


def test_scatter_several_indexed_axes_with_out_dim() -> None:
    out = _scatter(
        "update", (2, 3, 4), (2, 0), 1, [[10, 20], [30, 40], [50, 60]], [1, 3], [0, 1], unique=True
    )
    expected = [
        [[0, 10, 0, 0], [0, 30, 0, 0], [0, 50, 0, 0]],
        [[0, 0, 0, 20], [0, 0, 0, 40], [0, 0, 0, 60]],
    ]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [DType.float32, DType.int32, DType.uint32, DType.float16, DType.float64])
def test_scatter_add_repeated_indices(dtype: DType) -> None:
    out = _scatter("add", (4,), (0,), 0, [1, 2, 3], [1, 1, 3], dtype=dtype)
    assert out.dtype == to_numpy(dtype)
    np.testing.assert_array_equal(out, [0, 3, 0, 3])


def test_scatter_bool_add_is_or() -> None:
    out = _scatter("add", (4,), (0,), 0, [0, 1, 1], [1, 1, 3], dtype=DType.bool)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [0, 1, 0, 1])
    out = _scatter("add", (3,), (0,), 0, [1, 0, 0], [2, 2, 0], dtype=DType.bool)
    np.testing.assert_array_equal(out, [0, 0, 1])  # a later 0 does not clear an earlier 1
    out = _scatter("add", (3,), (0,), 0, [1, 1, 1], [0, 0, 2], dtype=DType.bool)
    np.testing.assert_array_equal(out, [1, 0, 1])  # 1 | 1 is 1, not 2


def test_scatter_f16_adjacent_and_int_wraparound() -> None:
    np.testing.assert_array_equal(
        _scatter("add", (2,), (0,), 0, [1, 2, 3, 4], [0, 1, 0, 1], dtype=DType.float16), [4, 6]
    )
    out = _scatter("add", (1,), (0,), 0, np.array([2**31 - 1, 1], np.int32), [0, 0], dtype=DType.int32)
    np.testing.assert_array_equal(out, [-(2**31)])
    out = _scatter("add", (1,), (0,), 0, np.array([2**32 - 1, 2], np.uint32), [0, 0], dtype=DType.uint32)
    np.testing.assert_array_equal(out, [1])


def test_scatter_unique_indices_assigns() -> None:
    np.testing.assert_array_equal(
        _scatter("add", (4,), (0,), 0, [10, 20, 30], [3, 0, 2], unique=True), [20, 0, 30, 10]
    )


@pytest.mark.parametrize("idx", ["int32", "uint32"])
def test_scatter_out_of_range_dropped(idx: str) -> None:
    bad = [-1, 4] if idx == "int32" else [4, 2**32 - 1]
    indices = np.array([0, bad[0], 2, bad[1]], dtype=idx)
    np.testing.assert_array_equal(
        _scatter("add", (4,), (0,), 0, [1, 2, 3, 4], indices, idx=idx), [1, 0, 3, 0]
    )
    # In two dims: one bad coordinate drops the whole update.
    out = _scatter(
        "update", (2, 2), (0, 1), 0, [5, 6, 7], np.array([0, 1, 1], idx), np.array([1, 9, 0], idx), idx=idx
    )
    np.testing.assert_array_equal(out, [[0, 5], [7, 0]])


def test_scatter_update_last_write_wins() -> None:
    rng = np.random.default_rng(12)
    indices = rng.integers(0, 7, 1000).astype(np.int32)
    updates = np.arange(1, 1001, dtype=np.float32)
    out = _scatter("update", (7,), (0,), 0, updates, indices)
    expected = np.zeros(7, np.float32)
    for i, u in zip(indices, updates):
        expected[i] = u
    np.testing.assert_array_equal(out, expected)


def test_scatter_zero_updates_and_no_indexed_axes() -> None:
    out = _scatter("update", (4,), (0,), 0, np.zeros(0), np.zeros(0, np.int32))
    np.testing.assert_array_equal(out, [0, 0, 0, 0])
    out = _scatter("add", (2, 2), (), 0, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(out, [[1, 2], [3, 4]])


def _naive_scatter(params: ScatterParams, updates: np.ndarray, indices: list[np.ndarray], is_bool: bool):
    """One update at a time, straight from the spec's description."""
    out = np.zeros(params.shape, updates.dtype)
    free_axes = [a for a in range(len(params.shape)) if a not in params.axis]
    index_rank = updates.ndim - len(free_axes)
    window = range(params.out_dim, params.out_dim + index_rank)
    for pos in np.ndindex(*updates.shape):
        free = iter(d for d in range(updates.ndim) if d not in window)
        coord = []
        for a in range(len(params.shape)):
            if a in params.axis:
                ix = indices[params.axis.index(a)]
                sub = pos[params.out_dim + index_rank - ix.ndim : params.out_dim + index_rank]
                coord.append(int(ix[tuple(0 if s == 1 else c for c, s in zip(sub, ix.shape))]))
            else:
                coord.append(pos[next(free)])
        if any(not 0 <= c < d for c, d in zip(coord, params.shape)):
            continue
        if params.accumulate and is_bool:
            out[tuple(coord)] |= updates[pos]
        elif params.accumulate:
            out[tuple(coord)] += updates[pos]
        else:
            out[tuple(coord)] = updates[pos]
    return out


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", ["add", "update"])
def test_scatter_matches_naive_loop(dtype: DType, op: str) -> None:
    rng = np.random.default_rng(13)
    # Output [5, 4, 6, 3]; axes 2 and 0 indexed; index dims [2, 3] inserted at out_dim 1 of the
    # free dims [4, 3]: updates [4, 2, 3, 3]. Index arrays broadcast ([2, 1] and [3]).
    params = ScatterParams(op, (5, 4, 6, 3), (2, 0), 1)
    idx_a = rng.integers(-1, 7, (2, 1)).astype(np.int32)
    idx_b = rng.integers(0, 6, (3,)).astype(np.int32)
    updates = sample(rng, (4, 2, 3, 3), dtype)
    if dtype in FLOATS:
        updates = np.nan_to_num(updates, nan=1.0, posinf=2.0, neginf=-2.0)  # keep sums comparable
    out = _scatter(op, params.shape, params.axis, params.out_dim, updates, idx_a, idx_b, dtype=dtype)
    expected = _naive_scatter(params, updates, [idx_a, idx_b], dtype == DType.bool)
    assert_same_bits(out, expected)


# ============================================================================================
# Empty shapes and strided arrays


def test_empty_shapes() -> None:
    _, pivots, perm = run(Routine.build("LU", [(2, 3, 0)], ["float32"]), np.zeros((2, 3, 0)))
    assert pivots.shape == (2, 0)
    np.testing.assert_array_equal(perm, [[0, 1, 2], [0, 1, 2]])
    lu, pivots, perm = run(Routine.build("LU", [(2, 0, 3)], ["float64"]), np.zeros((2, 0, 3)))
    assert lu.shape == (2, 0, 3) and pivots.shape == perm.shape == (2, 0)
    diag, vecs = run(Routine.build("JacobiEigh", [(2, 0, 0)], ["float32"]), np.zeros((2, 0, 0)))
    assert diag.shape == vecs.shape == (2, 0, 0)
    (x,) = run(
        Routine.build("TriangularSolve", [(2, 0, 0), (2, 3, 0)], ["float32"] * 2),
        np.zeros((2, 0, 0)),
        np.zeros((2, 3, 0)),
    )
    assert x.shape == (2, 3, 0)
    out_real, _ = run(Routine.build("Fft", [(0, 4)] * 2, ["float64"] * 2), np.zeros((0, 4)), np.zeros((0, 4)))
    assert out_real.shape == (0, 4)
    (lower,) = run(Routine.build("Cholesky", [(3, 0, 0)], ["float16"]), np.zeros((3, 0, 0)))
    assert lower.shape == (3, 0, 0)


def test_strided_inputs_and_outputs() -> None:
    """Backends may hand over views; results land in them as if they were contiguous."""
    x = np.random.default_rng(15).standard_normal((5, 8)).astype(np.float32)[:, ::2]
    r = Routine.build("Argsort", [(5, 4)], ["float32"])
    values, indices = np.full((5, 8), 7.0, np.float32)[:, ::2], np.full((4, 5), 7, np.int32).T
    run_routine(r, [x], [values, indices])
    np.testing.assert_array_equal(indices, np.argsort(x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(values, np.sort(x, axis=-1))
    a = _spd(np.random.default_rng(16), (3,), 4).astype(np.float32)
    out = np.full((3, 4, 4), 7.0, np.float32).transpose(0, 2, 1)
    run_routine(Routine.build("Cholesky", [(3, 4, 4)], ["float32"]), [np.swapaxes(a, -1, -2)], [out])
    np.testing.assert_allclose(out, np.linalg.cholesky(a.astype(np.float64)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2000,), (3, 301), (40, 9)])  # bisection for few rows, a mask for many
def test_sort_orders_zero_signs_in_long_and_many_rows(shape: tuple[int, ...]) -> None:
    pool = np.array([-0.0, 0.0, 1.0, -1.0, np.nan, 2.5, -np.inf], np.float32)
    x = np.random.default_rng(3).choice(pool, shape)
    (y,) = run(Routine.build("Sort", [shape], [DType.float32]), x)
    rows = x.reshape(-1, shape[-1])
    expected = np.array([sorted(row.tolist(), key=_order_key) for row in rows], dtype=x.dtype).reshape(shape)
    assert_same_bits(y, expected)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("columns", [False, True])
def test_host_triangular_solve_takes_every_layout(lower: bool, transpose_a: bool, columns: bool) -> None:
    # the host fallback (a host-memory device's routine) runs LAPACK trsm's layouts directly
    rng = np.random.default_rng(3)
    n, m = 6, 4
    a = rng.uniform(-1, 1, (n, n)) + np.eye(n) * 4
    b = rng.uniform(-1, 1, (n, m) if columns else (m, n))
    params = TriangularSolveParams(lower=lower, transpose_a=transpose_a, columns=columns)
    r = Routine.build(Routines.TriangularSolve, [a.shape, b.shape], ["float64", "float64"], params)
    x = np.zeros_like(b)
    run_routine(r, [a, b], [x])
    rhs = b if columns else b.T
    want = scipy.linalg.solve_triangular(a, rhs, trans=int(transpose_a), lower=lower)
    np.testing.assert_allclose(x, want if columns else want.T, rtol=1e-12)


def test_triangular_solve_checks_the_columns_layout() -> None:
    with pytest.raises(ValueError, match="right-hand sides as columns"):
        Routine.build(
            Routines.TriangularSolve, [(3, 3), (4, 3)], ["float32"] * 2, TriangularSolveParams(columns=True)
        )


def test_routine_views_are_checked_and_keyed() -> None:
    from jaxcore.shape import ShapeTracker

    t = ShapeTracker.from_shape((3, 2)).permute((1, 0))
    r = Routine.build("Cholesky", [(2, 2)], ["float32"])
    with pytest.raises(ValueError, match=r"view 0 has shape \[2, 3\], input 0 is \[2, 2\]"):
        Routine.build("Sort", [(2, 2)], ["float32"], views=[t])
    with pytest.raises(ValueError, match="1 views for 2 inputs"):
        Routine.build("TriangularSolve", [(2, 2), (1, 2)], ["float32"] * 2, views=[None])
    with pytest.raises(TypeError, match="must be a ShapeTracker"):
        Routine.build("Sort", [(2, 3)], ["float32"], views=[(2, 3)])  # type: ignore[list-item]
    viewed = Routine.build("Sort", [(2, 3)], ["float32"], views=[t])
    plain = Routine.build("Sort", [(2, 3)], ["float32"], views=[ShapeTracker.from_shape((2, 3))])
    assert plain.views is None and plain.key() == Routine.build("Sort", [(2, 3)], ["float32"]).key()
    assert viewed.key() != plain.key() and "input 0 through" in str(viewed) and r.views is None
