"""The `jaxcore` command: `devices`, `conformance`, `bench` and `new-plugin`.

`jaxcore devices` does not only list: it runs a tiny kernel on every ready device, because a
device that registers but cannot compute is the failure users most need to see. It exits 1 when
a smoke kernel fails or no default device can be chosen; plugins that fail to load are listed but
do not change the exit status (they are not the devices the user is using).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from jaxcore import registry
from jaxcore.backend import Backend, Capabilities
from jaxcore.dtype import DType

_SUITE_HINT = "pip install 'jaxcore[conformance]'"  # conformance.harness.INSTALL_HINT, without pytest
_SHORT = {
    "float32": "f32",
    "int32": "i32",
    "uint32": "u32",
    "bool": "bool",
    "float16": "f16",
    "float64": "f64",
}


def smoke_test(device: str) -> tuple[bool, str]:
    """Run out = x*2 + 1 over 4 float32 on `device`: (passed, what it printed or why it failed)."""
    from jaxcore.alu import AluExp, AluVar
    from jaxcore.kernel import Kernel

    x = np.arange(4, dtype=np.float32)
    want = x * 2 + 1
    try:
        be = registry.get_backend(device)
        exp = AluExp.global_index(DType.float32, 0, 4, AluVar.gidx) * AluExp.f32(2) + AluExp.f32(1)
        exe = be.prepare_kernel(Kernel(1, 4, exp))
        a, out = be.malloc(16, x.tobytes()), be.malloc(16)
        try:
            be.dispatch(exe, [a], [out])
            got = np.frombuffer(be.read(out), dtype=np.float32)
        finally:
            be.dec_ref(a)
            be.dec_ref(out)
    except Exception as exc:  # noqa: BLE001 - reported per device
        return False, f"{type(exc).__name__}: {exc}"
    if np.array_equal(got, want):
        return True, f"x*2+1 = {got.tolist()}"
    return False, f"x*2+1 = {got.tolist()}, expected {want.tolist()}"


def _dtypes(caps: Capabilities) -> str:
    order = list(DType)
    return ",".join(_SHORT.get(str(d), str(d)) for d in sorted(caps.dtypes, key=order.index))


def _routines(caps: Capabilities) -> str:
    from jaxcore.routine import Routines

    if caps.routines >= frozenset(Routines):
        return f"all {len(Routines)}"
    order = list(Routines)
    return ",".join(str(r) for r in sorted(caps.routines, key=order.index)) or "none"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def cmd_devices(args: argparse.Namespace, out: TextIO) -> int:
    registry.init()
    infos = registry.device_info()
    plugins = registry.plugin_info()
    default_error = ""
    try:
        default = registry.default_device()
    except (RuntimeError, ValueError) as exc:  # a bad JAXCORE_DEFAULT_DEVICE is shown, not fatal here
        default, default_error = None, str(exc)
    smoke = {d.name: smoke_test(d.name) for d in infos if d.status == "ready"}
    status = 0 if all(ok for ok, _ in smoke.values()) and not default_error else 1
    if args.json:
        doc: dict[str, Any] = {
            "default": default,
            "default_error": default_error,
            "devices": [
                {**_info_dict(d), "smoke": {"ok": smoke[d.name][0], "detail": smoke[d.name][1]}}
                if d.name in smoke
                else _info_dict(d)
                for d in infos
            ],
            "plugins": [asdict(p) for p in plugins],
        }
        out.write(json.dumps(doc, indent=2) + "\n")
        return status

    rows: list[tuple[str, ...]] = [
        ("DEVICE", "PLUGIN", "PRIORITY", "STATUS", "DTYPES", "ROUTINES", "MAX_ARGS")
    ]
    notes: dict[int, list[str]] = {}
    for d in infos:
        mark = "*" if d.name == default else " "
        caps = d.capabilities
        dtypes = _dtypes(caps) if caps else "-"
        routines = _routines(caps) if caps else "-"
        max_args = (
            "-" if caps is None else ("unlimited" if caps.max_args >= 2**31 - 1 else str(caps.max_args))
        )
        plugin = f"{d.plugin} {d.version}".strip()
        rows.append((f"{mark}{d.name}", plugin, str(d.priority), d.status, dtypes, routines, max_args))
        extra = [f"reason: {d.reason}"] if d.reason else []
        extra += [f"fix: {d.hint}"] if d.hint else []
        extra += _quirk_notes(caps) if caps else []
        if d.conflicts:
            extra.append(
                f"conflict: also registered by {', '.join(d.conflicts)} (ignored; {registry.OWNER_RULE})"
            )
        if extra:
            notes[len(rows) - 1] = extra
    if len(rows) == 1:
        out.write("no jaxcore devices are registered: pip install jaxcore (it brings jaxcore-cpu)\n")
    else:
        lines = _table(rows)
        for i, line in enumerate(lines):
            out.write(line + "\n")
            for note in notes.get(i, []):
                out.write(f"      {note}\n")
        out.write("(* = default device)\n" if default else f"no default device: {default_error}\n")
    failed = [p for p in plugins if p.status == "error"]
    if failed:
        out.write("\nplugins that failed to load:\n")
        for p in failed:
            out.write(f"  {p.name} {p.version} ({p.module}): {p.error}\n      fix: {p.hint}\n")
    if smoke:
        out.write("\nsmoke test (out = x*2 + 1, x = [0, 1, 2, 3] float32):\n")
        for name, (ok, detail) in smoke.items():
            out.write(f"  {name:<10} {'ok' if ok else 'FAILED'}  {detail}\n")
    env = registry.current().settings.env
    if env:
        out.write("\nsettings: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())) + "\n")
    return status


def _quirk_notes(caps: Capabilities) -> list[str]:
    """One line per quirk the device reports, with what it means where the name is a common one."""
    from jaxcore.backend import QUIRKS

    return [f"quirk: {q}" + (f" ({QUIRKS[q]})" if q in QUIRKS else "") for q in caps.quirks]


def _info_dict(d: registry.DeviceInfo) -> dict[str, Any]:
    caps = d.capabilities
    doc = {k: v for k, v in asdict(d).items() if k != "capabilities"}
    if caps is not None:
        doc["capabilities"] = {
            "dtypes": sorted(str(x) for x in caps.dtypes),
            "routines": sorted(str(x) for x in caps.routines),
            "max_args": caps.max_args,
            "description": caps.description,
            "quirks": list(caps.quirks),
        }
    return doc


def _suite_missing() -> str | None:
    """Why the suite cannot run here (its own requirements are not installed), or None."""
    try:
        from jaxcore.conformance import harness
    except ImportError as exc:  # pytest itself: harness imports it
        return f"the jaxcore conformance suite needs {exc.name}, which is not installed here: {_SUITE_HINT}"
    missing = harness.missing_requirements()
    return harness.requirements_message(missing) if missing else None


def cmd_conformance(args: argparse.Namespace, out: TextIO) -> int:
    missing = _suite_missing()
    if missing:
        out.write(f"jaxcore conformance: {missing}\n")
        return 2
    if args.case is not None:
        return _replay_cases(args, out)
    if args.no_suite and args.fuzz is None:
        out.write("jaxcore conformance: --no-suite leaves only the fuzz: give --fuzz SECONDS\n")
        return 2
    from jaxcore.conformance.test_fuzz import fresh_seed

    seed = args.seed if args.seed is not None else (fresh_seed() if args.fuzz is not None else None)
    if seed is not None:
        os.environ["JAXCORE_FUZZ_SEED"] = str(seed)  # the suite's own fuzz case draws from it too
    rc = 0
    if not args.no_suite:
        from jaxcore import conformance

        rc = int(conformance.run(list(args.devices), [*_suite_options(args), *args.pytest_args]))
        if rc not in (0, 1, 5):  # interrupted, or a usage error (a device not ready): no fuzz either
            return rc
    if args.fuzz is None:
        return rc
    assert seed is not None
    return max(0 if rc == 5 else rc, _fuzz_devices(args, seed, out))


def _suite_options(args: argparse.Namespace) -> list[str]:
    """The suite's pytest options for what the command line gave as its own."""
    opts = [f"--jaxcore-report={args.report}"] if args.report else []
    opts += [f"--jaxcore-known-failures={args.known_failures}"] if args.known_failures else []
    opts += [f"--jaxcore-reference={args.reference}"] if args.reference else []
    return opts + list(args.jaxcore_options)


