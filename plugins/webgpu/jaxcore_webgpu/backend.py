"""The webgpu backend: the device half of jaxcore.queue.QueuedBackend on wgpu.

Buffers are STORAGE | COPY_SRC | COPY_DST buffers from the core's pool; a slot is bound with its
own size (rounded up to 4 bytes), not the pooled capacity. Writes go through `queue.write_buffer`;
reads copy a 4-byte-aligned window into a pooled MAP_READ staging buffer, map it and slice. A batch
is one command encoder holding one compute pass for all its dispatches (a copy or a timed dispatch
without `timestamp-query-inside-passes` ends the pass), submitted once.
"""

from __future__ import annotations

import struct
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import wgpu
from wgpu.backends.wgpu_native._api import ffi, lib

from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar
from jaxcore.backend import Capabilities, Executable, UnsupportedOpError
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.pool import BufferPool
from jaxcore.queue import QueuedBackend, QueuedBuffer
from jaxcore.routine import Routine
from jaxcore.settings import current as current_settings
from jaxcore_webgpu.device import Gpu
from jaxcore_webgpu.export import RUNNER
from jaxcore_webgpu.program import CompiledPlan, PipelineCache, Plan, dump_dir_from_env, plan_from_shaders

_STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_STAGING = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
_MIN_BINDING = 16  # bytes bound at least (a binding must hold one element: f64, vec4<f32>)
_BIND_GROUPS = 4096  # bind groups kept for reuse (a loop binds the same buffers again and again)

# Pass commands go straight to wgpu-native, not through wgpu-py's methods: those wrap each call in
# error capture (about 1 µs a call, most of a tiny dispatch's host time), and wgpu-core only records
# pass commands, validating them when the pass ends, which still goes through wgpu-py (and raises).
_NULL = ffi.NULL
_set_pipeline = lib.wgpuComputePassEncoderSetPipeline
_set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
_dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups


@dataclass(eq=False)
class _Recorder:
    encoder: Any
    cpass: Any = None
    queries: Any = None  # GPUQuerySet, made on the first timed dispatch
    n_queries: int = 0
    pipeline: Any = None  # the pipeline set last in the current pass (None after a pass begins)
    cpass_id: Any = None  # the open pass's native handle, for the direct calls


@dataclass(eq=False)
class _Token:
    done: Any  # the promise of mapping `fence`, which resolves when the batch has run
    fence: Any
    submitted: float
    readback: Any = None  # MAP_READ buffer holding the resolved timestamps
    n_queries: int = 0


