"""Differential fuzzing: random kernels, checked against an independent oracle and the reference device.

Every case is a random kernel over the ops and dtypes that the backend *and* the reference device
declare: expression trees (+ - * min max idiv mod, bit ops, shifts, compares, where, casts,
bitcasts, floor/ceil, threefry, a transcendental at the root), reads through random ShapeTracker
views (pad, shrink, flip, permute, expand, reshape, stacked), reads at computed indices, and
reductions (add/mul/min/max, with epilogues). Integer inputs and constants lean on the values that
wrap: INT_MIN, INT_MAX, 2^29, 2^30, uint32 just below 2^32, and `gidx` times them.

The expected values come from this module's own evaluator of the *unsimplified* tree, built on
`oracle` (Python ints that wrap explicitly, numpy at each op's dtype): the simplifier is under test
too. On a device that is not the reference, the reference device's output must agree as well.

What is compared, and why (docs/contract-notes.md):

- exact ops exactly (NaN meets NaN; the sign of a zero is free, because Min/Max may pick either);
- NaN *bits* only where the contract fixes them: a float result that is only moved (read, view,
  Where, Bitcast) must keep its bits; a NaN produced by arithmetic may have any sign and payload;
- a transcendental (only at the root, on an exactly computed argument) within its tolerance
  (`tolerances.py`), twice that between two devices;
- float sums may be reassociated: within n u sum|x| of the exact sum (and classified NaN/±Inf as
  any order would give them, when no partial sum can overflow); float products may be
  reassociated too, so they are fuzzed on values whose products are exact in every order;
  min/max reductions are exact.

Elementwise cases are packed several to a kernel (``Where(gidx < n, case0, Where(gidx < 2n, ...))``
with every read indexed ``gidx % n``), so CI covers many cases in few compiles; a failing batch is
split and each case rerun on its own, then minimised. Seeds are fixed under ``CI=true``; elsewhere
``JAXCORE_FUZZ_SEED`` (default: random, printed on failure) and ``JAXCORE_FUZZ_COUNT`` choose.
`bench/fuzz.py` runs the long form and prints a summary table.

Every mismatch fails the run; each one ever found is minimised and kept in test_fuzz_regressions.

Device against reference, two ways::

    python bench/fuzz.py --device wasm --reference cpu --count 20000
    JAXCORE_FUZZ_COUNT=5000 pytest --pyargs jaxcore.conformance -k fuzz \
        --jaxcore-device=wasm --jaxcore-reference=cpu
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle, values
from jaxcore.conformance.harness import garbage, skip_if_undeclared, to_buffer, tolerance, undeclared
from jaxcore.dtype import DType, is_float
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker

CI_SEED = 20261201
CI_COUNT = 700
# Seconds one device's fuzz run may take (JAXCORE_FUZZ_SECONDS), and the fewest cases it must reach.
FUZZ_SECONDS = 150.0
MIN_CASES_IN_BUDGET = 150
ROOT_OPS = tuple(op for op in AluOp if op in AluGroup.Approximate)  # in AluOp's order: seeds replay
ARITH = (AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Min, AluOp.Max)
_BIN = {
    AluOp.Add: "Add",
    AluOp.Sub: "Sub",
    AluOp.Mul: "Mul",
    AluOp.Idiv: "Idiv",
    AluOp.Mod: "Mod",
    AluOp.Div: "Div",
}
_BIN |= {AluOp.Min: "Min", AluOp.Max: "Max"}

# Values that make int32/uint32 arithmetic wrap, and `gidx * c` overflow inside an index.
WRAP: dict[str, list[int]] = {
    "int32": [oracle.INT32_MIN, oracle.INT32_MAX, 2**29, 2**30, -(2**30), 2**31 - 5, -(2**31) + 5, 3, 5],
    "uint32": [2**32 - 1, 2**32 - 5, 2**31, 2**30, 2**29, 5, 10, 3],
}
# Items of float product reductions: every product of up to 8 of them is exact in any order.
PRODUCT_SAFE = [0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 0.0, -0.0, math.inf, -math.inf, math.nan]


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# ---- the oracle's evaluation of a tree ------------------------------------------------------------


@dataclass
class Env:
    """What the leaves of a tree read: Variables (lanes), input buffers, and view index maps.

    `views[gid]` maps a multi-index of that input's view to a flat source index (-1: padding).
    """

    vars: dict[str, np.ndarray]
    inputs: list[np.ndarray]
    views: dict[int, np.ndarray] = field(default_factory=dict)


def evaluate(e: AluExp, env: Env) -> np.ndarray:
    """The contract's value of `e` per lane, from `oracle` only (never jaxcore's interpreter)."""
    memo: dict[str, np.ndarray] = {}

    def go(n: AluExp) -> np.ndarray:
        k = n.key()
        if k not in memo:
            memo[k] = _eval(n, [go(s) for s in n.src], env)
        return memo[k]

    with np.errstate(all="ignore"):
        return go(e)


def _lanes(x: np.ndarray, n: int) -> np.ndarray:
    x = np.asarray(x)
    return np.broadcast_to(x, (n,)).copy() if x.ndim == 0 else x


def _eval(e: AluExp, s: list[np.ndarray], env: Env) -> np.ndarray:
    dt = str(e.dtype)
    n = len(next(iter(env.vars.values()))) if env.vars else 1
    st = oracle.storage(dt)
    op = e.op
    if op == AluOp.Const:
        return oracle.array([e.arg] * n, dt) if dt != "bool" else np.full(n, 1 if e.arg else 0, np.int32)
    if op == AluOp.Variable:
        return np.asarray(env.vars[e.arg]).astype(st)
    if op == AluOp.GlobalIndex:
        gid, length = e.arg
        idx = s[0].astype(np.int64)
        if np.any((idx < 0) | (idx >= length)):
            raise IndexError(f"oracle: read of input {gid} at {idx.tolist()} outside [0, {length})")
        return env.inputs[gid][idx].astype(st)
    if op == AluOp.GlobalView:
        gid = e.arg[0]
        flat = env.views[gid][tuple(x.astype(np.int64) for x in s)]
        src = env.inputs[gid]
        return np.where(flat >= 0, src[np.maximum(flat, 0)], np.zeros((), st)).astype(st)
    if op in _BIN:
        return oracle.binary(_BIN[op], s[0], s[1], dt)
    if op == AluOp.BitCombine:
        return oracle.binary(e.arg, s[0], s[1], dt)
    if op == AluOp.BitShift:
        return oracle.shift(e.arg, s[0], s[1], dt)
    if op in (AluOp.Cmplt, AluOp.Cmpne):
        return oracle.compare(str(op), s[0], s[1], str(e.src[0].dtype))
    if op == AluOp.Where:
        c = _lanes(s[0], n) != 0
        return np.where(c, _lanes(s[1], n), _lanes(s[2], n)).astype(st)
    if op == AluOp.Cast:
        return oracle.cast(s[0], str(e.src[0].dtype), dt)
    if op == AluOp.Bitcast:
        return oracle.bitcast(s[0], str(e.src[0].dtype), dt)
    if op == AluOp.Threefry2x32:
        return oracle.threefry2x32(s[0], s[1], s[2], s[3], mode=e.arg)
    return oracle.unary(str(op), s[0], dt)


# ---- random views -----------------------------------------------------------------------------


def random_view(rng: np.random.Generator, max_size: int = 48) -> tuple[ShapeTracker, np.ndarray, list[str]]:
    """A random stack of movement ops over a small base, and the numpy index map it must equal."""
    nd = int(rng.integers(1, 4))
    base = [int(rng.integers(1, 5)) for _ in range(nd)]
    st = ShapeTracker.from_shape(base)
    idx = np.arange(int(np.prod(base))).reshape(base)
    ops: list[str] = [f"from_shape({base})"]
    arg: list  # the argument of each kind of movement op has its own element type
    for _ in range(int(rng.integers(1, 5))):
        kind = str(rng.choice(["pad", "shrink", "flip", "permute", "expand", "reshape"]))
        shape = list(idx.shape)
        if kind == "pad":
            arg = [[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in shape]
            if int(np.prod([d + a + b for d, (a, b) in zip(shape, arg)])) > max_size:
                continue
            st, idx = st.pad(arg), np.pad(idx, arg, constant_values=-1)
        elif kind == "shrink":
            arg = []
            for d in shape:
                lo = int(rng.integers(0, d))
                arg.append([lo, int(rng.integers(lo + 1, d + 1))])
            st, idx = st.shrink(arg), idx[tuple(slice(a, b) for a, b in arg)]
        elif kind == "flip":
            arg = [bool(rng.integers(0, 2)) for _ in shape]
            st, idx = (
                st.flip(arg),
                np.flip(idx, tuple(i for i, f in enumerate(arg) if f)) if any(arg) else idx,
            )
        elif kind == "permute":
            arg = [int(a) for a in rng.permutation(len(shape))]
            st, idx = st.permute(arg), idx.transpose(arg)
        elif kind == "expand":
            arg = [int(rng.integers(1, 4)) if d == 1 else d for d in shape]
            if int(np.prod(arg)) > max_size:
                continue
            st, idx = st.expand(arg), np.broadcast_to(idx, arg)
        else:
            arg = _random_reshape(rng, int(idx.size))
            st, idx = st.reshape(arg), idx.reshape(arg)
        ops.append(f"{kind}({arg})")
    return st, np.ascontiguousarray(idx), ops


def base_size(kernel_st: ShapeTracker) -> int:
    """Elements the view's buffer must hold (what dispatch checks: `Kernel.input_bytes`)."""
    return max(1, int(np.prod(kernel_st.views[0].shape)), kernel_st.views[0].data_range()[1])


