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

import numpy as np
import pytest

from jaxcore.plugin import AluExp, AluVar, DType, Kernel, ShapeTracker

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
    # the fuzz area's cases each compile a library (half of the run): the in-tree devices take the
    # full count, the example a seventh of it
    env["JAXCORE_FUZZ_COUNT"] = "100"
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


def test_a_padded_float16_read_keeps_its_parentheses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A masked view read renders as `(valid ? read : 0)`; a cast that changes nothing in C (float16 to
    float32) must keep it whole, or `* -3` binds to the 0 alone (fuzz seed 4242, case 1086)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from jaxcore_c.backend import CBackend

    st = ShapeTracker.from_shape((4, 2)).pad(((1, 2), (2, 0)))
    row, col = AluExp.idiv(AluVar.gidx, AluExp.i32(4)), AluExp.mod(AluVar.gidx, AluExp.i32(4))
    read = AluExp.global_view(DType.float16, 0, st, [row, col])
    kernel = Kernel(1, 28, AluExp.cast(DType.float32, read) * -3.0)
    x = np.array([1.5, -65504.0, 2.0, -0.0, 0.25, 3.0, 1e-7, 4.0], np.float16)
    backend = CBackend()
    src, out = backend.malloc(x.nbytes, x.tobytes()), backend.malloc(kernel.bytes)
    backend.dispatch(backend.prepare_kernel(kernel), [src], [out])
    want = np.pad(x.reshape(4, 2), ((1, 2), (2, 0))).astype(np.float32).ravel() * np.float32(-3.0)
    np.testing.assert_array_equal(np.frombuffer(backend.read(out), np.float32), want)
