"""word2vec: CBOW and Skip-gram with hierarchical softmax or negative sampling (Mikolov et al. 2013).

``train_word2vec(data, cfg)`` counts the corpus, encodes it to ids (cached), and runs the compiled
Hogwild kernel of :mod:`ptmkit.static.kernels_w2v` on ~10k-word chunks in ``workers`` threads
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
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ptmkit.config import from_dict, to_dict
from ptmkit.errors import PtmError
from ptmkit.registry import register
from ptmkit.static.huffman import HuffmanTree, build_huffman
from ptmkit.static.kernels_w2v import exp_table, train_w2v_chunk
from ptmkit.static.sampling import init_input_vectors, keep_probabilities, negative_table
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import IdCorpus, Vocab, load_corpus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Word2VecConfig:
    """Hyper-parameters (defaults of word2vec.c / gensim).

    model: "skipgram" | "cbow".  loss: "ns" (negative sampling) | "hs" (hierarchical softmax).
    alpha: initial learning rate; None = 0.025 (Skip-gram) / 0.05 (CBOW).  min_alpha: None = alpha·1e-4.
    max_vocab: keep at most this many most frequent words (after min_count).
    workers: CPU threads (0 = all cores).  chunk_words: words per Hogwild work unit.
    device: "cpu" (numba kernel) | "torch" (batched PyTorch path on the CPU) | "cuda[:N]" (it on a GPU).
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

    def __post_init__(self) -> None:
        if self.model not in ("skipgram", "cbow"):
            raise ValueError(f"model must be 'skipgram' or 'cbow', got {self.model!r}")
        if self.loss not in ("ns", "hs"):
            raise ValueError(f"loss must be 'ns' or 'hs', got {self.loss!r}")
        for name in ("dim", "window", "epochs", "min_count", "chunk_words", "max_sentence_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.loss == "ns" and self.negative < 1:
            raise ValueError("negative sampling needs negative >= 1")
        if self.sample < 0:
            raise ValueError("sample must be >= 0")
        if self.device not in ("cpu", "torch") and not self.device.startswith("cuda"):
            raise ValueError(f"device must be 'cpu', 'torch' or 'cuda[:N]', got {self.device!r}")

    @property
    def start_alpha(self) -> float:
        return self.alpha if self.alpha is not None else (0.025 if self.model == "skipgram" else 0.05)

    @property
    def end_alpha(self) -> float:
        return self.min_alpha if self.min_alpha is not None else self.start_alpha * 1e-4


# ----------------------------------------------------------------------------- tables


def chunk_starts(sentences: np.ndarray, chunk_words: int) -> np.ndarray:
    """int64 [C+1] sentence indices cutting the corpus into chunks of about ``chunk_words`` words."""
    n_words = int(sentences[-1])
    n_sent = sentences.shape[0] - 1
    targets = np.arange(0, n_words, chunk_words, dtype=np.int64)
    starts = np.unique(np.searchsorted(sentences[:-1], targets, side="left"))
    starts = starts[starts < n_sent]
    if starts.size == 0 or starts[0] != 0:
        starts = np.concatenate([[0], starts])
    return np.concatenate([starts, [n_sent]]).astype(np.int64)


def n_threads(workers: int) -> int:
    """Training threads: ``workers``, or (0) one per core."""
    return max(1, workers if workers > 0 else (os.cpu_count() or 1))


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
    cfg = _as_config(cfg)
    out_dir = _check_out(out)
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
        from ptmkit.static.word2vec_torch import train_on_ids_torch

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
    stats = run_epochs(
        lambda epoch, chunk, s0, s1, alpha0, alpha1, before, total: train_w2v_chunk(
            syn0, syn1, syn1neg, corpus.ids, corpus.sentences, s0, s1,
            keep, table, codes, points, lengths, tab,
            cfg.model == "skipgram", hs, negative, cfg.window, cfg.cbow_mean,
            alpha0, alpha1, before, total, cfg.seed, epoch, chunk,
        ),  # fmt: skip
        corpus, cfg, progress, desc=f"word2vec {cfg.model}-{cfg.loss}",
    )
    return syn0, stats


def run_epochs(step, corpus: IdCorpus, cfg, progress: bool, desc: str) -> dict:
    """Train every chunk of every epoch with ``cfg.workers`` threads; returns timing stats.

    ``step(epoch, chunk, first_sentence, end_sentence, alpha0, min_alpha, words_before, words_all)``
    trains one chunk (a compiled kernel that releases the GIL) and returns the words it kept.
    The threads pull (epoch, chunk) jobs in order from one shared queue, as gensim's workers do:
    a thread delayed by other load on the machine just takes fewer chunks, nobody waits for it.
    """
    threads = n_threads(cfg.workers)
    starts = chunk_starts(corpus.sentences, cfg.chunk_words)
    n_chunks = starts.shape[0] - 1
    chunk_words = np.diff(corpus.sentences[starts])
    words_all = float(corpus.n_words) * cfg.epochs
    jobs = itertools.product(range(cfg.epochs), range(n_chunks))  # (epoch, chunk), epoch-major
    lock = threading.Lock()
    done = {"words": 0, "kept": 0}
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    job = next(jobs, None)
                if job is None:
                    return
                epoch, c = job
                kept = step(epoch, c, starts[c], starts[c + 1], cfg.start_alpha, cfg.end_alpha,
                            float(epoch * corpus.n_words), words_all)  # fmt: skip
                with lock:
                    done["words"] += int(chunk_words[c])
                    done["kept"] += int(kept)
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)
            stop.set()

    t0 = time.perf_counter()
    bar = tqdm(total=int(words_all), unit="w", unit_scale=True, desc=desc, disable=not progress, smoothing=0.1)
    pool = [threading.Thread(target=worker, name=f"{desc} {i}", daemon=True) for i in range(threads)]
    shown = 0
    try:
        for t in pool:
            t.start()
        for t in pool:
            while t.is_alive():
                t.join(timeout=0.25)
                if progress:  # the bar is drawn from this thread only
                    now = done["words"]
                    bar.update(now - shown)
                    shown = now
                    frac = now / words_all
                    bar.set_postfix(alpha=f"{cfg.start_alpha - (cfg.start_alpha - cfg.end_alpha) * frac:.5f}", refresh=False)
    finally:  # on an error or Ctrl-C the workers stop after their current chunk
        stop.set()
        for t in pool:
            t.join()
        bar.close()
    if errors:
        raise errors[0]
    seconds = time.perf_counter() - t0
    stats = {
        "words": int(words_all),
        "effective_words": done["kept"],
        "seconds": seconds,
        "words_per_second": words_all / max(seconds, 1e-9),
        "threads": threads,
    }
    log.info("%s: %d words in %.1f s (%.0f words/s)", desc, stats["words"], seconds, stats["words_per_second"])
    return stats


