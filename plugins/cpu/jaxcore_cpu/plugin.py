"""Registers the "cpu" device: the numpy reference backend, always available, lowest priority."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jaxcore
from jaxcore.plugin import RegisterDevice

if TYPE_CHECKING:
    from jaxcore.plugin import Backend


def _create() -> Backend:
    from jaxcore_cpu.backend import CpuBackend  # lazy: registering must not build anything

    return CpuBackend()


@jaxcore.hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    register(
        "cpu",
        _create,
        api_version=1,
        priority=0,
        hint="reinstall the reference backend: pip install --force-reinstall jaxcore-cpu",
    )
