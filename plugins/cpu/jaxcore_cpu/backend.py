"""The cpu backend: host memory as numpy byte arrays, kernels interpreted, routines in numpy."""

from __future__ import annotations

import math

import numpy as np

from jaxcore.plugin import (
    BaseBackend,
    Capabilities,
    DType,
    Executable,
    Kernel,
    Routine,
    Routines,
    Shape,
    run_routine,
    to_numpy,
)
from jaxcore_cpu.executor import KernelPlan, plan_kernel, run_kernel

CAPABILITIES = Capabilities(
    dtypes=frozenset(DType),
    routines=frozenset(Routines),
    max_args=2**31 - 1,
    max_buffer_bytes=2**40,
    reference=True,
    description="numpy reference interpreter",
)


def typed_views(
    routine_shapes: tuple[Shape, ...], dtypes: tuple[DType, ...], buffers: list[np.ndarray]
) -> list[np.ndarray]:
    return [
        buf.view(to_numpy(dt)).reshape(shape) if math.prod(shape) else np.empty(shape, to_numpy(dt))
        for shape, dt, buf in zip(routine_shapes, dtypes, buffers)
    ]


class CpuBackend(BaseBackend):
    """Always available; its results define the contract the other devices are tested against."""

    name = "cpu"
    capabilities = CAPABILITIES

    def _alloc(self, size: int) -> np.ndarray:
        return np.empty(size, dtype=np.uint8)

    def _free(self, handle: np.ndarray) -> None:
        pass

    def _copyin(self, handle: np.ndarray, data: memoryview) -> None:
        handle[:] = np.frombuffer(data, dtype=np.uint8)

    def _copyout(self, handle: np.ndarray, start: int, count: int) -> bytes:
        return handle[start : start + count].tobytes()

    def _copy_buffer(self, src_handle: np.ndarray, dst_handle: np.ndarray, nbytes: int) -> None:
        dst_handle[:nbytes] = src_handle[:nbytes]

    def _compile_kernel(self, kernel: Kernel) -> KernelPlan:
        return plan_kernel(kernel)

    def _compile_routine(self, routine: Routine) -> None:
        return None

    def _run(self, exe: Executable, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        src = exe.source
        if isinstance(src, Kernel):
            run_kernel(exe.data, inputs, outputs[0])
            return
        t = src.type
        run_routine(
            src,
            typed_views(t.input_shapes, t.input_dtypes, inputs),
            typed_views(t.output_shapes, t.output_dtypes, outputs),
        )
