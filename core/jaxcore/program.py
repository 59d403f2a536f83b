"""Statement programs: a kernel's whole body as data, built once in the core, rendered by any dialect.

The expression renderer (`jaxcore.cstyle`) spells one value; every plugin used to write the rest of
a kernel (loops over outputs, the reduction loop, accumulators, stores) by hand, per language. Here
that skeleton is a small tree of frozen statements, built from a `Kernel` and the tuner's
`TuneResult` by device-neutral *strategies*, with every expression already legalized for the
target's `TargetTraits`. `render_program` walks it through a `CStyleLanguage`, whose statement
hooks (`render_kernel`, `render_grid`, `render_loop`, `render_define`, `render_assign`,
`render_store`) are the few spellings a dialect overrides.

Statements:

- `Grid(var, size, body)`: the body once per output index `var` in `[0, size)`, trips independent:
  a serial target renders a loop, a GPU its thread index (with a bounds check);
- `Loop(var, size, body, step)`: a serial loop, `var` from 0 below `size` by `step`;
- `Let(name, value)`: a named value; later expressions read it as `Variable(name)`;
- `Define(name, value)`: a mutable scalar (an accumulator) with its initial value;
- `Accumulate(name, op, value)`: `name = value`, where `value` is the legalized `op(name, item)`
  (`op` stays for dialects that have a native fold);
- `Store(param, index, value)`: element `index` of the output parameter `param`.

Expressions refer to the grid and loop indices as the tuner's Specials (`gidx`, `ridx`), to lets and
accumulators as Variables. Extension points, for the GPU strategies that come next: a strategy is
any `Strategy` callable, tried in order by `build_program`; a new statement kind (a workgroup
array, a barrier, a vector load of four lanes) is one more dataclass in `Stmt` and one more branch
in `_render_stmt` calling a new language hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial

from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.cstyle import CStyleLanguage, ExpRenderer
from jaxcore.dtype import DType, byte_width, is_float
from jaxcore.kernel import Kernel
from jaxcore.legalize import TargetTraits, legalize, opaque
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
class VecLoad:
    """`name`: vector number `index` of input `param` (its `lanes` elements); an expression reads
    lane u as the Variable `name.xyzw[u]`."""

    name: str
    param: str
    index: AluExp


@dataclass(frozen=True)
class VecStore:
    """Vector number `index` of the output `param` set to `values`, one a lane."""

    param: str
    index: AluExp
    values: tuple[AluExp, ...]


Stmt = Let | Define | Accumulate | Store | Loop | Grid | ThreadIndex | VecLoad | VecStore

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

    def statements(self) -> Iterator[Stmt]:
        """Every statement, nested ones included, in program order."""
        stack: list[Stmt] = list(reversed(self.body))
        while stack:
            s = stack.pop()
            yield s
            if isinstance(s, Loop | Grid):
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
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, VecLoad):
        return (s.index,)
    if isinstance(s, VecStore):
        return (s.index, *s.values)
    return ()


# ---- building: strategies ---------------------------------------------------------------------

Strategy = Callable[[Kernel, TuneResult, TargetTraits, str], "Program | None"]


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
    the rest): how far a grid dimension goes, and which element dtypes have a 4-lane vector."""

    max_workgroups_per_dim: int = 65535
    vector_dtypes: tuple[DType, ...] = (DType.float32, DType.int32, DType.uint32)


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
        *(VecLoad(f"jc_v{g}", f"in{g}", q) for g in sorted(vec_in)),
        VecStore("out0", q, values),
    )
    return Program(name, params, body, local, _grid(target, n // 4, local))


def gpu_strategies(target: GpuTarget) -> tuple[Strategy, ...]:
    """The GPU strategies for `target`, in the order `build_program` tries them."""
    return (partial(vec4_elementwise, target), partial(thread_elementwise, target))


def build_program(
    kernel: Kernel,
    tune: TuneResult,
    traits: TargetTraits,
    strategies: Sequence[Strategy] = SERIAL_STRATEGIES,
    name: str = "kernel",
) -> Program:
    """The first strategy's program for this kernel and plan; UnsupportedOpError if none applies."""
    for strategy in strategies:
        program = strategy(kernel, tune, traits, name)
        if program is not None:
            return program
    raise UnsupportedOpError(None, kernel.dtype, "program", f"no strategy for the plan {tune.size}")


# ---- rendering --------------------------------------------------------------------------------


def render_program(program: Program, lang: CStyleLanguage) -> str:
    """The whole source: the dialect's prelude, every helper the program calls (once, in dependency
    order), then the entry point with its statements."""
    root = ExpRenderer(lang)
    body = _render_block(program.body, root)
    return lang.render_source(program, root.used_helpers, body)


def _indent(lines: list[str]) -> list[str]:
    return ["  " + ln for ln in lines]


def _render_block(stmts: Sequence[Stmt], r: ExpRenderer) -> list[str]:
    """The statements of one scope as lines; shared nodes among them become lets of this scope."""
    r.count(*(e for s in stmts if not isinstance(s, Accumulate) for e in _own_exps(s)))
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
    elif isinstance(s, Store):
        r.lines.append(lang.render_store(r, s.param, r.render(s.index), r.render(s.value), s.value.dtype))
    elif isinstance(s, ThreadIndex):
        r.lines += lang.render_thread_index(s.var, s.size, s.local)
    elif isinstance(s, VecLoad):
        r.lines.append(lang.render_vec_load(s.name, s.param, r.render(s.index)))
    elif isinstance(s, VecStore):
        index = r.render(s.index)
        values = [r.render(v) for v in s.values]
        r.lines.append(lang.render_vec_store(r, s.param, index, values, s.values[0].dtype))
    elif isinstance(s, Loop | Grid):
        if isinstance(s, Loop):
            head, tail = lang.render_loop(s.var, s.size, s.step)
        else:
            head, tail = lang.render_grid(s.var, s.size)
        r.lines.append(head)
        r.lines += _indent(_render_block(s.body, r.child()))
        r.lines.append(tail)
    else:
        raise TypeError(f"not a statement: {s!r}")
