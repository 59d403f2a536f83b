"""Reduction workloads: sum, softmax."""

from _common import run_family

if __name__ == "__main__":
    run_family("sum", "softmax")
