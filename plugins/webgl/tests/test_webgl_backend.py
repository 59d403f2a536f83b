"""Context, capabilities, compile cache, shader dump, declared limits, and both context paths."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from jaxcore_webgl import glsl
from jaxcore_webgl.context import ContextError, GLThread, choose_platform

import jaxcore
from jaxcore import conformance, settings
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import UnsupportedOpError
from jaxcore.canonical import COMPOSED_ROUTINES
from jaxcore.conformance.harness import map_kernel, reduce_kernel, run_kernel, run_routine
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines

PLUGIN = Path(__file__).resolve().parents[1]


def test_context_reports_es3_and_the_required_extension(gl) -> None:
    info = gl.info
    assert info.version.startswith("OpenGL ES 3"), info.version
    assert info.has("GL_EXT_color_buffer_float")
    assert info.platform.startswith("egl")
    assert gl.capabilities.max_args == info.max_texture_units >= 16  # WebGL2's minimum is 16


def test_max_args_is_the_texture_units_and_past_it_is_a_clear_error(gl) -> None:
    n = gl.max_args
    exp = AluExp.global_index(DType.float32, 0, 1, AluVar.gidx)
    for i in range(1, n + 1):
        exp = AluExp.add(exp, AluExp.global_index(DType.float32, i, 1, AluVar.gidx))
    with pytest.raises(ValueError, match=f"at most {n}"):
        gl.prepare_kernel(Kernel(n + 1, 1, exp))


def test_float64_is_refused_at_prepare(gl) -> None:
    with pytest.raises(UnsupportedOpError, match="float64"):
        gl.prepare_kernel(map_kernel(["float64"], 4, lambda x: x))
    with pytest.raises(UnsupportedOpError):
        gl.prepare_kernel(map_kernel(["float32"], 4, lambda x: AluExp.cast(DType.float64, x)))
    with pytest.raises(UnsupportedOpError):
        gl.prepare_routine(Routine.build(Routines.Sort, [(4,)], [DType.float64]))


def test_every_routine_is_declared_and_float64_ones_are_refused(gl) -> None:
    from jaxcore.conformance.test_unsupported import sample_routine

    assert gl.capabilities.routines | COMPOSED_ROUTINES == frozenset(Routines)
    for name in Routines:
        with pytest.raises(UnsupportedOpError):
            gl.prepare_routine(sample_routine(name, DType.float64))


def test_programs_are_cached_by_shader_text(gl) -> None:
    """Two kernels that differ only in what the shader does not see share one program."""
    k1 = map_kernel(["float32"], 1000, lambda x: AluExp.mul(x, AluExp.f32(3)))
    before = gl.thread.call(lambda: gl.device.programs)
    e1 = gl.prepare_kernel(k1)
    after_one = gl.thread.call(lambda: gl.device.programs)
    # the same expression reading a longer buffer: a new kernel key, the same shader text
    k2 = Kernel(1, 1000, AluExp.mul(AluExp.global_index(DType.float32, 0, 2000, AluVar.gidx), AluExp.f32(3)))
    e2 = gl.prepare_kernel(k2)
    assert e1 is not e2 and e1.data.program is e2.data.program
    assert gl.thread.call(lambda: gl.device.programs) == after_one <= before + 1


def test_shader_dump_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jaxcore_webgl.backend import WebGLBackend

    monkeypatch.setenv("JAXCORE_WEBGL_DUMP", str(tmp_path))
    settings.reload()
    try:
        b = WebGLBackend(platform="egl")
    finally:
        monkeypatch.undo()  # the environment as it was, then the settings read from it
        settings.reload()
    try:
        x = np.arange(8, dtype=np.float32)
        run_kernel(b, map_kernel(["float32"], 8, lambda v: AluExp.sin(v)), [x])
        files = list(tmp_path.glob("*.frag"))
        assert files and any("jc_sin_f32" in f.read_text() for f in files)
        assert all(f.read_text().startswith("#version 300 es") for f in files)
    finally:
        b.close()


def test_shaders_stay_within_glsl_es_300() -> None:
    """No `precise`, no bitfield/umulExtended/ldexp/frexp (GLSL ES 3.10+), no loops in main."""
    k = reduce_kernel("float32", AluOp.Add, 3, 70_000, epilogue=lambda a: AluExp.sin(a))
    src = glsl.kernel_shader(k, 0)
    assert src.startswith("#version 300 es\n")
    for word in ("precise", "bitfieldExtract", "findMSB", "umulExtended", "ldexp", "frexp", "fma("):
        assert word not in src, word


def test_reductions_longer_than_llvmpipes_loop_budget(gl) -> None:
    """llvmpipe stops a shader's loops after 65535 iterations in all; long rows still sum right."""
    x = np.ones((2, 200_003), np.float32)
    got = run_kernel(gl, reduce_kernel("float32", AluOp.Add, 2, 200_003), [x.ravel()])
    assert got.tolist() == [200_003.0, 200_003.0]