def _random_reshape(rng: np.random.Generator, size: int) -> list[int]:
    dims: list[int] = []
    rest = size
    while rest > 1 and len(dims) < 3:
        divs = [d for d in range(2, rest + 1) if rest % d == 0]
        d = int(rng.choice(divs))
        dims.append(d)
        rest //= d
    if rest > 1 or not dims:
        dims.append(rest)
    if rng.integers(0, 3) == 0:
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
    return dims


def unravel(shape: Sequence[int], flat: AluExp) -> list[AluExp]:
    out: list[AluExp] = []
    stride = 1
    for dim in reversed(shape):
        out.append(AluExp.mod(AluExp.idiv(flat, AluExp.i32(stride)), AluExp.i32(dim)))
        stride *= dim
    return out[::-1]


# ---- random cases ------------------------------------------------------------------------------


@dataclass
class Leaf:
    exp: AluExp
    bits: bool  # moved only: its bits are fixed by the contract


@dataclass
class Case:
    """One fuzzed kernel, its inputs and how its output is judged."""

    kernel: Kernel
    inputs: list[np.ndarray]
    expected: np.ndarray
    compare: str  # "exact", "bits", a transcendental's op name, or "sum"
    tree: AluExp  # the unsimplified expression (kernel.exp is simplified)
    env: Env
    label: str
    views: list[str] = field(default_factory=list)
    sum_abs: np.ndarray | None = None
    batchable: bool = True
    epilogue: AluExp | None = None  # unsimplified, for reports and the minimiser
    fold: tuple[AluOp, DType] | None = None  # a reduction's op and dtype as drawn (f16 sums become f32)
    indices: tuple[int, ...] = ()  # the draws of its seed this case is (several: a batch)

    @property
    def size(self) -> int:
        return self.kernel.size


