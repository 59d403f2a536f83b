"""Record what a backend computes: (exported program, input bytes, output bytes) per dispatch.

`Recorder.attach(backend, export)` wraps one backend instance (its methods, not its class), so the
conformance suite's own dispatches on webgpu and webgl become browser parity cases without the
suite knowing. The wrap stays out of the device's way where it can:

- input bytes come from what the host wrote (`malloc` with data) or read (`read`, `read_async`);
  an input the host never saw (the output of an earlier dispatch, or never written) is read when
  it is dispatched on (a flush the run would not otherwise make, counted in `extra_reads`);
- output bytes come from the test's own full read of the output slot; a partial read, a free, a
  second dispatch into the slot or the end of the run reads the whole slot first;
- a dispatch's program is exported once per executable, when it is first dispatched (an export
  failure is a parity failure, kept with the case).

Cases are deduplicated by (program, inputs). As a pytest plugin (`-p browser_recording`, with
`JAXCORE_BROWSER_RECORD=FILE` and `JAXCORE_BROWSER_DEVICES=webgpu,webgl`) it records the named
devices for the whole session and pickles the cases to FILE at the end: that is how
tests/browser runs the suite itself when it is run alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jaxcore import Kernel

_PENDING = object()  # slot written by a recorded dispatch whose output is not yet known


@dataclass
class Case:
    device: str
    test: str  # the pytest node id that dispatched it
    program: dict[str, Any] | None  # the export, or None when the export failed
    export_error: str | None
    inputs: list[bytes]
    outputs: list[bytes | None]  # None until known
    source: dict[str, Any] = field(default_factory=dict)  # op names and dtypes, for tolerances


@dataclass
class Recorder:
    """Cases from every dispatch on the attached backends."""

    cases: list[Case] = field(default_factory=list)
    extra_reads: int = 0
    dispatches: int = 0
    current_test: str = ""
    active: bool = True  # off: every wrapped method is the backend's own (other tests are left alone)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _attached: list[Any] = field(default_factory=list)

    def attach(self, backend: Any, export: Callable[[Any, Any], dict[str, Any]]) -> None:
        """Wrap `backend`'s malloc, read, read_async, dec_ref and dispatch (once per instance)."""
        if getattr(backend, "_jaxcore_recorder", None) is self:
            return
        backend._jaxcore_recorder = self
        self._attached.append(backend)
        rec = self
        known: dict[int, Any] = {}  # slot -> bytes | _PENDING (absent: never written by the host)
        pending: dict[int, tuple[Case, int]] = {}  # slot -> (case, output index)
        programs: dict[int, tuple[dict[str, Any] | None, str | None, str]] = {}
        malloc0, read0, read_async0 = backend.malloc, backend.read, backend.read_async
        dec_ref0, dispatch0 = backend.dec_ref, backend.dispatch

        def settle(slot: int, data: bytes | None = None) -> None:
            """The full contents of a pending slot are known now (or are read here)."""
            hit = pending.pop(slot, None)
            if hit is None:
                return
            if data is None:
                data = read0(slot)
            case, i = hit
            case.outputs[i] = data
            known[slot] = data

        def malloc(size: int, initial_data: Any = None) -> int:
            slot = malloc0(size, initial_data)
            if initial_data is not None and rec.active:
                with rec._lock:
                    known[slot] = bytes(memoryview(initial_data).cast("B"))
            return slot

        def host_read(slot: int, start: int, data: bytes) -> bytes:
            """What the host read of `slot` settles (its full contents, when it read them all)."""
            if rec.active:
                with rec._lock:
                    if slot in pending:
                        whole = start == 0 and len(data) == backend.size_of(slot)
                        settle(slot, data if whole else None)
            return data

        def read(slot: int, start: int = 0, count: int | None = None) -> bytes:
            return host_read(slot, start, read0(slot, start, count))

        async def read_async(slot: int, start: int = 0, count: int | None = None) -> bytes:
            return host_read(slot, start, await read_async0(slot, start, count))

        def dec_ref(slot: int) -> None:
            if not rec.active:
                known.pop(slot, None)
                dec_ref0(slot)
                return
            with rec._lock:
                try:
                    last = backend._buffer(slot).refs <= 1
                except Exception:
                    last = False
                if last:
                    settle(slot)
                    known.pop(slot, None)
            dec_ref0(slot)

        def program_of(exe: Any) -> tuple[dict[str, Any] | None, str | None, str]:
            got = programs.get(id(exe))
            if got is None:
                try:
                    prog = export(backend, exe)
                    got = (prog, None, _digest(prog))
                except Exception as e:  # a parity failure, reported with the case
                    got = (None, f"{type(e).__name__}: {e}", f"error:{id(exe)}")
                programs[id(exe)] = got
                exe_ref.append(exe)  # keep it alive, so id() stays unique
            return got

        exe_ref: list[Any] = []

        def dispatch(exe: Any, inputs: list[int], outputs: list[int]) -> None:
            if not rec.active or _is_chain(exe):  # a routine in another layout: its parts are
                # kernels and the routine's own layout, replayed where the suite runs those
                for s in outputs:
                    known.pop(s, None)
                    pending.pop(s, None)
                dispatch0(exe, inputs, outputs)
                return
            with rec._lock:
                rec.dispatches += 1
                prog, err, digest = program_of(exe)
                ins = []
                for s in inputs:
                    if s in pending:
                        settle(s)
                    data = known.get(s)
                    if data is None:
                        data = read0(s)
                        rec.extra_reads += 1
                    ins.append(data)
                for s in outputs:
                    if s in pending:
                        settle(s)
            dispatch0(exe, inputs, outputs)  # raises on bad dispatches: nothing recorded then
            with rec._lock:
                key = (
                    digest,
                    hashlib.blake2b(b"".join(ins) + repr([len(x) for x in ins]).encode()).hexdigest(),
                )
                if key in rec._seen:
                    for s in outputs:
                        known.pop(s, None)
                    return
                rec._seen.add(key)
                case = Case(
                    backend.name,
                    rec.current_test,
                    prog,
                    err,
                    ins,
                    [None] * len(outputs),
                    _describe(exe.source),
                )
                rec.cases.append(case)
                for i, s in enumerate(outputs):
                    known[s] = _PENDING
                    pending[s] = (case, i)

        def finish() -> None:
            with rec._lock:
                for s in list(pending):
                    try:
                        settle(s)
                    except Exception:
                        pending.pop(s, None)
                known.clear()  # a slot's contents may change while the recorder is off

        backend.malloc, backend.read, backend.read_async = malloc, read, read_async
        backend.dec_ref, backend.dispatch = dec_ref, dispatch
        backend._jaxcore_recorder_finish = finish

    def finish(self) -> None:
        """Read every output still unknown (slots the run never read nor freed)."""
        for b in self._attached:
            b._jaxcore_recorder_finish()

    def complete(self) -> list[Case]:
        return [c for c in self.cases if all(o is not None for o in c.outputs) or c.program is None]


