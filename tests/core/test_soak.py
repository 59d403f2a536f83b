"""The soak at CI size (bench/soak.py, in a process of its own) on the reference device: distinct
kernels past every cache's capacity leave resident memory flat, and the process stays far under the
1 GiB that 20,000 distinct kernels may take on any device (issue 19's bound).

The caches are made small (JAXCORE_KERNEL_CACHE=64) so that a CI-sized count cycles through them
many times. The core's expression memo (jaxcore.kernel._FACTS, 4,096 entries of ~2 KiB) fills during
the first 4,096 kernels and its dict and the allocator settle by ~9,000 (RSS then stays at 51.6 MiB
to 24,000), so growth is measured over the last quarter of 12,000: a backend that kept what a
dropped executable holds grows 7 KiB per kernel there (a cache of 100,000 measured so), a bounded
one 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxcore
from jaxcore.conformance import harness

ROOT = Path(__file__).resolve().parents[2]
BOUND_MIB = 1024  # issue 19: 20,000 distinct kernels under 1 GiB of RSS on every device
GROWTH_KIB = 1.5  # per distinct kernel once every cache is full


def soak(device: str, kernels: int, warm: float, tmp_path: Path, **env: str) -> dict[str, dict]:
    """bench/soak.py on `device` in a fresh process: its phases by name."""
    plugins = [p.module for p in jaxcore.plugin_info() if device in p.devices]
    full = dict(
        os.environ, JAXCORE_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(p for p in sys.path if p)
    )
    full.update(JAXCORE_PLUGINS=",".join(plugins), JAXCORE_DISABLE_PLUGIN_AUTOLOAD="1", **env)
    out = tmp_path / "soak.json"
    cmd = [sys.executable, str(ROOT / "bench" / "soak.py"), "--device", device, "--cycles", "2000"]
    cmd += [
        "--kernels",
        str(kernels),
        "--warm",
        str(warm),
        "--max-rss-mib",
        str(BOUND_MIB),
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return {p["phase"]: p for p in json.loads(out.read_text())}


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads RSS from /proc (Linux)")
def test_distinct_kernels_past_the_caches_leave_the_reference_device_flat(tmp_path: Path) -> None:
    ref = harness.default_reference()
    assert ref is not None
    phases = soak(ref[0], 12000, 0.75, tmp_path, JAXCORE_KERNEL_CACHE="64")
    kernels = phases["distinct kernels"]
    assert kernels["count"] == 12000 and not kernels["error"]
    assert kernels["peak"] < BOUND_MIB * 2**20
    assert kernels["kib_per_op"] < GROWTH_KIB, f"{kernels['kib_per_op']:.2f} KiB of RSS per distinct kernel"
    assert phases["cycles"]["kib_per_op"] < GROWTH_KIB