class Generator:
    """Draws cases from a numpy Generator, over the dtypes and ops `ok` allows."""

    def __init__(self, rng: np.random.Generator, dtypes: list[DType], ok: Callable[[AluOp, DType], bool]):
        self.rng, self.dtypes, self.ok = rng, dtypes, ok

    # -- values
    def value(self, dt: DType) -> float | int:
        d = str(dt)
        r = self.rng.random()
        if d == "bool":
            return int(self.rng.integers(0, 2))
        if d in oracle.INTS:
            if r < 0.35:
                return int(self.rng.choice(values.ARITH[d] + values.CAST_EXTRA[d]))
            if r < 0.55:
                return int(self.rng.choice(WRAP[d]))
            if r < 0.8:
                return int(self.rng.integers(-10, 11)) % (2**32 if d == "uint32" else 2**63)
            lo, hi = (oracle.INT32_MIN, oracle.INT32_MAX) if d == "int32" else (0, oracle.UINT32_MAX)
            return int(self.rng.integers(lo, hi, endpoint=True))
        if r < 0.4:
            return float(self.rng.choice(values.ARITH[d] + values.CAST_EXTRA[d]))
        if r < 0.7:
            return float(self.rng.integers(-10, 11)) * (0.5 if self.rng.random() < 0.3 else 1.0)
        if r < 0.9:
            return float(self.rng.standard_normal() * 10.0 ** self.rng.uniform(-6, 8))
        width: type = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}[d]
        raw = self.rng.integers(0, np.iinfo(width).max, dtype=width, endpoint=True)
        return float(np.asarray(raw).view(oracle.storage(d)))  # any bit pattern, NaN payloads too

    def array(self, dt: DType, n: int) -> np.ndarray:
        d = str(dt)
        width: type | None = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}.get(d)
        out = oracle.array([self.value(dt) for _ in range(n)], d)
        if width is not None:  # keep NaN payloads and signs bit for bit (floats lose them)
            for i in np.flatnonzero(self.rng.random(n) < 0.05):
                out[i : i + 1] = self.rng.integers(0, np.iinfo(width).max, dtype=width, endpoint=True).view(
                    oracle.storage(d)
                )
        return out

    def const(self, dt: DType) -> AluExp:
        with np.errstate(all="ignore"):  # a float64 value rounds to Inf in float16/32: intended
            return AluExp.const(dt, self.value(dt))

    # -- trees
    def leaf(self, leaves: dict[DType, list[Leaf]], dt: DType, divisor: bool = False) -> Leaf:
        opts = [x for x in leaves.get(dt, []) if not (divisor and x.exp.op == AluOp.Variable)]
        if opts and self.rng.random() < 0.8:
            return opts[int(self.rng.integers(0, len(opts)))]
        if not divisor and self.ok(AluOp.Cast, dt) and self.rng.random() < 0.5:
            others = [x for t, xs in leaves.items() if t != dt for x in xs]
            if others:
                return Leaf(AluExp.cast(dt, others[int(self.rng.integers(0, len(others)))].exp), False)
        return Leaf(self.const(dt), not oracle.is_float(str(dt)))

    def tree(self, leaves: dict[DType, list[Leaf]], dt: DType, depth: int, root: bool = False) -> Leaf:
        kinds = self._kinds(leaves, dt) if depth > 0 else []
        if not kinds or (not root and self.rng.random() < 0.25):
            return self.leaf(leaves, dt)
        kind = kinds[int(self.rng.integers(0, len(kinds)))]
        d = depth - 1
        rng, ok = self.rng, self.ok

        def sub(t: DType = dt) -> AluExp:
            return self.tree(leaves, t, d).exp

        if kind == "arith":
            op = rng.choice([o for o in ARITH if ok(o, dt)])
            return Leaf(AluExp(AluOp(op), dt, (sub(), sub())), False)
        if kind == "divmod":
            ops = (AluOp.Idiv, AluOp.Mod, AluOp.Div) if oracle.is_float(str(dt)) else (AluOp.Idiv, AluOp.Mod)
            op = rng.choice([o for o in ops if ok(o, dt)])
            return Leaf(AluExp(AluOp(op), dt, (sub(), self.leaf(leaves, dt, divisor=True).exp)), False)
        if kind == "bits":
            mode = str(rng.choice(["and", "or", "xor"]))
            return Leaf(AluExp(AluOp.BitCombine, dt, (sub(), sub()), mode), True)
        if kind == "shift":
            cdt = DType(rng.choice([t for t in self.dtypes if t in (DType.int32, DType.uint32)]))
            mode = str(rng.choice(["shl", "shr"]))
            return Leaf(AluExp(AluOp.BitShift, dt, (sub(), sub(cdt)), mode), True)
        if kind == "where":
            a, b = self.tree(leaves, dt, d), self.tree(leaves, dt, d)
            return Leaf(AluExp.where(sub(DType.bool), a.exp, b.exp), a.bits and b.bits)
        if kind == "cmp":
            src = DType(rng.choice([t for t in self.dtypes if ok(AluOp.Cmplt, t) and ok(AluOp.Cmpne, t)]))
            fn = AluExp.cmplt if rng.random() < 0.5 else AluExp.cmpne
            return Leaf(fn(sub(src), sub(src)), True)
        if kind == "cast":
            src = DType(rng.choice([t for t in self.dtypes if t != dt]))
            return Leaf(AluExp.cast(dt, sub(src)), not oracle.is_float(str(dt)))
        if kind == "round":
            fn = AluExp.floor if rng.random() < 0.5 else AluExp.ceil
            return Leaf(fn(sub()), False)
        if kind == "bitcast_from_input":
            views = [x for x in leaves[DType.float32] if x.exp.op in (AluOp.GlobalIndex, AluOp.GlobalView)]
            return Leaf(AluExp.bitcast(dt, views[int(rng.integers(0, len(views)))].exp), True)
        if kind == "bitcast_to_float":
            src = DType(rng.choice([t for t in (DType.int32, DType.uint32) if t in self.dtypes]))
            return Leaf(AluExp.bitcast(DType.float32, sub(src)), True)
        if kind == "threefry":
            args = (sub(), sub(), self.leaf(leaves, dt).exp, self.leaf(leaves, dt).exp)
            return Leaf(AluExp.threefry2x32(*args, mode=("xor", 0, 1)[int(rng.integers(0, 3))]), True)
        if kind == "index":
            # A read at a computed index that is in bounds by construction, whatever int32 value
            # the index tree takes (wrapping included): ((t % n) + n) % n.
            reads = [x for x in leaves[dt] if x.exp.op == AluOp.GlobalIndex]
            r = reads[int(rng.integers(0, len(reads)))].exp
            gid, length = r.arg
            t = sub(DType.int32)
            n = AluExp.i32(length)
            return Leaf(AluExp.global_index(dt, gid, length, AluExp.mod(AluExp.mod(t, n) + n, n)), True)
        raise AssertionError(kind)

    def _kinds(self, leaves: dict[DType, list[Leaf]], dt: DType) -> list[str]:
        ok, floaty, have = self.ok, oracle.is_float(str(dt)), self.dtypes
        kinds = []
        if dt != DType.bool and any(ok(o, dt) for o in ARITH):
            kinds += ["arith", "arith"]
        if dt == DType.bool and any(ok(AluOp.Cmplt, t) and ok(AluOp.Cmpne, t) for t in have):
            kinds += ["cmp", "cmp"]
        if dt != DType.bool and any(ok(o, dt) for o in (AluOp.Idiv, AluOp.Mod)):
            kinds.append("divmod")
        if not floaty and ok(AluOp.BitCombine, dt):
            kinds.append("bits")
        if dt in (DType.int32, DType.uint32) and ok(AluOp.BitShift, dt):
            kinds.append("shift")
        if DType.bool in have and ok(AluOp.Where, dt):
            kinds.append("where")
        if len(have) > 1 and ok(AluOp.Cast, dt):
            kinds.append("cast")
        if floaty and ok(AluOp.Floor, dt) and ok(AluOp.Ceil, dt):
            kinds.append("round")
        f32_reads = [
            x for x in leaves.get(DType.float32, []) if x.exp.op in (AluOp.GlobalIndex, AluOp.GlobalView)
        ]
        if dt in (DType.int32, DType.uint32) and f32_reads and ok(AluOp.Bitcast, dt):
            kinds.append("bitcast_from_input")
        if dt == DType.float32 and ok(AluOp.Bitcast, dt) and {DType.int32, DType.uint32} & set(have):
            kinds.append("bitcast_to_float")
        if dt == DType.uint32 and ok(AluOp.Threefry2x32, dt):
            kinds.append("threefry")
        gidx_reads = [x for x in leaves.get(dt, []) if x.exp.op == AluOp.GlobalIndex]
        if gidx_reads and DType.int32 in have and ok(AluOp.Mod, DType.int32) and ok(AluOp.Add, DType.int32):
            kinds.append("index")
        return kinds

    # -- whole cases
    def elementwise(self, label: str) -> Case:
        rng = self.rng
        leaves: dict[DType, list[Leaf]] = {}
        inputs: list[np.ndarray] = []
        views: dict[int, np.ndarray] = {}
        view_ops: list[str] = []
        size = int(rng.integers(1, 17))
        if rng.random() < 0.35:
            st, idx, view_ops = random_view(rng)
            if st.size > 0:
                size = st.size
                dt = DType(rng.choice(self.dtypes))
                inputs.append(self.array(dt, base_size(kernel_st=st)))
                views[0] = idx
                leaves.setdefault(dt, []).append(
                    Leaf(AluExp.global_view(dt, 0, st, unravel(st.shape, AluVar.gidx)), True)
                )
            else:
                view_ops = []
        for _ in range(int(rng.integers(0 if inputs else 1, 4))):
            dt = DType(rng.choice(self.dtypes))
            leaves.setdefault(dt, []).append(
                Leaf(AluExp.global_index(dt, len(inputs), size, AluVar.gidx), True)
            )
            inputs.append(self.array(dt, size))
        if DType.int32 in self.dtypes and rng.random() < 0.4:
            leaves.setdefault(DType.int32, []).append(Leaf(AluVar.gidx, True))
        out_dt = DType(rng.choice(self.dtypes))
        top = self.tree(leaves, out_dt, int(rng.integers(1, 5)), root=True)
        exp, compare = top.exp, ("bits" if top.bits and oracle.is_float(str(out_dt)) else "exact")
        roots = [op for op in ROOT_OPS if self.ok(op, out_dt)] if oracle.is_float(str(out_dt)) else []
        if roots and rng.random() < 0.2:
            op = AluOp(rng.choice(roots))
            arg = self.leaf(leaves, out_dt, divisor=True).exp if op == AluOp.Reciprocal else exp
            exp, compare = AluExp(op, out_dt, (arg,)), str(op)
        env = Env({"gidx": np.arange(size, dtype=np.int32)}, inputs, views)
        kernel = Kernel(len(inputs), size, exp)
        return Case(kernel, inputs, evaluate(exp, env), compare, exp, env, label, view_ops)

    def reduction(self, label: str) -> Case:
        rng = self.rng
        rows, cols = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        red_dt = DType(rng.choice(self.dtypes))
        floaty = oracle.is_float(str(red_dt))
        ops = [o for o in (AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max) if self.ok(o, red_dt)]
        op = AluOp(rng.choice(ops)) if ops else AluOp.Max
        n_items = rows * cols
        leaves: dict[DType, list[Leaf]] = {}
        inputs: list[np.ndarray] = []
        views: dict[int, np.ndarray] = {}
        view_ops: list[str] = []
        item_index = AluVar.gidx * cols + AluVar.ridx
        env_vars = {
            "gidx": np.repeat(np.arange(rows, dtype=np.int32), cols),
            "ridx": np.tile(np.arange(cols, dtype=np.int32), rows),
        }
        if floaty and op == AluOp.Mul:
            # Products are reassociable: feed values whose products are exact in every order.
            safe = [v for v in PRODUCT_SAFE if str(red_dt) != "float16" or abs(v) != 2.0]
            for _ in range(int(rng.integers(1, 3))):
                arr = oracle.array([safe[i] for i in rng.integers(0, len(safe), n_items)], str(red_dt))
                leaves.setdefault(red_dt, []).append(
                    Leaf(AluExp.global_index(red_dt, len(inputs), n_items, item_index), True)
                )
                inputs.append(arr)
            reads = leaves[red_dt]
            a, b = (reads[int(i)].exp for i in rng.integers(0, len(reads), 2))
            choice = int(rng.integers(0, 4))
            if choice == 1 and self.ok(AluOp.Min, red_dt):
                item = AluExp.min(a, b)
            elif choice == 2 and self.ok(AluOp.Max, red_dt):
                item = AluExp.max(a, b)
            elif choice == 3 and self.ok(AluOp.Sub, red_dt):
                item = AluExp.sub(AluExp.const(red_dt, -0.0), a)
            else:
                item = a
        else:
            if rng.random() < 0.3:
                st, idx, view_ops = random_view(rng)
                if st.size > 0:
                    n_items = st.size
                    rows, cols = _split(rng, n_items)
                    st, idx = st.reshape([rows, cols]), idx.reshape(rows, cols)
                    view_ops.append(f"reshape([{rows}, {cols}])")
                    dt = DType(rng.choice(self.dtypes))
                    inputs.append(self.array(dt, base_size(kernel_st=st)))
                    views[0] = idx
                    env_vars = {
                        "gidx": np.repeat(np.arange(rows, dtype=np.int32), cols),
                        "ridx": np.tile(np.arange(cols, dtype=np.int32), rows),
                    }
                    item_index = AluVar.gidx * cols + AluVar.ridx
                    leaves.setdefault(dt, []).append(
                        Leaf(AluExp.global_view(dt, 0, st, [AluVar.gidx, AluVar.ridx]), True)
                    )
                else:
                    view_ops = []
            for _ in range(int(rng.integers(0 if inputs else 1, 3))):
                dt = DType(rng.choice(self.dtypes))
                leaves.setdefault(dt, []).append(
                    Leaf(AluExp.global_index(dt, len(inputs), n_items, item_index), True)
                )
                inputs.append(self.array(dt, n_items))
            if DType.int32 in self.dtypes and rng.random() < 0.4:
                leaves.setdefault(DType.int32, []).extend([Leaf(AluVar.gidx, True), Leaf(AluVar.ridx, True)])
            item = self.tree(leaves, red_dt, int(rng.integers(0, 4)), root=True).exp
        item_env = Env(env_vars, inputs, views)
        compare = "sum" if floaty and op == AluOp.Add else "exact"
        epi = None
        if compare != "sum" and rng.random() < 0.6:
            eleaves: dict[DType, list[Leaf]] = {red_dt: [Leaf(AluVar.acc(red_dt), True)]}
            row_dt = DType(rng.choice(self.dtypes))
            eleaves.setdefault(row_dt, []).append(
                Leaf(AluExp.global_index(row_dt, len(inputs), rows, AluVar.gidx), True)
            )
            inputs.append(self.array(row_dt, rows))
            if DType.int32 in self.dtypes:
                eleaves.setdefault(DType.int32, []).append(Leaf(AluVar.gidx, True))
            out_dt = DType(rng.choice(self.dtypes))
            epi = self.tree(eleaves, out_dt, int(rng.integers(1, 3)), root=True).exp
            if not epi.some(lambda x: x.op == AluOp.Variable and x.arg == "acc"):
                a = AluVar.acc(red_dt)
                epi = AluExp.where(AluExp.cmplt(a, a), epi, epi) if self.ok(AluOp.Cmplt, red_dt) else None
        return reduction_case(item, epi, (op, red_dt), rows, item_env, label, view_ops)

    def case(self, label: str, reduction_share: float = 0.3) -> Case:
        """One case; the IR may refuse a draw (TypeError/ValueError), which the caller counts."""
        return self.reduction(label) if self.rng.random() < reduction_share else self.elementwise(label)


