"""WGSL codegen on a real wgpu device (Mesa lavapipe in CI), against the cpu reference device.

A minimal harness lives here (buffers, bind group from `ShaderProgram.bindings`, dispatch,
read back) so the compiler is tested without the runtime plugin. Every op and dtype of the
contract runs, with the edge cases shader languages leave undefined: x/0, INT_MIN/-1, NaN in
min/max, NaN and out-of-range casts, shifts >= 32, -0, and sin/cos of huge arguments.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg")
os.makedirs(os.environ["XDG_RUNTIME_DIR"], exist_ok=True)

wgpu = pytest.importorskip("wgpu") if os.environ.get("CI") != "true" else __import__("wgpu")

from jaxcore_webgpu.codegen import ShaderPlan, WgslTarget, compile_kernel  # noqa: E402
from jaxcore_webgpu.device import keeps_subnormals  # noqa: E402
from jaxcore_webgpu.wgsl_helpers import OPAQUE_UNIFORM  # noqa: E402

from jaxcore.alu import AluExp, AluGroup, AluOp, AluVar  # noqa: E402
from jaxcore.backend import UnsupportedOpError  # noqa: E402
from jaxcore.conformance.tolerances import lookup  # noqa: E402
from jaxcore.dtype import INT32_MAX, INT32_MIN, DType, byte_width, to_numpy  # noqa: E402
from jaxcore.interpret import Interpreter  # noqa: E402
from jaxcore.kernel import Kernel, Reduction  # noqa: E402
from jaxcore.program import fold_grid  # noqa: E402
from jaxcore.shape import ShapeTracker  # noqa: E402
from jaxcore.tuner import tune_nullopt  # noqa: E402

F32, I32, U32, BOOL, F16, F64 = (
    DType.float32,
    DType.int32,
    DType.uint32,
    DType.bool,
    DType.float16,
    DType.float64,
)


# ---- harness -----------------------------------------------------------------------------------


class Harness:
    def __init__(self) -> None:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        if adapter is None:
            pytest.fail("no WebGPU adapter: apt-get install mesa-vulkan-drivers libvulkan1")
        feats = [f for f in ("shader-f16", "shader-f64", "subgroup") if f in adapter.features]
        lim = adapter.limits
        self.device = adapter.request_device_sync(
            required_features=feats,
            required_limits={
                "max-storage-buffer-binding-size": lim["max-storage-buffer-binding-size"],
                "max-buffer-size": lim["max-buffer-size"],
                "max-storage-buffers-per-shader-stage": lim["max-storage-buffers-per-shader-stage"],
            },
        )
        self.target = WgslTarget(
            has_f16="shader-f16" in feats,
            has_f64="shader-f64" in feats,
            has_subgroups="subgroup" in feats,
            max_workgroup_size=lim["max-compute-invocations-per-workgroup"],
            max_workgroups_per_dim=lim["max-compute-workgroups-per-dimension"],
            max_storage_buffers_per_stage=lim["max-storage-buffers-per-shader-stage"],
            max_workgroup_storage=lim["max-compute-workgroup-storage-size"],
            exact_subnormals=not keeps_subnormals(self.device),
        )

    def _buffer(self, data: bytes | None, nbytes: int):
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        size = max(4, -(-nbytes // 4) * 4)
        buf = self.device.create_buffer(size=size, usage=usage)
        if data:
            pad = bytes(data) + b"\0" * ((-len(data)) % 4)
            self.device.queue.write_buffer(buf, 0, pad)
        return buf

    def run(self, plan: ShaderPlan, inputs: list[np.ndarray], out_dtype: DType, out_size: int) -> np.ndarray:
        ins = [self._buffer(a.tobytes(), a.nbytes) for a in inputs]
        out_bytes = out_size * byte_width(out_dtype)
        out = self._buffer(b"\xff" * out_bytes, out_bytes)  # poisoned: every element must be written
        scratch = [self._buffer(None, n) for n in plan.scratch]
        enc = self.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for prog in plan.passes:
            mod = self.device.create_shader_module(code=prog.code)
            pipe = self.device.create_compute_pipeline(
                layout="auto", compute={"module": mod, "entry_point": prog.entry}
            )
            entries = []
            for b in prog.bindings:
                buf = {"in": lambda i: ins[i], "out": lambda i: out, "scratch": lambda i: scratch[i]}[b.kind](
                    b.index
                )
                entries.append(
                    {"binding": b.binding, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}
                )
            bg = self.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
            if 0 in prog.grid:
                continue
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, bg)
            if prog.uniform is not None:  # the opaque zero (codegen's module doc)
                ubuf = self.device.create_buffer_with_data(data=prog.uniform, usage=wgpu.BufferUsage.UNIFORM)
                ug = self.device.create_bind_group(
                    layout=pipe.get_bind_group_layout(1),
                    entries=[
                        {"binding": 0, "resource": {"buffer": ubuf, "offset": 0, "size": len(prog.uniform)}}
                    ],
                )
                cp.set_bind_group(1, ug)
            cp.dispatch_workgroups(*prog.grid)
        cp.end()
        self.device.queue.submit([enc.finish()])
        data = self.device.queue.read_buffer(out, 0, out.size)[:out_bytes]
        return np.frombuffer(bytes(data), dtype=to_numpy(out_dtype)).copy()


@pytest.fixture(scope="module")
def gpu() -> Harness:
    return Harness()


def reference(kernel: Kernel, inputs: list[np.ndarray]) -> np.ndarray:
    """The contract's answer, from the reference interpreter (what the cpu device runs)."""
    tuned = tune_nullopt(kernel)
    n = kernel.size

    def read(node: AluExp, index: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        buf = inputs[node.arg[0]].view(to_numpy(node.dtype))
        idx = np.asarray(index).astype(np.int64)
        if mask is not None:
            idx = np.where(mask, idx, 0)
        return buf[np.clip(idx, 0, max(len(buf) - 1, 0))] if len(buf) else np.zeros(idx.shape, buf.dtype)

    gidx = np.arange(n, dtype=np.int32)
    red = kernel.reduction
    if red is None:
        v = Interpreter({"gidx": gidx}, read).run(tuned.exp)
        return np.broadcast_to(np.asarray(v).astype(to_numpy(kernel.dtype)), (n,)).copy()
    # Every (gidx, ridx) lane at once, then a fold along ridx in the reduction's dtype (the
    # suite's values make float folds exact in any order).
    g2, r2 = np.meshgrid(gidx, np.arange(red.size, dtype=np.int32), indexing="ij")
    v = Interpreter({"gidx": g2, "ridx": r2}, read).run(tuned.exp)
    v = np.broadcast_to(np.asarray(v).astype(to_numpy(red.dtype)), (n, red.size))
    if red.dtype == BOOL:
        fold = {AluOp.Add: np.maximum, AluOp.Max: np.maximum, AluOp.Mul: np.minimum, AluOp.Min: np.minimum}
    else:
        fold = {AluOp.Add: np.add, AluOp.Mul: np.multiply, AluOp.Min: np.minimum, AluOp.Max: np.maximum}
    acc = np.full(n, red.identity, dtype=to_numpy(red.dtype))
    if red.size:
        acc = fold[red.op].reduce(v, axis=1, dtype=to_numpy(red.dtype)).astype(to_numpy(red.dtype))
    out = Interpreter({"gidx": gidx, "acc": acc}, read).run(tuned.epilogue)
    return np.broadcast_to(np.asarray(out).astype(to_numpy(kernel.dtype)), (n,)).copy()


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: DType, name: str = "") -> None:
    if dtype in (F32, F16, F64):
        rtol, atol = lookup(name, dtype) if name else (0.0, 0.0)
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        nan_ok = np.isnan(a) == np.isnan(e)
        fin = ~np.isnan(e)
        ok = nan_ok.copy()
        inf = np.isinf(e)
        ok[inf] &= a[inf] == e[inf]
        m = fin & ~inf
        with np.errstate(all="ignore"):
            ok[m] &= np.abs(a[m] - e[m]) <= atol + rtol * np.abs(e[m])
        if not ok.all():
            bad = np.flatnonzero(~ok)[:8]
            pytest.fail(
                f"{name}<{dtype}>: {len(np.flatnonzero(~ok))} mismatches, e.g. at {bad}: "
                f"got {actual[bad]} want {expected[bad]}"
            )
    else:
        np.testing.assert_array_equal(actual, expected)


