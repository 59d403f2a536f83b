"""Turn LLVM's relocatable wasm object into a module wasmtime can instantiate on our shared memory.

LLVM's object already exports every function marked "wasm-export-name", so no linker is needed while
a kernel uses no stack, data or libcalls. What is left is the memory import: the object imports
`env.__linear_memory` unshared with no maximum; threads need it shared with a maximum of 4 GiB.
We rewrite that one import entry and drop LLVM's custom sections (linking, relocations), which
wasmtime does not need.
"""

from __future__ import annotations

MAGIC = b"\0asm\x01\0\0\0"
PAGE = 65536  # bytes per wasm memory page
MAX_PAGES = 65536  # 4 GiB, the wasm32 limit
_SEC_CUSTOM, _SEC_IMPORT = 0, 2
_KIND_FUNC, _KIND_TABLE, _KIND_MEMORY, _KIND_GLOBAL = 0, 1, 2, 3


class ModuleError(Exception):
    """The object cannot become a standalone module (it needs a linker or a runtime import)."""


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_uleb(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _read_name(data: bytes, pos: int) -> tuple[str, int]:
    n, pos = read_uleb(data, pos)
    return data[pos : pos + n].decode("utf-8"), pos + n


def sections(data: bytes) -> list[tuple[int, bytes]]:
    """(id, payload) of each section, in order."""
    if data[:8] != MAGIC:
        raise ModuleError("not a wasm binary")
    out, pos = [], 8
    while pos < len(data):
        sid = data[pos]
        size, start = read_uleb(data, pos + 1)
        out.append((sid, data[start : start + size]))
        pos = start + size
    return out


def _skip_limits(data: bytes, pos: int) -> int:
    flags = data[pos]
    _, pos = read_uleb(data, pos + 1)
    if flags & 1:
        _, pos = read_uleb(data, pos)
    return pos


def _patch_imports(payload: bytes, shared: bool) -> bytes:
    count, pos = read_uleb(payload, 0)
    out = bytearray(uleb(count))
    for _ in range(count):
        start = pos
        mod, pos = _read_name(payload, pos)
        name, pos = _read_name(payload, pos)
        kind = payload[pos]
        pos += 1
        if kind != _KIND_MEMORY:
            raise ModuleError(f"kernel object imports {mod}.{name} (kind {kind}); it needs a linker")
        end = _skip_limits(payload, pos)
        out += payload[start:pos]  # module name, field name and kind byte
        if shared:
            out += b"\x03" + uleb(0) + uleb(MAX_PAGES)
        else:
            out += b"\x00" + uleb(0)
        pos = end
    return bytes(out)


def finalize(obj: bytes, shared: bool = True) -> bytes:
    """Rewrite the memory import (shared, max 4 GiB) and drop custom sections."""
    out = bytearray(MAGIC)
    for sid, payload in sections(obj):
        if sid == _SEC_CUSTOM:
            continue
        if sid == _SEC_IMPORT:
            payload = _patch_imports(payload, shared)
        out.append(sid)
        out += uleb(len(payload))
        out += payload
    return bytes(out)


def exported_functions(wasm: bytes) -> list[str]:
    """Names of the exported functions (for checks and tests)."""
    names: list[str] = []
    for sid, payload in sections(wasm):
        if sid != 7:
            continue
        count, pos = read_uleb(payload, 0)
        for _ in range(count):
            name, pos = _read_name(payload, pos)
            kind = payload[pos]
            _, pos = read_uleb(payload, pos + 1)
            if kind == _KIND_FUNC:
                names.append(name)
    return names
