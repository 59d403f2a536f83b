"""All standard workloads (same options as `jaxcore bench`): python bench/run.py [--device D] [--json]."""

from _common import run_family

if __name__ == "__main__":
    run_family()
