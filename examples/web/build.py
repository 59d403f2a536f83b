"""Build the digit showcase: train the example frontend's MLP (784→256→10) on procedural digits,
record its forward pass on webgpu and on webgl, and write the bundle the page loads.

    python examples/web/build.py            # -> examples/web/dist/
    python examples/web/build.py --check    # also: each device's logits against numpy's
    cd examples/web && python -m http.server 8000   # then open http://localhost:8000/

dist/ gets model.json + model.bin (the two recorded pipelines; the weights as binary constants),
jaxcore-web/ (the ES-module runtime), samples.bin + samples.json (bundled held-out digits, with
what numpy and each Python device computed for them) and digits.json (how the model was trained).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "frontend"))  # the example frontend, as run.py imports it
sys.path.insert(0, str(HERE))

import digits  # noqa: E402
import lazy_array as lz  # noqa: E402

import jaxcore  # noqa: E402
from jaxcore import DType  # noqa: E402

DEVICES = ("webgpu", "webgl")
D_IN, HIDDEN, CLASSES = 784, 256, 10
Params = list[np.ndarray]  # w1 (784, 256), b1 (256,), w2 (256, 10), b2 (10,), float32


# ---- training (numpy: seconds, and the same on every machine) ---------------------------------------


def numpy_forward(x: np.ndarray, params: Params) -> np.ndarray:
    """Logits in float32, the reference the devices are checked against."""
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, np.float32(0))
    return (h @ w2 + b2).astype(np.float32)


def train(
    x: np.ndarray, y: np.ndarray, *, epochs: int, seed: int, batch: int = 64, lr: float = 2e-3
) -> Params:
    """Softmax cross-entropy with Adam; He-initialised, seeded."""
    rng = np.random.default_rng(seed)
    params = [
        (rng.normal(size=(D_IN, HIDDEN)) * np.sqrt(2 / D_IN)).astype(np.float32),
        np.zeros(HIDDEN, np.float32),
        (rng.normal(size=(HIDDEN, CLASSES)) * np.sqrt(1 / HIDDEN)).astype(np.float32),
        np.zeros(CLASSES, np.float32),
    ]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    onehot = np.eye(CLASSES, dtype=np.float32)[y]
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            xb, tb = x[idx], onehot[idx]
            w1, b1, w2, b2 = params
            h = np.maximum(xb @ w1 + b1, 0)
            logits = h @ w2 + b2
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            dlogits = (e / e.sum(axis=1, keepdims=True) - tb) / len(idx)
            dh = (dlogits @ w2.T) * (h > 0)
            grads = [xb.T @ dh, dh.sum(0), h.T @ dlogits, dlogits.sum(0)]
            step += 1
            for p, g, mi, vi in zip(params, grads, m, v):
                mi += 0.1 * (g - mi)
                vi += 0.001 * (g * g - vi)
                p -= (lr * (mi / (1 - 0.9**step)) / (np.sqrt(vi / (1 - 0.999**step)) + 1e-8)).astype(
                    np.float32
                )
    return params


# ---- the forward pass on a device, through the example frontend --------------------------------------


def device_forward(x: lz.Array, params: Sequence[lz.Array]) -> dict[str, lz.Array]:
    """The MLP's forward pass, plus what the page shows: the softmax and the predicted class (the
    first index of the largest logit, as numpy's argmax), all on the device."""
    w1, b1, w2, b2 = params
    h = lz.maximum(x @ w1 + b1, 0.0)
    logits = (h @ w2 + b2).realize()
    top = logits.max(axis=1, keepdims=True)
    e = lz.exp(logits - top)
    probs = (e / e.sum(axis=1, keepdims=True)).realize()
    rev = (CLASSES - 1) - lz.iota(logits.shape, 1, device=x.backend.name)  # 9 - i: max finds the first
    label = ((CLASSES - 1) - lz.where(logits.equal(top), rev, -1).max(axis=1)).realize()
    return {"logits": logits, "probs": probs, "label": label}


OUTPUT_DTYPES = {"logits": DType.float32, "probs": DType.float32, "label": DType.int32}


@dataclass
class Recorded:
    device: str
    pipeline: Any  # what rec.export returned
    kernels: int


def record(device: str, params: Params, sample: np.ndarray) -> Recorded:
    """Run the forward pass once on `device` inside `jaxcore.record` and export it: x is the input,
    the weights (read, never written) become the bundle's constants."""
    backend = jaxcore.get_backend(device)
    weights = [lz.array(p, device) for p in params]
    x = lz.array(sample.reshape(1, D_IN), device)
    before = lz.STATS["kernels"]
    with jaxcore.record(backend) as rec:
        out = device_forward(x, weights)
        for a in out.values():
            a.block_until_ready()
    outputs = {k: (a.buffer().slot, OUTPUT_DTYPES[k], a.shape) for k, a in out.items()}
    pipe = rec.export(inputs={"x": (x.buffer().slot, DType.float32, (1, D_IN))}, outputs=outputs)
    return Recorded(device, pipe, lz.STATS["kernels"] - before)


