"""Random small kernels, run on the backend and on the reference device, must agree.

Hypothesis builds expression trees (depth <= 3) over 1-3 inputs of random declared dtypes, with an
optional reduction and epilogue. Because the contract rounds every op in its dtype, a tree of exact
ops (+ - * min max idiv mod casts compares where bit ops threefry floor ceil) has one right answer,
so results are compared exactly (NaN meets NaN; the sign of a zero is free because Min/Max may pick
either zero). The trees keep that property on purpose:

- ops that turn a zero's sign into a different value (Idiv, Mod, Reciprocal) take a leaf as the
  sign-sensitive operand, never a subtree;
- a float->int Bitcast reads an input directly (a computed NaN's payload is the device's choice);
- a transcendental appears only at the root, compared with twice its tolerance (both sides are
  approximations), Sin/Cos on arguments clamped to |x| <= 10 (a computed argument may differ by an
  ulp between devices, which at large |x| moves sin by more than its tolerance; the op tests check
  large arguments on exact inputs);
- float Add reductions may be summed in any order: the allowed difference is the textbook bound
  2 (n-1) u sum|x_i| (sum|x_i| computed by the reference), and they get no epilogue; float Mul
  reductions are left to test_reductions' exact data.

The reference device is chosen by the plugin (`--jaxcore-reference`, `jaxcore.reference_backend()`,
the device declaring `reference=True`, or the lowest-priority ready one); comparing it with itself
is skipped. Examples are derandomized (reproducible) and `--jaxcore-max-examples` sets how many.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle, values
from jaxcore.conformance.harness import UNARY_BUILDERS, assert_close, load, run_kernel, tolerance, undeclared
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency of jaxcore
    st = None  # type: ignore[assignment]

ARITH = (AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Min, AluOp.Max)
ROOT_OPS = tuple(op for op in UNARY_BUILDERS if op not in (AluOp.Floor, AluOp.Ceil))
EPS = {"float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}


def _values(dtype: str) -> st.SearchStrategy:
    edge = st.sampled_from(values.ARITH[dtype] + values.CAST_EXTRA[dtype])
    if dtype == "bool":
        return st.sampled_from([0, 1])
    if dtype == "int32":
        return st.one_of(edge, edge, st.integers(-10, 10), st.integers(oracle.INT32_MIN, oracle.INT32_MAX))
    if dtype == "uint32":
        return st.one_of(edge, edge, st.integers(0, 20), st.integers(0, oracle.UINT32_MAX))
    widths: dict[str, Literal[16, 32, 64]] = {"float16": 16, "float32": 32, "float64": 64}
    width = widths[dtype]
    return st.one_of(edge, edge, st.integers(-10, 10).map(float), st.floats(width=width))


@dataclass
class Case:
    kernel: Kernel
    inputs: list[np.ndarray]
    compare: str  # "exact", a root op name, or "sum"


class TreeBuilder:
    """Draws one expression tree; `leaves` are the reads (and acc) usable at the leaves."""

    def __init__(self, draw: Callable, dtypes: list[DType], ok: Callable[[AluOp, DType], bool]) -> None:
        self.draw, self.dtypes, self.ok = draw, dtypes, ok
        self.leaves: dict[DType, list[AluExp]] = {}

    def const(self, dt: DType) -> AluExp:
        return AluExp.const(dt, self.draw(_values(str(dt))))

    def leaf(self, dt: DType, divisor: bool = False) -> AluExp:
        """Mostly an input read; else a constant, or a cast of another input when none has `dt`."""
        options = [x for x in self.leaves.get(dt, []) if not (divisor and x.op == AluOp.Variable)]
        if options:
            i = self.draw(st.integers(0, 4 * len(options)))
            return options[i % len(options)] if i < 4 * len(options) else self.const(dt)
        others = [x for t, xs in self.leaves.items() if t != dt for x in xs if x.op != AluOp.Variable]
        if others and not divisor and self.ok(AluOp.Cast, dt) and self.draw(st.integers(0, 4)) > 0:
            return AluExp.cast(dt, self.draw(st.sampled_from(others)))
        return self.const(dt)

    def exp(self, dt: DType, depth: int, root: bool = False) -> AluExp:
        """A tree of `dt` at most `depth` deep (the root is never a bare leaf)."""
        kinds = self._kinds(dt) if depth > 0 else []
        if not kinds or (not root and self.draw(st.integers(0, 3)) == 0):
            return self.leaf(dt)
        kind = self.draw(st.sampled_from(kinds))
        d = depth - 1
        if kind == "arith":
            op = self.draw(st.sampled_from([o for o in ARITH if self.ok(o, dt)]))
            return AluExp(op, dt, (self.exp(dt, d), self.exp(dt, d)))
        if kind == "divmod":
            op = self.draw(st.sampled_from([o for o in (AluOp.Idiv, AluOp.Mod) if self.ok(o, dt)]))
            return AluExp(op, dt, (self.exp(dt, d), self.leaf(dt, divisor=True)))
        if kind == "bits":
            mode = self.draw(st.sampled_from(["and", "or", "xor"]))
            return AluExp(AluOp.BitCombine, dt, (self.exp(dt, d), self.exp(dt, d)), mode)
        if kind == "shift":
            count_dt = self.draw(
                st.sampled_from([t for t in self.dtypes if t in (DType.int32, DType.uint32)])
            )
            mode = self.draw(st.sampled_from(["shl", "shr"]))
            return AluExp(AluOp.BitShift, dt, (self.exp(dt, d), self.exp(count_dt, d)), mode)
        if kind == "where":
            return AluExp.where(self.exp(DType.bool, d), self.exp(dt, d), self.exp(dt, d))
        if kind == "cmp":
            src = self.draw(st.sampled_from([t for t in self.dtypes if self.ok(AluOp.Cmplt, t)]))
            fn = self.draw(st.sampled_from([AluExp.cmplt, AluExp.cmpne]))
            return fn(self.exp(src, d), self.exp(src, d))
        if kind == "cast":
            src = self.draw(st.sampled_from([t for t in self.dtypes if t != dt]))
            return AluExp.cast(dt, self.exp(src, d))
        if kind == "round":
            return self.draw(st.sampled_from([AluExp.floor, AluExp.ceil]))(self.exp(dt, d))
        if kind == "bitcast_from_input":
            return AluExp.bitcast(dt, self.draw(st.sampled_from(self.leaves[DType.float32])))
        if kind == "bitcast_to_float":
            src = self.draw(st.sampled_from([t for t in (DType.int32, DType.uint32) if t in self.dtypes]))
            return AluExp.bitcast(DType.float32, self.exp(src, d))
        if kind == "threefry":
            mode = self.draw(st.sampled_from(["xor", 0, 1]))
            k0, k1 = self.exp(DType.uint32, d), self.exp(DType.uint32, d)
            return AluExp.threefry2x32(k0, k1, self.leaf(DType.uint32), self.leaf(DType.uint32), mode=mode)
        raise AssertionError(kind)

    def _kinds(self, dt: DType) -> list[str]:
        ok, floaty = self.ok, oracle.is_float(str(dt))
        kinds = []
        if any(ok(o, dt) for o in ARITH) and dt != DType.bool:
            kinds.append("arith")
        if dt == DType.bool and ok(AluOp.Cmplt, DType.bool):
            kinds += ["cmp", "cmp"]
        if dt != DType.bool and any(ok(o, dt) for o in (AluOp.Idiv, AluOp.Mod)):
            kinds.append("divmod")
        if not floaty and ok(AluOp.BitCombine, dt):
            kinds.append("bits")
        if dt in (DType.int32, DType.uint32) and ok(AluOp.BitShift, dt):
            kinds.append("shift")
        if DType.bool in self.dtypes and ok(AluOp.Where, dt):
            kinds.append("where")
        if len(self.dtypes) > 1 and ok(AluOp.Cast, dt):
            kinds.append("cast")
        if floaty and ok(AluOp.Floor, dt) and ok(AluOp.Ceil, dt):
            kinds.append("round")
        if dt in (DType.int32, DType.uint32) and self.leaves.get(DType.float32) and ok(AluOp.Bitcast, dt):
            kinds.append("bitcast_from_input")
        if dt == DType.float32 and ok(AluOp.Bitcast, dt) and {DType.int32, DType.uint32} & set(self.dtypes):
            kinds.append("bitcast_to_float")
        if dt == DType.uint32 and ok(AluOp.Threefry2x32, dt):
            kinds.append("threefry")
        return kinds


def _capable(backend: Backend, reference: Backend) -> tuple[list[DType], Callable[[AluOp, DType], bool]]:
    both = [d for d in DType if d in backend.capabilities.dtypes and d in reference.capabilities.dtypes]

    def ok(op: AluOp, dt: DType) -> bool:
        return backend.capabilities.supports_op(op, dt) and reference.capabilities.supports_op(op, dt)

    return both, ok


def elementwise_cases(dtypes: list[DType], ok: Callable[[AluOp, DType], bool]) -> st.SearchStrategy[Case]:
    @st.composite
    def build(draw: Callable) -> Case:
        size = draw(st.integers(1, 24))
        in_dtypes = draw(st.lists(st.sampled_from(dtypes), min_size=1, max_size=3))
        tb = TreeBuilder(draw, dtypes, ok)
        inputs = []
        for gid, dt in enumerate(in_dtypes):
            inputs.append(
                oracle.array(draw(st.lists(_values(str(dt)), min_size=size, max_size=size)), str(dt))
            )
            tb.leaves.setdefault(dt, []).append(load(dt, gid, size))
        out_dt = draw(st.sampled_from(dtypes))
        exp = tb.exp(out_dt, draw(st.integers(1, 3)), root=True)
        compare = "exact"
        roots = [op for op in ROOT_OPS if ok(op, out_dt)] if oracle.is_float(str(out_dt)) else []
        if roots and draw(st.integers(0, 3)) == 0:
            op = draw(st.sampled_from(roots))
            if op == AluOp.Reciprocal:
                exp = tb.leaf(out_dt, divisor=True)
            elif op in (AluOp.Sin, AluOp.Cos):
                lim = AluExp.const(out_dt, 10)
                exp = AluExp.min(AluExp.max(exp, AluExp.const(out_dt, -10)), lim)
            exp = UNARY_BUILDERS[op](exp)
            compare = str(op)
        return Case(Kernel(len(inputs), size, exp), inputs, compare)

    return build()


def reduction_cases(dtypes: list[DType], ok: Callable[[AluOp, DType], bool]) -> st.SearchStrategy[Case]:
    @st.composite
    def build(draw: Callable) -> Case:
        rows, cols = draw(st.integers(1, 6)), draw(st.integers(1, 8))
        red_dt = draw(st.sampled_from(dtypes))
        floaty = oracle.is_float(str(red_dt))
        op = draw(
            st.sampled_from(
                [AluOp.Add, AluOp.Min, AluOp.Max] if floaty else [AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max]
            )
        )
        tb = TreeBuilder(draw, dtypes, ok)
        inputs: list[np.ndarray] = []
        item_dtypes = draw(st.lists(st.sampled_from(dtypes), min_size=1, max_size=2))
        for dt in item_dtypes:
            vals = draw(st.lists(_values(str(dt)), min_size=rows * cols, max_size=rows * cols))
            tb.leaves.setdefault(dt, []).append(
                load(dt, len(inputs), rows * cols, AluVar.gidx * cols + AluVar.ridx)
            )
            inputs.append(oracle.array(vals, str(dt)))
        item = tb.exp(red_dt, draw(st.integers(0, 2)), root=True)
        epilogue = None
        if not (floaty and op == AluOp.Add) and draw(st.booleans()):
            eb = TreeBuilder(draw, dtypes, ok)
            eb.leaves = {red_dt: [AluVar.acc(red_dt)]}
            row_dt = draw(st.sampled_from(dtypes))
            vals = draw(st.lists(_values(str(row_dt)), min_size=rows, max_size=rows))
            eb.leaves.setdefault(row_dt, []).append(load(row_dt, len(inputs), rows))
            inputs.append(oracle.array(vals, str(row_dt)))
            if DType.int32 in dtypes:
                eb.leaves.setdefault(DType.int32, []).append(AluVar.gidx)
            out_dt = draw(st.sampled_from(dtypes))
            epi = eb.exp(out_dt, draw(st.integers(1, 2)), root=True)
            if not epi.some(lambda n: n.op == AluOp.Variable and n.arg == "acc"):
                epi = AluExp.where(AluExp.cmplt(AluVar.acc(red_dt), AluVar.acc(red_dt)), epi, epi)
            epilogue = epi
        kernel = Kernel(len(inputs), rows, item, Reduction(red_dt, op, cols, epilogue))
        return Case(kernel, inputs, "sum" if floaty and op == AluOp.Add else "exact")

    return build()


def _abs_sum_kernel(kernel: Kernel) -> Kernel:
    """The same reduction of |item| (computed on the reference) for the summation-order bound."""
    item = kernel.exp
    red = kernel.reduction
    assert red is not None
    dt = DType.float16 if kernel.dtype == DType.float16 else red.dtype
    item = AluExp.cast(dt, item)
    return Kernel(
        kernel.nargs,
        kernel.size,
        AluExp.max(item, AluExp.sub(AluExp.const(dt, 0), item)),
        Reduction(dt, AluOp.Add, red.size),
    )


def check_case(backend: Backend, reference: Backend, case: Case) -> None:
    k = case.kernel
    if undeclared(backend, k) or undeclared(reference, k):
        return  # a constant-folded or rewritten tree can still touch an op one side does not declare
    want = run_kernel(reference, k, case.inputs)
    got = run_kernel(backend, k, case.inputs)
    dt = str(k.dtype)
    note = f"differential vs {reference.name}\n{k}"
    if case.compare == "exact" or not oracle.is_float(dt):
        assert_close(got, want, "Differential", dt, backend, signed_zero=False, inputs=case.inputs, what=note)
        return
    if case.compare == "sum":
        sabs = run_kernel(reference, _abs_sum_kernel(k), case.inputs).astype(np.float64)
        n = k.reduction.size if k.reduction is not None else 1
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(all="ignore"):
            bound = 2 * max(n - 1, 0) * EPS["float64" if dt == "float64" else "float32"] * sabs
            if dt == "float16":  # the f32 sums may differ, and then round to different f16 neighbours
                bound = bound + np.abs(w) * 2.0**-10 + 2.0**-24
            bad = np.where(
                np.isnan(sabs),
                np.isnan(g) != np.isnan(w),
                np.isfinite(sabs) & ~(np.abs(g - w) <= bound) & ~(g == w),
            )
        assert not bad.any(), (
            f"{note}\nsums differ beyond 2(n-1)u sum|x|: got {g[bad]}, reference {w[bad]}, bound {bound[bad]}"
        )
        return
    rtol, atol = tolerance(case.compare, dt, backend)
    assert_close(
        got, want, case.compare, dt, backend, inputs=case.inputs, tol=(2 * rtol, 2 * atol), what=note
    )


def _run_property(backend: Backend, reference: Backend, max_examples: int, kind: str) -> None:
    if st is None:
        pytest.skip("hypothesis is not installed (pip install 'jaxcore[conformance]')")
    if reference.name == backend.name:
        pytest.skip(f"{backend.name} is the differential reference itself")
    dtypes, ok = _capable(backend, reference)
    strategy = elementwise_cases(dtypes, ok) if kind == "elementwise" else reduction_cases(dtypes, ok)

    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def prop(case: Case) -> None:
        check_case(backend, reference, case)

    prop()


def test_differential_elementwise(backend: Backend, reference_backend: Backend, max_examples: int) -> None:
    _run_property(backend, reference_backend, max_examples, "elementwise")


def test_differential_reduction(backend: Backend, reference_backend: Backend, max_examples: int) -> None:
    _run_property(backend, reference_backend, max_examples, "reduction")
