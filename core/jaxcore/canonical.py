"""Routine layouts a device need not implement: the base class runs them as the device's one layout
between copy kernels, so every frontend does not.

A device implements TriangularSolve for one layout: `a` upper triangular, the right-hand sides as
`b`'s rows. LAPACK's trsm (and JAX's `triangular_solve`) also take a lower `a`, `a` transposed and
right-hand sides as columns. Each of those is a view of the one layout:

- `transpose_a`: solve with `aᵀ`, whose triangle is the other one;
- a lower triangle: with J the exchange matrix (axes flipped), `J·L·J` is upper and
  `L·x = v` is `(J·L·J)·(J·x) = J·v`: flip `a` on both axes and each right-hand side;
- `columns`: the right-hand sides are `b`'s columns, so `b` and `x` are transposed.

`canonical_chain` says which copies a routine needs (`BaseBackend.prepare_routine` compiles and runs
them; a copy that a layout does not need is not made).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jaxcore.fusion import Fused
from jaxcore.kernel import Kernel
from jaxcore.routine import Routine, Routines, TriangularSolveParams


@dataclass(frozen=True)
class Chain:
    """A routine as steps (kernels, then the device's own routine, then kernels): step j < last
    writes temporary j, the last writes the routine's output. `reads[j]` are step j's buffers (an
    input below `nargs`, else temporary `b - nargs`); `frees[j]` the temporaries dead after it."""

    steps: tuple[Kernel | Routine, ...]
    reads: tuple[tuple[int, ...], ...]
    frees: tuple[tuple[int, ...], ...]
    nargs: int


def canonical_chain(routine: Routine) -> Chain | None:
    """The chain that runs `routine` through its device layout, or None when it is in that layout."""
    if routine.name != Routines.TriangularSolve:
        return None
    p = routine.params
    assert isinstance(p, TriangularSolveParams)
    if not (p.lower or p.transpose_a or p.columns):
        return None
    (a_shape, b_shape), dtype = routine.type.input_shapes, routine.type.input_dtypes[0]
    flip = p.lower != p.transpose_a  # op(a) is lower triangular
    last2 = tuple(range(len(a_shape) - 2)) + (len(a_shape) - 1, len(a_shape) - 2)
    nd = len(a_shape)

    a = Fused.read(0, dtype, a_shape)
    a = a.permute(last2) if p.transpose_a else a
    a = a.flip((nd - 2, nd - 1)) if flip else a
    b = Fused.read(1, dtype, b_shape)
    b = b.permute(last2) if p.columns else b
    b = b.flip((nd - 1,)) if flip else b
    rows = b.shape  # the right-hand sides as rows: (..., m, n)

    steps: list[Kernel | Routine] = []
    reads: list[tuple[int, ...]] = []
    for i, f in enumerate((a, b)):  # a copy of each input its view moves
        if f.source is None:
            steps.append(f.kernel().kernel)
            reads.append((i,))
    sources = iter(range(2, 2 + len(steps)))
    reads.append(tuple(i if f.source is not None else next(sources) for i, f in enumerate((a, b))))
    params = replace(p, lower=False, transpose_a=False, columns=False)
    steps.append(Routine.build(Routines.TriangularSolve, (a.shape, rows), (dtype, dtype), params))
    x = Fused.read(0, dtype, rows)
    x = x.flip((nd - 1,)) if flip else x
    x = x.permute(last2) if p.columns else x
    if x.source is None:  # the solution moved back into the caller's layout
        reads.append((2 + len(steps) - 1,))
        steps.append(x.kernel().kernel)
    frees = tuple(tuple(t - 2 for t in r if t >= 2) for r in reads)
    return Chain(tuple(steps), tuple(reads), frees, 2)
