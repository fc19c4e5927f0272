"""Encoded text inputs of the sentence-level task types: token ids and token types per example
(:class:`EncodedInputs`, with K-BERT's soft positions and visible matrices when knowledge is
injected), the longest-first truncation of a pair (:func:`truncate_pair`), and the encoder's
keyword arguments a batch carries (:func:`encoder_inputs`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class EncodedInputs:
    """Token ids per example (specials included) and their token types, ready to pad."""

    ids: list[np.ndarray]
    types: list[np.ndarray]
    swapped: "EncodedInputs | None" = None  # the same pairs in the other order (GPT's similarity tasks)
    positions: list[np.ndarray] | None = None  # position ids per example [n] (K-BERT's soft positions)
    visible: list[np.ndarray] | None = None  # bool [n, n] per example: may token i attend to j (K-BERT)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))


ENCODER_KEYS = ("attention_mask", "token_type_ids", "position_ids", "attn_mask")


def encoder_inputs(batch: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """The encoder's keyword arguments in ``batch`` (those present): the padding mask, token
    types, and per-example position ids and attention masks when the inputs carry them."""
    return {k: batch[prefix + k] for k in ENCODER_KEYS if prefix + k in batch}


def pad_positions(positions: list[np.ndarray], index: np.ndarray, T: int) -> torch.Tensor:
    """``position_ids [B, T]`` of examples ``index`` (padding at position 0)."""
    out = np.zeros((len(index), T), dtype=np.int64)
    for row, i in enumerate(index):
        out[row, : len(positions[i])] = positions[i]
    return torch.from_numpy(out)


def pad_visible(visible: list[np.ndarray], index: np.ndarray, T: int) -> torch.Tensor:
    """``attn_mask [B, 1, T, T]`` (True = may attend) of examples ``index``; a padding position
    sees itself only, and no real token sees it."""
    out = np.zeros((len(index), 1, T, T), dtype=bool)
    out[:, 0, np.arange(T), np.arange(T)] = True
    for row, i in enumerate(index):
        n = len(visible[i])
        out[row, 0, :n, :n] = visible[i]
    return torch.from_numpy(out)


def truncate_pair(la: int, lb: int, budget: int) -> tuple[int, int]:
    """Longest-first truncation: shorten the longer side until ``la + lb <= budget``."""
    if la + lb <= budget:
        return la, lb
    keep_a = min(la, max(budget // 2, budget - lb))
    return keep_a, min(lb, budget - keep_a)
