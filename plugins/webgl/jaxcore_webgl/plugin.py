"""Registers the "webgl" device (priority 5: below wasm, which runs everywhere without a GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxcore.plugin import DeviceUnavailable, RegisterDevice, hookimpl

if TYPE_CHECKING:
    from jaxcore.plugin import Backend

HINT = (
    "pip install 'PyOpenGL>=3.1.10' 'glfw>=2.11'; headless machines need Mesa's EGL and GLES "
    "(Debian: apt-get install libegl1 libegl-mesa0 libgles2 libgl1-mesa-dri)"
)


def _create() -> Backend:
    from jaxcore_webgl.context import ContextError

    try:
        import OpenGL  # noqa: F401
    except ImportError as e:
        raise DeviceUnavailable(f"webgl needs PyOpenGL: {e}", HINT) from None
    from jaxcore_webgl.backend import WebGLBackend

    try:
        return WebGLBackend()
    except ContextError as e:
        raise DeviceUnavailable(e.reason, e.hint or HINT) from None


@hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    register("webgl", _create, api_version=1, priority=5, hint=HINT)
