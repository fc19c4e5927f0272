"""Ethayarajh (2019), "How Contextual are Contextualized Word Representations?": the statistics of
one layer's word-occurrence vectors, on arrays.

* self-similarity of a word ``w`` with occurrences ``x_1 .. x_n`` (``n >= 2``): the mean cosine over
  the ordered pairs ``i != j``, ``SelfSim(w) = 1/(n(n-1)) Σ_{i≠j} cos(x_i, x_j)``.  With unit vectors
  ``u_i`` this is ``(||Σ u_i||² - n) / (n(n-1))``, so it streams as a running sum of unit vectors
  (:func:`self_similarity_from_sum`); the released code samples at most 1,000 pairs per word, of
  which this exact mean is the expectation.
* intra-sentence similarity of a sentence with word vectors ``s_1 .. s_m``: the mean cosine of each
  word to the sentence vector ``s̄ = mean(s_i)`` (averaged over sentences by the caller).
* maximum explainable variance (MEV): the share of the occurrences' variance their first
  principal component explains, ``σ_1² / Σ σ_i²`` with ``σ`` the singular values of the *centred*
  ``[n, d]`` occurrence matrix, as the released code computes it (scikit-learn's
  ``PCA(n_components=1).explained_variance_ratio_[0]``, capped at 1 by ``min(1.0, ...)``, which also
  turns the 0/0 of identical occurrences into 1).
* anisotropy baseline: the mean cosine of random word occurrences, each from a different sentence
  (one random word of each of up to 1,000 random sentences, as the released code samples them),
  over all pairs of the sample; and the MEV of that sample.  The anisotropy-adjusted statistics
  subtract the layer's baseline: ``SelfSim - A``, ``IntraSim - A``, ``MEV - MEV_random``.
* the first principal component of a word's occurrences at a layer is a static embedding of it
  (:func:`first_pc`, the paper's section 4.4).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-12


def unit_rows(x: np.ndarray) -> np.ndarray:
    """``x [n, d]`` with every row scaled to norm 1 (a zero row stays zero), float64."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), EPS)


def self_similarity_from_sum(unit_sum: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Mean pairwise cosine of ``n`` unit vectors from their sum ``[..., d]``: ``(||Σu||² - n) / (n(n-1))``
    (NaN where ``n < 2``)."""
    n = np.asarray(n, dtype=np.float64)
    sq = np.einsum("...d,...d->...", unit_sum, unit_sum)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 2, (sq - n) / (n * (n - 1)), np.nan)


def self_similarity(x: np.ndarray) -> float:
    """``SelfSim`` of the occurrence vectors ``x [n, d]`` (n >= 2): mean cosine over pairs ``i != j``."""
    x = np.asarray(x)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"self-similarity needs at least 2 occurrence vectors [n, d], got shape {x.shape}")
    return float(self_similarity_from_sum(unit_rows(x).sum(0), len(x)))


def intra_sentence_similarity(s: np.ndarray) -> float:
    """``IntraSim`` of one sentence's word vectors ``s [m, d]``: mean cosine of each word to ``mean(s)``."""
    s = np.asarray(s, dtype=np.float64)
    return float((unit_rows(s) @ unit_rows(s.mean(0, keepdims=True))[0]).mean())


def anisotropy(x: np.ndarray) -> float:
    """The anisotropy baseline of a sample of random occurrences ``x [m, d]``: their mean pairwise
    cosine (``i != j``); about 0 for an isotropic distribution, 1 when all point one way."""
    return self_similarity(x)


def _centred(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x - x.mean(0, keepdims=True)


def mev(x: np.ndarray) -> float:
    """Maximum explainable variance of ``x [n, d]``: ``σ_1² / Σ σ_i²`` of the centred matrix (1 when
    the occurrences do not vary at all, as the released code's ``min(1.0, nan)`` gives)."""
    sv = np.linalg.svd(_centred(x), compute_uv=False)
    total = float((sv ** 2).sum())
    scale = float((np.asarray(x, dtype=np.float64) ** 2).sum())
    if total <= 1e-20 * max(scale, 1e-300):
        return 1.0
    return min(1.0, float(sv[0] ** 2 / total))


def first_pc(x: np.ndarray) -> np.ndarray:
    """The first principal component ``[d]`` (unit norm) of ``x [n, d]`` (centred, as PCA's
    ``components_[0]``), its sign chosen to point along the occurrences' mean (PCA leaves it open);
    occurrences that do not vary give their own direction."""
    x = np.asarray(x, dtype=np.float64)
    c = _centred(x)
    if float((c ** 2).sum()) <= 1e-20 * max(float((x ** 2).sum()), 1e-300):
        v = x.mean(0)
        return v / max(np.linalg.norm(v), EPS)
    _, _, vt = np.linalg.svd(c, full_matrices=False)
    v = vt[0]
    return v if float(v @ x.sum(0)) >= 0 else -v


def adjusted(values: dict[str, list[float]], baseline: list[float], baseline_mev: list[float]) -> dict[str, list[float]]:
    """The anisotropy-adjusted per-layer values: ``self_similarity`` and ``intra_sentence`` minus the
    layer's random-occurrence cosine, ``mev`` minus the random occurrences' MEV."""
    sub = lambda a, b: [float(x - y) for x, y in zip(a, b)]  # noqa: E731
    return {"self_similarity": sub(values["self_similarity"], baseline),
            "intra_sentence": sub(values["intra_sentence"], baseline),
            "mev": sub(values["mev"], baseline_mev)}


__all__ = ["adjusted", "anisotropy", "first_pc", "intra_sentence_similarity", "mev", "self_similarity",
           "self_similarity_from_sum", "unit_rows"]