# ---- jaxcore conformance --fuzz: a differential fuzz against the reference, bounded in time ----------


def _ready_backend(name: str, out: TextIO) -> Backend | None:
    """Device `name`, initialised; None (after saying why) when it is not ready here."""
    try:
        registry.init([name])
        info = registry.device_info(name)
    except ValueError as exc:  # an unknown device: the message lists the known ones
        out.write(f"jaxcore conformance: {exc}\n")
        return None
    if info.status != "ready":
        fix = f" (fix: {info.hint})" if info.hint else ""
        out.write(f"jaxcore conformance: {name} is {info.status}: {info.reason}{fix}\n")
        return None
    return registry.get_backend(name)


def _fuzz_sides(args: argparse.Namespace, name: str, out: TextIO) -> tuple[Backend, Backend] | None:
    """The device to fuzz and the reference it is compared with (the device itself: oracle only)."""
    from jaxcore.conformance.harness import default_reference

    chosen = default_reference() if not args.reference else (args.reference, "--reference")
    if chosen is None:
        out.write("jaxcore conformance: no ready device to use as the fuzz reference\n")
        return None
    backend, reference = _ready_backend(name, out), _ready_backend(chosen[0], out)
    return None if backend is None or reference is None else (backend, reference)


def _show_numbered(numbers: Iterator[int], device: str, out: TextIO, m: object) -> None:
    """Print a fuzz finding as it is found (a long run shows each at once), numbered."""
    out.write(f"\n[{device}] disagreement {next(numbers)}: {m}\n")
    out.flush()


