"""Ship recorded pipelines (`jaxcore.record`) to a web page as an ES module with typed arrays.

    jaxcore.web.write_bundle("out", [pipe_webgpu, pipe_webgl], name="model")

writes out/model.json (the targets in preference order), out/model.bin (every constant once,
deduplicated by content across targets) and out/jaxcore-web/: index.js (`load`, the step graph,
constants, buffer lifetimes and input checks, written once), index.d.ts, package.json and each
target's device runtime module, whose text its backend gives (`export_runtime()`), so that the
core names no device. docs/browser-export.md shows the page's side.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from jaxcore.dtype import byte_width
from jaxcore.kernel import Kernel
from jaxcore.record import Pipeline

FORMAT = "jaxcore-web-bundle"
VERSION = 1
ALIGN = 16  # each constant starts at a multiple of this in the .bin
PACKAGE = "jaxcore-web"

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_RUNTIME = re.compile(r"[A-Za-z0-9_-]+\.js")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_EXPORT = re.compile(r"^export\s+(?:async\s+)?(?:function\*?|const|let|var|class)\s+([A-Za-z_$][\w$]*)", re.M)
_UNSUPPORTED = re.compile(r"^\s*(?:import\b|export\s+(?:default\b|\{|\*))", re.M)


class BundleError(ValueError):
    """Pipelines that cannot go into one bundle (the message says why)."""


def interface(source: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """An exported program's inputs and outputs ({"bytes", "dtype", "shape"}; a kernel's inputs
    have bytes only: its key does not say their dtypes) and what it computes (its "source"), for
    the executable's source, a Kernel or a Routine. Every device's exporter writes these keys."""
    if isinstance(source, Kernel):
        ins: list[dict[str, Any]] = [{"bytes": n} for n in source.input_bytes()]
        outs = [{"bytes": source.bytes, "dtype": str(source.dtype)}]
        return ins, outs, {"kind": "kernel", "key": source.key()}
    t = source.type

    def arrays(shapes: Any, dtypes: Any) -> list[dict[str, Any]]:
        return [
            {"bytes": math.prod(s) * byte_width(d), "dtype": str(d), "shape": list(s)}
            for s, d in zip(shapes, dtypes, strict=True)
        ]

    ins, outs = arrays(t.input_shapes, t.input_dtypes), arrays(t.output_shapes, t.output_dtypes)
    return ins, outs, {"kind": "routine", "name": str(source.name), "key": str(source.key())}


def asset(name: str) -> str:
    """The text of a file of the jaxcore-web package shipped here (index.js, index.d.ts)."""
    return resources.files("jaxcore.web").joinpath(name).read_text()


def classic_script(module: str, global_name: str) -> str:
    """An ES module's text as a classic script defining `global_name` = {every export}: the
    module's `export` keywords dropped and its body wrapped in a function, so that one source
    serves `import` and `<script src>`. Takes only `export function|const|let|class NAME`
    declarations and no imports (a device runtime has no dependencies)."""
    if not _IDENT.fullmatch(global_name):
        raise ValueError(f"{global_name!r} is not a JavaScript identifier")
    bad = _UNSUPPORTED.search(module)
    if bad:
        raise ValueError(f"cannot make a classic script of a module with {bad.group(0).strip()!r}")
    names = _EXPORT.findall(module)
    body = re.sub(r"^export\s+", "", module, flags=re.M)
    lines = body.splitlines(keepends=True)
    head = 0
    while head < len(lines) and (lines[head].startswith("//") or not lines[head].strip()):
        head += 1
    return (
        "".join(lines[:head])
        + '(function (root) {\n  "use strict";\n\n'
        + "".join(lines[head:]).rstrip("\n")
        + f"\n\nroot.{global_name} = {{ {', '.join(names)} }};\n"
        + '})(typeof globalThis !== "undefined" ? globalThis : this);\n'
    )


def _same_interface(pipelines: Sequence[Pipeline]) -> None:
    """Every target of a bundle takes and gives the same names, dtypes and shapes."""
    first = pipelines[0]
    want = ({p.name: p.describe() for p in first.inputs}, {p.name: p.describe() for p in first.outputs})
    for pipe in pipelines[1:]:
        got = ({p.name: p.describe() for p in pipe.inputs}, {p.name: p.describe() for p in pipe.outputs})
        if got != want:
            raise BundleError(
                f"the {pipe.device} pipeline's inputs/outputs {got} differ from "
                f"the {first.device} pipeline's {want}"
            )


def _runtimes(pipelines: Sequence[Pipeline]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pipe in pipelines:
        name, text = pipe.runtime
        if not _RUNTIME.fullmatch(name) or name == "index.js":
            raise BundleError(f"the {pipe.device} runtime module's name {name!r} is not a plain NAME.js")
        if out.setdefault(name, text) != text:
            raise BundleError(f"two targets bring different runtime modules named {name!r}")
    return out


def pack_constants(pipelines: Sequence[Pipeline]) -> tuple[bytes, list[list[tuple[int, int]]]]:
    """The binary file and, per pipeline, each constant's (offset, length) in it: equal bytes are
    stored once, whichever target they come from."""
    blob = bytearray()
    where: dict[bytes, tuple[int, int]] = {}
    ranges: list[list[tuple[int, int]]] = []
    for pipe in pipelines:
        mine = []
        for _, data in pipe.constants:
            key = hashlib.sha256(data).digest() + len(data).to_bytes(8, "little")
            if key not in where:
                blob.extend(b"\0" * (-len(blob) % ALIGN))
                where[key] = (len(blob), len(data))
                blob.extend(data)
            mine.append(where[key])
        ranges.append(mine)
    return bytes(blob), ranges


def bundle_json(
    pipelines: Sequence[Pipeline], name: str, ranges: Sequence[Sequence[tuple[int, int]]], nbytes: int
) -> dict[str, Any]:
    """model.json's content: the interface once, then each target in preference order."""
    first = pipelines[0]
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "binary": f"{name}.bin",
        "binaryBytes": nbytes,
        "inputs": {p.name: p.describe() for p in first.inputs},
        "outputs": {p.name: p.describe() for p in first.outputs},
        "targets": [pipe.to_json(r) for pipe, r in zip(pipelines, ranges, strict=True)],
    }