def reduction_case(
    item: AluExp,
    epi: AluExp | None,
    fold: tuple[AluOp, DType],
    rows: int,
    item_env: Env,
    label: str,
    views: list[str] | None = None,
) -> Case:
    """The case that folds `item` (evaluated per (gidx, ridx) lane of `item_env`) over rows of
    equal length with `fold`, then applies `epi`: drawn once, and again for each candidate the
    minimiser tries."""
    op, red_dt = fold
    items = evaluate(item, item_env).reshape(rows, -1)
    cols = items.shape[1]
    acc = oracle.reduce_rows(str(op), items, str(red_dt))
    compare = "sum" if is_float(red_dt) and op == AluOp.Add else "exact"
    kernel = Kernel(len(item_env.inputs), rows, item, Reduction(red_dt, op, cols, epi))
    env_vars = {"gidx": np.arange(rows, dtype=np.int32)}
    sum_abs = None
    if epi is not None:
        expected = evaluate(epi, Env({**env_vars, "acc": acc}, item_env.inputs, item_env.views))
    elif compare == "sum":
        i64 = items.astype(np.float64)
        with np.errstate(all="ignore"):  # Inf - Inf is NaN, as intended
            expected = np.sum(i64, axis=1)  # exact enough: the bound below is far wider
        finite = np.where(np.isfinite(i64), np.abs(i64), 0.0)
        sum_abs = np.sum(finite, axis=1)
    else:
        expected = acc
    return Case(
        kernel,
        item_env.inputs,
        expected,
        compare,
        item,
        item_env,
        label,
        views or [],
        sum_abs,
        False,
        epi,
        fold,
    )