def gv(dtype: DType, gid: int, n: int, idx: AluExp | None = None) -> AluExp:
    return AluExp.global_view(dtype, gid, ShapeTracker.from_shape([n]), [AluVar.gidx if idx is None else idx])


def run_check(gpu: Harness, kernel: Kernel, inputs: list[np.ndarray], name: str = "") -> np.ndarray:
    plan = compile_kernel(kernel, gpu.target)
    got = gpu.run(plan, inputs, kernel.dtype, kernel.size)
    want = reference(kernel, inputs)
    assert_close(got, want, kernel.dtype, name)
    return got


# ---- values ------------------------------------------------------------------------------------

F32_SPECIAL = np.array(
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        3.0,
        7.0,
        -7.0,
        1e-3,
        123.456,
        -1e10,
        3e38,
        -3e38,
        1e-40,
        -1e-45,
        np.inf,
        -np.inf,
        np.nan,
        2147483520.0,
        2147483648.0,
        -2147483648.0,
        -2147483904.0,
        4294967040.0,
        4294967296.0,
        -0.75,
        0.999,
        65504.0,
        1e5,
        -1e5,
    ],
    dtype=np.float32,
)
I32_SPECIAL = np.array(
    [0, 1, -1, 2, -2, 3, 7, -7, 31, 32, 33, 64, -32, 1000, INT32_MAX, INT32_MIN, 12345, -98765],
    dtype=np.int32,
)
U32_SPECIAL = np.array(
    [0, 1, 2, 3, 7, 31, 32, 33, 64, 1000, 2**31, 2**32 - 1, 12345, 0x80000001], dtype=np.uint32
)


