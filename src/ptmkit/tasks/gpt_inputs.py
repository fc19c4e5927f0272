"""GPT's input transformations (Radford et al. 2018, §3.3 and Figure 1) for a causal LM.

A left-to-right model reads structured inputs as one token sequence framed by special tokens,
and the task head reads the hidden state of the final *extract* token, the one position that has
seen the whole input:

* single text:      ``<start> a <extract>``
* pair (entailment): ``<start> a <delim> b <extract>``
* multiple choice:  ``<start> context <delim> answer_k <extract>``, one sequence per choice
* similarity:       both orders, ``<start> a <delim> b <extract>`` and ``<start> b <delim> a <extract>``;
  their extract states are added before the head (the pair has no natural order).

Which tokens: every ptmkit tokenizer reserves ``[PAD] [UNK] [CLS] [SEP] [MASK]``.  The clm
objective ends each document with ``[SEP]`` and never feeds ``[CLS]`` or ``[MASK]``, so
``[CLS]`` serves as ``<start>``, ``[MASK]`` as ``<extract>`` and ``[SEP]`` (the learnt boundary
between texts) as ``<delim>``; no vocabulary or embedding resize is needed.  The input rows of
``<start>`` and ``<extract>`` never carried pre-trained meaning, so they are re-drawn from
``N(0, init_std)`` when fine-tuning starts (:func:`init_new_rows`), as GPT initialised its new
tokens randomly.

With right padding, the extract token is the last real token of every sequence, so the head's
``pooling="last"`` (the default for a causal encoder) reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.tasks.inputs import EncodedInputs, truncate_pair


@dataclass(frozen=True)
class GptTokens:
    """Token ids of GPT's ``<start>``, ``<delim>`` and ``<extract>``."""

    start: int
    delim: int
    extract: int

    @classmethod
    def of(cls, tokenizer: Any) -> "GptTokens":
        return cls(start=int(tokenizer.cls_id), delim=int(tokenizer.sep_id), extract=int(tokenizer.mask_id))


def encode_gpt(token_ids: list[list[int]], pair_ids: list[list[int]] | None, max_len: int, tokens: GptTokens):
    """``<start> a <extract>`` or ``<start> a <delim> b <extract>`` per example, truncated
    longest-first to ``max_len`` tokens in all (the extract token is always kept, last).
    Token types: 0 up to and including ``<delim>``, then 1.  Returns ``EncodedInputs``."""
    n_special = 3 if pair_ids is not None else 2
    budget = max_len - n_special
    if budget < 1 + (pair_ids is not None):
        raise PtmError(f"max_seq_len={max_len} leaves no room for text after GPT's special tokens")
    start = np.array([tokens.start], dtype=np.int64)
    delim = np.array([tokens.delim], dtype=np.int64)
    extract = np.array([tokens.extract], dtype=np.int64)
    ids, types = [], []
    for i, a in enumerate(token_ids):
        a = np.asarray(a, dtype=np.int64)
        if pair_ids is None:
            seq = np.concatenate([start, a[:budget], extract])
            typ = np.zeros(len(seq), dtype=np.int64)
        else:
            b = np.asarray(pair_ids[i], dtype=np.int64)
            la, lb = truncate_pair(len(a), len(b), budget)
            first = np.concatenate([start, a[:la], delim])
            second = np.concatenate([b[:lb], extract])
            seq = np.concatenate([first, second])
            typ = np.concatenate([np.zeros(len(first), np.int64), np.ones(len(second), np.int64)])
        ids.append(seq)
        types.append(typ)
    return EncodedInputs(ids, types)


def encode_symmetric(token_ids: list[list[int]], pair_ids: list[list[int]], max_len: int, tokens: GptTokens):
    """Both orders of every pair: ``EncodedInputs`` of ``a; b`` whose ``swapped`` holds ``b; a``."""
    forward = encode_gpt(token_ids, pair_ids, max_len, tokens)
    forward.swapped = encode_gpt(pair_ids, token_ids, max_len, tokens)
    return forward


@torch.no_grad()
def init_new_rows(backbone: nn.Module, tokens: GptTokens) -> None:
    """Re-draw the input embedding rows of ``<start>`` and ``<extract>`` from ``N(0, init_std)``
    (the global torch RNG, seeded per run).  An encoder without a token table is refused."""
    emb = backbone.input_embeddings() if hasattr(backbone, "input_embeddings") else None
    if emb is None:
        raise PtmError("gpt_transform adds GPT's start and extract tokens to the token embeddings, but this encoder "
                       "has no token embedding table; set gpt_transform=false")
    if max(tokens.start, tokens.delim, tokens.extract) >= emb.weight.shape[0]:
        raise PtmError(f"the tokenizer's [CLS] / [SEP] / [MASK] ids ({tokens.start}, {tokens.delim}, {tokens.extract}) lie "
                       f"beyond the model's {emb.weight.shape[0]} token embeddings; use the model's own tokenizer")
    std = float(getattr(backbone.config, "init_std", 0.02))
    for i in (tokens.start, tokens.extract):
        emb.weight[i].normal_(0.0, std)
