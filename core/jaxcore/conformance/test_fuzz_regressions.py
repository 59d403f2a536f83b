"""Every mismatch the fuzzer (`test_fuzz`, `bench/fuzz.py`) found, minimised, kept as a fixed case;
and the contract points the fuzzer relies on: NaN bits of moved values, reassociable reductions.

Each case is a tree (unsimplified, as a frontend builds it) with its inputs; the expected value comes
from `test_fuzz.evaluate` (the oracle), never from a device. Every bug found is fixed, so every case
must pass on every device: none carries a mark.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend
from jaxcore.conformance import oracle
from jaxcore.conformance.harness import UNSUPPORTED, skip_if_undeclared
from jaxcore.conformance.test_fuzz import (
    Env,
    evaluate,
    run,
    unravel,
)
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.shape import ShapeTracker

I32, U32, F16, F32, F64, BOOL = (
    DType.int32,
    DType.uint32,
    DType.float16,
    DType.float32,
    DType.float64,
    DType.bool,
)


def read(dt: DType, gid: int, n: int, index: AluExp | None = None) -> AluExp:
    return AluExp.global_index(dt, gid, n, AluVar.gidx if index is None else index)


@dataclass(frozen=True)
class Regression:
    """A minimised elementwise finding: `tree` over `inputs` (gids in order), `size` lanes."""

    tree: Callable[[], AluExp]
    inputs: tuple[tuple[DType, tuple[float, ...]], ...]
    size: int
    bits: bool = False  # compare the output's bits (a moved value)


def u(*v: int) -> tuple[int, ...]:
    return v


def _mod3() -> AluExp:
    return AluExp.mod(AluVar.gidx, AluExp.i32(3))


# name -> the finding
CASES: dict[str, Regression] = {
    # -- wrap-around, as the probe found them
    "gidx_times_2p30_is_negative": Regression(
        lambda: AluExp.cmplt(AluVar.gidx * AluExp.i32(2**30), AluExp.i32(0)), (), 8
    ),
    "uint_gidx_minus_5_below_10": Regression(
        lambda: AluExp.cmplt(AluExp.cast(U32, AluVar.gidx) - AluExp.u32(5), AluExp.u32(10)), (), 8
    ),
    "in_bounds_index_folded_out_of_bounds": Regression(
        lambda: read(
            I32,
            0,
            5,
            AluExp.mod(
                AluExp.mod(AluExp.idiv(AluVar.gidx * AluExp.i32(2**29) + AluExp.i32(5), AluExp.i32(3)), 5)
                + AluExp.i32(5),
                AluExp.i32(5),
            ),
        ),
        ((I32, u(10, 11, 12, 13, 14)),),
        5,
    ),
    # -- wrap-around, as the fuzzer found them (minimised)
    "uint_zero_minus_x": Regression(
        lambda: AluExp.u32(0) - AluExp.cast(U32, read(I32, 0, 3)), ((I32, u(1, 5, -(2**31))),), 3
    ),
    "uint_zero_minus_where": Regression(
        lambda: AluExp.u32(0) - AluExp.where(read(BOOL, 0, 2), AluExp.u32(0), AluExp.u32(31)),
        ((BOOL, u(0, 1)),),
        2,
    ),
    "uint_add_near_2p32_mod_3": Regression(
        lambda: AluExp.mod(AluExp.cast(U32, read(F16, 0, 2)) + AluExp.u32(4294967292), AluExp.u32(3)),
        ((F16, (1.0, 6.0)),),
        2,
    ),
    "uint_max_of_wrapped_difference": Regression(
        lambda: AluExp.max(AluExp.u32(10), AluExp.u32(5) - AluExp.cast(U32, read(F16, 0, 3))),
        ((F16, (1.0, 6.0, 100.0)),),
        3,
    ),
    "uint_times_max_mod_5_bitcast": Regression(
        lambda: AluExp.bitcast(
            F32, AluExp.mod(AluExp.cast(U32, read(I32, 0, 3)) * AluExp.u32(4294967295), AluExp.u32(5))
        ),
        ((I32, u(5, 9, -7)),),
        3,
        bits=True,
    ),
    # ((2 * x[0]) % 12 + 12) % 12 is in bounds for any x[0]; 2 * 1218790790 wraps to negative.
    "wrapped_int_index": Regression(
        lambda: read(
            I32,
            0,
            12,
            AluExp.mod(
                AluExp.mod(AluExp.i32(2) * read(I32, 0, 12, AluExp.i32(0)), AluExp.i32(12)) + AluExp.i32(12),
                AluExp.i32(12),
            ),
        ),
        ((I32, u(1218790790, *range(1, 12))),),
        12,
    ),
    "gidx_plus_int_max_into_erfc": Regression(
        lambda: AluExp.erfc(AluExp.cast(F64, AluVar.gidx - AluExp.i32(-2147483647))),
        (),
        4,
    ),
    "compare_of_wrapped_uint_difference": Regression(
        lambda: AluExp.cmplt(
            AluExp.u32(0),
            AluExp.shr(AluExp.u32(2354268382), AluExp.u32(10))
            - AluExp.max(AluExp.u32(4294967295), AluExp.cast(U32, read(I32, 0, 2))),
        ),
        ((I32, u(3, -3)),),
        2,
    ),
    # -- NaN and Inf in the float range analysis
    "f16_inf_idiv_inf_is_nan": Regression(
        lambda: AluExp.idiv(AluExp.cast(F16, read(U32, 0, 2)), AluExp.f16(math.inf)),
        ((U32, u(4000000000, 7)),),
        2,
    ),
    "min_of_nan_mod_and_constant": Regression(
        lambda: AluExp.min(AluExp.mod(AluExp.cast(F16, read(U32, 0, 2)), AluExp.f16(2.5)), AluExp.f16(-3)),
        ((U32, u(4000000000, 7)),),
        2,
    ),
    # -- constant folding of casts
    "f16_cast_of_large_constant_is_inf": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(read(F64, 0, 1), read(F64, 0, 1)),
            AluExp.cast(F32, AluExp.cast(F16, AluExp.i32(1836024908))),
            AluExp.cast(F32, AluExp.cast(F16, AluExp.i32(1836024908))),
        ),
        ((F64, (1.0,)),),
        1,
    ),
    # -0.5 / 0.1 in float32 is -4.99999992549 rounded to -5.0, so the truncation is -5, not -4
    "where_of_f32_constant_idiv": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(read(F32, 0, 1), read(F32, 0, 1)),
            AluExp.idiv(AluExp.f32(-0.5), AluExp.f32(0.1)),
            AluExp.idiv(AluExp.f32(-0.5), AluExp.f32(0.1)),
        ),
        ((F32, (0.0,)),),
        1,
    ),
    "nan_or_inf_times_zero": Regression(
        lambda: AluExp.max(AluExp.f16(-1e-6), AluExp.cast(F16, read(F64, 0, 3))) * AluExp.f16(0),
        ((F64, (1e10, 2.0, math.nan)),),
        3,
    ),
    "exp_of_inf_mod_tiny": Regression(
        lambda: AluExp.exp(AluExp.mod(AluExp.cast(F32, read(F16, 0, 3)), AluExp.f32(1.1754943508222875e-38))),
        ((F16, (math.inf, 1.0, math.nan)),),
        3,
    ),
    # (4294967040 * x) / 2749491462 was rewritten as (x * 715827840) / 458248577: not under wrap
    "uint_product_quotient_rescaled": Regression(
        lambda: AluExp.idiv(
            AluExp.u32(4294967040) * AluExp.cast(U32, read(I32, 0, 3)), AluExp.u32(2749491462)
        ),
        ((I32, u(638100545, 2079855905, -7)),),
        3,
    ),
    # -- float ranges: NaN hides in a "zero", and ranges round to the node's dtype
    # Inf * 0 is NaN, and NaN is true as a bool: a float range of [0, 0] may still be NaN
    "bool_of_times_zero_is_nan_at_inf": Regression(
        lambda: AluExp.cast(BOOL, read(F32, 0, 4) * AluExp.f32(0)),
        ((F32, (math.inf, 1.0, math.nan, -math.inf)),),
        4,
    ),
    # float32(2^31 - 1) is 2^31, and fmod(2^31, 2^31) is 0: x % 2^31 is not x
    "f32_cast_of_int_max_mod_2p31": Regression(
        lambda: AluExp.mod(AluExp.cast(F32, AluExp.max(read(I32, 0, 3), AluExp.i32(0))), AluExp.f32(2.0**31)),
        ((I32, u(2**31 - 1, 5, 0)),),
        3,
    ),
    # float32(2^24 + 3) is 2^24 + 4, so its int32 cast is not below 2^24 + 4
    "f32_rounds_up_past_an_int_compare": Regression(
        lambda: AluExp.cmplt(
            AluExp.cast(I32, AluExp.cast(F32, AluExp.min(read(I32, 0, 2), AluExp.i32(2**24 + 3)))),
            AluExp.i32(2**24 + 4),
        ),
        ((I32, u(2**24 + 3, 0)),),
        2,
    ),
    # -0.5 / 0.1 is -5.0 in float32: its truncation is -5, below -4
    "f32_quotient_range_truncates_the_rounded_quotient": Regression(
        lambda: AluExp.cmplt(
            AluExp.cast(
                I32,
                AluExp.idiv(
                    AluExp.f32(-0.5),
                    AluExp.max(AluExp.min(read(F32, 0, 2), AluExp.f32(0.1)), AluExp.f32(0.1)),
                ),
            ),
            AluExp.i32(-4),
        ),
        ((F32, (0.0, 1.0)),),
        2,
    ),
    # -- constants that are not finite
    # (found packed in a batch: the kernel must be wide enough to take the vectorised path)
    "bool_of_f16_idiv_by_inf_constant": Regression(
        lambda: AluExp.cast(
            BOOL,
            AluExp.idiv(
                AluExp.cast(F16, read(I32, 0, 4, AluExp.mod(AluVar.gidx, AluExp.i32(4)))),
                AluExp.f16(math.inf),
            ),
        ),
        ((I32, u(3, -70000, 1, 2)),),
        32,
    ),
    "bool_of_f16_mod_by_inf_constant": Regression(
        lambda: AluExp.cast(
            BOOL,
            AluExp.mod(
                AluExp.cast(F16, read(F64, 0, 4, AluExp.mod(AluVar.gidx, AluExp.i32(4)))),
                AluExp.f16(math.inf),
            ),
        ),
        ((F64, (3.0, 1e10, -0.0, math.inf)),),
        32,
    ),
    "f32_idiv_by_nan_constant": Regression(
        lambda: AluExp.idiv(AluExp.cast(F32, AluExp.mod(AluVar.gidx, AluExp.i32(13))), AluExp.f32(math.nan)),
        (),
        32,
    ),
    # -- fuzzed on an NVIDIA H200 (Vulkan, driver 580): compilers that assume finite math
    "f64_select_of_x_times_zero_over_x": Regression(
        lambda: AluExp.idiv(
            AluExp.where(read(BOOL, 1, 4), read(F64, 0, 4), read(F64, 0, 4)) * AluExp.f64(0.0),
            read(F64, 0, 4),
        ),
        ((F64, (math.inf, -math.inf, 0.0, math.nan)), (BOOL, u(1, 0, 1, 0))),
        4,
    ),
    "f16_of_a_tiny_float32_times_nan": Regression(
        lambda: (
            AluExp.cast(F16, AluExp.bitcast(F32, AluExp.bit_and(AluExp.cast(I32, read(F32, 0, 3)), 31)))
            * AluExp.f16(math.nan)
        ),
        ((F32, (5.0, 31.0, 0.0)),),
        3,
    ),
    "f32_x_plus_x_overflows": Regression(
        lambda: read(F32, 0, 3) + read(F32, 0, 3), ((F32, (3.4028234663852886e38, -3e38, 2e38)),), 3
    ),
    "f64_sin_of_an_overflowed_product": Regression(
        lambda: AluExp.sin(AluExp.cast(F64, read(U32, 0, 3)) * AluExp.f64(-1.7976931348623157e308)),
        ((U32, u(2, 7, 1)),),
        3,
    ),
    # -- fuzzed on lavapipe (Mesa's NIR assumes finite math too)
    "f16_select_of_x_lt_x_times_nan": Regression(
        lambda: (
            AluExp.where(AluExp.cmplt(read(F32, 0, 3), read(F32, 0, 3)), AluExp.f16(1.0), AluExp.f16(0.0))
            * AluExp.cast(F16, read(F32, 0, 3))
        ),
        ((F32, (math.nan, math.inf, 2.0)),),
        3,
    ),
    # -- fuzzed on an NVIDIA H100 (Vulkan): only in kernels that also hold float64 work, a float32
    # quotient by a constant came back one ulp off; float64 divided by a constant in float32's
    # precision; a select of an infinity times 0 folded to 0
    "f32_div_by_a_constant_beside_float64_work": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(3)),
            AluExp.cast(F32, AluExp.cast(BOOL, AluExp.cast(F64, _mod3()) - AluExp.cast(F64, _mod3()))),
            AluExp(AluOp.Div, F32, (AluExp.cast(F32, read(I32, 0, 3, _mod3())), AluExp.f32(-1.5))),
        ),
        ((I32, u(-10, 10, 13)),),
        6,
    ),
    # -- the same GPU on 2026-12-06: a float32 quotient of two unknowns an ulp off beside float64
    # work (10 / 3 as 10 * (1 / 3)), and float64 sums reassociated around unknown operands
    "f32_div_beside_float64_work": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(3)),
            AluExp.cast(F32, AluExp.cast(F64, read(F32, 0, 3, _mod3()))),
            AluExp(AluOp.Div, F32, (read(F32, 0, 3, _mod3()), read(F32, 1, 3, _mod3()))),
        ),
        ((F32, (10.0, 65520.0, -7.0)), (F32, (3.0, 118.1, 0.3))),
        6,
    ),
    # open there: a float32 compare or min with a subnormal took it as 0 beside float64 work
    "f32_min_of_a_subnormal_beside_float64_work": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(4)),
            AluExp.min(read(F32, 0, 4, AluExp.mod(AluVar.gidx, AluExp.i32(4))), AluExp.f32(0.0))
            + AluExp.cast(
                F32, AluExp.cmplt(AluExp.f32(0.0), read(F32, 0, 4, AluExp.mod(AluVar.gidx, AluExp.i32(4))))
            ),
            AluExp.cast(
                F32,
                AluExp.cast(F64, read(F32, 1, 4, AluExp.mod(AluVar.gidx, AluExp.i32(4)))) * AluExp.f64(2.0),
            ),
        ),
        ((F32, (1e-45, 9.99e-41, -1e-40, 3.0)), (F32, (1.0, 2.0, 3.0, 4.0))),
        8,
    ),
    # NVIDIA (H100, 2026-12-07): beside float64 work, `0 + x` gave 0 for a subnormal x read from a
    # buffer (the exact add's fast-path bit tests, turned into float compares that flush)
    "f32_sum_with_a_subnormal_beside_float64_work": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(3)),
            AluExp.cast(F32, read(F64, 1, 3, _mod3())),
            AluExp(AluOp.Div, F32, (AluExp.f32(0.0), read(F32, 0, 3, _mod3()))) + read(F32, 0, 3, _mod3()),
        ),
        ((F32, (9.99994610111476e-41, -1e-45, 3.0)), (F64, (1e-40, 2.0, -0.0))),
        6,
        bits=True,
    ),
    # the same GPU: it knew `(u << 31) & 0x55555555` is 0 and made f64(that) / x zero where x = 0
    "f64_known_zero_bits_over_zero": Regression(
        lambda: AluExp(
            AluOp.Div,
            F64,
            (
                AluExp.cast(
                    F64,
                    AluExp.bit_and(
                        AluExp.shl(AluExp.cast(U32, read(F64, 0, 3, _mod3())), AluExp.u32(2147483647)),
                        AluExp.u32(0x55555555),
                    ),
                ),
                read(F64, 0, 3, _mod3()),
            ),
        ),
        ((F64, (0.0, 3.0, -0.0)),),
        6,
    ),
    # NVIDIA (H100, 2026-12-07): knowing g < 10 from its grid, the Vulkan driver made
    # x[min(g, 10)] / x[g] 1 (float64) where x = 0; the GL driver's compiler crashed (SIGSEGV) on
    # int(c - uint(x)) + x
    "f64_reads_of_one_buffer_it_proves_equal_divided": Regression(
        lambda: AluExp(
            AluOp.Div, F64, (read(F64, 0, 10, AluExp.min(AluVar.gidx, AluExp.i32(10))), read(F64, 0, 10))
        ),
        ((F64, (0.0, 1.0, math.inf, -math.inf, math.nan, -0.0, 5e-324, 2.0, 3.0, 0.0)),),
        10,
    ),
    "f64_reads_of_one_buffer_it_proves_equal_subtracted": Regression(
        lambda: AluExp(
            AluOp.Sub, F64, (read(F64, 0, 10, AluExp.min(AluVar.gidx, AluExp.i32(10))), read(F64, 0, 10))
        ),
        ((F64, (0.0, 1.0, math.inf, -math.inf, math.nan, -0.0, 5e-324, 2.0, 3.0, 0.0)),),
        10,
    ),
    "int_sum_cancelling_across_a_sign_cast": Regression(
        lambda: (
            AluExp.cast(I32, AluExp.u32(3102103486) - AluExp.cast(U32, read(I32, 0, 15, AluExp.i32(0))))
            + read(I32, 0, 15, AluExp.i32(0))
        ),
        ((I32, tuple(range(-7, 8))),),
        15,
    ),
    # lavapipe: in a kernel of one lane gidx << n is 0, and 0 * NaN became 0
    "f32_zero_shifted_times_nan": Regression(
        lambda: (
            AluExp.bitcast(
                F32, AluExp(AluOp.BitShift, I32, (AluVar.gidx, AluExp.cast(U32, read(BOOL, 0, 1))), "shl")
            )
            * AluExp.f32(math.nan)
        ),
        ((BOOL, u(1)),),
        1,
    ),
    # NVIDIA (H100): a Max reduction of f64(u32(b)) * f64(x) dropped the NaN of a lane with b false
    "f64_product_with_a_bool_through_casts": Regression(
        lambda: AluExp.cast(F64, AluExp.cast(U32, read(BOOL, 0, 4))) * AluExp.cast(F64, read(F32, 1, 4)),
        ((BOOL, u(0, 1, 0, 0)), (F32, (math.nan, math.nan, math.inf, 2.0))),
        4,
    ),
    # NVIDIA (H100): f64(max(u32(b), 0)) * f64(f16(big)) gave 0 where b was false: 0 * inf, NaN
    "f64_product_with_a_two_valued_integer": Regression(
        lambda: (
            AluExp.cast(F64, AluExp(AluOp.Max, U32, (AluExp.cast(U32, read(BOOL, 0, 4)), AluExp.u32(0))))
            * AluExp.cast(F64, AluExp.cast(F16, read(I32, 1, 4)))
        ),
        ((BOOL, u(0, 1, 0, 1)), (I32, u(100000, -100000, -7, 3))),
        4,
    ),
    "f64_difference_minus_an_unknown": Regression(
        lambda: (read(F64, 0, 3) - read(F64, 0, 3)) - AluExp.cast(F64, read(I32, 1, 3)),
        ((F64, (1e20, 3.0, -7.5e15)), (I32, u(-4, 7, 1))),
        3,
    ),
    "f64_difference_minus_a_quotient": Regression(
        lambda: (
            (AluExp.f64(1.0) - AluExp.cast(F64, AluVar.gidx))
            - AluExp(AluOp.Div, F64, (AluExp.cast(F64, AluVar.gidx), AluExp.f64(7.0)))
        ),
        (),
        10,
    ),
    "f64_div_by_a_constant": Regression(
        lambda: (read(F64, 0, 3) - read(F64, 0, 3)) - AluExp.idiv(read(F64, 0, 3), AluExp.f64(-2147483649.0)),
        ((F64, (1e20, 3.0, -7.5e15)),),
        3,
    ),
    "f64_select_of_infinity_times_zero": Regression(
        lambda: (
            AluExp.where(
                AluExp.cast(BOOL, read(I32, 0, 3)), AluExp.f64(math.inf), AluExp.cast(F64, read(I32, 0, 3))
            )
            * AluExp.f64(0.0)
        ),
        ((I32, u(1, -3, 0)),),
        3,
    ),
    # -- an integer a select tests, converted to float in its arm (NVIDIA, H100, 2026-12-07): the
    # driver took u as 0 there and made inf * 0 zero
    "f64_product_with_an_integer_its_select_tests": Regression(
        lambda: AluExp.where(
            AluExp.cast(BOOL, read(U32, 0, 4)).not_(),
            AluExp.cast(F64, read(F32, 1, 4)) * AluExp.cast(F64, read(U32, 0, 4)),
            AluExp.f64(0.0),
        ),
        ((U32, u(0, 0, 1, 0)), (F32, (math.inf, math.nan, 2.0, -math.inf))),
        4,
    ),
    "f32_product_with_an_integer_its_select_tests": Regression(
        lambda: AluExp.where(
            AluExp.cmpne(read(I32, 0, 4), AluExp.i32(0)).not_(),
            read(F32, 1, 4) * AluExp.cast(F32, read(I32, 0, 4)),
            AluExp.f32(1.0),
        ),
        ((I32, u(0, 0, 1, 0)), (F32, (math.inf, math.nan, 2.0, -math.inf))),
        4,
    ),
    # -- a float32 signalling NaN made from its bits (H100 and lavapipe, 2026-12-07): folded into a
    # float constant, it came out quiet (a Python float cannot hold it)
    "f32_signalling_nan_from_its_bits": Regression(
        lambda: AluExp.bitcast(F32, AluExp.u32(0xFFAB6E5F)), (), 3, bits=True
    ),
    "f32_signalling_nan_from_its_bits_in_a_select": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(2)),
            AluExp.bitcast(F32, AluExp.u32(0x7F800001)),
            AluExp.bitcast(F32, AluExp.i32(-0x7FFFFF)),  # 0xff800001
        ),
        (),
        4,
        bits=True,
    ),
    # -- what a compiler decides before it folds (lavapipe, fresh seeds on 2026-12-06): a select of
    # one value, and an integer or bool compared with itself
    "f16_of_a_select_of_one_value_minus_itself": Regression(
        lambda: (
            AluExp.cast(
                F16, AluExp.where(AluExp.cast(BOOL, read(I32, 0, 4)), read(I32, 0, 4), read(I32, 0, 4))
            )
            - AluExp.cast(F16, read(I32, 0, 4))
        ),
        ((I32, u(0, 5, 70000, -70000)),),
        4,
    ),
    "bitcast_of_an_or_with_itself_minus_its_value": Regression(
        lambda: (
            AluExp.bitcast(F32, AluExp.bit_or(read(I32, 0, 4), read(I32, 0, 4)))
            - AluExp.bitcast(F32, read(I32, 0, 4))
        ),
        ((I32, u(-9, 2147483647, 1065353216, 0)),),
        4,
    ),
    # lavapipe: the two bitcast chains are one value to Mesa, and x - x became 0 for a NaN x
    "f32_through_two_bitcast_chains_minus_itself": Regression(
        lambda: (
            AluExp.bitcast(F32, AluExp.bitcast(I32, read(F32, 0, 4)))
            - AluExp.bitcast(F32, AluExp.bitcast(U32, read(F32, 0, 4)))
        ),
        ((F32, (math.nan, math.inf, 1.0, -0.0)),),
        4,
    ),
    # lavapipe: floor(f32(i) - 5) - f32(i) gave -5 where f32(i) - 5 rounds (Mesa knows f32(i) is
    # whole, drops the floor and cancels f32(i))
    "floor_of_a_rounded_difference_minus_its_term": Regression(
        lambda: (
            AluExp.floor(AluExp.cast(F32, read(I32, 0, 4)) - AluExp.f32(5.0))
            - AluExp.cast(F32, read(I32, 0, 4))
        ),
        ((I32, u(2147483647, 100000000, 3, -2147483648)),),
        4,
    ),
    "bitcast_of_a_sign_cast_minus_the_bitcast": Regression(
        lambda: AluExp.bitcast(F32, AluExp.cast(I32, read(U32, 0, 4))) - AluExp.bitcast(F32, read(U32, 0, 4)),
        ((U32, u(0x7FC00000, 0xFFFFFFF7, 0x3F800000, 0)),),
        4,
    ),
    "select_by_a_bool_compared_with_itself": Regression(
        lambda: (
            (read(F64, 1, 4) - read(F64, 1, 4))
            - AluExp.where(
                AluExp.cmpne(AluExp.cast(BOOL, read(F64, 1, 4)), AluExp.cast(BOOL, read(F64, 1, 4))),
                AluExp.cast(F64, read(F16, 0, 4)),
                AluExp.f64(2.305221004784644e-5),
            )
        ),
        ((F16, (1.0, -2.0, 0.5, 3.0)), (F64, (1e20, -3e15, 7.5, 0.0))),
        4,
    ),
    "difference_plus_its_term": Regression(  # (x - o(x)) + o(x) rendered one opaque value twice
        lambda: (
            (AluExp.cast(F64, read(F16, 0, 4)) - AluExp.cast(F64, read(F16, 0, 4)))
            + AluExp.cast(F64, read(F16, 0, 4))
        ),
        ((F16, (math.inf, 1.0, -math.inf, 2.5)),),
        4,
    ),
    # -- NaN bits of a bitcast constant (a bitcast keeps its bits; the simplifier folds it to a Const
    # where a float can hold them)
    "bitcast_of_int_constant_keeps_nan_payload": Regression(
        lambda: AluExp.bitcast(F32, AluExp.i32(-9)), (), 3, bits=True
    ),
    "bitcast_of_uint_constant_keeps_nan_payload": Regression(
        lambda: AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(2)),
            AluExp.bitcast(F32, AluExp.u32(0x7FC0ABCD)),
            AluExp.bitcast(F32, AluExp.u32(0xFFC12345)),
        ),
        (),
        4,
        bits=True,
    ),
}


def _params() -> list[object]:
    return [pytest.param(name, id=name) for name in CASES]


@pytest.mark.parametrize("name", _params())
def test_fuzz_regression(backend: Backend, name: str) -> None:
    """A minimised fuzz finding computes what the oracle says for the unsimplified tree."""
    reg = CASES[name]
    tree = reg.tree()
    inputs = [oracle.array(list(vals), str(dt)) for dt, vals in reg.inputs]
    kernel = Kernel(len(inputs), reg.size, tree)
    skip_if_undeclared(backend, kernel)
    want = evaluate(tree, Env({"gidx": np.arange(reg.size, dtype=np.int32)}, inputs))
    got = run(backend, kernel, inputs)
    dt = str(kernel.dtype)
    st = oracle.storage(dt)
    if reg.bits or not oracle.is_float(dt):
        view = f"<u{st.itemsize}" if oracle.is_float(dt) else st
        ok = np.array_equal(got.view(view), np.asarray(want, st).view(view))
    else:
        g, w = got.astype(np.float64), np.asarray(want, st).astype(np.float64)
        close = np.isclose(g, w, rtol=1e-6 if dt != "float64" else 1e-12, atol=0.0, equal_nan=True)
        ok = bool(np.all(close | (g == w)))
    assert ok, f"{name} on {backend.name}: got {got.tolist()}, expected {want.tolist()}\n{tree}"


def test_fuzz_regression_reduction_with_wrapping_item(backend: Backend) -> None:
    """A Max reduction over (65536 + x) / 65536 in uint32: the sum wraps for x near 2^32."""
    x = oracle.array([4294967289, 2417530953, 0, 4278255360, 0, 1073741824, 4294967295, 4294967295], "uint32")
    item = AluExp.idiv(AluExp.u32(65536) + read(U32, 0, 8, AluVar.gidx * 4 + AluVar.ridx), AluExp.u32(65536))
    kernel = Kernel(1, 2, item, Reduction(U32, AluOp.Max, 4))
    skip_if_undeclared(backend, kernel)
    items = oracle.binary(
        "Idiv",
        oracle.binary("Add", np.full(8, 65536, np.uint32), x, "uint32"),
        np.full(8, 65536, np.uint32),
        "uint32",
    )
    want = oracle.reduce_rows("Max", items.reshape(2, 4), "uint32")
    got = run(backend, kernel, [x])
    assert np.array_equal(got, want), f"got {got.tolist()}, expected {want.tolist()}"


@pytest.mark.parametrize("op", [AluOp.Mul, AluOp.Min])
def test_reduction_whose_epilogue_ignores_acc(backend: Backend, op: AluOp) -> None:
    """A reduction whose epilogue never reads `acc` (fuzzed: `gidx * gidx + gidx`, `0`, `gidx != 0`)
    is its epilogue: NVIDIA's GLSL compiler crashed the process on the dead loop."""
    x = oracle.array([7, 3, 0, 9, 1, 5], "uint32")
    gidx = AluVar.gidx
    item = read(U32, 0, 6, gidx * 2 + AluVar.ridx)
    for epilogue, want in [
        (gidx * gidx + gidx, np.array([0, 2, 6], np.int32)),
        (AluExp.cmpne(gidx, AluExp.i32(0)), np.array([0, 1, 1], np.int32)),
    ]:
        kernel = Kernel(1, 3, item, Reduction(U32, op, 2, epilogue))
        skip_if_undeclared(backend, kernel)
        got = run(backend, kernel, [x])
        assert np.array_equal(got.astype(np.int64), want), f"{epilogue}: got {got.tolist()}"


