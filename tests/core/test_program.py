"""Statement programs: the strategies build the skeleton a serial target runs (a grid over outputs, a
reduction loop from the identity, the epilogue, the store), legalized for the target; a small C
dialect renders them whole, the system compiler builds them, and the values match numpy."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import UnsupportedOpError
from jaxcore.cstyle import CStyleLanguage, ExpRenderer, strip_parens
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.legalize import TargetTraits
from jaxcore.program import (
    Accumulate,
    CombineLoad,
    Define,
    FirstThread,
    GpuTarget,
    Grid,
    Let,
    Loop,
    Param,
    Program,
    Store,
    StorePartial,
    StridedLoop,
    ThreadIndex,
    VecLoad,
    VecStore,
    WorkgroupFold,
    WorkgroupIndex,
    build_passes,
    build_program,
    elementwise,
    gpu_strategies,
    reduce_per_output,
)
from jaxcore.shape import ShapeTracker
from jaxcore.tuner import TuneSize, tune_gpu, tune_nullopt

F32, I32, U32 = DType.float32, DType.int32, DType.uint32
CC = shutil.which("cc") or shutil.which("gcc")
TRAITS = TargetTraits(native_correct_division=True)


class C(CStyleLanguage):
    """float32, int32, uint32 and bool; inputs as typed pointers (every read here is in bounds)."""

    name = "c-program-test"
    type_map = {F32: "float", I32: "int32_t", U32: "uint32_t", DType.bool: "int32_t"}
    traits = TRAITS
    code_for_op = {
        **CStyleLanguage.code_for_op,
        AluOp.Min: lambda r, e, a: f"fminf({strip_parens(a[0])}, {strip_parens(a[1])})",
        AluOp.Max: lambda r, e, a: f"fmaxf({strip_parens(a[0])}, {strip_parens(a[1])})",
        AluOp.Floor: lambda r, e, a: f"floorf({strip_parens(a[0])})",
        AluOp.Ceil: lambda r, e, a: f"ceilf({strip_parens(a[0])})",
    }

    def render_const(self, r: ExpRenderer, value: float | int, dtype: DType) -> str:
        if dtype == F32:
            return f"as_f32({int(np.float32(value).view(np.uint32))}u)"
        return f"{int(value)}u" if dtype == U32 else f"((int32_t){int(value)})"

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        return f"(({self.type_name(dst)}){x})"

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        if dst == F32:
            return f"as_f32((uint32_t)({strip_parens(x)}))"
        inner = f"as_u32({strip_parens(x)})" if src == F32 else f"(uint32_t)({strip_parens(x)})"
        return inner if dst == U32 else f"(int32_t){inner}"

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        return f"in{e.arg[0]}[{strip_parens(idx)}]"

    def render_prelude(self) -> str:
        return (
            "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
            "static inline float as_f32(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }\n"
            "static inline uint32_t as_u32(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
        )

    def render_kernel(self, name: str, params: tuple[Param, ...], body: list[str]) -> str:
        args = ", ".join(f"{'' if p.output else 'const '}{self.type_name(p.dtype)}* {p.name}" for p in params)
        return "\n".join([f"void {name}({args}) {{", *(f"  {ln}" for ln in body), "}"])


def _run(program: Program, *inputs: np.ndarray, tmp: Path) -> np.ndarray:
    """Compile the program with cc and run it on `inputs`; the output as numpy."""
    if CC is None:
        pytest.skip("no C compiler (apt-get install gcc)")
    (tmp / "k.c").write_text(C().render_program(program))
    subprocess.run(
        [
            CC,
            "-O2",
            "-ffp-contract=off",
            "-shared",
            "-fPIC",
            "-o",
            str(tmp / "k.so"),
            str(tmp / "k.c"),
            "-lm",
        ],
        check=True,
    )
    out_param = program.params[-1]
    out = np.empty(out_param.elements, np.dtype(str(out_param.dtype).replace("bool", "int32")))
    fn = ctypes.CDLL(str(tmp / "k.so"))[program.name]
    fn(*(a.ctypes.data_as(ctypes.c_void_p) for a in (*inputs, out)))
    return out


def _read(gid: int, n: int, index: AluExp, dtype: DType = F32) -> AluExp:
    return AluExp.global_index(dtype, gid, n, index)


def test_elementwise_is_one_store_in_a_grid() -> None:
    k = Kernel(2, 8, _read(0, 8, AluVar.gidx) * _read(1, 8, AluVar.gidx))
    p = build_program(k, tune_nullopt(k), TRAITS)
    (grid,) = p.body
    assert isinstance(grid, Grid) and grid.var == "gidx" and grid.size == 8
    (store,) = grid.body
    assert isinstance(store, Store) and store.param == "out0"
    assert [(q.name, q.dtypes, q.elements, q.output) for q in p.params] == [
        ("in0", (F32,), 8, False),
        ("in1", (F32,), 8, False),
        ("out0", (F32,), 8, True),
    ]


def test_reduction_is_identity_loop_epilogue() -> None:
    red = Reduction(F32, AluOp.Min, 5, AluVar.acc(F32) + 1.0)
    k = Kernel(1, 3, _read(0, 15, AluVar.gidx * 5 + AluVar.ridx), red)
    p = build_program(k, tune_nullopt(k), TRAITS)
    (grid,) = p.body
    assert isinstance(grid, Grid)
    define, loop, store = grid.body
    assert isinstance(define, Define) and define.value == AluExp.const(F32, np.inf)
    assert isinstance(loop, Loop) and (loop.var, loop.size, loop.step) == ("ridx", 5, 1)
    let, acc = loop.body
    assert isinstance(let, Let) and isinstance(acc, Accumulate) and acc.op == AluOp.Min
    assert acc.value.op == AluOp.Where  # legalized: the NaN-propagating min
    assert isinstance(store, Store) and store.value.some(lambda e: e.op == AluOp.Variable and e.arg == "acc")


def test_strategies_apply_only_to_their_plans() -> None:
    k = Kernel(1, 4, _read(0, 4, AluVar.gidx))
    tune = tune_nullopt(k)
    assert reduce_per_output(k, tune, TRAITS, "k") is None
    grouped = dataclasses.replace(tune, size=TuneSize(groups=64, local=64))
    assert elementwise(k, grouped, TRAITS, "k") is None
    with pytest.raises(UnsupportedOpError, match="no strategy"):
        build_program(k, grouped, TRAITS)


def test_int_division_is_legalized_for_the_target() -> None:
    a, b = _read(0, 4, AluVar.gidx, I32), _read(1, 4, AluVar.gidx, I32)
    k = Kernel(2, 4, AluExp.idiv(a, b))
    (store,) = build_program(k, tune_nullopt(k), TRAITS).body[0].body  # type: ignore[union-attr]
    assert isinstance(store, Store) and store.value.op == AluOp.Where  # x / 0 and INT_MIN / -1 guarded
    native = TargetTraits(native_int_div_by_zero_is_zero=True, native_int_min_div_neg1=True)
    (store,) = build_program(k, tune_nullopt(k), native).body[0].body  # type: ignore[union-attr]
    assert isinstance(store, Store) and store.value.op == AluOp.Idiv


def test_helpers_are_emitted_once_before_the_entry_point() -> None:
    x = _read(0, 4, AluVar.gidx)
    k = Kernel(1, 4, AluExp(AluOp.Sin, F32, (x,)) + AluExp(AluOp.Sin, F32, (x * 2.0,)))
    text = C().render_program(build_program(k, tune_nullopt(k), TRAITS))
    assert text.count("float jc_sin_f32(float x) {") == 1
    assert text.index("jc_sin_f32(float x)") < text.index("void kernel(")


def test_elementwise_runs(tmp_path: Path) -> None:
    n = 37
    k = Kernel(3, n, _read(0, n, AluVar.gidx) * _read(1, n, AluVar.gidx) + _read(2, n, AluVar.gidx))
    a, b, c = (np.random.default_rng(i).standard_normal(n).astype(np.float32) for i in range(3))
    got = _run(build_program(k, tune_nullopt(k), TRAITS), a, b, c, tmp=tmp_path)
    np.testing.assert_array_equal(got, a * b + c)


def test_int_division_by_zero_runs_by_the_contract(tmp_path: Path) -> None:
    a = np.array([7, -7, -(2**31), 5, 0], np.int32)
    b = np.array([2, 2, -1, 0, 0], np.int32)
    k = Kernel(2, 5, AluExp.idiv(_read(0, 5, AluVar.gidx, I32), _read(1, 5, AluVar.gidx, I32)))
    got = _run(build_program(k, tune_nullopt(k), TRAITS), a, b, tmp=tmp_path)
    assert got.tolist() == [3, -3, -(2**31), 0, 0]


def test_reduction_with_epilogue_through_a_view_runs(tmp_path: Path) -> None:
    """Column max of a 6x4 matrix read through a permuted view, times 2 plus the column index."""
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    st = ShapeTracker.from_shape((6, 4)).permute((1, 0))
    item = AluExp.global_view(F32, 0, st, [AluVar.gidx, AluVar.ridx])
    epilogue = AluVar.acc(F32) * 2.0 + AluExp.cast(F32, AluVar.gidx)
    k = Kernel(1, 4, item, Reduction(F32, AluOp.Max, 6, epilogue))
    got = _run(build_program(k, tune_nullopt(k), TRAITS), x, tmp=tmp_path)
    np.testing.assert_array_equal(got, x.max(0) * 2 + np.arange(4, dtype=np.float32))


def test_unrolled_reduction_keeps_each_trip_on_the_new_accumulator(tmp_path: Path) -> None:
    """Two items a trip: the second fold must see the accumulator the first one wrote (a NaN from
    the first item of a trip propagates), so the combine's nodes are never shared across folds."""
    n, r = 4, 8
    x = np.arange(n * r, dtype=np.float32).reshape(n, r)
    x[1, 2] = np.nan  # first item of a trip
    x[2, 5] = np.nan  # second item of a trip
    k = Kernel(1, n, _read(0, n * r, AluVar.gidx * r + AluVar.ridx), Reduction(F32, AluOp.Max, r))
    tune = tune_gpu(k)
    assert tune.size.groups == 1 and tune.size.unroll == 4
    p = build_program(k, tune, TRAITS)
    loop = p.body[0].body[1]  # type: ignore[union-attr]
    assert isinstance(loop, Loop) and loop.step == 4 and len(loop.body) == 8
    got = _run(p, x, tmp=tmp_path)
    np.testing.assert_array_equal(got, x.max(1))