def values(dtype: DType) -> np.ndarray:
    if dtype == F32:
        return F32_SPECIAL
    if dtype == F16:
        return np.array(
            [
                0.0,
                -0.0,
                1.0,
                -1.0,
                0.5,
                -2.5,
                3.0,
                7.0,
                1e-3,
                123.5,
                65504,
                -65504,
                np.inf,
                -np.inf,
                np.nan,
                6e-8,
                -0.75,
            ],
            dtype=np.float16,
        )
    if dtype == F64:
        return np.concatenate(
            [
                F32_SPECIAL.astype(np.float64),
                [1e300, -1e300, 2147483647.5, -2147483648.5, 4294967295.9, 5e-324, 0.1],
            ]
        )
    if dtype == I32:
        return I32_SPECIAL
    if dtype == U32:
        return U32_SPECIAL
    return np.array([0, 1, 1, 0], dtype=np.int32)


def pairs(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    v = values(dtype)
    a, b = np.meshgrid(v, v, indexing="ij")
    return a.ravel().copy(), b.ravel().copy()


def needs(gpu: Harness, dtype: DType) -> None:
    if dtype == F16 and not gpu.target.has_f16 or dtype == F64 and not gpu.target.has_f64:
        pytest.skip(f"adapter lacks {dtype}")


# ---- elementwise ops ---------------------------------------------------------------------------

BINARY = [AluOp.Add, AluOp.Sub, AluOp.Mul, AluOp.Idiv, AluOp.Mod, AluOp.Min, AluOp.Max]
ALL = [F32, I32, U32, BOOL, F16, F64]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", BINARY + [AluOp.Cmplt, AluOp.Cmpne])
def test_binary(gpu: Harness, op: AluOp, dtype: DType) -> None:
    needs(gpu, dtype)
    a, b = pairs(dtype)
    n = len(a)
    x, y = gv(dtype, 0, n), gv(dtype, 1, n)
    out = DType.bool if op in (AluOp.Cmplt, AluOp.Cmpne) else dtype
    run_check(gpu, Kernel(2, n, AluExp(op, out, (x, y))), [a, b], op.value)


@pytest.mark.parametrize("dtype", [I32, U32, BOOL])
@pytest.mark.parametrize("mode", ["and", "or", "xor"])
def test_bit_combine(gpu: Harness, mode: str, dtype: DType) -> None:
    a, b = pairs(dtype)
    n = len(a)
    run_check(
        gpu, Kernel(2, n, AluExp(AluOp.BitCombine, dtype, (gv(dtype, 0, n), gv(dtype, 1, n)), mode)), [a, b]
    )


@pytest.mark.parametrize("dtype", [I32, U32])
@pytest.mark.parametrize("mode", ["shl", "shr"])
def test_shift(gpu: Harness, mode: str, dtype: DType) -> None:
    a, b = pairs(dtype)
    n = len(a)
    k = Kernel(2, n, AluExp(AluOp.BitShift, dtype, (gv(dtype, 0, n), gv(dtype, 1, n)), mode))
    run_check(gpu, k, [a, b])


def test_shift_mixed_count_dtype(gpu: Harness) -> None:
    a, b = pairs(I32)
    n = len(a)
    k = Kernel(2, n, AluExp(AluOp.BitShift, I32, (gv(I32, 0, n), gv(U32, 1, n)), "shl"))
    run_check(gpu, k, [a, b.view(np.uint32)])


UNARY = [op for op in AluOp if op in AluGroup.RequiredFloat]


def _unary_inputs(op: AluOp, dtype: DType) -> np.ndarray:
    rng = np.random.default_rng(0)
    base = values(dtype).astype(np.float64)
    lin = np.linspace(-10, 10, 2001)
    extra = [lin, rng.normal(size=500) * 3]
    if op in (AluOp.Sin, AluOp.Cos):
        extra += [
            rng.uniform(-1, 1, 500) * 10.0 ** rng.uniform(0, 38, 500),
            np.arange(-50, 50) * (math.pi / 4),
            [8191.9, 8192.0, 8192.1, 1e6, 16777216.0, 1.7e38, 3.4e38, -1e30],
        ]
    if op in (AluOp.Exp,):
        extra += [np.linspace(-105, 89, 3001)]
    if op in (AluOp.Log, AluOp.Sqrt, AluOp.Reciprocal):
        extra += [10.0 ** rng.uniform(-44, 38, 800), np.linspace(0.5, 2, 1001)]
    if op == AluOp.Asin:
        extra += [np.linspace(-1, 1, 2001)]
    if op in (AluOp.Erf, AluOp.Erfc):
        extra += [np.linspace(-6, 6, 2001)]
    if op == AluOp.Atan:
        extra += [10.0 ** rng.uniform(-10, 30, 500)]
    with np.errstate(all="ignore"):
        return np.concatenate([base, *map(np.asarray, extra)]).astype(to_numpy(dtype))


@pytest.mark.parametrize("dtype", [F32, F16, F64])
@pytest.mark.parametrize("op", UNARY)
def test_unary(gpu: Harness, op: AluOp, dtype: DType) -> None:
    needs(gpu, dtype)
    a = _unary_inputs(op, dtype)
    n = len(a)
    k = Kernel(1, n, AluExp(op, dtype, (gv(dtype, 0, n),)))
    plan = compile_kernel(k, gpu.target)
    got = gpu.run(plan, [a], dtype, n)
    assert_close(got, reference(k, [a]), dtype, op.value)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_sin_cos_huge_arguments(gpu: Harness, dtype: DType) -> None:
    """Payne-Hanek reduction: exact at every magnitude up to the dtype's largest finite value."""
    needs(gpu, dtype)
    rng = np.random.default_rng(1)
    top = 38.5 if dtype == F32 else 308.2
    with np.errstate(over="ignore"):
        a = (rng.uniform(-1, 1, 4000) * 10.0 ** rng.uniform(3, top, 4000)).astype(to_numpy(dtype))
    a = a[np.isfinite(a)]
    n = len(a)
    for op in (AluOp.Sin, AluOp.Cos):
        k = Kernel(1, n, AluExp(op, dtype, (gv(dtype, 0, n),)))
        got = gpu.run(compile_kernel(k, gpu.target), [a], dtype, n)
        want = (np.sin if op == AluOp.Sin else np.cos)(a.astype(np.float64))
        rtol, atol = lookup(op.value, dtype)
        assert np.all(np.abs(got - want) <= atol + rtol * np.abs(want))


CASTS = [(s, d) for s in ALL for d in ALL if s != d]


@pytest.mark.parametrize("src,dst", CASTS)
def test_cast(gpu: Harness, src: DType, dst: DType) -> None:
    needs(gpu, src)
    needs(gpu, dst)
    a = values(src)
    n = len(a)
    run_check(gpu, Kernel(1, n, AluExp.cast(dst, gv(src, 0, n))), [a])


@pytest.mark.parametrize("src,dst", [(F32, I32), (F32, U32), (I32, F32), (U32, F32), (I32, U32), (U32, I32)])
def test_bitcast(gpu: Harness, src: DType, dst: DType) -> None:
    a = values(src)
    n = len(a)
    run_check(gpu, Kernel(1, n, AluExp.bitcast(dst, gv(src, 0, n))), [a])


@pytest.mark.parametrize("dtype", ALL)
def test_where_and_constants(gpu: Harness, dtype: DType) -> None:
    """Constants of every kind (inf, NaN, -0, INT_MIN, subnormals) spelled so they parse exactly."""
    needs(gpu, dtype)
    consts = {
        F32: [
            0.0,
            -0.0,
            1.0,
            0.1,
            -2.5,
            3.4028234663852886e38,
            1e-45,
            1.17549435e-38,
            np.inf,
            -np.inf,
            np.nan,
            16777217.0,
            0.30000001192092896,
        ],
        F16: [0.0, -0.0, 1.0, 0.1, 65504.0, 6e-8, np.inf, -np.inf, np.nan],
        F64: [0.0, -0.0, 0.1, 1e300, 5e-324, np.inf, -np.inf, np.nan, 1 / 3],
        I32: [0, 1, -1, INT32_MAX, INT32_MIN, -12345],
        U32: [0, 1, 2**31, 2**32 - 1],
        BOOL: [0, 1],
    }[dtype]
    n = len(consts)
    # out[i] = select over i of the constants: a chain of Where(gidx == i, c_i, ...)
    e = AluExp.const(dtype, consts[-1])
    for i, c in list(enumerate(consts))[:-1]:
        e = AluExp.where(AluExp.cmpne(AluVar.gidx, AluExp.i32(i)).not_(), AluExp.const(dtype, c), e)
    run_check(gpu, Kernel(0, n, e), [])


def test_threefry(gpu: Harness) -> None:
    n = 257
    x = gv(U32, 0, n)
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2**32, n, dtype=np.uint32)
    for mode in ("xor", 0, 1):
        e = AluExp.threefry2x32(
            AluExp.u32(123), x, AluExp.cast(U32, AluVar.gidx), AluExp.u32(0xDEADBEEF), mode
        )
        run_check(gpu, Kernel(1, n, e), [a])


