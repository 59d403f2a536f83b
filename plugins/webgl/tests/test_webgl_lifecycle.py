"""A closed backend never waits: frees during or after close are no-ops, other calls a clean error,
and the interpreter exits while finalizers free buffers (it hung in dec_ref, waiting on the GL
thread that close had ended)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

EXIT_SCRIPT = textwrap.dedent(
    """
    import jaxcore
    b = jaxcore.get_backend("webgl")
    class Holder:
        def __init__(self, slot):
            self.slot = slot
        def __del__(self):
            b.dec_ref(self.slot)
    kept = Holder(b.malloc(64, bytes(64)))          # freed at module teardown, after close
    cycle = Holder(b.malloc(64)); cycle.me = cycle   # freed by the collection after close
    print("done", flush=True)
    """
)


def test_finalizers_that_free_at_exit_do_not_hang() -> None:
    env = dict(os.environ, JAXCORE_WEBGL_PLATFORM="egl")
    start = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the interpreter did not exit in 60 s (stdout: {e.stdout!r})")
    assert out.returncode == 0 and "done" in out.stdout, out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr
    assert time.monotonic() - start < 60


def test_after_close_frees_are_no_ops_and_other_calls_fail_at_once() -> None:
    from jaxcore_webgl.backend import WebGLBackend

    b = WebGLBackend(platform="egl")
    a, c = b.malloc(64, bytes(range(64))), b.malloc(16)
    b.inc_ref(a)
    b.close()
    b.close()  # twice is fine
    start = time.monotonic()
    b.dec_ref(a)
    b.dec_ref(a)  # the last reference: a free, and a no-op
    b.dec_ref(c)
    with pytest.raises(RuntimeError, match="closed"):
        b.malloc(16)
    with pytest.raises(RuntimeError, match="closed"):
        b.thread.post(lambda: None)
    assert time.monotonic() - start < 5
