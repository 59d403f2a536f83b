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
from dataclasses import dataclass

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


Stmt = Let | Define | Accumulate | Store | Loop | Grid


@dataclass(frozen=True)
class Program:
    """One entry point: its parameters (inputs in order, then the output) and its statements."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]

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
    kernel = lang.render_kernel(program.name, program.params, body)
    return "\n".join(x for x in (lang.render_prelude(), lang.render_helpers(root.used_helpers), kernel) if x)


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
