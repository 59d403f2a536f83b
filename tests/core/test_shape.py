"""View / ShapeTracker: the spec's verified vectors, every movement op and its errors, and
randomized chains checked against numpy through three independent readers (a pure-Python
walk of the views, the lowered AluExp per dim, and the lowered AluExp over a flat Special)."""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from jaxcore.alu import AluExp
from jaxcore.dtype import DType
from jaxcore.interpret import Interpreter
from jaxcore.shape import ShapeTracker, View, unravel, unravel_alu

V = View.create
ST = ShapeTracker.from_shape
T, F = True, False


def fields(v: View | None) -> Any:
    """A view as the spec's `shape strides offset mask` tuple (lists, for readable diffs)."""
    if v is None:
        return None
    return (list(v.shape), list(v.strides), v.offset, None if v.mask is None else [list(m) for m in v.mask])


def views(st: ShapeTracker) -> list[Any]:
    return [fields(v) for v in st.views]


def raises(msg: str) -> Any:
    return pytest.raises(ValueError, match="^" + re.escape(msg) + "$")


# ======================================================================================================
# Appendix A.5 vectors


class TestCreate:
    def test_size1_stride_forced_zero(self) -> None:
        assert fields(V([3, 1, 4])) == ([3, 1, 4], [4, 0, 1], 0, None)

    def test_scalar(self) -> None:
        v = V([])
        assert fields(v) == ([], [], 0, None)
        assert v.size == 1 and v.contiguous and v.ndim == 0

    def test_single_index_mask_folds_into_offset(self) -> None:
        assert fields(V([3, 4], [4, 1], 0, [[1, 2], [0, 4]])) == ([3, 4], [0, 1], 4, [[1, 2], [0, 4]])

    def test_empty_mask_zeroes_everything(self) -> None:
        assert fields(V([3, 4], [4, 1], 5, [[1, 1], [0, 4]])) == ([3, 4], [0, 0], 0, [[0, 0], [0, 0]])

    def test_zero_size(self) -> None:
        v = V([0, 4], [4, 1], 5)
        assert fields(v) == ([0, 4], [0, 0], 0, None)
        assert v.size == 0 and v.contiguous

    def test_full_mask_dropped(self) -> None:
        assert V([3, 4], None, 0, [[0, 3], [0, 4]]).mask is None
        assert V([3, 4], None, 0, [[0, 3], [0, 4]]).contiguous

    def test_negative_shape(self) -> None:
        with raises("View shape must be non-negative"):
            V([3, -1])

    def test_mismatched_lengths(self) -> None:
        with pytest.raises(ValueError):
            V([3, 4], [1])
        with pytest.raises(ValueError):
            V([3, 4], None, 0, [[0, 1]])

    def test_accepts_numpy_and_lists(self) -> None:
        v = V(np.array([2, 3]), np.array([3, 1]), np.int64(0), [np.array([0, 2]), (0, 3)])
        assert v == V((2, 3)) and all(type(s) is int for s in v.shape + v.strides)
        assert hash(v) == hash(V([2, 3]))

    def test_contiguous(self) -> None:
        assert V([2, 3]).contiguous
        assert not V([2, 3], [3, 1], 1).contiguous
        assert not V([2, 3], [1, 2]).contiguous
        assert not V([2, 3]).pad([[0, 0], [0, 1]]).contiguous


