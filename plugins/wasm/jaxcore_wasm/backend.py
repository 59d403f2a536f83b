"""WasmBackend: every buffer lives in one shared wasm linear memory; kernels are wasm modules.

Dispatch calls the kernel's exported function through the raw C API on the calling thread's lane;
large kernels are split across a pool of worker threads, each with its own Store and instances of
the same module over the same memory (wasmtime releases the GIL while wasm runs). Routines run as
host code (numpy) on views of the linear memory.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxcore import settings
from jaxcore.backend import BaseBackend, Capabilities, Executable
from jaxcore.dtype import DType, to_numpy
from jaxcore.host_routines import run_routine
from jaxcore.kernel import Kernel
from jaxcore.routine import Routine, Routines
from jaxcore_wasm import codegen, matmul, runtime
from jaxcore_wasm.codegen import KernelPlan
from jaxcore_wasm.compiler import compiler
from jaxcore_wasm.memory import Allocator
from jaxcore_wasm.module import MAX_PAGES

CAPABILITIES = Capabilities(
    dtypes=frozenset(DType),
    routines=frozenset(Routines),
    max_args=64,
    max_buffer_bytes=MAX_PAGES * 65536 - 65536,
    description="LLVM -> WebAssembly (simd128) kernels run by wasmtime on one shared linear memory; "
    "routines run as host code on that memory",
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


@dataclass
class KernelExe:
    """The compiled kernel plus what dispatch needs without lookups."""

    module: Any
    plan: KernelPlan
    funcs: dict[str, Any]  # main lane's functions
    args: Any  # preallocated raw argument array for the main lane (begin/end already set)
    nparams: int
    source: str
    single: bool  # runs as one call of `kernel` on the dispatching thread
    kernel_fn: Any = None


class WasmBackend(BaseBackend):
    name = "wasm"
    capabilities = CAPABILITIES

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
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
        self.compiler = compiler()
        self._sgemm_module = None
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
        with self._lane_lock:
            funcs = self.lane.funcs(ck.module) if ck.module is not None else {}
            if ck.plan.matmul is not None:
                self.lane.funcs(self._sgemm())
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
        return KernelExe(ck.module, plan, funcs, args, nparams, ck.source, single, funcs.get("kernel"))

    def _compile_routine(self, routine: Routine) -> None:
        return None

    # ---- run -------------------------------------------------------------------------------------
    def _run(self, exe: Executable, inputs: list[Any], outputs: list[Any]) -> None:
        data = exe.data
        if data is None:
            self._run_routine(exe.source, inputs, outputs)
            return
        if outputs[0] in inputs and data.plan.size:
            self._run_aliased(exe, inputs, outputs)
            return
        if data.single:  # the hot path: one call on this thread, no allocation
            args = data.args
            with self._lane_lock:
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

    def _run_aliased(self, exe: Executable, inputs: list[int], outputs: list[int]) -> None:
        """The output is also an input: compute into a temporary (kernels assume no overlap), copy back."""
        nbytes = exe.source.bytes
        tmp = self.allocator.alloc(nbytes)
        try:
            self._run(exe, inputs, [tmp])
            self.memory.view(outputs[0], nbytes)[:] = self.memory.view(tmp, nbytes)
        finally:
            self.allocator.free(tmp)

    def pool(self) -> runtime.Pool:
        if self._pool is None:
            self._pool = runtime.Pool(self.engine, self.memory, self.threads - 1)
        return self._pool

    def _run_chunks(self, data: KernelExe, ptrs: list[int]) -> None:
        size = data.plan.size
        parts = max(1, min(self.threads, size // CHUNK_ALIGN))
        chunk = -(-size // parts)
        chunk = -(-chunk // CHUNK_ALIGN) * CHUNK_ALIGN
        bounds = [(i * chunk, min(size, (i + 1) * chunk)) for i in range(parts)]
        bounds = [(a, b) for a, b in bounds if a < b]
        mod, nparams = data.module, data.nparams
        base = [_i32(p) for p in ptrs]
        scratch = [_i32(self._scratch_for(t)) for t in range(len(bounds))]

        def job(lo: int, hi: int, s: int):
            def go(lane: runtime.Lane) -> None:
                lane.call(lane.funcs(mod)["kernel"], runtime.make_args([*base, lo, hi, s]), nparams)

            return go

        def main() -> None:
            lo, hi = bounds[0]
            with self._lane_lock:
                self.lane.call(data.funcs["kernel"], runtime.make_args([*base, lo, hi, scratch[0]]), nparams)

        self.pool().run([job(a, b, s) for (a, b), s in zip(bounds[1:], scratch[1:])], main)

    def _run_split(self, data: KernelExe, ptrs: list[int]) -> None:
        """Split the reduced axis: each thread folds a range into scratch, then `finish` combines."""
        plan, parts = data.plan, self.threads
        r = plan.reduce
        step = -(-r // parts)
        step = -(-step // CHUNK_ALIGN) * CHUNK_ALIGN
        ranges = [(i * step, min(r, (i + 1) * step)) for i in range(parts)]
        ranges = [(a, b) for a, b in ranges if a < b]
        nparts = len(ranges)
        scratch = self.allocator.alloc(nparts * plan.size * plan.acc_bytes)
        try:
            ins = [_i32(p) for p in ptrs[:-1]]
            mod = data.module
            n_partial = len(ins) + 3

            def job(i: int, lo: int, hi: int):
                def go(lane: runtime.Lane) -> None:
                    at = _i32(scratch + i * plan.size * plan.acc_bytes)
                    lane.call(lane.funcs(mod)["partial"], runtime.make_args([*ins, at, lo, hi]), n_partial)

                return go

            def main() -> None:
                lo, hi = ranges[0]
                with self._lane_lock:
                    args = runtime.make_args([*ins, _i32(scratch), lo, hi])
                    self.lane.call(data.funcs["partial"], args, n_partial)

            self.pool().run([job(i, a, b) for i, (a, b) in enumerate(ranges) if i > 0], main)
            with self._lane_lock:
                args = runtime.make_args([*ins, _i32(ptrs[-1]), _i32(scratch), nparts, 0, plan.size])
                self.lane.call(data.funcs["finish"], args, len(ins) + 5)
        finally:
            self.allocator.free(scratch)

    # ---- matmul ----------------------------------------------------------------------------------
    def _sgemm(self):
        if self._sgemm_module is None:
            self._sgemm_module = self.compiler.library("sgemm", matmul.plan_key(), matmul.sgemm_ir)
        return self._sgemm_module

    def _scratch_for(self, t: int) -> int:
        """Thread t's scratch (SGEMM packing, column-reduction accumulators), allocated once."""
        while len(self._scratch) <= t:
            self._scratch.append(self.allocator.alloc(max(matmul.scratch_bytes(), codegen.SCRATCH_BYTES)))
        return self._scratch[t]

    def _run_matmul(self, data: KernelExe, ptrs: list[int]) -> None:
        mm = data.plan.matmul
        sg = self._sgemm()
        nt = self.threads if mm.flops() >= PARALLEL_MIN_FLOPS else 1
        if mm.batch >= nt:
            per = -(-mm.batch // nt)
            groups = [[(b, 0, mm.m) for b in range(t * per, min(mm.batch, (t + 1) * per))] for t in range(nt)]
        else:
            rows = -(-mm.m // nt)
            rows = -(-rows // matmul.MR) * matmul.MR
            spans = [(t * rows, min(mm.m, (t + 1) * rows)) for t in range(nt)]
            groups = [[(b, lo, hi) for b in range(mm.batch)] for lo, hi in spans if lo < hi]
        groups = [g for g in groups if g]
        acc = ptrs[-1] if mm.direct else self.allocator.alloc(4 * data.plan.size)
        a_ptr, b_ptr = ptrs[mm.a_gid], ptrs[mm.b_gid]
        a0, asb, asi, ask = mm.a
        b0, bsb, bsk, bsj = mm.b
        scratch = [self._scratch_for(t) for t in range(len(groups))]

        def work(lane: runtime.Lane, items: list[tuple[int, int, int]], s: int) -> None:
            fref = lane.funcs(sg)["sgemm"]
            for b, lo, hi in items:
                args = [
                    a_ptr + 4 * (a0 + b * asb + lo * asi), asi, ask,
                    b_ptr + 4 * (b0 + b * bsb), bsk, bsj,
                    acc + 4 * (b * mm.m * mm.n + lo * mm.n), mm.n, hi - lo, mm.n, mm.k, s,
                ]  # fmt: skip
                lane.call(fref, runtime.make_args([_i32(v) for v in args]), 12)

        try:
            if len(groups) == 1:
                with self._lane_lock:
                    work(self.lane, groups[0], scratch[0])
            else:
                jobs = [lambda lane, g=g, s=s: work(lane, g, s) for g, s in zip(groups[1:], scratch[1:])]

                def main() -> None:
                    with self._lane_lock:
                        work(self.lane, groups[0], scratch[0])

                self.pool().run(jobs, main)
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
            self.lane.call(data.funcs["epilogue"], runtime.make_args([*base, 0, size]), n)

    def _run_routine(self, routine: Routine, inputs: list[int], outputs: list[int]) -> None:
        t = routine.type
        ins = [self.array(p, d, s) for p, d, s in zip(inputs, t.input_dtypes, t.input_shapes)]
        outs = [self.array(p, d, s) for p, d, s in zip(outputs, t.output_dtypes, t.output_shapes)]
        run_routine(routine, ins, outs)
