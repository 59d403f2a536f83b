"""The misuse sweep: every wrong call a user can make gets its typed error, and the backend still
computes correctly afterwards (a small kernel is checked after each case, and no slot leaks).

Groups: freed, unknown and foreign slots; wrong counts of buffers; wrong sizes (negative, huge,
mismatched, non-integers; numpy integers are *accepted* through `operator.index`, bool is
rejected); reads (out of range, negative, odd byte offsets); Executables from another backend
instance or type, or not Executables at all; malformed kernels; double dec_ref.

Plus two contract points (docs/contract-notes.md): an unmasked out-of-range read inside a kernel
may give 0 or any element of *that* buffer, never another buffer's data and never a crash; bool
results are stored as int32 0 or 1. Both read and write only dtypes the backend declares.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

import numpy as np
import pytest

from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Backend, Executable, SlotError
from jaxcore.conformance.harness import (
    UNSUPPORTED,
    expect_unsupported,
    garbage,
    map_kernel,
    skip_if_undeclared,
    undeclared,
)
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel


def _kernel() -> Kernel:
    return map_kernel([DType.float32], 4, lambda x: x * AluExp.f32(2) + AluExp.f32(1))


def healthy(backend: Backend) -> None:
    """The backend still computes: x * 2 + 1 on fresh buffers, exactly."""
    x = np.array([0.0, 1.5, -2.0, 1e6], np.float32)
    exe = backend.prepare_kernel(_kernel())
    a = backend.malloc(16, x.tobytes())
    o = backend.malloc(16, garbage(16))
    try:
        backend.dispatch(exe, [a], [o])
        got = np.frombuffer(backend.read(o), np.float32)
    finally:
        backend.dec_ref(a)
        backend.dec_ref(o)
    assert np.array_equal(got, x * 2 + 1), f"{backend.name} computes {got.tolist()} after a misuse"


@dataclass
class Ctx:
    """Live buffers for a case: `x` (16 bytes of float32), `out` (16 bytes), a prepared `exe`."""

    backend: Backend
    x: int
    out: int
    exe: Executable
    freed: int
    extra: list[int] = field(default_factory=list)

    def malloc(self, n: SupportsIndex, data: bytes | None = None) -> int:
        s = self.backend.malloc(n, data)
        self.extra.append(s)
        return s


def _live(backend: Backend) -> int | None:
    fn = getattr(backend, "live_slots", None)
    return fn() if callable(fn) else None


@contextlib.contextmanager
def misuse_context(backend: Backend) -> Iterator[Ctx]:
    """Buffers for one case; afterwards: free them, check the backend is healthy and leaked nothing.
    (A context manager, not a fixture, so the cases work wherever they are re-exported.)"""
    live = _live(backend)
    x = backend.malloc(16, np.arange(4, dtype=np.float32).tobytes())
    out = backend.malloc(16)
    freed = backend.malloc(16)
    backend.dec_ref(freed)
    c = Ctx(backend, x, out, backend.prepare_kernel(_kernel()), freed)
    try:
        yield c
    finally:
        for s in [x, out, *c.extra]:
            try:
                backend.dec_ref(s)
            except SlotError:
                pass  # the case freed it itself
    healthy(backend)
    if live is not None:
        now = _live(backend)
        assert now == live, f"{backend.name}: {(now or 0) - live} slots leaked by the case"


def other_instance(backend: Backend) -> Backend:
    """A second instance of the same backend type (skips when it cannot be built without arguments)."""
    try:
        return type(backend)()
    except TypeError as exc:
        pytest.skip(f"{type(backend).__name__}() needs arguments: {exc}")


def _of_another_type(backend: Backend) -> Backend | None:
    """A ready device whose backend type differs from `backend`'s (devices that are known but not
    ready, for want of a driver, are passed over)."""
    import jaxcore

    for name in jaxcore.devices():
        try:
            b = jaxcore.get_backend(name)
        except RuntimeError:  # known, unavailable here
            continue
        if type(b) is not type(backend):
            return b
    return None


def on_slot_one(c: Ctx, misuse: Callable[[Backend], Any]) -> None:
    """Run `misuse` on a fresh instance whose slot 1 is live, then check that instance's health."""
    b = other_instance(c.backend)
    one = b.malloc(16, np.arange(4, dtype=np.float32).tobytes())
    assert one == 1, f"a fresh instance first slot is {one}"
    try:
        misuse(b)
    finally:
        try:
            kept = b.read(one)
        except SlotError as exc:  # not the typed error the case expects: True was taken as slot 1
            raise AssertionError("a bool slot was taken as slot 1, which is now freed") from exc
        assert kept == np.arange(4, dtype=np.float32).tobytes()
        healthy(b)


