"""Our own math, emitted as LLVM IR helpers, so a kernel module never imports libm or compiler-rt.

Every transcendental is computed in double precision: the float64 versions use polynomial degrees
for ~1 ulp, and the float32 versions run the same algorithms with lower degrees (still far below
float32's rounding error) and round once at the end. Helpers are `internal alwaysinline`, so after
inlining each kernel is one function and the object needs no linker.

Algorithms (standard ones, written from their math):
- exp: k = nearest(x/ln2), r = x - k*ln2 (two-part ln2), Taylor of e^r (float32: a degree-6 minimax
  polynomial, EXP_POLY_F), scale by 2^k in two steps.
- log: x = 2^e * m, m in [sqrt(1/2), sqrt(2)), s = f/(2+f), log(1+f) = f - s*(f - R(s^2)).
- sin/cos: k = nearest(x*2/pi), r = x - k*pi/2 (three-part pi/2), Taylor on |r| <= pi/4, quadrant.
  That is exact only while k < 2^20, so |x| > 2^20 branches to an exact Payne-Hanek reduction
  (`_trig_big`, out of line; see there).
- atan: fold to [0, 1] by 1/x, then to [0, tan(pi/12)] by the pi/6 addition formula, odd Taylor.
- asin(x) = atan(x / sqrt((1-x)(1+x))).
- erf/erfc: Taylor of erf on |x| <= 1; for |x| > 1, erfc = exp(-x^2) * G(x) with G Chebyshev-
  interpolated on 8 intervals (tables from tools/gen_erfc.py), x^2 split exactly (Dekker).
- fmod: exact binary long division on |a|, |b| (as C fmod), sign of a.
- float16 <-> float32/64 by bit manipulation with round-to-nearest-even.
"""

from __future__ import annotations

import math
from fractions import Fraction

from jaxcore.pi_bits import pi_fixed, two_over_pi_chunks
from jaxcore_wasm.irtext import F32, F64, I1, I32, I64, Fn, Module, fconst, iconst

# Constants (hex floats from 60-digit mpmath; see module docstring).
LN2_HI = float.fromhex("0x1.62e42fefa3800p-1")  # 42 significant bits: k*LN2_HI is exact for |k| < 2^11
LN2_LO = float.fromhex("0x1.ef35793c76730p-45")
INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
PIO2_1 = float.fromhex("0x1.921fb54400000p+0")  # 33 bits each: k*PIO2_1, k*PIO2_2 exact for |k| < 2^20
PIO2_2 = float.fromhex("0x1.0b4611a600000p-34")
PIO2_3 = float.fromhex("0x1.3198a2e037073p-69")
TWO_OVER_PI = float.fromhex("0x1.45f306dc9c883p-1")
PI_OVER_2 = float.fromhex("0x1.921fb54442d18p+0")
PI_OVER_6 = float.fromhex("0x1.0c152382d7366p-1")
SQRT3 = float.fromhex("0x1.bb67ae8584caap+0")
TAN_PI_12 = float.fromhex("0x1.126145e9ecd56p-2")
TWO_OVER_SQRTPI = float.fromhex("0x1.20dd750429b6dp+0")
SQRT2 = float.fromhex("0x1.6a09e667f3bcdp+0")

# G(x) = exp(x^2) erfc(x) as Chebyshev series on [lo, hi] (tools/gen_erfc.py, 40-digit mpmath).
# fmt: off
ERFC_TABLE = (
    (1.0, 1.5, (
        0.7423855886841432, -0.052799551940465685, 0.00338076236159189, -0.00019896338415156294,
        1.0911979120987141e-05, -5.632372066195936e-07, 2.7564656102315984e-08,
        -1.2864435796900215e-09, 5.75189434369204e-11, -2.473180238194912e-12,
        1.0258794609509988e-13, -4.116181633727305e-15, 1.6012087659273513e-16,
    )),
    (1.5, 2.25, (
        0.5457321820025255, -0.04499865071157047, 0.003453106367087206, -0.00024930874647525076,
        1.7070132203849834e-05, -1.1151797928725097e-06, 6.984599996613682e-08,
        -4.210276590909072e-09, 2.4504392348400456e-10, -1.3807395478381489e-11,
        7.549398720615536e-13, -4.013355681121005e-14, 2.0780195475076873e-15,
        -1.0495433172392778e-16,
    )),
    (2.25, 3.25, (
        0.3923457466451336, -0.03218473126936677, 0.002524537364194397, -0.00019024740615165923,
        1.3826322657029016e-05, -9.720648158989916e-07, 6.628447610584506e-08,
        -4.393525544704523e-09, 2.8361005129644874e-10, -1.7858795503516616e-11,
        1.0985816612629192e-12, -6.610246428323448e-14, 3.8949638479817536e-15,
        -2.2497502766920654e-16, 1.2750045452849085e-17,
    )),
    (3.25, 4.75, (
        0.278288028357383, -0.024831679474506724, 0.0021596864428623133, -0.0001833953982959182,
        1.5227950780163481e-05, -1.2379771406643645e-06, 9.865055505847713e-08,
        -7.713394098341712e-09, 5.923088783923597e-10, -4.470607362206091e-11,
        3.319142751506498e-12, -2.4256226666294e-13, 1.7459436772512602e-14,
        -1.2385020811894105e-15, 8.662700728727526e-17, -5.977414448211444e-18,
    )),
    (4.75, 7.0, (
        0.1927212628493127, -0.018096696908297287, 0.0016767814043289928, -0.0001533827729333801,
        1.3857935410399126e-05, -1.237161241137943e-06, 1.0917689984196629e-07,
        -9.527325236387023e-09, 8.224235923782489e-10, -7.024954591524382e-11, 5.93943783725838e-12,
        -4.971914976534648e-13, 4.12186872345523e-14, -3.3850557841013263e-15,
        2.754494342594787e-16, -2.221365602849994e-17,
    )),
    (7.0, 11.0, (
        0.12771055052154745, -0.014185821066838886, 0.0015660809898472542, -0.00017185184363019654,
        1.8746522821986154e-05, -2.0330981661802194e-06, 2.1923502713505047e-07,
        -2.3508061086057992e-08, 2.506794733548995e-09, -2.658607655033188e-10,
        2.804531586242132e-11, -2.9428821138973743e-12, 3.0720373209488687e-13,
        -3.1904703945369477e-14, 3.296780283956198e-15, -3.3897195409650706e-16,
        3.4682185736755796e-17, -3.531405670694425e-18,
    )),
    (11.0, 17.0, (
        0.08228087758509203, -0.00887153542521995, 0.0009540349950165676, -0.00010233033147510075,
        1.0947823466082492e-05, -1.1682697653542775e-06, 1.243537557495082e-07,
        -1.32033282659212e-08, 1.3983789251557002e-09, -1.4773769110986982e-10,
        1.5570073214553094e-11, -1.6369322507547664e-12, 1.7167977161951052e-13,
        -1.796236286695076e-14, 1.874869948119332e-15, -1.952313172574873e-16,
        2.0281761557602792e-17, -2.1020681829991223e-18,
    )),
    (17.0, 28.0, (
        0.05165989577084305, -0.006397528694735986, 0.0007914419339591335, -9.780823299702182e-05,
        1.2074877744530003e-05, -1.4891637906475537e-06, 1.8346617288986131e-07,
        -2.2580042066094045e-08, 2.7761958162968187e-09, -3.4098355226349185e-10,
        4.183850196674662e-11, -5.128372294518556e-12, 6.279788867087054e-13,
        -7.681993989545526e-14, 9.387882441610304e-15, -1.1461129189573222e-15,
        1.3978307074410756e-16, -1.7031404278292583e-17, 2.0730813831544065e-18,
    )),
)
# fmt: on

