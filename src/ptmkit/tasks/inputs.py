"""Encoded text inputs of the sentence-level task types: token ids and token types per example
(:class:`EncodedInputs`), and the longest-first truncation of a pair (:func:`truncate_pair`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class EncodedInputs:
    """Token ids per example (specials included) and their token types, ready to pad."""

    ids: list[np.ndarray]
    types: list[np.ndarray]
    swapped: "EncodedInputs | None" = None  # the same pairs in the other order (GPT's similarity tasks)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))


def truncate_pair(la: int, lb: int, budget: int) -> tuple[int, int]:
    """Longest-first truncation: shorten the longer side until ``la + lb <= budget``."""
    if la + lb <= budget:
        return la, lb
    keep_a = min(la, max(budget // 2, budget - lb))
    return keep_a, min(lb, budget - keep_a)