def _unknown(c: Ctx) -> int:
    return 10**9 + 7


Misuse = Callable[[Ctx], Any]
# name -> (misuse, exception types it must raise, mark or None)
CASES: dict[str, tuple[Misuse, tuple[type[BaseException], ...], Any]] = {
    # -- freed, unknown and foreign slots, in every call that takes one
    "read_freed": (lambda c: c.backend.read(c.freed), (SlotError,), None),
    "dec_ref_freed": (lambda c: c.backend.dec_ref(c.freed), (SlotError,), None),
    "inc_ref_freed": (lambda c: c.backend.inc_ref(c.freed), (SlotError,), None),
    "dispatch_freed_input": (lambda c: c.backend.dispatch(c.exe, [c.freed], [c.out]), (SlotError,), None),
    "dispatch_freed_output": (lambda c: c.backend.dispatch(c.exe, [c.x], [c.freed]), (SlotError,), None),
    "read_unknown": (lambda c: c.backend.read(_unknown(c)), (SlotError,), None),
    "read_zero": (lambda c: c.backend.read(0), (SlotError,), None),
    "read_negative_slot": (lambda c: c.backend.read(-1), (SlotError,), None),
    "dec_ref_unknown": (lambda c: c.backend.dec_ref(_unknown(c)), (SlotError,), None),
    "inc_ref_unknown": (lambda c: c.backend.inc_ref(_unknown(c)), (SlotError,), None),
    "dispatch_unknown_input": (
        lambda c: c.backend.dispatch(c.exe, [_unknown(c)], [c.out]),
        (SlotError,),
        None,
    ),
    "dispatch_unknown_output": (
        lambda c: c.backend.dispatch(c.exe, [c.x], [_unknown(c)]),
        (SlotError,),
        None,
    ),
    "read_slot_none": (lambda c: c.backend.read(None), (SlotError, TypeError), None),  # type: ignore[arg-type]  # wrong on purpose
    "read_slot_str": (lambda c: c.backend.read(str(c.x)), (SlotError, TypeError), None),  # type: ignore[arg-type]  # wrong on purpose
    "read_slot_float": (lambda c: c.backend.read(float(c.x)), (SlotError, TypeError), None),  # type: ignore[arg-type]  # wrong on purpose
    # (True == 1: on a fresh instance, slot 1 is live, so only a bool check can refuse these)
    "read_slot_bool": (lambda c: on_slot_one(c, lambda b: b.read(True)), (SlotError, TypeError), None),
    "dec_ref_slot_bool": (
        lambda c: on_slot_one(c, lambda b: b.dec_ref(True)),
        (SlotError, TypeError),
        None,
    ),
    "inc_ref_slot_bool": (
        lambda c: on_slot_one(c, lambda b: b.inc_ref(True)),
        (SlotError, TypeError),
        None,
    ),
    "dispatch_slot_bool": (
        lambda c: on_slot_one(c, lambda b: b.dispatch(b.prepare_kernel(_kernel()), [True], [b.malloc(16)])),
        (SlotError, TypeError),
        None,
    ),
    "foreign_slot": (lambda c: other_instance_read(c), (SlotError,), None),
    # -- counts
    "dispatch_no_inputs": (lambda c: c.backend.dispatch(c.exe, [], [c.out]), (ValueError,), None),
    "dispatch_two_inputs": (lambda c: c.backend.dispatch(c.exe, [c.x, c.x], [c.out]), (ValueError,), None),
    "dispatch_no_outputs": (lambda c: c.backend.dispatch(c.exe, [c.x], []), (ValueError,), None),
    "dispatch_two_outputs": (
        lambda c: c.backend.dispatch(c.exe, [c.x], [c.out, c.malloc(16)]),
        (ValueError,),
        None,
    ),
    # -- sizes
    "malloc_negative": (lambda c: c.malloc(-1), (ValueError,), None),
    "malloc_huge": (lambda c: c.malloc(1 << 62), (MemoryError, ValueError), None),
    "malloc_float_size": (lambda c: c.malloc(16.0), (TypeError, ValueError), None),  # type: ignore[arg-type]
    "malloc_str_size": (lambda c: c.malloc("16"), (TypeError, ValueError), None),  # type: ignore[arg-type]
    "malloc_bool_size": (lambda c: c.malloc(True), (TypeError, ValueError), None),
    "malloc_data_too_short": (lambda c: c.malloc(16, b"\0" * 15), (ValueError,), None),
    "malloc_data_too_long": (lambda c: c.malloc(16, b"\0" * 17), (ValueError,), None),
    "malloc_data_not_bytes": (lambda c: c.malloc(16, "x" * 16), (TypeError, ValueError), None),  # type: ignore[arg-type]
    "dispatch_input_too_small": (
        lambda c: c.backend.dispatch(c.exe, [c.malloc(12)], [c.out]),
        (ValueError,),
        None,
    ),
    "dispatch_output_too_small": (
        lambda c: c.backend.dispatch(c.exe, [c.x], [c.malloc(12)]),
        (ValueError,),
        None,
    ),
    "dispatch_output_too_large": (
        lambda c: c.backend.dispatch(c.exe, [c.x], [c.malloc(20)]),
        (ValueError,),
        None,
    ),
    # -- reads
    "read_past_end": (lambda c: c.backend.read(c.x, 0, 17), (ValueError,), None),
    "read_start_past_end": (lambda c: c.backend.read(c.x, 17), (ValueError,), None),
    "read_negative_start": (lambda c: c.backend.read(c.x, -4), (ValueError,), None),
    "read_negative_count": (lambda c: c.backend.read(c.x, 0, -1), (ValueError,), None),
    "read_huge_count": (lambda c: c.backend.read(c.x, 4, 2**62), (ValueError,), None),
    "read_float_start": (lambda c: c.backend.read(c.x, 1.0), (TypeError, ValueError), None),  # type: ignore[arg-type]
    "read_bool_start": (
        lambda c: c.backend.read(c.x, True),
        (TypeError, ValueError),
        None,
    ),
    "read_bool_count": (
        lambda c: c.backend.read(c.x, 0, True),
        (TypeError, ValueError),
        None,
    ),
    # -- Executables that are not this backend's
    "dispatch_not_an_executable": (lambda c: c.backend.dispatch("exe", [c.x], [c.out]), (TypeError,), None),  # type: ignore[arg-type]
    "dispatch_kernel_not_prepared": (
        lambda c: c.backend.dispatch(_kernel(), [c.x], [c.out]),  # type: ignore[arg-type]  # wrong on purpose
        (TypeError,),
        None,
    ),
    # (these run in a child process: today one of them aborts the whole interpreter)
    "dispatch_exe_of_another_instance": (
        lambda c: isolated(c, "instance"),
        (ValueError,),
        None,
    ),
    "dispatch_exe_of_another_type": (
        lambda c: isolated(c, "type"),
        (ValueError,),
        None,
    ),
    "dispatch_handmade_executable": (
        lambda c: isolated(c, "handmade"),
        (ValueError, TypeError),
        None,
    ),
    # -- malformed kernels
    "prepare_not_a_kernel": (lambda c: c.backend.prepare_kernel("k"), (TypeError,), None),  # type: ignore[arg-type]
    "prepare_routine_not_a_routine": (lambda c: c.backend.prepare_routine(_kernel()), (TypeError,), None),  # type: ignore[arg-type]
    "kernel_reads_missing_input": (
        lambda c: Kernel(1, 4, AluExp.global_index(DType.float32, 1, 4, AluVar.gidx)),
        (ValueError,),
        None,
    ),
    "kernel_negative_size": (lambda c: Kernel(0, -1, AluExp.f32(1)), (ValueError,), None),
    "kernel_exp_not_alu": (lambda c: Kernel(0, 4, 1.0), (TypeError,), None),  # type: ignore[arg-type]
    "kernel_unknown_variable": (
        lambda c: Kernel(0, 4, AluExp.variable(DType.int32, "ridx")),
        (ValueError,),
        None,
    ),
    "where_branches_of_two_dtypes": (
        lambda c: AluExp(AluOp.Where, DType.float32, (AluExp.bool_(True), AluExp.f32(1), AluExp.i32(1))),
        (TypeError,),
        None,
    ),
    "where_condition_not_bool": (
        lambda c: AluExp(AluOp.Where, DType.float32, (AluExp.i32(1), AluExp.f32(1), AluExp.f32(2))),
        (TypeError,),
        None,
    ),
    "float_index": (
        lambda c: AluExp.global_index(DType.float32, 0, 4, AluExp.f32(1)),
        (TypeError,),
        None,
    ),
    "add_of_two_dtypes": (
        lambda c: AluExp(AluOp.Add, DType.float32, (AluExp.f32(1), AluExp.i32(1))),
        (TypeError,),
        None,
    ),
    "too_many_inputs": (lambda c: too_many_inputs(c), (ValueError,), None),
    # -- refcounts
    "double_dec_ref": (lambda c: double_dec_ref(c), (SlotError,), None),
    "use_after_last_dec_ref": (lambda c: use_after_free(c), (SlotError,), None),
}


