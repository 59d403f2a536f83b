"""Row programs: a routine over rows (Softmax) as one GPU pass, a workgroup a row.

The kernels a device without one runs (`jaxcore.canonical.softmax_kernels`) take the row through
memory three times and compute `exp` twice; here a workgroup folds the row's max, then the sum of
`exp(x - max)`, then writes every output, each fold leaving its result in every thread.

Two layouts, both statements of `jaxcore.program` rendered by any GPU dialect:

- *held*: where the row splits evenly into at most `MAX_HELD` vectors (or elements) a thread, each
  thread loads its share once and keeps it, and its `exp`s, in registers: one read of memory, one
  `exp` an element, one write;
- *strided*: otherwise, the threads stride over the row three times (a read from memory, then
  two from cache), computing `exp` in the second and third.

Values are the kernels', up to the order of the sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import DType
from jaxcore.kernel import Reduction
from jaxcore.legalize import TargetTraits, legalize
from jaxcore.program import (
    LANES,
    Combine,
    Define,
    GpuTarget,
    Let,
    LocalArray,
    LocalIndex,
    Param,
    Program,
    Stmt,
    Store,
    StridedLoop,
    VecLoad,
    VecStore,
    WorkgroupFold,
    WorkgroupIndex,
    combine_function,
    fold_grid,
    uses_subgroups,
)

MAX_HELD = 8  # vectors (or elements) a thread holds in the held layout: 32 floats at most

F32 = DType.float32


def _held_threads(trips: int, limit: int) -> int | None:
    """The most threads (a power of two, 32 to `limit`) that split `trips` evenly, each at most
    `MAX_HELD` of them; None when none does."""
    threads = 1 << (limit.bit_length() - 1)
    while threads >= 32:
        if trips % threads == 0 and trips // threads <= MAX_HELD:
            return threads
        threads //= 2
    return None


def row_softmax(
    target: GpuTarget, traits: TargetTraits, rows: int, cols: int, log: bool = False, name: str = "softmax"
) -> Program:
    """Softmax (log-softmax with `log`) over `rows` rows of `cols` float32 (Routines.Softmax):
    `exp(x - max) * (1 / sum)` or `(x - max) - log(sum)`, one workgroup a row."""
    vec = cols % 4 == 0 and cols >= 8 and F32 in target.vector_dtypes
    lanes = 4 if vec else 1
    trips = cols // lanes
    limit = min(256, target.max_workgroup_size)
    held = _held_threads(trips, limit)
    threads = held or min(limit, max(32, 1 << max(trips - 1, 0).bit_length()))
    row = AluExp.special(DType.int32, "gidx", rows)
    m, total = AluExp.variable(F32, "jc_m"), AluExp.variable(F32, "jc_s")
    scale = AluExp.variable(F32, "jc_scale")
    shape = _Row(rows * cols, lanes, trips, threads, row)
    body = shape.held_body if held else shape.strided_body
    stmts = body(traits, log, m, scale)
    folds = (
        WorkgroupIndex("gidx", rows),
        *stmts[0],
        _fold(target, "jc_m", "jc_max", AluOp.Max, -math.inf, threads),
        Define("jc_s", AluExp.const(F32, 0.0)),
        *stmts[1],
        _fold(target, "jc_s", "jc_sum", AluOp.Add, 0.0, threads),
        Let("jc_scale", legalize(AluExp.log(total) if log else AluExp.reciprocal(total), traits)),
        *stmts[2],
    )
    n = rows * cols
    params = (Param("in0", 0, (F32,), n, False, lanes=lanes), Param("out0", 0, (F32,), n, True, lanes=lanes))
    fns = (
        combine_function(Reduction(F32, AluOp.Max, cols), traits, "jc_max"),
        combine_function(Reduction(F32, AluOp.Add, cols), traits, "jc_sum"),
    )
    arrays = (LocalArray("jc_pm", F32, threads), LocalArray("jc_ps", F32, threads))
    return Program(name, params, folds, threads, fold_grid(rows, target.max_workgroups_per_dim), fns, arrays)


def _fold(target: GpuTarget, acc: str, fn: str, op: AluOp, identity: float, threads: int) -> WorkgroupFold:
    """A fold of its own array (the program folds twice), by subgroups where the target may."""
    sg = uses_subgroups(target, Reduction(F32, op, 1), threads)
    return WorkgroupFold(acc, fn, op, F32, AluExp.const(F32, identity), f"jc_p{acc[-1]}", threads, sg)


_Phases = tuple[Sequence[Stmt], Sequence[Stmt], Sequence[Stmt]]


@dataclass(frozen=True)
class _Row:
    """A row's layout: `n` elements in all, `lanes` a vector, `trips` vectors a row, `threads`
    threads; `row` is the workgroup's row. Its bodies give the statements before the max fold
    (the loads and the max), before the sum fold (the sum) and after (the stores)."""

    n: int
    lanes: int
    trips: int
    threads: int
    row: AluExp

    def _at(self, j: AluExp) -> AluExp:
        """Vector (or element) `j` of the row, as an index of the buffer."""
        return self.row * AluExp.i32(self.trips) + j

    def _load(self, name: str, j: AluExp) -> tuple[Stmt, list[AluExp]]:
        if self.lanes == 4:
            load: Stmt = VecLoad(name, "in0", (self.row * AluExp.i32(self.trips), j))
            return load, [AluExp.variable(F32, f"{name}.{LANES[u]}") for u in range(4)]
        return Let(name, AluExp.global_index(F32, 0, self.n, self._at(j))), [AluExp.variable(F32, name)]

    def _store(self, j: AluExp, values: list[AluExp]) -> Stmt:
        return (
            VecStore("out0", self._at(j), tuple(values))
            if self.lanes == 4
            else Store("out0", self._at(j), values[0])
        )

    def held_body(self, traits: TargetTraits, log: bool, m: AluExp, scale: AluExp) -> _Phases:
        """Each thread loads vectors `lid + t * threads` once and keeps them, and their exps."""
        lid = AluExp.variable(DType.int32, "jc_l")
        js = [lid + AluExp.i32(t * self.threads) for t in range(self.trips // self.threads)]
        loads: list[Stmt] = []
        xs: list[list[AluExp]] = []
        for t, j in enumerate(js):
            load, lanes = self._load(f"jc_x{t}", j)
            loads.append(load)
            xs.append(lanes)
        flat = [x for lanes in xs for x in lanes]
        first: list[Stmt] = [LocalIndex("jc_l"), *loads, Define("jc_m", AluExp.const(F32, -math.inf))]
        first.append(Combine("jc_m", "jc_max", tuple(flat)))
        exps = [Let(f"jc_e{i}", legalize(AluExp.exp(x - m), traits)) for i, x in enumerate(flat)]
        es = [AluExp.variable(F32, f"jc_e{i}") for i in range(len(flat))]
        second: list[Stmt] = [*exps, Combine("jc_s", "jc_sum", tuple(es))]
        outs = (
            [legalize(x - m - scale, traits) for x in flat]
            if log
            else [legalize(e * scale, traits) for e in es]
        )
        k = self.lanes
        third = [self._store(j, outs[t * k : (t + 1) * k]) for t, j in enumerate(js)]
        return first, second, third

    def strided_body(self, traits: TargetTraits, log: bool, m: AluExp, scale: AluExp) -> _Phases:
        """The threads stride over the row for the max, again for the sum, again for the stores."""
        j = AluExp.special(DType.int32, "jc_j", self.trips)
        load, xs = self._load("jc_x0", j)

        def over(*stmts: Stmt) -> StridedLoop:
            return StridedLoop("jc_j", self.trips, self.threads, (load, *stmts))

        exps = tuple(legalize(AluExp.exp(x - m), traits) for x in xs)
        outs = [legalize(x - m - scale if log else AluExp.exp(x - m) * scale, traits) for x in xs]
        first = (Define("jc_m", AluExp.const(F32, -math.inf)), over(Combine("jc_m", "jc_max", tuple(xs))))
        return first, (over(Combine("jc_s", "jc_sum", exps)),), (over(self._store(j, outs)),)