def test_a_hand_built_program_with_a_let_runs(tmp_path: Path) -> None:
    """The IR is usable without a strategy: a Let read back as a Variable, int32 and uint32 params."""
    gidx = AluExp.special(I32, "gidx", 6)
    a = AluExp.global_index(I32, 0, 6, gidx)
    sq = AluExp.variable(I32, "sq")
    body = (Let("sq", a * a), Store("out0", gidx, AluExp.cast(U32, sq + sq)))
    params = (Param("in0", 0, (I32,), 6), Param("out0", 0, (U32,), 6, output=True))
    p = Program("squares", params, (Grid("gidx", 6, body),))
    assert "int32_t sq = " in C().render_program(p)
    got = _run(p, np.arange(-3, 3, dtype=np.int32), tmp=tmp_path)
    assert got.tolist() == [18, 8, 2, 0, 2, 8]


# ---- GPU strategies: the statements, device-neutral (webgpu's WGSL renders them; its tests run it)


def _gpu(k: Kernel, **limits: int) -> tuple[Program, ...]:
    from jaxcore.tuner import GpuLimits

    return build_passes(k, tune_gpu(k, GpuLimits(**limits)), TRAITS, gpu_strategies(GpuTarget()))


def test_contiguous_map_is_vec4_lanes() -> None:
    k = Kernel(2, 1024, _read(0, 1024, AluVar.gidx) * _read(1, 1024, AluVar.gidx))
    (p,) = _gpu(k)
    index, *loads, store = p.body
    assert isinstance(index, ThreadIndex) and (index.var, index.size) == ("jc_q", 256)
    assert [ld.param for ld in loads if isinstance(ld, VecLoad)] == ["in0", "in1"]
    assert isinstance(store, VecStore) and len(store.values) == 4
    assert [q.lanes for q in p.params] == [4, 4, 4] and p.grid == (1, 1, 1) and p.local == 256


