"""The program-binary disk cache ($JAXCORE_CACHE_DIR/webgl): an entry is used only if it is this
program's, intact; anything else (corrupt, truncated, a bad format word, another program's entry,
a read-only directory) compiles instead, computes the same, and never raises."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from jaxcore import settings
from jaxcore.alu import AluExp
from jaxcore.conformance.harness import map_kernel, run_kernel

X = np.linspace(-3, 3, 64).astype(np.float32)
KERNELS = {
    "exp": (
        map_kernel(["float32"], 64, lambda v: AluExp.mul(AluExp.exp(v), AluExp.f32(0.5))),
        np.exp(X) * 0.5,
    ),
    "sub": (map_kernel(["float32"], 64, lambda v: AluExp.sub(AluExp.f32(1), v)), 1 - X),
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], dict[str, object]]]:
    """run(): a fresh backend on the cache in tmp_path runs both kernels; their results, entries
    (by kernel) and the backend's binary hits."""
    from jaxcore_webgl.backend import WebGLBackend

    monkeypatch.setenv("JAXCORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("JAXCORE_WEBGL_MATMUL", "0")
    settings.reload()

    def run() -> dict[str, object]:
        b = WebGLBackend(platform="egl")
        try:
            if b.device.binary_dir is None:
                pytest.skip("the driver offers no program binary format")
            out: dict[str, object] = {}
            for name, (k, want) in KERNELS.items():
                got = run_kernel(b, k, [X])
                np.testing.assert_allclose(got, want, rtol=2e-7)
                out[name], out[name + " key"] = b.device._binary_path(b.prepare_kernel(k).data.source)
            out["hits"] = b.device.binary_hits
            return out
        finally:
            b.close()

    yield run
    monkeypatch.undo()
    settings.reload()


def test_intact_entries_are_used(cache) -> None:
    first = cache()
    assert first["hits"] == 0 and first["exp"].exists() and first["sub"].exists()
    assert cache()["hits"] == 2


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[:-7], id="truncated"),
        pytest.param(lambda b: b[:9], id="truncated-to-the-header"),
        pytest.param(lambda b: b[:-40] + bytes(40), id="corrupt-tail"),
        pytest.param(lambda b: b[:20] + bytes(x ^ 0x5A for x in b[20:40]) + b[40:], id="corrupt-head"),
        pytest.param(lambda b: b"", id="empty"),
    ],
)
def test_a_damaged_entry_is_compiled_again_and_replaced(cache, damage) -> None:
    entry = cache()["exp"]
    good = entry.read_bytes()
    entry.write_bytes(damage(good))
    assert cache()["hits"] == 1  # "sub" only; "exp" compiled (same result, checked in run)
    assert entry.read_bytes() == good  # rewritten
    assert cache()["hits"] == 2


def test_a_bad_format_word_is_a_miss_and_rebuilt(cache) -> None:
    """An entry that checksums but names a format the driver does not know: glProgramBinary raised
    GLError (invalid enumerant) in every later process, and the entry was never replaced."""
    from jaxcore_webgl.device import _seal

    first = cache()
    good = first["exp"].read_bytes()
    body = (0xDEAD).to_bytes(4, "little") + good[20:]
    first["exp"].write_bytes(_seal(first["exp key"], body) + body)
    assert cache()["hits"] == 1
    assert first["exp"].read_bytes() == good
    assert cache()["hits"] == 2


def test_another_programs_entry_is_a_miss(cache) -> None:
    """An entry copied over another program's runs nothing: its checksum covers its own key."""
    first = cache()
    shutil.copyfile(first["sub"], first["exp"])
    assert cache()["hits"] == 1  # the "exp" entry (now sub's binary) was refused
    assert cache()["hits"] == 2


def test_a_read_only_cache_directory_is_a_read_only_cache(
    cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries that can be read are used; none can be written: no error, only compiles."""
    first = cache()
    first["sub"].write_bytes(b"junk")
    if os.geteuid() == 0:  # root writes into read-only directories: fail the writes instead

        def refuse(*args: object, **kwargs: object) -> None:
            raise PermissionError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(Path, "write_bytes", refuse)
        monkeypatch.setattr(os, "replace", refuse)
    (tmp_path / "webgl").chmod(0o555)
    try:
        assert cache()["hits"] == 1  # exp's entry read; sub's junk neither used nor replaced
        assert first["sub"].read_bytes() == b"junk"
    finally:
        (tmp_path / "webgl").chmod(0o755)
        monkeypatch.undo()
