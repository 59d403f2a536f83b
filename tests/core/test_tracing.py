"""Tracing: one Chrome trace event per dispatch while on, nothing while off."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import jaxcore
from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction, tracing
from jaxcore.routine import Routine

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jaxcore-example-plugin"


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[jaxcore.BaseBackend]:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from jaxcore_example.backend import ExampleBackend

    yield ExampleBackend()
    if tracing.is_tracing():
        tracing.stop_trace()
    sys.modules.pop("jaxcore_example.backend", None)


def _dispatch_three(be: jaxcore.BaseBackend) -> None:
    x = AluExp.global_index(DType.float32, 0, 4, AluVar.gidx)
    a = be.malloc(16, np.arange(4, dtype=np.float32).tobytes())
    out = be.malloc(16)
    be.dispatch(be.prepare_kernel(Kernel(1, 4, x * AluExp.f32(2) + AluExp.f32(1))), [a], [out])
    pair = AluExp.global_index(DType.float32, 0, 4, AluVar.gidx * AluExp.i32(2) + AluVar.ridx)
    out2 = be.malloc(8)
    be.dispatch(be.prepare_kernel(Kernel(1, 2, pair, Reduction(DType.float32, AluOp.Add, 2))), [a], [out2])
    be.dispatch(be.prepare_routine(Routine.build("Sort", [(4,)], [DType.float32])), [a], [out])


def test_nothing_recorded_when_off(backend: jaxcore.BaseBackend) -> None:
    assert not tracing.is_tracing()
    _dispatch_three(backend)
    tracing.record_dispatch("x", object(), 0.0, 1.0)
    jaxcore.start_trace()
    assert [e for e in jaxcore.stop_trace() if e["ph"] == "X"] == []


def test_one_event_per_dispatch_as_chrome_json(backend: jaxcore.BaseBackend, tmp_path: Path) -> None:
    jaxcore.start_trace()
    assert tracing.is_tracing()
    _dispatch_three(backend)
    path = tmp_path / "trace.json"
    events = jaxcore.stop_trace(path)
    assert not tracing.is_tracing()

    data = json.loads(path.read_text())
    assert set(data) >= {"traceEvents"}
    assert data["traceEvents"] == events
    complete = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in complete] == ["Kernel[4]", "Kernel[2]", "Sort"]
    for e in complete:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["args"]["device"] == "example"
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    k, r, sort = complete
    assert k["args"]["size"] == 4 and k["args"]["nargs"] == 1 and k["args"]["exp"]
    assert "reduction" not in k["args"]
    assert r["args"]["reduction"] == "Add:2"
    assert sort["args"]["inputShapes"] == "[4]" and sort["args"]["dtype"] == "float32"
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[k["pid"]] == "example"
    # Events restart with each trace.
    jaxcore.start_trace()
    assert [e for e in jaxcore.stop_trace() if e["ph"] == "X"] == []


def test_device_time_and_flush_callbacks() -> None:
    flushed: list[int] = []
    tracing.on_flush_trace(lambda: flushed.append(1))
    try:
        jaxcore.start_trace()
        k = Kernel(0, 5, AluExp.f32(1))
        tracing.record_dispatch("dev", k, 1.0, 1.5, device_time=0.25)
        (event,) = [e for e in jaxcore.stop_trace() if e["ph"] == "X"]
    finally:
        tracing._flush.clear()
    assert flushed == [1]
    assert event["args"]["device_time_us"] == 250000.0
    assert event["args"]["device"] == "dev"


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (999, "999"), (1000, "1.00K"), (16777216, "16.8M"), (123456, "123K"), (2 * 10**9, "2.00B")],
)
def test_human_size(n: int, text: str) -> None:
    assert tracing.human_size(n) == text
