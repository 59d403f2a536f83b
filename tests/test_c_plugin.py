"""The compiled example device (examples/jaxcore-c-plugin), installed for real, passes the whole suite.

Its kernels are C rendered by the core's program renderer and built by the system C compiler, so
this is the proof that a compiled C-like device is a dialect and a runtime. The run uses a private
compile cache, so every kernel is compiled here (the CI machine starts cold too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "jaxcore-c-plugin"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (apt-get install gcc)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The plugin installed into a private directory, an environment that sees it, a fresh cache."""
    target = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--disable-pip-version-check", "--target", str(target), str(EXAMPLE)], check=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAXCORE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    env["JAXCORE_DEVICES"] = "c,cpu"  # cpu is the differential reference; the GPUs need not start
    return env


def _jaxcore(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "jaxcore.cli", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=1200)


def test_c_device_is_discovered_and_runs_a_kernel(installed: dict[str, str], tmp_path: Path) -> None:
    proc = _jaxcore(installed, tmp_path, "devices")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.lstrip(" *").startswith("c "))
    assert "jaxcore-c" in line and "ready" in line, proc.stdout


def test_c_device_passes_the_whole_suite(installed: dict[str, str], tmp_path: Path) -> None:
    start = time.monotonic()
    proc = _jaxcore(installed, tmp_path, "conformance", "c", "--", "-q", "-p", "no:cacheprovider")
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    total = next(ln for ln in out.splitlines() if ln.startswith("total"))
    passed, failed, unsupported = (int(v) for v in total.split()[1].split("/"))
    assert failed == 0 and unsupported == 0 and passed > 1000, total
    libraries = list(Path(installed["JAXCORE_CACHE_DIR"], "c").glob("*.so"))
    assert len(libraries) > 500, "every kernel is compiled into the disk cache"
    print(f"\nc conformance: {total.split()[1]} (passed/failed/unsupported) in {took:.0f} s")
