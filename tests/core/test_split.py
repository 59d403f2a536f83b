"""jaxcore.split and `Capabilities.max_kernel_cost`: a kernel over a device's budget runs as a chain of
kernels through temporaries, bit for bit what the fused kernel computes (issue 19 item 4).

Everything here runs through the cpu backend (the reference interpreter, per-op exact) with a small
budget forced, against the same backend without one; and through a queued fake device for the
deferred frees and the aliasing of a queued device.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction, ShapeTracker, split, tracing
from jaxcore.backend import Capabilities, UnsupportedOpError, _SplitRun
from jaxcore.dtype import to_numpy
from jaxcore.queue import QueuedBackend
from jaxcore.shape import unravel_alu
from jaxcore_cpu.backend import CAPABILITIES, CpuBackend
from jaxcore_cpu.executor import plan_kernel, run_kernel

N = 24
R = 5


class Budgeted(CpuBackend):
    """The cpu backend with a kernel budget, counting what it compiles and the temporaries it holds."""

    def __init__(self, budget: int | None, **caps: Any) -> None:
        super().__init__()
        self.capabilities = replace(CAPABILITIES, max_kernel_cost=budget, **caps)
        self.compiled: list[Kernel] = []
        self.live = self.most_live = 0

    def _compile_kernel(self, kernel: Kernel) -> Any:
        self.compiled.append(kernel)
        return super()._compile_kernel(kernel)

    def _alloc(self, size: int) -> np.ndarray:
        self.live += 1
        self.most_live = max(self.most_live, self.live)
        return super()._alloc(size)

    def _release(self, handle: Any) -> None:
        self.live -= 1
        super()._release(handle)


REFERENCE = CpuBackend()


def data(dtype: DType, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == DType.bool:
        return (rng.random(n) < 0.5).astype(np.int32)
    if dtype in (DType.int32, DType.uint32):
        return rng.integers(0, 1000, n).astype(to_numpy(dtype))
    return rng.uniform(-2, 2, n).astype(to_numpy(dtype))


def run(backend: CpuBackend, kernel: Kernel, inputs: list[np.ndarray], alias: int | None = None) -> bytes:
    """The kernel's output bytes on `backend`; `alias`: write into that input's slot."""
    exe = backend.prepare_kernel(kernel)
    slots = [backend.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = slots[alias] if alias is not None else backend.malloc(kernel.bytes)
    backend.dispatch(exe, slots, [out])
    got = backend.read(out)
    for s in {*slots, out}:
        backend.dec_ref(s)
    return got


def check(kernel: Kernel, inputs: list[np.ndarray], budget: int, **caps: Any) -> Budgeted:
    """Split at `budget`, the result bit for bit the unsplit reference's; the backend, for more checks."""
    backend = Budgeted(budget, **caps)
    want = run(REFERENCE, kernel, inputs)
    assert run(backend, kernel, inputs) == want
    assert backend.live == 0  # every temporary given back
    assert isinstance(backend.prepare_kernel(kernel).data, _SplitRun), "expected the kernel to be split"
    return backend


def read(dtype: DType, gid: int = 0, n: int = N, index: AluExp = AluVar.gidx) -> AluExp:
    return AluExp.global_index(dtype, gid, n, index)


def chain(x: AluExp, depth: int) -> AluExp:
    for i in range(depth):
        x = AluExp.sin(x) if i % 2 == 0 else x * 1.5
    return x


# ---- the cost -----------------------------------------------------------------------------------
def test_cost_counts_a_shared_node_once_and_a_transcendental_far_above_arithmetic() -> None:
    x = read(DType.float32)
    s = AluExp.sin(x)
    assert split.node_cost(s) > 20 * split.node_cost(x * 2.0)
    assert split.node_cost(AluExp.idiv(x, x)) > 20 * split.node_cost(AluExp.idiv(AluVar.gidx, 3))
    assert split.node_cost(AluExp.sin(read(DType.float64))) > split.node_cost(s)
    shared = Kernel(1, N, s * s + s)
    assert split.kernel_cost(shared) == split.kernel_cost(Kernel(1, N, s)) + 2 * split.node_cost(s * s)