def _fuzz_devices(args: argparse.Namespace, seed: int, out: TextIO) -> int:
    """Fuzz each named device (every ready one by default) for `args.fuzz` seconds against the
    reference; every disagreement is printed as found, minimised, with its rerun line.
    Returns 0, 1 (disagreements) or 4 (a device is not ready)."""
    from jaxcore.conformance.test_fuzz import fuzz

    names = list(args.devices) or registry.init()
    how = f"--seed {seed}" if args.seed is not None else f"a fresh seed; --seed {seed} repeats it"
    out.write(f"\nfuzz: {', '.join(names)} for {args.fuzz:g} s each, seed {seed} ({how})\n")
    found = 0
    shown = itertools.count(1)  # disagreements are numbered across devices
    for name in names:
        sides = _fuzz_sides(args, name, out)
        if sides is None:
            return 4
        backend, reference = sides
        versus = "the oracle only" if reference is backend else f"the oracle and {reference.name}"
        quirks = ", ".join(backend.capabilities.quirks) or "none reported"
        out.write(f"fuzz: {name} against {versus}; quirks: {quirks}\n")
        out.flush()
        rep = fuzz(
            backend,
            reference,
            seed,
            10**12,  # the time bound ends the run
            minimise_budget=args.minimise,
            on_mismatch=functools.partial(_show_numbered, shown, name, out),
            reduction_share=args.reduction_share,
            seconds=args.fuzz,
        )
        found += len(rep.mismatches)
        verdict = f"{len(rep.mismatches)} disagreement(s)" if rep.mismatches else "no disagreement"
        out.write(
            f"fuzz: {name}: {rep.cases} cases ({rep.kernels} kernels, {rep.skipped} draws refused or "
            f"undeclared) in {rep.seconds:.1f} s: {verdict}\n"
        )
    return 1 if found else 0


def _replay_cases(args: argparse.Namespace, out: TextIO) -> int:
    """`--seed S --case I[,I...]`: draw those fuzz cases again and run just them (a rerun line)."""
    from jaxcore.conformance.test_fuzz import replay

    if args.seed is None:
        out.write("jaxcore conformance: --case replays draws of a seed: give --seed too\n")
        return 2
    if len(args.devices) != 1:
        out.write("jaxcore conformance: --case replays on one device: name it\n")
        return 2
    sides = _fuzz_sides(args, args.devices[0], out)
    if sides is None:
        return 4
    backend, reference = sides
    shown = itertools.count(1)
    try:
        rep = replay(
            backend,
            reference,
            args.seed,
            args.case,
            reduction_share=args.reduction_share,
            minimise_budget=args.minimise,
            on_mismatch=functools.partial(_show_numbered, shown, backend.name, out),
        )
    except ValueError as exc:
        out.write(f"jaxcore conformance: {exc}\n")
        return 2
    if not rep.mismatches:
        cases = ",".join(map(str, args.case))
        out.write(f"seed {args.seed} case {cases} on {backend.name}: conforms\n")
    return 1 if rep.mismatches else 0


def _case_list(text: str) -> list[int]:
    try:
        cases = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of case numbers: {text!r}") from None
    if not cases or min(cases) < 0:
        raise argparse.ArgumentTypeError(f"not a list of case numbers: {text!r}")
    return cases


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the fuzz needs a positive number of seconds, got {text!r}")
    return value


