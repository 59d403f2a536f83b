"""A tiny numpy backend: bytearray buffers, kernels run by the core's reference interpreter.

It declares a deliberately small capability set (float32, int32, bool; the Sort routine only),
so the conformance suite shows everything else raising UnsupportedOpError/UnsupportedRoutineError
at prepare time instead of computing a wrong answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxcore.plugin import (
    BaseBackend,
    Capabilities,
    DType,
    Executable,
    HostMemory,
    Interpreter,
    Kernel,
    Routine,
    Routines,
    arith,
    run_routine_on_buffers,
    to_numpy,
    tune_nullopt,
)

_FOLD = {"Add": "add", "Mul": "mul", "Min": "min", "Max": "max"}


class ExampleBackend(HostMemory, BaseBackend):  # storage: a bytearray per buffer (HostMemory)
    name = "example"
    capabilities = Capabilities(
        dtypes=frozenset({DType.float32, DType.int32, DType.bool}),
        routines=frozenset({Routines.Sort}),
        max_args=4,
        description="example plugin: numpy interpreter, float32/int32/bool, Sort only",
    )

    # ---- compile: the core's untuned plan is enough for an interpreter ----
    def _compile_kernel(self, kernel: Kernel) -> Any:
        return tune_nullopt(kernel)

    def _compile_routine(self, routine: Routine) -> Any:
        return None

    # ---- run ----
    def _run(self, exe: Executable, inputs: list[bytearray], outputs: list[bytearray]) -> None:
        src = exe.source
        if isinstance(src, Routine):
            run_routine_on_buffers(src, inputs, outputs)
            return
        out = np.frombuffer(outputs[0], dtype=to_numpy(src.dtype))

        def read(node: Any, index: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
            data = np.frombuffer(inputs[node.arg[0]], dtype=to_numpy(node.dtype))
            idx = np.asarray(index, dtype=np.int64)
            if mask is not None:
                idx = np.where(mask, idx, 0)
            # An unmasked read outside the buffer gives 0 (the contract: never a crash, never
            # another buffer's data).
            inside = (idx >= 0) & (idx < data.size)
            return np.where(inside, data[np.where(inside, idx, 0)] if data.size else 0, 0).astype(data.dtype)

        tuned = exe.data
        gidx = np.arange(src.size, dtype=np.int32)
        red = src.reduction
        if red is None:
            value = Interpreter({"gidx": gidx}, read).run(tuned.exp)
        else:
            acc = np.full(src.size, red.identity, dtype=to_numpy(red.dtype))
            for j in range(red.size):  # fold in order, one op at a time, as the contract says
                item = Interpreter({"gidx": gidx, "ridx": np.int32(j)}, read).run(tuned.exp)
                acc = arith(_FOLD[red.op.value], acc, np.broadcast_to(item, acc.shape), red.dtype)
            value = Interpreter({"gidx": gidx, "acc": acc}, read).run(tuned.epilogue)
        out[:] = np.broadcast_to(value, out.shape)