def test_reductions_a_compiler_could_fold_away(backend: Backend) -> None:
    """`false && (acc != 0)`, `true || (acc != 0)` and a sum of items that read nothing (fuzzed:
    NVIDIA's GLSL compiler crashed the process on loops it found dead or constant); and a float16
    subnormal through a Max reduction and a cast (NVIDIA's packHalf2x16 flushed it to 0)."""
    x = oracle.array([7, 3, 0, 9, 1, 5], "uint32")
    item = read(U32, 0, 6, AluVar.gidx * 2 + AluVar.ridx)
    used = AluExp.cmpne(AluVar.acc(U32), AluExp.u32(0))
    for mode, const in (("and", False), ("or", True)):
        epilogue = AluExp(AluOp.BitCombine, BOOL, (AluExp.bool_(const), used), mode)
        kernel = Kernel(1, 3, item, Reduction(U32, AluOp.Min, 2, epilogue))
        skip_if_undeclared(backend, kernel)
        got = run(backend, kernel, [x])
        assert np.array_equal(got.astype(np.int64), np.full(3, int(const))), f"{mode}: got {got.tolist()}"
    ridx = AluExp.cast(I32, AluVar.ridx)
    kernel = Kernel(0, 4, ridx, Reduction(I32, AluOp.Add, 5, AluExp.cmpne(AluVar.acc(I32), AluExp.i32(0))))
    skip_if_undeclared(backend, kernel)
    assert run(backend, kernel, []).astype(np.int64).tolist() == [1, 1, 1, 1]
    tiny = 2.092123031616211e-05  # float16 0x015f, a subnormal
    cast = AluExp.cast(F16, AluExp.cast(F32, AluVar.acc(F16)))
    kernel = Kernel(0, 4, AluExp.f16(tiny), Reduction(F16, AluOp.Max, 8, cast))
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [])
    assert got.view("<u2").tolist() == [0x015F] * 4, f"got {got.tolist()}"


