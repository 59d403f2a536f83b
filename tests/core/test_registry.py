"""The device registry: discovery, isolation of broken plugins, init/default/get_backend, settings."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

import jaxcore
from jaxcore import registry
from jaxcore.backend import API_VERSION, BaseBackend, Capabilities, HostMemory
from jaxcore.dtype import DType
from jaxcore.registry import DeviceUnavailable, PluginError, Registry
from jaxcore.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


class _Hooks(HostMemory, BaseBackend):
    """Every required hook present (host bytes; kernels are never run here)."""

    def _compile_kernel(self, kernel: Any) -> None:
        return None

    def _run(self, exe: Any, inputs: list[Any], outputs: list[Any]) -> None:
        raise NotImplementedError("_run")


def make_backend(name: str) -> BaseBackend:
    """A backend whose name matches the device it is registered as."""
    caps = Capabilities(dtypes=frozenset({DType.float32}), routines=frozenset(), max_args=4)
    return type(f"Fake_{name}", (_Hooks,), {"name": name, "capabilities": caps})()


class Devices:
    """A programmatic plugin: registers (name, priority, factory) triples."""

    def __init__(self, *specs: tuple[str, int, Callable[[], Any]], api_version: int = API_VERSION) -> None:
        self.specs = specs
        self.api_version = api_version

    @jaxcore.hookimpl
    def jaxcore_register_devices(self, register: Any) -> None:
        for name, priority, factory in self.specs:
            register(name, factory, api_version=self.api_version, priority=priority, hint=f"fix {name}")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Registry]]:
    """Swap in an empty registry (autoload off unless asked) and restore the real one afterwards."""

    def make(**kw: Any) -> Registry:
        kw.setdefault("disable_plugin_autoload", True)
        reg = Registry(Settings(**kw))
        monkeypatch.setattr(registry, "_registry", reg)
        return reg

    yield make


def write_dist(root: Path, dist: str, version: str, entry_points: dict[str, str]) -> None:
    """An installed-looking distribution (dist-info with entry_points.txt), found via sys.path."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[jaxcore]\n{lines}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary site directory on sys.path holding fake dists and the example plugins."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES / "jaxcore-example-plugin"))
    monkeypatch.syspath_prepend(str(EXAMPLES / "broken-plugin"))
    for mod in [m for m in sys.modules if m.startswith(("jaxcore_broken", "fakeplug"))]:
        monkeypatch.delitem(sys.modules, mod)
    (tmp_path / "fakeplug.py").write_text(
        textwrap.dedent(
            """
            import jaxcore
            __version__ = "9.9"

            @jaxcore.hookimpl
            def jaxcore_register_devices(register):
                register("fake", lambda: None, api_version=jaxcore.API_VERSION, priority=3)
            """
        )
    )
    write_dist(tmp_path, "jaxcore-fake", "0.3", {"fake": "fakeplug"})
    write_dist(tmp_path, "jaxcore-example", "0.1.0", {"example": "jaxcore_example.plugin"})
    write_dist(tmp_path, "jaxcore-broken", "0.0.1", {"broken": "jaxcore_broken.plugin"})
    return tmp_path


# ---- the public surface ----------------------------------------------------------------------


def test_hookimpl_is_the_jaxcore_marker() -> None:
    assert isinstance(jaxcore.hookimpl, pluggy.HookimplMarker)
    assert jaxcore.hookimpl.project_name == "jaxcore"


def test_programmatic_registration_orders_by_priority(fresh: Callable[..., Registry]) -> None:
    fresh()
    info = jaxcore.register_plugin(
        Devices(("low", 1, lambda: make_backend("low")), ("high", 9, lambda: make_backend("high"))),
        name="two",
        version="1.2",
    )
    assert info.status == "ok" and info.devices == ("low", "high")
    assert jaxcore.devices() == ["high", "low"]
    assert jaxcore.device_info("low").status == "not-initialised"
    assert jaxcore.init() == ["high", "low"]
    d = jaxcore.device_info("high")
    assert (d.status, d.plugin, d.version, d.priority) == ("ready", "two", "1.2", 9)
    assert d.capabilities is not None and DType.float32 in d.capabilities.dtypes
    assert jaxcore.default_device() == "high"
    assert jaxcore.get_backend().name == "high"
    assert jaxcore.get_backend("low").name == "low"


