"""Registers the "wasm" device (priority 10: the default device wherever it can run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jaxcore
from jaxcore.plugin import RegisterDevice

if TYPE_CHECKING:
    from jaxcore.plugin import Backend

HINT = "pip install 'llvmlite>=0.50' 'wasmtime>=50' (jaxcore-wasm needs both, from PyPI)"


def _create() -> Backend:
    try:
        import llvmlite  # noqa: F401
        import wasmtime  # noqa: F401
    except ImportError as e:
        raise jaxcore.DeviceUnavailable(f"wasm needs llvmlite and wasmtime: {e}", HINT) from None
    from jaxcore_wasm.toolchain import ToolchainError, target_machine

    try:
        target_machine()
    except ToolchainError as e:
        raise jaxcore.DeviceUnavailable(str(e), HINT) from None
    from jaxcore_wasm.backend import WasmBackend

    return WasmBackend()


@jaxcore.hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    register("wasm", _create, api_version=1, priority=10, hint=HINT)
