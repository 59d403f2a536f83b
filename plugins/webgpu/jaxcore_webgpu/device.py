"""Opening the GPU: the adapter, the limits and features we ask for, and the WgslTarget they imply.

wgpu finds several adapters on one machine (on the H200 host both Vulkan and an OpenGL one for the
same GPU; on a laptop an integrated and a discrete GPU). We take only native compute APIs
(Vulkan, Metal, D3D12), a discrete GPU first, and ask for the adapter's own limits: the WebGPU
defaults are far below what hardware has (a 128 MiB storage binding, 8 storage buffers a stage).

`JAXCORE_WEBGPU_BACKEND=vulkan|metal|d3d12` restricts the choice; one that is not there declines.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import jaxcore
from jaxcore import settings
from jaxcore_webgpu.plugin import HINT

NATIVE_BACKENDS = ("Vulkan", "Metal", "D3D12")
_ADAPTER_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}

# Limits worth raising to the adapter's maximum (the rest keep WebGPU's defaults).
LIMITS = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-compute-workgroups-per-dimension",
    "max-uniform-buffer-binding-size",
    "max-bind-groups",
)
# Features used where present.
FEATURES = (
    "shader-f16",
    "shader-f64",
    "timestamp-query",
    "timestamp-query-inside-passes",
    "timestamp-query-inside-encoders",
    "subgroup",
    "subgroup-barrier",
    "shader-float32-atomic",
)


@dataclass(frozen=True)
class Gpu:
    """An opened device and what it was opened with."""

    adapter: Any
    device: Any
    info: dict[str, Any]
    limits: dict[str, int]
    features: frozenset[str]

    @property
    def description(self) -> str:
        i = self.info
        return f"{i.get('device', '?')} ({i.get('backend_type', '?')}, {i.get('adapter_type', '?')})"


def _runtime_dir() -> None:
    """Vulkan loaders warn without XDG_RUNTIME_DIR (headless CI, containers); give them a private one."""
    if not os.environ.get("XDG_RUNTIME_DIR"):
        path = os.path.join(tempfile.gettempdir(), f"jaxcore-xdg-{os.getuid()}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = path


def choose_adapter(adapters: list[Any], want: str | None) -> Any:
    """The best native-API adapter (a discrete GPU first), or DeviceUnavailable saying what was seen."""
    allowed: tuple[str, ...] = NATIVE_BACKENDS
    if want:
        allowed = tuple(b for b in NATIVE_BACKENDS if b.lower() == want.lower())
        if not allowed:
            names = ", ".join(b.lower() for b in NATIVE_BACKENDS)
            raise jaxcore.DeviceUnavailable(
                f"JAXCORE_WEBGPU_BACKEND={want!r} is not one of {names}",
                "unset JAXCORE_WEBGPU_BACKEND or name one of those",
            )
    ok = [a for a in adapters if a.info.get("backend_type") in allowed]
    if not ok:
        seen = ", ".join(f"{a.info.get('device')} ({a.info.get('backend_type')})" for a in adapters) or "none"
        raise jaxcore.DeviceUnavailable(
            f"no WebGPU adapter on {'/'.join(allowed)} (adapters found: {seen})", HINT
        )
    return min(ok, key=lambda a: _ADAPTER_RANK.get(a.info.get("adapter_type"), 9))


def open_device() -> Gpu:
    _runtime_dir()
    import wgpu

    want = settings.current().plugin("webgpu").get("backend", "").strip() or None
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as e:  # the native library failed to load or enumerate
        raise jaxcore.DeviceUnavailable(
            f"wgpu could not list adapters: {type(e).__name__}: {e}", HINT
        ) from None
    adapter = choose_adapter(adapters, want)
    have = dict(adapter.limits)
    limits = {k: int(have[k]) for k in LIMITS if k in have}
    features = [f for f in FEATURES if f in adapter.features]
    try:
        device = adapter.request_device_sync(required_features=features, required_limits=limits)
    except Exception as e:
        raise jaxcore.DeviceUnavailable(
            f"the {adapter.info.get('device')} adapter refused a device: {type(e).__name__}: {e}", HINT
        ) from None
    got = {k: int(v) for k, v in dict(device.limits).items() if isinstance(v, int)}
    return Gpu(adapter, device, dict(adapter.info), got, frozenset(str(f) for f in device.features))


# A subnormal operand (2^-140), a subnormal result (2^-70 squared) and a comparison that sees a
# subnormal: a device keeps subnormals when each comes back exact (0x200 is 2^-140's bits).
_SUBNORMAL_PROBE = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1)
fn main() {
  let s = x[0];
  y[0] = bitcast<u32>(s * x[1]);
  y[1] = bitcast<u32>(x[2] * x[2]);
  y[2] = bitcast<u32>(s + x[3]);
  y[3] = select(0u, 1u, x[3] < s);
}
"""


def _probe(device: Any, code: str, inputs: list[bytes], outputs: int) -> tuple[int, ...] | None:
    """Run a one-thread probe shader: storage buffers `inputs` at bindings 0.., then `outputs`
    u32s at the next binding, read back; None when anything about it fails."""
    import struct

    import wgpu

    try:
        bufs = [device.create_buffer_with_data(data=d, usage=wgpu.BufferUsage.STORAGE) for d in inputs]
        y = device.create_buffer(size=4 * outputs, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        module = device.create_shader_module(code=code)
        pipeline = device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}
        )
        group = device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate([*bufs, y])],
        )
        enc = device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(1)
        cpass.end()
        device.queue.submit([enc.finish()])
        got = struct.unpack(f"<{outputs}I", bytes(device.queue.read_buffer(y)))
        for b in [*bufs, y]:
            b.destroy()
    except Exception:
        return None
    return got


def keeps_subnormals(device: Any) -> bool:
    """Whether `device` computes float32 subnormals exactly (WGSL lets it flush them to zero).

    Asked by running `_SUBNORMAL_PROBE` once; a device that fails the probe counts as flushing,
    which only costs speed (the exact spelling is correct everywhere)."""
    import struct

    data = struct.pack("<4f", 2.0**-140, 1.0, 2.0**-70, 0.0)
    return _probe(device, _SUBNORMAL_PROBE, [data], 4) == (0x200, 0x200, 0x200, 1)


# The lanes of a subgroup as a 256-invocation shader sees them.
_SUBGROUP_PROBE = """
@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) l: u32, @builtin(subgroup_size) s: u32) {
  if (l == 0u) { y[0] = s; }
}
"""


def subgroup_lanes(device: Any) -> int:
    """How many lanes a subgroup of `device` has, as a shader sees them (0 where the probe fails).
    Asked, not read from the adapter: wgpu reports WebGPU's bounds (4 to 128) on lavapipe and on
    NVIDIA alike."""
    got = _probe(device, _SUBGROUP_PROBE, [], 1)
    return got[0] if got else 0