def test_register_plugin_twice_with_one_name_is_an_error(fresh: Callable[..., Registry]) -> None:
    fresh()
    jaxcore.register_plugin(Devices(), name="p")
    with pytest.raises(ValueError, match="already registered"):
        jaxcore.register_plugin(Devices(), name="p")


def test_init_named_devices_only(fresh: Callable[..., Registry]) -> None:
    fresh()
    calls: list[str] = []

    def factory(name: str) -> Callable[[], BaseBackend]:
        return lambda: calls.append(name) or make_backend(name)

    jaxcore.register_plugin(Devices(("a", 1, factory("a")), ("b", 2, factory("b"))))
    assert jaxcore.init(["a"]) == ["a"]
    assert calls == ["a"]
    assert jaxcore.device_info("b").status == "not-initialised"
    assert jaxcore.init("b") == ["b", "a"]


def test_unknown_device_lists_the_known_ones(fresh: Callable[..., Registry]) -> None:
    fresh()
    jaxcore.register_plugin(Devices(("a", 1, lambda: make_backend("a"))))
    with pytest.raises(ValueError, match=r"unknown device 'nope'.*known devices: a"):
        jaxcore.init(["nope"])
    with pytest.raises(ValueError, match="known devices: a"):
        jaxcore.get_backend("nope")
    with pytest.raises(ValueError, match="known devices: a"):
        jaxcore.device_info("nope")


def test_init_twice_creates_each_device_once_even_from_threads(fresh: Callable[..., Registry]) -> None:
    fresh()
    calls = []
    barrier = threading.Barrier(8)

    def factory() -> BaseBackend:
        calls.append(1)
        return make_backend("once")

    jaxcore.register_plugin(Devices(("once", 0, factory)))
    results: list[list[str]] = []

    def worker() -> None:
        barrier.wait()
        results.append(jaxcore.init())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [["once"]] * 8
    assert jaxcore.init() == ["once"]
    assert len(calls) == 1
    assert jaxcore.get_backend("once") is jaxcore.get_backend("once")


# ---- isolation: one failure never hides the others -------------------------------------------


def test_factory_declining_is_unavailable_with_reason_and_hint(fresh: Callable[..., Registry]) -> None:
    fresh()

    def decline() -> BaseBackend:
        raise DeviceUnavailable("no adapter found", "install the driver")

    jaxcore.register_plugin(Devices(("gpu", 50, decline), ("ok", 0, lambda: make_backend("ok"))))
    assert jaxcore.init() == ["ok"]
    d = jaxcore.device_info("gpu")
    assert (d.status, d.reason, d.hint) == ("unavailable", "no adapter found", "install the driver")
    assert jaxcore.default_device() == "ok"
    with pytest.raises(RuntimeError, match=r"'gpu'.*unavailable: no adapter found.*install the driver"):
        jaxcore.get_backend("gpu")
    with pytest.raises(RuntimeError, match="cannot make it the default"):
        jaxcore.default_device("gpu")


def test_factory_error_is_recorded_with_traceback(fresh: Callable[..., Registry]) -> None:
    fresh()

    def boom() -> BaseBackend:
        raise ZeroDivisionError("bad driver state")

    def missing() -> BaseBackend:
        import jaxcore_no_such_runtime  # noqa: F401

        raise AssertionError("unreachable")

    jaxcore.register_plugin(
        Devices(("boom", 5, boom), ("missing", 4, missing), ("wrong", 3, lambda: make_backend("other")))
    )
    jaxcore.register_plugin(Devices(("ok", 0, lambda: make_backend("ok"))), name="good")
    assert jaxcore.init() == ["ok"]
    boom_info = jaxcore.device_info("boom")
    assert boom_info.status == "error" and "ZeroDivisionError: bad driver state" in boom_info.reason
    assert "Traceback" in boom_info.traceback and boom_info.hint == "fix boom"
    miss = jaxcore.device_info("missing")
    assert miss.status == "unavailable" and "jaxcore_no_such_runtime" in miss.reason
    wrong = jaxcore.device_info("wrong")
    assert wrong.status == "error" and "named 'other', not 'wrong'" in wrong.reason
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jaxcore.get_backend("boom")


