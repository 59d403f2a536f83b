"""Scatter as a gather kernel: each output element folds over the updates that land on it.

Integer render targets cannot blend, and a point per update would overwrite the three other
words of its texel, so instead every output element runs a reduction over all update elements
(in update order): `add` sums the matching updates (bool: OR), `update` keeps the last matching
update index (a Max reduction) and reads it in the epilogue. Out-of-range coordinates match
nothing, so they are dropped. The kernel is ordinary AluExp, so it goes through the same GLSL
dialect (exact arithmetic, unrolled long loops) as every kernel; the cost is out x updates.
"""

from __future__ import annotations

import math

from jaxcore.plugin import AluExp, AluOp, AluVar, DType, Kernel, Reduction, Routine, ScatterParams

I32 = DType.int32


def _strides(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[i + 1 :]) for i in range(len(shape))]


def scatter_kernel(routine: Routine) -> Kernel:
    p = routine.params
    assert isinstance(p, ScatterParams)
    t = routine.type
    upd_shape, idx_shapes = t.input_shapes[0], t.input_shapes[1:]
    dtype = t.input_dtypes[0]
    shape = tuple(p.shape)
    rank = len(upd_shape)
    free_axes = [a for a in range(len(shape)) if a not in p.axis]
    index_rank = rank - len(free_axes)
    window_end = p.out_dim + index_rank
    free_dims = [d for d in range(rank) if not p.out_dim <= d < window_end]
    n_upd = math.prod(upd_shape)
    out_strides = _strides(shape)
    u = AluVar.ridx
    pos = [  # coordinates of update element u
        AluExp.mod(AluExp.idiv(u, AluExp.i32(st)), AluExp.i32(d)) if d > 1 else AluExp.i32(0)
        for d, st in zip(upd_shape, _strides(upd_shape))
    ]
    target = AluExp.i32(0)
    for axis, dim in zip(free_axes, free_dims):
        target = AluExp.add(target, AluExp.mul(pos[dim], AluExp.i32(out_strides[axis])))
    valid = AluExp.bool_(True)
    for gid, (axis, ishape) in enumerate(zip(p.axis, idx_shapes), start=1):
        lead = window_end - len(ishape)
        flat = AluExp.i32(0)
        for k, (d, st) in enumerate(zip(ishape, _strides(ishape))):
            if d > 1:
                flat = AluExp.add(flat, AluExp.mul(pos[lead + k], AluExp.i32(st)))
        idt = t.input_dtypes[gid]
        c = AluExp.global_index(idt, gid, max(1, math.prod(ishape)), flat)
        lim = AluExp.const(idt, shape[axis])
        ok = AluExp.cmplt(c, lim)
        if idt == I32:
            ok = AluExp.bit_and(ok, AluExp.cmplt(AluExp.i32(-1), c))
        valid = AluExp.bit_and(valid, ok)
        ci = AluExp.bitcast(I32, c) if idt != I32 else c
        target = AluExp.add(target, AluExp.mul(ci, AluExp.i32(out_strides[axis])))
    hit = AluExp.bit_and(valid, AluExp.cmpne(AluExp.cmpne(target, AluVar.gidx), AluExp.bool_(True)))
    size = math.prod(shape)
    nargs = 1 + len(idx_shapes)
    value = AluExp.global_index(dtype, 0, max(1, n_upd), u)
    if p.accumulate:
        exp = AluExp.where(hit, value, AluExp.const(dtype, 0))
        return Kernel(nargs, size, exp, Reduction(dtype, AluOp.Add, n_upd))
    last = AluVar.acc(I32)
    read = AluExp.global_index(dtype, 0, max(1, n_upd), AluExp.max(last, AluExp.i32(0)))
    epilogue = AluExp.where(AluExp.cmplt(last, AluExp.i32(0)), AluExp.const(dtype, 0), read)
    exp = AluExp.where(hit, u, AluExp.i32(-1))
    return Kernel(nargs, size, exp, Reduction(I32, AluOp.Max, n_upd, epilogue))
