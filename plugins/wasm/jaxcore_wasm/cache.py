"""Compiled kernels cached in this process (by kernel key) and on disk (serialized wasmtime modules).

A disk entry is keyed by a sha256 of the version salt (jaxcore, jaxcore-wasm, llvmlite, wasmtime,
engine settings, codegen revision, lowering digest) and the digest of the source the module was built
from (compiler.source_digest). The file holds a header, the plan as JSON (with the key it was stored
under) and the serialized module, plus a sha256 over the salt, the key and both: wasmtime trusts what
it deserializes, so a truncated or corrupt file, or a file copied in from another entry, must be
caught before that. The compiler then checks what it loaded against the kernel (the plan codegen
made, the module's marker export naming the source digest, its entry points and their arity, its
memory import). Anything wrong with an entry means "not cached": it is rebuilt and rewritten, never an
error. The directory is as trusted as the Python environment (a writer can forge any entry).

The folder is bounded: past JAXCORE_WASM_DISK_CACHE_MB (default 512) megabytes, the least recently
used entries (by mtime, which a hit refreshes) are deleted down to 80% of it.

Settings: JAXCORE_CACHE_DIR (default ~/.cache/jaxcore; entries go under its wasm/ folder),
JAXCORE_WASM_DISK_CACHE=0 turns the disk cache off, JAXCORE_WASM_DISK_CACHE_MB bounds it.
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

MAGIC = b"JXCWASM2"  # 2: the checksum covers the salt and the kernel key
DISK_CACHE_MB = 512
EVICT_TO = 0.8  # fraction of the limit an eviction leaves
# The generated code depends on these sources: their digest is part of every key, so editing the
# code generator can never serve a stale module.
_SOURCES = (
    "codegen.py",
    "emitter.py",
    "builtins.py",
    "matmul.py",
    "radix.py",
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


def int_setting(key: str, default: int, minimum: int = 0) -> int:
    """An integer wasm setting (`JAXCORE_WASM_<KEY>`), with a clear error when malformed."""
    return settings.current().plugin_int("wasm", key, default, minimum)


class DiskCache:
    """get/put of (plan dict, serialized module bytes) by kernel key, bounded to `limit_bytes`."""

    def __init__(
        self, directory: Path | None = None, enabled: bool | None = None, limit_bytes: int | None = None
    ) -> None:
        self.dir = directory or default_dir()
        self.enabled = disk_enabled() if enabled is None else enabled
        if limit_bytes is None:
            limit_bytes = int_setting("disk_cache_mb", DISK_CACHE_MB, minimum=1) << 20
        self.limit = limit_bytes
        self._salt = versions()
        self.hits = self.misses = self.errors = self.evictions = 0
        self._lock = threading.Lock()
        self._used: int | None = None  # bytes in the folder, as of the last scan plus our writes

    def path(self, key: str) -> Path:
        digest = hashlib.sha256(f"{self._salt}|{key}".encode()).hexdigest()
        return self.dir / digest[:2] / f"{digest}.bin"

    def _check(self, key: str, body: bytes) -> bytes:
        return hashlib.sha256(f"{self._salt}|{key}|".encode() + body).digest()

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
            if self._check(key, body) != check:
                raise ValueError("checksum mismatch")
            n = int.from_bytes(body[:4], "little")
            plan = json.loads(body[4 : 4 + n].decode())
            if not isinstance(plan, dict) or plan.get("_key") != key:
                raise ValueError("key mismatch")
            self.hits += 1
            self._touch(p)
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
        blob = MAGIC + self._check(key, body) + body
        p = self.path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, p)
        except OSError:
            self.errors += 1  # a read-only or full disk only costs the cache
            return
        self._account(len(blob))

    def drop(self, key: str) -> None:
        try:
            self.path(key).unlink()
        except OSError:
            pass

    # ---- size bound ------------------------------------------------------------------------------
    @staticmethod
    def _touch(p: Path) -> None:
        try:
            os.utime(p)  # least recently used is least recently modified
        except OSError:
            pass

    def _entries(self) -> list[tuple[float, int, Path]]:
        out = []
        for p in self.dir.glob("*/*.bin"):
            try:
                st = p.stat()
            except OSError:
                continue  # another process evicted it
            out.append((st.st_mtime, st.st_size, p))
        return out

    def size(self) -> int:
        """Bytes of entries in the folder now."""
        return sum(size for _, size, _ in self._entries())

    def _account(self, nbytes: int) -> None:
        with self._lock:
            if self._used is None:
                self._used = self.size()  # one scan per process; later writes are counted
            else:
                self._used += nbytes
            if self._used > self.limit:
                self._evict()

    def _evict(self) -> None:
        """Delete least recently used entries (other processes' too) down to EVICT_TO of the limit."""
        entries = sorted(self._entries(), key=lambda e: e[0])
        used = sum(size for _, size, _ in entries)
        target = int(self.limit * EVICT_TO)
        for _, size, p in entries:
            if used <= target:
                break
            try:
                p.unlink()
                self.evictions += 1
            except OSError:
                pass
            used -= size
        self._used = used
