"""JAXCORE_WEBGL_VALIDATE: each new program is compiled, linked and drawn once (one texel, dummy
inputs, glFinish) in a persistent child process with a context of its own before this process
compiles it, so that a driver that crashes on it (NVIDIA died with SIGSEGV in glDrawArrays at a new
program's first draw) kills the child: a ShaderError here, and a fresh child for the next program.
Protocol: a JSON line per request on the child's stdin, "ok" (or "skip <why>": no context) back."""

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

TIMEOUT = 120.0  # seconds for one check, the child's start included


def enabled(setting: str, renderer: str) -> bool:
    """auto (the default): on unless GL_RENDERER names a software rasteriser."""
    mode = setting.strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"JAXCORE_WEBGL_VALIDATE={setting!r} is not one of auto, on, off")
    soft = any(s in renderer.lower() for s in ("llvmpipe", "softpipe", "swiftshader", "swrast"))
    return mode == "on" or (mode == "auto" and not soft)


def child_argv() -> list[str]:
    return [sys.executable, "-c", "from jaxcore_webgl.canary import serve; serve()"]


class Canary:
    """One backend's child: started at its first check (on the GL thread), closed with the backend."""

    def __init__(self, platform: str) -> None:
        path = os.pathsep.join(p for p in sys.path if p)
        self.env = dict(os.environ, JAXCORE_WEBGL_PLATFORM=platform, PYTHONPATH=path)
        self.proc: subprocess.Popen[bytes] | None = None
        self.checked, self.skipped = 0, ""

    def check(self, fs: str, nargs: int, uniforms: tuple[str, ...], dump_dir: Path | None) -> None:
        from jaxcore_webgl.device import ShaderError

        if self.skipped:
            return
        if self.proc is not None and self.proc.poll() is not None:
            self.close()  # it ended between checks (killed from outside): not this program's doing
        if self.proc is None:
            self.proc = subprocess.Popen(
                child_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env
            )
        proc, end, reply = self.proc, time.monotonic() + TIMEOUT, b""
        send, recv = proc.stdin.fileno(), proc.stdout.fileno()  # type: ignore[union-attr]  # pipes
        data = memoryview(json.dumps([fs, nargs, uniforms]).encode() + b"\n")
        try:  # every wait ends at `end`; a non-blocking pipe takes partial writes
            os.set_blocking(send, False)
            while data and select.select([], [send], [], max(0.0, end - time.monotonic()))[1]:
                data = data[os.write(send, data) :]
            while not data and not reply.endswith(b"\n"):
                if not select.select([recv], [], [], max(0.0, end - time.monotonic()))[0]:
                    break
                reply += os.read(recv, 4096) or b"\n"  # end of file: the child died
        except OSError:  # a broken pipe: the child died
            reply = b"\n"
        if reply.startswith((b"ok", b"skip")):
            self.checked += 1
            if reply.startswith(b"skip"):
                self.skipped = reply[5:].decode(errors="replace").strip()
                warnings.warn(f"webgl: new programs go unchecked: {self.skipped}", stacklevel=2)
            return
        self.close()
        code = proc.returncode
        what = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"ended ({code})"
        where = ""
        if dump_dir is not None:
            path = dump_dir / f"crashed-{hashlib.blake2b(fs.encode(), digest_size=8).hexdigest()}.frag"
            path.write_text(fs)
            where = f"; its source is {path}"
        raise ShaderError(
            f"webgl: the GL driver {what if reply else f'took over {TIMEOUT:.0f} s'} compiling and "
            f"drawing this new program in the validation process (JAXCORE_WEBGL_VALIDATE){where}"
        )

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with proc:  # closes the pipes and reaps it
                proc.kill()  # nothing it does is worth waiting for


def serve() -> None:
    """The child's loop. Replies go to the original stdout; what the driver prints, to stderr."""
    from jaxcore_webgl.context import GLThread
    from jaxcore_webgl.device import TEXEL_BYTES, Device

    out, skip = os.fdopen(os.dup(1), "w"), ""
    os.dup2(2, 1)
    try:
        thread = GLThread(os.environ.get("JAXCORE_WEBGL_PLATFORM"))
        dev = thread.call(lambda: Device(thread.info.max_texture_size))
    except Exception as e:  # noqa: BLE001 - the parent goes on unchecked
        skip = f"skip the validation process has no context: {e}".replace("\n", " ")

    def draw(fs: str, nargs: int, uniforms: list[str]) -> None:
        prog, src, dst = dev.program(fs, nargs, tuple(uniforms)), dev.alloc(TEXEL_BYTES), dev.alloc(16)
        dev.draw(prog, [src] * nargs, dst, 1)
        dev.finish()
        dev.gl.glDeleteProgram(dev._programs.pop(fs).prog)
        dev.free(src)
        dev.free(dst)

    for line in sys.stdin:
        try:
            if not skip:
                thread.call(functools.partial(draw, *json.loads(line)))
        except Exception:  # noqa: BLE001, S110 - a compile error is the parent's to report
            pass
        out.write((skip or "ok") + "\n")
        out.flush()
