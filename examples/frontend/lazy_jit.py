"""`jit`: run a step's dispatches again without building them again, as jax.jit and tinygrad's
TinyJit do.

The first call of a jitted function with given argument shapes and dtypes runs it as usual while
recording every dispatch (the prepared kernel or routine, the buffers it reads and writes); later
calls replay that list on the new arguments' buffers, with fresh buffers for what the step made. A
step of lazy arrays spends most of its host time building expressions and kernels in Python; a
replay spends only the dispatches.

A replay cannot see what the function does, so the function must not depend on it: its arguments
are Arrays (or lists and tuples of them) and hashable constants (part of the cache key); arrays it
reads from elsewhere (closures, globals) are baked in as the buffers they were when recorded; a
step that reads values back to decide what to do is no fixed list of dispatches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import lazy_array as lz

from jaxcore import Backend, DType, Executable, Fused

# Where a dispatch's buffer comes from on replay: ("arg", i) the i-th array argument's buffer,
# ("new", j) the j-th buffer the step made, ("const", buffer) a buffer from outside the step.
Ref = tuple[str, Any]
Step = tuple[Backend, Executable, tuple[Ref, ...], tuple[Ref, ...]]


@dataclass(frozen=True)
class _Leaf:
    """An array's place in a result tree: the flat result's index."""

    index: int


@dataclass
class _Recorder:
    """What lazy_array reports while a step runs for the first time."""

    args: dict[int, int]  # id(an argument's buffer) -> its position
    made: list[tuple[lz.Buffer, Backend, bytes | None]] = field(default_factory=list)  # kept alive
    made_ids: dict[int, int] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    def made_buffer(self, buf: lz.Buffer, backend: Backend, data: bytes | None) -> None:
        self.made_ids[id(buf)] = len(self.made)
        self.made.append((buf, backend, data))

    def ref(self, buf: lz.Buffer) -> Ref:
        if id(buf) in self.made_ids:
            return ("new", self.made_ids[id(buf)])
        if id(buf) in self.args:
            return ("arg", self.args[id(buf)])
        return ("const", buf)

    def dispatched(
        self, backend: Backend, exe: Executable, inputs: Sequence[lz.Buffer], outputs: Sequence[lz.Buffer]
    ) -> None:
        self.steps.append((backend, exe, tuple(map(self.ref, inputs)), tuple(map(self.ref, outputs))))


@dataclass(frozen=True)
class _Plan:
    """A recorded step: its dispatches, the buffers it makes, and where its results are."""

    steps: tuple[Step, ...]
    made: tuple[tuple[Backend, int, bytes | None], ...]  # per made buffer: backend, bytes, contents
    last_use: tuple[int, ...]  # per made buffer: the step after which nothing needs it
    results: tuple[tuple[Ref, Backend, DType, tuple[int, ...]], ...]  # per result array
    tree: Any  # the result with each array replaced by its _Leaf


def _leaves(tree: Any) -> list[lz.Array]:
    if isinstance(tree, lz.Array):
        return [tree]
    return [a for t in tree for a in _leaves(t)] if isinstance(tree, list | tuple) else []


def _map_tree(tree: Any, leaf: Callable[[Any], Any], kind: type) -> Any:
    if isinstance(tree, kind):
        return leaf(tree)
    if isinstance(tree, list | tuple):
        return type(tree)(_map_tree(t, leaf, kind) for t in tree)
    return tree


def _signature(tree: Any) -> Any:
    """The cache key of an argument tree: each array's shape, dtype and device; the rest as is."""
    if isinstance(tree, lz.Array):
        return ("array", tree.shape, tree.dtype, id(tree.backend))
    if isinstance(tree, list | tuple):
        return (type(tree).__name__, tuple(_signature(t) for t in tree))
    return tree


def _record(fn: Callable[..., Any], args: tuple[Any, ...], buffers: Sequence[lz.Buffer]) -> tuple[Any, _Plan]:
    """Run `fn` once, recording its dispatches; its results are computed into buffers of their own."""
    rec = _Recorder({id(b): i for i, b in enumerate(buffers)})
    lz.TRACE.append(rec)
    try:
        result = fn(*args)
        arrays = _leaves(result)
        for a in arrays:
            a.buffer()
    finally:
        lz.TRACE.clear()
    results = tuple((rec.ref(a.buffer()), a.backend, a.dtype, a.shape) for a in arrays)
    last = [-1] * len(rec.made)
    for i, (_, _, ins, outs) in enumerate(rec.steps):
        for kind, j in ins + outs:
            if kind == "new":
                last[j] = i
    for (kind, j), *_ in results:
        if kind == "new":
            last[j] = len(rec.steps)  # a result outlives the step
    counter = iter(range(len(arrays)))
    tree = _map_tree(result, lambda _: _Leaf(next(counter)), lz.Array)
    made = tuple((backend, buf.nbytes, data) for buf, backend, data in rec.made)
    return result, _Plan(tuple(rec.steps), made, tuple(last), results, tree)


def _replay(plan: _Plan, buffers: Sequence[lz.Buffer]) -> Any:
    """The recorded dispatches on these argument buffers, into fresh buffers for what the step made."""
    made: list[lz.Buffer | None] = [None] * len(plan.made)
    dying: dict[int, list[int]] = {}
    for j, step in enumerate(plan.last_use):
        dying.setdefault(step, []).append(j)

    def buf(ref: Ref) -> lz.Buffer:
        kind, x = ref
        if kind == "arg":
            return buffers[x]
        if kind == "const":
            return x
        if made[x] is None:
            backend, nbytes, data = plan.made[x]
            made[x] = lz.Buffer(backend, nbytes, data)
        return made[x]  # type: ignore[return-value]

    for i, (backend, exe, ins, outs) in enumerate(plan.steps):
        lz._dispatch(backend, exe, [buf(r) for r in ins], [buf(r) for r in outs])
        for j in dying.get(i, ()):
            made[j] = None  # the step's last use: its buffer may go
    arrays = [lz.Array(be, Fused.read(buf(ref), dtype, shape)) for ref, be, dtype, shape in plan.results]
    return _map_tree(plan.tree, lambda leaf: arrays[leaf.index], _Leaf)


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` recorded on its first call per argument signature and replayed on later ones."""
    plans: dict[Any, _Plan] = {}

    @functools.wraps(fn)
    def run(*args: Any) -> Any:
        buffers = [a.buffer() for a in _leaves(args)]
        aliases = tuple(next(i for i, b in enumerate(buffers) if b is x) for x in buffers)
        key = (_signature(args), aliases)
        plan = plans.get(key)
        if plan is None:
            result, plans[key] = _record(fn, args, buffers)
            return result
        return _replay(plan, buffers)

    run.plans = plans  # type: ignore[attr-defined]
    return run