def test_a_kernel_within_the_budget_is_not_split() -> None:
    k = Kernel(1, N, chain(read(DType.float32), 4))
    assert split.split_kernel(k, split.kernel_cost(k), max_args=4) is None
    assert split.split_kernel(k, split.kernel_cost(k) - 1, max_args=4) is not None
    backend = Budgeted(split.kernel_cost(k))
    assert run(backend, k, [data(DType.float32, N)]) == run(REFERENCE, k, [data(DType.float32, N)])
    assert backend.compiled == [k]


def test_capabilities_take_a_positive_budget_or_none() -> None:
    for bad in (0, -5, 1.5, "100"):
        with pytest.raises(TypeError, match="max_kernel_cost"):
            replace(CAPABILITIES, max_kernel_cost=bad)  # type: ignore[arg-type]
    assert Capabilities(frozenset({DType.float32}), frozenset(), 4).max_kernel_cost is None


# ---- elementwise --------------------------------------------------------------------------------
def test_a_deep_chain_splits_into_one_repeated_part_compiled_once() -> None:
    k = Kernel(1, N, chain(read(DType.float32), 400))
    plan = split.split_kernel(k, 1000, max_args=4)
    assert plan is not None and len(plan.parts) > 50
    assert all(p.cost <= 1000 for p in plan.parts)
    backend = check(k, [data(DType.float32, N)], 1000)
    assert len(backend.compiled) <= 3  # the periodic parts are one kernel (buffers numbered by use)
    assert backend.most_live <= 2 + 2  # the two slots, and a temporary given back after its last reader
    assert backend.prepare_kernel(k) is backend.prepare_kernel(k)  # cached by the kernel's key
    assert len(backend.compiled) <= 3


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.float64])
def test_float_dtypes_round_per_op_as_the_fused_kernel(dtype: DType) -> None:
    x, y = read(dtype, 0), read(dtype, 1)
    steps = [
        lambda e: AluExp.exp(e * 0.25) - y,
        lambda e: AluExp.erf(e) + x,
        lambda e: AluExp.idiv(e * 7.0, y + 3.0),
        lambda e: AluExp.mod(e, y),
    ]
    e = x
    for i in range(30):
        e = steps[i % 4](e)
        e = AluExp.atan(e) * 1.25 if i % 5 == 0 else e
    check(Kernel(2, N, e), [data(dtype, N, 1), data(dtype, N, 2)], 400)


def test_int_uint_and_bool_temporaries() -> None:
    f, i, u = read(DType.float32, 0), read(DType.int32, 1), read(DType.uint32, 2)
    count = [AluExp.cast(DType.int32, op(f) * 100.0) + i for op in (AluExp.sin, AluExp.cos)]
    number = AluExp.where(AluExp.cmplt(f, AluExp.f32(0.3)), count[0], count[1])  # int32 operands cut
    flags = [AluExp.cmplt(op(f), AluExp.f32(0.2)) for op in (AluExp.sin, AluExp.cos)]
    both = flags[0] * flags[1]  # bool AND of two costly bools
    bits = [AluExp.bitcast(DType.uint32, op(f)) for op in (AluExp.sin, AluExp.cos)]
    random = AluExp.threefry2x32(bits[0], bits[1], u, u + 1)  # uint32 operands cut
    e = AluExp.where(both, AluExp.cast(DType.float32, number), AluExp.cast(DType.float32, random) * 1e-9)
    ins = [data(DType.float32, N), data(DType.int32, N), data(DType.uint32, N)]
    backend = check(Kernel(3, N, e), ins, 400)
    assert {DType.bool, DType.int32, DType.uint32} <= {p.dtype for p in backend.compiled[:-1]}
    bool_out = Kernel(1, N, AluExp.cmplt(chain(f, 12), AluExp.f32(0.5)))
    check(bool_out, [data(DType.float32, N)], 400)


def test_a_chain_from_the_position_alone_reads_no_input_in_its_first_part() -> None:
    k = Kernel(0, N, chain(AluExp.cast(DType.float32, AluVar.gidx) * 0.1, 40))
    backend = check(k, [], 800)
    assert backend.compiled[0].nargs == 0


