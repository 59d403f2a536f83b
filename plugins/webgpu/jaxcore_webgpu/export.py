"""A prepared webgpu executable as a self-contained browser program (a JSON-able dict).

    program = jaxcore_webgpu.export.export(backend, exe)   # or backend.export(exe)

and in a page, with runner.js (`runner_js()`: a classic script derived from the ES module runner.js,
which jaxcore.web bundles as webgpu.js): `await JaxcoreWebGPU.run(program, [inputBytes0, ...])`.

The program (its keys: docs/browser-export.md) is read from what the backend compiled (`exe.data`,
a `jaxcore_webgpu.program.CompiledPlan`), so the browser runs the shaders the native device runs, in
the same order, with the same bindings; but on a device that keeps float32 subnormals a kernel is
compiled again exact on subnormals for the browser, whose device may flush them
(`WgslTarget.exact_subnormals`, `backend.browser_plan`). A shader with subgroup builtins needs the
`subgroups` feature and the directives naga rejects and Tint needs (`browser_wgsl`): `enable
subgroups;`, and `requires subgroup_id;` for the subgroup_id/num_subgroups builtins (Chrome 144+).
"""

from __future__ import annotations

import base64
import re
from importlib import resources
from typing import Any

from jaxcore.backend import Executable
from jaxcore.web import classic_script, interface

FORMAT = "jaxcore-webgpu-program"
VERSION = 1
MIN_BINDING = 16  # as the runtime binds: one element of f64 or vec4<f32> at least
RUNNER = resources.files("jaxcore_webgpu").joinpath("runner.js")  # an ES module; runner_js() derives

_VAR = re.compile(
    r"@group\((\d+)\)\s*@binding\((\d+)\)\s*var<\s*(storage|uniform)\s*(?:,\s*(read|read_write)\s*)?>"
)
_F64 = re.compile(r"\bf64\b|\d(?:\.\d*)?lf\b")
_WORKGROUP_VAR = re.compile(r"var<workgroup>\s*\w+\s*:\s*([^;]+);")
_SCALAR_BYTES = {"f16": 2, "f32": 4, "i32": 4, "u32": 4, "bool": 4, "f64": 8}
_ENTRY = re.compile(r"@compute\b[^{;]*?\bfn\s+(\w+)", re.S)
_WG_SIZE = re.compile(r"@workgroup_size\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\)")
_F16 = re.compile(r"^\s*enable\s+f16\s*;", re.M)
_SUBGROUPS = re.compile(r"\bsubgroup[A-Z]\w*\s*\(|@builtin\(\s*(?:subgroup_\w+|num_subgroups)\s*\)")
_SUBGROUP_ID = re.compile(r"@builtin\(\s*(?:subgroup_id|num_subgroups)\s*\)")
_FEATURES = {"shader-f16": _F16, "subgroups": _SUBGROUPS}  # the WebGPU feature a shader's text needs


class ExportError(ValueError):
    """An executable this module cannot turn into a browser program (the message says why)."""


def browser_wgsl(code: str) -> str:
    """`code` as a browser's WGSL compiler (Tint) takes it: the directives naga does without."""
    if not _SUBGROUPS.search(code):
        return code
    req = "requires subgroup_id;\n" if _SUBGROUP_ID.search(code) else ""
    return "enable subgroups;\n" + req + code


