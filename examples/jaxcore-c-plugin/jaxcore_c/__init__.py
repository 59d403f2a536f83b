"""jaxcore-c: a device whose kernels are C, rendered by the core's program renderer and built by cc."""

__version__ = "0.1.0"
