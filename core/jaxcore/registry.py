"""Device registry: plugin discovery, lazy device creation and the default device.

Plugins are found through the entry-point group ``jaxcore`` (or `register_plugin`) and only record
factories; a device is created on `init()` or first use. Every failure stays with the plugin or device
that caused it (import error, hook error, API-version mismatch, factory error, `sys.exit`, a hang) and
is kept with its traceback and a fix-it hint, so one broken plugin never hides the others. Nothing here
names a device: the default is simply the ready device with the highest priority.

Bounded, never hung: each plugin's import + hook, and each device factory, runs on its own daemon thread
for at most `JAXCORE_PLUGIN_TIMEOUT` seconds (settings). All plugins load in parallel; asking for a named
device waits only for the plugin whose entry point carries that name (when there is one), so a hanging
third-party import never delays ``get_backend("cpu")``. The registry lock is never held while plugin code
runs, so a factory's helper thread may call `get_backend` for another device.

One name, one owner: when two plugins register the same device name, the device goes to the plugin whose
entry point is named after the device; otherwise to the plugin loaded first (entry points in name order,
then `register_plugin` calls in call order). Both sides are reported: the loser's plugin record carries
the error, the winner's device lists the loser in `DeviceInfo.conflicts`.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.metadata as md
import re
import sys
import threading
import time
import traceback as tb
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import pluggy

from jaxcore import hookspecs
from jaxcore import settings as _settings
from jaxcore.backend import API_VERSION, Backend, BaseBackend, Capabilities
from jaxcore.settings import SettingError, Settings

ENTRY_POINT_GROUP = "jaxcore"
Status = Literal["ready", "unavailable", "error", "not-initialised"]
_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")
OWNER_RULE = (
    "a device name goes to the plugin whose entry point is named after it, else to the plugin "
    "loaded first (entry points in name order, then register_plugin calls in order)"
)
# What a backend must have (the Backend protocol), and the BaseBackend hooks a subclass must override.
_PROTOCOL_METHODS = (
    "malloc",
    "inc_ref",
    "dec_ref",
    "read",
    "prepare_kernel",
    "prepare_routine",
    "dispatch",
    "read_async",
    "prepare_kernel_async",
    "prepare_routine_async",
)
_REQUIRED_HOOKS = ("_alloc", "_free", "_copyin", "_copyout", "_compile_kernel", "_run")


class DeviceUnavailable(Exception):
    """Raised by a factory to decline politely: the device cannot run here, and `hint` says how to fix it."""

    def __init__(self, reason: str, hint: str = "") -> None:
        self.reason, self.hint = reason, hint
        super().__init__(f"{reason} ({hint})" if hint else reason)


class PluginError(RuntimeError):
    """A plugin failed to load or register (raised only under JAXCORE_STRICT_PLUGINS=1)."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the registry knows about one device; `capabilities` is set once it is ready.

    `conflicts` names the other plugins that registered the same device name and were ignored.
    """

    name: str
    plugin: str
    version: str
    priority: int
    status: Status
    reason: str = ""
    hint: str = ""
    traceback: str = ""
    capabilities: Capabilities | None = None
    conflicts: tuple[str, ...] = ()


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


class _Job:
    """Plugin code (an import + hook, or a factory) on its own daemon thread, so a hang is bounded.

    With `timeout <= 0` it runs in the calling thread instead, unbounded. Either way `SystemExit` raised by
    the plugin is caught and kept like any other failure: a plugin never ends the process.

    Started once, by whoever needs it first: `init()` claims several devices before it starts their
    jobs, and a factory's helper thread may wait on one of those in between (waiting on a job nobody
    had started timed out at once, or with timeout 0 hung), so `wait` starts a job that is not running.
    """

    def __init__(self, fn: Callable[[], Any], label: str, timeout: float) -> None:
        self.fn, self.label, self.timeout = fn, label, timeout
        self.value: Any = None
        self.exc: BaseException | None = None
        self.phase = ""
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.deadline = 0.0
        self._started = False
        self._start_lock = threading.Lock()

    def start(self) -> None:
        """Run the job (inline, or on its thread); a second call, from any thread, does nothing."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
            if self.timeout > 0:
                self.deadline = time.monotonic() + self.timeout
                self.thread = threading.Thread(target=self._target, name=f"jaxcore {self.label}", daemon=True)
                self.thread.start()
                return
            self.thread = threading.current_thread()
        self._target(inline=True)  # outside the start lock: the job may start others

    def _target(self, inline: bool = False) -> None:
        try:
            self.value = self.fn()
        except (Exception, SystemExit) as exc:
            self.exc = exc
        except (
            BaseException
        ) as exc:  # KeyboardInterrupt: ours to honour inline, the job's failure on a thread
            if inline:
                raise
            self.exc = exc
        finally:
            self.done.set()

    def wait(self) -> bool:
        """Start the job if nobody has, then wait until done or past the deadline; True when it finished."""
        self.start()
        if self.thread is threading.current_thread():  # a job waiting on itself (reentrant use)
            return self.done.is_set()
        if self.timeout <= 0:
            self.done.wait()
            return True
        return self.done.wait(max(0.0, self.deadline - time.monotonic()))

    def timed_out(self) -> str:
        return f"timed out after {self.timeout:g} s"


