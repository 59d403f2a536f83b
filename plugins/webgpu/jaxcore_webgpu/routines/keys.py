"""The u32 keys Sort and Argsort order: a value's key, and the value of a key.

Unsigned order of the keys is the contract's order: integers with the sign bit flipped, floats
sign-magnitude flipped with every NaN the largest key. Sort keeps -0 below +0; Argsort folds -0
into +0 (`fold_zero`), so that they tie and keep their input order.
"""

from __future__ import annotations

from jaxcore.dtype import DType, is_float


def sort_key(dtype: DType, x: str, fold_zero: bool) -> tuple[str, str]:
    """WGSL of the u32 key of `x`, and the helper function it calls (or "")."""
    if dtype == DType.uint32:
        return x, ""
    if not is_float(dtype):
        return f"(bitcast<u32>({x}) ^ 0x80000000u)", ""
    f = f"f32({x})" if dtype == DType.float16 else x
    fz = "if ((b & 0x7fffffffu) == 0u) { b = 0u; }" if fold_zero else ""
    return (
        f"jc_key({f})",
        "fn jc_key(x: f32) -> u32 {\n  var b = bitcast<u32>(x);\n"
        f"  {fz}\n  if ((b & 0x7fffffffu) > 0x7f800000u) {{ return 0xffffffffu; }}\n"
        "  return select(b | 0x80000000u, ~b, b >= 0x80000000u);\n}\n",
    )


def sort_value(dtype: DType, k: str) -> str:
    """WGSL of the value whose key is `k` (Sort's keys keep -0; NaN comes back as the quiet NaN)."""
    if dtype == DType.uint32:
        return k
    if not is_float(dtype):
        return f"bitcast<i32>({k} ^ 0x80000000u)"
    bits = f"select(~{k}, {k} ^ 0x80000000u, {k} >= 0x80000000u)"
    v = f"bitcast<f32>({bits})"
    return f"f16({v})" if dtype == DType.float16 else v
