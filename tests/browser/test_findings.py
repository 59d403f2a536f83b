"""Regression cases for what Chromium rejected or computed differently (tests/browser/FINDINGS.md).

Each case exports a kernel from the native backend, runs it in the browser through the shipped
runner and compares with numpy (the contract), so it fails on the plugin code before the fix.
Open findings are strict expected failures: fixing one turns its case into an XPASS, which fails
the run until the mark is removed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import harness
import numpy as np
import pytest

import jaxcore
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel

F16, F32, I32 = DType.float16, DType.float32, DType.int32


@dataclass
class _Case:
    device: str
    program: dict[str, Any]
    inputs: list[bytes]
    outputs: list[bytes | None] = field(default_factory=list)


def _backend(name: str) -> Any:
    try:
        return jaxcore.get_backend(name)
    except Exception as e:  # the device's own tests and the conformance run report why
        if harness.in_ci():
            pytest.fail(f"CI: {name} is not available: {e}")
        pytest.skip(f"{name} is not available: {e}")


def in_browser(browser: Any, device: str, kernel: Kernel, inputs: list[np.ndarray]) -> tuple[bytes, bytes]:
    """(browser output, native output) of `kernel` on `inputs`."""
    from jaxcore_webgl.export import export as webgl_export
    from jaxcore_webgpu.export import export as webgpu_export

    b = _backend(device)
    exe = b.prepare_kernel(kernel)
    program = (webgpu_export if device == "webgpu" else webgl_export)(b, exe)
    json.dumps(program)  # JSON-able, as documented
    raws = [np.ascontiguousarray(x).tobytes() for x in inputs]
    slots = [b.malloc(len(r), r) for r in raws]
    out = b.malloc(kernel.bytes)
    try:
        b.dispatch(exe, slots, [out])
        native = b.read(out)
    finally:
        for s in [*slots, out]:
            b.dec_ref(s)
    (result,) = harness.run_cases(browser, device, [_Case(device, program, raws, [None])])
    assert not result.get("unsupported"), result["unsupported"]
    assert not result.get("messages"), result["messages"]
    assert not result.get("error"), result["error"]
    return result["outputs"][0], native


def _load(dtype: DType, gid: int, n: int) -> AluExp:
    return AluExp.global_index(dtype, gid, n, AluVar.gidx)


def _bits16(raw: bytes) -> list[str]:
    return [f"0x{v:04x}" for v in np.frombuffer(raw, np.uint16)]


# ---- F3 (webgl): packHalf2x16 of Inf, NaN and overflow on ANGLE/SwiftShader ------------------
F16_EDGES = np.array(
    [np.inf, 3.0, -np.inf, 1.2, np.nan, -7.0, 70000.0, 65504.0, 65520.0, 65519.0, -1e6, 2.0**-24, 0.0, -0.0],
    np.float32,
)


@pytest.mark.parametrize("device", ["webgl"])
def test_f3_float16_store_of_inf_nan_overflow(device: str, browser: Any) -> None:
    """Cast<float16> of Inf/NaN/overflow next to finite values: the neighbour in the word must survive."""
    n = len(F16_EDGES)
    k = Kernel(1, n, AluExp(AluOp.Cast, F16, (_load(F32, 0, n),)))
    got, native = in_browser(browser, device, k, [F16_EDGES])
    with np.errstate(all="ignore"):
        want = F16_EDGES.astype(np.float16)
    for raw, who in ((got, "browser"), (native, "native")):
        v = np.frombuffer(raw, np.float16)
        nan = np.isnan(want)
        # NaN payloads are free (llvmpipe's unpackHalf2x16 sets them all); every other bit is not
        assert np.isnan(v[nan]).all() and _bits16(v[~nan].tobytes()) == _bits16(want[~nan].tobytes()), (
            f"{who} {_bits16(raw)}"
        )


@pytest.mark.parametrize("device", ["webgl"])
def test_f3_float16_arithmetic_rounds_inf(device: str, browser: Any) -> None:
    """x * y in float16 (rounded through jx_f16 after the op) overflowing to Inf, and Inf * 0 = NaN."""
    x = np.array([300.0, -300.0, np.inf, 2.0, 1.5, -np.inf, 256.0, 0.0], np.float16)
    y = np.array([300.0, 300.0, 0.0, 3.0, 1.5, 2.0, 256.0, np.inf], np.float16)
    k = Kernel(2, len(x), AluExp(AluOp.Mul, F16, (_load(F16, 0, len(x)), _load(F16, 1, len(x)))))
    got, _ = in_browser(browser, device, k, [x, y])
    with np.errstate(all="ignore"):
        want = (x * y).astype(np.float16)
    g = np.frombuffer(got, np.float16)
    assert np.array_equal(g, want, equal_nan=True), f"browser {g.tolist()} numpy {want.tolist()}"


# ---- F4 (webgl): c ? float(c) : -0.0 folded to float(c) by llvmpipe (+0.0), not by the browser -----
@pytest.mark.parametrize("device", ["webgl"])
def test_f4_where_with_one_float_constant_keeps_zero_sign(device: str, browser: Any) -> None:
    """Floor(Where(c, Cast<float32>(c), -0.0)) (a differential-suite case): false lanes are -0.0 in
    the browser and natively; llvmpipe folded the select into float(c), +0.0, before the fix."""
    n = 16
    c = AluExp.global_index(DType.bool, 0, n, AluVar.gidx)
    where = AluExp(AluOp.Where, F32, (c, AluExp(AluOp.Cast, F32, (c,)), AluExp.const(F32, -0.0)))
    exp = AluExp(AluOp.Floor, F32, (where,))
    flags = (np.arange(n) % 3 == 0).astype(np.int32)
    got, native = in_browser(browser, device, Kernel(1, n, exp), [flags])
    want = np.floor(np.where(flags != 0, flags.astype(np.float32), np.float32(-0.0))).tobytes()
    assert native == want, f"native {[hex(v) for v in np.frombuffer(native, np.uint32)]}"
    assert got == want, f"browser {[hex(v) for v in np.frombuffer(got, np.uint32)]}"


# ---- F1 (webgpu): SwiftShader's WebGPU flushes float32 subnormals ------------------------------
SUBNORMALS = np.array([1e-40, -1e-40, 1.4e-45, 1e-38, 2.0**-149, -3e-39], np.float32)


def test_f1_webgpu_float32_subnormal_add(browser: Any) -> None:
    """Subnormal float32 operands and results survive a flushing WebGPU (SwiftShader)."""
    n = len(SUBNORMALS)
    zero = np.zeros(n, np.float32)
    k = Kernel(2, n, AluExp(AluOp.Add, F32, (_load(F32, 0, n), _load(F32, 1, n))))
    got, native = in_browser(browser, "webgpu", k, [SUBNORMALS, zero])
    assert native == (SUBNORMALS + zero).tobytes()  # lavapipe keeps them
    assert got == native, f"browser {np.frombuffer(got, np.float32).tolist()}"


F1_X = np.array(
    [1e-40, -1e-40, 1.4e-45, 1e-38, 2.0**-149, -3e-39, 1.5e-38, 3e-39, 1.0, 0.0, -0.0, 2.0**-70], np.float32
)
F1_Y = np.array(
    [3e-39, 1e-40, -1.4e-45, -1.1e-38, 0.5, 2.0, -1.4e-38, 1e-39, 3.4e38, 1e-40, 5.0, 2.0**-70], np.float32
)
_F1_BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Min": np.minimum,
    "Max": np.maximum,
}
_F1_UNARY = {"Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt, "Reciprocal": lambda x: np.float32(1) / x}


@pytest.mark.parametrize("op", [*_F1_BINARY, *_F1_UNARY, "Cmplt", "Cast<bool>", "Log", "Exp"])
def test_f1_webgpu_float32_subnormal_ops(op: str, browser: Any) -> None:
    """Every float32 op F1 listed, on subnormal operands and results, exact (Log/Exp to 2 ulp)."""
    n = len(F1_X)
    x, y = _load(F32, 0, n), _load(F32, 1, n)
    with np.errstate(all="ignore"):
        if op in _F1_BINARY:
            exp, want = AluExp(AluOp[op], F32, (x, y)), _F1_BINARY[op](F1_X, F1_Y)
        elif op in _F1_UNARY:
            exp, want = AluExp(AluOp[op], F32, (x,)), _F1_UNARY[op](F1_X).astype(np.float32)
        elif op == "Cmplt":
            exp, want = AluExp(AluOp.Cmplt, DType.bool, (x, y)), (F1_X < F1_Y).astype(np.int32)
        elif op == "Cast<bool>":
            exp, want = AluExp(AluOp.Cast, DType.bool, (x,)), (F1_X != 0).astype(np.int32)
        elif op == "Log":
            exp, want = AluExp(AluOp.Log, F32, (x,)), np.log(np.abs(F1_X) + np.float32(0)).astype(np.float32)
        else:  # exp(log(y) - 1): results down in the subnormals
            arg = np.float32(-88.0) - np.arange(n, dtype=np.float32) * np.float32(1.3)
            exp, want = AluExp(AluOp.Exp, F32, (y,)), np.exp(arg.astype(np.float64)).astype(np.float32)
    ins = [np.abs(F1_X) if op == "Log" else F1_X, arg if op == "Exp" else F1_Y]
    got, native = in_browser(browser, "webgpu", Kernel(2, n, exp), ins)
    for raw, who in ((got, "browser"), (native, "native")):
        v = np.frombuffer(raw, want.dtype)
        if op in ("Log", "Exp"):
            ok = np.allclose(v, want, rtol=3e-7, atol=2.0**-148)
        else:  # bit for bit (NaN payloads are free, as in the contract)
            nan = np.isnan(want) if want.dtype == np.float32 else np.zeros(n, bool)
            ok = bool(np.isnan(v[nan]).all()) and v[~nan].tobytes() == want[~nan].tobytes()
        assert ok, f"{who} {v.tolist()} numpy {want.tolist()}"


# ---- F2 (webgpu): the sign of a zero chosen by select() among float constants ----------------
F2_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.0, 0.0, 16777216.0]


def test_f2_webgpu_select_of_signed_zero_constants(browser: Any) -> None:
    """A Where chain over float constants (what the folder emits): every zero keeps its sign."""
    g = AluVar.gidx
    exp = AluExp.const(F32, F2_VALUES[-1])
    for i in range(len(F2_VALUES) - 2, -1, -1):
        cond = AluExp(AluOp.Cmplt, DType.bool, (g, AluExp.const(I32, i + 1)))
        exp = AluExp(AluOp.Where, F32, (cond, AluExp.const(F32, F2_VALUES[i]), exp))
    got, native = in_browser(browser, "webgpu", Kernel(0, len(F2_VALUES), exp), [])
    want = np.array(F2_VALUES, np.float32).tobytes()
    assert native == want, f"native {np.frombuffer(native, np.uint32).tolist()}"
    assert got == want, f"browser {[hex(v) for v in np.frombuffer(got, np.uint32)]}"


@pytest.mark.parametrize("depth", [27, 64])
def test_f2_deep_constant_chains_stay_within_tints_nesting_limit(browser: Any, depth: int) -> None:
    """The suite's folded Where chains are 27 deep; the F2 spelling must not multiply the nesting
    (a first version did: Tint said "maximum parser recursive depth reached")."""
    g = AluVar.gidx
    values = [(-1.0) ** i * (i % 5) * 0.5 for i in range(depth)]
    exp = AluExp.const(F32, values[-1])
    for i in range(depth - 2, -1, -1):
        cond = AluExp(AluOp.Cmplt, DType.bool, (g, AluExp.const(I32, i + 1)))
        exp = AluExp(AluOp.Where, F32, (cond, AluExp.const(F32, values[i]), exp))
    got, native = in_browser(browser, "webgpu", Kernel(0, depth, exp), [])
    assert np.frombuffer(got, np.float32).tolist() == np.array(values, np.float32).tolist()


# ---- the runner declares what an adapter cannot run ------------------------------------------
def test_webgpu_runner_declares_adapter_limits(browser: Any) -> None:
    """A kernel with more storage buffers than the browser's adapter allows is refused up front
    (SwiftShader: 10 per stage; lavapipe: 32), with the limit's name, not a validation error."""
    b = _backend("webgpu")
    have = (browser.info.get("webgpu") or {}).get("maxStorageBuffersPerShaderStage")
    n = min(b.max_args, 31)
    exp = _load(F32, 0, 4)
    for i in range(1, n):
        exp = AluExp(AluOp.Add, F32, (exp, _load(F32, i, 4)))
    from jaxcore_webgpu.export import export

    program = export(b, b.prepare_kernel(Kernel(n, 4, exp)))
    assert program["limits"]["maxStorageBuffersPerShaderStage"] == n + 1
    (r,) = harness.run_cases(browser, "webgpu", [_Case("webgpu", program, [b"\0" * 16] * n, [None])])
    if have is not None and n + 1 <= have:
        assert r["outputs"] is not None
    else:
        assert r["unsupported"] and "maxStorageBuffersPerShaderStage" in r["unsupported"], r
