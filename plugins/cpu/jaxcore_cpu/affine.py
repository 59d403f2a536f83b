"""Quasi-affine index forms: what lowering a row-major view leaves behind, analysed once per plan.

A form is

    c + Σ a·(v // d) % m   with v in {gidx, ridx}, d > 0, m > 0 or absent

(`unravel` gives `(gidx / 4096) % 1024`). The divisors and moduli of one variable, when they form
a divisibility chain 1 | n1 | n2 ..., are the place values of a mixed radix (`place_values`): a
block of lanes aligned to them is a box over the digits, and every term is affine in the digits
(see `blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcore.plugin import AluExp, AluOp, DType


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


def positive_const(e: AluExp) -> int | None:
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
    k = positive_const(e.src[1])
    if k is None:
        return None
    return _divided(a, k, sizes) if e.op == AluOp.Idiv else _modulo(a, k, sizes)


def place_values(forms: list[QuasiAffine], var: str) -> tuple[int, ...]:
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


def on_chain(t: Term, chain: tuple[int, ...]) -> bool:
    """Whether the term's divisor (and divisor times modulus) are place values of its variable."""
    return t.div in chain and (not t.mod or t.div * t.mod in chain)
