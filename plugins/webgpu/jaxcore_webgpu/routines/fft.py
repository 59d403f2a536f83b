"""Fft along the last axis: mixed-radix Stockham in workgroup memory, four-step for long rows,
Bluestein for lengths with a prime factor above 13 (up to 64 of those a direct DFT).

The twiddles exp(∓2πi·t/n) come from a table pass that uses the dialect's accurate sin/cos
helpers (WGSL's built-ins are only bounded to 2^-11); the constants inside a radix-R butterfly
are Python's double-precision cos/sin, written as literals.

A 13-smooth length up to 4096 (2048 in float64) is one pass (`_LocalFft`): stages of radix 2..16
(4096 is 16·16·16) hold their butterflies in registers and exchange values through workgroup
memory (the real and imaginary halves in turn where a vec2 array would not fit 16 KB), so a row is
read and written once, with no bit reversal. A longer row n = n1·n2 is the four-step decomposition
(`_fft_passes`): 65536 is two passes, 2^24 three. Other lengths are Bluestein's chirp convolution
(`_bluestein`), up to 64 a direct sum. The inverse scales by 1/n at the end, as numpy's ifft.
Every shader keeps to WebGPU's default limits (16 KB of workgroup storage, 256 invocations, at
most 6 storage buffers). Any factor list gives the same DFT, so `FftParams.factors` only has to
multiply to n.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from jaxcore.dtype import DType
from jaxcore.routine import FftParams, Routine
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.routines.common import (
    Buf,
    declare,
    elementwise_pass,
    entry,
    fold,
    header,
    helpers,
    inp,
    outp,
    scratch,
    wgsl_type,
    work_dtype,
)

# WebGPU's default workgroup storage: the same WGSL runs in a browser. A 4096-point row exchanged as
# vec2 in 32 KB (one round a stage, not the halves in turn) ran 20 % faster on lavapipe but took
# the H100's 4096x4096 FFT from 0.144 to 0.193 ms, so rows keep to 16 KB on every device.
LOCAL_BYTES = 16384
MAX_THREADS = 256  # WebGPU's default invocations per workgroup
MAX_RADIX = 16  # a butterfly of up to 16 values stays in registers
RADIX_PRIMES = (2, 3, 5, 7, 11, 13)  # lengths built from these need no Bluestein
DIRECT_MAX = 64  # other lengths up to this sum the DFT directly; longer ones go through Bluestein
COALESCE_MAX = 256  # a four-step column length at most this keeps >= 8 columns per workgroup


@dataclass(frozen=True)
class _Num:
    """The dtype facts a shader needs: work scalar T, complex V = vec2<T>, storage type, conversions."""

    T: str
    ty: str
    hdr: str
    sfx: str
    elem: int  # bytes of one complex work value

    @property
    def V(self) -> str:
        return f"vec2<{self.T}>"

    def lit(self, x: float) -> str:
        return f"{self.T}({x!r})"

    def cvt(self, x: str) -> str:
        return f"f32({x})" if self.ty == "f16" else x

    def outc(self, x: str) -> str:
        return f"f16({x})" if self.ty == "f16" else x


@dataclass(frozen=True)
class _Twiddles:
    """A pass's twiddle table `buf[e]` = exp(sign'·2πi·e/ntab), conjugated on read when `conj`
    (sign' = -sign); `sign` is the transform's direction."""

    buf: Buf
    ntab: int
    sign: float
    conj: bool = False

    def at(self, V: str, e: str) -> str:
        w = f"{self.buf.name}[{e}]"
        return f"{V}({w}.x, -{w}.y)" if self.conj else w


@dataclass(frozen=True)
class _Side:
    """How a pass loads element `pos` of row `row` of its FFT problem, or stores it.

    `code(row, pos, var)` is a WGSL statement: a load assigns `var`, a store writes the value `var`.
    `across` says a position's neighbours in memory are the neighbouring rows' (a transposed side),
    so threads should run across rows."""

    bufs: tuple[Buf, ...]
    code: Callable[[str, str, str], str]
    across: bool = False


def _cmul(V: str, a: str, b: str) -> str:
    return f"{V}({a}.x * {b}.x - {a}.y * {b}.y, {a}.x * {b}.y + {a}.y * {b}.x)"


def _smooth(n: int, primes: tuple[int, ...] = RADIX_PRIMES) -> bool:
    for p in primes:
        while n % p == 0:
            n //= p
    return n == 1


@functools.cache
def _radices(n: int) -> tuple[int, ...]:
    """Stage radices (2..16) for a 13-smooth n: fewest stages, then the most even (largest smallest
    radix, so no stage leaves most threads a tiny butterfly)."""
    if n == 1:
        return ()
    best: tuple[int, ...] | None = None
    for r in range(min(MAX_RADIX, n), 1, -1):
        if n % r:
            continue
        cand = tuple(sorted((r, *_radices(n // r)), reverse=True))
        if best is None or (len(cand), -min(cand)) < (len(best), -min(best)):
            best = cand
    assert best is not None
    return best


class _Dft:
    """Straight-line WGSL for a radix-R DFT y_k = Σ_j x_j exp(sign·2πi·jk/R) of registers.

    Composite R splits Cooley-Tukey style (R1 near √R; the inner twiddles are exact for multiples
    of a quarter turn); a prime R pairs x_j with x_(R-j), so it costs about (R-1)²/2 real
    multiply-adds per component."""

    def __init__(self, num: _Num, sign: float) -> None:
        self.num, self.sign, self.count = num, sign, 0
        self.lines: list[str] = []

    def let(self, expr: str) -> str:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"let {name} = {expr};")
        return name

    def rot(self, v: str, q: int) -> str:
        """v · (sign·i)^q: exact."""
        q %= 4
        if q == 0:
            return v
        if q == 2:
            return self.let(f"-{v}")
        up = (q == 1) == (self.sign > 0)  # multiply by +i
        return self.let(f"{self.num.V}(-{v}.y, {v}.x)" if up else f"{self.num.V}({v}.y, -{v}.x)")

    def twiddle(self, v: str, e: int, R: int) -> str:
        e %= R
        if (4 * e) % R == 0:
            return self.rot(v, 4 * e // R)
        th = 2 * math.pi * e / R
        c, s = self.num.lit(math.cos(th)), self.num.lit(self.sign * math.sin(th))
        return self.let(f"{self.num.V}({v}.x * {c} - {v}.y * {s}, {v}.x * {s} + {v}.y * {c})")

    def run(self, xs: list[str]) -> list[str]:
        R = len(xs)
        if R == 1:
            return list(xs)
        if R == 2:
            return [self.let(f"{xs[0]} + {xs[1]}"), self.let(f"{xs[0]} - {xs[1]}")]
        r1 = min((d for d in range(2, R) if R % d == 0), key=lambda d: abs(d * d - R), default=R)
        if r1 == R:
            return self.prime(xs)
        r2 = R // r1
        # X[k1 + r1·k2] = Σ_j2 W_R^(j2·k1) W_r2^(j2·k2) Σ_j1 x[j1·r2 + j2] W_r1^(j1·k1)
        inner = [self.run([xs[j1 * r2 + j2] for j1 in range(r1)]) for j2 in range(r2)]
        out = [""] * R
        for k1 in range(r1):
            col = [self.twiddle(inner[j2][k1], j2 * k1, R) for j2 in range(r2)]
            for k2, y in enumerate(self.run(col)):
                out[k1 + r1 * k2] = y
        return out

    def prime(self, xs: list[str]) -> list[str]:
        R, lit = len(xs), self.num.lit
        half = range(1, (R - 1) // 2 + 1)
        a = {j: self.let(f"{xs[j]} + {xs[R - j]}") for j in half}
        b = {j: self.let(f"{xs[j]} - {xs[R - j]}") for j in half}
        out = [""] * R
        out[0] = self.let(" + ".join([xs[0], *a.values()]))
        for t in half:
            re = self.let(
                " + ".join([xs[0]] + [f"{a[j]} * {lit(math.cos(2 * math.pi * j * t / R))}" for j in half])
            )
            im = self.let(" + ".join(f"{b[j]} * {lit(math.sin(2 * math.pi * j * t / R))}" for j in half))
            i_im = self.rot(im, 1)
            out[t] = self.let(f"{re} + {i_im}")
            out[R - t] = self.let(f"{re} - {i_im}")
        return out


class _LocalFft:
    """FFTs of length L in workgroup memory, as one pass: for row r < rows and column c < cols,
    element j is `load(r, c + j·cols)` and output k goes to `store(r, c + k·cols)`; with cols > 1
    (a four-step column pass) output k of column c is multiplied by exp(sign·2πi·c·k/(L·cols)).

    Stage s (radix R, p = product of the radices before it) is Stockham's autosort step: butterfly
    i reads x[i + t·L/R], multiplies by W_(pR)^(t·(i mod p)), and writes y[(i/p)·pR + i mod p + t·p].
    A workgroup runs C such FFTs; thread `lid` owns butterflies lid + q·threads (its slots q),
    whose values live in registers (`a{s}_{q}_{t}` in, `y{s}_{q}_{t}` out)."""

    def __init__(
        self, num: _Num, L: int, rows: int, cols: int, load: _Side, store: _Side, tw: _Twiddles,
        scale: float | None,
    ) -> None:  # fmt: skip
        self.num, self.L, self.cols, self.load, self.store = num, L, cols, load, store
        self.tw, self.scale = tw, scale
        self.count = rows * cols
        vec_cap = LOCAL_BYTES // num.elem
        assert L <= 2 * vec_cap
        self.split = L > vec_cap  # then real and imaginary parts take turns in one scalar array
        self.C = 1 if self.split else max(1, min(self.count, vec_cap // L))
        self.size = self.C * L
        self.radices = _radices(L)
        self.threads = min(MAX_THREADS, -(-self.size // max(self.radices)))
        # threads run across columns where neighbouring columns are neighbours in memory
        self.across = self.C > 1 and (cols > 1 or load.across or store.across)
        self.grid = fold(-(-self.count // self.C))
        self.bufs: list[Buf] = []
        for b in (*load.bufs, *store.bufs, tw.buf):
            if all(b.name != x.name for x in self.bufs):
                self.bufs.append(b)
        self.regs: list[str] = []  # registers that outlive a slot's block

    def sh(self, c: str, k: str) -> str:
        idx = f"({k}) * {self.C}u + {c}" if self.across else f"{c} * {self.L}u + {k}"
        return f"sh[swz({idx})]"

    def slots(self, R: int) -> range:
        return range(-(-self.size // R // self.threads))

    def each_slot(self, R: int, lines: Callable[[int], list[str]]) -> str:
        """`lines(q)` in the block of each slot q of a radix-R stage, which defines b, c and i."""
        lr, bf = self.L // R, self.size // R
        if self.C == 1:
            ci = "let c = 0u; let i = b;"
        elif self.across:
            ci = f"let c = b % {self.C}u; let i = b / {self.C}u;"
        else:
            ci = f"let c = b / {lr}u; let i = b % {lr}u;"
        out = []
        for q in self.slots(R):
            last = q == -(-bf // self.threads) - 1
            guard = f" if (b < {bf}u) {{" if bf % self.threads and last else " {"
            out += [f"  {{ let b = lid + {q * self.threads}u;{guard} {ci}\n", *lines(q), "  } }\n"]
        return "".join(out)

    def column(self, body: str) -> str:
        """`body` where this slot's FFT exists (the last workgroup may have fewer than C): it
        sees `row` and `col`."""
        cols = self.cols
        rc = "let row = sidx; let col = 0u;"
        if cols > 1:
            rc = f"let row = sidx / {cols}u; let col = sidx % {cols}u;"
        whole = self.grid[0] * self.grid[1] * self.C == self.count
        check = "" if whole else f" if (sidx < {self.count}u)"
        return f"    {{ let sidx = wgi * {self.C}u + c;{check} {{ {rc}\n{body}    }} }}\n"

    def put(self, s: int, R: int, p: int, part: str) -> str:
        """Stage s's outputs (radix R, p before it) into workgroup memory (`part` .x/.y when split)."""
        return self.each_slot(
            R,
            lambda q: (
                [f"    let k = (i / {p}u) * {p * R}u + i % {p}u;\n"]
                + [f"    {self.sh('c', f'k + {t * p}u')} = y{s}_{q}_{t}{part};\n" for t in range(R)]
            ),
        )

    def get(self, s: int, R: int, part: str) -> str:
        """Stage s's inputs (radix R) from workgroup memory."""
        lr = self.L // R
        return self.each_slot(
            R, lambda q: [f"    a{s}_{q}_{t}{part} = {self.sh('c', f'i + {t * lr}u')};\n" for t in range(R)]
        )

    def butterflies(self, s: int, R: int, p: int, q: int) -> list[str]:
        """Slot q's butterflies of stage s: inputs from global memory at s = 0, outputs to it at the last."""
        V, lr, cols = self.num.V, self.L // R, self.cols
        out = []
        if s == 0:
            out += [f"    var a_{t}: {V};\n" for t in range(R)]
            pos = [f"col + (i + {t * lr}u) * {cols}u" for t in range(R)]
            out.append(
                self.column("".join(f"      {self.load.code('row', pos[t], f'a_{t}')}\n" for t in range(R)))
            )
            xs = [f"a_{t}" for t in range(R)]
        else:
            xs = [f"a{s}_{q}_{t}" for t in range(R)]
        if p > 1:  # W_(pR)^(t·k) = tw[t·k·ntab/(pR)]
            out.append(f"    let kk = i % {p}u;\n")
            for t in range(1, R):
                w = self.tw.at(V, f"kk * {t * (self.tw.ntab // (p * R))}u")
                out.append(f"    let w{t} = {w}; let u{t} = {_cmul(V, f'w{t}', xs[t])};\n")
            xs = [xs[0]] + [f"u{t}" for t in range(1, R)]
        dft = _Dft(self.num, self.tw.sign)
        ys = dft.run(xs)
        out += [f"    {line}\n" for line in dft.lines]
        if s < len(self.radices) - 1:
            self.regs += [f"var y{s}_{q}_{t}: {V};" for t in range(R)]
            return out + [f"    y{s}_{q}_{t} = {ys[t]};\n" for t in range(R)]
        stores = []  # the last stage: here p·R = L and i < p: output k = i + t·p
        for t in range(R):
            val = ys[t]
            if cols > 1:
                w = self.tw.at(V, f"col * (i + {t * p}u) * {self.tw.ntab // (self.L * cols)}u")
                stores.append(f"      let z{t} = {_cmul(V, w, val)};\n")
                val = f"z{t}"
            if self.scale is not None:
                val = f"{val} * {self.num.lit(self.scale)}"
            stores.append(f"      {self.store.code('row', f'col + (i + {t * p}u) * {cols}u', val)}\n")
        return out + [self.column("".join(stores))]

    def body(self) -> str:
        """The stages, with the previous one's outputs moved through workgroup memory before each
        (all barriers at the top level of `main`, so always in uniform control flow)."""
        barrier = "  workgroupBarrier();\n"
        code, p = [], 1
        for s, R in enumerate(self.radices):
            if s > 0:
                pr = self.radices[s - 1]
                self.regs += [f"var a{s}_{q}_{t}: {self.num.V};" for q in self.slots(R) for t in range(R)]
                if s > 1:  # stage s-1 read workgroup memory
                    code.append(barrier)
                if self.split:
                    code += [self.put(s - 1, pr, p // pr, ".x"), barrier, self.get(s, R, ".x"), barrier]
                    code += [self.put(s - 1, pr, p // pr, ".y"), barrier, self.get(s, R, ".y")]
                else:
                    code += [self.put(s - 1, pr, p // pr, ""), barrier, self.get(s, R, "")]
            code.append(self.each_slot(R, functools.partial(self.butterflies, s, R, p)))
            p *= R
        return "".join(code)

    def build(self) -> Pass:
        num = self.num
        body = self.body()
        decl = num.hdr + declare(self.bufs)
        decl += f"var<workgroup> sh: array<{num.T if self.split else num.V}, {self.size}>;\n"
        # An XOR swizzle inside each 128-byte span spreads strided accesses over the memory banks.
        span = 128 // (num.elem // 2 if self.split else num.elem)
        swz = "x"
        if self.size % span == 0 and self.size > span:
            swz = f"x ^ ((x >> {span.bit_length() - 1}u) & {span - 1}u)"
        decl += f"fn swz(x: u32) -> u32 {{ return {swz}; }}\n"
        text = (
            decl
            + entry(self.threads, [b.name for b in self.bufs])
            + f"  let wgi = wid.x + wid.y * {self.grid[0]}u;\n"
            + "".join(f"  {v}\n" for v in self.regs)
            + body
            + "}\n"
        )
        return Pass(text, self.grid, tuple(b.binding for b in self.bufs))


def _split(n: int, lmax: int) -> int:
    """n1 for the four-step n = n1·n2: at most COALESCE_MAX (so a workgroup reads >= 8 neighbouring
    columns), n2 within one pass where possible, and near √n (both passes then move whole rows)."""
    divs = [d for d in range(2, min(n - 1, COALESCE_MAX) + 1) if n % d == 0]
    fit = [d for d in divs if n // d <= lmax]
    if fit:
        return min(fit, key=lambda d: abs(2 * math.log(d) - math.log(n)))
    return max(divs)


def _fft_passes(
    num: _Num, n: int, rows: int, load: _Side, store: _Side, tw: _Twiddles, temps: tuple[Buf, Buf],
    scale: float | None = None,
) -> list[Pass]:  # fmt: skip
    """Passes for `rows` FFTs of length n from `load` to `store`: one in workgroup memory, or the
    four-step (a column pass into temps[0], then the rows of that, recursively)."""
    lmax = 2 * LOCAL_BYTES // num.elem
    if n <= lmax:
        return [_LocalFft(num, n, rows, 1, load, store, tw, scale).build()]
    n1 = _split(n, lmax)
    n2 = n // n1
    t = temps[0]
    # column j2 of row r: x[r][j1·n2 + j2] -> t[r·n + k1·n2 + j2] (times W_n^(j2·k1))
    to_t = _Side((t,), lambda r, pos, v: f"{t.name}[({r}) * {n}u + {pos}] = {v};")
    first = _LocalFft(num, n1, rows, n2, load, to_t, tw, None).build()
    # then row r·n1 + k1 of t (length n2) transforms into X[r][k1 + n1·k2]
    from_t = _Side((t,), lambda r, pos, v: f"{v} = {t.name}[({r}) * {n2}u + {pos}];")
    out = _Side(
        store.bufs,
        lambda r, pos, v: store.code(f"({r}) / {n1}u", f"({r}) % {n1}u + {n1}u * ({pos})", v),
        True,
    )
    return [first] + _fft_passes(num, n2, rows * n1, from_t, out, tw, (temps[1], t), scale)


def _table(tw: _Twiddles, num: _Num) -> Pass:
    """The table: (cos, sign·sin)(2π e / ntab) through the dialect's accurate helpers."""
    T, sfx, name = num.T, num.sfx, tw.buf.name
    body = (
        f"  let th = {T}(gid) * ({T}({2 * math.pi!r}) / {T}({tw.ntab}));\n"
        f"  {name}[gid] = {num.V}(jc_cos_{sfx}(th), {T}({tw.sign}) * jc_sin_{sfx}(th));\n"
    )
    return elementwise_pass([tw.buf], body, tw.ntab, tail=helpers([f"jc_sin_{sfx}", f"jc_cos_{sfx}"]))


def _planes_in(num: _Num, n: int) -> _Side:
    return _Side(
        (inp(0, num.ty), inp(1, num.ty)),
        lambda r, pos, v: (
            f"{{ let e = ({r}) * {n}u + {pos}; {v} = {num.V}({num.cvt('in0[e]')}, {num.cvt('in1[e]')}); }}"
        ),
    )


def _planes_out(num: _Num, n: int) -> _Side:
    put = f"out0[e] = {num.outc('z.x')}; out1[e] = {num.outc('z.y')};"
    return _Side(
        (outp(0, num.ty), outp(1, num.ty)),
        lambda r, pos, v: f"{{ let e = ({r}) * {n}u + {pos}; let z = {v}; {put} }}",
    )


def _smooth_size(m: int) -> int:
    """The smallest 7-smooth integer >= m."""
    while not _smooth(m, (2, 3, 5, 7)):
        m += 1
    return m


def _bluestein(num: _Num, n: int, batch: int, sign: float, inverse: bool) -> Plan:
    """X_k = c_k sum_j (x_j c_j) conj(c_(k-j)) with c_j = exp(±πi j²/n): a circular convolution of
    length M >= 2n - 1, done with three FFTs (the chirp's recomputed each dispatch: plan scratch
    starts undefined). The chirp multiply and the pointwise product ride on the FFTs' loads and stores."""
    V, T, sfx = num.V, num.T, num.sfx
    big = _smooth_size(2 * n - 1)
    tw, cc, fb, a = (Buf(x, V, ("scratch", i)) for i, x in enumerate(("tw", "cc", "fb", "av")))
    temps = (Buf("t0", V, ("scratch", 4)), Buf("t1", V, ("scratch", 5)))
    fwd, inv = _Twiddles(tw, big, -1.0), _Twiddles(tw, big, 1.0, True)
    passes = [_table(fwd, num)]
    # chirp c_j = exp(sign πi (j² mod 2n) / n), j² mod 2n without 32-bit overflow
    decl = helpers([f"jc_sin_{sfx}", f"jc_cos_{sfx}"]) + (
        "fn jc_mulmod(a: u32, b: u32, m: u32) -> u32 {\n"
        "  var r = 0u; var x = a % m; var y = b;\n"
        "  loop { if (y == 0u) { break; } if ((y & 1u) == 1u) { r = r + x; if (r >= m) { r = r - m; } }\n"
        "    x = x + x; if (x >= m) { x = x - m; } y = y >> 1u; }\n  return r;\n}\n"
    )
    body = (
        f"  let q = jc_mulmod(gid, gid, {2 * n}u);\n"
        f"  let th = {T}(q) * ({T}({math.pi!r}) / {T}({n}));\n"
        f"  cc[gid] = {V}(jc_cos_{sfx}(th), {T}({sign}) * jc_sin_{sfx}(th));\n"
    )
    passes.append(elementwise_pass([cc], body, n, tail=decl))
    # fb = FFT of b, b = conj(c) wrapped circularly
    chirp_b = _Side(
        (cc,),
        lambda r, pos, v: (
            f"{{ let j = {pos}; var z = {V}(0); if (j < {n}u) {{ z = cc[j]; }}"
            f" else if (j > {big - n}u) {{ z = cc[{big}u - j]; }} {v} = {V}(z.x, -z.y); }}"
        ),
    )
    to_fb = _Side((fb,), lambda r, pos, v: f"fb[{pos}] = {v};")
    passes += _fft_passes(num, big, 1, chirp_b, to_fb, fwd, temps)
    # av = FFT(x c zero-padded to M) · fb
    planes = _planes_in(num, n)
    x_c = _Side(
        (*planes.bufs, cc),
        lambda r, pos, v: (
            f"{{ let j = {pos}; {v} = {V}(0); if (j < {n}u) {{ var x: {V}; "
            + planes.code(r, "j", "x")
            + f" let c = cc[j]; {v} = {_cmul(V, 'x', 'c')}; }} }}"
        ),
    )
    times_fb = _Side(
        (a, fb),
        lambda r, pos, v: (
            f"{{ let j = {pos}; let z = {v}; let f = fb[j]; av[({r}) * {big}u + j] = {_cmul(V, 'z', 'f')}; }}"
        ),
    )
    passes += _fft_passes(num, big, batch, x_c, times_fb, fwd, temps)
    # the inverse FFT (conjugate twiddles), then c_k · r_k / M for k < n
    from_a = _Side((a,), lambda r, pos, v: f"{v} = av[({r}) * {big}u + {pos}];")
    out = _planes_out(num, n)
    times_c = _Side(
        (*out.bufs, cc),
        lambda r, pos, v: (
            f"{{ let k = {pos}; if (k < {n}u) {{ let z = {v}; let c = cc[k]; let y = {_cmul(V, 'c', 'z')}; "
            + out.code(r, "k", "y")
            + " } }"
        ),
    )
    scale = 1.0 / big / (n if inverse else 1)
    passes += _fft_passes(num, big, batch, from_a, times_c, inv, temps, scale)
    big_bytes = max(16, batch * big * num.elem)
    tmp_bytes = big_bytes if big > 2 * LOCAL_BYTES // num.elem else 16
    small = max(16, big * num.elem)
    return Plan(tuple(passes), (small, max(16, n * num.elem), small, big_bytes, tmp_bytes, tmp_bytes))


def _direct(num: _Num, n: int, batch: int, sign: float, inverse: bool) -> Plan:
    """A short length with a prime factor above 13: one thread per output sums the DFT, the table
    index advanced mod n (exact integer arithmetic)."""
    V = num.V
    tw = Buf("tw", V, ("scratch", 2))
    passes = [_table(_Twiddles(tw, n, sign), num)]
    body = f"  S[gid] = {V}({num.cvt('in0[gid]')}, {num.cvt('in1[gid]')});\n"
    passes.append(
        elementwise_pass([inp(0, num.ty), inp(1, num.ty), scratch("S", V, 0)], body, batch * n, num.hdr)
    )
    body = f"""  let row = gid / {n}u; let kk = gid % {n}u;
  let o = row * {n}u;
  var acc = {V}(0);
  var idx = 0u;
  for (var j = 0u; j < {n}u; j = j + 1u) {{
    let x = src[o + j]; let w = tw[idx];
    acc = acc + {_cmul(V, "w", "x")};
    idx = idx + kk; if (idx >= {n}u) {{ idx = idx - {n}u; }}
  }}
  dst[gid] = acc;
"""
    passes.append(elementwise_pass([scratch("src", V, 0), scratch("dst", V, 1), tw], body, batch * n))
    scale = f" * {num.lit(1.0 / n)}" if inverse else ""
    body = f"  let z = S[gid]{scale};\n  out0[gid] = {num.outc('z.x')};\n  out1[gid] = {num.outc('z.y')};\n"
    passes.append(
        elementwise_pass([outp(0, num.ty), outp(1, num.ty), scratch("S", V, 1)], body, batch * n, num.hdr)
    )
    cbytes = max(16, batch * n * num.elem)
    return Plan(tuple(passes), (cbytes, cbytes, max(16, n * num.elem)))


def plan_fft(routine: Routine, target: object = None) -> Plan:
    params = routine.params
    assert isinstance(params, FftParams)
    dtype, (n,), batch = routine.type.operand(0, 1)
    if batch == 0:
        return Plan(())
    wd = work_dtype(dtype)
    f64 = wd == DType.float64
    num = _Num(wgsl_type(wd), wgsl_type(dtype), header([dtype]), "f64" if f64 else "f32", 16 if f64 else 8)
    sign = 1.0 if params.inverse else -1.0
    if n == 1:  # the DFT of one value is itself
        bufs = [inp(0, num.ty), inp(1, num.ty), outp(0, num.ty), outp(1, num.ty)]
        body = "  out0[gid] = in0[gid];\n  out1[gid] = in1[gid];\n"
        return Plan((elementwise_pass(bufs, body, batch, num.hdr),))
    if not _smooth(n):
        if n <= DIRECT_MAX:
            return _direct(num, n, batch, sign, params.inverse)
        return _bluestein(num, n, batch, sign, params.inverse)
    tw = _Twiddles(scratch("tw", num.V, 0), n, sign)
    temps = (scratch("t0", num.V, 1), scratch("t1", num.V, 2))
    scale = 1.0 / n if params.inverse else None
    passes = [_table(tw, num)]
    passes += _fft_passes(num, n, batch, _planes_in(num, n), _planes_out(num, n), tw, temps, scale)
    used = {b[1] for p in passes for b in p.bindings if b[0] == "scratch"}
    cbytes = max(16, batch * n * num.elem)
    return Plan(tuple(passes), (max(16, n * num.elem), *(cbytes if i in used else 16 for i in (1, 2))))
