"""The `jaxcore` command: `devices`, `conformance`, `bench` and `new-plugin`.

`jaxcore devices` does not only list: it runs a tiny kernel on every ready device, because a
device that registers but cannot compute is the failure users most need to see. It exits 1 when
a smoke kernel fails or no default device can be chosen; plugins that fail to load are listed but
do not change the exit status (they are not the devices the user is using).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from jaxcore import registry
from jaxcore.backend import Capabilities
from jaxcore.dtype import DType

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


def _info_dict(d: registry.DeviceInfo) -> dict[str, Any]:
    caps = d.capabilities
    doc = {k: v for k, v in asdict(d).items() if k != "capabilities"}
    if caps is not None:
        doc["capabilities"] = {
            "dtypes": sorted(str(x) for x in caps.dtypes),
            "routines": sorted(str(x) for x in caps.routines),
            "max_args": caps.max_args,
            "description": caps.description,
        }
    return doc


def cmd_conformance(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from jaxcore import conformance
    except ImportError as exc:
        out.write(f"the conformance suite is not available: {exc}\n")
        return 2
    return int(conformance.run(list(args.devices), list(args.pytest_args)))


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


def build_parser() -> argparse.ArgumentParser:
    from jaxcore import bench

    p = argparse.ArgumentParser(
        prog="jaxcore", description="jaxcore devices, conformance suite and benchmarks"
    )
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("devices", help="list devices and run a tiny kernel on each ready one")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=cmd_devices)
    c = sub.add_parser(
        "conformance",
        help="run the conformance suite on devices",
        usage="jaxcore conformance [DEVICE ...] [-- PYTEST_ARGS ...]",
    )
    c.add_argument("devices", nargs="*", help="devices to test (default: every ready device)")
    c.set_defaults(func=cmd_conformance, pytest_args=[])
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
    if argv[:1] == ["conformance"] and "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if args.command == "conformance":
        args.pytest_args = extra
    return int(args.func(args, out if out is not None else sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
