"""Plugin faults, each isolated: a broken, hanging or exiting plugin is reported and never takes jaxcore down.

The faulty plugins are small modules written into a temporary directory and loaded by module path
(`JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1`, `JAXCORE_PLUGINS=...`) in a subprocess with a hard timeout, so a
regression that hangs fails this file instead of hanging the suite. The in-process tests guard their
waits with thread joins for the same reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jaxcore
from jaxcore import registry
from jaxcore.backend import API_VERSION, BaseBackend, Capabilities, HostMemory
from jaxcore.dtype import DType
from jaxcore.registry import Registry
from jaxcore.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

_HEAD = "import sys, threading, time\nimport jaxcore\nfrom jaxcore_cpu.backend import CpuBackend\n"
_HOOK = "@jaxcore.hookimpl\ndef jaxcore_register_devices(register):\n"

# module name -> source. Each registers (or fails to register) one device named after its fault.
FAULTS: dict[str, str] = {
    "f_import_error": "raise RuntimeError('broken at import on purpose')\n",
    "f_hook_error": _HOOK + "    raise ValueError('broken hook on purpose')\n",
    "f_factory_error": _HOOK
    + "    register('factory-error', lambda: 1 / 0, api_version=1, hint='fix the driver')\n",
    "f_hang_factory": _HOOK
    + "    register('hang-factory', lambda: threading.Event().wait(), api_version=1)\n",
    "f_hang_import": "time.sleep(3600)\n",
    "f_hang_hook": _HOOK + "    time.sleep(3600)\n",
    "f_exit_import": "sys.exit(3)\n",
    "f_exit_hook": _HOOK + "    sys.exit(4)\n",
    "f_exit_factory": _HOOK + "    register('exit-factory', lambda: sys.exit(5), api_version=1)\n",
    "f_api_version": _HOOK + "    register('api-version', CpuBackend, api_version=999)\n",
    # takes the cpu device's name: the cpu entry point is named after the device, so cpu keeps it
    "f_takes_cpu": _HOOK + "    register('cpu', CpuBackend, api_version=1, priority=100)\n",
    "f_no_caps": _HOOK
    + "    register('no-caps', lambda: type('NoCaps', (jaxcore.BaseBackend,), {'name': 'no-caps'})(),"
    " api_version=1)\n",
}


def write_faults(root: Path) -> None:
    for name, body in FAULTS.items():
        (root / f"{name}.py").write_text(_HEAD + body)


def run_devices(root: Path, plugins: str, timeout_s: str, *code: str) -> subprocess.CompletedProcess[str]:
    """`jaxcore devices --json` (or python -c CODE) with only `plugins`, in a subprocess with a timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXCORE_")}
    paths = [root, ROOT / "core", ROOT / "plugins" / "cpu"]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
    env.update(JAXCORE_DISABLE_PLUGIN_AUTOLOAD="1", JAXCORE_PLUGINS=plugins, JAXCORE_PLUGIN_TIMEOUT=timeout_s)
    args = ["-c", code[0]] if code else ["-m", "jaxcore.cli", "devices", "--json"]
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=90)


