"""Scatter (update and add) into a zero-filled output: one thread per update element.

Pass 1 zero-fills the output. Add accumulates with atomics: `atomicAdd` for int32/uint32,
`atomicOr` for bool, a compare-and-swap loop on the bits for float32, and for float16 a
compare-and-swap on the 32-bit word holding the half (neighbouring halves never clobber each
other). Where the device has float32 atomics (`WgslTarget.has_f32_atomics`, native only) a
float32 add takes `atomicAdd` for every update of magnitude 2^-102 or more: sums of such values
are multiples of 2^-125, never subnormal, so a device that flushes subnormals in its atomics
still rounds them exactly. The rare smaller updates raise a flag and a second pass, idle unless
it is set, adds them by compare-and-swap with the exact add.

Update with unique indices stores directly (float16 through the same word CAS). Update with
repeated indices keeps the last write in row-major order: pass 2 takes `atomicMax` of (update
number + 1) per target, pass 3 lets only that winner store. Out-of-range coordinates (negative,
or past the axis; int32 or uint32 indices) drop their update.
"""

from __future__ import annotations

import math

from jaxcore.dtype import DType
from jaxcore.routine import Routine, ScatterParams
from jaxcore_webgpu.program import Plan
from jaxcore_webgpu.routines.common import (
    Buf,
    elementwise_pass,
    header,
    helpers,
    inp,
    outp,
    scratch,
    wgsl_type,
)

SMALL = "abs(v) < 0x1p-102f"  # an update the float32 atomics may not add exactly (module docstring)


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def _target(routine: Routine) -> str:
    """WGSL computing `t` (u32 flat output offset) and `ok` (in range) of update `gid`."""
    p = routine.params
    assert isinstance(p, ScatterParams)
    ushape = routine.type.input_shapes[0]
    idx_shapes = routine.type.input_shapes[1:]
    idx_dtypes = routine.type.input_dtypes[1:]
    rank = len(ushape)
    free_axes = [a for a in range(len(p.shape)) if a not in p.axis]
    index_rank = rank - len(free_axes)
    wend = p.out_dim + index_rank
    free_dims = [d for d in range(rank) if not p.out_dim <= d < wend]
    st = _strides(p.shape)
    lines = ["  var rem = gid;"]
    for d in range(rank - 1, -1, -1):
        lines.append(f"  let c{d} = rem % {max(ushape[d], 1)}u; rem = rem / {max(ushape[d], 1)}u;")
    lines.append("  var t = 0u; var ok = true;")
    for axis, dim in zip(free_axes, free_dims):
        lines.append(f"  t = t + c{dim} * {st[axis]}u;")
    for a, (axis, ishape, idt) in enumerate(zip(p.axis, idx_shapes, idx_dtypes)):
        lead = wend - len(ishape)
        ist = _strides(ishape)
        terms = [f"c{lead + e} * {ist[e]}u" for e in range(len(ishape)) if ishape[e] != 1]
        flat = " + ".join(terms) if terms else "0u"
        lines.append(f"  let v{a} = in{1 + a}[{flat}];")
        if idt == DType.int32:
            lines.append(f"  ok = ok && v{a} >= 0i && v{a} < {p.shape[axis]}i;")
        else:
            lines.append(f"  ok = ok && v{a} < {p.shape[axis]}u;")
        lines.append(f"  t = t + u32(v{a}) * {st[axis]}u;")
    return "\n".join(lines) + "\n"


def _half_cas(value: str, add: bool) -> str:
    new = f"(f16(cur) + {value})" if add else value
    return (
        "  let w = t >> 1u; let sh = (t & 1u) * 16u;\n"
        "  loop {\n"
        "    let old = atomicLoad(&out0[w]);\n"
        "    let cur = unpack2x16float(old)[t & 1u];\n"
        f"    let hb = pack2x16float(vec2<f32>(f32({new}), 0.0)) & 0xffffu;\n"
        "    let nw = (old & ~(0xffffu << sh)) | (hb << sh);\n"
        "    if (atomicCompareExchangeWeak(&out0[w], old, nw).exchanged) { break; }\n"
        "  }\n"
    )


def _float_cas(exact: bool) -> tuple[str, str]:
    """WGSL adding `v` to float32 slot `t` of a u32 view by compare-and-swap, and the helpers it
    calls; `exact`: with the add exact on subnormals (WgslTarget.exact_subnormals)."""
    total = "jc_add_f32(bitcast<f32>(old), v)" if exact else "bitcast<f32>(old) + v"
    code = (
        "  loop {\n    let old = atomicLoad(&out0[t]);\n"
        f"    let nw = bitcast<u32>({total});\n"
        "    if (atomicCompareExchangeWeak(&out0[t], old, nw).exchanged) { break; }\n  }\n"
    )
    return code, helpers(["jc_add_f32"]) if exact else ""