def other_instance_read(c: Ctx) -> None:
    """A slot that only another instance allocated is unknown here."""
    other = other_instance(c.backend)
    mine = set()
    s = None
    for _ in range(64):  # find a slot number the other instance owns and this one does not
        s = other.malloc(4)
        mine.add(s)
        try:
            c.backend.read(s)
        except SlotError:
            break
    assert s is not None  # the loop ran
    try:
        c.backend.read(s)
    finally:
        for t in mine:
            other.dec_ref(t)


def foreign_dispatch(b: Backend, how: str) -> list[str]:
    """Dispatch on `b` an Executable of another instance, of another backend type, or one made by
    hand; what happened, as report lines (RAISED <type> <message>, OTHER <name>, HEALTHY, SKIP)."""
    lines: list[str] = []
    other: Backend | None = None
    x = b.malloc(16, np.arange(4, dtype=np.float32).tobytes())
    out = b.malloc(16)
    try:
        if how == "instance":
            other = type(b)()
        elif how == "type":
            other = _of_another_type(b)
            if other is None:
                return ["SKIP no ready device of another backend type"]
        if other is not None:
            lines.append(f"OTHER {other.name}")
        try:
            # A handmade one cannot even be built: only a backend's prepare_* makes Executables.
            exe = Executable(_kernel(), None) if how == "handmade" else other.prepare_kernel(_kernel())  # type: ignore[call-arg, union-attr]
            b.dispatch(exe, [x], [out])
            lines.append("RAISED none")
        except Exception as exc:
            lines.append(f"RAISED {type(exc).__name__} {str(exc).replace(chr(10), ' ')}")
    finally:
        b.dec_ref(x)
        b.dec_ref(out)
    healthy(b)
    lines.append("HEALTHY")
    return lines


