"""One C-style expression renderer that WGSL and GLSL (and any C-like shader language) subclass.

tinygrad's `CStyleLanguage` is the model: a language is data — a dtype -> type-name map, a
`code_for_op` table, constant spelling per dtype, how a `let` and a cast are written, and a set
of named helper functions it can emit — and one renderer walks an (already legalized) AluExp
DAG with it. Nodes used more than once become a `let` (common subexpressions, found by
structure: equal subtrees share one digest), everything else is inlined with full
parenthesisation, so no precedence table is needed.

A dialect subclasses `CStyleLanguage`, fills the tables and overrides the few `render_*` hooks
whose spelling differs. Helper functions (exact fmod, threefry) are registered by name with their
source and dependencies; a renderer collects the ones an expression needs and the dialect emits
them once, in dependency order, before the entry point.

The float32 transcendentals are not written per dialect: `Sin`, `Cos`, `Exp`, `Log`, `Asin`,
`Atan`, `Erf` and `Erfc` render as calls of `jc_<op>_f32`, a helper *generated* from
`jaxcore.expansions` (the AluExp tree, legalized with the dialect's traits and rendered by the
dialect itself, so every spelling rule applies inside it too); float16 calls it through casts, as
the contract computes float16 in float32 and rounds once. float64 calls `jc_<op>_f64` where the
dialect's `helpers` table has one. A dialect whose built-ins meet the tolerance table overrides
those `code_for_op` entries instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from jaxcore import half
from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.dtype import DType, is_float
from jaxcore.legalize import OPAQUE, TargetTraits, legalize, opaque

if TYPE_CHECKING:
    from jaxcore.program import Param, Program, WorkgroupFold

# code_for_op entries: (renderer, node, rendered operands) -> expression text.
OpRender = Callable[["ExpRenderer", AluExp, list[str]], str]

# The ops whose float32 spelling is a helper generated from jaxcore.expansions.
TRANSCENDENTALS: dict[AluOp, str] = {
    AluOp.Sin: "sin",
    AluOp.Cos: "cos",
    AluOp.Exp: "exp",
    AluOp.Log: "log",
    AluOp.Asin: "asin",
    AluOp.Atan: "atan",
    AluOp.Erf: "erf",
    AluOp.Erfc: "erfc",
}


def strip_parens(s: str) -> str:
    """Drop one outer pair of parentheses when it encloses the whole text."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(s) - 1:
            return s
    return s[1:-1]


def _infix(sym: str) -> OpRender:
    return lambda r, e, a: f"({a[0]} {sym} {a[1]})"


def _call(fn: str) -> OpRender:
    return lambda r, e, a: f"{fn}({', '.join(strip_parens(x) for x in a)})"


def transcendental_helper(op: AluOp, dtype: DType) -> str:
    """The name of the helper that computes `op` in `dtype` (`jc_sin_f32`, `jc_exp_f64`)."""
    return f"jc_{TRANSCENDENTALS[op]}_{'f64' if dtype == DType.float64 else 'f32'}"


def _transcendental(r: ExpRenderer, e: AluExp, a: list[str]) -> str:
    """float32 through the generated helper, float16 through it in float32 (rounded once),
    float64 through the dialect's own helper, else the one generated from `jaxcore.expansions64`."""
    lang, x = r.lang, strip_parens(a[0])
    name = transcendental_helper(e.op, e.dtype)
    if e.dtype == DType.float32:
        return f"{r.need(name)}({x})"
    if e.dtype == DType.float16:
        wide = lang.cast(r, DType.float32, DType.float16, x)
        return lang.cast(r, DType.float16, DType.float32, f"{r.need(name)}({strip_parens(wide)})")
    if e.dtype == DType.float64 and (name in lang.helpers or DType.float64 in lang.type_map):
        return f"{r.need(name)}({x})"
    raise UnsupportedOpError(e.op, e.dtype, lang.name, "no float64 helper in this dialect")


