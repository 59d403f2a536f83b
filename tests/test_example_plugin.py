"""The example third-party plugin, installed for real, is discovered and passes the conformance suite.

This is the path a plugin author takes: build and install the package, let jaxcore find it
through its entry point, and run `jaxcore conformance DEVICE`. The example declares a small
capability set, so the suite must also show what it does not declare as unsupported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "jaxcore-example-plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The example built and installed into a private directory, and an environment that sees it."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAXCORE_DEVICES"] = "example,cpu"  # cpu is the differential reference; the rest need not start
    return env


def _jaxcore(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jaxcore.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_example_is_discovered(installed: dict[str, str], tmp_path: Path) -> None:
    proc = _jaxcore(installed, tmp_path, "devices")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.lstrip(" *").startswith("example"))
    assert "jaxcore-example" in line and "ready" in line


def test_example_passes_the_suite(installed: dict[str, str], tmp_path: Path) -> None:
    proc = _jaxcore(installed, tmp_path, "conformance", "example", "--", "-q", "-p", "no:cacheprovider")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    total = next(ln for ln in out.splitlines() if ln.startswith("total"))
    passed, failed, unsupported = (int(v) for v in total.split()[1].split("/"))
    assert failed == 0 and passed > 100
    assert unsupported > 0, "the example declares a small capability set; the rest must show as unsupported"
