"""Dispatch tracing: one event per dispatch, written as Chrome trace-event JSON.

`start_trace()` turns recording on; every `BaseBackend.dispatch` then reports its wall time (and the
device's own time when the backend measures one) through `record_dispatch`. `stop_trace(path)` returns
the events and writes ``{"traceEvents": [...]}``, which ui.perfetto.dev and chrome://tracing open.
When tracing is off the only cost on the dispatch path is the `is_tracing()` check.

Backends that learn device times later (GPU timestamp queries) return a `LateTime` from their run
hook instead of a number: the event is recorded at dispatch time and its device time is filled in by
`LateTime.resolve` when the batch's queries come back. Such backends register a flush callback with
`on_flush_trace`; `stop_trace` runs them before it writes, so every late time is in the file.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

_active = False
_lock = threading.Lock()
_events: list[dict[str, Any]] = []
_pids: dict[str, int] = {}
_t0 = 0.0
_flush: list[Callable[[], None]] = []
_MAX_EXP = 4000  # characters of an expression kept in an event's args


def is_tracing() -> bool:
    """True between `start_trace()` and `stop_trace()`; the one check backends make per dispatch."""
    return _active


def start_trace() -> None:
    """Start recording dispatches (a second call while recording keeps the current trace)."""
    global _active, _t0
    with _lock:
        if _active:
            return
        _events.clear()
        _pids.clear()
        _t0 = time.perf_counter()
        _active = True


def stop_trace(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Stop recording; return the trace events and, given `path`, write them as Chrome trace JSON."""
    global _active
    for cb in list(_flush):
        cb()
    with _lock:
        _active = False
        events = _metadata() + sorted(_events, key=lambda e: (e["ts"], e["pid"], e["tid"]))
        _events.clear()
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    return events


def on_flush_trace(callback: Callable[[], None]) -> None:
    """Run `callback` at every `stop_trace`, before the events are written (late device timestamps)."""
    _flush.append(callback)


def human_size(n: int) -> str:
    """jax-js `humanSize`: 16777216 -> '16.8M', 1000 -> '1.00K', 999 -> '999'."""
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= limit:
            return _precision3(n / limit) + suffix
    return str(n)


def _precision3(x: float) -> str:
    s = f"{x:#.3g}"
    return s[:-1] if s.endswith(".") else s


def source_info(source: Any) -> tuple[str, str, dict[str, Any]]:
    """(label, category, args) describing a Kernel or a Routine, read by attribute so nothing is imported."""
    if hasattr(source, "exp") and hasattr(source, "size"):
        args: dict[str, Any] = {"size": source.size, "nargs": getattr(source, "nargs", None)}
        exp = str(source.exp)
        args["exp"] = exp if len(exp) <= _MAX_EXP else exp[:_MAX_EXP] + "…"
        dtype = getattr(source, "dtype", None)
        if dtype is not None:
            args["dtype"] = str(dtype)
        red = getattr(source, "reduction", None)
        if red is not None:
            args["reduction"] = f"{red.op}:{red.size}"
        return f"Kernel[{human_size(source.size)}]", "kernel" if red is None else "reduction", args
    name = str(getattr(source, "name", type(source).__name__))
    t = getattr(source, "type", None)
    args = {"name": name}
    if t is not None:
        args["inputShapes"] = ", ".join(_shape(s) for s in t.input_shapes)
        args["outputShapes"] = ", ".join(_shape(s) for s in t.output_shapes)
        args["dtype"] = ", ".join(str(d) for d in t.input_dtypes)
    return name, "routine", args


def _shape(shape: Any) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


class LateTime:
    """A dispatch's device time that is known only later (a GPU timestamp query resolves with its batch).

    A backend's run hook returns one; `record_dispatch` links it to the event it records, and the
    backend calls `resolve` once the time is known. A time resolved after `stop_trace` is dropped.
    """

    __slots__ = ("_event", "seconds")

    def __init__(self) -> None:
        self._event: dict[str, Any] | None = None
        self.seconds: float | None = None

    def resolve(self, seconds: float, device_start: float | None = None) -> None:
        """Fill in the device time (seconds). Given `device_start` (a time.perf_counter() value the
        backend mapped from its device clock), the event also says when the device began it
        (`device_ts_us`, on the trace's clock); it stays one event per dispatch."""
        self.seconds = float(seconds)
        with _lock:
            event, self._event = self._event, None
            if event is None or not _active:
                return
            event["args"]["device_time_us"] = round(self.seconds * 1e6, 3)
            if device_start is not None:
                event["args"]["device_ts_us"] = round((device_start - _t0) * 1e6, 3)


# What a backend's run hook returns: the device time in seconds, a `LateTime` it fills in later, or
# None when it does not measure one.
DeviceTime = float | LateTime | None


def record_dispatch(
    device: str, source: Any, start: float, end: float, device_time: DeviceTime = None
) -> None:
    """Record one dispatch: `start`/`end` from time.perf_counter(), `device_time` in seconds if known
    (or a `LateTime` that the backend resolves later)."""
    if not _active:
        return
    label, cat, args = source_info(source)
    args["device"] = device
    late = device_time if isinstance(device_time, LateTime) else None
    if device_time is not None and not isinstance(device_time, LateTime):
        args["device_time_us"] = round(float(device_time) * 1e6, 3)
    with _lock:
        if not _active:
            return
        pid = _pids.setdefault(device, len(_pids) + 1)
        event = {
            "name": label,
            "cat": cat,
            "ph": "X",
            "ts": round((start - _t0) * 1e6, 3),
            "dur": round(max(end - start, 0.0) * 1e6, 3),
            "pid": pid,
            "tid": 0 if cat != "routine" else 1,
            "args": args,
        }
        _events.append(event)
        if late is not None:
            if late.seconds is not None:  # resolved before it was recorded
                args["device_time_us"] = round(late.seconds * 1e6, 3)
            else:
                late._event = event


def _metadata() -> list[dict[str, Any]]:
    """Name each device's process and its kernel/routine tracks so viewers show 'cpu', 'wasm', ..."""
    out: list[dict[str, Any]] = []
    for device, pid in _pids.items():
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": device}})
        for tid, track in ((0, "kernels"), (1, "routines")):
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}})
    return out


# ---- naming a dispatch in an error --------------------------------------------------------------
_CORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_inside: dict[Any, bool] = {}  # code object -> whether it lies under one of the skipped folders


def call_site(skip: tuple[str, ...] = ()) -> str | None:
    """ "file:line" of the innermost frame outside jaxcore's core (and the folders in `skip`, a
    plugin's package): where a user's code called into jaxcore. Each code object's test is cached, so
    a walk costs a few attribute reads per frame."""
    dirs = (_CORE_DIR, *skip)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        key = (code, dirs)
        inside = _inside.get(key)
        if inside is None:
            inside = _inside[key] = code.co_filename.startswith(dirs)
        if not inside:
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def describe(source: Any, limit: int = 160) -> str:
    """A one-line name for a Kernel or Routine in an error message: what it computes, shortened."""
    label, cat, args = source_info(source)
    if cat == "routine":
        return f"routine {label}({args.get('inputShapes', '')}) -> ({args.get('outputShapes', '')})"
    exp = args["exp"]
    exp = exp if len(exp) <= limit else exp[: limit - 1] + "…"
    red = f", reduction {args['reduction']}" if "reduction" in args else ""
    return f"kernel {args.get('dtype', '?')}[{args['size']}]{red}: {exp}"
