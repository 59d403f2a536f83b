"""Browser parity: record the conformance run's webgpu and webgl dispatches, replay them in Chromium.

When this directory is collected together with the conformance suite (`make test`, `pytest`), the
suite's webgpu and webgl backends are wrapped by `recording.Recorder` before anything runs, and the
parity tests are moved to the end of the session, so they compare what the suite itself
dispatched. Collected alone (`pytest tests/browser`), the parity fixture runs the suite's cases on
webgpu and webgl in a subprocess with the recorder as a plugin, and compares those.

One Chromium serves the whole session (`browser` fixture). It cannot start: in CI (CI=true) that
fails the session's parity tests; elsewhere they skip with the exact install command.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import recording  # noqa: E402

DEVICES = ("webgpu", "webgl")
_RECORDER = pytest.StashKey[recording.Recorder]()
_IN_SESSION = pytest.StashKey[set[str]]()


def _is_conformance(item: Any) -> bool:
    """A conformance case on webgpu or webgl (the dispatches worth recording)."""
    cs = getattr(item, "callspec", None)
    return cs is not None and cs.params.get("backend") in DEVICES and "conformance" in str(item.fspath)


def _is_parity(item: pytest.Item) -> bool:
    return Path(str(item.fspath)).resolve().parent == HERE and item.get_closest_marker("parity") is not None


class _CurrentTest:
    """A global plugin (conftest runtest hooks only see this directory's items)."""

    def __init__(self, rec: recording.Recorder) -> None:
        self.rec = rec

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.rec.current_test = item.nodeid
        self.rec.active = _is_conformance(item)

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        if self.rec.active:
            self.rec.finish()  # outputs the case left unread, while the slots still exist
        self.rec.active = False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "parity: compares with what the conformance run recorded (runs last)")


def _here(item: Any) -> bool:
    return Path(str(item.fspath)).resolve().parent == HERE


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    # Every browser test runs last: the parity tests compare what the rest recorded, and one
    # browser then serves them all (started by the first that needs it).
    mine = [i for i in items if _here(i)]
    items[:] = [i for i in items if not _here(i)] + [i for i in mine if not _is_parity(i)]
    items += [i for i in mine if _is_parity(i)]
    parity = [i for i in mine if _is_parity(i)]
    if not parity:
        return
    devices = {i.callspec.params["backend"] for i in items if _is_conformance(i)}
    config.stash[_IN_SESSION] = devices
    rec = config.stash[_RECORDER] = recording.Recorder(active=False)
    if not devices:
        return
    import jaxcore

    exporters = recording.exporters()
    for name in sorted(devices):
        rec.attach(jaxcore.get_backend(name), exporters[name])
    config.pluginmanager.register(_CurrentTest(rec), "jaxcore-browser-recorder")


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    try:
        b = harness.launch(tmp_path_factory.mktemp("browser"))
    except harness.BrowserUnavailable as e:
        if harness.in_ci():
            pytest.fail(f"CI: the browser for the parity tests cannot start: {e}", pytrace=False)
        pytest.skip(f"no browser for the parity tests: {e}")
    yield b
    b.close()


@pytest.fixture(scope="session")
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{device: [Case]} from this session's conformance run, or from a subprocess run of it."""
    config = request.config
    rec = config.stash.get(_RECORDER, None) or recording.Recorder()
    here = config.stash.get(_IN_SESSION, set())
    rec.finish()
    out: dict[str, Any] = {"how": {}, "extra_reads": rec.extra_reads, "dispatches": rec.dispatches}
    for d in DEVICES:
        out[d] = [c for c in rec.complete() if c.device == d]
        out["how"][d] = "this session's conformance run"
    missing = [d for d in DEVICES if d not in here]
    if missing:
        got = _record_in_subprocess(missing, tmp_path_factory.mktemp("record") / "cases.pkl")
        for d in missing:
            out[d] = [c for c in got["cases"] if c.device == d]
            out["how"][d] = f"a subprocess conformance run (exit status {got['exitstatus']})"
        out["extra_reads"] += got["extra_reads"]
        out["dispatches"] += got["dispatches"]
    return out


def _record_in_subprocess(devices: list[str], path: Path) -> dict[str, Any]:
    import pickle
    import subprocess

    repo = HERE.parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAXCORE_BROWSER_RECORD"] = str(path)
    env["JAXCORE_BROWSER_DEVICES"] = ",".join(devices)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(repo / "tests" / "test_conformance_intree.py"),
        f"--jaxcore-device={','.join(devices)}",
        "-p",
        "recording",
        "-q",
        "-p",
        "no:cacheprovider",
        "--no-header",
    ]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    if not path.exists():
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"the recording run of the conformance suite wrote nothing:\n{tail}")
    with open(path, "rb") as f:
        return pickle.load(f)
