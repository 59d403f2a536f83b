"""The conformance suite's reports for plugin authors: a failure leads with the case, the kernel,
inputs, expected and got, and a command that reruns just it; `--jaxcore-report` writes JSON;
`--jaxcore-known-failures` lists known-failing cases apart, never as passed."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jaxcore.conformance import plugin_args

CASES = '''
import numpy as np
import pytest
from jaxcore.alu import AluExp
from jaxcore.conformance import harness
from jaxcore.routine import Routine, Routines


@pytest.mark.jaxcore
def test_wrong(backend):
    """Doubling, checked against the wrong expectation."""
    k = harness.map_kernel(["float32"], 4, lambda x: AluExp.mul(x, AluExp.f32(2)))
    x = np.arange(4, dtype=np.float32)
    harness.assert_close(harness.run_kernel(backend, k, [x]), x * 3, "Mul", "float32", backend, inputs=[x])


@pytest.mark.jaxcore
def test_right(backend):
    k = harness.map_kernel(["float32"], 4, lambda x: AluExp.mul(x, AluExp.f32(2)))
    x = np.arange(4, dtype=np.float32)
    harness.assert_close(harness.run_kernel(backend, k, [x]), x * 2, "Mul", "float32", backend)


@pytest.mark.jaxcore
def test_crash(backend):
    k = harness.map_kernel(["float32"], 4, lambda x: AluExp.mul(x, AluExp.f32(2)))
    harness.run_kernel(backend, k, [np.arange(2, dtype=np.float32)])


@pytest.mark.jaxcore
def test_not_declared(backend):
    harness.skip_if_undeclared(backend, Routine.build(Routines.Fft, [(4,), (4,)], ["float64", "float64"]))
'''

CONFTEST = """
import jaxcore
from jaxcore.backend import Capabilities
from jaxcore.dtype import DType


def _make():
    from jaxcore_cpu.backend import CpuBackend

    caps = Capabilities(dtypes=frozenset({DType.float32}), routines=frozenset(), max_args=4)
    return type("Small", (CpuBackend,), {"name": "small", "capabilities": caps})()


class _Plugin:
    @jaxcore.hookimpl
    def jaxcore_register_devices(self, register):
        register("small", _make, api_version=1, priority=-5)


def pytest_configure(config):
    jaxcore.register_plugin(_Plugin(), name="report-test-small")
"""


def run_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_args(), "test_cases.py", *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One run of the cases but the crash, with a JSON report (two tests read it)."""
    tmp_path = tmp_path_factory.mktemp("plain")
    res = run_suite(
        tmp_path, "--jaxcore-device=small", f"--jaxcore-report={tmp_path / 'report.json'}", "-k", "not crash"
    )
    return tmp_path, res


def test_a_failure_leads_with_the_case_and_reruns_alone(
    plain_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    tmp_path, res = plain_run
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    failure = out[out.index("case: custom::test_wrong[small]") :]
    failure = failure[: failure.index("jaxcore conformance:")]
    kernel = "kernel: { exp = (G_0<float32>[$gidx:int32] * 2)"
    for text in ("Doubling, checked against", kernel, "inputs=(1.0", "expected 3.0", "got 2.0", "rerun: "):
        assert text in failure, failure
    assert "def assert_close" not in out and "harness.py" not in failure, failure
    assert len(failure.splitlines()) < 15, failure
    rerun = shlex.split(failure[failure.index("rerun: ") + 7 :].splitlines()[0])
    again = subprocess.run([*rerun, "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True)
    assert "1 failed" in again.stdout and "passed" not in again.stdout.split("\n")[-2], again.stdout


def test_json_report(plain_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    data = json.loads((plain_run[0] / "report.json").read_text())
    assert data["devices"] == ["small"]
    assert data["areas"]["custom"]["small"] == {
        "passed": 1, "failed": 1, "unsupported-declared": 1, "known-failing": 0, "skipped": 0
    }  # fmt: skip
    by_id = {c["id"]: c for c in data["cases"]}
    assert by_id["custom::test_wrong[small]"]["outcome"] == "failed"
    assert "expected 3.0" in by_id["custom::test_wrong[small]"]["message"]
    assert by_id["custom::test_right[small]"]["outcome"] == "passed"
    declared = by_id["custom::test_not_declared[small]"]
    assert (
        declared["outcome"] == "unsupported-declared" and "routine Fft is not declared" in declared["message"]
    )


@pytest.mark.parametrize("pattern", ["custom::test_wrong[small]", "custom::test_w*"])
def test_known_failures_are_listed_never_passed(tmp_path: Path, pattern: str) -> None:
    known = tmp_path / "known.txt"
    known.write_text(f"# working on it\n{pattern}\ncustom::test_right[small]  # fixed already\n")
    report = tmp_path / "report.json"
    args = [f"--jaxcore-known-failures={known}", f"--jaxcore-report={report}", "-k", "not crash"]
    res = run_suite(tmp_path, "--jaxcore-device=small", *args)
    assert res.returncode == 0, res.stdout
    assert "known-failing: custom::test_wrong[small]" in res.stdout, res.stdout
    assert "known failure now passes (remove it from the list): custom::test_right[small]" in res.stdout
    cell = json.loads(report.read_text())["areas"]["custom"]["small"]
    assert cell["known-failing"] == 1 and cell["failed"] == 0 and cell["passed"] == 1, cell
    assert "1/0/1 +1k" in res.stdout, res.stdout


def test_missing_known_failures_file_is_a_usage_error(tmp_path: Path) -> None:
    res = run_suite(tmp_path, "--jaxcore-device=small", f"--jaxcore-known-failures={tmp_path / 'nope.txt'}")
    assert res.returncode == 4 and "--jaxcore-known-failures" in res.stdout + res.stderr


def test_an_error_inside_the_device_shows_its_frames_not_pytests(tmp_path: Path) -> None:
    res = run_suite(tmp_path, "--jaxcore-device=small", "-k", "crash")
    out = res.stdout
    failure = out[out.index("case: custom::test_crash[small]") : out.index("jaxcore conformance:")]
    assert "ValueError: input 0 (slot 1) has 8 bytes; at least 16 are needed" in failure, failure
    assert "test_cases.py:" in failure and "in dispatch" in failure, failure
    assert "_pytest" not in failure and "pluggy" not in failure, failure
