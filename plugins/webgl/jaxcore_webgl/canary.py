"""New programs drawn once in a child process first (JAXCORE_WEBGL_VALIDATE), so that a driver that
crashes compiling one kills the child, not this process.

NVIDIA's driver was seen to die with SIGSEGV inside glDrawArrays at the first draw of some new
programs. A persistent child with a context of its own compiles, links and draws each new fragment
shader once (one texel, dummy inputs, glFinish) before this process compiles it; a child that dies
is a `ShaderError` here, and the next program starts a fresh child. It costs a second compile, so
`auto` runs it on hardware drivers only. The protocol: one JSON line per request on the child's
stdin, one line back on its stdout ("ok", or "skip <reason>" where the child has no context).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

SOFTWARE = ("llvmpipe", "softpipe", "swiftshader", "swrast")
TIMEOUT = 120.0  # seconds a program's check may take (a child's start included)


def enabled(setting: str, renderer: str) -> bool:
    """JAXCORE_WEBGL_VALIDATE: on, off, or auto (on unless GL_RENDERER names a software rasteriser)."""
    mode = setting.strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"JAXCORE_WEBGL_VALIDATE={setting!r} is not one of auto, on, off")
    return mode == "on" or (mode == "auto" and not any(s in renderer.lower() for s in SOFTWARE))


def child_argv() -> list[str]:
    return [sys.executable, "-c", "from jaxcore_webgl.canary import serve; serve()"]


class Canary:
    """The child of one backend: started at the first check, closed with the backend."""

    def __init__(self, platform: str) -> None:
        self.env = dict(
            os.environ, JAXCORE_WEBGL_PLATFORM=platform, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.checked, self.skipped = 0, ""

    def check(self, fs: str, nargs: int, uniforms: tuple[str, ...], dump_dir: Path | None) -> None:
        """Return once the child has drawn `fs`; raise ShaderError if the driver killed it."""
        from jaxcore_webgl.device import ShaderError

        if self.skipped:
            return
        if self.proc is None:
            self.proc = subprocess.Popen(
                child_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env
            )
        proc, deadline, reply = self.proc, time.monotonic() + TIMEOUT, b""
        assert proc.stdin is not None and proc.stdout is not None
        data = memoryview(json.dumps([fs, nargs, list(uniforms)]).encode() + b"\n")
        try:
            os.set_blocking(proc.stdin.fileno(), False)  # partial writes: no wait past the deadline
            while data and select.select([], [proc.stdin], [], max(0.0, deadline - time.monotonic()))[1]:
                data = data[os.write(proc.stdin.fileno(), data) :]
            while not data and not reply.endswith(b"\n"):
                if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    break
                reply += os.read(proc.stdout.fileno(), 4096) or b"\n"  # b"": the child has died
        except OSError:  # a broken pipe: the child has died
            reply = b"\n"
        if reply.startswith((b"ok", b"skip")):
            self.checked += 1
            if reply.startswith(b"skip"):
                self.skipped = reply[5:].decode(errors="replace").strip()
                warnings.warn(
                    f"webgl: new programs go unchecked: the validation process {self.skipped}", stacklevel=2
                )
            return
        self.close()
        code = proc.returncode
        what = f"was killed by {signal.Signals(-code).name}" if code and code < 0 else f"ended ({code})"
        if not reply:
            what = f"did not finish in {TIMEOUT:.0f} s"
        where = ""
        if dump_dir is not None:
            path = dump_dir / f"crashed-{hashlib.blake2b(fs.encode(), digest_size=8).hexdigest()}.frag"
            path.write_text(fs)
            where = f"; its source is {path}"
        raise ShaderError(
            f"webgl: the GL driver {what} compiling and drawing this new program in the validation "
            f"process (JAXCORE_WEBGL_VALIDATE), so it is not compiled here{where}"
        )

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()  # nothing the child does is worth waiting for
            proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout):
                stream.close()  # type: ignore[union-attr]  # both are pipes


def serve() -> None:
    """The child: a context of its own; each request compiled, linked and drawn once, then deleted.
    Replies go to the original stdout; whatever the driver prints goes to stderr."""
    from jaxcore_webgl.context import GLThread
    from jaxcore_webgl.device import TEXEL_BYTES, Device

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    skip = ""
    try:
        thread = GLThread(os.environ.get("JAXCORE_WEBGL_PLATFORM"))
        dev = thread.call(lambda: Device(thread.info.max_texture_size))
    except Exception as e:  # noqa: BLE001 - no context here: the parent goes on unchecked
        skip = f"skip has no context: {e}".replace("\n", " ")

    def draw(fs: str, nargs: int, uniforms: list[str]) -> None:
        prog = dev.program(fs, nargs, tuple(uniforms))
        src, dst = dev.alloc(TEXEL_BYTES), dev.alloc(TEXEL_BYTES)
        dev.draw(prog, [src] * nargs, dst, 1)
        dev.finish()
        dev.gl.glDeleteProgram(dev._programs.pop(fs).prog)
        dev.free(src)
        dev.free(dst)

    for line in sys.stdin:
        if not skip:
            try:
                thread.call(functools.partial(draw, *json.loads(line)))
            except Exception:  # noqa: BLE001, S110 - a compile error is the parent's to report
                pass
        out.write((skip or "ok") + "\n")
        out.flush()
