"""Fails at import, the way a plugin built against a missing or renamed API would."""

raise ImportError("jaxcore_broken is broken on purpose: its import always fails")
