"""Kernels that mix dtypes where the IR allows it: reductions over items of another dtype, index
expressions of either integer dtype."""

from __future__ import annotations