def test_masked_view_and_broadcast(gpu: Harness) -> None:
    """A padded, flipped, broadcast view: masked reads give 0 and indices stay in bounds."""
    st = ShapeTracker.from_shape([5, 7]).flip([True, False]).pad([[1, 2], [0, 3]])  # [8, 10]
    a = np.arange(35, dtype=np.float32)
    idx = [AluExp.idiv(AluVar.gidx, AluExp.i32(10)), AluExp.mod(AluVar.gidx, AluExp.i32(10))]
    e = AluExp.global_view(F32, 0, st, idx) * 2.0 + 1.0
    run_check(gpu, Kernel(1, 80, e), [a])


def test_large_grid_folds(gpu: Harness) -> None:
    """More than 65535 workgroups: folded into 2-D and bounds-checked."""
    n = 65536 * 256 + 77
    a = np.arange(n, dtype=np.int32)
    plan = compile_kernel(Kernel(1, n, gv(I32, 0, n) * 3 + 1), gpu.target)
    assert plan.passes[0].grid[1] > 1
    got = gpu.run(plan, [a], I32, n)
    np.testing.assert_array_equal(got, a * 3 + 1)


def test_fold_grid() -> None:
    assert fold_grid(10, 65535) == (10, 1, 1)
    gx, gy, gz = fold_grid(70000, 65535)
    assert gx <= 65535 and gx * gy >= 70000 and gz == 1
    gx, gy, gz = fold_grid(65535 * 65535 + 5, 65535)
    assert max(gx, gy, gz) <= 65535 and gx * gy * gz >= 65535 * 65535 + 5


