"""Tuning: how a kernel's iteration space maps onto threads, loops and registers.

`tune_nullopt` is the plan every backend starts from: one thread per output element, a plain
loop over the reduction, with global views lowered to flat (possibly masked) reads.
Device-specific tuners live in their plugins and return the same `TuneResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcore.alu import AluExp
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel


@dataclass(frozen=True)
class TuneSize:
    """groups: threads sharing one reduction; reduce: loop trips; unroll: items per trip;
    upcast: outputs per thread."""

    groups: int = 1
    reduce: int = 0
    unroll: int = 1
    upcast: int = 1


@dataclass(frozen=True)
class TuneResult:
    exp: AluExp
    epilogue: AluExp | None
    output_idx_exp: AluExp
    thread_count: int
    size: TuneSize


def tune_nullopt(kernel: Kernel) -> TuneResult:
    """No tuning: Special `gidx` over outputs, Special `ridx` over the reduction."""
    gidx = AluExp.special(DType.int32, "gidx", kernel.size)
    subs = {"gidx": gidx}
    exp = kernel.exp
    red = kernel.reduction
    if red is not None:
        subs["ridx"] = AluExp.special(DType.int32, "ridx", red.size)
        exp = AluExp.cast(red.dtype, exp)
    epilogue = None
    if red is not None:
        epilogue = red.epilogue.substitute({"gidx": gidx}).rewrite_global_views().simplify()
    return TuneResult(
        exp=exp.substitute(subs).rewrite_global_views().simplify(),
        epilogue=epilogue,
        output_idx_exp=gidx,
        thread_count=kernel.size,
        size=TuneSize(reduce=red.size if red else 0),
    )
