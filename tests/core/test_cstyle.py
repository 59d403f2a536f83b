"""The C-style renderer is dialect-neutral: a ten-line C dialect renders a legalized kernel
expression, shared nodes become one declaration each, helpers come in dependency order."""

from __future__ import annotations

from jaxcore.alu import AluExp, AluOp
from jaxcore.cstyle import CStyleLanguage, ExpRenderer, strip_parens
from jaxcore.dtype import DType
from jaxcore.legalize import TargetTraits, legalize

F32, I32 = DType.float32, DType.int32


class C(CStyleLanguage):
    name = "c"
    type_map = {F32: "float", I32: "int", DType.uint32: "unsigned", DType.bool: "bool"}
    helpers = {"h_b": ("float h_b(float x) { return h_a(x); }", ("h_a",)), "h_a": ("float h_a(float x);", ())}

    def render_const(self, r: ExpRenderer, value, dtype: DType) -> str:
        return f"{value}f" if dtype == F32 else str(int(value))

    def render_bitcast(self, r: ExpRenderer, dst: DType, src: DType, x: str) -> str:
        return f"as_{self.type_name(dst)}({strip_parens(x)})"

    def render_load(self, r: ExpRenderer, e: AluExp, idx: str) -> str:
        return f"in{e.arg[0]}[{strip_parens(idx)}]"


def test_shared_nodes_become_one_declaration() -> None:
    x = AluExp.global_index(F32, 0, 10, AluExp.variable(I32, "i"))
    y = x * x + x
    r = ExpRenderer(C())
    r.count(y)
    text = r.render(y)
    assert r.lines == ["float alu1 = in0[i];"]
    assert text == "((alu1 * alu1) + alu1)"


def test_legalized_min_renders_with_bit_nan_tests() -> None:
    a, b = AluExp.variable(F32, "a"), AluExp.variable(F32, "b")
    e = legalize(AluExp(AluOp.Min, F32, (a, b)), TargetTraits())
    r = ExpRenderer(C())
    r.count(e)
    text = r.render(e)
    assert "as_unsigned(a)" in text and "min(a, b)" in text and "a != a" not in text


def test_helpers_in_dependency_order() -> None:
    assert C().helper_order(["h_b"]) == ["h_a", "h_b"]


def test_strip_parens_only_strips_an_enclosing_pair() -> None:
    assert strip_parens("(a + b)") == "a + b"
    assert strip_parens("(a) + (b)") == "(a) + (b)"