def test_denormal_arithmetic_is_exact_on_a_flushing_driver(gl) -> None:
    """llvmpipe flushes denormals; the float32 ops take exact slow paths instead."""
    a = np.array([1e-40, 1e-40, 3e38, 1e-45, 1.5e-38, -1e-40, 1e-40, 2.0], np.float32)
    b = np.array([1e10, 1e-40, 1e-40, 0.5, -1.2e-38, 3.0, np.inf, 1e-40], np.float32)
    for fn, ref in ((AluExp.mul, np.multiply), (AluExp.add, np.add), (AluExp.sub, np.subtract)):
        got = run_kernel(gl, map_kernel(["float32"] * 2, len(a), fn), [a, b])
        with np.errstate(all="ignore"):
            want = ref(a, b)
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), fn
    got = run_kernel(gl, map_kernel(["float32"] * 2, len(a), AluExp.idiv), [a, b])
    with np.errstate(all="ignore"):
        assert np.array_equal(got, np.trunc(a / b), equal_nan=True)


def test_sort_large_rows_against_numpy(gl) -> None:
    x = np.random.default_rng(3).standard_normal((3, 5000)).astype(np.float32)
    x[0, ::97] = np.nan
    (got,) = run_routine(gl, Routine.build(Routines.Sort, [x.shape], [DType.float32]), [x])
    assert np.array_equal(got, np.sort(x, axis=-1), equal_nan=True)
    vals, idx = run_routine(gl, Routine.build(Routines.Argsort, [x.shape], [DType.float32]), [x])
    assert np.array_equal(idx, np.argsort(x, axis=-1, kind="stable"))


def test_unknown_platform_is_refused_with_the_fix() -> None:
    with pytest.raises(ContextError, match="JAXCORE_WEBGL_PLATFORM"):
        choose_platform("vulkan")
    assert choose_platform("EGL") == ["egl"]


