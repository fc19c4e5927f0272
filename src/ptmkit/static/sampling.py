"""The random parts that word2vec's two trainers and fastText share.

- frequent-word subsampling: the probability of keeping each occurrence of a word
  (:func:`keep_probabilities`);
- the noise distribution of negative sampling, unigram^0.75 (:func:`negative_probs`), and its
  alias table for O(1) draws (:func:`negative_table`);
- word2vec's initialisation of the input vectors (:func:`init_input_vectors`).

The numba kernel (:mod:`ptmkit.static.word2vec`, :mod:`ptmkit.static.fasttext`) and the batched
PyTorch path (:mod:`ptmkit.static.word2vec_torch`) read the same tables, so both train the same
model; this module imports neither of them.
"""

from __future__ import annotations

import numpy as np

from ptmkit.static.kernels.w2v import alias_table


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """float32 [V]: probability of keeping each occurrence, ``min(1, (sqrt(c/(sT)) + 1)·sT/c)``."""
    counts = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return np.ones(counts.shape[0], dtype=np.float32)
    threshold = sample * counts.sum()
    p = (np.sqrt(counts / threshold) + 1.0) * threshold / counts
    return np.minimum(p, 1.0).astype(np.float32)


def negative_probs(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """float64 [V]: the noise distribution of negative sampling, P(w) ∝ count(w)^power."""
    weights = np.asarray(counts, dtype=np.float64) ** power
    return weights / weights.sum()


def negative_table(counts: np.ndarray, power: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """Alias table (accept float32 [V], alias int32 [V]) sampling ``negative_probs`` in O(1)."""
    return alias_table(negative_probs(counts, power))


def init_input_vectors(v: int, dim: int, seed: int) -> np.ndarray:
    """float32 [v, dim] uniform in [-0.5/dim, 0.5/dim) (word2vec's initialisation)."""
    rng = np.random.default_rng(seed)
    return ((rng.random((v, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)


__all__ = ["init_input_vectors", "keep_probabilities", "negative_probs", "negative_table"]