# ---- reductions --------------------------------------------------------------------------------


def _reduce_kernel(dtype: DType, op: AluOp, rows: int, cols: int, epilogue=None, axis: int = 1) -> Kernel:
    shape = [rows, cols] if axis == 1 else [cols, rows]
    st = ShapeTracker.from_shape(shape)
    if axis == 0:
        st = st.permute([1, 0])
    x = AluExp.global_view(dtype, 0, st, [AluVar.gidx, AluVar.ridx])
    red = Reduction(dtype, op, cols, epilogue)
    return Kernel(1, rows, x, red)


def _reduce_values(dtype: DType, n: int, op: AluOp) -> np.ndarray:
    rng = np.random.default_rng(3)
    if dtype in (F32, F16, F64):
        if op == AluOp.Mul:  # products stay in range in any order (f16 too)
            v = rng.choice([1.0, -1.0], n)
            v[rng.choice(n, min(n, 6), replace=False)] = [2.0, 2.0, 0.5, 2.0, 0.5, 4.0][: min(n, 6)]
        else:
            v = rng.integers(-8, 9, n).astype(np.float64)  # sums exact in any order
        return v.astype(to_numpy(dtype))
    if dtype == BOOL:
        return (rng.random(n) < 0.9).astype(np.int32)
    return rng.integers(-1000, 1000, n).astype(to_numpy(dtype))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", [AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max])
@pytest.mark.parametrize("shape", [(37, 19), (3, 3000), (1, 100000), (500, 600)])
def test_reduce(gpu: Harness, op: AluOp, dtype: DType, shape: tuple[int, int]) -> None:
    needs(gpu, dtype)
    rows, cols = shape
    a = _reduce_values(dtype, rows * cols, op)
    k = _reduce_kernel(dtype, op, rows, cols)
    run_check(gpu, k, [a], "Reduce" + op.value)


def test_reduce_nan_propagates(gpu: Harness) -> None:
    a = np.arange(4 * 300, dtype=np.float32)
    a[5] = np.nan
    a[300 * 2 + 299] = np.nan
    for op in (AluOp.Min, AluOp.Max, AluOp.Add):
        got = run_check(gpu, _reduce_kernel(F32, op, 4, 300), [a], "Reduce" + op.value)
        assert np.isnan(got[0]) and np.isnan(got[2]) and not np.isnan(got[1])


def test_reduce_columns_and_epilogue(gpu: Harness) -> None:
    """Sum over axis 0 (strided reads) with a fused epilogue reading another input."""
    rows, cols = 300, 77
    a = _reduce_values(F32, rows * cols, AluOp.Add)
    b = np.arange(rows, dtype=np.float32)
    st = ShapeTracker.from_shape([cols, rows]).permute([1, 0])
    x = AluExp.global_view(F32, 0, st, [AluVar.gidx, AluVar.ridx])
    epi = AluVar.acc(F32) * 0.5 + gv(F32, 1, rows)
    k = Kernel(2, rows, x, Reduction(F32, AluOp.Add, cols, epi))
    run_check(gpu, k, [a, b], "ReduceAdd")


def test_full_sum_two_passes(gpu: Harness) -> None:
    n = 1 << 21
    a = _reduce_values(F32, n, AluOp.Add)
    k = _reduce_kernel(F32, AluOp.Add, 1, n)
    plan = compile_kernel(k, gpu.target)
    assert len(plan.passes) == 2 and plan.scratch
    got = gpu.run(plan, [a], F32, 1)
    assert got[0] == a.astype(np.float64).sum()


