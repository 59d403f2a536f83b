"""Runs a tuned kernel over numpy arrays, a box of lanes at a time.

Lanes are output elements (elementwise kernels) or an (outputs × reduction items) grid. Index
expressions are analysed once, at plan time, as *quasi-affine* forms

    c + Σ a·(v // d) % m   with v in {gidx, ridx}, d > 0, m > 0 or absent,

which is what lowering a row-major view leaves behind (`unravel` gives `(gidx / 4096) % 1024`).
The divisors and moduli of one variable, when they form a divisibility chain 1 | n1 | n2 ..., are
the place values of a mixed radix: a block of lanes aligned to them is a box over the digits, and
every term is affine in the digits. So each read becomes an N-D strided view of its buffer (rows,
n, ...) whose axes broadcast against the box, and every index subexpression becomes a sum of small
broadcast `arange`s: no index arrays are gathered or divided. Reads that are not quasi-affine, or
whose view would leave the buffer (padding), are gathered, with bounds checked on live lanes; int32
divisions by positive constants of provably non-negative, non-overflowing dividends skip the
contract's int64 detour (floor and truncation agree there).

Float32/float64 sums of a product of two such reads shaped like a matrix product go to BLAS.
Everything else computes op by op exactly as `jaxcore.interpret` defines it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from jaxcore import dtype as dt
from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import INT32_MAX, INT32_MIN, DType, to_numpy
from jaxcore.interpret import Interpreter, shared_nodes
from jaxcore.kernel import Kernel
from jaxcore.simplify import value_range
from jaxcore.tuner import TuneResult, tune_nullopt

# Lanes per block: large enough to amortise Python and numpy's per-call cost, small enough that
# temporaries stay in cache (on the 2-core dev box 64K lanes cost fma +45%, 512K lanes softmax
# x2). Memory is reused only if temporaries die young, which is why the interpreter memoises just
# the nodes used twice (`shared_nodes`): freshly-mmapped temporaries page-fault on first touch.
BLOCK_LANES = 1 << 18
# Kernels that compute nothing per lane (a bare read, a constant) make no temporaries: one block.
UNBOUNDED = 1 << 62

VARS = ("gidx", "ridx")


# ---- quasi-affine index forms ------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Term:
    """`(var // div) % mod` of a non-negative lane variable; `mod` 0 means no modulus."""

    var: str
    div: int
    mod: int = 0


@dataclass(frozen=True)
class QuasiAffine:
    """`const + Σ coef·term`, exact in Z; coefficients are nonzero and terms distinct."""

    const: int
    terms: tuple[tuple[Term, int], ...] = ()

    def __hash__(self) -> int:  # forms key per-block caches: hash once
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.const, self.terms))
            object.__setattr__(self, "_hash", h)
        return h

    def plus(self, other: QuasiAffine, sign: int = 1) -> QuasiAffine:
        coefs = dict(self.terms)
        for t, c in other.terms:
            coefs[t] = coefs.get(t, 0) + sign * c
        return _qa(self.const + sign * other.const, coefs)

    def times(self, k: int) -> QuasiAffine:
        return _qa(self.const * k, {t: c * k for t, c in self.terms})

    def single(self) -> Term | None:
        """The term when this form is exactly one term (coefficient 1, no constant)."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None


def _qa(const: int, coefs: dict[Term, int]) -> QuasiAffine:
    return QuasiAffine(const, tuple(sorted((t, c) for t, c in coefs.items() if c != 0)))


def _term(var: str, div: int, mod: int, sizes: dict[str, int]) -> QuasiAffine:
    """A normalised term: zero when the divisor exceeds the range, no modulus when it cannot wrap."""
    n = sizes[var]
    if div >= n:
        return QuasiAffine(0)
    if mod and div * mod >= n:
        mod = 0
    return QuasiAffine(0, ((Term(var, div, mod), 1),))


