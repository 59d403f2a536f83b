"""Preparing a program's kernels and routines up front, concurrently where the device compiles so.

A frontend that knows the kernels of a step (an MLP's forward and backward) prepares them all before
the first dispatch: `prepare_many` runs each one's async twin (`prepare_kernel_async`,
`prepare_routine_async`) together, so a device whose compiler works beside Python (webgpu builds
pipelines with `create_compute_pipeline_async`; every BaseBackend compiles in a worker thread)
compiles them at once, and after it returns no first dispatch compiles. Works with any `Backend`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from jaxcore.backend import Backend, Executable
from jaxcore.kernel import Kernel
from jaxcore.routine import Routine


async def prepare_many_async(backend: Backend, items: Sequence[Kernel | Routine]) -> list[Executable]:
    """Every item prepared, in order; the first error (an `UnsupportedOpError`, a `TypeError` for
    something that is neither) is raised once all have finished."""
    jobs = []
    for item in items:
        if isinstance(item, Kernel):
            jobs.append(backend.prepare_kernel_async(item))
        elif isinstance(item, Routine):
            jobs.append(backend.prepare_routine_async(item))
        else:
            for job in jobs:
                job.close()
            raise TypeError(f"prepare_many takes Kernels and Routines, got {type(item).__name__}")
    return list(await asyncio.gather(*jobs))


def prepare_many(backend: Backend, items: Sequence[Kernel | Routine]) -> list[Executable]:
    """`prepare_many_async` from synchronous code (inside a running event loop, await that one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(prepare_many_async(backend, items))
    raise RuntimeError("prepare_many called inside a running event loop: await prepare_many_async")
