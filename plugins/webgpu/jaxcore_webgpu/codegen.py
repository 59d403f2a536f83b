"""Kernel -> WGSL compute shaders: the compiler half of the webgpu device.

    plan = compile_kernel(kernel, WgslTarget(...))

`compile_kernel` tunes the kernel (`jaxcore.tuner.tune_gpu`; float32 Min/Max fold on integer keys,
`jaxcore.ordered_keys`), builds its statement program with the core's GPU strategies (expressions
legalized for WGSL), renders it with the WGSL dialect of the C-style renderer and returns a `ShaderPlan`:
one or two `ShaderProgram` passes and the byte sizes of the scratch buffers the passes share. The
runtime owns devices, buffers and pipelines; all it needs is here:

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
  `program.uniform` (16 zero bytes at `@group(1) @binding(0)`, or None), the opaque zero that keeps the
  driver from folding `x * 0.0` (`jaxcore.legalize.opaque`); `program.enables` lists the features the
  device must have been created with (`"shader-f64"`, `"subgroups"`: wgpu-native's "subgroup"; the
  WGSL has no `enable subgroups;`, which naga rejects, and export.browser_wgsl adds for Tint).

The kernel skeletons are not here: `jaxcore.program.gpu_strategies` builds the statement program
(elementwise, vec4 lanes, per-thread reduction with unroll/upcast, a workgroup fold by tree or
subgroup ops, the split two-pass reduction), chosen by the tuner's plan, and `WGSLLanguage`
(wgsl.py) renders it. This module is the adapter: the target's facts in, the runtime's
`ShaderPlan` (bindings, grid, features, uniform, scratch sizes) out. Grids past
`max_workgroups_per_dim` fold into 2-D/3-D; the shader recovers the linear workgroup index and
bounds-checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jaxcore.alu import AluExp, AluOp
from jaxcore.backend import UnsupportedOpError
from jaxcore.dtype import DType, byte_width
from jaxcore.kernel import Kernel
from jaxcore.legalize import TargetTraits, legalize
from jaxcore.ordered_keys import fold_on_keys
from jaxcore.program import GpuTarget, Param, Program, WorkgroupFold, build_passes, gpu_strategies
from jaxcore.tuner import GpuLimits, TuneResult, tune_gpu
from jaxcore_webgpu.wgsl import WGSL_TRAITS, WGSLLanguage
from jaxcore_webgpu.wgsl_helpers import OPAQUE_UNIFORM


@dataclass(frozen=True)
class WgslTarget:
    """The adapter facts code generation depends on."""

    has_f16: bool = False  # shader-f16, for the routines (kernels hold float16 in float32)
    has_f64: bool = False
    has_subgroups: bool = False
    subgroup_size: int = 0  # lanes of a subgroup, probed where radix_match needs it (0: not known)
    has_f32_atomics: bool = False  # shader-float32-atomic (native only: no browser has it)
    max_workgroup_size: int = 256  # invocations per workgroup (and along x)
    max_workgroups_per_dim: int = 65535
    max_storage_buffers_per_stage: int = 8
    max_workgroup_storage: int = 16384
    # Spell float32 arithmetic exact on subnormals (wgsl.WGSLLanguage.exact_subnormals): for a
    # device that flushes them (WGSL allows it) and for every exported program (the browser's
    # device is unknown). Off where the device keeps them, so its code stays the plain ops.
    exact_subnormals: bool = True
    radix_sort_from: int = 0  # Sort/Argsort rows this long take the radix sort (0: never)
    # Keys a radix block's thread holds (jaxcore_webgpu.routines.radix): 16 on a CPU adapter
    # (lavapipe: 1M keys 194 against 292 ms), 8 on a GPU (H100: 16M keys 1.65 against 2.74 ms).
    # 16 needs 32 KB of workgroup storage; with less, 8.
    radix_keys_per_thread: int = 8
    # Radix blocks sorted by subgroup match (radix._scatter_match) where subgroups have 8 lanes or
    # more: on a CPU adapter (lavapipe: 1M keys 130 against 203 ms), not on a GPU (H100: 16M keys
    # 2.44 against the counting splits' 1.65 ms).
    radix_match: bool = False
    # Consecutive radix blocks a workgroup of the counting splits' passes takes (radix._tiles): the
    # offset scans then cover fewer counts, and each workgroup's set-up is spread over its blocks.
    radix_tiles_per_block: int = 1
    # The blocked Cholesky's update factors the next diagonal block in its first tile's workgroup
    # (routines.linalg): a pass less a block. Off on a CPU adapter, where the update kernel carrying
    # it ran slower (lavapipe 64x512x512: 645 against 576-596 ms).
    cholesky_lookahead: bool = True

    def browser(self) -> WgslTarget:
        """What an exported program's shaders may assume of the page's device: exact on
        subnormals, no float atomics (no browser has them), subgroups of unknown size, and WebGPU's
        default 16 KB of workgroup storage (a phone's GPU has no more), and a GPU's choices where a
        CPU adapter makes others (the Cholesky's look-ahead). The other limits an exported program
        states (`export._limits`), and the page asks its adapter for them."""
        storage = min(self.max_workgroup_storage, 16384)
        return replace(
            self,
            has_f32_atomics=False,
            exact_subnormals=True,
            subgroup_size=0,
            max_workgroup_storage=storage,
            cholesky_lookahead=True,
        )

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
    # Bytes of the uniform block at @group(1) @binding(0), when the shader declares one: only
    # `jc_zero` of the opaque identity (legalize.opaque), wgsl_helpers.OPAQUE_UNIFORM.
    uniform: bytes | None = None


@dataclass(frozen=True)
class ShaderPlan:
    passes: tuple[ShaderProgram, ...]
    scratch: tuple[int, ...] = ()  # byte sizes
    tune: TuneResult | None = None


def _dtypes_used(*exps: AluExp | None) -> set[DType]:
    out: set[DType] = set()
    for e in exps:
        if e is not None:
            out |= {n.dtype for n in e.nodes()}
    return out


def _check_dtypes(dtypes: set[DType], target: WgslTarget) -> None:
    """float64 needs shader-f64; float16 needs nothing (held in float32, stored as bits)."""
    if DType.float64 in dtypes and not target.has_f64:
        raise UnsupportedOpError(None, DType.float64, "webgpu", "the adapter lacks shader-f64")


def compile_kernel(kernel: Kernel, target: WgslTarget, traits: TargetTraits = WGSL_TRAITS) -> ShaderPlan:
    """WGSL for `kernel` on `target`: a `ShaderPlan` of one or two passes (see the module doc)."""
    kernel = fold_on_keys(kernel)
    tune = tune_gpu(kernel, target.limits())
    exp = legalize(tune.exp, traits)
    epilogue = legalize(tune.epilogue, traits) if tune.epilogue is not None else None
    out_idx = tune.output_idx_exp
    lang = language(target, _dtypes_used(exp, epilogue, out_idx) | {kernel.dtype}, traits)
    n_bufs = kernel.nargs + 1 + (1 if tune.size.split > 1 else 0)
    if n_bufs > target.max_storage_buffers_per_stage:
        raise UnsupportedOpError(
            None, kernel.dtype, "webgpu", f"{n_bufs} storage buffers > {target.max_storage_buffers_per_stage}"
        )

    passes = build_passes(kernel, tune, traits, gpu_strategies(gpu_target(target)))
    params = [p for p in passes[0].params if p.scratch]
    scratch = {p.index: p.elements * byte_width(_scratch_dtype(p.dtype)) for p in params}
    return ShaderPlan(
        tuple(_shader(lang, p) for p in passes), tuple(scratch[i] for i in sorted(scratch)), tune
    )


def gpu_target(target: WgslTarget) -> GpuTarget:
    """What the core's GPU program builders need to know of this adapter."""
    return GpuTarget(
        target.max_workgroups_per_dim,
        _VEC_DTYPES,
        target.has_subgroups,
        exact_subnormals=target.exact_subnormals,
        max_workgroup_size=target.max_workgroup_size,
    )


def language(target: WgslTarget, dtypes: set[DType], traits: TargetTraits = WGSL_TRAITS) -> WGSLLanguage:
    """The WGSL dialect for a shader of `dtypes` on `target`: exact on subnormals where the target
    asks for it, with shader-f64 where float64 is used (refused where the adapter lacks it)."""
    _check_dtypes(dtypes, target)
    lang = WGSLLanguage(replace(traits, flushes_subnormals=target.exact_subnormals))
    lang.features = {"f64"} if DType.float64 in dtypes else set()
    return lang


def compile_program(program: Program, target: WgslTarget) -> ShaderPlan:
    """A one-pass `ShaderPlan` of a program the core built for this target (a routine's)."""
    return ShaderPlan((_shader(language(target, program.dtypes()), program),))


def _scratch_dtype(dtype: DType) -> DType:
    """A scratch buffer's element dtype: float16 partials are held as float32."""
    return DType.float32 if dtype == DType.float16 else dtype


def _kind(p: Param) -> str:
    return "out" if p.output else "scratch" if p.scratch else "in"


def _shader(lang: WGSLLanguage, program: Program) -> ShaderProgram:
    """`program` rendered, with the bindings and features the runtime needs to run it. A binding
    has one element type: an input read as two dtypes is refused."""
    for p in program.params:
        if len(p.dtypes) > 1:
            why = f"input {p.index} read as {' and '.join(map(str, p.dtypes))}"
            raise UnsupportedOpError(AluOp.GlobalIndex, p.dtypes[1], "webgpu", why)
    code = lang.render_program(program)
    bindings = tuple(
        Binding(b, _kind(p), p.index, dtype, p.elements, not (p.output or p.scratch))
        for b, p in enumerate(program.params)
        for dtype in [_scratch_dtype(p.dtype) if p.scratch else p.dtype]
    )
    feats: tuple[str, ...] = ("shader-f64",) if "f64" in lang.features else ()
    if any(isinstance(s, WorkgroupFold) and s.subgroups for s in program.statements()):
        feats += ("subgroups",)
    uniform = OPAQUE_UNIFORM if lang.uses_uniform else None
    return ShaderProgram(code, "main", (program.local, 1, 1), program.grid, bindings, (), feats, uniform)


_VEC_DTYPES = (DType.float32, DType.int32, DType.uint32)  # element dtypes with a vec4<T>
