"""Runs a tuned kernel over numpy arrays, a block of lanes at a time.

Lanes are output elements (elementwise kernels) or an (outputs × reduction items) grid.
Reads whose flat index is affine in `gidx`/`ridx` become strided views of the buffer, so the
common kernels (elementwise maps, row reductions) run at numpy speed without gathers; any
other index is evaluated and gathered, with bounds checked on the lanes that are live.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import DType, to_numpy
from jaxcore.interpret import Interpreter, shared_nodes
from jaxcore.kernel import Kernel
from jaxcore.tuner import TuneResult, tune_nullopt

# Lanes per block: large enough to amortise Python, small enough to stay in cache.
BLOCK_LANES = 1 << 18

Affine = tuple[int, int, int]  # index = c + g*gidx + r*ridx


@dataclass(frozen=True)
class KernelPlan:
    kernel: Kernel
    tuned: TuneResult
    affine: dict[str, Affine]
    shared: frozenset[str]


def plan_kernel(kernel: Kernel) -> KernelPlan:
    tuned = tune_nullopt(kernel)
    affine: dict[str, Affine] = {}
    for exp in (tuned.exp, tuned.epilogue):
        if exp is None:
            continue
        for node in exp.collect(lambda n: n.op == AluOp.GlobalIndex):
            a = _affine(node.src[0])
            if a is not None:
                affine[node.key()] = a
    return KernelPlan(kernel, tuned, affine, shared_nodes(tuned.exp, tuned.epilogue))


def _affine(e: AluExp) -> Affine | None:
    """(c, g, r) with e == c + g*gidx + r*ridx, or None when e is not of that form."""
    if e.op == AluOp.Const:
        return (int(e.arg), 0, 0)
    if e.op == AluOp.Special:
        return {"gidx": (0, 1, 0), "ridx": (0, 0, 1)}.get(e.arg[0])
    if e.op in (AluOp.Add, AluOp.Sub):
        a, b = _affine(e.src[0]), _affine(e.src[1])
        if a is None or b is None:
            return None
        s = 1 if e.op == AluOp.Add else -1
        return (a[0] + s * b[0], a[1] + s * b[1], a[2] + s * b[2])
    if e.op == AluOp.Mul:
        a, b = _affine(e.src[0]), _affine(e.src[1])
        if a is None or b is None:
            return None
        if a[1:] == (0, 0):
            a, b = b, a
        if b[1:] != (0, 0):
            return None
        k = b[0]
        return (a[0] * k, a[1] * k, a[2] * k)
    return None


class _Lanes(Mapping[str, np.ndarray]):
    """gidx/ridx (and acc) for one block, built only when an expression needs them."""

    def __init__(self, g: tuple[int, int], r: tuple[int, int] | None, extra: dict[str, np.ndarray]) -> None:
        self.g, self.r, self.extra = g, r, extra
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.extra:
            return self.extra[name]
        hit = self._cache.get(name)
        if hit is None:
            if name == "gidx":
                hit = np.arange(*self.g, dtype=np.int32)
                if self.r is not None:
                    hit = hit[:, None]
            elif name == "ridx" and self.r is not None:
                hit = np.arange(*self.r, dtype=np.int32)[None, :]
            else:
                raise KeyError(name)
            self._cache[name] = hit
        return hit

    def __iter__(self) -> Iterator[str]:
        yield from ("gidx", "ridx", *self.extra)

    def __len__(self) -> int:
        return 2 + len(self.extra)

    def __contains__(self, name: object) -> bool:
        return name in ("gidx", "ridx") or name in self.extra


class _BlockInterpreter(Interpreter):
    def __init__(self, plan: KernelPlan, lanes: _Lanes, inputs: list[np.ndarray]) -> None:
        super().__init__(lanes, self._gather, plan.shared)
        self.plan, self.lanes, self.inputs = plan, lanes, inputs

    def _typed(self, node: AluExp) -> np.ndarray:
        raw = self.inputs[node.arg[0]]
        np_dtype = to_numpy(node.dtype)
        n = raw.size // np_dtype.itemsize
        return raw[: n * np_dtype.itemsize].view(np_dtype)

    def _eval(self, e: AluExp, mask: np.ndarray | None) -> np.ndarray:
        if e.op == AluOp.GlobalIndex:
            aff = self.plan.affine.get(e.key())
            if aff is not None:
                view = self._strided(e, aff)
                if view is not None:
                    return view
        return super()._eval(e, mask)

    def _strided(self, e: AluExp, aff: Affine) -> np.ndarray | None:
        buf = self._typed(e)
        c, gs, rs = aff
        (g0, g1), r = self.lanes.g, self.lanes.r
        r0, r1 = r if r is not None else (0, 1)
        first = c + gs * g0 + rs * r0
        corners = [first + gs * dg + rs * dr for dg in (0, g1 - g0 - 1) for dr in (0, r1 - r0 - 1)]
        if g1 <= g0 or r1 <= r0 or min(corners) < 0 or max(corners) >= buf.size:
            return None
        item = buf.itemsize
        base = buf[first:]
        if r is None:
            return as_strided(base, (g1 - g0,), (gs * item,), writeable=False)
        return as_strided(base, (g1 - g0, r1 - r0), (gs * item, rs * item), writeable=False)

    def _gather(self, node: AluExp, index: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        buf = self._typed(node)
        idx = np.asarray(index).astype(np.int64, copy=False)
        if mask is not None:
            idx = np.where(mask, idx, 0)
        if idx.size and (idx.min() < 0 or idx.max() >= buf.size):
            bad = int(idx[(idx < 0) | (idx >= buf.size)].flat[0])
            raise IndexError(
                f"kernel reads input {node.arg[0]} at element {bad}, outside its {buf.size} elements"
            )
        return buf[idx]


_REDUCE = {AluOp.Add: np.add, AluOp.Mul: np.multiply, AluOp.Min: np.minimum, AluOp.Max: np.maximum}
_REDUCE_BOOL = {AluOp.Add: np.maximum, AluOp.Max: np.maximum, AluOp.Mul: np.minimum, AluOp.Min: np.minimum}


def run_kernel(plan: KernelPlan, inputs: list[np.ndarray], output: np.ndarray) -> None:
    kernel = plan.kernel
    out = output.view(to_numpy(kernel.dtype))
    if kernel.reduction is None:
        for g0 in range(0, kernel.size, BLOCK_LANES):
            g1 = min(kernel.size, g0 + BLOCK_LANES)
            value = _BlockInterpreter(plan, _Lanes((g0, g1), None, {}), inputs).run(plan.tuned.exp)
            out[g0:g1] = np.broadcast_to(value, (g1 - g0,))
        return
    red = kernel.reduction
    acc_dtype = to_numpy(red.dtype)
    ufunc = (_REDUCE_BOOL if red.dtype == DType.bool else _REDUCE)[red.op]
    rows = max(1, min(kernel.size, BLOCK_LANES // max(1, red.size)))
    cols = max(1, min(red.size, BLOCK_LANES // rows))
    for g0 in range(0, kernel.size, rows):
        g1 = min(kernel.size, g0 + rows)
        acc = np.full(g1 - g0, red.identity, dtype=acc_dtype)
        for r0 in range(0, red.size, cols):
            r1 = min(red.size, r0 + cols)
            value = _BlockInterpreter(plan, _Lanes((g0, g1), (r0, r1), {}), inputs).run(plan.tuned.exp)
            value = np.broadcast_to(value, (g1 - g0, r1 - r0))
            with np.errstate(all="ignore"):
                ufunc(acc, ufunc.reduce(value, axis=1, dtype=acc_dtype), out=acc)
        lanes = _Lanes((g0, g1), None, {"acc": acc})
        value = _BlockInterpreter(plan, lanes, inputs).run(plan.tuned.epilogue)
        out[g0:g1] = np.broadcast_to(value, (g1 - g0,))
