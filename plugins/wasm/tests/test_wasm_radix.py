"""Sort and Argsort of long 32-bit rows through the radix module, against the contract's order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcore import DType
from jaxcore.routine import Routine
from jaxcore_wasm import radix

RNG = np.random.default_rng(5)
N = radix.MIN_ROW
NP = {"float32": np.float32, "int32": np.int32, "uint32": np.uint32, "bool": np.int32}


def order_key(v: float) -> tuple:
    """Sort's order: NaN last, -0 before +0."""
    if math.isnan(v):
        return (1, 0.0, 0)
    return (0, v, 0 if math.copysign(1.0, v) < 0 else 1)


def tie_key(v: float) -> tuple:
    """Argsort's order: NaNs tie last, -0 ties with +0 (a stable sort keeps their input order)."""
    return (1, 0.0) if math.isnan(v) else (0, v)


def run(be, name: str, x: np.ndarray, dtype: str) -> list[np.ndarray]:
    routine = Routine.build(name, [x.shape], [DType(dtype)])
    ins = [be.malloc(x.nbytes, x.tobytes())]
    outs = [be.malloc(x.nbytes)] + ([be.malloc(4 * x.size)] if name == "Argsort" else [])
    be.dispatch(be.prepare_routine(routine), ins, outs)
    dtypes = [x.dtype, np.int32]
    got = [np.frombuffer(be.read(o), dtypes[i]).reshape(x.shape) for i, o in enumerate(outs)]
    for s in ins + outs:
        be.dec_ref(s)
    return got


def specials(shape: tuple[int, ...]) -> np.ndarray:
    """float32 rows of NaNs of both signs and several payloads, signed zeros, infinities,
    denormals, ties and ordinary values."""
    pool = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 1e-45, -1e-45, 3.5, -2.25], np.float32)
    x = RNG.choice(pool, shape)
    bits = x.view(np.uint32)
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF], np.uint32)
    where = RNG.random(shape) < 0.05
    bits[where] = RNG.choice(nan_bits, int(where.sum()))
    return x


@pytest.mark.parametrize("shape", [(N,), (3, N + 17), (2, 5 * N)])
def test_sort_float32_orders_nans_last_and_keeps_their_bits(wasm_backend, shape) -> None:
    x = specials(shape)
    (y,) = run(wasm_backend, "Sort", x, "float32")
    for row, got in zip(x.reshape(-1, shape[-1]), y.reshape(-1, shape[-1])):
        want = np.array(sorted(row.tolist(), key=order_key), np.float32)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))  # -0 before +0
        assert np.isnan(got[~ok]).all()
        nans = row[np.isnan(row)].view(np.uint32)
        assert sorted(got[~ok].view(np.uint32).tolist()) == sorted(nans.tolist())


@pytest.mark.parametrize("shape", [(N,), (2, 3 * N + 5)])
def test_argsort_float32_is_stable_with_nan_and_zero_ties(wasm_backend, shape) -> None:
    x = specials(shape)
    values, idx = run(wasm_backend, "Argsort", x, "float32")
    for row, v, i in zip(*(a.reshape(-1, shape[-1]) for a in (x, values, idx))):
        want = sorted(range(len(row)), key=lambda j: tie_key(float(row[j])))
        assert i.tolist() == want
        np.testing.assert_array_equal(v.view(np.uint32), row[want].view(np.uint32))


@pytest.mark.parametrize("dtype", ["int32", "uint32", "bool"])
@pytest.mark.parametrize("spread", ["full", "low byte", "constant"])  # every byte, one byte, none moves
def test_integer_rows(wasm_backend, dtype: str, spread: str) -> None:
    n = 2 * N + 3
    if dtype == "bool":
        x = RNG.integers(0, 2, n).astype(np.int32)
    elif spread == "full":
        info = np.iinfo(NP[dtype])
        x = RNG.integers(info.min, info.max, n, endpoint=True, dtype=NP[dtype])
    elif spread == "low byte":
        x = RNG.integers(0, 200, n).astype(NP[dtype]) - (100 if dtype == "int32" else 0)
    else:
        x = np.full(n, 7, NP[dtype])
    (y,) = run(wasm_backend, "Sort", x, dtype)
    np.testing.assert_array_equal(y, np.sort(x))
    values, idx = run(wasm_backend, "Argsort", x, dtype)
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(values, x[want])


def test_short_rows_stay_on_the_host_and_agree(wasm_backend) -> None:
    """MIN_ROW - 1 keys take numpy's sort, MIN_ROW the radix module: the same answer."""
    for n in (N - 1, N):
        x = RNG.standard_normal(n).astype(np.float32)
        (y,) = run(wasm_backend, "Sort", x, "float32")
        np.testing.assert_array_equal(y, np.sort(x))


def test_no_room_for_the_scratch_falls_back_to_the_host(wasm_backend, monkeypatch) -> None:
    x = specials((N,))
    alloc = wasm_backend.allocator.alloc
    scratch = radix.scratch_bytes(N, False)

    def tight(nbytes: int) -> int:
        if nbytes == scratch:
            raise MemoryError("wasm: out of linear memory (test)")
        return alloc(nbytes)

    monkeypatch.setattr(wasm_backend.allocator, "alloc", tight)
    (y,) = run(wasm_backend, "Sort", x, "float32")
    want = np.array(sorted(x.tolist(), key=order_key), np.float32)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(y[ok].view(np.uint32), want[ok].view(np.uint32))
    assert np.isnan(y[~ok]).all()