@pytest.mark.parametrize("dtype", [F32, F16])
def test_a_reduction_item_of_the_reduction_index_times_infinity(backend: Backend, dtype: DType) -> None:
    """A sum of bitcast(ridx) * -inf and a max of f16(ridx) * f16(huge) are NaN, from the item at
    ridx = 0 (fuzzed: lavapipe unrolled the short loop, knew that item's factor was 0 and folded
    0 * x to 0, giving -inf and inf)."""
    if dtype == F32:
        x = oracle.array([-math.inf], "float32")
        item = AluExp.bitcast(F32, AluVar.ridx) * read(F32, 0, 1, AluExp.i32(0))
        kernel = Kernel(1, 1, item, Reduction(F32, AluOp.Add, 3))
    else:
        x = oracle.array([4294967295], "uint32")
        item = AluExp.cast(F16, read(U32, 0, 1, AluExp.i32(0))) * AluExp.cast(F16, AluVar.ridx)
        kernel = Kernel(1, 4, item, Reduction(F16, AluOp.Max, 5))
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [x])
    assert np.isnan(got.astype(np.float64)).all(), f"got {got.tolist()}, expected NaN"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_sum_of_a_padded_read_divided_by_itself(backend: Backend, dtype: DType) -> None:
    """x / x over a view padded on both sides is 0 / 0 = NaN at the pads (fuzzed: lavapipe moved the
    division into the masked read's select and folded the padding's 0 / 0 to 0, float64)."""
    from jaxcore.shape import ShapeTracker

    st = ShapeTracker.from_shape([1]).pad([[1, 1]]).reshape([1, 3])
    v = AluExp.global_view(dtype, 0, st, [AluExp.i32(0), AluVar.ridx])
    kernel = Kernel(1, 1, AluExp(AluOp.Div, dtype, (v, v)), Reduction(dtype, AluOp.Add, 3))
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [oracle.array([2.5], str(dtype))])
    assert np.isnan(got.astype(np.float64)).all(), f"got {got.tolist()}, expected NaN"