def package_json(runtimes: Sequence[str]) -> dict[str, Any]:
    from jaxcore import __version__

    return {
        "name": PACKAGE,
        "version": __version__,
        "description": "Runs a jaxcore pipeline recorded in Python in a web page (WebGPU, WebGL2)",
        "type": "module",
        "main": "./index.js",
        "types": "./index.d.ts",
        "exports": {
            ".": {"types": "./index.d.ts", "default": "./index.js"},
            **{f"./{r}": f"./{r}" for r in sorted(runtimes)},
        },
        "sideEffects": False,
        "license": "MIT",
    }


def write_bundle(out_dir: str | Path, pipelines: Sequence[Pipeline], name: str = "model") -> Path:
    """Write `name`.json, `name`.bin and jaxcore-web/ into `out_dir` (made if missing); returns
    the JSON's path. The pipelines are the bundle's targets in preference order (the page's
    "auto" tries them in turn) and must share their inputs and outputs. Bundles written into one
    directory share its jaxcore-web/ (package.json lists every runtime module there)."""
    pipelines = list(pipelines)
    if not pipelines:
        raise BundleError("a bundle needs at least one pipeline")
    for p in pipelines:
        if not isinstance(p, Pipeline):
            raise BundleError(f"write_bundle takes pipelines from Recording.export, got {type(p).__name__}")
    if not _NAME.fullmatch(name):
        raise BundleError(f"bundle name {name!r}: use letters, digits, '_', '-' and '.'")
    _same_interface(pipelines)
    runtimes = _runtimes(pipelines)
    blob, ranges = pack_constants(pipelines)
    out = Path(out_dir)
    pkg = out / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    doc = bundle_json(pipelines, name, ranges, len(blob))
    (out / f"{name}.bin").write_bytes(blob)
    (out / f"{name}.json").write_text(json.dumps(doc, separators=(",", ":")))
    for file, text in {**runtimes, "index.js": asset("index.js"), "index.d.ts": asset("index.d.ts")}.items():
        (pkg / file).write_text(text)
    present = [f.name for f in pkg.iterdir() if _RUNTIME.fullmatch(f.name) and f.name != "index.js"]
    (pkg / "package.json").write_text(json.dumps(package_json(present), indent=2) + "\n")
    return out / f"{name}.json"
