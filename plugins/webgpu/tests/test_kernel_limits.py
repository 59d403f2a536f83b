"""Kernels larger than any buffer of the device: a typed error at prepare that names the limit."""

from __future__ import annotations

import pytest

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel
from jaxcore.backend import UnsupportedOpError
from jaxcore.kernel import Reduction

F32 = DType.float32
g, r = AluVar.gidx, AluVar.ridx


def _kernels(size: int) -> dict[str, Kernel]:
    return {
        "map": Kernel(1, size, AluExp.global_index(F32, 0, size, g) * 2.0),
        "const": Kernel(0, size, AluExp.f32(1.0)),
        "bool": Kernel(0, size, AluExp.bool_(True)),
        "reduce": Kernel(1, size, AluExp.global_index(F32, 0, 8, r), Reduction(F32, AluOp.Add, 8)),
        "big-input": Kernel(1, 4, AluExp.global_index(F32, 0, size, g * AluExp.i32(size // 4))),
    }


@pytest.mark.parametrize("size", [2**32 + 4, 2**40], ids=["2^32+4", "2^40"])
@pytest.mark.parametrize("kind", ["map", "const", "bool", "reduce", "big-input"])
def test_kernel_beyond_every_buffer_is_unsupported_at_prepare(gpu, size, kind):
    """Sizes past u32 have no WGSL literal: these raised a shader-validation ShaderError (or
    prepared a shader whose bounds had wrapped); no buffer can hold them, so none can be dispatched."""
    k = _kernels(size)[kind]
    limit = gpu.capabilities.max_buffer_bytes
    with pytest.raises(UnsupportedOpError, match=f"max_buffer_bytes is {limit}") as info:
        gpu.prepare_kernel(k)
    assert info.value.device == "webgpu"
    with pytest.raises(MemoryError):
        gpu.malloc(max([k.bytes, *k.input_bytes()]))


def test_kernel_at_the_limit_prepares(gpu):
    """The largest float32 output one buffer holds still compiles."""
    n = gpu.capabilities.max_buffer_bytes // 4
    exe = gpu.prepare_kernel(Kernel(0, n, AluExp.cast(F32, g)))
    assert exe.data.passes
