"""Device registry: plugin discovery, lazy device creation and the default device.

Plugins are found through the entry-point group ``jaxcore`` (or `register_plugin`) and only record
factories; a device is created on `init()` or first use. Every failure stays with the plugin or device
that caused it (import error, hook error, API-version mismatch, factory error) and is kept with its
traceback and a fix-it hint, so one broken plugin never hides the others. Nothing here names a device:
the default is simply the ready device with the highest priority.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.metadata as md
import re
import sys
import threading
import traceback as tb
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import pluggy

from jaxcore import hookspecs
from jaxcore import settings as _settings
from jaxcore.backend import API_VERSION, Backend, Capabilities
from jaxcore.settings import Settings

ENTRY_POINT_GROUP = "jaxcore"
Status = Literal["ready", "unavailable", "error", "not-initialised"]
_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")


class DeviceUnavailable(Exception):
    """Raised by a factory to decline politely: the device cannot run here, and `hint` says how to fix it."""

    def __init__(self, reason: str, hint: str = "") -> None:
        self.reason, self.hint = reason, hint
        super().__init__(f"{reason} ({hint})" if hint else reason)


class PluginError(RuntimeError):
    """A plugin failed to load or register (raised only under JAXCORE_STRICT_PLUGINS=1)."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the registry knows about one device; `capabilities` is set once it is ready."""

    name: str
    plugin: str
    version: str
    priority: int
    status: Status
    reason: str = ""
    hint: str = ""
    traceback: str = ""
    capabilities: Capabilities | None = None


@dataclass(frozen=True)
class PluginInfo:
    """One loaded (or failed) plugin: where it came from and which devices it registered."""

    name: str
    module: str
    version: str
    status: Literal["ok", "error"]
    devices: tuple[str, ...] = ()
    error: str = ""
    hint: str = ""
    traceback: str = ""


@dataclass
class _Device:
    name: str
    factory: hookspecs.BackendFactory
    priority: int
    plugin: str
    version: str
    hint: str
    status: Status = "not-initialised"
    reason: str = ""
    fix: str = ""
    trace: str = ""
    backend: Backend | None = None

    def info(self) -> DeviceInfo:
        caps = self.backend.capabilities if self.backend is not None else None
        return DeviceInfo(
            self.name, self.plugin, self.version, self.priority, self.status,
            self.reason, self.fix, self.trace, caps,
        )  # fmt: skip


@dataclass
class _Plugin:
    name: str
    module: str
    version: str
    devices: list[str] = field(default_factory=list)
    error: str = ""
    hint: str = ""
    trace: str = ""

    def info(self) -> PluginInfo:
        status: Literal["ok", "error"] = "error" if self.error else "ok"
        return PluginInfo(
            self.name,
            self.module,
            self.version,
            status,
            tuple(self.devices),
            self.error,
            self.hint,
            self.trace,
        )


