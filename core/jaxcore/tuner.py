"""Tuning: how a kernel's iteration space maps onto threads, loops and registers.

`tune_nullopt` is the plan every backend starts from: one thread per output element, a plain
loop over the reduction, with global views lowered to flat (possibly masked) reads. cpu and wasm
use it as is.

`tune_gpu` is the plan for a data-parallel device with workgroups (webgpu, and the same facts
serve a GL compute path). It decides the dimensions jax-js's `tuneWebgpu` works with, from the
kernel's GlobalViews (how each read's address moves with the output index and with the reduction
index) before they are lowered:

- **local** (`TuneSize.local`): threads per workgroup;
- **groups**: threads of one workgroup that cooperate on one output (strided over the reduction,
  so their reads are coalesced, then a shared-memory tree), chosen when every read is contiguous
  along the reduction (rows: softmax, matvec) rather than along the outputs;
- **split**: workgroups that share one output when there are too few outputs to fill the device
  (a full sum of 64M items): a first pass writes `size * split` partial results to scratch and a
  second pass folds each output's partials and applies the epilogue;
- **unroll**: reduction items per loop trip (the loop body repeated with `ridx + u`);
- **upcast**: outputs per thread (register blocking): 4 when some read does not move with the
  output index (a matmul's row of A, a broadcast), so one load per trip feeds four accumulators.

The expression the plan computes is always the nullopt one (`Special gidx`/`ridx` keep their
full ranges, so the simplifier's range facts stay true); the plan only says how the renderer
walks `gidx` and `ridx`.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcore.alu import AluExp, AluOp
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel


@dataclass(frozen=True)
class TuneSize:
    """groups: threads sharing one reduction; reduce: loop trips; unroll: items per trip;
    upcast: outputs per thread; local: threads per workgroup; split: workgroups per output
    (a second pass folds their partials)."""

    groups: int = 1
    reduce: int = 0
    unroll: int = 1
    upcast: int = 1
    local: int = 1
    split: int = 1


@dataclass(frozen=True)
class TuneResult:
    exp: AluExp
    epilogue: AluExp | None
    output_idx_exp: AluExp
    thread_count: int
    size: TuneSize


def tune_nullopt(kernel: Kernel) -> TuneResult:
    """No tuning: Special `gidx` over outputs, Special `ridx` over the reduction."""
    gidx = AluExp.special(DType.int32, "gidx", kernel.size)
    subs = {"gidx": gidx}
    exp = kernel.exp
    red = kernel.reduction
    if red is not None:
        subs["ridx"] = AluExp.special(DType.int32, "ridx", red.size)
        exp = AluExp.cast(red.dtype, exp)
    epilogue = None
    if red is not None:
        epilogue = red.epilogue.substitute({"gidx": gidx}).rewrite_global_views().simplify()
    return TuneResult(
        exp=exp.substitute(subs).rewrite_global_views().simplify(),
        epilogue=epilogue,
        output_idx_exp=gidx,
        thread_count=kernel.size,
        size=TuneSize(reduce=red.size if red else 0),
    )


@dataclass(frozen=True)
class GpuLimits:
    """What the tuner needs to know about a device."""

    max_workgroup_size: int = 256
    max_workgroups_per_dim: int = 65535
    max_workgroup_storage: int = 16384
    fill_workgroups: int = 1024  # workgroups that keep a large GPU busy
    local: int = 256  # preferred threads per workgroup for elementwise work
    # Copies of the reduction body one thread's loop may hold (unroll x upcast): a shader compiler
    # whose time grows faster than the code (SwiftShader's, on long exact-float helpers) wants few.
    max_copies: int = 16


@dataclass(frozen=True)
class ReadStrides:
    """How one global read's address moves: per +1 of the output index and of the reduction index.

    `None` when the address is not affine in that index over the sampled points.
    """

    gid: int
    d_gidx: int | None
    d_ridx: int | None


def read_strides(kernel: Kernel) -> list[ReadStrides]:
    """Address strides of every GlobalView/GlobalIndex read in `kernel.exp`, measured by evaluating
    the lowered index at a few sample points (exact for the affine views a kernel is made of)."""
    tuned = tune_nullopt(kernel)
    red = kernel.reduction
    n, r = max(kernel.size, 1), max(red.size if red else 1, 1)
    out = []
    for node in tuned.exp.nodes():
        if node.op != AluOp.GlobalIndex:
            continue
        idx = node.src[0]

        def at(g: int, k: int, idx: AluExp = idx) -> int:
            return int(idx.evaluate({"gidx": g, "ridx": k}))

        if idx.some(lambda e: e.op == AluOp.GlobalIndex):  # a gather: data-dependent address
            out.append(ReadStrides(node.arg[0], None, None))
            continue

        def slope(points: list[tuple[int, int]], axis: int) -> int | None:
            ds = set()
            for g, k in points:
                g2, k2 = (g + 1, k) if axis == 0 else (g, k + 1)
                if g2 >= n or k2 >= r:
                    continue
                ds.add(at(g2, k2) - at(g, k))
            return ds.pop() if len(ds) == 1 else (0 if not ds else None)

        pts = [(0, 0), (n // 2, r // 2), (max(n - 2, 0), max(r - 2, 0)), (n // 3, r // 5)]
        out.append(ReadStrides(node.arg[0], slope(pts, 0), slope(pts, 1) if red else 0))
    return out


def _pow2_floor(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


def tune_gpu(kernel: Kernel, limits: GpuLimits | None = None) -> TuneResult:
    """The nullopt expression with a GPU thread plan (see the module docstring)."""
    lim = limits or GpuLimits()
    base = tune_nullopt(kernel)
    red = kernel.reduction
    local = min(lim.local, lim.max_workgroup_size)
    if red is None or red.size == 0 or kernel.size == 0:
        size = TuneSize(reduce=base.size.reduce, local=local)
        return TuneResult(base.exp, base.epilogue, base.output_idx_exp, kernel.size, size)
    n, r = kernel.size, red.size
    strides = read_strides(kernel)
    # Cooperate on one output when the reads walk memory along the reduction (coalesced across
    # the group), or when there are too few outputs to give every lane of the device work.
    rows_contiguous = all(s.d_ridx is not None and abs(s.d_ridx) <= 1 for s in strides)
    few_outputs = n * 32 < lim.fill_workgroups * lim.local
    group = 1
    if r >= 128 and (rows_contiguous or few_outputs):
        group = min(_pow2_floor(r // 4) if r >= 128 else 1, 256, _pow2_floor(lim.max_workgroup_size))
        group = max(group, 32)
    split = 1
    if group > 1 and n < lim.fill_workgroups and r >= group * 64:
        split = min(-(-lim.fill_workgroups // n), -(-r // (group * 16)))
        split = max(split, 1)
    # Upcast: four outputs per thread when some read does not move with the output (it is then
    # loaded once per trip for all four: register blocking) and there are threads to spare.
    upcast = 1
    reuse = any(s.d_gidx == 0 for s in strides)
    if group == 1 and reuse and n % 4 == 0 and n // 4 >= lim.fill_workgroups * 16:
        upcast = 4
    unroll = 1
    if group == 1:
        for u in (4, 2):
            if r % u == 0 and r >= 2 * u:
                unroll = u
                break
    if upcast > lim.max_copies:
        upcast = 1
    while unroll * upcast > lim.max_copies and unroll > 1:
        unroll //= 2
    size = TuneSize(
        groups=group,
        reduce=r,
        unroll=unroll,
        upcast=upcast,
        local=group if group > 1 else local,
        split=split,
    )
    threads = n * group * split // upcast
    return TuneResult(base.exp, base.epilogue, base.output_idx_exp, threads, size)
