"""jaxcore device "webgpu": WGSL compute shaders through wgpu, on the queued device model (jaxcore.queue)."""

__version__ = "0.1.0"
