"""Procedural handwritten-style digits, 28×28 float32 in [0, 1], seeded: the showcase needs a digit
set that ships in the repository and downloads nothing.

Each digit 0–9 is a few strokes (polylines and elliptic arcs) in a unit box. A sample is that
skeleton with its control points jittered, variant strokes dropped or added (a 1 with or without
its flag and base, a 7 with or without its bar, an open or closed 4), slanted, rotated and squeezed,
then drawn with a random pen width by a distance field (anti-aliased), fitted into a 20×20 box and
centred by its centre of mass in the 28×28 frame (the way MNIST was made, and the way the page
prepares a drawn digit), shifted by up to a pixel, and given a little noise.
"""

from __future__ import annotations

import math

import numpy as np

Stroke = np.ndarray  # (n, 2) points, x right and y down, in a unit box
SIZE, BOX = 28, 20  # the frame, and the box a digit is fitted into (MNIST's)


def _arc(cx: float, cy: float, rx: float, ry: float, t0: float, t1: float, n: int = 24) -> Stroke:
    """An elliptic arc from angle t0 to t1 (degrees, counter-clockwise as seen, 0 = right)."""
    t = np.radians(np.linspace(t0, t1, n))
    return np.stack([cx + rx * np.cos(t), cy - ry * np.sin(t)], axis=1)


def _line(*pts: tuple[float, float]) -> Stroke:
    return np.array(pts, dtype=np.float64)


def _skeleton(digit: int, rng: np.random.Generator) -> list[Stroke]:
    """The strokes of one digit, with its variant chosen at random."""
    r = rng.uniform
    if digit == 0:
        return [_arc(0.5, 0.5, r(0.28, 0.4), 0.5, 90, 450, 40)]
    if digit == 1:
        strokes = [_line((0.5, 0.0), (0.5, 1.0))]
        if rng.random() < 0.6:
            strokes.append(_line((0.25, r(0.15, 0.3)), (0.5, 0.0)))
        if rng.random() < 0.3:
            strokes.append(_line((0.25, 1.0), (0.75, 1.0)))
        return strokes
    if digit == 2:
        top = _arc(0.5, 0.3, 0.35, 0.3, 160, -40)
        return [np.concatenate([top, _line((0.1, 1.0), (0.92, 1.0))])]
    if digit == 3:
        upper = _arc(0.48, 0.25, 0.33, 0.25, 150, -90)
        lower = _arc(0.48, 0.73, 0.37, 0.27, 90, -150)
        return [np.concatenate([upper, lower])]
    if digit == 4:
        if rng.random() < 0.5:  # closed: the diagonal meets the stem
            return [_line((0.68, 1.0), (0.68, 0.0), (0.05, 0.68), (0.95, 0.68))]
        return [_line((0.3, 0.0), (0.12, 0.62), (0.95, 0.62)), _line((0.7, 0.25), (0.7, 1.0))]
    if digit == 5:
        bowl = _arc(0.47, 0.66, 0.38, 0.32, 150, -150)
        return [np.concatenate([_line((0.85, 0.0), (0.25, 0.0), (0.18, 0.45)), bowl])]
    if digit == 6:
        stem = _arc(0.72, 0.62, 0.6, 0.62, 85, 190, 16)
        loop = _arc(0.5, 0.7, 0.33, 0.3, 180, 540, 32)
        return [np.concatenate([stem, loop])]
    if digit == 7:
        strokes = [_line((0.08, 0.0), (0.92, 0.0), (0.42, 1.0))]
        if rng.random() < 0.3:
            strokes.append(_line((0.4, 0.52), (0.85, 0.52)))
        return strokes
    if digit == 8:
        return [_arc(0.5, 0.25, 0.27, 0.25, -90, 270, 32), _arc(0.5, 0.73, 0.33, 0.27, 90, 450, 32)]
    if digit == 9:
        loop = _arc(0.45, 0.3, 0.33, 0.3, 0, 360, 32)
        tail = (
            _line((0.78, 0.3), (0.72, 1.0)) if rng.random() < 0.6 else _arc(0.2, 0.3, 0.58, 0.7, 0, -90, 12)
        )
        return [loop, tail]
    raise ValueError(f"not a digit: {digit}")


