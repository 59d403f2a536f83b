"""Softmax: float32 rows in one pass, the core's `row_softmax` program in the WGSL dialect.

The program is spelled without the exact-subnormal helpers even where the device flushes float32
subnormals: its sum is at least 1 (the max's own term), so a flushed subnormal term moves it by
less than the rounding of any order of it, and an output below the smallest normal may be
flushed (Softmax is held to the tolerance of its exp, `jaxcore.conformance.tolerances`). That
keeps the sum's subgroup fold and a third of the work. float16 and float64 are not declared here
(`UNDECLARED_DTYPES`): the base class runs them as the core's three kernels
(`jaxcore.canonical.softmax_kernels`), as on a device without a Softmax of its own.
"""

from __future__ import annotations

import math
from dataclasses import replace

from jaxcore.routine import Routine, SoftmaxParams
from jaxcore.row_program import row_softmax
from jaxcore_webgpu.codegen import WgslTarget, compile_program, gpu_target
from jaxcore_webgpu.program import Plan, plan_from_shaders
from jaxcore_webgpu.wgsl import WGSL_TRAITS


def plan_softmax(routine: Routine, target: WgslTarget) -> Plan:
    params = routine.params
    assert isinstance(params, SoftmaxParams)
    shape = routine.type.input_shapes[0]
    rows, cols = math.prod(shape[:-1]), shape[-1]
    if rows * cols == 0:
        return Plan(())
    plain = replace(target, exact_subnormals=False)
    program = row_softmax(gpu_target(plain), WGSL_TRAITS, rows, cols, params.log)
    return plan_from_shaders(compile_program(program, plain))
