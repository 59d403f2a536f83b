"""WebGLBackend: buffers are RGBA32UI textures, kernels are fragment-shader draws.

GL orders its command stream, so a dispatch is just a draw (nothing waits), a read waits only by
reading, and a freed texture can go straight back to the pool: later draws into it run after the
ones that read it. All GL work runs on the context's own thread (`GLThread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, SupportsIndex

from jaxcore import tracing
from jaxcore.kernel import Kernel
from jaxcore.plugin import BaseBackend, Capabilities, DType, Executable, current_settings
from jaxcore.routine import Routine, Routines
from jaxcore_webgl import canary, glsl, linalg, matmul, routines, scatter
from jaxcore_webgl.context import REQUIRED_EXTENSIONS, ContextError, GLThread
from jaxcore_webgl.device import TEXEL_BYTES, Device, Program, ShaderError, Texture, texture_dims

DTYPES = frozenset({DType.float32, DType.float16, DType.int32, DType.uint32, DType.bool})
# Every routine, as render passes (Scatter as a gather kernel).
ROUTINES = frozenset({Routines.Sort, Routines.Argsort, Routines.Scatter, *linalg.PLANS})


@dataclass
class KernelExe:
    program: Program
    texels: int  # output texels the draw covers
    source: str
    kernel: Kernel
    out_shift: int  # the output texture is 2^out_shift texels wide

    def browser_source(self) -> str:
        """The shader as exported for browsers (glsl.kernel_shader's `written_out`)."""
        return glsl.kernel_shader(self.kernel, self.out_shift, written_out=True)

    def run(self, dev: Device, inputs: list[Texture], outputs: list[Texture]) -> None:
        if self.texels:
            dev.draw(self.program, inputs, outputs[0], self.texels)


@contextmanager
def _naming(source: Kernel | Routine) -> Iterator[None]:
    """A ShaderError while preparing `source` names it (once: Scatter prepares a kernel inside)."""
    try:
        yield
    except ShaderError as e:
        if str(e).startswith("webgl: preparing "):
            raise
        what = f"{type(source).__name__.lower()} {source}"
        raise ShaderError(f"webgl: preparing {what}: {str(e).removeprefix('webgl: ')}") from e


KERNEL_CACHE = 256


class WebGLBackend(BaseBackend):
    name = "webgl"

    def __init__(self, platform: str | None = None) -> None:
        # A kernel holds its GL programs (llvmpipe: ~1.4 MiB of resident memory each) until the
        # kernel cache drops it: 256 of them keep a process of distinct kernels under 1 GiB.
        super().__init__(cache_size=min(current_settings().kernel_cache, KERNEL_CACHE))
        self.closed = False
        env = current_settings().plugin("webgl")
        if platform is None:
            platform = env.get("platform", "").strip() or None
        self.thread = GLThread(platform)
        info = self.thread.info
        missing = [e for e in REQUIRED_EXTENSIONS if not info.has(e)]
        if missing:
            self.thread.close()
            raise ContextError(
                f"the OpenGL ES context ({info.renderer}) lacks {', '.join(missing)}",
                "use a GPU driver (or Mesa llvmpipe) that offers EXT_color_buffer_float",
            )
        self.info = info
        dump = env.get("dump", "").strip() or None
        cfg = current_settings()
        binaries = cfg.cache_dir / "webgl" if cfg.plugin_flag("webgl", "disk_cache", True) else None
        driver = f"{info.vendor}|{info.renderer}|{info.version}"
        check = canary.enabled(env.get("validate", ""), info.renderer)  # new programs in a child first
        guard = canary.Canary(info.platform.split("-")[0]) if check else None
        self.device: Device = self.thread.call(lambda: Device(info.max_texture_size, dump, binaries, driver))
        self.device.canary = guard
        max_texels = info.max_texture_size * info.max_texture_size
        self.capabilities = Capabilities(
            dtypes=DTYPES,
            routines=ROUTINES,
            max_args=info.max_texture_units,
            device_timestamps=info.has("GL_EXT_disjoint_timer_query"),
            max_buffer_bytes=min(max_texels * TEXEL_BYTES, 2**31 - TEXEL_BYTES),
            description=(
                f"GLSL ES 3.00 fragment shaders into RGBA32UI textures on {info.renderer} "
                f"({info.version}, {info.platform})"
            ),
            # llvmpipe compiles a part of ~4,000 (a dozen float32 sines) in a few seconds; a
            # 1,000-deep chain took minutes whole
            max_kernel_cost=4000,
        )

    def export(self, exe: Executable) -> dict[str, Any]:
        """`exe` as a self-contained browser program for runner.js (docs/browser-export.md); a
        kernel this device runs split (Capabilities.max_kernel_cost) is exported whole."""
        from jaxcore_webgl.export import export

        return export(self, exe)

    def export_runtime(self) -> tuple[str, str]:
        """The ES module that runs exported programs in a page, as jaxcore.web bundles it."""
        from jaxcore_webgl.export import RUNNER

        return "webgl.js", RUNNER.read_text()

    def close(self) -> None:
        """Idempotent; frees during and after it are no-ops (the context takes its textures along)."""
        if not self.closed:
            self.closed = True
            try:
                self.thread.call(self.device.close)
            finally:
                self.thread.close()

    # ---- memory ------------------------------------------------------------------------------
    def _alloc(self, size: int) -> Texture:
        return self.thread.call(lambda: self.device.alloc(size))

    def _free(self, handle: Texture) -> None:
        if not self.closed:  # at exit a finalizer may free after close: never a wait then
            self.thread.call(lambda: self.device.free(handle))

    def _copyin(self, handle: Texture, data: memoryview) -> None:
        self.thread.call(lambda: self.device.upload(handle, data))

    def _synchronize(self, handle: Any | None = None) -> None:
        """A read waits on the GL thread by itself; a barrier for everything is a glFinish there."""
        if handle is None:
            self.thread.call(self.device.finish)

    def _copyout(self, handle: Texture, start: int, count: int) -> bytes:
        return self.thread.call(lambda: self.device.download(handle, start, count))

    async def read_async(
        self, slot: SupportsIndex, start: SupportsIndex = 0, count: SupportsIndex | None = None
    ) -> bytes:
        """readPixels into a pixel-pack buffer behind a fence; poll the fence without blocking."""
        buf, begin, n = self._read_range(slot, start, count)  # the same checks (and errors) as read
        if n == 0:
            return b""
        tex = buf.handle
        dev = self.device
        pending = self.thread.call(lambda: dev.download_begin(tex, begin, n))
        delay = 0.0002
        while not self.thread.call(lambda: dev.download_ready(pending)):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.005)
        return self.thread.call(lambda: dev.download_end(pending))

    # ---- kernels -------------------------------------------------------------------------------
    def _compile_kernel(self, kernel: Kernel) -> KernelExe | matmul.MatmulExe:
        """(BaseBackend has refused whatever the capabilities do not declare, float64 included.)"""
        with _naming(kernel):
            w, _, shift = texture_dims(kernel.bytes, self.info.max_texture_size)
            if current_settings().plugin_flag("webgl", "matmul", True):
                units = self.info.max_texture_units
                blocked = self.thread.call(lambda: matmul.plan(kernel, self.device, units, shift))
                if blocked is not None:
                    return blocked
            src = glsl.kernel_shader(kernel, shift)
            texels = -(-kernel.bytes // TEXEL_BYTES) if kernel.size else 0
            prog = self.thread.call(lambda: self.device.program(src, kernel.nargs))
            return KernelExe(prog, texels, src, kernel, shift)

    def _compile_routine(self, routine: Routine) -> Any:
        size = self.info.max_texture_size
        with _naming(routine):
            if routine.name in (Routines.Sort, Routines.Argsort):
                return self.thread.call(lambda: routines.sort_plan(self.device, routine, size))
            if routine.name == Routines.Scatter:
                kernel = scatter.scatter_kernel(routine)
                self._check_ops(kernel)
                return self._compile_kernel(kernel)
            plan = linalg.PLANS.get(routine.name)
            if plan is not None:
                return self.thread.call(lambda: plan(self.device, routine, size))
        raise NotImplementedError(routine.name)  # not declared: BaseBackend refuses it first

    def _run(self, exe: Executable, inputs: list[Any], outputs: list[Any]) -> float | None:
        if tracing.is_tracing() and self.capabilities.device_timestamps:
            dev = self.device
            return self.thread.call(lambda: dev.timed(lambda: self._encode(exe, inputs, outputs)))
        # Not waited for: the GL thread runs jobs in order, and reads wait for theirs.
        self.thread.post(lambda: self._encode(exe, inputs, outputs))
        return None

    def _encode(self, exe: Executable, inputs: list[Any], outputs: list[Any]) -> None:
        """Issue the draws of one dispatch (on the GL thread). No output is also an input here:
        BaseBackend renders an aliased dispatch into a temporary (the capabilities do not claim
        `handles_aliasing`), so no draw samples the texture it renders into."""
        exe.data.run(self.device, inputs, outputs)
