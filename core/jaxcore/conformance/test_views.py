"""Reads through `GlobalView` + `ShapeTracker`: pad (masked reads are 0), flip, expand, shrink,
permute, reshapes of padded views (stacked views), matmuls built from views of one buffer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle
from jaxcore.conformance.harness import assert_close, run_kernel, skip_if_undeclared
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.matmul_shape import matmul_kernel as layout_matmul
from jaxcore.shape import ShapeTracker

DTYPES = [str(d) for d in DType]


def unravel(shape: Sequence[int], flat: AluExp) -> list[AluExp]:
    """Row-major indices of `flat` (built here so the case does not depend on the core's helper)."""
    out: list[AluExp] = []
    stride = 1
    for dim in reversed(shape):
        out.append(AluExp.mod(AluExp.idiv(flat, AluExp.i32(stride)), AluExp.i32(dim)))
        stride *= dim
    return out[::-1]


def view_read(dtype: str, gid: int, st: ShapeTracker, flat: AluExp | None = None) -> AluExp:
    return AluExp.global_view(DType(dtype), gid, st, unravel(st.shape, AluVar.gidx if flat is None else flat))


def view_kernel(dtype: str, base: Sequence[int], movement: Callable[[ShapeTracker], ShapeTracker]) -> Kernel:
    st = movement(ShapeTracker.from_shape(base))
    return Kernel(1, st.size, view_read(dtype, 0, st))


def source(shape: Sequence[int], dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    vals = np.arange(1, n + 1) % (2 if dtype == "bool" else 251)
    return oracle.array(vals, dtype).reshape(shape)


VIEW_CASES: dict[
    str, tuple[tuple[int, ...], Callable[[ShapeTracker], ShapeTracker], Callable[[np.ndarray], np.ndarray]]
] = {
    "flip": ((3,), lambda s: s.flip([True]), lambda a: a[::-1]),
    "flip2d": ((2, 3), lambda s: s.flip([True, False]), lambda a: a[::-1, :]),
    "pad": ((3, 3), lambda s: s.pad([[1, 2], [3, 4]]), lambda a: np.pad(a, [(1, 2), (3, 4)])),
    "pad_flip": (
        (3, 3),
        lambda s: s.pad([[1, 0], [0, 2]]).flip([True, True]),
        lambda a: np.pad(a, [(1, 0), (0, 2)])[::-1, ::-1],
    ),
    "expand": ((3, 1), lambda s: s.expand([3, 4]), lambda a: np.broadcast_to(a, (3, 4))),
    "pad_expand": (
        (1, 3),
        lambda s: s.pad([[0, 0], [1, 0]]).expand([5, 4]),
        lambda a: np.broadcast_to(np.pad(a, [(0, 0), (1, 0)]), (5, 4)),
    ),
    "shrink": ((5, 5), lambda s: s.shrink([[1, 4], [2, 5]]), lambda a: a[1:4, 2:5]),
    "pad_shrink": (
        (3, 3),
        lambda s: s.pad([[1, 1], [1, 1]]).shrink([[0, 2], [1, 5]]),
        lambda a: np.pad(a, 1)[0:2, 1:5],
    ),
    "permute": ((2, 3, 4), lambda s: s.permute([2, 0, 1]), lambda a: a.transpose(2, 0, 1)),
    "permute_reshape": ((3, 4), lambda s: s.permute([1, 0]).reshape([12]), lambda a: a.T.reshape(12)),
    "flip_reshape": (
        (2, 3),
        lambda s: s.flip([True, False]).reshape([3, 2]),
        lambda a: a[::-1].reshape(3, 2),
    ),
    "pad_reshape": ((4,), lambda s: s.pad([[1, 1]]).reshape([3, 2]), lambda a: np.pad(a, 1).reshape(3, 2)),
    "pad_flip_reshape": (
        (2, 2),
        lambda s: s.pad([[1, 1], [1, 1]]).flip([False, True]).reshape([16]),
        lambda a: np.pad(a, 1)[:, ::-1].reshape(16),
    ),
    "complex_reshape": (
        (240,),
        lambda s: (
            s.reshape([2, 2, 6, 1, 10])
            .permute([1, 0, 2, 3, 4])
            .pad([[1, 1], [2, 3], [0, 0], [0, 0], [0, 0]])
            .reshape([4, 7, 3, 2, 10])
        ),
        lambda a: np.pad(
            a.reshape(2, 2, 6, 1, 10).transpose(1, 0, 2, 3, 4), [(1, 1), (2, 3), (0, 0), (0, 0), (0, 0)]
        ).reshape(4, 7, 3, 2, 10),
    ),
    "expand_reshape": (
        (3, 1),
        lambda s: s.expand([3, 4]).reshape([12]),
        lambda a: np.broadcast_to(a, (3, 4)).reshape(12),
    ),
    "pad_or_shrink": ((5,), lambda s: s.pad_or_shrink([[-1, 2]]), lambda a: np.pad(a[1:], [(0, 2)])),
    "repeat_tile": ((2, 3), lambda s: s.repeat([2]), lambda a: np.tile(a, (1, 2))),
    "repeat_each": ((2, 3), lambda s: s.repeat([2], tile=False), lambda a: np.repeat(a, 2, axis=1)),
}


@pytest.mark.parametrize("case", list(VIEW_CASES))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_view(backend: Backend, dtype: str, case: str) -> None:
    """Each movement op (and stacks of them) reads what numpy's equivalent gives; masked reads give 0."""
    base, move, expect = VIEW_CASES[case]
    kernel = view_kernel(dtype, base, move)
    skip_if_undeclared(backend, kernel)
    x = source(base, dtype)
    want = np.ascontiguousarray(expect(x)).ravel()
    got = run_kernel(backend, kernel, [x.ravel()])
    assert_close(got, want, "GlobalView", dtype, backend, what=f"view {case}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_view_dtypes(backend: Backend, dtype: str) -> None:
    """Pad + flip in every dtype: padding reads the dtype's zero (false, +0.0), never garbage."""
    kernel = view_kernel(dtype, (3, 2), lambda s: s.pad([[2, 1], [0, 3]]).flip([True, False]))
    skip_if_undeclared(backend, kernel)
    x = source((3, 2), dtype)
    want = np.pad(x, [(2, 1), (0, 3)])[::-1].ravel()
    assert_close(run_kernel(backend, kernel, [x.ravel()]), want, "GlobalView", dtype, backend)


def test_flipped_view_elementwise(backend: Backend) -> None:
    """jax-js backend test 2: a * flip(b) = [6,10,12], then a + flip(b) = [7,7,7] into the same shape."""
    a = np.array([1, 2, 3], np.float32)
    b = np.array([4, 5, 6], np.float32)
    flipped = ShapeTracker.from_shape([3]).flip([True])
    ga = AluExp.global_index(DType.float32, 0, 3, AluVar.gidx)
    gb = view_read("float32", 1, flipped)
    for fn, want in ((AluExp.mul, [6, 10, 12]), (AluExp.add, [7, 7, 7])):
        got = run_kernel(backend, Kernel(2, 3, fn(ga, gb)), [a, b])
        assert_close(got, np.array(want, np.float32), "GlobalView", "float32", backend)


def test_masked_reads_never_touch_memory(backend: Backend) -> None:
    """A view padded far beyond its buffer: masked positions read 0 and must not read out of bounds."""
    kernel = view_kernel("float32", (2,), lambda s: s.pad([[1000, 1000]]))
    x = np.array([5.0, 6.0], np.float32)
    got = run_kernel(backend, kernel, [x])
    want = np.zeros(2002, np.float32)
    want[1000:1002] = x
    assert_close(got, want, "GlobalView", "float32", backend)


def test_same_buffer_two_views(backend: Backend) -> None:
    """One buffer bound once, read through two different views in one kernel: x + x^T."""
    st = ShapeTracker.from_shape([4, 4])
    plain = view_read("float32", 0, st)
    transposed = view_read("float32", 0, st.permute([1, 0]))
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    got = run_kernel(backend, Kernel(1, 16, AluExp.add(plain, transposed)), [x.ravel()])
    assert_close(got, (x + x.T).ravel(), "Add", "float32", backend)


def matmul_kernel(m: int, n: int, k: int, swap: bool = False, single: bool = False) -> Kernel:
    """C[m,n] = sum_k A[m,k] * B[k,n] with both operands as broadcast views (jax-js test 11/12)."""
    a_st = ShapeTracker.from_shape([m, k]).reshape([m, 1, k]).expand([m, n, k])
    b_st = ShapeTracker.from_shape([k, n]).permute([1, 0]).reshape([1, n, k]).expand([m, n, k])
    idx = [*unravel([m, n], AluVar.gidx), AluVar.ridx]
    a = AluExp.global_view(DType.float32, 0, a_st, idx)
    b = AluExp.global_view(DType.float32, 0 if single else 1, b_st, idx)
    item = AluExp.mul(b, a) if swap else AluExp.mul(a, b)
    return Kernel(1 if single else 2, m * n, item, Reduction(DType.float32, AluOp.Add, k))


def test_matmul_views_of_one_buffer(backend: Backend) -> None:
    """64x64 ones times itself through two views of the same buffer: every entry is 64."""
    x = np.ones((64, 64), np.float32)
    got = run_kernel(backend, matmul_kernel(64, 64, 64, single=True), [x.ravel()])
    assert_close(got, np.full(64 * 64, 64, np.float32), "ReduceAdd", "float32", backend)


@pytest.mark.parametrize("swap", [False, True], ids=["AB", "BA"])
def test_matmul_non_square(backend: Backend, swap: bool) -> None:
    """M=16, N=48, K=24 with distinct integer-valued operands, either multiply order (exact in f32)."""
    rng = np.random.default_rng(11)
    a = rng.integers(-3, 4, size=(16, 24)).astype(np.float32)
    b = rng.integers(-3, 4, size=(24, 48)).astype(np.float32)
    got = run_kernel(backend, matmul_kernel(16, 48, 24, swap=swap), [a.ravel(), b.ravel()])
    assert_close(got, (a.astype(np.float64) @ b).astype(np.float32).ravel(), "ReduceAdd", "float32", backend)


@pytest.mark.parametrize("mnk", [(128, 128, 128), (129, 131, 67)], ids=["128^3", "129x131x67"])
def test_matmul_large(backend: Backend, mnk: tuple[int, int, int]) -> None:
    """Large enough for tiled/parallel matmul paths, and a ragged one; integer data keeps it exact."""
    m, n, k = mnk
    rng = np.random.default_rng(m)
    a = rng.integers(-3, 4, size=(m, k)).astype(np.float32)
    b = rng.integers(-3, 4, size=(k, n)).astype(np.float32)
    got = run_kernel(backend, matmul_kernel(m, n, k), [a.ravel(), b.ravel()])
    assert_close(got, (a.astype(np.float64) @ b).astype(np.float32).ravel(), "ReduceAdd", "float32", backend)


def test_matmul_1x784x10_is_exact(backend: Backend) -> None:
    """The unroll-indexing regression: arange(784) @ ones(784, 10) is 306936 exactly in f32."""
    a = np.arange(784, dtype=np.float32).reshape(1, 784)
    b = np.ones((784, 10), np.float32)
    got = run_kernel(backend, matmul_kernel(1, 10, 784), [a.ravel(), b.ravel()])
    assert_close(got, np.full(10, 306936, np.float32), "ReduceAdd", "float32", backend)


def _stored(x: np.ndarray, transposed: bool) -> np.ndarray:
    """A [batch, rows, cols] operand as its buffer holds it (the last two axes swapped if transposed)."""
    return np.ascontiguousarray(np.swapaxes(x, 1, 2) if transposed else x).ravel()


@pytest.mark.parametrize(
    "m,n,k,ta,tb,batch,swap",
    [
        (37, 53, 30, False, False, 1, False),  # partial tiles in m and n, a k remainder
        (40, 36, 20, True, False, 1, True),  # A stored [k, m], B * A
        (32, 44, 24, False, True, 2, False),  # B stored [n, k], a batch
        (33, 17, 9, True, True, 3, False),  # both transposed, odd everything
        (8, 300, 130, False, False, 1, False),  # short and wide
    ],
    ids=["plain", "At", "Bt-batch", "AtBt-batch", "wide"],
)
def test_matmul_layouts(
    backend: Backend, m: int, n: int, k: int, ta: bool, tb: bool, batch: int, swap: bool
) -> None:
    """Transposed and batched operands as matmul paths see them (jaxcore.matmul_shape); integer
    data keeps every summation order exact."""
    rng = np.random.default_rng(m * n + k)
    a = rng.integers(-3, 4, size=(batch, m, k)).astype(np.float32)
    b = rng.integers(-3, 4, size=(batch, k, n)).astype(np.float32)
    kernel = layout_matmul(m, n, k, transpose_a=ta, transpose_b=tb, batch=batch, swap=swap)
    got = run_kernel(backend, kernel, [_stored(a, ta), _stored(b, tb)])
    want = (a.astype(np.float64) @ b).astype(np.float32).ravel()
    assert_close(got, want, "ReduceAdd", "float32", backend)


def test_matmul_epilogue_and_nan(backend: Backend) -> None:
    """relu(A @ B + bias[j]) with the bias a third input, and a NaN in A that only its row sees."""
    m = n = k = 48
    rng = np.random.default_rng(48)
    a = rng.integers(-3, 4, size=(1, m, k)).astype(np.float32)
    b = rng.integers(-3, 4, size=(1, k, n)).astype(np.float32)
    bias = rng.integers(-20, 21, size=n).astype(np.float32)
    a[0, 5, 7] = np.nan
    j = AluExp.mod(AluVar.gidx, AluExp.i32(n))
    epi = AluExp.max(AluVar.acc(DType.float32) + AluExp.global_index(DType.float32, 2, n, j), AluExp.f32(0.0))
    got = run_kernel(backend, layout_matmul(m, n, k, epilogue=epi, nargs=3), [a.ravel(), b.ravel(), bias])
    want = np.maximum((a[0].astype(np.float64) @ b[0]) + bias, 0).astype(np.float32)  # NaN stays NaN
    assert_close(got, want.ravel(), "ReduceAdd", "float32", backend)


Operand = Any  # an AluExp while building the kernel, a float64 numpy array for the expected values


def _positive(c: Operand, a: Operand, b: Operand) -> Operand:
    """where(c > 0, a, b), as a kernel expression or on numpy arrays."""
    if isinstance(c, AluExp):
        return AluExp.where(AluExp.cmplt(AluExp.const(c.dtype, 0), c), a, b)
    return np.where(c > 0, a, b)


def _maximum(a: Operand, b: Operand) -> Operand:
    return AluExp.max(a, b) if isinstance(a, AluExp) else np.maximum(a, b)


# Epilogues of `acc` (the sum) and `c` (an element of another input), written once for the kernel
# and for numpy: the other input on either side of + - *, beside and inside a product with a
# constant (the shapes a training step fuses: W - lr * grad), in a select, read twice. Constants
# are dyadic, so on integer-valued data every form is exact in every dtype and summation order.
EPILOGUES: dict[str, Callable[[Operand, Operand], Operand]] = {
    "acc+C": lambda acc, c: acc + c,
    "C+acc": lambda acc, c: c + acc,
    "C-acc": lambda acc, c: c - acc,
    "acc-C": lambda acc, c: acc - c,
    "C-acc*k": lambda acc, c: c - acc * 0.25,
    "acc*k-C": lambda acc, c: acc * 0.25 - c,
    "acc*k+C": lambda acc, c: acc * -2.0 + c,
    "C+k*acc": lambda acc, c: c + 0.5 * acc,
    "C*acc": lambda acc, c: c * acc,
    "acc*C*k": lambda acc, c: acc * c * 0.5,
    "(acc+C)*k": lambda acc, c: (acc + c) * 0.5,
    "acc*k-C*k": lambda acc, c: acc * 0.5 - c * 3.0,
    "where(C>0,acc,-acc)": lambda acc, c: _positive(c, acc, -acc),
    "max(acc*k,C)": lambda acc, c: _maximum(acc * 0.25, c),
}


def _epilogue_case(
    m: int,
    n: int,
    k: int,
    form: Callable[[Operand, Operand], Operand],
    *,
    c_first: bool = False,
    c_index: str = "ij",
    dtype: DType = DType.float32,
    c_dtype: DType | None = None,
    cast_to: DType | None = None,
    out: DType | None = None,
    seed: int = 0,
) -> tuple[Kernel, list[np.ndarray], np.ndarray]:
    """(kernel, inputs, expected output) of out[i, j] = form(sum_k A[i, k] * B[k, j], C[...]).

    C is input 2 (after A and B) or, with `c_first`, input 0 (A and B move to 1 and 2); it is read
    at [i, j] ("ij"), transposed ("ji", stored [n, m]) or as a bias over columns ("j"). A `c_dtype`
    other than the sum's is cast to it; `out` casts the result."""
    c_dtype = c_dtype or dtype
    acc_dtype = cast_to or dtype
    g = AluVar.gidx
    i, j = AluExp.idiv(g, AluExp.i32(n)), AluExp.mod(g, AluExp.i32(n))
    index, c_shape = {"ij": (g, (m, n)), "ji": (j * AluExp.i32(m) + i, (n, m)), "j": (j, (n,))}[c_index]
    c_read = AluExp.global_index(c_dtype, 2, int(np.prod(c_shape)), index)
    c_exp = c_read if c_dtype == acc_dtype else AluExp.cast(acc_dtype, c_read)
    epi = form(AluVar.acc(acc_dtype), c_exp)
    if out is not None:
        epi = AluExp.cast(out, epi)
    kernel = layout_matmul(m, n, k, epilogue=epi, nargs=3, dtype=dtype, cast_to=cast_to)
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, size=(m, k))
    b = rng.integers(-3, 4, size=(k, n))
    c = rng.integers(-3, 4, size=c_shape)
    c_ij = {"ij": c, "ji": c.T, "j": np.broadcast_to(c, (m, n))}[c_index]
    want = form((a @ b).astype(np.float64), c_ij.astype(np.float64))
    inputs = [oracle.array(a.ravel(), str(dtype)), oracle.array(b.ravel(), str(dtype))]
    inputs.append(oracle.array(c.ravel(), str(c_dtype)))
    if c_first:
        red = kernel.reduction
        assert red is not None
        moved = Reduction(red.dtype, red.op, red.size, red.epilogue.reindex_gids([1, 2, 0]))
        kernel = Kernel(3, kernel.size, kernel.exp.reindex_gids([1, 2, 0]), moved)
        inputs = [inputs[2], inputs[0], inputs[1]]
    return kernel, inputs, oracle.array(want.ravel(), str(kernel.dtype))


@pytest.mark.parametrize("form", list(EPILOGUES))
@pytest.mark.parametrize(
    "m,n,k,c_first",
    [(64, 64, 64, False), (37, 53, 30, True)],
    ids=["64^3", "37x53x30-C-first"],
)
def test_matmul_epilogue_reads_another_input(
    backend: Backend, m: int, n: int, k: int, c_first: bool, form: str
) -> None:
    """A matmul whose epilogue reads a third input, in every position of + - * and a select, with
    and without a constant (C - acc * k failed at dispatch on webgpu: the tiled pass never bound
    the zero uniform of the epilogue's opaque operands). The ragged shape takes partial tiles and
    scalar stores and binds C first; integer data keeps it exact."""
    kernel, inputs, want = _epilogue_case(m, n, k, EPILOGUES[form], c_first=c_first, seed=m + k)
    got = run_kernel(backend, kernel, inputs)
    assert_close(got, want, "ReduceAdd", "float32", backend, tol=(0.0, 0.0), signed_zero=False, what=form)


@pytest.mark.parametrize(
    "form,c_index,mnk",
    [
        ("C-acc*k", "ji", (48, 48, 40)),
        ("acc*k-C", "j", (40, 56, 24)),
        ("where(C>0,acc,-acc)", "ji", (33, 33, 17)),
        ("C-acc*k", "ij", (256, 256, 784)),
        ("acc*k-C", "ij", (256, 256, 784)),
    ],
    ids=["transposed-C", "bias-C", "transposed-C-ragged", "256x256x784-C-acc*k", "256x256x784-acc*k-C"],
)
def test_matmul_epilogue_reads_through_an_index(
    backend: Backend, form: str, c_index: str, mnk: tuple[int, int, int]
) -> None:
    """The other input read transposed or as a bias over columns, and the 256x256 (k = 784) shape
    that first showed the unbound uniform; exact on integer data."""
    m, n, k = mnk
    kernel, inputs, want = _epilogue_case(m, n, k, EPILOGUES[form], c_index=c_index, seed=k)
    got = run_kernel(backend, kernel, inputs)
    assert_close(got, want, "ReduceAdd", "float32", backend, tol=(0.0, 0.0), signed_zero=False, what=form)


@pytest.mark.parametrize(
    "name,form,dtype,c_dtype,cast_to,out",
    [
        ("f16", "C-acc*k", DType.float16, None, None, None),
        ("f16", "acc*k-C", DType.float16, None, None, None),
        ("f16", "where(C>0,acc,-acc)", DType.float16, None, None, None),
        ("f16-widened", "C-acc*k", DType.float16, None, DType.float32, DType.float16),
        ("f32-int32-C", "acc*k-C", DType.float32, DType.int32, None, None),
        ("int32-out", "acc*k+C", DType.float32, None, None, DType.int32),
        ("int32-out-int32-C", "C-acc", DType.float32, DType.int32, None, DType.int32),
    ],
)
def test_matmul_epilogue_reads_other_dtypes(
    backend: Backend,
    name: str,
    form: str,
    dtype: DType,
    c_dtype: DType | None,
    cast_to: DType | None,
    out: DType | None,
) -> None:
    """float16 operands, sums and stores, an int32 input cast into a float32 epilogue and int32
    results, where the device declares them (k = 40 keeps every float16 partial sum an exact
    integer)."""
    kernel, inputs, want = _epilogue_case(
        48, 40, 40, EPILOGUES[form], dtype=dtype, c_dtype=c_dtype, cast_to=cast_to, out=out, seed=7
    )
    skip_if_undeclared(backend, kernel)
    got = run_kernel(backend, kernel, inputs)
    assert_close(
        got,
        want,
        "ReduceAdd",
        kernel.dtype,
        backend,
        tol=(0.0, 0.0),
        signed_zero=False,
        what=f"{name} {form}",
    )


def test_row_dependent_reduction_loads(backend: Backend) -> None:
    """Reduce the middle axis of [32,5,128] with v = 1000m + 10k + n: 5(1000m + n) + 100 (jax-js test 13)."""
    m, k, n = np.meshgrid(np.arange(32), np.arange(5), np.arange(128), indexing="ij")
    x = (1000 * m + 10 * k + n).astype(np.float32)
    st = ShapeTracker.from_shape([32, 5, 128]).permute([0, 2, 1])
    idx = [*unravel([32, 128], AluVar.gidx), AluVar.ridx]
    kernel = Kernel(
        1, 32 * 128, AluExp.global_view(DType.float32, 0, st, idx), Reduction(DType.float32, AluOp.Add, 5)
    )
    got = run_kernel(backend, kernel, [x.ravel()])
    want = (5 * (1000 * np.arange(32)[:, None] + np.arange(128)[None, :]) + 100).astype(np.float32).ravel()
    assert_close(got, want, "ReduceAdd", "float32", backend)


def test_reduction_over_padded_view(backend: Backend) -> None:
    """Sum rows of a padded, flipped view: masked items add 0 (and a Max over them sees 0, not garbage)."""
    x = np.array([[1, -2, 3], [-4, -5, -6]], np.float32)
    st = ShapeTracker.from_shape([2, 3]).pad([[1, 0], [2, 1]]).flip([False, True])
    idx = [*unravel([3], AluVar.gidx), AluVar.ridx]
    padded = np.pad(x, [(1, 0), (2, 1)])[:, ::-1]
    for op, fold in ((AluOp.Add, np.sum), (AluOp.Max, np.max)):
        kernel = Kernel(1, 3, AluExp.global_view(DType.float32, 0, st, idx), Reduction(DType.float32, op, 6))
        got = run_kernel(backend, kernel, [x.ravel()])
        assert_close(got, fold(padded, axis=1).astype(np.float32), f"Reduce{op}", "float32", backend)


def random_movements(seed: int) -> tuple[tuple[int, ...], list[str], Callable, Callable]:
    """A seeded random chain of 3-6 movement ops, as (base shape, description, on_tracker, on_numpy)."""
    rng = np.random.default_rng(seed)
    base = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    steps: list[tuple[str, list[Any]]] = []
    arg: list[Any]
    shape = list(base)
    for _ in range(int(rng.integers(3, 7))):
        kind = str(rng.choice(["pad", "shrink", "flip", "permute", "reshape", "expand"]))
        n = len(shape)
        if kind == "pad" and int(np.prod(shape)) < 200:
            arg = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(n)]
            shape = [d + b + e for d, (b, e) in zip(shape, arg)]
        elif kind == "shrink":
            arg = []
            for d in shape:
                b = int(rng.integers(0, d))
                arg.append((b, int(rng.integers(b + 1, d + 1))))
            shape = [e - b for b, e in arg]
        elif kind == "flip":
            arg = [bool(f) for f in rng.integers(0, 2, size=n)]
        elif kind == "permute":
            arg = [int(a) for a in rng.permutation(n)]
            shape = [shape[a] for a in arg]
        elif kind == "reshape":
            size = int(np.prod(shape))
            divisors = [d for d in range(1, size + 1) if size % d == 0]
            first = int(rng.choice(divisors))
            rest = size // first
            arg = [first, rest] if rng.integers(0, 2) else [rest, first, 1]
            shape = list(arg)
        elif kind == "expand" and 1 in shape:
            arg = [d if d != 1 else int(rng.integers(1, 4)) for d in shape]
            shape = list(arg)
        else:
            continue
        steps.append((kind, arg))

    def on_tracker(st: ShapeTracker) -> ShapeTracker:
        for kind, arg in steps:
            st = getattr(st, kind)(arg)
        return st

    def on_numpy(a: np.ndarray) -> np.ndarray:
        for kind, arg in steps:
            if kind == "pad":
                a = np.pad(a, arg)
            elif kind == "shrink":
                a = a[tuple(slice(b, e) for b, e in arg)]
            elif kind == "flip":
                a = a[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
            elif kind == "permute":
                a = a.transpose(arg)
            elif kind == "reshape":
                a = np.ascontiguousarray(a).reshape(arg)
            else:
                a = np.broadcast_to(a, arg)
        return a

    return base, [f"{k}{a}" for k, a in steps], on_tracker, on_numpy


@pytest.mark.parametrize("seed", range(24))
def test_random_movement_chains(backend: Backend, seed: int) -> None:
    """Seeded random chains of pad/shrink/flip/permute/reshape/expand read what numpy's chain gives
    (stacked views, masks through reshapes, negative and zero strides together)."""
    base, steps, on_tracker, on_numpy = random_movements(seed)
    declared = [
        d
        for d in ("int32", "float32", "uint32", "float64", "float16")
        if DType(d) in backend.capabilities.dtypes
    ]
    dtype = declared[0] if declared else "int32"  # no such dtype declared: the case checks it raises
    kernel = view_kernel(dtype, base, on_tracker)
    skip_if_undeclared(backend, kernel)
    x = source(base, dtype)
    want = np.ascontiguousarray(on_numpy(x)).ravel()
    assert_close(
        run_kernel(backend, kernel, [x.ravel()]), want, "GlobalView", dtype, backend, what=f"{base} {steps}"
    )
