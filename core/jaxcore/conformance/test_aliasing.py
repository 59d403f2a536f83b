"""An output slot may also be an input (the frontend's in-place updates): the result is as if every
input were read before any output is written. Each case computes into one of its own inputs, in
patterns where writing early would be seen: reversed and shifted reads, a reduction whose output
overwrites what other rows still read, routines writing over their input, a flipped view.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend, Executable
from jaxcore.conformance.harness import (
    assert_close,
    from_buffer,
    load,
    map_kernel,
    skip_if_undeclared,
    to_buffer,
)
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines
from jaxcore.shape import ShapeTracker

F32 = "float32"


def dispatch_in_place(
    backend: Backend,
    exe: Executable,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[tuple[int | None, str]],
    shapes: Sequence[tuple[int, ...]] | None = None,
) -> list[np.ndarray]:
    """Dispatch `exe` with output k written into input `outputs[k][0]`'s slot (None: a fresh slot);
    returns each output, read back as `outputs[k][1]`."""
    slots: list[int] = []
    try:
        for a in inputs:
            raw = to_buffer(a)
            slots.append(backend.malloc(len(raw), raw))
        out_slots = []
        for k, (alias, _) in enumerate(outputs):
            if alias is None:
                n = exe._io_bytes[1][k]
                slots.append(backend.malloc(n, bytes(n)))
                out_slots.append(slots[-1])
            else:
                out_slots.append(slots[alias])
        backend.dispatch(exe, slots[: len(inputs)], out_slots)
        raws = [backend.read(s) for s in out_slots]
    finally:
        for s in slots:
            backend.dec_ref(s)
    return [
        from_buffer(r, dt, None if shapes is None else shapes[k])
        for k, (r, (_, dt)) in enumerate(zip(raws, outputs))
    ]


def _prepared(backend: Backend, source: Kernel | Routine) -> Executable:
    skip_if_undeclared(backend, source)
    if isinstance(source, Kernel):
        return backend.prepare_kernel(source)
    return backend.prepare_routine(source)


def test_elementwise_reversed_into_its_input(backend: Backend) -> None:
    """out[i] = x[n-1-i] * 2 + y[i], written over x: the second half reads what the first half wrote
    if a backend writes before it reads."""
    n = 1000
    g = AluVar.gidx
    x_rev = load(F32, 0, n, AluExp.sub(AluExp.i32(n - 1), g))
    kernel = Kernel(2, n, AluExp.add(AluExp.mul(x_rev, AluExp.f32(2)), load(F32, 1, n)))
    exe = _prepared(backend, kernel)
    x = np.arange(n, dtype=np.float32)
    y = np.linspace(-3, 3, n, dtype=np.float32)
    want = x[::-1] * np.float32(2) + y
    for alias in (0, 1):
        (got,) = dispatch_in_place(backend, exe, [x, y], [(alias, F32)])
        assert_close(got, want, "Add", F32, backend, what=f"elementwise written over input {alias}")


def test_elementwise_shifted_into_its_input(backend: Backend) -> None:
    """out[i] = x[(i + 1) % n] + x[i]: each element reads its neighbour, which another thread writes."""
    n = 4099
    g = AluVar.gidx
    nxt = load(F32, 0, n, AluExp.mod(AluExp.add(g, AluExp.i32(1)), AluExp.i32(n)))
    kernel = map_kernel([F32], n, lambda x: AluExp.add(x, nxt))
    exe = _prepared(backend, kernel)
    x = np.arange(n, dtype=np.float32)
    (got,) = dispatch_in_place(backend, exe, [x], [(0, F32)])
    assert_close(got, x + np.roll(x, -1), "Add", F32, backend, what="shifted sum written over its input")


def test_reduction_written_over_its_input(backend: Backend) -> None:
    """out[i] = sum_r x[(i + r) % n] over n items, written over x: every output needs every input."""
    n = 96
    g, r = AluVar.gidx, AluVar.ridx
    item = load(F32, 0, n, AluExp.mod(AluExp.add(g, r), AluExp.i32(n)))
    kernel = Kernel(1, n, item, Reduction(DType.float32, AluOp.Add, n))
    exe = _prepared(backend, kernel)
    x = (np.arange(n) % 7).astype(np.float32)  # small integers: the sum is exact in any order
    (got,) = dispatch_in_place(backend, exe, [x], [(0, F32)])
    assert_close(got, np.full(n, x.sum(), np.float32), "ReduceAdd", F32, backend, what="sum over its input")


def test_reduction_epilogue_input_as_output(backend: Backend) -> None:
    """Row maxima plus y[i], written over y (an input the epilogue reads)."""
    rows, cols = 33, 17
    g, r = AluVar.gidx, AluVar.ridx
    item = load(F32, 0, rows * cols, AluExp.add(AluExp.mul(g, AluExp.i32(cols)), r))
    epi = AluExp.add(AluVar.acc(DType.float32), load(F32, 1, rows))
    kernel = Kernel(2, rows, item, Reduction(DType.float32, AluOp.Max, cols, epi))
    exe = _prepared(backend, kernel)
    x = np.random.default_rng(3).normal(size=(rows, cols)).astype(np.float32)
    y = np.arange(rows, dtype=np.float32)
    (got,) = dispatch_in_place(backend, exe, [x.ravel(), y], [(1, F32)])
    assert_close(got, x.max(axis=1) + y, "Add", F32, backend, what="max + y written over y")


def test_view_reads_the_aliased_buffer_flipped(backend: Backend) -> None:
    """A GlobalView that flips the buffer it is written into: out = flip(x) + x, over x."""
    shape = (37, 5)
    st = ShapeTracker.from_shape(shape).flip([True, True])
    g = AluVar.gidx
    idx = [AluExp.idiv(g, AluExp.i32(shape[1])), AluExp.mod(g, AluExp.i32(shape[1]))]
    flipped = AluExp.global_view(DType.float32, 0, st, idx)
    kernel = Kernel(1, st.size, AluExp.add(flipped, load(F32, 0, st.size)))
    exe = _prepared(backend, kernel)
    x = np.arange(st.size, dtype=np.float32).reshape(shape)
    (got,) = dispatch_in_place(backend, exe, [x.ravel()], [(0, F32)])
    assert_close(got, (x[::-1, ::-1] + x).ravel(), "Add", F32, backend, what="flipped view over its input")


def test_sort_in_place(backend: Backend) -> None:
    x = np.random.default_rng(1).permutation(64).astype(np.float32).reshape(4, 16)
    exe = _prepared(backend, Routine.build(Routines.Sort, [x.shape], [DType.float32]))
    (got,) = dispatch_in_place(backend, exe, [x], [(0, F32)], [x.shape])
    assert_close(got, np.sort(x, axis=-1), "Sort", F32, backend, what="Sort written over its input")


def test_argsort_outputs_over_its_input(backend: Backend) -> None:
    """Argsort's values or its indices (4-byte int32, the size of a float32 input) in the input's slot."""
    x = np.random.default_rng(2).normal(size=(3, 50)).astype(np.float32)
    exe = _prepared(backend, Routine.build(Routines.Argsort, [x.shape], [DType.float32]))
    want_idx = np.argsort(x, axis=-1, kind="stable").astype(np.int32)
    want_vals = np.take_along_axis(x, want_idx, axis=-1)
    shapes = [x.shape, x.shape]
    for outputs in ([(0, F32), (None, "int32")], [(None, F32), (0, "int32")]):
        where = "values" if outputs[0][0] == 0 else "indices"
        vals, idx = dispatch_in_place(backend, exe, [x], outputs, shapes)
        assert_close(idx, want_idx, "Argsort", "int32", backend, what=f"Argsort indices ({where} over input)")
        assert_close(vals, want_vals, "Argsort", F32, backend, what=f"Argsort values ({where} over input)")