def test_malformed_plugin_setting_names_the_variable_as_the_fix(
    fresh: Callable[..., Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAXCORE_TUNED_STAGES", "three")
    monkeypatch.setenv("JAXCORE_TUNED_LANES", "0")
    jaxcore.settings.reload()
    fresh()

    def tuned(key: str) -> Callable[[], BaseBackend]:
        def make() -> BaseBackend:
            jaxcore.settings.current().plugin_int("tuned", key, 4, minimum=1)
            return make_backend("tuned")

        return make

    jaxcore.register_plugin(Devices(("tuned", 5, tuned("stages")), ("lanes", 4, tuned("lanes"))))
    try:
        assert jaxcore.init() == []
    finally:
        monkeypatch.delenv("JAXCORE_TUNED_STAGES")
        monkeypatch.delenv("JAXCORE_TUNED_LANES")
        jaxcore.settings.reload()
    d = jaxcore.device_info("tuned")
    assert (d.status, d.reason) == ("error", "JAXCORE_TUNED_STAGES='three' is not a whole number")
    assert d.hint == "correct or unset JAXCORE_TUNED_STAGES"
    assert jaxcore.device_info("lanes").reason == "JAXCORE_TUNED_LANES=0 must be at least 1"


def test_api_version_mismatch_is_an_error(fresh: Callable[..., Registry]) -> None:
    fresh()
    created = []
    jaxcore.register_plugin(
        Devices(
            ("future", 9, lambda: created.append(1) or make_backend("future")), api_version=API_VERSION + 1
        ),
        name="future-plugin",
    )
    jaxcore.register_plugin(Devices(("ok", 0, lambda: make_backend("ok"))), name="good")
    assert jaxcore.init() == ["ok"]
    d = jaxcore.device_info("future")
    assert d.status == "error" and f"API {API_VERSION + 1}" in d.reason and "upgrade jaxcore" in d.hint
    assert created == []
    with pytest.raises(RuntimeError, match="upgrade jaxcore"):
        jaxcore.get_backend("future")
    jaxcore.register_plugin(Devices(("past", 1, make_backend), api_version=0), name="old")
    assert "upgrade the plugin" in jaxcore.device_info("past").hint


def test_hook_that_raises_is_isolated(fresh: Callable[..., Registry]) -> None:
    fresh()

    class Raises:
        @jaxcore.hookimpl
        def jaxcore_register_devices(self, register: Any) -> None:
            register("half", lambda: make_backend("half"), api_version=API_VERSION)
            raise KeyError("oops")

    info = jaxcore.register_plugin(Raises(), name="raises")
    jaxcore.register_plugin(Devices(("ok", 0, lambda: make_backend("ok"))), name="good")
    assert info.status == "error" and "KeyError" in info.error and "Traceback" in info.traceback
    assert jaxcore.devices() == ["ok"]  # nothing from a plugin whose hook failed half-way


def test_bad_register_calls_and_unmarked_hooks(fresh: Callable[..., Registry]) -> None:
    fresh()

    class NoApi:
        @jaxcore.hookimpl
        def jaxcore_register_devices(self, register: Any) -> None:
            register("noapi", make_backend)

    class Unmarked:
        def jaxcore_register_devices(self, register: Any) -> None:
            raise AssertionError("never called")

    class BadName:
        @jaxcore.hookimpl
        def jaxcore_register_devices(self, register: Any) -> None:
            register("Bad Name", make_backend, api_version=API_VERSION)

    no_api = jaxcore.register_plugin(NoApi(), name="noapi")
    assert no_api.status == "error" and "api_version" in no_api.error
    unmarked = jaxcore.register_plugin(Unmarked(), name="unmarked")
    assert unmarked.status == "error" and "@jaxcore.hookimpl" in unmarked.hint
    assert jaxcore.register_plugin(BadName(), name="badname").status == "error"
    assert jaxcore.devices() == []


def test_duplicate_device_name_keeps_the_first(fresh: Callable[..., Registry]) -> None:
    fresh()
    jaxcore.register_plugin(Devices(("dup", 0, lambda: make_backend("dup"))), name="first")
    second = jaxcore.register_plugin(Devices(("dup", 5, lambda: make_backend("dup"))), name="second")
    assert second.status == "error" and "already registered by plugin 'first'" in second.error
    assert jaxcore.device_info("dup").plugin == "first"


def test_strict_plugins_reraises(fresh: Callable[..., Registry]) -> None:
    fresh(strict_plugins=True)

    class Raises:
        @jaxcore.hookimpl
        def jaxcore_register_devices(self, register: Any) -> None:
            raise KeyError("oops")

    with pytest.raises(PluginError, match="KeyError"):
        jaxcore.register_plugin(Raises(), name="raises")


# ---- discovery through entry points ----------------------------------------------------------


def test_entry_point_discovery_and_broken_plugin_isolation(
    fresh: Callable[..., Registry], site: Path
) -> None:
    fresh(disable_plugin_autoload=False, devices=("fake", "example", "broken"))
    names = jaxcore.devices()
    assert "example" in names and "fake" in names
    plugins = {p.name: p for p in jaxcore.plugin_info()}
    assert plugins["jaxcore-fake"].version == "0.3" and plugins["jaxcore-fake"].devices == ("fake",)
    broken = plugins["jaxcore-broken"]
    assert broken.status == "error" and "broken on purpose" in broken.error
    assert "Traceback" in broken.traceback and "JAXCORE_DISABLE_PLUGIN_AUTOLOAD" in broken.hint
    assert plugins["jaxcore-example"].status == "ok"
    ready = jaxcore.init(["example", "fake"])
    assert "example" in ready
    assert jaxcore.device_info("fake").status == "unavailable"  # its factory returns None
    assert jaxcore.device_info("example").plugin == "jaxcore-example"


def test_disable_autoload_loads_only_named_plugins(fresh: Callable[..., Registry], site: Path) -> None:
    fresh(disable_plugin_autoload=True, plugins=("fake", "tests_extra_plugin_mod"))
    (site / "tests_extra_plugin_mod.py").write_text(
        "import jaxcore\n"
        "@jaxcore.hookimpl\n"
        "def jaxcore_register_devices(register):\n"
        "    register('extra', lambda: None, api_version=jaxcore.API_VERSION)\n"
    )
    assert sorted(jaxcore.devices()) == ["extra", "fake"]
    assert {p.name for p in jaxcore.plugin_info()} == {"jaxcore-fake", "tests_extra_plugin_mod"}


def test_discovery_runs_once(
    fresh: Callable[..., Registry], site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = fresh(disable_plugin_autoload=False)
    calls = []
    real = registry.md.entry_points
    monkeypatch.setattr(registry.md, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    reg.devices()
    reg.devices()
    reg.plugin_info()
    assert calls == [{"group": "jaxcore"}]


# ---- default device and settings -------------------------------------------------------------


def test_default_device_set_and_env(fresh: Callable[..., Registry]) -> None:
    fresh(default_device="b")
    jaxcore.register_plugin(Devices(("a", 5, lambda: make_backend("a")), ("b", 1, lambda: make_backend("b"))))
    assert jaxcore.default_device() == "b"
    assert jaxcore.default_device("a") == "a"
    assert jaxcore.get_backend().name == "a"

    fresh(default_device="gone")
    jaxcore.register_plugin(Devices(("a", 5, lambda: make_backend("a"))))
    with pytest.raises(ValueError, match="JAXCORE_DEFAULT_DEVICE"):
        jaxcore.default_device()


def test_default_device_env_naming_an_unavailable_device(fresh: Callable[..., Registry]) -> None:
    fresh(default_device="gpu")

    def decline() -> BaseBackend:
        raise DeviceUnavailable("no gpu", "buy one")

    jaxcore.register_plugin(Devices(("gpu", 5, decline), ("a", 0, lambda: make_backend("a"))))
    with pytest.raises(RuntimeError, match=r"JAXCORE_DEFAULT_DEVICE=gpu.*no gpu.*buy one"):
        jaxcore.get_backend()


def test_no_ready_device_explains_each(fresh: Callable[..., Registry]) -> None:
    fresh()
    with pytest.raises(RuntimeError, match="no device plugin is installed"):
        jaxcore.default_device()

    def decline() -> BaseBackend:
        raise DeviceUnavailable("nope", "try harder")

    jaxcore.register_plugin(Devices(("x", 0, decline)))
    with pytest.raises(RuntimeError, match=r"'x'.*nope.*try harder"):
        jaxcore.get_backend()


def test_jaxcore_devices_limits_initialisation(fresh: Callable[..., Registry]) -> None:
    fresh(devices=("a",))
    jaxcore.register_plugin(Devices(("a", 0, lambda: make_backend("a")), ("b", 9, lambda: make_backend("b"))))
    assert jaxcore.init() == ["a"]
    b = jaxcore.device_info("b")
    assert b.status == "unavailable" and "JAXCORE_DEVICES" in b.reason
    assert jaxcore.default_device() == "a"

    fresh(devices=("a", "typo"))
    jaxcore.register_plugin(Devices(("a", 0, lambda: make_backend("a"))))
    with pytest.raises(ValueError, match="'typo' in JAXCORE_DEVICES"):
        jaxcore.init()


def test_settings_from_env() -> None:
    s = Settings.from_env(
        {
            "JAXCORE_DEFAULT_DEVICE": " cpu ",
            "JAXCORE_DEVICES": "cpu, wasm,,cpu",
            "JAXCORE_DISABLE_PLUGIN_AUTOLOAD": "1",
            "JAXCORE_PLUGINS": "cpu,my.mod",
            "JAXCORE_WASM_THREADS": "4",
            "HOME": "/root",
        }
    )
    assert s.default_device == "cpu"
    assert s.devices == ("cpu", "wasm")
    assert s.disable_plugin_autoload and not s.strict_plugins
    assert s.plugins == ("cpu", "my.mod")
    assert s.plugin("wasm") == {"threads": "4"}
    assert "HOME" not in s.env
    empty = Settings.from_env({"JAXCORE_DEVICES": " ", "HOME": "/home/u"})
    assert empty.devices is None and empty.default_device is None and not empty.disable_plugin_autoload
    assert Settings.from_env({"JAXCORE_CACHE_DIR": "/tmp/jc"}).cache_dir == Path("/tmp/jc")
    assert Settings.from_env({"XDG_CACHE_HOME": "/xdg"}).cache_dir == Path("/xdg/jaxcore")
    with pytest.raises(ValueError, match="JAXCORE_STRICT_PLUGINS"):
        Settings.from_env({"JAXCORE_STRICT_PLUGINS": "maybe"})


def test_reset_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    original = registry._registry
    monkeypatch.setenv("JAXCORE_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("JAXCORE_DEVICES", "zzz")
    try:
        reg = registry.reset()
        assert reg.settings.disable_plugin_autoload and reg.settings.devices == ("zzz",)
        assert jaxcore.devices() == []
    finally:
        monkeypatch.undo()
        registry._registry = original
        jaxcore.settings.reload()


def test_backends_are_closed_at_exit(fresh: Callable[..., Registry]) -> None:
    reg = fresh()
    closed: list[str] = []

    def closable() -> BaseBackend:
        be = make_backend("c")
        be.close = lambda: closed.append("c")  # type: ignore[attr-defined]
        return be

    jaxcore.register_plugin(Devices(("c", 0, closable), ("plain", 0, lambda: make_backend("plain"))))
    assert jaxcore.init() == ["c", "plain"]
    reg._close_all()  # what the atexit hook runs
    assert closed == ["c"]
    assert jaxcore.device_info("c").status == "not-initialised"
    assert jaxcore.get_backend("c").name == "c"  # created again on demand


def test_one_distribution_with_two_plugins(fresh: Callable[..., Registry], site: Path) -> None:
    for mod, dev in (("twoplug_a", "ta"), ("twoplug_b", "tb")):
        (site / f"{mod}.py").write_text(
            "import jaxcore\n"
            "@jaxcore.hookimpl\n"
            "def jaxcore_register_devices(register):\n"
            f"    register({dev!r}, lambda: None, api_version=jaxcore.API_VERSION)\n"
        )
    write_dist(site, "jaxcore-two", "2.0", {"ta": "twoplug_a", "tb": "twoplug_b"})
    fresh(disable_plugin_autoload=True, plugins=("ta", "tb"))
    assert sorted(jaxcore.devices()) == ["ta", "tb"]
    assert sorted(p.name for p in jaxcore.plugin_info()) == ["jaxcore-two[ta]", "jaxcore-two[tb]"]
