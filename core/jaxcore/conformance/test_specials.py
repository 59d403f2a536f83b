"""NaN, infinities and signed zeros through reduction epilogues, float64 arithmetic and the
transcendentals: values a compiler that assumes finite math would fold away."""

from __future__ import annotations