def buffer_bytes(nbytes: int) -> int:
    """The size of the GPU buffer (and binding) for `nbytes` of data, as the runtime makes it."""
    return max(MIN_BINDING, -(-nbytes // 4) * 4)


def _layout(code: str) -> dict[int, str]:
    """binding number -> "read-only-storage" | "storage" | "uniform", for group 0, from the WGSL."""
    out = {}
    for group, binding, space, access in _VAR.findall(code):
        if group == "0":
            kind = "read-only-storage" if access in ("", "read") else "storage"
            out[int(binding)] = "uniform" if space == "uniform" else kind
    return out


def export(backend: Any, exe: Executable) -> dict[str, Any]:
    """The browser program for `exe`, prepared by the webgpu `backend` (see the module docstring)."""
    browser_plan = getattr(backend, "browser_plan", None)
    plan = browser_plan(exe) if browser_plan is not None else None
    if plan is not None:
        steps = [(p, p.code, p.uniform) for p in plan.passes]
    else:
        steps = _compiled_steps(backend, exe.data)
    ins, outs, desc = interface(exe.source)  # a kernel input may be larger: the runner binds what it is given
    index: dict[str, int] = {}  # shader text -> its number
    passes = []
    for p, native, uniform_bytes in steps:
        code = browser_wgsl(native)
        index.setdefault(code, len(index))
        layout = _layout(code)
        bindings = []
        for b, (kind, i) in enumerate(p.bindings):
            if kind not in ("in", "out", "scratch"):
                raise ExportError(f"pass binding {b} refers to {kind!r}, not in/out/scratch")
            bindings.append({"binding": b, "buffer": [kind, int(i)], "type": layout.get(b, "storage")})
        passes.append(
            {
                "shader": index[code],
                "entry": _entry(p, code),
                "grid": [int(g) for g in p.grid],
                "bindings": bindings,
                "uniform": None if uniform_bytes is None else base64.b64encode(uniform_bytes).decode(),
            }
        )
    shaders = list(index)
    features = {name for name, pattern in _FEATURES.items() if any(pattern.search(c) for c in shaders)}
    scratch = (plan if plan is not None else exe.data).scratch
    sizes = [buffer_bytes(x["bytes"]) for x in ins + outs] + [buffer_bytes(n) for n in scratch]
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": desc,
        "features": sorted(features),
        "requires": ["f64"] if any(_F64.search(c) for c in shaders) else [],
        "limits": _limits(passes, shaders, sizes),
        "inputs": ins,
        "outputs": outs,
        "scratch": [int(n) for n in scratch],
        "shaders": shaders,
        "passes": passes,
    }


def _compiled_steps(backend: Any, plan: Any) -> list[tuple[Any, str, bytes | None]]:
    """(pass, WGSL, uniform bytes) of a compiled plan, as the device runs it."""
    passes, codes = getattr(plan, "passes", None), getattr(plan, "codes", None)
    if passes is None or codes is None or len(codes) != len(passes):
        raise ExportError(
            f"{getattr(backend, 'name', 'webgpu')}: the executable holds {type(plan).__name__}, "
            "not a compiled plan with the WGSL of each pass; only webgpu executables can be exported"
        )
    steps = []
    for p, code in zip(passes, codes):
        if p.uniform_group is not None and p.uniform is None:
            raise ExportError("a pass binds a uniform block whose bytes the compiled plan does not keep")
        steps.append((p, code, p.uniform if p.uniform_group is not None else None))
    return steps


def _type_layout(ty: str) -> tuple[int, int]:
    """(size, alignment) in bytes of a WGSL workgroup type: scalars, atomics, vectors, fixed arrays."""
    ty = ty.replace(" ", "")
    if ty in _SCALAR_BYTES:
        return _SCALAR_BYTES[ty], _SCALAR_BYTES[ty]
    head, _, rest = ty.partition("<")
    inner = rest[:-1]
    if head == "atomic":
        return _type_layout(inner)
    if head in ("vec2", "vec3", "vec4"):
        size, _ = _type_layout(inner)
        n = int(head[3])
        return n * size, (2 if n == 2 else 4) * size
    if head == "array":
        elem, _, count = inner.rpartition(",")
        size, align = _type_layout(elem)
        return -(-size // align) * align * int(count.rstrip("u")), align
    raise ValueError(f"workgroup type {ty!r}")


def _workgroup_bytes(code: str) -> int:
    """The workgroup storage a shader declares (the sum of its `var<workgroup>`s)."""
    total = 0
    for ty in _WORKGROUP_VAR.findall(code):
        try:
            total += _type_layout(ty)[0]
        except ValueError:  # a named constant for a length, a struct: not what the compilers write
            raise ExportError(f"cannot tell the size of the workgroup variable type {ty.strip()!r}") from None
    return total


def _limits(passes: list[dict[str, Any]], shaders: list[str], sizes: list[int]) -> dict[str, int]:
    """The adapter limits (WebGPU names) the program needs at least, so a page can tell in advance."""
    wg = [(1, 1, 1)]
    for code in shaders:
        for m in _WG_SIZE.findall(code):
            wg.append(tuple(int(v) if v else 1 for v in m))  # type: ignore[arg-type]
    storage = [sum(b["type"] != "uniform" for b in p["bindings"]) for p in passes] or [0]
    grid = [g for p in passes for g in p["grid"]] or [1]
    return {
        "maxStorageBuffersPerShaderStage": max(storage),
        "maxComputeInvocationsPerWorkgroup": max(x * y * z for x, y, z in wg),
        "maxComputeWorkgroupSizeX": max(w[0] for w in wg),
        "maxComputeWorkgroupSizeY": max(w[1] for w in wg),
        "maxComputeWorkgroupSizeZ": max(w[2] for w in wg),
        "maxComputeWorkgroupsPerDimension": max(grid),
        "maxStorageBufferBindingSize": max(sizes or [MIN_BINDING]),
        "maxComputeWorkgroupStorageSize": max([_workgroup_bytes(code) for code in shaders] or [0]),
    }


def _entry(p: Any, code: str) -> str:
    """The entry point: the pass's own (a runtime `Pass` has one), else the shader's one @compute fn."""
    entry = getattr(p, "entry", None)
    if entry:
        return str(entry)
    names = _ENTRY.findall(code)
    if len(names) != 1:
        raise ExportError(f"cannot tell the entry point of a shader with @compute functions {names}")
    return names[0]


def runner_js() -> str:
    """The text of runner.js as a classic script (defines `JaxcoreWebGPU` in a page or worker)."""
    return classic_script(RUNNER.read_text(), "JaxcoreWebGPU")
