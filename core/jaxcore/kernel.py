"""Kernel and Reduction: one output buffer computed from `nargs` inputs, optionally reduced.

A kernel's `exp` computes output element `gidx` (or, with a reduction, item `(gidx, ridx)`
of a single reduced axis). The reduction folds items with Add/Mul/Min/Max from its identity
and then applies a fused `epilogue` written in `acc`, which may also read `gidx` and globals.
float16 sums accumulate in float32 and round once, in the epilogue.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, TypeVar

from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar
from jaxcore.dtype import INT32_MAX, INT32_MIN, UINT32_MAX, DType, byte_width, is_float

_IDENTITY: dict[tuple[AluOp, str], float] = {
    (AluOp.Add, "bool"): 0,
    (AluOp.Mul, "bool"): 1,
    (AluOp.Min, "bool"): 1,
    (AluOp.Max, "bool"): 0,
    (AluOp.Add, "int"): 0,
    (AluOp.Mul, "int"): 1,
    (AluOp.Add, "float"): 0.0,
    (AluOp.Mul, "float"): 1.0,
    (AluOp.Min, "float"): math.inf,
    (AluOp.Max, "float"): -math.inf,
}


K = TypeVar("K")
V = TypeVar("V")


class _Memo(Generic[K, V]):
    """A bounded map from structural keys to what was derived from them, shared by every thread.

    A hit is one dict lookup (atomic under the GIL); inserts take a lock and drop the oldest
    entries past `capacity` (first in, first out: a hit does not refresh). The values are
    immutable, so a thread that loses a race to insert simply computed the same thing twice."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._map: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._map.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._map[key] = value
            while len(self._map) > self.capacity:
                del self._map[next(iter(self._map))]

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        with self._lock:
            self._map.clear()


@dataclass(frozen=True)
class _ExpFacts:
    """What building a kernel derives from an expression: the simplified form and what the checks
    need, so that a rebuild with an equal tree skips the simplifier and every walk. Keyed by the
    unsimplified tree's digest, which each node makes as it is built (so the key costs nothing)."""

    exp: AluExp  # simplified
    raw_variables: frozenset[tuple[str, DType]]  # (name, dtype) of the Variables before simplifying
    variables: frozenset[str]  # names of the Variables the simplified form still reads
    gids: tuple[int, int]  # (lowest, highest) gid the simplified form reads; (0, -1) when none

    @staticmethod
    def of(exp: AluExp) -> _ExpFacts:
        hit = _FACTS.get(exp.key())
        if hit is None:
            raw = frozenset((v.arg, v.dtype) for v in exp.collect(lambda n: n.op == AluOp.Variable))
            simple = exp.simplify()
            names, gids = set(), []
            for node in simple.nodes():
                if node.op == AluOp.Variable:
                    names.add(node.arg)
                elif node.op in (AluOp.GlobalIndex, AluOp.GlobalView):
                    gids.append(node.arg[0])
            span = (min(gids), max(gids)) if gids else (0, -1)
            hit = _ExpFacts(simple, raw, frozenset(names), span)
            _FACTS.put(exp.key(), hit)
        return hit


# Kernels a frontend builds again and again (every training step) cost a dict lookup after the
# first time. 4096 expressions of a few dozen nodes each: a few MB at most.
_FACTS: _Memo[str, _ExpFacts] = _Memo(4096)


def _check_count(what: str, value: object) -> None:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative int, got {value!r}")


_FOLD_ITEMS = 256  # a reduction of items that read nothing is folded at prepare up to this size


def _varies(n: AluExp) -> bool:
    """A node whose value differs between outputs or runs: a read, an index but the reduction's."""
    if n.op in (AluOp.GlobalIndex, AluOp.GlobalView):
        return True
    if n.op == AluOp.Variable:
        return n.arg != "ridx"
    return n.op == AluOp.Special and n.arg[0] != "ridx"


@dataclass(frozen=True, eq=False, init=False)
class Reduction:
    """A fold over one axis of `size` items, then `epilogue` (an expression in `acc`; None is `$acc`)."""

    dtype: DType
    op: AluOp
    size: int
    epilogue: AluExp  # always an expression once made: the constructor turns None into `$acc`
    _gids: tuple[int, int] = field(default=(0, -1), init=False, repr=False, compare=False)  # gids read

    def __init__(self, dtype: DType, op: AluOp, size: int, epilogue: AluExp | None = None) -> None:
        dtype, op = DType(dtype), AluOp(op)
        if op not in AluGroup.Reduce:
            raise TypeError(f"Unsupported reduction: {op}")
        _check_count("reduction size", size)
        object.__setattr__(self, "size", size)
        if epilogue is None:
            epilogue = AluVar.acc(dtype)
        if dtype == DType.float16 and op == AluOp.Add:
            # Sum half floats in float32; round to half once, in the epilogue.
            acc32 = AluVar.acc(DType.float32)
            epilogue = epilogue.substitute({"acc": AluExp.cast(DType.float16, acc32)})
            dtype = DType.float32
        facts = _ExpFacts.of(epilogue)
        for name, vdtype in sorted(facts.raw_variables):
            if name not in ("acc", "gidx"):
                raise ValueError(f"epilogue may use only $acc and $gidx, found ${name}")
            if name == "acc" and vdtype != dtype:
                raise TypeError(f"epilogue reads $acc as {vdtype}, but the reduction accumulates {dtype}")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "epilogue", facts.exp)
        object.__setattr__(self, "_gids", facts.gids)
        _ = self.identity

    @property
    def identity(self) -> float | int:
        d = self.dtype
        if d == DType.int32 and self.op in (AluOp.Min, AluOp.Max):
            return INT32_MAX if self.op == AluOp.Min else INT32_MIN
        if d == DType.uint32 and self.op in (AluOp.Min, AluOp.Max):
            return UINT32_MAX if self.op == AluOp.Min else 0
        kind = "float" if is_float(d) else ("bool" if d == DType.bool else "int")
        try:
            return _IDENTITY[(self.op, kind)]
        except KeyError:
            raise TypeError(f"Unsupported reduction: {self.op} {d}") from None

    def key(self) -> str:
        return f"{self.dtype}|{self.op}|{self.size}|{self.epilogue.key()}"

    def __str__(self) -> str:
        return f"{self.op}{{{self.size}}} -> {self.epilogue}"


