"""Registers the "webgpu" device.

Priority 5, below wasm (10): the registry must rank devices before any adapter is opened, and on
a machine whose only adapter is a software one (lavapipe) wasm is much faster; pick webgpu by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jaxcore
from jaxcore.hookspecs import RegisterDevice

if TYPE_CHECKING:
    from jaxcore.backend import Backend

HINT = (
    "pip install 'wgpu==0.32.0' and a Vulkan, Metal or DX12 driver "
    "(Debian/Ubuntu without a GPU: apt-get install mesa-vulkan-drivers libvulkan1)"
)


def _create() -> Backend:
    try:
        import wgpu  # noqa: F401
    except ImportError as e:
        raise jaxcore.DeviceUnavailable(f"webgpu needs the wgpu package: {e}", HINT) from None
    from jaxcore_webgpu.device import open_device

    gpu = open_device()  # raises DeviceUnavailable with the reason and the fix
    from jaxcore_webgpu.backend import WebGpuBackend

    return WebGpuBackend(gpu)


@jaxcore.hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    register("webgpu", _create, api_version=1, priority=5, hint=HINT)
