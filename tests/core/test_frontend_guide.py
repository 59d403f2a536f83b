"""docs/frontend-guide.md runs as written: every Python block, in order, in one namespace (later
blocks use what earlier ones made). Each block checks its own result against numpy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "frontend-guide.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_every_block_runs_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    found = blocks()
    assert len(found) >= 9, "a snippet of the guide went missing"
    scope: dict[str, object] = {"__name__": "frontend_guide"}
    for i, block in enumerate(found):
        exec(compile(block, f"{GUIDE}:block{i}", "exec"), scope)
    assert "rebuilt in" in capsys.readouterr().out


def test_the_contents_link_to_sections() -> None:
    text = GUIDE.read_text()
    anchors = set(re.findall(r"\]\(#([a-z0-9-]+)\)", text))
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", text, flags=re.M)
    }
    assert anchors and anchors <= headings, anchors - headings
