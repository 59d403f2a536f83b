"""Views and shape trackers: movement ops as index arithmetic, never as copies.

A `View` maps a multi-index to one buffer address (or to "padding", which reads 0).
A `ShapeTracker` is a chain of views for the movements one view cannot express
(a reshape across a pad or a flip, say). Lowering a tracker gives two int32/bool
AluExps, the buffer index and its validity, which kernels fold into their code.

The design is tinygrad's shapetracker as jax-js ships it; the arithmetic follows
the JS semantics the spec pins (floor division and truncated `%`), so views match
the reference bit for bit, including for negative offsets.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxcore.alu import AluExp

__all__ = ["View", "ShapeTracker", "unravel", "unravel_alu"]

Shape = tuple[int, ...]
Pair = tuple[int, int]
Mask = tuple[Pair, ...]


# --------------------------------------------------------------------------------------------------------
# Small helpers (JS semantics where the reference depends on them)


def _js_mod(a: int, b: int) -> int:
    """JS `%` on integers: truncated, so the result takes the dividend's sign."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _jstr(value: Any) -> str:
    """JSON.stringify for the small lists that appear in error messages."""
    return json.dumps(value, separators=(",", ":"))


def _ints(values: Sequence[int]) -> Shape:
    return tuple(int(v) for v in values)


def _pairs(values: Sequence[Sequence[int]]) -> Mask:
    return tuple((int(b), int(e)) for b, e in values)


