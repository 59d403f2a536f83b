"""The float64 transcendental expansions (`jaxcore.expansions64`), checked in the reference interpreter
against numpy and scipy.special: the suite's float64 tolerance table (and a tighter bound), the
special values exactly, -0 kept, no 64-bit bit access in the trees, and the same results after
legalization and with a Reciprocal an ulp off."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import pytest
import scipy.special

from jaxcore.alu import AluExp, AluOp
from jaxcore.conformance.tolerances import lookup
from jaxcore.dtype import DType, byte_width
from jaxcore.expansions64 import expand_node64
from jaxcore.interpret import Interpreter
from jaxcore.legalize import OPAQUE, TargetTraits, legalize

F64, F32 = DType.float64, DType.float32

_REF = {
    "Sin": np.sin,
    "Cos": np.cos,
    "Exp": np.exp,
    "Log": np.log,
    "Atan": np.arctan,
    "Asin": np.arcsin,
    "Erf": scipy.special.erf,
    "Erfc": scipy.special.erfc,
}
OPS = sorted(_REF)

# (rtol, atol) well inside the table's float64 entries: what these trees actually reach. erfc is
# 1 - erf up to 2.5, so only absolute there (erfc(2.5) = 4e-4: ~1e-11 relative).
_TIGHT = {"Erf": (0.0, 2e-14), "Erfc": (0.0, 2e-14), "Exp": (1e-13, 1e-320)}

_SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, -1e-300, 5e-324, -5e-324, 2.2e-308]
_SPECIAL += [1e-9, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e22, -1e22, 1e300, -1e300, 1.7976931348623157e308]
_SPECIAL += [2.0**20, -(2.0**20), math.nextafter(2.0**20, 0), 709.78, 709.79, -745.1, -745.2, 27.0, -27.0]
_SPECIAL += [6381956970095103 * 2.0**797, 1 - 2**-53, 1 + 2**-52, math.nextafter(1.0, 2), 0.9999999999]


def _inputs(op: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    sign = rng.choice([-1.0, 1.0], 3000)
    base = [
        _SPECIAL,
        rng.normal(size=2000) * 3,
        np.linspace(-10, 10, 2001),
        sign * 10.0 ** rng.uniform(-320, 308, 3000),
    ]
    if op in ("Sin", "Cos"):
        k = np.concatenate([np.arange(6300, 6420), np.arange(667500, 667600), np.arange(-200, 200)])
        base += [k * (math.pi / 2), sign * 10.0 ** rng.uniform(0, 22, 3000)]
    if op == "Exp":
        base += [np.linspace(-760, 720, 3001), rng.uniform(-745.2, -700, 1000)]
    if op == "Log":
        base += [
            np.linspace(0.5, 2, 2001),
            1 + rng.normal(size=1000) * 1e-8,
            2.0 ** rng.uniform(-1074, 1024, 2000),
        ]
    if op == "Asin":
        base += [
            np.linspace(-1, 1, 2001),
            1 - 10.0 ** rng.uniform(-16, 0, 1000),
            0.5 + rng.normal(size=500) * 1e-3,
        ]
    if op == "Atan":
        base += [sign * 10.0 ** rng.uniform(-10, 20, 3000)]
    if op in ("Erf", "Erfc"):
        base += [np.linspace(-8, 30, 4001), 2.5 + rng.normal(size=500) * 1e-3]
    # mantissas of all ones: their float32 conversion (frexp's exponent) rounds up to 2^k
    edge = np.ldexp(1 - 2.0**-53, np.arange(-1021, 1025, 7))
    if op == "Log":
        base += [edge, np.ldexp(1 - 2.0**-53, np.arange(-1073, -1021))]
    if op in ("Sin", "Cos"):
        base += [edge[edge > 1e6], -edge[edge > 1e6]]
    return np.concatenate([np.asarray(b, np.float64) for b in base])


@functools.cache
def _tree(op: str) -> AluExp:
    e = expand_node64(AluExp(AluOp(op), F64, (AluExp.variable(F64, "x"),)))
    assert e is not None
    return e


def _run(e: AluExp, env: dict) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(Interpreter(env).run(e))


def _eval(exp: AluExp, x: np.ndarray) -> np.ndarray:
    """Node by node, eagerly: every branch of every Where is computed, as on a device."""
    vals: dict[str, np.ndarray] = {}
    for n in exp.nodes():
        srcs = tuple(AluExp.variable(s.dtype, f"s{i}") for i, s in enumerate(n.src))
        env = {f"s{i}": vals[s.key()] for i, s in enumerate(n.src)} if n.src else {"x": x}
        vals[n.key()] = _run(AluExp(n.op, n.dtype, srcs, n.arg) if n.src else n, env)
    return np.broadcast_to(vals[exp.key()], x.shape)


def _want(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(_REF[op](x), np.float64)


def _check(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf])
    fin = np.isfinite(want)
    err = np.abs(got[fin] - want[fin])
    bad = err > atol + rtol * np.abs(want[fin])
    assert not bad.any(), f"{bad.sum()} off, worst x={_worst(err, want[fin])}"


def _worst(err: np.ndarray, want: np.ndarray) -> str:
    i = int(np.argmax(err / np.maximum(np.abs(want), 1e-300)))
    return f"err {err[i]:.3g} of {want[i]!r}"


@pytest.mark.parametrize("op", OPS)
def test_meets_the_float64_table(op: str) -> None:
    x = _inputs(op)
    got, want = _eval(_tree(op), x), _want(op, x)
    _check(got, want, *lookup(op, F64))
    _check(got, want, *_TIGHT.get(op, (1e-13, 1e-16)))


_EXACT = {
    "Sin": [(0.0, 0.0), (-0.0, -0.0), (1e-300, 1e-300), (-5e-324, -5e-324), (math.inf, math.nan)],
    "Cos": [(0.0, 1.0), (-0.0, 1.0), (5e-324, 1.0), (-math.inf, math.nan), (math.inf, math.nan)],
    "Exp": [(math.inf, math.inf), (-math.inf, 0.0), (-0.0, 1.0), (710.0, math.inf), (-746.0, 0.0)],
    "Log": [
        (0.0, -math.inf),
        (-0.0, -math.inf),
        (-1.0, math.nan),
        (-math.inf, math.nan),
        (math.inf, math.inf),
    ],
    "Atan": [(math.inf, math.pi / 2), (-math.inf, -math.pi / 2), (-0.0, -0.0), (-5e-324, -5e-324)],
    "Asin": [
        (1.0, math.pi / 2),
        (-1.0, -math.pi / 2),
        (-0.0, -0.0),
        (1 + 2**-52, math.nan),
        (-math.inf, math.nan),
    ],
    "Erf": [(math.inf, 1.0), (-math.inf, -1.0), (-0.0, -0.0), (0.0, 0.0), (30.0, 1.0)],
    "Erfc": [(math.inf, 0.0), (-math.inf, 2.0), (0.0, 1.0), (-0.0, 1.0), (-30.0, 2.0)],
}


@pytest.mark.parametrize("op", OPS)
def test_special_values_exactly(op: str) -> None:
    cases = [*_EXACT[op], (math.nan, math.nan), (-math.nan, math.nan)]
    x = np.array([c[0] for c in cases])
    want = np.array([c[1] for c in cases])
    got = _eval(_tree(op), x)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))  # -0 bit for bit


@pytest.mark.parametrize("op", ["Sin", "Atan", "Asin", "Erf"])
def test_keeps_the_sign_of_zero_and_tiny_arguments(op: str) -> None:
    x = np.array([-0.0, 0.0, -5e-324, 5e-324, -1e-300, 1e-300, -1e-12])
    got = _eval(_tree(op), x)
    assert np.array_equal(np.signbit(got), np.signbit(x))
    if op != "Erf":
        assert np.array_equal(got, x)  # x itself


@pytest.mark.parametrize("op", OPS)
def test_no_64_bit_bit_access(op: str) -> None:
    def wide_bitcast(n: AluExp) -> bool:
        widths = {byte_width(n.dtype), *(byte_width(s.dtype) for s in n.src)}
        return n.op == AluOp.Bitcast and n.arg != OPAQUE and 8 in widths

    tree = _tree(op)
    assert not tree.some(wide_bitcast)
    assert all(byte_width(n.dtype) < 8 or n.dtype == F64 for n in tree.nodes())
    assert not tree.some(lambda n: n.op in (AluOp.Idiv, AluOp.Mod) and n.dtype == F64)  # no true division


def _reciprocal_off(ulps: float) -> Callable[[AluExp], AluExp | None]:
    """A rewrite that makes every float64 Reciprocal `ulps` ulps off (as a device's may be)."""

    def visit(n: AluExp) -> AluExp | None:
        if n.op == AluOp.Reciprocal and n.dtype == F64:
            return AluExp.mul(n, AluExp.f64(1 + ulps * 2.0**-52))
        return None

    return visit


@pytest.mark.parametrize("ulps", [1.0, -0.5])
@pytest.mark.parametrize("op", ["Log", "Atan", "Asin", "Erf", "Erfc"])
def test_a_reciprocal_an_ulp_off_still_meets_the_table(op: str, ulps: float) -> None:
    x = _inputs(op)
    tree = _tree(op).rewrite(_reciprocal_off(ulps))
    got, want = _eval(tree, x), _want(op, x)
    _check(got, want, *lookup(op, F64))
    _check(got, want, *_TIGHT.get(op, (1e-13, 1e-16)))


_FINITE_MATH = TargetTraits(
    assumes_finite_math=True, folds_float_identities=True, contracts_mul_add=True, divides_by_reciprocal=True
)


@pytest.mark.parametrize("traits", [TargetTraits(), _FINITE_MATH], ids=["plain", "finite_math"])
@pytest.mark.parametrize("op", OPS)
def test_legalized_trees_compute_the_same(op: str, traits: TargetTraits) -> None:
    x = np.concatenate([_SPECIAL, _inputs(op)[::10]])
    got, want = _eval(legalize(_tree(op), traits), x), _eval(_tree(op), x)
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


def test_opaque_cody_waite_steps() -> None:
    for op in ("Sin", "Cos", "Exp"):
        assert _tree(op).some(lambda n: n.op == AluOp.Bitcast and n.arg == OPAQUE)


def test_only_float64_transcendentals_expand() -> None:
    x64, x32 = AluExp.variable(F64, "x"), AluExp.variable(F32, "x")
    assert expand_node64(AluExp(AluOp.Sin, F32, (x32,))) is None
    assert expand_node64(AluExp(AluOp.Sqrt, F64, (x64,))) is None
    assert expand_node64(AluExp.add(x64, x64)) is None
