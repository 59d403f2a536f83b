"""The scalar expression IR: ops, immutable expression nodes, printing, hashing, evaluation.

An `AluExp` computes one value per lane (output element, or output × reduction item). Nodes
are immutable and compared structurally through a content digest that is stable across
processes, so the digest doubles as a compile-cache key on disk. Range analysis and the
rewrite rules live in `simplify.py`.

Every node is type-checked when it is built (`_check_types`: a TypeError names the op and the
dtypes), and its digest is made then, from its operands' digests. Expressions may be any depth
(frontends unroll loops and fuse long elementwise chains): no traversal here, in the simplifier
or in the interpreter recurses in Python.
"""

from __future__ import annotations

import enum
import hashlib
import math
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jaxcore.dtype import DType, byte_width, const_value, is_float

# `arg` of a float32 Add/Sub/Mul/Reciprocal whose operands and result are never subnormal.
NORMAL_RANGE = "normal"


class AluOp(enum.StrEnum):
    Add = "Add"
    Sub = "Sub"
    Mul = "Mul"
    Idiv = "Idiv"
    Div = "Div"
    Mod = "Mod"
    Min = "Min"
    Max = "Max"
    BitCombine = "BitCombine"
    BitShift = "BitShift"
    Sin = "Sin"
    Cos = "Cos"
    Asin = "Asin"
    Atan = "Atan"
    Exp = "Exp"
    Log = "Log"
    Erf = "Erf"
    Erfc = "Erfc"
    Sqrt = "Sqrt"
    Floor = "Floor"
    Ceil = "Ceil"
    Reciprocal = "Reciprocal"
    Cast = "Cast"
    Bitcast = "Bitcast"
    Cmplt = "Cmplt"
    Cmpne = "Cmpne"
    Where = "Where"
    Threefry2x32 = "Threefry2x32"
    Const = "Const"
    Special = "Special"
    Variable = "Variable"
    GlobalIndex = "GlobalIndex"
    GlobalView = "GlobalView"


class AluGroup:
    """Op families that rules and backends treat alike."""

    Binary = frozenset(
        {AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Div, AluOp.Mod, AluOp.Min, AluOp.Max}
        | {AluOp.BitCombine, AluOp.BitShift}
    )
    Unary = frozenset(
        {AluOp.Sin, AluOp.Cos, AluOp.Asin, AluOp.Atan, AluOp.Exp, AluOp.Log, AluOp.Erf, AluOp.Erfc}
        | {AluOp.Sqrt, AluOp.Floor, AluOp.Ceil, AluOp.Reciprocal, AluOp.Cast, AluOp.Bitcast}
    )
    Compare = frozenset({AluOp.Cmplt, AluOp.Cmpne})
    Variable = frozenset({AluOp.Special, AluOp.Variable, AluOp.GlobalIndex, AluOp.GlobalView})
    Reduce = frozenset({AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max})
    RequiredFloat = frozenset(
        {AluOp.Sin, AluOp.Cos, AluOp.Asin, AluOp.Atan, AluOp.Exp, AluOp.Log, AluOp.Erf, AluOp.Erfc}
        | {AluOp.Sqrt, AluOp.Reciprocal, AluOp.Floor, AluOp.Ceil}
    )
    Commutative = frozenset({AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max})
    # what the tolerance table lets a device compute within a tolerance (conformance/tolerances.py)
    Approximate = RequiredFloat - {AluOp.Floor, AluOp.Ceil}


_ARITY = {op: 2 for op in AluGroup.Binary | AluGroup.Compare} | {op: 1 for op in AluGroup.Unary}
_ARITY |= {AluOp.Where: 3, AluOp.Threefry2x32: 4, AluOp.Const: 0, AluOp.Special: 0, AluOp.Variable: 0}
_ARITY |= {AluOp.GlobalIndex: 1}

_SYMBOLS = {
    AluOp.Add: "+",
    AluOp.Sub: "-",
    AluOp.Mul: "*",
    AluOp.Idiv: "/",
    AluOp.Mod: "%",
    AluOp.Cmplt: "<",
    AluOp.Cmpne: "!=",
}
_BIT_SYMBOLS = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}