def test_egl_without_a_display() -> None:
    """With no DISPLAY, the default path is EGL (device or surfaceless platform)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("JAXCORE_WEBGL_PLATFORM", None)
    code = "from jaxcore_webgl.context import GLThread; t = GLThread(None); print(t.info.platform); t.close()"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("egl"), out.stdout


GLFW_SCRIPT = textwrap.dedent(
    """
    import numpy as np, jaxcore
    from jaxcore.alu import AluExp
    from jaxcore.conformance.harness import map_kernel, run_kernel, run_routine
    from jaxcore.routine import Routine, Routines
    b = jaxcore.get_backend("webgl")
    assert b.info.platform == "glfw", b.info.platform
    x = np.array([3, -1, np.nan, 0.5], np.float32)
    assert run_kernel(b, map_kernel(["float32"], 4, lambda v: AluExp.mul(v, v)), [x]).tolist()[:2] == [9, 1]
    (s,) = run_routine(b, Routine.build(Routines.Sort, [(4,)], ["float32"]), [x])
    assert s.tolist()[:3] == [-1, 0.5, 3] and np.isnan(s[3])
    print("glfw ok", b.info.version)
    """
)


def test_glfw_path_on_a_virtual_display(x_display: str) -> None:
    env = dict(os.environ, DISPLAY=x_display, JAXCORE_WEBGL_PLATFORM="glfw")
    out = subprocess.run(
        [sys.executable, "-c", GLFW_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "glfw ok OpenGL ES 3" in out.stdout


def test_conformance_suite_through_glfw(x_display: str) -> None:
    """The suite on the glfw context (the EGL path runs all of it in the repo's own test run; the
    random and differential areas test code generation, which is the same on both paths)."""
    env = dict(os.environ, DISPLAY=x_display, JAXCORE_WEBGL_PLATFORM="glfw")
    args = ["--jaxcore-max-examples=20", "-x", "-k", "not fuzz_random and not differential"]
    conformance.run_isolated("webgl", args, env, PLUGIN)


def test_a_broken_platform_declines_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A factory that cannot get a context raises DeviceUnavailable with the reason and the fix."""
    from jaxcore_webgl import plugin

    monkeypatch.setenv("JAXCORE_WEBGL_PLATFORM", "nonsense")
    settings.reload()
    try:
        with pytest.raises(jaxcore.DeviceUnavailable) as info:
            plugin._create()
        assert "JAXCORE_WEBGL_PLATFORM" in str(info.value)
    finally:
        monkeypatch.undo()  # the environment as it was, then the settings read from it
        settings.reload()


def test_gl_thread_runs_work_from_any_thread(gl) -> None:
    import threading

    seen: list[bool] = []

    def work() -> None:
        seen.append(gl.thread.call(lambda: gl.thread.on_thread()))

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert seen == [True] * 4
    assert isinstance(gl.thread, GLThread)


def test_dispatch_events_carry_gpu_time_from_the_timer_query(gl) -> None:
    assert gl.capabilities.device_timestamps == gl.info.has("GL_EXT_disjoint_timer_query")
    if not gl.capabilities.device_timestamps:
        pytest.skip("the context has no EXT_disjoint_timer_query")
    x = np.ones(1 << 16, np.float32)
    k = map_kernel(["float32"], x.size, lambda v: AluExp.exp(v))
    jaxcore.start_trace()
    try:
        run_kernel(gl, k, [x])
    finally:
        events = jaxcore.stop_trace()
    mine = [e for e in events if e.get("ph") == "X" and e["args"].get("device") == "webgl"]
    assert len(mine) == 1 and mine[0]["args"]["device_time_us"] > 0, mine


def test_linear_algebra_against_numpy(gl) -> None:
    """Larger than the suite's cases: 48x48 Cholesky and LU, a 40-unknown triangular solve."""
    from jaxcore.routine import TriangularSolveParams

    rng = np.random.default_rng(11)
    n = 48
    g = rng.uniform(-1, 1, (2, n, n))
    spd = (g @ g.transpose(0, 2, 1) + n * np.eye(n)).astype(np.float32)
    (low,) = run_routine(gl, Routine.build(Routines.Cholesky, [spd.shape], [DType.float32]), [spd])
    np.testing.assert_allclose(low @ low.transpose(0, 2, 1), spd, rtol=2e-5, atol=2e-4)
    a = rng.uniform(-1, 1, (3, n, n + 5)).astype(np.float32)
    lu, piv, perm = run_routine(gl, Routine.build(Routines.LU, [a.shape], [DType.float32]), [a])
    for b in range(3):
        lo = np.tril(lu[b], -1)[:, :n] + np.eye(n)
        np.testing.assert_allclose(lo @ np.triu(lu[b]), a[b][perm[b]], rtol=1e-4, atol=1e-4)
    u = (np.triu(rng.uniform(-1, 1, (1, 40, 40)), 1) + 4 * np.eye(40)).astype(np.float32)
    rhs = rng.uniform(-1, 1, (1, 7, 40)).astype(np.float32)
    r = Routine.build(
        Routines.TriangularSolve, [u.shape, rhs.shape], ["float32"] * 2, TriangularSolveParams()
    )
    (x,) = run_routine(gl, r, [u, rhs])
    np.testing.assert_allclose(x[0] @ u[0].T, rhs[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1000, 1024, 97])
