"""No repeated n-grams: the tokens that would complete an n-gram a sequence already holds.

With ``n = 3`` and the sequence ``a b c a b``, the next token ``c`` would repeat the trigram
``a b c``: its score is set to ``-inf``.  A window of ``n`` tokens bans its last token when its
first ``n - 1`` equal the sequence's last ``n - 1`` (Paulus et al. 2018; fairseq's and HF
transformers' ``no_repeat_ngram_size``).  All rows and windows are compared at once: one step
costs ``O(rows x length x n)`` tensor work and no Python loop over tokens.
"""

from __future__ import annotations

import torch


def ban_repeated_ngrams(scores: torch.Tensor, tokens: torch.Tensor, n: int,
                        valid: torch.Tensor | None = None) -> torch.Tensor:
    """``scores [N, V]`` with ``-inf`` at every token that would repeat an ``n``-gram of its row.

    tokens ``[N, T]``: each row's sequence so far (the next token follows ``tokens[:, -1]``);
    valid ``[N, T]`` bool or ``None`` (all real): False at padding, which belongs to no n-gram, so
    a padded row bans what it would ban alone.  ``n <= 0`` bans nothing; ``n = 1`` bans every
    token already present.  Returns a new tensor (``scores`` is not changed)."""
    N, T = tokens.shape
    if n <= 0 or T < n:
        return scores
    tail = tokens[:, T - n + 1:]  # [N, n - 1]: what the next token would extend
    windows = tokens.unfold(1, n, 1)  # [N, W, n], W = T - n + 1: every n-gram of the row
    hit = (windows[..., :-1] == tail[:, None, :]).all(dim=-1)  # [N, W]
    if valid is not None:
        valid = valid.bool()
        hit &= valid.unfold(1, n, 1).all(dim=-1) & valid[:, T - n + 1:].all(dim=-1, keepdim=True)
    # Each hitting window writes True at its last token; a window that misses writes into an extra
    # column past the vocabulary, so it cannot clear a ban another window set (every write is
    # the same True, so repeated tokens give one result).  No host synchronisation: a GPU step
    # is not stalled.
    V = scores.shape[-1]
    target = torch.where(hit, windows[..., -1], V)  # [N, W]
    banned = torch.zeros(N, V + 1, dtype=torch.bool, device=scores.device).scatter_(1, target, True)
    return scores.masked_fill(banned[:, :V], float("-inf"))
