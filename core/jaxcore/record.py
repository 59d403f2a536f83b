"""Record the dispatches a computation makes on a backend, and export them as a pipeline for a page.

    with jaxcore.record(backend) as rec:      # every backend.dispatch inside is captured (and runs)
        ...                                     # e.g. an array frontend's forward pass
    pipe = rec.export(inputs={"x": (x_slot, DType.float32, (1, 784))}, outputs={"y": (y_slot, ...)})
    jaxcore.web.write_bundle("out", [pipe], name="model")

A recording sees slots, not values: each dispatch output is a new *version* of its slot (an output
may alias an input), and the export works on versions. Of the values a recorded dispatch reads
from before the recording (version 0 of a slot), the named inputs are uploaded at every run and
the rest are constants (weights): their bytes are taken from the backend once (at export, or just
before the recording overwrites or frees them) and uploaded once when the page loads. Every other
value is an intermediate that lives and dies on the device. Dispatches no output depends on are
dropped. Each distinct executable is exported once through the backend's `export(exe)`, and the
page runs it with the device's runtime module (`backend.export_runtime()`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

from jaxcore.backend import Backend, Executable, SlotError, _SplitRun
from jaxcore.dtype import DType, byte_width
from jaxcore.kernel import Kernel


class RecordError(ValueError):
    """A recording that cannot be exported as asked (the message names the input or output)."""


@dataclass(frozen=True)
class BufferSpec:
    """A named input or output of an export: the slot that holds it, its dtype and its shape."""

    slot: int
    dtype: DType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * byte_width(self.dtype)


@dataclass(frozen=True)
class Port:
    """A named input or output of a pipeline: the value it is (see `Pipeline`), dtype and shape."""

    name: str
    value: int
    dtype: DType
    shape: tuple[int, ...]

    def describe(self) -> dict[str, Any]:
        return {"dtype": str(self.dtype), "shape": list(self.shape)}


@dataclass(frozen=True)
class Step:
    """One dispatch of a pipeline: program `program` reads values `inputs`, writes values `outputs`."""

    program: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Pipeline:
    """A recorded computation as the page runs it: values (numbered, `values[v]` their byte sizes)
    flow from the inputs and constants through the steps to the outputs. `programs` are the
    device's exported programs, `runtime` the (file name, text) of the ES module that runs them."""

    device: str
    runtime: tuple[str, str]
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    values: tuple[int, ...]
    constants: tuple[tuple[int, bytes], ...]
    programs: tuple[dict[str, Any], ...]
    steps: tuple[Step, ...]

    def to_json(self, constant_ranges: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """The bundle's target entry; constant i's bytes are at `constant_ranges[i]` (offset, length)
        of the bundle's binary file."""
        return {
            "device": self.device,
            "runtime": self.runtime[0],
            "values": list(self.values),
            "inputs": {p.name: p.value for p in self.inputs},
            "outputs": {p.name: p.value for p in self.outputs},
            "constants": [
                {"value": v, "offset": off, "length": n}
                for (v, _), (off, n) in zip(self.constants, constant_ranges, strict=True)
            ],
            "programs": list(self.programs),
            "steps": [
                {"program": s.program, "inputs": list(s.inputs), "outputs": list(s.outputs)}
                for s in self.steps
            ],
        }


@dataclass(frozen=True)
class Dispatch:
    """One captured dispatch: the executable, its slots, and their byte sizes at the time."""

    exe: Executable
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    input_bytes: tuple[int, ...]
    output_bytes: tuple[int, ...]


_MISSING = object()


@dataclass(eq=False)
class Recording:
    """The context manager `jaxcore.record(backend)` returns: while open, the backend instance's
    `dispatch` (and `malloc`, `dec_ref`, to keep the bytes of constants) are wrapped; they still
    do what they did. Dispatches from other threads on the same backend are captured too; a
    `dispatch` bound before the block (`d = backend.dispatch`) is not."""

    backend: Backend
    dispatches: list[Dispatch] = field(default_factory=list)
    _bytes: dict[int, bytes] = field(default_factory=dict)  # version-0 bytes known without a read
    _read_early: set[int] = field(default_factory=set)  # slots whose version 0 was read
    _written: set[int] = field(default_factory=set)
    _saved: dict[str, Any] = field(default_factory=dict)
    _temps: Iterator[int] = field(default_factory=lambda: itertools.count(-1, -1))

    def __enter__(self) -> Recording:
        if self._saved:
            raise RuntimeError("this recording is already open")
        b: Any = self.backend
        wrappers: dict[str, Callable[..., Any]] = {
            "dispatch": self._wrap_dispatch(b.dispatch),
            "malloc": self._wrap_malloc(b.malloc),
            "dec_ref": self._wrap_dec_ref(b.dec_ref),
        }
        for name, fn in wrappers.items():
            self._saved[name] = b.__dict__.get(name, _MISSING)
            setattr(b, name, fn)
        return self

    def __exit__(self, *exc: object) -> None:
        b: Any = self.backend
        for name, old in self._saved.items():
            if old is _MISSING:
                b.__dict__.pop(name, None)
            else:
                setattr(b, name, old)
        self._saved.clear()

    def _wrap_dispatch(self, inner: Callable[..., None]) -> Callable[..., None]:
        size_of = getattr(self.backend, "size_of", None)

        def dispatch(
            exe: Executable, inputs: Sequence[SupportsIndex], outputs: Sequence[SupportsIndex]
        ) -> None:
            ins, outs = tuple(map(int, inputs)), tuple(map(int, outputs))
            need_in, need_out, _ = exe._io_bytes
            for s in ins:
                if s not in self._written:
                    self._read_early.add(s)
            for s in outs:  # version 0 of a slot this dispatch overwrites: its bytes, while they last
                if s in self._read_early and s not in self._written:
                    self._keep(s)
            inner(exe, inputs, outputs)  # raises on a bad dispatch: nothing is recorded then
            sizes = tuple(size_of(s) for s in ins) if size_of is not None else tuple(need_in)
            if exe.runs_as_steps:
                self._steps_of(exe, ins, outs, sizes)
            else:
                self.dispatches.append(Dispatch(exe, ins, outs, sizes, tuple(need_out)))
            self._written.update(outs)

        return dispatch

    def _steps_of(
        self, exe: Executable, ins: tuple[int, ...], outs: tuple[int, ...], sizes: tuple[int, ...]
    ) -> None:
        """A routine run through the device's own layout (`jaxcore.canonical`) as its steps, each a
        dispatch of its own; the temporaries between them get slots no backend hands out (< 0)."""
        run: _SplitRun = exe.data
        bufs = list(ins)
        known = dict(zip(ins, sizes))
        for i, part in enumerate(run.parts):
            args = tuple(bufs[b] for b in run.reads[i])
            dst = outs if i == len(run.parts) - 1 else (next(self._temps),)
            bufs.extend(dst if i < len(run.parts) - 1 else ())
            need_in, need_out, _ = part._io_bytes
            arg_bytes = tuple(known.get(a, n) for a, n in zip(args, need_in))
            self.dispatches.append(Dispatch(part, args, dst, arg_bytes, tuple(need_out)))
            known.update(zip(dst, need_out))

    def _wrap_malloc(self, inner: Callable[..., int]) -> Callable[..., int]:
        def malloc(size: SupportsIndex, initial_data: Any = None) -> int:
            slot = inner(size, initial_data)
            if initial_data is not None:
                self._bytes[int(slot)] = bytes(memoryview(initial_data).cast("B"))
            return slot

        return malloc

    def _wrap_dec_ref(self, inner: Callable[[SupportsIndex], None]) -> Callable[[SupportsIndex], None]:
        def dec_ref(slot: SupportsIndex) -> None:
            s = int(slot)
            if s in self._read_early and s not in self._written:
                self._keep(s)  # it may be the last reference
            inner(slot)

        return dec_ref

    def _keep(self, slot: int) -> None:
        if slot not in self._bytes:
            self._bytes[slot] = bytes(self.backend.read(slot))

    # ---- export ------------------------------------------------------------------------------
    def export(
        self, inputs: Mapping[str, Any] | None = None, outputs: Mapping[str, Any] | None = None
    ) -> Pipeline:
        """The pipeline that computes `outputs` from `inputs` ({name: BufferSpec or (slot, dtype,
        shape)}) as recorded. RecordError when a name's slot is not read (an input) or not written
        (an output) by the recording, or its size differs from the slot's."""
        if self._saved:
            raise RecordError("export once the `with jaxcore.record(...)` block has closed")
        ins = {name: _spec("input", name, s) for name, s in (inputs or {}).items()}
        outs = {name: _spec("output", name, s) for name, s in (outputs or {}).items()}
        if not outs:
            raise RecordError("an export needs at least one output")
        if not self.dispatches:
            raise RecordError("the recording holds no dispatch (was the work done inside the `with` block?)")
        _distinct("input", ins)
        _distinct("output", outs)
        graph = _Graph.build(self.dispatches)
        in_ports = [graph.input_port(name, spec) for name, spec in ins.items()]
        out_ports = [graph.output_port(name, spec) for name, spec in outs.items()]
        live = graph.live({p.value for p in out_ports})
        named = {p.value for p in in_ports}
        constants = [
            (v, self._constant(slot))
            for slot, v in graph.first.items()
            if v in live.values and v not in named
        ]
        return Pipeline(
            device=str(getattr(self.backend, "name", type(self.backend).__name__)),
            runtime=_runtime(self.backend),
            inputs=tuple(in_ports),
            outputs=tuple(out_ports),
            values=tuple(graph.sizes),
            constants=tuple(sorted(constants)),
            programs=tuple(_programs(self.backend, live.exes)),
            steps=tuple(live.steps),
        )

    def _constant(self, slot: int) -> bytes:
        got = self._bytes.get(slot)
        if got is not None:
            return got
        try:
            return bytes(self.backend.read(slot))
        except SlotError as e:
            raise RecordError(
                f"slot {slot} holds a constant of the recording (read, never written, not a named input) "
                f"but was freed before the export: export while it is alive, or name it as an input ({e})"
            ) from None


_Recording = Recording  # the class, for _Record's own attribute of that name


class _Record:
    """`jaxcore.record(backend)`: capture every dispatch made on `backend` inside the `with` block
    (they still run). It carries this module's public names too (`jaxcore.record.BufferSpec`), since
    the package's `record` is this object, not the module."""

    BufferSpec = BufferSpec
    Pipeline = Pipeline
    Port = Port
    Recording = Recording
    RecordError = RecordError
    Step = Step

    def __call__(self, backend: Backend) -> _Recording:
        return _Recording(backend)

    def __repr__(self) -> str:
        return "<jaxcore.record>"


record = _Record()


def _spec(kind: str, name: str, spec: Any) -> BufferSpec:
    """A BufferSpec from one (anything with .slot/.dtype/.shape, or a (slot, dtype, shape) tuple)."""
    if not isinstance(name, str) or not name:
        raise RecordError(f"{kind} names are non-empty strings, got {name!r}")
    try:
        slot, dtype, shape = (spec.slot, spec.dtype, spec.shape) if hasattr(spec, "slot") else spec
        return BufferSpec(int(slot), DType(dtype), tuple(int(d) for d in shape))
    except (TypeError, ValueError) as e:
        raise RecordError(f"{kind} {name!r}: expected (slot, dtype, shape), got {spec!r} ({e})") from None


def _distinct(kind: str, specs: dict[str, BufferSpec]) -> None:
    seen: dict[int, str] = {}
    for name, s in specs.items():
        if s.slot in seen:
            raise RecordError(f"{kind}s {seen[s.slot]!r} and {name!r} name the same slot {s.slot}")
        seen[s.slot] = name


@dataclass
class _Live:
    """The steps an export keeps (renumbered programs), the executables behind them, and the values
    they read or write."""

    steps: list[Step]
    exes: list[Executable]
    values: set[int]


@dataclass
class _Graph:
    """The recording as versioned values: `first[slot]` is the value of version 0 of each slot read
    before written, `last[slot]` the latest version written, `steps[i]` = (dispatch, inputs, outputs)."""

    dispatches: list[Dispatch]
    sizes: list[int] = field(default_factory=list)
    first: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)
    steps: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)

    @classmethod
    def build(cls, dispatches: list[Dispatch]) -> _Graph:
        g = cls(dispatches)
        for d in dispatches:
            ins = []
            for slot, n in zip(d.inputs, d.input_bytes):
                v = g.last.get(slot)
                if v is None:
                    v = g.first.get(slot)
                    if v is None:
                        v = g.first[slot] = g._new(n)
                ins.append(v)
            outs = []
            for slot, n in zip(d.outputs, d.output_bytes):
                outs.append(g._new(n))
                g.last[slot] = outs[-1]
            g.steps.append((tuple(ins), tuple(outs)))
        return g

    def _new(self, nbytes: int) -> int:
        self.sizes.append(nbytes)
        return len(self.sizes) - 1

    def _touched(self, slot: int) -> str:
        if slot in self.last:
            return "only writes it (its value from before is never read)"
        if slot in self.first:
            return "only reads it"
        return "never uses it"

    def input_port(self, name: str, spec: BufferSpec) -> Port:
        v = self.first.get(spec.slot)
        if v is None:
            raise RecordError(f"input {name!r} (slot {spec.slot}): the recording {self._touched(spec.slot)}")
        _check_size("input", name, spec, self.sizes[v])
        return Port(name, v, spec.dtype, spec.shape)

    def output_port(self, name: str, spec: BufferSpec) -> Port:
        v = self.last.get(spec.slot)
        if v is None:
            raise RecordError(
                f"output {name!r} (slot {spec.slot}) is never written: "
                f"the recording {self._touched(spec.slot)}"
            )
        _check_size("output", name, spec, self.sizes[v])
        step = max(i for i, (_, outs) in enumerate(self.steps) if v in outs)
        d = self.dispatches[step]
        made = _output_dtype(d.exe, d.outputs.index(spec.slot))
        if made is not None and made != spec.dtype:
            raise RecordError(f"output {name!r} (slot {spec.slot}) is {made} as recorded, not {spec.dtype}")
        return Port(name, v, spec.dtype, spec.shape)

    def live(self, needed: set[int]) -> _Live:
        """The steps some output depends on, in order, with their programs numbered by first use."""
        need = set(needed)
        keep = []
        for i in range(len(self.steps) - 1, -1, -1):
            ins, outs = self.steps[i]
            if need.intersection(outs):
                keep.append(i)
                need.update(ins)
        keep.reverse()
        index: dict[int, int] = {}
        exes: list[Executable] = []
        steps = []
        for i in keep:
            exe = self.dispatches[i].exe
            if id(exe) not in index:
                index[id(exe)] = len(exes)
                exes.append(exe)
            steps.append(Step(index[id(exe)], *self.steps[i]))
        return _Live(steps, exes, need | {v for s in steps for v in s.outputs})


def _check_size(kind: str, name: str, spec: BufferSpec, nbytes: int) -> None:
    if spec.nbytes != nbytes:
        raise RecordError(
            f"{kind} {name!r} (slot {spec.slot}) is {spec.dtype}{list(spec.shape)} = {spec.nbytes} bytes, "
            f"but the slot holds {nbytes} bytes"
        )


def _output_dtype(exe: Executable, i: int) -> DType | None:
    src = exe.source
    if isinstance(src, Kernel):
        return src.dtype
    dtypes = getattr(getattr(src, "type", None), "output_dtypes", None)
    return dtypes[i] if dtypes is not None else None


def _programs(backend: Backend, exes: list[Executable]) -> Iterator[dict[str, Any]]:
    export = getattr(backend, "export", None)
    if export is None:
        raise RecordError(
            f"the {getattr(backend, 'name', backend)!r} device cannot export programs for a page"
        )
    for exe in exes:
        yield export(exe)


def _runtime(backend: Backend) -> tuple[str, str]:
    get = getattr(backend, "export_runtime", None)
    got = get() if get is not None else None
    if got is None:
        raise RecordError(
            f"the {getattr(backend, 'name', backend)!r} device has no runtime module for a page"
        )
    name, text = got
    return str(name), str(text)
