"""`python -m jaxcore ...` is the `jaxcore` command (for environments without its script on PATH)."""

from jaxcore.cli import main

raise SystemExit(main())
