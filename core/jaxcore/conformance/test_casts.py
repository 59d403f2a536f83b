"""Every cast pair (6 x 6) and every equal-width bitcast pair, with saturation and NaN edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore.alu import AluExp
from jaxcore.backend import Backend
from jaxcore.conformance import oracle, values
from jaxcore.conformance.harness import assert_close, map_kernel, run_kernel, skip_if_undeclared
from jaxcore.dtype import DType

DTYPES = [str(d) for d in DType]
# Bitcast needs equal byte widths and no bool: float32, int32 and uint32 pair up; f16/f64 have no partner.
BITCAST_PAIRS = [
    (a, b) for a in ("float32", "int32", "uint32") for b in ("float32", "int32", "uint32") if a != b
]


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_cast(backend: Backend, src: str, dst: str) -> None:
    """float->int truncates and saturates (NaN -> 0), int->int wraps, ->bool is x != 0 (NaN -> 1),
    ->float rounds to nearest even and keeps -0."""
    x = values.cast_sources(src)
    kernel = map_kernel([src], len(x), lambda v: AluExp.cast(DType(dst), v))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert_close(got, oracle.cast(x, src, dst), "Cast", dst, backend, inputs=[x], what=f"Cast {src}->{dst}")


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_cast_of_a_select(backend: Backend, src: str, dst: str) -> None:
    """A cast of a compound operand (a select between two inputs) keeps its grouping: C-style
    renderers that drop the operand's parentheses turn `(c ? a : b) != 0` into `c ? a : (b != 0)`."""
    x = values.cast_sources(src)
    y = x[::-1].copy()
    flag = (np.arange(len(x)) % 3 == 0).astype(np.int32)

    def select_then_cast(a: AluExp, b: AluExp, f: AluExp) -> AluExp:
        return AluExp.cast(DType(dst), AluExp.where(AluExp.cmplt(f, 1), a, b))

    kernel = map_kernel([src, src, "int32"], len(x), select_then_cast)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x, y, flag])
    picked = np.where(flag < 1, x, y)
    want = oracle.cast(picked, src, dst)
    assert_close(got, want, "Cast", dst, backend, inputs=[x, y, flag], what=f"Cast {src}->{dst} of a select")


@pytest.mark.parametrize("dst", ["int32", "uint32"])
def test_cast_saturation_vectors(backend: Backend, dst: str) -> None:
    """jax-js' literal vectors: f32 [1e20,-1e20,1e10,-1e10,1e5,-1e5] saturate per target."""
    x = np.array([1e20, -1e20, 1e10, -1e10, 1e5, -1e5, np.nan, 3.99, -3.99], np.float32)
    want = {
        "int32": [2147483647, -2147483648, 2147483647, -2147483648, 100000, -100000, 0, 3, -3],
        "uint32": [4294967295, 0, 4294967295, 0, 100000, 0, 0, 3, 0],
    }[dst]
    kernel = map_kernel(["float32"], len(x), lambda v: AluExp.cast(DType(dst), v))
    skip_if_undeclared(backend, kernel)
    assert_close(run_kernel(backend, kernel, [x]), oracle.array(want, dst), "Cast", dst, backend, inputs=[x])


@pytest.mark.parametrize("src", ["float16", "float64"])
def test_cast_keeps_negative_zero(backend: Backend, src: str) -> None:
    """signbit survives f16->f32 and f64->f32 (jax-js' signbit tests are built on this)."""
    x = oracle.array([-1.5, -0.0, 0.0, 1.5], src)
    kernel = map_kernel([src], 4, lambda v: AluExp.cast(DType.float32, v))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert list(np.signbit(got)) == [True, True, False, False], f"signbits {list(np.signbit(got))}"


@pytest.mark.parametrize(("src", "dst"), BITCAST_PAIRS)
def test_bitcast(backend: Backend, src: str, dst: str) -> None:
    """A raw reinterpretation of the bits: NaN payloads, ±Inf, -0 and denormals included."""
    x = values.cast_sources(src)
    kernel = map_kernel([src], len(x), lambda v: AluExp.bitcast(DType(dst), v))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    want = oracle.bitcast(x, src, dst)
    if oracle.is_float(dst):  # compare bits, not values: NaN payloads must survive too
        got, want, dst = got.view(np.uint32), want.view(np.uint32), "uint32"
    assert_close(got, want, "Bitcast", dst, backend, inputs=[x], what=f"Bitcast {src}->{dst}")


def test_bitcast_round_trip(backend: Backend) -> None:
    """f32 -> i32 -> f32 returns the same bits for 1.0, 2.0, ±Inf and NaN (jax-js array test 23)."""
    x = np.array([1.0, 2.0, np.inf, -np.inf, np.nan, -0.0], np.float32)
    kernel = map_kernel(
        ["float32"], len(x), lambda v: AluExp.bitcast(DType.float32, AluExp.bitcast(DType.int32, v))
    )
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert_close(got.view(np.uint32), x.view(np.uint32), "Bitcast", "uint32", backend, inputs=[x])
    k2 = map_kernel(["float32"], 2, lambda v: AluExp.bitcast(DType.int32, v))
    skip_if_undeclared(backend, k2)
    got2 = run_kernel(backend, k2, [np.array([1.0, 2.0], np.float32)])
    assert_close(got2, np.array([1065353216, 1073741824], np.int32), "Bitcast", "int32", backend)


NAN_BITS = {
    "float16": [0x7E00, 0xFE00, 0x7C01, 0x7E55, 0x8000, 0x0001, 0xFBFF],
    "float32": [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC12345, 0x80000000, 0x00000001, 0xFF7FFFFF],
    "float64": [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF8000000012345]
    + [0x8000000000000000, 0x0000000000000001, 0xFFEFFFFFFFFFFFFF],
}
_UINT = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}


@pytest.mark.parametrize("dtype", list(NAN_BITS))
def test_copy_preserves_bits(backend: Backend, dtype: str) -> None:
    """A plain copy kernel moves values untouched: exact bits for -0, denormals and the largest
    finite value, and NaN stays NaN with its sign (the contract leaves NaN payloads free)."""
    bits = np.array(NAN_BITS[dtype], _UINT[dtype])
    x = bits.view(oracle.storage(dtype))
    kernel = map_kernel([dtype], len(x), lambda v: v)
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    got_bits = got.view(_UINT[dtype])
    bad = []
    for a, g, gb, ab in zip(x, got, got_bits, bits):
        same = (np.isnan(g) and np.signbit(g) == np.signbit(a)) if np.isnan(a) else gb == ab
        if not same:
            bad.append(f"0x{int(ab):x} -> 0x{int(gb):x}")
    assert not bad, f"copy changed values on {backend.name}: {bad}"


@pytest.mark.parametrize("src", ["float16", "float64"])
def test_cast_keeps_nan_sign(backend: Backend, src: str) -> None:
    """-NaN stays negative through f16 -> f32 and f64 -> f32 (signbit of NaN, jax-js dtype tests)."""
    x = np.array(NAN_BITS[src][:2], _UINT[src]).view(oracle.storage(src))
    kernel = map_kernel([src], 2, lambda v: AluExp.cast(DType.float32, v))
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, [x])
    assert np.isnan(got).all() and list(np.signbit(got)) == [False, True], f"got bits {got.view(np.uint32)}"
