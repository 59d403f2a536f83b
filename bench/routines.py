"""Routine workloads: sort, argsort, cholesky."""

from _common import run_family

if __name__ == "__main__":
    run_family("routine")
