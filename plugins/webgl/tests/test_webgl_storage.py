"""Buffers as RGBA32UI textures: every bit pattern round-trips, byte ranges read exactly, the pool
reuses textures safely, and GL's command order keeps dependent dispatches right."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from jaxcore_webgl.device import TEXEL_BYTES, texture_dims

from jaxcore.alu import AluExp, AluVar
from jaxcore.conformance.harness import from_buffer, map_kernel, run_kernel
from jaxcore.dtype import DType
from jaxcore.kernel import Kernel

F32 = DType.float32

# Bit patterns a float texture or a careless driver would change: NaN payloads and signs, signalling
# NaNs, denormals, -0, INT_MIN, -1 (a NaN pattern), bool 1 (a denormal pattern).
BITS32 = np.array(
    [0x7FC00001, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x00000001, 0x807FFFFF, 0x80000000, 0x80000001]
    + [0xFFFFFFFF, 0x7FFFFFFF, 0, 1, 0x00800000, 0x7F7FFFFF, 0xFF800000, 0x12345678],
    np.uint32,
)
BITS16 = np.array([0x7E01, 0xFE00, 0x7C01, 0x7DFF, 0x0001, 0x83FF, 0x8000, 0xFFFF, 0x7BFF, 0x3C00], np.uint16)


def _as(dtype: str) -> np.ndarray:
    if dtype == "float16":
        return BITS16.view(np.float16)
    if dtype == "bool":
        return (np.arange(16) % 3 == 0).astype(np.int32)
    return BITS32.view({"float32": np.float32, "int32": np.int32, "uint32": np.uint32}[dtype])


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "bool", "float16"])
def test_upload_read_round_trip_every_bit(gl, dtype: str) -> None:
    raw = _as(dtype).tobytes()
    slot = gl.malloc(len(raw), raw)
    try:
        assert gl.read(slot) == raw
        assert asyncio.run(gl.read_async(slot)) == raw
    finally:
        gl.dec_ref(slot)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "bool"])
def test_copy_kernel_keeps_every_bit(gl, dtype: str) -> None:
    """load -> store through a shader: NaN payloads, denormals (llvmpipe flushes them in arithmetic)
    and -0 come out bit for bit."""
    x = _as(dtype)
    got = run_kernel(gl, map_kernel([dtype], len(x), lambda v: v), [x])
    assert got.tobytes() == x.tobytes()


def test_float16_copy_keeps_values_and_nan_signs(gl) -> None:
    x = _as("float16")
    got = run_kernel(gl, map_kernel(["float16"], len(x), lambda v: v), [x])
    nan = np.isnan(x)
    assert got[~nan].view(np.uint16).tolist() == x[~nan].view(np.uint16).tolist()
    assert np.isnan(got[nan]).all() and (np.signbit(got[nan]) == np.signbit(x[nan])).all()


@pytest.mark.parametrize("size", [1, 3, 15, 16, 17, 1000, 4096 * 16 + 5, 300_001])
def test_read_every_kind_of_range(gl, size: int) -> None:
    """Odd offsets and lengths, ranges inside one texel, across texels and across texture rows."""
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    slot = gl.malloc(size, data)
    w = gl.size_of(slot)
    rng = np.random.default_rng(size + 1)
    cuts = [(0, size), (size - 1, 1), (0, 0), (size, 0)]
    cuts += [tuple(sorted(rng.integers(0, size + 1, 2))) for _ in range(12)]
    try:
        for a, b in cuts:
            assert gl.read(slot, int(a), int(b - a) if b >= a else 0) == data[a:b], (a, b, w)
        a, b = cuts[-1]
        assert asyncio.run(gl.read_async(slot, int(a), int(b - a))) == data[a:b]
    finally:
        gl.dec_ref(slot)


def test_texture_dims_are_power_of_two_wide_and_hold_the_buffer() -> None:
    for nbytes in [0, 1, 16, 17, 4096, 10**6, 10**8 + 3]:
        w, h, shift = texture_dims(nbytes, 16384)
        assert w == 1 << shift and w * h * TEXEL_BYTES >= max(nbytes, 1)
        assert w * (h - 1) * TEXEL_BYTES < max(nbytes, 1)  # no spare row
    with pytest.raises(MemoryError, match="limit"):
        texture_dims(16384 * 16384 * 16 + 1, 16384)


def _plus_one(n: int) -> Kernel:
    return map_kernel([F32], n, lambda x: AluExp.add(x, AluExp.f32(1)))


def test_long_chain_of_dependent_dispatches_read_midway(gl) -> None:
    n = 1000
    exe = gl.prepare_kernel(_plus_one(n))
    a = gl.malloc(4 * n, np.zeros(n, np.float32).tobytes())
    b = gl.malloc(4 * n)
    try:
        for i in range(300):
            gl.dispatch(exe, [a], [b])
            a, b = b, a
            if i == 149:
                assert (from_buffer(gl.read(a), F32) == 150).all()
        assert (from_buffer(gl.read(a), F32) == 300).all()
    finally:
        gl.dec_ref(a)
        gl.dec_ref(b)


def test_output_aliasing_an_input_reads_every_input_first(gl) -> None:
    """x = x[::-1] + x in place: every fragment must see the old x, not a half-written one."""
    n = 4096
    rev = AluExp.global_index(F32, 0, n, AluExp.sub(AluExp.i32(n - 1), AluVar.gidx))
    kernel = Kernel(1, n, AluExp.add(rev, AluExp.global_index(F32, 0, n, AluVar.gidx)))
    x = np.arange(n, dtype=np.float32)
    slot = gl.malloc(4 * n, x.tobytes())
    try:
        gl.dispatch(gl.prepare_kernel(kernel), [slot], [slot])
        assert (from_buffer(gl.read(slot), F32) == x[::-1] + x).all()
    finally:
        gl.dec_ref(slot)


def test_freed_then_reallocated_buffer(gl) -> None:
    """A buffer freed right after a dispatch that reads it, then a new one of the same size (the
    same pooled texture) with other contents: the first dispatch still saw the old contents."""
    n = 2048
    exe = gl.prepare_kernel(_plus_one(n))
    before = gl.device.live_textures
    out1, out2 = gl.malloc(4 * n), gl.malloc(4 * n)
    a = gl.malloc(4 * n, np.full(n, 5, np.float32).tobytes())
    gl.dispatch(exe, [a], [out1])
    gl.dec_ref(a)
    b = gl.malloc(4 * n, np.full(n, 7, np.float32).tobytes())
    gl.dispatch(exe, [b], [out2])
    try:
        assert (from_buffer(gl.read(out1), F32) == 6).all()
        assert (from_buffer(gl.read(out2), F32) == 8).all()
        assert gl.device.live_textures <= before + 3  # b reused a's texture
    finally:
        for s in (out1, out2, b):
            gl.dec_ref(s)


def test_write_after_read_of_the_same_buffer(gl) -> None:
    n = 512
    exe = gl.prepare_kernel(_plus_one(n))
    a = gl.malloc(4 * n, np.zeros(n, np.float32).tobytes())
    b = gl.malloc(4 * n)
    try:
        gl.dispatch(exe, [a], [b])  # reads a
        gl.dispatch(exe, [b], [a])  # then writes a
        assert (from_buffer(gl.read(b), F32) == 1).all()
        assert (from_buffer(gl.read(a), F32) == 2).all()
    finally:
        gl.dec_ref(a)
        gl.dec_ref(b)


def test_thousands_of_small_buffers(gl) -> None:
    slots = []
    try:
        for i in range(3000):
            size = 4 * (1 + i % 9)
            slots.append((gl.malloc(size, np.full(size // 4, i, np.int32).tobytes()), size, i))
        for slot, size, i in slots[::7]:
            assert gl.read(slot) == np.full(size // 4, i, np.int32).tobytes()
        exe = gl.prepare_kernel(map_kernel(["int32"], 1, lambda x: AluExp.mul(x, AluExp.i32(2))))
        outs = []
        for slot, _, _ in slots[:500]:
            out = gl.malloc(4)
            gl.dispatch(exe, [slot], [out])
            outs.append(out)
        assert [int(from_buffer(gl.read(o), "int32")[0]) for o in outs] == [2 * i for i in range(500)]
        for o in outs:
            gl.dec_ref(o)
    finally:
        for slot, _, _ in slots:
            gl.dec_ref(slot)


def test_buffer_beyond_the_texture_limit_is_a_memory_error(gl) -> None:
    with pytest.raises(MemoryError):
        gl.malloc(gl.capabilities.max_buffer_bytes + 1)


def test_a_failed_dispatch_surfaces_at_the_next_call(gl, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dispatches are not waited for; a failure on the GL thread is raised by the next call."""
    exe = gl.prepare_kernel(_plus_one(4))
    a = gl.malloc(16, np.zeros(4, np.float32).tobytes())
    b = gl.malloc(16)

    def broken(*args, **kwargs):
        raise RuntimeError("injected draw failure")

    try:
        monkeypatch.setattr(gl.device, "draw", broken)
        gl.dispatch(exe, [a], [b])
        with pytest.raises(RuntimeError, match="earlier dispatch failed.*injected draw failure"):
            gl.read(b)
        monkeypatch.undo()
        gl.dispatch(exe, [a], [b])  # the backend goes on working
        assert (from_buffer(gl.read(b), F32) == 1).all()
    finally:
        gl.dec_ref(a)
        gl.dec_ref(b)