def test_shared_subexpressions_are_computed_once_per_part_and_read_where_cut() -> None:
    x = read(DType.float32)
    a = chain(x, 6)
    b = chain(a, 6)
    c = AluExp.cos(a) * b + AluExp.sin(b) * a
    e = c * AluExp.exp(a * 0.1) + AluExp.where(AluExp.cmplt(a, b), c, b)
    check(Kernel(1, N, e), [data(DType.float32, N)], 800)


def test_views_padded_flipped_and_permuted() -> None:
    st = ShapeTracker.from_shape([4, 6]).permute([1, 0]).pad([[1, 0], [0, 2]]).flip([True, False])
    assert st.size == 7 * 6
    idx = unravel_alu(list(st.shape), AluVar.gidx)
    view = AluExp.global_view(DType.float32, 0, st, idx)
    k = Kernel(1, st.size, chain(view, 20) + AluExp.sin(view))
    check(k, [data(DType.float32, N)], 700)


def test_an_output_that_is_also_an_input() -> None:
    x, y = read(DType.float32, 0), read(DType.float32, 1)
    k = Kernel(2, N, chain(x + y, 30) * y + x)
    ins = [data(DType.float32, N, 3), data(DType.float32, N, 4)]
    backend = Budgeted(800)
    want = run(REFERENCE, k, ins)
    for alias in (0, 1):
        assert run(backend, k, ins, alias=alias) == want
    assert backend.live == 0


def test_no_part_reads_more_buffers_than_the_device_takes() -> None:
    xs = [read(DType.float32, g) for g in range(3)]
    e = xs[0]
    for i in range(12):
        e = AluExp.sin(e + xs[i % 3]) * xs[(i + 1) % 3]
    k = Kernel(3, N, e)
    plan = split.split_kernel(k, 500, max_args=3)
    assert plan is not None and all(p.kernel.nargs <= 3 for p in plan.parts)
    check(k, [data(DType.float32, N, s) for s in range(3)], 500, max_args=3)


def test_temporaries_only_of_declared_dtypes() -> None:
    f = read(DType.float32)
    flag = AluExp.cmplt(chain(f, 8), AluExp.f32(0.2))
    k = Kernel(1, N, AluExp.where(flag, chain(f, 9), f))
    plan = split.split_kernel(k, 400, max_args=4, dtypes={DType.float32})
    assert plan is not None
    assert {p.kernel.dtype for p in plan.parts} == {DType.float32}


def test_a_device_without_int32_or_bool_keeps_index_arithmetic_whole() -> None:
    st = ShapeTracker.from_shape([4, 6]).pad([[1, 1], [2, 0]])  # masked: bool from the position
    view = AluExp.global_view(DType.float32, 0, st, unravel_alu(list(st.shape), AluVar.gidx))
    k = Kernel(1, st.size, chain(view, 24) * view)
    backend = check(k, [data(DType.float32, N)], 600, dtypes=frozenset({DType.float32}))
    assert all(backend.capabilities.undeclared(p) is None for p in backend.compiled)


# ---- reductions ---------------------------------------------------------------------------------
def _reduction_inputs() -> list[np.ndarray]:
    return [data(DType.float32, N * R, 5), data(DType.float32, N, 6)]


def test_a_reduction_item_is_cut_over_the_flat_index_and_read_back_at_gidx_r_plus_ridx() -> None:
    item = chain(read(DType.float32, 0, N * R, AluVar.gidx * R + AluVar.ridx), 10)
    per_row = chain(read(DType.float32, 1), 6)  # gidx alone: cut over N elements
    k = Kernel(2, N, item * per_row, Reduction(DType.float32, AluOp.Add, R, AluVar.acc(DType.float32) * 0.5))
    backend = check(k, _reduction_inputs(), 800)
    sizes = {p.size for p in backend.compiled[:-1]}
    assert N * R in sizes and N in sizes


