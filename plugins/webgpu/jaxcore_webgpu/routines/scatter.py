"""Scatter (update and add) into a zero-filled output: one thread per update element.

Pass 1 zero-fills the output. Add accumulates with atomics: `atomicAdd` for int32/uint32,
`atomicOr` for bool, a compare-and-swap loop on the bits for float32, and for float16 a
compare-and-swap on the 32-bit word holding the half (neighbouring halves never clobber each
other). Update with unique indices stores directly (float16 through the same word CAS). Update
with repeated indices keeps the last write in row-major order: pass 2 takes `atomicMax` of
(update number + 1) per target, pass 3 lets only that winner store. Out-of-range coordinates
(negative, or past the axis; int32 or uint32 indices) drop their update.
"""

from __future__ import annotations

import math

from jaxcore.dtype import DType
from jaxcore.routine import Routine, ScatterParams
from jaxcore_webgpu.program import Pass, Plan
from jaxcore_webgpu.routines.common import elementwise_pass, header, storage, wgsl_type


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


def plan_scatter(routine: Routine) -> Plan:
    p = routine.params
    assert isinstance(p, ScatterParams)
    dtype = routine.type.output_dtypes[0]
    n_out = math.prod(p.shape)
    n_up = math.prod(routine.type.input_shapes[0])
    if n_out == 0:
        return Plan(())
    ty = wgsl_type(dtype)
    k = len(p.axis)
    hdr = header([dtype])
    words = -(-n_out // 2) if dtype == DType.float16 else n_out
    accumulate = p.accumulate
    last_wins = not accumulate and not p.unique_indices
    passes: list[Pass] = []
    clear_decl = storage(0, "out0", "u32", False) + "\n"
    names, bind = ["out0"], [("out", 0)]
    body = "  out0[gid] = 0u;\n"
    scratch: tuple[int, ...] = ()
    if last_wins:
        clear_decl += storage(1, "win", "u32", False) + "\n"
        names.append("win")
        bind.append(("scratch", 0))
        scratch = (max(16, n_out * 4),)
        body += f"  if (gid < {n_out}u) {{ win[gid] = 0u; }}\n"
    passes.append(elementwise_pass(clear_decl, names, body, max(words, n_out if last_wins else 0), bind))
    if n_up == 0:
        return Plan(tuple(passes), scratch)

    def ins_decl(first_out: int) -> tuple[str, list[str], list[tuple[str, int]]]:
        d = hdr + storage(0, "in0", ty, True) + "\n"
        nm, bd = ["in0"], [("in", 0)]
        for a in range(k):
            d += storage(1 + a, f"in{1 + a}", wgsl_type(routine.type.input_dtypes[1 + a]), True) + "\n"
            nm.append(f"in{1 + a}")
            bd.append(("in", 1 + a))
        return d, nm, bd

    tgt = _target(routine)
    d, nm, bd = ins_decl(k + 1)
    ob = k + 1
    if accumulate:
        if dtype in (DType.int32, DType.uint32, DType.bool):
            d += storage(ob, "out0", f"atomic<{ty}>", False) + "\n"
            op = (
                "  if (in0[gid] != 0i) { atomicOr(&out0[t], 1i); }\n"
                if dtype == DType.bool
                else ("  atomicAdd(&out0[t], in0[gid]);\n")
            )
        elif dtype == DType.float32:
            d += storage(ob, "out0", "atomic<u32>", False) + "\n"
            op = (
                "  let v = in0[gid];\n  loop {\n    let old = atomicLoad(&out0[t]);\n"
                "    let nw = bitcast<u32>(bitcast<f32>(old) + v);\n"
                "    if (atomicCompareExchangeWeak(&out0[t], old, nw).exchanged) { break; }\n  }\n"
            )
        else:  # float16
            d += storage(ob, "out0", "atomic<u32>", False) + "\n"
            op = "  let v = in0[gid];\n" + _half_cas("v", True)
        body = tgt + "  if (!ok) { return; }\n" + op
        passes.append(elementwise_pass(d, [*nm, "out0"], body, n_up, [*bd, ("out", 0)]))
        return Plan(tuple(passes), scratch)

    def store_pass(guard: str, extra_decl: str = "", extra: list[str] | None = None, eb=None) -> Pass:
        dd, nn, bb = ins_decl(k + 1)
        if dtype == DType.float16:
            dd += storage(ob, "out0", "atomic<u32>", False) + "\n"
            op = "  let v = in0[gid];\n" + _half_cas("v", False)
        else:
            dd += storage(ob, "out0", ty, False) + "\n"
            op = "  out0[t] = in0[gid];\n"
        dd += extra_decl
        body = tgt + "  if (!ok) { return; }\n" + guard + op
        return elementwise_pass(dd, [*nn, "out0", *(extra or [])], body, n_up, [*bb, ("out", 0), *(eb or [])])

    if not last_wins:
        passes.append(store_pass(""))
        return Plan(tuple(passes), scratch)
    # last write wins: the largest update number per target, then only it stores
    d2 = d + storage(ob, "win", "atomic<u32>", False) + "\n"
    body = tgt + "  if (!ok) { return; }\n  atomicMax(&win[t], gid + 1u);\n"
    passes.append(elementwise_pass(d2, [*nm, "win"], body, n_up, [*bd, ("scratch", 0)]))
    passes.append(
        store_pass(
            "  if (win[t] != gid + 1u) { return; }\n",
            storage(ob + 1, "win", "u32", False) + "\n",
            ["win"],
            [("scratch", 0)],
        )
    )
    return Plan(tuple(passes), scratch)
