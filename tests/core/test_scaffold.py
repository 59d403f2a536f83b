"""`jaxcore new-plugin NAME`: the package it writes installs, lists in `jaxcore devices` and runs the suite.

The unfinished hooks must fail clearly (NotImplementedError naming the hook), never as a crash or a
missing device: that is the starting line of every out-of-tree plugin.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jaxcore import cli, scaffold
from jaxcore.backend import API_VERSION


def run(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jaxcore.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """`jaxcore new-plugin demo`, pip-installed (no deps: jaxcore is already here) into a private target."""
    work = tmp_path_factory.mktemp("scaffold")
    out = io.StringIO()
    assert cli.main(["new-plugin", "demo", "--dir", str(work)], out=out) == 0
    root = work / "jaxcore-demo"
    assert f"pip install -e {root}" in out.getvalue()
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(root)],
        check=True,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXCORE_")}
    env["JAXCORE_CACHE_DIR"] = str(work / "cache")
    env["COLUMNS"] = "2000"  # pytest's one-line failure summaries, untruncated
    env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return root, env


def test_the_package_declares_its_entry_point_and_api(installed: tuple[Path, dict[str, str]]) -> None:
    root, _ = installed
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["jaxcore"] == {"demo": "jaxcore_demo.plugin"}
    plugin = (root / "jaxcore_demo" / "plugin.py").read_text()
    assert f"api_version={API_VERSION}," in plugin and "from jaxcore.plugin import" in plugin
    backend = (root / "jaxcore_demo" / "backend.py").read_text()
    assert "import jaxcore\n" not in backend and "from jaxcore.plugin import" in backend
    assert (root / "tests" / "test_conformance.py").is_file()


def test_it_lists_in_jaxcore_devices_at_once(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, env = installed
    proc = run(env, tmp_path, "devices")
    line = next(ln for ln in proc.stdout.splitlines() if ln.lstrip(" *").startswith("demo "))
    assert "jaxcore-demo 0.1.0" in line and "ready" in line, proc.stdout
    smoke = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("demo ") and "FAILED" in ln)
    assert "NotImplementedError: jaxcore-demo: DemoBackend._compile_kernel is not implemented yet" in smoke
    assert proc.returncode == 1  # a device whose smoke kernel fails is what `jaxcore devices` exists to show


def test_the_conformance_suite_runs_and_names_the_missing_hook(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    _, env = installed
    proc = run(env, tmp_path, "conformance", "demo", "--", "-q", "-p", "no:cacheprovider", "-k", "protocol")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    passed, failed, _ = (int(v) for v in re.search(r"^protocol\s+(\d+)/(\d+)/(\d+)", out, re.M).groups())
    assert passed > 0 and failed > 0  # storage works from the start; compiling does not yet
    failures = [ln for ln in out.splitlines() if ln.startswith("FAILED ")]
    # Each failure's report section (between pytest's "____ name ____" rules) names the hook's error.
    sections = re.split(r"^_{3,} .+ _{3,}$", out.split("short test summary")[0], flags=re.M)[1:]
    assert failures and len(sections) == len(failures), (failures, len(sections))
    assert all("NotImplementedError" in sec for sec in sections), failures
    assert "DemoBackend._compile_kernel is not implemented yet" in out


def test_bad_names_and_existing_directories(tmp_path: Path) -> None:
    for bad in ("Demo", "my dev", "9lives", "", "-x"):
        with pytest.raises(ValueError, match="plugin name"):
            scaffold.package_files(bad)
    scaffold.new_plugin("twice", tmp_path)
    out = io.StringIO()
    assert cli.main(["new-plugin", "twice", "--dir", str(tmp_path)], out=out) == 2
    assert "already exists" in out.getvalue()
    files = scaffold.package_files("my-dev")
    assert "class MyDevBackend(BaseBackend):" in files["jaxcore_my_dev/backend.py"]
    meta = tomllib.loads(files["pyproject.toml"])
    assert meta["project"]["name"] == "jaxcore-my-dev"
    assert meta["project"]["entry-points"]["jaxcore"] == {"my-dev": "jaxcore_my_dev.plugin"}
    assert 'register("my-dev", _create' in files["jaxcore_my_dev/plugin.py"]
    for rel, text in files.items():
        if rel.endswith(".py"):
            compile(text, rel, "exec")