@pytest.mark.parametrize("op", [AluOp.Add, AluOp.Mul, AluOp.Max, AluOp.Min])
def test_reductions_of_each_op(op: AluOp) -> None:
    item = chain(read(DType.float32, 0, N * R, AluVar.gidx * R + AluVar.ridx), 8) * 0.5
    check(Kernel(1, N, item, Reduction(DType.float32, op, R)), _reduction_inputs()[:1], 600)


def test_a_float16_sum_accumulates_in_float32_after_the_cut() -> None:
    item = chain(read(DType.float16, 0, N * R, AluVar.gidx * R + AluVar.ridx), 10)
    k = Kernel(1, N, item, Reduction(DType.float16, AluOp.Add, R))
    check(k, [data(DType.float16, N * R)], 600)


def test_the_epilogue_is_cut_only_where_it_does_not_read_acc() -> None:
    acc = AluVar.acc(DType.float32)
    item = read(DType.float32, 0, N * R, AluVar.gidx * R + AluVar.ridx)
    epilogue = chain(acc, 4) + chain(read(DType.float32, 1), 12)
    k = Kernel(2, N, item, Reduction(DType.float32, AluOp.Add, R, epilogue))
    backend = check(k, _reduction_inputs(), 800)
    assert all(p.reduction is None for p in backend.compiled[:-1])
    assert backend.compiled[-1].reduction is not None


@pytest.mark.parametrize(("size", "rsize"), [(0, R), (N, 0), (0, 0)])
def test_empty_outputs_and_empty_reductions(size: int, rsize: int) -> None:
    item = chain(read(DType.float32, 0, N * R, AluVar.gidx * rsize + AluVar.ridx), 10)
    k = Kernel(1, size, item * chain(read(DType.float32, 0), 6), Reduction(DType.float32, AluOp.Add, rsize))
    check(k, [data(DType.float32, N * R)], 600)


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.float64])
def test_an_epilogue_too_costly_where_it_reads_acc_runs_apart_from_the_fold(dtype: DType) -> None:
    """The fold into a temporary of the accumulator's dtype (float32 for a float16 sum), then the
    epilogue as elementwise parts reading it: bit for bit the fused kernel (a float64 fmod of acc
    twice in an epilogue was refused on webgpu before)."""
    item = read(dtype, 0, N * R, AluVar.gidx * R + AluVar.ridx)
    epilogue = chain(AluVar.acc(dtype), 40) + read(dtype, 1)
    k = Kernel(2, N, item, Reduction(dtype, AluOp.Add, R, epilogue))
    backend = check(k, [data(dtype, N * R), data(dtype, N, 1)], 500)
    assert (
        backend.compiled[0].reduction is not None
        and backend.compiled[0].reduction.epilogue.op == AluOp.Variable
    )
    assert all(p.reduction is None for p in backend.compiled[1:])
    assert backend.compiled[0].reduction.dtype == (DType.float32 if dtype == DType.float16 else dtype)


def test_a_fold_alone_over_the_budget_is_compiled_as_it_is() -> None:
    """An item of one costly node under a bare `acc` epilogue: nothing to set apart (this recursed
    once: the fold apart was the same kernel again)."""
    item = AluExp.mod(read(DType.float64, 0, N * R, AluVar.gidx * R + AluVar.ridx), AluExp.f64(-1.87e-23))
    k = Kernel(1, N, item, Reduction(DType.float64, AluOp.Max, R))
    x = [data(DType.float64, N * R)]
    assert run(Budgeted(100), k, x) == run(REFERENCE, k, x)


def test_a_kernel_no_cut_brings_within_the_budget_is_refused_at_prepare() -> None:
    item = read(DType.float32, 0, N * R, AluVar.gidx * R + AluVar.ridx)
    k = Kernel(1, N, item, Reduction(DType.float32, AluOp.Add, R, chain(AluVar.acc(DType.float32), 40)))
    backend = Budgeted(500, max_buffer_bytes=4 * N - 4)  # no room for the accumulators apart
    with pytest.raises(UnsupportedOpError, match="max_kernel_cost"):
        backend.prepare_kernel(k)
    assert backend.compiled == []
    one_node = Kernel(1, N, AluExp.sin(read(DType.float64)))  # over the budget alone: compiled as is
    x = [data(DType.float64, N)]
    assert run(Budgeted(100), one_node, x) == run(REFERENCE, one_node, x)