class TestMovementVectors:
    def test_pad(self) -> None:
        assert fields(V([3, 3]).pad([[1, 2], [3, 4]])) == ([6, 10], [3, 1], -6, [[1, 4], [3, 6]])

    def test_pad_shrink(self) -> None:
        v = V([3, 3]).pad([[1, 1], [1, 1]]).shrink([[0, 2], [1, 5]])
        assert fields(v) == ([2, 4], [0, 1], 0, [[1, 2], [0, 3]])

    def test_pad_flip(self) -> None:
        v = V([3, 3]).pad([[1, 0], [0, 2]]).flip([T, T])
        assert fields(v) == ([4, 5], [-3, -1], 10, [[0, 3], [2, 5]])

    def test_pad_expand(self) -> None:
        v = V([1, 3]).pad([[0, 0], [1, 0]]).expand([5, 4])
        assert fields(v) == ([5, 4], [0, 1], -1, [[0, 5], [1, 4]])

    def test_reshape_padded_vector(self) -> None:
        assert V([4]).pad([[1, 1]]).reshape([2, 3]) is None
        assert V([4]).pad([[1, 1]]).reshape([3, 2]) is None

    def test_reshape_padded_rows(self) -> None:
        assert fields(V([2, 2]).pad([[1, 1], [0, 0]]).reshape([8])) == ([8], [1], -2, [[2, 6]])
        assert V([2, 2]).pad([[0, 0], [1, 1]]).reshape([8]) is None

    def test_reshape_flip_expand_permute(self) -> None:
        assert V([2, 3]).flip([T, F]).reshape([6]) is None
        assert V([3, 1]).expand([3, 4]).reshape([12]) is None
        assert fields(V([3, 1]).expand([3, 4]).reshape([3, 2, 2])) == ([3, 2, 2], [1, 0, 0], 0, None)
        assert V([2, 3]).permute([1, 0]).reshape([6]) is None

    def test_complex_reshape(self) -> None:
        v = (
            V([240])
            .reshape([2, 2, 6, 1, 10])
            .permute([1, 0, 2, 3, 4])
            .pad([[1, 1], [2, 3], [0, 0], [0, 0], [0, 0]])
            .reshape([4, 7, 3, 2, 10])
        )
        assert fields(v) == (
            [4, 7, 3, 2, 10],
            [60, 120, 20, 10, 1],
            -300,
            [[1, 3], [2, 4], [0, 3], [0, 2], [0, 10]],
        )

    def test_minify(self) -> None:
        assert fields(V([2, 3, 4]).minify()) == ([24], [1], 0, None)
        assert fields(V([2, 3, 4]).permute([1, 0, 2]).minify()) == ([3, 2, 4], [4, 12, 1], 0, None)
        assert fields(V([3, 1]).expand([3, 4]).minify()) == ([3, 4], [1, 0], 0, None)

    def test_data_range(self) -> None:
        assert V([3, 3]).pad([[1, 1], [1, 1]]).data_range() == (0, 9)
        assert V([3, 3]).flip([T, F]).shrink([[0, 2], [1, 2]]).data_range() == (4, 8)
        assert V([0, 3]).data_range() == (0, 0)
        assert V([3, 4], [4, 1], 5, [[1, 1], [0, 4]]).data_range() == (0, 0)

    def test_view_compose(self) -> None:
        a = V([1, 10, 784], [0, 0, 1])
        assert fields(a.compose(V([1, 10, 196, 4]))) == ([1, 10, 196, 4], [0, 0, 4, 1], 0, None)
        assert V([2, 3]).flip([T, F]).shrink([[0, 2], [0, 2]]).compose(V([2, 3])) is None


class TestTrackerVectors:
    def test_flip_reshape_appends(self) -> None:
        st = ST([2, 3]).flip([T, F]).reshape([3, 2])
        assert views(st) == [([2, 3], [-3, 1], 3, None), ([3, 2], [2, 1], 0, None)]

    def test_pad_reshape_appends(self) -> None:
        st = ST([4]).pad([[1, 1]]).reshape([3, 2])
        assert views(st) == [([6], [1], -1, [[1, 5]]), ([3, 2], [2, 1], 0, None)]

    def test_broadcast(self) -> None:
        assert views(ST([3]).broadcast([2, 3, 4], [0, 2])) == [([2, 3, 4], [0, 1, 0], 0, None)]
        assert views(ST([3]).broadcast([2, 3, 4], [2, 0])) == [([2, 3, 4], [0, 1, 0], 0, None)]
        assert views(ST([2, 3]).broadcast([2, 3], [])) == [([2, 3], [3, 1], 0, None)]

    def test_repeat(self) -> None:
        assert views(ST([2, 3]).repeat([2])) == [([2, 2, 3], [3, 0, 1], 0, None), ([2, 6], [6, 1], 0, None)]
        assert views(ST([2, 3]).repeat([2], tile=False)) == [
            ([2, 3, 2], [3, 1, 0], 0, None),
            ([2, 6], [6, 1], 0, None),
        ]

    def test_moveaxis(self) -> None:
        assert views(ST([2, 3, 4]).moveaxis(0, 2)) == [([3, 4, 2], [4, 1, 12], 0, None)]

    def test_pad_or_shrink(self) -> None:
        assert views(ST([5]).pad_or_shrink([[-1, 2]])) == [([6], [1], 1, [[0, 4]])]

    def test_compose(self) -> None:
        a = ST([2, 3]).permute([1, 0]).compose(ST([3, 2]).permute([1, 0]))
        assert a.contiguous and a.shape == (2, 3)
        b = ST([3]).pad([[2, 2]]).compose(ST([7]).shrink([[1, 6]]))
        assert views(b) == [([5], [1], -1, [[1, 4]])]
        c = ST([6]).flip([T]).compose(ST([6]).reshape([2, 3]))
        assert views(c) == [([2, 3], [-3, -1], 5, None)]

    def test_unravel(self) -> None:
        assert unravel([3, 4], 7) == [1, 3]
        assert unravel([3, 4], -1) == [-1, -1]
        assert unravel([3, 4], 13) == [0, 1]
        assert unravel([], 0) == []