class _Failure(Exception):
    """What a plugin load job raises to say how the plugin failed (error, hint, original exception)."""

    def __init__(self, error: str, hint: str, cause: BaseException | None = None) -> None:
        super().__init__(error)
        self.error, self.hint, self.cause = error, hint, cause


@dataclass
class _Device:
    name: str
    factory: hookspecs.BackendFactory
    priority: int
    plugin: str
    version: str
    hint: str
    source: str = ""  # the registering plugin's record name
    rank: tuple[int, int] = (1, 0)  # who owns the name when two plugins register it: lower wins
    status: Status = "not-initialised"
    reason: str = ""
    fix: str = ""
    trace: str = ""
    backend: Backend | None = None
    job: _Job | None = None
    settled: bool = False
    conflicts: list[str] = field(default_factory=list)

    def info(self) -> DeviceInfo:
        caps = self.backend.capabilities if self.backend is not None else None
        return DeviceInfo(
            self.name, self.plugin, self.version, self.priority, self.status,
            self.reason, self.fix, self.trace, caps, tuple(self.conflicts),
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


@dataclass
class _Load:
    """One plugin being loaded: its record, the job importing it and running its hook, its place in line."""

    seq: int
    key: str  # the entry-point name (owns the device of that name); "" for register_plugin
    rec: _Plugin
    job: _Job
    committed: bool = False


def _version_of(obj: object) -> str:
    """`__version__` of the object, else of its top-level package (a plugin module rarely has one)."""
    version = getattr(obj, "__version__", None)
    if version is None and isinstance(obj, types.ModuleType):
        version = getattr(sys.modules.get(obj.__name__.partition(".")[0]), "__version__", None)
    return str(version) if version is not None else ""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: the plugin called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


def _trace(exc: BaseException | None) -> str:
    return "".join(tb.format_exception(exc)) if exc is not None else ""


def backend_problem(backend: object, name: str) -> str:
    """Why `backend` cannot serve as device `name` ("" when it can): the first missing piece, by name."""
    kind = type(backend).__name__
    if not hasattr(backend, "capabilities"):
        return f"the backend {kind} has no `capabilities` (set it to a jaxcore.plugin.Capabilities record)"
    caps = backend.capabilities
    if not isinstance(caps, Capabilities):
        return f"the backend {kind}'s `capabilities` is a {type(caps).__name__}, not a Capabilities record"
    missing = [m for m in _PROTOCOL_METHODS if not callable(getattr(backend, m, None))]
    if missing:
        return (
            f"the backend {kind} lacks required method{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
        )
    if isinstance(backend, BaseBackend):
        hooks = [h for h in _REQUIRED_HOOKS if getattr(type(backend), h) is getattr(BaseBackend, h)]
        if hooks:
            return (
                f"the backend {kind} does not implement the BaseBackend hook"
                f"{'s' if len(hooks) > 1 else ''} {', '.join(hooks)}"
            )
    if getattr(backend, "name", None) != name:
        return f"the factory returned {kind} named {getattr(backend, 'name', None)!r}, not '{name}'"
    return ""


class Registry:
    """Plugins, devices and the default device; one lives in this module, tests may make their own.

    Locking: `_lock` guards the tables and is held only for bookkeeping, never while plugin code runs
    or while waiting for it; `_pm_lock` serialises pluggy's (not thread-safe) plugin manager.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._lock = threading.RLock()
        self._pm_lock = threading.Lock()
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._plugins: dict[str, _Plugin] = {}
        self._devices: dict[str, _Device] = {}
        self._ready: dict[str, Backend] = {}  # read without the lock on the hot path
        self._loads: list[_Load] = []
        self._started = False
        self._discovered = False
        self._default: str | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = _settings.current()
        return self._settings

    # ---- loading plugins -----------------------------------------------------------------
    def discover(self) -> None:
        """Load installed plugins once (entry points, filtered by the settings), all of them in parallel."""
        if not self._discovered:
            self._settle()

    def _start_discovery(self) -> None:
        """Start one load job per chosen plugin (once); does not wait for them."""
        with self._lock:
            if self._started:
                return
            self._started = True
            s = self.settings
            wanted = list(s.plugins)
            eps = {ep.name: ep for ep in md.entry_points(group=ENTRY_POINT_GROUP)}
            by_module = {ep.value: name for name, ep in eps.items()}
            chosen = set(eps)
            if s.disable_plugin_autoload:  # only what JAXCORE_PLUGINS names, by entry point or module
                chosen = {n for n in wanted if n in eps} | {by_module[m] for m in wanted if m in by_module}
            dists = [getattr(getattr(ep, "dist", None), "name", None) for ep in eps.values()]
            pending: list[_Load] = []
            for name in sorted(chosen):
                ep = eps[name]
                dist = getattr(ep, "dist", None)
                pname = dist.name if dist is not None else name
                if dist is not None and dists.count(dist.name) > 1:  # one distribution, several plugins
                    pname = f"{dist.name}[{name}]"
                version = dist.version if dist is not None else ""
                pending += self._queue(pname, ep.value, version, ep.load, key=name)
            for item in wanted:
                if item not in eps and item not in by_module:
                    pending += self._queue(
                        item, item, "", lambda m=item: importlib.import_module(m), key=item
                    )
        for load in pending:
            load.job.start()

    def _queue(self, name: str, module: str, version: str, loader: Any, key: str) -> list[_Load]:
        if name in self._plugins or any(ld.rec.name == name for ld in self._loads):
            return []
        rec = _Plugin(name, module, version)
        load = _Load(
            len(self._loads), key, rec, _Job(lambda: None, f"plugin {name}", self.settings.plugin_timeout)
        )
        load.job.fn = lambda: self._load_plugin(load, loader)
        self._loads.append(load)
        return [load]

    def _load_plugin(self, load: _Load, loader: Callable[[], object]) -> list[_Device]:
        """The body of a load job: import, register with pluggy, run the hook; returns the staged devices."""
        rec, job = load.rec, load.job
        job.phase = "import"
        try:
            obj = loader()
        except (Exception, SystemExit) as exc:  # sys.exit() in a plugin is the plugin's failure, not ours
            raise _Failure(
                f"import failed: {_describe(exc)}", self._import_hint(rec, load.key, exc), exc
            ) from exc
        if not rec.version:
            rec.version = _version_of(obj)
        job.phase = "hook"
        with self._pm_lock:
            try:
                self._pm.register(obj, name=rec.name)
            except Exception as exc:
                hint = (
                    "hook functions must match `jaxcore_register_devices(register)` (see jaxcore.hookspecs)"
                )
                raise _Failure(f"invalid plugin: {_describe(exc)}", hint, exc) from exc
            impls = [i for i in self._pm.hook.jaxcore_register_devices.get_hookimpls() if i.plugin is obj]
        if not impls:
            unmarked = callable(getattr(obj, "jaxcore_register_devices", None))
            why = "its jaxcore_register_devices lacks @jaxcore.hookimpl" if unmarked else "it has no hooks"
            raise _Failure(f"plugin registers no devices: {why}", "decorate the hook with @jaxcore.hookimpl")
        staged: list[_Device] = []
        register = self._make_register(rec, staged)
        try:
            for impl in impls:
                impl.function(**{a: register for a in impl.argnames})
        except (Exception, SystemExit) as exc:
            hint = f"a bug in plugin '{rec.name}': report it to its authors, or uninstall it"
            raise _Failure(f"jaxcore_register_devices raised {_describe(exc)}", hint, exc) from exc
        return staged

    @staticmethod
    def _import_hint(rec: _Plugin, key: str, exc: BaseException) -> str:
        missing = exc.name if isinstance(exc, ModuleNotFoundError) and exc.name else None
        if missing is not None and not (rec.module == missing or rec.module.startswith(missing + ".")):
            hint = f"install what it needs (pip install {missing.split('.')[0]}) or "
        else:
            hint = f"reinstall or uninstall the plugin (pip uninstall {rec.name}), or "
        hint += "set JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1 and list the plugins you want in JAXCORE_PLUGINS"
        return hint + (f" (this one is '{key}')" if key else "")

    def register_plugin(
        self, plugin: object, name: str | None = None, version: str | None = None
    ) -> PluginInfo:
        """Register a module or object carrying `@jaxcore.hookimpl` functions (tests, embedded hosts)."""
        self._start_discovery()  # entry points come first in line, whatever the call order
        module = getattr(plugin, "__name__", None) or type(plugin).__qualname__
        pname = name or module
        with self._lock:
            if pname in self._plugins or any(ld.rec.name == pname for ld in self._loads):
                raise ValueError(
                    f"a plugin named '{pname}' is already registered; pass name=... to register_plugin"
                )
            rec = _Plugin(pname, module, version if version is not None else _version_of(plugin))
            load = _Load(
                len(self._loads), "", rec, _Job(lambda: None, f"plugin {pname}", self.settings.plugin_timeout)
            )
            load.job.fn = lambda: self._load_plugin(load, lambda: plugin)
            self._loads.append(load)
        load.job.start()
        load.job.wait()
        with self._lock:
            self._commit(load)
            return rec.info()

    def _settle(self, names: list[str] | None = None) -> None:
        """Wait for the plugin loads `names` needs (all of them for None), bounded, and commit them."""
        self._start_discovery()
        with self._lock:
            loads = list(self._loads)
        if names is not None:
            owners = {ld.key: ld for ld in loads if ld.key}
            found = True
            for n in names:
                load = owners.get(n)
                if load is None:
                    found = False
                    break
                load.job.wait()
                with self._lock:
                    self._commit(load)
                    dev = self._devices.get(n)
                    if dev is None or dev.source != load.rec.name:
                        found = False
                        break
            if found:
                return
        for load in loads:
            load.job.wait()
        with self._lock:
            for load in loads:
                self._commit(load)
            self._discovered = True

    def _commit(self, load: _Load) -> None:
        """Record a finished (or timed-out) load: its failure, or its devices. Under the lock; once."""
        if load.committed:
            return
        load.committed = True
        rec, job = load.rec, load.job
        if not job.done.is_set():
            what = "importing the plugin" if job.phase == "import" else "its jaxcore_register_devices hook"
            hint = (
                f"the plugin hangs in {what}: report it to its authors, uninstall it, or load only the "
                f"plugins you want (JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1, JAXCORE_PLUGINS=...); "
                f"JAXCORE_PLUGIN_TIMEOUT={job.timeout:g} sets the limit"
            )
            self._fail(rec, f"{what} {job.timed_out()}", hint)
            return
        if isinstance(job.exc, _Failure):
            self._fail(rec, job.exc.error, job.exc.hint, job.exc.cause)
            return
        if job.exc is not None:  # an error of our own making, still kept with the plugin
            self._fail(rec, f"loading failed: {_describe(job.exc)}", "report it to jaxcore", job.exc)
            return
        self._plugins[rec.name] = rec
        for dev in job.value:
            dev.source = rec.name
            dev.rank = (0 if load.key == dev.name else 1, load.seq)
            self._add_device(dev, rec)
        if rec.error and self.settings.strict_plugins:
            raise PluginError(f"plugin '{rec.name}': {rec.error}")

    def _add_device(self, dev: _Device, rec: _Plugin) -> None:
        cur = self._devices.get(dev.name)
        if cur is None:
            self._devices[dev.name] = dev
            rec.devices.append(dev.name)
            return
        untouched = cur.status == "not-initialised" and cur.job is None
        winner, loser = (dev, cur) if dev.rank < cur.rank and untouched else (cur, dev)
        if winner is dev:
            self._devices[dev.name] = dev
            rec.devices.append(dev.name)
            old = self._plugins.get(cur.source)
            if old is not None and cur.name in old.devices:
                old.devices.remove(cur.name)
            winner.conflicts.extend(cur.conflicts)
        winner.conflicts.append(loser.source)
        lost = self._plugins.get(loser.source)
        if lost is not None:
            lost.error = (
                f"device '{dev.name}' is already registered by plugin '{winner.source}', which keeps it "
                f"({OWNER_RULE})"
            )
            lost.hint = f"uninstall one of '{winner.source}' and '{loser.source}'"

    def _fail(self, rec: _Plugin, error: str, hint: str, exc: BaseException | None = None) -> None:
        rec.error, rec.hint = error, hint
        rec.trace = _trace(exc)
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
                dev.status, dev.settled = "error", True
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
        """Create the named devices (all allowed ones by default); return every ready device, best first.

        Factories of several devices run in parallel, each bounded by `JAXCORE_PLUGIN_TIMEOUT`.
        """
        if isinstance(devices, str):
            devices = [devices]
        if devices is None:
            self._settle()
            with self._lock:
                allowed = self.settings.devices
                if allowed is not None:
                    self._check_names(allowed, " in JAXCORE_DEVICES")
                names = self._known()
        else:
            devices = list(devices)
            self._settle(devices)
            with self._lock:
                names = self._check_names(devices)
        devs = [self._devices[n] for n in names]
        for job in [j for j in map(self._claim_init, devs) if j is not None]:
            job.start()
        for dev in devs:
            self._await_init(dev)
        with self._lock:
            return [n for n in self._known() if self._devices[n].status == "ready"]

    def _claim_init(self, dev: _Device) -> _Job | None:
        """Under the lock: decide that this caller creates `dev` and return the job to start, or None."""
        with self._lock:
            if dev.settled or dev.job is not None:
                return None
            allowed = self.settings.devices
            if allowed is not None and dev.name not in allowed:
                dev.status, dev.reason = "unavailable", f"not listed in JAXCORE_DEVICES={','.join(allowed)}"
                dev.fix = f"add '{dev.name}' to JAXCORE_DEVICES, or unset it"
                dev.settled = True
                return None
            dev.reason = "initialisation in progress"
            dev.job = _Job(dev.factory, f"device {dev.name}", self.settings.plugin_timeout)
            return dev.job

    def _await_init(self, dev: _Device) -> None:
        job = dev.job
        if job is None or dev.settled:
            return
        if job.thread is threading.current_thread() and not job.done.is_set():
            return  # a factory asking for its own device: it is not ready, and waiting would never end
        job.wait()
        with self._lock:
            self._finish_init(dev, job)

    def _finish_init(self, dev: _Device, job: _Job) -> None:
        if dev.settled:
            return
        dev.settled = True
        fix_bug = f"a bug in plugin '{dev.plugin}': report it, or exclude the device with JAXCORE_DEVICES"
        if not job.done.is_set():  # still running: left behind on its daemon thread, result discarded
            dev.status, dev.reason = "unavailable", f"{job.timed_out()}: the factory did not return"
            dev.fix = (
                f"{dev.hint + '; ' if dev.hint else ''}set JAXCORE_PLUGIN_TIMEOUT above {job.timeout:g} "
                "if the device is just slow to start, or exclude it with JAXCORE_DEVICES"
            )
            return
        exc = job.exc
        if isinstance(exc, DeviceUnavailable):
            dev.status, dev.reason, dev.fix = "unavailable", exc.reason, exc.hint or dev.hint
            return
        if isinstance(exc, ModuleNotFoundError):
            dev.status, dev.reason = "unavailable", f"missing module: {exc.name or exc}"
            dev.fix, dev.trace = dev.hint or f"pip install {exc.name}", _trace(exc)
            return
        if isinstance(exc, SettingError):
            dev.status, dev.reason, dev.fix = "error", str(exc), f"correct or unset {exc.var}"
            return
        if exc is not None:
            dev.status, dev.reason = "error", f"creating the backend failed: {_describe(exc)}"
            dev.fix, dev.trace = dev.hint or fix_bug, _trace(exc)
            return
        backend = job.value
        if backend is None:
            dev.status, dev.reason, dev.fix = "unavailable", "the factory returned None", dev.hint
            return
        problem = backend_problem(backend, dev.name)
        if problem:
            dev.status, dev.reason = "error", problem
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
                    dev.backend, dev.status, dev.job, dev.settled = None, "not-initialised", None, False
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
        self._settle()
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
        self._settle(None if name is None else [name])
        with self._lock:
            if name is not None:
                return self._devices[self._check_names([name])[0]].info()
            return [self._devices[n].info() for n in self._known()]

    def plugin_info(self) -> list[PluginInfo]:
        """Every plugin that was loaded or failed to load, with its error and hint."""
        self._settle()
        with self._lock:
            return [p.info() for p in self._plugins.values()]

    def default_device(self, device: str | None = None) -> str:
        """Get (or set, when `device` is given) the default device; the set device must become ready."""
        if device is None and self._default is not None:
            return self._default
        if device is not None:
            self.init([device])
            with self._lock:
                if self._devices[device].status != "ready":
                    raise RuntimeError(f"cannot make it the default: {self._why(device)}")
                self._default = device
                return device
        env = self.settings.default_device
        if env is not None:
            self._settle([env])
            with self._lock:
                self._check_names([env], " in JAXCORE_DEFAULT_DEVICE")
            self.init([env])
            with self._lock:
                if self._devices[env].status != "ready":
                    why = self._why(env)
                    raise RuntimeError(
                        f"JAXCORE_DEFAULT_DEVICE={env}, but {why} Set it to a ready device or unset it."
                    )
                if self._default is None:
                    self._default = env
                return self._default
        ready = self.init()
        with self._lock:
            if not ready:
                lines = [self._why(n) for n in self._known()] or ["no device plugin is installed."]
                raise RuntimeError(
                    "no jaxcore device is ready:\n  "
                    + "\n  ".join(lines)
                    + "\nInstall a device plugin (pip install jaxcore brings jaxcore-cpu) "
                    "or run `jaxcore devices` for details."
                )
            if self._default is None:
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
        self.init([name])
        with self._lock:
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
