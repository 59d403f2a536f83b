"""PLACEHOLDER (pluginapi branch): `lowering_digest()` so that `jaxcore.plugin` can re-export it.

Another engineer owns the real module; on merge, their digest.py replaces this one wholesale. Until then
this hashes the source of the core modules that shape lowered code.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

_SHAPING = ("alu.py", "dtype.py", "kernel.py", "shape.py", "simplify.py", "tuner.py")


@cache
def lowering_digest() -> str:
    """A hex digest of everything in the core that shapes lowered code; include it in every cache key."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SHAPING:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()
