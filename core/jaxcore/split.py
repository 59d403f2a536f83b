"""Splitting a kernel too costly for a device into a chain of kernels through temporary buffers.

Frontends fuse long elementwise chains into one kernel. A GPU dialect spells each transcendental
(and each exact float division or remainder) as a long generated helper that the driver inlines,
and a driver's compile time grows faster than the code it is fed: lavapipe took seconds for a
chain of fifty sines and did not finish a thousand. A device states what one kernel may cost
(`Capabilities.max_kernel_cost`); `split_kernel` cuts a kernel over it into parts within it.

The cost (`node_cost`, `kernel_cost`) counts each distinct node once (a shared subexpression is
computed once), weighted by roughly how many operations a GPU dialect turns it into: a float32
transcendental by the size of its expansion (`jaxcore.expansions`), exact float Idiv and Mod as
long helpers, float64 helpers eight times over, plain float arithmetic twelve (the op and its
NaN, rounding and opaque guards), index arithmetic one, constants and variables nothing. Measured
compile times per op on lavapipe and llvmpipe follow these weights to within a few times, not
better (llvmpipe's GLSL takes a float multiply at a fifth of a sin, lavapipe at a hundredth): a
device sets its budget by its costliest case, and a cheaper one is merely split more finely.

The cut is greedy, in one pass over the expression DAG, operands first: a node whose part (itself
and everything below it that is not yet cut) would cost more than the budget, or read more
buffers than a kernel may, has its costliest operands cut. Each cut node is materialised, in its
own dtype, into a temporary buffer by an elementwise kernel of its own (which may read earlier
temporaries), and every part above it reads the temporary instead. Every node keeps its dtype and
op, so a temporary holds exactly the value the fused kernel computes (the contract rounds per
op): the parts together give the fused kernel's result bit for bit.

Reductions are cut inside the item expression and in the parts of the epilogue that do not read
`acc`; where what reads `acc` is still over the budget, the fold goes apart into a temporary of the
accumulator's dtype and the epilogue becomes an elementwise kernel reading it. An item node that
depends on `ridx` is materialised over `size * reduction.size` elements (flat index i: gidx =
i // R, ridx = i % R) and read back at gidx * R + ridx; one that depends on gidx alone over `size`
elements, read at gidx. Index arithmetic (int32/bool computed from the position alone) is cut only
where the device declares int32 and bool, since the nodes above a cut become data (`Capabilities`:
a buffer read is never index arithmetic).

Each part reads its buffers as gids 0.. in the order of their first use (post-order), so that the
periodic parts of a regular chain are the same kernel, compiled once.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from jaxcore.alu import AluExp, AluOp, AluVar, pending
from jaxcore.dtype import INT32_MAX, DType, byte_width, is_float
from jaxcore.kernel import Kernel, Reduction

# A float32 transcendental weighs about the node count of its expansion (jaxcore.expansions:
# sin 351, cos 353, erf 126, erfc 122, log 90, exp 65, atan 51, asin 49); float Idiv the exact
# division (legalize.divide_rn and its guards, measured as costly as sin to compile), float Mod
# the exact remainder (a long-division loop, twice that). float64 helpers are series and
# reductions in float64, longer still (lavapipe: 12x float32's sin to compile).
_HELPER_COST: dict[AluOp, int] = {
    AluOp.Sin: 350,
    AluOp.Cos: 350,
    AluOp.Erf: 125,
    AluOp.Erfc: 125,
    AluOp.Log: 90,
    AluOp.Exp: 65,
    AluOp.Asin: 50,
    AluOp.Atan: 50,
}
_FLOAT_DIV_COST = 350
_FLOAT_MOD_COST = 700
_FLOAT64_FACTOR = 8
_THREEFRY_COST = 60
_FLOAT_COST = 12  # plain float arithmetic, comparisons, casts: the op and its contract guards
_READ_COST = 4  # a buffer read: the load, its bounds clamp and its index
_INDEX_COST = 1  # integer and bool arithmetic
_FREE = frozenset({AluOp.Const, AluOp.Variable, AluOp.Special})
_READS = (AluOp.GlobalIndex, AluOp.GlobalView)
_INDEX_DTYPES = frozenset({DType.int32, DType.bool})

# Bits of `_Facts.uses`: what a node's value depends on.
_GIDX, _RIDX, _ACC, _DATA = 1, 2, 4, 8
_VARIABLE_BITS = {"gidx": _GIDX, "ridx": _RIDX, "acc": _ACC}


def node_cost(node: AluExp) -> int:
    """What one node adds to a kernel's cost (see the module docstring)."""
    op, dtype = node.op, node.dtype
    if op in _FREE:
        return 0
    if op in _READS:
        return _READ_COST
    heavy = _HELPER_COST.get(op)
    if heavy is None and is_float(dtype):
        if op in (AluOp.Idiv, AluOp.Div):
            heavy = _FLOAT_DIV_COST
        elif op == AluOp.Mod:
            heavy = _FLOAT_MOD_COST
    if heavy is not None:
        return heavy * _FLOAT64_FACTOR if dtype == DType.float64 else heavy
    if op == AluOp.Threefry2x32:
        return _THREEFRY_COST
    operand = node.src[0].dtype if node.src else dtype
    return _FLOAT_COST if is_float(dtype) or is_float(operand) else _INDEX_COST