_ATTRS = "alwaysinline nounwind"


class _W:
    """Convenience wrapper: arithmetic in one float type (double unless told) with float literals."""

    def __init__(
        self,
        mod: Module,
        name: str,
        ret: str,
        params: list[tuple[str, str]],
        ty: str = F64,
        attrs: str = _ATTRS,
        linkage: str = "internal",
    ) -> None:
        self.mod, self.ty = mod, ty
        self.f = Fn(name, ret, params, attrs, linkage)

    def c(self, v: float) -> str:
        return fconst(v, self.ty)

    def add(self, a: str, b: str) -> str:
        return self.f.fadd(self.ty, a, b)

    def sub(self, a: str, b: str) -> str:
        return self.f.fsub(self.ty, a, b)

    def mul(self, a: str, b: str) -> str:
        return self.f.fmul(self.ty, a, b)

    def div(self, a: str, b: str) -> str:
        return self.f.fdiv(self.ty, a, b)

    def call1(self, intr: str, x: str) -> str:
        return self.f.call(self.ty, self.mod.intrinsic(intr), [(self.ty, x)])

    def horner(self, x: str, coeffs: list[float]) -> str:
        """sum coeffs[i] * x**i."""
        acc = self.c(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.add(self.mul(acc, x), self.c(c))
        return acc

    def clenshaw(self, t: str, coeffs: tuple[float, ...]) -> str:
        """sum' c_k T_k(t) (the first coefficient halved, as Chebyshev interpolation gives it)."""
        t2 = self.add(t, t)
        b1, b2 = self.c(0.0), self.c(0.0)
        for ck in reversed(coeffs[1:]):
            b1, b2 = self.add(self.sub(self.mul(t2, b1), b2), self.c(ck)), b1
        return self.add(self.sub(self.mul(t, b1), b2), self.c(coeffs[0] / 2))

    def sel(self, cond: str, a: str, b: str) -> str:
        return self.f.select(cond, self.ty, a, b)

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.f.fcmp(pred, self.ty, a, b)

    def ret(self, v: str) -> None:
        self.f.raw(f"ret {self.f.ret} {v}")

    def done(self) -> str:
        self.mod.helpers[self.f.name] = self.f.render()
        return self.f.name

    def pow2(self, k: str) -> str:
        """2**k for an i64 k in the normal exponent range, from the bits."""
        e = self.f.bin("add", I64, k, "1023")
        bits = self.f.bin("shl", I64, e, "52")
        return self.f.cast("bitcast", I64, bits, F64)


# ---- float64 cores --------------------------------------------------------------------------


def _exp_core(mod: Module, hi: bool) -> str:
    name = f"jc_exp_core_{'hi' if hi else 'lo'}"
    if name in mod.helpers:
        return name
    w = _W(mod, name, F64, [(F64, "%x")])
    f = w.f
    k = w.call1("llvm.roundeven.f64", w.mul("%x", w.c(INV_LN2)))
    # no clamp: out-of-range x (where k would be garbage) is replaced by the final selects
    r = w.sub(w.sub("%x", w.mul(k, w.c(LN2_HI))), w.mul(k, w.c(LN2_LO)))
    deg = 13 if hi else 8
    p = w.horner(r, [1.0 / math.factorial(i) for i in range(deg + 1)])
    ki = f.call(I32, mod.intrinsic("llvm.fptosi.sat.i32.f64"), [(F64, k)])
    k1 = f.bin("ashr", I32, ki, "1")
    k2 = f.bin("sub", I32, ki, k1)
    s1 = w.pow2(f.cast("sext", I32, k1, I64))
    s2 = w.pow2(f.cast("sext", I32, k2, I64))
    y = w.mul(w.mul(p, s1), s2)
    y = w.sel(w.cmp("ogt", "%x", w.c(709.8)), w.c(math.inf), y)
    y = w.sel(w.cmp("olt", "%x", w.c(-745.2)), w.c(0.0), y)
    w.ret(y)
    return w.done()


def _log_core(mod: Module, hi: bool) -> str:
    name = f"jc_log_core_{'hi' if hi else 'lo'}"
    if name in mod.helpers:
        return name
    w = _W(mod, name, F64, [(F64, "%x")])
    f = w.f
    sub = w.cmp("olt", "%x", w.c(2.0**-1022))
    xs = w.sel(sub, w.mul("%x", w.c(2.0**54)), "%x")
    eadj = f.select(sub, I64, "-54", "0")
    bits = f.cast("bitcast", F64, xs, I64)
    e = f.bin("sub", I64, f.bin("and", I64, f.bin("lshr", I64, bits, "52"), "2047"), "1023")
    mbits = f.bin("or", I64, f.bin("and", I64, bits, "4503599627370495"), "4607182418800017408")
    m = f.cast("bitcast", I64, mbits, F64)
    big = w.cmp("ogt", m, w.c(SQRT2))
    m = w.sel(big, w.mul(m, w.c(0.5)), m)
    e = f.bin("add", I64, f.bin("add", I64, e, eadj), f.cast("zext", I1, big, I64))
    ef = f.cast("sitofp", I64, e, F64)
    fm = w.sub(m, w.c(1.0))
    s = w.div(fm, w.add(w.c(2.0), fm))
    z = w.mul(s, s)
    n = 11 if hi else 6
    rpoly = w.horner(z, [0.0] + [2.0 / (2 * i + 1) for i in range(1, n + 1)])
    l1p = w.sub(fm, w.mul(s, w.sub(fm, rpoly)))
    y = w.add(w.mul(ef, w.c(LN2_HI)), w.add(l1p, w.mul(ef, w.c(LN2_LO))))
    y = w.sel(w.cmp("oeq", "%x", w.c(math.inf)), w.c(math.inf), y)
    y = w.sel(w.cmp("oeq", "%x", w.c(0.0)), w.c(-math.inf), y)
    y = w.sel(w.cmp("ult", "%x", w.c(0.0)), w.c(math.nan), y)  # negative or NaN
    w.ret(y)
    return w.done()


def _sincos_poly(w: _W, r: str, rl: str | None, q: str, hi: bool) -> str:
    """sin of (quadrant q) * pi/2 + r (+ rl, a tail below r's ulp), |r| <= pi/4: Taylor of sin or cos."""
    f = w.f
    z = w.mul(r, r)
    ns, nc = (8, 9) if hi else (5, 6)
    sp = w.horner(z, [(-1.0) ** i / math.factorial(2 * i + 1) for i in range(ns)])
    sinr = w.mul(r, sp)
    cosr = w.horner(z, [(-1.0) ** i / math.factorial(2 * i) for i in range(nc)])
    if rl is not None:  # sin(r + rl) = sin r + rl cos r, cos(r + rl) = cos r - rl sin r
        sinr, cosr = w.add(sinr, w.mul(rl, cosr)), w.sub(cosr, w.mul(rl, sinr))
    odd = f.icmp("ne", I32, f.bin("and", I32, q, "1"), "0")
    v = w.sel(odd, cosr, sinr)
    neg = f.icmp("ne", I32, f.bin("and", I32, q, "2"), "0")
    return w.sel(neg, w.sub(w.c(-0.0), v), v)


def _sincos_core(mod: Module, hi: bool, cos: bool) -> str:
    name = f"jc_{'cos' if cos else 'sin'}_core_{'hi' if hi else 'lo'}"
    if name in mod.helpers:
        return name
    big_fn = _trig_big(mod, cos)
    w = _W(mod, name, F64, [(F64, "%x")])
    f = w.f
    # |x| > 2^20 (and +-inf) take the exact reduction; NaN compares false and stays here
    l_big, l_fast, l_out = f.label("big"), f.label("fast"), f.label("out")
    f.cbr(w.cmp("ogt", w.call1("llvm.fabs.f64", "%x"), w.c(TRIG_BIG)), l_big, l_fast)
    f.start(l_big)
    v_big = f.call(F64, big_fn, [(F64, "%x")])
    f.br(l_out)
    f.start(l_fast)
    k = w.call1("llvm.roundeven.f64", w.mul("%x", w.c(TWO_OVER_PI)))
    r = w.sub(w.sub(w.sub("%x", w.mul(k, w.c(PIO2_1))), w.mul(k, w.c(PIO2_2))), w.mul(k, w.c(PIO2_3)))
    # quadrant = k mod 4, taken exactly in floating point
    kq = w.sub(k, w.mul(w.call1("llvm.floor.f64", w.mul(k, w.c(0.25))), w.c(4.0)))
    q = f.call(I32, mod.intrinsic("llvm.fptosi.sat.i32.f64"), [(F64, kq)])
    if cos:
        q = f.bin("add", I32, q, "1")
    v = _sincos_poly(w, r, None, q, hi)
    if not cos:  # sin is odd: sin(-0) = -0, which x - k*pi/2 (k = -0) turns into +0
        v = w.sel(w.cmp("oeq", "%x", w.c(0.0)), "%x", v)
    b_fast = f.block
    f.br(l_out)
    f.start(l_out)
    w.ret(f.phi(F64, [(v_big, l_big), (v, b_fast)]))
    return w.done()


# ---- sin/cos of |x| > 2^20: Payne-Hanek reduction -------------------------------------------------
#
# Why: Cody-Waite (x - k*pi/2 with a three-part pi/2) is exact only while k*PIO2_1 is, i.e. k < 2^20;
# beyond that the reduced argument, and so the result, is wrong. Here x*2/pi mod 4 is formed exactly
# from a table of 2/pi in 24-bit chunks d_i (2/pi = sum d_i 2^(-24(i+1))), in double arithmetic only
# (no i128: wasm has no __multi3):
# - x = m 2^e with m < 2^53 an integer, m = a 2^26 + b (a < 2^27, b < 2^26), so every product
#   a*d_i, b*d_i is exact in a double (< 2^51);
# - chunks whose products are multiples of 4 for this exponent are skipped (the start chunk j comes
#   from e), and nine chunks d_j.. d_j+8 follow: their tail is < 2^-137, far below the 2^-62 of the
#   closest a double comes to a multiple of pi/2 (x = 6381956970095103 2^797), so the fraction keeps
#   > 53 good bits even there;
# - each of the 17 products t splits exactly into an integer n (kept mod 4), a part on a 2^-50 grid,
#   one on a 2^-98 grid and a tail; the three grids' sums are exact or (the tail) far below 2^-140,
#   and the fraction f in [-1/2, 1/2] comes out as a double-double, times pi/2 in double-double.
# The chunks sit in a switch on j (a kernel has no data segment), which is why this is a function of
# its own (noinline, no-jump-tables: no lookup table either; optnone: LLVM's SLP vectoriser would
# spend ~50 ms per kernel on it, and Cranelift optimises it anyway). A plain call under a branch
# would stop LLVM vectorising the kernel loop (2.5x slower sin), so the call names masked vector
# variants (vector-function-abi-variant): the vectoriser calls one per vector, toolchain.compile_ir
# inlines it afterwards, and the common path pays a test of the lane mask (and the loop now holds a
# call, which costs Cranelift's register allocation some 10-20% of a sin-only loop).


TRIG_BIG = 2.0**20
# two zero chunks in front: for |x| just above 2^20 the start chunk j is -2 or -1
TWO_OVER_PI_CHUNKS = (0, 0, *two_over_pi_chunks(49, 24))
_NCHUNK = 9
# pi/2 as hi + lo, hi split in two 26-bit halves (Dekker's exact product); exact from the same integers
_PI_FIX = pi_fixed(200)  # pi 2^200
PIO2_HI = PI_OVER_2
PIO2_LO = float(Fraction(_PI_FIX, 1 << 201) - Fraction(PIO2_HI))
PIO2_H1 = PIO2_HI * 134217729.0 - (PIO2_HI * 134217729.0 - PIO2_HI)  # Veltkamp: 26 bits
PIO2_H2 = PIO2_HI - PIO2_H1


def _vector_variant(mod: Module, scalar: str, n: int) -> str:
    """`<n x double> scalar_v<n>(<n x double> x, <n x i1> mask)`: `scalar` on the set lanes only.

    Not internal, so that it outlives the optimiser until the vectoriser calls it; always inlined by
    toolchain.compile_ir's second pass, after which the vector loop tests the mask and calls `scalar`
    per set lane (an unused copy stays in the object: a few hundred bytes).
    """
    vt = f"<{n} x double>"
    name = f"{scalar}_v{n}"
    f = Fn(name, vt, [(vt, "%x"), (f"<{n} x i1>", "%m")], "alwaysinline nounwind", "hidden")
    bits = f.cast("bitcast", f"<{n} x i1>", "%m", f"i{n}")
    l_any, l_end = f.label("any"), f.label("end")
    f.cbr(f.icmp("eq", f"i{n}", bits, "0"), l_end, l_any)
    f.start(l_any)
    acc = "%x"
    for j in range(n):
        l_do, l_next = f.label("do"), f.label("next")
        pre = f.block
        f.cbr(f.emit(f"extractelement <{n} x i1> %m, i32 {j}"), l_do, l_next)
        f.start(l_do)
        xj = f.emit(f"extractelement {vt} %x, i32 {j}")
        yj = f.emit(f"call double @{scalar}(double {xj})")
        upd = f.emit(f"insertelement {vt} {acc}, double {yj}, i32 {j}")
        f.br(l_next)
        f.start(l_next)
        acc = f.phi(vt, [(acc, pre), (upd, l_do)])
    last = f.block
    f.br(l_end)
    f.start(l_end)
    f.raw(f"ret {vt} {f.phi(vt, [('%x', 'entry'), (acc, last)])}")
    mod.helpers[name] = f.render()
    return name


def _trig_big(mod: Module, cos: bool) -> str:
    """sin or cos of a double with |x| > 2^20 (or +-inf: NaN), reduced exactly; see above."""
    name = f"jc_{'cos' if cos else 'sin'}_big"
    if name in mod.helpers:
        return name
    widths = (2, 4, 8)
    variants = ",".join(f"_ZGV_LLVM_M{n}v_{name}({name}_v{n})" for n in widths)
    attrs = "noinline optnone nounwind willreturn memory(none) "
    attrs += f'"no-jump-tables"="true" "vector-function-abi-variant"="{variants}"'
    w = _W(mod, name, F64, [(F64, "%x")], attrs=attrs)
    f = w.f
    bits = f.cast("bitcast", F64, w.call1("llvm.fabs.f64", "%x"), I64)
    ex = f.bin("lshr", I64, bits, "52")
    ex = f.select(f.icmp("ugt", I64, ex, "2046"), I64, "2046", ex)  # inf: any chunks, NaN below
    # |x| = m 2^(E-1075), m in [2^52, 2^53) an integer; j+2 = (E-1005)/24 - 1 (the padded index)
    mbits = f.bin("or", I64, f.bin("and", I64, bits, str((1 << 52) - 1)), str(1075 << 52))
    m = f.cast("bitcast", I64, mbits, F64)
    jj = f.bin("sub", I64, f.bin("udiv", I64, f.bin("sub", I64, ex, "1005"), "24"), "1")
    sh = f.bin("sub", I64, f.bin("sub", I64, ex, "1051"), f.bin("mul", I64, jj, "24"))  # in [-22, 1]
    # chunks j.. j+8, chunk k scaled by 2^(-24k), from a switch (no data segment)
    l_tab = [f.label("c") for _ in range(len(TWO_OVER_PI_CHUNKS) - _NCHUNK + 1)]
    l_join = f.label("chunks")
    cases = " ".join(f"i64 {i}, label %{lab}" for i, lab in enumerate(l_tab) if i)
    f.raw(f"switch i64 {jj}, label %{l_tab[0]} [ {cases} ]")
    for lab in l_tab:
        f.start(lab)
        f.br(l_join)
    f.start(l_join)
    chunks = [
        f.phi(F64, [(w.c(TWO_OVER_PI_CHUNKS[i + k] * 2.0 ** (-24 * k)), lab) for i, lab in enumerate(l_tab)])
        for k in range(_NCHUNK)
    ]
    a = w.call1("llvm.floor.f64", w.mul(m, w.c(2.0**-26)))
    b = w.sub(m, w.mul(a, w.c(2.0**26)))
    a2 = w.mul(a, w.pow2(f.bin("add", I64, sh, "26")))
    b2 = w.mul(b, w.pow2(sh))
    terms = [w.mul(b2, chunks[0])]  # a * chunk 0 is a multiple of 4
    for c in chunks[1:]:
        terms += [w.mul(a2, c), w.mul(b2, c)]
    nq, hs, ms, ls = w.c(0.0), w.c(0.0), w.c(0.0), w.c(0.0)
    for t in terms:
        n = w.call1("llvm.roundeven.f64", t)
        fr = w.sub(t, n)
        nq = w.add(nq, w.sub(n, w.mul(w.call1("llvm.floor.f64", w.mul(n, w.c(0.25))), w.c(4.0))))
        h = w.mul(w.call1("llvm.roundeven.f64", w.mul(fr, w.c(2.0**50))), w.c(2.0**-50))
        g = w.sub(fr, h)
        mm = w.mul(w.call1("llvm.roundeven.f64", w.mul(g, w.c(2.0**98))), w.c(2.0**-98))
        hs, ms, ls = w.add(hs, h), w.add(ms, mm), w.add(ls, w.sub(g, mm))
    n = w.call1("llvm.roundeven.f64", hs)
    hs, nq = w.sub(hs, n), w.add(nq, n)
    # fraction as a double-double (two-sum), then times pi/2 (Dekker's product)
    fh = w.add(hs, ms)
    bb = w.sub(fh, hs)
    fl = w.add(w.add(w.sub(hs, w.sub(fh, bb)), w.sub(ms, bb)), ls)
    p = w.mul(fh, w.c(PIO2_HI))
    cs = w.mul(fh, w.c(134217729.0))
    f1 = w.sub(cs, w.sub(cs, fh))
    f2 = w.sub(fh, f1)
    err = w.add(w.sub(w.mul(f1, w.c(PIO2_H1)), p), w.add(w.mul(f1, w.c(PIO2_H2)), w.mul(f2, w.c(PIO2_H1))))
    err = w.add(err, w.mul(f2, w.c(PIO2_H2)))
    rl = w.add(err, w.add(w.mul(fh, w.c(PIO2_LO)), w.mul(fl, w.c(PIO2_HI))))
    rh = w.add(p, rl)
    rl = w.sub(rl, w.sub(rh, p))
    qd = w.sub(nq, w.mul(w.call1("llvm.floor.f64", w.mul(nq, w.c(0.25))), w.c(4.0)))
    q = f.call(I32, mod.intrinsic("llvm.fptosi.sat.i32.f64"), [(F64, qd)])
    # x < 0: x 2/pi = -(q + f)
    neg = w.cmp("olt", "%x", w.c(0.0))
    q = f.select(neg, I32, f.bin("and", I32, f.bin("sub", I32, "0", q), "3"), q)
    rh = w.sel(neg, w.sub(w.c(-0.0), rh), rh)
    rl = w.sel(neg, w.sub(w.c(-0.0), rl), rl)
    if cos:
        q = f.bin("add", I32, q, "1")
    v = _sincos_poly(w, rh, rl, q, True)
    w.ret(w.add(v, w.sub("%x", "%x")))  # +-inf: NaN
    w.done()
    for width in widths:
        _vector_variant(mod, name, width)
    return name


def _atan_core(mod: Module, hi: bool) -> str:
    name = f"jc_atan_core_{'hi' if hi else 'lo'}"
    if name in mod.helpers:
        return name
    w = _W(mod, name, F64, [(F64, "%x")])
    a = w.call1("llvm.fabs.f64", "%x")
    inv = w.cmp("ogt", a, w.c(1.0))
    t = w.sel(inv, w.div(w.c(1.0), a), a)
    big = w.cmp("ogt", t, w.c(TAN_PI_12))
    u = w.sel(big, w.div(w.sub(w.mul(t, w.c(SQRT3)), w.c(1.0)), w.add(t, w.c(SQRT3))), t)
    z = w.mul(u, u)
    n = 15 if hi else 8
    p = w.mul(u, w.horner(z, [(-1.0) ** i / (2 * i + 1) for i in range(n)]))
    res = w.add(w.sel(big, w.c(PI_OVER_6), w.c(0.0)), p)
    res = w.sel(inv, w.sub(w.c(PI_OVER_2), res), res)
    res = w.f.call(F64, mod.intrinsic("llvm.copysign.f64"), [(F64, res), (F64, "%x")])
    w.ret(res)
    return w.done()


def _asin_core(mod: Module, hi: bool) -> str:
    name = f"jc_asin_core_{'hi' if hi else 'lo'}"
    if name in mod.helpers:
        return name
    at = _atan_core(mod, hi)
    w = _W(mod, name, F64, [(F64, "%x")])
    d = w.call1("llvm.sqrt.f64", w.mul(w.sub(w.c(1.0), "%x"), w.add(w.c(1.0), "%x")))
    q = w.div("%x", d)
    w.ret(w.f.call(F64, at, [(F64, q)]))
    return w.done()


def _erf_core(mod: Module, hi: bool, complement: bool) -> str:
    """erf or erfc of a double (branches per interval)."""
    name = f"jc_{'erfc' if complement else 'erf'}_core_{'hi' if hi else 'lo'}"
    if name in mod.helpers:
        return name
    ex = _exp_core(mod, True)
    w = _W(mod, name, F64, [(F64, "%x")])
    f = w.f
    a = w.call1("llvm.fabs.f64", "%x")
    small = w.cmp("ole", a, w.c(1.0))
    l_small, l_tail, l_out = f.label("small"), f.label("tail"), f.label("out")
    f.cbr(small, l_small, l_tail)
    # |x| <= 1: Taylor series of erf, x * sum (-1)^n x^2n / (n! (2n+1)) * 2/sqrt(pi)
    f.start(l_small)
    z = w.mul("%x", "%x")
    n = 19 if hi else 11
    se = w.mul(
        w.mul("%x", w.c(TWO_OVER_SQRTPI)),
        w.horner(z, [(-1.0) ** i / (math.factorial(i) * (2 * i + 1)) for i in range(n)]),
    )
    small_val = w.sub(w.c(1.0), se) if complement else se
    f.br(l_out)
    b_small = f.block
    # |x| > 1: erfc(|x|) = exp(-x^2) * G(|x|); the interval is found by a chain of branches.
    f.start(l_tail)
    ac = f.call(F64, mod.intrinsic("llvm.minimum.f64"), [(F64, a), (F64, w.c(28.0))])
    # exact square: a*a = sq + err (Dekker split), exp(-sq - err) = exp(-sq) * (1 - err)
    sq = w.mul(ac, ac)
    cs = w.mul(ac, w.c(134217729.0))
    ahi = w.sub(cs, w.sub(cs, ac))
    alo = w.sub(ac, ahi)
    err = w.add(w.add(w.sub(w.mul(ahi, ahi), sq), w.mul(w.c(2.0), w.mul(ahi, alo))), w.mul(alo, alo))
    e2 = w.mul(f.call(F64, ex, [(F64, w.sub(w.c(-0.0), sq))]), w.sub(w.c(1.0), err))
    incoming = []
    for i, (lo, hi_, coeffs) in enumerate(ERFC_TABLE):
        last = i == len(ERFC_TABLE) - 1
        l_here = f.label("iv")
        l_next = f.label("nx") if not last else None
        if not last:
            assert l_next is not None
            f.cbr(w.cmp("ole", ac, w.c(hi_)), l_here, l_next)
        else:
            f.br(l_here)
        f.start(l_here)
        t = w.mul(w.sub(ac, w.c((lo + hi_) / 2)), w.c(2.0 / (hi_ - lo)))
        g = w.clenshaw(t, coeffs)
        incoming.append((g, f.block))
        f.br(l_out + "g")
        if l_next:
            f.start(l_next)
    f.start(l_out + "g")
    g = f.phi(F64, incoming)
    ec = w.mul(e2, g)  # erfc(|x|)
    ec = w.sel(w.cmp("oge", a, w.c(27.5)), w.c(0.0), ec)
    neg = w.cmp("olt", "%x", w.c(0.0))
    if complement:
        tail_val = w.sel(neg, w.sub(w.c(2.0), ec), ec)
    else:
        tail_val = f.call(F64, mod.intrinsic("llvm.copysign.f64"), [(F64, w.sub(w.c(1.0), ec)), (F64, "%x")])
    f.br(l_out)
    b_tail = f.block
    f.start(l_out)
    v = f.phi(F64, [(small_val, b_small), (tail_val, b_tail)])
    # NaN: both comparisons are false for NaN, so it took the tail; give NaN back
    isnan = w.cmp("uno", "%x", "%x")
    w.ret(w.sel(isnan, "%x", v))
    return w.done()


def _fmod_core(mod: Module) -> str:
    """C fmod on doubles, exact: binary long division of |a| by |b|."""
    name = "jc_fmod_core"
    if name in mod.helpers:
        return name
    w = _W(mod, name, F64, [(F64, "%a"), (F64, "%b")])
    f = w.f
    ax = w.call1("llvm.fabs.f64", "%a")
    bx = w.call1("llvm.fabs.f64", "%b")
    # special: NaN, |a| = inf or b = 0 -> NaN; |a| < |b| (including |b| = inf) -> a
    bad = f.bin(
        "or",
        I1,
        w.cmp("uno", "%a", "%b"),
        f.bin("or", I1, w.cmp("oeq", ax, w.c(math.inf)), w.cmp("oeq", bx, w.c(0.0))),
    )
    l_up, l_upb, l_dn, l_dnb, l_end = (f.label(p) for p in ("up", "upb", "dn", "dnb", "end"))
    ok = f.bin("and", I1, f.emit(f"xor i1 {bad}, true"), w.cmp("oge", ax, bx))
    f.cbr(ok, l_up, l_end)
    # t = largest bx * 2^j with t <= ax (doubling while t + t <= ax)
    f.start(l_up)
    t = f.phi(F64, [(bx, "entry"), ("%fm_t2", l_upb)])
    tt = w.add(t, t)
    f.cbr(w.cmp("ole", tt, ax), l_upb, l_dn + "pre")
    f.start(l_upb)
    f.lines.append(f"  %fm_t2 = fadd double {tt}, 0.0")
    f.br(l_up)
    f.start(l_dn + "pre")
    f.br(l_dn)
    # walk back down: subtract t when it fits, halve t, until t < bx
    f.start(l_dn)
    r = f.phi(F64, [(ax, l_dn + "pre"), ("%fm_r2", l_dnb)])
    td = f.phi(F64, [(t, l_dn + "pre"), ("%fm_t2b", l_dnb)])
    fits = w.cmp("oge", r, td)
    rs = w.sel(fits, w.sub(r, td), r)
    f.br(l_dnb)
    f.start(l_dnb)
    f.lines.append(f"  %fm_r2 = fadd double {rs}, 0.0")
    f.lines.append(f"  %fm_t2b = fmul double {td}, 0x3FE0000000000000")
    f.cbr(w.cmp("oge", "%fm_t2b", bx), l_dn, l_end)
    f.start(l_end)
    res = f.phi(F64, [(w.c(math.nan), "entry"), ("%fm_r2", l_dnb)])
    # entry with ok false: NaN if bad, else a (|a| < |b|)
    res = f.select(bad, F64, w.c(math.nan), res)
    notok_good = f.bin("and", I1, f.emit(f"xor i1 {bad}, true"), w.cmp("olt", ax, bx))
    res = w.sel(
        notok_good, "%a", w.f.call(F64, mod.intrinsic("llvm.copysign.f64"), [(F64, res), (F64, "%a")])
    )
    w.ret(res)
    return w.done()


# ---- float32-native versions (vectorisable as f32x4; exp and log are the hot ones) ---------------

LN2_HI_F = float.fromhex("0x1.62e4p-1")  # 16 bits: k*LN2_HI_F is exact for |k| < 2^8
LN2_LO_F = float.fromhex("0x1.7f7d1cp-20")
INV_LN2_F = float.fromhex("0x1.715476p+0")
SQRT2_F = float.fromhex("0x1.6a09e6p+0")


EXP_SHIFT_F = 12582912.0  # 1.5 * 2^23: adding it rounds to an integer, kept in the low mantissa bits
# exp(r) ~ 1 + r + c2 r^2 + ... + c6 r^6 on |r| <= ln2/2: the minimax fit of the relative error
# (3.1e-9, Lawson's iteration; 0.72 ulp evaluated in float32 with fused multiply-adds), one
# multiply-add fewer than the degree-7 Taylor series it replaced (the degree-6 Taylor series is
# 2.5 ulp off, the degree-5 minimax 2.1)
EXP_POLY_F = (
    1.0,
    1.0,
    float.fromhex("0x1.fffffcp-2"),
    float.fromhex("0x1.555492p-3"),
    float.fromhex("0x1.5558f2p-5"),
    float.fromhex("0x1.1239ep-7"),
    float.fromhex("0x1.6a243ap-10"),
)


def _exp_f32(mod: Module) -> str:
    """exp in float arithmetic: |error| < 2 ulp (checked in plugins/wasm/tests against numpy in float64).
    The polynomial is EXP_POLY_F's.

    k = round(x/ln2) by the shift trick, whose bits also hold k as an integer, so there is no
    roundeven and no saturating float->int (seven x86 instructions per vector as Cranelift lowers
    it); r and the polynomial use `llvm.fmuladd`, one f32x4.relaxed_madd each where the host
    has FMA (mul + add where it does not: either is within the bound).
    """
    name = "jc_exp_f32"
    if name in mod.helpers:
        return name
    w = _W(mod, name, F32, [(F32, "%x")], F32)
    f = w.f

    def madd(a: str, b: str, c: str) -> str:
        return f.call(F32, mod.intrinsic("llvm.fmuladd.f32"), [(F32, a), (F32, b), (F32, c)])

    # x clamped to [-104, 89] (NaN passes): exp(-104) rounds to 0 and exp(89) overflows to inf
    # through the arithmetic below, so no select of the result is needed. Each clamp is
    # `c < x ? c : x` (or the mirror), wasm's f32x4.pmin / pmax: one minps / maxps on x86, where
    # comparing and blending the result took four instructions.
    x = w.sel(w.cmp("olt", "%x", w.c(-104.0)), w.c(-104.0), "%x")
    x = w.sel(w.cmp("olt", w.c(89.0), x), w.c(89.0), x)
    t = madd(x, w.c(INV_LN2_F), w.c(EXP_SHIFT_F))
    k = w.sub(t, w.c(EXP_SHIFT_F))
    r = madd(k, w.c(-LN2_LO_F), madd(k, w.c(-LN2_HI_F), x))
    p = w.c(EXP_POLY_F[-1])
    for coef in reversed(EXP_POLY_F[:-1]):
        p = madd(p, r, w.c(coef))
    # k in [-150, 128]: 2^k as two factors 2^k1 * 2^k2, k1 = floor(k/2), each a normal float (a
    # subnormal result rounds once). t's bits are 0x4B400000 + k, so u = k + 254 comes in one
    # subtraction, v = u >> 1 = k1 + 127 and u - v = k2 + 127 are the factors' biased exponents:
    # five integer instructions where computing k, k1, k2 and biasing each took seven
    u = f.bin("sub", I32, f.cast("bitcast", F32, t, I32), str(0x4B400000 - 254))
    v = f.bin("ashr", I32, u, "1")
    e1, e2 = (f.cast("bitcast", I32, f.bin("shl", I32, e, "23"), F32) for e in (v, f.bin("sub", I32, u, v)))
    y = w.mul(w.mul(p, e1), e2)
    w.ret(y)
    return w.done()


def _log_f32(mod: Module) -> str:
    """log in float arithmetic (same reduction as the double version, shorter series)."""
    name = "jc_log_f32"
    if name in mod.helpers:
        return name
    w = _W(mod, name, F32, [(F32, "%x")], F32)
    f = w.f
    sub = w.cmp("olt", "%x", w.c(2.0**-126))
    xs = w.sel(sub, w.mul("%x", w.c(2.0**23)), "%x")
    eadj = f.select(sub, I32, "-23", "0")
    bits = f.cast("bitcast", F32, xs, I32)
    e = f.bin("sub", I32, f.bin("and", I32, f.bin("lshr", I32, bits, "23"), "255"), "127")
    m = f.cast("bitcast", I32, f.bin("or", I32, f.bin("and", I32, bits, "8388607"), "1065353216"), F32)
    big = w.cmp("ogt", m, w.c(SQRT2_F))
    m = w.sel(big, w.mul(m, w.c(0.5)), m)
    e = f.bin("add", I32, f.bin("add", I32, e, eadj), f.cast("zext", I1, big, I32))
    ef = f.cast("sitofp", I32, e, F32)
    fm = w.sub(m, w.c(1.0))
    s_ = w.div(fm, w.add(w.c(2.0), fm))
    z = w.mul(s_, s_)
    rpoly = w.horner(z, [0.0] + [2.0 / (2 * i + 1) for i in range(1, 6)])
    l1p = w.sub(fm, w.mul(s_, w.sub(fm, rpoly)))
    y = w.add(w.mul(ef, w.c(LN2_HI_F)), w.add(l1p, w.mul(ef, w.c(LN2_LO_F))))
    y = w.sel(w.cmp("oeq", "%x", w.c(math.inf)), w.c(math.inf), y)
    y = w.sel(w.cmp("oeq", "%x", w.c(0.0)), w.c(-math.inf), y)
    y = w.sel(w.cmp("ult", "%x", w.c(0.0)), w.c(math.nan), y)
    w.ret(y)
    return w.done()


# ---- public: per dtype ------------------------------------------------------------------------

UNARY = {"Exp", "Log", "Sin", "Cos", "Atan", "Asin", "Erf", "Erfc"}


def unary(mod: Module, op: str, ty: str) -> str:
    """The helper computing transcendental `op` for `ty` (float or double); returns its name."""
    hi = ty == F64
    if not hi and op == "Exp":
        return _exp_f32(mod)
    if not hi and op == "Log":
        return _log_f32(mod)
    if op == "Exp":
        core = _exp_core(mod, hi)
    elif op == "Log":
        core = _log_core(mod, hi)
    elif op in ("Sin", "Cos"):
        core = _sincos_core(mod, hi, op == "Cos")
    elif op == "Atan":
        core = _atan_core(mod, hi)
    elif op == "Asin":
        core = _asin_core(mod, hi)
    elif op in ("Erf", "Erfc"):
        core = _erf_core(mod, hi, op == "Erfc")
    else:
        raise KeyError(op)
    return core if hi else _via_double(mod, core, f"{core}_f32", ["%x"])


def fmod(mod: Module, ty: str) -> str:
    core = _fmod_core(mod)
    return core if ty == F64 else _via_double(mod, core, "jc_fmod_f32", ["%a", "%b"])


def _via_double(mod: Module, core: str, name: str, params: list[str]) -> str:
    """The float helper `name`: widens its arguments, calls the double helper `core`, rounds once."""
    if name not in mod.helpers:
        f = Fn(name, F32, [(F32, p) for p in params], _ATTRS, "internal")
        r = f.call(F64, core, [(F64, f.cast("fpext", F32, p, F64)) for p in params])
        f.raw(f"ret float {f.cast('fptrunc', F64, r, F32)}")
        mod.helpers[name] = f.render()
    return name


def half_to_float(mod: Module) -> str:
    """i32 holding half bits (low 16) -> float, exact; a NaN's sign and 10 payload bits go to the
    top of the float's mantissa, so `float_to_half` gives back the same bits."""
    name = "jc_h2f"
    if name not in mod.helpers:
        f = Fn(name, F32, [(I32, "%h")], _ATTRS, "internal")
        sign = f.bin("shl", I32, f.bin("and", I32, "%h", "32768"), "16")
        em = f.bin("and", I32, "%h", "32767")
        sh = f.bin("shl", I32, em, "13")
        special = f.icmp("uge", I32, em, "31744")
        infnan = f.bin("or", I32, sh, "2139095040")
        scaled = f.fmul(F32, f.cast("bitcast", I32, sh, F32), fconst(2.0**112, F32))
        v = f.select(special, F32, f.cast("bitcast", I32, infnan, F32), scaled)
        out = f.bin("or", I32, f.cast("bitcast", F32, v, I32), sign)
        f.raw(f"ret float {f.cast('bitcast', I32, out, F32)}")
        mod.helpers[name] = f.render()
    return name


def float_to_half(mod: Module) -> str:
    """float -> half bits in an i32, round to nearest even, overflow to inf; a NaN keeps its sign
    and the top 10 bits of its payload (numpy's rule)."""
    name = "jc_f2h"
    if name not in mod.helpers:
        f = Fn(name, I32, [(F32, "%x")], _ATTRS, "internal")
        u = f.cast("bitcast", F32, "%x", I32)
        sign = f.bin("and", I32, f.bin("lshr", I32, u, "16"), "32768")
        a = f.bin("and", I32, u, "2147483647")
        # normal range: round the 13 dropped bits to nearest even, rebias the exponent
        odd = f.bin("and", I32, f.bin("lshr", I32, a, "13"), "1")
        rnd = f.bin("add", I32, f.bin("add", I32, a, "4095"), odd)
        normal = f.bin("lshr", I32, f.bin("sub", I32, rnd, str(112 << 23)), "13")
        # subnormal range (|x| < 2^-14): adding 0.5 rounds at 2^-24 granularity
        sf = f.fadd(F32, f.cast("bitcast", I32, a, F32), fconst(0.5, F32))
        subn = f.bin("sub", I32, f.cast("bitcast", F32, sf, I32), "1056964608")
        h = f.select(f.icmp("ult", I32, a, "947912704"), I32, subn, normal)
        h = f.select(f.icmp("uge", I32, a, "1199566848"), I32, "31744", h)  # >= 65520 -> inf
        # NaN: the top 10 payload bits (where half_to_float put them: signalling bit included),
        # so a moved float16 NaN keeps its bits; a payload only in the low bits stays a NaN
        pay = f.bin("and", I32, f.bin("lshr", I32, a, "13"), "1023")
        pay = f.bin("or", I32, pay, f.cast("zext", I1, f.icmp("eq", I32, pay, "0"), I32))
        h = f.select(f.icmp("ugt", I32, a, "2139095040"), I32, f.bin("or", I32, pay, "31744"), h)
        f.raw(f"ret i32 {f.bin('or', I32, h, sign)}")
        mod.helpers[name] = f.render()
    return name


def double_to_half(mod: Module) -> str:
    """double -> half bits: round to odd into float (no double rounding), then to half."""
    name = "jc_d2h"
    if name not in mod.helpers:
        f2h = float_to_half(mod)
        f = Fn(name, I32, [(F64, "%x")], _ATTRS, "internal")
        r = f.cast("fptrunc", F64, "%x", F32)
        back = f.cast("fpext", F32, r, F64)
        inexact = f.fcmp("one", F64, back, "%x")
        rb = f.cast("bitcast", F32, r, I32)
        ax = f.call(F64, mod.intrinsic("llvm.fabs.f64"), [(F64, "%x")])
        ab = f.call(F64, mod.intrinsic("llvm.fabs.f64"), [(F64, back)])
        toofar = f.fcmp("ogt", F64, ab, ax)
        trunc = f.select(toofar, I32, f.bin("sub", I32, rb, "1"), rb)
        odd = f.bin("or", I32, trunc, "1")
        fin = f.fcmp("one", F64, ax, fconst(math.inf, F64))
        use = f.bin("and", I1, inexact, fin)
        bits = f.select(use, I32, odd, rb)
        res = f.call(I32, f2h, [(F32, f.cast("bitcast", I32, bits, F32))])
        f.raw(f"ret i32 {res}")
        mod.helpers[name] = f.render()
    return name


def round_half(mod: Module) -> str:
    """float -> the nearest float16 value, as a float (a float16 op rounds its result)."""
    name = "jc_round_half"
    if name not in mod.helpers:
        h2f, f2h = half_to_float(mod), float_to_half(mod)
        f = Fn(name, F32, [(F32, "%x")], _ATTRS, "internal")
        h = f.call(I32, f2h, [(F32, "%x")])
        f.raw(f"ret float {f.call(F32, h2f, [(I32, h)])}")
        mod.helpers[name] = f.render()
    return name


def threefry(mod: Module) -> str:
    """Threefry-2x32, 20 rounds; returns {x0, x1}."""
    name = "jc_threefry"
    if name not in mod.helpers:
        rot = mod.intrinsic("llvm.fshl.i32")
        f = Fn(
            name, "{i32, i32}", [(I32, "%k0"), (I32, "%k1"), (I32, "%c0"), (I32, "%c1")], _ATTRS, "internal"
        )
        ks2 = f.bin("xor", I32, f.bin("xor", I32, "%k0", "%k1"), iconst(0x1BD11BDA))
        ks = ["%k0", "%k1", ks2]
        x0 = f.bin("add", I32, "%c0", "%k0")
        x1 = f.bin("add", I32, "%c1", "%k1")
        rots = ((13, 15, 26, 6), (17, 29, 16, 24))
        for g in range(1, 6):
            for r in rots[(g - 1) % 2]:
                x0 = f.bin("add", I32, x0, x1)
                x1 = f.bin("xor", I32, f.call(I32, rot, [(I32, x1), (I32, x1), (I32, str(r))]), x0)
            x0 = f.bin("add", I32, x0, ks[g % 3])
            x1 = f.bin("add", I32, f.bin("add", I32, x1, ks[(g + 1) % 3]), str(g))
        s = f.emit(f"insertvalue {{i32, i32}} undef, i32 {x0}, 0")
        s = f.emit(f"insertvalue {{i32, i32}} {s}, i32 {x1}, 1")
        f.raw(f"ret {{i32, i32}} {s}")
        mod.helpers[name] = f.render()
    return name
