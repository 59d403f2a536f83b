"""Repo-wide test setup, for every test directory below: tests/ and each plugin's own
plugins/<name>/tests (so `pytest plugins/cpu/tests` alone gets the same session as `make test`).
`pytest` also runs the conformance suite against every in-tree device.

How (the simplest option that keeps one command): `tests/test_conformance_intree.py` re-exports the
suite's cases (`jaxcore.conformance.cases()`), and this file

- loads the conformance pytest plugin, unless pytest autoloads it from the installed entry point
  (loading it twice would be an error);
- defaults ``--jaxcore-device`` to ``all`` (every ready device);
- makes every device plugin under ``plugins/*`` known to the registry, even when it is importable
  but not pip-installed (its ``[project.entry-points.jaxcore]`` table says which module to load);
- points ``JAXCORE_CACHE_DIR`` at a fresh temporary directory for the whole session (set here, at
  import, before any device plugin loads), so tests never read or write the user's disk cache and
  a stale compiled kernel from an earlier checkout can never be served;
- registers the test-only devices ``cpu-float32`` and ``cpu-nobool`` (tests/restricted_device.py:
  the cpu backend declaring fewer dtypes and routines), so the suite runs on devices with real
  restrictions and its ``unsupported`` cases check real content;
- with ``CI=true``, derandomises Hypothesis (the same examples every run) and requires every
  in-tree device (``--jaxcore-require``): one that is missing fails the session with the
  registry's reason, never a skip. Elsewhere a missing device is listed with its reason under the
  summary table.

In-tree device names are the entry-point names in ``plugins/*/pyproject.toml`` (``cpu = ...``,
``wasm = ...``) plus whatever devices those plugins register.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from jaxcore import settings as jaxcore_settings
from jaxcore.conformance import plugin_autoloaded

REPO = Path(__file__).resolve().parent

# The session's own disk cache: set before pytest_configure registers the device plugins, and
# settings re-read in case anything read the environment while pytest was importing plugins.
SESSION_CACHE_DIR = tempfile.mkdtemp(prefix="jaxcore-test-cache-")
os.environ["JAXCORE_CACHE_DIR"] = SESSION_CACHE_DIR
jaxcore_settings.reload()

pytest_plugins = [] if plugin_autoloaded() else ["jaxcore.conformance.plugin"]


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# In CI the property tests draw the same examples every run, so a red main always points at a change,
# never at a lucky draw; developers' runs keep exploring new examples (and keep finding bugs).
# Hypothesis is a test extra: a lean machine that runs only a plugin's own tests (.ci/device-bench.sh
# on a lent GPU) may not have it, and then runs no property tests either.
try:
    from hypothesis import settings
except ImportError:
    pass
else:
    settings.register_profile("ci", derandomize=True, database=None)
    if running_in_ci():
        settings.load_profile("ci")


def in_tree_plugins() -> list[tuple[Path, str, dict[str, str]]]:
    """(plugin dir, distribution name, {entry-point name: module}) for every plugins/*/pyproject.toml."""
    found = []
    for pyproject in sorted((REPO / "plugins").glob("*/pyproject.toml")):
        meta = tomllib.loads(pyproject.read_text())
        eps = meta.get("project", {}).get("entry-points", {}).get("jaxcore", {})
        if eps:
            found.append((pyproject.parent, meta["project"]["name"], dict(eps)))
    return found


def register_in_tree_plugins() -> tuple[list[str], list[str]]:
    """Make the in-tree device plugins known to the registry; return (expected devices, problems)."""
    import jaxcore

    expected: list[str] = []
    problems: list[str] = []
    loaded = {p.module: p for p in jaxcore.plugin_info()}  # also runs entry-point discovery once
    for path, dist, eps in in_tree_plugins():
        for ep_name, module in eps.items():
            expected.append(ep_name)
            info = loaded.get(module)
            if info is None:
                if importlib.util.find_spec(module.split(".")[0]) is None:
                    sys.path.insert(0, str(path))
                try:
                    info = jaxcore.register_plugin(importlib.import_module(module), name=dist)
                except Exception as exc:  # reported (or fatal in CI) below, with the reason
                    problems.append(
                        f"in-tree plugin {dist} ({module}) did not load: {type(exc).__name__}: {exc}"
                    )
                    continue
            if info.status == "error":
                problems.append(f"in-tree plugin {dist} ({module}) failed: {info.error}")
            expected.extend(info.devices)
    return list(dict.fromkeys(expected)), problems


def _import_test_module(path: Path) -> ModuleType:
    """Import a helper module of the test tree by its path (tests/ is not a package, and need not
    be on sys.path when only a plugin's tests run)."""
    module = sys.modules.get(path.stem)
    if module is None:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    return module


def register_test_devices() -> list[str]:
    """Register the test-only devices (tests/restricted_device.py); returns their names."""
    import jaxcore

    restricted_device = _import_test_module(REPO / "tests" / "restricted_device.py")

    if not any(p.module == restricted_device.__name__ for p in jaxcore.plugin_info()):
        jaxcore.register_plugin(restricted_device, name="jaxcore-test-restricted")
    return list(restricted_device.DEVICES)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("jaxcore_device", None) is None:
        config.option.jaxcore_device = "all"
    expected, problems = register_in_tree_plugins()
    expected += register_test_devices()
    config.stash[_PROBLEMS] = problems
    if running_in_ci():
        given = [n for n in (config.getoption("jaxcore_require") or "").split(",") if n]
        config.option.jaxcore_require = ",".join(dict.fromkeys([*given, *expected]))


_PROBLEMS = pytest.StashKey[list[str]]()


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(SESSION_CACHE_DIR, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    mode = "CI: every in-tree device is required" if running_in_ci() else "missing devices are reported"
    return [f"jaxcore conformance: --jaxcore-device={config.getoption('jaxcore_device')} ({mode})"]


# Lines a test leaves for the end of the run, by heading: a ("jaxcore-summary", (heading, lines))
# user property, which reaches this process in the test's report from any xdist worker.
_SUMMARIES: dict[str, list[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for key, value in report.user_properties:
            if key == "jaxcore-summary":
                heading, lines = value
                _SUMMARIES.setdefault(heading, []).extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for problem in config.stash.get(_PROBLEMS, []):
        terminalreporter.write_line(f"not available: {problem}", yellow=True)
    for heading, lines in _SUMMARIES.items():
        terminalreporter.write_sep("=", heading)
        for line in lines:
            terminalreporter.write_line(line)


# With pytest-xdist (`make test` runs two workers), each test file goes to one worker, except that
# the browser tests and the in-tree conformance run's webgpu and webgl cases share one (the parity
# tests replay in Chromium what those cases recorded in the same process), and the conformance
# run's other devices go out a device at a time (so the other worker takes them: the recorded
# share is the run's longest).
_CONFORMANCE = "tests/test_conformance_intree.py"
_RECORDED_DEVICES = ("webgpu", "webgl")


def _xdist_scope(nodeid: str) -> str:
    """The scope a test is scheduled with: tests of one scope run on one worker, in order."""
    path, _, rest = nodeid.partition("::")
    if path.startswith("tests/browser/"):
        return "recorded"
    if path != _CONFORMANCE:
        return path
    params = rest.partition("[")[2].rstrip("]")
    if not params or any(params == d or params.startswith(d + "-") for d in _RECORDED_DEVICES):
        return "recorded"
    return f"{path}[{params.split('-', 1)[0]}]"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _xdist_scope(nodeid)

    return ByFile(config, log)