def _update(dtype: DType, ty: str, accumulate: bool, exact: bool) -> tuple[str, str, str]:
    """out0's element type, the WGSL that adds or stores update `gid` at `t`, and its helpers."""
    if accumulate and dtype in (DType.int32, DType.uint32, DType.bool):
        if dtype == DType.bool:
            return f"atomic<{ty}>", "  if (in0[gid] != 0i) { atomicOr(&out0[t], 1i); }\n", ""
        return f"atomic<{ty}>", "  atomicAdd(&out0[t], in0[gid]);\n", ""
    if accumulate and dtype == DType.float32:
        cas, tail = _float_cas(exact)
        return "atomic<u32>", "  let v = in0[gid];\n" + cas, tail
    if accumulate or dtype == DType.float16:  # float16 (a float64 add: undeclared)
        return "atomic<u32>", "  let v = in0[gid];\n" + _half_cas("v", accumulate), ""
    return ty, "  out0[t] = in0[gid];\n", ""


def plan_scatter(routine: Routine, target: object = None) -> Plan:
    p = routine.params
    assert isinstance(p, ScatterParams)
    dtype = routine.type.output_dtypes[0]
    n_out = math.prod(p.shape)
    n_up = math.prod(routine.type.input_shapes[0])
    if n_out == 0:
        return Plan(())
    ty = wgsl_type(dtype)
    words = -(-n_out // 2) if dtype == DType.float16 else n_out
    last_wins = not p.accumulate and not p.unique_indices
    clear, body = [outp(0, "u32")], "  out0[gid] = 0u;\n"
    sizes: tuple[int, ...] = ()
    if last_wins:
        clear.append(scratch("win", "u32", 0))
        sizes = (max(16, n_out * 4),)
        body += f"  if (gid < {n_out}u) {{ win[gid] = 0u; }}\n"
    passes = [elementwise_pass(clear, body, max(words, n_out if last_wins else 0))]
    if n_up == 0:
        return Plan(tuple(passes), sizes)
    ins = [inp(0, ty)] + [inp(1 + a, wgsl_type(routine.type.input_dtypes[1 + a])) for a in range(len(p.axis))]
    exact = getattr(target, "exact_subnormals", True)
    tgt = _target(routine) + "  if (!ok) { return; }\n"
    if p.accumulate and dtype == DType.float32 and getattr(target, "has_f32_atomics", False):
        return _float_atomic_add(ins, tgt, n_out, n_up, exact)
    out_ty, op, tail = _update(dtype, ty, p.accumulate, exact)
    out = Buf("out0", out_ty, ("out", 0))
    hdr = header([dtype])
    if not last_wins:
        passes.append(elementwise_pass([*ins, out], tgt + op, n_up, hdr, tail))
        return Plan(tuple(passes), sizes)
    # last write wins: the largest update number per target, then only it stores
    win = scratch("win", "atomic<u32>", 0)
    passes.append(elementwise_pass([*ins, win], tgt + "  atomicMax(&win[t], gid + 1u);\n", n_up, hdr))
    guard = "  if (win[t] != gid + 1u) { return; }\n"
    passes.append(elementwise_pass([*ins, out, scratch("win", "u32", 0)], tgt + guard + op, n_up, hdr))
    return Plan(tuple(passes), sizes)


def _float_atomic_add(ins: list[Buf], tgt: str, n_out: int, n_up: int, exact: bool) -> Plan:
    """Float32 add through the device's float atomics, the small updates after (module
    docstring). Scratch 0 is the flag: cleared with the output, raised by a small update."""
    flag = scratch("flag", "u32", 0)
    clear = "  out0[gid] = 0u;\n  if (gid == 0u) { flag[0] = 0u; }\n"
    big = "  let v = in0[gid];\n  if (" + SMALL + ") { flag[0] = 1u; return; }\n"
    small = "  if (flag[0] == 0u) { return; }\n  let v = in0[gid];\n  if (!(" + SMALL + ")) { return; }\n"
    cas, tail = _float_cas(exact)
    passes = [
        elementwise_pass([outp(0, "u32"), flag], clear, n_out),
        elementwise_pass([*ins, Buf("out0", "atomic<f32>", ("out", 0)), flag], big + tgt
                         + "  atomicAdd(&out0[t], v);\n", n_up),
        elementwise_pass([*ins, Buf("out0", "atomic<u32>", ("out", 0)), flag], small + tgt + cas, n_up,
                         tail=tail),
    ]  # fmt: skip
    return Plan(tuple(passes), (16,))
