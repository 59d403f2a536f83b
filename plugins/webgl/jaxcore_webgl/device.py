"""GL resources: buffers as RGBA32UI textures, programs, full-screen draws and readback.

Every buffer is a 2D `RGBA32UI` texture holding the buffer's raw bytes, 16 per texel (four
little-endian 32-bit words in R, G, B, A): integer textures carry every bit pattern unchanged
(float textures may canonicalise NaN payloads or flush denormals on upload, render or read), and
they are colour-renderable and readable in core WebGL2. Texel t sits at (t & (w-1), t >> log2 w);
widths are powers of two so shaders address with shifts. A kernel is one draw of a full-screen
triangle into the output texture's framebuffer, each fragment writing one texel.

Everything here runs on the GL thread (`GLThread.call`); the backend never calls it directly.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import math
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from jaxcore_webgl.canary import Canary

TEXEL_BYTES = 16
_TIME_ELAPSED = 0x88BF  # GL_TIME_ELAPSED_EXT
_GPU_DISJOINT = 0x8FBB  # GL_GPU_DISJOINT_EXT

VERTEX_SHADER = """#version 300 es
void main() {
  vec2 p = vec2(float((gl_VertexID << 1) & 2), float(gl_VertexID & 2));
  gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0);
}
"""


class ShaderError(RuntimeError):
    """A shader failed to compile or link (a codegen bug: the message carries the log and source)."""


def _seal(key: bytes, body: bytes) -> bytes:
    """A cache entry's checksum: of its body (format word and binary) under its key."""
    return hashlib.blake2b(body, digest_size=16, key=hashlib.blake2b(key).digest()).digest()


