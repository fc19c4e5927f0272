"""The train / dev / test parts of a labelled recipe: cut from a seeded shuffle, written as JSONL.

The WordNet recipes (``wordnet-wsd``, ``wordnet-qa``, ``wordnet-wic``, ``wordnet-hypernym``,
``wordnet-supersense``) share this: :func:`cut` shuffles ``n`` items with the recipe's generator
and cuts them by fractions (train and dev rounded down, test the rest), :func:`split_groups` does
it to groups whose rows must stay together (a lemma's examples, a context's questions), and
:func:`write_parts` writes ``PART.jsonl`` per part and ``stats.json`` (the recipe's figures and
each part's, as the recipe describes them) through :func:`ptmkit.fileio.atomic_write_text`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ptmkit.fileio import atomic_write_text

PARTS = ("train", "dev", "test")


def cut(n: int, rng: np.random.Generator, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """``{part: indices}``: a permutation of ``range(n)`` drawn from ``rng``, cut into the first
    ``int(fractions[0] * n)`` (train), the next ``int(fractions[1] * n)`` (dev) and the rest (test)."""
    order = rng.permutation(n)
    n_train, n_dev = int(fractions[0] * n), int(fractions[1] * n)
    return dict(zip(PARTS, (order[:n_train], order[n_train : n_train + n_dev], order[n_train + n_dev :])))


def split_groups(groups: Sequence[list[dict]], rng: np.random.Generator,
                 fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> dict[str, list[dict]]:
    """:func:`cut` over the groups (given in a fixed order); a group's rows stay together, in the
    order of the shuffled groups."""
    return {part: [row for i in idx for row in groups[i]] for part, idx in cut(len(groups), rng, fractions).items()}


def jsonl(rows: list[dict], drop: Sequence[str] = ()) -> str:
    """One JSON object per row and line (UTF-8 kept as is), without the keys in ``drop``."""
    if drop:
        rows = [{k: v for k, v in r.items() if k not in drop} for r in rows]
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_parts(parts: dict[str, list[dict]], out: Path, stats: dict, describe: Callable[[list[dict]], dict],
                drop: Sequence[str] = ()) -> dict:
    """``PART.jsonl`` per part (rows without the keys in ``drop``) and ``stats.json``: ``stats``
    plus ``parts``, each part's ``describe(rows)``; returns what ``stats.json`` holds."""
    stats = {**stats, "parts": {}}
    for part, rows in parts.items():
        atomic_write_text(out / f"{part}.jsonl", jsonl(rows, drop))
        stats["parts"][part] = describe(rows)
    atomic_write_text(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    return stats
