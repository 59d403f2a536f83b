"""Backend behaviour the conformance suite does not reach: threads, split reductions, the matmul
path, aliasing, memory limits, capabilities and the plugin hook."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction
from jaxcore.matmul_shape import matmul_kernel
from jaxcore_wasm import backend as wb

F32 = DType.float32
g, r = AluVar.gidx, AluVar.ridx
RNG = np.random.default_rng(7)


def gi(gid: int, n: int, idx: AluExp, dtype: DType = F32) -> AluExp:
    return AluExp.global_index(dtype, gid, n, idx)


def run(be, kernel: Kernel, inputs: list[np.ndarray], out_dtype=np.float32) -> np.ndarray:
    slots = [be.malloc(a.nbytes, a.tobytes()) for a in inputs]
    out = be.malloc(kernel.bytes)
    exe = be.prepare_kernel(kernel)
    be.dispatch(exe, slots, [out])
    res = np.frombuffer(be.read(out), dtype=out_dtype).copy()
    for s in (*slots, out):
        be.dec_ref(s)
    return res


def test_parallel_map_matches_numpy(wasm_backend) -> None:
    n = 1 << 20
    a, b = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
    k = Kernel(2, n, AluExp.exp(gi(0, n, g)) * gi(1, n, g) + 1.0)
    exe = wasm_backend.prepare_kernel(k)
    assert not exe.data.single  # large enough to be split across the pool
    got = run(wasm_backend, k, [a, b])
    np.testing.assert_allclose(got, np.exp(a) * b + 1, rtol=1e-6)


@pytest.mark.parametrize("op", [AluOp.Add, AluOp.Max, AluOp.Min, AluOp.Mul])
def test_split_reduction(wasm_backend, op: AluOp) -> None:
    n = 1 << 18
    a = RNG.integers(-3, 4, 2 * n).astype(np.float32) if op != AluOp.Mul else np.ones(2 * n, np.float32)
    k = Kernel(1, 2, gi(0, 2 * n, g * n + r), Reduction(F32, op, n))
    exe = wasm_backend.prepare_kernel(k)
    assert exe.data.plan.split
    want = {AluOp.Add: np.sum, AluOp.Max: np.max, AluOp.Min: np.min, AluOp.Mul: np.prod}[op](
        a.reshape(2, n), axis=1
    )
    np.testing.assert_array_equal(run(wasm_backend, k, [a]), want)


@pytest.mark.parametrize(
    "m,n,kk,transpose_b,batch",
    [
        (64, 64, 64, False, 1),
        (37, 53, 300, False, 1),
        (100, 30, 17, True, 1),
        (16, 24, 40, False, 5),
        (257, 3, 600, True, 1),
        (151, 1100, 602, False, 1),  # several M, N and K blocks (MC 60, NC 1032, KC 512), partial tiles
    ],
)
def test_matmul_path(wasm_backend, m: int, n: int, kk: int, transpose_b: bool, batch: int) -> None:
    k = matmul_kernel(m, n, kk, transpose_b=transpose_b, batch=batch)
    exe = wasm_backend.prepare_kernel(k)
    assert exe.data.plan.matmul is not None
    x = RNG.normal(0, 1, (batch, m, kk)).astype(np.float32)
    y = RNG.normal(0, 1, (batch, n, kk) if transpose_b else (batch, kk, n)).astype(np.float32)
    want = x.astype(np.float64) @ (np.swapaxes(y, 1, 2) if transpose_b else y).astype(np.float64)
    got = run(wasm_backend, k, [x.ravel(), y.ravel()]).reshape(batch, m, n)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


def test_matmul_with_epilogue(wasm_backend) -> None:
    m = n = kk = 48
    epi = AluExp.cast(DType.float16, AluExp.max(AluVar.acc(F32), AluExp.f32(0.0)))
    k = matmul_kernel(m, n, kk, epilogue=epi)
    exe = wasm_backend.prepare_kernel(k)
    assert exe.data.plan.matmul is not None and not exe.data.plan.matmul.direct
    x, y = RNG.normal(0, 1, (m, kk)).astype(np.float32), RNG.normal(0, 1, (kk, n)).astype(np.float32)
    got = run(wasm_backend, k, [x.ravel(), y.ravel()], np.float16).reshape(m, n)
    want = np.maximum(x @ y, 0).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_output_aliasing_an_input_reads_before_writing(wasm_backend) -> None:
    n = 4096
    a = np.arange(n, dtype=np.float32)
    k = Kernel(1, n, gi(0, n, AluExp.sub(AluExp.i32(n - 1), g)) + 1.0)  # reversed: out[i] = a[n-1-i] + 1
    s = wasm_backend.malloc(a.nbytes, a.tobytes())
    wasm_backend.dispatch(wasm_backend.prepare_kernel(k), [s], [s])
    np.testing.assert_array_equal(np.frombuffer(wasm_backend.read(s), np.float32), a[::-1] + 1)


def test_integer_division_never_traps(wasm_backend) -> None:
    a = np.array([7, -7, 5, -(2**31), -(2**31), 0], np.int32)
    b = np.array([0, 2, -2, -1, 0, 0], np.int32)
    i32 = DType.int32
    for op, want in ((AluOp.Idiv, [0, -3, -2, -(2**31), 0, 0]), (AluOp.Mod, [0, -1, 1, 0, 0, 0])):
        e = AluExp(op, i32, (gi(0, 6, g, i32), gi(1, 6, g, i32)))
        np.testing.assert_array_equal(run(wasm_backend, Kernel(2, 6, e), [a, b], np.int32), want)


def test_memory_error_past_4gib(wasm_backend) -> None:
    with pytest.raises(MemoryError):
        wasm_backend.malloc(2**32)


def test_capabilities_are_data() -> None:
    caps = wb.CAPABILITIES
    assert caps.dtypes == frozenset(DType) and caps.max_args == 64
    assert hash(caps)  # frozen


def test_plugin_registers_wasm_with_priority_10() -> None:
    from jaxcore_wasm import plugin

    seen = {}

    def register(name, factory, **kw):
        seen[name] = (factory, kw)

    plugin.jaxcore_register_devices(register)
    factory, kw = seen["wasm"]
    assert kw["priority"] == 10 and kw["api_version"] == 1
    assert factory().name == "wasm"


def test_plugin_declines_without_wasm32_target(monkeypatch) -> None:
    import jaxcore
    from jaxcore_wasm import plugin, toolchain

    def broken():
        raise toolchain.ToolchainError("no wasm32 target")

    monkeypatch.setattr(toolchain, "target_machine", broken)
    with pytest.raises(jaxcore.DeviceUnavailable):
        plugin._create()


@pytest.mark.parametrize("rows,cols", [(300, 40), (300, 5000), (7, 40), (13, 5000), (2, 17)])
def test_column_reductions(wasm_backend, rows: int, cols: int) -> None:
    """Rows added in groups (codegen.ROW_GROUP) and one at a time for the rest, in row order."""
    x = RNG.integers(-4, 5, (rows, cols)).astype(np.float32)
    x[rows - 1, cols // 2] = np.nan  # the last row: the remainder loop, where there is one
    n = rows * cols
    read = gi(0, n, r * cols + g)
    mean16 = AluExp.cast(DType.float16, AluVar.acc(F32) * (1.0 / rows))
    k_sum = Kernel(1, cols, read, Reduction(F32, AluOp.Add, rows, mean16))
    k_max = Kernel(1, cols, read * 2.0, Reduction(F32, AluOp.Max, rows))
    k_min = Kernel(1, cols, read - 1.0, Reduction(F32, AluOp.Min, rows))
    k_int = Kernel(1, cols, AluExp.cast(DType.int32, read), Reduction(DType.int32, AluOp.Mul, rows))
    for k in (k_sum, k_max, k_min, k_int):
        assert wasm_backend.prepare_kernel(k).data.plan.matmul is None
    got = run(wasm_backend, k_sum, [x.ravel()], np.float16)
    np.testing.assert_array_equal(
        got, (x.astype(np.float64).sum(0) / rows).astype(np.float32).astype(np.float16)
    )
    np.testing.assert_array_equal(run(wasm_backend, k_max, [x.ravel()]), (x * 2).max(0))
    np.testing.assert_array_equal(run(wasm_backend, k_min, [x.ravel()]), (x - 1).min(0))
    x[rows - 1, cols // 2] = 3.0  # a NaN's cast to int32 is 0, which would zero the product
    want = np.prod(x.astype(np.int64), axis=0).astype(np.int64) % 2**32
    got = run(wasm_backend, k_int, [x.ravel()], np.int32).astype(np.int64) % 2**32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows,cols", [(3000, 100), (7, 37)])
def test_broadcast_map_row_split(wasm_backend, rows: int, cols: int) -> None:
    n = rows * cols
    x = RNG.normal(0, 1, n).astype(np.float32)
    b = RNG.normal(0, 1, cols).astype(np.float32)
    m = RNG.normal(0, 1, rows).astype(np.float32)
    e = AluExp.exp(gi(0, n, g) - gi(2, rows, AluExp.idiv(g, cols))) * gi(1, cols, AluExp.mod(g, cols))
    k = Kernel(3, n, e)
    got = run(wasm_backend, k, [x, b, m]).reshape(rows, cols)
    want = np.exp(x.reshape(rows, cols) - m[:, None]) * b[None, :]
    np.testing.assert_allclose(got, want, rtol=2e-6)
