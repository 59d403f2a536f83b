"""Kernel -> WGSL compute shaders: the compiler half of the webgpu device.

    plan = compile_kernel(kernel, WgslTarget(...))

`compile_kernel` tunes the kernel (`jaxcore.tuner.tune_gpu`), legalizes its expressions for WGSL
(`jaxcore.legalize`), renders them with the WGSL dialect of the C-style renderer and returns a
`ShaderPlan`: one or two `ShaderProgram` passes and the byte sizes of the scratch buffers the
passes share. The runtime owns devices, buffers and pipelines; all it needs is here:

- run `plan.passes` in order (one compute pass is fine: each dispatch's writes are visible to the
  next), each with `dispatchWorkgroups(*program.grid)`; skip a pass whose grid has a 0;
- bind, at `@group(0) @binding(b.binding)` for each `b` in `program.bindings`: input buffer
  `b.index` (`b.kind == "in"`, read-only storage), the output (`"out"`, read_write storage), or
  scratch buffer `b.index` of `plan.scratch` (`"scratch"`, read_write; the runtime allocates it,
  its contents need no initialisation and need not survive the plan);
- `b.elements` is how many elements of `b.dtype` the shader may touch (the binding must cover
  at least `b.nbytes`, and at least 16 bytes: a binding may be declared `array<vec4<T>>`, still
  counted here in scalars); bool is stored as i32 0/1; every binding is declared and statically used
  by the shader, so `layout="auto"` and an explicit layout from `bindings` both work;
- sizes are baked into the WGSL (`program.uniforms` is empty); the one uniform block is
  `program.uniform` (16 zero bytes at `@group(1) @binding(0)`, or None), the opaque zero that keeps
  the driver from folding `x * 0.0` (`jaxcore.legalize.opaque`); `program.enables`
  lists the features the device must have been created with (`"shader-f16"`, `"shader-f64"`,
  `"subgroups"`: wgpu-native's "subgroup"; the WGSL has no `enable subgroups;`, which naga rejects,
  and export.browser_wgsl adds for Tint).

Strategies (chosen by the tuner from how the reads move in memory):
- elementwise: one thread per output, `local` threads per workgroup; four per thread with vec4
  loads and stores when the map is contiguous (`a*b+c`);
- reduction, thread per output: a loop over the reduction (unrolled by `unroll`), `upcast`
  outputs per thread when a read does not move with the output (register blocking);
- grouped: `groups` threads of one workgroup share an output, stride over the reduction (coalesced
  row reads), then fold in workgroup memory (a tree; with `has_subgroups`, a subgroup op, one
  barrier and a subgroup op over the partials) and one thread applies the epilogue;
- split (two passes): the `split` workgroups of an output stride over its reduction together
  (grid-stride), each folding into one scratch partial, then one workgroup per output folds the
  partials and applies the epilogue (a 64M-item sum: gpu-probe.md's 1024 x 256 design);
- grouped and split read a contiguous row (and a vector every output shares) as vec4, four items a
  trip, when the reduction is whole vec4s (`_reduction_vec4`).
Grids past `max_workgroups_per_dim` fold into 2-D/3-D; the shader recovers the linear workgroup
index and bounds-checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.cstyle import ExpRenderer
from jaxcore.dtype import DType, byte_width, is_float
from jaxcore.kernel import Kernel
from jaxcore.legalize import TargetTraits, legalize, opaque
from jaxcore.program import GpuTarget, Program, build_program, fold_grid, gpu_strategies
from jaxcore.tuner import GpuLimits, TuneResult, tune_gpu
from jaxcore_webgpu.wgsl import WGSL_TRAITS, WGSLLanguage


@dataclass(frozen=True)
class WgslTarget:
    """The adapter facts code generation depends on."""

    has_f16: bool = False
    has_f64: bool = False
    has_subgroups: bool = False
    max_workgroup_size: int = 256  # invocations per workgroup (and along x)
    max_workgroups_per_dim: int = 65535
    max_storage_buffers_per_stage: int = 8
    max_workgroup_storage: int = 16384
    # Spell float32 arithmetic exact on subnormals (wgsl.WGSLLanguage.exact_subnormals): for a
    # device that flushes them (WGSL allows it) and for every exported program (the browser's
    # device is unknown). Off where the device keeps them, so its code stays the plain ops.
    exact_subnormals: bool = True
    radix_sort_from: int = 0  # Sort/Argsort rows this long take the radix sort (0: never)

    def limits(self) -> GpuLimits:
        return GpuLimits(
            max_workgroup_size=self.max_workgroup_size,
            max_workgroups_per_dim=self.max_workgroups_per_dim,
            max_workgroup_storage=self.max_workgroup_storage,
            local=min(256, self.max_workgroup_size),
            # the exact helpers are long; SwiftShader's compile time grows with the square of
            # a loop body (16 copies of a float32 multiply-add: minutes; 4: 0.3 s)
            max_copies=4 if self.exact_subnormals else 16,
        )


@dataclass(frozen=True)
class Binding:
    binding: int
    kind: str  # "in" | "out" | "scratch"
    index: int  # input number, 0 for the output, scratch number
    dtype: DType  # element dtype (bool: stored as i32 0/1)
    elements: int
    read_only: bool

    @property
    def nbytes(self) -> int:
        return self.elements * byte_width(self.dtype)


@dataclass(frozen=True)
class ShaderProgram:
    code: str
    entry: str
    workgroup_size: tuple[int, int, int]
    grid: tuple[int, int, int]
    bindings: tuple[Binding, ...]
    uniforms: tuple[()] = ()
    enables: tuple[str, ...] = ()
    # Bytes of the uniform block at @group(1) @binding(0), when the shader declares one: only the
    # always-zero `jc_zero` of the opaque identity (legalize.opaque), so all zeros.
    uniform: bytes | None = None


@dataclass(frozen=True)
class ShaderPlan:
    passes: tuple[ShaderProgram, ...]
    scratch: tuple[int, ...] = ()  # byte sizes
    tune: TuneResult | None = None


def _identity_exp(dtype: DType, op: AluOp, identity: float | int) -> AluExp:
    return AluExp.const(dtype, identity)


class _Program:
    """Accumulates one shader's declarations, helpers and body."""

    def __init__(self, lang: WGSLLanguage, target: WgslTarget) -> None:
        self.lang = lang
        self.target = target
        self.root = ExpRenderer(lang)
        self.decls: list[str] = []
        self.bindings: list[Binding] = []
        self.body: list[str] = []

    def bind(
        self,
        kind: str,
        index: int,
        dtype: DType,
        elements: int,
        read_only: bool,
        name: str,
        vec: bool = False,
    ) -> None:
        b = Binding(len(self.bindings), kind, index, dtype, elements, read_only)
        self.bindings.append(b)
        access = "read" if read_only else "read_write"
        ty = self.lang.storage_type(dtype)
        ty = f"vec4<{ty}>" if vec else ty
        self.decls.append(f"@group(0) @binding({b.binding}) var<storage, {access}> {name}: array<{ty}>;")

    def finish(
        self,
        wg: int,
        grid: tuple[int, int, int],
        enables: list[str],
        header: list[str],
        subgroups: bool = False,
    ) -> ShaderProgram:
        helpers = self.lang.render_helpers(self.root.used_helpers)
        names = [d.split("> ")[1].split(":")[0] for d in self.decls if d.startswith("@group")]
        phony = [f"  _ = &{n};" for n in names]
        gx, gy, _ = grid
        sg = _SUBGROUP_BUILTINS if subgroups else ""
        code = "\n".join(
            [*(f"enable {e};" for e in enables), *self.decls, *header, helpers]
            + [
                f"@compute @workgroup_size({wg}, 1, 1)",
                "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32"
                f"{sg}) {{",
                *phony,
                f"  let wg: u32 = wid.x + wid.y * {gx}u + wid.z * {gx * gy}u;",
                *self.body,
                "}",
                "",
            ]
        )
        feats = tuple(("shader-f16" if e == "f16" else e) for e in enables)
        if "f64" in self.lang.features:
            feats += ("shader-f64",)
        if subgroups:
            feats += ("subgroups",)
        uniform = bytes(16) if "jc_zero" in self.lang.helper_order(self.root.used_helpers) else None
        return ShaderProgram(code, "main", (wg, 1, 1), grid, tuple(self.bindings), (), feats, uniform)


