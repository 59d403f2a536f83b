"""Kernels from array programs: what a frontend hands the backend layer, built once, here.

A frontend thinks in arrays: a value at every index of a shape, read from buffers through views,
combined elementwise, reduced over an axis and then finished by an epilogue. A `Kernel` is flat:
`gidx` over the outputs, `ridx` over the reduced items, inputs numbered `0..nargs-1`. The gap
between the two (unravelling `gidx` into per-axis indices, reading each buffer through its
ShapeTracker, renumbering a fused chain's inputs into one list, putting a reduction's result
into the epilogue as `acc`) is the same in every frontend, so it lives here:

- `Fused` is a value over a shape: an `AluExp` in the per-axis index Specials `indices(shape)`
  that reads `inputs[g]` as gid `g` (each input any hashable buffer handle: a slot, or the
  frontend's own buffer object). `Fused.read`, `full`, `iota` make one; `Fused.map` combines
  several into one expression (inputs merged, the same buffer read through one gid); `reshape`,
  `permute`, `expand`, `pad`, `shrink`, `flip` move it without copying anything (a read's
  ShapeTracker takes the movement; other uses of the indices are rewritten).
- `FusedReduce` is a fold of a `Fused` over one axis with an epilogue, itself extended by `map`.
- `.kernel()` on either gives `Lowered(kernel, inputs)`: the `Kernel` and the buffers to pass,
  in gid order. Equal programs give equal kernels; the second build of one is a dict lookup
  (every step here is memoised on the expressions' digests), so a frontend may rebuild its
  kernels every step instead of caching them itself.

Everything is immutable and safe to share between threads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar, accessor_global, pending
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction, _Memo
from jaxcore.matmul_shape import MatmulShape
from jaxcore.matmul_shape import detect as detect_matmul
from jaxcore.shape import ShapeTracker, unravel_alu

__all__ = [
    "Fused",
    "FusedReduce",
    "Lowered",
    "MatmulShape",
    "accessor_global",
    "detect_matmul",
    "indices",
    "unravel_alu",
]

Shape = tuple[int, ...]
_I32 = DType.int32


def indices(shape: Sequence[int]) -> tuple[AluExp, ...]:
    """The per-axis index of a value over `shape`: int32 Specials `i0, i1, ...` with their
    extents, so the simplifier knows `0 <= i_d < shape[d]` and cancels index arithmetic."""
    return _indices(shape if type(shape) is tuple else tuple(map(int, shape)))


@functools.lru_cache(maxsize=1024)
def _indices(shape: Shape) -> tuple[AluExp, ...]:
    return tuple(AluExp.special(_I32, f"i{d}", n) for d, n in enumerate(shape))


@functools.lru_cache(maxsize=4096)
def _read(dtype: DType, view: ShapeTracker | Shape) -> tuple[AluExp, Shape]:
    """The read of gid 0 through `view` at its own indices, and its shape; cached, since every
    step reads the same buffers through the same views, and a GlobalView is the dearest node."""
    st = view if isinstance(view, ShapeTracker) else ShapeTracker.from_shape(_shape(view))
    return AluExp.global_view(DType(dtype), 0, st, indices(st.shape)), st.shape


@functools.lru_cache(maxsize=16)
def _acc(dtype: DType) -> AluExp:
    return AluVar.acc(dtype)


class Lowered(NamedTuple):
    """A kernel and the buffers to dispatch it on, `inputs[g]` being its input `g`."""

    kernel: Kernel
    inputs: tuple[Hashable, ...]


# Digest-keyed memos of the rewrites below: a frontend that rebuilds a program every step builds
# the same expressions again, and each rewrite would otherwise rebuild (and re-hash) its nodes.
_MOVED: _Memo[tuple[Any, ...], tuple[AluExp, Shape]] = _Memo(8192)
_REINDEXED: _Memo[tuple[str, tuple[int, ...]], AluExp] = _Memo(8192)
_KERNELS: _Memo[tuple[Any, ...], Kernel] = _Memo(4096)


def _shape(shape: Sequence[int]) -> Shape:
    out = tuple(map(int, shape))
    if out and min(out) < 0:
        raise ValueError(f"shape must be non-negative, got {list(out)}")
    return out


def _merge(
    first: tuple[Hashable, ...], other: tuple[Hashable, ...]
) -> tuple[tuple[Hashable, ...], list[int]]:
    """`first` extended by the buffers of `other` it lacks, and where each of `other`'s went."""
    merged = list(first)
    gids = []
    for buf in other:
        try:
            gids.append(merged.index(buf))
        except ValueError:
            gids.append(len(merged))
            merged.append(buf)
    return tuple(merged), gids