def _distance(px: np.ndarray, strokes: list[Stroke]) -> np.ndarray:
    """Distance from each pixel centre (P, 2) to the nearest stroke segment."""
    segs = np.concatenate([np.stack([s[:-1], s[1:]], axis=1) for s in strokes]).astype(np.float32)
    a, ab = segs[:, 0], segs[:, 1] - segs[:, 0]  # (S, 2)
    ax, ay, bx, by = a[:, 0], a[:, 1], ab[:, 0], ab[:, 1]
    x, y = px[:, :1], px[:, 1:]  # (P, 1)
    t = ((x - ax) * bx + (y - ay) * by) / np.maximum(bx * bx + by * by, 1e-12)
    t = np.clip(t, 0.0, 1.0)
    dx, dy = x - ax - t * bx, y - ay - t * by
    return np.sqrt((dx * dx + dy * dy).min(axis=1))


_PIXELS = (
    np.stack(np.meshgrid(np.arange(SIZE) + 0.5, np.arange(SIZE) + 0.5), -1).reshape(-1, 2).astype(np.float32)
)


def _warp(stroke: Stroke, rng: np.random.Generator) -> Stroke:
    """The stroke bent by a smooth random displacement (two waves per axis): a hand's wobble."""
    out = stroke.copy()
    for axis in (0, 1):
        for _ in range(2):
            k = rng.normal(0, 2.5, 2)
            out[:, axis] += rng.uniform(0, 0.035) * np.sin(stroke @ k + rng.uniform(0, 2 * np.pi))
    return out


def render(digit: int, rng: np.random.Generator) -> np.ndarray:
    """One sample of `digit`: (28, 28) float32 in [0, 1]."""
    strokes = [_warp(st, rng) for st in _skeleton(digit, rng)]
    shear, angle = rng.uniform(-0.35, 0.25), math.radians(rng.uniform(-12, 12))
    sx, sy = rng.uniform(0.75, 1.15), rng.uniform(0.9, 1.1)
    c, s = math.cos(angle), math.sin(angle)
    m = np.array([[c, -s], [s, c]]) @ np.array([[sx, -shear], [0.0, sy]])  # slant: top leans right
    strokes = [(st - 0.5) @ m.T for st in strokes]
    # fit the skeleton (with half the pen) into the 20×20 box, keeping its aspect
    pen = rng.uniform(1.4, 3.2)  # width in pixels of the 28×28 frame
    pts = np.concatenate(strokes)
    lo, hi = pts.min(0), pts.max(0)
    scale = (BOX - pen) / max(float((hi - lo).max()), 1e-6)
    strokes = [(st - (lo + hi) / 2) * scale + SIZE / 2 for st in strokes]
    d = _distance(_PIXELS, strokes).reshape(SIZE, SIZE)
    img = np.clip(pen / 2 - d + 0.5, 0.0, 1.0)
    img = center_of_mass_shift(img) if img.sum() > 0 else img
    img = np.roll(img, tuple(rng.integers(-1, 2, 2)), axis=(0, 1))
    img = img + rng.normal(0, 0.04, img.shape) * (rng.random(img.shape) < 0.15)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def center_of_mass_shift(img: np.ndarray) -> np.ndarray:
    """`img` moved by whole pixels so its centre of mass is the frame's centre (what the page does
    with a drawn digit, too)."""
    ys, xs = np.indices(img.shape)
    total = img.sum()
    dy = int(round(SIZE / 2 - 0.5 - float((ys * img).sum() / total)))
    dx = int(round(SIZE / 2 - 0.5 - float((xs * img).sum() / total)))
    out = np.zeros_like(img)
    h, w = img.shape
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = img[
        max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


def dataset(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`per_class` samples of each digit, shuffled: images (N, 784) float32 and labels (N,) int32."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10, dtype=np.int32), per_class)
    rng.shuffle(labels)
    images = np.stack([render(int(d), rng).reshape(-1) for d in labels])
    return images, labels