@pytest.mark.parametrize("dtype", [F32, F64, F16])
def test_a_select_of_constants_keeps_the_sign_of_zero(backend: Backend, dtype: DType) -> None:
    """select(c, -0.0, 1.0), select(c, 1.0, -0.0), select(c, 0.0, -1.0) and chains of them move a
    zero: its sign stays (fuzzed: the simplifier made the second cast(c); lavapipe made the first the
    float of !c, +0.0, and the third -b2f(!c), -0.0)."""
    g, c = AluVar.gidx, AluExp.const
    first = AluExp.cmplt(g, AluExp.i32(2))
    for a, b in ((-0.0, 1.0), (1.0, -0.0), (-0.0, -3.0), (0.0, -1.0), (-1.0, 0.0)):
        inner = AluExp.where(AluExp.cmplt(g, AluExp.i32(4)), c(dtype, a), c(dtype, b))
        for exp in (inner, AluExp.where(first, c(dtype, 5.0), inner)):
            kernel = Kernel(0, 6, exp)
            skip_if_undeclared(backend, kernel)
            want = np.array([exp.evaluate({"gidx": i}) for i in range(6)], str(dtype))
            got = run(backend, kernel, [])
            assert got.tobytes() == want.tobytes(), f"{exp}: got {got.tolist()}, want {want.tolist()}"