# ----------------------------------------------------------------------------- output


def _as_config(cfg) -> Word2VecConfig:
    if cfg is None:
        return Word2VecConfig()
    if isinstance(cfg, dict):
        return from_dict(Word2VecConfig, cfg)
    return cfg


def _check_out(out: str | os.PathLike | None) -> Path | None:
    if out is None:
        return None
    out = Path(out)
    if (out / "vectors.bin").exists():
        raise PtmError(f"{out} already holds trained vectors (vectors.bin); choose another output directory")
    if out.exists() and not out.is_dir():
        raise PtmError(f"output {out} exists and is not a directory")
    return out


def save_run(out_dir: Path, wv: WordVectors, config: dict, stats: dict) -> None:
    """Write vectors.bin, vocab.txt, config.json into ``out_dir`` (each file atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wv.save(out_dir / "vectors.bin", format="word2vec-binary")
    _write_atomic(out_dir / "config.json", json.dumps({**config, "stats": stats}, indent=2) + "\n")
    counts = wv.counts if wv.counts is not None else np.zeros(len(wv), dtype=np.int64)
    _write_atomic(out_dir / "vocab.txt", "".join(f"{w} {int(c)}\n" for w, c in zip(wv.words, counts)))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@register("static", "word2vec")
class Word2Vec:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress)``."""

    config_class = Word2VecConfig
    train = staticmethod(train_word2vec)


__all__ = ["Word2Vec", "Word2VecConfig", "train_word2vec"]