@pytest.mark.parametrize("inverse", [False, True])
def test_fft_against_numpy(gl, n: int, inverse: bool) -> None:
    from jaxcore.routine import FftParams

    rng = np.random.default_rng(n)
    re, im = (rng.uniform(-1, 1, (2, n)).astype(np.float32) for _ in range(2))
    r = Routine.build(Routines.Fft, [re.shape, im.shape], ["float32"] * 2, FftParams.default(n, inverse))
    got_re, got_im = run_routine(gl, r, [re, im])
    z = re.astype(np.float64) + 1j * im
    want = np.fft.ifft(z) if inverse else np.fft.fft(z)
    scale = np.abs(want).max()
    assert np.abs(got_re + 1j * got_im - want).max() <= 2e-6 * scale * np.log2(n), np.abs(
        got_re - want.real
    ).max()


@pytest.mark.parametrize("op", ["add", "update"])
def test_scatter_thousands_of_updates(gl, op: str) -> None:
    """2000 updates (repeated and out-of-range indices) into 300 slots, int32 wrap-around sums."""
    from jaxcore.routine import ScatterParams

    rng = np.random.default_rng(5)
    upd = rng.integers(-(2**31), 2**31, 2000, dtype=np.int64).astype(np.int32)
    idx = rng.integers(-5, 305, 2000).astype(np.int32)
    p = ScatterParams(op, (300,), (0,), 0)
    r = Routine.build(Routines.Scatter, [upd.shape, idx.shape], ["int32", "int32"], p)
    (got,) = run_routine(gl, r, [upd, idx])
    want = np.zeros(300, np.int64)
    for v, i in zip(upd, idx):
        if 0 <= i < 300:
            want[i] = want[i] + v if op == "add" else v
    assert got.tolist() == ((want + 2**31) % 2**32 - 2**31).tolist()


def test_jacobi_eigh_against_numpy(gl) -> None:
    rng = np.random.default_rng(8)
    g = rng.uniform(-1, 1, (3, 16, 16))
    sym = ((g + g.transpose(0, 2, 1)) / 2).astype(np.float32)
    d, v = run_routine(gl, Routine.build(Routines.JacobiEigh, [sym.shape], [DType.float32]), [sym])
    w = np.diagonal(d, axis1=-2, axis2=-1).astype(np.float64)
    np.testing.assert_allclose(np.sort(w, -1), np.linalg.eigvalsh(sym.astype(np.float64)), atol=1e-4)
    v64 = v.astype(np.float64)
    np.testing.assert_allclose(v64 @ (w[..., :, None] * v64.transpose(0, 2, 1)), sym, atol=1e-4)
    assert (np.triu(d, 1) == 0).all()


