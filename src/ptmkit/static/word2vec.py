"""word2vec: CBOW and Skip-gram with hierarchical softmax or negative sampling (Mikolov et al. 2013).

``train_word2vec(data, cfg)`` counts the corpus, encodes it to ids (cached), and runs the compiled
Hogwild kernel of :mod:`ptmkit.static.kernels.w2v` on ~10k-word chunks in ``workers`` threads
(the kernel releases the GIL), with a progress bar.  The details follow the original tool (and gensim):

- frequent-word subsampling, keep probability ``(sqrt(c/(s·T)) + 1)·(s·T)/c`` for a word with
  count c among T in-vocabulary tokens (s = ``sample``);
- reduced window: the effective window is ``window - b``, b ~ U{0..window-1}, per centre word;
- learning rate linear from ``alpha`` to ``min_alpha`` over ``epochs × T`` words;
- negatives drawn from unigram^0.75 (``ns_exponent``); Huffman tree from the counts for HS;
- CBOW averages the context vectors (``cbow_mean``) and adds the whole gradient w.r.t. that mean
  to every context word (word2vec.c, gensim); Skip-gram lets each context word's input vector
  predict the centre word;
- input vectors start uniform in [-0.5/D, 0.5/D) as in word2vec.c (gensim 4 draws from twice that
  range, which gives CBOW a few tenths of a point more analogy accuracy on small corpora), output
  vectors at zero; sentences longer than ``max_sentence_len`` (10,000) words are split.

Where word2vec.c and gensim differ, this follows word2vec.c: a negative-sampling dot product beyond
±6 still gives the saturated gradient ``(label - σ)·alpha`` with σ ∈ {0, 1} (gensim skips the pair).

``kernel="shared_negatives"`` (negative sampling, CPU) trains instead with negatives shared across a
window (Ji et al. 2016, :mod:`ptmkit.static.kernels.w2v_shared`): a Skip-gram window's context
words, or the context means of ``cbow_batch`` consecutive CBOW targets, are scored against one
draw of K negatives as a small dense block.  ``kernel="shared_path"`` (Skip-gram HS, CPU) scores a
window's context words against the centre word's Huffman path as one block.  ``kernel="exact"``
(the default) is word2vec.c's per-pair update.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from ptmkit.config import to_dict
from ptmkit.registry import register
from ptmkit.static.configs import (
    AlphaSchedule,
    as_config,
    check_architecture,
    check_at_least_one,
    check_hot_rows,
    sync_interval,
)
from ptmkit.static.hogwild import n_threads, run_epochs
from ptmkit.static.huffman import HuffmanTree, build_huffman
from ptmkit.static.kernels.w2v import exp_table, train_w2v_chunk
from ptmkit.static.kernels.w2v_shared import train_sg_hs_shared_chunk, train_w2v_shared_chunk
from ptmkit.static.output import check_out_dir, save_run
from ptmkit.static.sampling import init_input_vectors, keep_probabilities, negative_table
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import IdCorpus, Vocab, load_corpus
from ptmkit.static.word2vec_torch import train_on_ids_torch

log = logging.getLogger(__name__)


KERNELS = ("exact", "shared_negatives", "shared_path")


@dataclass(frozen=True)
class Word2VecConfig(AlphaSchedule):
    """Hyper-parameters (defaults of word2vec.c / gensim).

    model: "skipgram" | "cbow".  loss: "ns" (negative sampling) | "hs" (hierarchical softmax).
    alpha: initial learning rate; None = 0.025 (Skip-gram) / 0.05 (CBOW).  min_alpha: None = alpha·1e-4.
    max_vocab: keep at most this many most frequent words (after min_count).
    workers: CPU threads (0 = all cores).  chunk_words: words per Hogwild work unit.
    device: "cpu" (numba kernel) | "torch" (batched PyTorch path on the CPU) | "cuda[:N]" (it on a GPU).
    kernel: "exact" (word2vec.c's per-pair update) | "shared_negatives" (one draw of negatives per
    window, updated as a dense block; Ji et al. 2016; needs loss "ns") | "shared_path" (Skip-gram HS:
    a window's context words against the centre's Huffman path as one block; needs model "skipgram"
    and loss "hs"); both shared kernels run on device "cpu".
    cbow_batch: CBOW with kernel "shared_negatives": consecutive targets sharing one draw of negatives
    (larger is faster and less accurate; Skip-gram always shares across one target's window).
    hot_rows: with kernel "exact" and more than one thread, each thread trains its own copy of the
    output rows every update touches (the top ``hot_rows`` inner nodes of the Huffman tree, the
    ``hot_rows`` most frequent words' negative-sampling rows) and adds its change into the shared
    matrix every ``sync_words`` kept words.  Without it, threads writing the same rows stall on
    cache-line transfers: 2 threads of Skip-gram HS ran at 0.73x the words/s of one.  0 = plain
    Hogwild; one thread always trains the shared rows directly (word2vec.c's update, bit for bit).
    sync_words: None = 64 for hierarchical softmax, 1024 for negative sampling.  Every HS update
    writes the root, so between two merges the other thread's root copy falls 64 x ~5 updates
    behind; the most frequent word gets only ~4 % of the negative draws, so NS tolerates 1024.
    On english-mix (Skip-gram HS, 2 threads, 3 seeds) analogy accuracy was 27.3 % with 1024,
    27.8 % with 256, 28.4 % with 64 and 28.3 % without hot rows, at 1.10M / 1.04M / 1.03M /
    0.47M words/s.
    """

    model: str = "skipgram"
    loss: str = "ns"
    dim: int = 100
    window: int = 5
    epochs: int = 5
    min_count: int = 5
    max_vocab: int | None = None
    negative: int = 5
    ns_exponent: float = 0.75
    sample: float = 1e-3
    alpha: float | None = None
    min_alpha: float | None = None
    cbow_mean: bool = True
    lowercase: bool = False
    seed: int = 1
    workers: int = 0
    chunk_words: int = 10_000
    max_sentence_len: int = 10_000
    cache: bool = True
    device: str = "cpu"
    kernel: str = "exact"
    cbow_batch: int = 2
    hot_rows: int = 128
    sync_words: int | None = None

    def __post_init__(self) -> None:
        check_architecture(self.model)
        if self.loss not in ("ns", "hs"):
            raise ValueError(f"loss must be 'ns' or 'hs', got {self.loss!r}")
        check_at_least_one(self, ("dim", "window", "epochs", "min_count", "chunk_words", "max_sentence_len", "cbow_batch"))
        check_hot_rows(self)
        if self.loss == "ns" and self.negative < 1:
            raise ValueError("negative sampling needs negative >= 1")
        if self.sample < 0:
            raise ValueError("sample must be >= 0")
        if self.device not in ("cpu", "torch") and not self.device.startswith("cuda"):
            raise ValueError(f"device must be 'cpu', 'torch' or 'cuda[:N]', got {self.device!r}")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(map(repr, KERNELS))}, got {self.kernel!r}")
        if self.kernel == "shared_negatives" and (self.loss != "ns" or self.device != "cpu"):
            raise ValueError(
                "kernel='shared_negatives' shares negative samples, so it needs loss='ns' and device='cpu' "
                f"(got loss={self.loss!r}, device={self.device!r}); use kernel=exact otherwise"
            )
        if self.kernel == "shared_path" and (self.model != "skipgram" or self.loss != "hs" or self.device != "cpu"):
            raise ValueError(
                "kernel='shared_path' shares a Skip-gram window's Huffman path, so it needs model='skipgram', "
                f"loss='hs' and device='cpu' (got model={self.model!r}, loss={self.loss!r}, device={self.device!r}); "
                "use kernel=exact otherwise"
            )


# ----------------------------------------------------------------------------- training


def train_word2vec(
    data: object,
    cfg: Word2VecConfig | dict | None = None,
    out: str | os.PathLike | None = None,
    progress: bool = True,
) -> WordVectors:
    """Train word2vec on ``data`` (text file(s), one sentence per line, or a list of token lists).

    Returns the input vectors ``syn0`` as :class:`WordVectors` [V, dim]; with ``out`` also writes
    ``out/vectors.bin`` (word2vec binary), ``out/config.json`` and ``out/vocab.txt``.
    """
    cfg = as_config(Word2VecConfig, cfg)
    out_dir = check_out_dir(out)
    vocab, corpus = load_corpus(
        data, cfg.min_count, cfg.max_vocab, cfg.lowercase, cfg.max_sentence_len, cache=cfg.cache
    )
    syn0, stats = train_on_ids(vocab, corpus, cfg, progress=progress)
    wv = WordVectors(vocab.words, syn0, vocab.counts)
    if out_dir is not None:
        save_run(out_dir, wv, {"model": "word2vec", **to_dict(cfg)}, stats)
    return wv


def train_on_ids(
    vocab: Vocab, corpus: IdCorpus, cfg: Word2VecConfig, progress: bool = True, tree: HuffmanTree | None = None
) -> tuple[np.ndarray, dict]:
    """Run the kernel over an encoded corpus; returns (syn0 float32 [V, dim], stats).

    ``tree``: a given Huffman tree for HS (default: built from the counts).  HS similarity structure
    depends on the tree's topology, so comparisons with another implementation pass its tree here.
    """
    if cfg.device != "cpu":  # batched PyTorch path (GPU); imported here so the CPU path never loads torch

        return train_on_ids_torch(vocab, corpus, cfg, progress=progress, tree=tree)
    v, dim = len(vocab), cfg.dim
    hs = cfg.loss == "hs"
    negative = cfg.negative if cfg.loss == "ns" else 0
    syn0 = init_input_vectors(v, dim, cfg.seed)
    if hs:
        tree = tree if tree is not None else build_huffman(vocab.counts)
        syn1 = np.zeros((max(v - 1, 1), dim), dtype=np.float32)
        codes, points, lengths = tree.codes, tree.points, tree.lengths
    else:
        syn1 = np.zeros((1, dim), dtype=np.float32)
        codes, points, lengths = np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.int32), np.zeros(1, np.int32)
    syn1neg = np.zeros((v, dim), dtype=np.float32) if negative else np.zeros((1, dim), dtype=np.float32)
    table = negative_table(vocab.counts, cfg.ns_exponent)
    keep = keep_probabilities(vocab.counts, cfg.sample)
    log.info(
        "word2vec %s-%s: %d words, %d tokens, %d sentences, dim %d, memory %.1f MiB",
        cfg.model, cfg.loss, v, corpus.n_words, corpus.n_sentences, dim,
        (syn0.nbytes + syn1.nbytes + syn1neg.nbytes) / 2**20,
    )  # fmt: skip
    tab = exp_table()
    if cfg.kernel == "shared_negatives":
        stats = run_epochs(
            lambda epoch, chunk, s0, s1, alpha0, alpha1, before, total: train_w2v_shared_chunk(
                syn0, syn1neg, corpus.ids, corpus.sentences, s0, s1, keep, table, tab,
                cfg.model == "skipgram", negative, cfg.window, cfg.cbow_mean, cfg.cbow_batch,
                alpha0, alpha1, before, total, cfg.seed, epoch, chunk,
            ),  # fmt: skip
            corpus, cfg, progress, desc=f"word2vec {cfg.model}-{cfg.loss} (shared negatives)",
        )
        return syn0, stats
    if cfg.kernel == "shared_path":
        stats = run_epochs(
            lambda epoch, chunk, s0, s1, alpha0, alpha1, before, total: train_sg_hs_shared_chunk(
                syn0, syn1, codes, points, lengths, corpus.ids, corpus.sentences, s0, s1, keep, tab, cfg.window,
                alpha0, alpha1, before, total, cfg.seed, epoch, chunk,
            ),  # fmt: skip
            corpus, cfg, progress, desc=f"word2vec {cfg.model}-{cfg.loss} (shared path)",
        )
        return syn0, stats
    hot = cfg.hot_rows if n_threads(cfg.workers) > 1 else 0
    sync = sync_interval(cfg.sync_words, hs)
    stats = run_epochs(
        lambda epoch, chunk, s0, s1, alpha0, alpha1, before, total: train_w2v_chunk(
            syn0, syn1, syn1neg, corpus.ids, corpus.sentences, s0, s1,
            keep, table, codes, points, lengths, tab,
            cfg.model == "skipgram", hs, negative, cfg.window, cfg.cbow_mean,
            alpha0, alpha1, before, total, cfg.seed, epoch, chunk, hot, hot, sync,
        ),  # fmt: skip
        corpus, cfg, progress, desc=f"word2vec {cfg.model}-{cfg.loss}",
    )
    return syn0, stats


@register("static", "word2vec")
class Word2Vec:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress)``."""

    config_class = Word2VecConfig
    train = staticmethod(train_word2vec)


__all__ = ["Word2Vec", "Word2VecConfig", "train_word2vec"]
