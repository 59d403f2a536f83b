"""Distinct kernels past the kernel cache leave webgl's resident memory flat: a GL program lives
while a prepared kernel holds it (issue 19: it took 1.4 MiB of RSS per distinct kernel on llvmpipe,
every program kept for the process's life; 20,000 kernels must stay under 1 GiB).

bench/soak.py in a process of its own, with a small kernel cache so that a CI-sized count cycles
through it many times, and a fresh disk cache so that every program is compiled here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GROWTH_KIB = 200  # per distinct kernel after the first half (before the fix: 1,373)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads RSS from /proc (Linux)")
def test_distinct_kernels_leave_resident_memory_flat(gl: object, tmp_path: Path) -> None:
    env = dict(os.environ, JAXCORE_CACHE_DIR=str(tmp_path / "cache"), JAXCORE_KERNEL_CACHE="64")
    env.update(JAXCORE_PLUGINS="jaxcore_webgl.plugin", JAXCORE_DISABLE_PLUGIN_AUTOLOAD="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = tmp_path / "soak.json"
    cmd = [sys.executable, str(ROOT / "bench" / "soak.py"), "--device", "webgl", "--cycles", "100"]
    cmd += ["--kernels", "600", "--warm", "0.5", "--max-rss-mib", "1024", "--json", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    kernels = {p["phase"]: p for p in json.loads(out.read_text())}["distinct kernels"]
    assert kernels["count"] == 600 and not kernels["error"]
    assert kernels["kib_per_op"] < GROWTH_KIB, f"{kernels['kib_per_op']:.0f} KiB of RSS per distinct kernel"
