"""jaxcore-cpu: the reference backend, a numpy interpreter of kernels and routines."""

__version__ = "0.1.0"
