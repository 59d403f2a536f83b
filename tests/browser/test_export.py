"""The export API as docs/browser-export.md shows it: the Python example runs, and its program
gives numpy's answer in the page through the shipped runner (WebGPU and WebGL2)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import harness
import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "browser-export.md"


def _example() -> str:
    return re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)


@pytest.mark.parametrize("device", ["webgpu", "webgl"])
def test_docs_example_runs_in_the_page(device: str, browser: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    code = _example().replace('get_backend("webgpu")', f'get_backend("{device}")')
    if device == "webgl":
        code = code.replace(
            "from jaxcore_webgpu.export import runner_js", "from jaxcore_webgl.export import runner_js"
        )
    try:
        exec(compile(code, str(DOC), "exec"), {})
    except RuntimeError as e:  # the device is not available here
        if harness.in_ci():
            raise
        pytest.skip(str(e))
    program = json.loads((tmp_path / "sin_add.json").read_text())
    assert (tmp_path / "runner.js").read_text().startswith("// jaxcore-")
    x = (np.arange(1024, dtype=np.float32) / 100).astype(np.float32)
    y = np.ones(1024, np.float32)
    inputs = [base64.b64encode(a.tobytes()).decode() for a in (x, y)]
    js = (
        "async ([program, inputs]) => { const dec = (b) => Uint8Array.from(atob(b), (c) => c.charCodeAt(0));"
        + (
            "const dev = await JaxcoreWebGPU.requestDevice();"
            "const p = await JaxcoreWebGPU.compile(dev, program);"
            "if (!p.ok) return {messages: p.messages}; const [out] = await p.run(inputs.map(dec));"
            if device == "webgpu"
            else "const p = JaxcoreWebGL.compile(JaxcoreWebGL.createContext(), program);"
            "if (!p.ok) return {messages: p.messages}; const [out] = p.run(inputs.map(dec));"
        )
        + "return {out: Array.from(new Float32Array(out.buffer, out.byteOffset, out.byteLength / 4))}; }"
    )
    got = browser.evaluate(js, [program, inputs])
    assert "messages" not in got, got
    np.testing.assert_allclose(np.array(got["out"], np.float32), np.sin(x) + y, rtol=2e-6, atol=2e-6)
