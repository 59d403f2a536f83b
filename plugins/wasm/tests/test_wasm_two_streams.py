"""Long sums into few outputs read two halves side by side (codegen._reduce_two_streams): in the
split path's `partial` on several threads and in `kernel` on one, with odd and minimal lengths."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction
from jaxcore_wasm import codegen
from jaxcore_wasm.backend import WasmBackend

RNG = np.random.default_rng(5)
NP = {DType.float32: np.float32, DType.float64: np.float64, DType.int32: np.int32, DType.uint32: np.uint32}


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda t: f"{t}threads")
def be(request: pytest.FixtureRequest) -> WasmBackend:
    return WasmBackend(threads=request.param)


def _sum_kernel(dtype: DType, rows: int, cols: int) -> Kernel:
    item = AluExp.global_index(dtype, 0, rows * cols, AluVar.gidx * AluExp.i32(cols) + AluVar.ridx)
    return Kernel(1, rows, item, Reduction(dtype, AluOp.Add, cols))


@pytest.mark.parametrize("dtype", list(NP), ids=str)
@pytest.mark.parametrize(
    "rows,cols",
    [(1, codegen.SPLIT_MIN_REDUCE), (1, codegen.SPLIT_MIN_REDUCE + 1), (3, 100_003), (2, (1 << 20) + 65)],
)
def test_two_stream_sum_matches_numpy(be: WasmBackend, dtype: DType, rows: int, cols: int) -> None:
    kernel = _sum_kernel(dtype, rows, cols)
    x = RNG.integers(-8 if dtype != DType.uint32 else 0, 9, (rows, cols)).astype(NP[dtype])
    if dtype in (DType.int32, DType.uint32):  # wraps mod 2^32 in any order
        x = RNG.integers(0, 2**32, (rows, cols), dtype=np.uint64).astype(np.uint32).view(NP[dtype])
    exe = be.prepare_kernel(kernel)
    assert exe.data.plan.split
    src, out = be.malloc(x.nbytes, x.tobytes()), be.malloc(rows * x.itemsize)
    be.dispatch(exe, [src], [out])
    got = np.frombuffer(be.read(out), NP[dtype])
    if dtype in (DType.int32, DType.uint32):
        want = (x.astype(np.int64).sum(axis=1) & 0xFFFFFFFF).astype(np.uint32).view(NP[dtype])
    else:
        want = x.astype(np.float64).sum(axis=1).astype(NP[dtype])
    np.testing.assert_array_equal(got, want)
    be.dec_ref(src)
    be.dec_ref(out)


def test_two_streams_only_for_long_sums() -> None:
    """Max, short sums and many outputs keep the one-stream loop; a float16 sum accumulates in
    float32 (the core's legalization), so it reads two streams too."""
    cases = [
        (_sum_kernel(DType.float32, 1, 1 << 16), True),
        (_sum_kernel(DType.float32, 1, codegen.SPLIT_MIN_REDUCE - 1), False),
        (_sum_kernel(DType.float32, codegen.SPLIT_MAX_OUTPUTS + 1, 1 << 15), False),
        (_sum_kernel(DType.float16, 1, 1 << 16), True),
    ]
    item = AluExp.global_index(DType.float32, 0, 1 << 16, AluVar.ridx)
    cases.append((Kernel(1, 1, item, Reduction(DType.float32, AluOp.Max, 1 << 16)), False))
    for kernel, want in cases:
        assert codegen._KernelWriter(kernel).two_streams() is want
        assert ("r2_" in codegen.generate(kernel).text) is want


def test_a_costly_item_takes_fewer_vector_accumulators() -> None:
    """A sum of exps interleaves two vector accumulators (four exp expansions at once overflow
    x86's 16 vector registers), a sum of reads four: both values right."""
    rows, cols = 8, 4096
    plain = _sum_kernel(DType.float32, rows, cols)
    costly = Kernel(1, rows, AluExp.exp(plain.exp), plain.reduction)

    def counts(k: Kernel) -> set[str]:
        lines = codegen.generate(k).text.splitlines()
        return {line.split("i32 ")[-1].rstrip("}") for line in lines if "interleave.count" in line}

    assert counts(plain) == {str(codegen.REDUCE_INTERLEAVE)}
    assert counts(costly) == {str(codegen.COSTLY_ITEM_INTERLEAVE)}
    be = WasmBackend(threads=2)
    x = RNG.normal(0, 1, (rows, cols)).astype(np.float32)
    src, out = be.malloc(x.nbytes, x.tobytes()), be.malloc(rows * 4)
    be.dispatch(be.prepare_kernel(costly), [src], [out])
    got = np.frombuffer(be.read(out), np.float32)
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