def js_number_str(value: float | int) -> str:
    """Numbers printed the way JavaScript prints them (1, 0.5, NaN, -Infinity; -0 as 0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    r = repr(value)
    if "e" in r:
        mant, exp = r.split("e")
        return f"{mant}e{'+' if not exp.startswith('-') else '-'}{exp.lstrip('+-').lstrip('0') or '0'}"
    return r


def _unary_constructor(op: AluOp) -> staticmethod:
    """`AluExp.sin(a)` and friends: the op applied to `a`, in `a`'s dtype."""

    def construct(a: AluExp) -> AluExp:
        return AluExp(op, a.dtype, (a,))

    construct.__name__ = construct.__qualname__ = op.value.lower()
    return staticmethod(construct)


def _binary_constructor(op: AluOp) -> staticmethod:
    """`AluExp.add(a, b)` and friends: a Python number takes the other operand's dtype; a
    comparison produces bool, anything else the operands' dtype."""
    compare = op in AluGroup.Compare

    def construct(a: AluExp | float, b: AluExp | float) -> AluExp:
        a, b = _lift(a, b), _lift(b, a)
        return AluExp(op, DType.bool if compare else a.dtype, (a, b))

    construct.__name__ = construct.__qualname__ = op.value.lower()
    return staticmethod(construct)


def _bit_constructor(op: AluOp, mode: str) -> staticmethod:
    """`AluExp.bit_and(a, b)` and friends: the BitCombine/BitShift `mode` in `a`'s dtype."""

    def construct(a: AluExp, b: AluExp | int) -> AluExp:
        return AluExp(op, a.dtype, (a, _lift(b, a)), mode)

    construct.__name__ = construct.__qualname__ = "bit_" + mode if op == AluOp.BitCombine else mode
    return staticmethod(construct)


