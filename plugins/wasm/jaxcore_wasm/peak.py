"""The SIMD128 arithmetic peak of this machine as wasm sees it: a register-only multiply-add loop.

`peak(p, n)` loads CHAINS f32x4 accumulators and two operands from `p`, runs `n` iterations of
`acc = acc * x + y` on every chain (independent chains hide the latency, so the loop is limited by
the vector units' throughput, not by memory), then stores the accumulators back so nothing is
dead. Each iteration is CHAINS x 4 lanes x 2 flops. Two variants: relaxed-simd fused multiply-add
(`peak_fma`) and separate f32x4.mul + f32x4.add (`peak_muladd`); the limit is the faster one.
"""

from __future__ import annotations

from jaxcore_wasm.toolchain import TRIPLE, datalayout

CHAINS = 12  # 12 accumulators + 2 operands fit the 16 xmm registers Cranelift allocates on x86-64
V4 = "<4 x float>"
FLOPS_PER_ITER = CHAINS * 4 * 2
SCRATCH_BYTES = 16 * (CHAINS + 2)


def _fn(name: str, fused: bool) -> list[str]:
    out = [f"define void @{name}(ptr noalias %p, i32 %n) #{0 if fused else 1} {{", "entry:"]
    out.append(f"  %x = load {V4}, ptr %p, align 16")
    out.append(f"  %yp = getelementptr inbounds {V4}, ptr %p, i32 1")
    out.append(f"  %y = load {V4}, ptr %yp, align 16")
    for c in range(CHAINS):
        out.append(f"  %ap{c} = getelementptr inbounds {V4}, ptr %p, i32 {c + 2}")
        out.append(f"  %a{c}i = load {V4}, ptr %ap{c}, align 16")
    out += ["  %go = icmp sgt i32 %n, 0", "  br i1 %go, label %loop, label %exit", "loop:"]
    out.append("  %i = phi i32 [0, %entry], [%i1, %loop]")
    for c in range(CHAINS):
        out.append(f"  %a{c} = phi {V4} [%a{c}i, %entry], [%a{c}n, %loop]")
    for c in range(CHAINS):
        if fused:
            out.append(f"  %a{c}n = call {V4} @llvm.wasm.relaxed.madd.v4f32({V4} %a{c}, {V4} %x, {V4} %y)")
        else:
            out.append(f"  %m{c} = fmul {V4} %a{c}, %x")
            out.append(f"  %a{c}n = fadd {V4} %m{c}, %y")
    out += ["  %i1 = add nuw nsw i32 %i, 1", "  %more = icmp slt i32 %i1, %n"]
    out += ["  br i1 %more, label %loop, label %exit, !llvm.loop !0", "exit:"]
    out += [f"  %r{c} = phi {V4} [%a{c}i, %entry], [%a{c}n, %loop]" for c in range(CHAINS)]
    out += [f"  store {V4} %r{c}, ptr %ap{c}, align 16" for c in range(CHAINS)]
    out += ["  ret void", "}"]
    return out


def peak_ir() -> str:
    lines = [f'target datalayout = "{datalayout()}"', f'target triple = "{TRIPLE}"']
    lines.append(f"declare {V4} @llvm.wasm.relaxed.madd.v4f32({V4}, {V4}, {V4})")
    lines += _fn("peak_fma", True) + _fn("peak_muladd", False)
    lines.append('attributes #0 = { nounwind "wasm-export-name"="peak_fma" }')
    lines.append('attributes #1 = { nounwind "wasm-export-name"="peak_muladd" }')
    # no unrolling: the loop body is already CHAINS independent operations
    lines += ["!0 = distinct !{!0, !1}", '!1 = !{!"llvm.loop.unroll.disable"}']
    return "\n".join(lines) + "\n"


def plan_key() -> str:
    return f"peak|CHAINS={CHAINS}|v1"
