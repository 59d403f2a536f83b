"""The bits of pi and 2/pi that exact trig argument reduction (Payne-Hanek) needs, made in Python
integers by Machin's formula, so no plugin carries a table of hex words to mistype."""

from __future__ import annotations

_GUARD = 64  # extra bits carried, then dropped: the result is exact but for an astronomically rare carry


def _atan_inv(n: int, one: int) -> int:
    """atan(1/n) in fixed point (`one` = 1.0), by its alternating series."""
    total, term, k = 0, one // n, 1
    while term:
        total += term // k if k % 4 == 1 else -(term // k)
        term //= n * n
        k += 2
    return total


def pi_fixed(bits: int) -> int:
    """floor(pi * 2**bits)."""
    one = 1 << (bits + _GUARD)
    return (16 * _atan_inv(5, one) - 4 * _atan_inv(239, one)) >> _GUARD


def two_over_pi_chunks(count: int, width: int = 32) -> list[int]:
    """The first `count` `width`-bit chunks of the fraction of 2/pi, most significant first."""
    bits = width * count
    one = 1 << (bits + _GUARD)
    pi = 16 * _atan_inv(5, one) - 4 * _atan_inv(239, one)
    frac = ((2 * one * one) // pi) >> _GUARD
    mask = (1 << width) - 1
    return [(frac >> (width * (count - 1 - i))) & mask for i in range(count)]


__all__ = ["pi_fixed", "two_over_pi_chunks"]
