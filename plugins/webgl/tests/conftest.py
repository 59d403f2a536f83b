"""The webgl plugin's tests run on a real GL context: Mesa's llvmpipe through EGL here and in CI.

Without a context they skip with the reason and the fix, except under CI=true, where they fail.
The glfw path needs an X display: `x_display` starts Xvfb when DISPLAY is unset.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

APT = "apt-get install -y --no-install-recommends libegl1 libegl-mesa0 libgles2 libgl1-mesa-dri xvfb"


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(what: str) -> None:
    if running_in_ci():
        pytest.fail(f"CI=true needs {what}")
    pytest.skip(f"{what} is not available here ({APT})")


@pytest.fixture(scope="session")
def gl():
    """A WebGLBackend on the EGL path (no window system needed)."""
    from jaxcore_webgl.backend import WebGLBackend
    from jaxcore_webgl.context import ContextError

    try:
        backend = WebGLBackend(platform="egl")
    except ContextError as e:
        unavailable(f"an OpenGL ES 3.0 context through EGL: {e}")
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def x_display(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An X display for glfw: $DISPLAY if set, else a private Xvfb for the session."""
    if os.environ.get("DISPLAY"):
        yield os.environ["DISPLAY"]
        return
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        unavailable("Xvfb (package xvfb) for the glfw path")
    log = Path(tmp_path_factory.mktemp("xvfb")) / "xvfb.log"
    for num in range(91, 120):
        if Path(f"/tmp/.X11-unix/X{num}").exists() or Path(f"/tmp/.X{num}-lock").exists():
            continue
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [xvfb, f":{num}", "-screen", "0", "64x64x24", "-nolisten", "tcp"], stdout=out, stderr=out
            )
        for _ in range(100):
            if Path(f"/tmp/.X11-unix/X{num}").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        if proc.poll() is None:
            try:
                yield f":{num}"
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            return
    unavailable(f"a free X display for Xvfb (log: {log.read_text()[-500:] if log.exists() else ''})")