def _reindexed(exp: AluExp, gids: list[int]) -> AluExp:
    if all(g == i for i, g in enumerate(gids)):
        return exp
    key = (exp.key(), tuple(gids))
    hit = _REINDEXED.get(key)
    if hit is None:
        hit = exp.reindex_gids(gids)
        _REINDEXED.put(key, hit)
    return hit


def _remap(
    exp: AluExp, old: tuple[AluExp, ...], new: Sequence[AluExp], leaf: Callable[[AluExp], AluExp] | None
) -> AluExp:
    """`exp` with each index Special in `old` replaced by the expression at its place in `new`,
    and each read at exactly `old` (a leaf) replaced by `leaf(read)` when given.

    One pass, children first, replacements never revisited: `new` may hold Specials equal to
    `old`'s (a permute of a square shape) without being substituted twice."""
    where = {o.key(): n for o, n in zip(old, new)}
    out: dict[str, AluExp] = {}

    def is_leaf(n: AluExp) -> bool:
        return leaf is not None and n.op == AluOp.GlobalView and n.src == old

    def done(n: AluExp) -> AluExp:
        k = n.key()
        if k not in out:
            assert leaf is not None
            out[k] = leaf(n)
        return out[k]

    for node in pending(exp, is_leaf):
        k = node.key()
        if k in out:
            continue
        if node.op == AluOp.Special and k in where:
            out[k] = where[k]
            continue
        src = tuple(done(s) if is_leaf(s) else out[s.key()] for s in node.src)
        same = all(a is b for a, b in zip(src, node.src))
        out[k] = node if same else AluExp(node.op, node.dtype, src, node.arg)
    return done(exp) if is_leaf(exp) else out[exp.key()]


