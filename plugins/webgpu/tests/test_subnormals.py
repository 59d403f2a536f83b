"""float32 subnormals: the device is asked whether it keeps them (WGSL lets it flush them), its
kernels take the exact spelling only when it does not, and exported programs always take it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jaxcore_webgpu import codegen
from jaxcore_webgpu.device import keeps_subnormals

from jaxcore import conformance, settings
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel

F32 = DType.float32
X = np.array([1e-40, -1e-40, 1.4e-45, 1e-38, 2.0**-149, -3e-39, 1.5e-38, 1.0], np.float32)
Y = np.array([3e-39, 1e-40, -1.4e-45, -1.1e-38, 0.5, 2.0, -1.4e-38, 2.0**-140], np.float32)


def _mul_add(n: int) -> Kernel:
    x, y = (AluExp.global_index(F32, i, n, AluVar.gidx) for i in range(2))
    return Kernel(2, n, AluExp(AluOp.Add, F32, (AluExp(AluOp.Mul, F32, (x, y)), y)))


def test_the_target_follows_the_probe(gpu: Any) -> None:
    """Unless the setting says otherwise, the spelling is exact exactly when the device flushes."""
    if settings.current().plugin("webgpu").get("exact_subnormals"):
        pytest.skip("JAXCORE_WEBGPU_EXACT_SUBNORMALS is set")
    assert gpu.target.exact_subnormals == (not keeps_subnormals(gpu.device))


def test_native_and_exported_spellings(gpu: Any) -> None:
    """The device's code is plain float ops where it keeps subnormals; the export is exact anyway."""
    kernel = _mul_add(len(X))
    exe = gpu.prepare_kernel(kernel)
    native = "\n".join(exe.data.codes)
    assert ("jc_mul_f32" in native) == gpu.target.exact_subnormals
    shaders = "\n".join(gpu.export(exe)["shaders"])
    assert "jc_mul_f32(" in shaders and "jc_add_f32(" in shaders


@pytest.mark.parametrize("exact", [False, True])
def test_both_spellings_are_exact_here(gpu: Any, exact: bool) -> None:
    """On this device both spellings give numpy's bits for subnormal operands and results (the exact
    one through its slow path; on a flushing device only it would)."""
    if not exact and not keeps_subnormals(gpu.device):
        pytest.skip("this device flushes subnormals: only the exact spelling is")
    kernel = _mul_add(len(X))
    plan = gpu._plan(kernel, replace(gpu.target, exact_subnormals=exact))
    assert any("jc_mul_f32" in p.code for p in plan.passes) == exact
    exe = gpu.compile_plan(kernel, plan)
    slots = [gpu.malloc(a.nbytes, a.tobytes()) for a in (X, Y)]
    out = gpu.malloc(kernel.bytes)
    gpu.dispatch(exe, slots, [out])
    got = np.frombuffer(gpu.read(out), np.float32)
    for s in [*slots, out]:
        gpu.dec_ref(s)
    assert got.tobytes() == (X * Y + Y).tobytes(), got.tolist()


def test_the_probe_answers_for_a_device(gpu: Any) -> None:
    """A second probe on the same device agrees (the answer is the device's, not chance)."""
    assert keeps_subnormals(gpu.device) == keeps_subnormals(gpu.device)


def test_compiler_spellings_differ_only_in_float32_ops() -> None:
    """The switch touches float32 arithmetic only: an int32 kernel renders the same either way."""
    n = 8
    x = AluExp.global_index(DType.int32, 0, n, AluVar.gidx)
    k = Kernel(1, n, AluExp(AluOp.Add, DType.int32, (AluExp(AluOp.Mul, DType.int32, (x, x)), x)))
    plain = codegen.compile_kernel(k, codegen.WgslTarget(exact_subnormals=False))
    exact = codegen.compile_kernel(k, codegen.WgslTarget(exact_subnormals=True))
    assert [p.code for p in plain.passes] == [p.code for p in exact.passes]
    f = _mul_add(n)
    plain_f = codegen.compile_kernel(f, codegen.WgslTarget(exact_subnormals=False)).passes[0].code
    exact_f = codegen.compile_kernel(f, codegen.WgslTarget(exact_subnormals=True)).passes[0].code
    assert "jc_mul_f32" not in plain_f and "jc_mul_f32(" in exact_f


PLUGIN = Path(__file__).resolve().parents[1]


def test_conformance_areas_on_the_exact_spelling() -> None:
    """The suite's op, cast, reduction and differential areas with every kernel on the exact
    spelling (what exported programs run), on this device: its slow paths checked natively too."""
    env = dict(os.environ, JAXCORE_WEBGPU_EXACT_SUBNORMALS="1")
    areas = "test_ops or test_casts or test_reductions or test_differential"
    conformance.run_isolated("webgpu", ["--jaxcore-max-examples=20", "-x", "-k", areas], env, PLUGIN)
