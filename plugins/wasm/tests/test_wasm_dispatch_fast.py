"""The repeat-dispatch fast path: a repeat on the same slots skips validation only while those slots
still hold the buffers it validated; anything else takes (and is judged by) the full path."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcore import AluExp, AluVar, DType, Kernel, tracing
from jaxcore.backend import SlotError
from jaxcore_wasm.backend import WasmBackend

F32 = DType.float32


def _setup():
    be = WasmBackend(threads=1)
    exe = be.prepare_kernel(Kernel(1, 4, AluExp.global_index(F32, 0, 4, AluVar.gidx) + AluExp.f32(1)))
    assert exe.data.single
    x = np.arange(4, dtype=np.float32)
    return be, exe, be.malloc(16, x.tobytes()), be.malloc(16), x


def _get(be, slot):
    return np.frombuffer(be.read(slot), np.float32)


def test_repeat_dispatch_is_memoised_and_correct() -> None:
    be, exe, a, out, x = _setup()
    be.dispatch(exe, [a], [out])
    assert exe.data.memo is not None
    be.array(be._buffers[a].handle, F32, (4,))[:] = x * 2  # new contents, same buffer
    be.dispatch(exe, [a], [out])
    np.testing.assert_array_equal(_get(be, out), x * 2 + 1)


def test_a_freed_slot_is_refused_after_a_memoised_dispatch() -> None:
    be, exe, a, out, _ = _setup()
    be.dispatch(exe, [a], [out])
    be.dec_ref(out)
    with pytest.raises(Exception, match=str(out)):
        be.dispatch(exe, [a], [out])


def test_other_slots_and_wrong_sizes_take_the_checked_path() -> None:
    be, exe, a, out, x = _setup()
    be.dispatch(exe, [a], [out])
    small = be.malloc(8)
    with pytest.raises(ValueError, match="exactly 16"):
        be.dispatch(exe, [a], [small])
    out2 = be.malloc(16)
    be.dispatch(exe, [a], [out2])
    np.testing.assert_array_equal(_get(be, out2), x + 1)
    be.dispatch(exe, [a], [out])  # back to the first slots: still right
    np.testing.assert_array_equal(_get(be, out), x + 1)


def test_aliased_dispatch_is_never_memoised() -> None:
    be, exe, a, _, x = _setup()
    be.dispatch(exe, [a], [a])
    be.dispatch(exe, [a], [a])
    assert exe.data.memo is None
    np.testing.assert_array_equal(_get(be, a), x + 2)


def test_memoised_dispatches_are_still_traced() -> None:
    be, exe, a, out, _ = _setup()
    be.dispatch(exe, [a], [out])
    tracing.start_trace()
    try:
        be.dispatch(exe, [a], [out])
    finally:
        events = tracing.stop_trace()
    assert sum(e["ph"] == "X" for e in events) == 1


def test_a_bool_slot_equal_to_a_memoised_one_is_still_refused() -> None:
    be = WasmBackend(threads=1)
    exe = be.prepare_kernel(Kernel(1, 1, AluExp.global_index(F32, 0, 1, AluVar.gidx) + AluExp.f32(1)))
    a, out = be.malloc(4), be.malloc(4)
    assert a == 1  # the first slot: True == 1
    be.dispatch(exe, [a], [out])
    with pytest.raises(SlotError, match="a bool is not a slot"):
        be.dispatch(exe, [True], [out])
