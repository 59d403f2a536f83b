"""The hook: registers device "example". Cheap on purpose; the backend is built on first use."""

from __future__ import annotations

import jaxcore
from jaxcore.plugin import RegisterDevice


def _create() -> jaxcore.Backend:
    from jaxcore_example.backend import ExampleBackend

    return ExampleBackend()


@jaxcore.hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    # api_version is the API this file was written against, as a literal: if jaxcore changes its
    # backend API, the registry reports a clear mismatch instead of loading a stale backend.
    # A negative priority: never chosen as the default device over a real one.
    register("example", _create, api_version=1, priority=-10, hint="pip install jaxcore-example")