class TestLoweringVectors:
    def test_pad_flip_reshape(self) -> None:
        x = AluExp.special(DType.int32, "x", 16)
        st = ST([2, 2]).pad([[1, 1], [1, 1]]).flip([F, T]).reshape([16])
        index, valid = st.to_alu_exp([x])
        assert str(index) == "(((#x{16} / 4) * 2) - (#x{16} % 4))"
        assert str(valid) == (
            "(((#x{16} / 4) < 3) * ((((#x{16} / 4) < 1) != true) * "
            "(((#x{16} % 4) < 3) * (((#x{16} % 4) < 1) != true))))"
        )
        got = {k: index.evaluate({"x": k}) for k in range(16) if valid.evaluate({"x": k})}
        assert got == {5: 1, 6: 0, 9: 3, 10: 2}

    def test_permute_reshape(self) -> None:
        x = AluExp.special(DType.int32, "x", 12)
        index, valid = ST([3, 4]).permute([1, 0]).reshape([12]).to_alu_exp([x])
        assert str(index) == "((#x{12} / 3) + ((#x{12} % 3) * 4))"
        assert valid.resolve() == 1

    def test_unravel_alu(self) -> None:
        g = AluExp.special(DType.int32, "gidx", 200)
        assert [str(e.simplify()) for e in unravel_alu([10, 20], g)] == [
            "(#gidx{200} / 20)",
            "(#gidx{200} % 20)",
        ]
        v = AluExp.variable(DType.int32, "v")
        assert [e.evaluate({"v": 47}) for e in unravel_alu([3, 4, 5], v)] == [2, 1, 2]

    def test_contiguous_lowering_is_identity(self) -> None:
        g = AluExp.special(DType.int32, "gidx", 6)
        index, valid = ST([6]).to_alu_exp([g])
        assert index == g and valid.resolve() == 1

    def test_view_to_alu_exp_is_unsimplified(self) -> None:
        i, j = AluExp.variable(DType.int32, "i"), AluExp.variable(DType.int32, "j")
        index, valid = V([3, 3]).pad([[1, 0], [0, 1]]).to_alu_exp([i, j])
        assert str(index) == "(($i:int32 * 3) + (($j:int32 * 1) + -3))"
        assert str(valid) == "((($i:int32 < 1) != true) * (($j:int32 < 3) * true))"

    def test_wrong_index_count(self) -> None:
        with pytest.raises(ValueError):
            V([2, 3]).to_alu_exp([AluExp.i32(0)])


# ======================================================================================================
# Movement ops and their errors