def test_f16_sum_accumulates_in_f32(gpu: Harness) -> None:
    needs(gpu, F16)
    a = np.full(4096, 1.0, dtype=np.float16)  # 4096 is past f16's exact-integer range
    k = _reduce_kernel(F16, AluOp.Add, 1, 4096)
    run_check(gpu, k, [a], "ReduceAdd")


def _subgroup_target(gpu: Harness, on: bool) -> WgslTarget:
    if on and not gpu.target.has_subgroups:
        pytest.skip("the adapter has no subgroups")
    return replace(gpu.target, has_subgroups=on)


@pytest.mark.parametrize("subgroups", [False, True], ids=["tree", "subgroups"])
@pytest.mark.parametrize("dtype", [F32, I32, U32, BOOL])
@pytest.mark.parametrize("op", [AluOp.Add, AluOp.Mul, AluOp.Min, AluOp.Max])
@pytest.mark.parametrize("shape", [(5, 3), (3, 1001), (2, 70001), (1, (1 << 21) + 3)])
def test_reduce_both_folds(gpu: Harness, subgroups: bool, op: AluOp, dtype: DType, shape) -> None:
    """The subgroup fold and the tree agree with the reference: grouped rows and two-pass sums,
    sizes no subgroup size divides, a NaN in a float min/max row, integer sums that wrap."""
    target = _subgroup_target(gpu, subgroups)
    rows, cols = shape
    a = _reduce_values(dtype, rows * cols, op)
    if dtype == F32 and op in (AluOp.Min, AluOp.Max):
        a[cols - 1] = np.nan  # the last item of row 0: the partial subgroup of the last workgroup
    if dtype in (I32, U32) and op == AluOp.Add:
        a[::3] = np.array(INT32_MAX - 7 if dtype == I32 else 0xFFFFFFF0).astype(a.dtype)
    k = _reduce_kernel(dtype, op, rows, cols)
    plan = compile_kernel(k, target)
    uses = any("subgroups" in p.enables for p in plan.passes)
    exact_f32 = dtype == F32 and op in (AluOp.Add, AluOp.Mul) and target.exact_subnormals  # the tree
    assert uses == (subgroups and not exact_f32 and (plan.tune.size.groups > 1 or plan.tune.size.split > 1))
    got = gpu.run(plan, [a], dtype, rows)
    assert_close(got, reference(k, [a]), dtype, "Reduce" + op.value)
    if dtype == F32 and op in (AluOp.Min, AluOp.Max):
        assert np.isnan(got[0]) and not np.isnan(got[1:]).any()


@pytest.mark.parametrize("op", [AluOp.Min, AluOp.Max])
def test_subgroup_min_max_on_keys_are_exact_on_subnormals(gpu: Harness, op: AluOp) -> None:
    """On the exact-subnormal spelling float min/max still fold by subgroups (on u32 keys): rows of
    subnormals of both signs, zeros of both signs and a NaN row give the reference's values."""
    target = replace(_subgroup_target(gpu, True), exact_subnormals=True)
    rows, cols = 4, 3001
    rng = np.random.default_rng(5)
    a = (rng.integers(1, 1 << 23, rows * cols) * rng.choice([-1, 1], rows * cols)).astype(np.int64)
    a = (np.abs(a).astype(np.uint32) | np.where(a < 0, 0x80000000, 0).astype(np.uint32)).view(np.float32)
    a[cols : cols + 5] = [0.0, -0.0, 2.0**-149, -(2.0**-149), 0.0]
    a[2 * cols + 17] = np.nan
    k = _reduce_kernel(F32, op, rows, cols)
    plan = compile_kernel(k, target)
    assert any("subgroups" in p.enables for p in plan.passes)
    got = gpu.run(plan, [a], F32, rows)
    want = (np.min if op == AluOp.Min else np.max)(a.reshape(rows, cols), axis=1)
    assert np.isnan(got[2]) and np.isnan(want[2])
    keep = [0, 1, 3]
    assert got[keep].tobytes() == want[keep].tobytes(), (got, want)


def test_subgroup_fold_keeps_the_epilogue(gpu: Harness) -> None:
    """A softmax-like row reduction with an epilogue reading another input, on the subgroup fold."""
    target = _subgroup_target(gpu, True)
    rows, cols = 7, 4099
    a = _reduce_values(F32, rows * cols, AluOp.Max)
    b = np.arange(rows, dtype=np.float32)
    x = AluExp.global_view(F32, 0, ShapeTracker.from_shape([rows, cols]), [AluVar.gidx, AluVar.ridx])
    k = Kernel(2, rows, x, Reduction(F32, AluOp.Max, cols, AluVar.acc(F32) * 2.0 + gv(F32, 1, rows)))
    plan = compile_kernel(k, target)
    assert any("subgroups" in p.enables for p in plan.passes)
    assert_close(gpu.run(plan, [a, b], F32, rows), reference(k, [a, b]), F32, "ReduceMax")


# ---- compile-time errors and legalization ------------------------------------------------------


