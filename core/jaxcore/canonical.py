"""What a device's routines need not implement: inputs read through views, and TriangularSolve's
other layouts. The base class runs such a routine as the device's own between copy kernels
(`BaseBackend.prepare_routine`), so every frontend does not write those copies itself.

- A routine input given a view (`Routine.views`: a transposed or strided operand) is written
  row-major into a temporary first: one copy kernel.
- A routine the core can spell as kernels (Softmax: a row max, a sum of exponentials, then each
  element) runs as those kernels on a device that does not declare its own, so a device declares
  it only to run it faster (a GPU's one-pass row kernel).
- A device implements TriangularSolve for one layout: `a` upper triangular, the right-hand sides as
  `b`'s rows. LAPACK's trsm (and JAX's `triangular_solve`) also take a lower `a`, `a` transposed
  and right-hand sides as columns, and each of those is a view of the one layout:
  `transpose_a` solves with `aᵀ`, whose triangle is the other one; with J the exchange matrix
  (axes flipped), `J·L·J` is upper and `L·x = v` is `(J·L·J)·(J·x) = J·v`, so a lower triangle
  flips `a` on both axes and each right-hand side; `columns` transposes `b` and `x`.

Each view folds into the one copy its input needs anyway; a copy no view needs is not made.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.fusion import Fused
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines, SoftmaxParams, TriangularSolveParams
from jaxcore.shape import ShapeTracker


@dataclass(frozen=True)
class Chain:
    """A routine as steps (kernels, then the device's own routine, then kernels): step j < last
    writes temporary j, the last writes the routine's output. `reads[j]` are step j's buffers (an
    input below `nargs`, else temporary `b - nargs`); `frees[j]` the temporaries dead after it."""

    steps: tuple[Kernel | Routine, ...]
    reads: tuple[tuple[int, ...], ...]
    frees: tuple[tuple[int, ...], ...]
    nargs: int


_Finish = Callable[[Fused], Fused]


COMPOSED_ROUTINES: frozenset[Routines] = frozenset({Routines.Softmax})  # routines the core spells as kernels


def canonical_chain(routine: Routine, native: bool = True) -> Chain | None:
    """The chain that runs `routine` as its device's own (as kernels where `native` is False and
    the core spells it: `COMPOSED_ROUTINES`), or None when the device runs it as it is."""
    if not native and routine.name in COMPOSED_ROUTINES:
        return composed_chain(routine)
    ins = _inputs(routine)
    inner, finish = replace(routine, views=None), None
    if routine.name == Routines.TriangularSolve:
        ins, inner, finish = _triangular_layout(inner, ins)
    if routine.views is None and finish is None:
        return None
    steps, reads, where = _copies(ins)
    reads.append(tuple(where))
    steps.append(inner)
    if finish is not None:
        out = finish(Fused.read(0, inner.type.output_dtypes[0], inner.type.output_shapes[0]))
        if out.source is None:  # the solution moved back into the caller's layout
            reads.append((len(ins) + len(steps) - 1,))
            steps.append(out.kernel().kernel)
    frees = tuple(tuple(b - len(ins) for b in r if b >= len(ins)) for r in reads)
    return Chain(tuple(steps), tuple(reads), frees, len(ins))


def _inputs(routine: Routine) -> list[Fused]:
    """Each input as read: through its view, else row-major in its own buffer."""
    t = routine.type
    views = routine.views or (None,) * len(t.input_shapes)
    return [
        Fused.read(i, d, v or s) for i, (s, d, v) in enumerate(zip(t.input_shapes, t.input_dtypes, views))
    ]


def _copies(ins: list[Fused]) -> tuple[list[Kernel | Routine], list[tuple[int, ...]], list[int]]:
    """A copy kernel for each input that is not a plain buffer (temporary j: the j-th copy), what
    each copy reads, and the buffer each input is then read from."""
    steps: list[Kernel | Routine] = []
    reads: list[tuple[int, ...]] = []
    where = []
    for i, f in enumerate(ins):
        if f.source is None:
            reads.append((i,))
            steps.append(f.kernel().kernel)
        where.append(i if f.source is not None else len(ins) + len(steps) - 1)
    return steps, reads, where


def composed_chain(routine: Routine) -> Chain:
    """Copies for the inputs read through views, then the routine's kernels, each reading the
    inputs (or their copies) and the temporaries of the kernels before it."""
    nargs = len(routine.type.input_shapes)
    steps, reads, where = _copies(_inputs(routine))
    first = nargs + len(steps)  # the buffer of the first kernel's result
    for kernel, uses in softmax_kernels(routine):
        reads.append(tuple(where[u] if u < nargs else first + u - nargs for u in uses))
        steps.append(kernel)
    last_read = {b: j for j, r in enumerate(reads) for b in r}
    frees = tuple(
        tuple(b - nargs for b in r if b >= nargs and last_read[b] == j) for j, r in enumerate(reads)
    )
    return Chain(tuple(steps), tuple(reads), frees, nargs)


def softmax_kernels(routine: Routine) -> list[tuple[Kernel, tuple[int, ...]]]:
    """Softmax over the last axis as three kernels, each with the buffers it reads (input i below
    the routine's input count, then kernel j's result): the row max (NaN-propagating), the sum
    of `exp(x - max)` with `1 / sum` in its epilogue (`log(sum)` for `log`), then each element,
    `exp(x - max) * (1 / sum)` or `(x - max) - log(sum)`: a multiply, where a division of each
    element would cost a GPU without a correctly rounded one several dozen operations. float16
    is read into float32 and rounded once, at the end."""
    params = routine.params
    assert isinstance(params, SoftmaxParams)
    (shape,), (dtype,) = routine.type.input_shapes, routine.type.input_dtypes
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    n, work = rows * cols, DType.float32 if dtype == DType.float16 else dtype
    g, r, i32 = AluVar.gidx, AluVar.ridx, AluExp.i32

    def x(index: AluExp) -> AluExp:
        read = AluExp.global_index(dtype, 0, n, index)
        return AluExp.cast(work, read) if dtype != work else read

    def per_row(gid: int, index: AluExp) -> AluExp:
        return AluExp.global_index(work, gid, rows, index)

    item = x(g * i32(cols) + r)
    row_max = Kernel(1, rows, item, Reduction(work, AluOp.Max, cols))
    acc = AluVar.acc(work)
    total = AluExp.log(acc) if params.log else AluExp.reciprocal(acc)
    exp_sum = Kernel(2, rows, AluExp.exp(item - per_row(1, g)), Reduction(work, AluOp.Add, cols, total))
    row = AluExp.idiv(g, i32(cols))
    d = x(g) - per_row(1, row)
    y = d - per_row(2, row) if params.log else AluExp.exp(d) * per_row(2, row)
    each = Kernel(3, n, AluExp.cast(dtype, y) if dtype != work else y)
    return [(row_max, (0,)), (exp_sum, (0, 1)), (each, (0, 1, 2))]


def _triangular_layout(routine: Routine, ins: list[Fused]) -> tuple[list[Fused], Routine, _Finish | None]:
    """TriangularSolve in the device layout: (its inputs as views, the routine, how its solution
    moves back), or the inputs as given when the routine is in that layout."""
    p = routine.params
    assert isinstance(p, TriangularSolveParams)
    if not (p.lower or p.transpose_a or p.columns):
        return ins, routine, None
    a, b = ins
    nd = a.ndim
    swap = (*range(nd - 2), nd - 1, nd - 2)
    flip = p.lower != p.transpose_a  # op(a) is lower triangular
    a = a.permute(swap) if p.transpose_a else a
    a = a.flip((nd - 2, nd - 1)) if flip else a
    b = b.permute(swap) if p.columns else b
    b = b.flip((nd - 1,)) if flip else b
    params = replace(p, lower=False, transpose_a=False, columns=False)
    inner = Routine.build(Routines.TriangularSolve, (a.shape, b.shape), (a.dtype, b.dtype), params)

    def finish(x: Fused) -> Fused:
        x = x.flip((nd - 1,)) if flip else x
        return x.permute(swap) if p.columns else x

    return [a, b], inner, finish


def view_bytes(view: ShapeTracker, dtype: DType) -> int:
    """The fewest bytes a buffer read through `view` must hold."""
    return Fused.read(0, dtype, view).kernel().kernel.input_bytes()[0]