@dataclass(frozen=True, eq=False, repr=False)
class AluExp:
    """One node: `op` applied to `src`, producing `dtype`; `arg` carries op-specific data.

    `arg` by op: Const -> number; Special -> (name, n); Variable -> name; GlobalIndex ->
    (gid, length); GlobalView -> (gid, ShapeTracker); BitCombine -> "and"|"or"|"xor";
    BitShift -> "shl"|"shr"; Threefry2x32 -> "xor"|0|1; Add, Sub, Mul, Reciprocal on float32 ->
    None or NORMAL_RANGE, a promise that every operand and the result are zero or normal (never
    subnormal), so a target that flushes subnormals may use its native op (legalize.divide_rn).
    """

    op: AluOp
    dtype: DType
    src: tuple[AluExp, ...] = ()
    arg: Any = None
    _key: str = field(init=False, repr=False, compare=False)  # the digest, set by __post_init__

    def __post_init__(self) -> None:
        op, dtype, src = AluOp(self.op), DType(self.dtype), tuple(self.src)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "src", src)
        if not all(isinstance(s, AluExp) for s in src):
            bad = next(s for s in src if not isinstance(s, AluExp))
            raise TypeError(f"{op} operands must be AluExp, got {type(bad).__name__}")
        n = _ARITY.get(op)
        if n is not None and len(src) != n:
            raise TypeError(f"{op} takes {n} operands, got {len(src)}")
        _check_types(self)
        # The digest is made here, from the operands' digests, so no traversal ever recurses.
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{op}|{dtype}|{_arg_key(self)}|{len(src)}".encode())
        for s in src:
            h.update(s._key.encode())
        object.__setattr__(self, "_key", h.hexdigest())

    # ---- identity -------------------------------------------------------------------------
    def key(self) -> str:
        """A structural digest, stable across processes: equal keys mean equal expressions."""
        return self._key

    def __hash__(self) -> int:
        return int(self._key[:15], 16)

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, AluExp) and self._key == other._key)

    # ---- constructors -------------------------------------------------------------------
    @staticmethod
    def const(dtype: DType, value: float | int | bool) -> AluExp:
        dtype = DType(dtype)
        v = const_value(dtype, value)
        if dtype in (DType.float32, DType.float16):
            with np.errstate(over="ignore"):  # out of range rounds to +-inf, as a device would
                v = float(np.asarray(v, dtype=np.float32 if dtype == DType.float32 else np.float16))
        return AluExp(AluOp.Const, dtype, (), v)

    @staticmethod
    def i32(v: int) -> AluExp:
        return AluExp.const(DType.int32, v)

    @staticmethod
    def u32(v: int) -> AluExp:
        return AluExp.const(DType.uint32, v)

    @staticmethod
    def f32(v: float) -> AluExp:
        return AluExp.const(DType.float32, v)

    @staticmethod
    def f16(v: float) -> AluExp:
        return AluExp.const(DType.float16, v)

    @staticmethod
    def f64(v: float) -> AluExp:
        return AluExp.const(DType.float64, v)

    @staticmethod
    def bool_(v: bool | int) -> AluExp:
        return AluExp.const(DType.bool, v)

    @staticmethod
    def variable(dtype: DType, name: str) -> AluExp:
        return AluExp(AluOp.Variable, dtype, (), name)

    @staticmethod
    def special(dtype: DType, name: str, n: int) -> AluExp:
        return AluExp(AluOp.Special, dtype, (), (name, int(n)))

    @staticmethod
    def global_index(dtype: DType, gid: int, length: int, index: AluExp) -> AluExp:
        return AluExp(AluOp.GlobalIndex, dtype, (index,), (int(gid), int(length)))

    @staticmethod
    def global_view(dtype: DType, gid: int, st: Any, indices: list[AluExp] | tuple[AluExp, ...]) -> AluExp:
        if len(indices) != len(st.shape):
            raise ValueError(
                f"GlobalView over shape {list(st.shape)} takes {len(st.shape)} indices, got {len(indices)}"
            )
        return AluExp(AluOp.GlobalView, dtype, tuple(indices), (int(gid), st))

    add = _binary_constructor(AluOp.Add)
    sub = _binary_constructor(AluOp.Sub)
    mul = _binary_constructor(AluOp.Mul)
    idiv = _binary_constructor(AluOp.Idiv)
    div = _binary_constructor(AluOp.Div)  # float a / b, correctly rounded (Idiv truncates)
    mod = _binary_constructor(AluOp.Mod)
    min = _binary_constructor(AluOp.Min)
    max = _binary_constructor(AluOp.Max)
    cmplt = _binary_constructor(AluOp.Cmplt)
    cmpne = _binary_constructor(AluOp.Cmpne)

    @staticmethod
    def where(cond: AluExp, a: AluExp | float, b: AluExp | float) -> AluExp:
        a, b = _lift(a, b), _lift(b, a)
        return AluExp(AluOp.Where, a.dtype, (cond, a, b))

    @staticmethod
    def cast(dtype: DType, a: AluExp) -> AluExp:
        return a if a.dtype == dtype else AluExp(AluOp.Cast, dtype, (a,))

    @staticmethod
    def bitcast(dtype: DType, a: AluExp) -> AluExp:
        return a if a.dtype == dtype else AluExp(AluOp.Bitcast, dtype, (a,))

    sin = _unary_constructor(AluOp.Sin)
    cos = _unary_constructor(AluOp.Cos)
    asin = _unary_constructor(AluOp.Asin)
    atan = _unary_constructor(AluOp.Atan)
    exp = _unary_constructor(AluOp.Exp)
    log = _unary_constructor(AluOp.Log)
    erf = _unary_constructor(AluOp.Erf)
    erfc = _unary_constructor(AluOp.Erfc)
    sqrt = _unary_constructor(AluOp.Sqrt)
    reciprocal = _unary_constructor(AluOp.Reciprocal)

    @staticmethod
    def floor(a: AluExp) -> AluExp:
        """Floor of a float; integers are already whole, so they come back unchanged."""
        return AluExp(AluOp.Floor, a.dtype, (a,)) if is_float(a.dtype) else a

    @staticmethod
    def ceil(a: AluExp) -> AluExp:
        return AluExp(AluOp.Ceil, a.dtype, (a,)) if is_float(a.dtype) else a

    bit_and = _bit_constructor(AluOp.BitCombine, "and")
    bit_or = _bit_constructor(AluOp.BitCombine, "or")
    bit_xor = _bit_constructor(AluOp.BitCombine, "xor")
    shl = _bit_constructor(AluOp.BitShift, "shl")
    shr = _bit_constructor(AluOp.BitShift, "shr")

    @staticmethod
    def threefry2x32(k0: AluExp, k1: AluExp, c0: AluExp, c1: AluExp, mode: str | int = "xor") -> AluExp:
        return AluExp(AluOp.Threefry2x32, DType.uint32, (k0, k1, c0, c1), mode)

    def not_(self) -> AluExp:
        if self.dtype != DType.bool:
            raise TypeError("not() can only be called on boolean expressions")
        return AluExp.cmpne(self, AluExp.bool_(True))

    def __add__(self, other: AluExp | float) -> AluExp:
        return AluExp.add(self, other)

    def __radd__(self, other: float) -> AluExp:
        return AluExp.add(other, self)

    def __sub__(self, other: AluExp | float) -> AluExp:
        return AluExp.sub(self, other)

    def __rsub__(self, other: float) -> AluExp:
        return AluExp.sub(other, self)

    def __mul__(self, other: AluExp | float) -> AluExp:
        return AluExp.mul(self, other)

    def __rmul__(self, other: float) -> AluExp:
        return AluExp.mul(other, self)

    def __neg__(self) -> AluExp:
        return AluExp.mul(self, -1)

    # ---- traversal ----------------------------------------------------------------------
    def nodes(self) -> Iterator[AluExp]:
        """Distinct nodes (by structure) in post-order."""
        seen: set[str] = set()
        stack: list[tuple[AluExp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            k = node.key()
            if expanded:
                if k not in seen:
                    seen.add(k)
                    yield node
                continue
            if k in seen:
                continue
            stack.append((node, True))
            for s in reversed(node.src):
                stack.append((s, False))

    def collect(self, pred: Callable[[AluExp], bool]) -> list[AluExp]:
        return [n for n in self.nodes() if pred(n)]

    def some(self, pred: Callable[[AluExp], bool]) -> bool:
        return any(pred(n) for n in self.nodes())

    def rewrite(self, fn: Callable[[AluExp], AluExp | None]) -> AluExp:
        """Post-order rebuild: `fn` may return a replacement for each node, or None to keep it."""
        memo: dict[str, AluExp] = {}
        for node in self.nodes():
            k = node.key()
            new_src = tuple(memo[s.key()] for s in node.src)
            if any(a is not b for a, b in zip(new_src, node.src)):
                node = AluExp(node.op, node.dtype, new_src, node.arg)
            out = fn(node)
            memo[k] = node if out is None else out
        return memo[self.key()]

    def substitute(self, mapping: Mapping[str, AluExp]) -> AluExp:
        """Replace Variables by name (never Specials); dtypes must agree."""

        def visit(node: AluExp) -> AluExp | None:
            if node.op == AluOp.Variable and node.arg in mapping:
                rep = mapping[node.arg]
                if rep.dtype != node.dtype:
                    raise TypeError(f"Type mismatch: {node.dtype} vs {rep.dtype}")
                return rep
            return None

        return self.rewrite(visit)

    def reindex_gids(self, new_gids: list[int]) -> AluExp:
        """The expression with input `gid` read from `new_gids[gid]` (the fuzzer packs several
        kernels' inputs into one kernel)."""

        def visit(node: AluExp) -> AluExp | None:
            if node.op in (AluOp.GlobalIndex, AluOp.GlobalView):
                return AluExp(node.op, node.dtype, node.src, (new_gids[node.arg[0]], *node.arg[1:]))
            return None

        return self.rewrite(visit)

    def rewrite_global_views(self) -> AluExp:
        """Lower every GlobalView to a (possibly masked) GlobalIndex."""

        def visit(node: AluExp) -> AluExp | None:
            if node.op == AluOp.GlobalView:
                gid, st = node.arg
                return accessor_global(node.dtype, gid, st, list(node.src))
            return None

        return self.rewrite(visit)

    def distinct_ops(self) -> dict[AluOp, set[DType]]:
        out: dict[AluOp, set[DType]] = {}
        for n in self.nodes():
            out.setdefault(n.op, set()).add(n.dtype)
        return out

    # ---- analysis & evaluation ----------------------------------------------------------
    @property
    def vmin(self) -> float:
        from jaxcore.simplify import value_range

        return value_range(self)[0]

    @property
    def vmax(self) -> float:
        from jaxcore.simplify import value_range

        return value_range(self)[1]

    def simplify(self, cache: dict[str, AluExp] | None = None) -> AluExp:
        from jaxcore.simplify import simplify

        return simplify(self, cache)

    def resolve(self) -> int | float | None:
        s = self.simplify()
        return s.arg if s.op == AluOp.Const else None

    def evaluate(
        self,
        context: Mapping[str, float | int] | None = None,
        globals: Callable[[int, int], float] | None = None,
    ) -> int | float:
        """The value of this expression per the contract, with Variables/Specials bound by `context`."""
        from jaxcore.interpret import evaluate_scalar

        return evaluate_scalar(self, context or {}, globals)

    # ---- printing -----------------------------------------------------------------------
    def __str__(self) -> str:
        return _print(self)

    def __repr__(self) -> str:
        return f"AluExp({self})"


def pending(root: AluExp, done: Callable[[AluExp], bool]) -> list[AluExp]:
    """The nodes under `root` (itself included) that are not `done`, operands before users.

    Nodes that are done are not descended into, so repeated calls over a growing expression
    cost only what is new. Iterative, so any depth is fine."""
    out: list[AluExp] = []
    seen: set[int] = set()
    stack: list[tuple[AluExp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        if id(node) in seen or done(node):
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src))
    return out


_INDEX_DTYPES = (DType.int32, DType.uint32)


def _check_types(e: AluExp) -> None:
    """The dtype rules of each op, checked when the node is built, so that no backend ever sees
    an ill-typed tree (one would compute something, another fail deep in its compiler).

    Arithmetic (Add..Max), comparisons and Where's branches take operands of one dtype (the
    constructors lift Python numbers to it); the result is that dtype (bool for comparisons).
    BitShift alone may mix int32 and uint32 (the count's sign does not matter: counts are mod 32).
    """
    op, dtype, src = e.op, e.dtype, e.src
    d = [s.dtype for s in src]

    def fail(rule: str) -> None:
        got = ", ".join(map(str, d)) if d else "no operands"
        raise TypeError(f"{op} -> {dtype} {rule}; got operands {got}")

    if (op in AluGroup.RequiredFloat or op == AluOp.Div) and not is_float(dtype):
        raise TypeError(f"Unsupported dtype for {op}: {dtype}")
    if op in _ARITH:
        if d[0] != dtype or d[1] != dtype:
            fail("takes two operands of its own dtype")
    elif op in AluGroup.Compare:
        if dtype != DType.bool:
            raise TypeError(f"{op} produces bool, not {dtype}")
        if d[0] != d[1]:
            fail("compares two operands of one dtype")
    elif op == AluOp.BitCombine:
        if d[0] != d[1] or is_float(d[0]) or e.arg not in ("and", "or", "xor"):
            raise TypeError(f"BitCombine[{e.arg}] requires matching integral dtype, got {d[0]} and {d[1]}")
        if dtype != d[0]:
            fail("produces its operands' dtype")
    elif op == AluOp.BitShift:
        if any(t not in _INDEX_DTYPES for t in d) or e.arg not in ("shl", "shr"):
            msg = f"BitShift[{e.arg}] requires two integral, non-bool dtypes, got {d[0]} and {d[1]}"
            raise TypeError(msg)
        if dtype != d[0]:
            fail("produces its first operand's dtype")
    elif op in AluGroup.Unary and op not in (AluOp.Cast, AluOp.Bitcast):
        if d[0] != dtype:
            fail("produces its operand's dtype")
    elif op == AluOp.Bitcast:
        s = d[0]
        if s == DType.bool or dtype == DType.bool or byte_width(s) != byte_width(dtype):
            raise TypeError(f"Bitcast from {s} -> {dtype}")
    elif op == AluOp.Where:
        if d[0] != DType.bool:
            fail("needs a bool condition")
        if d[1] != dtype or d[2] != dtype:
            fail("takes two branches of its own dtype")
    elif op == AluOp.Threefry2x32:
        if dtype != DType.uint32 or any(t != DType.uint32 for t in d):
            raise TypeError("Threefry2x32 requires uint32 types")
        if e.arg not in ("xor", 0, 1):
            raise ValueError(f"Invalid Threefry2x32 mode: {e.arg}")
    elif op == AluOp.Const:
        a = e.arg
        if not isinstance(a, int | float | np.number):
            raise TypeError(f"Expected a number for constant, got {type(a).__name__}: {a}")
        if not is_float(dtype) and const_value(dtype, a) != a:
            raise TypeError(f"Const {a!r} is not a value of {dtype} (build constants with AluExp.const)")
    elif op == AluOp.Special:
        a = e.arg
        ok = isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) and isinstance(a[1], int)
        if not ok or a[1] < 0 or dtype not in _INDEX_DTYPES:
            raise TypeError(f"Special needs an integer dtype and (name, n >= 0), got {dtype} and {a!r}")
    elif op == AluOp.Variable:
        if not isinstance(e.arg, str):
            raise TypeError(f"Variable needs a name, got {e.arg!r}")
    elif op == AluOp.GlobalIndex:
        if d[0] not in _INDEX_DTYPES:
            fail("needs an int32 or uint32 index")
    elif op == AluOp.GlobalView:
        if any(t != DType.int32 for t in d):
            fail("needs int32 indices")


_ARITH = frozenset({AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Div, AluOp.Mod, AluOp.Min, AluOp.Max})


def _lift(x: AluExp | float | int | bool, like: AluExp | float | int | bool) -> AluExp:
    if isinstance(x, AluExp):
        return x
    if isinstance(like, AluExp):
        return AluExp.const(like.dtype, x)
    if isinstance(x, bool):
        return AluExp.bool_(x)
    return AluExp.i32(x) if isinstance(x, int) else AluExp.f32(x)


def _arg_key(e: AluExp) -> str:
    a = e.arg
    if e.op == AluOp.Const:
        if isinstance(a, float) and math.isnan(a):  # NaNs differ by sign and payload: keep both
            return f"nan:{struct.unpack('<Q', struct.pack('<d', a))[0]:x}"
        return float(a).hex() if isinstance(a, float) else f"i{int(a)}"
    if e.op == AluOp.GlobalView:
        return f"{a[0]}:{a[1].key()!r}"
    return repr(a)


# A node prints as literal text around its operands; an operand marked "strip" loses the
# parentheses a binary operator prints around itself.
_Piece = str | tuple[AluExp, bool]


def _parenthesised(e: AluExp) -> bool:
    return e.op in _SYMBOLS or e.op in (AluOp.BitCombine, AluOp.BitShift)


def _template(e: AluExp) -> list[_Piece]:
    op, s = e.op, e.src
    if op == AluOp.Const:
        if e.dtype == DType.bool:
            return ["true" if e.arg else "false"]
        return [js_number_str(e.arg)]
    if op == AluOp.Variable:
        return [f"${e.arg}:{e.dtype}"]
    if op == AluOp.Special:
        return [f"#{e.arg[0]}{{{e.arg[1]}}}"]
    if op == AluOp.GlobalIndex:
        return [f"G_{e.arg[0]}<{e.dtype}>[", (s[0], True), "]"]
    if op == AluOp.GlobalView:
        st = e.arg[1]
        shape = ",".join(map(str, st.shape))
        strides = ",".join(map(str, st.last_strides))
        kind = "c" if st.contiguous else "nc"
        return [f"GV_{e.arg[0]}<{e.dtype}>{{{shape}:{strides}:{kind}}}[", *_listed(s), "]"]
    if op in _SYMBOLS:
        return ["(", (s[0], False), f" {_SYMBOLS[op]} ", (s[1], False), ")"]
    if op in (AluOp.BitCombine, AluOp.BitShift):
        return ["(", (s[0], False), f" {_BIT_SYMBOLS[e.arg]} ", (s[1], False), ")"]
    if op == AluOp.Reciprocal:
        return ["1/", (s[0], False)]
    if op in (AluOp.Cast, AluOp.Bitcast):
        return [f"{op}<{e.dtype}>(", (s[0], True), ")"]
    return [f"{op}(", *_listed(s), ")"]


def _listed(src: tuple[AluExp, ...]) -> list[_Piece]:
    out: list[_Piece] = []
    for i, x in enumerate(src):
        out += [", ", (x, True)] if i else [(x, True)]
    return out


def _print(root: AluExp) -> str:
    """The text of an expression, written piece by piece: linear in its size at any depth."""
    out: list[str] = []
    stack: list[_Piece] = [(root, False)]
    while stack:
        piece = stack.pop()
        if isinstance(piece, str):
            out.append(piece)
            continue
        node, strip = piece
        pieces = _template(node)
        if strip and _parenthesised(node):
            pieces = pieces[1:-1]
        stack.extend(reversed(pieces))
    return "".join(out)


class AluVar:
    """Shared Variable names that kernels, tuners and codegen agree on."""

    gidx = AluExp.variable(DType.int32, "gidx")
    ridx = AluExp.variable(DType.int32, "ridx")
    idx = AluExp.variable(DType.int32, "idx")
    unroll = AluExp.variable(DType.int32, "unroll")
    upcast = AluExp.variable(DType.int32, "upcast")

    @staticmethod
    def acc(dtype: DType) -> AluExp:
        return AluExp.variable(dtype, "acc")


def accessor_global(dtype: DType, gid: int, st: Any, indices: list[AluExp]) -> AluExp:
    """Read buffer `gid` through a ShapeTracker: a GlobalIndex, guarded by Where when masked."""
    index, valid = st.to_alu_exp(indices)
    length = st.views[0].data_range()[1]
    read = AluExp.global_index(dtype, gid, length, index)
    v = valid.resolve()
    if v is not None and v:
        return read
    return AluExp.where(valid, read, AluExp.const(dtype, 0))