def texture_dims(nbytes: int, max_size: int) -> tuple[int, int, int]:
    """(width, height, log2 width) of the texture for a buffer of `nbytes` bytes."""
    texels = max(1, -(-nbytes // TEXEL_BYTES))
    w = 1 << max(0, math.ceil(math.log2(math.isqrt(texels - 1) + 1))) if texels > 1 else 1
    w = min(w, max_size)
    h = -(-texels // w)
    if h > max_size:
        raise MemoryError(f"webgl: a buffer of {nbytes} bytes needs {w}x{h} texels; the limit is {max_size}")
    return w, h, w.bit_length() - 1


@dataclass(eq=False)
class Texture:
    """A buffer's storage; the backend's slot handle."""

    tex: int
    fbo: int
    w: int
    h: int
    shift: int
    nbytes: int


@dataclass(eq=False)
class Program:
    prog: int
    shifts: list[int]  # uniform locations of sh0..sh{n-1}
    uniforms: dict[str, int] = field(default_factory=dict)


class Device:
    """Textures (pooled by dimensions), programs (cached by source text) and draws."""

    def __init__(
        self,
        max_texture_size: int,
        dump_dir: str | None = None,
        binary_dir: Path | None = None,
        driver: str = "",
    ) -> None:
        from OpenGL import GLES3 as gl

        self.gl = gl
        self.max_size = max_texture_size
        self.dump_dir = Path(dump_dir) if dump_dir else None
        # dumps numbered on from the directory's: the last one written before a crash is the highest
        self._dumps = itertools.count(len(list(self.dump_dir.glob("*.frag"))) if self.dump_dir else 0)
        self.canary: Canary | None = None  # new programs drawn in a child process first (canary.py)
        # program binaries on disk (GL_OES_get_program_binary), keyed by driver and shader text
        if binary_dir is not None and int(gl.glGetIntegerv(gl.GL_NUM_PROGRAM_BINARY_FORMATS)) < 1:
            binary_dir = None
        self.binary_dir = binary_dir
        self.driver = driver
        self.binary_hits = 0
        self._pool: dict[tuple[int, int], list[tuple[int, int]]] = {}
        # A program lives while an executable holds it (the backend's kernel cache is bounded), so
        # the cache holds it weakly; a dropped one's GL name is deleted on this thread, at the next
        # program() (a finalizer may run on any thread: it only queues the name).
        self._programs: weakref.WeakValueDictionary[str, Program] = weakref.WeakValueDictionary()
        self._dead: list[int] = []
        self._vs = self._shader(gl.GL_VERTEX_SHADER, VERTEX_SHADER)
        self.vao = int(gl.glGenVertexArrays(1))
        gl.glBindVertexArray(self.vao)
        for cap in (gl.GL_BLEND, gl.GL_DITHER, gl.GL_DEPTH_TEST, gl.GL_SCISSOR_TEST):
            gl.glDisable(cap)
        gl.glPixelStorei(gl.GL_PACK_ALIGNMENT, 4)
        gl.glPixelStorei(gl.GL_UNPACK_ALIGNMENT, 4)
        self.live_textures = 0
        # several render targets per draw (WebGL2 guarantees 4): the matmul block pass
        self.max_draw_buffers = min(
            int(gl.glGetIntegerv(gl.GL_MAX_DRAW_BUFFERS)), int(gl.glGetIntegerv(gl.GL_MAX_COLOR_ATTACHMENTS))
        )
        self._mrt: dict[tuple[int, ...], int] = {}  # framebuffers over several textures, by texture ids

    # ---- textures --------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Texture:
        w, h, shift = texture_dims(nbytes, self.max_size)
        tex, fbo = self._take(w, h)
        return Texture(tex, fbo, w, h, shift, nbytes)

    def _take(self, w: int, h: int) -> tuple[int, int]:
        free = self._pool.get((w, h))
        if free:
            return free.pop()
        gl = self.gl
        tex = int(gl.glGenTextures(1))
        gl.glBindTexture(gl.GL_TEXTURE_2D, tex)
        # integer textures are complete only with NEAREST filters (texelFetch ignores wrap modes)
        gl.glTexParameteri(gl.GL_TEXTURE_2D, gl.GL_TEXTURE_MIN_FILTER, gl.GL_NEAREST)
        gl.glTexParameteri(gl.GL_TEXTURE_2D, gl.GL_TEXTURE_MAG_FILTER, gl.GL_NEAREST)
        gl.glTexStorage2D(gl.GL_TEXTURE_2D, 1, gl.GL_RGBA32UI, w, h)
        err = gl.glGetError()
        if err == gl.GL_OUT_OF_MEMORY:
            gl.glDeleteTextures(1, [tex])
            self.trim()
            raise MemoryError(f"webgl: out of GPU memory for a {w}x{h} RGBA32UI texture")
        fbo = int(gl.glGenFramebuffers(1))
        gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, fbo)
        gl.glFramebufferTexture2D(gl.GL_FRAMEBUFFER, gl.GL_COLOR_ATTACHMENT0, gl.GL_TEXTURE_2D, tex, 0)
        status = gl.glCheckFramebufferStatus(gl.GL_FRAMEBUFFER)
        if status != gl.GL_FRAMEBUFFER_COMPLETE:
            raise RuntimeError(f"webgl: RGBA32UI framebuffer incomplete (0x{status:x})")
        self.live_textures += 1
        return tex, fbo

    def alloc_grid(self, w: int, h: int) -> Texture:
        """A w x h texture addressed by fragment position, not by word (a render target of
        `draw_targets`; its `shift` is unused)."""
        tex, fbo = self._take(w, h)
        return Texture(tex, fbo, w, h, 0, w * h * TEXEL_BYTES)

    def free(self, t: Texture) -> None:
        """Back to the pool: GL orders the commands, so draws still reading it run first."""
        self._pool.setdefault((t.w, t.h), []).append((t.tex, t.fbo))

    def trim(self) -> None:
        """Delete every pooled texture (on out-of-memory, and at close)."""
        gl = self.gl
        for fbo in self._mrt.values():
            gl.glDeleteFramebuffers(1, [fbo])
        self._mrt.clear()
        for items in self._pool.values():
            for tex, fbo in items:
                gl.glDeleteFramebuffers(1, [fbo])
                gl.glDeleteTextures(1, [tex])
                self.live_textures -= 1
        self._pool.clear()

    def upload(self, t: Texture, data: memoryview) -> None:
        gl = self.gl
        full = np.zeros(t.w * t.h * 4, np.uint32)
        full.view(np.uint8)[: data.nbytes] = np.frombuffer(data, np.uint8)
        gl.glBindTexture(gl.GL_TEXTURE_2D, t.tex)
        gl.glTexSubImage2D(gl.GL_TEXTURE_2D, 0, 0, 0, t.w, t.h, gl.GL_RGBA_INTEGER, gl.GL_UNSIGNED_INT, full)

    def _rows(self, t: Texture, start: int, count: int) -> tuple[int, int]:
        first = start // TEXEL_BYTES
        last = (start + count - 1) // TEXEL_BYTES
        return first // t.w, last // t.w + 1

    def download(self, t: Texture, start: int, count: int) -> bytes:
        """Bytes [start, start+count) through glReadPixels of only the rows that hold them."""
        gl = self.gl
        y0, y1 = self._rows(t, start, count)
        out = np.empty((y1 - y0) * t.w * 4, np.uint32)
        gl.glBindFramebuffer(gl.GL_READ_FRAMEBUFFER, t.fbo)
        gl.glReadPixels(0, y0, t.w, y1 - y0, gl.GL_RGBA_INTEGER, gl.GL_UNSIGNED_INT, out)
        off = start - y0 * t.w * TEXEL_BYTES
        return out.view(np.uint8)[off : off + count].tobytes()

    # ---- async readback: pixel-pack buffer + fence ------------------------------------------
    def download_begin(self, t: Texture, start: int, count: int) -> tuple[Any, ...]:
        gl = self.gl
        y0, y1 = self._rows(t, start, count)
        nbytes = (y1 - y0) * t.w * TEXEL_BYTES
        pbo = int(gl.glGenBuffers(1))
        gl.glBindBuffer(gl.GL_PIXEL_PACK_BUFFER, pbo)
        gl.glBufferData(gl.GL_PIXEL_PACK_BUFFER, nbytes, None, gl.GL_STREAM_READ)
        gl.glBindFramebuffer(gl.GL_READ_FRAMEBUFFER, t.fbo)
        gl.glReadPixels(0, y0, t.w, y1 - y0, gl.GL_RGBA_INTEGER, gl.GL_UNSIGNED_INT, ctypes.c_void_p(0))
        gl.glBindBuffer(gl.GL_PIXEL_PACK_BUFFER, 0)
        sync = gl.glFenceSync(gl.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        gl.glFlush()
        return pbo, sync, nbytes, start - y0 * t.w * TEXEL_BYTES, count

    def download_ready(self, pending: tuple[Any, ...]) -> bool:
        gl = self.gl
        r = gl.glClientWaitSync(pending[1], 0, 0)
        if r == gl.GL_WAIT_FAILED:
            raise RuntimeError("webgl: glClientWaitSync failed during read_async")
        return r != gl.GL_TIMEOUT_EXPIRED

    def download_end(self, pending: tuple[Any, ...]) -> bytes:
        gl = self.gl
        pbo, sync, nbytes, off, count = pending
        gl.glBindBuffer(gl.GL_PIXEL_PACK_BUFFER, pbo)
        ptr = gl.glMapBufferRange(gl.GL_PIXEL_PACK_BUFFER, 0, nbytes, gl.GL_MAP_READ_BIT)
        try:
            data = ctypes.string_at(int(ptr) + off, count)
        finally:
            gl.glUnmapBuffer(gl.GL_PIXEL_PACK_BUFFER)
            gl.glBindBuffer(gl.GL_PIXEL_PACK_BUFFER, 0)
            gl.glDeleteBuffers(1, [pbo])
            gl.glDeleteSync(sync)
        return data

    # ---- programs -----------------------------------------------------------------------------
    def _shader(self, kind: int, src: str) -> int:
        gl = self.gl
        s = gl.glCreateShader(kind)
        gl.glShaderSource(s, src)
        gl.glCompileShader(s)
        if not gl.glGetShaderiv(s, gl.GL_COMPILE_STATUS):
            log = gl.glGetShaderInfoLog(s)
            log = log.decode(errors="replace") if isinstance(log, bytes) else str(log)
            numbered = "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(src.splitlines()))
            raise ShaderError(f"webgl: shader failed to compile:\n{log}\n{numbered}")
        return s

    def program(self, fs: str, nargs: int, uniforms: tuple[str, ...] = ()) -> Program:
        """The linked program for fragment source `fs` (compiled once per distinct text)."""
        hit = self._programs.get(fs)
        if hit is not None:
            return hit
        self._reap()
        gl = self.gl
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            name = hashlib.blake2b(fs.encode(), digest_size=8).hexdigest()
            (self.dump_dir / f"{next(self._dumps):06d}-{name}.frag").write_text(fs)
        p = self._load_binary(fs)  # with validation on, a binary was validated when it was compiled
        if p is None:
            if self.canary is not None:
                self.canary.check(fs, nargs, uniforms, self.dump_dir)
            s = self._shader(gl.GL_FRAGMENT_SHADER, fs)
            p = gl.glCreateProgram()
            gl.glAttachShader(p, self._vs)
            gl.glAttachShader(p, s)
            if self.binary_dir is not None:
                gl.glProgramParameteri(p, gl.GL_PROGRAM_BINARY_RETRIEVABLE_HINT, gl.GL_TRUE)
            gl.glLinkProgram(p)
            gl.glDeleteShader(s)
            if not gl.glGetProgramiv(p, gl.GL_LINK_STATUS):
                log = gl.glGetProgramInfoLog(p)
                raise ShaderError(f"webgl: program failed to link: {log!r}\n{fs}")
            self._save_binary(fs, p)
        gl.glUseProgram(p)
        for i in range(nargs):  # sampler in{i} on texture unit i
            loc = gl.glGetUniformLocation(p, f"in{i}")
            if loc >= 0:
                gl.glUniform1i(loc, i)
        shifts = [gl.glGetUniformLocation(p, f"sh{i}") for i in range(nargs)]
        prog = Program(int(p), shifts, {u: gl.glGetUniformLocation(p, u) for u in uniforms})
        self._programs[fs] = prog
        weakref.finalize(prog, self._dead.append, int(p))
        self._first_draw(prog)
        return prog

    def _first_draw(self, prog: Program) -> None:
        """Draw one texel of `prog` now: GL drivers compile a program at its first draw (llvmpipe's
        and NVIDIA's do), which is then a prepare's cost, not the kernel's first dispatch's."""
        out = self.alloc(TEXEL_BYTES)
        try:
            self.draw(prog, [], out, 1)
        finally:
            self.free(out)

    def _reap(self) -> None:
        """Delete the GL programs no executable holds any more."""
        while self._dead:
            self.gl.glDeleteProgram(self._dead.pop())

    def _binary_path(self, fs: str) -> tuple[Path, bytes] | None:
        """The disk-cache entry of `fs`, and the key (driver, shader texts, whether validated) its
        checksum covers."""
        if self.binary_dir is None:
            return None
        key = f"{self.driver}\0{self.canary is not None}\0{VERTEX_SHADER}\0{fs}".encode()
        return self.binary_dir / f"{hashlib.blake2b(key, digest_size=16).hexdigest()}.bin", key

    def _load_binary(self, fs: str) -> int | None:
        """A program from its cached binary, or None: no entry, or one that is not this program's
        intact binary (a checksum of key, format and binary), or one the driver refuses (a later
        compile writes it again). The cache directory is as trusted as the Python environment."""
        entry = self._binary_path(fs)
        try:
            blob = entry[0].read_bytes() if entry is not None else b""
        except OSError:  # none (or unreadable)
            return None
        if len(blob) < 21 or entry is None or blob[:16] != _seal(entry[1], blob[16:]):
            return None
        gl = self.gl
        p = gl.glCreateProgram()
        try:  # PyOpenGL raises the driver's GL error (a format it does not know: invalid enumerant)
            data = (ctypes.c_ubyte * (len(blob) - 20)).from_buffer_copy(blob[20:])
            gl.glProgramBinary(p, int.from_bytes(blob[16:20], "little"), data, len(blob) - 20)
            ok = gl.glGetError() == gl.GL_NO_ERROR and gl.glGetProgramiv(p, gl.GL_LINK_STATUS)
        except Exception:  # noqa: BLE001 - any refusal is a miss
            ok = False
        if not ok:
            gl.glDeleteProgram(p)
            return None
        self.binary_hits += 1
        return int(p)

    def _save_binary(self, fs: str, p: int) -> None:
        entry = self._binary_path(fs)
        if entry is None:
            return
        gl = self.gl
        size = int(gl.glGetProgramiv(p, gl.GL_PROGRAM_BINARY_LENGTH))
        if size <= 0:
            return
        buf = (ctypes.c_ubyte * size)()
        length, fmt = ctypes.c_int(0), ctypes.c_uint(0)
        gl.glGetProgramBinary(p, size, ctypes.byref(length), ctypes.byref(fmt), buf)
        if gl.glGetError() != gl.GL_NO_ERROR or length.value <= 0:
            return
        body = fmt.value.to_bytes(4, "little") + bytes(buf)[: length.value]
        try:
            entry[0].parent.mkdir(parents=True, exist_ok=True)
            tmp = entry[0].with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(_seal(entry[1], body) + body)
            os.replace(tmp, entry[0])
        except OSError:  # a read-only or full cache dir only costs the next process a compile
            pass

    @property
    def programs(self) -> int:
        return len(self._programs)

    # ---- draws --------------------------------------------------------------------------------
    def _use(self, prog: Program, inputs: list[Texture]) -> None:
        """Make `prog` current with `inputs` on texture units 0.. (and their width shifts set)."""
        gl = self.gl
        gl.glUseProgram(prog.prog)
        for i, t in enumerate(inputs):
            gl.glActiveTexture(gl.GL_TEXTURE0 + i)
            gl.glBindTexture(gl.GL_TEXTURE_2D, t.tex)
            loc = prog.shifts[i]
            if loc >= 0:
                gl.glUniform1i(loc, t.shift)

    def draw(
        self,
        prog: Program,
        inputs: list[Texture],
        out: Texture,
        texels: int,
        ints: dict[str, int] | None = None,
    ) -> None:
        """Run `prog` over the first `texels` texels of `out`, with `inputs` on units 0.."""
        gl = self.gl
        self._use(prog, inputs)
        if ints:
            for name, v in ints.items():
                gl.glUniform1i(prog.uniforms[name], v)
        rows = -(-texels // out.w)
        gl.glBindFramebuffer(gl.GL_DRAW_FRAMEBUFFER, out.fbo)
        gl.glViewport(0, 0, out.w, rows)
        gl.glDrawArrays(gl.GL_TRIANGLES, 0, 3)

    def draw_targets(self, prog: Program, inputs: list[Texture], targets: list[Texture]) -> None:
        """Run `prog` over every fragment of `targets` (same dims), writing output r into `targets[r]`."""
        gl = self.gl
        w, h = targets[0].w, targets[0].h
        key = tuple(t.tex for t in targets)
        fbo = self._mrt.get(key)
        if fbo is None:
            fbo = int(gl.glGenFramebuffers(1))
            gl.glBindFramebuffer(gl.GL_DRAW_FRAMEBUFFER, fbo)
            for r, t in enumerate(targets):
                gl.glFramebufferTexture2D(
                    gl.GL_DRAW_FRAMEBUFFER, gl.GL_COLOR_ATTACHMENT0 + r, gl.GL_TEXTURE_2D, t.tex, 0
                )
            bufs = np.array([gl.GL_COLOR_ATTACHMENT0 + r for r in range(len(targets))], np.uint32)
            gl.glDrawBuffers(len(targets), bufs)
            status = gl.glCheckFramebufferStatus(gl.GL_DRAW_FRAMEBUFFER)
            if status != gl.GL_FRAMEBUFFER_COMPLETE:
                raise RuntimeError(f"webgl: {len(targets)}-target framebuffer incomplete (0x{status:x})")
            self._mrt[key] = fbo
        self._use(prog, inputs)
        gl.glBindFramebuffer(gl.GL_DRAW_FRAMEBUFFER, fbo)
        gl.glViewport(0, 0, w, h)
        gl.glDrawArrays(gl.GL_TRIANGLES, 0, 3)

    # ---- GPU time (EXT_disjoint_timer_query) -------------------------------------------------
    def timed(self, fn: Any) -> float | None:
        """Run `fn()` inside a GL_TIME_ELAPSED query and wait for its result, in seconds (tracing
        only: it stalls until the GPU has run the work). None if the timer was disjoint."""
        gl = self.gl
        q = int(gl.glGenQueries(1))
        gl.glGetIntegerv(_GPU_DISJOINT)  # reading clears the disjoint flag
        gl.glBeginQuery(_TIME_ELAPSED, q)
        try:
            fn()
        finally:
            gl.glEndQuery(_TIME_ELAPSED)
        ns = ctypes.c_uint64(0)
        self._query_ui64()(q, gl.GL_QUERY_RESULT, ctypes.byref(ns))
        gl.glDeleteQueries(1, [q])
        if int(gl.glGetIntegerv(_GPU_DISJOINT)):
            return None
        return ns.value * 1e-9

    def _query_ui64(self) -> Any:
        """glGetQueryObjectui64vEXT through eglGetProcAddress (PyOpenGL does not load it on EGL)."""
        fn = getattr(self, "_ui64", None)
        if fn is None:
            from OpenGL import EGL

            addr = EGL.eglGetProcAddress(b"glGetQueryObjectui64vEXT")
            if not addr:
                raise RuntimeError("webgl: glGetQueryObjectui64vEXT is not available")
            proto = ctypes.CFUNCTYPE(None, ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint64))
            ptr = ctypes.cast(addr, ctypes.c_void_p).value
            assert ptr  # addr was checked non-null above
            fn = self._ui64 = proto(ptr)
        return fn

    def finish(self) -> None:
        self.gl.glFinish()

    def close(self) -> None:
        if self.canary is not None:
            self.canary.close()
        self.trim()
        gl = self.gl
        self._reap()
        for p in list(self._programs.values()):  # (their finalizers then queue names nobody reaps)
            gl.glDeleteProgram(p.prog)
        self._programs.clear()


@contextmanager
def scratch(dev: Any, *sizes: int) -> Iterator[list[Any]]:
    """Work textures of `sizes` bytes from `dev` (a Device, or export's replay of one), pooled
    again when the block ends: GL orders the commands, so draws still reading them run first."""
    textures = [dev.alloc(n) for n in sizes]
    try:
        yield textures
    finally:
        for t in textures:
            dev.free(t)