# ---- NaN bits: moved values keep them; computed NaNs are only NaN ---------------------------------

NAN_PATTERNS = {
    "float32": [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFF812345, 0x7FC0ABCD],
    "float16": [0x7E00, 0xFE00, 0x7C01, 0x7DFF, 0xFD23],
    "float64": [
        0x7FF8000000000000,
        0xFFF8000000000000,
        0x7FF0000000000001,
        0x7FF7FFFFFFFFFFFF,
        0xFFF123456789ABCD,
    ],
}
_UINT = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}


def _nan_buffer(dt: str) -> np.ndarray:
    bits = np.array(NAN_PATTERNS[dt] + [0, 1 << (np.dtype(_UINT[dt]).itemsize * 8 - 1)], _UINT[dt])
    return bits.view(oracle.storage(dt))


@pytest.mark.parametrize("dt", ["float32", "float16", "float64"])
@pytest.mark.parametrize("how", ["copy", "view", "where"])
def test_stored_nan_bits_survive_moves(backend: Backend, dt: str, how: str) -> None:
    """A copy, a view read and a Where that selects a stored NaN write its exact bits (quiet and
    signalling, either sign, any payload); only arithmetic may change a NaN's bits."""
    x = _nan_buffer(dt)
    n = len(x)
    d = DType(dt)
    if how == "copy":
        exp = read(d, 0, n)
    elif how == "view":
        st = ShapeTracker.from_shape([n]).flip([True])
        exp = AluExp.global_view(d, 0, st, unravel([n], AluVar.gidx))
    else:
        exp = AluExp.where(AluExp.cmplt(AluVar.gidx, AluExp.i32(n)), read(d, 0, n), AluExp.const(d, 0))
    kernel = Kernel(1, n, exp)
    skip_if_undeclared(backend, kernel)
    want = x[::-1] if how == "view" else x
    got = run(backend, kernel, [x])
    ui = _UINT[dt]
    assert np.array_equal(got.view(ui), want.view(ui)), (
        f"{how} of stored {dt} NaNs on {backend.name}: got {[hex(int(v)) for v in got.view(ui)]}, "
        f"stored {[hex(int(v)) for v in want.view(ui)]}"
    )


