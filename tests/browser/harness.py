"""Headless Chromium for the parity tests: one browser, one file:// page, batches of programs.

Chromium from Debian's `chromium` package gives WebGPU through Dawn on SwiftShader and WebGL2
through ANGLE on SwiftShader; Playwright (PyPI) drives it with `executable_path`, so no browser
download is needed. The page is a file:// page because WebGPU needs a secure context.
"""

from __future__ import annotations

import base64
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from jaxcore.conformance.harness import assert_close, from_buffer
from jaxcore.conformance.tolerances import SIGN_AGNOSTIC, lookup
from jaxcore.dtype import DType

HERE = Path(__file__).resolve().parent
T = TypeVar("T")
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--disable-gpu-sandbox",
]
INSTALL_HINT = "apt-get install -y chromium && pip install 'playwright>=1.40'  (never `playwright install`)"
BATCH_PROGRAMS = {"webgpu": 64, "webgl": 16}  # programs per page.evaluate (webgl: a timed-out
# batch runs again a case at a time, FINDINGS.md F5)
BATCH_BYTES = 6 << 20  # input+output bytes per page.evaluate


def summary_lines(request: pytest.FixtureRequest) -> list[str]:
    """A list whose lines the run prints at its end, under the browser's heading: carried in the
    test's report (the root conftest.py gathers them), so they arrive from any xdist worker."""
    lines: list[str] = []
    request.node.user_properties.append(("jaxcore-summary", ("jaxcore browser parity (Chromium)", lines)))
    return lines


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


class BrowserUnavailable(RuntimeError):
    """No browser to run in (the message says what is missing and how to get it)."""


class BrowserTimeout(RuntimeError):
    """A page call ran past its time (a shader compile that takes minutes: FINDINGS.md F5)."""


def _chromium_pids() -> list[int]:
    """The Chromium processes this test process started (its descendants), from /proc."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            names[int(d.name)] = (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    mine, me = set(), os.getpid()
    for pid in parents:
        p, seen = pid, 0
        while p > 1 and seen < 64:
            p, seen = parents.get(p, 0), seen + 1
            if p == me:
                mine.add(pid)
                break
    return [p for p in mine if "chrom" in Path(names.get(p, "")).name]


def chromium_path() -> str:
    env = os.environ.get("JAXCORE_CHROMIUM", "").strip()
    for p in ([env] if env else []) + list(CHROMIUM_CANDIDATES):
        if p and (shutil.which(p) or Path(p).exists()):
            return p
    raise BrowserUnavailable(
        f"no Chromium binary (looked for {', '.join(CHROMIUM_CANDIDATES)}); {INSTALL_HINT}"
    )


class _Thread:
    """One thread that owns Playwright: its sync API runs an event loop on the thread that starts it,
    and the rest of the test session (asyncio.run in async tests, other Playwright users) must not
    find that loop on the main thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="jaxcore-browser", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn: Callable[[], T], timeout: float | None = None) -> T:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout):
            raise BrowserTimeout(f"the browser did not answer within {timeout:.0f} s")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)


@dataclass
class Browser:
    """One Chromium with one parity page; `info` is what its WebGPU adapter and WebGL2 context report.
    Every Playwright call runs on the browser's own thread (`evaluate`)."""

    thread: _Thread
    playwright: Any
    browser: Any
    page: Any
    info: dict[str, Any]
    launch_s: float
    console: list[str] = field(default_factory=list)

    workdir: Path | None = None
    restarts: int = 0

    def evaluate(self, js: str, arg: Any = None, timeout: float | None = None) -> Any:
        """`js` evaluated in the page; past `timeout` the browser is killed and started again
        (a stuck compile cannot be interrupted otherwise) and BrowserTimeout is raised."""
        try:
            return self.thread.call(lambda: self.page.evaluate(js, arg), timeout)
        except BrowserTimeout:
            self.restart()
            raise

    def restart(self) -> None:
        """Kill this Chromium and open a fresh one in its place (a new thread, page and context)."""
        import signal

        for pid in _chromium_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        old = self.thread
        try:
            old.call(self.playwright.stop, 30)
        except BaseException:
            pass  # the old thread is abandoned (a daemon); a new one drives the new browser
        fresh = launch(self.workdir or Path("."))
        self.thread, self.playwright, self.browser = fresh.thread, fresh.playwright, fresh.browser
        self.page, self.console = fresh.page, fresh.console
        self.restarts += 1

    def close(self) -> None:
        def stop() -> None:
            try:
                self.browser.close()
            finally:
                self.playwright.stop()

        try:
            self.thread.call(stop)
        finally:
            self.thread.stop()


