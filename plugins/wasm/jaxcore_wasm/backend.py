"""WasmBackend: every buffer lives in one shared wasm linear memory; kernels are wasm modules.

Dispatch calls the kernel's exported function through the raw C API on the calling thread's lane;
large kernels are split across a pool of worker threads, each with its own Store and instances of
the same module over the same memory (wasmtime releases the GIL while wasm runs). Sort and
Argsort of long 32-bit rows run as a radix sort in wasm (`radix.py`); the other routines, and short
or 64-bit rows, run as host code (numpy) on views of the linear memory.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxcore import settings, tracing
from jaxcore.plugin import (
    COMPOSED_ROUTINES,
    BaseBackend,
    Capabilities,
    DType,
    Executable,
    Kernel,
    Routine,
    Routines,
    run_routine,
    to_numpy,
)
from jaxcore_wasm import codegen, matmul, peak, radix, runtime
from jaxcore_wasm.codegen import KernelPlan
from jaxcore_wasm.compiler import compiler, memory_cache_size
from jaxcore_wasm.memory import Allocator
from jaxcore_wasm.module import MAX_PAGES, PAGE

if TYPE_CHECKING:
    import wasmtime

CAPABILITIES = Capabilities(
    dtypes=frozenset(DType),
    routines=frozenset(Routines) - COMPOSED_ROUTINES,  # those run as the core's kernels
    max_args=64,
    max_buffer_bytes=(MAX_PAGES - 1) * PAGE,
    description="LLVM -> WebAssembly (simd128) kernels run by wasmtime on one shared linear memory; "
    "long 32-bit sorts as a wasm radix sort, the other routines as host code on that memory",
)

# Work (output elements x reduction items x op weight) below which a kernel runs on the calling
# thread only: handing a job to a worker thread costs ~50-70 us here (thread wake-up and GIL
# hand-over), which a cheap map of fewer than ~2^19 elements does not win back.
PARALLEL_MIN_WORK = 1 << 21
_HEAVY = {"Sin", "Cos", "Asin", "Atan", "Exp", "Log", "Erf", "Erfc", "Mod", "Idiv", "Threefry2x32"}


def _weight(kernel: Kernel) -> int:
    """A rough cost per item: one per node, twenty per transcendental or division."""
    return sum(20 if n.op.value in _HEAVY else 1 for n in kernel.nodes())


CHUNK_ALIGN = 64
PARALLEL_MIN_FLOPS = 1 << 22


def _i32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def _spans(total: int, parts: int, align: int) -> list[tuple[int, int]]:
    """`[0, total)` cut into at most `parts` non-empty ranges that start at multiples of `align`."""
    step = -(-total // parts)
    step = -(-step // align) * align
    return [(lo, min(total, lo + step)) for lo in range(0, total, max(step, 1))]


@dataclass
class KernelExe:
    """The compiled kernel plus what dispatch needs without lookups."""

    module: Any
    plan: KernelPlan
    args: Any  # preallocated raw argument array for the main lane (begin/end already set)
    nparams: int
    source: str
    single: bool  # runs as one call of `kernel` on the dispatching thread
    funcs: dict[str, Any] = field(default_factory=dict)  # main lane's functions, of Store `gen`
    kernel_fn: Any = None
    gen: int = -1  # the main lane's Store generation `funcs` belong to (-1: not looked up yet)
    # the last validated dispatch of a `single` kernel: (input slots, output slots, their _Buffer
    # (slot, record) pairs, a raw argument array filled for them). The same slots, still holding those very
    # buffers, need no validation again: see WasmBackend.dispatch.
    memo: tuple[list[Any], list[Any], tuple[tuple[Any, Any], ...], Any] | None = None


class WasmBackend(BaseBackend):
    name = "wasm"
    capabilities = CAPABILITIES

    def __init__(self, threads: int | None = None) -> None:
        # Each Executable holds a compiled module (about 105 KiB with its instance): keep no more
        # of them than the compiler keeps modules (JAXCORE_WASM_MEMORY_CACHE), nor than the core's
        # JAXCORE_KERNEL_CACHE. An evicted Executable still runs.
        super().__init__(cache_size=min(memory_cache_size(), settings.current().kernel_cache))
        self.engine = runtime.engine()
        self.memory = runtime.Memory(self.engine)
        self.allocator = Allocator(self.memory.ensure)
        self.lane = runtime.Lane(self.engine, self.memory)
        self._lane_lock = threading.Lock()
        if threads is None:
            env = settings.current().plugin("wasm").get("threads", "").strip()
            threads = int(env) if env else (os.cpu_count() or 1)
        self.threads = max(1, threads)
        self._pool: runtime.Pool | None = None
        self._setup_lock = threading.Lock()  # the pool and scratch blocks are made once, on first use
        self.compiler = compiler()
        self._sgemm_module: wasmtime.Module | None = None
        self._radix_module: wasmtime.Module | None = None
        self._scratch: list[int] = []

    # ---- memory ------------------------------------------------------------------------------
    def _alloc(self, size: int) -> int:
        return self.allocator.alloc(size)

    def _free(self, handle: int) -> None:
        self.allocator.free(handle)

    def _copyin(self, handle: int, data: memoryview) -> None:
        self.memory.view(handle, data.nbytes)[:] = data

    def _copyout(self, handle: int, start: int, count: int) -> bytes:
        return bytes(self.memory.view(handle + start, count))

    def array(self, handle: int, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of `shape` elements of `dtype` at pointer `handle` (no copy)."""
        n = math.prod(shape)
        if n == 0:
            return np.empty(shape, to_numpy(dtype))
        nbytes = n * to_numpy(dtype).itemsize
        return np.frombuffer(self.memory.view(handle, nbytes), dtype=to_numpy(dtype)).reshape(shape)

    # ---- compile -------------------------------------------------------------------------------
    def _compile_kernel(self, kernel: Kernel) -> KernelExe:
        ck = self.compiler.compile(kernel)
        if ck.plan.matmul is not None:
            self._sgemm()
        plan = ck.plan
        nparams = kernel.nargs + 4  # ins, out, begin, end, scratch
        work = plan.size * max(plan.reduce, 1) * _weight(kernel)
        parallel = (
            self.threads > 1
            and work >= PARALLEL_MIN_WORK
            and ((plan.split and plan.size < self.threads * CHUNK_ALIGN) or plan.size >= 2 * CHUNK_ALIGN)
        )
        single = plan.matmul is None and plan.size > 0 and not parallel
        args = runtime.make_args([0] * (nparams - 3) + [0, plan.size, _i32(self._scratch_for(0))])
        exe = KernelExe(ck.module, plan, args, nparams, ck.source, single)
        with self._lane_lock:
            self._bind(exe)
        return exe

    def _bind(self, data: KernelExe) -> dict[str, Any]:
        """The main lane's functions of `data`, looked up again after the lane changed Store.
        Call with the lane lock held."""
        if data.gen != self.lane.generation:
            data.funcs = self.lane.funcs(data.module) if data.module is not None else {}
            data.kernel_fn = data.funcs.get("kernel")
            data.gen = self.lane.generation  # after the lookup, which may itself change Store
        return data.funcs

    def _compile_routine(self, routine: Routine) -> None:
        return None

    # ---- run -------------------------------------------------------------------------------------
    def dispatch(self, exe: Executable, inputs: Any, outputs: Any) -> None:
        """BaseBackend.dispatch, with a fast path for a `single` kernel dispatched again on the slots
        of its last dispatch: validation only depends on the executable and on the buffers those
        slots hold (sizes never change; a freed or reused slot holds another record, or none), and
        aliasing only on the slots, so a repeat that finds the same records runs straight away."""
        data = exe.data if type(exe) is Executable else None
        if type(data) is KernelExe and data.single and not tracing.is_tracing():
            m = data.memo
            if m is not None and m[0] == inputs and m[1] == outputs:
                get = self._buffers.get
                for s, b in m[2]:
                    if get(s) is not b:
                        break
                else:
                    # == takes True for 1: a bool slot must still meet the full path's refusal
                    for s in (*inputs, *outputs):
                        if type(s) is bool:
                            return super().dispatch(exe, inputs, outputs)
                    lane = self.lane
                    with self._lane_lock:
                        if data.gen != lane.generation:
                            self._bind(data)
                        err = runtime.raw_call(lane.ctx, data.kernel_fn, m[3], data.nparams, lane._trap_ref)
                        if err or lane._trap:
                            lane._raise(err)
                    return
            super().dispatch(exe, inputs, outputs)
            ins, outs = list(inputs), list(outputs)
            if not any(o in ins for o in outs):
                bufs = tuple((s, self._buffers[s]) for s in ins + outs)
                handles = [_i32(b.handle) for _, b in bufs]
                args = runtime.make_args([*handles, 0, data.plan.size, _i32(self._scratch_for(0))])
                data.memo = (ins, outs, bufs, args)
            return
        super().dispatch(exe, inputs, outputs)

    def _run(self, exe: Executable, inputs: list[Any], outputs: list[Any]) -> None:
        data = exe.data
        if data is None:
            assert isinstance(exe.source, Routine)  # only routines compile to no data
            self._run_routine(exe.source, inputs, outputs)
            return
        if data.single:  # the hot path: one call on this thread, no allocation
            args = data.args
            with self._lane_lock:
                if data.gen != self.lane.generation:
                    self._bind(data)
                i = 0
                for p in inputs:
                    args[i].i32 = p if p < 0x80000000 else p - 0x100000000
                    i += 1
                p = outputs[0]
                args[i].i32 = p if p < 0x80000000 else p - 0x100000000
                self.lane.call(data.kernel_fn, args, data.nparams)
            return
        plan = data.plan
        if plan.size == 0:
            return
        ptrs = [*inputs, outputs[0]]
        if plan.matmul is not None:
            self._run_matmul(data, ptrs)
        elif plan.split and plan.size < self.threads * CHUNK_ALIGN:
            self._run_split(data, ptrs)
        else:
            self._run_chunks(data, ptrs)

    def _copy_buffer(self, src_handle: int, dst_handle: int, nbytes: int) -> None:
        """An aliased dispatch's temporary to its output, within linear memory (the base class runs
        it: kernels are compiled `noalias` and never see an output that is also an input)."""
        self.memory.view(dst_handle, nbytes)[:] = self.memory.view(src_handle, nbytes)

    def pool(self) -> runtime.Pool:
        pool = self._pool
        if pool is None:
            with self._setup_lock:  # threads racing on first use must not each start a pool
                if self._pool is None:
                    self._pool = runtime.Pool(self.engine, self.memory, self.threads - 1)
                pool = self._pool
        return pool

    def _parallel(self, parts: int, work: Callable[[runtime.Lane, int], None]) -> None:
        """`work(lane, i)` for every part i: part 0 on this thread's lane, the others on the pool's."""

        def main() -> None:
            with self._lane_lock:
                work(self.lane, 0)

        if parts == 1:
            main()
        else:
            self.pool().run([lambda lane, i=i: work(lane, i) for i in range(1, parts)], main)  # type: ignore[misc]  # mypy cannot type a lambda with a default

    def _run_chunks(self, data: KernelExe, ptrs: list[int]) -> None:
        size = data.plan.size
        bounds = _spans(size, max(1, min(self.threads, size // CHUNK_ALIGN)), CHUNK_ALIGN)
        base = [_i32(p) for p in ptrs]
        scratch = [_i32(self._scratch_for(t)) for t in range(len(bounds))]

        def work(lane: runtime.Lane, i: int) -> None:
            lo, hi = bounds[i]
            args = runtime.make_args([*base, lo, hi, scratch[i]])
            lane.call(lane.funcs(data.module)["kernel"], args, data.nparams)

        self._parallel(len(bounds), work)

    def _run_split(self, data: KernelExe, ptrs: list[int]) -> None:
        """Split the reduced axis: each thread folds a range into scratch, then `finish` combines."""
        plan = data.plan
        ranges = _spans(plan.reduce, self.threads, CHUNK_ALIGN)
        nparts = len(ranges)
        scratch = self.allocator.alloc(nparts * plan.size * plan.acc_bytes)
        try:
            ins = [_i32(p) for p in ptrs[:-1]]

            def work(lane: runtime.Lane, i: int) -> None:
                lo, hi = ranges[i]
                args = runtime.make_args([*ins, _i32(scratch + i * plan.size * plan.acc_bytes), lo, hi])
                lane.call(lane.funcs(data.module)["partial"], args, len(ins) + 3)

            self._parallel(nparts, work)
            with self._lane_lock:
                args = runtime.make_args([*ins, _i32(ptrs[-1]), _i32(scratch), nparts, 0, plan.size])
                self.lane.call(self._bind(data)["finish"], args, len(ins) + 5)
        finally:
            self.allocator.free(scratch)

    # ---- machine limits ----------------------------------------------------------------------------
    def peak_flops(self, threads: int | None = None, iters: int = 1 << 22, rounds: int = 5) -> float:
        """Measured SIMD128 float32 peak in flop/s on `threads` threads (default: all of this backend's):
        the best of `rounds` runs of a register-only multiply-add loop (`peak.py`), fused or mul+add."""
        mod = self.compiler.library("peak", peak.plan_key(), peak.peak_ir)
        nt = max(1, min(self.threads if threads is None else threads, self.threads))
        buf = self.allocator.alloc(nt * peak.SCRATCH_BYTES)
        try:
            view = self.array(buf, DType.float32, (nt, peak.SCRATCH_BYTES // 4))
            view[:] = 1.0
            view[:, :4] = 0.5
            best = 0.0
            for name in ("peak_fma", "peak_muladd"):

                def work(lane: runtime.Lane, i: int, name: str = name) -> None:
                    args = runtime.make_args([_i32(buf + i * peak.SCRATCH_BYTES), iters])
                    lane.call(lane.funcs(mod)[name], args, 2)

                for _ in range(rounds):
                    t0 = time.perf_counter()
                    self._parallel(nt, work)
                    best = max(best, nt * iters * peak.FLOPS_PER_ITER / (time.perf_counter() - t0))
            return best
        finally:
            self.allocator.free(buf)

    # ---- sort ------------------------------------------------------------------------------------
    def _radix_sort(self, routine: Routine, inputs: list[int], outputs: list[int]) -> bool:
        """Sort / Argsort of long 32-bit rows by the radix module; False leaves it to the host."""
        t = routine.type
        dtype = str(t.input_dtypes[0])
        if routine.name not in (Routines.Sort, Routines.Argsort) or dtype not in radix.MODES:
            return False
        n = t.input_shapes[0][-1] if t.input_shapes[0] else 1
        if n < radix.MIN_ROW:
            return False
        rows = math.prod(t.input_shapes[0][:-1])
        if self._radix_module is None:  # built once; racing threads get the same module
            self._radix_module = self.compiler.library("radix", radix.plan_key(), radix.radix_ir)
        argsort = routine.name == Routines.Argsort
        fname = f"{'argsort' if argsort else 'sort'}_{radix.MODES[dtype]}"
        try:
            scratch = self.allocator.alloc(radix.scratch_bytes(n, argsort))
        except MemoryError:  # no room for the scratch halves: numpy sorts in place on the host
            return False
        try:
            with self._lane_lock:
                fref = self.lane.funcs(self._radix_module)[fname]
                for r in range(rows):
                    off = 4 * n * r
                    ptrs = [inputs[0] + off, outputs[0] + off] + ([outputs[1] + off] if argsort else [])
                    args = runtime.make_args([*(_i32(p) for p in ptrs), n, _i32(scratch)])
                    self.lane.call(fref, args, len(ptrs) + 2)
        finally:
            self.allocator.free(scratch)
        return True

    # ---- matmul ----------------------------------------------------------------------------------
    def _sgemm(self) -> wasmtime.Module:
        if self._sgemm_module is None:  # the compiler builds it once; racing threads get the same module
            self._sgemm_module = self.compiler.library(
                "sgemm", matmul.plan_key(), matmul.sgemm_ir, matmul.CODEGEN_OPT
            )
        return self._sgemm_module

    def _scratch_for(self, t: int) -> int:
        """Thread t's scratch (SGEMM packing, column-reduction accumulators), allocated once."""
        if t < len(self._scratch):
            return self._scratch[t]
        with self._setup_lock:
            while len(self._scratch) <= t:
                self._scratch.append(self.allocator.alloc(max(matmul.scratch_bytes(), codegen.SCRATCH_BYTES)))
            return self._scratch[t]

    def _run_matmul(self, data: KernelExe, ptrs: list[int]) -> None:
        """Whole matrices per thread when the batch has enough of them; else every thread works on
        each matrix together, taking its row blocks one at a time (matmul.sgemm_ir)."""
        mm = data.plan.matmul
        assert mm is not None  # only called for a matmul plan
        nt = self.threads if mm.flops() >= PARALLEL_MIN_FLOPS else 1
        if mm.batch >= nt:
            groups = [list(range(lo, hi)) for lo, hi in _spans(mm.batch, nt, 1)]
        else:
            groups = [list(range(mm.batch))] * max(1, min(nt, -(-mm.m // matmul.MC)))
        words = matmul.sync_words(mm.m, mm.n, mm.k)
        sync = self.allocator.alloc(4 * words * mm.batch)
        try:
            self._sgemm_groups(data, ptrs, groups, sync, words)
        finally:
            self.allocator.free(sync)

    def _sgemm_groups(
        self, data: KernelExe, ptrs: list[int], groups: list[list[int]], sync: int, words: int
    ) -> None:
        """Run the SGEMM on each thread's matrices (`groups[t]`); `sync` holds `words` sync words
        per matrix, zeroed here."""
        mm = data.plan.matmul
        assert mm is not None  # only called for a matmul plan
        sg = self._sgemm()
        flags = self.array(sync, DType.int32, (mm.batch, words))
        flags[:] = 0
        acc = ptrs[-1] if mm.direct else self.allocator.alloc(4 * data.plan.size)
        a_ptr, b_ptr = ptrs[mm.a_gid], ptrs[mm.b_gid]
        a0, asb, asi, ask = mm.a
        b0, bsb, bsk, bsj = mm.b
        scratch = [self._scratch_for(t) for t in range(len(groups))]

        def work(lane: runtime.Lane, t: int) -> None:
            try:
                fref = lane.funcs(sg)["sgemm"]
                for b in groups[t]:
                    args = [
                        a_ptr + 4 * (a0 + b * asb), asi, ask, b_ptr + 4 * (b0 + b * bsb), bsk, bsj,
                        acc + 4 * b * mm.m * mm.n, mm.n, mm.m, mm.n, mm.k, scratch[t], sync + 4 * words * b,
                    ]  # fmt: skip
                    lane.call(fref, runtime.make_args([_i32(v) for v in args]), 13)
            except BaseException:
                flags[:, 0] = 1  # the others stop waiting for row blocks this thread will not do
                raise

        try:
            self._parallel(len(groups), work)
            if not mm.direct:
                self._run_epilogue(data, ptrs, acc)
        finally:
            if not mm.direct:
                self.allocator.free(acc)

    def _run_epilogue(self, data: KernelExe, ptrs: list[int], acc: int) -> None:
        size = data.plan.size
        base = [_i32(p) for p in ptrs] + [_i32(acc)]
        n = len(base) + 2
        with self._lane_lock:
            self.lane.call(self._bind(data)["epilogue"], runtime.make_args([*base, 0, size]), n)

    def _run_routine(self, routine: Routine, inputs: list[int], outputs: list[int]) -> None:
        t = routine.type
        if self._radix_sort(routine, inputs, outputs):
            return
        ins = [self.array(p, d, s) for p, d, s in zip(inputs, t.input_dtypes, t.input_shapes)]
        outs = [self.array(p, d, s) for p, d, s in zip(outputs, t.output_dtypes, t.output_shapes)]
        run_routine(routine, ins, outs)
