"""jaxcore-example: the smallest useful jaxcore plugin, meant to be copied."""

__version__ = "0.1.0"
