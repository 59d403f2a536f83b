"""Lets the bench scripts run from a checkout without installing jaxcore (adds core/ and plugins/*)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_path() -> None:
    try:
        import jaxcore  # noqa: F401

        return
    except ImportError:
        pass
    paths = [ROOT / "core", *sorted((ROOT / "plugins").glob("*"))]
    sys.path[:0] = [str(p) for p in paths]
    # Not installed: no entry points, so name the in-tree plugins explicitly.
    os.environ.setdefault("JAXCORE_PLUGINS", ",".join(f"jaxcore_{p.name}.plugin" for p in paths[1:]))


def run_family(*default_workloads: str) -> None:
    """Run `jaxcore bench` with these workloads unless the command line names others."""
    setup_path()
    from jaxcore.bench import main

    argv = sys.argv[1:]
    if default_workloads and "--workload" not in argv:
        for w in default_workloads:
            argv += ["--workload", w]
    sys.exit(main(argv))
