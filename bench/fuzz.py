"""The long-form differential fuzzer: thousands of random kernels per device, a summary table.

Each case is checked against the oracle (an independent evaluation of the unsimplified tree) and,
for a device that is not the reference, against the reference device too. Mismatches are minimised
and printed as they are found, each with the `jaxcore conformance` line that replays just it; keep
each one as a case in core/jaxcore/conformance/test_fuzz_regressions.py. `jaxcore conformance DEVICE
--fuzz SECONDS` is the same fuzz after the suite, for a plugin author.

    python bench/fuzz.py                                  # every ready device, 10,000 cases each
    python bench/fuzz.py --device wasm --count 50000      # one device, longer
    python bench/fuzz.py --device wasm --reference cpu    # device vs reference (the default reference
                                                          # is the one the conformance suite picks)
    python bench/fuzz.py --device cpu --no-reference      # oracle only
    python bench/fuzz.py --seed 20261201 --count 700      # exactly what CI runs
    python bench/fuzz.py --batch 1                        # one kernel per case (no packing)
    python bench/fuzz.py --device webgl --seconds 600      # each device for at most ten minutes

Exit status: 0 when no device mismatched, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import setup_path


def _reference(name: str | None) -> str:
    """`name`, else the device the conformance suite compares with."""
    import jaxcore
    from jaxcore.conformance.harness import default_reference

    if name:
        return name
    chosen = default_reference()
    return chosen[0] if chosen is not None else jaxcore.devices()[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", action="append", help="device to fuzz (repeatable; default: every ready one)")
    p.add_argument(
        "--reference", help="device whose results must also agree (default: the suite's reference)"
    )
    p.add_argument("--no-reference", action="store_true", help="compare with the oracle only")
    p.add_argument("--seed", type=int, default=None, help="first seed (default: time-based, printed)")
    p.add_argument("--count", type=int, default=10_000, help="cases per device (default 10000)")
    p.add_argument("--seconds", type=float, default=None, help="stop each device's run after this long")
    p.add_argument("--chunk", type=int, default=1000, help="cases per seed (seed, seed+1, ...)")
    p.add_argument("--batch", type=int, default=8, help="elementwise cases packed per kernel (1: none)")
    p.add_argument("--minimise", type=int, default=150, help="device runs spent minimising each mismatch")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    args = p.parse_args(argv)

    setup_path()
    import jaxcore
    from jaxcore.conformance.test_fuzz import Mismatch, fuzz

    ready = jaxcore.init()
    devices = args.device or ready
    ref_name = None if args.no_reference else _reference(args.reference)
    seed0 = args.seed if args.seed is not None else int(time.time()) % 2**31
    print(f"fuzzing {', '.join(devices)}: {args.count} cases each, seeds from {seed0}, reference {ref_name}")
    rows = []
    total_bad = 0
    for name in devices:
        backend = jaxcore.get_backend(name)
        reference = None if ref_name in (None, name) else jaxcore.get_backend(ref_name)
        done = cases = kernels = skipped = 0
        seconds = 0.0
        kinds: dict[str, int] = {}
        found: list[Mismatch] = []

        def show(m: Mismatch, device: str = name) -> None:
            if not args.quiet:
                print(f"\n[{device}] MISMATCH {m}", flush=True)

        seed = seed0
        while done < args.count and (args.seconds is None or seconds < args.seconds):
            n = min(args.chunk, args.count - done)
            left = None if args.seconds is None else args.seconds - seconds
            rep = fuzz(backend, reference, seed, n, args.batch, args.minimise, on_mismatch=show, seconds=left)
            cases, kernels, skipped = cases + rep.cases, kernels + rep.kernels, skipped + rep.skipped
            seconds += rep.seconds
            found += rep.mismatches
            for k, v in rep.by_kind.items():
                kinds[k] = kinds.get(k, 0) + v
            done += n
            seed += 1
        total_bad += len(found)
        rows.append((name, cases, kernels, skipped, len(found), seconds, kinds))

    print("\n" + "=" * 78)
    print(
        f"{'device':<10}{'cases':>9}{'kernels':>9}{'refused':>9}{'mismatch':>10}{'seconds':>10}{'cases/s':>10}"
    )
    for name, cases, kernels, skipped, bad, seconds, _ in rows:
        rate = cases / seconds if seconds else 0.0
        print(f"{name:<10}{cases:>9}{kernels:>9}{skipped:>9}{bad:>10}{seconds:>10.1f}{rate:>10.0f}")
    print("\ncases by kind (first device):")
    if rows:
        kinds = rows[0][6]
        for k in sorted(kinds):
            print(f"  {k:<28}{kinds[k]:>7}")
    print(
        "(kernels: compiled and dispatched; elementwise cases are packed --batch to a kernel;"
        " refused: draws the IR or a capability rejected)"
    )
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
