"""An OpenGL ES 3.0 context (what WebGL2 is) owned by one thread, from glfw or from EGL.

GL contexts are current on one thread at a time, and jaxcore calls a backend from any thread (the
async API runs work in `asyncio.to_thread`), so every GL call goes through `GLThread.call`, which
runs it on the thread that made the context current. Where a display exists the context comes from
a hidden glfw window; elsewhere from EGL with no window system (the device platform, then Mesa's
surfaceless platform, then the default display). PyOpenGL is bound to EGL in both cases (glfw is
asked for an EGL context), so one process can use either path.
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

REQUIRED_EXTENSIONS = ("GL_EXT_color_buffer_float",)
PLATFORMS = ("glfw", "egl")

_EGL_PLATFORM_DEVICE_EXT = 0x313F
_EGL_PLATFORM_SURFACELESS_MESA = 0x31DD
_EGL_CONTEXT_MAJOR_VERSION = 0x3098
_EGL_CONTEXT_MINOR_VERSION = 0x30FB
_EGL_OPENGL_ES3_BIT = 0x40


class ContextError(Exception):
    """No usable context: `reason` says what is missing, `hint` how to get it."""

    def __init__(self, reason: str, hint: str = "") -> None:
        self.reason, self.hint = reason, hint
        super().__init__(f"{reason} ({hint})" if hint else reason)


@dataclass(frozen=True)
class GLInfo:
    """What the context reports: identity, extensions and the limits the backend sizes itself by."""

    platform: str
    version: str
    renderer: str
    vendor: str
    glsl: str
    extensions: frozenset[str]
    max_texture_size: int
    max_texture_units: int
    notes: tuple[str, ...] = field(default=())

    def has(self, ext: str) -> bool:
        return ext in self.extensions


def _bind_pyopengl_to_egl() -> None:
    """PyOpenGL picks its platform at first import; both our paths need EGL."""
    want = os.environ.get("PYOPENGL_PLATFORM", "").strip()
    if not want:
        os.environ["PYOPENGL_PLATFORM"] = "egl"
    elif want != "egl":
        raise ContextError(
            f"PYOPENGL_PLATFORM={want!r}; jaxcore-webgl needs PyOpenGL bound to EGL",
            "unset PYOPENGL_PLATFORM or set PYOPENGL_PLATFORM=egl before importing OpenGL",
        )
    try:
        import OpenGL
    except ImportError as e:
        raise ContextError(f"PyOpenGL is not installed: {e}", "pip install 'PyOpenGL>=3.1.10'") from None
    platform = getattr(getattr(OpenGL, "platform", None), "PLATFORM", None)
    if platform is not None and type(platform).__name__ != "EGLPlatform":
        raise ContextError(
            f"PyOpenGL was already imported with platform {type(platform).__name__}",
            "set PYOPENGL_PLATFORM=egl before anything imports OpenGL",
        )


def _brief(e: BaseException) -> str:
    """One line for an exception (PyOpenGL's EGLError prints a multi-line argument dump)."""
    err = getattr(e, "err", None)
    if err is not None:
        return f"{type(e).__name__} {getattr(err, 'name', err)}"
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def _cstr(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, bytes):
        return x.decode(errors="replace")
    return (ctypes.cast(x, ctypes.c_char_p).value or b"").decode(errors="replace")  # a NULL pointer is ""


class _EGLContext:
    """EGL without a window system: a display from the device or surfaceless platform, an ES 3 context."""

    def __init__(self) -> None:
        from OpenGL import EGL

        self.EGL = EGL
        self.notes: list[str] = []
        errors: list[str] = []
        self.dpy = None
        for how in ("device", "surfaceless", "default"):
            try:
                dpy = self._display(how)
                major, minor = EGL.EGLint(), EGL.EGLint()
                if dpy and EGL.eglInitialize(dpy, ctypes.pointer(major), ctypes.pointer(minor)):
                    self.dpy, self.how = dpy, how
                    break
                errors.append(f"{how}: eglInitialize failed")
            except Exception as e:  # a missing extension entry point raises from PyOpenGL
                errors.append(f"{how}: {_brief(e)}")
        if self.dpy is None:
            raise ContextError(
                "no EGL display: " + "; ".join(errors),
                "install Mesa's EGL (Debian: apt-get install libegl1 libegl-mesa0 libgles2) or a GPU driver",
            )
        self.ctx = self._context()
        self.surface = self._surface()
        if not EGL.eglMakeCurrent(self.dpy, self.surface, self.surface, self.ctx):
            raise ContextError(f"eglMakeCurrent failed (0x{EGL.eglGetError():x})")
        self.platform = f"egl-{self.how}"

    def _display(self, how: str) -> Any:
        EGL = self.EGL
        if how == "device":
            from OpenGL.EGL.EXT.device_enumeration import eglQueryDevicesEXT
            from OpenGL.EGL.EXT.platform_base import eglGetPlatformDisplayEXT

            devs = (EGL.EGLDeviceEXT * 16)()
            n = EGL.EGLint()
            if not eglQueryDevicesEXT(16, devs, ctypes.pointer(n)) or n.value < 1:
                return None
            return eglGetPlatformDisplayEXT(_EGL_PLATFORM_DEVICE_EXT, devs[0], None)
        if how == "surfaceless":
            from OpenGL.EGL.EXT.platform_base import eglGetPlatformDisplayEXT

            return eglGetPlatformDisplayEXT(_EGL_PLATFORM_SURFACELESS_MESA, None, None)
        return EGL.eglGetDisplay(EGL.EGL_DEFAULT_DISPLAY)

    def _context(self) -> Any:
        EGL = self.EGL
        cfg, n = EGL.EGLConfig(), EGL.EGLint()
        for surface_bits in (EGL.EGL_PBUFFER_BIT, 0):
            attrs = [EGL.EGL_RENDERABLE_TYPE, _EGL_OPENGL_ES3_BIT]
            if surface_bits:
                attrs += [EGL.EGL_SURFACE_TYPE, surface_bits]
            attrs += [EGL.EGL_NONE]
            ok = EGL.eglChooseConfig(
                self.dpy, (EGL.EGLint * len(attrs))(*attrs), ctypes.pointer(cfg), 1, ctypes.pointer(n)
            )
            if ok and n.value >= 1:
                self.pbuffer_ok = bool(surface_bits)
                break
        else:
            raise ContextError("EGL has no OpenGL ES 3 config", "use a GL driver with OpenGL ES 3.0")
        self.cfg = cfg
        if not EGL.eglBindAPI(EGL.EGL_OPENGL_ES_API):
            raise ContextError("eglBindAPI(OpenGL ES) failed", "use a GL driver with OpenGL ES 3.0")
        ca = [_EGL_CONTEXT_MAJOR_VERSION, 3, _EGL_CONTEXT_MINOR_VERSION, 0, EGL.EGL_NONE]
        ctx = EGL.eglCreateContext(self.dpy, cfg, EGL.EGL_NO_CONTEXT, (EGL.EGLint * len(ca))(*ca))
        if not ctx:
            raise ContextError(
                f"eglCreateContext(OpenGL ES 3.0) failed (0x{EGL.eglGetError():x})",
                "use a GL driver with OpenGL ES 3.0",
            )
        return ctx

    def _surface(self) -> Any:
        EGL = self.EGL
        if self.pbuffer_ok:
            pb = [EGL.EGL_WIDTH, 1, EGL.EGL_HEIGHT, 1, EGL.EGL_NONE]
            surf = EGL.eglCreatePbufferSurface(self.dpy, self.cfg, (EGL.EGLint * len(pb))(*pb))
            if surf:
                return surf
        self.notes.append("surfaceless context (no pbuffer)")
        return EGL.EGL_NO_SURFACE

    def close(self) -> None:
        # No eglTerminate: the display is shared by every context of the process on this device.
        EGL = self.EGL
        EGL.eglMakeCurrent(self.dpy, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, EGL.EGL_NO_CONTEXT)
        EGL.eglDestroyContext(self.dpy, self.ctx)
        if self.surface:
            EGL.eglDestroySurface(self.dpy, self.surface)


class _GlfwContext:
    """A hidden 1x1 glfw window whose OpenGL ES 3.0 context glfw creates through EGL."""

    def __init__(self) -> None:
        try:
            import glfw
        except ImportError as e:
            raise ContextError(f"glfw is not installed: {e}", "pip install 'glfw>=2.11'") from None
        self.glfw = glfw
        self.notes: list[str] = []
        messages: list[str] = []
        glfw.ERROR_REPORTING = "log"
        glfw.set_error_callback(lambda code, msg: messages.append(_cstr(msg)))
        if not glfw.init():
            raise ContextError(
                "glfw could not initialise: " + ("; ".join(messages) or "no display"),
                "start an X server (e.g. Xvfb :99 & export DISPLAY=:99) or use JAXCORE_WEBGL_PLATFORM=egl",
            )
        glfw.default_window_hints()
        glfw.window_hint(glfw.VISIBLE, glfw.FALSE)
        glfw.window_hint(glfw.CLIENT_API, glfw.OPENGL_ES_API)
        glfw.window_hint(glfw.CONTEXT_CREATION_API, glfw.EGL_CONTEXT_API)
        glfw.window_hint(glfw.CONTEXT_VERSION_MAJOR, 3)
        glfw.window_hint(glfw.CONTEXT_VERSION_MINOR, 0)
        self.window = glfw.create_window(1, 1, "jaxcore-webgl", None, None)
        if not self.window:
            glfw.terminate()
            raise ContextError(
                "glfw could not create an OpenGL ES 3.0 context: " + ("; ".join(messages) or "unknown"),
                "install Mesa's EGL and GLES (libegl1 libgles2) or use JAXCORE_WEBGL_PLATFORM=egl",
            )
        glfw.make_context_current(self.window)
        self.platform = "glfw"

    def close(self) -> None:
        self.glfw.make_context_current(None)  # type: ignore[arg-type]  # glfw's hints omit None (detach)
        self.glfw.destroy_window(self.window)
        self.glfw.terminate()


def choose_platform(requested: str | None) -> list[str]:
    """The platforms to try in order: the requested one only, or glfw where a display exists, then EGL."""
    if requested:
        req = requested.strip().lower()
        if req not in PLATFORMS:
            raise ContextError(
                f"JAXCORE_WEBGL_PLATFORM={requested!r} is not one of {', '.join(PLATFORMS)}",
                "set JAXCORE_WEBGL_PLATFORM=glfw or JAXCORE_WEBGL_PLATFORM=egl",
            )
        return [req]
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return ["glfw", "egl"]
    return ["egl"]


class GLThread:
    """The thread that owns the context; `call(fn)` runs fn there and returns its result."""

    def __init__(self, platform: str | None) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._posted_error: BaseException | None = None
        self.closed = False
        started: Future[GLInfo] = Future()
        self._thread = threading.Thread(target=self._main, args=(platform, started), name="jaxcore-webgl")
        self._thread.daemon = True
        self._thread.start()
        self.info = started.result()

    def _main(self, platform: str | None, started: Future[GLInfo]) -> None:
        try:
            self._ctx = self._open(platform)
            started.set_result(self._query())
        except BaseException as e:  # raised by the constructor
            started.set_exception(e)
            return
        while (job := self._jobs.get()) is not None:
            fn, result = job
            try:
                value = fn()
            except BaseException as e:
                if result is None:  # a posted job: the next call() raises it
                    self._posted_error = self._posted_error or e
                else:
                    result.set_exception(e)
            else:
                if result is not None:
                    result.set_result(value)
        try:
            self._ctx.close()
        except Exception:  # the process may be tearing the driver down already
            pass

    def _open(self, platform: str | None) -> Any:
        _bind_pyopengl_to_egl()
        order = choose_platform(platform)
        errors: list[ContextError] = []
        for name in order:
            try:
                ctx = _GlfwContext() if name == "glfw" else _EGLContext()
            except ContextError as e:
                errors.append(e)
                continue
            ctx.notes.extend(f"{e.reason}; fell back" for e in errors)
            return ctx
        raise ContextError("; ".join(e.reason for e in errors), errors[-1].hint)

    def _query(self) -> GLInfo:
        from OpenGL import GLES3 as gl

        n = int(gl.glGetIntegerv(gl.GL_NUM_EXTENSIONS))
        exts = frozenset(_cstr(gl.glGetStringi(gl.GL_EXTENSIONS, i)) for i in range(n))
        version = _cstr(gl.glGetString(gl.GL_VERSION))
        if "OpenGL ES 3" not in version:
            raise ContextError(f"the context is {version!r}, not OpenGL ES 3.x", "use a driver with ES 3.0")
        return GLInfo(
            platform=self._ctx.platform,
            version=version,
            renderer=_cstr(gl.glGetString(gl.GL_RENDERER)),
            vendor=_cstr(gl.glGetString(gl.GL_VENDOR)),
            glsl=_cstr(gl.glGetString(gl.GL_SHADING_LANGUAGE_VERSION)),
            extensions=exts,
            # a texture is only as usable as the viewport that renders into it
            max_texture_size=min(
                int(gl.glGetIntegerv(gl.GL_MAX_TEXTURE_SIZE)),
                *(int(v) for v in gl.glGetIntegerv(gl.GL_MAX_VIEWPORT_DIMS)),
            ),
            max_texture_units=int(gl.glGetIntegerv(gl.GL_MAX_TEXTURE_IMAGE_UNITS)),
            notes=tuple(self._ctx.notes),
        )

    def on_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn()` on the GL thread (directly when already there); exceptions propagate, and so
        does the first failure of a job `post`ed before it. After `close`, a RuntimeError at once."""
        if threading.current_thread() is self._thread:
            return fn()
        result: Future[T] = Future()
        self._put((fn, result))
        while not result.done():  # a job queued behind close's end never runs: never wait for it
            try:
                result.exception(0.25)  # (as quick as an Event; futures.wait() is twice as slow)
            except TimeoutError:
                if not self._thread.is_alive() and not result.done():
                    raise RuntimeError("webgl: the backend is closed") from None
        self._raise_posted()
        return result.result()

    def post(self, fn: Callable[[], Any]) -> None:
        """Queue `fn()` without waiting (jobs run in order, so later calls see its effects)."""
        if threading.current_thread() is self._thread:
            return fn()
        self._raise_posted()
        self._put((fn, None))

    def _put(self, job: Any) -> None:
        if self.closed or not self._thread.is_alive():
            raise RuntimeError("webgl: the backend is closed")
        self._jobs.put(job)

    def _raise_posted(self) -> None:
        err = self._posted_error
        if err is not None:
            self._posted_error = None
            raise RuntimeError(f"webgl: an earlier dispatch failed on the GL thread: {err}") from err

    def close(self) -> None:
        self.closed = True
        self._jobs.put(None)
        self._thread.join(timeout=10)