# The NaN constants a Python float can hold: a float32 signalling NaN is quieted on its way to a
# float64 (by the hardware), so float32 constants are quiet ones; float16 and float64 keep all bits.
CONST_NAN_PATTERNS = {
    "float32": [0xFFFFFFF7, 0x7FC0ABCD, 0xFFC12345, 0x7FFFFFFF, 0xFFC00000],
    "float16": NAN_PATTERNS["float16"] + [0x7FFF, 0xFC01],
    "float64": NAN_PATTERNS["float64"],
}


@pytest.mark.parametrize("dt", ["float32", "float16", "float64"])
def test_nan_constants_keep_their_bits(backend: Backend, dt: str) -> None:
    """A NaN constant (one the frontend wrote, or a folded Bitcast of an integer) is written with
    its exact sign and payload, signalling bit included: it is a moved value, not a computed one."""
    d = DType(dt)
    bits = np.array(CONST_NAN_PATTERNS[dt], _UINT[dt])
    consts = [AluExp.const(d, float(v)) for v in bits.view(oracle.storage(dt))]
    exp = consts[-1]
    for i in range(len(consts) - 2, -1, -1):  # lane i selects constant i
        exp = AluExp.where(AluExp.cmpne(AluVar.gidx, AluExp.i32(i)), exp, consts[i])
    kernel = Kernel(0, len(bits), exp)
    skip_if_undeclared(backend, kernel)
    if d in backend.capabilities.inexact_nan_constants:
        pytest.skip(f"{UNSUPPORTED}: {dt} NaN constants are declared canonical (inexact_nan_constants)")
    got = run(backend, kernel, []).view(_UINT[dt])
    assert np.array_equal(got, bits), (
        f"{dt} NaN constants on {backend.name}: got {[hex(int(v)) for v in got]}, "
        f"want {[hex(int(v)) for v in bits]}"
    )