def _split(rng: np.random.Generator, n: int) -> tuple[int, int]:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    rows = int(rng.choice(divs))
    return rows, n // rows


def capable(
    backend: Backend, reference: Backend | None
) -> tuple[list[DType], Callable[[AluOp, DType], bool]]:
    """The dtypes both declare, and whether both declare (op, dtype)."""
    sides = [backend] if reference is None else [backend, reference]
    dtypes = [d for d in DType if all(d in b.capabilities.dtypes for b in sides)]

    def ok(op: AluOp, dt: DType) -> bool:
        return all(b.capabilities.supports_op(op, dt) for b in sides)

    return dtypes, ok


# ---- running and judging -------------------------------------------------------------------------


def run(backend: Backend, kernel: Kernel, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """Prepare and dispatch (the output pre-filled with garbage); the output as storage-typed lanes."""
    exe = backend.prepare_kernel(kernel)
    slots: list[int] = []
    try:
        for a in inputs:
            raw = to_buffer(a)
            slots.append(backend.malloc(len(raw), raw))
        out = backend.malloc(kernel.bytes, garbage(kernel.bytes))
        backend.dispatch(exe, slots, [out])
        slots.append(out)
        raw = backend.read(out)
    finally:
        for s in slots:
            backend.dec_ref(s)
    return np.frombuffer(raw, oracle.storage(str(kernel.dtype))).copy()


EPS = {"float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}
MAXF = {"float16": 65504.0, "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def judge(
    case: Case, got: np.ndarray, backend: Backend | None, other: np.ndarray | None = None
) -> str | None:
    """None if `got` conforms (to the oracle, or to another device's output); else why not."""
    with np.errstate(all="ignore"):  # NaN and Inf lanes convert and compare quietly, as intended
        return _judge(case, got, backend, other)


def _judge(case: Case, got: np.ndarray, backend: Backend | None, other: np.ndarray | None) -> str | None:
    versus_device = other is not None
    want = other if other is not None else case.expected
    dt = str(case.kernel.dtype)
    st = oracle.storage(dt)
    g = np.asarray(got, st)
    w = np.asarray(want, st) if case.compare != "sum" or versus_device else np.asarray(want, np.float64)
    if g.shape != w.shape:
        return f"shape {g.shape}, expected {w.shape}"
    if not oracle.is_float(dt):
        bad = g.astype(np.int64) != w.astype(np.int64)
    elif case.compare == "bits":
        ui = f"<u{st.itemsize}"
        bad = g.view(ui) != w.view(ui)
    elif case.compare == "sum" and not versus_device:
        bad = _sum_bad(g.astype(np.float64), w, case.sum_abs, dt, case.kernel)
    else:
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        rtol: float = 0.0
        atol: float | np.ndarray = 0.0
        if case.compare in {str(op) for op in ROOT_OPS}:
            rtol, atol = tolerance(case.compare, dt, backend)
            if versus_device:
                rtol, atol = 2 * rtol, 2 * atol
        elif case.compare == "sum":  # two devices' sums: both within the bound of the exact one
            n = case.kernel.reduction.size if case.kernel.reduction else 1
            u = EPS["float64"] if dt == "float64" else 2.0**-24
            rtol = 2 * n * u + (2.0**-10 if dt == "float16" else 0)
            if case.sum_abs is not None:  # n u sum|x| each: a cancelling sum's error is not relative
                atol = 2 * n * u * np.asarray(case.sum_abs, np.float64)
        with np.errstate(all="ignore"):
            nan_g, nan_w = np.isnan(g64), np.isnan(w64)
            inf = (np.isinf(g64) | np.isinf(w64)) & ~nan_g & ~nan_w
            far = ~(np.abs(g64 - w64) <= atol + rtol * np.abs(w64))
            bad = (nan_g != nan_w) | (inf & (g64 != w64)) | (~(nan_g | nan_w | inf) & far)
            if case.compare == "sum" and case.sum_abs is not None:
                bad &= ~(case.sum_abs >= MAXF["float32" if dt != "float64" else "float64"] / 2)
    if not bad.any():
        return None
    lanes = np.flatnonzero(bad)
    wdt = "float64" if w.dtype == np.float64 else dt
    shown = ", ".join(f"[{i}] expected {_fmt(w[i], wdt)} got {_fmt(g[i], dt)}" for i in lanes[:6])
    return f"{len(lanes)} of {bad.size} lanes differ ({case.compare}): {shown}"


def _sum_bad(g: np.ndarray, exact: np.ndarray, sum_abs: np.ndarray | None, dt: str, k: Kernel) -> np.ndarray:
    """A reassociated float sum: NaN/±Inf as every order gives them, else within n u sum|x|."""
    assert sum_abs is not None
    n = k.reduction.size if k.reduction is not None else 1
    acc_max = MAXF["float64" if dt == "float64" else "float32"]
    u = EPS["float64"] if dt == "float64" else 2.0**-24
    with np.errstate(all="ignore"):
        order_free = sum_abs < acc_max / 2  # no partial sum of the finite items can overflow
        bound = n * u * sum_abs + np.abs(exact) * (EPS[dt] * 2 if dt != "float64" else 0.0)
        bound = bound + (2.0**-24 if dt == "float16" else 1e-45 if dt == "float32" else 1e-320)
        # The exact sum rounds to +-Inf in the dtype from here on (max + half an ulp).
        overflow = {"float16": 65520.0, "float32": math.ldexp(1 - 2.0**-25, 128), "float64": math.inf}[dt]
        near_inf = np.abs(exact) + bound >= overflow
        same_inf = np.isinf(g) & (np.sign(g) == np.sign(exact))
        within = ~np.isnan(g) & (np.abs(g - exact) <= bound)
        bad = np.where(
            np.isnan(exact),
            ~np.isnan(g),
            np.where(np.isinf(exact), g != exact, ~(within | (near_inf & same_inf))),
        )
    return bad & order_free


def _fmt(v: np.generic, dt: str) -> str:
    if oracle.is_float(dt):
        st = oracle.storage(dt)
        bits = int(np.asarray(v, st).view(f"<u{st.itemsize}"))
        return f"{float(v)!r}(0x{bits:0{2 * st.itemsize}x})"
    return str(int(v))


# ---- batching ------------------------------------------------------------------------------------


def batch(cases: Sequence[Case]) -> Case:
    """Several elementwise cases of one size and dtype as one kernel (lane range k*n..(k+1)*n-1 is
    case k): every read is indexed `gidx % n`, so every lane reads in bounds."""
    n = cases[0].size
    dt = cases[0].kernel.dtype
    local = AluExp.mod(AluVar.gidx, AluExp.i32(n))
    parts: list[AluExp] = []
    inputs: list[np.ndarray] = []
    views: dict[int, np.ndarray] = {}
    for c in cases:
        assert c.size == n and c.kernel.dtype == dt and c.batchable
        base = len(inputs)
        e = c.tree.reindex_gids([base + i for i in range(len(c.inputs))]).substitute({"gidx": local})
        parts.append(e)
        views |= {base + gid: idx for gid, idx in c.env.views.items()}
        inputs.extend(c.inputs)
    exp = parts[-1]
    for k in range(len(parts) - 2, -1, -1):
        exp = AluExp.where(AluExp.cmplt(AluVar.gidx, AluExp.i32((k + 1) * n)), parts[k], exp)
    kernel = Kernel(len(inputs), n * len(cases), exp)
    expected = np.concatenate([c.expected for c in cases])
    env = Env({"gidx": np.arange(n * len(cases), dtype=np.int32)}, inputs, views)
    label = f"batch of {len(cases)} ({', '.join(c.label for c in cases)})"
    compare = "bits" if all(c.compare == "bits" for c in cases) else "exact"
    indices = tuple(i for c in cases for i in c.indices)
    return Case(kernel, inputs, expected, compare, exp, env, label, indices=indices)


def judge_batch(
    cases: Sequence[Case], got: np.ndarray, backend: Backend | None, other: np.ndarray | None
) -> list[int]:
    """Indices of the cases in a batch whose lanes do not conform."""
    n = cases[0].size
    bad = []
    for k, c in enumerate(cases):
        part = got[k * n : (k + 1) * n]
        if judge(c, part, backend) is not None:
            bad.append(k)
        elif other is not None and judge(c, part, backend, other[k * n : (k + 1) * n]) is not None:
            bad.append(k)
    return bad


# ---- minimising ----------------------------------------------------------------------------------


def minimise(case: Case, fails: Callable[[Case], bool], budget: int = 150) -> Case:
    """Greedy shrinking: replace a node (of the elementwise tree, or of a reduction's items or
    epilogue) by one of its operands or a simple constant while the case still fails."""
    best = case
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        for part, node in _shrinkable(best):
            for rep in _replacements(node):
                tries += 1
                if tries > budget:
                    return best
                cand = _shrunk(best, part, node, rep)
                if cand is not None and fails(cand):
                    best, changed = cand, True
                    break
            if changed:
                break
    return best


def _shrinkable(case: Case) -> Iterator[tuple[str, AluExp]]:
    """(part, node) for every node worth replacing, roots first: the items, then the epilogue."""
    parts = [("tree", case.tree)] + ([("epilogue", case.epilogue)] if case.epilogue is not None else [])
    for part, root in parts:
        for node in list(root.nodes())[::-1]:
            if node is root and node.op in (AluOp.Variable, AluOp.GlobalIndex, AluOp.GlobalView):
                continue
            yield part, node


def _replacements(node: AluExp) -> list[AluExp]:
    out = [s for s in node.src if s.dtype == node.dtype and s.op != AluOp.Variable]
    if node.op != AluOp.Const:
        if node.dtype in (DType.int32, DType.uint32, DType.bool):
            out += [AluExp.const(node.dtype, 0), AluExp.const(node.dtype, 1)]
        else:
            out += [AluExp.const(node.dtype, 0.0), AluExp.const(node.dtype, 1.0)]
    return out


def _replace(tree: AluExp, target: AluExp, rep: AluExp) -> AluExp:
    return tree.rewrite(lambda n: rep if n == target else None)


def _shrunk(case: Case, part: str, target: AluExp, rep: AluExp) -> Case | None:
    """`case` with `target` replaced by `rep` in one part, its expectation recomputed by the
    oracle; None where the IR refuses the result or it would no longer test the same root op."""
    tree, epi = case.tree, case.epilogue
    if part == "tree":
        tree = _replace(tree, target, rep)
    elif epi is not None:
        epi = _replace(epi, target, rep)
    if case.compare in {str(op) for op in ROOT_OPS} and tree.op != AluOp(case.compare):
        return None
    label = case.label if case.label.endswith("~min") else case.label + "~min"
    try:
        if case.fold is not None:
            small = reduction_case(tree, epi, case.fold, case.size, case.env, label, case.views)
        else:
            kernel = Kernel(case.kernel.nargs, case.size, tree)
            compare = case.compare if case.compare != "bits" else "exact"
            small = Case(
                kernel, case.inputs, evaluate(tree, case.env), compare, tree, case.env, label, case.views
            )
    except Exception:  # the IR or the oracle refuses the candidate: not a smaller case
        return None
    small.indices = case.indices
    return small


# ---- the fuzz loop -------------------------------------------------------------------------------

DEFAULT_REDUCTION_SHARE = 0.3


@dataclass
class Mismatch:
    label: str
    why: str
    kernel: str
    views: list[str]
    minimised: str | None = None
    rerun: str | None = None  # one command line that draws this case again and runs just it
    seed: int | None = None
    cases: tuple[int, ...] = ()  # its draws of `seed` (several: a finding that shows only batched)

    def __str__(self) -> str:
        lines = [f"{self.label}: {self.why}", *_field("kernel", self.kernel)]
        if self.views:
            lines += _field("view", ".".join(self.views))
        if self.minimised:
            lines += _field("minimised", self.minimised)
        if self.rerun:
            lines += _field("rerun", self.rerun)
        return "\n".join(lines)


def _field(name: str, text: str) -> list[str]:
    """`name:` and `text`, its later lines indented under its first."""
    first, *rest = text.splitlines() or [""]
    return [f"  {name + ':':<11}{first}", *(" " * 13 + line for line in rest)]


@dataclass
class Report:
    device: str
    seed: int
    cases: int = 0
    kernels: int = 0
    skipped: int = 0
    seconds: float = 0.0
    stopped_early: bool = False
    by_kind: dict[str, int] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)
    reference: str | None = None


def rerun_command(
    device: str, reference: str, seed: int, cases: Sequence[int], reduction_share: float
) -> str:
    """The `jaxcore conformance` line that replays `cases` of `seed`: the draws depend on the seed,
    the reduction share and what both devices declare, so all of them are on it."""
    args = ["jaxcore", "conformance", device, "--reference", reference, "--seed", str(seed)]
    args += ["--case", ",".join(str(i) for i in cases)]
    if reduction_share != DEFAULT_REDUCTION_SHARE:
        args += ["--reduction-share", repr(reduction_share)]
    return shlex.join(args)


def _attempt(backend: Backend, case: Case) -> tuple[np.ndarray | None, str | None]:
    try:
        return run(backend, case.kernel, case.inputs), None
    except Exception as exc:  # a crash is a finding too: kept with its type and message
        return None, f"{type(exc).__name__}: {_gist(str(exc))}"


def _gist(message: str, lines: int = 3, chars: int = 300) -> str:
    """The first lines of an error (a compiler's says what failed on its second line), on one line."""
    text = " / ".join([line.strip() for line in message.splitlines() if line.strip()][:lines])
    return text if len(text) <= chars else text[: chars - 3] + "..."


def check_one(backend: Backend, reference: Backend | None, case: Case) -> str | None:
    got, err = _attempt(backend, case)
    if err is not None:
        return f"raised {err}"
    assert got is not None
    why = judge(case, got, backend)
    if why is not None:
        return f"vs oracle: {why}"
    if reference is not None:
        other, err = _attempt(reference, case)
        if other is not None:
            why = judge(case, got, backend, other)
            if why is not None:
                return f"vs {reference.name}: {why}"
    return None


class _Runner:
    """Draws the cases of one seed and runs them on a backend (and the reference); every mismatch
    is recorded minimised, with the command line that replays it."""

    def __init__(
        self,
        backend: Backend,
        reference: Backend | None,
        seed: int,
        reduction_share: float,
        minimise_budget: int,
        on_mismatch: Callable[[Mismatch], None] | None,
    ) -> None:
        if reference is backend:
            reference = None
        self.backend, self.reference, self.seed = backend, reference, seed
        self.reduction_share, self.minimise_budget, self.on_mismatch = (
            reduction_share,
            minimise_budget,
            on_mismatch,
        )
        self.rep = Report(backend.name, seed, reference=reference.name if reference is not None else None)
        dtypes, ok = capable(backend, reference)
        self.gen = Generator(np.random.default_rng(seed), dtypes, ok)

    def draw(self, i: int) -> Case | None:
        """Draw `i` (every earlier one must have been drawn); None when the IR refuses it or a side
        does not declare what it needs (counted as skipped)."""
        rep = self.rep
        try:
            case = self.gen.case(f"seed={self.seed} case={i}", self.reduction_share)
        except (TypeError, ValueError) as exc:  # the IR refused a draw: a generator limit, not a finding
            kind = f"refused {type(exc).__name__}"
            rep.skipped += 1
            rep.by_kind[kind] = rep.by_kind.get(kind, 0) + 1
            return None
        sides = [self.backend] if self.reference is None else [self.backend, self.reference]
        if any(undeclared(b, case.kernel) for b in sides):
            rep.skipped += 1
            return None
        case.indices = (i,)
        rep.cases += 1
        kind = ("reduce " if case.kernel.reduction else "map ") + str(case.kernel.dtype)
        kind += " view" if case.views else ""
        rep.by_kind[kind] = rep.by_kind.get(kind, 0) + 1
        return case

    def fails(self, case: Case) -> bool:
        return check_one(self.backend, self.reference, case) is not None

    def record(self, case: Case, why: str) -> None:
        small = minimise(case, self.fails, self.minimise_budget) if self.minimise_budget else case
        ref = self.reference.name if self.reference is not None else self.backend.name
        m = Mismatch(case.label, why, str(case.kernel), case.views, seed=self.seed, cases=case.indices)
        m.rerun = rerun_command(self.backend.name, ref, self.seed, case.indices, self.reduction_share)
        if small is not case:
            m.minimised = f"{small.kernel}\n({check_one(self.backend, self.reference, small)})"
        self.rep.mismatches.append(m)
        if self.on_mismatch is not None:
            self.on_mismatch(m)

    def single(self, case: Case) -> None:
        self.rep.kernels += 1
        why = check_one(self.backend, self.reference, case)
        if why is not None:
            self.record(case, why)

    def flush(self, group: list[Case]) -> None:
        """Run cases packed into one kernel; each lane range that disagrees is rerun alone, since
        the finding is the case, not the batch (unless only the batch fails)."""
        if len(group) == 1:
            self.single(group[0])
            return
        backend, reference, rep = self.backend, self.reference, self.rep
        b = batch(group)
        rep.kernels += 1
        got, err = _attempt(backend, b)
        other = None
        if reference is not None and got is not None:
            other, _ = _attempt(reference, b)
        bad = list(range(len(group))) if got is None else judge_batch(group, got, backend, other)
        found = False
        for k in bad:
            rep.kernels += 1
            why = check_one(backend, reference, group[k])
            if why is not None:
                self.record(group[k], why)
                found = True
        if bad and not found:  # only the packed kernel fails: keep the batch itself
            why = check_one(backend, reference, b) or "batched lanes differ"
            self.record(b, f"only when batched: {why}")


def fuzz(
    backend: Backend,
    reference: Backend | None,
    seed: int,
    count: int,
    batch_size: int = 8,
    minimise_budget: int = 150,
    on_mismatch: Callable[[Mismatch], None] | None = None,
    reduction_share: float = DEFAULT_REDUCTION_SHARE,
    seconds: float | None = None,
) -> Report:
    """Run `count` random cases on `backend` (and `reference`, if it is another device), or as
    many as `seconds` allow (a device whose shader compiler is slow still gets a bounded run: the
    batches still open are run early when, at the pace so far, they would end past `seconds`;
    minimising a finding may still run past it)."""
    runner = _Runner(backend, reference, seed, reduction_share, minimise_budget, on_mismatch)
    rep = runner.rep
    start = time.perf_counter()
    pending: dict[tuple[int, DType], list[Case]] = {}
    for i in range(count):
        if seconds is not None and time.perf_counter() - start > seconds:
            rep.stopped_early = True
            break
        if seconds is not None and pending and _short_of_time(start, seconds, rep.kernels, len(pending)):
            for group in pending.values():  # run them now, so the time bound holds
                runner.flush(group)
            pending.clear()
        case = runner.draw(i)
        if case is None:
            continue
        if not case.batchable or batch_size <= 1 or case.compare not in ("exact", "bits"):
            runner.single(case)
            continue
        key = (case.size, case.kernel.dtype)
        group = pending.setdefault(key, [])
        group.append(case)
        if len(group) >= batch_size or sum(len(c.inputs) for c in group) > min(backend.max_args, 60) - 4:
            runner.flush(pending.pop(key))
    for group in pending.values():
        runner.flush(group)
    rep.seconds = time.perf_counter() - start
    return rep


def _short_of_time(start: float, seconds: float, kernels: int, open_batches: int) -> bool:
    """Whether the batches still open, at the time per kernel so far, would end past `seconds`."""
    spent = time.perf_counter() - start
    return spent + open_batches * spent / max(kernels, 1) > seconds


def replay(
    backend: Backend,
    reference: Backend | None,
    seed: int,
    cases: Sequence[int],
    reduction_share: float = DEFAULT_REDUCTION_SHARE,
    minimise_budget: int = 150,
    on_mismatch: Callable[[Mismatch], None] | None = None,
) -> Report:
    """Draw the cases of `seed` as `fuzz` does, up to the last of `cases`, and run only those: one
    alone, several packed into one kernel as `fuzz` packed them (a finding that showed only
    batched). ValueError if a wanted draw is not runnable on these devices."""
    wanted = sorted(set(cases))
    if not wanted or wanted[0] < 0:
        raise ValueError(f"cases must be non-negative draw numbers, got {list(cases)}")
    runner = _Runner(backend, reference, seed, reduction_share, minimise_budget, on_mismatch)
    start = time.perf_counter()
    group: list[Case] = []
    for i in range(wanted[-1] + 1):
        case = runner.draw(i)
        if i in wanted:
            if case is None:
                raise ValueError(
                    f"draw {i} of seed {seed} is refused by the IR or undeclared on {backend.name}"
                )
            group.append(case)
    if len({(c.size, c.kernel.dtype) for c in group}) > 1 or (
        len(group) > 1 and not all(c.batchable and c.compare in ("exact", "bits") for c in group)
    ):
        raise ValueError(f"draws {wanted} of seed {seed} cannot be packed into one kernel")
    runner.rep.cases, runner.rep.skipped, runner.rep.by_kind = len(group), 0, {}
    runner.flush(group)
    runner.rep.seconds = time.perf_counter() - start
    return runner.rep


# ---- the conformance cases -----------------------------------------------------------------------


def fuzz_seed() -> tuple[int, int]:
    """(seed, count): fixed in CI; `JAXCORE_FUZZ_SEED` / `JAXCORE_FUZZ_COUNT` elsewhere."""
    count = int(os.environ.get("JAXCORE_FUZZ_COUNT", CI_COUNT))
    if running_in_ci():
        return CI_SEED, max(count, CI_COUNT)
    raw = os.environ.get("JAXCORE_FUZZ_SEED")
    return (int(raw) if raw else fresh_seed()), count


def fresh_seed() -> int:
    """A seed from the OS's entropy, small enough to type back in."""
    entropy = np.random.SeedSequence().entropy
    assert isinstance(entropy, int)  # numpy draws an int when it is given none
    return int(entropy % 2**31)


def test_fuzz_random_kernels(backend: Backend, reference_backend: Backend) -> None:
    """700 random cases (CI: a fixed seed), or as many as FUZZ_SECONDS allow on a slow compiler, agree
    with the oracle and the reference device."""
    seed, count = fuzz_seed()
    ref = None if reference_backend.name == backend.name else reference_backend
    # 12 elementwise cases to a kernel and a quarter reductions: about 1 compile per 2.5 cases.
    budget = float(os.environ.get("JAXCORE_FUZZ_SECONDS", FUZZ_SECONDS))
    rep = fuzz(
        backend, ref, seed, count, batch_size=12, minimise_budget=20, reduction_share=0.25, seconds=budget
    )
    if rep.stopped_early:  # a slow compiler: the time budget, not the count, ended the run
        print(
            f"fuzz on {backend.name}: {rep.cases} cases in the {budget:.0f} s budget ({rep.kernels} kernels)"
        )
        assert rep.cases >= MIN_CASES_IN_BUDGET, f"only {rep.cases} cases ran in {budget:.0f} s"
    else:
        assert rep.cases >= min(count, CI_COUNT) * 0.9, f"only {rep.cases} of {count} draws were runnable"
    if rep.mismatches:
        shown = "\n\n".join(str(m) for m in rep.mismatches[:8])
        raise AssertionError(
            f"{len(rep.mismatches)} of {rep.cases} fuzzed kernels on {backend.name} do not conform "
            f"(JAXCORE_FUZZ_SEED={seed}; each finding ends with the command that replays it):\n\n{shown}"
        )


def test_fuzz_oracle_catches_a_wrong_device(backend: Backend) -> None:
    """The fuzzer can fail: a device that adds one to every int32 lane is caught by the judge."""
    dtypes, ok = capable(backend, None)
    gen = Generator(np.random.default_rng(7), dtypes, ok)
    caught = 0
    for i in range(40):
        case = gen.elementwise(f"selftest {i}")
        if undeclared(backend, case.kernel):
            continue
        got = run(backend, case.kernel, case.inputs)
        assert judge(case, got, backend) is None, f"{case.label}: {judge(case, got, backend)}\n{case.kernel}"
        wrong = got.copy()
        if oracle.is_float(str(case.kernel.dtype)):
            with np.errstate(all="ignore"):  # float16 lanes may overflow to Inf: still wrong
                wrong = (wrong.astype(np.float64) * 1.5 + 1).astype(wrong.dtype)
        else:
            wrong = (wrong.astype(np.int64) ^ 2).astype(wrong.dtype)
        caught += judge(case, wrong, backend) is not None
    assert caught >= 30


# Dtypes that hold small integers (below 2048) exactly, the plainest first: a case about memory,
# views or threads (not about arithmetic) runs its data in the first one the backend declares.
SMALL_INT_DTYPES = (DType.int32, DType.float32, DType.uint32, DType.float64, DType.float16)


def data_dtype(backend: Backend, candidates: Sequence[DType] = SMALL_INT_DTYPES) -> DType:
    """The first of `candidates` the backend declares; if none, the first (the case's kernel is
    then undeclared, and `skip_if_undeclared` checks that it is refused and skips)."""
    return next((d for d in candidates if d in backend.capabilities.dtypes), candidates[0])


@pytest.mark.parametrize("view", range(12))
def test_fuzz_views_match_numpy(backend: Backend, view: int) -> None:
    """Random movement-op stacks read exactly what the numpy index map says (padding reads 0).
    The data is in a dtype the backend declares; the index arithmetic is int32 on every device."""
    rng = np.random.default_rng(1000 + view)
    st, idx, ops = random_view(rng)
    if st.size == 0:
        return
    dt = data_dtype(backend)
    src = oracle.array(np.arange(1, int(idx.max()) + 2) * 7, str(dt))
    kernel = Kernel(1, st.size, AluExp.global_view(dt, 0, st, unravel(st.shape, AluVar.gidx)))
    skip_if_undeclared(backend, kernel)
    want = np.where(idx.ravel() >= 0, src[np.maximum(idx.ravel(), 0)], 0).astype(src.dtype)
    got = run(backend, kernel, [src])
    assert np.array_equal(got, want), f"view {'.'.join(ops)}: got {got.tolist()}, expected {want.tolist()}"