def _distinct(roots: Iterable[AluExp]) -> list[AluExp]:
    """The distinct nodes under `roots`, operands first (a node shared by two roots once)."""
    seen: set[str] = set()
    out: list[AluExp] = []
    for root in roots:
        for node in root.nodes():
            k = node.key()
            if k not in seen:
                seen.add(k)
                out.append(node)
    return out


def _roots(kernel: Kernel) -> list[AluExp]:
    red = kernel.reduction
    return [kernel.exp] if red is None else [kernel.exp, red.epilogue]


def kernel_cost(kernel: Kernel) -> int:
    """The cost of compiling `kernel` as one: `node_cost` summed over its distinct nodes."""
    return sum(node_cost(n) for n in _distinct(_roots(kernel)))


@dataclass(frozen=True)
class Part:
    """One kernel of a split. `reads[g]` is the buffer its input `g` is: an index below the split's
    `nargs` is that input of the original kernel, `nargs + j` the temporary part `j` writes."""

    kernel: Kernel
    reads: tuple[int, ...]
    cost: int  # the cost the cut saw (`kernel_cost` of the part, or a little above it)


@dataclass(frozen=True)
class Split:
    """A kernel as a chain of parts: part `j < len(parts) - 1` writes temporary `j` (of its kernel's
    `bytes`), the last part the kernel's output. Running them in order computes the kernel.
    `frees[j]`: the temporaries no part after part `j` reads (free them once it is issued)."""

    nargs: int
    parts: tuple[Part, ...]
    frees: tuple[tuple[int, ...], ...]

    @property
    def cost(self) -> int:
        """The cost of the costliest part."""
        return max(p.cost for p in self.parts)


@dataclass
class _Facts:
    """What the greedy pass keeps per distinct node (by its index in post-order)."""

    node: AluExp
    src: tuple[int, ...]
    weight: int
    uses: int  # _GIDX | _RIDX | _ACC | _DATA bits
    part: frozenset[int] = frozenset()  # uncut nodes its part computes (itself included)
    buffers: frozenset[int] = frozenset()  # buffers its part reads (see `_Plan.buffer`)
    cost: int = 0