def test_strided_map_is_one_thread_per_output() -> None:
    k = Kernel(1, 6, _read(0, 12, AluVar.gidx * 2))
    (p,) = _gpu(k)
    assert [type(s) for s in p.body] == [ThreadIndex, Store] and all(q.lanes == 1 for q in p.params)


def test_row_reduction_folds_across_the_workgroup() -> None:
    k = Kernel(1, 4, _read(0, 4096, AluVar.gidx * 1024 + AluVar.ridx), Reduction(F32, AluOp.Max, 1024))
    (p,) = _gpu(k)
    assert [type(s) for s in p.body] == [WorkgroupIndex, Define, StridedLoop, WorkgroupFold, FirstThread]
    fold = p.body[3]
    assert isinstance(fold, WorkgroupFold) and fold.threads == p.local and not fold.subgroups
    assert [a.size for a in p.locals] == [p.local] and [f.name for f in p.functions] == ["jc_combine"]
    loop = p.body[2]
    assert isinstance(loop, StridedLoop) and loop.var == "jc_j"  # whole vec4s of the row


def test_full_sum_is_two_passes_through_scratch() -> None:
    n = 1 << 22
    k = Kernel(1, 1, _read(0, n, AluVar.ridx), Reduction(F32, AluOp.Add, n))
    first, second = _gpu(k)
    (scratch,) = [q for q in first.params if q.scratch]
    assert scratch in second.params and isinstance(first.body[-1], StorePartial)
    assert any(isinstance(s, CombineLoad) for s in second.statements())
    with pytest.raises(UnsupportedOpError, match="2 passes"):
        build_program(k, tune_gpu(k), TRAITS, gpu_strategies(GpuTarget()))
