"""The contract's definition of a kernel, lane by lane: the yardstick for the cpu backend's fast paths."""

from __future__ import annotations

import numpy as np

from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import to_numpy
from jaxcore.kernel import Kernel


def scalar_reference(kernel: Kernel, inputs: list[np.ndarray]) -> np.ndarray:
    """Per-lane `AluExp.evaluate`, folding items sequentially: the contract's definition."""

    def read(gid: int, i: int) -> float | int:
        buf = inputs[gid].reshape(-1)
        if not 0 <= i < buf.size:
            raise IndexError(f"reference read {i} of {buf.size}")
        return buf[i]

    out = np.zeros(kernel.size, to_numpy(kernel.dtype))
    red = kernel.reduction
    fold = {AluOp.Add: AluExp.add, AluOp.Mul: AluExp.mul, AluOp.Min: AluExp.min, AluOp.Max: AluExp.max}
    for g in range(kernel.size):
        if red is None:
            out[g] = kernel.exp.evaluate({"gidx": g}, read)
            continue
        acc = AluExp.const(red.dtype, red.identity)
        for r in range(red.size):
            item = AluExp.cast(red.dtype, kernel.exp).evaluate({"gidx": g, "ridx": r}, read)
            acc = AluExp.const(red.dtype, fold[red.op](acc, AluExp.const(red.dtype, item)).evaluate())
        out[g] = red.epilogue.evaluate({"acc": acc.arg, "gidx": g}, read)
    return out
