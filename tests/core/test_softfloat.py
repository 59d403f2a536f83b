"""jaxcore.softfloat: the float32 helpers of a target that flushes subnormals are exact.

The helpers are rendered by the example C dialect and built by the system C compiler; the kernels
set the x86 flush-to-zero and denormals-are-zero modes, so every native float op in them flushes
as a GPU's may, and each helper must still give numpy's result to the bit.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from jaxcore import softfloat

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "jaxcore-c-plugin"))
from jaxcore_c.dialect import C_TRAITS, CLanguage  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (apt-get install gcc)")
X86 = platform.machine().lower() in ("x86_64", "amd64")
FLUSH = "unsigned jc_csr = _mm_getcsr(); _mm_setcsr(jc_csr | 0x8040u);" if X86 else ""
RESTORE = "_mm_setcsr(jc_csr);" if X86 else ""

BINARY = ("jc_add_f32", "jc_sub_f32", "jc_mul_f32", "jc_fmod_f32", "jc_lt_f32", "jc_ne_f32")
BINARY += ("jc_min_f32", "jc_max_f32")
UNARY = ("jc_rcp_f32", "jc_floor_f32", "jc_ceil_f32", "jc_sqrt_f32")
CASTS = {"jc_f64_f32": ("float", "double"), "jc_f32_f64": ("double", "float")}
NATIVE = {"native_mul": "a[i] * b[i]", "native_add": "a[i] + b[i]"}


def _source() -> str:
    lang = CLanguage(replace(C_TRAITS, flushes_subnormals=True))
    out = ["#include <math.h>", "#include <stdint.h>", "#include <string.h>"]
    out += ["#include <xmmintrin.h>"] if X86 else []
    out.append(lang.render_helpers(BINARY + UNARY + tuple(CASTS)))
    for name in BINARY:
        ret = "int32_t" if name in ("jc_lt_f32", "jc_ne_f32") else "float"
        out.append(
            f"void run_{name}(const float* a, const float* b, {ret}* o, int n) {{ {FLUSH}\n"
            f"  for (int i = 0; i < n; i++) o[i] = {name}(a[i], b[i]);\n  {RESTORE} }}"
        )
    for name in UNARY:
        out.append(
            f"void run_{name}(const float* a, const float* b, float* o, int n) {{ {FLUSH}\n"
            f"  for (int i = 0; i < n; i++) o[i] = {name}(a[i]);\n  {RESTORE} }}"
        )
    for name, (src, dst) in CASTS.items():
        out.append(
            f"void run_{name}(const {src}* a, {dst}* o, int n) {{ {FLUSH}\n"
            f"  for (int i = 0; i < n; i++) o[i] = {name}(a[i]);\n  {RESTORE} }}"
        )
        out.append(
            f"void run_native_{name}(const {src}* a, {dst}* o, int n) {{ {FLUSH}\n"
            f"  for (int i = 0; i < n; i++) o[i] = ({dst})a[i];\n  {RESTORE} }}"
        )
    for name, expr in NATIVE.items():
        out.append(
            f"void run_{name}(const float* a, const float* b, float* o, int n) {{ {FLUSH}\n"
            f"  for (int i = 0; i < n; i++) o[i] = {expr};\n  {RESTORE} }}"
        )
    return "\n".join(out)


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    d = tmp_path_factory.mktemp("softfloat")
    (d / "sf.c").write_text(_source())
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-o", str(d / "sf.so"), str(d / "sf.c")]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(d / "sf.so"))


def _values() -> np.ndarray:
    """Specials, subnormals of every size, the normal boundary, and random bit patterns."""
    bits = [0, 1, 2, 3, 0x7FFFFF, 0x400000, 0x800000, 0x800001, 0xFFFFFF, 0x1000000, 0x0D800000]
    bits += [0x0C800000, 0x3F800000, 0x3F800001, 0x40000000, 0x7F7FFFFF, 0x7F000000, 0x7F800000]
    bits += [0x7FC00000, 0x7F800001, 0x00000100, 0x00012345, 0x33800000, 0x34000000, 0x00700000]
    bits += [0x4B000000, 0x4B7FFFFF, 0x3EAAAAAB, 0x01000000, 0x00FFFFFF, 0x7E800000]
    both = np.array(bits + [b | 0x80000000 for b in bits], dtype=np.uint32)
    rng = np.random.default_rng(7)
    rand = rng.integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32)
    small = rng.integers(0, 0x01800000, 200, dtype=np.uint64).astype(np.uint32)  # near the subnormals
    small |= rng.integers(0, 2, 200, dtype=np.uint64).astype(np.uint32) << np.uint32(31)
    return np.concatenate([both, rand, small]).view(np.float32)


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    v = _values()
    a, b = np.meshgrid(v, v)
    return np.ascontiguousarray(a.ravel()), np.ascontiguousarray(b.ravel())


def _run(lib: ctypes.CDLL, name: str, a: np.ndarray, b: np.ndarray, out_dtype: type) -> np.ndarray:
    out = np.zeros(a.size, dtype=out_dtype)
    fn = getattr(lib, f"run_{name}")
    ptr = ctypes.c_void_p
    fn(ptr(a.ctypes.data), ptr(b.ctypes.data), ptr(out.ctypes.data), ctypes.c_int(a.size))
    return out


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Equal bits, or both NaN (a computed NaN's payload is the target's)."""
    return (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.skipif(not X86, reason="flush-to-zero is set through the x86 MXCSR")
def test_the_kernels_really_flush(lib: ctypes.CDLL) -> None:
    # the harness's native ops lose subnormals, so the helpers below run on a flushing target
    a, b = _pairs()
    with np.errstate(all="ignore"):
        assert not _same_bits(_run(lib, "native_mul", a, b, np.float32), a * b).all()
        assert not _same_bits(_run(lib, "native_add", a, b, np.float32), a + b).all()


@pytest.mark.parametrize(
    ("name", "ref"),
    [
        ("jc_add_f32", np.add),
        ("jc_sub_f32", np.subtract),
        ("jc_mul_f32", np.multiply),
        ("jc_fmod_f32", np.fmod),
    ],
)
def test_binary_arithmetic_is_exact(lib: ctypes.CDLL, name: str, ref: np.ufunc) -> None:
    a, b = _pairs()
    with np.errstate(all="ignore"):
        want = ref(a, b).astype(np.float32)
    got = _run(lib, name, a, b, np.float32)
    bad = ~_same_bits(got, want)
    assert not bad.any(), (name, a[bad][:5], b[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize(
    ("name", "ref"),
    [
        ("jc_rcp_f32", lambda x: np.float32(1) / x),
        ("jc_floor_f32", np.floor),
        ("jc_ceil_f32", np.ceil),
        ("jc_sqrt_f32", np.sqrt),
    ],
)
def test_unary_ops_are_exact(lib: ctypes.CDLL, name: str, ref: object) -> None:
    x = _values()
    with np.errstate(all="ignore"):
        want = ref(x).astype(np.float32)  # type: ignore[operator]
    got = _run(lib, name, x, x, np.float32)
    bad = ~_same_bits(got, want)
    assert not bad.any(), (name, x[bad][:5], got[bad][:5], want[bad][:5])


def test_comparisons_and_min_max_order_subnormals(lib: ctypes.CDLL) -> None:
    a, b = _pairs()
    assert (_run(lib, "jc_lt_f32", a, b, np.int32) == (a < b)).all()
    assert (_run(lib, "jc_ne_f32", a, b, np.int32) == (a != b)).all()
    for name, ref in (("jc_min_f32", np.minimum), ("jc_max_f32", np.maximum)):
        got, want = _run(lib, name, a, b, np.float32), ref(a, b)
        # NaN propagates; -0 and +0 are equal (either may come back)
        assert ((got == want) | (np.isnan(got) & np.isnan(want))).all(), name


def _doubles_near_the_subnormals() -> np.ndarray:
    """float64 values whose float32 is subnormal, zero or the least normal: random ones, exact
    midpoints between two subnormals (ties to even), specials."""
    rng = np.random.default_rng(11)
    x = rng.uniform(1, 2, 4000) * 2.0 ** rng.uniform(-155, -120, 4000)
    mid = (rng.integers(0, 2**23, 2000) + 0.5) * 2.0**-149
    special = [0.0, 2.0**-126, 2.0**-149, 2.0**-150, 3 * 2.0**-151, 2.0**-126 * (1 - 2**-25), 1e-320]
    special += [np.nan, np.inf, 1.5, 3e38, 1e300]
    x = np.concatenate([x, mid, special])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("name", ["jc_f64_f32", "jc_f32_f64"])
def test_float32_float64_casts_keep_subnormals(lib: ctypes.CDLL, name: str) -> None:
    # a flushing target's conversion loses them (NVIDIA's did, in kernels holding float64 work)
    wide = name == "jc_f32_f64"
    x = _doubles_near_the_subnormals() if wide else _values()
    out_dtype = np.float32 if wide else np.float64
    with np.errstate(all="ignore"):
        want = x.astype(out_dtype)
    ptr = ctypes.c_void_p

    def run(fn: str) -> np.ndarray:
        out = np.zeros(x.size, dtype=out_dtype)
        getattr(lib, fn)(ptr(x.ctypes.data), ptr(out.ctypes.data), ctypes.c_int(x.size))
        return out

    same = lambda g: (g == want) & (np.signbit(g) == np.signbit(want)) | (np.isnan(g) & np.isnan(want))  # noqa: E731
    if X86:
        assert not same(run(f"run_native_{name}")).all()
    got = run(f"run_{name}")
    bad = ~same(got)
    assert not bad.any(), (name, x[bad][:5], got[bad][:5], want[bad][:5])


def test_helper_for_spells_only_what_may_flush() -> None:
    from jaxcore.alu import NORMAL_RANGE, AluExp, AluOp
    from jaxcore.dtype import DType

    x, y = AluExp.variable(DType.float32, "x"), AluExp.variable(DType.float32, "y")
    assert softfloat.helper_for(x * y) == "jc_mul_f32"
    assert softfloat.helper_for(AluExp(AluOp.Mul, DType.float32, (x, y), NORMAL_RANGE)) is None
    assert softfloat.helper_for(AluExp.cmplt(x, AluExp.f32(0.5))) is None  # a normal constant
    assert softfloat.helper_for(AluExp.cmplt(x, AluExp.f32(0.0))) == "jc_lt_f32"
    i = AluExp.variable(DType.int32, "i")
    assert softfloat.helper_for(i * i) is None