def launch(workdir: Path) -> Browser:
    """Start Chromium (on a thread of its own) and open the parity page with both runners loaded."""
    thread = _Thread()
    try:
        return thread.call(lambda: _launch(thread, workdir))
    except BaseException:
        thread.stop()
        raise


def _launch(thread: _Thread, workdir: Path) -> Browser:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        raise BrowserUnavailable(f"playwright is not installed ({e}); {INSTALL_HINT}") from None
    from jaxcore_webgl.export import runner_js as webgl_runner
    from jaxcore_webgpu.export import runner_js as webgpu_runner

    exe = chromium_path()
    t0 = time.perf_counter()
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
    except Exception as e:
        pw.stop()
        raise BrowserUnavailable(f"Chromium ({exe}) did not start: {str(e).splitlines()[0]}") from None
    workdir.mkdir(parents=True, exist_ok=True)
    html = workdir / "parity.html"
    html.write_text("<!doctype html><meta charset=utf-8><title>jaxcore browser parity</title>\n")
    page = browser.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.goto(html.as_uri())
    for script in (webgpu_runner(), webgl_runner(), (HERE / "page.js").read_text()):
        page.add_script_tag(content=script)
    info = page.evaluate("() => jaxcoreParity.info()")
    return Browser(thread, pw, browser, page, info, time.perf_counter() - t0, console, workdir)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def batches(cases: list[Any], most: int = 64) -> list[list[Any]]:
    out: list[list[Any]] = []
    cur: list[Any] = []
    size = 0
    for c in cases:
        n = sum(map(len, c.inputs)) + sum(len(o or b"") for o in c.outputs)
        if cur and (len(cur) >= most or size + n > BATCH_BYTES):
            out.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += n
    if cur:
        out.append(cur)
    return out


# One page call of a batch; past it the batch runs again a case at a time, after a restart. The
# matmul batch takes 36 s on an idle 2-core box: a slower one timed out there and paid it twice.
BATCH_SECONDS = 120.0
CASE_SECONDS = 30.0  # one case alone; past it the case is reported as timed out (F5)
TIMED_OUT = "timed out in the browser"


def _run_batch(b: Browser, device: str, batch: list[Any], timeout: float) -> list[dict[str, Any]]:
    jobs = [{"program": c.program, "inputs": [_b64(x) for x in c.inputs]} for c in batch]
    got = b.evaluate(f"(jobs) => jaxcoreParity.{device}(jobs)", jobs, timeout)
    if got.get("lost"):
        raise RuntimeError(f"{device}: the browser lost its device: {got['lost']}")
    out = []
    for r in got["results"]:
        if r.get("outputs") is not None:
            r["outputs"] = [base64.b64decode(o) for o in r["outputs"]]
        out.append(r)
    return out


def run_cases(b: Browser, device: str, cases: list[Any]) -> list[dict[str, Any]]:
    """Run every case's program on its inputs in the page; results in order. A case the browser
    takes more than CASE_SECONDS over gets {"timed_out": seconds} (the browser is restarted)."""
    results: list[dict[str, Any]] = []
    for batch in batches(cases, BATCH_PROGRAMS[device]):
        try:
            results += _run_batch(b, device, batch, BATCH_SECONDS)
            continue
        except BrowserTimeout:
            pass
        for c in batch:
            try:
                results += _run_batch(b, device, [c], CASE_SECONDS)
            except BrowserTimeout:
                results.append({"timed_out": CASE_SECONDS})
    return results


