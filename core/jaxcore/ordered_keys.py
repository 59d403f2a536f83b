"""float32 Min and Max reductions folded on ordered integer keys.

The contract's float max propagates NaN and keeps subnormals exact, so on a GPU each item costs a
chain of selects on the accumulator (and bit tests where the target flushes subnormals). Mapped to
a uint32 key that orders as the floats do (NaN past every number), the fold is one integer
max per item, exact on every target and foldable by subgroup ops; the epilogue maps the key back.
A NaN result's bits are the device's choice (README, NaN bits); a zero's sign is free (Min/Max
reductions)."""

from __future__ import annotations

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.softfloat import float_key

_SIGN, _ALL, _INF = 0x80000000, 0xFFFFFFFF, 0x7F800000


def _u(v: int) -> AluExp:
    return AluExp.const(DType.uint32, v)


def order_key(x: AluExp, nan_key: int) -> AluExp:
    """float32 `x` as a uint32 in float order: -inf < ... < -0 < +0 < ... < +inf; NaN is `nan_key`."""
    b = AluExp.bitcast(DType.uint32, x)
    is_nan = AluExp.cmplt(_u(_INF), AluExp.bit_and(b, _u(_SIGN - 1)))
    return AluExp.where(is_nan, _u(nan_key), float_key(b))


def from_key(k: AluExp) -> AluExp:
    """The float32 whose `order_key` is `k` (a NaN key gives a NaN)."""
    bits = AluExp.where(
        AluExp.cmplt(k, _u(_SIGN)), AluExp.bit_xor(k, _u(_ALL)), AluExp.bit_and(k, _u(_SIGN - 1))
    )
    return AluExp.bitcast(DType.float32, bits)


def fold_on_keys(kernel: Kernel) -> Kernel:
    """`kernel` with a float32 Min or Max reduction over at least one item folded on keys; any
    other kernel as it is. The identities of uint32 Max and Min (0 and 2^32 - 1) are NaN keys,
    which every item's key passes (the NaN key of a Max is 2^32 - 1, of a Min 0)."""
    red = kernel.reduction
    if red is None or red.dtype != DType.float32 or red.op not in (AluOp.Max, AluOp.Min) or red.size < 1:
        return kernel
    nan_key = _ALL if red.op == AluOp.Max else 0
    epilogue = red.epilogue.substitute({"acc": from_key(AluVar.acc(DType.uint32))})
    reduction = Reduction(DType.uint32, red.op, red.size, epilogue)
    item = kernel.exp if kernel.exp.dtype == DType.float32 else AluExp.cast(DType.float32, kernel.exp)
    return Kernel(kernel.nargs, kernel.size, order_key(item, nan_key), reduction)


__all__ = ["fold_on_keys", "from_key", "order_key"]
