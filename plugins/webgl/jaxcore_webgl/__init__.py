"""jaxcore-webgl: WebGL2-style kernels (GLSL ES 3.00 fragment shaders) through PyOpenGL, device "webgl"."""

__version__ = "0.1.0"