def cmd_new_plugin(args: argparse.Namespace, out: TextIO) -> int:
    from jaxcore import scaffold

    try:
        root = scaffold.new_plugin(args.name, Path(args.dir))
    except (ValueError, FileExistsError) as exc:
        out.write(f"jaxcore new-plugin: {exc}\n")
        return 2
    out.write(f"wrote {root}/\n")
    for rel in scaffold.package_files(args.name):
        out.write(f"  {rel}\n")
    out.write(
        f"\nnext:\n  pip install -e {root}\n  jaxcore devices\n  jaxcore conformance {args.name}\n"
        f"then implement the hooks in {root / ('jaxcore_' + args.name.replace('-', '_')) / 'backend.py'} "
        "(each raises NotImplementedError naming itself until then).\n"
    )
    return 0


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    from jaxcore import bench

    return bench.run(args, out)


def _add_conformance(sub: Any) -> None:
    c = sub.add_parser(
        "conformance",
        help="run the conformance suite on devices, and a differential fuzz (--fuzz SECONDS)",
        usage="jaxcore conformance [DEVICE ...] [OPTIONS] [-- PYTEST_ARGS ...]",
        description="The conformance suite on each device; with --fuzz, then random kernels checked "
        "against an independent oracle and the reference device for that long, every disagreement "
        "printed minimised with a line that reruns it. Suite options (--jaxcore-*) pass through; "
        "anything after -- goes to pytest.",
    )
    c.add_argument("devices", nargs="*", help="devices to test (default: every ready device)")
    c.add_argument("--report", metavar="FILE", help="write a JSON report per area, device and case")
    c.add_argument(
        "--known-failures",
        metavar="FILE",
        help="case ids (AREA::FUNCTION[PARAMS], * wildcards) the device is known to fail: "
        "reported as known-failing, never as passed",
    )
    c.add_argument(
        "--reference",
        metavar="DEVICE",
        help="the device differential cases and the fuzz compare with (default: the reference device)",
    )
    c.add_argument(
        "--fuzz", type=_seconds, metavar="SECONDS", help="after the suite, fuzz each device this long"
    )
    c.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the fuzz's seed, the suite's fuzz case's too (default: a fresh one, printed)",
    )
    c.add_argument(
        "--case",
        type=_case_list,
        metavar="I[,I...]",
        help="draw these fuzz cases of --seed again and run just them (what a rerun line does)",
    )
    c.add_argument(
        "--reduction-share",
        type=float,
        default=None,
        metavar="P",
        help="share of fuzz draws that are reductions (default 0.3; the suite's fuzz case uses 0.25)",
    )
    c.add_argument(
        "--minimise", type=int, default=150, metavar="RUNS", help="device runs spent minimising each finding"
    )
    c.add_argument("--no-suite", action="store_true", help="with --fuzz: only the fuzz")
    c.set_defaults(func=cmd_conformance, pytest_args=[], jaxcore_options=[])


def build_parser() -> argparse.ArgumentParser:
    from jaxcore import bench

    p = argparse.ArgumentParser(
        prog="jaxcore", description="jaxcore devices, conformance suite and benchmarks"
    )
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("devices", help="list devices and run a tiny kernel on each ready one")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=cmd_devices)
    _add_conformance(sub)
    n = sub.add_parser("new-plugin", help="write a new device plugin package, ready to pip install")
    n.add_argument("name", help="the device name (lowercase letters, digits, '-', '_')")
    n.add_argument("--dir", default=".", help="where to create jaxcore-NAME/ (default: here)")
    n.set_defaults(func=cmd_new_plugin)
    b = sub.add_parser("bench", help="run the standard workloads against numpy")
    bench.add_arguments(b)
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    suite_options: list[str] = []
    if argv[:1] == ["conformance"]:
        if "--" in argv:
            cut = argv.index("--")
            argv, extra = argv[:cut], argv[cut + 1 :]
        argv, suite_options = _split_suite_options(argv)
    args = build_parser().parse_args(argv)
    if args.command == "conformance":
        args.pytest_args, args.jaxcore_options = extra, suite_options
        if args.reduction_share is None:
            args.reduction_share = 0.3  # test_fuzz.DEFAULT_REDUCTION_SHARE (that module needs pytest)
    return int(args.func(args, out if out is not None else sys.stdout))


def _split_suite_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """The suite's own `--jaxcore-NAME[=]VALUE` options, taken out of `argv` to pass to pytest as
    they are (each takes a value), so they work before `--` as well as after it."""
    rest: list[str] = []
    suite: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--jaxcore-") and "=" not in arg and i + 1 < len(argv):
            suite.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        (suite if arg.startswith("--jaxcore-") else rest).append(arg)
        i += 1
    return rest, suite


if __name__ == "__main__":
    sys.exit(main())