class TestErrors:
    def test_pad(self) -> None:
        with raises("invalid pad [[1,-1]] for [3]"):
            V([3]).pad([[1, -1]])
        with raises("invalid pad [[1,1]] for [3,3]"):
            V([3, 3]).pad([[1, 1]])

    def test_shrink(self) -> None:
        with raises("invalid shrink [[2,1]] for [3]"):
            V([3]).shrink([[2, 1]])
        with raises("invalid shrink [[0,4]] for [3]"):
            V([3]).shrink([[0, 4]])
        with raises("invalid shrink [[-1,2]] for [3]"):
            V([3]).shrink([[-1, 2]])

    def test_expand(self) -> None:
        with raises("Can't expand [3,2] into [3,4]"):
            V([3, 2]).expand([3, 4])
        with raises("Can't expand [3,1] into [3]"):
            V([3, 1]).expand([3])
        with raises("Can't expand [0] into [5]"):
            V([0]).expand([5])

    def test_permute(self) -> None:
        with raises("Invalid permutation [0,0] of len 2"):
            V([2, 3]).permute([0, 0])
        with raises("Invalid permutation [0] of len 2"):
            V([2, 3]).permute([0])

    def test_flip(self) -> None:
        with raises("Invalid flip [true] for [2,3]"):
            V([2, 3]).flip([T])

    def test_reshape(self) -> None:
        with raises("Reshape cannot have negative numbers [-2,-3]"):
            V([2, 3]).reshape([-2, -3])
        with raises("Reshape size [2,3] -> [7]"):
            V([2, 3]).reshape([7])
        with raises("Reshape size [2,3] -> [7]"):
            ST([2, 3]).reshape([7])

    def test_repeat(self) -> None:
        with raises("Too many repeats [1,2,3] for shape [2,3]"):
            ST([2, 3]).repeat([1, 2, 3])
        with raises("Invalid repeats [0]"):
            ST([2, 3]).repeat([0])

    def test_pad_or_shrink(self) -> None:
        with raises("Invalid padOrShrink [[-4,0]] for [3]"):
            ST([3]).pad_or_shrink([[-4, 0]])
        with raises("Invalid padOrShrink [[-2,-2]] for [3]"):
            ST([3]).pad_or_shrink([[-2, -2]])

    def test_tracker_needs_a_view(self) -> None:
        with pytest.raises(ValueError):
            ShapeTracker(())


class TestOps:
    def test_pad_zero_is_identity(self) -> None:
        v = V([2, 3]).flip([T, F])
        assert v.pad([[0, 0], [0, 0]]) is v

    def test_pad_of_masked(self) -> None:
        v = V([2]).pad([[1, 1]]).pad([[2, 0]])
        assert fields(v) == ([6], [1], -3, [[3, 5]])

    def test_shrink_everything_masked(self) -> None:
        v = V([3]).pad([[2, 0]]).shrink([[0, 2]])
        assert fields(v) == ([2], [0], 0, [[0, 0]])
        assert v.data_range() == (0, 0)

    def test_shrink_to_zero(self) -> None:
        v = V([3, 4]).shrink([[1, 1], [0, 4]])
        assert fields(v) == ([0, 4], [0, 0], 0, None)

    def test_expand_masked(self) -> None:
        v = V([1]).pad([[0, 1]]).shrink([[1, 2]])  # the single element is padding
        assert fields(v.expand([3])) == ([3], [0], 0, [[0, 0]])
        assert fields(V([1, 2]).expand([0, 2])) == ([0, 2], [0, 0], 0, None)
        assert fields(V([1, 0]).expand([3, 0])) == ([3, 0], [0, 0], 0, None)

    def test_permute_mask(self) -> None:
        v = V([2, 3]).pad([[1, 0], [0, 2]]).permute([1, 0])
        assert fields(v) == ([5, 3], [1, 3], -3, [[0, 3], [1, 3]])

    def test_flip_twice(self) -> None:
        v = V([2, 3]).pad([[1, 0], [0, 2]])
        assert v.flip([T, T]).flip([T, T]) == v

    def test_reshape_same_shape_is_self(self) -> None:
        v = V([2, 3]).flip([T, F])
        assert v.reshape([2, 3]) is v

    def test_reshape_same_shape_is_self_after_an_equal_view(self) -> None:
        """The reshape cache is keyed by equality: an equal view reshaped first is not returned."""
        first, v = V([2, 3]).flip([F, T]), V([2, 3]).flip([F, T])
        assert first.reshape([2, 3]) is first and v == first and v is not first
        assert v.reshape([2, 3]) is v

    def test_reshape_zero_size(self) -> None:
        assert fields(V([0, 3]).reshape([3, 0])) == ([3, 0], [0, 0], 0, None)

    def test_reshape_scalar(self) -> None:
        assert fields(V([1, 1], None, 3).reshape([])) == ([], [], 3, None)
        assert V([1]).pad([[1, 0]]).shrink([[0, 1]]).reshape([]) is None

    def test_reshape_split_and_merge_with_mask(self) -> None:
        v = V([4, 3]).pad([[0, 0], [0, 3]]).reshape([2, 2, 6])
        assert fields(v) == ([2, 2, 6], [6, 3, 1], 0, [[0, 2], [0, 2], [0, 3]])

    def test_tracker_properties(self) -> None:
        st = ST([2, 3]).shrink([[1, 2], [0, 3]])
        assert st.shape == (1, 3) and st.ndim == 2 and st.size == 3 and st.last_strides == (0, 1)
        assert st.consecutive and not st.contiguous
        assert ST([2, 3]).contiguous and ST([2, 3]).consecutive
        assert not ST([2, 3]).pad([[0, 1], [0, 0]]).consecutive
        assert not ST([2, 3]).flip([T, F]).reshape([6]).consecutive

    def test_key_and_json(self) -> None:
        st = ST([2, 3]).flip([T, F]).reshape([3, 2])
        assert st.key() == ST([2, 3]).flip([T, F]).reshape([3, 2]).key()
        assert hash(st.key()) == hash(ST([2, 3]).flip([T, F]).reshape([3, 2]).key())
        assert st.key() != ST([3, 2]).key()
        twin = ST([2, 3]).flip([T, F]).reshape([3, 2])
        assert st == twin and hash(st) == hash(twin)
        assert json.dumps(st.to_json(), separators=(",", ":")) == (
            '{"views":[{"shape":[2,3],"strides":[-3,1],"offset":3,"mask":null},'
            '{"shape":[3,2],"strides":[2,1],"offset":0,"mask":null}]}'
        )
        assert ST([4]).pad([[1, 0]]).to_json() == {
            "views": [{"shape": [5], "strides": [1], "offset": -1, "mask": [[1, 5]]}]
        }

    def test_simplify_keeps_unmergeable(self) -> None:
        st = ST([2, 3]).flip([T, F]).reshape([3, 2])
        assert st.simplify() == st

    def test_compose_contiguous_left(self) -> None:
        other = ST([3, 2]).flip([T, F])
        assert ST([6]).compose(other) is other

    def test_repeat_empty_and_multi(self) -> None:
        st = ST([2, 3])
        assert st.repeat([]) is st
        base = np.arange(6).reshape(2, 3) + 1
        assert np.array_equal(realize(st.repeat([2, 2]), base.ravel()), np.tile(base, (2, 2)))
        assert np.array_equal(realize(st.repeat([3], tile=False), base.ravel()), np.repeat(base, 3, axis=1))

    def test_moveaxis_negative(self) -> None:
        assert ST([2, 3, 4]).moveaxis(-1, 0).shape == (4, 2, 3)

    def test_zero_size_compose_terminates(self) -> None:
        # A padded first view followed by an empty second view: nothing is read.
        st = ST([4]).pad([[1, 1]]).reshape([3, 2]).shrink([[0, 3], [1, 1]])
        assert st.size == 0
        assert st.simplify().size == 0
        assert ST([3]).pad([[2, 1]]).compose(ST([6]).reshape([2, 3]).shrink([[0, 2], [2, 2]])).size == 0


