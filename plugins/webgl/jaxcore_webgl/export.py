"""A prepared webgl executable (kernel or routine) as a self-contained browser program (JSON-able).

    program = jaxcore_webgl.export.export(backend, exe)    # or backend.export(exe)

and in a page, with runner.js (`runner_js()`: a classic script derived from the ES module runner.js,
which jaxcore.web bundles as webgl.js):

    const out = await JaxcoreWebGL.run(program, [inputBytes0, ...]);   // [Uint8Array, ...]

The program (its keys: docs/browser-export.md) is exactly the draws the native device makes, in
order: the export replays the executable's own run against a recording stand-in for the device
(no GL call is made), reading the sources of the programs it links. A kernel's shader is the one
the device compiled with its per-word calls written out instead of looped
(`glsl.kernel_shader(written_out=True)`: ANGLE on SwiftShader takes minutes on some long loop
bodies; llvmpipe compiles the loop 6x faster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from jaxcore.backend import Executable
from jaxcore.kernel import Kernel
from jaxcore.web import classic_script, interface
from jaxcore_webgl.device import TEXEL_BYTES, VERTEX_SHADER, texture_dims

FORMAT = "jaxcore-webgl-program"
VERSION = 1
RUNNER = resources.files("jaxcore_webgl").joinpath("runner.js")  # an ES module; runner_js() derives


class ExportError(ValueError):
    """An executable this module cannot turn into a browser program (the message says why)."""


@dataclass(eq=False)
class _Tex:
    """A texture of the replay: what `Device.alloc` would return (the fields programs read)."""

    id: int
    w: int
    h: int
    nbytes: int


@dataclass
class _Replay:
    """Stands in for `jaxcore_webgl.device.Device` during an executable's run and records the draws."""

    max_size: int
    sources: dict[int, str]
    textures: list[dict[str, Any]] = field(default_factory=list)
    passes: list[dict[str, Any]] = field(default_factory=list)
    shaders: list[str] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def texture(self, nbytes: int, role: str, index: int | None = None) -> _Tex:
        w, h, _ = texture_dims(nbytes, self.max_size)
        return self._add(_Tex(len(self.textures), w, h, nbytes), role, index)

    def _add(self, t: _Tex, role: str, index: int | None = None) -> _Tex:
        entry: dict[str, Any] = {"id": t.id, "role": role, "bytes": t.nbytes, "width": t.w, "height": t.h}
        self.textures.append(entry if index is None else {**entry, "index": index})
        return t

    # ---- the Device methods an executable's run calls --------------------------------------
    def alloc(self, nbytes: int) -> _Tex:
        return self.texture(nbytes, "temp")

    def alloc_grid(self, w: int, h: int) -> _Tex:
        return self._add(_Tex(len(self.textures), w, h, w * h * TEXEL_BYTES), "temp")

    def free(self, t: _Tex) -> None:
        pass  # the runner frees every texture at the end

    def download(self, t: _Tex, start: int, count: int) -> bytes:
        """A host-side test in a routine's schedule (JacobiEigh: "any matrix still rotating?").
        Answered "yes", so the export holds every iteration up to the routine's bound; the plan's
        passes are no-ops for a matrix whose flag is clear, so the result is the same."""
        note = f"a read of texture {t.id} in the schedule was answered nonzero (every iteration kept)"
        self.notes.append(note)
        return b"\x01" * count

    def draw(self, prog: Any, inputs: list[_Tex], out: _Tex, texels: int, ints: dict[str, int] | None = None):
        ints = {k: int(v) for k, v in (ints or {}).items()}
        self._record(prog, inputs, {"output": out.id, "texels": int(texels), "ints": ints})

    def draw_targets(self, prog: Any, inputs: list[_Tex], targets: list[_Tex]) -> None:
        """A pass writing colour attachment r into `targets[r]` over all their w x h fragments."""
        ids, texels = [t.id for t in targets], targets[0].w * targets[0].h
        self._record(prog, inputs, {"output": ids[0], "targets": ids, "texels": texels, "ints": {}})

    def _record(self, prog: Any, inputs: list[_Tex], draw: dict[str, Any]) -> None:
        src = self.sources.get(id(prog))
        if src is None:
            raise ExportError("a draw uses a program whose source the backend does not hold")
        shader = self._index.setdefault(src, len(self.shaders))
        if shader == len(self.shaders):
            self.shaders.append(src)
        self.passes.append({"shader": shader, "inputs": [t.id for t in inputs], **draw})


def export(backend: Any, exe: Executable) -> dict[str, Any]:
    """The browser program for `exe`, prepared by the webgl `backend` (see the module docstring)."""
    from jaxcore_webgl.backend import KernelExe

    device = getattr(backend, "device", None)
    programs = getattr(device, "_programs", None)
    if programs is None:
        name = getattr(backend, "name", backend)
        raise ExportError(f"{name!r} is not a webgl backend (it holds no linked programs)")
    replay = _Replay(backend.info.max_texture_size, {id(p): s for s, p in programs.items()})
    ins, outs, desc = interface(exe.source)
    in_tex = [replay.texture(max(x["bytes"], 1), "in", i) for i, x in enumerate(ins)]
    out_tex = [replay.texture(max(x["bytes"], 1), "out", i) for i, x in enumerate(outs)]
    data = exe.data
    if isinstance(exe.source, Kernel) and not hasattr(data, "run"):
        # run as parts here (Capabilities.max_kernel_cost, a dead reduction dropped): the browser
        # gets the kernel whole
        data = backend._compile_kernel(exe.source.live())
    if isinstance(data, KernelExe):
        replay.sources[id(data.program)] = data.browser_source()
    if not hasattr(data, "run"):
        raise ExportError(f"cannot export a webgl executable holding {type(data).__name__}")
    data.run(replay, in_tex, out_tex)
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": desc,
        "texel_bytes": TEXEL_BYTES,
        "inputs": ins,
        "outputs": [{**o, "texture": t.id} for o, t in zip(outs, out_tex, strict=True)],
        "textures": replay.textures,
        "vertex": VERTEX_SHADER,
        "shaders": replay.shaders,
        "passes": replay.passes,
        "notes": sorted(set(replay.notes)),
    }


def runner_js() -> str:
    """The text of runner.js as a classic script (defines `JaxcoreWebGL` in a page or worker)."""
    return classic_script(RUNNER.read_text(), "JaxcoreWebGL")
