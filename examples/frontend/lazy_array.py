"""A small lazy array frontend on jaxcore's public API: numpy-like arrays whose work is fused into
as few kernels as the backend layer can run.

- An `Array` holds a value of `jaxcore.fusion` (nothing is computed when it is made): a `Fused`
  (a read of a buffer, or an elementwise expression over reads) or a `FusedReduce` (a reduction
  whose epilogue is still open).
- Elementwise ops combine expressions: a chain of them is one kernel. An elementwise op on a
  pending reduction extends its epilogue instead (a bias and a ReLU after a matmul, an SGD update
  after a gradient's sum: one kernel each).
- Views (reshape, transpose, broadcast, pad, slice, flip) only change how buffers are read.
- A matmul is a reduction kernel over reads, which the devices recognise and run as a GEMM.
- Routines (Cholesky, triangular solve, sort) take whole contiguous buffers: their inputs are
  handed a view of one buffer as that buffer and its view (the backend makes the copy), and a
  lower or transposed triangular solve with right-hand sides as columns is the routine's own
  parameters.
- Work is dispatched when a value must exist (a matmul's operand, a routine's input, a reduction
  of a reduction, a view of a reduction, `numpy()`), and buffers are freed when the last array or
  pending value that reads them dies (a finalizer calls `dec_ref`).
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import jaxcore
from jaxcore import (
    AluExp,
    AluOp,
    Backend,
    DType,
    Executable,
    Fused,
    FusedReduce,
    Routine,
    ShapeTracker,
    TriangularSolveParams,
)

F32, I32, BOOL = DType.float32, DType.int32, DType.bool
MAX_DEPTH = 64  # elementwise ops fused into one expression before it is written out
STATS = {"kernels": 0, "routines": 0}  # dispatches so far, for the example's report
TRACE: list[Any] = []  # while `lazy_jit.py` records a step: [its recorder] (Buffer and _dispatch tell it)

Scalar = float | int | bool


class Buffer:
    """One device buffer; `dec_ref` when the last value reading it is gone."""

    __slots__ = ("slot", "nbytes", "__weakref__")

    def __init__(self, backend: Backend, nbytes: int, data: bytes | None = None) -> None:
        self.slot = backend.malloc(nbytes, data)
        self.nbytes = nbytes
        weakref.finalize(self, backend.dec_ref, self.slot).atexit = False  # the device closes at exit
        if TRACE:
            TRACE[0].made_buffer(self, backend, data)


def _dispatch(
    backend: Backend, prepared: Executable, inputs: Sequence[Buffer], outputs: Sequence[Buffer]
) -> None:
    """Every dispatch of the frontend goes through here (and into a jit trace, when one records)."""
    backend.dispatch(prepared, _slots(inputs), _slots(outputs))
    STATS["kernels" if isinstance(prepared.source, jaxcore.Kernel) else "routines"] += 1
    if TRACE:
        TRACE[0].dispatched(backend, prepared, inputs, outputs)


def _slots(inputs: Sequence[Any]) -> list[int]:
    return [b.slot for b in inputs]


def _const(dtype: DType, value: Scalar) -> AluExp:
    """A constant node, built once: a node costs microseconds, and steps repeat their scalars."""
    return _const_node(dtype, repr(value), value)  # keyed by repr too: -0.0 == 0.0, 1 == True


@functools.lru_cache(maxsize=256)
def _const_node(dtype: DType, text: str, value: Scalar) -> AluExp:
    return AluExp.const(dtype, value)


class Array:
    """A lazy n-d array on one backend."""

    __slots__ = ("backend", "value", "depth")
    __array_priority__ = 100  # numpy scalars on the left defer to our operators

    def __init__(self, backend: Backend, value: Fused | FusedReduce, depth: int = 0) -> None:
        self.backend, self.value, self.depth = backend, value, depth

    # ---- facts ------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> DType:
        return self.value.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        kind = "pending reduction" if isinstance(self.value, FusedReduce) else "lazy"
        return f"Array({list(self.shape)}, {self.dtype}, {kind}, {self.backend.name})"

    # ---- making values exist ----------------------------------------------------------------------
    def realize(self) -> Array:
        """Write this value into a buffer of its own (one kernel), unless it already is one."""
        v = self.value
        if isinstance(v, Fused) and _whole(v) is not None:
            return self
        kernel, inputs = v.kernel()
        out = Buffer(self.backend, kernel.bytes)
        _dispatch(self.backend, self.backend.prepare_kernel(kernel), inputs, [out])
        self.value, self.depth = Fused.read(out, kernel.dtype, self.shape), 0
        return self

    def buffer(self) -> Buffer:
        """The contiguous buffer holding exactly this array (what a routine is handed)."""
        self.realize()
        buf = _whole(self.value)
        assert buf is not None
        return buf

    def numpy(self) -> np.ndarray:
        buf = self.buffer()
        data = self.backend.read(buf.slot, 0, buf.nbytes)
        out = np.frombuffer(data, jaxcore.to_numpy(self.dtype)).reshape(self.shape)
        return out.astype(bool) if self.dtype == BOOL else out

    def block_until_ready(self) -> Array:
        """Wait until this array is computed (and every dispatch before it)."""
        return block_until_ready(self)[0]

    def _fused(self) -> Fused:
        if isinstance(self.value, FusedReduce):
            self.realize()
        assert isinstance(self.value, Fused)
        return self.value

    # ---- elementwise --------------------------------------------------------------------------------
    def __add__(self, other: Array | Scalar) -> Array:
        return _apply(AluExp.add, self, other)

    def __radd__(self, other: Scalar) -> Array:
        return _apply(AluExp.add, other, self)

    def __sub__(self, other: Array | Scalar) -> Array:
        return _apply(AluExp.sub, self, other)

    def __rsub__(self, other: Scalar) -> Array:
        return _apply(AluExp.sub, other, self)

    def __mul__(self, other: Array | Scalar) -> Array:
        return _apply(AluExp.mul, self, other)

    def __rmul__(self, other: Scalar) -> Array:
        return _apply(AluExp.mul, other, self)

    def __truediv__(self, other: Array | Scalar) -> Array:
        return _apply(AluExp.div, self, other)  # correctly rounded, as numpy's

    def __rtruediv__(self, other: Scalar) -> Array:
        return _apply(AluExp.div, other, self)

    def __neg__(self) -> Array:
        return _apply(lambda a: -a, self)

    def __lt__(self, other: Array | Scalar) -> Array:
        return _apply(AluExp.cmplt, self, other)

    def __gt__(self, other: Array | Scalar) -> Array:
        return _apply(lambda a, b: AluExp.cmplt(b, a), self, other)

    def equal(self, other: Array | Scalar) -> Array:
        return _apply(lambda a, b: AluExp.cmpne(a, b).not_(), self, other)

    def astype(self, dtype: DType) -> Array:
        return _apply(lambda a: AluExp.cast(dtype, a), self, dtype=self.dtype)

    # ---- reductions ---------------------------------------------------------------------------------
    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:
        return self._reduce(AluOp.Add, axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:
        return self._reduce(AluOp.Max, axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:
        total = self.sum(axis, keepdims)
        return total * (total.size / self.size)

    def _reduce(self, op: AluOp, axis: int | Sequence[int] | None, keepdims: bool) -> Array:
        axes = sorted({a % self.ndim for a in _axes(axis, self.ndim)})
        f = self._fused()
        if len(axes) != 1:  # the kept axes first, the reduced ones merged into one last axis
            kept = [d for d in range(self.ndim) if d not in axes]
            merged = math.prod(self.shape[d] for d in axes)
            f = f.permute(tuple(kept + axes)).reshape(tuple(self.shape[d] for d in kept) + (merged,))
        out = Array(self.backend, f.reduce(op, axes[0] if len(axes) == 1 else -1))
        if keepdims:
            out = out.reshape(tuple(1 if d in axes else n for d, n in enumerate(self.shape)))
        return out

    # ---- views: no copies ---------------------------------------------------------------------------
    # (tuples throughout: a movement a value has had before, with equal tuples, is one lookup)
    def _view(self, fn: Callable[[Fused], Fused]) -> Array:
        return Array(self.backend, fn(self._fused()), self.depth)

    def reshape(self, shape: Sequence[int]) -> Array:
        new = tuple(shape)
        if -1 in new:
            i = new.index(-1)
            new = new[:i] + (self.size // -math.prod(new),) + new[i + 1 :]
        return self._view(lambda f: f.reshape(new))

    def transpose(self, axes: Sequence[int] | None = None) -> Array:
        order = tuple(axes) if axes is not None else tuple(range(self.ndim))[::-1]
        return self._view(lambda f: f.permute(order))

    @property
    def T(self) -> Array:  # noqa: N802 - numpy's name
        return self.transpose()

    def broadcast_to(self, shape: Sequence[int]) -> Array:
        shape = tuple(shape)
        ones = (1,) * (len(shape) - self.ndim) + self.shape
        return self._view(lambda f: f.reshape(ones).expand(shape))

    def pad(self, pads: Sequence[tuple[int, int]]) -> Array:
        return self._view(lambda f: f.pad(pads))

    def flip(self, axes: Sequence[int]) -> Array:
        return self._view(lambda f: f.flip(axes))

    def __getitem__(self, index: Any) -> Array:
        """Basic indexing: ints and slices (step 1, or -1 over the whole axis)."""
        index = index if isinstance(index, tuple) else (index,)
        box, drop, flips = [], [], []
        for d, n in enumerate(self.shape):
            i = index[d] if d < len(index) else slice(None)
            if isinstance(i, int):
                box.append((i % n, i % n + 1))
                drop.append(d)
                continue
            lo, hi, step = i.indices(n)
            if step == -1 and i.start is None and i.stop is None:
                lo, hi = 0, n
                flips.append(d)
            elif step != 1:
                raise NotImplementedError("slices take step 1, or -1 over a whole axis")
            box.append((lo, max(lo, hi)))
        out = self._view(lambda f: f.shrink(tuple(box)).flip(tuple(flips)))
        return out.reshape(tuple(n for d, n in enumerate(out.shape) if d not in drop)) if drop else out

    # ---- matmul -------------------------------------------------------------------------------------
    def __matmul__(self, other: Array) -> Array:
        """A reduction over reads (views, no copies): the devices run it as a GEMM."""
        a, b = _gemm_operand(self), _gemm_operand(other)
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise ValueError(f"matmul of {list(a.shape)} and {list(b.shape)}")
        left = a.reshape((m, 1, k)).expand((m, n, k))
        right = b.permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
        return Array(self.backend, Fused.map(AluExp.mul, left, right).reduce(AluOp.Add, 2))


# ---- construction ---------------------------------------------------------------------------------------


def block_until_ready(*arrays: Array) -> tuple[Array, ...]:
    """Compute every array, then wait once per device (one barrier, not one per array)."""
    for a in arrays:
        a.realize()
    for backend in {id(a.backend): a.backend for a in arrays}.values():
        backend.synchronize()
    return arrays


def array(x: Any, device: str | None = None, dtype: DType | None = None) -> Array:
    backend = jaxcore.get_backend(device)
    host = np.asarray(x)
    dt = dtype or (BOOL if host.dtype == np.bool_ else jaxcore.from_numpy(host.dtype))
    data = np.ascontiguousarray(host, jaxcore.to_numpy(dt))
    buf = Buffer(backend, data.nbytes, data.tobytes())
    return Array(backend, Fused.read(buf, dt, data.shape))


def full(shape: Sequence[int], value: Scalar, dtype: DType = F32, device: str | None = None) -> Array:
    return Array(jaxcore.get_backend(device), Fused(tuple(shape), _const(dtype, value)))


def iota(shape: Sequence[int], axis: int, dtype: DType = I32, device: str | None = None) -> Array:
    return Array(jaxcore.get_backend(device), Fused.iota(shape, axis, dtype))


# ---- elementwise machinery ------------------------------------------------------------------------------


def exp(x: Array) -> Array:
    return _apply(AluExp.exp, x)


def log(x: Array) -> Array:
    return _apply(AluExp.log, x)


def sqrt(x: Array) -> Array:
    return _apply(AluExp.sqrt, x)


def maximum(x: Array | Scalar, y: Array | Scalar) -> Array:
    return _apply(AluExp.max, x, y)


def where(cond: Array, x: Array | Scalar, y: Array | Scalar) -> Array:
    return _apply(AluExp.where, cond, x, y, keep_first=True)


def _apply(
    fn: Callable[..., AluExp], *args: Array | Scalar, dtype: DType | None = None, keep_first: bool = False
) -> Array:
    """`fn` over the operands, broadcast numpy-style and promoted to one dtype (`keep_first`: the
    first operand, a `where` condition, keeps its own). A pending reduction of the result's shape
    takes `fn` into its epilogue; anything else becomes one fused expression."""
    arrays = [a for a in args if isinstance(a, Array)]
    backend = arrays[0].backend
    if any(a.backend is not backend for a in arrays):
        raise ValueError("operands live on different devices")
    shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    typed = [a.dtype for i, a in enumerate(args) if isinstance(a, Array) and not (keep_first and i == 0)]
    want = dtype or (functools.reduce(jaxcore.promote_types, typed) if typed else F32)
    red = next(
        (i for i, a in enumerate(args) if _open_reduction(a, shape) and not (keep_first and i == 0)), None
    )
    operands = [
        _operand(a, shape, None if keep_first and i == 0 else want) for i, a in enumerate(args) if i != red
    ]
    depth = 1 + max(a.depth for a in arrays)
    if red is None:
        out = Array(backend, Fused.map(fn, *operands), depth)
    else:
        pending = args[red]
        assert isinstance(pending, Array) and isinstance(pending.value, FusedReduce)

        def finish(acc: AluExp, *rest: AluExp) -> AluExp:
            return fn(*rest[:red], AluExp.cast(want, acc), *rest[red:])

        out = Array(backend, pending.value.map(finish, *operands), depth)
    if _input_count(out.value) > backend.max_args:  # too many buffers for one kernel: write each out
        for a in arrays:
            a.realize()
        return _apply(fn, *args, dtype=dtype, keep_first=keep_first)
    return out.realize() if depth > MAX_DEPTH else out


def _input_count(v: Fused | FusedReduce) -> int:
    return len(v.inputs) if isinstance(v, Fused) else len(set(v.body.inputs) | set(v.epilogue.inputs))


def _open_reduction(a: Array | Scalar, shape: tuple[int, ...]) -> bool:
    return isinstance(a, Array) and isinstance(a.value, FusedReduce) and a.shape == shape


def _operand(a: Array | Scalar, shape: tuple[int, ...], dtype: DType | None) -> Fused:
    if not isinstance(a, Array):
        return Fused(shape, _const(dtype or F32, a))
    f = a._fused()
    if f.shape != shape:
        f = f.reshape((1,) * (len(shape) - f.ndim) + f.shape).expand(shape)
    return f if dtype is None or f.dtype == dtype else f.astype(dtype)


def _axes(axis: int | Sequence[int] | None, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    return [axis] if isinstance(axis, int) else list(axis)


def _whole(v: Fused) -> Buffer | None:
    """The buffer `v` is, when it reads all of one buffer row-major."""
    buf = v.source
    nbytes = v.size * jaxcore.byte_width(v.dtype)
    return buf if isinstance(buf, Buffer) and buf.nbytes == nbytes else None


def _gemm_operand(x: Array) -> Fused:
    """A matmul operand as a read through a view, written out first when it is more than that."""
    f = x._fused()
    if f.view is None or f.ndim != 2:
        if f.ndim != 2:
            raise ValueError(f"matmul takes 2-d arrays, got {list(f.shape)}")
        f = x.realize()._fused()
    return f


# ---- routines -------------------------------------------------------------------------------------------


def _routine_operand(x: Array) -> tuple[Buffer, ShapeTracker | None]:
    """A routine operand: a view of one buffer goes in as that buffer and its view (the backend
    makes the one copy its device needs); anything else is computed into a buffer first."""
    f = x.value
    if isinstance(f, Fused) and f.view is not None and f.source is None:
        return f.inputs[0], f.view  # type: ignore[return-value]
    return x.buffer(), None


def _routine(name: str, inputs: Sequence[Array], params: Any = None) -> list[Array]:
    backend = inputs[0].backend
    bufs, views = zip(*(_routine_operand(x) for x in inputs))
    routine = Routine.build(name, [x.shape for x in inputs], [x.dtype for x in inputs], params, views)
    t = routine.type
    outs = [
        Buffer(backend, math.prod(s) * jaxcore.byte_width(d))
        for s, d in zip(t.output_shapes, t.output_dtypes)
    ]
    _dispatch(backend, backend.prepare_routine(routine), bufs, outs)
    return [Array(backend, Fused.read(o, d, s)) for o, s, d in zip(outs, t.output_shapes, t.output_dtypes)]


def cholesky(a: Array) -> Array:
    """Lower-triangular L with L @ L.T = a."""
    return _routine("Cholesky", [a])[0]


def solve_triangular(a: Array, b: Array, *, lower: bool = False, trans: bool = False) -> Array:
    """x with op(a) @ x = b, op(a) = a.T when `trans`; b is (n,) or (n, k) (columns are
    right-hand sides), as scipy.linalg.solve_triangular."""
    n = a.shape[0]
    cols = b.reshape((n, 1)) if b.ndim == 1 else b
    params = TriangularSolveParams(lower=lower, transpose_a=trans, columns=True)
    (x,) = _routine("TriangularSolve", [a, cols], params)
    return x.reshape((n,)) if b.ndim == 1 else x


def sort(x: Array) -> Array:
    """Ascending along the last axis (NaNs last)."""
    return _routine("Sort", [x])[0]
