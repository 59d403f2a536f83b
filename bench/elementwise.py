"""Elementwise and overhead workloads: fma, dispatch."""

from _common import run_family

if __name__ == "__main__":
    run_family("fma", "dispatch")
