"""The matmul path: reductions that are a product of two affine reads become a blocked SGEMM.

Detection is the core's (jaxcore.matmul_shape): both reads affine in (b, i, j, k), one free of j
(A) and one free of i (B), both provably in bounds; float32 operands and sum. Then C = A @ B runs
as a GotoBLAS-style loop nest: B blocks of KC x NC packed into NR-wide micro-panels, A blocks of
MC x KC packed into MR-tall micro-panels (packing also absorbs any strides or transposition), and
an MR x NR register tile of f32x4 accumulators updated by mul + add (see RELAXED), one splat of A
and NR/4 loads of B per k step. Partial tiles go through a small scratch tile. K blocks after the
first accumulate into C.

The SGEMM is one library module per process (runtime M, N, K and strides); a kernel whose epilogue
is not the identity also gets an `epilogue` map that reads the f32 sums from scratch. Threads that
share one C take its MC-row blocks from an atomic counter (see sgemm_ir), so the work follows the
speed each core gets.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcore.matmul_shape import detect as detect_shape
from jaxcore.plugin import DType, Kernel
from jaxcore_wasm.irtext import F32, I32, Fn, Module, fconst, loop
from jaxcore_wasm.toolchain import TRIPLE, datalayout

V4 = "<4 x float>"
MR, NV = 3, 3  # register tile: MR rows x NV f32x4 vectors (measured best with Cranelift's allocator)
NR = 4 * NV
# bytes one k step advances in the packed A (MR f32x4 splats) and in the packed B (NR floats):
# equal, so one offset walks both panels (see _micro)
STEP_BYTES = 16 * MR
assert 4 * NR == STEP_BYTES
# cache blocks (MC a multiple of MR, NC of NR): a B micro-panel (KC x NR, 24 KiB) stays in L1, the
# packed A block (MC x KC splats, 480 KiB) in L2; the B block (KC x NC, 2 MiB) streams from L3
KC, MC, NC = 512, 60, 1032
# The SGEMM's machine code is made at -O0: at -O2+ LLVM's loop strength reduction rewrites the
# micro-kernel's `inbounds nuw` panel addresses into plain ones, which wasm cannot fold into load
# offsets (six i32.adds more per k step, ~10% of the kernel's time). Cranelift optimises anyway.
CODEGEN_OPT = 0
RELAXED = False  # mul+add: Cranelift's vfmadd213 form costs register copies here


@dataclass(frozen=True)
class MatmulPlan:
    batch: int
    m: int
    n: int
    k: int
    a_gid: int
    a: tuple[int, int, int, int]  # base, stride over batch, over i, over k (elements)
    b_gid: int
    b: tuple[int, int, int, int]  # base, stride over batch, over k, over j
    direct: bool  # epilogue is the identity and the output is float32: sums go straight to out

    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


def detect(kernel: Kernel) -> MatmulPlan | None:
    """The SGEMM plan of a float32 matmul-shaped kernel (jaxcore.matmul_shape), or None; a
    matrix-vector product (N = 1) stays with the reduction loop, which reads A once."""
    mm = detect_shape(kernel)
    if mm is None or mm.k < 4 or mm.n < 2:
        return None
    if (mm.product, mm.acc, mm.a.dtype, mm.b.dtype) != (DType.float32,) * 4:
        return None
    a, b = mm.a, mm.b
    return MatmulPlan(
        mm.batch, mm.m, mm.n, mm.k,
        a.gid, (a.base, a.s_batch, a.s_outer, a.s_k),
        b.gid, (b.base, b.s_batch, b.s_k, b.s_outer),
        mm.identity and mm.out == DType.float32,
    )  # fmt: skip


# ---- the SGEMM library module -----------------------------------------------------------------------


def _splat(f: Fn, s: str) -> str:
    v = f.emit(f"insertelement {V4} poison, float {s}, i32 0")
    return f.emit(f"shufflevector {V4} {v}, {V4} poison, <4 x i32> zeroinitializer")


def _gep(f: Fn, ty: str, ptr: str, idx: str) -> str:
    return f.emit(f"getelementptr inbounds {ty}, ptr {ptr}, i32 {idx}")


def _mul(f: Fn, a: str, b: str) -> str:
    return f.bin("mul", I32, a, b, "nsw")


def _add(f: Fn, a: str, b: str) -> str:
    return f.bin("add", I32, a, b, "nsw")


def _min(f: Fn, mod: Module, a: str, b: str) -> str:
    return f.call(I32, mod.intrinsic("llvm.smin.i32"), [(I32, a), (I32, b)])


def sgemm_ir(relaxed: bool | None = None) -> str:
    """C[i*ldc + j] (=|+=) sum_k A[i*sai + k*sak] * B[k*sbk + j*sbj], i < M, j < N.

    Every thread that shares one C calls `sgemm` with the same zeroed sync words `Y` (see
    `sync_words`): each packs its own copy of every B block, then takes the block's MC-row blocks
    one at a time from an atomic counter, so a thread the machine slows down does fewer of them
    (statically halved rows ran as slow as the slower thread: 171 vs 220 ms on one 2048 matmul). A
    row block of a later K block waits until the same rows of the one before are done (both add
    into them); Y[0] != 0 makes a waiting thread give up (the host sets it when a thread fails)."""
    relaxed = RELAXED if relaxed is None else relaxed
    mod = Module(TRIPLE, datalayout())
    assert MC % MR == 0 and NC % NR == 0
    mod.decls.add(f"declare {V4} @llvm.wasm.relaxed.madd.v4f32({V4}, {V4}, {V4})")
    mod.decls.add("declare i32 @llvm.wasm.memory.atomic.wait32(ptr, i32, i64)")
    mod.decls.add("declare i32 @llvm.wasm.memory.atomic.notify(ptr, i32)")
    params = [("ptr", "%A"), (I32, "%sai"), (I32, "%sak"), ("ptr", "%B"), (I32, "%sbk"), (I32, "%sbj")]
    params += [("ptr", "%C"), (I32, "%ldc"), (I32, "%M"), (I32, "%N"), (I32, "%K"), ("ptr", "%S")]
    params += [("ptr", "%Y")]
    f = Fn("sgemm", "void", params, mod.attr_group('nounwind "wasm-export-name"="sgemm"'))
    zero4 = f"{V4} zeroinitializer"
    bp = "%S"
    ap = _gep(f, F32, "%S", str(KC * NC))
    tile = _gep(f, F32, "%S", str(KC * NC + 4 * MC * KC))
    mblocks = f.bin("sdiv", I32, _add(f, "%M", str(MC - 1)), str(MC))
    kblocks = f.bin("sdiv", I32, _add(f, "%K", str(KC - 1)), str(KC))
    nblocks = f.bin("sdiv", I32, _add(f, "%N", str(NC - 1)), str(NC))
    flags0 = _gep(f, I32, "%Y", _add(f, _mul(f, nblocks, kblocks), "1"))

    def jc_body(jc: str, _: list[str]) -> list[str]:
        nc = _min(f, mod, str(NC), f.bin("sub", I32, "%N", jc, "nsw"))
        npan = f.bin("sdiv", I32, _add(f, nc, str(NR - 1)), str(NR))

        def pc_body(pc: str, _: list[str]) -> list[str]:
            kc = _min(f, mod, str(KC), f.bin("sub", I32, "%K", pc, "nsw"))
            first = f.icmp("eq", I32, pc, "0")
            it = _add(f, _mul(f, f.bin("sdiv", I32, jc, str(NC)), kblocks), f.bin("sdiv", I32, pc, str(KC)))
            ctr = _gep(f, I32, "%Y", _add(f, it, "1"))
            flags = _gep(f, I32, flags0, _mul(f, it, mblocks))
            l_work, l_skip = f.label("bwork"), f.label("bskip")
            taken = f.emit(f"load atomic i32, ptr {ctr} seq_cst, align 4")
            f.cbr(f.icmp("slt", I32, taken, mblocks), l_work, l_skip)
            f.start(l_work)  # row blocks are left: this thread packs B and takes them
            _pack_b(f, jc, pc, nc, kc, npan, bp)
            l_take, l_row = f.label("take"), f.label("row")
            f.br(l_take)
            f.start(l_take)
            blk = f.emit(f"atomicrmw add ptr {ctr}, i32 1 seq_cst")
            f.cbr(f.icmp("slt", I32, blk, mblocks), l_row, l_skip)
            f.start(l_row)
            _await(f, first, _gep(f, I32, flags, f.bin("sub", I32, blk, mblocks, "nsw")))
            ic = _mul(f, blk, str(MC))
            mc = _min(f, mod, str(MC), f.bin("sub", I32, "%M", ic, "nsw"))
            mpan = f.bin("sdiv", I32, _add(f, mc, str(MR - 1)), str(MR))
            _pack_a(f, ic, pc, mc, kc, mpan, ap)

            def jr_body(jp: str, _: list[str]) -> list[str]:
                def ir_body(ip: str, _: list[str]) -> list[str]:
                    _micro(f, mod, jc, ic, jp, ip, nc, mc, kc, first, ap, bp, tile, zero4, relaxed)
                    return []

                loop(f, "0", mpan, "1", ir_body, name="ir")
                return []

            loop(f, "0", npan, "1", jr_body, name="jr")
            done = _gep(f, I32, flags, blk)
            f.raw(f"store atomic i32 1, ptr {done} seq_cst, align 4")
            f.emit(f"call i32 @llvm.wasm.memory.atomic.notify(ptr {done}, i32 -1)")
            f.br(l_take)
            f.start(l_skip)
            return []

        loop(f, "0", "%K", str(KC), pc_body, name="pc")
        return []

    loop(f, "0", "%N", str(NC), jc_body, name="jc")
    f.raw("ret void")
    mod.functions.append(f.render())
    return mod.render()


WAIT_NS = 10_000_000  # a waiting thread looks at the abort word this often


def _await(f: Fn, first: str, prev: str) -> None:
    """Unless `first` (the first K block), wait until the word at `prev` (the same rows' flag in
    the K block before) is set; return from `sgemm` if the abort word Y[0] is set meanwhile."""
    l_chk, l_abort, l_sleep, l_go = f.label("wchk"), f.label("wabort"), f.label("wsleep"), f.label("wgo")
    l_head = f.label("whead")
    f.cbr(first, l_go, l_head)
    f.start(l_head)
    ready = f.emit(f"load atomic i32, ptr {prev} seq_cst, align 4")
    f.cbr(f.icmp("ne", I32, ready, "0"), l_go, l_chk)
    f.start(l_chk)
    abort = f.emit("load atomic i32, ptr %Y seq_cst, align 4")
    f.cbr(f.icmp("ne", I32, abort, "0"), l_abort, l_sleep)
    f.start(l_abort)
    f.raw("ret void")
    f.start(l_sleep)
    f.emit(f"call i32 @llvm.wasm.memory.atomic.wait32(ptr {prev}, i32 0, i64 {WAIT_NS})")
    f.br(l_head)
    f.start(l_go)


def sync_words(m: int, n: int, k: int) -> int:
    """The i32 words one `sgemm` call shares among its threads: the abort word, a row-block
    counter per (N block, K block), and a done flag per row block of each."""
    blocks = -(-n // NC) * -(-k // KC)
    return 1 + blocks * (1 + -(-m // MC))


def _pack_b(f: Fn, jc: str, pc: str, nc: str, kc: str, npan: str, bp: str) -> None:
    """Bp[(p*kc + k)*NR + c] = B[pc+k, jc+p*NR+c] (0 beyond N). A whole panel of unit-stride
    columns is copied NV f32x4 at a time; the rest element by element."""
    unit = f.icmp("eq", I32, "%sbj", "1")

    def p_body(p: str, _: list[str]) -> list[str]:
        col0 = _add(f, jc, _mul(f, p, str(NR)))
        full = f.icmp("sle", I32, _add(f, col0, str(NR)), "%N")
        base_out = _mul(f, _mul(f, p, kc), str(NR))

        def fast_body(k: str, _: list[str]) -> list[str]:
            src = _gep(f, F32, "%B", _add(f, _mul(f, _add(f, pc, k), "%sbk"), col0))
            out = _gep(f, F32, bp, _add(f, base_out, _mul(f, k, str(NR))))
            for v in range(NV):
                x = f.emit(f"load {V4}, ptr {_off(f, src, 16 * v)}, align 4")
                f.raw(f"store {V4} {x}, ptr {_off(f, out, 16 * v)}, align 16")
            return []

        def k_body(k: str, _: list[str]) -> list[str]:
            row = _add(f, pc, k)
            rowoff = _mul(f, row, "%sbk")
            out = _gep(f, F32, bp, _add(f, base_out, _mul(f, k, str(NR))))
            for c in range(NR):
                col = _add(f, col0, str(c))
                ok = f.bin("or", "i1", full, f.icmp("slt", I32, col, "%N"))
                idx = f.select(ok, I32, _add(f, rowoff, _mul(f, col, "%sbj")), "0")
                v = f.emit(f"load float, ptr {_gep(f, F32, '%B', idx)}, align 4")
                v = f.select(ok, F32, v, fconst(0.0, F32))
                f.raw(f"store float {v}, ptr {_gep(f, F32, out, str(c))}, align 4")
            return []

        fast_end = f.select(f.bin("and", "i1", unit, full), I32, kc, "0")
        loop(f, "0", fast_end, "1", fast_body, name="pbv")
        loop(f, fast_end, kc, "1", k_body, name="pbk")
        return []

    loop(f, "0", npan, "1", p_body, name="pb")


def _pack_a(f: Fn, ic: str, pc: str, mc: str, kc: str, mpan: str, ap: str) -> None:
    """Ap[(p*kc + k)*MR + r] = splat(A[ic+p*MR+r, pc+k]) (0 beyond M), f32x4 each: no shuffles in
    the micro-kernel. A panel of whole rows with unit stride over k is read four k at a time (one
    f32x4 load and four lane shuffles per row); the rest, and the last kc % 4, element by element."""
    unit = f.icmp("eq", I32, "%sak", "1")
    kc4 = f.bin("and", I32, kc, "-4")

    def p_body(p: str, _: list[str]) -> list[str]:
        row0 = _add(f, ic, _mul(f, p, str(MR)))
        base_out = _mul(f, _mul(f, p, kc), str(MR))
        rows = []
        for r in range(MR):
            row = _add(f, row0, str(r))
            ok = f.icmp("slt", I32, row, "%M")
            rows.append((ok, f.select(ok, I32, _mul(f, row, "%sai"), "0")))

        def fast_body(k: str, _: list[str]) -> list[str]:
            out = _gep(f, F32, ap, _mul(f, _add(f, base_out, _mul(f, k, str(MR))), "4"))
            for r, (_ok, roff) in enumerate(rows):
                x = f.emit(f"load {V4}, ptr {_gep(f, F32, '%A', _add(f, roff, _add(f, pc, k)))}, align 4")
                for j in range(4):
                    lanes = ", ".join([f"i32 {j}"] * 4)
                    s = f.emit(f"shufflevector {V4} {x}, {V4} poison, <4 x i32> <{lanes}>")
                    f.raw(f"store {V4} {s}, ptr {_off(f, out, 16 * (j * MR + r))}, align 16")
            return []

        def k_body(k: str, _: list[str]) -> list[str]:
            koff = _mul(f, _add(f, pc, k), "%sak")
            out = _gep(f, F32, ap, _mul(f, _add(f, base_out, _mul(f, k, str(MR))), "4"))
            for r, (ok, roff) in enumerate(rows):
                v = f.emit(f"load float, ptr {_gep(f, F32, '%A', _add(f, roff, koff))}, align 4")
                v = f.select(ok, F32, v, fconst(0.0, F32))
                f.raw(f"store {V4} {_splat(f, v)}, ptr {_gep(f, F32, out, str(4 * r))}, align 16")
            return []

        whole = f.icmp("sle", I32, _add(f, row0, str(MR)), "%M")
        fast_end = f.select(f.bin("and", "i1", unit, whole), I32, kc4, "0")
        loop(f, "0", fast_end, "4", fast_body, name="pav")
        loop(f, fast_end, kc, "1", k_body, name="pak")
        return []

    loop(f, "0", mpan, "1", p_body, name="pa")


def _off(f: Fn, ptr: str, nbytes: int) -> str:
    """`ptr + nbytes` that provably does not wrap (`inbounds nuw`), so wasm folds it into a load's
    offset immediate instead of an i32.add per load."""
    return f.emit(f"getelementptr inbounds nuw i8, ptr {ptr}, i32 {nbytes}") if nbytes else ptr


def _micro(f: Fn, mod: Module, jc, ic, jp, ip, nc, mc, kc, first, ap, bp, tile, zero4, relaxed) -> None:
    pa = _gep(f, F32, ap, _mul(f, _mul(f, _mul(f, ip, kc), str(MR)), "4"))
    pb = _gep(f, F32, bp, _mul(f, _mul(f, jp, kc), str(NR)))

    def step(off: str, accs: list[str]) -> list[str]:
        # both panels advance STEP_BYTES per k: one byte offset indexes both, and each address is
        # a fresh 32-bit add (one lea) that Cranelift knows to be zero-extended, where a
        # loop-carried pointer costs an add and a zero-extending mov
        a_ptr = f.emit(f"getelementptr inbounds nuw i8, ptr {pa}, i32 {off}")
        b_ptr = f.emit(f"getelementptr inbounds nuw i8, ptr {pb}, i32 {off}")
        bs = [f.emit(f"load {V4}, ptr {_off(f, b_ptr, 16 * v)}, align 16") for v in range(NV)]
        new = []
        for r in range(MR):
            a = f.emit(f"load {V4}, ptr {_off(f, a_ptr, 16 * r)}, align 16")
            for v in range(NV):
                acc = accs[r * NV + v]
                if relaxed:
                    new.append(
                        f.emit(f"call {V4} @llvm.wasm.relaxed.madd.v4f32({V4} {a}, {V4} {bs[v]}, {V4} {acc})")
                    )
                else:
                    new.append(f.fadd(V4, f.fmul(V4, a, bs[v]), acc))
        return new

    # One k step per trip (unrolling made Cranelift spill); every load is base + offset + constant
    # (see CODEGEN_OPT).
    end = _mul(f, kc, str(STEP_BYTES))
    accs = loop(f, "0", end, str(STEP_BYTES), step, [(V4, "zeroinitializer")] * (MR * NV), name="mk")
    row0 = _add(f, ic, _mul(f, ip, str(MR)))
    col0 = _add(f, jc, _mul(f, jp, str(NR)))
    full = f.bin(
        "and", "i1",
        f.icmp("sle", I32, _add(f, row0, str(MR)), "%M"),
        f.icmp("sle", I32, _add(f, col0, str(NR)), "%N"),
    )  # fmt: skip
    l_full, l_part, l_done = f.label("full"), f.label("part"), f.label("tdone")
    f.cbr(full, l_full, l_part)
    # full tile: C (+)= acc
    f.start(l_full)
    for r in range(MR):
        crow = _gep(f, F32, "%C", _add(f, _mul(f, _add(f, row0, str(r)), "%ldc"), col0))
        for v in range(NV):
            p = _gep(f, F32, crow, str(4 * v))
            old = f.emit(f"load {V4}, ptr {p}, align 4")
            old = f.select(first, V4, "zeroinitializer", old)
            f.raw(f"store {V4} {f.fadd(V4, old, accs[r * NV + v])}, ptr {p}, align 4")
    f.br(l_done)
    # partial tile: spill to the scratch tile, then copy the valid part element by element
    f.start(l_part)
    for r in range(MR):
        for v in range(NV):
            f.raw(f"store {V4} {accs[r * NV + v]}, ptr {_gep(f, F32, tile, str(r * NR + 4 * v))}, align 16")
    nrows = _min(f, mod, str(MR), f.bin("sub", I32, "%M", row0, "nsw"))
    ncols = _min(f, mod, str(NR), f.bin("sub", I32, "%N", col0, "nsw"))

    def r_body(r: str, _: list[str]) -> list[str]:
        def c_body(c: str, _: list[str]) -> list[str]:
            t = f.emit(f"load float, ptr {_gep(f, F32, tile, _add(f, _mul(f, r, str(NR)), c))}, align 4")
            p = _gep(f, F32, "%C", _add(f, _mul(f, _add(f, row0, r), "%ldc"), _add(f, col0, c)))
            old = f.select(first, F32, fconst(0.0, F32), f.emit(f"load float, ptr {p}, align 4"))
            f.raw(f"store float {f.fadd(F32, old, t)}, ptr {p}, align 4")
            return []

        loop(f, "0", ncols, "1", c_body, name="tc")
        return []

    loop(f, "0", nrows, "1", r_body, name="tr")
    f.br(l_done)
    f.start(l_done)


def scratch_bytes() -> int:
    return (KC * NC + 4 * MC * KC + MR * NR) * 4 + 256


def plan_key() -> str:
    return f"sgemm|MR={MR}|NV={NV}|KC={KC}|MC={MC}|NC={NC}|RX={RELAXED}|O{CODEGEN_OPT}|shared"
