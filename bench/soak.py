"""Soak: many malloc/prepare/dispatch/read/free cycles and many distinct kernels per device,
printing how resident memory grows. A leak shows up as growth after warm-up that scales with the
cycle count; caches show up as growth per distinct kernel.

    python bench/soak.py                                  # every ready device, full scale
    python bench/soak.py --device wasm --cycles 10000 --kernels 2000
    python bench/soak.py --scale 0.1                      # both counts times 0.1

Full scale is 100,000 cycles and 20,000 distinct kernels per device. Every result is checked, so a
wrong answer or an error (e.g. a compile limit) stops the device's run and is reported.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time

from _common import setup_path


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _mib(n: int) -> str:
    return f"{n / 2**20:+.1f}" if n < 0 or n > 0 else "+0.0"


def soak(
    name: str, cycles: int, kernels: int, samples: int = 10
) -> list[tuple[str, int, float, int, int, int, str]]:
    """(phase, count, seconds, rss start, rss after warm-up, rss end, error) per phase."""
    import numpy as np

    import jaxcore
    from jaxcore.alu import AluExp, AluVar
    from jaxcore.dtype import DType
    from jaxcore.kernel import Kernel

    b = jaxcore.get_backend(name)
    n = 256
    x = np.arange(n, dtype=np.float32)
    read = AluExp.global_index(DType.float32, 0, n, AluVar.gidx)
    base = Kernel(1, n, read * AluExp.f32(2) + AluExp.f32(1))
    live0 = b.live_slots() if hasattr(b, "live_slots") else None
    out = []

    def phase(label: str, count: int, step: callable) -> None:
        gc.collect()
        start = rss_bytes()
        warm = start
        t0 = time.perf_counter()
        err = ""
        warm_at = max(1, count // samples)
        done = 0
        try:
            for i in range(count):
                step(i)
                done = i + 1
                if done == warm_at:
                    gc.collect()
                    warm = rss_bytes()
        except Exception as exc:  # reported in the table: the soak found something
            err = f"after {done}: {type(exc).__name__}: {str(exc)[:120]}"
        gc.collect()
        out.append((label, done, time.perf_counter() - t0, start, warm, rss_bytes(), err))

    def cycle(i: int) -> None:
        a = b.malloc(n * 4, x.tobytes())
        o = b.malloc(n * 4)
        exe = b.prepare_kernel(base)
        b.dispatch(exe, [a], [o])
        got = np.frombuffer(b.read(o), np.float32)
        b.dec_ref(a)
        b.dec_ref(o)
        if got[3] != 7.0 or got[-1] != 2 * (n - 1) + 1:
            raise AssertionError(f"wrong result in cycle {i}: {got[:4]}")

    a = b.malloc(n * 4, x.tobytes())
    o = b.malloc(n * 4)

    def distinct(i: int) -> None:
        k = Kernel(1, n, read * AluExp.f32(2) + AluExp.f32(float(i) + 0.5))
        b.dispatch(b.prepare_kernel(k), [a], [o])
        got = np.frombuffer(b.read(o, 12, 4), np.float32)[0]
        if got != 6.0 + float(i) + 0.5:
            raise AssertionError(f"distinct kernel {i} computed {got}")

    phase("cycles", cycles, cycle)
    phase("distinct kernels", kernels, distinct)
    b.dec_ref(a)
    b.dec_ref(o)
    if live0 is not None and b.live_slots() != live0:
        out.append(("slots leaked", b.live_slots() - live0, 0.0, 0, 0, 0, ""))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", action="append", help="device (repeatable; default: every ready one)")
    p.add_argument("--cycles", type=int, default=100_000, help="malloc/prepare/dispatch/read/free cycles")
    p.add_argument("--kernels", type=int, default=20_000, help="distinct kernels compiled and run")
    p.add_argument("--scale", type=float, default=1.0, help="multiply both counts")
    args = p.parse_args(argv)
    setup_path()
    import jaxcore

    devices = args.device or jaxcore.init()
    cycles, kernels = int(args.cycles * args.scale), int(args.kernels * args.scale)
    print(f"soak: {cycles} cycles and {kernels} distinct kernels per device on {', '.join(devices)}")
    head = f"{'device':<8}{'phase':<18}{'count':>8}{'seconds':>9}{'per op':>10}"
    head += f"{'RSS start':>11}{'growth':>9}{'after warm':>11}{'KiB/op':>9}"
    print(head)
    bad = 0
    for name in devices:
        for label, count, secs, start, warm, end, err in soak(name, cycles, kernels):
            if label == "slots leaked":
                print(f"{name:<8}{label:<18}{count:>8}")
                bad += 1
                continue
            per = f"{secs / count * 1e6:.0f}us" if count else "-"
            per_op = (end - warm) / max(1, count - max(1, count // 10)) / 1024
            print(
                f"{name:<8}{label:<18}{count:>8}{secs:>9.1f}{per:>10}{start / 2**20:>10.1f}M"
                f"{_mib(end - start):>8}M{_mib(end - warm):>10}M{per_op:>9.2f}"
            )
            if err:
                print(f"         ERROR {err}")
                bad += 1
    print("(growth: RSS end - start; after warm: end - RSS after the first 10%; KiB/op: after warm-up)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
