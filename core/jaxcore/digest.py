"""A digest of the core code that shapes lowered kernels, for plugins' compile-cache keys.

A plugin that caches compiled code across processes (the wasm disk cache) must key it on
everything that decides what it generates. Much of that lives in the core, not the plugin: the
tuner's plans, GlobalView lowering (`ShapeTracker.to_alu_exp`), the simplifier, the IR and its
keys, the dtype rules, the routine layouts. A version number does not move when a checkout is
edited, so the key hashes the sources themselves: edit `tune_nullopt` and every cached kernel
is rebuilt.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

# The core modules whose code decides what a backend lowers.
LOWERING_SOURCES: tuple[str, ...] = (
    "alu.py",
    "cstyle.py",
    "dtype.py",
    "expansions.py",
    "expansions64.py",
    "half.py",
    "interpret.py",
    "kernel.py",
    "legalize.py",
    "matmul_shape.py",
    "ordered_keys.py",
    "pi_bits.py",
    "program.py",
    "routine.py",
    "shape.py",
    "simplify.py",
    "softfloat.py",
    "tuner.py",
)


def _source_bytes(name: str) -> bytes:
    """The bytes of core module `name` (its name alone when it cannot be read, e.g. a zipapp)."""
    try:
        return (Path(__file__).parent / name).read_bytes()
    except OSError:
        return f"<unreadable {name}>".encode()


@cache
def lowering_digest() -> str:
    """A hex digest (16 chars) of every core source that shapes lowered code, computed once."""
    h = hashlib.sha256()
    for name in LOWERING_SOURCES:
        data = _source_bytes(name)
        h.update(f"{name}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]