@pytest.mark.parametrize("how", ["copy", "where"])
def test_every_float16_bit_pattern_survives_a_move(backend: Backend, how: str) -> None:
    """A copy and a Where of each of the 65,536 float16 bit patterns (normals, subnormals, both
    zeros, infinities, every NaN) write the bits they read."""
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16)
    exp = read(F16, 0, len(x))
    if how == "where":
        exp = AluExp.where(AluExp.cmpne(AluVar.gidx, AluExp.i32(-1)), exp, AluExp.f16(1.0))
    kernel = Kernel(1, len(x), exp)
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [x]).view(np.uint16)
    bad = np.flatnonzero(got != bits)
    assert bad.size == 0, (
        f"{how} of float16 on {backend.name}: {bad.size} patterns changed, e.g. "
        f"{[(hex(int(bits[i])), hex(int(got[i]))) for i in bad[:6]]}"
    )


@pytest.mark.parametrize("direction", ["float_to_int", "int_to_float"])
def test_bitcast_keeps_nan_bits(backend: Backend, direction: str) -> None:
    """Bitcast float32 <-> int32/uint32 of a stored NaN is the identity on bits, both ways."""
    bits = np.array(NAN_PATTERNS["float32"] + [0x80000000, 0x00000001], np.uint32)
    if direction == "float_to_int":
        kernel = Kernel(1, len(bits), AluExp.bitcast(U32, read(F32, 0, len(bits))))
        inp: np.ndarray = bits.view(np.float32)
    else:
        kernel = Kernel(1, len(bits), AluExp.bitcast(F32, read(U32, 0, len(bits))))
        inp = bits
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [inp]).view(np.uint32)
    assert np.array_equal(got, bits), (
        f"{direction}: got {[hex(int(v)) for v in got]}, want {[hex(int(v)) for v in bits]}"
    )


