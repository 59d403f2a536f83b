"""What every routine shader shares: WGSL types, binding declarations, folded grids, helpers.

A routine compiles to a `Plan` (jaxcore_webgpu.program): passes run in order in one compute pass,
each dispatch's writes visible to the next. Sizes are baked into the WGSL; per-pass values that
change between otherwise identical passes (a sort's stage) go in the pass's uniform block, so the
pipeline is shared. Work buffers are plan scratch: no routine reads memory it has not written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jaxcore.dtype import DType, byte_width
from jaxcore_webgpu.program import Binding, Pass
from jaxcore_webgpu.wgsl import WGSL_TRAITS, WGSLLanguage
from jaxcore_webgpu.wgsl_helpers import OPAQUE_UNIFORM

WG = 256  # threads per workgroup for element-parallel passes (the WebGPU default limit)


def wgsl_type(dtype: DType) -> str:
    """The WGSL type a routine keeps `dtype` in: the dialect's, bool as i32 (f16 is WGSL's here)."""
    return WGSLLanguage.storage_type_map.get(dtype) or WGSLLanguage.type_map[dtype]


def work_dtype(dtype: DType) -> DType:
    """float16 math runs in float32 and rounds on store (as the host reference does)."""
    return DType.float32 if dtype == DType.float16 else dtype


def header(dtypes: Iterable[DType]) -> str:
    return "enable f16;\n" if DType.float16 in set(dtypes) else ""


def helpers(names: Iterable[str]) -> str:
    """WGSL text of the dialect's helper functions `names` (and what they call)."""
    return WGSLLanguage(WGSL_TRAITS).render_helpers(set(names))


def storage(binding: int, name: str, ty: str, read_only: bool) -> str:
    access = "read" if read_only else "read_write"
    return f"@group(0) @binding({binding}) var<storage, {access}> {name}: array<{ty}>;"


@dataclass(frozen=True)
class Buf:
    """A storage buffer of a pass: its WGSL name and element type, and what the runtime binds there."""

    name: str
    ty: str
    binding: Binding
    read_only: bool = False


def inp(i: int, ty: str) -> Buf:
    return Buf(f"in{i}", ty, ("in", i), True)


def outp(i: int, ty: str) -> Buf:
    return Buf(f"out{i}", ty, ("out", i))


def scratch(name: str, ty: str, i: int) -> Buf:
    return Buf(name, ty, ("scratch", i))


def uniform_block(*fields: str) -> str:
    """The pass's uniform block `u`: four u32 fields, the unnamed ones padding (p1, p2, p3)."""
    names = [*fields] + [f"p{i}" for i in range(len(fields), 4)]
    return (
        "struct U { "
        + ", ".join(f"{f}: u32" for f in names)
        + " }\n@group(1) @binding(0) var<uniform> u: U;\n"
    )


def declare(bufs: Sequence[Buf]) -> str:
    """The buffers' declarations, bound at 0, 1, .. in order."""
    return "".join(storage(i, b.name, b.ty, b.read_only) + "\n" for i, b in enumerate(bufs))


def entry(wg: int, names: Sequence[str], lid: str = "lid", more: str = "") -> str:
    """The opening of `main` (workgroup id `wid`, local index `lid`, and the `more` builtins, e.g.
    ", @builtin(subgroup_size) sgs: u32"), touching every buffer."""
    return (
        f"@compute @workgroup_size({wg}, 1, 1)\n"
        "fn main(@builtin(workgroup_id) wid: vec3<u32>,"
        f" @builtin(local_invocation_index) {lid}: u32{more}) {{\n" + "".join(f"  _ = &{n};\n" for n in names)
    )


def fold(n_wg: int, max_dim: int = 65535) -> tuple[int, int, int]:
    if n_wg <= max_dim:
        return (max(n_wg, 0), 1, 1)
    gy = -(-n_wg // max_dim)
    return (-(-n_wg // gy), gy, 1)


def main(wg: int, grid: tuple[int, int, int], names: Sequence[str], body: str, more: str = "") -> str:
    """A compute entry point with `wgi` (linear workgroup index), `lid`, and `gid = wgi*wg + lid`
    (and `more` builtins, as `entry`)."""
    return (
        entry(wg, names, more=more)
        + f"  let wgi: u32 = wid.x + wid.y * {grid[0]}u;\n"
        + f"  let gid: u32 = wgi * {wg}u + lid;\n"
        + f"{body}\n}}\n"
    )


def elementwise_pass(
    bufs: Sequence[Buf], body: str, threads: int, head: str = "", tail: str = "",
    uniform: bytes | None = None, wg: int = WG,
) -> Pass:  # fmt: skip
    """A pass of `threads` threads (body guarded by `gid < threads`) over `bufs`, with `head`
    before their declarations (`enable f16;`) and `tail` after them (uniforms, helpers)."""
    grid = fold(-(-threads // wg))
    decls = head + declare(bufs) + tail
    code = decls + main(wg, grid, [b.name for b in bufs], f"  if (gid >= {threads}u) {{ return; }}\n{body}")
    if uniform is None and "var<uniform> jc_zero" in decls:
        uniform = OPAQUE_UNIFORM  # the uniform of the helpers' opaque operands
    return Pass(code, grid, tuple(b.binding for b in bufs), uniform=uniform)


def u32s(*values: int) -> bytes:
    vals = list(values) + [0] * (-len(values) % 4)
    return struct.pack(f"<{len(vals)}I", *vals)


def nbytes(dtype: DType, count: int) -> int:
    return max(16, -(-count * byte_width(dtype) // 4) * 4)