# ---- tracing and a queued device ----------------------------------------------------------------
def test_tracing_names_the_original_kernel_for_every_part() -> None:
    k = Kernel(1, N, chain(read(DType.float32), 40))
    backend = Budgeted(1000)
    exe = backend.prepare_kernel(k)
    x, out = backend.malloc(4 * N, data(DType.float32, N).tobytes()), backend.malloc(4 * N)
    tracing.start_trace()
    try:
        backend.dispatch(exe, [x], [out])
    finally:
        events = [e for e in tracing.stop_trace() if e.get("ph") == "X"]
    assert len(events) == len(exe.data.parts) > 1
    assert {e["args"]["exp"] for e in events} == {tracing.source_info(k)[2]["exp"]}


class HostQueue(QueuedBackend):
    """A queued device over host memory: a batch runs (kernels through the cpu executor) only when
    it is waited for, so a temporary freed too early would be overwritten before it is read."""

    name = "hostq"

    def __init__(self, budget: int) -> None:
        caps = replace(CAPABILITIES, max_args=8, max_buffer_bytes=1 << 24)
        self.capabilities = replace(caps, max_kernel_cost=budget)
        self.pending: list[list[Any]] = []
        self.ran = 0
        super().__init__()

    def _create_buffer(self, capacity: int) -> np.ndarray:
        return np.zeros(capacity, np.uint8)

    def _destroy_buffer(self, raw: np.ndarray) -> None:
        pass

    def _write_buffer(self, buf: Any, data: memoryview) -> None:
        buf.raw[: data.nbytes] = np.frombuffer(data, np.uint8)

    def _read_buffer(self, buf: Any, start: int, count: int) -> bytes:
        self._wait(None)
        return buf.raw[start : start + count].tobytes()

    def _compile_kernel(self, kernel: Kernel) -> Any:
        return plan_kernel(kernel)

    def _open_batch(self) -> list[Any]:
        return []

    def _record(self, rec: list[Any], exe: Any, inputs: list[Any], outputs: list[Any], timed: bool) -> None:
        ins = [b.raw for b in inputs]
        out = outputs[0]
        rec.append(lambda: run_kernel(exe.data, ins, out.raw[: out.nbytes]))

    def _record_copy(self, rec: list[Any], src: Any, dst: Any, nbytes: int) -> None:
        def copy() -> None:
            dst.raw[:nbytes] = src.raw[:nbytes]

        rec.append(copy)

    def _submit(self, rec: list[Any]) -> int:
        self.pending.append(rec)
        return len(self.pending) + self.ran

    def _is_done(self, token: Any) -> bool:
        return not self.pending

    def _wait(self, token: Any) -> None:
        for rec in self.pending:
            for op in rec:
                op()
        self.ran += len(self.pending)
        self.pending.clear()


def test_a_queued_device_records_the_parts_and_defers_the_temporaries() -> None:
    x, y = read(DType.float32, 0), read(DType.float32, 1)
    k = Kernel(2, N, chain(x * y, 60) + y)
    ins = [data(DType.float32, N, 7), data(DType.float32, N, 8)]
    want = run(REFERENCE, k, ins)
    q = HostQueue(1000)
    exe = q.prepare_kernel(k)
    assert len(exe.data.parts) > 3
    slots = [q.malloc(a.nbytes, a.tobytes()) for a in ins]
    outs = [q.malloc(k.bytes) for _ in range(3)]
    for out in outs:  # several dispatches in one batch: temporaries recycled within it
        q.dispatch(exe, slots, [out])
    q.dispatch(exe, slots, [slots[1]])  # in place, into an input
    assert q.pending_dispatches() > 3 * len(exe.data.parts)
    assert all(q.read(out) == want for out in outs)
    assert q.read(slots[1]) == want
    assert exe._site is not None and __file__ in exe._site
    assert all(p._part_of is k and p._site == exe._site for p in exe.data.parts)  # what errors name
