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
