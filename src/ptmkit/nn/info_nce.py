"""InfoNCE (van den Oord et al. 2018) with in-batch negatives, as SimCSE trains sentence vectors
(Gao, Yao & Chen 2021, eq. 1 and 5).

``queries [N, D]`` and ``keys [M, D]`` with ``M >= N``: key ``i`` is query ``i``'s positive, every
other key a negative (the other queries' positives, then any extra keys appended after the first
``N``: hard negatives).  With cosine similarity ``sim(q, k) = q·k / (|q| |k|)`` and temperature
``τ``, the loss of query ``i`` is

    ℓ_i = -log( exp(sim(q_i, k_i) / τ) / Σ_{j=1..M} exp(sim(q_i, k_j) / τ) )

and :func:`info_nce` returns the mean over the queries: the cross-entropy of the ``[N, M]`` logit
matrix ``sim / τ`` with target ``i`` in row ``i``.  SimCSE's τ is 0.05.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

TEMPERATURE = 0.05
EPS = 1e-8  # a zero vector has cosine 0 with everything (not NaN)


def cosine_logits(queries: torch.Tensor, keys: torch.Tensor, temperature: float = TEMPERATURE) -> torch.Tensor:
    """``[N, M]`` cosine similarities of ``queries [N, D]`` and ``keys [M, D]``, divided by ``temperature``."""
    q = queries / queries.norm(dim=-1, keepdim=True).clamp(min=EPS)
    k = keys / keys.norm(dim=-1, keepdim=True).clamp(min=EPS)
    return (q @ k.T) / temperature


def info_nce(queries: torch.Tensor, keys: torch.Tensor, temperature: float = TEMPERATURE) -> torch.Tensor:
    """Mean InfoNCE loss (a 0-d tensor, float32 or wider) of ``queries [N, D]`` against ``keys [M, D]``
    (``M >= N``; key ``i`` is query ``i``'s positive); see the module docstring."""
    if queries.dim() != 2 or keys.dim() != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(f"info_nce takes queries [N, D] and keys [M, D], got {tuple(queries.shape)} and "
                         f"{tuple(keys.shape)}")
    n = queries.shape[0]
    if keys.shape[0] < n:
        raise ValueError(f"info_nce needs a positive key per query: {n} queries, {keys.shape[0]} keys")
    if not temperature > 0:
        raise ValueError(f"the temperature must be positive, got {temperature}")
    logits = cosine_logits(queries, keys, temperature)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return F.cross_entropy(logits, torch.arange(n, device=logits.device))


def symmetric_info_nce(a: torch.Tensor, b: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """CLIP's loss (Radford et al. 2021, Fig. 3): row ``i`` of ``a [N, D]`` and of ``b [N, D]`` are a
    pair; the mean of InfoNCE from ``a`` to ``b`` (each row's positive among ``b``'s rows) and from
    ``b`` to ``a`` over one cosine logit matrix ``[N, N] / temperature``.  ``temperature`` may be a
    learnable 0-d tensor.  Symmetric: ``symmetric_info_nce(a, b) == symmetric_info_nce(b, a)``."""
    if a.dim() != 2 or a.shape != b.shape:
        raise ValueError(f"symmetric_info_nce takes two [N, D] tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
    logits = cosine_logits(a, b, 1.0) / temperature
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    target = torch.arange(a.shape[0], device=logits.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


__all__ = ["TEMPERATURE", "cosine_logits", "info_nce", "symmetric_info_nce"]
