"""jaxcore.record and jaxcore.web.write_bundle without a browser: versions, constants, aliasing,
dead dispatches, and the errors an export names. Runs on the cpu device, given a stand-in export."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import jaxcore
from jaxcore import AluExp, DType, Fused
from jaxcore.record import BufferSpec, Pipeline, RecordError
from jaxcore.web import BundleError, write_bundle

F32 = DType.float32
N = 8


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The cpu backend with an `export` (the kernel's key) and a runtime module, as a browser device has."""
    b = jaxcore.get_backend("cpu")
    monkeypatch.setattr(b, "export", lambda exe: {"key": str(exe.source.key())[:40]}, raising=False)
    monkeypatch.setattr(
        b, "export_runtime", lambda: ("cpu.js", "export const NAME = 'cpu';\n"), raising=False
    )
    return b


def put(b: Any, a: np.ndarray) -> int:
    return b.malloc(a.nbytes, a.astype(np.float32).tobytes())


def get(b: Any, slot: int) -> np.ndarray:
    return np.frombuffer(b.read(slot), np.float32)


def run(b: Any, value: Fused, out: int | None = None) -> int:
    kernel, inputs = value.kernel()
    out = b.malloc(kernel.bytes) if out is None else out
    b.dispatch(b.prepare_kernel(kernel), list(inputs), [out])
    return out


def add(a: int, c: int) -> Fused:
    return Fused.map(AluExp.add, Fused.read(a, F32, (N,)), Fused.read(c, F32, (N,)))


def scale(a: int, k: float) -> Fused:
    return Fused.map(lambda u: u * AluExp.f32(k), Fused.read(a, F32, (N,)))


X = np.arange(N, dtype=np.float32)
W = np.full(N, 10, np.float32)


def spec(slot: int) -> tuple[int, DType, tuple[int, ...]]:
    return (slot, F32, (N,))


def test_inputs_constants_and_intermediates(cpu: Any) -> None:
    x, w = put(cpu, X), put(cpu, W)
    with jaxcore.record(cpu) as rec:
        h = run(cpu, add(x, w))  # x + w
        y = run(cpu, scale(h, 2.0))  # (x + w) * 2
    np.testing.assert_array_equal(get(cpu, y), (X + W) * 2)  # the dispatches ran
    pipe = rec.export(inputs={"x": BufferSpec(x, F32, (N,))}, outputs={"y": spec(y)})
    assert isinstance(pipe, Pipeline) and pipe.device == "cpu" and pipe.runtime[0] == "cpu.js"
    assert len(pipe.steps) == 2 and len(pipe.programs) == 2
    (xin,), (yout,) = pipe.inputs, pipe.outputs
    ((cval, cbytes),) = pipe.constants  # w: read, never written, not an input
    assert cbytes == W.tobytes()
    s0, s1 = pipe.steps
    assert set(s0.inputs) == {xin.value, cval} and s1.inputs == s0.outputs and s1.outputs == (yout.value,)
    assert pipe.values[xin.value] == pipe.values[yout.value] == N * 4
    doc = pipe.to_json([(0, N * 4)])
    assert doc["inputs"] == {"x": xin.value} and doc["constants"] == [
        {"value": cval, "offset": 0, "length": 32}
    ]


def test_an_output_aliasing_its_input_is_a_new_version(cpu: Any) -> None:
    x = put(cpu, X)
    with jaxcore.record(cpu) as rec:
        run(cpu, scale(x, 3.0), out=x)  # x *= 3, in place
        run(cpu, scale(x, 0.5), out=x)  # x *= 0.5
    np.testing.assert_array_equal(get(cpu, x), X * 1.5)
    # the input is x before the recording, the output x after it: two values of one slot
    pipe = rec.export(inputs={"x": spec(x)}, outputs={"x": spec(x)})
    (xin,), (xout,) = pipe.inputs, pipe.outputs
    assert xin.value != xout.value and not pipe.constants
    a, b = pipe.steps
    assert a.inputs == (xin.value,) and b.inputs == a.outputs and b.outputs == (xout.value,)
    assert a.program != b.program


def test_a_constant_overwritten_in_the_recording_keeps_its_first_bytes(cpu: Any) -> None:
    x, w = put(cpu, X), put(cpu, W)
    with jaxcore.record(cpu) as rec:
        y = run(cpu, add(x, w))  # reads w as it was
        run(cpu, scale(w, 0.0), out=w)  # then w is overwritten (after the read)
    pipe = rec.export(inputs={"x": spec(x)}, outputs={"y": spec(y)})
    assert [c for _, c in pipe.constants] == [W.tobytes()]
    assert len(pipe.steps) == 1  # the overwrite feeds no output: dropped


def test_constants_freed_in_the_recording_are_kept(cpu: Any) -> None:
    x, w = put(cpu, X), put(cpu, W)
    with jaxcore.record(cpu) as rec:
        k = put(cpu, np.full(N, 7, np.float32))  # made and freed inside: its bytes from the malloc
        h = run(cpu, add(x, k))
        cpu.dec_ref(k)
        y = run(cpu, add(h, w))
        cpu.dec_ref(w)  # made before, freed inside: read before the free
    pipe = rec.export(inputs={"x": spec(x)}, outputs={"y": spec(y)})
    assert sorted(c for _, c in pipe.constants) == sorted([np.full(N, 7, np.float32).tobytes(), W.tobytes()])


