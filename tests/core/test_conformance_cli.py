"""`jaxcore conformance` as a third-party author runs it: the suite's report options on the command
line, a time-bounded, seeded differential fuzz whose every finding comes minimised with a line that
replays exactly it, the quirks a device reports, and the suite's own requirements named when absent.

The device under test here is a real plugin with a real bug: a copy of the cpu backend whose
compiler turns int32 Min into Max (and reports a quirk), loaded through `JAXCORE_PLUGINS`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jaxcore.conformance import harness

ROOT = Path(__file__).resolve().parents[2]

WRONG_PLUGIN = '''
from dataclasses import replace

from jaxcore.plugin import AluExp, AluOp, DType, Kernel, hookimpl


def _make():
    from jaxcore_cpu.backend import CAPABILITIES, CpuBackend

    class WrongMin(CpuBackend):
        """A compiler bug: int32 Min computed as Max."""

        name = "wrongmin"
        capabilities = replace(CAPABILITIES, reference=False, quirks=("fuses-mul-add", "own-quirk"))

        def _compile_kernel(self, kernel):
            def swap(n):
                if n.op == AluOp.Min and n.dtype == DType.int32:
                    return AluExp(AluOp.Max, n.dtype, n.src)
                return None

            return super()._compile_kernel(Kernel(kernel.nargs, kernel.size, kernel.exp.rewrite(swap),
                                                  kernel.reduction))

    return WrongMin()


def _make_wide():
    from jaxcore_cpu.backend import CAPABILITIES, CpuBackend

    class Wide(CpuBackend):
        """A bug that only kernels reading five inputs or more meet: the first output byte flips."""

        name = "wide"
        capabilities = replace(CAPABILITIES, reference=False)

        def _run(self, exe, inputs, outputs):
            super()._run(exe, inputs, outputs)
            if exe.source.nargs >= 5 and outputs[0].size:
                outputs[0][0] ^= 1

    return Wide()


@hookimpl
def jaxcore_register_devices(register):
    register("wrongmin", _make, api_version=1, priority=-5)
    register("wide", _make_wide, api_version=1, priority=-6)
'''

PLUGINS = "jaxcore_cpu.plugin,jaxcore_wrongmin.plugin"


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wrongmin")
    (root / "jaxcore_wrongmin").mkdir()
    (root / "jaxcore_wrongmin" / "__init__.py").write_text("")
    (root / "jaxcore_wrongmin" / "plugin.py").write_text(WRONG_PLUGIN)
    return root


def jaxcore(
    *args: str, plugin_dir: Path | None = None, cwd: Path | None = None, prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    """The `jaxcore` command (`python -m jaxcore.cli`) with only the cpu plugin and, if given, the
    wrongmin one; `prelude` runs first in the same Python (to hide an installed package)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXCORE_", "CI"))}
    paths = [ROOT / "core", ROOT / "plugins" / "cpu", *([plugin_dir] if plugin_dir else [])]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
    env["JAXCORE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["JAXCORE_PLUGINS"] = PLUGINS if plugin_dir else "jaxcore_cpu.plugin"
    code = f"{prelude}\nimport sys\nfrom jaxcore.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd
    )


