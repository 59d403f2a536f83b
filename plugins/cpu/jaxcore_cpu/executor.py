"""Runs a tuned kernel over numpy arrays, a block of lanes at a time.

Lanes are output elements (elementwise kernels) or an (outputs × reduction items) grid. At plan
time every int32 index node is analysed as a quasi-affine form (`affine`) and lanes are cut into
blocks aligned to the forms' place values (`blocks`). Over a block each read then becomes an N-D
strided view of its buffer whose axes broadcast against the block, and every index subexpression a
sum of small broadcast `arange`s: no index arrays are gathered or divided. Reads that are not
quasi-affine, or whose view would leave the buffer (padding), are gathered; a live lane whose
index is outside its buffer (an unmasked out-of-range read) reads 0, never raises. int32
divisions by positive constants of provably non-negative, non-overflowing dividends skip the
contract's int64 detour (floor and truncation agree there).

Float32/float64 sums of a product of two such reads shaped like a matrix product go to BLAS
(`matmul`). Everything else computes op by op exactly as `jaxcore.interpret` defines it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from jaxcore import dtype as dt
from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import INT32_MAX, INT32_MIN, DType, to_numpy
from jaxcore.interpret import Interpreter, Steps, shared_nodes
from jaxcore.kernel import Kernel
from jaxcore.simplify import value_range
from jaxcore.tuner import TuneResult, tune_nullopt
from jaxcore_cpu.affine import QuasiAffine, on_chain, place_values, positive_const, quasi_affine
from jaxcore_cpu.blocks import Block, Box, Layouts, boxes
from jaxcore_cpu.matmul import Product

# Lanes per block: large enough to amortise Python and numpy's per-call cost, small enough that
# temporaries stay in cache (on the 2-core dev box 64K lanes cost fma +45%, 512K lanes softmax
# x2). Memory is reused only if temporaries die young, which is why the interpreter memoises just
# the nodes used twice (`shared_nodes`): freshly-mmapped temporaries page-fault on first touch.
BLOCK_LANES = 1 << 18
# Kernels that compute nothing per lane (a bare read, a constant) make no temporaries: one block.
UNBOUNDED = 1 << 62

VARS = ("gidx", "ridx")


# ---- plans -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelPlan:
    kernel: Kernel
    tuned: TuneResult
    forms: dict[str, QuasiAffine]  # node key -> quasi-affine form, for int32 index nodes
    fast_div: frozenset[str]  # Idiv/Mod nodes with non-negative dividends and positive divisors
    chains: dict[str, tuple[int, ...]]
    shared: frozenset[str]
    layouts: Layouts
    budget: int
    matmul: tuple[AluExp, AluExp] | None = None


def plan_kernel(kernel: Kernel) -> KernelPlan:
    tuned = tune_nullopt(kernel)
    sizes = {"gidx": kernel.size, "ridx": kernel.reduction.size if kernel.reduction else 0}
    memo: dict[str, QuasiAffine | None] = {}
    forms: dict[str, QuasiAffine] = {}
    fast: set[str] = set()
    for exp in (tuned.exp, tuned.epilogue):
        for node in exp.nodes() if exp is not None else ():
            form = quasi_affine(node, sizes, memo)
            if form is not None:
                forms[node.key()] = form
            if _is_fast_division(node):
                fast.add(node.key())
    chains = {v: place_values(list(forms.values()), v) for v in VARS}
    shared = shared_nodes(tuned.exp, tuned.epilogue)
    plan = KernelPlan(kernel, tuned, forms, frozenset(fast), chains, shared, Layouts(chains), 0)
    budget = UNBOUNDED if _computes_nothing(plan, tuned.exp) else BLOCK_LANES
    return replace(plan, budget=budget, matmul=_matmul_operands(plan))


def _is_fast_division(e: AluExp) -> bool:
    """int32 x / k or x % k with k > 0 and x provably in [0, INT32_MAX]: floor equals truncation.

    Ranges are of the values nodes actually hold (a node that may wrap has the full range), so
    a non-negative range is a non-negative value."""
    if e.op not in (AluOp.Idiv, AluOp.Mod) or e.dtype != DType.int32 or positive_const(e.src[1]) is None:
        return False
    return value_range(e.src[0])[0] >= 0


def _computes_nothing(plan: KernelPlan, e: AluExp) -> bool:
    """A constant or a bare strided read: blocks need no temporaries, so one block will do.

    Not when items span several digit axes: folding them in lane order flattens them, a copy.
    """
    if len(plan.chains["ridx"]) > 1:
        return False
    return e.op == AluOp.Const or (e.op == AluOp.GlobalIndex and _viewable(plan, e))


def _viewable(plan: KernelPlan, read: AluExp) -> bool:
    form = plan.forms.get(read.src[0].key())
    return form is not None and all(on_chain(t, plan.chains[t.var]) for t, _ in form.terms)


def _matmul_operands(plan: KernelPlan) -> tuple[AluExp, AluExp] | None:
    """The two reads of a float Add reduction of `read * read` (each possibly cast), else None."""
    red, exp = plan.kernel.reduction, plan.tuned.exp
    if red is None or red.op != AluOp.Add or red.dtype not in (DType.float32, DType.float64):
        return None
    if exp.op != AluOp.Mul or exp.dtype != red.dtype:
        return None
    ops = tuple(s.src[0] if s.op == AluOp.Cast else s for s in exp.src)
    if all(o.op == AluOp.GlobalIndex and _viewable(plan, o) for o in ops):
        return ops[0], ops[1]
    return None


# ---- evaluating one block ----------------------------------------------------------------------


class Buffers:
    """The kernel's inputs viewed as each dtype they are read as (once per run, not per block)."""

    def __init__(self, raw: list[np.ndarray]) -> None:
        self.raw = raw
        self._typed: dict[tuple[int, DType], np.ndarray] = {}

    def __call__(self, read: AluExp) -> np.ndarray:
        key = (read.arg[0], read.dtype)
        buf = self._typed.get(key)
        if buf is None:
            raw, np_dtype = self.raw[read.arg[0]], to_numpy(read.dtype)
            n = raw.size // np_dtype.itemsize
            buf = self._typed[key] = raw[: n * np_dtype.itemsize].view(np_dtype)
        return buf


