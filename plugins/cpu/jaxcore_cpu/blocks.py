"""Blocks of lanes aligned to the place values of the index forms, and each form's view over them.

A `Box` is a run of one variable's lanes that is a row-major box over its digits; a `Block` is a
box of gidx and (in reductions) a box of ridx. Over a block every quasi-affine form is
`base + Σ coef·digit`, so a read becomes an N-D strided view of its buffer and an index
subexpression a sum of broadcast aranges. Blocks of one signature and shape differ only in where
their boxes start, so the per-axis coefficients are worked out once per `BlockKind`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from jaxcore_cpu.affine import QuasiAffine, on_chain


@dataclass(frozen=True)
class Box:
    """Lanes `start + Σ i_a·periods[a]` for `i_a < shape[a]`: a row-major box over digits.

    `start` is a multiple of `periods[0]`, and the box stays inside one multiple of the next
    place value up, so every digit above the box is constant over it.
    """

    var: str
    start: int
    shape: tuple[int, ...]
    periods: tuple[int, ...]
    levels: tuple[int, ...]  # the chain index of each axis

    @property
    def lanes(self) -> int:
        return self.shape[0] * self.periods[0]

    @property
    def stop(self) -> int:
        return self.start + self.lanes


def boxes(var: str, size: int, chain: tuple[int, ...], budget: int) -> Iterator[Box]:
    """Cover `[0, size)` with boxes of at most max(budget, 1) lanes, greedily at the highest level."""
    pos = 0
    while pos < size:
        level = max(
            j for j, p in enumerate(chain) if p <= max(budget, 1) and pos % p == 0 and pos + p <= size
        )
        p = chain[level]
        end = size if level + 1 == len(chain) else min(size, (pos // chain[level + 1] + 1) * chain[level + 1])
        count = min(max(budget, 1) // p, (end - pos) // p)
        levels = tuple(range(level, -1, -1))
        shape = (count, *(chain[j + 1] // chain[j] for j in levels[1:]))
        yield Box(var, pos, shape, tuple(chain[j] for j in levels), levels)
        pos += count * p


StartTerm = tuple[int, int, int, int]  # (coefficient, box index, div, mod) of one base term


@dataclass(frozen=True)
class Layout:
    """A form over every block of one signature: `base(starts) + Σ coefs[a]·i_a`.

    Blocks of one signature differ only in where their boxes start, so the per-axis
    coefficients are worked out once and each block only recomputes its base.
    """

    const: int
    start_terms: tuple[StartTerm, ...]
    coefs: tuple[int, ...]

    def base(self, starts: tuple[int, ...]) -> int:
        b = self.const
        for c, i, d, m in self.start_terms:
            q = starts[i] // d
            b += c * (q % m if m else q)
        return b


Signature = tuple[tuple[str, tuple[int, ...]], ...]  # (var, levels) of each box


def _layout(form: QuasiAffine, signature: Signature, chains: dict[str, tuple[int, ...]]) -> Layout | None:
    """Digits below a term's divisor drop out, digits at or above its modulus wrap away: the
    term is affine in the digits in between, and the box's start gives the rest (see Box)."""
    ndim = sum(len(levels) for _, levels in signature)
    coefs, start_terms = [0] * ndim, []
    for t, c in form.terms:
        chain = chains[t.var]
        if not on_chain(t, chain):
            return None
        low = chain.index(t.div)
        top = chain.index(t.div * t.mod) if t.mod else len(chain)
        offset = 0
        for i, (var, levels) in enumerate(signature):
            if var == t.var:
                start_terms.append((c, i, t.div, t.mod))
                for a, lv in enumerate(levels):
                    if low <= lv < top:
                        coefs[offset + a] += c * (chain[lv] // t.div)
                break
            offset += len(levels)
        else:
            return None
    return Layout(form.const, tuple(start_terms), tuple(coefs))


@dataclass(frozen=True)
class Geometry:
    """A read's view over blocks of one signature and shape: extents, element strides, reach."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    lo: int  # lowest element offset from the base
    hi: int  # highest


class BlockKind:
    """Blocks of one signature and shape differ only in where their boxes start, so what a form
    looks like over them (its layout, its view's geometry) is worked out once per kind."""

    def __init__(
        self, signature: Signature, shape: tuple[int, ...], chains: dict[str, tuple[int, ...]]
    ) -> None:
        self.signature, self.shape, self.chains = signature, shape, chains
        self._forms: dict[QuasiAffine, tuple[Layout, Geometry] | None] = {}

    def layout(self, form: QuasiAffine) -> tuple[Layout, Geometry] | None:
        """The form's layout over blocks of this kind and its view's geometry, or None."""
        try:
            return self._forms[form]
        except KeyError:
            lay = _layout(form, self.signature, self.chains)
            out = self._forms[form] = None if lay is None else (lay, _geometry(lay.coefs, self.shape))
            return out


class Layouts:
    """The block kinds of one plan, memoised for its life."""

    def __init__(self, chains: dict[str, tuple[int, ...]]) -> None:
        self.chains = chains
        self._kinds: dict[tuple[Signature, tuple[int, ...]], BlockKind] = {}

    def kind(self, boxes: tuple[Box, ...]) -> BlockKind:
        signature = tuple((b.var, b.levels) for b in boxes)
        shape = tuple(n for b in boxes for n in b.shape)
        kind = self._kinds.get((signature, shape))
        if kind is None:
            kind = self._kinds[(signature, shape)] = BlockKind(signature, shape, self.chains)
        return kind


def _geometry(coefs: tuple[int, ...], shape: tuple[int, ...]) -> Geometry:
    extents = tuple(n if c else 1 for n, c in zip(shape, coefs))
    lo = sum(min(0, c * (n - 1)) for c, n in zip(coefs, extents))
    hi = sum(max(0, c * (n - 1)) for c, n in zip(coefs, extents))
    return Geometry(extents, coefs, lo, hi)


class Block:
    """The lanes of one step: a box of gidx, then (in reductions) a box of ridx."""

    def __init__(self, boxes: tuple[Box, ...], layouts: Layouts) -> None:
        self.boxes = boxes
        self.kind = layouts.kind(boxes)
        self.shape = self.kind.shape
        self.starts = tuple(b.start for b in boxes)

    def placed(self, form: QuasiAffine) -> tuple[int, Geometry] | None:
        """`(base, geometry)` with form == base + Σ geometry.strides[a]·i_a over this block, or None."""
        got = self.kind.layout(form)
        if got is None:
            return None
        lay, geo = got
        return lay.base(self.starts), geo

    def linear(self, form: QuasiAffine) -> tuple[int, tuple[int, ...]] | None:
        """`(base, coef per axis)` with form == base + Σ coef_a·i_a over this block, or None."""
        placed = self.placed(form)
        return None if placed is None else (placed[0], placed[1].strides)

    def view(self, form: QuasiAffine, buf: np.ndarray) -> np.ndarray | None:
        """`buf[form]` as a view broadcasting over the block, or None if it would leave `buf`."""
        placed = self.placed(form)
        if placed is None:
            return None
        base, geo = placed
        if base + geo.lo < 0 or base + geo.hi >= buf.size:
            return None
        item = buf.itemsize
        return np.ndarray(geo.shape, buf.dtype, buf, base * item, tuple(c * item for c in geo.strides))
