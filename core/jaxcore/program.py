"""Statement programs: a kernel's whole body as data, built once in the core, rendered by any dialect.

The expression renderer (`jaxcore.cstyle`) spells one value; every plugin used to write the rest of
a kernel (loops over outputs, the reduction loop, accumulators, stores) by hand, per language. Here
that skeleton is a small tree of frozen statements, built from a `Kernel` and the tuner's
`TuneResult` by device-neutral *strategies*, with every expression already legalized for the
target's `TargetTraits`. `render_program` walks it through a `CStyleLanguage`, whose statement
hooks (`render_kernel`, `render_grid`, `render_loop`, `render_define`, `render_assign`,
`render_store`) are the few spellings a dialect overrides.

Statements, serial:

- `Grid(var, size, body)`: the body once per output index `var` in `[0, size)`, trips independent;
- `Loop(var, size, body, step)`: a serial loop, `var` from 0 below `size` by `step`;
- `Let(name, value)`: a named value; later expressions read it as `Variable(name)`;
- `Define(name, value)`: a mutable scalar (an accumulator) with its initial value;
- `Accumulate(name, op, value)`: `name = value`, where `value` is the legalized `op(name, item)`;
- `Combine(name, fn, values)`: fold values into `name` through a program `Function` (a GPU
  strategy's `jc_combine`, so a long legalized fold is spelled once);
- `Store(param, index, value)`: element `index` of the output parameter `param`.

Statements, GPU (a program then has a workgroup size `local` and a `grid` of workgroups):

- `ThreadIndex(var, size, local)`, `WorkgroupIndex(var, size, parts, part_var)`: the flat thread or
  workgroup index (threads past the size stop); `LocalIndex(var)`: the thread's within its group;
- `VecLoad`, `VecStore`: four lanes of a parameter at once (`Param.lanes`);
- `StridedLoop`: the threads of a workgroup (and the workgroups of an output) striding together;
- `WorkgroupFold` over a `LocalArray` (a barrier tree, or subgroup ops), then `FirstThread`;
- `StorePartial`, `CombineLoad`: a multi-pass program's partials through a scratch `Param`.

`SERIAL_STRATEGIES` serve a C-like host; `gpu_strategies(GpuTarget)` serve a GPU (elementwise,
vec4 lanes, per-thread reduction with unroll and upcast, workgroup fold, split two-pass). A
strategy is any `Strategy` callable, tried in order by `build_program` / `build_passes`; a new
statement kind is one more dataclass in `Stmt` and one more branch in `_render_stmt` calling a new
language hook. Hook spellings deliberately mirror what the hand-written WGSL had, so the move was
text-identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial

from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.cstyle import CStyleLanguage, ExpRenderer, strip_parens
from jaxcore.dtype import DType, byte_width, is_float
from jaxcore.kernel import Kernel, Reduction
from jaxcore.legalize import TargetTraits, for_kernel, legalize, opaque
from jaxcore.tuner import TuneResult


@dataclass(frozen=True)
class Param:
    """A buffer of the program: input `index` (named `in{index}`) or the output (`out0`).

    `dtypes` are the element dtypes it is read as (an input may be read as two: a dialect whose
    bindings are typed rejects that); `elements` how many elements of `dtypes[0]` it must hold.
    """

    name: str
    index: int
    dtypes: tuple[DType, ...]
    elements: int
    output: bool = False
    lanes: int = 1  # elements a vector load or store of it moves (`VecLoad`, `VecStore`)
    scratch: bool = False  # a buffer the passes of one kernel share (`index`: its number)

    @property
    def dtype(self) -> DType:
        return self.dtypes[0]


@dataclass(frozen=True)
class Let:
    name: str
    value: AluExp


@dataclass(frozen=True)
class Define:
    name: str
    value: AluExp


@dataclass(frozen=True)
class Accumulate:
    name: str
    op: AluOp
    value: AluExp


@dataclass(frozen=True)
class Store:
    param: str
    index: AluExp
    value: AluExp


@dataclass(frozen=True)
class Loop:
    var: str
    size: int
    body: tuple[Stmt, ...]
    step: int = 1


@dataclass(frozen=True)
class Grid:
    var: str
    size: int
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class ThreadIndex:
    """`var`: this thread's index, `local` threads a workgroup; a thread at or past `size` stops
    (a GPU's flat grid; the statements after it run once per index, not nested)."""

    var: str
    size: int
    local: int


@dataclass(frozen=True)
class LocalIndex:
    """`var`: this thread's index within its workgroup, 0 to `local - 1` (a program whose
    threads each hold fixed elements of a row: `jaxcore.row_program`)."""

    var: str


@dataclass(frozen=True)
class VecLoad:
    """`name`: vector number `sum(terms)` of input `param` (its `lanes` elements); an expression
    reads lane u as the Variable `name.xyzw[u]`. The index is a sum of terms (a row's start and
    the vector in the row), each spelled on its own."""

    name: str
    param: str
    terms: tuple[AluExp, ...]


@dataclass(frozen=True)
class VecStore:
    """Vector number `index` of the output `param` set to `values`, one a lane."""

    param: str
    index: AluExp
    values: tuple[AluExp, ...]


@dataclass(frozen=True)
class Function:
    """A helper function of the program: `body` over the Variables `params` (a GPU strategy's
    fold, `jc_combine`), rendered before the entry point in the program's scope of names."""

    name: str
    params: tuple[tuple[str, DType], ...]
    body: AluExp


@dataclass(frozen=True)
class Combine:
    """`name = fn(name, v)` for each of `values` in order: fold them into the accumulator `name`
    through the program's Function `fn` (rendered in the enclosing scope, so the items of one trip
    share their lets; all values are computed before the first fold)."""

    name: str
    fn: str
    values: tuple[AluExp, ...]


@dataclass(frozen=True)
class WorkgroupIndex:
    """`var`: this workgroup's output, `parts` workgroups an output (`part_var`: which of them);
    workgroups past `size` outputs' worth stop."""

    var: str
    size: int
    parts: int = 1
    part_var: str = ""


@dataclass(frozen=True)
class StridedLoop:
    """The `threads` threads of a workgroup (and the `parts` workgroups of an output, as
    `WorkgroupIndex` numbers them) stride together over `var` below `size`: thread t of part p
    starts at `p * threads + t` and steps by `parts * threads`, so each trip reads one span."""

    var: str
    size: int
    threads: int
    body: tuple[Stmt, ...]
    parts: int = 1
    part_var: str = ""


@dataclass(frozen=True)
class LocalArray:
    """Workgroup-shared memory of the program: `size` elements of `dtype`."""

    name: str
    dtype: DType
    size: int


@dataclass(frozen=True)
class WorkgroupFold:
    """Every thread's accumulator `name` folded by `op` (the Function `fn`) across the `threads`
    threads of the workgroup, through the local array `array`; afterwards every thread holds the
    result (`FirstThread` picks one to store it). With `subgroups`, subgroup ops and one barrier;
    else a tree. A program that folds twice gives each fold its own array."""

    name: str
    fn: str
    op: AluOp
    dtype: DType
    identity: AluExp
    array: str
    threads: int
    subgroups: bool


@dataclass(frozen=True)
class FirstThread:
    """`body` run by the one thread that holds a `WorkgroupFold`'s result."""

    subgroups: bool
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class CombineLoad:
    """`name = fn(name, param[sum(terms)])`: fold a stored partial (element of the scratch
    buffer `param`, of `dtype`) into the accumulator; the index terms are spelled whole."""

    name: str
    fn: str
    param: str
    dtype: DType
    terms: tuple[AluExp, ...]


@dataclass(frozen=True)
class StorePartial:
    """The first thread after a `WorkgroupFold` stores the accumulator `name` (of `dtype`) at
    element `wg` (the flat workgroup index) of the scratch buffer `param`."""

    param: str
    name: str
    dtype: DType
    subgroups: bool


@dataclass(frozen=True)
class Assign:
    """`name = value` for a `Define`d scalar (a procedure's)."""

    name: str
    value: AluExp


@dataclass(frozen=True)
class If:
    cond: AluExp
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Return:
    value: AluExp


@dataclass(frozen=True)
class Break:
    """Leave the innermost `Loop`."""


Stmt = (
    Let
    | Assign
    | If
    | Return
    | Break
    | Define
    | Accumulate
    | Combine
    | Store
    | Loop
    | Grid
    | ThreadIndex
    | LocalIndex
    | VecLoad
    | VecStore
    | WorkgroupIndex
    | StridedLoop
    | WorkgroupFold
    | FirstThread
    | CombineLoad
    | StorePartial
)

LANES = "xyzw"


@dataclass(frozen=True)
class Program:
    """One entry point: its parameters (inputs in order, then the output) and its statements; a GPU
    program also its workgroup size and its grid of workgroups (x, y, z)."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    local: int = 1
    grid: tuple[int, int, int] = (1, 1, 1)
    functions: tuple[Function, ...] = ()
    locals: tuple[LocalArray, ...] = ()

    def statements(self) -> Iterator[Stmt]:
        """Every statement, nested ones included, in program order."""
        stack: list[Stmt] = list(reversed(self.body))
        while stack:
            s = stack.pop()
            yield s
            if isinstance(s, Loop | Grid | StridedLoop | FirstThread):
                stack.extend(reversed(s.body))

    def expressions(self) -> Iterator[AluExp]:
        for s in self.statements():
            yield from _own_exps(s)

    def dtypes(self) -> set[DType]:
        """Every dtype a node or a parameter of the program has (what the dialect must spell)."""
        out = {d for p in self.params for d in p.dtypes}
        for e in self.expressions():
            out |= {n.dtype for n in e.nodes()}
        return out


def _own_exps(s: Stmt) -> tuple[AluExp, ...]:
    if isinstance(s, Let | Define | Accumulate):
        return (s.value,)
    if isinstance(s, Combine):
        return s.values
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, VecLoad):
        return s.terms
    if isinstance(s, VecStore):
        return (s.index, *s.values)
    return ()


# ---- building: strategies ---------------------------------------------------------------------

# A strategy's program, or the passes of a multi-pass one (run in order, sharing scratch params).
Strategy = Callable[[Kernel, TuneResult, TargetTraits, str], "Program | tuple[Program, ...] | None"]


def _params(kernel: Kernel, *exps: AluExp) -> tuple[Param, ...]:
    """Inputs by gid with the dtypes the (lowered) expressions read them as, then the output."""
    seen: dict[int, list[DType]] = {}
    for e in exps:
        for n in e.nodes():
            if n.op == AluOp.GlobalIndex and n.dtype not in seen.setdefault(n.arg[0], []):
                seen[n.arg[0]].append(n.dtype)
    need = kernel.input_bytes()
    params = []
    for gid in range(kernel.nargs):
        dts = tuple(seen.get(gid, [DType.uint32]))
        params.append(Param(f"in{gid}", gid, dts, need[gid] // byte_width(dts[0]), False))
    params.append(Param("out0", 0, (kernel.dtype,), kernel.size, True))
    return tuple(params)


def _plain(tune: TuneResult) -> bool:
    s = tune.size
    return s.groups == 1 and s.split == 1 and s.upcast == 1


def elementwise(kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str) -> Program | None:
    """One trip of the grid per output: `out0[gidx] = exp`."""
    if kernel.reduction is not None or not _plain(tune):
        return None
    exp = legalize(tune.exp, traits)
    body: tuple[Stmt, ...] = (Store("out0", tune.output_idx_exp, exp),)
    return Program(name, _params(kernel, exp), (Grid("gidx", kernel.size, body),))


def _shift_ridx(exp: AluExp, u: int) -> AluExp:
    """`exp` at reduction item `ridx + u` (a trip of an unrolled loop)."""
    if u == 0:
        return exp

    def visit(n: AluExp) -> AluExp | None:
        return AluExp.add(n, AluExp.i32(u)) if n.op == AluOp.Special and n.arg[0] == "ridx" else None

    return exp.rewrite(visit)


def combine(op: AluOp, acc: AluExp, item: AluExp, traits: TargetTraits) -> AluExp:
    """`op(acc, item)` as the target must compute it: legalized (NaN-propagating min/max, bool
    or/and), and, on a target that fuses products into sums, with the item kept unfused."""
    if traits.contracts_mul_add and op == AluOp.Add and is_float(acc.dtype):
        item = opaque(item)
    return legalize(AluExp(op, acc.dtype, (acc, item)), traits)


def reduce_per_output(kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str) -> Program | None:
    """One grid trip per output: the accumulator starts at the reduction's identity, a loop folds
    the items (`unroll` a trip when it divides the size), then the epilogue is stored."""
    red = kernel.reduction
    if red is None or tune.epilogue is None or not _plain(tune):
        return None
    unroll = tune.size.unroll if tune.size.unroll > 1 and red.size % tune.size.unroll == 0 else 1
    acc = AluExp.variable(red.dtype, "acc")
    items = [legalize(_shift_ridx(tune.exp, u), traits) for u in range(unroll)]
    trip: list[Stmt] = []
    for u, item in enumerate(items):
        trip.append(Let(f"x{u}", item))
        x = AluExp.variable(red.dtype, f"x{u}")
        trip.append(Accumulate("acc", red.op, combine(red.op, acc, x, traits)))
    epilogue = legalize(tune.epilogue, traits)
    body: tuple[Stmt, ...] = (
        Define("acc", AluExp.const(red.dtype, red.identity)),
        Loop("ridx", red.size, tuple(trip), unroll),
        Store("out0", tune.output_idx_exp, epilogue),
    )
    return Program(name, _params(kernel, *items, epilogue), (Grid("gidx", kernel.size, body),))


SERIAL_STRATEGIES: tuple[Strategy, ...] = (elementwise, reduce_per_output)


# ---- GPU strategies ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuTarget:
    """What the GPU strategies need of a device beyond its traits (the tuner's `GpuLimits` has
    the rest): how far a grid dimension goes, which element dtypes have a 4-lane vector, whether
    subgroup ops exist and for which dtypes, and whether float32 must stay exact on subnormals
    (a subgroup sum or product would flush a subnormal partial)."""

    max_workgroups_per_dim: int = 65535
    vector_dtypes: tuple[DType, ...] = (DType.float32, DType.int32, DType.uint32)
    has_subgroups: bool = False
    subgroup_dtypes: tuple[DType, ...] = (DType.float32, DType.int32, DType.uint32, DType.bool)
    exact_subnormals: bool = False
    max_workgroup_size: int = 256


def fold_grid(n: int, max_dim: int) -> tuple[int, int, int]:
    """`n` workgroups as (x, y, z), each at most `max_dim`; x*y*z >= n (the program checks)."""
    if n <= max_dim:
        return (n, 1, 1)
    gy = -(-n // max_dim)
    if gy <= max_dim:
        gx = -(-n // gy)
        return (gx, gy, 1)
    gz = -(-n // (max_dim * max_dim))
    if gz > max_dim:
        raise ValueError(f"{n} workgroups exceed a {max_dim}^3 grid")
    gy = -(-n // (max_dim * gz))
    return (max_dim, gy, gz)


def _grid(target: GpuTarget, threads: int, local: int) -> tuple[int, int, int]:
    return fold_grid(-(-threads // local), target.max_workgroups_per_dim)


def thread_elementwise(
    target: GpuTarget, kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str
) -> Program | None:
    """One thread per output, `local` threads a workgroup."""
    if kernel.reduction is not None:
        return None
    exp = legalize(tune.exp, traits)
    local = tune.size.local
    body = (ThreadIndex("gidx", kernel.size, local), Store("out0", tune.output_idx_exp, exp))
    return Program(name, _params(kernel, exp), body, local, _grid(target, kernel.size, local))


def _replace_special(exp: AluExp, name: str, value: AluExp, cache: dict[str, AluExp]) -> AluExp:
    """`exp` with the Special `name` replaced by `value`, simplified with `cache` (shared by the
    lanes of one thread, so that they share what they can)."""

    def visit(e: AluExp) -> AluExp | None:
        return value if e.op == AluOp.Special and e.arg[0] == name else None

    return exp.rewrite(visit).simplify(cache)


def _lane_vars(exp: AluExp, u: int, inputs: set[int] | frozenset[int]) -> AluExp:
    """`exp` with every read of the `inputs` replaced by lane `u` of that input's vector load."""

    def visit(node: AluExp) -> AluExp | None:
        if node.op == AluOp.GlobalIndex and node.arg[0] in inputs:
            return AluExp.variable(node.dtype, f"jc_v{node.arg[0]}.{LANES[u]}")
        return None

    return exp.rewrite(visit)


def vec4_elementwise(
    target: GpuTarget, kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str
) -> Program | None:
    """Four outputs a thread with vector loads and stores, for contiguous elementwise maps.

    Each lane's expression is the kernel's with `gidx = 4 q + u`, simplified with one cache; an
    input read only at `4 q + u` in lane u (and sized in whole vectors) becomes one vector load a
    thread, anything else stays a scalar read. None when no input qualifies."""
    n = kernel.size
    if kernel.reduction is not None or n % 4 or n < 4 or kernel.dtype not in target.vector_dtypes:
        return None
    q = AluExp.special(DType.int32, "jc_q", n // 4)
    cache: dict[str, AluExp] = {}
    lane_idx = [AluExp.add(AluExp.mul(q, AluExp.i32(4)), AluExp.i32(u)).simplify(cache) for u in range(4)]
    lanes = [_replace_special(tune.exp, "gidx", lane_idx[u], cache) for u in range(4)]
    need = kernel.input_bytes()
    reads: dict[int, bool] = {}
    for u, e in enumerate(lanes):
        for node in e.nodes():
            if node.op == AluOp.GlobalIndex:
                gid = node.arg[0]
                ok = node.src[0] == lane_idx[u] and node.dtype in target.vector_dtypes and need[gid] % 16 == 0
                reads[gid] = reads.get(gid, True) and ok
    vec_in = {g for g, ok in reads.items() if ok}
    if not vec_in:
        return None
    values = tuple(legalize(_lane_vars(e, u, vec_in), traits) for u, e in enumerate(lanes))
    params = tuple(
        replace(p, lanes=4) if p.output or p.index in vec_in else p
        for p in _params(kernel, legalize(tune.exp, traits))
    )
    local = tune.size.local
    body: tuple[Stmt, ...] = (
        ThreadIndex("jc_q", n // 4, local),
        *(VecLoad(f"jc_v{g}", f"in{g}", (q,)) for g in sorted(vec_in)),
        VecStore("out0", q, values),
    )
    return Program(name, params, body, local, _grid(target, n // 4, local))


def combine_function(red: Reduction, traits: TargetTraits, name: str = "jc_combine") -> Function:
    """`name(a, b)`: the reduction's op, legalized (see `combine`)."""
    a, b = AluExp.variable(red.dtype, "a"), AluExp.variable(red.dtype, "b")
    return Function(name, (("a", red.dtype), ("b", red.dtype)), combine(red.op, a, b, traits))


def thread_reduce(
    target: GpuTarget, kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str
) -> Program | None:
    """One thread per `upcast` outputs, each a loop over the reduction (`unroll` items a trip).

    With upcast U, thread q owns outputs U q + u; the lanes' expressions are simplified with one
    cache, so a read that does not move with the output (a matmul's row of A) is one load a trip,
    shared by the U accumulators."""
    red = kernel.reduction
    if red is None or tune.epilogue is None or tune.size.groups > 1 or tune.size.split > 1:
        return None
    up, unroll, local = tune.size.upcast, tune.size.unroll, tune.size.local
    exp, epilogue = legalize(tune.exp, traits), legalize(tune.epilogue, traits)
    threads = kernel.size // up
    if up == 1:
        index: Stmt = ThreadIndex("gidx", kernel.size, local)
        accs, items, out_idx, epis = ["acc"], [exp], [tune.output_idx_exp], [epilogue]
    else:
        index = ThreadIndex("jc_q", threads, local)
        cache: dict[str, AluExp] = {}
        q = AluExp.special(DType.int32, "jc_q", threads)
        out_idx = [
            AluExp.add(AluExp.mul(q, AluExp.i32(up)), AluExp.i32(u)).simplify(cache) for u in range(up)
        ]
        items = [legalize(_replace_special(tune.exp, "gidx", i, cache), traits) for i in out_idx]
        accs = [f"acc{u}" for u in range(up)]
        # legalized before `acc` is renamed: legalize knows the accumulator by that name
        epis = [
            legalize(_replace_special(tune.epilogue, "gidx", i, cache), traits).substitute(
                {"acc": AluExp.variable(red.dtype, a)}
            )
            for i, a in zip(out_idx, accs)
        ]
    trip = tuple(
        Combine(a, "jc_combine", (_shift_ridx(e, u),)) for a, e in zip(accs, items) for u in range(unroll)
    )
    body: tuple[Stmt, ...] = (
        index,
        *(Define(a, AluExp.const(red.dtype, red.identity)) for a in accs),
        Loop("ridx", red.size, trip, unroll),
        *(Store("out0", i, e) for i, e in zip(out_idx, epis)),
    )
    params = _params(kernel, exp, epilogue)
    fns = (combine_function(red, traits),)
    return Program(name, params, body, local, _grid(target, threads, local), fns)


@dataclass(frozen=True)
class RowVectors:
    """A cooperative reduction's loop over `jc_j`, four items a trip: `lanes[u]` is the item
    `ridx = 4 jc_j + u` (legalized), reading the inputs `rows` (each output's own row: vector
    `gidx * R/4 + jc_j`) and `cols` (a vector every output reads, matvec's x: vector `jc_j`) as
    the lanes of one vector load each."""

    lanes: tuple[AluExp, ...]
    rows: frozenset[int]
    cols: frozenset[int]

    @property
    def inputs(self) -> frozenset[int]:
        return self.rows | self.cols


def row_vectors(
    target: GpuTarget, kernel: Kernel, tune: TuneResult, traits: TargetTraits
) -> RowVectors | None:
    """Vector loads for a cooperative reduction whose reads are contiguous along the reduction (a
    full sum, a softmax row): the same bytes in a quarter of the load instructions, which is what a
    streaming reduction is bound by on a large GPU. An input qualifies when every read of it, in
    every lane, is a row or column vector's lane and the epilogue does not read it."""
    red = kernel.reduction
    assert red is not None
    r, i32 = red.size, AluExp.i32
    if r % 4 or r < 8:
        return None
    cache: dict[str, AluExp] = {}
    j = AluExp.special(DType.int32, "jc_j", r // 4)
    gidx = AluExp.special(DType.int32, "gidx", kernel.size)
    row = AluExp.add(AluExp.mul(gidx, i32(r)), AluExp.mul(j, i32(4)))
    row_idx = [AluExp.add(row, i32(u)).simplify(cache) for u in range(4)]
    col_idx = [AluExp.add(AluExp.mul(j, i32(4)), i32(u)).simplify(cache) for u in range(4)]
    items = [AluExp.add(AluExp.mul(j, i32(4)), i32(u)) for u in range(4)]
    lanes = [_replace_special(tune.exp, "ridx", items[u], cache) for u in range(4)]
    epi = legalize(tune.epilogue, traits) if tune.epilogue is not None else None
    in_epilogue = {n.arg[0] for n in epi.nodes() if n.op == AluOp.GlobalIndex} if epi else set()
    need = kernel.input_bytes()
    reads: dict[int, str | None] = {}
    for u, e in enumerate(lanes):
        for node in e.nodes():
            if node.op == AluOp.GlobalIndex:
                gid = node.arg[0]
                kind = "row" if node.src[0] == row_idx[u] else "col" if node.src[0] == col_idx[u] else None
                if node.dtype not in target.vector_dtypes or need[gid] % 16 or gid in in_epilogue:
                    kind = None
                reads[gid] = kind if reads.get(gid, kind) == kind else None
    vec_in = {g: k for g, k in reads.items() if k is not None}
    if not vec_in:
        return None
    return RowVectors(
        tuple(legalize(_lane_vars(e, u, set(vec_in)), traits) for u, e in enumerate(lanes)),
        frozenset(g for g, k in vec_in.items() if k == "row"),
        frozenset(g for g, k in vec_in.items() if k == "col"),
    )


def uses_subgroups(target: GpuTarget, red: Reduction, threads: int) -> bool:
    """Subgroup ops for a workgroup fold where the device has them for the dtype; not a float32
    sum or product that must stay exact on subnormals."""
    flushes = red.dtype == DType.float32 and red.op in (AluOp.Add, AluOp.Mul) and target.exact_subnormals
    return target.has_subgroups and threads > 1 and red.dtype in target.subgroup_dtypes and not flushes


def _strided_fold(
    kernel: Kernel, tune: TuneResult, traits: TargetTraits, vec: RowVectors | None, parts: int, part_var: str
) -> StridedLoop:
    """The loop a workgroup's threads (and an output's `parts` workgroups) fold their items in:
    four a trip through vector loads with `vec`, else one."""
    red = kernel.reduction
    assert red is not None
    group = tune.size.groups
    if vec is None:
        body: tuple[Stmt, ...] = (Combine("acc", "jc_combine", (legalize(tune.exp, traits),)),)
        return StridedLoop("ridx", red.size, group, body, parts, part_var)
    q = red.size // 4
    jc_j = AluExp.special(DType.int32, "jc_j", q)
    row = AluExp.mul(AluExp.special(DType.int32, "gidx", kernel.size), AluExp.i32(q))
    loads = tuple(
        VecLoad(f"jc_v{g}", f"in{g}", (row, jc_j) if g in vec.rows else (jc_j,)) for g in sorted(vec.inputs)
    )
    return StridedLoop("jc_j", q, group, (*loads, Combine("acc", "jc_combine", vec.lanes)), parts, part_var)


def workgroup_reduce(
    target: GpuTarget, kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str
) -> Program | None:
    """One workgroup per output (a softmax row, a matvec row): its threads stride over the row,
    four items a trip with vector loads where the row is contiguous, then fold across the group."""
    red = kernel.reduction
    if red is None or tune.epilogue is None or tune.size.groups == 1 or tune.size.split > 1:
        return None
    group = tune.size.groups
    vec = row_vectors(target, kernel, tune, traits)
    sg = uses_subgroups(target, red, group)
    ident = AluExp.const(red.dtype, red.identity)
    epilogue = legalize(tune.epilogue, traits)
    body: tuple[Stmt, ...] = (
        WorkgroupIndex("gidx", kernel.size),
        Define("acc", ident),
        _strided_fold(kernel, tune, traits, vec, 1, ""),
        WorkgroupFold("acc", "jc_combine", red.op, red.dtype, ident, "jc_part", group, sg),
        FirstThread(sg, (Store("out0", tune.output_idx_exp, epilogue),)),
    )
    params = _params(kernel, legalize(tune.exp, traits), epilogue)
    if vec is not None:
        params = tuple(replace(p, lanes=4) if not p.output and p.index in vec.inputs else p for p in params)
    grid = fold_grid(kernel.size, target.max_workgroups_per_dim)
    fns, local = (combine_function(red, traits),), (LocalArray("jc_part", red.dtype, group),)
    return Program(name, params, body, group, grid, fns, local)


def _fold_program(
    name: str,
    params: tuple[Param, ...],
    body: tuple[Stmt, ...],
    threads: int,
    grid: tuple[int, int, int],
    red: Reduction,
    traits: TargetTraits,
) -> Program:
    """A program whose workgroups fold through `jc_combine` and the local array `jc_part`."""
    fns, local = (combine_function(red, traits),), (LocalArray("jc_part", red.dtype, threads),)
    return Program(name, params, body, threads, grid, fns, local)


def split_reduce(
    target: GpuTarget, kernel: Kernel, tune: TuneResult, traits: TargetTraits, name: str
) -> tuple[Program, Program] | None:
    """Two passes for few outputs over long reductions (a full sum). Pass 1: the `split`
    workgroups of an output stride over its reduction together (in each trip the whole grid reads
    one contiguous span, four items a thread with vector loads where contiguous), each folding into
    one partial in the scratch buffer; pass 2: one workgroup per output folds its partials and
    applies the epilogue."""
    red = kernel.reduction
    if red is None or tune.epilogue is None or tune.size.split == 1:
        return None
    group, split = tune.size.groups, tune.size.split
    n_part = kernel.size * split
    ident = AluExp.const(red.dtype, red.identity)
    epilogue = legalize(tune.epilogue, traits)
    params = _params(kernel, legalize(tune.exp, traits), epilogue)
    scratch = Param("jc_scratch", 0, (red.dtype,), n_part, scratch=True)
    vec = row_vectors(target, kernel, tune, traits)
    vec_in = vec.inputs if vec is not None else frozenset()
    sg = uses_subgroups(target, red, group)
    body1: tuple[Stmt, ...] = (
        WorkgroupIndex("gidx", kernel.size, split, "jc_s"),
        Define("acc", ident),
        _strided_fold(kernel, tune, traits, vec, split, "jc_s"),
        WorkgroupFold("acc", "jc_combine", red.op, red.dtype, ident, "jc_part", group, sg),
        StorePartial("jc_scratch", "acc", red.dtype, sg),
    )
    params1 = tuple(replace(p, lanes=4) if not p.output and p.index in vec_in else p for p in params)
    grid1 = fold_grid(n_part, target.max_workgroups_per_dim)
    pass1 = _fold_program(name, (*params1, scratch), body1, group, grid1, red, traits)
    g2 = max(min(256, target.max_workgroup_size, 1 << max(split - 1, 0).bit_length()), 1)
    sg2 = uses_subgroups(target, red, g2)
    gidx = AluExp.special(DType.int32, "gidx", kernel.size)
    terms = (AluExp.mul(gidx, AluExp.i32(split)), AluExp.special(DType.int32, "i", split))
    body2: tuple[Stmt, ...] = (
        WorkgroupIndex("gidx", kernel.size),
        Define("acc", ident),
        StridedLoop("i", split, g2, (CombineLoad("acc", "jc_combine", "jc_scratch", red.dtype, terms),)),
        WorkgroupFold("acc", "jc_combine", red.op, red.dtype, ident, "jc_part", g2, sg2),
        FirstThread(sg2, (Store("out0", tune.output_idx_exp, epilogue),)),
    )
    grid2 = fold_grid(kernel.size, target.max_workgroups_per_dim)
    return pass1, _fold_program(name, (*params, scratch), body2, g2, grid2, red, traits)


def gpu_strategies(target: GpuTarget) -> tuple[Strategy, ...]:
    """The GPU strategies for `target`, in the order `build_program` tries them."""
    strategies = (vec4_elementwise, thread_elementwise, thread_reduce, workgroup_reduce, split_reduce)
    return tuple(partial(f, target) for f in strategies)


def build_program(
    kernel: Kernel,
    tune: TuneResult,
    traits: TargetTraits,
    strategies: Sequence[Strategy] = SERIAL_STRATEGIES,
    name: str = "kernel",
) -> Program:
    """The first strategy's program for this kernel and plan; UnsupportedOpError if none applies
    (or if it is a multi-pass one: `build_passes`)."""
    passes = build_passes(kernel, tune, traits, strategies, name)
    if len(passes) != 1:
        raise UnsupportedOpError(
            None, kernel.dtype, "program", f"{len(passes)} passes for the plan {tune.size}"
        )
    return passes[0]


def _kernel_exps(kernel: Kernel) -> tuple[AluExp, ...]:
    return (kernel.exp,) if kernel.reduction is None else (kernel.exp, kernel.reduction.epilogue)


def build_passes(
    kernel: Kernel,
    tune: TuneResult,
    traits: TargetTraits,
    strategies: Sequence[Strategy] = SERIAL_STRATEGIES,
    name: str = "kernel",
) -> tuple[Program, ...]:
    """The first strategy's programs for this kernel and plan, in the order they run."""
    traits = for_kernel(traits, _kernel_exps(kernel))
    for strategy in strategies:
        program = strategy(kernel, tune, traits, name)
        if program is not None:
            return program if isinstance(program, tuple) else (program,)
    raise UnsupportedOpError(None, kernel.dtype, "program", f"no strategy for the plan {tune.size}")


@dataclass(frozen=True)
class Procedure:
    """A helper function whose body is statements: early returns, branches and loops, for what one
    expression says only at a cost (a cheap native path taken before an exact slow one, a long
    division). A dialect renders it once, as it renders a generated helper (`jaxcore.softfloat`)."""

    name: str
    params: tuple[tuple[str, DType], ...]
    ret: DType
    body: tuple[Stmt, ...]


# ---- rendering --------------------------------------------------------------------------------


def render_program(program: Program, lang: CStyleLanguage) -> str:
    """The whole source: the dialect's prelude, every helper the program calls (once, in dependency
    order), then the entry point with its statements."""
    root = ExpRenderer(lang)
    functions = [_render_function(f, root) for f in program.functions]
    functions += [lang.render_local_array(a.name, a.dtype, a.size) for a in program.locals]
    body = _render_block(program.body, root)
    return lang.render_source(program, functions, root.used_helpers, body)


def _render_function(f: Function, r: ExpRenderer) -> str:
    """A program's function, in a child scope of the program's (its lets are numbered with the
    body's, its helpers collected with them)."""
    sub = r.child()
    sub.count(f.body)
    value = sub.render(f.body)
    return r.lang.render_function_def(f.name, list(f.params), f.body.dtype, sub.lines, value)


def _indent(lines: list[str]) -> list[str]:
    return ["  " + ln for ln in lines]


def _render_block(stmts: Sequence[Stmt], r: ExpRenderer) -> list[str]:
    """The statements of one scope as lines; shared nodes among them become lets of this scope."""
    r.count(*(e for s in stmts if not isinstance(s, Accumulate | VecLoad) for e in _own_exps(s)))
    for s in stmts:
        _render_stmt(s, r)
    return r.lines


def _render_stmt(s: Stmt, r: ExpRenderer) -> None:
    lang = r.lang
    if isinstance(s, Let):
        r.lines.append(lang.render_let(s.name, s.value.dtype, r.render(s.value)))
    elif isinstance(s, Define):
        r.lines.append(lang.render_define(s.name, s.value.dtype, r.render(s.value)))
    elif isinstance(s, Accumulate):
        # Its own scope: a node of the old accumulator must not be reused after the assignment.
        sub = r.child()
        sub.count(s.value)
        text = sub.render(s.value)
        r.lines += sub.lines
        r.lines.append(lang.render_assign(s.name, text))
    elif isinstance(s, Combine):
        texts = [r.render(v) for v in s.values]
        r.lines += [lang.render_assign(s.name, f"{s.fn}({s.name}, {t})") for t in texts]
    elif isinstance(s, Store):
        r.lines.append(lang.render_store(r, s.param, r.render(s.index), r.render(s.value), s.value.dtype))
    elif isinstance(s, ThreadIndex):
        r.lines += lang.render_thread_index(s.var, s.size, s.local)
    elif isinstance(s, LocalIndex):
        r.lines.append(lang.render_local_index(s.var))
    elif isinstance(s, VecLoad):
        sub = r.child()  # uncounted: the terms are spelled whole, never through lets
        index = " + ".join(strip_parens(sub.render(t)) for t in s.terms)
        r.lines.append(lang.render_vec_load(s.name, s.param, index))
    elif isinstance(s, VecStore):
        index = r.render(s.index)
        values = [r.render(v) for v in s.values]
        r.lines.append(lang.render_vec_store(r, s.param, index, values, s.values[0].dtype))
    elif isinstance(s, WorkgroupIndex):
        r.lines += lang.render_workgroup_index(s.var, s.size, s.parts, s.part_var)
    elif isinstance(s, WorkgroupFold):
        r.lines += lang.render_workgroup_fold(r, s)
    elif isinstance(s, CombineLoad):
        sub = r.child()  # uncounted, as VecLoad's
        index = " + ".join(strip_parens(sub.render(t)) for t in s.terms)
        r.lines.append(
            lang.render_assign(s.name, f"{s.fn}({s.name}, {lang.render_element(s.param, index, s.dtype)})")
        )
    elif isinstance(s, StorePartial):
        r.lines.append(lang.render_store_partial(s.param, s.name, s.dtype, s.subgroups))
    elif isinstance(s, Loop | Grid | StridedLoop | FirstThread):
        if isinstance(s, Loop):
            head, tail = lang.render_loop(s.var, s.size, s.step)
        elif isinstance(s, StridedLoop):
            head, tail = lang.render_strided_loop(s.var, s.size, s.threads, s.parts, s.part_var)
        elif isinstance(s, FirstThread):
            head, tail = lang.render_first_thread(s.subgroups)
        else:
            head, tail = lang.render_grid(s.var, s.size)
        r.lines.append(head)
        r.lines += _indent(_render_block(s.body, r.child()))
        r.lines.append(tail)
    else:
        raise TypeError(f"not a statement: {s!r}")


def render_procedure(proc: Procedure, lang: CStyleLanguage) -> tuple[str, set[str]]:
    """A procedure's source and the helpers it calls. Statements run in order and a Define'd name
    changes between them, so no value is shared across statements: each renders in a scope of its
    own (within one, shared nodes still become lets)."""
    r = ExpRenderer(lang)
    lines = [lang.function_header(proc.name, list(proc.params), proc.ret)]
    lines += _indent(_render_sequence(proc.body, r))
    return "\n".join([*lines, "}"]), set(r.used_helpers)


def _render_sequence(stmts: Sequence[Stmt], r: ExpRenderer) -> list[str]:
    out: list[str] = []
    for s in stmts:
        sub = r.child()
        if isinstance(s, If):
            sub.count(s.cond)
            cond = sub.render(s.cond)
            out += [*sub.lines, f"if ({strip_parens(cond)}) {{", *_indent(_render_sequence(s.then, sub))]
            if s.orelse:
                out += ["} else {", *_indent(_render_sequence(s.orelse, sub))]
            out.append("}")
        elif isinstance(s, Loop):
            head, tail = r.lang.render_loop(s.var, s.size, s.step)
            out += [head, *_indent(_render_sequence(s.body, sub)), tail]
        elif isinstance(s, Break):
            out.append("break;")
        else:
            value = s.value  # type: ignore[union-attr]
            sub.count(value)
            text = sub.render(value)
            out += sub.lines
            if isinstance(s, Return):
                out.append(r.lang.render_return(text))
            elif isinstance(s, Assign):
                out.append(r.lang.render_assign(s.name, text))
            elif isinstance(s, Let):
                out.append(r.lang.render_let(s.name, value.dtype, text))
            elif isinstance(s, Define):
                out.append(r.lang.render_define(s.name, value.dtype, text))
            else:
                raise TypeError(f"not a procedure statement: {s!r}")
    return out