class CStyleLanguage:
    """The data a C-like dialect supplies; subclasses override tables and `render_*` hooks."""

    name: ClassVar[str] = "cstyle"
    type_map: ClassVar[dict[DType, str]] = {}
    # The type a buffer element of each dtype is stored as (bool is 4-byte 0/1 everywhere).
    storage_type_map: ClassVar[dict[DType, str]] = {}
    traits: ClassVar[TargetTraits] = TargetTraits()
    let_prefix: ClassVar[str] = "alu"
    code_for_op: ClassVar[dict[AluOp, OpRender]] = {
        AluOp.Add: _infix("+"),
        AluOp.Sub: _infix("-"),
        AluOp.Mul: _infix("*"),
        AluOp.Idiv: _infix("/"),
        AluOp.Div: _infix("/"),
        AluOp.Mod: _infix("%"),
        AluOp.Min: _call("min"),
        AluOp.Max: _call("max"),
        AluOp.Cmplt: _infix("<"),
        AluOp.Cmpne: _infix("!="),
        AluOp.Sqrt: _call("sqrt"),
        AluOp.Floor: _call("floor"),
        AluOp.Ceil: _call("ceil"),
        **{op: _transcendental for op in TRANSCENDENTALS},
    }
    # name -> (source, names of helpers it calls)
    helpers: ClassVar[dict[str, tuple[str, tuple[str, ...]]]] = {}

    def __init__(self, traits: TargetTraits | None = None) -> None:
        if traits is not None:
            self.traits = traits  # type: ignore[misc]

    # ---- hooks a dialect overrides -----------------------------------------------------------
    def type_name(self, dtype: DType) -> str:
        if dtype == DType.float16 and self.traits.f16_in_f32:
            dtype = DType.float32  # float16 held in float32 (jaxcore.half)
        try:
            return self.type_map[dtype]
        except KeyError:
            raise UnsupportedOpError(None, dtype, self.name) from None

    def storage_type(self, dtype: DType) -> str:
        return self.storage_type_map.get(dtype) or self.type_name(dtype)

    def render_const(self, r: ExpRenderer, value: float | int, dtype: DType) -> str:
        raise NotImplementedError

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        return f"{self.type_name(dst)}({strip_parens(x)})"

    def cast(self, r: ExpRenderer, dst: DType, src: DType, x: str, exact: bool = True) -> str:
        """A cast's text: float16 held in float32 widens as is and narrows through the rounding
        helper (`jaxcore.half`); float32 <-> float64 on a flushing target through softfloat's
        (unless `exact` is off: a NORMAL_RANGE cast); everything else is the dialect's
        `render_cast`."""
        if self.traits.f16_in_f32 and DType.float32 in (dst, src) and DType.float16 in (dst, src):
            return x if dst == DType.float32 else f"{r.need(half.F16_ROUND)}({strip_parens(x)})"
        if exact and self.traits.flushes_subnormals:
            from jaxcore.softfloat import CAST_HELPERS  # (softfloat's procedures import this module)

            if (name := CAST_HELPERS.get((src, dst))) is not None:
                return f"{r.need(name)}({strip_parens(x)})"
        return self.render_cast(r, dst, src, x)

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        raise NotImplementedError

    def render_where(self, r: ExpRenderer, c: str, t: str, f: str) -> str:
        return f"({c} ? {t} : {f})"

    def render_opaque(self, r: ExpRenderer, dtype: DType, x: str) -> str:
        """`x` through an identity the compiler cannot fold (see `legalize.opaque`); a dialect whose
        traits set `folds_float_identities` must spell it."""
        raise UnsupportedOpError(AluOp.Bitcast, dtype, self.name, "no opaque identity in this dialect")

    def render_bit(self, r: ExpRenderer, e: AluExp, a: list[str]) -> str:
        if e.op == AluOp.BitShift:
            return f"({a[0]} {'<<' if e.arg == 'shl' else '>>'} {a[1]})"
        if e.dtype == DType.bool:
            return f"({a[0]} {dict(_BOOL_BIT)[e.arg]} {a[1]})"
        return f"({a[0]} {dict(_INT_BIT)[e.arg]} {a[1]})"

    def render_let(self, name: str, dtype: DType, value: str) -> str:
        return f"{self.type_name(dtype)} {name} = {strip_parens(value)};"

    def function_header(self, name: str, params: list[tuple[str, DType]], ret: DType) -> str:
        """The opening line of a helper function, up to and including its `{`."""
        args = ", ".join(f"{self.type_name(dt)} {p}" for p, dt in params)
        return f"{self.type_name(ret)} {name}({args}) {{"

    def render_return(self, value: str) -> str:
        return f"return {strip_parens(value)};"

    # ---- statements (jaxcore.program): what a whole kernel is spelled with -----------------------
    def render_program(self, program: Program) -> str:
        """The whole source of a statement program (jaxcore.program); a dialect whose entry point
        is not a function over buffers (a fragment shader) overrides this one hook."""
        from jaxcore.program import render_program

        return render_program(program, self)

    def render_source(
        self, program: Program, functions: list[str], helpers: set[str], body: list[str]
    ) -> str:
        """The source around the entry point's body lines: prelude, the `helpers` the program calls
        (in dependency order), the program's own `functions`, then the entry point."""
        kernel = self.render_kernel(program.name, program.params, body)
        parts = (self.render_prelude(), self.render_helpers(helpers), *functions, kernel)
        return "\n".join(x for x in parts if x)

    def render_function_def(
        self, name: str, params: list[tuple[str, DType]], ret: DType, lines: list[str], value: str
    ) -> str:
        """A function of the program: its header, the body's `lines`, then returning `value`."""
        body = [f"  {ln}" for ln in lines]
        return "\n".join(
            [self.function_header(name, params, ret), *body, f"  {self.render_return(value)}", "}"]
        )

    def render_prelude(self) -> str:
        """Text before the helpers (includes, type definitions, enables)."""
        return ""

    def render_kernel(self, name: str, params: tuple[Param, ...], body: list[str]) -> str:
        """The entry point around the body's lines: the signature that binds every parameter."""
        raise NotImplementedError

    def render_grid(self, var: str, size: int) -> tuple[str, str]:
        """The lines opening and closing the body run once per output index `var` < `size`; a
        serial target's is a loop, a GPU's its thread index and a bounds check."""
        return self.render_loop(var, size, 1)

    def render_loop(self, var: str, size: int, step: int) -> tuple[str, str]:
        i32 = self.type_name(DType.int32)
        return f"for ({i32} {var} = 0; {var} < {size}; {var} += {step}) {{", "}"

    def render_define(self, name: str, dtype: DType, value: str) -> str:
        """A mutable scalar (an accumulator) with its initial value."""
        return self.render_let(name, dtype, value)

    def render_assign(self, name: str, value: str) -> str:
        return f"{name} = {strip_parens(value)};"

    def render_store(self, r: ExpRenderer, param: str, idx: str, value: str, dtype: DType) -> str:
        """Element `idx` of the output `param` set to `value` (converted to the storage type)."""
        return f"{param}[{strip_parens(idx)}] = {strip_parens(value)};"

    # GPU statements; a serial dialect has none of them.
    def render_thread_index(self, var: str, size: int, local: int) -> list[str]:
        """Lines binding `var` to this thread's index (`local` threads a workgroup) and stopping
        the threads at or past `size`."""
        raise NotImplementedError(f"{self.name} has no thread grid")

    def render_local_index(self, var: str) -> str:
        """`var` (int32): this thread's index within its workgroup."""
        raise NotImplementedError(f"{self.name} has no workgroups")

    def render_vec_load(self, name: str, param: str, idx: str) -> str:
        raise NotImplementedError(f"{self.name} has no vector loads")

    def render_vec_store(self, r: ExpRenderer, param: str, idx: str, values: list[str], dtype: DType) -> str:
        raise NotImplementedError(f"{self.name} has no vector stores")

    def render_workgroup_index(self, var: str, size: int, parts: int, part_var: str) -> list[str]:
        raise NotImplementedError(f"{self.name} has no workgroups")

    def render_strided_loop(
        self, var: str, size: int, threads: int, parts: int, part_var: str
    ) -> tuple[str, str]:
        raise NotImplementedError(f"{self.name} has no workgroups")

    def render_local_array(self, name: str, dtype: DType, size: int) -> str:
        raise NotImplementedError(f"{self.name} has no workgroup memory")

    def render_workgroup_fold(self, r: ExpRenderer, fold: WorkgroupFold) -> list[str]:
        raise NotImplementedError(f"{self.name} has no workgroups")

    def render_first_thread(self, subgroups: bool) -> tuple[str, str]:
        raise NotImplementedError(f"{self.name} has no workgroups")

    def render_store_partial(self, param: str, name: str, dtype: DType, subgroups: bool) -> str:
        raise NotImplementedError(f"{self.name} has no workgroups")

    def render_element(self, param: str, idx: str, dtype: DType) -> str:
        """Element `idx` of the buffer `param` read as `dtype` (from its storage type)."""
        return f"{param}[{idx}]"

    def render_special(self, r: ExpRenderer, e: AluExp) -> str:
        return e.arg[0] if e.op == AluOp.Special else e.arg

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        raise NotImplementedError

    def render_op(self, r: ExpRenderer, e: AluExp, args: list[str]) -> str:
        """Text of one node from its operands' text; the table first, then the hooks."""
        op = e.op
        if op == AluOp.Const:
            return self.render_const(r, e.arg, e.dtype)
        if op in (AluOp.Special, AluOp.Variable):
            return self.render_special(r, e)
        if op == AluOp.GlobalIndex:
            return self.render_load(r, e, args[0])
        if op == AluOp.Cast:
            return self.cast(r, e.dtype, e.src[0].dtype, args[0], e.arg is None)
        if op == AluOp.Bitcast:
            if e.arg == OPAQUE:
                return self.render_opaque(r, e.dtype, args[0])
            if e.dtype == e.src[0].dtype:
                return args[0]
            return self.render_bitcast(r, e.dtype, e.src[0].dtype, args[0])
        if op == AluOp.Where:
            return self.render_where(r, *args)
        if op in (AluOp.BitCombine, AluOp.BitShift):
            return self.render_bit(r, e, args)
        if (name := self.exact_helper(e)) is not None:
            return f"{r.need(name)}({', '.join(strip_parens(a) for a in args)})"
        fn = self.code_for_op.get(op)
        if fn is None:
            raise UnsupportedOpError(op, e.dtype, self.name, e.arg)
        return fn(r, e, args)

    def exact_helper(self, e: AluExp) -> str | None:
        """The `jaxcore.softfloat` helper that spells float32 node `e` on a target that flushes
        subnormals (`TargetTraits.flushes_subnormals`), or None for the native op."""
        if not self.traits.flushes_subnormals:
            return None
        from jaxcore.softfloat import helper_for  # (softfloat's procedures import this module)

        return helper_for(e)

    # ---- helpers -----------------------------------------------------------------------------
    def render_function(
        self, name: str, params: list[tuple[str, DType]], body: AluExp
    ) -> tuple[str, set[str]]:
        """A helper function returning `body`, whose Variables are `params`; with the helpers the
        body calls."""
        r = ExpRenderer(self)
        r.count(body)
        value = r.render(body)
        lines = [self.function_header(name, params, body.dtype)]
        lines += [f"  {line}" for line in r.lines]
        lines += [f"  {self.render_return(value)}", "}"]
        return "\n".join(lines), set(r.used_helpers)

    def helper_source(self, name: str) -> tuple[str, tuple[str, ...]]:
        """(source, helpers it calls) of a helper: the dialect's table, else one generated."""
        if name in self.helpers:
            return self.helpers[name]
        generated: dict[str, tuple[str, tuple[str, ...]]] = self.__dict__.setdefault("_generated", {})
        if name not in generated:
            generated[name] = self._generate_helper(name)
        return generated[name]

    def _generate_helper(self, name: str) -> tuple[str, tuple[str, ...]]:
        """A core helper rendered in this dialect: an exact float32 op of `jaxcore.softfloat` as
        written, a transcendental from its expansion (float32 or float64) or a float16 conversion
        of `jaxcore.half`, legalized for this dialect's traits."""
        from jaxcore import softfloat
        from jaxcore.expansions import expand_node
        from jaxcore.expansions64 import expand_node64
        from jaxcore.program import Procedure, render_procedure

        ops = {transcendental_helper(op, dt): (op, dt) for op in TRANSCENDENTALS for dt in _FLOATS}
        if name in softfloat.HELPERS:  # exact as written: not legalized again
            d = softfloat.definition(name)
            if isinstance(d, Procedure):
                source, calls = render_procedure(d, self)
            else:
                source, calls = self.render_function(name, list(d[0]), d[1])
            return source, tuple(sorted(calls - {name}))
        if name in half.HELPERS:
            dtype, body = half.helper_body(name)
            body = legalize(body, self.traits)
        elif name in ops:
            op, dtype = ops[name]
            node = AluExp(op, dtype, (AluExp.variable(dtype, "x"),))
            expanded = expand_node(node) if dtype == DType.float32 else expand_node64(node)
            assert expanded is not None  # every TRANSCENDENTALS op has both expansions
            # The expansions hold their tolerance with products fused (each guard would be a select
            # a call), and on a flushing target need exact float32 only where a value is moved to
            # the result.
            body = legalize(expanded, replace(self.traits, contracts_mul_add=False))
            if self.traits.contracts_mul_add and dtype == DType.float32:
                # ... but not the argument's own product: a driver that inlines the helper fused
                # cos(a * b)'s product into the reduction x - k * pi/2 (lavapipe), which then
                # reduced the unrounded product: 2.4e-4 off at 7535 (half its float32 ulp).
                body = body.substitute({"x": opaque(AluExp.variable(dtype, "x"))})
            if self.traits.flushes_subnormals:
                body = softfloat.exact_at_result(body)
        else:
            raise KeyError(f"{self.name} has no helper {name!r}")
        source, calls = self.render_function(name, [("x", dtype)], body)
        return source, tuple(sorted(calls - {name}))

    def helper_order(self, names: Iterable[str]) -> list[str]:
        """The named helpers and their dependencies, each after what it calls."""
        out: list[str] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen:
                return
            seen.add(n)
            for d in self.helper_source(n)[1]:
                visit(d)
            out.append(n)

        for n in sorted(names):
            visit(n)
        return out

    def render_helpers(self, names: Iterable[str]) -> str:
        return "\n".join(self.helper_source(n)[0].strip() + "\n" for n in self.helper_order(names))


