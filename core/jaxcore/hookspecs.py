"""The one hook a jaxcore plugin implements, and the `register` callback it is handed.

A plugin module (found through the entry-point group ``jaxcore``) writes::

    from jaxcore.plugin import hookimpl

    @hookimpl
    def jaxcore_register_devices(register):
        register("mydev", make_backend, api_version=1, priority=50, hint="pip install mydev-runtime")

Registering only records a factory; no device is created until `jaxcore.init()` or first use, so a
plugin's import and hook must stay cheap (import heavy runtimes inside the factory). The import + hook,
and later the factory, each run on a worker thread bounded by `JAXCORE_PLUGIN_TIMEOUT` (see registry).
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
          (missing hardware or runtime). Any other exception, SystemExit included, is recorded as a
          plugin error; one that does not return within `JAXCORE_PLUGIN_TIMEOUT` s leaves the device
          unavailable. It runs on a worker thread (the calling thread when the timeout is 0).
        - `api_version`: the `jaxcore.API_VERSION` the plugin was written against, as a literal number;
          a mismatch is recorded as an error instead of loading a backend built for another core.
        - `name`: if another plugin registers it too, the plugin whose entry point is named `name`
          keeps it, else the one loaded first; the other is reported (see `jaxcore.registry`).
        - `priority`: the ready device with the highest priority becomes the default device.
        - `hint`: a fix-it line shown when the factory fails (e.g. which package to install).
        - `plugin`/`version`: display name and version; default to the distribution that provides the
          entry point (or the module name and its `__version__` for programmatic registration).
        """
        ...


@hookspec
def jaxcore_register_devices(register: RegisterDevice) -> None:
    """Call `register(...)` once per device this plugin provides. Must not create devices."""