# ======================================================================================================
# Readers used by the randomized tests


def read_views(st: ShapeTracker, buf: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Realize `st` over `buf` by walking its views in pure Python; also return every address read."""
    out = np.zeros(st.shape, dtype=buf.dtype)
    addrs: list[int] = []
    for idx in np.ndindex(*st.shape):
        cur: tuple[int, ...] = idx
        value = 0
        for k in range(len(st.views) - 1, -1, -1):
            v = st.views[k]
            if v.mask is not None and not all(b <= i < e for i, (b, e) in zip(cur, v.mask)):
                break
            addr = v.offset + sum(s * i for s, i in zip(v.strides, cur))
            if k == 0:
                value = int(buf[addr]) if 0 <= addr < buf.size else -999_999
                addrs.append(addr)
            else:
                prev = st.views[k - 1]
                assert 0 <= addr < prev.size, (st, idx, k, addr)
                cur = tuple(unravel(prev.shape, addr))
        out[idx] = value
    return out, addrs


def _gather(buf: np.ndarray, index: np.ndarray, valid: np.ndarray) -> np.ndarray:
    index = np.broadcast_to(index, valid.shape).astype(np.int64)
    assert np.all((index[valid] >= 0) & (index[valid] < buf.size)), "valid lane reads out of bounds"
    return np.where(valid, buf[np.clip(index, 0, max(buf.size - 1, 0))] if buf.size else 0, 0)


def lowered_per_dim(st: ShapeTracker, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Realize through `to_alu_exp` with one unbounded Variable per dim (vectorised)."""
    names = [f"i{d}" for d in range(st.ndim)]
    index, valid = st.to_alu_exp([AluExp.variable(DType.int32, n) for n in names])
    grids = np.indices(st.shape, dtype=np.int32) if st.ndim else np.zeros((0,), np.int32)
    env = {n: grids[d] for d, n in enumerate(names)}
    shape = st.shape
    iv = np.broadcast_to(Interpreter(env).run(index), shape)
    vv = np.broadcast_to(Interpreter(env).run(valid), shape) != 0
    return _gather(buf, iv, vv).reshape(shape), iv, vv


def lowered_flat(st: ShapeTracker, buf: np.ndarray) -> np.ndarray:
    """Realize through `to_alu_exp` over a flat, bounded Special (so range-based rules fire)."""
    gidx = AluExp.special(DType.int32, "gidx", st.size)
    index, valid = st.to_alu_exp(unravel_alu(st.shape, gidx))
    env = {"gidx": np.arange(st.size, dtype=np.int32)}
    iv = np.broadcast_to(Interpreter(env).run(index), (st.size,))
    vv = np.broadcast_to(Interpreter(env).run(valid), (st.size,)) != 0
    return _gather(buf, iv, vv).reshape(st.shape)


def realize(st: ShapeTracker, buf: np.ndarray) -> np.ndarray:
    return read_views(st, buf)[0]


# ======================================================================================================
# Random chains


MAX_SIZE = 400
Op = tuple[str, Any]


def _factor(n: int, rng: random.Random) -> list[int]:
    """A random shape (1-4 dims, 1s allowed) with product n."""
    if n == 0:
        dims = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        dims.insert(rng.randint(0, len(dims)), 0)
        return dims
    dims: list[int] = []
    rest = n
    for _ in range(rng.randint(0, 3)):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = rng.choice(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    if rng.random() < 0.3:
        dims.insert(rng.randint(0, len(dims)), 1)
    rng.shuffle(dims)
    return dims


def random_op(shape: tuple[int, ...], rng: random.Random) -> Op:
    size = math.prod(shape)
    nd = len(shape)
    kinds = ["reshape", "permute", "flip", "shrink", "reshape"]
    if size * 4 <= MAX_SIZE and nd:
        kinds += ["pad", "pad"]
    if 1 in shape and size * 3 <= MAX_SIZE:
        kinds += ["expand", "expand"]
    kind = rng.choice(kinds)
    if kind == "reshape":
        return kind, _factor(size, rng)
    if kind == "permute":
        perm = list(range(nd))
        rng.shuffle(perm)
        return kind, perm
    if kind == "flip":
        return kind, [rng.random() < 0.5 for _ in range(nd)]
    if kind == "shrink":
        arg = []
        for s in shape:
            b = rng.randint(0, s)
            e = rng.randint(b, s)
            if rng.random() < 0.85 and s > 0:  # mostly keep something
                b = rng.randint(0, s - 1)
                e = rng.randint(b + 1, s)
            arg.append([b, e])
        return kind, arg
    if kind == "pad":
        return kind, [[rng.randint(0, 2), rng.randint(0, 2)] for _ in shape]
    new = [rng.randint(2, 3) if s == 1 and rng.random() < 0.7 else s for s in shape]
    return "expand", new


def apply_st(st: ShapeTracker, op: Op) -> ShapeTracker:
    kind, arg = op
    return getattr(st, kind)(arg)


def apply_np(a: np.ndarray, op: Op) -> np.ndarray:
    kind, arg = op
    if kind == "reshape":
        return a.reshape(arg)
    if kind == "permute":
        return a.transpose(arg)
    if kind == "flip":
        axes = tuple(d for d, f in enumerate(arg) if f)
        return np.flip(a, axes) if axes else a
    if kind == "shrink":
        return a[tuple(slice(b, e) for b, e in arg)]
    if kind == "pad":
        return np.pad(a, arg, constant_values=0)
    return np.broadcast_to(a, arg)


def random_chain(shape: tuple[int, ...], n: int, rng: random.Random) -> list[Op]:
    ops: list[Op] = []
    for _ in range(n):
        op = random_op(shape, rng)
        ops.append(op)
        shape = apply_np(np.zeros(shape, np.int8), op).shape
    return ops


def _start(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))


def check_tracker(
    st: ShapeTracker, buf: np.ndarray, expected: np.ndarray, context: Callable[[], str]
) -> None:
    assert st.shape == expected.shape, context()
    got, addrs = read_views(st, buf)
    assert np.array_equal(got, expected), context()
    lo, hi = st.views[0].data_range()
    assert all(lo <= a < hi for a in addrs), context()
    assert all(0 <= a < buf.size for a in addrs), context()
    if st.size == 0:
        return
    per_dim, index, valid = lowered_per_dim(st, buf)
    assert np.array_equal(per_dim, expected), context()
    assert np.all((index[valid] >= lo) & (index[valid] < hi)), context()
    assert np.array_equal(lowered_flat(st, buf), expected), context()


@pytest.mark.parametrize("seed", range(300))
def test_random_chain(seed: int) -> None:
    rng = random.Random(seed)
    start = _start(rng)
    buf = np.arange(1, math.prod(start) + 1, dtype=np.int64)
    ops = random_chain(start, rng.randint(1, 7), rng)
    st = ST(start)
    arr = buf.reshape(start)
    for op in ops:
        st = apply_st(st, op)
        arr = apply_np(arr, op)

    def context() -> str:
        return f"start={start} ops={ops}\nst={st}"

    check_tracker(st, buf, arr, context)
    # Merging views never changes what is read.
    check_tracker(st.simplify(), buf, arr, context)
    # Every view's minified form addresses the same elements in the same order.
    for v in st.views:
        m = v.minify()
        assert m.size == v.size
        lone_v, lone_m = ShapeTracker((v,)), ShapeTracker((m,)).reshape(v.shape)
        span = np.arange(1, max(v.data_range()[1], 0) + 1, dtype=np.int64)
        if v.data_range()[0] >= 0:
            assert np.array_equal(realize(lone_m, span), realize(lone_v, span)), context()


@pytest.mark.parametrize("seed", range(150))
def test_random_compose(seed: int) -> None:
    """`a.compose(b)` reads what applying b's chain to a's result reads."""
    rng = random.Random(10_000 + seed)
    start = _start(rng)
    buf = np.arange(1, math.prod(start) + 1, dtype=np.int64)
    ops_a = random_chain(start, rng.randint(1, 5), rng)
    a, arr = ST(start), buf.reshape(start)
    for op in ops_a:
        a, arr = apply_st(a, op), apply_np(arr, op)
    ops_b = random_chain(a.shape, rng.randint(1, 5), rng)
    b = ST(a.shape)
    for op in ops_b:
        b, arr = apply_st(b, op), apply_np(arr, op)
    composed = a.compose(b)

    def context() -> str:
        return f"start={start} a={ops_a} b={ops_b}\ncomposed={composed}"

    check_tracker(composed, buf, arr, context)
    assert len(composed.views) <= len(a.views) + len(b.views), context()


def _single_view(shape: tuple[int, ...], rng: random.Random) -> ShapeTracker:
    """A random one-view tracker over `shape` (retrying chains that need two views)."""
    while True:
        st = ST(shape)
        for op in random_chain(shape, rng.randint(1, 4), rng):
            st = apply_st(st, op)
        st = st.simplify()
        if len(st.views) == 1:
            return st


@pytest.mark.parametrize("seed", range(150))
def test_random_view_compose(seed: int) -> None:
    """When `View.compose` succeeds, the single view reads what the two-view tracker reads."""
    rng = random.Random(20_000 + seed)
    start = _start(rng)
    buf = np.arange(1, math.prod(start) + 1, dtype=np.int64)
    v2 = _single_view(start, rng)
    v1 = _single_view(v2.shape, rng)
    pair = ShapeTracker(v2.views + v1.views)
    merged = v2.views[0].compose(v1.views[0])
    if merged is None:
        return
    assert merged.shape == v1.shape
    check_tracker(ShapeTracker((merged,)), buf, realize(pair, buf), lambda: f"{pair} -> {merged}")


def test_scalar_evaluate_matches_vectorised() -> None:
    """AluExp.evaluate (the scalar path) agrees with the vectorised reader on a masked chain."""
    st = ST([3, 4]).pad([[1, 0], [0, 2]]).flip([T, F]).reshape([2, 2, 6]).permute([2, 0, 1])
    buf = np.arange(1, 13, dtype=np.int64)
    names = ["a", "b", "c"]
    index, valid = st.to_alu_exp([AluExp.variable(DType.int32, n) for n in names])
    expected = realize(st, buf)
    for idx in np.ndindex(*st.shape):
        ctx = dict(zip(names, (int(i) for i in idx)))
        value = int(buf[index.evaluate(ctx)]) if valid.evaluate(ctx) else 0
        assert value == expected[idx]