def _dtypes_used(*exps: AluExp | None) -> set[DType]:
    out: set[DType] = set()
    for e in exps:
        if e is not None:
            out |= {n.dtype for n in e.nodes()}
    return out


def _check_dtypes(dtypes: set[DType], target: WgslTarget) -> list[str]:
    if DType.float16 in dtypes and not target.has_f16:
        raise UnsupportedOpError(None, DType.float16, "webgpu", "the adapter lacks shader-f16")
    if DType.float64 in dtypes and not target.has_f64:
        raise UnsupportedOpError(None, DType.float64, "webgpu", "the adapter lacks shader-f64")
    return ["f16"] if DType.float16 in dtypes else []


def _input_dtypes(kernel: Kernel, *exps: AluExp | None) -> dict[int, DType]:
    seen: dict[int, DType] = {}
    for e in exps:
        if e is None:
            continue
        for n in e.nodes():
            if n.op == AluOp.GlobalIndex:
                gid = n.arg[0]
                if seen.setdefault(gid, n.dtype) != n.dtype:
                    raise UnsupportedOpError(
                        AluOp.GlobalIndex, n.dtype, "webgpu", f"input {gid} read as {seen[gid]} and {n.dtype}"
                    )
    return seen


def compile_kernel(kernel: Kernel, target: WgslTarget, traits: TargetTraits = WGSL_TRAITS) -> ShaderPlan:
    """WGSL for `kernel` on `target`: a `ShaderPlan` of one or two passes (see the module doc)."""
    tune = tune_gpu(kernel, target.limits())
    lang = WGSLLanguage(traits)
    lang.exact_subnormals = target.exact_subnormals
    exp = legalize(tune.exp, traits)
    epilogue = legalize(tune.epilogue, traits) if tune.epilogue is not None else None
    out_idx = tune.output_idx_exp
    dtypes = _dtypes_used(exp, epilogue, out_idx) | {kernel.dtype}
    enables = _check_dtypes(dtypes, target)
    lang.features = {"f64"} if DType.float64 in dtypes else set()
    in_dtypes = _input_dtypes(kernel, exp, epilogue)
    need = kernel.input_bytes()
    n_bufs = kernel.nargs + 1 + (1 if tune.size.split > 1 else 0)
    if n_bufs > target.max_storage_buffers_per_stage:
        raise UnsupportedOpError(
            None, kernel.dtype, "webgpu", f"{n_bufs} storage buffers > {target.max_storage_buffers_per_stage}"
        )

    def declare(p: _Program, vec: frozenset[int] = frozenset()) -> None:
        for gid in range(kernel.nargs):
            dt = in_dtypes.get(gid, DType.uint32)
            p.bind("in", gid, dt, need[gid] // byte_width(dt), True, f"in{gid}", vec=gid in vec)
        p.bind("out", 0, kernel.dtype, kernel.size, False, "out0")

    red = kernel.reduction
    if red is None:
        lang.enables = tuple(enables)
        gpu = GpuTarget(target.max_workgroups_per_dim, _VEC_DTYPES)
        program = build_program(kernel, tune, traits, gpu_strategies(gpu))
        return ShaderPlan((_shader(lang, program),), (), tune)
    if tune.size.split > 1 or tune.size.groups > 1:
        rows = _reduction_vec4(kernel, tune, traits, need, epilogue)
        if tune.size.split > 1:
            return _split(kernel, tune, lang, target, exp, epilogue, enables, declare, rows)
        return ShaderPlan(
            (_grouped(kernel, tune, lang, target, exp, epilogue, enables, declare, rows),), (), tune
        )
    return ShaderPlan((_per_thread(kernel, tune, lang, target, exp, epilogue, enables, declare),), (), tune)


def _shader(lang: WGSLLanguage, program: Program) -> ShaderProgram:
    """`program` rendered, with the bindings and features the runtime needs to run it."""
    code = lang.render_program(program)
    bindings = tuple(
        Binding(b, "out" if p.output else "in", p.index, p.dtype, p.elements, not p.output)
        for b, p in enumerate(program.params)
    )
    feats = tuple(("shader-f16" if e == "f16" else e) for e in lang.enables)
    if "f64" in lang.features:
        feats += ("shader-f64",)
    uniform = bytes(16) if lang.uses_uniform else None
    return ShaderProgram(code, "main", (program.local, 1, 1), program.grid, bindings, (), feats, uniform)


_VEC_DTYPES = (DType.float32, DType.int32, DType.uint32)
_LANES = "xyzw"


def _store(p: _Program, r: ExpRenderer, dtype: DType, idx: AluExp, value: AluExp) -> None:
    r.count(idx, value)
    i = r.render(idx)
    v = r.render(value)
    r.lines.append(f"out0[{i}] = {p.lang.store_value(r, dtype, v)};")


def _indent(lines: list[str], n: int) -> list[str]:
    return [" " * n + ln for ln in lines]


def _combine_fn(lang: WGSLLanguage, r: ExpRenderer, red, traits: TargetTraits) -> str:
    """`fn jc_combine(a, b)`: the reduction's op, legalized (NaN-propagating min/max, bool or/and)."""
    dt = red.dtype
    a, b = AluExp.variable(dt, "a"), AluExp.variable(dt, "b")
    if traits.contracts_mul_add and red.op == AluOp.Add and is_float(dt):
        b = opaque(b)  # inlined, `acc + x * y` would be fused (lavapipe lost a 0 * inf NaN so)
    e = legalize(AluExp(red.op, dt, (a, b)), traits)
    sub = r.child()
    sub.count(e)
    text = sub.render(e)
    ty = lang.type_name(dt)
    body = "".join(f"  {ln}\n" for ln in sub.lines)
    return f"fn jc_combine(a: {ty}, b: {ty}) -> {ty} {{\n{body}  return {text};\n}}\n"


def _loop_body(r: ExpRenderer, exp: AluExp, unroll: int, ridx: str) -> list[str]:
    """Statements folding `exp` at ridx .. ridx+unroll-1 into `acc`."""
    body = r.child()
    terms = []
    for u in range(unroll):
        e = exp if u == 0 else _shift_ridx(exp, u)
        terms.append(e)
    body.count(*terms)
    for e in terms:
        v = body.render(e)
        body.lines.append(f"acc = jc_combine(acc, {v});")
    return body.lines


def _shift_ridx(exp: AluExp, u: int) -> AluExp:
    """`exp` with the Special `ridx` replaced by `ridx + u` (for an unrolled trip)."""

    def visit(n: AluExp) -> AluExp | None:
        if n.op == AluOp.Special and n.arg[0] == "ridx":
            return AluExp.add(n, AluExp.i32(u))
        return None

    return exp.rewrite(visit)


def _lanes(exp: AluExp, lane_gidx: list[AluExp], cache: dict[str, AluExp]) -> list[AluExp]:
    """`exp` once per upcast lane, with the Special `gidx` replaced by that lane's output index."""
    out = []
    for idx in lane_gidx:

        def visit(e: AluExp, idx: AluExp = idx) -> AluExp | None:
            return idx if e.op == AluOp.Special and e.arg[0] == "gidx" else None

        out.append(exp.rewrite(visit).simplify(cache))
    return out


def _per_thread(kernel, tune, lang, target, exp, epilogue, enables, declare) -> ShaderProgram:
    """One thread per `upcast` outputs, each a loop over the reduction (unrolled by `unroll`).

    With upcast U, thread q owns outputs 4q+u; the lanes' expressions are simplified with one
    cache, so reads that do not move with the output (a matmul's row of A) are one load per trip,
    shared by the U accumulators.
    """
    p = _Program(lang, target)
    declare(p)
    red = kernel.reduction
    up = tune.size.upcast
    wg = tune.size.local
    threads = kernel.size // up
    grid = fold_grid(-(-threads // wg), target.max_workgroups_per_dim)
    r = p.root
    ty = lang.type_name(red.dtype)
    ident = lang.render_const(r, red.identity, red.dtype)
    unroll = tune.size.unroll
    header = [_combine_fn(lang, r, red, lang.traits)]
    traits = lang.traits
    if up == 1:
        lane_gidx = [AluExp.special(DType.int32, "gidx", kernel.size)]
        lane_exp, lane_epi = [exp], [epilogue]
        accs = ["acc"]
        prologue = [
            f"  let gidx_u: u32 = wg * {wg}u + lid;",
            f"  if (gidx_u >= {kernel.size}u) {{ return; }}",
            "  let gidx: i32 = i32(gidx_u);",
        ]
    else:
        cache: dict[str, AluExp] = {}
        q = AluExp.special(DType.int32, "jc_q", threads)
        lane_gidx = [
            AluExp.add(AluExp.mul(q, AluExp.i32(up)), AluExp.i32(u)).simplify(cache) for u in range(up)
        ]
        lane_exp = [legalize(e, traits) for e in _lanes(tune.exp, lane_gidx, cache)]
        accs = [f"acc{u}" for u in range(up)]
        epis = _lanes(tune.epilogue, lane_gidx, cache)
        lane_epi = [
            # legalized before `acc` is renamed: legalize knows the accumulator by that name
            legalize(e, traits).substitute({"acc": AluExp.variable(red.dtype, a)})
            for e, a in zip(epis, accs)
        ]
        prologue = [
            f"  let jc_qu: u32 = wg * {wg}u + lid;",
            f"  if (jc_qu >= {threads}u) {{ return; }}",
            "  let jc_q: i32 = i32(jc_qu);",
        ]
    body = r.child()
    terms = [[e if v == 0 else _shift_ridx(e, v) for v in range(unroll)] for e in lane_exp]
    body.count(*(t for ts in terms for t in ts))
    for a, ts in zip(accs, terms):
        for t in ts:
            body.lines.append(f"{a} = jc_combine({a}, {body.render(t)});")
    tail = r.child()
    out_idx = lane_gidx if up > 1 else [tune.output_idx_exp]
    tail.count(*out_idx, *lane_epi)
    for i, e in zip(out_idx, lane_epi):
        tail.lines.append(f"out0[{tail.render(i)}] = {lang.store_value(tail, kernel.dtype, tail.render(e))};")
    p.body += [
        *prologue,
        *(f"  var {a}: {ty} = {ident};" for a in accs),
        f"  for (var ridx: i32 = 0i; ridx < {red.size}i; ridx = ridx + {unroll}i) {{",
        *_indent(body.lines, 4),
        "  }",
        *_indent(tail.lines, 2),
    ]
    return p.finish(wg, grid, enables, header)


@dataclass(frozen=True)
class _Vec4Reads:
    """A cooperative reduction's loop over `jc_j`, four items a trip: `lanes[u]` is the item
    `ridx = 4 jc_j + u` (legalized), reading the inputs in `inputs` as the components of one
    `vec4` load each: `jc_v{g} = in{g}[gidx * R/4 + jc_j]` for the `rows` (each output's own
    row), `in{g}[jc_j]` for the `cols` (a vector every output reads, matvec's x)."""

    lanes: tuple[AluExp, ...]
    rows: frozenset[int]
    cols: frozenset[int]

    @property
    def inputs(self) -> frozenset[int]:
        return self.rows | self.cols


def _reduction_vec4(kernel, tune, traits, need, epilogue) -> _Vec4Reads | None:
    """vec4 loads for the cooperative (grouped, split) reductions whose reads are contiguous along
    the reduction: a full sum, a softmax row. 16-byte loads move the same bytes in a quarter of the
    load instructions, which is what a streaming reduction is bound by on a large GPU (gpu-probe.md
    section 3). An input is vectorized only when every read of it, in every lane, is item
    `gidx * R + 4 jc_j + u` (a row of the reduction, in whole vec4s) and the epilogue does not read it."""
    red = kernel.reduction
    r = red.size
    if r % 4 or r < 8:
        return None
    cache: dict[str, AluExp] = {}
    i32 = AluExp.i32
    j = AluExp.special(DType.int32, "jc_j", r // 4)
    gidx = AluExp.special(DType.int32, "gidx", kernel.size)
    row = AluExp.add(AluExp.mul(gidx, i32(r)), AluExp.mul(j, i32(4)))
    row_idx = [AluExp.add(row, i32(u)).simplify(cache) for u in range(4)]
    col_idx = [AluExp.add(AluExp.mul(j, i32(4)), i32(u)).simplify(cache) for u in range(4)]

    def sub(u: int) -> AluExp:
        item = AluExp.add(AluExp.mul(j, i32(4)), i32(u))

        def visit(e: AluExp) -> AluExp | None:
            return item if e.op == AluOp.Special and e.arg[0] == "ridx" else None

        return tune.exp.rewrite(visit).simplify(cache)

    lanes = [sub(u) for u in range(4)]
    in_epilogue = {n.arg[0] for n in epilogue.nodes() if n.op == AluOp.GlobalIndex} if epilogue else set()
    # Per input: "row" when read at gidx * R + 4 jc_j + u (its own row of the reduction), "col"
    # when at 4 jc_j + u (a vector shared by every output: matvec's x), None when anything else.
    reads: dict[int, str | None] = {}
    for u, e in enumerate(lanes):
        for node in e.nodes():
            if node.op == AluOp.GlobalIndex:
                gid = node.arg[0]
                kind = "row" if node.src[0] == row_idx[u] else "col" if node.src[0] == col_idx[u] else None
                if node.dtype not in _VEC_DTYPES or need[gid] % 16 or gid in in_epilogue:
                    kind = None
                reads[gid] = kind if reads.get(gid, kind) == kind else None
    vec_in = {g: k for g, k in reads.items() if k is not None}
    if not vec_in:
        return None

    def to_var(u: int, e: AluExp) -> AluExp:
        def visit(node: AluExp) -> AluExp | None:
            if node.op == AluOp.GlobalIndex and node.arg[0] in vec_in:
                return AluExp.variable(node.dtype, f"jc_v{node.arg[0]}.{_LANES[u]}")
            return None

        return legalize(e.rewrite(visit), traits)

    return _Vec4Reads(
        tuple(to_var(u, e) for u, e in enumerate(lanes)),
        frozenset(g for g, k in vec_in.items() if k == "row"),
        frozenset(g for g, k in vec_in.items() if k == "col"),
    )


def _vec4_loop(r: ExpRenderer, vec: _Vec4Reads, red_size: int, start: str, stride: str) -> list[str]:
    """The loop folding four items a trip into `acc` (see `_Vec4Reads`)."""
    body = r.child()
    body.count(*vec.lanes)
    vals = [body.render(e) for e in vec.lanes]
    q = red_size // 4
    return [
        f"for (var jc_j: i32 = {start}; jc_j < {q}i; jc_j = jc_j + {stride}) {{",
        *(
            f"  let jc_v{g} = in{g}[{'gidx * ' + str(q) + 'i + ' if g in vec.rows else ''}jc_j];"
            for g in sorted(vec.inputs)
        ),
        *_indent(body.lines, 2),
        *(f"  acc = jc_combine(acc, {v});" for v in vals),
        "}",
    ]


@dataclass(frozen=True)
class _Fold:
    """The fold of every thread's `acc` across a workgroup: `decl` (workgroup memory), `lines`
    (after which `acc` of the thread where `first` holds is the result) and whether the entry point
    needs the subgroup builtins."""

    decl: str
    lines: list[str]
    first: str
    subgroups: bool


# Subgroup builtins of the entry point (WGSL subgroups; naga takes them without `enable subgroups;`,
# Tint needs it: export.py adds it). subgroup_id/num_subgroups make no assumption about how
# local_invocation_index maps to subgroups, nor that the subgroups are full.
_SUBGROUP_BUILTINS = (
    ", @builtin(subgroup_invocation_id) jc_sgi: u32, @builtin(subgroup_size) jc_sgsz: u32"
    ", @builtin(subgroup_id) jc_sgid: u32, @builtin(num_subgroups) jc_nsg: u32"
)
_SUBGROUP_OP = {
    AluOp.Add: "subgroupAdd",
    AluOp.Mul: "subgroupMul",
    AluOp.Min: "subgroupMin",
    AluOp.Max: "subgroupMax",
}
_SUBGROUP_BOOL = {
    AluOp.Add: "subgroupAny",
    AluOp.Max: "subgroupAny",
    AluOp.Mul: "subgroupAll",
    AluOp.Min: "subgroupAll",
}
_SUBGROUP_DTYPES = (DType.float32, DType.int32, DType.uint32, DType.bool)


def _fold(lang: WGSLLanguage, red, group: int, target: WgslTarget, ident: str) -> _Fold:
    """The subgroup fold where the adapter has subgroups (and the dtype has subgroup ops in WGSL:
    not f16 or f64 yet; not a float32 sum or product on the exact-subnormal spelling: the group
    op would flush a subnormal partial), else the tree. `ident` is the reduction's identity."""
    flushes = red.dtype == DType.float32 and red.op in (AluOp.Add, AluOp.Mul) and target.exact_subnormals
    if target.has_subgroups and group > 1 and red.dtype in _SUBGROUP_DTYPES and not flushes:
        return _subgroup_fold(lang, red, group, ident)
    return _tree(lang, red, group)


def _subgroup_reduce(red, v: str) -> list[str]:
    """Statements setting `acc` to the subgroup-wide fold of `v` (in uniform control flow).

    Integer ops wrap as the contract's do (SPIR-V/MSL/HLSL integer group ops are two's complement).
    Float min/max run on u32 keys in float order (exact on a device that flushes subnormals; a
    float group op also leaves NaN unspecified), and a NaN is carried beside them by its bits:
    the largest NaN bit pattern of the subgroup (0 when there is none) replaces the result."""
    if red.dtype == DType.bool:
        return [f"acc = {_SUBGROUP_BOOL[red.op]}({v});"]
    op = _SUBGROUP_OP[red.op]
    if red.dtype == DType.float32 and red.op in (AluOp.Min, AluOp.Max):
        return [
            f"let jc_b = bitcast<u32>({v});",
            "let jc_nan = subgroupMax(select(0u, jc_b, (jc_b & 0x7fffffffu) > 0x7f800000u));",
            f"let jc_k = {op}(select(jc_b | 0x80000000u, ~jc_b, jc_b >= 0x80000000u));",
            "let jc_v = select(~jc_k, jc_k & 0x7fffffffu, jc_k >= 0x80000000u);",
            "acc = bitcast<f32>(select(jc_v, jc_nan, jc_nan != 0u));",
        ]
    return [f"acc = {op}({v});"]


def _subgroup_fold(lang: WGSLLanguage, red, group: int, ident: str) -> _Fold:
    """Subgroup op, one partial per subgroup in workgroup memory, one barrier, subgroup op again:
    one barrier instead of log2(group). The subgroup size is a run-time value (any of 4..128, the
    subgroups maybe not full), so the second step folds partials `jc_sgi + i * jc_sgsz` in a loop
    whose bound is uniform (`jc_nsg`, `jc_sgsz`); every subgroup runs it (subgroup ops must be in
    uniform control flow) and thread 0 of subgroup 0 holds the result."""
    st = lang.storage_type(red.dtype)
    ty = lang.type_name(red.dtype)
    to_st = (lambda s: f"select(0i, 1i, {s})") if red.dtype == DType.bool else (lambda s: s)
    ld = (lambda s: f"({s} != 0i)") if red.dtype == DType.bool else (lambda s: s)
    lines = [
        "{",
        *_indent(_subgroup_reduce(red, "acc"), 2),
        f"  if (jc_sgi == 0u) {{ jc_part[jc_sgid] = {to_st('acc')}; }}",
        "}",
        "workgroupBarrier();",
        "{",
        f"  var jc_p: {ty} = {ident};",
        "  for (var jc_i: u32 = 0u; jc_i < jc_nsg; jc_i = jc_i + jc_sgsz) {",
        "    let jc_k = jc_i + jc_sgi;",
        f"    if (jc_k < jc_nsg) {{ jc_p = jc_combine(jc_p, {ld('jc_part[jc_k]')}); }}",
        "  }",
        *_indent(_subgroup_reduce(red, "jc_p"), 2),
        "}",
    ]
    decl = f"var<workgroup> jc_part: array<{st}, {group}>;"
    return _Fold(decl, lines, "jc_sgid == 0u && jc_sgi == 0u", True)


def _tree(lang: WGSLLanguage, red, group: int) -> _Fold:
    """Workgroup-memory declaration and the fold of `acc` across the group into `acc` of lid 0."""
    st = lang.storage_type(red.dtype)
    decl = f"var<workgroup> jc_part: array<{st}, {group}>;"
    to_st = "select(0i, 1i, acc)" if red.dtype == DType.bool else "acc"
    ld = (lambda s: f"({s} != 0i)") if red.dtype == DType.bool else (lambda s: s)
    st_of = (lambda s: f"select(0i, 1i, {s})") if red.dtype == DType.bool else (lambda s: s)
    combined = "jc_combine(" + ld("jc_part[lid]") + ", " + ld("jc_part[lid + s]") + ")"
    lines = [
        f"jc_part[lid] = {to_st};",
        "workgroupBarrier();",
        f"for (var s: u32 = {group // 2}u; s > 0u; s = s >> 1u) {{",
        "  if (lid < s) {",
        f"    jc_part[lid] = {st_of(combined)};",
        "  }",
        "  workgroupBarrier();",
        "}",
        f"acc = {ld('jc_part[0]')};",
    ]
    return _Fold(decl, lines, "lid == 0u", False)


def _grouped(kernel, tune, lang, target, exp, epilogue, enables, declare, vec=None) -> ShaderProgram:
    """One workgroup per output (a softmax row, a matvec row): its threads stride over the row,
    four items a trip with vec4 loads where the row is contiguous, then a workgroup-memory tree."""
    p = _Program(lang, target)
    declare(p, vec.inputs if vec else frozenset())
    red = kernel.reduction
    group = tune.size.groups
    grid = fold_grid(kernel.size, target.max_workgroups_per_dim)
    r = p.root
    ty = lang.type_name(red.dtype)
    ident = lang.render_const(r, red.identity, red.dtype)
    header = [_combine_fn(lang, r, red, lang.traits)]
    fold = _fold(lang, red, group, target, ident)
    header.append(fold.decl)
    if vec is not None:
        loop = _vec4_loop(r, vec, red.size, "i32(lid)", f"{group}i")
    else:
        loop = [
            f"for (var ridx: i32 = i32(lid); ridx < {red.size}i; ridx = ridx + {group}i) {{",
            *_indent(_loop_body(r, exp, 1, "ridx"), 2),
            "}",
        ]
    tail = r.child()
    _store(p, tail, kernel.dtype, tune.output_idx_exp, epilogue)
    p.body += [
        f"  if (wg >= {kernel.size}u) {{ return; }}",
        "  let gidx: i32 = i32(wg);",
        f"  var acc: {ty} = {ident};",
        *_indent(loop, 2),
        *_indent(fold.lines, 2),
        f"  if ({fold.first}) {{",
        *_indent(tail.lines, 4),
        "  }",
    ]
    return p.finish(group, grid, enables, header, fold.subgroups)


def _split(kernel, tune, lang, target, exp, epilogue, enables, declare, vec=None) -> ShaderPlan:
    """Two passes for few outputs over long reductions (a full sum). Pass 1: the `split`
    workgroups of an output stride over its reduction together (grid-stride: in each trip the
    whole grid reads one contiguous span, four items a thread with vec4 loads where contiguous)
    and fold it in workgroup memory into one partial each; pass 2: one workgroup per output folds
    the partials and applies the epilogue (gpu-probe.md section 3)."""
    red = kernel.reduction
    group, split = tune.size.groups, tune.size.split
    n_part = kernel.size * split
    ty = lang.type_name(red.dtype)
    st = lang.storage_type(red.dtype)
    scratch_bytes = n_part * byte_width(red.dtype)

    # Pass 1: workgroup w = gidx * split + s folds items t, t + T, t + 2T, ... of output gidx,
    # t = s * group + lid and T = split * group (times four with vec4 loads).
    p = _Program(lang, target)
    declare(p, vec.inputs if vec else frozenset())
    p.bind("scratch", 0, red.dtype, n_part, False, "jc_scratch")
    r = p.root
    ident = lang.render_const(r, red.identity, red.dtype)
    header = [_combine_fn(lang, r, red, lang.traits)]
    fold = _fold(lang, red, group, target, ident)
    header.append(fold.decl)
    start, stride = f"jc_s * {group}i + i32(lid)", f"{split * group}i"
    if vec is not None:
        loop = _vec4_loop(r, vec, red.size, start, stride)
    else:
        loop = [
            f"for (var ridx: i32 = {start}; ridx < {red.size}i; ridx = ridx + {stride}) {{",
            *_indent(_loop_body(r, exp, 1, "ridx"), 2),
            "}",
        ]
    to_st = "select(0i, 1i, acc)" if red.dtype == DType.bool else "acc"
    p.body += [
        f"  if (wg >= {n_part}u) {{ return; }}",
        f"  let gidx: i32 = i32(wg / {split}u);",
        f"  let jc_s: i32 = i32(wg % {split}u);",
        f"  var acc: {ty} = {ident};",
        *_indent(loop, 2),
        *_indent(fold.lines, 2),
        f"  if ({fold.first}) {{ jc_scratch[wg] = {to_st}; }}",
    ]
    grid1 = fold_grid(n_part, target.max_workgroups_per_dim)
    pass1 = p.finish(group, grid1, enables, header, fold.subgroups)

    # Pass 2: workgroup g folds output g's `split` partials and applies the epilogue.
    g2 = min(256, target.max_workgroup_size, 1 << max(split - 1, 0).bit_length())
    g2 = max(g2, 1)
    q = _Program(lang, target)
    declare(q)
    q.bind("scratch", 0, red.dtype, n_part, False, "jc_scratch")
    r2 = q.root
    ident2 = lang.render_const(r2, red.identity, red.dtype)
    header2 = [_combine_fn(lang, r2, red, lang.traits)]
    fold2 = _fold(lang, red, g2, target, ident2)
    header2.append(fold2.decl)
    ld = (
        f"(jc_scratch[gidx * {split}i + i] != 0i)"
        if red.dtype == DType.bool
        else f"jc_scratch[gidx * {split}i + i]"
    )
    tail = r2.child()
    _store(q, tail, kernel.dtype, tune.output_idx_exp, epilogue)
    q.body += [
        f"  if (wg >= {kernel.size}u) {{ return; }}",
        "  let gidx: i32 = i32(wg);",
        f"  var acc: {ty} = {ident2};",
        f"  for (var i: i32 = i32(lid); i < {split}i; i = i + {g2}i) {{",
        f"    acc = jc_combine(acc, {ld});",
        "  }",
        *_indent(fold2.lines, 2),
        f"  if ({fold2.first}) {{",
        *_indent(tail.lines, 4),
        "  }",
    ]
    _ = st
    grid2 = fold_grid(kernel.size, target.max_workgroups_per_dim)
    pass2 = q.finish(g2, grid2, enables, header2, fold2.subgroups)
    return ShaderPlan((pass1, pass2), (scratch_bytes,), tune)