def strided_view(plan: KernelPlan, block: Block, read: AluExp, buffers: Buffers) -> np.ndarray | None:
    """The read as a view broadcasting over `block` (axes it ignores have extent 1), or None."""
    form = plan.forms.get(read.src[0].key())
    return None if form is None else block.view(form, buffers(read))


class _BlockInterpreter(Interpreter):
    """The reference interpreter over one block, with quasi-affine indices and strided reads."""

    def __init__(self, plan: KernelPlan, block: Block, buffers: Buffers, env: dict[str, np.ndarray]) -> None:
        super().__init__(env, self._gather, plan.shared)
        self.plan, self.block, self.buffers = plan, block, buffers

    def _eval(self, e: AluExp, mask: np.ndarray | None) -> Steps:
        if e.op == AluOp.GlobalIndex:
            view = strided_view(self.plan, self.block, e, self.buffers)
            if view is not None:
                return view
        elif e.op != AluOp.Const:
            form = self.plan.forms.get(e.key())
            value = self._index_value(form) if form is not None else None
            if value is not None:
                return value
            if e.key() in self.plan.fast_div:
                a = yield (e.src[0], mask)
                k = np.int32(e.src[1].arg)
                return np.floor_divide(a, k) if e.op == AluOp.Idiv else np.remainder(a, k)
        return (yield from super()._eval(e, mask))

    def _index_value(self, form: QuasiAffine) -> np.ndarray | None:
        """An index subexpression as a sum of broadcast aranges: in int32 when its range fits,
        else in int64 wrapped back to int32 (exactly what int32 arithmetic would give)."""
        placed = self.block.placed(form)
        if placed is None:
            return None
        base, geo = placed
        fits = INT32_MIN <= base + geo.lo and base + geo.hi <= INT32_MAX
        int_t = np.int32 if fits else np.int64
        ndim = len(geo.shape)
        value: np.ndarray = np.asarray(base, int_t)
        for axis, (c, n) in enumerate(zip(geo.strides, geo.shape)):
            if c and n > 1:
                value = value + _arange(n, axis, ndim, int_t) * int_t(c)
        return value.astype(np.int32, copy=False)

    def _gather(self, node: AluExp, index: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        buf = self.buffers(node)
        idx = np.asarray(index)
        if mask is not None:
            idx = np.where(mask, idx, 0)
        if idx.size and (idx.min() < 0 or idx.max() >= buf.size):
            # An unmasked read outside the buffer: its value is unspecified but confined to the
            # buffer (docs/contract-notes.md); such lanes read 0. Only reached when the in-range
            # check above fails, so in-range gathers pay one min and one max.
            inside = (idx >= 0) & (idx < buf.size)
            if buf.size == 0:
                return np.zeros(idx.shape, buf.dtype)
            return np.where(inside, buf[np.where(inside, idx, 0)], np.zeros((), buf.dtype))
        return buf[idx]

    def run_into(self, e: AluExp, dst: np.ndarray) -> None:
        """Evaluate the root straight into the output when it is a plain ufunc, saving a copy.

        Not when an operand runs across the output's rows (a transposed read): numpy is much
        faster computing in the operand's order and then copying than writing out of order.
        """
        ufunc = _plain_ufunc(e)
        if ufunc is None:
            np.copyto(dst, self.run(e))
            return
        srcs = [self.run(s) for s in e.src]
        with np.errstate(all="ignore"):
            if all(_rows_in_order(a) for a in srcs):
                ufunc(*srcs, out=dst)
            else:
                np.copyto(dst, ufunc(*srcs))


def _rows_in_order(a: np.ndarray) -> bool:
    return a.ndim == 0 or a.shape[-1] == 1 or a.strides[-1] in (0, a.itemsize)


_UFUNCS: dict[AluOp, np.ufunc] = {
    AluOp.Add: np.add,
    AluOp.Sub: np.subtract,
    AluOp.Mul: np.multiply,
    AluOp.Min: np.minimum,
    AluOp.Max: np.maximum,
}
_FLOAT_UFUNCS: dict[AluOp, np.ufunc] = {
    AluOp.Sin: np.sin,
    AluOp.Cos: np.cos,
    AluOp.Exp: np.exp,
    AluOp.Log: np.log,
    AluOp.Sqrt: np.sqrt,
    AluOp.Reciprocal: np.reciprocal,
    AluOp.Div: np.divide,
}


def _plain_ufunc(e: AluExp) -> np.ufunc | None:
    """The numpy ufunc that is exactly this op (what `dtype.arith` and the interpreter call)."""
    if e.dtype == DType.bool or any(s.dtype != e.dtype for s in e.src):
        return None
    if e.op in _FLOAT_UFUNCS and dt.is_float(e.dtype):
        return _FLOAT_UFUNCS[e.op]
    return _UFUNCS.get(e.op)


def _arange(n: int, axis: int, ndim: int, int_t: type[np.integer]) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = n
    return np.arange(n, dtype=int_t).reshape(shape)


# ---- running -----------------------------------------------------------------------------------

_REDUCE = {AluOp.Add: np.add, AluOp.Mul: np.multiply, AluOp.Min: np.minimum, AluOp.Max: np.maximum}
_REDUCE_BOOL = {AluOp.Add: np.maximum, AluOp.Max: np.maximum, AluOp.Mul: np.minimum, AluOp.Min: np.minimum}


def run_kernel(plan: KernelPlan, inputs: list[np.ndarray], output: np.ndarray) -> None:
    """Compute the kernel into `output`, reading `inputs` as they were before it starts."""
    if any(np.may_share_memory(output, a) for a in inputs):
        # Blocks write as they go (and products accumulate in place): an output that is also
        # an input is computed aside, so no block reads what another has already written.
        scratch = np.empty_like(output)
        _run(plan, inputs, scratch)
        output[...] = scratch
        return
    _run(plan, inputs, output)


def _run(plan: KernelPlan, inputs: list[np.ndarray], output: np.ndarray) -> None:
    kernel, buffers = plan.kernel, Buffers(inputs)
    out = output.view(to_numpy(kernel.dtype))
    if kernel.reduction is None:
        for box in boxes("gidx", kernel.size, plan.chains["gidx"], plan.budget):
            block = Block((box,), plan.layouts)
            _BlockInterpreter(plan, block, buffers, {}).run_into(plan.tuned.exp, _dst(out, box))
        return
    if plan.matmul is not None and _run_matmul(plan, buffers, out):
        return
    _run_reduction(plan, buffers, out)


def _dst(out: np.ndarray, box: Box) -> np.ndarray:
    return out[box.start : box.stop].reshape(box.shape)


def _run_reduction(plan: KernelPlan, buffers: Buffers, out: np.ndarray) -> None:
    """Fold blocks of (outputs × items) into an accumulator per output box, then the epilogue."""
    kernel, red = plan.kernel, plan.kernel.reduction
    assert red is not None
    acc_dtype = to_numpy(red.dtype)
    ufunc = (_REDUCE_BOOL if red.dtype == DType.bool else _REDUCE)[red.op]
    r_boxes = list(boxes("ridx", red.size, plan.chains["ridx"], plan.budget))
    g_budget = max(1, plan.budget // max([b.lanes for b in r_boxes], default=1))
    for g_box in boxes("gidx", kernel.size, plan.chains["gidx"], g_budget):
        acc = np.full(g_box.shape, red.identity, dtype=acc_dtype)
        for r_box in r_boxes:
            block = Block((g_box, r_box), plan.layouts)
            value = _BlockInterpreter(plan, block, buffers, {}).run(plan.tuned.exp)
            with np.errstate(all="ignore"):
                _fold(ufunc, acc, value, block)
        _epilogue(plan, buffers, g_box, acc, out)


def _fold(ufunc: np.ufunc, acc: np.ndarray, value: np.ndarray, block: Block) -> None:
    """Fold a block's items into `acc` in lane order; outputs the items do not vary along are
    reduced once. Float products go strictly in sequence: numpy reduces float16 in float32, and
    no reordering is allowed them (only float Add may round in its own order)."""
    ng = acc.ndim
    value = value.reshape((1,) * (len(block.shape) - value.ndim) + value.shape)
    if ufunc is np.multiply and acc.dtype.kind == "f":
        items = np.broadcast_to(value, block.shape).reshape((*acc.shape, -1))
        chain = np.concatenate([acc[..., None], items], axis=-1)
        acc[...] = np.multiply.accumulate(chain, axis=-1)[..., -1]
        return
    outer = value.shape[:ng]
    items = np.broadcast_to(value, outer + block.shape[ng:]).reshape((*outer, -1))
    ufunc(acc, ufunc.reduce(items, axis=-1, dtype=acc.dtype), out=acc)


def _epilogue(plan: KernelPlan, buffers: Buffers, g_box: Box, acc: np.ndarray, out: np.ndarray) -> None:
    assert plan.tuned.epilogue is not None
    interp = _BlockInterpreter(plan, Block((g_box,), plan.layouts), buffers, {"acc": acc})
    interp.run_into(plan.tuned.epilogue, _dst(out, g_box))


# ---- matrix products (why BLAS may sum them: see `matmul`) -------------------------------------


def _run_matmul(plan: KernelPlan, buffers: Buffers, out: np.ndarray) -> bool:
    """Run the whole kernel as matrix products; False (having written nothing) if it is not one."""
    kernel, red = plan.kernel, plan.kernel.reduction
    assert red is not None and plan.matmul is not None
    g_boxes = list(boxes("gidx", kernel.size, plan.chains["gidx"], UNBOUNDED))
    r_boxes = list(boxes("ridx", red.size, plan.chains["ridx"], UNBOUNDED))
    steps: list[list[tuple[Product, np.ndarray, np.ndarray]]] = []
    for g_box in g_boxes:
        steps.append([])
        for r_box in r_boxes:
            block = Block((g_box, r_box), plan.layouts)
            a, b = (strided_view(plan, block, read, buffers) for read in plan.matmul)
            if a is None or b is None:
                return False
            product = Product.of(a.shape, b.shape, block.shape, len(g_box.shape))
            if product is None:
                return False
            steps[-1].append((product, a, b))
    bare = plan.tuned.epilogue is not None and plan.tuned.epilogue.op == AluOp.Variable
    for g_box, row in zip(g_boxes, steps):
        # With no epilogue to apply, accumulate in the output itself.
        acc = _dst(out, g_box) if bare else np.empty(g_box.shape, to_numpy(red.dtype))
        acc[...] = red.identity
        for product, a, b in row:
            with np.errstate(all="ignore"):
                np.add(
                    acc, product(*(_as_acc(v, r, red.dtype) for v, r in zip((a, b), plan.matmul))), out=acc
                )
        if not bare:
            _epilogue(plan, buffers, g_box, acc, out)
    return True


def _as_acc(view: np.ndarray, read: AluExp, acc: DType) -> np.ndarray:
    """An operand in the accumulation dtype: the exp's Cast, applied once per element."""
    return view if read.dtype == acc else dt.cast(view, read.dtype, acc)