def _digest(prog: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(prog, sort_keys=True).encode(), digest_size=16).hexdigest()


def _describe(src: Any) -> dict[str, Any]:
    """What the comparison needs of the source: op names (for tolerances) and output dtypes."""
    if isinstance(src, Kernel):
        ops = {n.op.name for n in src.nodes()}
        if src.reduction is not None:
            ops.add("Reduce" + src.reduction.op.name)
        inputs = {n.arg[0]: str(n.dtype) for n in src.nodes() if n.op.name in ("GlobalIndex", "GlobalView")}
        return {
            "kind": "kernel",
            "ops": sorted(ops),
            "dtypes": [str(src.dtype)],
            "input_dtypes": [inputs.get(i) for i in range(src.nargs)],
            "text": str(src)[:400],
        }
    return {
        "kind": "routine",
        "ops": [str(src.name)],
        "dtypes": [str(d) for d in src.type.output_dtypes],
        "input_dtypes": [str(d) for d in src.type.input_dtypes],
        "text": f"{src.name} {src.type}"[:400],
    }


# ---- as a pytest plugin (the subprocess tests/browser starts when run alone) ------------------
_RECORDER = Recorder()


def exporters() -> dict[str, Callable[[Any, Any], dict[str, Any]]]:
    from jaxcore_webgl.export import export as webgl_export
    from jaxcore_webgpu.export import export as webgpu_export

    return {"webgpu": webgpu_export, "webgl": webgl_export}


def pytest_sessionstart(session: Any) -> None:
    import jaxcore

    names = [n for n in os.environ.get("JAXCORE_BROWSER_DEVICES", "").split(",") if n]
    exp = exporters()
    for name in names:
        _RECORDER.attach(jaxcore.get_backend(name), exp[name])


def pytest_runtest_setup(item: Any) -> None:
    _RECORDER.current_test = item.nodeid


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get("JAXCORE_BROWSER_RECORD")
    if not path:
        return
    _RECORDER.finish()
    with open(path, "wb") as f:
        pickle.dump(
            {
                "cases": _RECORDER.complete(),
                "dispatches": _RECORDER.dispatches,
                "extra_reads": _RECORDER.extra_reads,
                "exitstatus": int(exitstatus),
            },
            f,
        )


def _is_chain(exe: Any) -> bool:
    """A routine run as steps (test_pipeline's lower TriangularSolve): a page runs it through
    jaxcore.record's export instead. A misuse case dispatches what is not an Executable."""
    return bool(getattr(exe, "runs_as_steps", False))
