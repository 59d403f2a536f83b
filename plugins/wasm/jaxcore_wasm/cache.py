"""Compiled kernels cached in this process (by kernel key) and on disk (serialized wasmtime modules).

A disk entry is keyed by a sha256 of the kernel's structural key and the versions of everything that
shapes the machine code (jaxcore, jaxcore-wasm, llvmlite, wasmtime, engine settings, codegen
revision). The file holds a header, the plan as JSON and the serialized module, plus a sha256 of
both: wasmtime trusts what it deserializes, so a truncated or corrupt file must be caught before
that. Anything wrong with an entry means "not cached": it is rebuilt and rewritten, never an error.

Settings: JAXCORE_CACHE_DIR (default ~/.cache/jaxcore; entries go under its wasm/ folder),
JAXCORE_WASM_DISK_CACHE=0 turns the disk cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from jaxcore import settings

MAGIC = b"JXCWASM1"
# The generated code depends on these sources: their digest is part of every key, so editing the
# code generator can never serve a stale module.
_SOURCES = (
    "codegen.py",
    "emitter.py",
    "builtins.py",
    "matmul.py",
    "irtext.py",
    "toolchain.py",
    "module.py",
    "cache.py",
)


def source_digest() -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import jaxcore
    import jaxcore_wasm
    from jaxcore.digest import lowering_digest
    from jaxcore_wasm.runtime import ENGINE_FLAGS

    def ver(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "?"

    wt, ll = ver("wasmtime"), ver("llvmlite")
    return (
        f"jaxcore={jaxcore.__version__};jaxcore_wasm={jaxcore_wasm.__version__};llvmlite={ll};"
        f"wasmtime={wt};engine={ENGINE_FLAGS};codegen={source_digest()};lowering={lowering_digest()}"
    )


def default_dir() -> Path:
    return settings.current().cache_dir / "wasm"


def disk_enabled() -> bool:
    return settings.current().plugin_flag("wasm", "disk_cache", default=True)


class DiskCache:
    """get/put of (plan dict, serialized module bytes) by kernel key."""

    def __init__(self, directory: Path | None = None, enabled: bool | None = None) -> None:
        self.dir = directory or default_dir()
        self.enabled = disk_enabled() if enabled is None else enabled
        self._salt = versions()
        self.hits = self.misses = self.errors = 0
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        digest = hashlib.sha256(f"{self._salt}|{key}".encode()).hexdigest()
        return self.dir / digest[:2] / f"{digest}.bin"

    def get(self, key: str) -> tuple[dict[str, Any], bytes] | None:
        if not self.enabled:
            return None
        p = self.path(key)
        try:
            blob = p.read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            if blob[:8] != MAGIC:
                raise ValueError("bad magic")
            check, body = blob[8:40], blob[40:]
            if hashlib.sha256(body).digest() != check:
                raise ValueError("checksum mismatch")
            n = int.from_bytes(body[:4], "little")
            plan = json.loads(body[4 : 4 + n].decode())
            if plan.get("_key") != key:
                raise ValueError("key mismatch")
            self.hits += 1
            return plan, body[4 + n :]
        except (ValueError, UnicodeDecodeError, json.JSONDecodeError):
            self.errors += 1
            self.drop(key)
            return None

    def put(self, key: str, plan: dict[str, Any], payload: bytes) -> None:
        if not self.enabled:
            return
        header = json.dumps(dict(plan, _key=key)).encode()
        body = len(header).to_bytes(4, "little") + header + payload
        blob = MAGIC + hashlib.sha256(body).digest() + body
        p = self.path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, p)
        except OSError:
            self.errors += 1  # a read-only or full disk only costs the cache

    def drop(self, key: str) -> None:
        try:
            self.path(key).unlink()
        except OSError:
            pass