_FLOATS = (DType.float32, DType.float64)
_INT_BIT = (("and", "&"), ("or", "|"), ("xor", "^"))
_BOOL_BIT = (("and", "&&"), ("or", "||"), ("xor", "!="))

_LEAVES = frozenset({AluOp.Const, AluOp.Special, AluOp.Variable})


class ExpRenderer:
    """Renders expressions in one scope: statements go to `lines`, shared nodes become lets.

    `child()` opens a nested scope (a loop body) that sees the parent's lets but whose own
    lets stay inside it. Helpers are collected across all scopes of one program.
    """

    def __init__(self, lang: CStyleLanguage, parent: ExpRenderer | None = None) -> None:
        self.lang = lang
        self.parent = parent
        self.lines: list[str] = []
        self.names: dict[str, str] = {}
        self._counter: list[int] = parent._counter if parent else [0]
        self.used_helpers: set[str] = parent.used_helpers if parent else set()
        self.uses: dict[str, int] = {}

    def child(self) -> ExpRenderer:
        return ExpRenderer(self.lang, self)

    def need(self, helper: str) -> str:
        """Record that the program calls `helper`; returns its name for inline use."""
        self.used_helpers.add(helper)
        return helper

    def fresh(self, prefix: str | None = None) -> str:
        self._counter[0] += 1
        return f"{prefix or self.lang.let_prefix}{self._counter[0]}"

    def count(self, *exps: AluExp | None) -> None:
        """Count operand references of every node among `exps` (call before rendering them)."""
        for exp in exps:
            if exp is None:
                continue
            for node in exp.nodes():
                for s in node.src:
                    self.uses[s.key()] = self.uses.get(s.key(), 0) + 1
            self.uses[exp.key()] = self.uses.get(exp.key(), 0) + 1

    def _lookup(self, key: str) -> str | None:
        s: ExpRenderer | None = self
        while s is not None:
            if key in s.names:
                return s.names[key]
            s = s.parent
        return None

    def render(self, exp: AluExp) -> str:
        """The text of `exp`; nodes referenced more than once are bound to lets first."""
        text: dict[str, str] = {}
        for node in exp.nodes():
            k = node.key()
            hit = self._lookup(k)
            if hit is not None:
                text[k] = hit
                continue
            s = self.lang.render_op(self, node, [text[c.key()] for c in node.src])
            if self.uses.get(k, 0) > 1 and node.op not in _LEAVES:
                name = self.fresh()
                self.lines.append(self.lang.render_let(name, node.dtype, s))
                self.names[k] = name
                s = name
            text[k] = s
        return text[exp.key()]

    def bind(self, exp: AluExp, prefix: str | None = None) -> str:
        """Render `exp` into a fresh let (whatever its use count) and return the name."""
        s = self.render(exp)
        if s.isidentifier():
            return s
        name = self.fresh(prefix)
        self.lines.append(self.lang.render_let(name, exp.dtype, s))
        self.names[exp.key()] = name
        return name


def float_types(exp: AluExp) -> set[DType]:
    return {n.dtype for n in exp.nodes() if is_float(n.dtype)}
