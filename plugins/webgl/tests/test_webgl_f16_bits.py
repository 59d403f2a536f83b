"""float16 values that are only moved keep their 16 bits: no unpackHalf2x16/packHalf2x16 on the way
(NVIDIA's canonicalise NaN payloads, e.g. 0xfe00 -> 0x7fff), while arithmetic still rounds in float16."""

from __future__ import annotations

import numpy as np
import pytest
from jaxcore_webgl import glsl

from jaxcore.alu import AluExp, AluVar
from jaxcore.conformance.harness import map_kernel, run_kernel
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.shape import ShapeTracker

F16 = DType.float16
# NaNs with payloads and both signs, infinities, -0, denormals, the largest finite value
BITS = np.array(
    [0xFE00, 0x7E01, 0x7C01, 0xFC01, 0x7FFF, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0x3C00],
    np.uint16,
)


def _x(n: int = 3) -> np.ndarray:
    return np.tile(BITS, n).view(np.float16)


def _kernels(n: int) -> dict[str, Kernel]:
    flipped = AluExp.global_view(F16, 0, ShapeTracker.from_shape([n]).flip([True]), [AluVar.gidx])
    even = AluExp.cmpne(AluExp.mod(AluVar.gidx, 2), AluExp.i32(1))
    return {
        "copy": map_kernel([F16], n, lambda v: v),
        "where": map_kernel([F16, F16], n, lambda a, b: AluExp.where(even, a, b)),
        "view": Kernel(1, n, flipped),
    }


@pytest.mark.parametrize("name", ["copy", "where", "view"])
def test_moved_float16_never_goes_through_unpack(name: str) -> None:
    n = len(_x())
    src = glsl.kernel_shader(_kernels(n)[name], 4)
    assert "unpackHalf2x16" not in src and "packHalf2x16" not in src, src


@pytest.mark.parametrize("name", ["copy", "where", "view"])
def test_moved_float16_bits_round_trip(gl, name: str) -> None:
    x = _x()
    y = x[::-1].copy()
    n = len(x)
    k = _kernels(n)[name]
    got = run_kernel(gl, k, [x] if k.nargs == 1 else [x, y]).view(np.uint16)
    if name == "copy":
        want = x.view(np.uint16)
    elif name == "where":
        want = np.where(np.arange(n) % 2 == 0, x.view(np.uint16), y.view(np.uint16))
    else:
        want = x.view(np.uint16)[::-1]
    assert [hex(v) for v in got] == [hex(v) for v in want]


def test_float16_arithmetic_still_rounds_in_float16(gl) -> None:
    x = (np.arange(64, dtype=np.float32) / 7).astype(np.float16)
    k = map_kernel([F16, F16], len(x), lambda a, b: a * b + a)
    got = run_kernel(gl, k, [x, x])
    want = (x * x + x).astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_shared_float16_moves_are_bound_once(gl) -> None:
    """A DAG of Where nodes sharing their operands (2^24 paths) renders each node once, and runs."""
    n = 16
    x = np.arange(n, dtype=np.float16)
    y = -x

    def fn(a: AluExp, b: AluExp) -> AluExp:
        for i in range(24):
            c = AluExp.cmpne(AluExp.mod(AluVar.gidx + i, 3), AluExp.i32(0))
            a, b = AluExp.where(c, a, b), AluExp.where(c, b, a)
        return a

    k = map_kernel([F16, F16], n, fn)
    assert len(glsl.kernel_shader(k, 2)) < 20000
    got = run_kernel(gl, k, [x, y])
    a, b = x.copy(), y.copy()
    for i in range(24):
        c = (np.arange(n) + i) % 3 != 0
        a, b = np.where(c, a, b), np.where(c, b, a)
    assert np.array_equal(got.view(np.uint16), a.view(np.uint16))


def test_int_through_float32_and_back_rounds(gl) -> None:
    """Cast<int32>(Cast<float32>(x)) rounds to float32 (fuzz seed 1286264935: llvmpipe folded it away)."""
    x = np.array([-706300770, 73731542, 1660413036, 16777217], np.int32)
    k = map_kernel([DType.int32], len(x), lambda v: AluExp.cast(DType.int32, AluExp.cast(DType.float32, v)))
    got = run_kernel(gl, k, [x])
    assert list(got) == list(x.astype(np.float32).astype(np.int32))