class _Plan:
    def __init__(
        self, kernel: Kernel, budget: int, max_args: int, dtypes: Collection[DType] | None, max_bytes: int
    ):
        self.kernel, self.budget, self.max_args = kernel, budget, max_args
        self.dtypes, self.max_bytes = dtypes, max_bytes
        red = kernel.reduction
        self.rsize = red.size if red is not None else 1
        self.nodes = _distinct(_roots(kernel))
        self.index = {n.key(): i for i, n in enumerate(self.nodes)}
        self.roots = {self.index[r.key()] for r in _roots(kernel)}
        if red is not None:
            self.roots.discard(self.index[kernel.exp.key()])  # the item expression may be cut
        self.facts: list[_Facts] = []
        for node in self.nodes:
            src = tuple(self.index[s.key()] for s in node.src)
            uses = 0
            for s in src:
                uses |= self.facts[s].uses
            if node.op == AluOp.Variable:
                uses |= _VARIABLE_BITS.get(node.arg, 0)
            elif node.op in _READS:
                uses |= _DATA
            self.facts.append(_Facts(node, src, node_cost(node), uses))
        self.cut: set[int] = set()
        self.temp_of: dict[int, int] = {}

    def buffer(self, i: int) -> int:
        """The buffer that node `i` is read from once cut: after the kernel's inputs."""
        return self.kernel.nargs + i

    def elements(self, i: int) -> int:
        return self.kernel.size * (self.rsize if self.facts[i].uses & _RIDX else 1)

    def cuttable(self, i: int) -> bool:
        f = self.facts[i]
        if f.node.op in _FREE or i in self.roots or f.uses & _ACC:
            return False
        dtype = f.node.dtype
        if self.dtypes is not None:
            if dtype not in self.dtypes:
                return False
            # position-only int32/bool is index arithmetic: what reads it back becomes data
            if not f.uses & _DATA and dtype in _INDEX_DTYPES and not _INDEX_DTYPES <= set(self.dtypes):
                return False
        n = self.elements(i)
        return n <= INT32_MAX and n * byte_width(dtype) <= self.max_bytes

    def gather(self, i: int) -> tuple[frozenset[int], frozenset[int], int]:
        """Node `i`'s part (uncut nodes), the buffers it reads, and its cost, as the cuts stand."""
        f = self.facts[i]
        part, buffers = self._join(f.src)
        if f.weight:
            part.add(i)
        if f.node.op in _READS:
            buffers.add(f.node.arg[0])
        return frozenset(part), frozenset(buffers), self._cost(part, buffers)

    def _join(self, indices: Iterable[int]) -> tuple[set[int], set[int]]:
        """The uncut nodes and the buffers that the parts of `indices` take together."""
        part: set[int] = set()
        buffers: set[int] = set()
        for s in indices:
            if s in self.cut:
                buffers.add(self.buffer(s))
            else:
                part |= self.facts[s].part
                buffers |= self.facts[s].buffers
        return part, buffers

    def _cost(self, part: set[int], buffers: set[int]) -> int:
        temps = sum(1 for b in buffers if b >= self.kernel.nargs)
        return sum(self.facts[j].weight for j in part) + temps * _READ_COST

    def walk(self) -> None:
        """The greedy pass: operands first, cut a node's costliest operands while it is over."""
        for i, f in enumerate(self.facts):
            part, buffers, cost = self.gather(i)
            while cost > self.budget or len(buffers) > self.max_args:
                wide = len(buffers) > self.max_args
                options = [
                    s
                    for s in sorted(set(f.src))
                    if s not in self.cut
                    and self.cuttable(s)
                    and (self.facts[s].cost > _READ_COST or len(self.facts[s].buffers) > 1)
                ]
                if not options:
                    break
                key = (lambda s: len(self.facts[s].buffers)) if wide else (lambda s: self.facts[s].cost)
                self.cut.add(max(options, key=key))
                part, buffers, cost = self.gather(i)
            f.part, f.buffers, f.cost = part, buffers, cost

    def read(self, i: int) -> AluExp:
        """Node `i` read back from its temporary, at the position (gidx, ridx) of its reader."""
        node = self.facts[i].node
        index = AluVar.gidx * self.rsize + AluVar.ridx if self.facts[i].uses & _RIDX else AluVar.gidx
        return AluExp.global_index(node.dtype, self.buffer(i), self.elements(i), index)

    def rebuild(self, root: AluExp, own: int | None) -> AluExp:
        """`root` with every cut node below it (but `own`, the node this part materialises) read
        from its temporary."""
        index, cut = self.index, self.cut
        if own is None and index[root.key()] in cut:
            return self.read(index[root.key()])
        memo: dict[str, AluExp] = {}

        def done(n: AluExp) -> bool:
            j = index[n.key()]
            return j in cut and j != own

        for node in pending(root, done):
            k = node.key()
            if k in memo:
                continue
            new_src = []
            for s in node.src:
                got = memo.get(s.key())
                new_src.append(got if got is not None else self.read(index[s.key()]))
            if any(a is not b for a, b in zip(new_src, node.src)):
                node = AluExp(node.op, node.dtype, tuple(new_src), node.arg)
            memo[k] = node
        return memo[root.key()]

    def part(self, exps: list[AluExp], size: int, flat: bool, cost: int) -> Part | None:
        """The kernel of one part: `exps` (an expression, or the item and the epilogue of the last
        part of a reduction) over `size` elements, its buffers renumbered in order of first use;
        `flat`: over gidx * R + ridx (gidx and ridx recovered from the flat index). None when it
        would read more buffers than a kernel may."""
        nargs = self.kernel.nargs
        used: dict[int, int] = {}
        for e in exps:
            for n in e.nodes():
                if n.op in _READS:
                    used.setdefault(n.arg[0], len(used))
        if len(used) > self.max_args:
            return None
        remap = [0] * (nargs + len(self.nodes))
        for old, new in used.items():
            remap[old] = new
        exps = [e.reindex_gids(remap) for e in exps]
        if flat:
            r = self.rsize
            exps = [
                e.substitute({"gidx": AluExp.idiv(AluVar.gidx, r), "ridx": AluExp.mod(AluVar.gidx, r)})
                for e in exps
            ]
        red = self.kernel.reduction
        if len(exps) == 2 and red is not None:
            kernel = Kernel(len(used), size, exps[0], Reduction(red.dtype, red.op, red.size, exps[1]))
        else:
            kernel = Kernel(len(used), size, exps[0])
        temp_of = self.temp_of
        reads = tuple(old if old < nargs else nargs + temp_of[old - nargs] for old in used)
        return Part(kernel, reads, cost)

    def build(self) -> Split | None:
        nargs = self.kernel.nargs
        order = sorted(self.cut)  # post-order: a temporary's operands' temporaries come first
        self.temp_of = {i: j for j, i in enumerate(order)}
        parts: list[Part] = []
        for i in order:
            f = self.facts[i]
            part = self.part([self.rebuild(f.node, i)], self.elements(i), bool(f.uses & _RIDX), f.cost)
            if part is None:
                return None
            parts.append(part)
        exps = [self.rebuild(r, None) for r in _roots(self.kernel)]
        last = self.part(exps, self.kernel.size, False, self.gather_final())
        if last is None:
            return None
        parts.append(last)
        return _chain(nargs, parts)

    def gather_final(self) -> int:
        """The cost of the last part: the roots' parts together (shared nodes once)."""
        return self._cost(*self._join(self.index[r.key()] for r in _roots(self.kernel)))


