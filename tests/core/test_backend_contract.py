"""The core's backend contract, pinned: one rule for "declared" (comparisons by operand dtype,
index arithmetic int32 everywhere), output aliasing handled once in BaseBackend, Executables bound
to the backend that prepared them, integer arguments through `operator.index`, the lowering digest
and the test session's own cache directory."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import jaxcore
from jaxcore import digest, settings
from jaxcore.alu import AluExp, AluOp, AluVar
from jaxcore.backend import Capabilities, Executable, SlotError, UnsupportedOpError
from jaxcore.conformance import harness
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel, Reduction
from jaxcore.routine import Routine, Routines
from jaxcore.shape import ShapeTracker
from jaxcore_cpu.backend import CpuBackend

F32, I32 = DType.float32, DType.int32
g, r = AluVar.gidx, AluVar.ridx


def caps(*dtypes: DType, **kw: Any) -> Capabilities:
    return Capabilities(dtypes=frozenset(dtypes), routines=frozenset(), max_args=8, **kw)


def restricted(c: Capabilities) -> CpuBackend:
    return type("Restricted", (CpuBackend,), {"name": "restricted", "capabilities": c})()


def f32(*v: float) -> bytes:
    return np.array(v, np.float32).tobytes()


# ---- the session's cache directory, the lowering digest -----------------------------------------


def test_the_test_session_uses_its_own_cache_dir() -> None:
    cache = settings.current().cache_dir
    assert cache == Path(os.environ["JAXCORE_CACHE_DIR"])
    assert cache.is_relative_to(Path(tempfile.gettempdir())), cache
    assert not cache.is_relative_to(Path.home() / ".cache"), cache


def test_lowering_digest_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    digest.lowering_digest.cache_clear()
    reads: list[str] = []
    real = digest._source_bytes

    def counting(name: str) -> bytes:
        reads.append(name)
        return real(name)

    monkeypatch.setattr(digest, "_source_bytes", counting)
    try:
        first = digest.lowering_digest()
        assert digest.lowering_digest() == first and len(first) == 16
        assert sorted(reads) == sorted(digest.LOWERING_SOURCES)
        assert {"tuner.py", "shape.py", "simplify.py", "alu.py"} <= set(digest.LOWERING_SOURCES)
    finally:
        digest.lowering_digest.cache_clear()


# ---- one rule for "declared" --------------------------------------------------------------------


def cmp_kernel(dtype: DType) -> Kernel:
    return harness.map_kernel([dtype, dtype], 4, AluExp.cmplt)


def test_comparisons_are_declared_by_operand_dtype() -> None:
    """float32 and int32 declared, bool not: comparisons of both run, and the suite agrees."""
    b = restricted(caps(F32, I32))
    for dt in (F32, I32):
        k = cmp_kernel(dt)
        assert harness.undeclared(b, k) is None
        got = harness.run_kernel(b, k, [np.array([1, 2, 3, 4], dt.value), np.array([2, 2, 2, 2], dt.value)])
        assert got.tolist() == [1, 0, 0, 0]
    nobool = restricted(caps(F32, I32, unsupported_ops=frozenset({(AluOp.Cmplt, F32)})))
    assert harness.undeclared(nobool, cmp_kernel(F32)) == "Cmplt<float32> is in unsupported_ops"
    with pytest.raises(UnsupportedOpError):
        nobool.prepare_kernel(cmp_kernel(F32))


def index_kernels() -> dict[str, Kernel]:
    """float32 kernels whose indices need int32 arithmetic: strided, reduced, flipped and padded
    views, and a Where that selects by position."""
    n = 12
    st = ShapeTracker.from_shape((3, 4)).flip([True, False]).pad([[1, 0], [0, 1]])
    idx = [AluExp.idiv(g, AluExp.i32(5)), AluExp.mod(g, AluExp.i32(5))]
    return {
        "strided": Kernel(1, n // 2, harness.load(F32, 0, n, g * 2 + 1)),
        "reduction": harness.reduce_kernel(F32, AluOp.Add, 3, 4),
        "view": Kernel(1, st.size, AluExp.global_view(F32, 0, st, idx)),
        "by position": Kernel(
            1, n, AluExp.where(AluExp.cmplt(g, AluExp.i32(6)), harness.load(F32, 0, n), AluExp.f32(-1))
        ),
    }


def test_index_arithmetic_is_int32_on_every_device() -> None:
    """A float32-only device runs float32 kernels however their indices are computed."""
    b = restricted(caps(F32))
    cpu = CpuBackend()
    x = np.arange(12, dtype=np.float32)
    for name, k in index_kernels().items():
        assert b.capabilities.undeclared(k) is None, name
        assert harness.undeclared(b, k) is None, name
        np.testing.assert_array_equal(harness.run_kernel(b, k, [x]), harness.run_kernel(cpu, k, [x]), name)


def test_int32_as_data_still_needs_int32() -> None:
    """Index arithmetic is exempt; int32 values computed as data, int32 reads and int32 results are not."""
    b = restricted(caps(F32))
    as_data = Kernel(1, 4, AluExp.add(harness.load(F32, 0, 4), AluExp.cast(F32, harness.load(I32, 0, 4))))
    gather = Kernel(2, 4, harness.load(F32, 0, 4, harness.load(I32, 1, 4)))
    position_result = Kernel(0, 4, g * 2)
    mixed = Kernel(1, 4, AluExp.cast(F32, AluExp.add(g, AluExp.cast(I32, harness.load(F32, 0, 4)))))
    for k in (as_data, gather, position_result, mixed):
        gap = b.capabilities.undeclared(k)
        assert gap is not None and gap.dtype == I32, k
        assert harness.undeclared(b, k) == "dtype int32 is not declared"
        with pytest.raises(UnsupportedOpError):
            b.prepare_kernel(k)


def test_unsupported_int32_ops_do_not_govern_index_arithmetic() -> None:
    b = restricted(caps(F32, I32, unsupported_ops=frozenset({(AluOp.Idiv, I32), (AluOp.Mod, I32)})))
    assert b.capabilities.undeclared(index_kernels()["view"]) is None
    data_div = harness.map_kernel([I32, I32], 4, AluExp.idiv)
    assert b.capabilities.undeclared(data_div) is not None


def test_routines_by_name_and_dtypes() -> None:
    c = Capabilities(
        dtypes=frozenset({F32}),
        routines=frozenset({Routines.Sort, Routines.Argsort}),
        max_args=8,
        unsupported_ops=frozenset({(Routines.Sort, F32)}),
    )

    def why(r: Routine) -> tuple[str, bool]:
        gap = c.undeclared(r)
        assert gap is not None, r
        return gap.reason, gap.routine

    assert why(Routine.build(Routines.Sort, [(4,)], [F32])) == ("Sort<float32> is in unsupported_ops", False)
    assert why(Routine.build(Routines.Argsort, [(4,)], [F32])) == ("dtype int32 is not declared", False)
    assert why(Routine.build(Routines.Cholesky, [(2, 2)], [F32])) == (
        "routine Cholesky is not declared",
        True,
    )


# ---- aliasing -------------------------------------------------------------------------------------


class ZeroesOutputFirst(CpuBackend):
    """A backend that clears its output before it reads its inputs (what a GPU kernel writing as it
    goes looks like when the output is an input)."""

    name = "zeroes-first"
    runs: list[tuple[Any, ...]]

    def _run(self, exe: Executable, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.runs.append(tuple(id(o) for o in outputs) + tuple(id(i) for i in inputs))
        for o in outputs:
            o[:] = 0
        super()._run(exe, inputs, outputs)


def test_dispatch_computes_an_aliased_output_aside() -> None:
    b = ZeroesOutputFirst()
    b.runs = []
    k = harness.map_kernel([F32], 3, lambda x: AluExp.add(x, AluExp.f32(1)))
    s = b.malloc(12, f32(1, 2, 3))
    b.dispatch(b.prepare_kernel(k), [s], [s])
    assert b.read(s) == f32(2, 3, 4)
    out_id, in_id = b.runs[-1]
    assert out_id != in_id, "the output handed to _run must not be the aliased input"
    b.dec_ref(s)


def test_handles_aliasing_hands_the_aliased_buffer_to_run() -> None:
    """A backend declaring handles_aliasing gets the very buffer (and so must really handle it)."""
    b = ZeroesOutputFirst()
    b.capabilities = dataclasses.replace(b.capabilities, handles_aliasing=True)
    b.runs = []
    k = harness.map_kernel([F32], 3, lambda x: AluExp.add(x, AluExp.f32(1)))
    s = b.malloc(12, f32(1, 2, 3))
    b.dispatch(b.prepare_kernel(k), [s], [s])
    out_id, in_id = b.runs[-1]
    assert out_id == in_id
    assert b.read(s) == f32(1, 1, 1)  # this backend does not handle it: the declaration is its word
    b.dec_ref(s)


def test_default_copy_buffer_goes_through_copyout_and_copyin() -> None:
    calls: list[str] = []

    class Counting(CpuBackend):
        def _copyin(self, handle: Any, data: memoryview) -> None:
            calls.append("in")
            super()._copyin(handle, data)

        def _copyout(self, handle: Any, start: int, count: int) -> bytes:
            calls.append("out")
            return super()._copyout(handle, start, count)

    b = Counting()
    src, dst = b._alloc(8), b._alloc(8)
    b._copyin(src, memoryview(f32(5, 6)))
    calls.clear()
    jaxcore.BaseBackend._copy_buffer(b, src, dst, 8)
    assert calls == ["out", "in"] and bytes(dst) == f32(5, 6)


def test_two_outputs_in_one_slot_are_refused() -> None:
    b = CpuBackend()
    x = b.malloc(8, f32(2, 1))
    exe = b.prepare_routine(Routine.build(Routines.Argsort, [(2,)], [F32]))
    with pytest.raises(ValueError, match="distinct"):
        b.dispatch(exe, [x], [x, x])
    assert b.read(x) == f32(2, 1)


# ---- Executables belong to their backend ----------------------------------------------------------


def double() -> Kernel:
    return harness.map_kernel([F32], 2, lambda x: AluExp.mul(x, AluExp.f32(2)))


@pytest.mark.parametrize(
    ("mine_name", "theirs_name"), [("cpu", "cpu"), ("cpu", "wasm"), ("wasm", "cpu"), ("wasm", "wasm")]
)
def test_foreign_executable_is_refused_naming_both_backends(mine_name: str, theirs_name: str) -> None:
    """Another instance's Executable (even of the same device) or another device's: a ValueError
    naming both, and the backend still computes afterwards (wasm used to abort the process)."""
    from jaxcore_wasm.backend import WasmBackend

    make = {"cpu": CpuBackend, "wasm": lambda: WasmBackend(threads=1)}
    mine = make[mine_name]()
    theirs = make[theirs_name]()
    exe = theirs.prepare_kernel(double())
    a, out = mine.malloc(8, f32(1, 2)), mine.malloc(8)
    with pytest.raises(ValueError) as info:
        mine.dispatch(exe, [a], [out])
    msg = str(info.value)
    assert f"{theirs.name} backend {type(theirs).__name__} at 0x{id(theirs):x}" in msg, msg
    assert f"{mine.name} backend {type(mine).__name__} at 0x{id(mine):x}" in msg, msg
    mine.dispatch(mine.prepare_kernel(double()), [a], [out])  # still healthy
    assert mine.read(out) == f32(2, 4)


def test_executables_are_made_only_by_prepare() -> None:
    b = CpuBackend()
    exe = b.prepare_kernel(double())
    assert exe.backend == "cpu" and exe.prepared_by(b) and not exe.prepared_by(CpuBackend())
    with pytest.raises(TypeError, match="prepare_kernel or prepare_routine"):
        Executable(double(), exe.data, b, None)
    with pytest.raises(TypeError):
        Executable(double(), exe.data)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        dataclasses.replace(exe, source=harness.map_kernel([F32], 8, lambda x: x))  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        exe.source = double()  # type: ignore[misc]


def test_not_an_executable_is_a_type_error() -> None:
    b = CpuBackend()
    a = b.malloc(8, f32(1, 2))
    with pytest.raises(TypeError, match="Executable"):
        b.dispatch(object(), [a], [a])  # type: ignore[arg-type]


# ---- integers through operator.index, never bool --------------------------------------------------


def test_numpy_integers_work_as_sizes_and_slots() -> None:
    b = CpuBackend()
    s = b.malloc(np.int64(8), f32(1, 2))
    out = b.malloc(np.uint16(8))
    for slot in (np.int32(s), np.int64(s), np.uint64(s)):
        assert b.read(slot) == f32(1, 2)
        assert b.read(slot, np.int8(4), np.int64(4)) == f32(2)
    b.dispatch(b.prepare_kernel(double()), [np.int64(s)], np.array([out]))  # type: ignore[arg-type]
    assert b.read(out) == f32(2, 4)
    b.inc_ref(np.int32(s))
    b.dec_ref(np.int64(s))
    b.dec_ref(np.int64(s))
    with pytest.raises(SlotError, match="freed"):
        b.read(np.int64(s))


def test_bool_is_never_a_slot_or_a_size() -> None:
    b = CpuBackend()
    first = b.malloc(8, f32(1, 2))
    assert first == 1  # True == 1: a bool must not read it
    for use in (b.read, b.inc_ref, b.dec_ref):
        with pytest.raises(SlotError, match="bool"):
            use(True)  # type: ignore[arg-type]
    with pytest.raises(SlotError, match="bool"):
        b.dispatch(b.prepare_kernel(double()), [True], [first])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="bool"):
        b.malloc(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bool"):
        b.read(first, True)  # type: ignore[arg-type]
    for bad in (4.0, "4", None):
        with pytest.raises(TypeError):
            b.malloc(bad)  # type: ignore[arg-type]
    with pytest.raises(SlotError, match="not float"):
        b.read(1.0)  # type: ignore[arg-type]
    assert b.read(first) == f32(1, 2)


def test_reductions_keep_their_rule() -> None:
    """The accumulator is data: an int32 reduction needs int32 even on an otherwise float device."""
    b = restricted(caps(F32))
    k = Kernel(1, 2, harness.load(I32, 0, 8, g * 4 + r), Reduction(I32, AluOp.Add, 4))
    assert b.capabilities.undeclared(k) is not None


# ---- bounded executable caches ------------------------------------------------------------------


def scale(c: float) -> Kernel:
    return harness.map_kernel([F32], 2, lambda x: x * AluExp.f32(c))


def test_kernel_cache_is_bounded_lru_and_evicted_executables_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JAXCORE_KERNEL_CACHE", "3")
    settings.reload()
    try:
        b = CpuBackend()
    finally:
        monkeypatch.undo()  # the environment as it was, then the settings read from it
        settings.reload()
    assert b._kernel_cache.capacity == b._routine_cache.capacity == 3
    first = b.prepare_kernel(scale(2.0))
    kept = b.prepare_kernel(scale(3.0))
    for c in (4.0, 5.0):
        b.prepare_kernel(scale(c))
    assert b.prepare_kernel(scale(3.0)) is kept  # a use: 3.0 is now the most recent
    b.prepare_kernel(scale(6.0))  # drops 4.0, the least recently used
    assert len(b._kernel_cache) == 3 and b._kernel_cache.evictions == 2
    assert scale(2.0).key() not in b._kernel_cache and scale(4.0).key() not in b._kernel_cache
    assert scale(3.0).key() in b._kernel_cache and b.prepare_kernel(scale(3.0)) is kept
    x, out = b.malloc(8, f32(1, 2)), b.malloc(8)
    b.dispatch(first, [x], [out])  # the cache dropped it; the caller's Executable still runs
    assert b.read(out) == f32(2, 4)
    again = b.prepare_kernel(scale(2.0))
    assert again is not first and again.source.key() == first.source.key()
    b.dispatch(again, [x], [out])
    assert b.read(out) == f32(2, 4)
    assert CpuBackend(cache_size=7)._kernel_cache.capacity == 7


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5"])
def test_kernel_cache_setting_is_checked(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("JAXCORE_KERNEL_CACHE", value)
    with pytest.raises(ValueError, match="JAXCORE_KERNEL_CACHE"):
        settings.Settings.from_env()
    assert settings.Settings.from_env({}).kernel_cache == settings.DEFAULT_KERNEL_CACHE == 4096


def test_concurrent_prepares_of_one_kernel_share_one_executable_even_when_it_is_evicted() -> None:
    """Eight threads prepare one kernel; the cache drops it the moment it is stored (another
    prepare landing in between): the eight still share the one Executable, built once."""
    import threading
    import time

    from jaxcore.backend import LruCache

    builds: list[int] = []
    gate = threading.Event()
    slow = scale(2.0).key()

    class Slow(CpuBackend):
        def _compile_kernel(self, kernel: Kernel) -> Any:
            if kernel.key() == slow:
                builds.append(1)
                assert gate.wait(10)
            return super()._compile_kernel(kernel)

    class Crowded(LruCache):
        def __setitem__(self, key: Any, exe: Executable) -> None:
            super().__setitem__(key, exe)
            if key == slow:  # someone else's kernel lands at once and evicts it
                super().__setitem__("other", exe)

    b = Slow(cache_size=1)
    b._kernel_cache = Crowded(1)
    got: list[Executable] = []
    threads = [threading.Thread(target=lambda: got.append(b.prepare_kernel(scale(2.0)))) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (
        slow in b._compile_locks and b._compile_locks[slow].waiters == 8
    ):
        time.sleep(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(got) == 8 and len({id(e) for e in got}) == 1 and len(builds) == 1
    assert slow not in b._kernel_cache and not b._compile_locks


def test_cache_forget_drops_one_entry_and_the_next_prepare_builds_again() -> None:
    """`LruCache.forget` (a hand plan replacing a prepared kernel) drops only that key; forgetting
    a key the cache does not hold is a no-op."""
    b = CpuBackend()
    first, other = b.prepare_kernel(scale(2.0)), b.prepare_kernel(scale(3.0))
    b._kernel_cache.forget(scale(2.0).key())
    b._kernel_cache.forget("never prepared")
    assert b.prepare_kernel(scale(2.0)) is not first
    assert b.prepare_kernel(scale(3.0)) is other