def test_unsupported_dtypes_raise_at_compile() -> None:
    k64 = Kernel(1, 4, gv(F64, 0, 4) + 1.0)
    with pytest.raises(UnsupportedOpError, match="float64"):
        compile_kernel(k64, WgslTarget(has_f64=False))


def test_float16_is_held_in_float32_without_shader_f16() -> None:
    """float16 is stored as 16-bit patterns in u32 words and computed in float32 with a rounding
    after each op (WGSL_TRAITS.f16_in_f32): no `enable f16;`, so no device feature."""
    k16 = Kernel(1, 4, gv(F16, 0, 4) * 3.0 + 1.0)
    (p,) = compile_kernel(k16, WgslTarget(has_f16=False)).passes
    assert "f16" not in p.enables and "enable f16" not in p.code and "f16(" not in p.code
    assert "array<atomic<u32>>" in p.code and p.code.count("jc_f16_round(") == 3  # mul, add; the helper


def test_too_many_bindings_raise() -> None:
    e = gv(F32, 0, 4)
    for i in range(1, 9):
        e = e + gv(F32, i, 4)
    with pytest.raises(UnsupportedOpError, match="storage buffers"):
        compile_kernel(Kernel(9, 4, e), WgslTarget(max_storage_buffers_per_stage=8))


def test_nan_test_is_by_bits() -> None:
    """No `x != x` reaches the shader: NaN tests go through bitcast (jax-js issue #85)."""
    x = gv(F32, 0, 4)
    k = Kernel(1, 4, AluExp.cmpne(x, x))
    code = compile_kernel(k, WgslTarget()).passes[0].code
    assert "bitcast<u32>" in code


def test_vec4_elementwise(gpu: Harness) -> None:
    """Contiguous maps load and store vec4; a broadcast operand stays a scalar read."""
    rows, cols = 64, 36
    n = rows * cols
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = rng.standard_normal(rows).astype(np.float32)
    row_i = AluExp.idiv(AluVar.gidx, AluExp.i32(cols))
    e = gv(F32, 0, n) * gv(F32, 1, n) + AluExp.global_view(F32, 2, ShapeTracker.from_shape([rows]), [row_i])
    k = Kernel(3, n, e)
    plan = compile_kernel(k, gpu.target)
    code = plan.passes[0].code
    assert "array<vec4<f32>>" in code and "out0[jc_q] = vec4<f32>(" in code
    got = gpu.run(plan, [a, b, c], F32, n)
    np.testing.assert_array_equal(got, reference(k, [a, b, c]))


def test_grouped_and_split_with_epilogue(gpu: Harness) -> None:
    """Row reductions folded by a workgroup (and across workgroups) apply the epilogue once."""
    for rows, cols in ((40, 4096), (2, 300000)):
        a = _reduce_values(F32, rows * cols, AluOp.Add)
        b = np.arange(rows, dtype=np.float32)
        x = AluExp.global_view(F32, 0, ShapeTracker.from_shape([rows, cols]), [AluVar.gidx, AluVar.ridx])
        epi = AluExp.max(AluVar.acc(F32), gv(F32, 1, rows)) + AluExp.cast(F32, AluVar.gidx)
        k = Kernel(2, rows, x, Reduction(F32, AluOp.Add, cols, epi))
        plan = compile_kernel(k, gpu.target)
        assert plan.tune.size.groups > 1
        run_check(gpu, k, [a, b], "ReduceAdd")


def test_vec4_cooperative_reductions(gpu: Harness) -> None:
    """Grouped and split reductions read contiguous rows (and a shared vector) as vec4, four items
    a trip; a row that is not whole vec4s, or an input also read elsewhere, stays scalar."""
    rng = np.random.default_rng(8)
    gd, r = AluVar.gidx, AluVar.ridx
    # a full sum (split, grid-stride), a softmax-style row sum with a per-row operand, a matvec
    n = 1 << 20
    full = _reduce_kernel(F32, AluOp.Add, 1, n)
    rows, cols = 48, 1024
    x = AluExp.global_view(F32, 0, ShapeTracker.from_shape([rows, cols]), [gd, r])
    row_sum = Kernel(2, rows, x - gv(F32, 1, rows), Reduction(F32, AluOp.Max, cols))
    v = AluExp.global_view(F32, 1, ShapeTracker.from_shape([cols]), [r])
    matvec = Kernel(2, rows, x * v, Reduction(F32, AluOp.Add, cols, AluVar.acc(F32) * 2.0))
    cases = [
        (full, [_reduce_values(F32, n, AluOp.Add)], ["in0[gidx * 262144i + jc_j]"]),
        (
            row_sum,
            [
                rng.standard_normal(rows * cols).astype(np.float32),
                rng.standard_normal(rows).astype(np.float32),
            ],
            ["in0[gidx * 256i + jc_j]", "in1[gidx]"],
        ),
        (
            matvec,
            [
                rng.integers(-4, 5, rows * cols).astype(np.float32),
                rng.integers(-4, 5, cols).astype(np.float32),
            ],
            ["in0[gidx * 256i + jc_j]", "in1[jc_j]"],
        ),
    ]
    for k, inputs, loads in cases:
        plan = compile_kernel(k, gpu.target)
        code = plan.passes[0].code
        assert "array<vec4<f32>>" in code and all(ld in code for ld in loads), code
        assert code.count("jc_v0.") == 4
        got = run_check(gpu, k, inputs, "Reduce" + k.reduction.op.value)
        if k is full:
            assert got[0] == inputs[0].astype(np.float64).sum()
    odd = _reduce_kernel(F32, AluOp.Add, 4, 1026)  # rows of 1026 items: not whole vec4s
    assert "array<vec4" not in compile_kernel(odd, gpu.target).passes[0].code
    run_check(gpu, odd, [_reduce_values(F32, 4 * 1026, AluOp.Add)], "ReduceAdd")


