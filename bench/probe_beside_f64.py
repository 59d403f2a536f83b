"""Which float32 ops on subnormals a device gets wrong in a kernel that also computes float64.

NVIDIA's Vulkan driver (H100, driver 580) took a subnormal x as 0 in `0 < x` and `min(x, 0)` there,
and only there, though both were spelled on x's bits through the exact helpers (`jc_lt_f32`,
`jc_min_f32`, then with float32 parameters; they take uint32 bits since). The `inline` rows spell
the same bit tests in the kernel itself (no helper call): if only the helper rows fail, the
helper's call is still the culprit; if both fail, the bits of a float32 read are.

    python bench/probe_beside_f64.py [--device webgpu]
"""

from __future__ import annotations

import argparse

import numpy as np

import jaxcore
from jaxcore import AluExp, AluOp, AluVar, DType, Kernel
from jaxcore.conformance.test_fuzz import run
from jaxcore.softfloat import _lt_body, _minmax_body

F32, F64, U32 = DType.float32, DType.float64, DType.uint32
X = np.array([1e-45, 9.99e-41, -1e-40, 1.2e-38, 0.0, 3.0, -2e-39, 5e-42], np.float32)
N = len(X)


def _bodies(x: AluExp) -> dict[str, tuple[AluExp, np.ndarray]]:
    zero = AluExp.f32(0.0)
    return {
        "0 < x": (AluExp.cast(F32, AluExp.cmplt(zero, x)), (X > 0).astype(np.float32)),
        "0 < x inline": (AluExp.cast(F32, _lt_body(zero, x)), (X > 0).astype(np.float32)),
        "min(x, 0)": (AluExp.min(x, zero), np.minimum(X, 0)),
        "min(x, 0) inline": (_minmax_body(x, zero, True), np.minimum(X, 0)),
        "max(x, 0)": (AluExp.max(x, zero), np.maximum(X, 0)),
        "bits of x": (AluExp.bitcast(F32, AluExp.bitcast(U32, x) + AluExp.u32(0)), X),
        "x + x": (x + x, X + X),
        "x / 2": (AluExp(AluOp.Div, F32, (x, AluExp.f32(2.0))), X / np.float32(2)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="webgpu")
    backend = jaxcore.get_backend(p.parse_args().device)
    index = AluExp.mod(AluVar.gidx, AluExp.i32(N))
    x = AluExp.global_index(F32, 0, N, index)
    first = AluExp.cmplt(AluVar.gidx, AluExp.i32(N))
    wide = AluExp.cast(F32, AluExp.cast(F64, AluExp.global_index(F32, 1, N, index)) * AluExp.f64(2.0))
    print(f"{backend.name}: float32 subnormals alone and beside a float64 op (lanes wrong, values got)")
    for name, (body, want) in _bodies(x).items():
        for beside in (False, True):
            kernel = Kernel(2, 2 * N, AluExp.where(first, body, wide if beside else AluExp.f32(7.0)))
            try:
                got = run(backend, kernel, [X, np.ones(N, np.float32)]).view(np.float32)[:N]
            except Exception as exc:  # a device that refuses float64 says so; the row still prints
                print(f"  {name:18} {'beside' if beside else 'alone':6}  {type(exc).__name__}: {exc}")
                continue
            bad = np.flatnonzero(got.view(np.uint32) != want.astype(np.float32).view(np.uint32))
            result = "ok" if not bad.size else f"lanes {bad.tolist()} got {got[bad].tolist()}"
            print(f"  {name:18} {'beside' if beside else 'alone':6}  {result}")


if __name__ == "__main__":
    main()
