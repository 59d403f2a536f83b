"""The webgpu plugin's tests run on a real device (lavapipe in CI); without a WebGPU adapter they skip,
except under CI=true, where they fail."""

from __future__ import annotations

import os

import pytest

import jaxcore


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def gpu():
    from jaxcore_webgpu.backend import WebGpuBackend
    from jaxcore_webgpu.device import open_device

    try:
        dev = open_device()
    except jaxcore.DeviceUnavailable as e:
        if running_in_ci():
            pytest.fail(f"CI=true needs a WebGPU adapter: {e}")
        pytest.skip(f"no WebGPU adapter: {e}")
    backend = WebGpuBackend(dev)
    yield backend
    backend.close()


@pytest.fixture
def retarget(gpu, monkeypatch):
    """`retarget(**changes)`: the rest of the test runs on `gpu` with its WgslTarget so changed
    (given back afterwards); routine plans made before or under the change are dropped, so none
    planned for one target is run on another."""
    from dataclasses import replace

    def apply(**changes):
        monkeypatch.setitem(gpu.__dict__, "target", replace(gpu.target, **changes))
        gpu._routine_cache.clear()
        return gpu.target

    yield apply
    gpu._routine_cache.clear()