def test_report_and_known_failures_work_before_the_double_dash(tmp_path: Path) -> None:
    report, known = tmp_path / "report.json", tmp_path / "known.txt"
    known.write_text("ops::test_binary[cpu-Idiv-int32]  # fixed already\n")
    res = jaxcore(
        "conformance", "cpu", "--report", str(report), "--known-failures", str(known),
        "--", "-q", "-p", "no:cacheprovider", "-k", "test_binary and int32",
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "known failure now passes (remove it from the list): ops::test_binary[cpu-Idiv-int32]" in out
    data = json.loads(report.read_text())
    assert data["devices"] == ["cpu"] and data["areas"]["ops"]["cpu"]["passed"] >= 7, data["areas"]
    assert data["known_failures_now_passing"] == ["ops::test_binary[cpu-Idiv-int32]"]


def test_suite_options_pass_through_before_the_double_dash(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    res = jaxcore(
        "conformance", "cpu", "--jaxcore-report", str(report), "--jaxcore-max-examples=3",
        "--", "-q", "-p", "no:cacheprovider", "-k", "test_binary and Add and uint32",
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(report.read_text())["areas"]["ops"]["cpu"]["passed"] == 1


def test_the_fuzz_finds_a_wrong_compiler_and_each_rerun_line_replays_its_case(plugin_dir: Path) -> None:
    res = jaxcore(
        "conformance", "wrongmin", "--fuzz", "6", "--seed", "11", "--no-suite", "--minimise", "30",
        plugin_dir=plugin_dir,
    )  # fmt: skip
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    assert "seed 11 (--seed 11)" in out and "quirks: fuses-mul-add, own-quirk" in out
    assert "[wrongmin] disagreement 1: seed=11 case=" in out, out
    summary = re.search(r"fuzz: wrongmin: (\d+) cases .* in ([\d.]+) s: (\d+) disagreement", out)
    assert summary is not None, out
    assert float(summary.group(2)) < 6 + 20, "the time bound ends the run (the last batch may run over)"
    findings = [f.split(": ", 1)[1] for f in out.split("[wrongmin] disagreement ")[1:]]
    assert len(findings) == int(summary.group(3))
    first = findings[0]  # seed=11 case=N: vs oracle: ... lanes differ, the kernel, minimised, rerun
    minimised = first.split("minimised: ")[1].split("rerun:")[0]
    assert "Min(" in minimised and len(minimised) < len(first.split("minimised: ")[0]), first
    rerun = first.split("rerun: ")[1].splitlines()[0].strip()
    case = first.split(":")[0].removeprefix("seed=11 case=")
    assert rerun == f"jaxcore conformance wrongmin --reference cpu --seed 11 --case {case}", first
    again = jaxcore(*shlex.split(rerun)[1:], "--minimise", "30", plugin_dir=plugin_dir)
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stdout.split("[wrongmin] disagreement 1: ")[1].strip() == first.strip(), again.stdout


def test_a_finding_only_a_packed_kernel_shows_is_replayed_packed(plugin_dir: Path) -> None:
    """Elementwise cases run packed several to a kernel; when only the packed kernel disagrees, the
    rerun line names every case in it, and replaying them packs them again."""
    res = jaxcore(
        "conformance", "wide", "--fuzz", "3", "--seed", "5", "--no-suite", "--minimise", "0",
        plugin_dir=plugin_dir,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    finding = next(f for f in res.stdout.split("[wide] disagreement ")[1:] if "only when batched" in f)
    rerun = finding.split("rerun: ")[1].splitlines()[0].strip()
    cases = rerun.split("--case ")[1].split()[0].split(",")
    assert len(cases) > 1 and cases == sorted(cases, key=int), rerun
    again = jaxcore(*shlex.split(rerun)[1:], "--minimise", "0", plugin_dir=plugin_dir)
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stdout.split("[wide] disagreement 1: ")[1].strip() == finding.split(": ", 1)[1].strip()


def test_a_fresh_seed_is_printed_and_the_reference_is_checked_against_the_oracle() -> None:
    res = jaxcore("conformance", "cpu", "--fuzz", "1", "--no-suite")
    assert res.returncode == 0, res.stdout + res.stderr
    seed = re.search(r"seed (\d+) \(a fresh seed; --seed (\d+) repeats it\)", res.stdout)
    assert seed is not None and seed.group(1) == seed.group(2), res.stdout
    assert "fuzz: cpu against the oracle only" in res.stdout and "no disagreement" in res.stdout


def test_replaying_a_case_that_conforms_says_so() -> None:
    res = jaxcore("conformance", "cpu", "--seed", "3", "--case", "5")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "seed 3 case 5 on cpu: conforms" in res.stdout
    bad = jaxcore("conformance", "cpu", "--case", "5")
    assert bad.returncode == 2 and "give --seed too" in bad.stdout
    nothing = jaxcore("conformance", "cpu", "--no-suite")
    assert nothing.returncode == 2 and "give --fuzz SECONDS" in nothing.stdout


def test_devices_shows_the_quirks_a_device_reports(plugin_dir: Path) -> None:
    res = jaxcore("devices", plugin_dir=plugin_dir)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "quirk: fuses-mul-add (the driver may fuse a * b + c into one rounding" in res.stdout
    assert "quirk: own-quirk\n" in res.stdout
    doc = json.loads(jaxcore("devices", "--json", plugin_dir=plugin_dir).stdout)
    quirks = {d["name"]: d["capabilities"]["quirks"] for d in doc["devices"]}
    assert quirks == {"cpu": [], "wrongmin": ["fuses-mul-add", "own-quirk"], "wide": []}
    suite = jaxcore(
        "conformance", "wrongmin", "--", "-q", "-p", "no:cacheprovider",
        "-k", "test_binary and Add and int32", plugin_dir=plugin_dir,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout + suite.stderr
    assert "declared tolerances 0; quirks fuses-mul-add,own-quirk" in suite.stdout


HIDE_SCIPY = "import sys; sys.modules['scipy'] = None  # as if scipy were not installed"


def test_without_scipy_the_command_names_it_and_the_extra() -> None:
    res = jaxcore("conformance", "cpu", "--", "-k", "triangular_solve", prelude=HIDE_SCIPY)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "needs scipy, which is not installed here: pip install 'jaxcore[conformance]'" in res.stdout
    assert "failed" not in res.stdout


def test_without_scipy_the_pytest_plugin_stops_before_any_case(tmp_path: Path) -> None:
    """Under plain pytest too: TriangularSolve is not reported as the device's failure."""
    from jaxcore.conformance import plugin_args

    code = f"{HIDE_SCIPY}\nimport pytest\nsys.exit(pytest.main(sys.argv[1:]))"
    args = [*plugin_args(), "-p", "no:cacheprovider", "--pyargs", "jaxcore.conformance"]
    args += ["--jaxcore-device=cpu", "-k", "triangular_solve"]
    res = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    out = res.stdout + res.stderr
    assert res.returncode == 4, out
    assert "needs scipy, which is not installed here: pip install 'jaxcore[conformance]'" in out
    assert "failed" not in out and "TriangularSolve" not in out


def test_the_conformance_extra_is_what_the_suite_imports() -> None:
    extras = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras["conformance"]) == sorted(harness.REQUIREMENTS.values())
    assert set(extras["conformance"]) <= set(extras["test"])  # `make test` installs core[test]
    assert harness.missing_requirements() == []
