"""The README's Python example runs as written and computes what it says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if "prepare_kernel" in b)
    scope: dict[str, object] = {}
    exec(compile(example, str(README), "exec"), scope)
    a, b, c, result = (scope[k] for k in ("a", "b", "c", "result"))
    np.testing.assert_array_equal(result, a * b + c)
