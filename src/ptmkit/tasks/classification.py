"""Sequence classification on top of an encoder (any registered one).

Inputs follow the papers:

* BERT (bidirectional): ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with token types 0…0 1…1;
  the sequence is represented by the pooled ``[CLS]`` state (the pooler's ``tanh(W h_0 + b)``
  when the backbone has one, else ``h_0``).
* GPT (causal): ``a [SEP]`` or ``a [SEP] b [SEP]`` (the delimiter plays GPT's "extract" token);
  only the last token has seen the whole input, so the sequence is represented by the hidden
  state of the last non-padding token.

Batches are right-padded: ``input_ids[B, T]``, ``attention_mask[B, T]``, optional
``token_type_ids[B, T]`` and ``labels[B]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.errors import PtmError
from ptmkit.train.step import StepOutput

POOLINGS = ("auto", "cls", "last", "mean")


class SequenceClassifier(nn.Module):
    """``backbone`` + dropout + linear layer ``[H] -> [num_labels]``.

    pooling: ``"cls"`` (BERT), ``"last"`` (GPT: last non-pad token), ``"mean"`` (masked mean of
    the last layer) or ``"auto"`` (``"last"`` for a causal backbone, else ``"cls"``).
    dropout: before the classifier; ``None`` uses the backbone's ``config.dropout``.
    causal: run the encoder with causal attention (a model pre-trained left to right).
    """

    def __init__(self, backbone: nn.Module, num_labels: int, pooling: str = "auto", dropout: float | None = None,
                 causal: bool = False) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise PtmError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if num_labels < 2:
            raise PtmError(f"a classifier needs at least 2 labels, got {num_labels}")
        cfg = backbone.config
        if pooling == "auto":
            pooling = "last" if causal else "cls"
        self.backbone = backbone
        self.causal = causal
        self.pooling = pooling
        self.num_labels = num_labels
        self.dropout = nn.Dropout(getattr(cfg, "dropout", 0.1) if dropout is None else dropout)
        self.classifier = nn.Linear(backbone.output_size, num_labels)
        with torch.no_grad():  # BERT's initialisation for the new head
            self.classifier.weight.normal_(0.0, getattr(cfg, "init_std", 0.02))
            self.classifier.bias.zero_()

    def pool(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The sequence representation ``[B, H]``."""
        mask = batch["attention_mask"]
        out = self.backbone(batch["input_ids"], attention_mask=mask, token_type_ids=batch.get("token_type_ids"),
                            causal=self.causal)
        hidden = out.last_hidden_state  # [B, T, H]
        if self.pooling == "cls":
            return out.pooled if out.pooled is not None else hidden[:, 0]
        if self.pooling == "last":
            last = mask.long().sum(dim=1).clamp(min=1) - 1  # [B] index of the last real token (right padding)
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        m = mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Unnormalised class scores ``[B, num_labels]``."""
        return self.classifier(self.dropout(self.pool(batch)))

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """Cross-entropy on ``batch["labels"]``; metrics hold ``loss``, ``accuracy`` and the ``logits``."""
        logits = self.logits(batch)
        labels = batch["labels"]
        loss = F.cross_entropy(logits, labels)
        acc = (logits.argmax(dim=-1) == labels).float().mean()
        return StepOutput(
            loss=loss,
            metrics={"loss": loss.detach(), "accuracy": acc, "logits": logits.detach()},
            n_tokens=int(batch["attention_mask"].sum()),
            n_predictions=int(labels.shape[0]),
        )


# ------------------------------------------------------------------------------------------ inputs


@dataclass
class EncodedInputs:
    """Token ids per example (specials included) and their token types, ready to pad."""

    ids: list[np.ndarray]
    types: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))


def _truncate_pair(la: int, lb: int, budget: int) -> tuple[int, int]:
    """Longest-first truncation: shorten the longer side until ``la + lb <= budget``."""
    if la + lb <= budget:
        return la, lb
    keep_a = min(la, max(budget // 2, budget - lb))
    return keep_a, min(lb, budget - keep_a)


def encode_inputs(
    token_ids: list[list[int]],
    pair_ids: list[list[int]] | None,
    max_len: int,
    cls_id: int,
    sep_id: int,
    causal: bool,
) -> EncodedInputs:
    """Add the special tokens of the family and truncate to ``max_len`` tokens in all.

    ``token_ids``/``pair_ids`` are plain token ids (no specials).  BERT: ``[CLS] a [SEP] (b [SEP])``;
    GPT: ``a [SEP] (b [SEP])``.  Token types are 0 up to and including the first ``[SEP]``, then 1.
    """
    n_special = (0 if causal else 1) + (2 if pair_ids is not None else 1)
    budget = max_len - n_special
    if budget < 1 + (pair_ids is not None):
        raise PtmError(f"max_seq_len={max_len} leaves no room for text after the special tokens")
    head = np.array([] if causal else [cls_id], dtype=np.int64)
    sep = np.array([sep_id], dtype=np.int64)
    ids: list[np.ndarray] = []
    types: list[np.ndarray] = []
    for i, a in enumerate(token_ids):
        a = np.asarray(a, dtype=np.int64)
        if pair_ids is None:
            a = a[:budget]
            seq = np.concatenate([head, a, sep])
            typ = np.zeros(len(seq), dtype=np.int64)
        else:
            b = np.asarray(pair_ids[i], dtype=np.int64)
            la, lb = _truncate_pair(len(a), len(b), budget)
            first = np.concatenate([head, a[:la], sep])
            second = np.concatenate([b[:lb], sep])
            seq = np.concatenate([first, second])
            typ = np.concatenate([np.zeros(len(first), np.int64), np.ones(len(second), np.int64)])
        ids.append(seq)
        types.append(typ)
    return EncodedInputs(ids, types)


def collate(
    inputs: EncodedInputs,
    index: np.ndarray,
    pad_id: int,
    labels: np.ndarray | None = None,
    with_token_types: bool = True,
) -> dict[str, torch.Tensor]:
    """Right-pad the examples ``index`` to their longest length; returns the batch dict."""
    lengths = inputs.lengths[index]
    T = int(lengths.max())
    B = len(index)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    for row, i in enumerate(index):
        n = lengths[row]
        ids[row, :n] = inputs.ids[i]
        types[row, :n] = inputs.types[i]
    mask = np.arange(T)[None, :] < lengths[:, None]  # [B, T]
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask.astype(np.int64))}
    if with_token_types:
        batch["token_type_ids"] = torch.from_numpy(types)
    if labels is not None:
        batch["labels"] = torch.from_numpy(np.asarray(labels[index], dtype=np.int64))
    return batch