def test_upcast_matmul(gpu: Harness) -> None:
    """A matmul-shaped reduction: four outputs per thread share the row of A (register blocking)."""
    m, kk, nn = 256, 48, 256
    rng = np.random.default_rng(6)
    a = rng.integers(-4, 5, (m, kk)).astype(np.float32)
    b = rng.integers(-4, 5, (kk, nn)).astype(np.float32)
    ia, ja = AluExp.idiv(AluVar.gidx, AluExp.i32(nn)), AluExp.mod(AluVar.gidx, AluExp.i32(nn))
    ea = AluExp.global_view(F32, 0, ShapeTracker.from_shape([m, kk]), [ia, AluVar.ridx])
    eb = AluExp.global_view(F32, 1, ShapeTracker.from_shape([kk, nn]), [AluVar.ridx, ja])
    k = Kernel(2, m * nn, ea * eb, Reduction(F32, AluOp.Add, kk, AluVar.acc(F32) + 1.0))
    plan = compile_kernel(k, gpu.target)
    assert plan.tune.size.upcast == 4 and plan.tune.size.groups == 1
    code = plan.passes[0].code
    assert code.count("in0[") < code.count("in1[")  # A's load is shared by the four lanes
    got = gpu.run(plan, [a, b], F32, m * nn)
    np.testing.assert_array_equal(got, (a @ b + 1.0).ravel())


@pytest.mark.parametrize(
    "op", [AluOp.Sin, AluOp.Cos, AluOp.Asin, AluOp.Atan, AluOp.Exp, AluOp.Log, AluOp.Erf, AluOp.Erfc]
)
def test_transcendental_expansions_on_gpu(gpu: Harness, op: AluOp) -> None:
    """The dialect-neutral AluExp expansions (what GLSL uses) meet the table on a real GPU too."""
    from dataclasses import replace

    from jaxcore_webgpu.wgsl import WGSL_TRAITS

    a = _unary_inputs(op, F32)
    n = len(a)
    k = Kernel(1, n, AluExp(op, F32, (gv(F32, 0, n),)))
    plan = compile_kernel(k, gpu.target, replace(WGSL_TRAITS, expand_transcendentals=True))
    assert "jc_" + op.value.lower() not in plan.passes[0].code
    assert_close(gpu.run(plan, [a], F32, n), reference(k, [a]), F32, op.value)


def test_empty_kernels(gpu: Harness) -> None:
    """A reduction over 0 items gives its identity through the epilogue; 0 outputs dispatch nothing."""
    x = AluExp.global_view(F32, 0, ShapeTracker.from_shape([5, 0]), [AluVar.gidx, AluVar.ridx])
    k = Kernel(1, 5, x, Reduction(F32, AluOp.Max, 0, AluVar.acc(F32) * 2.0))
    got = gpu.run(compile_kernel(k, gpu.target), [np.zeros(1, np.float32)], F32, 5)
    np.testing.assert_array_equal(got, np.full(5, -np.inf, np.float32))
    plan = compile_kernel(Kernel(1, 0, gv(F32, 0, 0) + 1.0), gpu.target)
    assert all(0 in p.grid for p in plan.passes)


def test_zero_and_repeated_operands_are_opaque_to_the_driver():
    """x * 0 and x - x are not folded (NaN, Inf, -0): the zero goes through the uniform jc_zero."""
    from jaxcore_webgpu.codegen import WgslTarget, compile_kernel

    from jaxcore import AluExp, AluVar, DType, Kernel

    x = AluExp.global_index(DType.float32, 0, 4, AluVar.gidx)
    for exp in (x * 0.0, x - x, 0.0 - x, (x + x) - x):
        prog = compile_kernel(Kernel(1, 4, exp), WgslTarget()).passes[0]
        assert "jc_o_f32(" in prog.code and "var<uniform> jc_zero" in prog.code
        assert prog.uniform == OPAQUE_UNIFORM
    prog = compile_kernel(Kernel(1, 4, x * 2.0), WgslTarget()).passes[0]
    assert "jc_zero" not in prog.code and prog.uniform is None