def run_on_device(device: str, params: Params, samples: np.ndarray) -> dict[str, list[Any]]:
    """What the Python device computes for each sample, one (1, 784) forward each, as the page runs it."""
    weights = [lz.array(p, device) for p in params]
    got: dict[str, list[Any]] = {"logits": [], "probs": [], "label": []}
    for s in samples:
        out = device_forward(lz.array(s.reshape(1, D_IN), device), weights)
        for k, a in out.items():
            got[k].append(a.numpy().reshape(-1).tolist())
    got["label"] = [int(v[0]) for v in got["label"]]
    return got


# ---- the bundle -------------------------------------------------------------------------------------


def pick_samples(x: np.ndarray, y: np.ndarray, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.concatenate([np.flatnonzero(y == d)[:per_class] for d in range(CLASSES)])
    idx = idx.reshape(CLASSES, per_class).T.reshape(-1)  # 0..9, then 0..9 again
    return x[idx], y[idx]


def build(
    out: Path, *, per_class: int, epochs: int, seed: int, samples_per_class: int, log: Any = print
) -> dict[str, Any]:
    """Everything build.py writes; returns samples.json's content."""
    t0 = time.perf_counter()
    x_train, y_train = digits.dataset(per_class, seed)
    x_test, y_test = digits.dataset(max(per_class // 5, 20), seed + 1)
    t_data = time.perf_counter() - t0
    t0 = time.perf_counter()
    params = train(x_train, y_train, epochs=epochs, seed=seed)
    t_train = time.perf_counter() - t0
    acc_train = float((numpy_forward(x_train, params).argmax(1) == y_train).mean())
    acc_test = float((numpy_forward(x_test, params).argmax(1) == y_test).mean())
    log(
        f"data: {len(x_train)} training and {len(x_test)} held-out procedural digits ({t_data:.1f} s); "
        f"trained {epochs} epochs in {t_train:.1f} s: "
        f"accuracy {acc_train:.2%} training, {acc_test:.2%} held out"
    )
    samples, labels = pick_samples(x_test, y_test, samples_per_class)
    out.mkdir(parents=True, exist_ok=True)
    recorded = []
    for device in DEVICES:
        t0 = time.perf_counter()
        recorded.append(record(device, params, samples[0]))
        log(f"{device}: recorded {recorded[-1].kernels} kernels in {time.perf_counter() - t0:.1f} s")
    jaxcore.web.write_bundle(str(out), [r.pipeline for r in recorded], name="model")
    expected: dict[str, Any] = {"numpy": {"logits": numpy_forward(samples, params).tolist()}}
    for device in DEVICES:
        expected[device] = run_on_device(device, params, samples)
    (out / "samples.bin").write_bytes(samples.astype("<f4").tobytes())
    info = {
        "count": len(samples),
        "shape": [digits.SIZE, digits.SIZE],
        "dtype": "float32",
        "labels": labels.tolist(),
        "expected": expected,
        "training": {
            "data": "procedural digits (examples/web/digits.py), seeded; no download",
            "train": len(x_train),
            "held_out": len(x_test),
            "epochs": epochs,
            "seed": seed,
            "accuracy_train": acc_train,
            "accuracy_held_out": acc_test,
        },
    }
    (out / "samples.json").write_text(json.dumps(info))
    return info


def check(info: dict[str, Any], log: Any = print) -> list[str]:
    """Each Python device's logits against numpy's (a float32 matmul in another summation order:
    a few ulp of the largest partial sums), and the same predicted classes."""
    want = np.array(info["expected"]["numpy"]["logits"], np.float32)
    problems = []
    for device in DEVICES:
        got = np.array(info["expected"][device]["logits"], np.float32)
        err = float(np.abs(got - want).max())
        bound = 1e-5 * float(np.abs(want).max()) + 1e-5
        same = info["expected"][device]["label"] == want.argmax(1).tolist()
        verdict = "equal" if same else "DIFFER"
        log(f"check {device}: max |logits - numpy| = {err:.3g} (bound {bound:.3g}); classes {verdict}")
        if err > bound or not same:
            problems.append(device)
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", type=Path, default=HERE / "dist", help="where to write (default examples/web/dist)"
    )
    p.add_argument("--per-class", type=int, default=500, help="training digits per class (default 500)")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=2, help="bundled held-out digits per class (default 2)")
    p.add_argument("--check", action="store_true", help="compare each device's logits with numpy's")
    args = p.parse_args(argv)
    info = build(
        args.out, per_class=args.per_class, epochs=args.epochs, seed=args.seed, samples_per_class=args.samples
    )
    print(f"wrote {args.out}")
    if args.check and check(info):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
