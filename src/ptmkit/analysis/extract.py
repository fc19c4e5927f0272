"""Per-layer word vectors (and attention maps) of any encoder, streamed sentence by sentence.

The encoder runs in eval mode without gradients on batches of ``batch_size`` consecutive
sentences (right-padded), asked for ``output_hidden_states`` (and ``output_attentions``); every
family's hidden states are ``L + 1`` tensors, the embedding output first (ELMo: the token layer
``[x; x]`` then each biLSTM layer ``[→h; ←h]``).  An encoder–decoder is read through its encoder
alone (``encode``), a causal model with the causal mask it was trained under.  A word's vector is
its first piece's (BERT's choice for tagging, ``pooling="first"``) or the mean of its pieces
(``"mean"``).  Nothing but one batch is held at a time, so a corpus of any size streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch

from ptmkit.analysis.align import Aligned, align_sentences
from ptmkit.errors import PtmError

POOLINGS = ("first", "mean")
MAX_LEN = 512  # pieces per sentence for encoders without a position limit (LSTMs, relative positions)


@dataclass
class SentenceStates:
    """One sentence: ``index`` (its place in the stream), ``aligned`` (its tokens and words),
    ``layers [L + 1, W, d]`` float32 word vectors and, when asked, ``attentions [N, heads, T, T]``
    over its real tokens."""

    index: int
    aligned: Aligned
    layers: np.ndarray
    attentions: np.ndarray | None = None

    @property
    def words(self) -> list[str]:
        return self.aligned.words


def max_length(backbone: Any) -> int:
    """The longest sequence to feed: the encoder's own limit, else :data:`MAX_LEN`."""
    limit = backbone.max_positions() if hasattr(backbone, "max_positions") else None
    return int(limit) if limit else MAX_LEN


def run_encoder(backbone: Any, ids: torch.Tensor, mask: torch.Tensor, causal: bool, attentions: bool) -> Any:
    """The encoder's output with all hidden states (the encoder half of an encoder–decoder)."""
    if getattr(backbone, "name", None) == "encoder_decoder":
        return backbone.encode(ids, mask, causal=causal, output_hidden_states=True, output_attentions=attentions)
    return backbone(ids, mask, causal=causal, output_hidden_states=True, output_attentions=attentions)


def padded(aligned: Sequence[Any], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The framed sentences' ids as a right-padded batch: ``ids [B, T]`` and ``attention_mask [B, T]``."""
    T = max(len(a.ids) for a in aligned)
    ids = torch.full((len(aligned), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(aligned), T), dtype=torch.long)
    for r, a in enumerate(aligned):
        ids[r, : len(a.ids)] = torch.from_numpy(a.ids)
        mask[r, : len(a.ids)] = 1
    return ids, mask


def pool(hidden: np.ndarray, spans: np.ndarray, pooling: str) -> np.ndarray:
    """``hidden [L + 1, T, d]`` -> word vectors ``[L + 1, W, d]`` (first piece, or mean of the pieces)."""
    if pooling == "first":
        return hidden[:, spans[:, 0]]
    return np.stack([hidden[:, s:e].mean(1) for s, e in spans], 1) if len(spans) else hidden[:, :0]


def word_states(backbone: Any, tokenizer: Any, sentences: Iterable[Sequence[str]], causal: bool = False,
                pooling: str = "first", attentions: bool = False, batch_size: int = 16) -> Iterator[SentenceStates]:
    """Stream the sentences (each a list of words; empty ones are skipped but counted) through the
    encoder and yield each one's :class:`SentenceStates` in order."""
    if pooling not in POOLINGS:
        raise PtmError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    backbone.eval()
    limit = max_length(backbone)
    device = next(backbone.parameters()).device
    batch: list[tuple[int, Sequence[str]]] = []

    def flush() -> Iterator[SentenceStates]:
        aligned = align_sentences(tokenizer, [s for _, s in batch], causal, limit)
        ids, mask = padded(aligned, tokenizer.pad_id)
        with torch.no_grad():
            out = run_encoder(backbone, ids.to(device), mask.to(device), causal, attentions)
        hidden = torch.stack(out.hidden_states, 1).float().cpu().numpy()  # [B, L + 1, T, d]
        probs = torch.stack(out.attentions, 1).float().cpu().numpy() if attentions else None  # [B, N, h, T, T]
        for r, ((k, _), a) in enumerate(zip(batch, aligned)):
            n = len(a.ids)
            yield SentenceStates(k, a, pool(hidden[r, :, :n], a.spans, pooling),
                                 probs[r, :, :, :n, :n] if probs is not None else None)

    for k, sentence in enumerate(sentences):
        if not sentence:
            continue
        batch.append((k, sentence))
        if len(batch) == batch_size:
            yield from flush()
            batch = []
    if batch:
        yield from flush()


__all__ = ["MAX_LEN", "POOLINGS", "SentenceStates", "max_length", "padded", "pool", "run_encoder", "word_states"]