def test_every_fault_is_isolated_and_reported(tmp_path: Path) -> None:
    write_faults(tmp_path)
    proc = run_devices(tmp_path, ",".join(["cpu", *FAULTS]), "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    devices = {d["name"]: d for d in doc["devices"]}
    plugins = {p["name"]: p for p in doc["plugins"]}
    assert doc["default"] == "cpu" and devices["cpu"]["status"] == "ready" and devices["cpu"]["smoke"]["ok"]

    def plugin_error(name: str) -> str:
        assert plugins[name]["status"] == "error", plugins[name]
        return plugins[name]["error"]

    assert "import failed: RuntimeError: broken at import on purpose" in plugin_error("f_import_error")
    assert "jaxcore_register_devices raised ValueError: broken hook" in plugin_error("f_hook_error")
    assert plugin_error("f_hang_import") == "importing the plugin timed out after 3 s"
    assert plugin_error("f_hang_hook") == "its jaxcore_register_devices hook timed out after 3 s"
    assert "SystemExit: the plugin called sys.exit(3)" in plugin_error("f_exit_import")
    assert "SystemExit: the plugin called sys.exit(4)" in plugin_error("f_exit_hook")
    assert "already registered by plugin 'jaxcore-cpu', which keeps it" in plugin_error("f_takes_cpu")
    assert devices["cpu"]["plugin"] == "jaxcore-cpu" and devices["cpu"]["conflicts"] == ["f_takes_cpu"]

    def device(name: str, status: str) -> str:
        assert devices[name]["status"] == status, devices[name]
        return devices[name]["reason"]

    assert "ZeroDivisionError" in device("factory-error", "error") and devices["factory-error"]["hint"]
    assert device("hang-factory", "unavailable") == "timed out after 3 s: the factory did not return"
    assert "JAXCORE_PLUGIN_TIMEOUT" in devices["hang-factory"]["hint"]
    assert "sys.exit(5)" in device("exit-factory", "error")
    assert "built for jaxcore API 999" in device("api-version", "error")
    assert "has no `capabilities`" in device("no-caps", "error")
    ready = [d["name"] for d in doc["devices"] if d["status"] == "ready"]
    assert ready == ["cpu"]


def test_the_table_names_each_fault(tmp_path: Path) -> None:
    write_faults(tmp_path)
    env_code = "import sys; from jaxcore import cli; sys.exit(cli.main(['devices']))"
    proc = run_devices(tmp_path, "cpu,f_hang_factory,f_takes_cpu,f_exit_import", "2", env_code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "reason: timed out after 2 s: the factory did not return" in out
    assert "conflict: also registered by f_takes_cpu" in out
    assert "f_exit_import" in out and "sys.exit(3)" in out


def test_a_named_device_does_not_wait_for_a_hanging_import(tmp_path: Path) -> None:
    # The limit is 600 s: if get_backend('cpu') waited on the hanging plugin, the 90 s subprocess timeout
    # would fire. It only waits on the plugin whose entry point is named 'cpu'.
    write_faults(tmp_path)
    code = (
        "import jaxcore; b = jaxcore.get_backend('cpu'); "
        "print('ok', b.name, jaxcore.device_info('cpu').status)"
    )
    proc = run_devices(tmp_path, "cpu,f_hang_import,f_hang_hook", "600", code)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok", "cpu", "ready"], proc.stdout + proc.stderr


def test_init_and_get_backend_are_bounded_by_a_hanging_factory(tmp_path: Path) -> None:
    write_faults(tmp_path)
    code = textwrap.dedent(
        """
        import jaxcore
        print(jaxcore.init())
        try:
            jaxcore.get_backend("hang-factory")
        except RuntimeError as exc:
            print("raised", "timed out after 2 s" in str(exc))
        print(jaxcore.get_backend().name)
        """
    )
    proc = run_devices(tmp_path, "cpu,f_hang_factory", "2", code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split("\n")[:3] == ["['cpu']", "raised True", "cpu"]


# ---- in process --------------------------------------------------------------------------------


class _Host(HostMemory, BaseBackend):
    capabilities = Capabilities(dtypes=frozenset({DType.float32}), routines=frozenset(), max_args=4)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def _compile_kernel(self, kernel: Any) -> None:
        return None

    def _run(self, exe: Any, inputs: list[Any], outputs: list[Any]) -> None:
        pass


class Plugin:
    def __init__(self, **factories: Callable[[], Any]) -> None:
        self.factories = factories

    @jaxcore.hookimpl
    def jaxcore_register_devices(self, register: Any) -> None:
        for name, factory in self.factories.items():
            register(name, factory, api_version=API_VERSION)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Registry]]:
    def make(**kw: Any) -> Registry:
        kw.setdefault("disable_plugin_autoload", True)
        reg = Registry(Settings(**kw))
        monkeypatch.setattr(registry, "_registry", reg)
        return reg

    yield make


def bounded(fn: Callable[[], Any], seconds: float = 60) -> Any:
    """Run fn on a thread; fail (instead of hanging) if it has not returned in `seconds`."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "deadlock: the call did not return"
    if "exc" in box:
        raise box["exc"]
    return box["value"]


def test_a_factory_whose_helper_thread_calls_get_backend_does_not_deadlock(
    fresh: Callable[..., Registry],
) -> None:
    fresh()

    def helper_factory() -> BaseBackend:
        seen: list[str] = []
        t = threading.Thread(target=lambda: seen.append(jaxcore.get_backend("plain").name))
        t.start()
        t.join()
        assert seen == ["plain"]
        return _Host("helper")

    jaxcore.register_plugin(Plugin(plain=lambda: _Host("plain"), helper=helper_factory))
    assert bounded(lambda: jaxcore.get_backend("helper").name) == "helper"


@pytest.mark.parametrize("timeout", [30.0, 0.0], ids=["threads", "inline"])
def test_init_of_every_device_lets_a_factory_wait_on_another_device(
    fresh: Callable[..., Registry], timeout: float
) -> None:
    """`init()` claims every device before it starts their factories: a helper thread of the first
    factory asking for a device claimed but not yet started once waited on a job that had no thread
    (reported at once as "timed out after 30 s ... Ready devices: none"; with timeout 0 it hung).
    Whoever needs a job first now starts it."""
    fresh(plugin_timeout=timeout)
    seen: list[str] = []

    def helper_factory() -> BaseBackend:  # "helper" sorts before "plain": its factory starts first
        def ask() -> None:
            try:
                seen.append(jaxcore.get_backend("plain").name)
            except RuntimeError as exc:
                seen.append(str(exc))

        t = threading.Thread(target=ask)
        t.start()
        t.join()
        return _Host("helper")

    jaxcore.register_plugin(Plugin(plain=lambda: _Host("plain"), helper=helper_factory))
    assert bounded(jaxcore.init, 20) == ["helper", "plain"]
    assert seen == ["plain"]


def test_a_factory_asking_for_its_own_device_fails_fast(fresh: Callable[..., Registry]) -> None:
    fresh()
    seen: list[str] = []

    def selfish() -> BaseBackend:
        try:
            jaxcore.get_backend("selfish")
        except RuntimeError as exc:
            seen.append(str(exc))
        return _Host("selfish")

    jaxcore.register_plugin(Plugin(selfish=selfish))
    assert bounded(lambda: jaxcore.get_backend("selfish").name) == "selfish"
    assert len(seen) == 1 and "initialisation in progress" in seen[0]


def test_sys_exit_in_a_hook_or_factory_is_a_plugin_failure(fresh: Callable[..., Registry]) -> None:
    fresh(plugin_timeout=0)  # inline too: the calling thread catches SystemExit as well

    class ExitHook:
        @jaxcore.hookimpl
        def jaxcore_register_devices(self, register: Any) -> None:
            sys.exit(7)

    info = jaxcore.register_plugin(ExitHook(), name="exit-hook")
    assert info.status == "error" and "sys.exit(7)" in info.error
    jaxcore.register_plugin(Plugin(bye=lambda: sys.exit(8), ok=lambda: _Host("ok")))
    assert jaxcore.init() == ["ok"]
    assert "sys.exit(8)" in jaxcore.device_info("bye").reason


def test_timeout_zero_runs_the_factory_in_the_calling_thread(fresh: Callable[..., Registry]) -> None:
    threads: list[threading.Thread] = []

    def where() -> BaseBackend:
        threads.append(threading.current_thread())
        return _Host("where")

    fresh(plugin_timeout=0)
    jaxcore.register_plugin(Plugin(where=where))
    jaxcore.get_backend("where")
    fresh()
    jaxcore.register_plugin(Plugin(where=where))
    jaxcore.get_backend("where")
    assert threads[0] is threading.current_thread() and threads[1] is not threading.current_thread()


def test_duplicate_names_go_to_the_entry_point_named_after_the_device(
    fresh: Callable[..., Registry], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "aaa" loads first in name order, but the entry point "twin" is named after the device, so it wins;
    # "aaa" and "bbb" both register "solo", which no entry point is named after: the first in order wins.
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod, devs in {"dup_a": ["twin", "solo"], "dup_b": ["solo"], "dup_twin": ["twin"]}.items():
        regs = "".join(f"    register('{d}', lambda: None, api_version={API_VERSION})\n" for d in devs)
        (tmp_path / f"{mod}.py").write_text("import jaxcore\n" + _HOOK + regs)
    info = tmp_path / "jaxcore_dups-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxcore-dups\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[jaxcore]\naaa = dup_a\nbbb = dup_b\ntwin = dup_twin\n")
    fresh(plugins=("aaa", "bbb", "twin"))
    assert jaxcore.device_info("twin").plugin == "jaxcore-dups[twin]"  # settled by its owner alone
    assert jaxcore.devices() == ["solo", "twin"]  # every plugin loaded: now the conflicts are known
    twin, solo = jaxcore.device_info("twin"), jaxcore.device_info("solo")
    assert twin.plugin == "jaxcore-dups[twin]" and twin.conflicts == ("jaxcore-dups[aaa]",)
    assert solo.plugin == "jaxcore-dups[aaa]" and solo.conflicts == ("jaxcore-dups[bbb]",)
    plugins = {p.name: p for p in jaxcore.plugin_info()}
    assert "'twin' is already registered by plugin 'jaxcore-dups[twin]'" in plugins["jaxcore-dups[aaa]"].error
    assert plugins["jaxcore-dups[aaa]"].devices == ("solo",)
    assert "'solo' is already registered by plugin 'jaxcore-dups[aaa]'" in plugins["jaxcore-dups[bbb]"].error


def test_plugin_timeout_setting() -> None:
    assert Settings.from_env({}).plugin_timeout == 30
    assert Settings.from_env({"JAXCORE_PLUGIN_TIMEOUT": "2.5"}).plugin_timeout == 2.5
    assert Settings.from_env({"JAXCORE_PLUGIN_TIMEOUT": "0"}).plugin_timeout == 0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="JAXCORE_PLUGIN_TIMEOUT"):
            Settings.from_env({"JAXCORE_PLUGIN_TIMEOUT": bad})


def test_a_backend_missing_a_hook_is_reported_as_that(fresh: Callable[..., Registry]) -> None:
    fresh()

    class NoRun(_Host):
        _run = BaseBackend._run  # type: ignore[assignment]

    class NotABackend:
        name = "bare"
        capabilities = _Host.capabilities

    jaxcore.register_plugin(Plugin(norun=lambda: NoRun("norun"), bare=NotABackend))
    assert jaxcore.init() == []
    assert "does not implement the BaseBackend hook _run" in jaxcore.device_info("norun").reason
    assert "lacks required methods: malloc, inc_ref" in jaxcore.device_info("bare").reason
    assert {d.status for d in jaxcore.device_info()} == {"error"}
