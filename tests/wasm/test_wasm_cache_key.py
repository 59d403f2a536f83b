"""The wasm disk-cache key covers the core code that shapes lowered kernels (`lowering_digest`):
edit `tune_nullopt` (or the simplifier, or GlobalView lowering) and no stale module is served."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxcore import digest
from jaxcore_wasm.cache import DiskCache


@pytest.fixture
def fresh_digest():
    digest.lowering_digest.cache_clear()
    yield
    digest.lowering_digest.cache_clear()


@pytest.mark.parametrize("edited", ["tuner.py", "simplify.py", "shape.py"])
def test_editing_core_lowering_code_changes_the_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_digest: None, edited: str
) -> None:
    before = DiskCache(tmp_path, enabled=True).path("kernel-key")
    real = digest._source_bytes
    monkeypatch.setattr(
        digest, "_source_bytes", lambda name: real(name) + (b"\n# edited\n" if name == edited else b"")
    )
    digest.lowering_digest.cache_clear()
    after = DiskCache(tmp_path, enabled=True).path("kernel-key")
    assert before != after, f"editing core/{edited} left the wasm cache key unchanged"


def test_the_key_is_stable_when_nothing_changes(tmp_path: Path, fresh_digest: None) -> None:
    assert DiskCache(tmp_path, enabled=True).path("k") == DiskCache(tmp_path, enabled=True).path("k")
