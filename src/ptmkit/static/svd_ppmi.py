"""SVD of a PPMI matrix (Levy, Goldberg & Dagan 2015, "Improving distributional similarity
with lessons learned from word embeddings").

1. Co-occurrences ``#(w, c)`` within a symmetric window, counted by
   :func:`~ptmkit.static.cooccurrence.count_cooccurrence` (bounded memory).  ``weighting``:
   ``"linear"`` (default) is word2vec's *dynamic context window* in expectation: a context at
   distance ``d`` counts ``(L - d + 1) / L``; ``"uniform"`` counts every context once;
   ``"harmonic"`` is GloVe's ``1/d``.
2. PPMI with context-distribution smoothing (cds, ``alpha = 0.75``)::

       PMI(w, c) = log( #(w,c) * sum_c' #(c')^alpha / ( #(w) * #(c)^alpha ) )
       PPMI = max(PMI, 0)      (only non-zero co-occurrences can be positive: the matrix stays sparse)

3. Truncated SVD ``PPMI ~ U S V^T`` of rank ``dim``, by randomized SVD (Halko, Martinsson &
   Tropp 2011: a Gaussian test matrix with ``oversample`` extra columns, ``power_iters``
   subspace iterations with QR re-orthonormalisation, then an exact SVD of the small
   projected matrix), or by ``scipy.sparse.linalg.svds`` (ARPACK) with ``method="arpack"``.
   Randomized SVD is the default: on the Brown PPMI matrix (14k x 14k, window 5, rank 100,
   2 busy cores) it took 84 s against ARPACK's 121 s; the leading singular values agree to
   1e-9 relative, the 100th is 6 % low (the tail converges more slowly; raise ``power_iters``
   or use ``"arpack"`` when the tail matters), and WordSim-353 Spearman was 0.319 vs 0.315.
4. Eigenvalue weighting ``W = U S^p`` (``p = 0.5``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from ptmkit.errors import PtmError
from ptmkit.registry import register
from ptmkit.static.configs import as_config
from ptmkit.static.cooccurrence import count_cooccurrence
from ptmkit.static.output import train_and_save
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import load_corpus


@dataclass(frozen=True)
class SVDPPMIConfig:
    dim: int = 100
    window: int = 5
    weighting: str = "linear"
    min_count: int = 5
    max_vocab: int | None = None
    lowercase: bool = False
    cds: float = 0.75  # context-distribution smoothing exponent (1.0: none)
    eig: float = 0.5  # eigenvalue weighting p in W = U S^p
    method: str = "randomized"  # or "arpack"
    oversample: int = 20
    power_iters: int = 4
    memory_mb: float = 1024.0
    seed: int = 0


def ppmi(counts: sp.spmatrix, cds: float = 0.75) -> sp.csr_matrix:
    """PPMI of a co-occurrence matrix [V, C] with context-distribution smoothing; float64 CSR."""
    m = sp.csr_matrix(counts, dtype=np.float64)
    m.eliminate_zeros()
    total = m.sum()
    if total <= 0:
        raise PtmError("the co-occurrence matrix is empty")
    row = np.asarray(m.sum(axis=1)).ravel()
    col = np.asarray(m.sum(axis=0)).ravel() ** cds
    col_total = col.sum()
    coo = m.tocoo()
    # log( #(w,c) / #(w) / (#(c)^a / sum #(c')^a) )
    pmi = np.log(coo.data) - np.log(row[coo.row]) - np.log(col[coo.col]) + np.log(col_total)
    keep = pmi > 0
    return sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=m.shape)


def randomized_svd(a, k: int, oversample: int = 20, power_iters: int = 4, seed: int = 0):
    """Top-``k`` SVD of ``a`` [n, m] (dense or sparse): ``(U [n,k], s [k], Vt [k,m])``, s descending."""
    n, m = a.shape
    if not 0 < k <= min(n, m):
        raise PtmError(f"SVD rank {k} must be in [1, {min(n, m)}] for a {n} x {m} matrix")
    ell = min(k + oversample, min(n, m))
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(a @ rng.standard_normal((m, ell)))
    for _ in range(power_iters):
        # Re-orthonormalise after each multiplication: it keeps small singular directions.
        z, _ = np.linalg.qr(a.T @ q)
        q, _ = np.linalg.qr(a @ z)
    b = np.asarray((a.T @ q).T)  # [ell, m] = Q^T A
    ub, s, vt = np.linalg.svd(b, full_matrices=False)
    return q @ ub[:, :k], s[:k], vt[:k]


def truncated_svd(a, k: int, method: str = "randomized", oversample: int = 20, power_iters: int = 4, seed: int = 0):
    if method == "randomized":
        return randomized_svd(a, k, oversample, power_iters, seed)
    if method == "arpack":
        u, s, vt = svds(a, k=k, random_state=seed)
        order = np.argsort(-s)
        return u[:, order], s[order], vt[order]
    raise PtmError(f"unknown SVD method {method!r}; choose 'randomized' or 'arpack'")


def svd_ppmi_vectors(counts: sp.spmatrix, cfg: SVDPPMIConfig) -> tuple[np.ndarray, dict]:
    """Word vectors ``U S^p`` float32 [V, dim] of a co-occurrence matrix, and timing stats."""
    t0 = time.perf_counter()
    m = ppmi(counts, cfg.cds)
    t1 = time.perf_counter()
    k = min(cfg.dim, min(m.shape) - 1) if cfg.method == "arpack" else min(cfg.dim, min(m.shape))
    u, s, _ = truncated_svd(m, k, cfg.method, cfg.oversample, cfg.power_iters, cfg.seed)
    t2 = time.perf_counter()
    w = (u * s**cfg.eig).astype(np.float32)
    return w, {"ppmi_nnz": int(m.nnz), "ppmi_seconds": t1 - t0, "svd_seconds": t2 - t1, "singular_values": s.tolist()}


def train_svd_ppmi(data: object, cfg: SVDPPMIConfig = SVDPPMIConfig(), progress: bool = True):
    """SVD-PPMI vectors of ``data`` (text file(s), one sentence per line, or tokenised sentences).

    Returns ``(WordVectors, stats)``.
    """
    vocab, corpus = load_corpus(data, min_count=cfg.min_count, max_vocab=cfg.max_vocab, lowercase=cfg.lowercase)
    cooc = count_cooccurrence(corpus.ids, corpus.sentences, len(vocab), window=cfg.window,
                              weighting=cfg.weighting, memory_mb=cfg.memory_mb, progress=progress)
    w, stats = svd_ppmi_vectors(cooc.to_scipy(), cfg)
    stats = {**cooc.stats, **stats, "vocab_size": len(vocab), "config": asdict(cfg)}
    return WordVectors(list(vocab.words), w, counts=vocab.counts), stats


@register("static", "svd-ppmi")
class SVDPPMI:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress) -> WordVectors``."""

    config_class = SVDPPMIConfig

    @staticmethod
    def train(data: object, cfg: SVDPPMIConfig | dict | None = None, out=None, progress: bool = True):
        """Train and, with ``out``, write ``vectors.bin``, ``vocab.txt``, ``config.json`` (with stats)."""
        cfg = as_config(SVDPPMIConfig, cfg)
        return train_and_save(out, "svd-ppmi", cfg, lambda: train_svd_ppmi(data, cfg, progress=progress))
