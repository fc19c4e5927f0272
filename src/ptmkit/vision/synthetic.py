"""A synthetic image–text set: coloured shapes with their names ("a red circle").

Small enough to train on in seconds, and hard enough that a model must see both colour and
shape to retrieve the right name; tests use it, and so can a user checking that an objective
learns before spending hours on real data.  Shapes are drawn with numpy masks (no Pillow).
"""

from __future__ import annotations

import numpy as np

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 40), "blue": (30, 60, 220), "yellow": (235, 200, 20),
           "purple": (140, 40, 170), "black": (20, 20, 20)}
SHAPES = ("circle", "square", "triangle", "cross")


def _mask(shape: str, size: int, cx: float, cy: float, r: float) -> np.ndarray:
    """bool ``[size, size]``: the pixels of ``shape`` centred at ``(cx, cy)`` with half-size ``r``."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    dx, dy = x - cx, y - cy
    if shape == "circle":
        return dx * dx + dy * dy <= r * r
    if shape == "square":
        return (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
    if shape == "triangle":
        return (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
    return ((np.abs(dx) <= r * 0.3) | (np.abs(dy) <= r * 0.3)) & (np.abs(dx) <= r) & (np.abs(dy) <= r)


def shapes(n: int, size: int = 16, seed: int = 0) -> tuple[np.ndarray, list[str], np.ndarray]:
    """``n`` images uint8 ``[n, size, size, 3]`` on white, their captions ("a red circle") and the
    concept id ``[n]`` (colour x shape, ``len(COLOURS) * len(SHAPES)`` concepts; position and size
    vary per image)."""
    rng = np.random.default_rng(seed)
    names = list(COLOURS)
    images = np.full((n, size, size, 3), 255, dtype=np.uint8)
    concepts = np.empty(n, dtype=np.int64)
    captions = []
    for i in range(n):
        c, s = int(rng.integers(len(names))), int(rng.integers(len(SHAPES)))
        r = size * rng.uniform(0.25, 0.4)
        cx, cy = rng.uniform(r, size - r, size=2)
        images[i][_mask(SHAPES[s], size, cx, cy, r)] = COLOURS[names[c]]
        concepts[i] = c * len(SHAPES) + s
        captions.append(f"a {names[c]} {SHAPES[s]}")
    return images, captions, concepts
