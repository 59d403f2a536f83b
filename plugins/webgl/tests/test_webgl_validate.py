"""JAXCORE_WEBGL_VALIDATE: new programs drawn once in a child process before this one compiles them,
so that a driver crash on a program is a ShaderError at prepare, not the end of the process."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from jaxcore_webgl import canary
from jaxcore_webgl.device import ShaderError

from jaxcore import settings
from jaxcore.alu import AluExp
from jaxcore.conformance.harness import map_kernel, run_kernel
from jaxcore.routine import Routine, Routines

CRASH = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"


@pytest.fixture
def validating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A backend with JAXCORE_WEBGL_VALIDATE=on and its shaders dumped to tmp_path/dump."""
    from jaxcore_webgl.backend import WebGLBackend

    monkeypatch.setenv("JAXCORE_WEBGL_VALIDATE", "on")
    monkeypatch.setenv("JAXCORE_WEBGL_DUMP", str(tmp_path / "dump"))
    monkeypatch.setenv("JAXCORE_WEBGL_DISK_CACHE", "0")
    settings.reload()
    try:
        b = WebGLBackend(platform="egl")
    finally:
        monkeypatch.undo()
        settings.reload()
    yield b
    b.close()


def test_the_setting_and_auto_by_renderer() -> None:
    assert not canary.enabled("auto", "llvmpipe (LLVM 15.0.6, 256 bits)")
    assert not canary.enabled("", "Google SwiftShader")
    assert canary.enabled("auto", "NVIDIA H200/PCIe/SSE2") and canary.enabled("", "NVIDIA H200/PCIe/SSE2")
    assert canary.enabled("ON", "llvmpipe") and not canary.enabled("off", "NVIDIA H200")
    with pytest.raises(ValueError, match="JAXCORE_WEBGL_VALIDATE"):
        canary.enabled("sometimes", "llvmpipe")


def test_auto_is_off_on_llvmpipe(gl) -> None:
    setting = os.environ.get("JAXCORE_WEBGL_VALIDATE", "auto").strip().lower() or "auto"
    if setting != "auto":
        pytest.skip(f"JAXCORE_WEBGL_VALIDATE={setting} decides it here")
    assert ("llvmpipe" in gl.info.renderer) == (gl.device.canary is None)


def test_validated_programs_compute_the_same(validating, gl) -> None:
    """One persistent child checks every new program (kernels and a routine); results are unchanged."""
    x = np.linspace(-4, 4, 300).astype(np.float32)
    k = map_kernel(["float32"], x.size, lambda v: AluExp.mul(AluExp.sin(v), AluExp.f32(3)))
    assert run_kernel(validating, k, [x]).tobytes() == run_kernel(gl, k, [x]).tobytes()
    child = validating.device.canary.proc
    sort = Routine.build(Routines.Sort, [x.shape], ["float32"])
    from jaxcore.conformance.harness import run_routine

    (got,) = run_routine(validating, sort, [x[::-1].copy()])
    assert got.tolist() == sorted(x.tolist())
    assert validating.device.canary.proc is child and child.poll() is None  # one child for all
    assert validating.device.canary.checked >= 2
    child.kill()  # a child that ends between checks is replaced, not blamed on the next program
    child.wait()
    k2 = map_kernel(["float32"], x.size, lambda v: AluExp.sub(v, AluExp.f32(3)))
    assert run_kernel(validating, k2, [x]).tolist() == (x - 3).tolist()
    child = validating.device.canary.proc
    validating.close()
    assert child.poll() is not None  # closed with the backend


def test_a_driver_crash_is_a_shader_error_naming_the_kernel(
    validating, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child dies (SIGSEGV) on a program: prepare raises ShaderError naming the kernel and the
    signal, the source is kept in the dump dir, and the backend goes on (a fresh child)."""
    monkeypatch.setattr(canary, "child_argv", lambda: [sys.executable, "-c", CRASH])
    k = map_kernel(["float32"], 64, lambda v: AluExp.add(AluExp.exp(v), AluExp.f32(1)))
    with pytest.raises(ShaderError, match=r"(?s)preparing kernel \{ exp = .*SIGSEGV.*crashed-") as info:
        validating.prepare_kernel(k)
    assert str(k).splitlines()[0] in str(info.value)
    dumps = sorted(p.name for p in (tmp_path / "dump").glob("*.frag"))
    assert [n for n in dumps if n.startswith("crashed-")] and all(
        re.fullmatch(r"(\d{6}-|crashed-)[0-9a-f]{16}\.frag", n) for n in dumps
    ), dumps
    monkeypatch.undo()  # the real child again, started afresh by the next new program
    x = np.arange(64, dtype=np.float32) / 10
    k2 = map_kernel(["float32"], 64, lambda v: AluExp.mul(v, AluExp.f32(2)))
    assert run_kernel(validating, k2, [x]).tolist() == (x * 2).tolist()
    np.testing.assert_allclose(run_kernel(validating, k, [x]), np.exp(x) + 1, rtol=1e-6)


def test_a_cached_binary_was_validated_when_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A program loaded from the disk cache is not checked again: entries written with validation
    on are kept apart from those written with it off (which no check has seen)."""
    from jaxcore_webgl.backend import WebGLBackend

    monkeypatch.setenv("JAXCORE_CACHE_DIR", str(tmp_path))
    k = map_kernel(["float32"], 64, lambda v: AluExp.mul(v, AluExp.f32(5)))
    x = np.arange(64, dtype=np.float32)
    seen = []
    for mode in ("on", "on", "off", "on"):
        monkeypatch.setenv("JAXCORE_WEBGL_VALIDATE", mode)
        settings.reload()
        b = WebGLBackend(platform="egl")
        try:
            if b.device.binary_dir is None:
                pytest.skip("the driver offers no program binary format")
            assert run_kernel(b, k, [x]).tolist() == (x * 5).tolist()
            guard = b.device.canary
            seen.append((b.device.binary_hits, guard.checked if guard else None))
        finally:
            b.close()
    monkeypatch.undo()
    settings.reload()
    assert seen == [(0, 1), (1, 0), (0, None), (1, 0)], seen