def _divided(x: QuasiAffine, k: int, sizes: dict[str, int]) -> QuasiAffine | None:
    """`x // k` (x is a non-negative term, so truncation is floor) when it is again one term."""
    t = x.single()
    if t is None:
        return None
    if t.mod == 0:
        return _term(t.var, t.div * k, 0, sizes)
    if t.mod % k == 0:
        return _term(t.var, t.div * k, t.mod // k, sizes)
    return None


def _modulo(x: QuasiAffine, k: int, sizes: dict[str, int]) -> QuasiAffine | None:
    """`x % k` when it is again one term: `(v // d) % m % k` needs k | m (or m | k: a no-op)."""
    t = x.single()
    if t is None:
        return None
    if t.mod == 0 or t.mod % k == 0:
        return _term(t.var, t.div, k, sizes)
    if k % t.mod == 0:
        return x
    return None


def _positive_const(e: AluExp) -> int | None:
    if e.op == AluOp.Const and e.dtype == DType.int32 and int(e.arg) > 0:
        return int(e.arg)
    return None


def quasi_affine(e: AluExp, sizes: dict[str, int], memo: dict[str, QuasiAffine | None]) -> QuasiAffine | None:
    """The quasi-affine form of an int32 expression over Specials named in `sizes`, or None."""
    key = e.key()
    if key in memo:
        return memo[key]
    memo[key] = out = _quasi_affine(e, sizes, memo)
    return out


def _quasi_affine(
    e: AluExp, sizes: dict[str, int], memo: dict[str, QuasiAffine | None]
) -> QuasiAffine | None:
    if e.dtype != DType.int32:
        return None
    if e.op == AluOp.Const:
        return QuasiAffine(int(e.arg))
    if e.op == AluOp.Special:
        name = e.arg[0]
        return _term(name, 1, 0, sizes) if name in sizes else None
    if e.op not in (AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Mod):
        return None
    a, b = (quasi_affine(s, sizes, memo) for s in e.src)
    if a is None or b is None:
        return None
    if e.op in (AluOp.Add, AluOp.Sub):
        return a.plus(b, 1 if e.op == AluOp.Add else -1)
    if e.op == AluOp.Mul:
        if not a.terms:
            a, b = b, a
        return a.times(b.const) if not b.terms else None
    k = _positive_const(e.src[1])
    if k is None:
        return None
    return _divided(a, k, sizes) if e.op == AluOp.Idiv else _modulo(a, k, sizes)


def _chain(forms: list[QuasiAffine], var: str) -> tuple[int, ...]:
    """Place values for `var`: its divisors and moduli that form a divisibility chain from 1."""
    periods = {1}
    for form in forms:
        for t, _ in form.terms:
            if t.var == var:
                periods.add(t.div)
                if t.mod:
                    periods.add(t.div * t.mod)
    chain = [1]
    for p in sorted(periods):
        if p % chain[-1] == 0 and p != chain[-1]:
            chain.append(p)
    return tuple(chain)


def _on_chain(t: Term, chain: tuple[int, ...]) -> bool:
    """Whether the term's divisor (and divisor times modulus) are place values of its variable."""
    return t.div in chain and (not t.mod or t.div * t.mod in chain)


# ---- boxes: blocks of lanes aligned to the place values ----------------------------------------


@dataclass(frozen=True)
class Box:
    """Lanes `start + Σ i_a·periods[a]` for `i_a < shape[a]`: a row-major box over digits.

    `start` is a multiple of `periods[0]`, and the box stays inside one multiple of the next
    place value up, so every digit above the box is constant over it.
    """

    var: str
    start: int
    shape: tuple[int, ...]
    periods: tuple[int, ...]
    levels: tuple[int, ...]  # the chain index of each axis

    @property
    def lanes(self) -> int:
        return self.shape[0] * self.periods[0]

    @property
    def stop(self) -> int:
        return self.start + self.lanes


def boxes(var: str, size: int, chain: tuple[int, ...], budget: int) -> Iterator[Box]:
    """Cover `[0, size)` with boxes of at most max(budget, 1) lanes, greedily at the highest level."""
    pos = 0
    while pos < size:
        level = max(
            j for j, p in enumerate(chain) if p <= max(budget, 1) and pos % p == 0 and pos + p <= size
        )
        p = chain[level]
        end = size if level + 1 == len(chain) else min(size, (pos // chain[level + 1] + 1) * chain[level + 1])
        count = min(max(budget, 1) // p, (end - pos) // p)
        levels = tuple(range(level, -1, -1))
        shape = (count, *(chain[j + 1] // chain[j] for j in levels[1:]))
        yield Box(var, pos, shape, tuple(chain[j] for j in levels), levels)
        pos += count * p


StartTerm = tuple[int, int, int, int]  # (coefficient, box index, div, mod) of one base term


@dataclass(frozen=True)
class Layout:
    """A form over every block of one signature: `base(starts) + Σ coefs[a]·i_a`.

    Blocks of one signature differ only in where their boxes start, so the per-axis
    coefficients are worked out once and each block only recomputes its base.
    """

    const: int
    start_terms: tuple[StartTerm, ...]
    coefs: tuple[int, ...]

    def base(self, starts: tuple[int, ...]) -> int:
        b = self.const
        for c, i, d, m in self.start_terms:
            q = starts[i] // d
            b += c * (q % m if m else q)
        return b


Signature = tuple[tuple[str, tuple[int, ...]], ...]  # (var, levels) of each box


def _layout(form: QuasiAffine, signature: Signature, chains: dict[str, tuple[int, ...]]) -> Layout | None:
    """Digits below a term's divisor drop out, digits at or above its modulus wrap away: the
    term is affine in the digits in between, and the box's start gives the rest (see Box)."""
    ndim = sum(len(levels) for _, levels in signature)
    coefs, start_terms = [0] * ndim, []
    for t, c in form.terms:
        chain = chains[t.var]
        if not _on_chain(t, chain):
            return None
        low = chain.index(t.div)
        top = chain.index(t.div * t.mod) if t.mod else len(chain)
        offset = 0
        for i, (var, levels) in enumerate(signature):
            if var == t.var:
                start_terms.append((c, i, t.div, t.mod))
                for a, lv in enumerate(levels):
                    if low <= lv < top:
                        coefs[offset + a] += c * (chain[lv] // t.div)
                break
            offset += len(levels)
        else:
            return None
    return Layout(form.const, tuple(start_terms), tuple(coefs))


@dataclass(frozen=True)
class Geometry:
    """A read's view over blocks of one signature and shape: extents, element strides, reach."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    lo: int  # lowest element offset from the base
    hi: int  # highest


class BlockKind:
    """Blocks of one signature and shape differ only in where their boxes start, so what a form
    looks like over them (its layout, its view's geometry) is worked out once per kind."""

    def __init__(
        self, signature: Signature, shape: tuple[int, ...], chains: dict[str, tuple[int, ...]]
    ) -> None:
        self.signature, self.shape, self.chains = signature, shape, chains
        self._forms: dict[QuasiAffine, tuple[Layout, Geometry] | None] = {}

    def layout(self, form: QuasiAffine) -> tuple[Layout, Geometry] | None:
        """The form's layout over blocks of this kind and its view's geometry, or None."""
        try:
            return self._forms[form]
        except KeyError:
            lay = _layout(form, self.signature, self.chains)
            out = self._forms[form] = None if lay is None else (lay, _geometry(lay.coefs, self.shape))
            return out


class Layouts:
    """The block kinds of one plan, memoised for its life."""

    def __init__(self, chains: dict[str, tuple[int, ...]]) -> None:
        self.chains = chains
        self._kinds: dict[tuple[Signature, tuple[int, ...]], BlockKind] = {}

    def kind(self, boxes: tuple[Box, ...]) -> BlockKind:
        signature = tuple((b.var, b.levels) for b in boxes)
        shape = tuple(n for b in boxes for n in b.shape)
        kind = self._kinds.get((signature, shape))
        if kind is None:
            kind = self._kinds[(signature, shape)] = BlockKind(signature, shape, self.chains)
        return kind


def _geometry(coefs: tuple[int, ...], shape: tuple[int, ...]) -> Geometry:
    extents = tuple(n if c else 1 for n, c in zip(shape, coefs))
    lo = sum(min(0, c * (n - 1)) for c, n in zip(coefs, extents))
    hi = sum(max(0, c * (n - 1)) for c, n in zip(coefs, extents))
    return Geometry(extents, coefs, lo, hi)


class Block:
    """The lanes of one step: a box of gidx, then (in reductions) a box of ridx."""

    def __init__(self, boxes: tuple[Box, ...], layouts: Layouts) -> None:
        self.boxes = boxes
        self.kind = layouts.kind(boxes)
        self.shape = self.kind.shape
        self.starts = tuple(b.start for b in boxes)

    def placed(self, form: QuasiAffine) -> tuple[int, Geometry] | None:
        """`(base, geometry)` with form == base + Σ geometry.strides[a]·i_a over this block, or None."""
        got = self.kind.layout(form)
        if got is None:
            return None
        lay, geo = got
        return lay.base(self.starts), geo

    def linear(self, form: QuasiAffine) -> tuple[int, tuple[int, ...]] | None:
        """`(base, coef per axis)` with form == base + Σ coef_a·i_a over this block, or None."""
        placed = self.placed(form)
        return None if placed is None else (placed[0], placed[1].strides)

    def view(self, form: QuasiAffine, buf: np.ndarray) -> np.ndarray | None:
        """`buf[form]` as a view broadcasting over the block, or None if it would leave `buf`."""
        placed = self.placed(form)
        if placed is None:
            return None
        base, geo = placed
        if base + geo.lo < 0 or base + geo.hi >= buf.size:
            return None
        item = buf.itemsize
        return np.ndarray(geo.shape, buf.dtype, buf, base * item, tuple(c * item for c in geo.strides))


def _arange(n: int, axis: int, ndim: int, int_t: type[np.integer]) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = n
    return np.arange(n, dtype=int_t).reshape(shape)


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
    chains = {v: _chain(list(forms.values()), v) for v in VARS}
    shared = shared_nodes(tuned.exp, tuned.epilogue)
    plan = KernelPlan(kernel, tuned, forms, frozenset(fast), chains, shared, Layouts(chains), 0)
    budget = UNBOUNDED if _computes_nothing(plan, tuned.exp) else BLOCK_LANES
    return replace(plan, budget=budget, matmul=_matmul_operands(plan))


def _is_fast_division(e: AluExp) -> bool:
    """int32 x / k or x % k with k > 0 and x provably in [0, INT32_MAX]: floor equals truncation."""
    if e.op not in (AluOp.Idiv, AluOp.Mod) or e.dtype != DType.int32 or _positive_const(e.src[1]) is None:
        return False
    return value_range(e.src[0])[0] >= 0 and _no_overflow(e.src[0])


def _no_overflow(e: AluExp) -> bool:
    """Every int32 node's range fits int32, so wrapping arithmetic equals exact arithmetic."""
    for node in e.nodes():
        lo, hi = value_range(node)
        if node.dtype != DType.int32 or lo < INT32_MIN or hi > INT32_MAX:
            return False
    return True


def _computes_nothing(plan: KernelPlan, e: AluExp) -> bool:
    """A constant or a bare strided read: blocks need no temporaries, so one block will do.

    Not when items span several digit axes: folding them in lane order flattens them, a copy.
    """
    if len(plan.chains["ridx"]) > 1:
        return False
    return e.op == AluOp.Const or (e.op == AluOp.GlobalIndex and _viewable(plan, e))


def _viewable(plan: KernelPlan, read: AluExp) -> bool:
    form = plan.forms.get(read.src[0].key())
    return form is not None and all(_on_chain(t, plan.chains[t.var]) for t, _ in form.terms)


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

    def _eval(self, e: AluExp, mask: np.ndarray | None) -> np.ndarray:
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
                a = self.run(e.src[0], mask)
                k = np.int32(e.src[1].arg)
                return np.floor_divide(a, k) if e.op == AluOp.Idiv else np.remainder(a, k)
        return super()._eval(e, mask)

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
            bad = int(idx[(idx < 0) | (idx >= buf.size)].flat[0])
            raise IndexError(
                f"kernel reads input {node.arg[0]} at element {bad}, outside its {buf.size} elements"
            )
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
}


def _plain_ufunc(e: AluExp) -> np.ufunc | None:
    """The numpy ufunc that is exactly this op (what `dtype.arith` and the interpreter call)."""
    if e.dtype == DType.bool or any(s.dtype != e.dtype for s in e.src):
        return None
    if e.op in _FLOAT_UFUNCS and dt.is_float(e.dtype):
        return _FLOAT_UFUNCS[e.op]
    return _UFUNCS.get(e.op)


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


# ---- matrix products ---------------------------------------------------------------------------
#
# Σ_r a[g, r]·b[g, r] in float32/float64, where the reads' views split the output axes into rows
# (only `a` varies along them), columns (only `b`) and batches (both), and both vary along every
# reduced axis, is a batched matrix product. BLAS forms the same products and adds them in its
# own blocked order, possibly fusing a multiply into its add (one rounding fewer), so the result
# differs from the per-op definition only in how the sum is rounded: the freedom the contract
# gives float Add reductions, numpy's pairwise order being another such order. Nothing else is
# allowed through: float16 products must round to float16, masked reads must read 0, and integer
# products must wrap exactly, so those take the generic path.


@dataclass(frozen=True)
class Product:
    """Output axes grouped as batch/rows/cols/rest (neither operand varies), then reduced axes."""

    batch: list[int]
    rows: list[int]
    cols: list[int]
    rest: list[int]
    reduced: list[int]

    @staticmethod
    def of(a: tuple[int, ...], b: tuple[int, ...], shape: tuple[int, ...], ng: int) -> Product | None:
        """The grouping for views of extents `a` and `b` over a block of `shape`, or None."""
        reduced = list(range(ng, len(shape)))
        if any(a[x] != shape[x] or b[x] != shape[x] for x in reduced):
            return None  # an operand is constant along a reduced axis: not a product there
        groups = [[x for x in range(ng) if (a[x] > 1, b[x] > 1) == key] for key in _GROUPS]
        if not groups[1] and not groups[2] and math.prod(a[x] for x in groups[0]) > 1:
            return None  # a batch of dot products: the generic path is as fast
        return Product(*groups, reduced)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Σ a·b over the reduced axes, shaped to broadcast over the output box."""
        nb, m, n, k = (
            _extent(a, self.batch),
            _extent(a, self.rows),
            _extent(b, self.cols),
            _extent(a, self.reduced),
        )
        order = self.batch + self.rows + self.cols + self.rest
        lhs = a.transpose(order + self.reduced).reshape(nb, m, k)
        rhs = b.transpose(self.batch + self.cols + self.rows + self.rest + self.reduced).reshape(nb, n, k)
        out = np.matmul(lhs, rhs.transpose(0, 2, 1))
        shape = [a.shape[x] for x in self.batch + self.rows] + [b.shape[x] for x in self.cols]
        return out.reshape(shape + [1] * len(self.rest)).transpose(np.argsort(order))


_GROUPS = [(True, True), (True, False), (False, True), (False, False)]


def _extent(v: np.ndarray, axes: list[int]) -> int:
    return math.prod(v.shape[x] for x in axes)


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
            product = (
                None
                if a is None or b is None
                else Product.of(a.shape, b.shape, block.shape, len(g_box.shape))
            )
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
