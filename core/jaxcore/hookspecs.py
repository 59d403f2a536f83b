"""The one hook a jaxcore plugin implements, and the `register` callback it is handed.

A plugin module (found through the entry-point group ``jaxcore``) writes::

    import jaxcore

    @jaxcore.hookimpl
    def jaxcore_register_devices(register):
        register("mydev", make_backend, api_version=1, priority=50, hint="pip install mydev-runtime")

Registering only records a factory; no device is created until `jaxcore.init()` or first use, so a
plugin's import and hook must stay cheap (import heavy runtimes inside the factory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:
    from jaxcore.backend import Backend

PROJECT = "jaxcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

BackendFactory = Callable[[], "Backend"]


class RegisterDevice(Protocol):
    """The `register` callback handed to `jaxcore_register_devices`."""

    def __call__(
        self,
        name: str,
        factory: BackendFactory,
        *,
        api_version: int,
        priority: int = 0,
        hint: str = "",
        plugin: str | None = None,
        version: str | None = None,
    ) -> None:
        """Declare device `name`, created by `factory()` on first use.

        - `factory()` returns a Backend, or raises `jaxcore.DeviceUnavailable(reason, hint)` to decline
          (missing hardware or runtime). Any other exception is recorded as a plugin error.
        - `api_version`: the `jaxcore.API_VERSION` the plugin was written against, as a literal number;
          a mismatch is recorded as an error instead of loading a backend built for another core.
        - `priority`: the ready device with the highest priority becomes the default device.
        - `hint`: a fix-it line shown when the factory fails (e.g. which package to install).
        - `plugin`/`version`: display name and version; default to the distribution that provides the
          entry point (or the module name and its `__version__` for programmatic registration).
        """
        ...


@hookspec
def jaxcore_register_devices(register: RegisterDevice) -> None:
    """Call `register(...)` once per device this plugin provides. Must not create devices."""
