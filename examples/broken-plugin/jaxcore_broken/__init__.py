"""A deliberately broken jaxcore plugin (for the registry's isolation tests)."""