def _default_strides(shape: Shape) -> Shape:
    """Row-major strides, with 0 for size-1 dims so equal layouts compare equal."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = 0 if shape[i] == 1 else acc
        acc *= shape[i]
    return tuple(strides)


def _canonical_strides(shape: Shape, strides: Shape) -> Shape:
    return tuple(0 if s == 1 else st for s, st in zip(shape, strides))


@functools.lru_cache(maxsize=4096)
def _merge_dims(shape: Shape, strides: Shape, mask: Mask | None) -> tuple[tuple[int, int, int], ...]:
    """Merge runs of dims that address memory as one dim: `(merged_size, stride, real_size)`.

    `real_size` is how far the run extends before a dim masked down to one index; past it
    a reshape may use stride 0, because those elements are all padding anyway.
    """
    if not shape:
        return ()
    out = [(shape[0], strides[0], shape[0] if strides[0] != 0 else 0)]
    merging = (mask[0][1] - mask[0][0] == 1) if mask is not None else shape[0] == 1
    for i in range(1, len(shape)):
        s, st = shape[i], strides[i]
        if s == 1:
            continue  # size-1 dims always merge, and leave `merging` alone
        last_s, last_st, last_real = out[-1]
        if merging or last_st == s * st:
            out[-1] = (last_s * s, st, s if merging else last_real * s)
        else:
            out.append((s, st, s))
        merging = (mask[i][1] - mask[i][0] == 1) if mask is not None else False
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _reshape_mask(mask: Mask, old_shape: Shape, new_shape: Shape) -> Mask | None:
    """The mask of `old_shape` re-expressed over `new_shape`, or None when it is not a box there."""
    masks, olds, news = list(mask), list(old_shape), list(new_shape)

    def next_mask() -> Pair:
        return masks.pop() if masks else (0, 1)

    def next_old() -> int:
        return olds.pop() if olds else 1

    def next_new() -> int:
        return news.pop() if news else 1

    out: list[Pair] = []
    cur = 1
    old, new, (lo, hi) = next_old(), next_new(), next_mask()
    while len(out) < len(new_shape):
        nxt = new * cur
        if old == nxt:
            out.append((lo // cur, (hi - 1) // cur + 1))
            cur = 1
            old, new, (lo, hi) = next_old(), next_new(), next_mask()
        elif old > nxt:
            if _js_mod(old, nxt) != 0:
                return None
            if (_js_mod(lo, nxt) != 0 or _js_mod(hi, nxt) != 0) and lo // nxt != (hi - 1) // nxt:
                return None
            out.append((_js_mod(lo, nxt) // cur, _js_mod(hi - 1, nxt) // cur + 1))
            cur = nxt
            new = next_new()
        else:
            nlo, nhi = next_mask()
            if (lo, hi) != (0, old) and lo != hi and nhi - nlo != 1:
                return None
            lo, hi = nlo * old + lo, (nhi - 1) * old + hi
            old *= next_old()
    return tuple(reversed(out))


def unravel(shape: Sequence[int], offset: int) -> list[int]:
    """Multi-index of flat `offset` in `shape`, with JS `%` (so negatives stay negative)."""
    out: list[int] = []
    acc = 1
    for d in reversed(_ints(shape)):
        if d <= 0:
            raise ValueError(f"unravel needs positive dims, got {_jstr(list(shape))}")
        out.append(_js_mod(offset // acc, d))
        acc *= d
    out.reverse()
    return out


def unravel_alu(shape: Sequence[int], offset: AluExp) -> list[AluExp]:
    """`unravel` as unsimplified AluExps: `(offset / acc) % d` for every dim, the first included."""
    from jaxcore.alu import AluExp

    out: list[AluExp] = []
    acc = 1
    for d in reversed(_ints(shape)):
        out.append(AluExp.mod(AluExp.idiv(offset, AluExp.i32(acc)), AluExp.i32(d)))
        acc *= d
    out.reverse()
    return out


# --------------------------------------------------------------------------------------------------------
# View


@dataclass(frozen=True)
class View:
    """One strided, offset, optionally masked window onto a flat buffer.

    Element `i` reads 0 when some `i[d]` lies outside `mask[d]`, and otherwise
    `buffer[offset + sum(strides[d] * i[d])]`. Build views only through `View.create`,
    whose canonical form makes equal layouts compare (and hash) equal.
    """

    shape: Shape
    strides: Shape
    offset: int
    mask: Mask | None

    # ---- construction ----------------------------------------------------------------------------------

    @staticmethod
    def create(
        shape: Sequence[int],
        strides: Sequence[int] | None = None,
        offset: int = 0,
        mask: Sequence[Sequence[int]] | None = None,
    ) -> View:
        """The canonical view for these arguments (spec §6.1 rules 1-5)."""
        shp = _ints(shape)
        if any(s < 0 for s in shp):
            raise ValueError("View shape must be non-negative")
        if strides is None:
            st = _default_strides(shp)
        else:
            st = _ints(strides)
            if len(st) != len(shp):
                raise ValueError(f"View strides {_jstr(list(st))} do not match shape {_jstr(list(shp))}")
            st = _canonical_strides(shp, st)
        if 0 in shp:
            return View(shp, (0,) * len(shp), 0, None)
        off = int(offset)
        msk = None if mask is None else _pairs(mask)
        if msk is not None:
            if len(msk) != len(shp):
                raise ValueError(f"View mask {_jstr(list(msk))} does not match shape {_jstr(list(shp))}")
            if all(m == (0, s) for m, s in zip(msk, shp)):
                msk = None
        if msk is not None:
            elim = [b + 1 >= e for b, e in msk]
            if any(elim):
                if any(b >= e for b, e in msk):
                    # No element is valid: forget the layout entirely.
                    st, off, msk = (0,) * len(shp), 0, ((0, 0),) * len(shp)
                # A dim masked to one index reads one address: fold it into the offset.
                off += sum(s * m[0] for s, m, el in zip(st, msk, elim) if el)
                st = tuple(0 if el else s for s, el in zip(st, elim))
        return View(shp, st, off, msk)

    # ---- properties ------------------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @functools.cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @functools.cached_property
    def contiguous(self) -> bool:
        """True for the identity layout, where the view is just the buffer."""
        return self.size == 0 or (
            self.offset == 0 and self.mask is None and self.strides == _default_strides(self.shape)
        )

    def data_range(self) -> tuple[int, int]:
        """`(lo, hi)`: every address a valid element reads lies in `[lo, hi)`; `(0, 0)` if none does."""
        if self.size == 0 or (self.mask is not None and self.mask[0][0] == self.mask[0][1]):
            return (0, 0)
        lo = hi = self.offset
        for d in range(self.ndim):
            b, e = self.mask[d] if self.mask is not None else (0, self.shape[d])
            s = self.strides[d]
            if s > 0:
                lo += s * b
                hi += s * (e - 1)
            elif s < 0:
                lo += s * (e - 1)
                hi += s * b
        return (lo, hi + 1)

    def to_json(self) -> dict[str, Any]:
        """The four public fields in the reference's JSON order (used for hashing and printing)."""
        return {
            "shape": list(self.shape),
            "strides": list(self.strides),
            "offset": self.offset,
            "mask": None if self.mask is None else [list(m) for m in self.mask],
        }

    # ---- movement ops ----------------------------------------------------------------------------------

    def _resize(self, arg: Mask, new_mask: Mask | None = None) -> View:
        """Window `[b, e)` of each dim (b may be negative for pads); existing masks move with it."""
        offset = self.offset + sum(s * a[0] for s, a in zip(self.strides, arg))
        mask = new_mask
        if self.mask is not None:
            moved = tuple(
                (max(0, min(mb - b, e - b)), max(0, min(me - b, e - b)))
                for (mb, me), (b, e) in zip(self.mask, arg)
            )
            mask = (
                moved
                if mask is None
                else tuple((max(a[0], m[0]), min(a[1], m[1])) for a, m in zip(mask, moved))
            )
        return View.create([e - b for b, e in arg], self.strides, offset, mask)

    def pad(self, arg: Sequence[Sequence[int]]) -> View:
        """Zero-pad `(before, after)` elements on each dim."""
        pairs = _pairs(arg)
        if len(pairs) != self.ndim or not all(b >= 0 and e >= 0 for b, e in pairs):
            raise ValueError(f"invalid pad {_jstr(list(pairs))} for {_jstr(list(self.shape))}")
        if all(b == 0 and e == 0 for b, e in pairs):
            return self
        window = tuple((-b, s + e) for (b, e), s in zip(pairs, self.shape))
        mask = tuple((b, s + b) for (b, _), s in zip(pairs, self.shape))
        return self._resize(window, mask)

    def shrink(self, arg: Sequence[Sequence[int]]) -> View:
        """Take the sub-box `[b, e)` of each dim."""
        pairs = _pairs(arg)
        if len(pairs) != self.ndim or not all(0 <= b <= e <= s for (b, e), s in zip(pairs, self.shape)):
            raise ValueError(f"invalid shrink {_jstr(list(pairs))} for {_jstr(list(self.shape))}")
        return self._resize(pairs)

    def expand(self, new_shape: Sequence[int]) -> View:
        """Broadcast size-1 dims to `new_shape` (stride 0: every copy reads the same address)."""
        shp = _ints(new_shape)
        if len(shp) != self.ndim or any(n != s and s != 1 for n, s in zip(shp, self.shape)):
            raise ValueError(f"Can't expand {_jstr(list(self.shape))} into {_jstr(list(shp))}")
        if self.size == 0:
            return View.create(shp)
        mask = None
        if self.mask is not None:
            mask = tuple(
                m if s == n else ((0, n) if m == (0, 1) else (0, 0))
                for m, s, n in zip(self.mask, self.shape, shp)
            )
        return View.create(shp, self.strides, self.offset, mask)

    def permute(self, axis: Sequence[int]) -> View:
        """Reorder the dims: output dim `i` is input dim `axis[i]`."""
        ax = _ints(axis)
        if sorted(ax) != list(range(self.ndim)):
            raise ValueError(f"Invalid permutation {_jstr(list(ax))} of len {self.ndim}")
        mask = None if self.mask is None else tuple(self.mask[a] for a in ax)
        return View.create([self.shape[a] for a in ax], [self.strides[a] for a in ax], self.offset, mask)

    def flip(self, arg: Sequence[bool]) -> View:
        """Reverse the dims where `arg` is true."""
        flags = [bool(f) for f in arg]
        if len(flags) != self.ndim:
            raise ValueError(f"Invalid flip {_jstr(flags)} for {_jstr(list(self.shape))}")
        strides = list(self.strides)
        offset = self.offset
        mask = None if self.mask is None else list(self.mask)
        for d, (flip, s) in enumerate(zip(flags, self.shape)):
            if flip:
                offset += (s - 1) * strides[d]
                strides[d] = -strides[d]
                if mask is not None:
                    b, e = mask[d]
                    mask[d] = (s - e, s - b)
        return View.create(self.shape, strides, offset, mask)

    def reshape(self, new_shape: Sequence[int]) -> View | None:
        """The same elements in row-major order over `new_shape`, or None if one view cannot say it.
        The same shape gives this very view (the cache below would give an equal one it saw first)."""
        shp = _ints(new_shape)
        return self if shp == self.shape else self._reshape(shp)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - views are small, immutable and long-lived
    def _reshape(self, shp: Shape) -> View | None:
        if shp == self.shape:
            return self
        if any(s < 0 for s in shp):
            raise ValueError(f"Reshape cannot have negative numbers {_jstr(list(shp))}")
        if self.size != math.prod(shp):
            raise ValueError(f"Reshape size {_jstr(list(self.shape))} -> {_jstr(list(shp))}")
        if self.size == 0:
            return View.create(shp)
        if not shp and self.mask is not None and any(b == e for b, e in self.mask):
            return None  # the one element is padding, and a 0-d view has no dim to mask it with
        if self.contiguous:
            return View.create(shp)

        # Walk merged runs from the innermost, giving each new dim the run's stride times what
        # the run has consumed so far. A new dim that straddles two runs cannot be expressed.
        rev_strides: list[int] = []
        k = len(shp)
        for merged_size, stride, real_size in reversed(_merge_dims(self.shape, self.strides, self.mask)):
            acc = 1
            while acc < merged_size and k > 0:
                k -= 1
                rev_strides.append(stride * acc)
                acc *= shp[k]
                if acc >= real_size:
                    stride = 0  # beyond the single-index mask everything is padding
            if acc != merged_size:
                return None
        new_strides = [0] * (len(shp) - len(rev_strides)) + rev_strides[::-1]
        if self.mask is None:
            return View.create(shp, new_strides, self.offset)

        new_mask = _reshape_mask(self.mask, self.shape, shp)
        if new_mask is None:
            return None
        # Anchor the offset at the first valid element, which both layouts agree on.
        offset = (
            self.offset
            + sum(s * m[0] for s, m in zip(self.strides, self.mask))
            - sum(s * m[0] for s, m in zip(new_strides, new_mask))
        )
        return View.create(shp, new_strides, offset, new_mask)

    def minify(self) -> View:
        """The same layout with mergeable dims merged (fewer index terms), or self."""
        merged = self.reshape([m[0] for m in _merge_dims(self.shape, self.strides, self.mask)])
        return self if merged is None else merged

    # ---- composition -----------------------------------------------------------------------------------

    def compose(self, v1: View) -> View | None:
        """One view equal to `self` followed by `v1` (which indexes self's logical array), or None.

        The result has `v1.shape`.
        """
        return self._compose(v1)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - see _reshape
    def _compose(self, v1: View) -> View | None:
        v2 = self
        if v2.contiguous:
            return v1
        if v1.size == 0:
            # Nothing is read. (The reference would recurse forever projecting a mask here.)
            return v1
        if v1.contiguous:
            if v1.shape == v2.shape:
                return v2
            if v1.size == v2.size:
                ret = v2.reshape(v1.shape)
                if ret is not None:
                    return ret
        if v1.mask is not None:
            # Compose the unmasked box, then pad back to v1's shape.
            inner = v2.compose(v1.shrink(v1.mask))
            if inner is None:
                return None
            return inner.pad([(b, s - e) for (b, e), s in zip(v1.mask, v1.shape)])

        # Project v1's offset and each unit step onto v2's dims.
        origin = unravel(v2.shape, v1.offset)
        terms: list[list[Pair]] = [[] for _ in range(v2.ndim)]
        strides = [0] * v1.ndim
        for d1, st in enumerate(v1.strides):
            if st == 0:
                continue
            moved = unravel(v2.shape, v1.offset + st)
            for d2 in range(v2.ndim):
                diff = moved[d2] - origin[d2]
                if diff != 0:
                    terms[d2].append((d1, diff))
                    strides[d1] += diff * v2.strides[d2]

        # Group v2's dims (from the innermost) until v1's reach stays inside each group.
        merged_size, lo_acc, hi_acc = 1, 0, 0
        extents: list[tuple[int, int, int]] = []
        for d2 in range(v2.ndim - 1, -1, -1):
            lo = hi = origin[d2]
            for d1, s1 in terms[d2]:
                if s1 > 0:
                    hi += (v1.shape[d1] - 1) * s1
                else:
                    lo += (v1.shape[d1] - 1) * s1
            lo_acc += lo * merged_size
            hi_acc += hi * merged_size
            merged_size *= v2.shape[d2]
            if lo_acc >= 0 and hi_acc < merged_size:
                extents.append((merged_size, lo_acc, hi_acc))
                merged_size, lo_acc, hi_acc = 1, 0, 0
        if lo_acc != 0 or hi_acc != 0:
            return None  # v1 reaches past v2's bounds
        extents.reverse()
        grouped = tuple(e[0] for e in extents)
        if grouped != v2.shape:
            reshaped = v2.reshape(grouped)
            return None if reshaped is None else reshaped.compose(v1)

        if v2.mask is not None:
            # Turn v2's mask into a mask on v1 where each masked v2 dim moves with one v1 dim.
            new_b = [0] * v1.ndim
            new_e = list(v1.shape)
            bad = False
            for (b, e), o, term, (_, lo, hi) in zip(v2.mask, origin, terms, extents):
                if b <= lo and hi < e:
                    continue
                if len(term) != 1:
                    if not term and new_e:
                        new_e[0] = 0
                    else:
                        bad = True
                    continue
                d1, s1 = term[0]
                first = b - o if s1 > 0 else e - o - 1
                last = b - o if s1 < 0 else e - o - 1
                new_b[d1] = max(new_b[d1], -(-first // s1))
                new_e[d1] = min(new_e[d1], last // s1 + 1)
            if any(b != 0 or e != s for b, e, s in zip(new_b, new_e, v1.shape)):
                return v2.compose(View.create(v1.shape, v1.strides, v1.offset, list(zip(new_b, new_e))))
            if bad:
                return None

        offset = v2.offset + sum(o * s for o, s in zip(origin, v2.strides))
        return View.create(v1.shape, strides, offset)

    # ---- lowering --------------------------------------------------------------------------------------

    def to_alu_exp(self, indices: Sequence[AluExp]) -> tuple[AluExp, AluExp]:
        """`(index, valid)` for the element at `indices`, unsimplified (the tracker simplifies once)."""
        from jaxcore.alu import AluExp

        if len(indices) != self.ndim:
            raise ValueError(f"View of ndim {self.ndim} indexed with {len(indices)} indices")
        iexp = AluExp.i32(self.offset)
        vexp = AluExp.bool_(True)
        for d in range(self.ndim - 1, -1, -1):
            idx = indices[d]
            if self.shape[d] != 1 and self.strides[d] != 0:
                iexp = AluExp.add(AluExp.mul(idx, AluExp.i32(self.strides[d])), iexp)
            if self.mask is not None:
                b, e = self.mask[d]
                if b != 0:
                    vexp = AluExp.mul(AluExp.cmplt(idx, AluExp.i32(b)).not_(), vexp)
                if e != self.shape[d]:
                    vexp = AluExp.mul(AluExp.cmplt(idx, AluExp.i32(e)), vexp)
        return iexp, vexp


# --------------------------------------------------------------------------------------------------------
# ShapeTracker


@dataclass(frozen=True)
class ShapeTracker:
    """Views applied left to right: `views[0]` addresses the buffer, each later view the
    logical (contiguous) array of the one before. Movement ops touch the last view only,
    and only a reshape that one view cannot express appends a view."""

    views: tuple[View, ...]

    def __post_init__(self) -> None:
        if not self.views:
            raise ValueError("ShapeTracker needs at least one view")
        if not isinstance(self.views, tuple):
            object.__setattr__(self, "views", tuple(self.views))

    @staticmethod
    def from_shape(shape: Sequence[int]) -> ShapeTracker:
        return ShapeTracker((View.create(shape),))

    # ---- properties ------------------------------------------------------------------------------------

    @property
    def shape(self) -> Shape:
        return self.views[-1].shape

    @property
    def ndim(self) -> int:
        return self.views[-1].ndim

    @property
    def size(self) -> int:
        return self.views[-1].size

    @property
    def last_strides(self) -> Shape:
        return self.views[-1].strides

    @property
    def contiguous(self) -> bool:
        """One identity view: the tracker is the buffer itself."""
        return len(self.views) == 1 and self.views[0].contiguous

    @property
    def consecutive(self) -> bool:
        """Like `contiguous`, but the data may start at a nonzero offset."""
        v = self.views[0]
        return len(self.views) == 1 and v.mask is None and v.strides == _default_strides(v.shape)

    def key(self) -> tuple[Any, ...]:
        """A hashable structural key (the views' four fields), stable across processes."""
        return tuple((v.shape, v.strides, v.offset, v.mask) for v in self.views)

    def to_json(self) -> dict[str, Any]:
        """`{"views": [{shape, strides, offset, mask}, ...]}`, the reference's JSON form."""
        return {"views": [v.to_json() for v in self.views]}

    def __str__(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    # ---- movement ops ----------------------------------------------------------------------------------

    def _with_last(self, view: View) -> ShapeTracker:
        return ShapeTracker(self.views[:-1] + (view,))

    def pad(self, arg: Sequence[Sequence[int]]) -> ShapeTracker:
        return self._with_last(self.views[-1].pad(arg))

    def shrink(self, arg: Sequence[Sequence[int]]) -> ShapeTracker:
        return self._with_last(self.views[-1].shrink(arg))

    def expand(self, new_shape: Sequence[int]) -> ShapeTracker:
        return self._with_last(self.views[-1].expand(new_shape))

    def permute(self, axis: Sequence[int]) -> ShapeTracker:
        return self._with_last(self.views[-1].permute(axis))

    def flip(self, arg: Sequence[bool]) -> ShapeTracker:
        return self._with_last(self.views[-1].flip(arg))

    def reshape(self, new_shape: Sequence[int]) -> ShapeTracker:
        """Reshape the last view, or append a fresh view over its logical array when it can't."""
        view = self.views[-1].reshape(new_shape)
        if view is None:
            return ShapeTracker(self.views + (View.create(new_shape),))
        return self._with_last(view)

    # ---- composite ops ---------------------------------------------------------------------------------

    def broadcast(self, new_shape: Sequence[int], axis: Sequence[int]) -> ShapeTracker:
        """Insert size-1 dims at `axis` (positions in the result), then expand to `new_shape`."""
        st = self
        if len(axis) > 0:
            unsqueezed = list(st.shape)
            for i in sorted(int(a) for a in axis):
                unsqueezed.insert(i, 1)
            st = st.reshape(unsqueezed)
        return st.expand(new_shape)

    def repeat(self, reps: Sequence[int], tile: bool = True) -> ShapeTracker:
        """Repeat the trailing `len(reps)` dims: tile gives 123123, otherwise each element 112233."""
        r = _ints(reps)
        if len(r) > self.ndim:
            raise ValueError(f"Too many repeats {_jstr(list(r))} for shape {_jstr(list(self.shape))}")
        if any(c <= 0 for c in r):
            raise ValueError(f"Invalid repeats {_jstr(list(r))}")
        if not r:
            return self
        keep = list(self.shape[: self.ndim - len(r)])
        tail = self.shape[self.ndim - len(r) :]
        expanded = keep + [x for s, c in zip(tail, r) for x in ((c, s) if tile else (s, c))]
        axis = [len(keep) + 2 * i + (0 if tile else 1) for i in range(len(r))]
        return self.broadcast(expanded, axis).reshape(keep + [s * c for s, c in zip(tail, r)])

    def moveaxis(self, i: int, j: int) -> ShapeTracker:
        """Move dim `i` to position `j`, keeping the others in order."""
        perm = list(range(self.ndim))
        perm.insert(j, perm.pop(i))
        return self.permute(perm)

    def pad_or_shrink(self, arg: Sequence[Sequence[int]]) -> ShapeTracker:
        """Like `pad`, but negative amounts shrink from that side."""
        pairs = _pairs(arg)
        pad_arg: list[Pair] = []
        shrink_arg: list[Pair] = []
        for (b, e), s in zip(pairs, self.shape):
            if b < -s or e < -s or b + e < -s:
                raise ValueError(f"Invalid padOrShrink {_jstr(list(pairs))} for {_jstr(list(self.shape))}")
            pad_arg.append((max(0, b), max(0, e)))
            shrink_arg.append((max(0, -b), s - max(0, -e)))
        return self.shrink(shrink_arg).pad(pad_arg)

    # ---- simplification and composition ----------------------------------------------------------------

    def simplify(self) -> ShapeTracker:
        """Merge trailing view pairs while one view can express them."""
        views = list(self.views)
        while len(views) >= 2:
            merged = views[-2].compose(views[-1])
            if merged is None:
                break
            views[-2:] = [merged]
        return ShapeTracker(tuple(views))

    def compose(self, other: ShapeTracker) -> ShapeTracker:
        """`other` applied on top of this tracker's logical array: indexes other's shape into our buffer."""
        if self.contiguous:
            return other
        ret = self
        for v in other.views:
            ret = ShapeTracker(ret.views + (v,)).simplify()
        return ret

    # ---- lowering --------------------------------------------------------------------------------------

    def to_alu_exp(self, indices: Sequence[AluExp]) -> tuple[AluExp, AluExp]:
        """`(index, valid)` of the element at `indices`, both simplified.

        Earlier views are minified first (fewer div/mod terms); the last view is not,
        because it takes the caller's indices.
        """
        from jaxcore.alu import AluExp

        iexp, vexp = self.views[-1].to_alu_exp(indices)
        for view in reversed(self.views[:-1]):
            v = view.minify()
            iexp, valid = v.to_alu_exp(unravel_alu(v.shape, iexp))
            vexp = AluExp.mul(vexp, valid)
        return iexp.simplify(), vexp.simplify()
