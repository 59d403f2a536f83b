"""Soak: many malloc/prepare/dispatch/read/free cycles and many distinct kernels per device,
measuring the process's resident memory (RSS) as it goes. A leak shows up as growth after warm-up
that scales with the count; a cache shows up as growth that stops once it is full.

    python bench/soak.py                                  # every ready device, full scale
    python bench/soak.py --device wasm --cycles 10000 --kernels 2000
    python bench/soak.py --scale 0.1                      # both counts times 0.1
    python bench/soak.py --device cpu --max-rss-mib 1024 --json out.json

Full scale is 100,000 cycles and 20,000 distinct kernels per device. Each device runs in a process
of its own (its RSS is its own); every result is checked, so a wrong answer or an error (e.g. a
compile limit) stops the device's run and is reported. Columns: RSS at the start of the phase, at
its end, the most seen during it (sampled 50 times), and the growth per operation after warm-up
(the first 10%, `--warm`); `peak` is the process's high-water mark (VmHWM). With `--max-rss-mib`
the exit status is 1 when a device's peak passes it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from _common import setup_path

SAMPLES = 50


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """The process's resident high-water mark (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class Phase:
    device: str
    phase: str
    count: int
    seconds: float
    rss_start: int
    rss_warm: int  # after the warm-up fraction of the count
    rss_end: int
    rss_max: int  # the most RSS sampled during the phase
    peak: int  # the process's high-water mark at the end of the phase
    error: str = ""

    def kib_per_op(self, warm: float) -> float:
        """RSS growth per operation after warm-up."""
        after = self.count - max(1, int(self.count * warm))
        return (self.rss_end - self.rss_warm) / max(1, after) / 1024


def soak(name: str, cycles: int, kernels: int, warm: float = 0.1) -> list[Phase]:
    """Run both phases on device `name` in this process."""
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
    out: list[Phase] = []

    def phase(label: str, count: int, step: Callable[[int], None]) -> None:
        gc.collect()
        start = most = rss_bytes()
        warm_rss = start
        t0 = time.perf_counter()
        err = ""
        warm_at, every = max(1, int(count * warm)), max(1, count // SAMPLES)
        done = 0
        try:
            for i in range(count):
                step(i)
                done = i + 1
                if done % every == 0:
                    most = max(most, rss_bytes())
                if done == warm_at:
                    gc.collect()
                    warm_rss = rss_bytes()
        except Exception as exc:  # reported in the table: the soak found something
            err = f"after {done}: {type(exc).__name__}: {str(exc)[:160]}"
        gc.collect()
        end = rss_bytes()
        seconds = time.perf_counter() - t0
        most = max(most, end)
        out.append(Phase(name, label, done, seconds, start, warm_rss, end, most, peak_rss_bytes(), err))

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
        out.append(Phase(name, "slots leaked", b.live_slots() - live0, 0.0, 0, 0, 0, 0, 0, "slots leaked"))
    return out


def _in_child(device: str, args: argparse.Namespace) -> list[Phase]:
    """`soak` of one device in a process of its own, through this script's --child mode."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--device", device]
    cmd += ["--cycles", str(args.cycles), "--kernels", str(args.kernels), "--warm", str(args.warm)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        return [Phase(**p) for p in json.loads(proc.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError, TypeError):
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return [Phase(device, "distinct kernels", 0, 0.0, 0, 0, 0, 0, 0, f"the soak process failed: {why}")]


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}M"


def print_table(results: list[Phase], warm: float) -> None:
    head = f"{'device':<8}{'phase':<18}{'count':>8}{'seconds':>9}{'per op':>9}"
    head += f"{'RSS start':>11}{'end':>9}{'max':>9}{'KiB/op':>8}{'peak':>9}"
    print(head)
    for p in results:
        if p.phase == "slots leaked":
            print(f"{p.device:<8}{p.phase:<18}{p.count:>8}")
            continue
        per = f"{p.seconds / p.count * 1e6:.0f}us" if p.count else "-"
        print(
            f"{p.device:<8}{p.phase:<18}{p.count:>8}{p.seconds:>9.1f}{per:>9}{_mib(p.rss_start):>11}"
            f"{_mib(p.rss_end):>9}{_mib(p.rss_max):>9}{p.kib_per_op(warm):>8.2f}{_mib(p.peak):>9}"
        )
        if p.error:
            print(f"         ERROR {p.error}")
    print(f"(KiB/op: RSS growth per op after the first {warm:.0%}; peak: the process's high-water mark)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", action="append", help="device (repeatable; default: every ready one)")
    p.add_argument("--cycles", type=int, default=100_000, help="malloc/prepare/dispatch/read/free cycles")
    p.add_argument("--kernels", type=int, default=20_000, help="distinct kernels compiled and run")
    p.add_argument("--scale", type=float, default=1.0, help="multiply both counts")
    p.add_argument("--warm", type=float, default=0.1, help="fraction of each phase taken as warm-up")
    p.add_argument("--max-rss-mib", type=float, help="exit status 1 when a device's peak RSS passes it")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': stdout)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    setup_path()
    if args.child:  # one device, this process: the results as one JSON line
        print(json.dumps([asdict(r) for r in soak(args.device[0], args.cycles, args.kernels, args.warm)]))
        return 0
    import jaxcore

    devices = args.device or jaxcore.init()
    args.cycles, args.kernels = int(args.cycles * args.scale), int(args.kernels * args.scale)
    counts = f"{args.cycles} cycles and {args.kernels} distinct kernels per device"
    print(f"soak: {counts} on {', '.join(devices)}")
    results = [r for name in devices for r in _in_child(name, args)]
    print_table(results, args.warm)
    if args.json:
        doc = json.dumps([dict(asdict(r), kib_per_op=r.kib_per_op(args.warm)) for r in results], indent=1)
        if args.json == "-":
            print(doc)
        else:
            with open(args.json, "w") as f:
                f.write(doc)
    bad = [r for r in results if r.error]
    if args.max_rss_mib is not None:
        over = [r for r in results if r.peak > args.max_rss_mib * 2**20]
        for r in over:
            print(f"{r.device}: peak RSS {_mib(r.peak)} is over the bound of {args.max_rss_mib:g} MiB")
        bad += over
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
