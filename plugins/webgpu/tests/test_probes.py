"""The adapter probes: what the driver does that the contract forbids decides what the device
declares (float16 only where its conversions and NaN arithmetic are IEEE's)."""

from __future__ import annotations

from typing import Any

import pytest
from jaxcore_webgpu.device import _F16_PROBE, exact_f16, keeps_subnormals

from jaxcore.dtype import DType


def test_quirks_and_dtypes_follow_the_probes(gpu: Any) -> None:
    caps = gpu.capabilities
    f16 = "shader-f16" in gpu.gpu.features
    assert (DType.float16 in caps.dtypes) == (f16 and exact_f16(gpu.device))
    assert ("inexact-f16" in caps.quirks) == (f16 and not exact_f16(gpu.device))
    assert ("flushes-f32-subnormals" in caps.quirks) == (not keeps_subnormals(gpu.device))


def test_the_float16_probe_catches_a_conversion_one_ulp_off(gpu: Any) -> None:
    """What NVIDIA's driver gave for f32(f16(1.0)): 0.99999994. A probe whose shader computes
    that, on this device, must say the device's float16 is not exact."""
    if "shader-f16" not in gpu.gpu.features:
        pytest.skip("the adapter has no shader-f16")
    assert exact_f16(gpu.device)
    wrong = _F16_PROBE.replace(
        "y[i] = bitcast<u32>(f32(f16(x[i])));", "y[i] = bitcast<u32>(f32(f16(x[i]))) - 1u;"
    )
    assert wrong != _F16_PROBE and not exact_f16(gpu.device, wrong)
    nan_lost = _F16_PROBE.replace("f32(nan + one)", "f32(one)")
    assert nan_lost != _F16_PROBE and not exact_f16(gpu.device, nan_lost)
