"""LLVM compiles in this process up to a budget, then in child processes that are replaced as often.

llvmlite 0.50 leaks about 75 KiB per optimising compile: its PassBuilder allocates a
PassInstrumentationCallbacks that its dispose never frees, and the O3 pipeline fills it with the name
of every pass. A process that compiles ever new kernels grew without bound (20,000 distinct kernels:
+1.5 GiB of RSS). So a process runs at most `budget()` compiles itself (JAXCORE_WASM_COMPILES_PER_PROCESS,
default 500, about 40 MiB; 0: no bound, every compile here); later ones go to child processes, each
of which runs as many and is then replaced. A child costs its start (about 0.3 s, once per `budget()`
compiles) and its own memory while it lives; a child that dies (LLVM aborts on what it cannot
compile) is a ToolchainError here, never the end of this process.

The protocol is pickled (text, codegen_opt) requests and (ok, object or message, optimised IR)
replies, each preceded by its length, over the child's stdin and stdout.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from typing import IO, Any

from jaxcore_wasm import toolchain
from jaxcore_wasm.cache import int_setting

DEFAULT_BUDGET = 500
_lock = threading.Lock()
_here = 0  # compiles this process has run
_idle: list[_Child] = []


def budget() -> int:
    """Compiles a process runs before the next ones go to a fresh child (0: no bound)."""
    return int_setting("compiles_per_process", DEFAULT_BUDGET, minimum=0)


def compile_ir(text: str, codegen_opt: int = 3) -> tuple[bytes, str]:
    """`toolchain.compile_ir(text, codegen_opt=...)`, here while the budget lasts, else in a child."""
    global _here
    limit = budget()
    with _lock:
        here = limit == 0 or _here < limit
        if here:
            _here += 1
    if here:
        return toolchain.compile_ir(text, codegen_opt=codegen_opt)
    with _lock:
        child = _idle.pop() if _idle else None
    if child is None:
        child = _Child()
    try:
        result = child.compile(text, codegen_opt)
    finally:
        if child.alive and child.used < limit:
            with _lock:
                _idle.append(child)
        else:
            child.close()
    return result


class _Child:
    """One compile process, started with this process's import path."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from jaxcore_wasm.worker import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.used = 0
        self.alive = True

    def compile(self, text: str, codegen_opt: int) -> tuple[bytes, str]:
        self.used += 1
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            _send(self.proc.stdin, (text, codegen_opt))
            reply = _receive(self.proc.stdout)
        except OSError:
            reply = None
        if reply is None:
            self.alive = False
            status = self.proc.wait()
            raise toolchain.ToolchainError(f"the LLVM compile process ended (exit status {status})")
        ok, obj, optimised = reply
        if not ok:
            raise toolchain.ToolchainError(obj)
        return obj, optimised

    def close(self) -> None:
        self.alive = False
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the child ends at end of input
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def _send(stream: IO[bytes], message: Any) -> None:
    blob = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(blob).to_bytes(8, "little") + blob)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next message, or None at end of input."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    n = int.from_bytes(head, "little")
    blob = stream.read(n)
    return pickle.loads(blob) if len(blob) == n else None


@atexit.register
def _close_idle() -> None:
    with _lock:
        children, _idle[:] = list(_idle), []
    for child in children:
        child.close()


def serve() -> None:
    """The child's loop: compile each request until end of input. Replies go to the original
    stdout; anything LLVM or Python prints goes to stderr instead."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        request = _receive(requests)
        if request is None:
            return
        text, codegen_opt = request
        try:
            obj, optimised = toolchain.compile_ir(text, codegen_opt=codegen_opt)
            reply: tuple[bool, Any, str] = (True, obj, optimised)
        except Exception as exc:  # noqa: BLE001 - sent to the parent, which raises it
            reply = (False, f"{type(exc).__name__}: {exc}", "")
        _send(out, reply)
