"""GloVe: global vectors for word representation (Pennington, Socher & Manning 2014).

Objective over the non-zero co-occurrences ``X_ij`` (counted with 1/d weighting over a
symmetric window, see :mod:`ptmkit.static.cooccurrence`)::

    J = sum_ij  1/2 * f(X_ij) * (w_i . w~_j + b_i + b~_j - log X_ij)^2
    f(x) = min(1, (x / x_max)^alpha),   alpha = 0.75, x_max = 10 (the paper: 100, see below)

(the factor 1/2 is the reference implementation's; it only rescales the learning rate).
Optimiser: AdaGrad as in the reference ``glove.c``: a step ``u = lr * g`` (``lr`` = 0.05, each
vector component of ``g`` clipped to ``[-grad_clip, grad_clip]``) is divided by the square root
of an accumulator of the *previous* squared steps ``u * u``, initialised to 1 (see
:func:`_glove_epoch`); parameters initialised uniformly in ``[-0.5/D, 0.5/D]``.

``x_max``: the paper uses 100 on corpora of billions of words.  On small corpora almost every
``X_ij`` is far below 100, so ``f`` (and every step) is tiny, rare pairs are ignored and the
vectors are shaped by the few pairs with function words; the reference's demo uses 10 on text8
(17M words), and so does the default here.  Brown (1.16M words, 100 dims, window 10, 25 epochs):
WordSim-353 Spearman 0.02 / MEN 0.16 with x_max 100, 0.18 / 0.21 with x_max 10.

``output``: the paper sums word and context vectors (``W + W~``).  On english-mix (12.6M words,
``benchmarks/glove_analysis.py``) the sum scores better on word similarity (WordSim-353 0.44 vs
0.38) but ``W`` alone better on the analogies (20.9 % vs 15.5 % at 10 epochs, 24.0 % vs 14.5 % at
300 dimensions), so both are offered; "sum" stays the default.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numba
import numpy as np
from numba import prange

from ptmkit.errors import PtmError
from ptmkit.registry import register
from ptmkit.static.configs import as_config
from ptmkit.static.cooccurrence import Cooccurrence, count_cooccurrence
from ptmkit.static.kernels.prefetch import prefetch_row
from ptmkit.static.output import train_and_save
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import load_corpus
from ptmkit.train.progress import progress as progress_display

OUTPUTS = ("sum", "word")


@dataclass(frozen=True)
class GloVeConfig:
    dim: int = 100
    window: int = 10
    min_count: int = 5
    max_vocab: int | None = None
    lowercase: bool = False
    x_max: float = 10.0  # the paper's 100 suits billions of words; see the module docstring
    alpha: float = 0.75
    lr: float = 0.05
    grad_clip: float = 100.0  # clip of each gradient component (glove.c's -grad-clip)
    epochs: int = 25
    memory_mb: float = 1024.0  # budget of the co-occurrence counting
    threads: int | None = None  # None: all of numba's threads
    seed: int = 0
    output: str = "sum"  # "sum": W + W~ (the paper); "word": W alone (glove.c's -model 1); see below

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")


# Entries between the one being updated and the one whose rows are prefetched.  One GloVe epoch
# on english-mix (23.1M entries, 2 threads): 9.5 s with none, 7.2 s at 2, 5.0 s at 4 and at 8.
PREFETCH_DISTANCE = 6
# Entries per block of the epoch's order (see ``shuffled_entries``): long enough that the
# prefetch lost at a block's end is negligible, short enough for ~350 blocks on english-mix.
BLOCK_SIZE = 65536


@numba.njit(parallel=True, fastmath=False, cache=True)
def _glove_epoch(I, J, logX, fX, block_order, block_size, W, Wc, b, bc, gW, gWc, gb, gbc, lr, grad_clip, n_chunks):
    """One AdaGrad pass over the entries, block by block in ``block_order``, Hogwild over ``n_chunks``.

    I, J: int32 [nnz]; logX, fX: float [nnz] (log X_ij and the weight f(X_ij));
    block_order: int64 [n_blocks], a permutation of the blocks, block ``k`` being the entries
    ``k * block_size`` to ``(k + 1) * block_size - 1`` (the last one may be shorter); thread
    ``c`` takes the ``c``-th slice of ``block_order``.  W, Wc: [V, D] word and context vectors;
    b, bc: [V] biases; g*: AdaGrad accumulators of the same shapes.  Updated in place.  Returns
    the objective summed over the entries (each term evaluated just before its own update).

    Inside a block the entries are visited in storage order, which lets the kernel prefetch the
    rows of the entry ``PREFETCH_DISTANCE`` ahead (W, Wc, gW, gWc must be C-contiguous).

    The update of a parameter ``p`` with gradient ``g`` (clipped to ``[-grad_clip, grad_clip]``
    for the vector components) is the reference ``glove.c``'s::

        u = lr * g;   p -= u / sqrt(G);   G += u * u        (G starts at 1)

    i.e. the accumulator holds the squared *scaled* steps and is read before the current one is
    added.  Asymptotically the step is ``g / sqrt(sum g^2)``, AdaGrad with an effective rate of 1
    (not ``lr``); ``lr`` only sets the size of the first steps.  Accumulating raw ``g * g``
    instead shrinks every step by up to a factor ``1/lr`` = 20 and leaves the vectors near
    their initialisation after a few epochs (WordSim-353 ~0.05 instead of ~0.3 on Brown).
    """
    n = I.shape[0]
    n_blocks = block_order.shape[0]
    D = W.shape[1]
    row_bytes = D * W.itemsize
    pW, pWc, pgW, pgWc = W.ctypes.data, Wc.ctypes.data, gW.ctypes.data, gWc.ctypes.data
    losses = np.zeros(n_chunks)
    for c in prange(n_chunks):
        acc = 0.0
        for blk in range(c * n_blocks // n_chunks, (c + 1) * n_blocks // n_chunks):
            lo = block_order[blk] * block_size
            hi = min(lo + block_size, n)
            for e in range(lo, hi):
                ahead = e + PREFETCH_DISTANCE
                if ahead < hi:
                    prefetch_row(pW, I[ahead], row_bytes)
                    prefetch_row(pgW, I[ahead], row_bytes)
                    prefetch_row(pWc, J[ahead], row_bytes)
                    prefetch_row(pgWc, J[ahead], row_bytes)
                i = I[e]
                j = J[e]
                diff = b[i] + bc[j] - logX[e]
                for k in range(D):
                    diff += W[i, k] * Wc[j, k]
                fdiff = fX[e] * diff  # d J_e / d (w_i . w~_j + b_i + b~_j)
                acc += 0.5 * fdiff * diff
                for k in range(D):
                    # both gradients from the values before this entry's update
                    u_i = lr * min(max(fdiff * Wc[j, k], -grad_clip), grad_clip)
                    u_j = lr * min(max(fdiff * W[i, k], -grad_clip), grad_clip)
                    W[i, k] -= u_i / math.sqrt(gW[i, k])
                    Wc[j, k] -= u_j / math.sqrt(gWc[j, k])
                    gW[i, k] += u_i * u_i
                    gWc[j, k] += u_j * u_j
                u_b = lr * fdiff
                b[i] -= u_b / math.sqrt(gb[i])
                bc[j] -= u_b / math.sqrt(gbc[j])
                gb[i] += u_b * u_b
                gbc[j] += u_b * u_b
        losses[c] = acc
    return losses.sum()


def shuffled_entries(cooc: Cooccurrence, x_max: float, alpha: float, seed: int,
                     chunk: int = 1 << 20) -> tuple[np.ndarray, ...]:
    """The entries of ``cooc`` in one random order, as the kernel reads them.

    Returns I, J (int32 [nnz]), logX, fX (float32 [nnz]: log X_ij and f(X_ij)).  Shuffled once,
    as glove.c's ``shuffle`` does before training; each epoch then visits blocks of this order
    in a fresh order (:func:`epoch_block_order`), so its reads are sequential and prefetchable
    instead of a random gather per entry.  Filled ``chunk`` entries at a time, so that beyond
    the result only the permutation (8 bytes per entry) is held; ``cooc`` is left as it is.
    """
    n = cooc.nnz
    perm = np.random.default_rng((seed, 1 << 20)).permutation(n)
    I, J = np.empty(n, np.int32), np.empty(n, np.int32)
    logX, fX = np.empty(n, np.float32), np.empty(n, np.float32)
    for lo in range(0, n, chunk):
        part = slice(lo, min(lo + chunk, n))
        rec = cooc.records[perm[part]]  # one gather of whole records, then split
        I[part], J[part] = rec["i"], rec["j"]
        x = rec["x"].astype(np.float64)
        logX[part] = np.log(x)
        fX[part] = weighting(x, x_max, alpha)
    return I, J, logX, fX


def block_size_for(nnz: int, n_chunks: int) -> int:
    """``BLOCK_SIZE``, or smaller so that each of ``n_chunks`` threads gets at least 64 blocks.

    A small matrix thus keeps both threads busy and, at a block of one entry, a fully random
    order every epoch.
    """
    return max(1, min(BLOCK_SIZE, nnz // (64 * n_chunks)))


def epoch_block_order(nnz: int, seed: int, epoch: int, block_size: int = BLOCK_SIZE) -> np.ndarray:
    """A fresh random order (int64 [ceil(nnz / block_size)]) of the blocks for one epoch."""
    return np.random.default_rng((seed, epoch)).permutation(-(-nnz // block_size))


class GloVeModel:
    """Parameters and AdaGrad state of GloVe for a vocabulary of ``V`` words.

    W, Wc: [V, D]; b, bc: [V]; gW, gWc, gb, gbc: AdaGrad accumulators (initialised to 1).
    """

    def __init__(self, vocab_size: int, dim: int, seed: int = 0, dtype: type = np.float32):
        rng = np.random.default_rng(seed)
        self.W = ((rng.random((vocab_size, dim)) - 0.5) / dim).astype(dtype)
        self.Wc = ((rng.random((vocab_size, dim)) - 0.5) / dim).astype(dtype)
        self.b = ((rng.random(vocab_size) - 0.5) / dim).astype(dtype)
        self.bc = ((rng.random(vocab_size) - 0.5) / dim).astype(dtype)
        self.gW = np.ones_like(self.W)
        self.gWc = np.ones_like(self.Wc)
        self.gb = np.ones_like(self.b)
        self.gbc = np.ones_like(self.bc)

    def epoch(self, I, J, logX, fX, block_order: np.ndarray, lr: float, n_chunks: int, grad_clip: float = 100.0,
              block_size: int = BLOCK_SIZE) -> float:
        """One Hogwild AdaGrad pass over the entries by blocks; returns the mean objective per entry."""
        total = _glove_epoch(I, J, logX, fX, block_order, block_size, self.W, self.Wc, self.b, self.bc,
                             self.gW, self.gWc, self.gb, self.gbc, lr, grad_clip, n_chunks)
        return float(total) / max(1, I.shape[0])

    def vectors(self, output: str = "sum") -> np.ndarray:
        """Word vectors as float32 [V, D]: ``W + W~`` (output "sum") or ``W`` (output "word")."""
        return (self.W + self.Wc if output == "sum" else self.W).astype(np.float32)


def weighting(x: np.ndarray, x_max: float, alpha: float) -> np.ndarray:
    """f(x) = min(1, (x/x_max)^alpha)."""
    return np.minimum(1.0, (np.asarray(x, dtype=np.float64) / x_max) ** alpha)


def fit_cooccurrence(cooc: Cooccurrence, cfg: GloVeConfig, progress: bool = True) -> tuple[GloVeModel, dict]:
    """Train GloVe on a counted co-occurrence matrix; returns the model and training stats.

    stats: ``losses`` (mean objective per entry of each epoch), ``train_seconds``,
    ``train_entries_per_s``, ``train_words_per_s`` (corpus tokens x epochs / second).
    """
    if cooc.nnz == 0:
        raise PtmError("the co-occurrence matrix is empty: the corpus has no sentence with two in-vocabulary words")
    if cfg.threads:
        numba.set_num_threads(min(cfg.threads, numba.config.NUMBA_NUM_THREADS))
    n_chunks = numba.get_num_threads()
    t0 = time.perf_counter()  # the one shuffle counts as training time
    I, J, logX, fX = shuffled_entries(cooc, cfg.x_max, cfg.alpha, cfg.seed)
    block_size = block_size_for(cooc.nnz, n_chunks)
    model = GloVeModel(cooc.vocab_size, cfg.dim, cfg.seed)
    losses = []
    bar = None
    if progress:
        bar = progress_display(cfg.epochs, desc="GloVe", unit="epoch")
    for epoch in range(cfg.epochs):
        blocks = epoch_block_order(cooc.nnz, cfg.seed, epoch, block_size)
        losses.append(model.epoch(I, J, logX, fX, blocks, cfg.lr, n_chunks, cfg.grad_clip, block_size))
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
            bar.update()
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    stats = {
        "losses": losses,
        "train_seconds": seconds,
        "train_entries_per_s": cooc.nnz * cfg.epochs / max(seconds, 1e-9),
        "train_words_per_s": cooc.stats.get("tokens", 0) * cfg.epochs / max(seconds, 1e-9),
    }
    return model, stats


def train_glove(data: object, cfg: GloVeConfig = GloVeConfig(), progress: bool = True, out_dir=None):
    """Train GloVe on ``data`` (text file(s), one sentence per line, or tokenised sentences).

    Returns ``(WordVectors, stats)``; stats holds the counting and the training throughput
    separately (``count_words_per_s``, ``train_words_per_s``) and the per-epoch losses.
    ``out_dir`` receives the co-occurrence runs when counting exceeds ``cfg.memory_mb``.
    """
    vocab, corpus = load_corpus(data, min_count=cfg.min_count, max_vocab=cfg.max_vocab, lowercase=cfg.lowercase)
    cooc = count_cooccurrence(corpus.ids, corpus.sentences, len(vocab), window=cfg.window,
                              weighting="harmonic", memory_mb=cfg.memory_mb, out_dir=out_dir, progress=progress)
    model, stats = fit_cooccurrence(cooc, cfg, progress)
    stats = {**cooc.stats, **stats, "vocab_size": len(vocab), "config": asdict(cfg)}
    return WordVectors(list(vocab.words), model.vectors(cfg.output), counts=vocab.counts), stats


@register("static", "glove")
class GloVe:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress) -> WordVectors``."""

    config_class = GloVeConfig

    @staticmethod
    def train(data: object, cfg: GloVeConfig | dict | None = None, out=None, progress: bool = True):
        """Train and, with ``out``, write ``vectors.bin``, ``vocab.txt``, ``config.json`` (with stats)."""
        cfg = as_config(GloVeConfig, cfg)
        return train_and_save(out, "glove", cfg, lambda: train_glove(data, cfg, progress=progress))
