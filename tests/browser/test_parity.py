"""Every kernel and routine the conformance suite dispatches on webgpu and webgl, run again in Chromium
(its fuzz and concurrency areas sampled evenly: `SAMPLED`; JAXCORE_PARITY_ALL=1 runs them all).

The cases come from the `recorded` fixture (conftest.py): exported program, input bytes and the
native device's output bytes per distinct dispatch. In the browser each program must compile with
no error and no warning, and give integer and bool outputs bit for bit, float outputs within twice
the suite's tolerance for the ops it contains (both devices are held to the tolerance against the
exact answer). What the browser cannot run is declared by the runner (float64 on WebGPU, float16
without `shader-f16`, more storage buffers than the adapter allows) and listed in the summary.
Differences already explained in FINDINGS.md (and not yet fixed in the plugin) turn the test into
an expected failure that names them; anything else fails it.
"""

from __future__ import annotations

import collections
import json
import os
import time
from typing import Any

import harness
import pytest

# The only reasons the runners may give for not running a program (anything else is a failure).
DECLARABLE = ("WebGPU does not have", "which this adapter lacks", "exceeds this adapter's")


def _area(test: str) -> str:
    """The conformance area of a recorded case's test id (test_views_matmul[...] -> views)."""
    name = test.rsplit("::", 1)[-1]
    return name.split("_")[1] if name.startswith("test_") and "_" in name[5:] else name


# Areas of many random or repeated kernels (the suite's fuzz, its threads preparing kernels side
# by side): the page replays an evenly spaced share of each, at most SAMPLED, so that CI (two cores,
# SwiftShader) stays within its time; JAXCORE_PARITY_ALL=1 replays every one.
SAMPLED = {"fuzz": 120, "concurrency": 60}


def _sample(cases: list[Any]) -> tuple[list[Any], dict[str, tuple[int, int]]]:
    """The cases the page runs, and per sampled area (replayed, recorded)."""
    if os.environ.get("JAXCORE_PARITY_ALL", "").strip() in ("1", "true", "yes"):
        return cases, {}
    by_area: dict[str, list[Any]] = collections.defaultdict(list)
    for c in cases:
        by_area[_area(c.test)].append(c)
    keep: set[int] = set()
    shares: dict[str, tuple[int, int]] = {}
    for area, cs in by_area.items():
        cap = SAMPLED.get(area, len(cs))
        picked = cs if len(cs) <= cap else [cs[i * len(cs) // cap] for i in range(cap)]
        keep.update(id(c) for c in picked)
        if area in SAMPLED:
            shares[area] = (len(picked), len(cs))
    return [c for c in cases if id(c) in keep or c.program is None], shares


@pytest.mark.parity
@pytest.mark.parametrize("device", ["webgpu", "webgl"])
def test_parity(device: str, browser: Any, recorded: dict[str, Any], request: pytest.FixtureRequest) -> None:
    cases = recorded[device]
    assert cases, f"the conformance run dispatched nothing on {device} ({recorded['how'][device]})"
    export_failures = [c for c in cases if c.program is None]
    sampled, shares = _sample(cases)
    runnable = [c for c in sampled if c.program is not None]
    t0 = time.perf_counter()
    results = harness.run_cases(browser, device, runnable)
    seconds = time.perf_counter() - t0
    unsupported: collections.Counter[str] = collections.Counter()
    findings: dict[str, list[Any]] = collections.defaultdict(list)
    failures: list[str] = [f"{c.test}: export failed: {c.export_error}" for c in export_failures]
    matched = 0
    for case, result in zip(runnable, results):
        if result.get("timed_out"):  # a compile that takes minutes (FINDINGS.md F5)
            findings["F5"].append(case)
            continue
        why = result.get("unsupported")
        if why:
            if not any(k in why for k in DECLARABLE):
                failures.append(f"{case.test}: the runner refused it for an undeclared reason: {why}")
            unsupported[why] += 1
            continue
        verdict = harness.compare(case, result)
        if verdict.problem is None:
            matched += 1
        else:
            failures.append(
                f"{case.test}\n  program: {case.source.get('text', '')[:300]}\n  {verdict.problem}"
            )
    ran = len(runnable) - sum(unsupported.values())
    distinct = len({json.dumps(c.program, sort_keys=True) for c in runnable})
    lines = harness.summary_lines(request)
    info = browser.info.get(device) or {}
    lines.append(
        f"{device}: {len(cases)} recorded dispatches ({distinct} distinct programs) from "
        f"{recorded['how'][device]}; browser: {json.dumps(info)[:200]}"
    )
    lines.append(
        f"  run in the browser {ran}, matched {matched}, declared unsupported {sum(unsupported.values())}, "
        f"known findings {sum(len(v) for v in findings.values())}, failed {len(failures)}; "
        f"{seconds:.1f} s in the browser (launch {browser.launch_s:.1f} s, restarts {browser.restarts})"
    )
    areas = collections.Counter(_area(c.test) for c in cases)
    lines.append("  by area: " + ", ".join(f"{a} {n}" for a, n in areas.most_common()))
    if shares:
        lines.append(
            "  sampled (JAXCORE_PARITY_ALL=1 runs all): "
            + ", ".join(f"{a} {k} of {n}" for a, (k, n) in shares.items())
        )
    for why, n in unsupported.most_common():
        lines.append(f"  unsupported-declared: {n} x {why}")
    for fid, cs in sorted(findings.items()):
        tests = sorted({c.test.rsplit("::", 1)[-1] for c in cs})
        lines.append(
            f"  known finding {fid} (tests/browser/FINDINGS.md): {len(cs)} x, in {', '.join(tests[:8])}"
        )
    for f in failures[:20]:
        lines.append("  FAILED " + f.replace("\n", "\n    "))
    if failures:
        shown = "\n\n".join(failures[:25])
        more = f"\n... and {len(failures) - 25} more" if len(failures) > 25 else ""
        pytest.fail(f"{len(failures)} of {len(cases)} {device} cases differ in the browser:\n\n{shown}{more}")
    if findings:
        ids = ", ".join(f"{k} ({len(v)} cases)" for k, v in sorted(findings.items()))
        pytest.xfail(f"{device}: every other case matched; open findings {ids} (tests/browser/FINDINGS.md)")
