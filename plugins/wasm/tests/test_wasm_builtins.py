"""Our transcendental, fmod, float16 and threefry helpers against math/numpy over dense grids."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcore import dtype as dt
from jaxcore_wasm import builtins, toolchain
from jaxcore_wasm.irtext import F32, F64, I32, Module

RNG = np.random.default_rng(1234)


def new_module() -> Module:
    return Module(toolchain.TRIPLE, toolchain.datalayout())


def grid(lo: float, hi: float, n: int = 4001) -> np.ndarray:
    return np.concatenate([np.linspace(lo, hi, n), RNG.uniform(lo, hi, n)])


MATH = {
    "Exp": math.exp,
    "Log": math.log,
    "Sin": math.sin,
    "Cos": math.cos,
    "Atan": math.atan,
    "Asin": math.asin,
    "Erf": math.erf,
    "Erfc": math.erfc,
}
MATH_NP = {"Sin": np.sin, "Cos": np.cos}
RANGES = {
    "Exp": [(-745.0, 709.0), (-1.0, 1.0)],
    "Log": [(1e-300, 1e-290), (0.5, 2.0), (1.0, 1e300)],
    "Sin": [(-10.0, 10.0), (-1e5, 1e5)],
    "Cos": [(-10.0, 10.0), (-1e5, 1e5)],
    "Atan": [(-10.0, 10.0), (-1e8, 1e8)],
    "Asin": [(-1.0, 1.0)],
    "Erf": [(-7.0, 7.0)],
    "Erfc": [(-7.0, 27.0)],
}


def ref64(op: str, x: np.ndarray) -> np.ndarray:
    f = MATH[op]

    def safe(v: float) -> float:
        try:
            return f(v)
        except OverflowError:
            return math.inf
        except ValueError:  # log(0) is -inf; log(-1), asin(2) are NaN
            return -math.inf if (op == "Log" and v == 0) else math.nan

    return np.array([safe(float(v)) for v in x])


@pytest.mark.parametrize("op", sorted(MATH))
def test_float64_accuracy(harness, op: str) -> None:
    for lo, hi in RANGES[op]:
        x = grid(lo, hi)
        got = harness.unary(op, F64, x)
        want = ref64(op, x)
        err = np.abs(got - want)
        if op in ("Erf", "Erfc"):
            assert err.max() <= 1e-15, (op, lo, hi, err.max())
        else:
            bound = 4 * np.spacing(np.abs(want)) + 1e-300
            bad = err > bound
            assert not bad.any(), (op, lo, hi, x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("op", sorted(MATH))
def test_float32_accuracy(harness, op: str) -> None:
    for lo, hi in RANGES[op]:
        x = grid(max(lo, -3e38), min(hi, 3e38)).astype(np.float32)
        x = x[np.isfinite(x)]
        got = harness.unary(op, F32, x).astype(np.float64)
        with np.errstate(all="ignore"):
            want = ref64(op, x.astype(np.float64))
            fin = np.isfinite(want.astype(np.float32)) & (np.abs(want) >= np.finfo(np.float32).tiny)
        if op in ("Erf", "Erfc"):
            assert np.abs(got - want).max() <= 5e-7 * 0.25
            continue
        if not fin.any():
            continue
        ulps = np.abs(got[fin] - want[fin]) / np.spacing(np.abs(want[fin]).astype(np.float32)).astype(
            np.float64
        )
        assert ulps.max() <= 2.0, (op, lo, hi, ulps.max())


# sin/cos beyond the Cody-Waite range: |x| > 2^20 takes the exact (Payne-Hanek) reduction.
# (x, sin x, cos x) correctly rounded (exact reduction in Python integers): 1e22 lies near a multiple
# of pi/2, 6381956970095103 * 2^797 is the double closest to one (numpy's cos is 8 ulp off there).
KNOWN_TRIG = [
    (1e22, -0.8522008497671888, 0.523214785395139),
    (6381956970095103 * 2.0**797, 1.0, -4.687165924254628e-19),
    (2.0**1023, 0.563127779850884, -0.826369834614148),
]


def big_args(hi_exp: float, n: int = 20000) -> np.ndarray:
    """Log-uniform magnitudes 1e5 .. 10^hi_exp of both signs, the switch at 2^20 and powers of two."""
    mag = 10.0 ** RNG.uniform(5, hi_exp, n)
    edges = [2.0**20, np.nextafter(2.0**20, 0), np.nextafter(2.0**20, 4e6), 1.6e6, 1.7e6]
    edges += [2.0**k for k in range(21, int(hi_exp * 3.3219))]
    x = np.concatenate([mag, edges])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_sincos_large_float64(harness, op: str) -> None:
    x = big_args(308.2)
    got = harness.unary(op, F64, x)
    want = MATH_NP[op](x)
    bad = np.abs(got - want) > 4 * np.spacing(np.abs(want)) + 1e-300
    assert not bad.any(), (op, x[bad][:5], got[bad][:5], want[bad][:5])
    xs = np.array([v for v, _, _ in KNOWN_TRIG] + [-v for v, _, _ in KNOWN_TRIG])
    exact = np.array([k[1 if op == "Sin" else 2] for k in KNOWN_TRIG])
    exact = np.concatenate([exact, -exact if op == "Sin" else exact])
    got = harness.unary(op, F64, xs)
    assert (np.abs(got - exact) <= np.spacing(np.abs(exact))).all(), (op, got, exact)


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_sincos_large_float32(harness, op: str) -> None:
    x = big_args(38.5)
    x = x[np.abs(x) <= 3.4e38].astype(np.float32)
    got = harness.unary(op, F32, x).astype(np.float64)
    want = MATH_NP[op](x.astype(np.float64)).astype(np.float32).astype(np.float64)
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 2.0, (op, x[ulps > 2][:5], got[ulps > 2][:5], want[ulps > 2][:5])
    assert float(harness.unary("Sin", F32, np.array([1e22], np.float32))[0]) == np.float32(
        math.sin(float(np.float32(1e22)))
    )


@pytest.mark.parametrize("ty", [F32, F64])
def test_sincos_mixed_lanes(harness, ty: str) -> None:
    """Small and huge arguments side by side in every vector position (the masked per-lane path),
    an odd length for the scalar remainder loop, and +-inf (NaN) among them."""
    npt = np.float32 if ty == F32 else np.float64
    small = RNG.uniform(-10, 10, 4001)
    huge = 10.0 ** RNG.uniform(6, 30, 4001) * RNG.choice([-1.0, 1.0], 4001)
    for pattern in ([0, 1], [1, 0, 0, 0], [0, 0, 0, 1, 1, 0, 1, 0], [1, 1, 1, 0]):
        pick = np.resize(np.array(pattern, bool), 4001)
        x = np.where(pick, huge, small).astype(npt)
        x[7], x[100] = np.inf, -np.inf
        for op in ("Sin", "Cos"):
            got = harness.unary(op, ty, x).astype(np.float64)
            with np.errstate(invalid="ignore"):
                want = MATH_NP[op](x.astype(np.float64)).astype(npt).astype(np.float64)
            assert np.array_equal(np.isnan(got), np.isnan(want))
            ok = ~np.isnan(want)
            assert np.abs(got[ok] - want[ok]).max() <= (3e-7 if ty == F32 else 1e-15), (op, ty, pattern)


def test_sincos_loop_stays_vectorised() -> None:
    """The branch to the large-argument reduction must not stop the vectoriser (it would cost 2.5x):
    the loop computes on vectors and calls the reduction per lane only behind a mask test."""
    from jaxcore_wasm import toolchain
    from jaxcore_wasm.irtext import Fn

    for ty, vec in ((F64, "<2 x double>"), (F32, "x float>")):
        mod = new_module()
        h = builtins.unary(mod, "Sin", ty)
        f = Fn("run", "void", [("ptr noalias", "%p"), ("ptr noalias", "%o"), (I32, "%n")], "#0")
        f.raw("br label %loop")
        f.start("loop")
        i = f.phi(I32, [("0", "entry"), ("%inext", "loop")])
        v = f.call(ty, h, [(ty, f.emit(f"load {ty}, ptr {f.emit(f'getelementptr {ty}, ptr %p, i32 {i}')}"))])
        f.raw(f"store {ty} {v}, ptr {f.emit(f'getelementptr {ty}, ptr %o, i32 {i}')}")
        f.lines.append(f"  %inext = add i32 {i}, 1")
        f.cbr(f.icmp("slt", I32, "%inext", "%n"), "loop", "exit")
        f.start("exit")
        f.raw("ret void")
        mod.functions.append(f.render())
        mod.attr_group('nounwind "wasm-export-name"="run"')
        _, opt = toolchain.compile_ir(mod.render())
        run = opt[opt.index("define void @run") :]
        assert vec in run and "@jc_sin_big_v" not in run, ty


def test_exp_float32_edges(harness) -> None:
    """float32 exp where the shift-trick rounding and the two-step scaling matter: results down in
    the subnormals (x < -87.3), up to the overflow threshold, and k at the ends of its range."""
    x = np.concatenate(
        [np.linspace(-104.0, -80.0, 20001), np.linspace(80.0, 88.72, 4001), RNG.uniform(-104, 88.7, 20000)]
    )
    x = x.astype(np.float32)
    got = harness.unary("Exp", F32, x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    spacing = np.spacing(want.astype(np.float32)).astype(np.float64)  # subnormals: 2^-149
    assert (np.abs(got - want) <= 2 * spacing).all()


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 1e-310, 800.0, -800.0])


@pytest.mark.parametrize("ty", [F32, F64])
@pytest.mark.parametrize("op", sorted(MATH))
def test_special_values(harness, op: str, ty: str) -> None:
    x = SPECIALS.astype(np.float32 if ty == F32 else np.float64)
    got = harness.unary(op, ty, x).astype(np.float64)
    want = ref64(op, x.astype(np.float64))
    if ty == F32:
        with np.errstate(all="ignore"):
            want = want.astype(np.float32).astype(np.float64)
    tol = 1e-6 if ty == F32 else 1e-15
    with np.errstate(invalid="ignore"):
        same = (np.isnan(got) & np.isnan(want)) | (got == want) | (np.abs(got - want) <= tol * np.abs(want))
    assert same.all(), (op, ty, x[~same], got[~same], want[~same])


def _binary(harness, helper_fn, ty: str, a: np.ndarray, b: np.ndarray, out_dtype) -> np.ndarray:
    mod = new_module()
    h = helper_fn(mod, ty)
    return harness.run(harness.map_fn(h, mod, [ty, ty], ty), [a, b], out_dtype)


@pytest.mark.parametrize("ty", [F32, F64])
def test_fmod_is_exact(harness, ty: str) -> None:
    npt = np.float32 if ty == F32 else np.float64
    a = np.concatenate(
        [RNG.normal(0, 100, 3000), RNG.normal(0, 1e30, 500), [5.0, -5.0, 0.0, -0.0, np.inf, 3.0]]
    )
    b = np.concatenate([RNG.normal(0, 3, 3000), RNG.normal(0, 1e-3, 500), [0.0, 2.0, 2.0, -2.0, 1.0, np.inf]])
    a, b = a.astype(npt), b.astype(npt)
    got = _binary(harness, builtins.fmod, ty, a, b, npt)
    with np.errstate(all="ignore"):
        want = np.fmod(a, b)
    assert np.array_equal(got, want, equal_nan=True)
    num = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[num]), np.signbit(want[num]))


def test_half_to_float_all_bit_patterns(harness) -> None:
    mod = new_module()
    h = builtins.half_to_float(mod)
    bits = np.arange(65536, dtype=np.uint32)
    got = harness.run(harness.map_fn(h, mod, [I32], F32), [bits], np.float32)
    want = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_float_to_half_rounding(harness) -> None:
    mod = new_module()
    h = builtins.float_to_half(mod)
    edges = [65504.0, 65519.99, 65520.0, 1e9, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-10, np.inf, np.nan]
    x = np.concatenate([RNG.normal(0, 1000, 20000), RNG.normal(0, 1e-5, 20000), edges, [-e for e in edges]])
    x = x.astype(np.float32)
    # every float halfway between two halves, to check ties-to-even
    h16 = np.arange(0, 0x7C00, 7, dtype=np.uint16).view(np.float16).astype(np.float32)
    mid = ((h16[:-1].astype(np.float64) + h16[1:].astype(np.float64)) / 2).astype(np.float32)
    x = np.concatenate([x, mid])
    got = harness.run(harness.map_fn(h, mod, [F32], I32), [x], np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(got, want, equal_nan=True)


def test_half_round_trip_keeps_every_bit_pattern(harness) -> None:
    """float_to_half(half_to_float(h)) == h for all 65,536 patterns: a moved float16 NaN keeps its
    sign, payload and signalling bit; a float NaN whose payload is only in its low 13 bits stays
    a NaN (not Inf)."""
    mod = new_module()
    h2f, f2h = builtins.half_to_float(mod), builtins.float_to_half(mod)
    from jaxcore_wasm.irtext import Fn

    f = Fn("rt", I32, [(I32, "%h")], "alwaysinline nounwind", "internal")
    f.raw(f"ret i32 {f.call(I32, f2h, [(F32, f.call(F32, h2f, [(I32, '%h')]))])}")
    mod.helpers["rt"] = f.render()
    bits = np.arange(65536, dtype=np.uint32)
    got = harness.run(harness.map_fn("rt", mod, [I32], I32), [bits], np.uint32)
    assert np.array_equal(got, bits)
    mod = new_module()
    f2h = builtins.float_to_half(mod)
    x = np.array([0x7F800001, 0xFF801FFF, 0x7FC00000, 0x7FA00000], np.uint32).view(np.float32)
    got = harness.run(harness.map_fn(f2h, mod, [F32], I32), [x], np.uint32)
    assert [hex(int(v)) for v in got] == ["0x7c01", "0xfc01", "0x7e00", "0x7d00"]


def test_double_to_half_has_no_double_rounding(harness) -> None:
    mod = new_module()
    h = builtins.double_to_half(mod)
    # 1 + 2^-11 + 2^-40 rounds up in one step; via float32 (ties-to-even) it would round down
    x = np.array(
        [1 + 2**-11 + 2**-40, 1 + 2**-11, 1 + 2**-11 - 2**-40, 65520.0 - 1e-9, 1e300, -1e-300, np.nan]
    )
    x = np.concatenate([x, RNG.normal(0, 100, 20000)])
    got = harness.run(harness.map_fn(h, mod, [F64], I32), [x], np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(over="ignore"):
        assert np.array_equal(got, x.astype(np.float16), equal_nan=True)


def test_threefry_matches_contract(harness) -> None:
    mod = new_module()
    name = builtins.threefry(mod)
    from jaxcore_wasm.irtext import Fn

    f = Fn("tf", "i32", [(I32, "%a"), (I32, "%b")], "alwaysinline nounwind", "internal")
    pair = f.call("{i32, i32}", name, [(I32, "%a"), (I32, "%b"), (I32, "%a"), (I32, "%b")])
    x0 = f.emit(f"extractvalue {{i32, i32}} {pair}, 0")
    x1 = f.emit(f"extractvalue {{i32, i32}} {pair}, 1")
    f.raw(f"ret i32 {f.bin('xor', I32, x0, x1)}")
    mod.helpers["tf"] = f.render()
    a = RNG.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    b = RNG.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    got = harness.run(harness.map_fn("tf", mod, [I32, I32], I32), [a, b], np.uint32)
    assert np.array_equal(got, dt.threefry2x32(a, b, a, b, "xor"))
    assert np.array_equal(dt.threefry2x32(0, 0, 0, 0, 0), np.uint32(1797259609))
