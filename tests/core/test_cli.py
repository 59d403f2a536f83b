"""The `jaxcore` command: devices (with its smoke kernel), bench, conformance argument passing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jaxcore
import jaxcore.bench
from jaxcore import cli, registry
from jaxcore.registry import Registry
from jaxcore.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str,
    plugins: str = "jaxcore_cpu.plugin",
    extra_path: tuple[Path, ...] = (),
    env: dict[str, str] | None = None,
    module: str = "jaxcore.cli",
) -> Any:
    """`python -m jaxcore.cli ARGS` with only the named plugins, working installed or from a checkout."""
    extra_env = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXCORE_")}
    env.update(extra_env)
    paths = [ROOT / "core", ROOT / "plugins" / "cpu", *extra_path]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
    env["JAXCORE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["JAXCORE_PLUGINS"] = plugins
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_devices_lists_cpu_and_runs_the_smoke_kernel() -> None:
    proc = run_cli("devices")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "*cpu" in out and "ready" in out
    assert "f32" in out
    assert "ok  x*2+1 = [1.0, 3.0, 5.0, 7.0]" in out
    assert "JAXCORE_PLUGINS=jaxcore_cpu.plugin" in out


def test_python_dash_m_jaxcore_is_the_command() -> None:
    proc = run_cli("devices", module="jaxcore")
    assert proc.returncode == 0, proc.stderr
    assert "ok  x*2+1 = [1.0, 3.0, 5.0, 7.0]" in proc.stdout


def test_devices_with_a_bad_default_device_explains_and_fails() -> None:
    env_default = {"JAXCORE_DEFAULT_DEVICE": "nope"}
    proc = run_cli("devices", env=env_default)
    assert proc.returncode == 1, proc.stderr
    assert (
        "no default device: unknown device 'nope' in JAXCORE_DEFAULT_DEVICE; known devices: cpu"
        in proc.stdout
    )
    assert "ok  x*2+1" in proc.stdout


def test_devices_json_and_broken_plugin() -> None:
    proc = run_cli(
        "devices",
        "--json",
        plugins="jaxcore_cpu.plugin,jaxcore_broken.plugin",
        extra_path=(ROOT / "examples" / "broken-plugin",),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["default"] == "cpu"
    (cpu,) = [d for d in doc["devices"] if d["name"] == "cpu"]
    assert cpu["status"] == "ready" and cpu["smoke"]["ok"]
    assert "float32" in cpu["capabilities"]["dtypes"]
    broken = [p for p in doc["plugins"] if p["status"] == "error"]
    assert len(broken) == 1 and "broken on purpose" in broken[0]["error"]


def test_devices_table_reports_a_broken_plugin() -> None:
    proc = run_cli(
        "devices",
        plugins="jaxcore_cpu.plugin,jaxcore_broken.plugin",
        extra_path=(ROOT / "examples" / "broken-plugin",),
    )
    assert proc.returncode == 0, proc.stderr
    assert "plugins that failed to load" in proc.stdout and "broken on purpose" in proc.stdout
    assert "ok  x*2+1" in proc.stdout


def test_bench_dispatch_json_on_cpu(tmp_path: Path) -> None:
    trace = tmp_path / "bench.trace.json"
    proc = run_cli(
        "bench", "--device", "cpu", "--workload", "dispatch", "--reps", "3", "--json", "--trace", str(trace)
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (r,) = doc["results"]
    assert (r["workload"], r["device"], r["status"], r["reps"]) == ("dispatch", "cpu", "ok", 3)
    assert r["device_s"] > 0 and r["numpy_s"] > 0
    assert r["speed"] == pytest.approx(r["numpy_s"] / r["device_s"])
    assert len(r["device_times"]) == len(r["numpy_times"]) == 3
    events = json.loads(trace.read_text())["traceEvents"]
    dispatches = [e for e in events if e["ph"] == "X"]
    assert len(dispatches) >= 3000 and {e["args"]["device"] for e in dispatches} == {"cpu"}
    assert "dispatch" in proc.stderr  # the progress line


def test_bench_table_says_which_way_the_ratio_goes() -> None:
    proc = run_cli("bench", "--workload", "dispatch", "--reps", "1")
    assert proc.returncode == 0, proc.stderr
    assert "speed = numpy time / device time" in proc.stdout
    assert proc.stdout.splitlines()[1].startswith("dispatch")


def test_bench_scripts_print_the_same_table() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXCORE_")}
    env["JAXCORE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["JAXCORE_PLUGINS"] = "jaxcore_cpu.plugin"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "core"), str(ROOT / "plugins" / "cpu")])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "elementwise.py"), "--workload", "dispatch", "--reps", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "speed = numpy time / device time" in proc.stdout


# ---- in-process, with the example plugin's small capability set ------------------------------


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "jaxcore-example-plugin"))
    reg = Registry(Settings(disable_plugin_autoload=True))
    monkeypatch.setattr(registry, "_registry", reg)
    import jaxcore_example.plugin

    jaxcore.register_plugin(jaxcore_example.plugin)
    return lambda: None


def test_bench_reports_unsupported_routines(example: Callable[[], None]) -> None:
    out = io.StringIO()
    rc = cli.main(
        ["bench", "--device", "example", "--workload", "argsort", "--workload", "dispatch", "--json"], out
    )
    assert rc == 0
    results = {r["workload"]: r for r in json.loads(out.getvalue())["results"]}
    assert results["argsort"]["status"] == "unsupported"
    assert "Argsort" in results["argsort"]["detail"]
    assert results["dispatch"]["status"] == "ok"


def test_devices_in_process(example: Callable[[], None]) -> None:
    out = io.StringIO()
    assert cli.main(["devices"], out) == 0
    text = out.getvalue()
    assert "*example" in text and "f32,i32,bool" in text and "Sort" in text
    assert "example    ok" in text


def test_bench_list_and_unknown_workload() -> None:
    out = io.StringIO()
    assert cli.main(["bench", "--list"], out) == 0
    names = [line.split()[0] for line in out.getvalue().splitlines()]
    assert names == list(jaxcore.bench.WORKLOADS)
    with pytest.raises(SystemExit, match="unknown workload 'nope'"):
        jaxcore.bench.select(["nope"])
    assert [w.name for w in jaxcore.bench.select(["matmul"])] == ["matmul512", "matmul1024", "matmul2048"]


def test_conformance_arguments_become_the_suites_options() -> None:
    """The suite's options work before `--` under their short names and as `--jaxcore-*`; devices
    stay devices (tests/core/test_conformance_cli.py runs the command itself)."""
    argv = ["conformance", "cpu", "--jaxcore-report", "r.json", "--jaxcore-max-examples=3", "wasm"]
    rest, suite = cli._split_suite_options(argv)
    assert rest == ["conformance", "cpu", "wasm"]
    assert suite == ["--jaxcore-report=r.json", "--jaxcore-max-examples=3"]
    args = cli.build_parser().parse_args(
        ["conformance", "cpu", "--report", "r.json", "--known-failures", "k.txt", "--reference", "cpu"]
    )
    args.jaxcore_options = suite[1:]
    assert args.devices == ["cpu"] and args.fuzz is None
    assert cli._suite_options(args) == [
        "--jaxcore-report=r.json",
        "--jaxcore-known-failures=k.txt",
        "--jaxcore-reference=cpu",
        "--jaxcore-max-examples=3",
    ]
    args = cli.build_parser().parse_args(
        ["conformance", "wasm", "--fuzz", "20", "--seed", "5", "--case", "3,9"]
    )
    assert (args.fuzz, args.seed, args.case) == (20.0, 5, [3, 9])
    for bad in (["--fuzz", "0"], ["--case", "x"], ["--case", "-1"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["conformance", *bad])


@pytest.mark.parametrize("unit,runs", [("GFLOP/s", 2), ("GB/s", 1)])
def test_bench_primes_short_compute_bound_runs(unit: str, runs: int) -> None:
    """Every side of a short compute-bound workload runs once untimed before each timed run
    (threads that slept while the other side ran would otherwise be counted waking up); a
    memory-bound one is timed cold."""
    calls = {"device": 0, "numpy": 0}

    def count(side: str) -> Callable[[], None]:
        def run() -> None:
            calls[side] += 1

        return run

    def build(b: Any, rng: Any) -> Any:
        return jaxcore.bench.Case(count("device"), count("numpy"), lambda: None, 1.0, unit)

    w = jaxcore.bench.Workload("probe", "test", "counts calls", build)
    res = jaxcore.bench.run_workload(
        w, jaxcore.get_backend("cpu"), 3, jaxcore.bench.Progress(1, io.StringIO())
    )
    assert res.status == "ok" and res.reps == 3 and len(res.device_times) == 3
    assert calls == {"device": 1 + runs * 3, "numpy": 1 + runs * 3}  # the warm-up, then the rounds
