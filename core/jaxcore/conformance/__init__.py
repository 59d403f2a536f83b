"""The jaxcore conformance suite: one set of cases every device plugin must pass.

Run it against your device (the pytest plugin ships with jaxcore and loads itself when jaxcore is
installed)::

    pytest --pyargs jaxcore.conformance --jaxcore-device=mydev      # or: jaxcore conformance mydev
    pytest --pyargs jaxcore.conformance --jaxcore-device=all        # every ready device

From a checkout that is not pip-installed (no ``jaxcore*.egg-info``/``dist-info`` on the path), add
``-p jaxcore.conformance.plugin``; when the entry point is visible, ``-p`` would load it twice.
Useful options: ``--jaxcore-reference=NAME`` (differential reference), ``--jaxcore-max-examples=N``
(Hypothesis examples, default 60), ``--jaxcore-require=NAME,...`` (fail unless these are ready),
``--jaxcore-report=FILE`` (a JSON report per area, device and case, with messages),
``--jaxcore-known-failures=FILE`` (case ids such as ``ops::test_binary[mydev-Idiv-*]`` a plugin is
still working on: listed as known-failing, never counted as passed), and the usual ``-k``/``-x``;
``-k "wasm and not differential"`` selects by device and area. A failing case reports the case, the
kernel or routine it ran, the elements that differ (inputs, expected, got) and a command that
reruns just that case.

Cases are grouped by area (``test_ops``, ``test_casts``, ``test_reductions``, ``test_views``,
``test_protocol``, ``test_routines``, ``test_async``, ``test_aliasing``, ``test_unsupported``,
``test_differential``, ``test_fuzz``, ``test_fuzz_regressions``, ``test_misuse``, ``test_concurrency``).
Expectations come from numpy/scipy/Python (`oracle`), never from a device; tolerances come from one
table (`tolerances`). What a device cannot do is read from its `Capabilities`: for everything it does
not declare, the suite checks that preparing it raises `UnsupportedOpError`/`UnsupportedRoutineError`
and reports the case as *unsupported-declared*. The summary table at the end counts, per area and
device: passed / failed / unsupported-declared.

`harness` holds the helpers (`run_kernel`, `run_routine`, `assert_close`, `expect_unsupported`,
`tolerance`) for a plugin's own extra tests; mark such a test ``@pytest.mark.jaxcore`` and take the
`backend` fixture to have it run once per selected device and counted in the table::

    @pytest.mark.jaxcore
    def test_my_big_sum(backend):
        kernel = harness.reduce_kernel("float32", AluOp.Add, 1, 1 << 20)
        x = np.ones(1 << 20, np.float32)
        harness.assert_close(harness.run_kernel(backend, kernel, [x]), np.array([1 << 20], np.float32),
                             "ReduceAdd", "float32", backend)
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
from collections.abc import Callable
from typing import Any

AREAS = (
    "ops",
    "casts",
    "reductions",
    "views",
    "protocol",
    "routines",
    "async",
    "aliasing",
    "unsupported",
    "differential",
    "fuzz",
    "fuzz_regressions",
    "specials",
    "mixed_dtypes",
    "misuse",
    "concurrency",
)


def plugin_autoloaded() -> bool:
    """Whether pytest will load the plugin by itself (jaxcore installed, autoload not disabled)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == "jaxcore.conformance.plugin" for ep in md.entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    """The pytest arguments that load the plugin exactly once (none when it autoloads)."""
    return [] if plugin_autoloaded() else ["-p", "jaxcore.conformance.plugin"]


def run(devices: list[str], pytest_args: list[str]) -> int:
    """Run the suite on `devices` (empty or ["all"]: every ready device); returns pytest's exit code."""
    import pytest

    selected = ",".join(devices) if devices else "all"
    args = [
        *plugin_args(),
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",  # jaxcore itself is imported before pytest starts
        "-o",
        "python_files=test_*.py",
        "-o",
        "python_functions=test_*",
        "--pyargs",
        __name__,
        f"--jaxcore-device={selected}",
        *pytest_args,
    ]
    return int(pytest.main(args))


def run_isolated(
    device: str, pytest_args: list[str], env: dict[str, str], cwd: str | os.PathLike[str]
) -> str:
    """Run the suite on `device` in a fresh Python with `env` (settings a backend reads once, a
    display, another context path); the tail of its report, or AssertionError with it on failure."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pytest", "--pyargs", __name__, f"--jaxcore-device={device}"]
    cmd += ["-q", "-p", "no:cacheprovider", *pytest_args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=cwd)
    tail = out.stdout[-3000:]
    last = tail.splitlines()[-1] if tail.strip() else ""
    if out.returncode != 0 or " passed" not in last or " failed" in last:
        raise AssertionError(f"the suite on {device} did not pass:\n{tail}{out.stderr[-2000:]}")
    return tail


def cases() -> dict[str, Callable[..., Any]]:
    """Every case function, named ``test_<area>_<case>`` so ``-k protocol`` selects an area, for
    re-exporting the suite into another test module::

        globals().update(jaxcore.conformance.cases())
    """
    found: dict[str, Callable[..., Any]] = {}
    for area in AREAS:
        mod = importlib.import_module(f"{__name__}.test_{area}")
        for name, obj in vars(mod).items():
            if name.startswith("test_") and callable(obj) and getattr(obj, "__module__", "") == mod.__name__:
                key = name if name.startswith(f"test_{area}") else f"test_{area}_{name[len('test_') :]}"
                if key in found:
                    raise RuntimeError(f"conformance case name {key} is defined twice")
                found[key] = obj
    return found