def test_a_constant_freed_before_the_export_is_an_error(cpu: Any) -> None:
    x, w = put(cpu, X), put(cpu, W)
    with jaxcore.record(cpu) as rec:
        y = run(cpu, add(x, w))
    cpu.dec_ref(w)
    with pytest.raises(RecordError, match=f"slot {w} holds a constant .* freed before the export"):
        rec.export(inputs={"x": spec(x)}, outputs={"y": spec(y)})


def test_dead_dispatches_and_their_constants_are_dropped_and_programs_shared(cpu: Any) -> None:
    x, w = put(cpu, X), put(cpu, W)
    with jaxcore.record(cpu) as rec:
        run(cpu, add(x, w))  # feeds nothing named
        a = run(cpu, scale(x, 2.0))
        b = run(cpu, scale(a, 2.0))  # the same kernel again: one program, two steps
    pipe = rec.export(inputs={"x": spec(x)}, outputs={"b": spec(b)})
    assert len(rec.dispatches) == 3 and len(pipe.steps) == 2 and len(pipe.programs) == 1
    assert not pipe.constants and pipe.steps[0].program == pipe.steps[1].program == 0


def test_specs_by_object_tuple_or_dataclass(cpu: Any) -> None:
    x = put(cpu, X)
    with jaxcore.record(cpu) as rec:
        y = run(cpu, scale(x, 2.0))
    obj = types.SimpleNamespace(slot=x, dtype="float32", shape=[N])
    pipe = rec.export(inputs={"x": obj}, outputs={"y": jaxcore.record.BufferSpec(y, F32, (2, 4))})
    assert pipe.inputs[0].shape == (N,) and pipe.outputs[0].shape == (2, 4)
    assert jaxcore.record.BufferSpec(y, F32, (2, 4)).nbytes == 32


@pytest.mark.parametrize(
    "case, match",
    [
        ("untouched_input", r"input 'z' \(slot \d+\): the recording never uses it"),
        ("written_input", r"input 'z' \(slot \d+\): the recording only writes it"),
        ("read_output", r"output 'z' \(slot \d+\) is never written: the recording only reads it"),
        ("untouched_output", r"output 'z' \(slot \d+\) is never written: the recording never uses it"),
        ("input_size", r"input 'x' \(slot \d+\) is float32\[4\] = 16 bytes, but the slot holds 32 bytes"),
        ("output_dtype", r"output 'y' \(slot \d+\) is float32 as recorded, not int32"),
        ("same_slot", r"inputs 'x' and 'z' name the same slot"),
        ("no_outputs", r"at least one output"),
        ("bad_spec", r"output 'y': expected \(slot, dtype, shape\)"),
        ("bad_name", r"output names are non-empty strings"),
    ],
)
def test_export_errors_name_what_is_wrong(cpu: Any, case: str, match: str) -> None:
    x, w, spare = put(cpu, X), put(cpu, W), put(cpu, X)
    with jaxcore.record(cpu) as rec:
        y = run(cpu, add(x, w))
    ins: dict[str, Any] = {"x": spec(x)}
    outs: dict[Any, Any] = {"y": spec(y)}
    if case == "untouched_input":
        ins["z"] = spec(spare)
    elif case == "written_input":
        ins["z"] = spec(y)
    elif case == "read_output":
        outs["z"] = spec(w)
    elif case == "untouched_output":
        outs["z"] = spec(spare)
    elif case == "input_size":
        ins["x"] = (x, F32, (4,))
    elif case == "output_dtype":
        outs["y"] = (y, DType.int32, (N,))
    elif case == "same_slot":
        ins["z"] = spec(x)
    elif case == "no_outputs":
        outs = {}
    elif case == "bad_spec":
        outs["y"] = (y, F32)
    elif case == "bad_name":
        outs = {"": spec(y)}
    with pytest.raises(RecordError, match=match):
        rec.export(inputs=ins, outputs=outs)


def test_recording_state_errors_and_restores_the_backend(cpu: Any) -> None:
    x = put(cpu, X)
    before = cpu.__dict__.get("dispatch")
    with jaxcore.record(cpu) as empty:
        with pytest.raises(RecordError, match="once the `with jaxcore.record"):
            empty.export(outputs={"x": spec(x)})
    with pytest.raises(RecordError, match="holds no dispatch"):
        empty.export(outputs={"x": spec(x)})
    with pytest.raises(KeyError):
        with jaxcore.record(cpu):
            raise KeyError("inside")
    assert cpu.__dict__.get("dispatch") is before  # unwrapped, even after an exception
    y = run(cpu, scale(x, 2.0))  # outside a recording: not captured by anything
    np.testing.assert_array_equal(get(cpu, y), X * 2)


