"""Matrix multiply as one reduction kernel: 512, 1024, 2048."""

from _common import run_family

if __name__ == "__main__":
    run_family("matmul")