def test_computed_nan_is_nan_whatever_its_bits(backend: Backend) -> None:
    """0/0, inf-inf, sqrt(-1) and NaN+1 are NaN; their sign and payload are the device's choice
    (the differential tests compare them with isnan only)."""
    x = np.array([0.0, math.inf, -1.0, math.nan], np.float32)
    exp = AluExp.where(
        AluExp.cmplt(AluVar.gidx, AluExp.i32(1)),
        AluExp.idiv(read(F32, 0, 4), read(F32, 0, 4)),
        AluExp.where(
            AluExp.cmplt(AluVar.gidx, AluExp.i32(2)),
            read(F32, 0, 4) - read(F32, 0, 4),
            AluExp.where(
                AluExp.cmplt(AluVar.gidx, AluExp.i32(3)), AluExp.sqrt(read(F32, 0, 4)), read(F32, 0, 4) + 1.0
            ),
        ),
    )
    kernel = Kernel(1, 4, exp)
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [x])
    assert np.isnan(got).all(), f"expected four NaNs, got {got.tolist()}"


# ---- reductions: what the order may change, and what it may not -----------------------------------


@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", [AluOp.Min, AluOp.Max])
def test_float_min_max_reductions_are_order_free(backend: Backend, dt: str, op: AluOp) -> None:
    """Min/Max reductions are exact whatever the order; one NaN anywhere in a row makes it NaN."""
    rows = [
        [3.0, -1.0, 7.0, 2.0, -5.0, 0.5, 9.0, -9.0],
        [math.nan, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, math.nan],
        [1.0, 2.0, 3.0, math.nan, 5.0, 6.0, math.inf, -math.inf],
        [math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0],
        [-0.0] * 8,
    ]
    x = oracle.array(np.array(rows).ravel(), dt)
    kernel = Kernel(
        1, len(rows), read(DType(dt), 0, x.size, AluVar.gidx * 8 + AluVar.ridx), Reduction(DType(dt), op, 8)
    )
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [x]).astype(np.float64)
    want = oracle.reduce_rows(str(op), x.reshape(len(rows), 8), dt).astype(np.float64)
    assert np.array_equal(got, want, equal_nan=True), (
        f"Reduce{op}<{dt}>: got {got.tolist()}, want {want.tolist()}"
    )


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_product_reduction_may_reassociate(backend: Backend, dt: str) -> None:
    """Products may be reassociated: exact in any order where no partial product over- or
    underflows; where one may (F32_MAX * F32_MAX * 0), a device may give the sequential result
    (0 * ... = NaN either way here) or any reassociated one, so only the order-free rows are pinned."""
    big = 3.4028234663852886e38 if dt == "float32" else 1.7976931348623157e308
    rows = [
        [2.0, 0.5, -2.0, 4.0, 0.25, -1.0, 8.0, 0.125],  # exact in any order: 1
        [0.0, math.inf, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # 0 * inf is NaN in any order
        [math.nan, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        [big, big, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # sequential: inf * 0 = NaN; reassociated: 0 or NaN
        [-0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    ]
    x = oracle.array(np.array(rows).ravel(), dt)
    d = DType(dt)
    kernel = Kernel(
        1, len(rows), read(d, 0, x.size, AluVar.gidx * 8 + AluVar.ridx), Reduction(d, AluOp.Mul, 8)
    )
    skip_if_undeclared(backend, kernel)
    got = run(backend, kernel, [x]).astype(np.float64)
    assert got[0] == 2.0, got.tolist()
    assert math.isnan(got[1]) and math.isnan(got[2]), got.tolist()
    assert math.isnan(got[3]) or got[3] == 0.0, f"order-dependent row must be NaN or 0, got {got[3]}"
    assert got[4] == 0.0, got.tolist()