@dataclass(frozen=True, eq=False)
class Fused:
    """A value at every index of `shape`: `exp` over `indices(shape)`, reading `inputs[g]` as gid g."""

    shape: Shape
    exp: AluExp
    inputs: tuple[Hashable, ...] = ()

    # ---- making one -------------------------------------------------------------------------
    @staticmethod
    def read(buffer: Hashable, dtype: DType, view: ShapeTracker | Sequence[int]) -> Fused:
        """Buffer `buffer` (elements of `dtype`) read through `view`, or row-major as a shape."""
        exp, shape = _read(dtype, view if isinstance(view, tuple | ShapeTracker) else _shape(view))
        return Fused(shape, exp, (buffer,))

    @staticmethod
    def full(shape: Sequence[int], value: float | int | bool, dtype: DType) -> Fused:
        return Fused(_shape(shape), AluExp.const(DType(dtype), value))

    @staticmethod
    def iota(shape: Sequence[int], axis: int, dtype: DType = _I32) -> Fused:
        """Each element's index along `axis` (one-hot masks, causal masks, aranges)."""
        shp = _shape(shape)
        return Fused(shp, AluExp.cast(DType(dtype), indices(shp)[axis]))

    @staticmethod
    def map(fn: Callable[..., AluExp], *args: Fused) -> Fused:
        """`fn` applied to the operands' expressions, one kernel's worth: every operand has the
        result's shape (broadcast them with `expand` first), and their inputs become one list."""
        if not args:
            raise ValueError("Fused.map needs at least one operand")
        shape, inputs = args[0].shape, args[0].inputs
        exps = [args[0].exp]
        for a in args[1:]:
            if a.shape != shape:
                raise ValueError(f"Fused.map operands differ in shape: {list(shape)} and {list(a.shape)}")
            inputs, gids = _merge(inputs, a.inputs)
            exps.append(_reindexed(a.exp, gids))
        out = fn(*exps)
        if not isinstance(out, AluExp):
            raise TypeError(f"Fused.map: fn must return an AluExp, got {type(out).__name__}")
        return Fused(shape, out, inputs)

    @property
    def dtype(self) -> DType:
        return self.exp.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def view(self) -> ShapeTracker | None:
        """The view through which this value reads one buffer, when it is just that read (no
        arithmetic); else None. A matmul whose operands are reads reaches the devices' GEMM."""
        e = self.exp
        if e.op == AluOp.GlobalView and e.src == indices(self.shape):
            return e.arg[1]
        return None

    @property
    def source(self) -> Hashable | None:
        """The buffer this value is, when it reads one row-major from its start (the buffer may be
        longer); else None. Routines take whole contiguous buffers: hand them this one, or write
        the value into a buffer of its own first (`kernel()`)."""
        st = self.view
        return self.inputs[self.exp.arg[0]] if st is not None and st.contiguous else None

    def astype(self, dtype: DType) -> Fused:
        return Fused(self.shape, AluExp.cast(DType(dtype), self.exp), self.inputs)

    # ---- movement: no copies ------------------------------------------------------------------
    def reshape(self, shape: Sequence[int]) -> Fused:
        """Row-major reshape (sizes must agree)."""
        seen = self._seen("reshape", shape)
        if seen is not None:
            return seen
        new = _shape(shape)
        if math.prod(new) != self.size:
            raise ValueError(f"cannot reshape {list(self.shape)} into {list(new)}")
        if new == self.shape:
            return self
        return self._move("reshape", new, new, shape)

    def permute(self, axes: Sequence[int]) -> Fused:
        """Output axis i is input axis `axes[i]`."""
        seen = self._seen("permute", axes)
        if seen is not None:
            return seen
        ax = tuple(int(a) for a in axes)
        if sorted(ax) != list(range(self.ndim)):
            raise ValueError(f"invalid permutation {list(ax)} of {self.ndim} axes")
        return self._move("permute", ax, tuple(self.shape[a] for a in ax), axes)

    def expand(self, shape: Sequence[int]) -> Fused:
        """Broadcast size-1 axes to `shape` (every copy reads the same element)."""
        seen = self._seen("expand", shape)
        if seen is not None:
            return seen
        new = _shape(shape)
        if len(new) != self.ndim or any(s not in (1, n) for s, n in zip(self.shape, new)):
            raise ValueError(f"cannot expand {list(self.shape)} to {list(new)}")
        return self if new == self.shape else self._move("expand", new, new, shape)

    def pad(self, pads: Sequence[tuple[int, int]]) -> Fused:
        """`(before, after)` zeros on each axis."""
        seen = self._seen("pad", pads)
        if seen is not None:
            return seen
        p = tuple((int(b), int(a)) for b, a in pads)
        if len(p) != self.ndim or any(b < 0 or a < 0 for b, a in p):
            raise ValueError(f"invalid pad {list(p)} for {list(self.shape)}")
        return self._move("pad", p, tuple(s + b + a for s, (b, a) in zip(self.shape, p)), pads)

    def shrink(self, bounds: Sequence[tuple[int, int]]) -> Fused:
        """The box `[begin, end)` of each axis."""
        seen = self._seen("shrink", bounds)
        if seen is not None:
            return seen
        b = tuple((int(lo), int(hi)) for lo, hi in bounds)
        if len(b) != self.ndim or not all(0 <= lo <= hi <= s for (lo, hi), s in zip(b, self.shape)):
            raise ValueError(f"invalid shrink {list(b)} for {list(self.shape)}")
        return self._move("shrink", b, tuple(hi - lo for lo, hi in b), bounds)

    def flip(self, axes: Sequence[int]) -> Fused:
        """Reverse the axes listed."""
        seen = self._seen("flip", axes)
        if seen is not None:
            return seen
        flags = tuple(d in {int(a) % max(self.ndim, 1) for a in axes} for d in range(self.ndim))
        return self._move("flip", flags, self.shape, axes) if any(flags) else self

    def _seen(self, op: str, raw: object) -> Fused | None:
        """This expression moved before by these very arguments: its checks passed then, and the
        rewrite was kept (a frontend rebuilding its program every step pays a lookup)."""
        if type(raw) is not tuple:
            return None
        try:
            hit = _MOVED.get((self.exp.key(), self.shape, op + ":as given", raw))
        except TypeError:  # a list inside: not a key
            return None
        return None if hit is None else Fused(hit[1], hit[0], self.inputs)

    def _move(self, op: str, arg: Any, new_shape: Shape, raw: object) -> Fused:
        key = (self.exp.key(), self.shape, op, arg)
        hit = _MOVED.get(key)
        if hit is None:
            hit = (_moved(self.exp, self.shape, op, arg, new_shape), new_shape)
            _MOVED.put(key, hit)
        if type(raw) is tuple:  # keyed apart: flip's given axes (0, 1) equal its flags (False, True)
            try:
                _MOVED.put((self.exp.key(), self.shape, op + ":as given", raw), hit)
            except TypeError:
                pass
        return Fused(new_shape, hit[0], self.inputs)

    # ---- kernels --------------------------------------------------------------------------------
    def reduce(self, op: AluOp, axis: int) -> FusedReduce:
        """Fold `axis` with Add/Mul/Min/Max; extend the result with `FusedReduce.map` (the epilogue)."""
        if not self.ndim:
            raise ValueError("cannot reduce a 0-d value")
        rop = op if type(op) is AluOp else AluOp(op)
        if rop not in AluGroup.Reduce:
            raise ValueError(f"cannot reduce by {op}: only Add, Mul, Min and Max fold")
        a = int(axis) % self.ndim
        out = self.shape[:a] + self.shape[a + 1 :]
        return FusedReduce(self, rop, a, Fused(out, _acc(self.dtype)))

    def kernel(self) -> Lowered:
        """The elementwise kernel writing this value, row-major, into a buffer of its shape."""
        key = (self.exp.key(), self.shape, len(self.inputs))
        k = _KERNELS.get(key)
        if k is None:
            exp = _remap(self.exp, indices(self.shape), unravel_alu(self.shape, AluVar.gidx), None)
            _no_stray_specials(exp)
            k = Kernel(len(self.inputs), self.size, exp)
            _KERNELS.put(key, k)
        return Lowered(k, self.inputs)


