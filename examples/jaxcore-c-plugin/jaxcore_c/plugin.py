"""The hook: registers device "c". Cheap on purpose: the backend and the compiler check come on first use."""

from __future__ import annotations

from jaxcore.plugin import Backend, RegisterDevice, hookimpl


def _create() -> Backend:
    from jaxcore_c.backend import CBackend

    return CBackend()


@hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    # Below cpu (0): an example, never the default device over the in-tree ones.
    register("c", _create, api_version=1, priority=-5, hint="install a C compiler (apt-get install gcc)")
