"""The adapter probes: what the driver does that the contract forbids decides how the device
spells float32; float16 is declared everywhere (held in float32, stored as bits)."""

from __future__ import annotations

from typing import Any

from jaxcore_webgpu.device import keeps_subnormals

from jaxcore.dtype import DType


def test_quirks_and_dtypes_follow_the_probes(gpu: Any) -> None:
    caps = gpu.capabilities
    assert DType.float16 in caps.dtypes
    assert ("flushes-f32-subnormals" in caps.quirks) == (not keeps_subnormals(gpu.device))
