"""The digit showcase (examples/web) in headless Chromium: build.py trains the MLP, records its forward
pass on webgpu and webgl and writes the bundle; the page, served from 127.0.0.1, runs the bundled
digits on the device it is asked for (?device=), and gives what the Python device gave: the predicted
class (int32) bit for bit, logits and probabilities within the contract's float tolerances.

Set JAXCORE_SHOWCASE_SCREENSHOT=docs/images/web-digits.png to write the README's screenshot too.
"""

from __future__ import annotations

import functools
import http.server
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import numpy as np
import pytest

from jaxcore.conformance.harness import assert_close
from jaxcore.conformance.tolerances import lookup

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "examples" / "web"
PAGE_FILES = ("index.html", "app.js")
NAMES = {"webgpu": "WebGPU", "webgl": "WebGL2"}
# The ops between the bundle's input and its float outputs: the loosest one's rtol, doubled (the
# page and the Python device each meet it against the exact answer, as in the parity tests), taken
# relative to each digit's largest output (a sum's rounding scales with its terms, not with a
# logit that cancels to near 0: Chromium's SwiftShader and the native device round differently).
FLOAT_OPS = {"logits": ("ReduceAdd",), "probs": ("ReduceAdd", "Exp", "Reciprocal")}
# a 2 drawn on the 280×280 pad (its pixels): an arc, then the diagonal and the base
TWO = [
    (140 + 60 * math.cos(math.radians(t)), 95 - 50 * math.sin(math.radians(t))) for t in range(160, -31, -10)
] + [(80, 235), (205, 235)]
PAGE_SECONDS = 240.0  # one page load: shader compiles on SwiftShader, on a 2-core machine


def _fail_or_skip(msg: str) -> None:
    if harness.in_ci():
        pytest.fail(f"CI: {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """The page and a fresh bundle (build.py --check, in a subprocess) served on 127.0.0.1:
    (the page's url, samples.json)."""
    import jaxcore

    for device in ("webgpu", "webgl"):
        try:
            jaxcore.get_backend(device)
        except Exception as e:  # the Python device is not available here
            _fail_or_skip(f"the {device} device is not available: {e}")
    root = tmp_path_factory.mktemp("showcase")
    for name in PAGE_FILES:
        shutil.copy(WEB / name, root / name)
    proc = subprocess.run(
        [sys.executable, str(WEB / "build.py"), "--out", str(root / "dist"), "--samples", "1", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"build.py failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    info = json.loads((root / "dist" / "samples.json").read_text())
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="showcase-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html", info
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def _open(browser: Any, url: str, screenshot: Path | None) -> dict[str, Any]:
    """Load the page in a new tab, wait for its first result and timing runs, run every bundled
    digit, and return what the page computed and reports."""

    def job() -> dict[str, Any]:
        page = browser.browser.new_page(viewport={"width": 800, "height": 640})
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        try:
            page.goto(url)
            ready = page.evaluate("() => window.showcase.ready.then(() => null, (e) => String(e))")
            if ready is not None:
                return {"error": ready, "console": console}
            results = page.evaluate("() => window.showcase.runSamples()")
            drawn = _draw(page, TWO)
            shown = page.evaluate(
                "() => ({device: showcase.device, ranOn: document.getElementById('ran-on').textContent,"
                " firstMs: showcase.firstMs, runMs: showcase.runMs, stats: showcase.stats()})"
            )
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
            return {"results": results, "drawn": drawn, "console": console, **shown}
        finally:
            page.close()

    return browser.thread.call(job, PAGE_SECONDS)


def _draw(page: Any, stroke: list[tuple[float, float]]) -> dict[str, Any]:
    """Draw one stroke on the pad with the mouse; what the page predicted for it."""
    page.click("#clear")
    box = page.locator("#pad").bounding_box()
    page.mouse.move(box["x"] + stroke[0][0], box["y"] + stroke[0][1])
    page.mouse.down()
    for x, y in stroke[1:]:
        page.mouse.move(box["x"] + x, box["y"] + y, steps=4)
    page.mouse.up()
    page.wait_for_function("() => !window.showcase.busy() && window.showcase.drawn !== null")
    return {"predicted": page.evaluate("() => window.showcase.drawn.predicted")}


@pytest.mark.parametrize("device", ["webgpu", "webgl"])
def test_showcase_page_matches_the_python_device(
    device: str,
    browser: Any,
    site: tuple[str, dict[str, Any]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    url, info = site
    wanted = os.environ.get("JAXCORE_SHOWCASE_SCREENSHOT", "").strip()
    shot = Path(wanted) if wanted and device == "webgpu" else tmp_path / "page.png"
    got = _open(browser, f"{url}?device={device}", shot)
    assert "error" not in got, f"the page failed on {device}: {got['error']}\n" + "\n".join(
        got["console"][-20:]
    )
    assert got["device"] == device, f"asked for {device}, the page ran on {got['device']}"
    assert got["ranOn"] == NAMES[device]
    want = info["expected"][device]
    results = got["results"]
    assert len(results) == info["count"]
    labels = np.array([r["predicted"] for r in results], np.int32)
    assert_close(
        labels, np.array(want["label"], np.int32), "Cast", "int32", what=f"{device}: predicted class"
    )
    for key, ops in FLOAT_OPS.items():
        rtol = 2 * max(lookup(op, "float32")[0] for op in ops)
        for i, r in enumerate(results):
            g, w = np.array(r[key], np.float32), np.array(want[key][i], np.float32)
            tol = (rtol, rtol * float(np.abs(w).max()))
            assert_close(
                g, w, ops[0], "float32", tol=tol, what=f"{device}: digit {i}'s {key}, page vs Python"
            )
    assert got["drawn"]["predicted"] == 2, f"a 2 drawn with the mouse was classified as {got['drawn']}"
    truth = np.array(info["labels"][: len(results)], np.int32)
    line = (
        f"showcase on {device}: {len(results)} digits, {int((labels == truth).sum())} classified right; "
        f"first result {got['firstMs']:.0f} ms, per run {got['runMs']:.2f} ms (SwiftShader)"
    )
    harness.summary_lines(request).append(line)
