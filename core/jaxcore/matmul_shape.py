"""Matmul-shaped reductions, recognised from a Kernel: the facts a tiled GEMM needs.

A kernel is matmul-shaped when it sums, over its reduction, the product of two reads whose indices
are affine in (batch b, row i, column j, reduced k) once the output index is written as
gidx = b*M*N + i*N + j: one read free of j (A[b, i, k]) and one free of i (B[b, k, j]), both
provably in bounds. The divisors M*N and N are taken from the kernel's own index math (a
GlobalView over [.., M, N] lowers to gidx // N and gidx % N), so transposed, strided and batched
views, either operand order and any epilogue are recognised the same way. A read may be wrapped in
a float Cast (a float16 operand widened to float32 before the product).

Devices use it to route such kernels to a blocked/tiled GEMM and render only the epilogue (an
expression in `acc` and `gidx`) themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType, is_float
from jaxcore.kernel import Kernel, Reduction
from jaxcore.tuner import tune_nullopt


@dataclass(frozen=True)
class Operand:
    gid: int
    dtype: DType  # the dtype stored in the buffer
    length: int  # elements the read may touch (its GlobalIndex length)
    base: int
    s_batch: int
    s_outer: int  # A: over i; B: over j
    s_k: int


@dataclass(frozen=True)
class MatmulShape:
    """C[b, i, j] = epilogue(sum_k P(A[b, i, k]) * P(B[b, k, j])) with P the product dtype."""

    batch: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    product: DType  # dtype of each product (operands are cast to it when they differ)
    acc: DType  # dtype of the sum
    epilogue: AluExp  # in Variable `acc` (acc dtype) and Special `gidx`; may read globals
    out: DType

    @property
    def identity(self) -> bool:
        """The epilogue is the sum itself, stored in its own dtype."""
        return self.epilogue.op == AluOp.Variable and self.out == self.acc

    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


Affine = dict[str, int] | None


def affine(e: AluExp, names: tuple[str, ...]) -> Affine:
    """Coefficients of e as base + sum c_v * v over Specials `names` ("" is the base), or None.

    Children first, without recursion: an index may be thousands of nodes deep."""
    forms: dict[str, Affine] = {}
    for n in e.nodes():
        forms[n.key()] = _affine_node(n, names, [forms[s.key()] for s in n.src])
    return forms[e.key()]


def _affine_node(e: AluExp, names: tuple[str, ...], src: list[Affine]) -> Affine:
    if e.dtype not in (DType.int32, DType.uint32):
        return None  # a float constant may be inf or NaN: never an index coefficient
    if e.op == AluOp.Const:
        return {"": int(e.arg)}
    if e.op == AluOp.Special and e.arg[0] in names:
        return {e.arg[0]: 1}
    if e.op in (AluOp.Add, AluOp.Sub):
        a, b = src
        if a is None or b is None:
            return None
        sign = 1 if e.op == AluOp.Add else -1
        return {k: a.get(k, 0) + sign * b.get(k, 0) for k in set(a) | set(b)}
    if e.op == AluOp.Mul:
        for a, y in ((src[0], e.src[1]), (src[1], e.src[0])):
            if y.op == AluOp.Const:
                return None if a is None else {k: v * int(y.arg) for k, v in a.items()}
    return None


def gidx_divisors(exp: AluExp) -> set[int]:
    """Constant integer divisors/moduli applied to expressions of `gidx` (candidate N and M*N);
    a float divisor may be inf or NaN, and splits nothing."""
    out = set()
    for n in exp.nodes():
        if n.op in (AluOp.Idiv, AluOp.Mod) and n.dtype == DType.int32 and n.src[1].op == AluOp.Const:
            if any(x.op == AluOp.Special and x.arg[0] == "gidx" for x in n.src[0].nodes()):
                out.add(int(n.src[1].arg))
    return out


def _operand(e: AluExp, product: DType) -> AluExp | None:
    """The GlobalIndex behind a product operand (itself, or under a float-to-float Cast)."""
    if e.op == AluOp.GlobalIndex and e.dtype == product:
        return e
    if e.op == AluOp.Cast and e.dtype == product and e.src[0].op == AluOp.GlobalIndex:
        if is_float(e.src[0].dtype):
            return e.src[0]
    return None


def detect(kernel: Kernel) -> MatmulShape | None:
    """The matmul facts of `kernel`, or None when it is not a sum of products of affine reads."""
    red = kernel.reduction
    if red is None or red.op != AluOp.Add or not is_float(red.dtype) or red.size < 1 or kernel.size < 1:
        return None
    tuned = tune_nullopt(kernel)
    exp = tuned.exp
    if exp.op == AluOp.Cast and exp.dtype == red.dtype and is_float(exp.src[0].dtype):
        exp = exp.src[0]
    if exp.op != AluOp.Mul or not is_float(exp.dtype):
        return None
    product = exp.dtype
    x, y = (_operand(s, product) for s in exp.src)
    if x is None or y is None:
        return None
    size, kk = kernel.size, red.size
    divs = sorted(d for d in gidx_divisors(exp) if 1 < d and size % d == 0)
    cands: list[tuple[int, int]] = []  # (N, M*N)
    for n in divs:
        cands.append((n, size))
        cands += [(n, mn) for mn in divs if mn > n and mn % n == 0 and size % mn == 0]
    cands.append((size, size))
    cands.append((1, size))  # a matrix-vector product: N = 1
    for n, mn in cands:
        found = _try(x, y, size // mn, mn // n, n, kk)
        if found is not None:
            a, b = found
            assert tuned.epilogue is not None  # the kernel has a reduction, so the tuner made one
            return MatmulShape(
                size // mn, mn // n, n, kk, a, b, product, red.dtype, tuned.epilogue, kernel.dtype
            )
    return None


def matmul_kernel(
    m: int,
    n: int,
    k: int,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    batch: int = 1,
    swap: bool = False,
    epilogue: AluExp | None = None,
    dtype: DType = DType.float32,
    nargs: int = 2,
    cast_to: DType | None = None,
    acc: DType | None = None,
) -> Kernel:
    """out[b, i, j] = epilogue(sum_k A[b, i, k] * B[b, k, j]) as a frontend writes it: the kernel
    `detect` recognises, for tests and benchmarks of a device's matmul path.

    A is input 0 and B input 1, both `dtype`; `transpose_a` / `transpose_b` store them as
    [b, k, i] / [b, j, k]; `swap` multiplies B * A; `cast_to` widens both reads before the
    product; `acc` is the sum's dtype (default: the product's); `nargs` leaves room for inputs the
    epilogue reads.
    """
    g, r = AluVar.gidx, AluVar.ridx
    ib = AluExp.idiv(g, AluExp.i32(m * n))
    i = AluExp.mod(AluExp.idiv(g, AluExp.i32(n)), AluExp.i32(m))
    j = AluExp.mod(g, AluExp.i32(n))
    a_idx = ib * AluExp.i32(m * k) + (r * AluExp.i32(m) + i if transpose_a else i * AluExp.i32(k) + r)
    b_idx = ib * AluExp.i32(k * n) + (j * AluExp.i32(k) + r if transpose_b else r * AluExp.i32(n) + j)
    x = AluExp.global_index(dtype, 0, batch * m * k, a_idx)
    y = AluExp.global_index(dtype, 1, batch * k * n, b_idx)
    if cast_to is not None:
        x, y = AluExp.cast(cast_to, x), AluExp.cast(cast_to, y)
    item = y * x if swap else x * y
    return Kernel(nargs, batch * m * n, item, Reduction(acc or item.dtype, AluOp.Add, k, epilogue))


def _try(x: AluExp, y: AluExp, nb: int, m: int, n: int, kk: int) -> tuple[Operand, Operand] | None:
    sp = {v: AluExp.special(DType.int32, v, s) for v, s in (("b", nb), ("i", m), ("j", n), ("k", kk))}
    gidx = sp["b"] * AluExp.i32(m * n) + sp["i"] * AluExp.i32(n) + sp["j"]
    names = ("b", "i", "j", "k")

    def sub(e: AluExp) -> AluExp:
        mapping = {"gidx": gidx, "ridx": sp["k"]}
        return e.rewrite(lambda z: mapping.get(z.arg[0]) if z.op == AluOp.Special else None).simplify()

    fx, fy = (affine(sub(e.src[0]), names) for e in (x, y))
    if fx is None or fy is None:
        return None
    (ga, fa), (gb, fb) = (x, fx), (y, fy)
    if fa.get("j", 0) != 0 or fb.get("i", 0) != 0:
        (ga, fa), (gb, fb) = (y, fy), (x, fx)
    if fa.get("j", 0) != 0 or fb.get("i", 0) != 0:
        return None
    sizes = {"b": nb, "i": m, "j": n, "k": kk}
    for g, f in ((ga, fa), (gb, fb)):
        lo = f.get("", 0) + sum(min(0, c * (sizes[v] - 1)) for v, c in f.items() if v)
        hi = f.get("", 0) + sum(max(0, c * (sizes[v] - 1)) for v, c in f.items() if v)
        if lo < 0 or hi >= g.arg[1] or abs(hi) >= 2**31:
            return None
    a = Operand(ga.arg[0], ga.dtype, ga.arg[1], fa.get("", 0), fa.get("b", 0), fa.get("i", 0), fa.get("k", 0))
    b = Operand(gb.arg[0], gb.dtype, gb.arg[1], fb.get("", 0), fb.get("b", 0), fb.get("j", 0), fb.get("k", 0))
    return a, b