def split_kernel(
    kernel: Kernel,
    budget: int,
    *,
    max_args: int,
    dtypes: Collection[DType] | None = None,
    max_buffer_bytes: int = 2**31,
) -> Split | None:
    """`kernel` as parts of at most `budget` each (where the DAG allows: a node's own cost, an
    epilogue's nodes that read `acc`, and what may not be cut can leave a part over it), each
    reading at most `max_args` buffers; temporaries only of `dtypes` (None: any) and of at most
    `max_buffer_bytes`. None when the kernel is within the budget, or cannot be cut as asked."""
    if kernel_cost(kernel) <= budget:
        return None
    plan = _Plan(kernel, budget, max_args, dtypes, max_buffer_bytes)
    plan.walk()
    split = plan.build() if plan.cut else None
    if kernel.reduction is not None and (split is None or split.cost > budget):
        apart = _epilogue_apart(kernel, budget, max_args, dtypes, max_buffer_bytes)
        if apart is not None and (split is None or apart.cost < split.cost):
            return apart
    return split


def whole(kernel: Kernel) -> Split:
    """`kernel` as a Split of one part (reading the inputs in order)."""
    return Split(kernel.nargs, (Part(kernel, tuple(range(kernel.nargs)), kernel_cost(kernel)),), ((),))


def _epilogue_apart(
    kernel: Kernel, budget: int, max_args: int, dtypes: Collection[DType] | None, max_buffer_bytes: int
) -> Split | None:
    """A reduction whose epilogue costs too much where it reads `acc` (where no cut can reach): the
    fold into a temporary of the accumulator's dtype, then the epilogue as an elementwise kernel
    that reads it, each split further as needed. The temporary holds exactly `acc`, so the parts
    give the fused kernel's result bit for bit."""
    red = kernel.reduction
    assert red is not None
    if red.epilogue.op == AluOp.Variable:  # the fold alone already: nothing to set apart
        return None
    if (dtypes is not None and red.dtype not in dtypes) or kernel.size * byte_width(
        red.dtype
    ) > max_buffer_bytes:
        return None
    nargs = kernel.nargs
    fold = Kernel(nargs, kernel.size, kernel.exp, Reduction(red.dtype, red.op, red.size))
    used = sorted({n.arg[0] for n in red.epilogue.nodes() if n.op in _READS})
    if len(used) + 1 > max_args:
        return None
    remap = [0] * nargs
    for new, old in enumerate(used):
        remap[old] = new
    acc = AluExp.global_index(red.dtype, len(used), kernel.size, AluVar.gidx)
    finish = Kernel(len(used) + 1, kernel.size, red.epilogue.reindex_gids(remap).substitute({"acc": acc}))
    first, then = (
        split_kernel(k, budget, max_args=max_args, dtypes=dtypes, max_buffer_bytes=max_buffer_bytes)
        or whole(k)
        for k in (fold, finish)
    )
    folded = nargs + len(first.parts) - 1  # the temporary first's last part writes
    inputs = (*used, folded)

    def moved(r: int) -> int:  # a read of `then`'s, in the chain's buffers
        return inputs[r] if r < finish.nargs else folded + 1 + (r - finish.nargs)

    return _chain(
        nargs, [*first.parts, *(Part(p.kernel, tuple(map(moved, p.reads)), p.cost) for p in then.parts)]
    )


def _chain(nargs: int, parts: list[Part]) -> Split:
    """`parts` as a Split, each temporary freed after the last part that reads it."""
    last_use: dict[int, int] = {}
    for i, part in enumerate(parts):
        for b in part.reads:
            if b >= nargs:
                last_use[b - nargs] = i
    frees: list[list[int]] = [[] for _ in parts]
    for t in range(len(parts) - 1):
        frees[last_use.get(t, t)].append(t)
    return Split(nargs, tuple(parts), tuple(tuple(f) for f in frees))
