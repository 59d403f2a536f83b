"""Random kernels give the same bits through scalar `AluExp.evaluate` and through the cpu backend.

The scalar path evaluates one lane at a time with lazy `Where`; the cpu backend evaluates whole
blocks of lanes with strided views, gathers and masks. Agreement checks the block machinery
(views, masks, chunked reductions, epilogues) against the plain definition.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_reference import scalar_reference

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType, is_float, to_numpy
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker
from jaxcore_cpu.backend import CpuBackend

DTYPES = [DType.float32, DType.int32, DType.uint32, DType.bool, DType.float16, DType.float64]
N_IN = 24


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for dt in DTYPES:
        if is_float(dt):
            a = rng.normal(0, 4, N_IN).astype(to_numpy(dt))
            a[rng.integers(0, N_IN, 2)] = [np.nan, -0.0]
        elif dt == DType.bool:
            a = rng.integers(0, 2, N_IN).astype(np.int32)
        elif dt == DType.uint32:
            a = rng.integers(0, 2**32, N_IN, dtype=np.uint64).astype(np.uint32)
        else:
            a = rng.integers(-50, 50, N_IN).astype(np.int32)
        out.append(a)
    return out


@st.composite
def expressions(draw: st.DrawFn, dtype: DType, depth: int, reduce: bool) -> AluExp:
    index = AluVar.gidx if not reduce else AluVar.gidx * AluExp.i32(3) + AluVar.ridx
    choice = draw(st.integers(0, 9 if depth > 0 else 2))
    gid = DTYPES.index(dtype)
    if choice == 0:
        # Constants that make int32/uint32 arithmetic wrap, beside small ones.
        return AluExp.const(dtype, draw(st.sampled_from([0, 1, -1, 2.5, 7, -3, 2**30, 2**31 - 1, -(2**31)])))
    if choice == 1:
        return AluExp.global_index(dtype, gid, N_IN, AluExp.mod(index, AluExp.i32(N_IN)))
    if choice == 2:
        # A padded, flipped view: masked reads must read 0 and never go out of bounds.
        tracker = ShapeTracker.from_shape((N_IN,)).pad(((2, 3),)).flip((True,)).shrink(((1, N_IN + 4),))
        return AluExp.global_view(dtype, gid, tracker, [AluExp.mod(index, AluExp.i32(N_IN + 3))])
    sub = expressions(dtype, depth - 1, reduce)
    if choice <= 5:
        op = draw(st.sampled_from(["add", "sub", "mul", "idiv", "mod", "min", "max"]))
        return getattr(AluExp, op)(draw(sub), draw(sub))
    if choice == 6:
        return AluExp.where(AluExp.cmplt(draw(sub), draw(sub)), draw(sub), draw(sub))
    if choice == 7:
        other = draw(st.sampled_from(DTYPES))
        return AluExp.cast(dtype, draw(expressions(other, depth - 1, reduce)))
    if choice == 8 and is_float(dtype):
        return getattr(AluExp, draw(st.sampled_from(["sin", "exp", "sqrt", "floor", "reciprocal"])))(
            draw(sub)
        )
    if choice == 9 and dtype in (DType.int32, DType.uint32):
        op = draw(st.sampled_from(["bit_and", "bit_xor", "shl", "shr"]))
        return getattr(AluExp, op)(draw(sub), draw(sub))
    return AluExp.cmpne(draw(sub), draw(sub)) if dtype == DType.bool else draw(sub)


@st.composite
def kernels(draw: st.DrawFn) -> Kernel:
    dtype = draw(st.sampled_from(DTYPES))
    size = draw(st.integers(0, 9))
    if draw(st.booleans()):
        return Kernel(len(DTYPES), size, draw(expressions(dtype, 3, False)))
    op = draw(st.sampled_from([AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max]))
    red_size = draw(st.integers(0, 7))  # below numpy's pairwise-summation block, so sums are sequential
    red = Reduction(dtype, op, red_size)
    epilogue = red.epilogue
    if draw(st.booleans()):
        # (float16 sums accumulate in float32: the epilogue is float16, so the read is too.)
        read = AluExp.global_index(epilogue.dtype, DTYPES.index(epilogue.dtype), N_IN, AluVar.gidx)
        epilogue = AluExp.where(AluExp.cmplt(read, epilogue), read, epilogue)
        red = Reduction(red.dtype, op, red_size, epilogue)
    return Kernel(len(DTYPES), size, draw(expressions(dtype, 3, True)), red)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernels(), st.integers(0, 2**31))
def test_cpu_backend_matches_scalar_evaluate(kernel: Kernel, seed: int) -> None:
    inputs = _inputs(np.random.default_rng(seed))
    backend = CpuBackend()
    slots = [backend.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = backend.malloc(kernel.bytes)
    backend.dispatch(backend.prepare_kernel(kernel), slots, [out])
    got = np.frombuffer(backend.read(out), to_numpy(kernel.dtype))
    expected = scalar_reference(kernel, inputs)
    np.testing.assert_array_equal(got, expected, err_msg=str(kernel))