def test_a_device_without_export_or_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    b = jaxcore.get_backend("cpu")
    x = put(b, X)
    with jaxcore.record(b) as rec:
        y = run(b, scale(x, 2.0))
    with pytest.raises(RecordError, match="has no runtime module for a page"):
        rec.export(inputs={"x": spec(x)}, outputs={"y": spec(y)})
    monkeypatch.setattr(b, "export_runtime", lambda: ("cpu.js", ""), raising=False)
    with pytest.raises(RecordError, match="cannot export programs for a page"):
        rec.export(inputs={"x": spec(x)}, outputs={"y": spec(y)})


def _pipe(cpu: Any, w: np.ndarray, name: str = "y") -> Pipeline:
    x, ws = put(cpu, X), put(cpu, w)
    with jaxcore.record(cpu) as rec:
        y = run(cpu, add(x, ws))
    return rec.export(inputs={"x": spec(x)}, outputs={name: spec(y)})


def test_write_bundle_dedups_constants_across_targets(cpu: Any, tmp_path: Path) -> None:
    a, b = _pipe(cpu, W), _pipe(cpu, W)
    c = _pipe(cpu, np.arange(N, dtype=np.float32)[::-1].copy())
    path = write_bundle(tmp_path, [a, b, c], name="m")
    doc = json.loads(path.read_text())
    blob = (tmp_path / "m.bin").read_bytes()
    assert (
        doc["format"] == "jaxcore-web-bundle" and doc["binary"] == "m.bin" and doc["binaryBytes"] == len(blob)
    )
    assert doc["inputs"] == {"x": {"dtype": "float32", "shape": [N]}}
    ranges = [(t["constants"][0]["offset"], t["constants"][0]["length"]) for t in doc["targets"]]
    assert ranges[0] == ranges[1] and ranges[2] == (32, 32)  # W once; the other aligned after it
    assert blob[:32] == W.tobytes()
    files = {p.name for p in (tmp_path / "jaxcore-web").iterdir()}
    assert files == {"index.js", "index.d.ts", "package.json", "cpu.js"}
    pkg = json.loads((tmp_path / "jaxcore-web" / "package.json").read_text())
    assert pkg["exports"]["./cpu.js"] == "./cpu.js" and pkg["type"] == "module"


def test_write_bundle_refuses_what_cannot_share_a_bundle(cpu: Any, tmp_path: Path) -> None:
    a = _pipe(cpu, W)
    with pytest.raises(BundleError, match="differ from"):
        write_bundle(tmp_path, [a, _pipe(cpu, W, name="other")])
    with pytest.raises(BundleError, match="at least one pipeline"):
        write_bundle(tmp_path, [])
    with pytest.raises(BundleError, match="bundle name"):
        write_bundle(tmp_path, [a], name="../up")
    with pytest.raises(BundleError, match="takes pipelines"):
        write_bundle(tmp_path, [object()])  # type: ignore[list-item]
    odd = Pipeline(**{**a.__dict__, "runtime": ("cpu.js", "other text")})
    with pytest.raises(BundleError, match="different runtime modules named 'cpu.js'"):
        write_bundle(tmp_path, [a, odd])
    bad = Pipeline(**{**a.__dict__, "runtime": ("../x.js", "")})
    with pytest.raises(BundleError, match="not a plain NAME.js"):
        write_bundle(tmp_path, [bad])


def test_record_is_reachable_as_the_contract_names_it() -> None:
    assert callable(jaxcore.record) and jaxcore.record.BufferSpec is BufferSpec
    assert jaxcore.record.RecordError is RecordError
    assert jaxcore.web.write_bundle is write_bundle


def test_a_routine_in_another_layout_is_recorded_as_its_steps(cpu: Any) -> None:
    # a lower solve with right-hand sides as columns runs as copies around the device's own layout;
    # the export holds each step, the temporaries between them as intermediates
    from jaxcore.routine import Routine, Routines, TriangularSolveParams

    n = 4
    a = np.tril(np.arange(1, n * n + 1, dtype=np.float32).reshape(n, n)) + np.eye(n, dtype=np.float32) * 8
    bmat = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    sa, sb = put(cpu, a), put(cpu, bmat)
    params = TriangularSolveParams(lower=True, columns=True)
    r = Routine.build(Routines.TriangularSolve, [a.shape, bmat.shape], [F32, F32], params)
    out = cpu.malloc(bmat.nbytes)
    with jaxcore.record(cpu) as rec:
        cpu.dispatch(cpu.prepare_routine(r), [sa, sb], [out])
    want = np.linalg.solve(np.tril(a), bmat)
    np.testing.assert_allclose(get(cpu, out).reshape(n, 2), want, rtol=1e-5, atol=1e-6)
    pipe = rec.export(inputs={"b": (sb, F32, bmat.shape)}, outputs={"x": (out, F32, bmat.shape)})
    kinds = [type(d.exe.source).__name__ for d in rec.dispatches]
    assert kinds == ["Kernel", "Kernel", "Routine", "Kernel"]
    assert len(pipe.steps) == 4 and len(pipe.constants) == 1  # a is a constant
