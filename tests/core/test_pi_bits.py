"""The bits of pi and 2/pi against their published hexadecimal expansions."""

from __future__ import annotations

import pytest

from jaxcore.pi_bits import pi_fixed, two_over_pi_chunks

PI_HEX = "3243F6A8885A308D313198A2E03707344A4093822299F31D0082EFA98EC4E6C89452821E638D0137"
TWO_OVER_PI_HEX = "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561B7246E3A424DD2E0"


@pytest.mark.parametrize("bits", [52, 128, 200, 314])
def test_pi_fixed_is_the_floor_of_pi_scaled(bits: int) -> None:
    want = int(PI_HEX, 16) >> (4 * (len(PI_HEX) - 1) - bits)
    assert pi_fixed(bits) == want


@pytest.mark.parametrize("width,count", [(32, 10), (24, 13), (16, 20)])
def test_two_over_pi_chunks_are_one_bit_string(width: int, count: int) -> None:
    bits = "".join(f"{c:0{width}b}" for c in two_over_pi_chunks(count, width))
    assert int(bits, 2) == int(TWO_OVER_PI_HEX, 16) >> (4 * len(TWO_OVER_PI_HEX) - width * count)