def _bound(nbytes: int) -> int:
    """The bytes a slot of `nbytes` is bound with: rounded up to 4, and at least one element."""
    return max(_MIN_BINDING, -(-nbytes // 4) * 4)


class WebGpuBackend(QueuedBackend):
    name = "webgpu"

    def __init__(self, gpu: Gpu | None = None) -> None:
        """A backend on `gpu`, or on a device of its own from the configured adapter (`open_device`)."""
        if gpu is None:
            from jaxcore_webgpu.device import open_device

            gpu = open_device()
        self.gpu = gpu
        self.device = gpu.device
        self.queue = gpu.device.queue
        lim, feat = gpu.limits, gpu.features
        self.binding_limit = lim["max-storage-buffer-binding-size"]
        self.timestamps = "timestamp-query" in feat
        self.timestamps_in_pass = "timestamp-query-inside-passes" in feat
        # float16 kernels hold their values in float32 (WGSL_TRAITS.f16_in_f32): no feature needed
        dtypes = {DType.float16, DType.float32, DType.int32, DType.uint32, DType.bool}
        quirks = self._quirks(gpu)
        if "shader-f64" in feat:
            dtypes.add(DType.float64)
        from jaxcore_webgpu.routines import DECLARED, UNDECLARED_DTYPES  # (they import this module)

        self.capabilities = Capabilities(
            dtypes=frozenset(dtypes),
            routines=DECLARED,
            max_args=lim["max-storage-buffers-per-shader-stage"] - 1,  # one binding is the output
            max_buffer_bytes=min(self.binding_limit, lim.get("max-buffer-size", self.binding_limit)) // 4 * 4,
            device_timestamps=self.timestamps,
            # naga spells only the canonical NaN in f64 (no f64 bitcast)
            inexact_nan_constants=frozenset({DType.float64}) & frozenset(dtypes),
            description=f"WGSL compute shaders on {gpu.description} through wgpu",
            quirks=tuple(sorted(quirks)),
            # the driver inlines every helper (a sin is ~350 ops): at 3,000 (8 float32 sines) the
            # costliest split part takes lavapipe about a second to compile, where 50 sines took 6 s
            max_kernel_cost=3000,
        )
        gaps = self._compiler_gaps() | UNDECLARED_DTYPES
        if "shader-f16" not in feat:  # the routines' float16 is WGSL's f16
            gaps |= {(r, DType.float16) for r in self.capabilities.routines}
        self.capabilities = replace(self.capabilities, unsupported_ops=gaps)
        # A compiled kernel holds its pipelines (~185 KiB each on lavapipe): at most 2,048 of them
        # keep the process near 0.5 GiB however many distinct kernels pass through.
        super().__init__(cache_size=min(current_settings().kernel_cache, 2048))
        # see QueuedBackend: a GPU's submit costs about 60 µs of host time, so it goes every 256
        self.early_submit = 64 if gpu.info.get("adapter_type") == "CPU" else 256
        self.pipelines = PipelineCache(self.device, dump_dir_from_env())
        self.staging: BufferPool[Any] = BufferPool(
            self._create_staging, lambda b: b.destroy(), max_cached_bytes=64 << 20
        )
        self._bind_groups: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._fences: list[Any] = []
        self._hand_plans: dict[str, Plan] = {}
        self._hand_planned: set[str] = set()  # kernel keys prepared from a compile_plan plan
        self._period_ns = self._timestamp_period()

    @staticmethod
    def _quirks(gpu: Gpu) -> set[str]:
        """What this adapter's driver does that the contract forbids, probed: float32 subnormals
        flushed (the exact spelling takes over)."""
        from jaxcore_webgpu.device import keeps_subnormals

        return set() if keeps_subnormals(gpu.device) else {"flushes-f32-subnormals"}

    def _compiler_gaps(self) -> frozenset[tuple[AluOp, DType]]:
        """The float ops the compiler has no exact WGSL for on this adapter (float64 transcendentals,
        so far), found by asking it: declared, so prepare's UnsupportedOpError is no surprise."""
        try:
            from jaxcore_webgpu import codegen
        except ImportError:
            return frozenset()
        gaps = set()
        for dtype in sorted(self.capabilities.dtypes & {DType.float16, DType.float32, DType.float64}):
            x = AluExp.global_index(dtype, 0, 1, AluVar.gidx)
            for op in sorted(AluGroup.RequiredFloat):
                try:
                    codegen.compile_kernel(Kernel(1, 1, AluExp(op, dtype, (x,))), self.target)
                except UnsupportedOpError:
                    gaps.add((op, dtype))
        return frozenset(gaps)

    def _timestamp_period(self) -> float:
        try:
            from wgpu.backends.wgpu_native._api import lib

            return float(lib.wgpuQueueGetTimestampPeriod(self.queue._internal)) or 1.0
        except Exception:
            return 1.0  # wgpu-native reports nanoseconds

    # ---- storage ---------------------------------------------------------------------------
    def _create_buffer(self, capacity: int) -> Any:
        capacity = -(-capacity // 4) * 4
        if capacity > self.binding_limit:
            raise MemoryError(
                f"webgpu: a buffer of {capacity} bytes exceeds max_storage_buffer_binding_size "
                f"({self.binding_limit} bytes) of {self.gpu.description}"
            )
        return self.device.create_buffer(size=capacity, usage=_STORAGE)

    def _destroy_buffer(self, raw: Any) -> None:
        for key in [k for k in self._bind_groups if any(r is raw for r in k[1 : 1 + len(k) // 2])]:
            del self._bind_groups[key]
        raw.destroy()

    def _create_staging(self, capacity: int) -> Any:
        return self.device.create_buffer(size=-(-capacity // 4) * 4, usage=_STAGING)

    def _write_buffer(self, buf: QueuedBuffer, data: memoryview) -> None:
        n = data.nbytes
        if n % 4:
            padded = bytearray(-(-n // 4) * 4)
            padded[:n] = data
            data = memoryview(padded)
        self.queue.write_buffer(buf.raw, 0, data)

    def _window(self, buf: QueuedBuffer, start: int, count: int) -> tuple[Any, int, int]:
        """Copy the 4-byte-aligned window around [start, start+count) into staging; (staging, cap, skip)."""
        lo, hi = start & ~3, -(-(start + count) // 4) * 4
        staging, cap = self.staging.alloc(hi - lo)
        enc = self.device.create_command_encoder()
        enc.copy_buffer_to_buffer(buf.raw, lo, staging, 0, hi - lo)
        self.queue.submit([enc.finish()])
        return staging, cap, start - lo

    def _read_buffer(self, buf: QueuedBuffer, start: int, count: int) -> bytes:
        staging, cap, skip = self._window(buf, start, count)
        staging.map_sync("READ", 0, -(-(skip + count) // 4) * 4)
        return self._take_window(staging, cap, skip, count)

    async def _read_buffer_async(self, buf: QueuedBuffer, start: int, count: int) -> bytes:
        staging, cap, skip = self._window(buf, start, count)
        await staging.map_async("READ", 0, -(-(skip + count) // 4) * 4)
        return self._take_window(staging, cap, skip, count)

    def _take_window(self, staging: Any, cap: int, skip: int, count: int) -> bytes:
        """The mapped window's `count` bytes after `skip`; the staging buffer goes back to its pool."""
        try:
            data = bytes(staging.read_mapped(0, -(-(skip + count) // 4) * 4, copy=False)[skip : skip + count])
        finally:
            staging.unmap()
        self.staging.free(staging, cap)
        return data

    # ---- compiling -------------------------------------------------------------------------
    def _compile_kernel(self, kernel: Kernel) -> CompiledPlan:
        ahead = self._take_precompiled(kernel)
        if ahead is not None:
            return ahead
        plan = self._hand_plans.pop(kernel.key(), None)
        if plan is not None:
            self._hand_planned.add(kernel.key())
        return self.pipelines.compile(plan or self._plan(kernel))

    async def _compile_kernel_async(self, kernel: Kernel) -> CompiledPlan:
        """WGSL now (pure Python), pipelines through `create_compute_pipeline_async`."""
        return await self.pipelines.compile_async(self._plan(kernel))

    def _plan(self, kernel: Kernel, target: Any = None) -> Plan:
        """The compiler's plan for a kernel (jaxcore_webgpu.codegen), in the runtime's terms, for
        this device or for `target`."""
        target = target or self.target
        limit = self.capabilities.max_buffer_bytes
        need = max([kernel.bytes, *kernel.input_bytes()])
        if need > limit:
            # No buffer of this device holds it, so it can never be dispatched, and its sizes (past
            # u32) have no WGSL literal: say so here rather than as a shader validation error.
            why = f"kernel needs a buffer of {need} bytes; max_buffer_bytes is {limit}"
            raise UnsupportedOpError(None, kernel.dtype, self.name, why)
        try:
            from jaxcore_webgpu import codegen
        except ImportError as e:
            raise UnsupportedOpError(None, kernel.dtype, self.name, f"no WGSL compiler: {e}") from None
        if current_settings().plugin_flag("webgpu", "matmul", default=True):
            from jaxcore_webgpu.matmul import plan_matmul

            tiled = plan_matmul(kernel, target)
            if tiled is not None:
                return tiled
        shader_plan = codegen.compile_kernel(kernel, target)
        return plan_from_shaders(shader_plan)

    @cached_property
    def target(self) -> Any:
        """What the compiler needs to know about this adapter (jaxcore_webgpu.codegen.WgslTarget).
        `JAXCORE_WEBGPU_SUBGROUPS=0` compiles without subgroup ops on an adapter that has them (the
        fallback, to compare both on one adapter); `JAXCORE_WEBGPU_RADIX_SORT_FROM` sets the row
        length from which Sort/Argsort take the radix sort (0: never), `JAXCORE_WEBGPU_RADIX_MATCH`
        whether its blocks are sorted by subgroup match (default: on a CPU adapter),
        `JAXCORE_WEBGPU_RADIX_TILES` how many consecutive blocks a workgroup of it takes (default 1),
        `JAXCORE_WEBGPU_CHOLESKY_LOOKAHEAD` whether the Cholesky's update factors the next diagonal
        block (default: on a GPU)."""
        from jaxcore_webgpu.codegen import WgslTarget
        from jaxcore_webgpu.device import subgroup_lanes
        from jaxcore_webgpu.routines.radix import RADIX_MIN, RADIX_MIN_GPU

        lim, feat = self.gpu.limits, self.gpu.features
        cpu = self.gpu.info.get("adapter_type") == "CPU"
        radix = RADIX_MIN if cpu else RADIX_MIN_GPU
        subgroups = "subgroup" in feat and current_settings().plugin_flag("webgpu", "subgroups", default=True)
        match = current_settings().plugin_flag("webgpu", "radix_match", default=cpu)
        return WgslTarget(
            has_f16="shader-f16" in feat,
            has_f64="shader-f64" in feat,
            has_subgroups=subgroups,
            subgroup_size=subgroup_lanes(self.gpu.device) if subgroups and match else 0,  # a probe dispatch
            has_f32_atomics="shader-float32-atomic" in feat,
            max_workgroup_size=min(
                lim["max-compute-invocations-per-workgroup"], lim["max-compute-workgroup-size-x"]
            ),
            max_workgroups_per_dim=lim["max-compute-workgroups-per-dimension"],
            max_storage_buffers_per_stage=lim["max-storage-buffers-per-shader-stage"],
            max_workgroup_storage=lim["max-compute-workgroup-storage-size"],
            exact_subnormals=self._exact_subnormals(),
            radix_sort_from=current_settings().plugin_int("webgpu", "radix_sort_from", radix),
            radix_keys_per_thread=16 if cpu else 8,
            radix_match=match,
            radix_tiles_per_block=current_settings().plugin_int("webgpu", "radix_tiles", 1, minimum=1),
            cholesky_lookahead=current_settings().plugin_flag(
                "webgpu", "cholesky_lookahead", default=not cpu
            ),
        )

    def _exact_subnormals(self) -> bool:
        """Spell float32 exact on subnormals: when this device flushes them (probed), or when
        `JAXCORE_WEBGPU_EXACT_SUBNORMALS` says so (1: always, as exported programs are; 0: never)."""
        cfg = current_settings()
        if cfg.plugin("webgpu").get("exact_subnormals", "").strip():
            return cfg.plugin_flag("webgpu", "exact_subnormals", default=True)
        return "flushes-f32-subnormals" in self.capabilities.quirks  # probed at start

    def browser_plan(self, exe: Executable) -> Plan | None:
        """The plan a browser needs for `exe` where it differs from what this device runs: planned
        again for `WgslTarget.browser()` (exact on subnormals, since the browser's device may flush
        them; no native-only float atomics; 16 KB of workgroup storage). None: export the compiled
        plan (a plan made by hand with `compile_plan`, or a device whose target already is the
        browser's). A kernel run here as parts (Capabilities.max_kernel_cost, a dead reduction
        dropped) is planned whole."""
        src, browser = exe.source, self.target.browser()
        if isinstance(src, Routine) and browser != self.target:
            from jaxcore_webgpu.routines import plan_routine

            return plan_routine(src, browser)
        if not isinstance(src, Kernel) or src.key() in self._hand_planned:
            return None
        if browser == self.target and isinstance(exe.data, CompiledPlan):
            return None
        return self._plan(src.live(), browser)

    def _compile_routine(self, routine: Routine) -> CompiledPlan:
        """Every declared routine runs as WGSL passes (jaxcore_webgpu.routines); none on the host."""
        from jaxcore_webgpu.routines import plan_routine

        return self.pipelines.compile(plan_routine(routine, self.target))

    def compile_plan(self, source: Kernel, plan: Plan) -> Executable:
        """Prepare `source` with a hand-made plan instead of the compiler's (tests, experiments);
        the executable is made and cached by `prepare_kernel`, as every other, in place of any
        executable of the same kernel prepared before (so each plan of a sweep runs its own)."""
        self._kernel_cache.forget(source.key())
        self._hand_plans[source.key()] = plan
        try:
            return self.prepare_kernel(source)
        finally:
            self._hand_plans.pop(source.key(), None)

    # ---- recording -------------------------------------------------------------------------
    def _open_batch(self) -> _Recorder:
        return _Recorder(self.device.create_command_encoder())

    def _bind_group(self, layout: Any, bufs: list[QueuedBuffer]) -> Any:
        """The bind group of `bufs` for `layout`, cached by buffer identity and bound size (a chain
        of dispatches alternates between a few pooled buffers, so nearly every lookup hits)."""
        if len(bufs) == 2:  # one input and the output: the common case, without a generator
            a, b = bufs
            key: tuple[Any, ...] = (layout, a.raw, b.raw, a.nbytes, b.nbytes)
        else:
            key = (layout, *[b.raw for b in bufs], *[b.nbytes for b in bufs])
        group = self._bind_groups.get(key)
        if group is not None:
            self._bind_groups.move_to_end(key)
            return group
        entries = [
            {"binding": i, "resource": {"buffer": b.raw, "offset": 0, "size": _bound(b.nbytes)}}
            for i, b in enumerate(bufs)
        ]
        group = self.device.create_bind_group(layout=layout, entries=entries)
        self._bind_groups[key] = group
        if len(self._bind_groups) > _BIND_GROUPS:
            self._bind_groups.popitem(last=False)
        return group

    def _fast_recorder(self, exe: Executable) -> Any:
        """For a one-pass plan over the kernel's own buffers (`CompiledPlan.single`): `_record`'s
        short path with the pass's pipeline, layout and grid bound once. It takes the backend as an
        argument (a closure over it would make a cycle through the executable cache)."""
        plan = exe.data
        one = plan.single if isinstance(plan, CompiledPlan) else None
        if one is None or len(one.bindings) != len(exe._io_bytes[0]) + 1:
            return None
        pipe, pid, layout = one.pipeline, one.pipeline_id, one.layout
        gx, gy, gz = one.grid
        groups = self._bind_groups  # made once in __init__ (close() clears it, never replaces it)
        set_pipeline, set_bind_group, dispatch, null = _set_pipeline, _set_bind_group, _dispatch, _NULL

        def record(be: WebGpuBackend, rec: _Recorder, bufs: list[QueuedBuffer]) -> None:
            cid = rec.cpass_id
            if cid is None:
                be._begin_pass(rec)
                cid = rec.cpass_id
            if rec.pipeline is not pipe:
                set_pipeline(cid, pid)
                rec.pipeline = pipe
            if len(bufs) == 2:
                a, b = bufs
                # A hit skips the LRU refresh (move_to_end): a hot group can then be evicted and made
                # again after 4096 newer ones, a rare miss that costs less than a refresh per call.
                group = groups.get((layout, a.raw, b.raw, a.nbytes, b.nbytes))
            else:
                group = None
            if group is None:  # a miss, or more buffers: the general lookup
                group = be._bind_group(layout, bufs)
            set_bind_group(cid, 0, group._internal, 0, null)
            dispatch(cid, gx, gy, gz)

        return record

    def _begin_pass(self, rec: _Recorder, timestamp_writes: Any = None) -> Any:
        cpass = rec.encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
        rec.cpass, rec.cpass_id, rec.pipeline = cpass, cpass._internal, None
        return cpass

    def _end_pass(self, rec: _Recorder) -> None:
        if rec.cpass is not None:
            rec.cpass.end()
            rec.cpass = rec.cpass_id = None

    def _record(
        self,
        rec: _Recorder,
        exe: Executable,
        inputs: list[QueuedBuffer],
        outputs: list[QueuedBuffer],
        timed: bool,
    ) -> None:
        """Every pass of `exe` into the open compute pass (its repeats take `_fast_recorder`)."""
        plan: CompiledPlan = exe.data
        scratch = [self._temporary(n) for n in plan.scratch]
        sets = {"in": inputs, "out": outputs, "scratch": scratch}
        timed = timed and self._timing_slots(rec)
        if timed and not self.timestamps_in_pass:
            self._end_pass(rec)
            writes = {
                "query_set": rec.queries,
                "beginning_of_pass_write_index": rec.n_queries,
                "end_of_pass_write_index": rec.n_queries + 1,
            }
            cpass = self._begin_pass(rec, writes)
        else:
            cpass = rec.cpass
            if cpass is None:
                cpass = self._begin_pass(rec)
            if timed:
                from wgpu.backends.wgpu_native.extras import write_timestamp

                write_timestamp(cpass, rec.queries, rec.n_queries)
        cid = rec.cpass_id
        for p in plan.passes:
            if not (p.grid[0] and p.grid[1] and p.grid[2]):
                continue
            bufs = [sets[kind][i] for kind, i in p.bindings]
            if rec.pipeline is not p.pipeline:  # each native call costs: skip a repeated one
                _set_pipeline(cid, p.pipeline_id)
                rec.pipeline = p.pipeline
            _set_bind_group(cid, 0, self._bind_group(p.layout, bufs)._internal, 0, _NULL)
            if p.uniform_group is not None:
                _set_bind_group(cid, 1, p.uniform_group._internal, 0, _NULL)
            _dispatch(cid, *p.grid)
        if timed:
            if self.timestamps_in_pass:
                from wgpu.backends.wgpu_native.extras import write_timestamp

                write_timestamp(cpass, rec.queries, rec.n_queries + 1)
            else:
                self._end_pass(rec)
            rec.n_queries += 2

    def _timing_slots(self, rec: _Recorder) -> bool:
        if not self.timestamps:
            return False
        if rec.queries is None:
            rec.queries = self.device.create_query_set(type="timestamp", count=2 * self.batch_limit)
        return rec.n_queries + 2 <= 2 * self.batch_limit

    def _record_copy(self, rec: _Recorder, src: QueuedBuffer, dst: QueuedBuffer, nbytes: int) -> None:
        self._end_pass(rec)
        n = -(-nbytes // 4) * 4
        if n:
            rec.encoder.copy_buffer_to_buffer(src.raw, 0, dst.raw, 0, n)

    def _submit(self, rec: _Recorder) -> _Token:
        self._end_pass(rec)
        readback = None
        if rec.n_queries:
            nbytes = rec.n_queries * 8
            resolve = self.device.create_buffer(
                size=nbytes, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            readback = self.device.create_buffer(size=nbytes, usage=_STAGING)
            rec.encoder.resolve_query_set(rec.queries, 0, rec.n_queries, resolve, 0)
            rec.encoder.copy_buffer_to_buffer(resolve, 0, readback, 0, nbytes)
        # The fence: a 4-byte copy at the end of the batch into a MAP_READ buffer, whose map resolves
        # once the batch has run (wgpu-py 0.32's on_submitted_work_done_async has a broken callback).
        fence = self._fences.pop() if self._fences else self.device.create_buffer(size=4, usage=_STAGING)
        rec.encoder.copy_buffer_to_buffer(self._zero_buffer().raw, 0, fence, 0, 4)
        submitted = time.perf_counter()
        self.queue.submit([rec.encoder.finish()])
        return _Token(fence.map_async("READ_NOSYNC", 0, 4), fence, submitted, readback, rec.n_queries)

    def _is_done(self, token: _Token) -> bool:
        if token.fence is None:
            return True
        event = getattr(token.done, "_thread_event", None)  # wgpu-py 0.32's promise; no public poll
        if event is None or not event.is_set():
            return False
        self._wait(token)  # resolved: unmap the fence and keep it for the next batch
        return True

    def _wait(self, token: _Token) -> None:
        if token.fence is None:
            return
        token.done.sync_wait()
        token.fence.unmap()
        self._fences.append(token.fence)
        token.fence = None

    def _timings(self, token: _Token) -> list[tuple[float | None, float]] | None:
        if token.readback is None:
            return None
        token.readback.map_sync("READ")
        raw = token.readback.read_mapped(copy=True)
        token.readback.unmap()
        token.readback.destroy()
        ticks = struct.unpack(f"<{token.n_queries}Q", raw)
        ns = self._period_ns
        t0 = ticks[0]
        # The device clock has its own origin: the first timestamp is placed at the submit.
        return [
            (token.submitted + (ticks[i] - t0) * ns * 1e-9, max(ticks[i + 1] - ticks[i], 0) * ns * 1e-9)
            for i in range(0, len(ticks), 2)
        ]

    def export(self, exe: Executable) -> dict[str, Any]:
        """`exe` as a self-contained browser program for runner.js (docs/browser-export.md)."""
        from jaxcore_webgpu.export import export

        return export(self, exe)

    def export_runtime(self) -> tuple[str, str]:
        """The ES module that runs exported programs in a page, as jaxcore.web bundles it."""
        return "webgpu.js", RUNNER.read_text()

    def close(self) -> None:
        """Finish queued work and give every pooled buffer back to the device."""
        self.finish()
        self.pool.clear()
        self.staging.clear()
        self._bind_groups.clear()
