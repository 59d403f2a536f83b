"""The example frontend's four workloads, each with its numpy twin (and PyTorch's, when installed):
an MLP training step, single-head attention, least squares through Cholesky, and a sort.

`WORKLOADS[name](device, small, rng)` returns a `Prepared`: `step()` runs one step on the device
and waits for its results, `numpy()` (and `torch()`) the same step on the host, and `check()`
compares the device's last results with numpy's (None when they agree). Each step starts from the
same inputs, so every step does the same work and any step can be checked.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import lazy_array as lz
import numpy as np
from lazy_jit import jit

Step = Callable[[], object]


@dataclass
class Prepared:
    step: Step  # jitted: the dispatches recorded on the first call, replayed after
    numpy: Step
    check: Callable[[], str | None]
    torch: Step | None = None
    sizes: str = ""
    results: dict[str, Any] = field(default_factory=dict)
    eager: Step | None = None  # the same step with every kernel built again (no jit)


def _close(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float = 0.0) -> str | None:
    """None when `got` is within rtol (relative to want's largest magnitude) plus atol of `want`."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != {want.shape}"
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    bound = rtol * float(np.max(np.abs(want))) if want.size else 0.0
    return None if err <= bound + atol else f"{name}: max error {err:.3g} > {bound + atol:.3g}"


def _torch() -> Any:
    return importlib.import_module("torch") if importlib.util.find_spec("torch") else None


def _torch_step(fn: Callable[..., Any], *arrays: np.ndarray) -> Step | None:
    """`fn(torch, *tensors)` as PyTorch's step, on the GPU where CUDA is (the GPU devices' peer),
    each step waiting for its results as the device's step does; None without torch."""
    torch = _torch()
    if torch is None:
        return None
    cuda = torch.cuda.is_available()
    tensors = [torch.from_numpy(a).to("cuda" if cuda else "cpu") for a in arrays]

    def step() -> object:
        out = fn(torch, *tensors)
        if cuda:
            torch.cuda.synchronize()
        return out

    return step


def _runner(body: Callable[[Callable[..., Any]], object]) -> Callable[[Callable[..., Any]], Step]:
    """`run(f)`: the step that calls `body(f)`, for `f` the jitted computation or the eager one."""
    return lambda f: lambda: body(f)


# ---- MLP training step: 784 -> 256 -> 10, softmax cross-entropy, hand-written backward, SGD ----


@dataclass(frozen=True)
class Ops:
    """What numpy, the lazy frontend and torch spell differently (the frontend spells it numpy's way)."""

    exp: Callable[[Any], Any]
    log: Callable[[Any], Any]
    maximum: Callable[[Any, Any], Any]
    rowmax: Callable[[Any], Any] = lambda x: x.max(axis=1, keepdims=True)
    rowsum: Callable[[Any], Any] = lambda x: x.sum(axis=1, keepdims=True)
    colsum: Callable[[Any], Any] = lambda x: x.sum(axis=0)
    total: Callable[[Any], Any] = lambda x: x.sum()


NUMPY = Ops(np.exp, np.log, np.maximum)
LAZY = Ops(lz.exp, lz.log, lz.maximum)


def torch_ops(torch: Any) -> Ops:
    return Ops(
        torch.exp,
        torch.log,
        lambda a, b: torch.clamp(a, min=b),
        rowmax=lambda a: a.amax(dim=1, keepdim=True),
        rowsum=lambda a: a.sum(dim=1, keepdim=True),
        colsum=lambda a: a.sum(dim=0),
    )


def mlp_step(x: Any, onehot: Any, params: Sequence[Any], lr: float, ops: Ops) -> tuple[Any, list[Any]]:
    """One SGD step, written once for the frontend, numpy and torch."""
    w1, b1, w2, b2 = params
    batch = x.shape[0]
    h = ops.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    shifted = logits - ops.rowmax(logits)
    e = ops.exp(shifted)
    total = ops.rowsum(e)
    loss = -ops.total((shifted - ops.log(total)) * onehot) / batch
    dlogits = (e / total - onehot) / batch
    dh = (dlogits @ w2.T) * (h > 0)
    grads = [x.T @ dh, ops.colsum(dh), h.T @ dlogits, ops.colsum(dlogits)]
    return loss, [p - lr * g for p, g in zip(params, grads)]


def mlp(device: str | None, small: bool, rng: np.random.Generator) -> Prepared:
    batch, d_in, hidden, classes = (16, 24, 16, 10) if small else (256, 784, 256, 10)
    x = rng.normal(size=(batch, d_in)).astype(np.float32)
    labels = rng.integers(0, classes, batch)
    onehot = (np.arange(classes) == labels[:, None]).astype(np.float32)
    params = [
        (rng.normal(size=(d_in, hidden)) * np.sqrt(2 / d_in)).astype(np.float32),
        np.zeros(hidden, np.float32),
        (rng.normal(size=(hidden, classes)) * np.sqrt(1 / hidden)).astype(np.float32),
        np.zeros(classes, np.float32),
    ]
    lr = 0.1
    dx = lz.array(x, device)
    # the labels go up as int32 and become one-hot on the device (an iota compared with them)
    dlabels = lz.array(labels.astype(np.int32), device).reshape((batch, 1))
    donehot = lz.iota((batch, classes), 1, device=device).equal(dlabels).astype(lz.F32)
    dparams = [lz.array(p, device) for p in params]
    out: dict[str, Any] = {}

    def run(lazy_step: Callable[..., Any]) -> Step:
        def step() -> float:
            loss, new = lazy_step(dx, donehot, dparams)
            lz.block_until_ready(loss, *new)
            out["loss"], out["params"] = loss, new
            return float(loss.numpy())  # the loss read back, as a training loop prints it

        return step

    eager = lambda x, onehot, params: mlp_step(x, onehot, params, lr, LAZY)  # noqa: E731

    def numpy() -> tuple[Any, list[Any]]:
        return mlp_step(x, onehot, params, lr, NUMPY)

    def check() -> str | None:
        loss, new = numpy()
        problems = [_close("loss", out["loss"].numpy(), loss, 1e-4)]
        for name, p, got, want in zip(("w1", "b1", "w2", "b2"), params, out["params"], new):
            problems.append(_close(f"{name} update", got.numpy() - p, want - p, 1e-3, 1e-7))
        return next((p for p in problems if p), None)

    torch_step = _torch_step(
        lambda torch, tx, tonehot, *tparams: mlp_step(tx, tonehot, tparams, lr, torch_ops(torch))[0].item(),
        x,
        onehot,
        *params,
    )
    sizes = f"batch {batch}, {d_in}->{hidden}->{classes}"
    return Prepared(run(jit(eager)), numpy, check, torch_step, sizes, eager=run(eager))


# ---- single-head attention --------------------------------------------------------------------------


def attend(q: Any, k: Any, v: Any, ops: Ops) -> Any:
    s = (q @ k.T) * (1.0 / np.sqrt(q.shape[1]))
    p = ops.exp(s - ops.rowmax(s))
    return (p @ v) / ops.rowsum(p)


def attention(device: str | None, small: bool, rng: np.random.Generator) -> Prepared:
    seq, dim = (32, 16) if small else (512, 64)
    q, k, v = (rng.normal(size=(seq, dim)).astype(np.float32) for _ in range(3))
    dq, dk, dv = (lz.array(a, device) for a in (q, k, v))
    out: dict[str, Any] = {}
    run = _runner(lambda f: out.__setitem__("y", f(dq, dk, dv).block_until_ready()))
    eager = lambda *qkv: attend(*qkv, LAZY)  # noqa: E731
    numpy = lambda: attend(q, k, v, NUMPY)  # noqa: E731
    check = lambda: _close("attention", out["y"].numpy(), numpy(), 1e-4)  # noqa: E731
    torch_step = _torch_step(lambda torch, *qkv: attend(*qkv, torch_ops(torch)), q, k, v)
    return Prepared(run(jit(eager)), numpy, check, torch_step, f"seq {seq}, d {dim}", eager=run(eager))


# ---- least squares through Cholesky of AᵀA and two triangular solves ----------------------------------


def least_squares(device: str | None, small: bool, rng: np.random.Generator) -> Prepared:
    n = 8 if small else 256
    a = rng.normal(size=(2 * n, n)).astype(np.float32)
    y = rng.normal(size=2 * n).astype(np.float32)
    da, dy = lz.array(a, device), lz.array(y, device)
    out: dict[str, Any] = {}

    def eager(da: lz.Array, dy: lz.Array) -> lz.Array:
        gram = da.T @ da  # AᵀA: A read transposed, no copy
        rhs = (da.T @ dy.reshape((2 * n, 1))).reshape((n,))
        chol = lz.cholesky(gram)
        z = lz.solve_triangular(chol, rhs, lower=True)
        return lz.solve_triangular(chol, z, lower=True, trans=True)

    run = _runner(lambda f: out.__setitem__("x", f(da, dy).block_until_ready()))

    def numpy() -> np.ndarray:
        chol = np.linalg.cholesky(a.T @ a)
        return np.linalg.solve(chol.T, np.linalg.solve(chol, a.T @ y))

    want = np.linalg.lstsq(a.astype(np.float64), y.astype(np.float64), rcond=None)[0]
    check = lambda: _close("least squares", out["x"].numpy(), want, 2e-3)  # noqa: E731

    def solve(torch: Any, ta: Any, ty: Any) -> object:
        chol = torch.linalg.cholesky(ta.T @ ta)
        z = torch.linalg.solve_triangular(chol, (ta.T @ ty)[:, None], upper=False)
        return torch.linalg.solve_triangular(chol.T, z, upper=True)

    torch_step = _torch_step(solve, a, y)
    return Prepared(run(jit(eager)), numpy, check, torch_step, f"A {2 * n}x{n}", eager=run(eager))


# ---- sort ---------------------------------------------------------------------------------------------


def sort(device: str | None, small: bool, rng: np.random.Generator) -> Prepared:
    n = 1000 if small else 1 << 20
    x = rng.normal(size=n).astype(np.float32)
    dx = lz.array(x, device)
    out: dict[str, Any] = {}
    run = _runner(lambda f: out.__setitem__("y", f(dx).block_until_ready()))
    numpy = lambda: np.sort(x)  # noqa: E731
    check = lambda: _close("sort", out["y"].numpy(), numpy(), 0.0)  # noqa: E731
    torch_step = _torch_step(lambda torch, tx: torch.sort(tx), x)
    return Prepared(run(jit(lz.sort)), numpy, check, torch_step, f"{n} float32", eager=run(lz.sort))


WORKLOADS: dict[str, Callable[[str | None, bool, np.random.Generator], Prepared]] = {
    "mlp": mlp,
    "attention": attention,
    "lstsq": least_squares,
    "sort": sort,
}