def test_program_binaries_cached_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second context loads the first one's program binary instead of compiling (where the driver
    supports GL_OES_get_program_binary), and computes the same."""
    from jaxcore_webgl.backend import WebGLBackend

    monkeypatch.setenv("JAXCORE_CACHE_DIR", str(tmp_path))
    settings.reload()
    k = map_kernel(["float32"], 64, lambda v: AluExp.mul(AluExp.exp(v), AluExp.f32(0.5)))
    x = np.linspace(-3, 3, 64).astype(np.float32)
    results, hits = [], []
    try:
        for _ in range(2):
            b = WebGLBackend(platform="egl")
            try:
                results.append(run_kernel(b, k, [x]))
                hits.append(b.thread.call(lambda b=b: b.device.binary_hits))
                supported = b.device.binary_dir is not None
            finally:
                b.close()
    finally:
        monkeypatch.undo()  # the environment as it was, then the settings read from it
        settings.reload()
    assert results[0].tobytes() == results[1].tobytes()
    if not supported:
        pytest.skip("the driver offers no program binary format")
    assert list((tmp_path / "webgl").glob("*.bin"))
    assert hits[0] == 0 and hits[1] >= 1, hits


def test_no_egl_driver_declines_with_reason_and_fix() -> None:
    """With glvnd pointed at no EGL vendor, the device is 'unavailable' with the reason and the fix."""
    env = dict(os.environ, __EGL_VENDOR_LIBRARY_FILENAMES="/nonexistent.json", JAXCORE_WEBGL_PLATFORM="egl")
    code = (
        "import jaxcore; jaxcore.init(['webgl']); i = jaxcore.device_info('webgl');"
        " print(i.status); print(i.reason); print(i.hint)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    status, reason, hint = out.stdout.strip().splitlines()[:3]
    assert status == "unavailable" and "EGL" in reason and "apt-get install" in hint, out.stdout


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.int32])
def test_exported_kernels_write_out_the_per_word_calls(gl, dtype: DType) -> None:
    """The device compiles compute() once inside a loop over the fragment's words; the export
    writes the calls out (ANGLE on SwiftShader took minutes on long bodies inside that loop:
    tests/browser/FINDINGS.md F5). Both render the same kernel."""
    n = 37
    x = AluExp.global_index(dtype, 0, n, AluVar.gidx)
    exe = gl.prepare_kernel(Kernel(1, n, AluExp(AluOp.Mul, dtype, (x, x))))
    words = 8 if dtype == DType.float16 else 4
    assert f"for (int c = 0; c < {words}; c++)" in exe.data.source
    (shader,) = gl.export(exe)["shaders"]
    assert "for (int c" not in shader
    assert [f"const int c = {c};" in shader for c in range(words + 1)] == [True] * words + [False]
    assert shader.split("void main")[0] == exe.data.source.split("void main")[0]


@pytest.mark.parametrize("dtype", ["uint32", "int32"])
def test_bool_casts_are_anded_to_one_bit(gl, dtype: str) -> None:
    """Max over rows of bool -> int casts: 0/1 through an AND the compiler cannot drop (NVIDIA's
    compiler made uint(true) 0xffffffff inside max(acc, uint(b)); llvmpipe never did)."""
    dt = DType(dtype)
    x = np.array([0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0], np.int32)  # bool storage: 4 bytes of 0/1
    read = AluExp.global_index(DType.bool, 0, 12, AluVar.gidx * 4 + AluVar.ridx)
    k = Kernel(1, 3, AluExp.cast(dt, read), Reduction(dt, AluOp.Max, 4))
    assert "jx_b2u(" in glsl.kernel_shader(k, 0)
    got = run_kernel(gl, k, [x])
    np.testing.assert_array_equal(got.astype(np.int64), [1, 0, 1])


def test_a_kernel_run_split_is_exported_whole(gl, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over Capabilities.max_kernel_cost the device runs a kernel as parts through temporaries;
    the browser program is the whole kernel, one pass, computing the same values."""
    import dataclasses

    monkeypatch.setattr(gl, "capabilities", dataclasses.replace(gl.capabilities, max_kernel_cost=400))
    e = AluExp.global_index(DType.float32, 0, 16, AluVar.gidx)
    for _ in range(4):
        e = AluExp.sin(e) * 1.5
    exe = gl.prepare_kernel(Kernel(1, 16, e))
    assert not hasattr(exe.data, "run")  # run as parts here
    prog = gl.export(exe)
    assert len(prog["passes"]) == 1
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    src, out = gl.malloc(64, x.tobytes()), gl.malloc(64)
    gl.dispatch(exe, [src], [out])
    want = x
    for _ in range(4):
        want = (np.sin(want.astype(np.float64)).astype(np.float32) * np.float32(1.5)).astype(np.float32)
    np.testing.assert_allclose(np.frombuffer(gl.read(out), np.float32), want, rtol=1e-5, atol=1e-6)
