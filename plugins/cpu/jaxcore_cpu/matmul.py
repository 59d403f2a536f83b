"""Float sums of two strided reads shaped like a matrix product, run as one batched matmul.

Σ_r a[g, r]·b[g, r] in float32/float64, where the reads' views split the output axes into rows
(only `a` varies along them), columns (only `b`) and batches (both), and both vary along every
reduced axis, is a batched matrix product. BLAS forms the same products and adds them in its
own blocked order, possibly fusing a multiply into its add (one rounding fewer), so the result
differs from the per-op definition only in how the sum is rounded: the freedom the contract
gives float Add reductions, numpy's pairwise order being another such order. Nothing else is
allowed through: float16 products must round to float16, masked reads must read 0, and integer
products must wrap exactly, so those take the generic path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Product:
    """Output axes grouped as batch/rows/cols/rest (neither operand varies), then reduced axes."""

    batch: list[int]
    rows: list[int]
    cols: list[int]
    rest: list[int]
    reduced: list[int]

    @staticmethod
    def of(a: tuple[int, ...], b: tuple[int, ...], shape: tuple[int, ...], ng: int) -> Product | None:
        """The grouping for views of extents `a` and `b` over a block of `shape`, or None."""
        reduced = list(range(ng, len(shape)))
        if any(a[x] != shape[x] or b[x] != shape[x] for x in reduced):
            return None  # an operand is constant along a reduced axis: not a product there
        batch, rows, cols, rest = ([x for x in range(ng) if (a[x] > 1, b[x] > 1) == key] for key in _GROUPS)
        if not rows and not cols and math.prod(a[x] for x in batch) > 1:
            return None  # a batch of dot products: the generic path is as fast
        return Product(batch, rows, cols, rest, reduced)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Σ a·b over the reduced axes, shaped to broadcast over the output box."""
        nb, m, n, k = (
            _extent(a, self.batch),
            _extent(a, self.rows),
            _extent(b, self.cols),
            _extent(a, self.reduced),
        )
        order = self.batch + self.rows + self.cols + self.rest
        lhs = a.transpose(order + self.reduced).reshape(nb, m, k)
        rhs = b.transpose(self.batch + self.cols + self.rows + self.rest + self.reduced).reshape(nb, n, k)
        out = np.matmul(lhs, rhs.transpose(0, 2, 1))
        shape = [a.shape[x] for x in self.batch + self.rows] + [b.shape[x] for x in self.cols]
        return out.reshape(shape + [1] * len(self.rest)).transpose(np.argsort(order))


_GROUPS = [(True, True), (True, False), (False, True), (False, False)]


def _extent(v: np.ndarray, axes: list[int]) -> int:
    return math.prod(v.shape[x] for x in axes)