def _version_of(obj: object) -> str:
    """`__version__` of the object, else of its top-level package (a plugin module rarely has one)."""
    version = getattr(obj, "__version__", None)
    if version is None and isinstance(obj, types.ModuleType):
        version = getattr(sys.modules.get(obj.__name__.partition(".")[0]), "__version__", None)
    return str(version) if version is not None else ""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Registry:
    """Plugins, devices and the default device; one lives in this module, tests may make their own."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._lock = threading.RLock()
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._plugins: dict[str, _Plugin] = {}
        self._devices: dict[str, _Device] = {}
        self._ready: dict[str, Backend] = {}  # read without the lock on the hot path
        self._discovered = False
        self._default: str | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = _settings.current()
        return self._settings

    # ---- loading plugins -----------------------------------------------------------------
    def discover(self) -> None:
        """Load installed plugins once (entry points, filtered by the settings)."""
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            s = self.settings
            wanted = list(s.plugins)
            eps = {ep.name: ep for ep in md.entry_points(group=ENTRY_POINT_GROUP)}
            by_module = {ep.value: name for name, ep in eps.items()}
            chosen = set(eps)
            if s.disable_plugin_autoload:  # only what JAXCORE_PLUGINS names, by entry point or module
                chosen = {n for n in wanted if n in eps} | {by_module[m] for m in wanted if m in by_module}
            dists = [getattr(getattr(ep, "dist", None), "name", None) for ep in eps.values()]
            for name in sorted(chosen):
                ep = eps[name]
                dist = getattr(ep, "dist", None)
                pname = dist.name if dist is not None else name
                if dist is not None and dists.count(dist.name) > 1:  # one distribution, several plugins
                    pname = f"{dist.name}[{name}]"
                version = dist.version if dist is not None else ""
                self._load(pname, ep.value, version, ep.load, key=name)
            for item in wanted:
                if item not in eps and item not in by_module:
                    self._load(item, item, "", lambda m=item: importlib.import_module(m), key=item)
            self._discovered = True

    def _load(self, name: str, module: str, version: str, load: Any, key: str) -> None:
        if name in self._plugins:
            return
        try:
            obj = load()
        except Exception as exc:
            missing = exc.name if isinstance(exc, ModuleNotFoundError) and exc.name else None
            if missing is not None and not (module == missing or module.startswith(missing + ".")):
                hint = f"install what it needs (pip install {missing.split('.')[0]}) or "
            else:
                hint = f"reinstall or uninstall the plugin (pip uninstall {name}), or "
            hint += "set JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1 and list the plugins you want in JAXCORE_PLUGINS"
            hint += f" (this one is '{key}')"
            self._fail(_Plugin(name, module, version), f"import failed: {_describe(exc)}", hint, exc)
            return
        if not version:
            version = _version_of(obj)
        self._add(obj, _Plugin(name, module, version))

    def register_plugin(
        self, plugin: object, name: str | None = None, version: str | None = None
    ) -> PluginInfo:
        """Register a module or object carrying `@jaxcore.hookimpl` functions (tests, embedded hosts)."""
        with self._lock:
            module = getattr(plugin, "__name__", None) or type(plugin).__qualname__
            pname = name or module
            if pname in self._plugins:
                raise ValueError(
                    f"a plugin named '{pname}' is already registered; pass name=... to register_plugin"
                )
            rec = _Plugin(pname, module, version if version is not None else _version_of(plugin))
            self._add(plugin, rec)
            return rec.info()

    def _add(self, obj: object, rec: _Plugin) -> None:
        self._plugins[rec.name] = rec
        try:
            self._pm.register(obj, name=rec.name)
        except Exception as exc:
            hint = "hook functions must match `jaxcore_register_devices(register)` (see jaxcore.hookspecs)"
            self._fail(rec, f"invalid plugin: {_describe(exc)}", hint, exc)
            return
        impls = [i for i in self._pm.hook.jaxcore_register_devices.get_hookimpls() if i.plugin is obj]
        if not impls:
            unmarked = callable(getattr(obj, "jaxcore_register_devices", None))
            why = "its jaxcore_register_devices lacks @jaxcore.hookimpl" if unmarked else "it has no hooks"
            self._fail(rec, f"plugin registers no devices: {why}", "decorate the hook with @jaxcore.hookimpl")
            return
        staged: list[_Device] = []
        register = self._make_register(rec, staged)
        try:
            for impl in impls:
                impl.function(**{a: register for a in impl.argnames})
        except Exception as exc:
            hint = f"a bug in plugin '{rec.name}': report it to its authors, or uninstall it"
            self._fail(rec, f"jaxcore_register_devices raised {_describe(exc)}", hint, exc)
            return
        for dev in staged:
            if dev.name in self._devices:
                other = self._devices[dev.name].plugin
                rec.error = f"device '{dev.name}' is already registered by plugin '{other}'"
                rec.hint = f"uninstall one of '{other}' and '{rec.name}'"
                continue
            self._devices[dev.name] = dev
            rec.devices.append(dev.name)
        if rec.error and self.settings.strict_plugins:
            raise PluginError(f"plugin '{rec.name}': {rec.error}")

    def _fail(self, rec: _Plugin, error: str, hint: str, exc: BaseException | None = None) -> None:
        rec.error, rec.hint = error, hint
        rec.trace = "".join(tb.format_exception(exc)) if exc is not None else ""
        self._plugins[rec.name] = rec
        if self.settings.strict_plugins:
            raise PluginError(f"plugin '{rec.name}': {error}") from exc

    def _make_register(self, rec: _Plugin, staged: list[_Device]) -> hookspecs.RegisterDevice:
        def register(
            name: str,
            factory: hookspecs.BackendFactory,
            *,
            api_version: int,
            priority: int = 0,
            hint: str = "",
            plugin: str | None = None,
            version: str | None = None,
        ) -> None:
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"device name must be lowercase letters, digits, '-' or '_', got {name!r}")
            if not callable(factory):
                raise TypeError(f"factory for device '{name}' must be callable, got {type(factory).__name__}")
            if not isinstance(priority, int) or not isinstance(api_version, int):
                raise TypeError(f"priority and api_version must be ints for device '{name}'")
            dev = _Device(name, factory, priority, plugin or rec.name, version or rec.version, hint)
            if api_version != API_VERSION:
                newer = api_version > API_VERSION
                dev.status = "error"
                dev.reason = (
                    f"plugin was built for jaxcore API {api_version}, this jaxcore has API {API_VERSION}"
                )
                dev.fix = (
                    "upgrade jaxcore (pip install -U jaxcore)"
                    if newer
                    else f"upgrade the plugin (pip install -U {dev.plugin}) or install an older jaxcore"
                )
            staged.append(dev)

        return register

    # ---- devices -------------------------------------------------------------------------
    def _known(self) -> list[str]:
        return sorted(self._devices, key=lambda n: (-self._devices[n].priority, n))

    def _check_names(self, names: Iterable[str], source: str = "") -> list[str]:
        names = list(names)
        unknown = [n for n in names if n not in self._devices]
        if unknown:
            known = ", ".join(self._known()) or "none"
            failed = [p.name for p in self._plugins.values() if p.error]
            msg = f"unknown device{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}{source}"
            msg += f"; known devices: {known}"
            if failed:
                msg += f" (plugins that failed to load: {', '.join(failed)}; see `jaxcore devices`)"
            raise ValueError(msg + ". Install the plugin that provides it (pip install jaxcore-<device>).")
        return names

    def init(self, devices: Iterable[str] | str | None = None) -> list[str]:
        """Create the named devices (all allowed ones by default); return every ready device, best first."""
        self.discover()
        with self._lock:
            if isinstance(devices, str):
                devices = [devices]
            if devices is None:
                allowed = self.settings.devices
                if allowed is not None:
                    self._check_names(allowed, " in JAXCORE_DEVICES")
                names = self._known()
            else:
                names = self._check_names(devices)
            for name in names:
                self._init_one(self._devices[name])
            return [n for n in self._known() if self._devices[n].status == "ready"]

    def _init_one(self, dev: _Device) -> None:
        if dev.status != "not-initialised":
            return
        allowed = self.settings.devices
        if allowed is not None and dev.name not in allowed:
            dev.status, dev.reason = "unavailable", f"not listed in JAXCORE_DEVICES={','.join(allowed)}"
            dev.fix = f"add '{dev.name}' to JAXCORE_DEVICES, or unset it"
            return
        dev.status = "unavailable"  # guards against a factory that asks for its own device
        dev.reason = "initialisation in progress"
        try:
            backend = dev.factory()
        except DeviceUnavailable as exc:
            dev.status, dev.reason, dev.fix = "unavailable", exc.reason, exc.hint or dev.hint
            return
        except ModuleNotFoundError as exc:
            dev.status, dev.reason = "unavailable", f"missing module: {exc.name or exc}"
            dev.fix = dev.hint or f"pip install {exc.name}"
            dev.trace = "".join(tb.format_exception(exc))
            return
        except Exception as exc:
            dev.status, dev.reason = "error", f"creating the backend failed: {_describe(exc)}"
            dev.fix = (
                dev.hint
                or f"a bug in plugin '{dev.plugin}': report it, or exclude the device with JAXCORE_DEVICES"
            )
            dev.trace = "".join(tb.format_exception(exc))
            return
        if backend is None:
            dev.status, dev.reason, dev.fix = "unavailable", "the factory returned None", dev.hint
            return
        if not isinstance(backend, Backend) or getattr(backend, "name", None) != dev.name:
            dev.status = "error"
            dev.reason = (
                f"the factory returned {type(backend).__name__} named {getattr(backend, 'name', None)!r}, "
                f"not a Backend named '{dev.name}'"
            )
            dev.fix = f"a bug in plugin '{dev.plugin}': report it to its authors"
            return
        dev.status, dev.reason, dev.fix, dev.backend = "ready", "", "", backend
        if not self._ready:
            atexit.register(self._close_all)
        self._ready[dev.name] = backend

    def _close_all(self) -> None:
        """At exit, while modules still exist: call each backend's optional `close()` and drop it."""
        with self._lock:
            backends = list(self._ready.values())
            self._ready.clear()
            for dev in self._devices.values():
                if dev.backend is not None:  # a later get_backend() would create it again
                    dev.backend, dev.status = None, "not-initialised"
        for backend in backends:
            close = getattr(backend, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # noqa: BLE001, S110 - nothing useful can be done at exit
                    pass
        del backends
        gc.collect()

    def _why(self, name: str) -> str:
        dev = self._devices[name]
        msg = f"device '{name}' (plugin {dev.plugin} {dev.version}) is {dev.status}"
        if dev.reason:
            msg += f": {dev.reason}"
        if dev.fix:
            msg += f". Fix: {dev.fix}"
        ready = [n for n in self._known() if self._devices[n].status == "ready"]
        return msg + f". Ready devices: {', '.join(ready) or 'none'}."

    def devices(self) -> list[str]:
        """Every discovered device name, best first (ready or not)."""
        self.discover()
        with self._lock:
            return self._known()

    @overload
    def device_info(self) -> list[DeviceInfo]: ...
    @overload
    def device_info(self, name: str) -> DeviceInfo: ...
    @overload
    def device_info(self, name: None) -> list[DeviceInfo]: ...

    def device_info(self, name: str | None = None) -> list[DeviceInfo] | DeviceInfo:
        """One device's record, or all of them best first when `name` is None."""
        self.discover()
        with self._lock:
            if name is not None:
                return self._devices[self._check_names([name])[0]].info()
            return [self._devices[n].info() for n in self._known()]

    def plugin_info(self) -> list[PluginInfo]:
        """Every plugin that was loaded or failed to load, with its error and hint."""
        self.discover()
        with self._lock:
            return [p.info() for p in self._plugins.values()]

    def default_device(self, device: str | None = None) -> str:
        """Get (or set, when `device` is given) the default device; the set device must become ready."""
        if device is None and self._default is not None:
            return self._default
        self.discover()
        with self._lock:
            if device is not None:
                self.init([device])
                if self._devices[device].status != "ready":
                    raise RuntimeError(f"cannot make it the default: {self._why(device)}")
                self._default = device
            elif self._default is None:
                env = self.settings.default_device
                if env is not None:
                    self._check_names([env], " in JAXCORE_DEFAULT_DEVICE")
                    self.init([env])
                    if self._devices[env].status != "ready":
                        raise RuntimeError(
                            f"JAXCORE_DEFAULT_DEVICE={env}, but {self._why(env)} "
                            "Set it to a ready device or unset it."
                        )
                    self._default = env
                else:
                    ready = self.init()
                    if not ready:
                        lines = [self._why(n) for n in self._known()] or ["no device plugin is installed."]
                        raise RuntimeError(
                            "no jaxcore device is ready:\n  "
                            + "\n  ".join(lines)
                            + "\nInstall a device plugin (pip install jaxcore brings jaxcore-cpu) "
                            "or run `jaxcore devices` for details."
                        )
                    self._default = ready[0]
            return self._default

    def get_backend(self, device: str | None = None) -> Backend:
        """The ready backend for `device` (default device if None), created on first use."""
        if device is not None:
            backend = self._ready.get(device)
            if backend is not None:
                return backend
        name = device if device is not None else self.default_device()
        backend = self._ready.get(name)
        if backend is not None:
            return backend
        with self._lock:
            self.init([name])
            if self._devices[name].status != "ready":
                raise RuntimeError(self._why(name))
            return self._ready[name]


_registry = Registry()


def reset(settings: Settings | None = None) -> Registry:
    """Forget every plugin and device and re-read the settings (tests; backends are not closed)."""
    global _registry
    _registry = Registry(settings if settings is not None else _settings.reload())
    return _registry


def current() -> Registry:
    return _registry


def init(devices: Iterable[str] | str | None = None) -> list[str]:
    """Initialise devices (all discovered ones by default) and return the ready ones, best first."""
    return _registry.init(devices)


def devices() -> list[str]:
    """Every discovered device name, best first."""
    return _registry.devices()


@overload
def device_info() -> list[DeviceInfo]: ...
@overload
def device_info(name: str) -> DeviceInfo: ...
@overload
def device_info(name: None) -> list[DeviceInfo]: ...


def device_info(name: str | None = None) -> list[DeviceInfo] | DeviceInfo:
    """`DeviceInfo` for one device, or for all of them."""
    return _registry.device_info(name)


def plugin_info() -> list[PluginInfo]:
    """`PluginInfo` for every plugin, including those that failed to load."""
    return _registry.plugin_info()


def default_device(device: str | None = None) -> str:
    """Get or set the default device (highest-priority ready device unless set or JAXCORE_DEFAULT_DEVICE)."""
    return _registry.default_device(device)


def get_backend(device: str | None = None) -> Backend:
    """A ready backend, created on first use; raises RuntimeError saying why a device is unavailable."""
    return _registry.get_backend(device)


def register_plugin(plugin: object, name: str | None = None, version: str | None = None) -> PluginInfo:
    """Register a plugin module or object programmatically (as if it were installed)."""
    return _registry.register_plugin(plugin, name, version)
