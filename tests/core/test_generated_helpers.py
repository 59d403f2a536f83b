"""The float32 transcendentals a dialect renders are generated from the core's expansions: a small C
dialect renders them, the system C compiler builds them, and every input gives bit for bit what the
reference interpreter computes from the same legalized tree (C on x86-64 rounds each float op once,
so any difference is the renderer's). Signed zeros come back signed."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp
from jaxcore.cstyle import TRANSCENDENTALS, CStyleLanguage, ExpRenderer, strip_parens, transcendental_helper
from jaxcore.dtype import DType
from jaxcore.expansions import expand_node
from jaxcore.interpret import Interpreter
from jaxcore.legalize import TargetTraits, legalize

F32 = DType.float32
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (apt-get install gcc)")

_PRELUDE = """
#include <math.h>
#include <stdint.h>
#include <string.h>
typedef int32_t i32;
typedef uint32_t u32;
static inline float as_f32(u32 x) { float f; memcpy(&f, &x, 4); return f; }
static inline u32 as_u32_f(float x) { u32 u; memcpy(&u, &x, 4); return u; }
"""


class C(CStyleLanguage):
    """float32, int32, uint32 and bool in C99; bitcasts through memcpy."""

    name = "c-test"
    type_map = {F32: "float", DType.int32: "i32", DType.uint32: "u32", DType.bool: "int"}
    code_for_op = {
        **CStyleLanguage.code_for_op,
        AluOp.Sqrt: lambda r, e, a: f"sqrtf({strip_parens(a[0])})",
        AluOp.Floor: lambda r, e, a: f"floorf({strip_parens(a[0])})",
        AluOp.Ceil: lambda r, e, a: f"ceilf({strip_parens(a[0])})",
        AluOp.Min: lambda r, e, a: f"fminf({strip_parens(a[0])}, {strip_parens(a[1])})",
        AluOp.Max: lambda r, e, a: f"fmaxf({strip_parens(a[0])}, {strip_parens(a[1])})",
        AluOp.Reciprocal: lambda r, e, a: f"(1.0f / {a[0]})",
    }

    def render_const(self, r: ExpRenderer, value: float | int, dtype: DType) -> str:
        if dtype == F32:
            bits = int(np.float32(value).view(np.uint32))
            return f"as_f32({bits}u)"
        if dtype == DType.uint32:
            return f"{int(value)}u"
        if dtype == DType.int32:
            return f"((i32){int(value)})"
        return "1" if value else "0"

    def render_cast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        return f"(({self.type_name(dst)}){x})"

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        if dst == F32:
            return f"as_f32((u32)({strip_parens(x)}))"
        inner = f"as_u32_f({strip_parens(x)})" if src == F32 else f"(u32)({strip_parens(x)})"
        return inner if dst == DType.uint32 else f"(i32){inner}"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    lang = C()
    names = [transcendental_helper(op, F32) for op in TRANSCENDENTALS]
    src = _PRELUDE + lang.render_helpers(names)
    d = tmp_path_factory.mktemp("helpers")
    (d / "h.c").write_text(src)
    assert CC is not None
    cmd = [
        CC,
        "-O2",
        "-fwrapv",
        "-ffp-contract=off",
        "-shared",
        "-fPIC",
        "-o",
        str(d / "h.so"),
        str(d / "h.c"),
    ]
    subprocess.run([*cmd, "-lm"], check=True)
    lib = ctypes.CDLL(str(Path(d / "h.so")))
    for n in names:
        getattr(lib, n).restype = ctypes.c_float
        getattr(lib, n).argtypes = [ctypes.c_float]
    return lib


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(3)
    special = [0.0, -0.0, 1e-40, -1e-40, 0.5, -0.5, 1.0, -1.0, 3.0, 8192.0, 1e30, -1e30, math.inf, -math.inf]
    wide = rng.standard_normal(400) * 10.0 ** rng.uniform(-8, 8, 400)
    return np.concatenate([special, wide, [math.nan]]).astype(np.float32)


@pytest.mark.parametrize("op", sorted(TRANSCENDENTALS, key=str))
def test_generated_helper_matches_the_reference_bit_for_bit(library: ctypes.CDLL, op: AluOp) -> None:
    x = _inputs()
    fn = getattr(library, transcendental_helper(op, F32))
    got = np.array([fn(float(v)) for v in x], np.float32)
    body = expand_node(AluExp(op, F32, (AluExp.variable(F32, "x"),)))
    assert body is not None
    tree = legalize(body, TargetTraits())
    with np.errstate(all="ignore"):
        want = np.asarray(Interpreter({"x": x}).run(tree), np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("op", [AluOp.Sin, AluOp.Atan, AluOp.Asin, AluOp.Erf])
def test_odd_functions_keep_the_sign_of_zero(library: ctypes.CDLL, op: AluOp) -> None:
    fn = getattr(library, transcendental_helper(op, F32))
    assert math.copysign(1.0, fn(-0.0)) == -1.0
    assert math.copysign(1.0, fn(0.0)) == 1.0


def test_float16_calls_the_float32_helper_through_casts() -> None:
    class C16(C):
        type_map = {**C.type_map, DType.float16: "half"}

    x = AluExp.variable(DType.float16, "h")
    r = ExpRenderer(C16())
    e = AluExp(AluOp.Exp, DType.float16, (x,))
    r.count(e)
    assert r.render(e) == "((half)jc_exp_f32((float)h))"
    assert r.used_helpers == {"jc_exp_f32"}


def test_float64_takes_the_dialect_helper_else_the_generated_one() -> None:
    from jaxcore.backend import UnsupportedOpError

    e = AluExp(AluOp.Sin, DType.float64, (AluExp.variable(DType.float64, "d"),))
    r = ExpRenderer(C())  # no float64 type: no float64 sin either
    r.count(e)
    with pytest.raises(UnsupportedOpError):
        r.render(e)

    class C64(C):
        type_map = {**C.type_map, DType.float64: "double"}

    lang = C64()
    r = ExpRenderer(lang)
    r.count(e)
    assert r.render(e) == "jc_sin_f64(d)"
    source = lang.render_helpers(r.used_helpers)
    assert "double jc_sin_f64(double x) {" in source and "sin(" not in source.replace("jc_sin", "")
    C64.helpers = {"jc_sin_f64": ("double jc_sin_f64(double x) { return sin(x); }", ())}
    assert C64().render_helpers(["jc_sin_f64"]).strip() == C64.helpers["jc_sin_f64"][0]


def test_a_dialect_table_entry_overrides_the_generated_helper() -> None:
    class Mine(C):
        helpers = {"jc_exp_f32": ("float jc_exp_f32(float x) { return expf(x); }", ())}

    assert Mine().helper_source("jc_exp_f32")[0].endswith("expf(x); }")
    assert "as_f32" in C().helper_source("jc_exp_f32")[0]
