"""What the runtime runs: a `Plan` of WGSL passes, and the pipelines compiled from it.

The compiler (jaxcore_webgpu.codegen) turns a Kernel into WGSL; the runtime needs only this much
of its answer: for each pass, the WGSL, the entry point, the workgroup grid, which buffer each
`@group(0) @binding(i)` is (an input, the output, or a scratch buffer the plan owns), and an
optional uniform block bound at `@group(1) @binding(0)`. Passes run in order, in one compute pass
of the batch (WebGPU orders dispatches in a pass and makes each one's writes visible to the next).

Pipelines are cached by WGSL text (two kernels that render the same shader share one pipeline);
executables are cached by kernel key one level up, in BaseBackend. wgpu-py 0.32 exposes no
pipeline cache (wgpu-native's `WGPUPipelineCache` has no binding there), so nothing is kept on
disk; `JAXCORE_WEBGPU_DUMP=DIR` writes every shader compiled, named by its digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Binding = tuple[str, int]  # ("in", i) | ("out", i) | ("scratch", i)


@dataclass(frozen=True)
class Pass:
    code: str
    grid: tuple[int, int, int]
    bindings: tuple[Binding, ...]
    entry: str = "main"
    uniform: bytes | None = None


@dataclass(frozen=True)
class Plan:
    passes: tuple[Pass, ...]
    scratch: tuple[int, ...] = ()  # byte sizes of the plan's scratch buffers


@dataclass(eq=False)
class CompiledPass:
    pipeline: Any
    layout: Any  # bind group layout of group 0
    grid: tuple[int, int, int]
    bindings: tuple[Binding, ...]
    uniform_group: Any = None  # a bind group for group 1, made once
    uniform: bytes | None = None  # its bytes (what an export ships), padded to 16
    pipeline_id: Any = field(init=False)  # the native handle: the runtime calls wgpu-native directly

    def __post_init__(self) -> None:
        self.pipeline_id = self.pipeline._internal


@dataclass(eq=False)
class CompiledPlan:
    passes: tuple[CompiledPass, ...]
    scratch: tuple[int, ...]
    codes: tuple[str, ...] = field(default=())
    single: CompiledPass | None = field(default=None, init=False)  # see __post_init__

    def __post_init__(self) -> None:
        # The common plan, worked out once: one non-empty pass binding the inputs in order, then
        # the output, with no scratch or uniforms. The runtime records it on a short path.
        if len(self.passes) == 1 and not self.scratch:
            p = self.passes[0]
            n_in = len(p.bindings) - 1
            order = tuple(("in", i) for i in range(n_in)) + (("out", 0),)
            if p.bindings == order and p.uniform_group is None and all(p.grid):
                self.single = p


class ShaderError(RuntimeError):
    """WGSL that wgpu rejected: its message and the source, with line numbers."""


def _numbered(code: str) -> str:
    return "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(code.splitlines()))


class PipelineCache:
    """Compute pipelines by (WGSL text, entry point), the `size` most recently used: a shader two
    kernels share compiles once. A pipeline is owned by the compiled plans that use it and dies
    with the last of them (the backend's kernel cache), so this cache bounds nothing it does not
    hold: at 4,000 distinct kernels an unbounded one kept 934 MiB alive on lavapipe."""

    def __init__(self, device: Any, dump_dir: str | None = None, size: int = 256) -> None:
        self.device = device
        self.dump_dir = Path(dump_dir) if dump_dir else None
        self.size = size
        self._pipelines: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0
        self.hits = 0
        self._scratch: list[Any] = []  # storage buffers a new pipeline's warm-up binds (_warm)
        self._cold: set[tuple[str, str]] = set()  # pipelines made but not yet warmed

    def pipeline(self, code: str, entry: str) -> Any:
        key = (code, entry)
        with self._lock:
            pipe = self._hit(key)
            if pipe is None:
                with self._compiling(code, entry) as compute:
                    pipe = self.device.create_compute_pipeline(layout="auto", compute=compute)
                self._keep(key, pipe)
            return pipe

    async def pipeline_async(self, code: str, entry: str) -> Any:
        """`pipeline`, with wgpu building it while the event loop runs (`create_compute_pipeline_async`)."""
        key = (code, entry)
        with self._lock:
            pipe = self._hit(key)
        if pipe is None:
            with self._compiling(code, entry) as compute:
                pipe = await self.device.create_compute_pipeline_async(layout="auto", compute=compute)
            with self._lock:
                self._keep(key, self._pipelines.get(key, pipe))
        return pipe

    def _hit(self, key: tuple[str, str]) -> Any:
        pipe = self._pipelines.get(key)
        if pipe is not None:
            self._pipelines.move_to_end(key)
            self.hits += 1
        return pipe

    @contextlib.contextmanager
    def _compiling(self, code: str, entry: str) -> Iterator[dict[str, Any]]:
        """The `compute` stage (shader module and entry point) of the pipeline made in the block;
        what wgpu rejects in either raises ShaderError with the numbered source."""
        self._dump(code)
        try:
            yield {"module": self.device.create_shader_module(code=code), "entry_point": entry}
        except Exception as e:
            raise ShaderError(f"wgpu rejected a WGSL shader: {e}\n{_numbered(code)}") from None

    def _warm(self, passes: list[CompiledPass]) -> None:
        """One workgroup of each new pipeline over scratch buffers (WGSL bounds-checks every access),
        waited for: a driver that compiles at the first dispatch (lavapipe) does it in prepare. Best
        effort: a pass it cannot bind is left to its first dispatch, which reports what is wrong.
        The buffers are zeroed first, so that a shader whose loops run on what it reads (a count,
        an index, a flag to wait for) meets zeros, not whatever the last warm-up left there."""
        import wgpu

        with contextlib.suppress(Exception):
            for cp in passes:
                for _ in range(len(cp.bindings) - len(self._scratch)):
                    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
                    self._scratch.append(self.device.create_buffer(size=256, usage=usage))
                entries = [{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(self._scratch)]
                group = self.device.create_bind_group(layout=cp.layout, entries=entries[: len(cp.bindings)])
                enc = self.device.create_command_encoder()
                for buf in self._scratch[: len(cp.bindings)]:
                    enc.clear_buffer(buf)
                run = enc.begin_compute_pass()
                run.set_pipeline(cp.pipeline)
                run.set_bind_group(0, group)
                if cp.uniform_group is not None:
                    run.set_bind_group(1, cp.uniform_group)
                run.dispatch_workgroups(1, 1, 1)
                run.end()
                self.device.queue.submit([enc.finish()])
            self.device.queue.read_buffer(self._scratch[0], 0, 4)  # returns once the queue has run them

    def _keep(self, key: tuple[str, str], pipe: Any) -> None:
        if key not in self._pipelines:
            self.compiles += 1
            self._cold.add(key)
        self._pipelines[key] = pipe
        self._pipelines.move_to_end(key)
        while len(self._pipelines) > self.size:
            self._cold.discard(self._pipelines.popitem(last=False)[0])

    async def compile_async(self, plan: Plan) -> CompiledPlan:
        for p in plan.passes:
            await self.pipeline_async(p.code, p.entry)
        return self.compile(plan)  # every pipeline is cached now: this only binds

    def _dump(self, code: str) -> None:
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            path = self.dump_dir / f"{hashlib.blake2b(code.encode(), digest_size=8).hexdigest()}.wgsl"
            if not path.exists():
                path.write_text(code)

    def compile(self, plan: Plan) -> CompiledPlan:
        import wgpu

        passes, fresh = [], []
        for p in plan.passes:
            pipe = self.pipeline(p.code, p.entry)
            ugroup, data = None, None
            if p.uniform is not None:
                data = bytes(p.uniform) + b"\0" * (-len(p.uniform) % 16)
                ubuf = self.device.create_buffer_with_data(data=data, usage=wgpu.BufferUsage.UNIFORM)
                ugroup = self.device.create_bind_group(
                    layout=pipe.get_bind_group_layout(1),
                    entries=[{"binding": 0, "resource": {"buffer": ubuf, "offset": 0, "size": len(data)}}],
                )
            passes.append(CompiledPass(pipe, pipe.get_bind_group_layout(0), p.grid, p.bindings, ugroup, data))
            if (p.code, p.entry) in self._cold:  # made here or by compile_async, not yet warmed
                self._cold.discard((p.code, p.entry))
                fresh.append(passes[-1])
        if fresh:  # (the wait below syncs the whole queue: only for new pipelines)
            self._warm(fresh)
        return CompiledPlan(tuple(passes), tuple(plan.scratch), tuple(p.code for p in plan.passes))


def plan_from_shaders(shader_plan: Any) -> Plan:
    """The runtime's `Plan` from the compiler's `ShaderPlan` (jaxcore_webgpu.codegen): passes in
    order, each binding by its `@binding` number (which must run 0..n-1, as bind groups are built)."""
    passes = []
    for prog in shader_plan.passes:
        order = sorted(prog.bindings, key=lambda b: b.binding)
        if [b.binding for b in order] != list(range(len(order))):
            raise ValueError(
                f"shader bindings must be numbered 0..{len(order) - 1}: {[b.binding for b in order]}"
            )
        if getattr(prog, "uniforms", ()):
            raise ValueError("the runtime binds no uniforms for compiled kernels")
        binds = tuple((b.kind, b.index) for b in order)
        passes.append(Pass(prog.code, _grid3(prog.grid), binds, prog.entry, prog.uniform))
    return Plan(tuple(passes), tuple(shader_plan.scratch))


def _grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    """A dispatch grid of one to three dimensions as (x, y, z), the missing ones 1."""
    g = [int(d) for d in grid] + [1] * (3 - len(grid))
    if len(g) != 3:
        raise ValueError(f"a dispatch grid has one to three dimensions, got {list(grid)}")
    return g[0], g[1], g[2]


def dump_dir_from_env() -> str | None:
    return os.environ.get("JAXCORE_WEBGPU_DUMP", "").strip() or None
