"""Every environment setting jaxcore reads, read in one place.

- `JAXCORE_DEFAULT_DEVICE`: the default device; if it is not ready, `get_backend()` fails and says why.
- `JAXCORE_DEVICES`: comma list; only these devices may initialise (the others report "unavailable").
- `JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1`: do not load every installed plugin, only those named in
  `JAXCORE_PLUGINS` and those passed to `register_plugin()` (like PYTEST_DISABLE_PLUGIN_AUTOLOAD).
- `JAXCORE_PLUGINS`: comma list of plugins to load: entry-point names (`cpu`) or module paths
  (`pkg.plugin`, for plugins that are importable but not installed).
- `JAXCORE_STRICT_PLUGINS=1`: re-raise a plugin's import or hook failure instead of recording it (plugin CI).
- `JAXCORE_PLUGIN_TIMEOUT`: seconds a plugin's import + hook, and each device factory, may take (default 30).
  Each runs on its own daemon thread; one that takes longer is reported "timed out after N s" and the rest
  of jaxcore carries on without it. `0` turns the bound off: imports and factories then run in the calling
  thread and a hang hangs the caller (for a backend that must be created on the main thread).
- `JAXCORE_KERNEL_CACHE`: prepared kernels (and, separately, routines) each backend keeps, least recently
  used dropped first (default 4096). A dropped Executable its caller still holds keeps working; preparing
  its kernel again builds a new one (from the plugin's own compile caches, where it has them).
- `JAXCORE_SYNC=1`: every dispatch waits for the device and raises its error at its own call (debugging:
  a queued device otherwise reports a device error at a later submit, wait or read, naming the dispatch).
- `JAXCORE_CACHE_DIR`: where plugins keep on-disk caches (compiled kernels); default
  `$XDG_CACHE_HOME/jaxcore` or `~/.cache/jaxcore`. A plugin uses its own subfolder.
- `JAXCORE_<PLUGIN>_<KEY>`: plugin-specific settings, read with `current().plugin("<plugin>")`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

PREFIX = "JAXCORE_"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def _flag(env: Mapping[str, str], key: str) -> bool:
    raw = env.get(key, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{key}={env[key]!r} is not a boolean; use 1 or 0")


def _names(raw: str | None) -> tuple[str, ...] | None:
    """A comma list; unset or empty is None ("no restriction"), as JAX_PLATFORMS='' is."""
    names = tuple(dict.fromkeys(p.strip() for p in (raw or "").split(",") if p.strip()))
    return names or None


DEFAULT_PLUGIN_TIMEOUT = 30.0
DEFAULT_KERNEL_CACHE = 4096


def _count(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{key}={env[key]!r} is not a positive whole number; use e.g. {default}")
    return value


def _seconds(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{key}={env[key]!r} is not a number of seconds; use e.g. 30, or 0 for no limit")
    return value


def _default_cache_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("JAXCORE_CACHE_DIR", "").strip():
        return Path(environ["JAXCORE_CACHE_DIR"].strip()).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "jaxcore"


def _plugin_prefix(name: str) -> str:
    """Where plugin `name`'s variables start: `JAXCORE_WASM_` for "wasm"."""
    return f"{PREFIX}{name.upper().replace('-', '_')}_"


class SettingError(ValueError):
    """A malformed setting: what the variable holds and what it takes (a device reports it as its fix)."""

    def __init__(self, var: str, message: str) -> None:
        super().__init__(message)
        self.var = var


@dataclass(frozen=True)
class Settings:
    """The JAXCORE_* environment at the time it was read (immutable, so it can be shared)."""

    default_device: str | None = None
    devices: tuple[str, ...] | None = None
    disable_plugin_autoload: bool = False
    plugins: tuple[str, ...] = ()
    strict_plugins: bool = False
    plugin_timeout: float = DEFAULT_PLUGIN_TIMEOUT
    kernel_cache: int = DEFAULT_KERNEL_CACHE
    sync: bool = False
    cache_dir: Path = field(default_factory=lambda: _default_cache_dir({}))
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        environ = os.environ if environ is None else environ
        env = {k: v for k, v in environ.items() if k.startswith(PREFIX)}
        return cls(
            default_device=env.get("JAXCORE_DEFAULT_DEVICE", "").strip() or None,
            devices=_names(env.get("JAXCORE_DEVICES")),
            disable_plugin_autoload=_flag(env, "JAXCORE_DISABLE_PLUGIN_AUTOLOAD"),
            plugins=_names(env.get("JAXCORE_PLUGINS")) or (),
            strict_plugins=_flag(env, "JAXCORE_STRICT_PLUGINS"),
            plugin_timeout=_seconds(env, "JAXCORE_PLUGIN_TIMEOUT", DEFAULT_PLUGIN_TIMEOUT),
            kernel_cache=_count(env, "JAXCORE_KERNEL_CACHE", DEFAULT_KERNEL_CACHE),
            sync=_flag(env, "JAXCORE_SYNC"),
            cache_dir=_default_cache_dir(environ),
            env=MappingProxyType(env),
        )

    def plugin_flag(self, name: str, key: str, default: bool) -> bool:
        """A boolean plugin setting (`JAXCORE_WASM_DISK_CACHE=0`), parsed like the core's own flags."""
        var = _plugin_prefix(name) + key.upper()
        return _flag(self.env, var) if self.env.get(var, "").strip() else default

    def plugin_int(self, name: str, key: str, default: int, minimum: int = 0) -> int:
        """An integer plugin setting (`JAXCORE_WASM_THREADS=4`), with a clear error when malformed."""
        var = _plugin_prefix(name) + key.upper()
        raw = self.env.get(var, "").strip()
        if not raw:
            return default
        try:
            n = int(raw)
        except ValueError:
            raise SettingError(var, f"{var}={raw!r} is not a whole number") from None
        if n < minimum:
            raise SettingError(var, f"{var}={n} must be at least {minimum}")
        return n

    def plugin(self, name: str) -> dict[str, str]:
        """Plugin-specific settings: `JAXCORE_WASM_THREADS=4` gives `plugin("wasm") == {"threads": "4"}`."""
        pre = _plugin_prefix(name)
        return {k[len(pre) :].lower(): v for k, v in self.env.items() if k.startswith(pre)}


_current: Settings | None = None


def current() -> Settings:
    """The settings read from the environment on first use (call `reload()` after changing os.environ)."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def reload() -> Settings:
    """Read the environment again (tests, or a host that sets variables after import)."""
    global _current
    _current = Settings.from_env()
    return _current
