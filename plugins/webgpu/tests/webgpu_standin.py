"""A stand-in compiler for the queue's tests: hand-written WGSL for kernels described as jaxcore Kernels.

Each test says what a kernel computes as a Kernel (so dispatch validates sizes as usual) and gives
the shader that runs; the real compiler (jaxcore_webgpu.codegen) is not involved.
"""

from __future__ import annotations

import hashlib

import numpy as np

from jaxcore import AluExp, AluVar, DType, Kernel
from jaxcore.backend import Executable

_WGSL = {DType.float32: "f32", DType.int32: "i32", DType.uint32: "u32"}


def elementwise(gpu, n: int, nin: int, body: str, dtype: DType = DType.float32) -> Executable:
    """out[i] = body, with inputs in0..in{nin-1} (WGSL names) of `n` elements of `dtype`."""
    from jaxcore_webgpu.program import Pass, Plan

    t = _WGSL[dtype]
    read = [AluExp.global_index(dtype, g, n, AluVar.gidx) for g in range(nin)]
    exp = read[0] if nin else AluExp.const(dtype, 0)
    for r in read[1:]:
        exp = exp + r  # the Kernel only describes sizes here; `body` is what runs
    tag = int(hashlib.blake2b(body.encode(), digest_size=3).hexdigest(), 16)  # one kernel key per shader
    kernel = Kernel(nargs=nin, size=n, exp=exp + AluExp.const(dtype, tag))
    decls = "".join(f"@group(0) @binding({g}) var<storage, read> in{g}: array<{t}>;\n" for g in range(nin))
    code = (
        f"{decls}@group(0) @binding({nin}) var<storage, read_write> out: array<{t}>;\n"
        "@compute @workgroup_size(64)\n"
        "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
        f"  let i = id.x;\n  if (i < {n}u) {{ out[i] = {body}; }}\n}}\n"
    )
    bindings = tuple(("in", g) for g in range(nin)) + (("out", 0),)
    return gpu.compile_plan(kernel, Plan((Pass(code, (max(1, -(-n // 64)), 1, 1), bindings),)))


def put(gpu, x: np.ndarray) -> int:
    return gpu.malloc(x.nbytes, x.tobytes())


def get(gpu, slot: int, dtype=np.float32) -> np.ndarray:
    return np.frombuffer(gpu.read(slot), dtype)
