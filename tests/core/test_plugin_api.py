"""The public namespaces: `jaxcore` for users, `jaxcore.plugin` (versioned by API_VERSION) for plugins.

Also pins that the backend-author reference covers the whole surface: every AluOp, routine, tolerance
entry and `jaxcore.plugin` name is documented in docs/backend-reference.md, so adding one without its
contract fails here.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np
import pytest

import jaxcore
import jaxcore.plugin as P
from jaxcore import scaffold
from jaxcore.conformance import tolerances

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "backend-reference.md").read_text()


def test_every_exported_name_exists_once() -> None:
    for module in (jaxcore, P):
        assert len(module.__all__) == len(set(module.__all__))
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{module.__name__} exports missing names {missing}"


def test_users_get_what_they_build_with() -> None:
    user = ["View", "ShapeTracker", "Routine", "RoutineType", "Routines", "ScatterOp", "ScatterParams"]
    user += ["TriangularSolveParams", "JacobiEighParams", "FftParams", "Kernel", "AluExp", "init"]
    for name in user:
        assert name in jaxcore.__all__, name
    routine = jaxcore.Routine.build(jaxcore.Routines.Sort, [(2, 3)], [jaxcore.DType.float32])
    assert routine.type.output_shapes == ((2, 3),)


def test_backend_authors_get_one_namespace() -> None:
    for name in ("BaseBackend", "Capabilities", "hookimpl", "RegisterDevice", "DeviceUnavailable",
                 "UnsupportedOpError", "tune_nullopt", "Interpreter", "run_routine", "lowering_digest",
                 "value_range", "API_VERSION"):  # fmt: skip
        assert name in P.__all__, name
    assert P.API_VERSION == jaxcore.API_VERSION and P.BaseBackend is jaxcore.BaseBackend
    assert re.fullmatch(r"[0-9a-f]{16,}", P.lowering_digest())


def test_reference_helpers_follow_the_contract() -> None:
    i32, u32, f32 = P.DType.int32, P.DType.uint32, P.DType.float32
    a = np.array([-7, 7, -7, P.INT32_MIN, 5], np.int32)
    b = np.array([2, -2, 0, -1, 0], np.int32)
    assert P.idiv(a, b, i32).tolist() == [-3, -3, 0, P.INT32_MIN, 0]
    assert P.mod(a, b, i32).tolist() == [-1, 1, 0, 0, 0]
    assert P.idiv(np.float32(-7.5), np.float32(2), f32) == -3.0
    x = np.array([np.nan, np.inf, -np.inf, -3.7, 3e9], np.float32)
    assert P.cast(x, f32, i32).tolist() == [0, P.INT32_MAX, P.INT32_MIN, -3, P.INT32_MAX]
    assert P.cast(x, f32, u32).tolist() == [0, P.UINT32_MAX, 0, 0, 3000000000]
    assert P.cast(x, f32, P.DType.bool).tolist() == [1, 1, 1, 1, 1]
    neg = np.array([-16], np.int32)
    assert P.bit_shift("shr", neg, np.array([34], np.int32), i32).tolist() == [-4]  # arithmetic, 34 mod 32
    assert P.bit_shift("shr", neg.view(np.uint32), np.array([2], np.uint32), u32).tolist() == [
        (2**32 - 16) >> 2
    ]
    assert (
        int(P.threefry2x32(0, 0, 0, 0, 0)) == 0x6B200159 and int(P.threefry2x32(0, 0, 0, 0, 1)) == 0x99BA4EFE
    )
    assert P.round_f16(np.float64(1 + 2**-11)) == 1.0 and math.isinf(P.round_f16(np.float64(65520.0)))
    assert P.round_f16(np.float64(1 + 2**-11 + 2**-30)) == np.float16(1 + 2**-10)  # one rounding, not two
    gidx = P.AluExp.special(P.DType.int32, "gidx", 10)
    assert P.value_range(gidx * 3 + 1) == (1, 28)


def _jaxcore_imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "jaxcore":
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "jaxcore"}
    return found


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "jaxcore-example-plugin" / "jaxcore_example").glob("*.py")), ids=str
)
def test_the_example_plugin_imports_only_the_public_api(path: Path) -> None:
    assert _jaxcore_imports(path.read_text()) <= {"jaxcore", "jaxcore.plugin"}


def test_the_scaffold_imports_only_jaxcore_plugin() -> None:
    for rel, text in scaffold.package_files("demo").items():
        if rel.startswith("jaxcore_demo/"):
            assert _jaxcore_imports(text) <= {"jaxcore.plugin"}, rel


def test_the_reference_documents_every_op_routine_and_tolerance() -> None:
    ops = {m.group(1) for m in re.finditer(r"`(\w+)`", REFERENCE)}
    assert not [op.value for op in P.AluOp if op.value not in ops]
    assert not [r.value for r in P.Routines if f"| `{r.value}` |" not in REFERENCE]
    for name, _dtype in tolerances.TABLE:
        assert name in REFERENCE, name
    for name in P.__all__:
        assert f"`{name}`" in REFERENCE or f"`{name}(" in REFERENCE, (
            f"jaxcore.plugin.{name} is not documented"
        )
    for field in ("exp", "epilogue", "output_idx_exp", "thread_count", "size"):
        assert f"| `{field}` |" in REFERENCE


def test_arith_takes_alu_ops_and_their_names() -> None:
    """`arith` takes the AluOp a backend holds in its IR, as well as the lowercase names."""
    a = np.array([-7, 7, P.INT32_MIN, 5], np.int32)
    b = np.array([2, -2, -1, 0], np.int32)
    ops = [(P.AluOp.Idiv, "idiv"), (P.AluOp.Mod, "mod"), (P.AluOp.Add, "add"), (P.AluOp.Max, "max")]
    for op, name in ops:
        assert P.arith(op, a, b, P.DType.int32).tolist() == P.arith(name, a, b, P.DType.int32).tolist(), op
    assert P.arith(P.AluOp.Idiv, a, b, P.DType.int32).tolist() == [-3, -3, P.INT32_MIN, 0]
    t, f = np.array([1, 1, 0], np.int32), np.array([1, 0, 0], np.int32)
    assert P.arith(P.AluOp.Add, t, f, P.DType.bool).tolist() == [1, 1, 0]  # bool Add is OR
    with pytest.raises(ValueError, match="unknown arithmetic op"):
        P.arith(P.AluOp.Sin, a, b, P.DType.int32)


def test_value_range_is_a_named_range_that_still_unpacks() -> None:
    gidx = P.AluExp.special(P.DType.int32, "gidx", 10)
    r = P.value_range(gidx * 3 + 1)
    assert isinstance(r, P.Range) and (r.lo, r.hi) == (1, 28)
    lo, hi = r
    assert (lo, hi) == (1, 28) and r[0] == 1 and r == (1, 28)


def _prose(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def test_the_reference_states_the_readmes_out_of_range_rule() -> None:
    """The README's rule for an unmasked out-of-range read is the contract (the suite pins it);
    section 7 of the reference says the same, and nowhere lets a backend raise instead."""
    readme = (ROOT / "README.md").read_text()
    rule = _prose(readme[readme.index("**Out-of-range reads.**") :].split("\n\n")[0])
    section = _prose(REFERENCE[REFERENCE.index("## 7. Reads") : REFERENCE.index("## 8. Reductions")])
    assert "may raise" not in section
    for phrase in (
        "0 or some element of the same buffer",
        "never returns another buffer's data",
        "never writes anything",
        "never crashes or raises",
        "every in-range lane is exact",
    ):
        assert phrase in rule, phrase
        assert phrase in section, phrase
