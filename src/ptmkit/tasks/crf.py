"""A linear-chain conditional random field over ``K`` tags (Lafferty et al. 2001), the tagging
layer of BiLSTM-CRF and BERT-CRF taggers.

For emissions ``x [T, K]`` (the encoder's per-token tag scores) and tags ``y [T]``::

    score(x, y) = start[y_0] + sum_t x[t, y_t] + sum_{t>0} A[y_{t-1}, y_t] + end[y_{T-1}]
    log p(y | x) = score(x, y) - log Z(x),   log Z(x) = logsumexp over all K^T tag sequences

``log Z`` is a product of ``T - 1`` matrices ``M_t[i, j] = A[i, j] + x[t, j]`` in the (log, +)
semiring; it is reduced pairwise as a tree, so a batch costs ``log2 T`` rounds of batched semiring
products (``O(T K^3)`` work) instead of a loop over the ``T`` positions.  Padding positions contribute the semiring's
identity, so sequences of different lengths share one batch.  Decoding is Viterbi's dynamic
programme (a loop over positions, batched over sequences and tags; it runs only at evaluation).
"""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.errors import PtmError

_CHUNK = 1 << 24  # elements of one [.., K, K, K] intermediate of the semiring product (64 MB)


def _log_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``log(exp(a) @ exp(b))`` for ``a, b [B, N, K, K]``: an exact logsumexp over the inner index.

    (Shifting rows and columns by their maxima and taking a real matrix product is cheaper but
    underflows when scores are sharply peaked: an entry far below its row and column maxima rounds
    to zero although it may carry the path that matters.)  Chunked over ``N`` to bound memory.
    """
    B, N, K, _ = a.shape
    step = max(1, _CHUNK // max(1, B * K * K * K))
    parts = [
        torch.logsumexp(a[:, i : i + step, :, :, None] + b[:, i : i + step, None, :, :], dim=-2)
        for i in range(0, N, step)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


class CRF(nn.Module):
    """Linear-chain CRF.  Parameters: ``transitions [K, K]`` (from, to), ``start [K]``, ``end [K]``.

    Every method takes ``emissions [B, T, K]`` and ``mask [B, T]`` (bool, True on real tokens,
    left-aligned: each row is a run of Trues then Falses, at least one True).
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        if num_tags < 1:
            raise PtmError(f"CRF: num_tags must be >= 1, got {num_tags}")
        self.num_tags = int(num_tags)
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))
        self.start = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))

    def _check(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if emissions.dim() != 3 or emissions.shape[-1] != self.num_tags:
            raise PtmError(f"CRF: emissions must be [B, T, {self.num_tags}], got {list(emissions.shape)}")
        mask = mask.to(torch.bool)
        if mask.shape != emissions.shape[:2]:
            raise PtmError(f"CRF: mask {list(mask.shape)} does not match emissions {list(emissions.shape[:2])}")
        if not bool(mask[:, 0].all()):
            raise PtmError("CRF: every sequence needs at least one token (mask[:, 0] must be True)")
        if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
            raise PtmError("CRF: the mask must be left-aligned (real tokens first, then padding)")
        return mask

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``score(x, y)`` of the given tag sequences: ``[B]``."""
        mask = self._check(emissions, mask)
        tags = tags.masked_fill(~mask, 0)
        m = mask.to(emissions.dtype)
        emit = emissions.gather(-1, tags.unsqueeze(-1)).squeeze(-1)  # [B, T]
        trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # [B, T-1]
        last = tags.gather(1, (mask.sum(1, keepdim=True) - 1)).squeeze(1)  # [B]
        return self.start[tags[:, 0]] + (emit * m).sum(1) + (trans * m[:, 1:]).sum(1) + self.end[last]

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log Z(x)``: ``[B]``."""
        mask = self._check(emissions, mask)
        B, T, K = emissions.shape
        alpha = self.start + emissions[:, 0]  # [B, K]
        if T > 1:
            steps = self.transitions + emissions[:, 1:, None, :]  # [B, T-1, K, K]
            identity = torch.full((K, K), float("-inf"), dtype=emissions.dtype, device=emissions.device)
            identity.fill_diagonal_(0.0)
            steps = torch.where(mask[:, 1:, None, None], steps, identity)
            while steps.shape[1] > 1:  # pairwise products: log2(T) rounds
                if steps.shape[1] % 2:
                    steps = torch.cat([steps, identity.expand(B, 1, K, K)], dim=1)
                steps = _log_matmul(steps[:, 0::2], steps[:, 1::2])
            alpha = torch.logsumexp(alpha[:, :, None] + steps[:, 0], dim=1)  # [B, K]
        return torch.logsumexp(alpha + self.end, dim=-1)

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log p(y | x)`` per sequence: ``[B]`` (the training loss is its negated mean)."""
        return self.score(emissions, tags, mask) - self.log_partition(emissions, mask)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The most probable tag sequences (Viterbi): ``int64 [B, T]``, -1 at padding."""
        mask = self._check(emissions, mask)
        B, T, K = emissions.shape
        best = self.start + emissions[:, 0]  # [B, K]: best score of a prefix ending in each tag
        pointers = torch.zeros(B, max(T - 1, 0), K, dtype=torch.long, device=emissions.device)
        for t in range(1, T):
            cand = best[:, :, None] + self.transitions  # [B, from, to]
            top, arg = cand.max(dim=1)
            pointers[:, t - 1] = arg
            best = torch.where(mask[:, t, None], top + emissions[:, t], best)
        last = (best + self.end).argmax(dim=-1)  # [B]
        lengths = mask.sum(1)
        out = torch.full((B, T), -1, dtype=torch.long, device=emissions.device)
        tag = last
        for t in range(T - 1, -1, -1):  # backtrack; a row enters at its own last token
            here = lengths - 1 == t
            tag = torch.where(here, last, tag)
            real = lengths - 1 >= t
            out[:, t] = torch.where(real, tag, out[:, t])
            if t > 0:
                tag = torch.where(real, pointers[:, t - 1].gather(1, tag[:, None]).squeeze(1), tag)
        return out


__all__ = ["CRF"]