def tolerance_of(source: dict[str, Any], dtype: str) -> tuple[tuple[float, float], bool]:
    """The loosest (rtol, atol) of the ops in a case for an output dtype, doubled (the browser and
    the native device each meet the suite's bound against the exact answer), and whether the
    sign of a zero is free (Min/Max/Sort in the case)."""
    rtol = atol = 0.0
    for op in source.get("ops", ()):
        r, a = lookup(op, DType(dtype))
        rtol, atol = max(rtol, r), max(atol, a)
    free_zero = any(op in SIGN_AGNOSTIC for op in source.get("ops", ()))
    return (2 * rtol, 2 * atol), free_zero


@dataclass
class Verdict:
    """How one case came out in the browser: `problem` is None when it agrees with the native device."""

    problem: str | None = None


_FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _zero_or_an_input_element(case: Any, outs: list[bytes]) -> str | None:
    """The out-of-range read contract: every element is 0 or an element of the buffer read."""
    dtype = case.source["dtypes"][0]
    got = from_buffer(outs[0], dtype)
    allowed = np.concatenate([[0], from_buffer(case.inputs[0], dtype)]).astype(got.dtype)
    bad = ~np.isin(got, allowed)
    if bad.any():
        return f"{int(bad.sum())} of {bad.size} elements are neither 0 nor an element of the buffer read"
    return None


# Tests whose values the contract leaves open, with the property it does promise (checked instead
# of the native device's bits): an unmasked out-of-range read gives 0 or an element of its buffer
# (lavapipe gives 0; Dawn clamps the index).
CONTRACT_CHECKS: dict[str, Callable[[Any, list[bytes]], str | None]] = {
    "test_misuse_out_of_range_read_stays_in_its_buffer": _zero_or_an_input_element,
}


def compare(case: Any, result: dict[str, Any]) -> Verdict:
    """Whether the browser agrees with the native device on `case` (see `Verdict`)."""
    msgs = result.get("messages") or []
    if msgs:
        shown = "; ".join(f"[{m.get('type')}] {m.get('message')}" for m in msgs[:4])
        return Verdict(f"the browser's shader compiler reported {len(msgs)} message(s): {shown}")
    if result.get("error"):
        return Verdict(f"the browser failed to run it: {result['error']}")
    outs = result.get("outputs")
    if outs is None:
        return Verdict("no outputs came back")
    if len(outs) != len(case.outputs):
        return Verdict(f"{len(outs)} outputs came back, {len(case.outputs)} expected")
    check = CONTRACT_CHECKS.get(case.test.rsplit("::", 1)[-1].split("[")[0])
    if check is not None:
        return Verdict(check(case, outs))
    problems = []
    for i, (got, want) in enumerate(zip(outs, case.outputs)):
        dtype = case.source["dtypes"][i]
        if len(got) != len(want):
            return Verdict(f"output {i}: {len(got)} bytes, {len(want)} expected")
        if got == want:
            continue
        g, w = from_buffer(got, dtype), from_buffer(want, dtype)
        if dtype not in _FLOATS:
            bad = g != w
            text = (
                f"output {i} ({dtype}): {int(bad.sum())} of {bad.size} elements differ from the native "
                f"device's bits; first at [{int(np.argmax(bad))}]: native {w[bad][0]}, browser {g[bad][0]}"
            )
        else:
            tol, free_zero = tolerance_of(case.source, dtype)
            try:
                assert_close(
                    g,
                    w,
                    "+".join(case.source.get("ops", ())) or "?",
                    dtype,
                    tol=tol,
                    signed_zero=False if free_zero else None,
                    what=f"browser vs native, output {i}",
                )
                continue
            except AssertionError as e:
                text = str(e)
        problems.append(text)
    if not problems:
        return Verdict()
    return Verdict("\n".join(problems))
