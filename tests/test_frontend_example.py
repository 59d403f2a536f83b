"""examples/frontend on every in-tree device at its small sizes: the MLP training step, attention,
least squares and the sort, each checked against numpy by the example itself; the kernels it
fuses per step; buffers freed when its arrays die; and its full sizes in `jaxcore bench`."""

from __future__ import annotations

import gc
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import jaxcore
from jaxcore.registry import DeviceUnavailable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "frontend"


def load_run() -> ModuleType:
    """run.py, which puts its own directory on sys.path for lazy_array and workloads."""
    spec = importlib.util.spec_from_file_location("frontend_example_run", EXAMPLE / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


RUN = load_run()
import lazy_array as lz  # noqa: E402 - importable once run.py is loaded
from lazy_jit import jit  # noqa: E402


def backend_or_skip(device: str) -> jaxcore.Backend:
    try:
        return jaxcore.get_backend(device)
    except DeviceUnavailable as exc:
        pytest.skip(f"{device} is not available here: {exc}")


# what each step dispatches (kernels + routines): the fusion the example promises
DISPATCHES = {"mlp": "11 + 0", "attention": "5 + 0", "lstsq": "2 + 3", "sort": "0 + 1"}


@pytest.mark.parametrize("device", ["cpu", "wasm", "webgpu", "webgl"])
def test_every_workload_is_right_on(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    backend_or_skip(device)
    code = RUN.main(["--device", device, "--small", "--reps", "1"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line.split()[0] in DISPATCHES}
    assert set(rows) == set(DISPATCHES), out
    for name, line in rows.items():
        assert line.rstrip().endswith("ok"), line
        assert f"  {DISPATCHES[name]}  " in line, line
    assert code == 0, out
    before, after = map(int, re.search(r"live: (-?\d+) before, (-?\d+) after", out).groups())
    assert before == after, out


def test_the_script_runs_standalone() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "run.py"),
            "--device",
            "cpu",
            "--small",
            "--reps",
            "1",
            "--workload",
            "lstsq",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lstsq" in proc.stdout and proc.stdout.count(" ok") == 1


def test_arrays_free_their_buffers_when_they_die() -> None:
    backend = jaxcore.get_backend("cpu")
    gc.collect()
    live = backend.live_slots()
    x = lz.array(np.arange(12, dtype=np.float32).reshape(3, 4), "cpu")
    y = (lz.exp(x) * 2).sum(axis=1)
    np.testing.assert_allclose(y.numpy(), (np.exp(np.arange(12.0).reshape(3, 4)) * 2).sum(1), rtol=1e-5)
    assert backend.live_slots() == live + 2
    del y
    assert backend.live_slots() == live + 1
    t = x.T  # a view keeps x's buffer alive, and only that
    del x
    assert backend.live_slots() == live + 1
    np.testing.assert_array_equal(t.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)
    del t
    assert backend.live_slots() == live + 0


def test_fusion_in_the_frontend() -> None:
    rng = np.random.default_rng(5)
    x, w, b = rng.normal(size=(6, 5)), rng.normal(size=(5, 3)), rng.normal(size=3)
    dx, dw, db = (lz.array(a.astype(np.float32), "cpu") for a in (x, w, b))
    before = dict(lz.STATS)
    h = lz.maximum(dx @ dw + db, 0.0)  # one kernel: the matmul with bias and ReLU as its epilogue
    kernel, _ = h.value.kernel()
    assert jaxcore.detect_matmul(kernel) is not None
    np.testing.assert_allclose(h.numpy(), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
    chain = lz.exp(dx * 2.0 - 1.0) / (dx * dx + 1.0)  # one kernel for the whole chain
    np.testing.assert_allclose(chain.numpy(), np.exp(x * 2 - 1) / (x * x + 1), rtol=1e-5)
    assert lz.STATS["kernels"] - before["kernels"] == 2
    lower = np.tril(rng.normal(size=(4, 4))) + 4 * np.eye(4)
    rhs = rng.normal(size=(4, 2))
    dl, dr = lz.array(lower.astype(np.float32), "cpu"), lz.array(rhs.astype(np.float32), "cpu")
    for lo, tr, mat in (
        (True, False, lower),
        (True, True, lower.T),
        (False, False, lower.T),
        (False, True, lower),
    ):
        got = lz.solve_triangular(dl if lo else dl.T, dr, lower=lo, trans=tr).numpy()
        np.testing.assert_allclose(got, np.linalg.solve(mat, rhs), rtol=1e-4, atol=1e-5)


def test_bench_runs_the_model_family() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jaxcore", "bench", "--device", "cpu", "--workload", "model"]
        + ["--reps", "1", "--no-limits", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert [r["workload"] for r in results] == ["model-mlp", "model-attention", "model-lstsq", "model-sort"]
    assert all(r["status"] == "ok" for r in results), results


@pytest.mark.parametrize("device", ["cpu", "wasm"])
def test_jit_replays_a_step_on_new_arguments(device: str) -> None:
    """The first call records; later ones replay the same dispatches on the new arguments' buffers
    (a routine and an array from outside the step included), with the results numpy gives, the
    same number of dispatches, no kernel built again, and every buffer freed when the results die."""
    backend = backend_or_skip(device)
    rng = np.random.default_rng(11)
    outside = lz.array(np.float32([1.0, -2.0, 0.5]), device)

    def step(a: lz.Array, b: lz.Array, scale: float) -> tuple[lz.Array, list[lz.Array]]:
        h = lz.maximum(a @ b + outside, 0.0) * scale
        return h.sum(axis=1), [lz.sort(h.reshape((-1,))), a]

    def want(a: np.ndarray, b: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
        h = np.maximum(a @ b + np.float32([1.0, -2.0, 0.5]), 0) * np.float32(scale)
        return h.sum(axis=1), np.sort(h.ravel())

    jitted = jit(step)
    gc.collect()
    live = backend.live_slots()
    counts = []
    for scale in (2.0, 2.0, 2.0, 3.0):
        a, b = rng.normal(size=(4, 5)).astype(np.float32), rng.normal(size=(5, 3)).astype(np.float32)
        da, db = lz.array(a, device), lz.array(b, device)
        before = dict(lz.STATS)
        total, (ordered, same) = jitted(da, db, scale)
        counts.append((lz.STATS["kernels"] - before["kernels"], lz.STATS["routines"] - before["routines"]))
        np.testing.assert_allclose(total.numpy(), want(a, b, scale)[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ordered.numpy(), want(a, b, scale)[1], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(same.numpy(), a)
        del total, ordered, same, da, db
        gc.collect()
        assert backend.live_slots() == live
    assert len(jitted.plans) == 2  # scale is part of the key: 3.0 recorded again
    assert counts[0] == counts[1] == counts[2] and counts[0][1] == 1, counts