@dataclass(frozen=True, eq=False)
class FusedReduce:
    """`body` folded over `axis` by `op`, then `epilogue`: a value over the remaining axes whose
    expression reads the fold's result as the Variable `acc` (and may read other buffers)."""

    body: Fused
    op: AluOp
    axis: int
    epilogue: Fused

    @property
    def shape(self) -> Shape:
        return self.epilogue.shape

    @property
    def dtype(self) -> DType:
        return self.epilogue.dtype

    def map(self, fn: Callable[..., AluExp], *args: Fused) -> FusedReduce:
        """The epilogue extended: `fn(result, *args)` with `args` over the result's shape."""
        return FusedReduce(self.body, self.op, self.axis, Fused.map(fn, self.epilogue, *args))

    def kernel(self) -> Lowered:
        """One reduction kernel: the body's items folded, the epilogue applied once per output."""
        body, epi = self.body, self.epilogue
        inputs, gids = _merge(body.inputs, epi.inputs)
        key = (body.exp.key(), body.shape, self.op, self.axis, epi.exp.key(), len(inputs), tuple(gids))
        k = _KERNELS.get(key)
        if k is None:
            out_idx = unravel_alu(epi.shape, AluVar.gidx)
            item_idx = [*out_idx[: self.axis], AluVar.ridx, *out_idx[self.axis :]]
            item = _remap(body.exp, indices(body.shape), item_idx, None)
            finish = _remap(_reindexed(epi.exp, gids), indices(epi.shape), out_idx, None)
            _no_stray_specials(item)
            _no_stray_specials(finish)
            red = Reduction(body.dtype, self.op, body.shape[self.axis], finish)
            k = Kernel(len(inputs), math.prod(epi.shape), item, red)
            _KERNELS.put(key, k)
        return Lowered(k, inputs)


def _no_stray_specials(exp: AluExp) -> None:
    """A Special left after lowering is another shape's index: the value was combined with one of a
    different shape without `Fused.map`'s check (its `exp` built by hand)."""
    stray = exp.collect(lambda n: n.op == AluOp.Special)
    if stray:
        raise ValueError(f"expression reads index {stray[0]} of another shape")


# ---- the movement rewrites -------------------------------------------------------------------------


def _moved(exp: AluExp, shape: Shape, op: str, arg: Any, new_shape: Shape) -> AluExp:
    """`exp` (over `shape`) seen through one movement: each read at the value's own indices takes
    the movement into its ShapeTracker; every other use of an index is rewritten."""
    old, new = indices(shape), indices(new_shape)
    old_of_new, valid = _index_map(shape, op, arg, new)

    def leaf(read: AluExp) -> AluExp:
        gid, st = read.arg
        return AluExp.global_view(read.dtype, gid, getattr(st, op)(arg), new)

    out = _remap(exp, old, old_of_new, leaf)
    if valid is None or (exp.op == AluOp.GlobalView and exp.src == old):
        return out  # no padding, or a single read whose view already masks it
    return AluExp.where(valid, out, AluExp.const(out.dtype, 0))


def _index_map(
    shape: Shape, op: str, arg: Any, new: tuple[AluExp, ...]
) -> tuple[list[AluExp], AluExp | None]:
    """The old indices as expressions in the new ones, and (for a pad) where the new ones are valid."""
    if op == "permute":
        old: list[AluExp] = [AluExp.i32(0)] * len(shape)
        for at, a in enumerate(arg):
            old[a] = new[at]
        return old, None
    if op == "expand":
        return [AluExp.i32(0) if s == 1 and n != 1 else i for s, n, i in zip(shape, arg, new)], None
    if op == "shrink":
        return [i + AluExp.i32(lo) if lo else i for (lo, _), i in zip(arg, new)], None
    if op == "flip":
        return [AluExp.i32(s - 1) - i if f else i for s, f, i in zip(shape, arg, new)], None
    if op == "pad":
        valid = AluExp.bool_(True)
        old = []
        for (b, _), s, i in zip(arg, shape, new):
            old.append(i - AluExp.i32(b) if b else i)
            if b:
                valid = valid * AluExp.cmplt(i, AluExp.i32(b)).not_()
            valid = valid * AluExp.cmplt(i, AluExp.i32(b + s))
        return old, valid.simplify()
    assert op == "reshape", op
    flat = AluExp.i32(0)
    for n, i in zip(arg, new):
        flat = flat * AluExp.i32(n) + i
    return [e.simplify() for e in unravel_alu(shape, flat.simplify())] if shape else [], None