_CHILD = r"""
import sys, jaxcore
from jaxcore.conformance import test_misuse as m
name, how = sys.argv[1], sys.argv[2]
if name not in jaxcore.devices():
    print("UNREACHABLE"); sys.exit(0)
print("\n".join(m.foreign_dispatch(jaxcore.get_backend(name), how)))
"""


class ForeignExecutableError(Exception):
    """What the child process reported (its exception type and message), re-raised here."""


def isolated(c: Ctx, how: str) -> None:
    """Dispatch a foreign or handmade Executable in a child process, so an abort cannot end this
    run; re-raise what the child saw as the same exception type, after checking it stayed healthy.

    A device the child cannot get by name (one registered only in this session, such as a test
    device) is tried in this process instead."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, c.backend.name, how], capture_output=True, text=True, timeout=120
    )
    lines = proc.stdout.splitlines()
    if proc.returncode == 0 and lines == ["UNREACHABLE"]:
        lines = foreign_dispatch(c.backend, how)
    if any(line.startswith("SKIP") for line in lines):
        pytest.skip(lines[0])
    assert proc.returncode == 0, (
        f"dispatching a foreign Executable ({how}) ended the process with status {proc.returncode}: "
        f"{proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else ''}"
    )
    raised = next((line for line in lines if line.startswith("RAISED")), "RAISED none").split(" ", 2)
    other = next((line.split(" ", 1)[1] for line in lines if line.startswith("OTHER ")), None)
    assert "HEALTHY" in lines, f"backend unhealthy after a foreign Executable: {proc.stdout}{proc.stderr}"
    if raised[1] == "none":
        return  # dispatch accepted it: pytest.raises reports that
    msg = raised[2] if len(raised) > 2 else ""
    if raised[1] == "ValueError":
        for name in {c.backend.name, other} - {None}:  # naming both backends
            assert name is not None and name in msg, f"the error does not name {name}: {msg}"
        raise ValueError(msg)
    if raised[1] == "TypeError":
        raise TypeError(msg)
    raise ForeignExecutableError(f"{raised[1]}: {msg}")


def too_many_inputs(c: Ctx) -> None:
    n = c.backend.max_args + 1
    if n > 4096:
        pytest.skip(f"max_args {c.backend.max_args} is effectively unlimited")
    exp = AluExp.f32(0)
    for i in range(n):
        exp = exp + AluExp.global_index(DType.float32, i, 1, AluExp.i32(0))
    c.backend.prepare_kernel(Kernel(n, 1, exp))


def double_dec_ref(c: Ctx) -> None:
    s = c.backend.malloc(8)
    c.backend.dec_ref(s)
    c.backend.dec_ref(s)


def use_after_free(c: Ctx) -> None:
    s = c.backend.malloc(16, np.ones(4, np.float32).tobytes())
    c.backend.inc_ref(s)
    c.backend.dec_ref(s)
    c.backend.read(s)  # still owned once: fine
    c.backend.dec_ref(s)
    c.backend.dispatch(c.exe, [s], [c.out])


def _params() -> list[Any]:
    return [pytest.param(n, marks=[m] if m is not None else [], id=n) for n, (_, _, m) in CASES.items()]


@pytest.mark.parametrize("name", _params())
def test_misuse(backend: Backend, name: str) -> None:
    """Each misuse raises its typed error (naming the problem); then health and leaks are checked."""
    fn, errors, _ = CASES[name]
    with misuse_context(backend) as ctx, pytest.raises(errors) as info:
        fn(ctx)
    assert str(info.value), f"{name}: {type(info.value).__name__} without a message"


# ---- what must be accepted ---------------------------------------------------------------------


ACCEPT: dict[str, Callable[[Ctx], Any]] = {
    "malloc_numpy_size": lambda c: c.malloc(np.int64(16)),
    "malloc_numpy_uint_size": lambda c: c.malloc(np.uint32(8), b"\0" * 8),
    "read_numpy_slot": lambda c: c.backend.read(np.int64(c.x)),
    "read_numpy_offsets": lambda c: c.backend.read(c.x, np.int32(4), np.int64(8)),
    "dispatch_numpy_slots": lambda c: c.backend.dispatch(c.exe, [np.int64(c.x)], [np.int32(c.out)]),
    "inc_dec_numpy_slot": lambda c: (c.backend.inc_ref(np.int64(c.x)), c.backend.dec_ref(np.int64(c.x))),  # type: ignore[func-returns-value]  # a tuple of two calls
}


@pytest.mark.parametrize("name", list(ACCEPT))
def test_numpy_integers_are_accepted(backend: Backend, name: str) -> None:
    """numpy integers are integers (operator.index): sizes, slots and offsets take them."""
    with misuse_context(backend) as ctx:
        ACCEPT[name](ctx)
    assert operator.index(np.int64(3)) == 3


def test_odd_byte_offsets_read_exact_bytes(backend: Backend) -> None:
    """Reads at any byte offset and length inside a buffer return exactly those bytes."""
    raw = np.arange(4, dtype=np.float32).tobytes()
    with misuse_context(backend) as ctx:
        for start, count in [(1, 3), (3, 5), (15, 1), (0, 0), (16, 0), (5, None), (7, 9)]:
            want = raw[start:] if count is None else raw[start : start + count]
            assert ctx.backend.read(ctx.x, start, count) == want, (start, count)


def test_malloc_without_data_is_writable_and_sized(backend: Backend) -> None:
    """malloc without data: the contents are unspecified, but the size is exact and a kernel's
    output overwrites every byte."""
    with misuse_context(backend) as ctx:
        s = ctx.malloc(16)
        assert len(backend.read(s)) == 16
        backend.dispatch(ctx.exe, [ctx.x], [s])
        got = np.frombuffer(backend.read(s), np.float32)
        assert np.array_equal(got, np.arange(4, dtype=np.float32) * 2 + 1)


# ---- out-of-range reads inside a kernel --------------------------------------------------------

SENTINEL = 0x5EA7C0DE  # a 32-bit pattern no read of the small buffer can produce


@pytest.mark.parametrize("where", ["past_end", "far_past_end", "before_start", "huge_negative"])
def test_out_of_range_read_stays_in_its_buffer(backend: Backend, where: str) -> None:
    """An unmasked read outside its buffer gives 0 or an element of that buffer, never a crash and
    never another buffer's data: the small buffer sits between buffers full of a sentinel pattern
    (allocated just before and after it, so a flat memory puts them next to it). The data is in a
    dtype the backend declares; the index arithmetic is int32 on every device."""
    from jaxcore.conformance import oracle
    from jaxcore.conformance.test_fuzz import data_dtype

    n, lanes = 4, 64  # 64 lanes reach well into the next buffer on a flat memory
    dt = data_dtype(backend)
    small = oracle.array([11, 22, 33, 44], str(dt))
    index = {
        "past_end": AluVar.gidx,
        "far_past_end": AluVar.gidx * AluExp.i32(1000) + AluExp.i32(4),
        "before_start": AluVar.gidx - AluExp.i32(lanes),
        "huge_negative": AluVar.gidx - AluExp.i32(2**30),
    }[where]
    kernel = Kernel(1, lanes, AluExp.global_index(dt, 0, n, index))
    skip_if_undeclared(backend, kernel)
    sentinel = np.full(256, SENTINEL, np.uint32).tobytes()
    slots = [backend.malloc(len(sentinel), sentinel)]
    a = backend.malloc(small.nbytes, small.tobytes())
    slots += [a, backend.malloc(len(sentinel), sentinel)]
    out = backend.malloc(kernel.bytes, garbage(kernel.bytes))
    slots.append(out)
    try:
        exe = backend.prepare_kernel(kernel)
        try:
            backend.dispatch(exe, [a], [out])
        except Exception as exc:
            raise AssertionError(f"{backend.name} raised on an out-of-range read: {exc!r}") from exc
        got = np.frombuffer(backend.read(out), small.dtype)
    finally:
        for s in slots:
            backend.dec_ref(s)
    bits = f"<u{small.itemsize}"
    allowed = set(small.view(bits).tolist())
    bad = [v for v, b in zip(got.tolist(), got.view(bits).tolist()) if v != 0 and b not in allowed]
    assert not bad, f"{backend.name}: out-of-range reads returned {bad} (allowed: 0 or {small.tolist()})"
    healthy(backend)


# ---- bool storage ------------------------------------------------------------------------------


def test_bool_results_are_stored_as_0_or_1(backend: Backend) -> None:
    """Every bool a kernel writes is the int32 0 or 1, whatever produced it (casts of large ints
    and NaN, comparisons, Where, bool arithmetic and bit ops). Each kernel the backend does not
    declare (bool, int32 or float32 missing) must be refused at prepare instead."""
    from jaxcore.conformance.test_fuzz import run

    ints = np.array([2, -1, 0, -(2**31), 7, 1, 256, 0], np.int32)
    floats = np.array([np.nan, -0.0, 0.5, np.inf, -3.0, 0.0, 1e-40, 2.0], np.float32)
    i = AluExp.global_index(DType.int32, 0, 8, AluVar.gidx)
    f = AluExp.global_index(DType.float32, 1, 8, AluVar.gidx)
    bi, bf = AluExp.cast(DType.bool, i), AluExp.cast(DType.bool, f)
    exps = {
        "cast_int": bi,
        "cast_float": bf,
        "add": AluExp.add(bi, bf),
        "mul": AluExp.mul(bi, bf),
        "xor": AluExp.bit_xor(bi, bf),
        "where": AluExp.where(AluExp.cmplt(i, AluExp.i32(1)), bi, bf),
        "compare": AluExp.cmpne(f, f),
        "max": AluExp.max(bi, bf),
    }
    gaps = []
    for name, exp in exps.items():
        kernel = Kernel(2, 8, exp)
        why = undeclared(backend, kernel)
        if why is not None:
            expect_unsupported(backend, kernel)
            gaps.append(why)
            continue
        got = run(backend, kernel, [ints, floats])
        assert set(got.tolist()) <= {0, 1}, f"bool {name} on {backend.name} stored {got.tolist()}"
    if len(gaps) == len(exps):
        pytest.skip(f"{UNSUPPORTED}: {gaps[0]}")
