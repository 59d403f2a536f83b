"""Softmax as a routine the core spells as kernels: validation, the chain, the declaration rule,
and the one-pass GPU program's layouts. Values on every device are the conformance suite's."""

from __future__ import annotations

import numpy as np
import pytest

import jaxcore
from jaxcore.alu import AluOp
from jaxcore.backend import Capabilities
from jaxcore.canonical import COMPOSED_ROUTINES, canonical_chain, composed_chain, softmax_kernels
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel
from jaxcore.legalize import TargetTraits
from jaxcore.program import GpuTarget, LocalIndex, StridedLoop, VecLoad, WorkgroupFold
from jaxcore.routine import Routine, Routines, SoftmaxParams
from jaxcore.row_program import row_softmax
from jaxcore.shape import ShapeTracker

F32 = DType.float32


def test_softmax_takes_one_float_array_of_at_least_one_axis() -> None:
    assert Routine.build(Routines.Softmax, [(2, 3)], [F32]).params == SoftmaxParams(log=False)
    with pytest.raises(TypeError, match="floating-point"):
        Routine.build(Routines.Softmax, [(2, 3)], [DType.int32])
    with pytest.raises(ValueError, match="at least 1D"):
        Routine.build(Routines.Softmax, [()], [F32])
    with pytest.raises(TypeError, match="SoftmaxParams"):
        Routine.build(Routines.Softmax, [(4,)], [F32], params=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="log must be a bool"):
        SoftmaxParams(log=1)  # type: ignore[arg-type]


def _run_chain(routine: Routine, x: np.ndarray) -> np.ndarray:
    """The composed chain's kernels run one by one on the reference device (which runs Softmax
    as its own: this is the chain every other device runs)."""
    be = jaxcore.get_backend("cpu")
    chain = composed_chain(routine)
    slots = [be.malloc(x.nbytes, x.tobytes())]
    try:
        for step, reads in zip(chain.steps, chain.reads):
            assert isinstance(step, Kernel)
            slots.append(be.malloc(step.bytes))
            be.dispatch(be.prepare_kernel(step), [slots[b] for b in reads], [slots[-1]])
        out = np.frombuffer(be.read(slots[-1]), np.float32)
    finally:
        for s in slots:
            be.dec_ref(s)
    return out.reshape(routine.type.output_shapes[0])


@pytest.mark.parametrize("log", [False, True])
def test_the_kernels_are_the_reference_up_to_the_sum(log: bool) -> None:
    x = np.random.default_rng(0).normal(0, 3, (5, 37)).astype(np.float32)
    r = Routine.build(Routines.Softmax, [x.shape], [F32], SoftmaxParams(log))
    got = _run_chain(r, x)
    w = x.astype(np.float64) - x.max(-1, keepdims=True)
    want = (
        w - np.log(np.exp(w).sum(-1, keepdims=True)) if log else np.exp(w) / np.exp(w).sum(-1, keepdims=True)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ops = [(k.reduction.op if k.reduction else None) for k, _ in softmax_kernels(r)]
    assert ops == [AluOp.Max, AluOp.Add, None]


def test_a_viewed_input_is_copied_first_and_every_temporary_is_freed_after_its_last_reader() -> None:
    view = ShapeTracker.from_shape((6, 4)).permute((1, 0))
    r = Routine.build(Routines.Softmax, [(4, 6)], [F32], views=[view])
    chain = composed_chain(r)
    # copy -> t0; max(t0) -> t1; sum(t0, t1) -> t2; each(t0, t1, t2) -> out
    assert chain.reads == ((0,), (1,), (1, 2), (1, 2, 3))
    assert chain.frees == ((), (), (), (0, 1, 2))
    base = np.arange(24, dtype=np.float32).reshape(6, 4) / 7
    got = _run_chain(r, base)
    e = np.exp(base.T - base.T.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-6)


def test_a_device_runs_it_as_kernels_unless_it_declares_its_own() -> None:
    r = Routine.build(Routines.Softmax, [(2, 8)], [F32])
    own = Capabilities(frozenset(DType), frozenset(Routines), 8)
    assert own.native(r) and own.undeclared(r) is None and canonical_chain(r, own.native(r)) is None
    kernels_only = Capabilities(frozenset(DType), frozenset(Routines) - COMPOSED_ROUTINES, 8)
    assert not kernels_only.native(r) and kernels_only.undeclared(r) is None
    assert canonical_chain(r, False) is not None
    no_exp = Capabilities(frozenset(DType), frozenset(), 8, unsupported_ops=frozenset({(AluOp.Exp, F32)}))
    gap = no_exp.undeclared(r)
    assert gap is not None and "Exp" in gap.reason
    half_only = Capabilities(frozenset({DType.float32, DType.int32}), frozenset(), 8)
    assert half_only.undeclared(Routine.build(Routines.Softmax, [(2, 8)], [DType.float16])) is not None


@pytest.mark.parametrize(
    ("cols", "held", "threads"),
    [
        (4096, True, 256),
        (8192, True, 256),
        (256, True, 64),
        (96, False, 32),
        (4100, False, 256),
        (7, False, 32),
    ],
)
def test_rows_that_split_evenly_are_held_in_registers(cols: int, held: bool, threads: int) -> None:
    p = row_softmax(GpuTarget(has_subgroups=True), _traits(), 3, cols)
    stmts = list(p.statements())
    assert p.local == threads
    assert any(isinstance(s, LocalIndex) for s in stmts) == held
    assert any(isinstance(s, StridedLoop) for s in stmts) == (not held)
    loads = [s for s in stmts if isinstance(s, VecLoad)]
    assert len(loads) == ((cols // 4) // threads if held else (3 if cols % 4 == 0 else 0))
    folds = [s for s in stmts if isinstance(s, WorkgroupFold)]
    assert [f.array for f in folds] == ["jc_pm", "jc_ps"]  # each fold its own array


def _traits() -> TargetTraits:
    return TargetTraits()


def test_a_target_without_float_vectors_holds_scalars() -> None:
    """The held layout without vec4: each thread keeps `cols / threads` elements read one by one."""
    p = row_softmax(GpuTarget(vector_dtypes=()), _traits(), 3, 256)
    stmts = list(p.statements())
    assert p.local == 256 and any(isinstance(s, LocalIndex) for s in stmts)
    assert not any(isinstance(s, VecLoad | StridedLoop) for s in stmts)
    assert all(q.lanes == 1 for q in p.params)
