"""The reference interpreter: evaluates an AluExp over numpy arrays, per the contract.

One implementation of the semantics serves three callers: `AluExp.evaluate` on scalars,
constant folding in the simplifier, and the cpu backend on whole arrays of lanes. Values are
numpy arrays in their dtype's storage type, so every op rounds or wraps as a device would.

`Where` is lazy by masking: each branch is evaluated under the lanes that choose it, and
global reads ignore masked-out lanes, so a padded view never reads out of bounds.

Evaluation never recurses in Python: `_eval` is a generator that yields each operand it needs,
`(node, mask)`, and `run` drives a stack of them, so an expression may be any depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxcore import dtype as dt
from jaxcore.dtype import DType

if TYPE_CHECKING:
    from jaxcore.alu import AluExp

# read(node, index_array, mask) -> array of node.dtype's storage type, shaped like the index.
Reader = Callable[["AluExp", np.ndarray, "np.ndarray | None"], np.ndarray]
# What `_eval` yields (an operand to evaluate, under a mask) and is sent back (its value).
Request = tuple["AluExp", "np.ndarray | None"]
Steps = Generator[Request, np.ndarray, np.ndarray]

_UNARY_NUMPY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sin": np.sin,
    "Cos": np.cos,
    "Asin": np.arcsin,
    "Atan": np.arctan,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Reciprocal": np.reciprocal,
    "Erf": dt.erf,
    "Erfc": dt.erfc,
}
_BINARY = {op: op.lower() for op in ("Add", "Sub", "Mul", "Idiv", "Div", "Mod", "Min", "Max")}


class Interpreter:
    """Evaluates expressions against an environment of named lane arrays and a buffer reader."""

    def __init__(
        self, env: Mapping[str, Any], read: Reader | None = None, shared: frozenset[str] | None = None
    ) -> None:
        self.env = env
        self.read = read
        self.shared = shared
        # (node key, id of the mask it was evaluated under) -> (that mask, kept alive so that its
        # id is not reused, and the value)
        self._memo: dict[tuple[str, int], tuple[np.ndarray | None, np.ndarray]] = {}

    def run(self, exp: AluExp, mask: np.ndarray | None = None) -> np.ndarray:
        hit = self._recall(exp, mask)
        if hit is not None:
            return hit
        stack: list[tuple[AluExp, np.ndarray | None, Steps]] = [(exp, mask, self._eval(exp, mask))]
        value: Any = None
        while True:
            node, node_mask, steps = stack[-1]
            try:
                child, child_mask = steps.send(value)
            except StopIteration as done:
                value = done.value
                self._remember(node, node_mask, value)
                stack.pop()
                if not stack:
                    return value
                continue
            value = self._recall(child, child_mask)
            if value is None:
                stack.append((child, child_mask, self._eval(child, child_mask)))

    # Memoise only the values of nodes used more than once (`shared`, when given): holding every
    # temporary alive would defeat the allocator's reuse of hot memory. Under a Where a branch's
    # nodes are evaluated under its mask, memoised for that mask: unmemoised, a DAG shared below
    # nested Wheres is walked as a tree (3 lanes of a legalized float division took 43 s).
    def _memo_key(self, exp: AluExp, mask: np.ndarray | None) -> tuple[str, int] | None:
        if self.shared is not None and exp.key() not in self.shared:
            return None
        return exp.key(), (0 if mask is None else id(mask))

    def _recall(self, exp: AluExp, mask: np.ndarray | None) -> np.ndarray | None:
        key = self._memo_key(exp, mask)
        hit = None if key is None else self._memo.get(key)
        return None if hit is None else hit[1]

    def _remember(self, exp: AluExp, mask: np.ndarray | None, value: np.ndarray) -> None:
        key = self._memo_key(exp, mask)
        if key is not None:
            self._memo[key] = (mask, value)

    def _eval(self, e: AluExp, mask: np.ndarray | None) -> Steps:
        """The value of `e` under `mask`; yields `(operand, mask)` for each operand value it needs."""
        op = e.op.value
        storage = dt.to_numpy(e.dtype)
        if op == "Const":
            return np.asarray(e.arg, dtype=storage)
        if op in ("Special", "Variable"):
            name = e.arg[0] if op == "Special" else e.arg
            if name not in self.env:
                raise KeyError(f"Missing {'special' if op == 'Special' else 'variable'}: {name}")
            return np.asarray(self.env[name]).astype(storage, copy=False)
        if op == "Where":
            cond = (yield (e.src[0], mask)) != 0
            if cond.ndim == 0:
                return (yield (e.src[1] if cond else e.src[2], mask))
            m_true = cond if mask is None else (cond & mask)
            m_false = ~cond if mask is None else (~cond & mask)
            a = (yield (e.src[1], m_true)) if m_true.any() else np.zeros((), storage)
            b = (yield (e.src[2], m_false)) if m_false.any() else np.zeros((), storage)
            return np.where(cond, a, b).astype(storage, copy=False)
        if op == "GlobalIndex":
            if self.read is None:
                raise RuntimeError("Missing globals function")
            index = yield (e.src[0], mask)
            return self.read(e, index, mask)
        if op == "GlobalView":
            from jaxcore.alu import accessor_global

            return (yield (accessor_global(e.dtype, e.arg[0], e.arg[1], list(e.src)), mask))
        srcs = []
        for s in e.src:
            srcs.append((yield (s, mask)))
        if op in _BINARY:
            return dt.arith(_BINARY[op], srcs[0], srcs[1], e.dtype)  # operands share e's dtype
        if op in _UNARY_NUMPY:
            with np.errstate(all="ignore"):
                return np.asarray(_UNARY_NUMPY[op](srcs[0])).astype(storage, copy=False)
        if op == "Cast":
            return dt.cast(srcs[0], e.src[0].dtype, e.dtype)
        if op == "Bitcast":
            return dt.bitcast(srcs[0], e.src[0].dtype, e.dtype)
        if op == "Cmplt":
            return dt.compare("lt", srcs[0], srcs[1])
        if op == "Cmpne":
            return dt.compare("ne", srcs[0], srcs[1])
        if op == "BitCombine":
            r = dt.bit_combine(e.arg, srcs[0], srcs[1])
            return r.astype(storage, copy=False)
        if op == "BitShift":
            return dt.bit_shift(e.arg, srcs[0], srcs[1], e.dtype)
        if op == "Threefry2x32":
            return dt.threefry2x32(srcs[0], srcs[1], srcs[2], srcs[3], mode=e.arg)
        raise NotImplementedError(f"Missing implementation for {op}")


def shared_nodes(*exps: AluExp | None) -> frozenset[str]:
    """Keys of the nodes that are operands more than once: the ones worth memoising."""
    uses: dict[str, int] = {}
    for exp in exps:
        if exp is None:
            continue
        for node in exp.nodes():
            for s in node.src:
                uses[s.key()] = uses.get(s.key(), 0) + 1
    return frozenset(k for k, n in uses.items() if n > 1)


def to_python(value: np.ndarray, dtype: DType) -> int | float:
    """A 0-d result as a Python number (ints as int, floats as float)."""
    v = np.asarray(value).reshape(())
    if dt.is_float(dtype):
        return float(v)
    return int(v)


def evaluate_scalar(
    exp: AluExp, context: Mapping[str, float | int], globals: Callable[[int, int], float | int] | None = None
) -> int | float:
    """Evaluate on scalars: `context` binds Variables/Specials, `globals(gid, index)` reads buffers."""

    def read(node: AluExp, index: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        if globals is None:
            raise RuntimeError("Missing globals function")
        if mask is not None and not bool(mask):
            return np.zeros((), dt.to_numpy(node.dtype))
        value = globals(node.arg[0], int(index))
        return _number_to(value, node.dtype)

    env = {
        k: _number_to(v, DType.float64 if isinstance(v, float) else DType.int32) for k, v in context.items()
    }
    return to_python(Interpreter(env, read).run(exp), exp.dtype)


def _number_to(value: Any, dtype: DType) -> np.ndarray:
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    if dt.is_float(dtype):
        return np.asarray(value, dtype=dt.to_numpy(dtype))
    if isinstance(value, float) and not math.isfinite(value):
        return np.asarray(0, dtype=np.int64)
    return np.asarray(int(value), dtype=np.int64).astype(dt.to_numpy(dtype))