@dataclass(frozen=True, eq=False)
class Kernel:
    """`size` output elements of one buffer, read from `nargs` input buffers (gids 0..nargs-1)."""

    nargs: int
    size: int
    exp: AluExp
    reduction: Reduction | None = None

    def __post_init__(self) -> None:
        _check_count("nargs", self.nargs)
        _check_count("size", self.size)
        if not isinstance(self.exp, AluExp):
            raise TypeError(f"exp must be an AluExp, got {type(self.exp).__name__}")
        if self.reduction is not None and not isinstance(self.reduction, Reduction):
            raise TypeError(f"reduction must be a Reduction, got {type(self.reduction).__name__}")
        facts = _ExpFacts.of(self.exp)
        object.__setattr__(self, "exp", facts.exp)
        allowed = {"gidx", "ridx"} if self.reduction else {"gidx"}
        if not facts.variables <= allowed:
            bad = sorted(facts.variables - allowed)[0]
            raise ValueError(f"kernel exp may use only {sorted(allowed)} variables, found ${bad}")
        lo, hi = facts.gids
        if self.reduction is not None:
            lo, hi = min(lo, self.reduction._gids[0]), max(hi, self.reduction._gids[1])
        if lo < 0 or hi >= self.nargs:
            raise ValueError(f"kernel reads input {lo if lo < 0 else hi} but has nargs={self.nargs}")

    @property
    def dtype(self) -> DType:
        return self.reduction.epilogue.dtype if self.reduction else self.exp.dtype

    def live(self) -> Kernel:
        """The kernel a device compiles: this one, or the epilogue alone as an elementwise kernel
        (same outputs) when the epilogue never reads `acc`, or reads an `acc` the fold of items
        that read nothing makes a constant (folded here, by the contract). NVIDIA's GLSL compiler
        crashed (SIGSEGV in the first draw) on a reduction loop it found dead or constant."""
        red = self.reduction
        if red is None:
            return self
        if not any(n.op == AluOp.Variable and n.arg == "acc" for n in red.epilogue.nodes()):
            return Kernel(self.nargs, self.size, red.epilogue)
        if red.size > _FOLD_ITEMS or self.exp.some(_varies):
            return self
        acc: float | int = red.identity
        for r in range(red.size):
            item = AluExp.const(red.dtype, self.exp.evaluate({"ridx": r}))
            acc = AluExp(red.op, red.dtype, (AluExp.const(red.dtype, acc), item)).evaluate({})
        return Kernel(self.nargs, self.size, red.epilogue.substitute({"acc": AluExp.const(red.dtype, acc)}))

    @property
    def bytes(self) -> int:
        return self.size * byte_width(self.dtype)

    def nodes(self) -> Iterator[AluExp]:
        yield from self.exp.nodes()
        if self.reduction:
            yield from self.reduction.epilogue.nodes()

    def key(self) -> str:
        """A structural digest, stable across processes (a compile-cache key)."""
        k = self.__dict__.get("_key")
        if k is None:
            red = self.reduction.key() if self.reduction else "-"
            text = f"{self.nargs}|{self.size}|{self.exp.key()}|{red}"
            k = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            object.__setattr__(self, "_key", k)
        return k

    def __hash__(self) -> int:
        return int(self.key()[:15], 16)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kernel) and self.key() == other.key()

    def input_bytes(self) -> list[int]:
        """The fewest bytes each input buffer must hold for every read to be in bounds."""
        return list(self._input_bytes)

    @cached_property
    def input_dtypes(self) -> tuple[DType | None, ...]:
        """The element dtype of each input, from the GlobalIndex/GlobalView nodes that read it
        (the item expression and the epilogue); None for an input the kernel never reads.

        A backend allocates, binds or declares its inputs by dtype (a typed storage binding, a
        texture format), so it should not have to walk the tree for that. The IR gives a buffer
        one element dtype; a kernel that reads one input as two dtypes raises ValueError here."""
        found: list[DType | None] = [None] * self.nargs
        for node in self.nodes():
            if node.op not in (AluOp.GlobalIndex, AluOp.GlobalView):
                continue
            gid = node.arg[0]
            seen = found[gid]
            if seen is not None and seen != node.dtype:
                raise ValueError(f"kernel reads input {gid} as both {seen} and {node.dtype}")
            found[gid] = node.dtype
        return tuple(found)

    @cached_property
    def _input_bytes(self) -> tuple[int, ...]:
        need = [0] * self.nargs
        for node in self.nodes():
            if node.op == AluOp.GlobalIndex:
                gid, length = node.arg
                need[gid] = max(need[gid], length * byte_width(node.dtype))
            elif node.op == AluOp.GlobalView:
                gid, st = node.arg
                need[gid] = max(need[gid], st.views[0].data_range()[1] * byte_width(node.dtype))
        return tuple(need)

    def __str__(self) -> str:
        lines = [f"{{ exp = {self.exp}", f"  size = {self.size}"]
        if self.reduction:
            lines.append(f"  reduction = {self.reduction}")
        lines[-1] += " }"
        return "\n".join(lines)
