"""fastText: word2vec with subword information (Bojanowski et al. 2017).

A word is represented by the mean of its own vector and the vectors of its character n-grams
(n = ``min_n``..``max_n`` over ``<word>``), hashed with FNV-1a into ``bucket`` shared rows, so
out-of-vocabulary words get vectors from their n-grams.  Training is Skip-gram or CBOW with
negative sampling (``loss="ns"``) or hierarchical softmax over the Huffman tree of the word counts
(``loss="hs"``), with subsampling, reduced window and linear learning-rate decay as word2vec, run by
the Hogwild kernel of :mod:`ptmkit.static.kernels.ft`.

Memory: the input matrix is (nwords + bucket) × dim float32 and the output matrix nwords × dim,
i.e. about (2·nwords + bucket)·dim·4 bytes: 0.8 GB for the default 2M buckets at dim 100
(with ``loss="hs"`` the output matrix has the nwords - 1 inner nodes of the tree instead).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmkit.artefacts import load_npy, need, read_json
from ptmkit.config import to_dict
from ptmkit.errors import PtmError
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
from ptmkit.static.huffman import build_huffman
from ptmkit.static.kernels.ft import mean_rows, subword_csr, train_ft_chunk
from ptmkit.static.kernels.w2v import exp_table
from ptmkit.static.output import check_out_dir, require_finite, save_run
from ptmkit.static.sampling import keep_probabilities, negative_table
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import IdCorpus, Vocab, load_corpus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FastTextConfig(AlphaSchedule):
    """Hyper-parameters (word2vec's plus the subword ones; defaults as gensim's FastText).

    loss: "ns" (negative sampling) | "hs" (hierarchical softmax).
    min_n, max_n: character n-gram lengths (max_n < min_n disables subwords); bucket: hash rows.
    hot_rows, sync_words: thread-private copies of the hottest output rows, merged every
    ``sync_words`` words (None: 64 for hs, 1024 for ns); see :class:`Word2VecConfig`.
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
    min_n: int = 3
    max_n: int = 6
    bucket: int = 2_000_000
    lowercase: bool = False
    seed: int = 1
    workers: int = 0
    chunk_words: int = 10_000
    max_sentence_len: int = 10_000
    cache: bool = True
    hot_rows: int = 128
    sync_words: int | None = None

    def __post_init__(self) -> None:
        check_architecture(self.model)
        if self.loss not in ("ns", "hs"):
            raise ValueError(f"loss must be 'ns' or 'hs', got {self.loss!r}")
        check_at_least_one(self, ("dim", "window", "epochs", "min_count", "min_n", "chunk_words"))
        check_hot_rows(self)
        if self.loss == "ns" and self.negative < 1:
            raise ValueError("negative sampling needs negative >= 1")
        if self.bucket < 0:
            raise ValueError("bucket must be >= 0")


def _utf8_table(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of ``<word>`` for each word, concatenated (uint8), and int64 [W+1] offsets."""
    encoded = [f"<{w}>".encode("utf-8") for w in words]
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=starts[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts


def subwords(words: list[str], min_n: int, max_n: int, bucket: int, n_words: int, with_word: bool):
    """CSR (ptr int64 [W+1], idx int32) of input rows per word (own row if ``with_word``, then n-grams)."""
    buf, starts = _utf8_table(words)
    return subword_csr(buf, starts, with_word, min_n, max_n, bucket, n_words)


class FastTextModel:
    """A trained fastText model.

    words [V], counts int64 [V]; emb float32 [V + bucket, D]: rows 0..V-1 are the words' own vectors,
    row V + h % bucket belongs to every n-gram with hash h.
    """

    def __init__(self, words: list[str], counts: np.ndarray, emb: np.ndarray, min_n: int, max_n: int, bucket: int):
        if emb.shape[0] != len(words) + bucket:
            raise PtmError(f"input matrix has {emb.shape[0]} rows, expected {len(words)} words + {bucket} buckets")
        self.words, self.counts, self.emb = list(words), np.asarray(counts, np.int64), emb
        self.min_n, self.max_n, self.bucket = min_n, max_n, bucket
        self.key_to_index = {w: i for i, w in enumerate(self.words)}
        self._wv: WordVectors | None = None

    @property
    def dim(self) -> int:
        return int(self.emb.shape[1])

    @property
    def wv(self) -> WordVectors:
        """Vocabulary words' vectors (mean of own + n-gram rows), computed once."""
        if self._wv is None:
            ptr, idx = subwords(self.words, self.min_n, self.max_n, self.bucket, len(self.words), True)
            self._wv = WordVectors(self.words, mean_rows(self.emb, ptr, idx), self.counts)
        return self._wv

    def word_vector(self, word: str) -> np.ndarray:
        """float32 [D]; an out-of-vocabulary word gets the mean of its n-gram vectors."""
        i = self.key_to_index.get(word)
        if i is not None:
            return self.wv.vectors[i]
        ptr, idx = subwords([word], self.min_n, self.max_n, self.bucket, len(self.words), False)
        if ptr[-1] == 0:
            raise PtmError(
                f"{word!r} is not in the vocabulary and has no character n-grams of length {self.min_n}..{self.max_n}"
            )
        return mean_rows(self.emb, ptr, idx)[0]

    def __getitem__(self, word: str) -> np.ndarray:
        return self.word_vector(word)

    def similarity(self, w1: str, w2: str) -> float:
        a, b = self.word_vector(w1), self.word_vector(w2)
        return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))

    def most_similar(self, word: str, topn: int = 10) -> list[tuple[str, float]]:
        """Vocabulary words closest to ``word`` (which may be out of vocabulary)."""
        q = self.word_vector(word)
        scores = self.wv.normed @ (q / max(float(np.linalg.norm(q)), 1e-12))
        exclude = [self.key_to_index[word]] if word in self.key_to_index else []
        return self.wv._rank(scores, exclude, topn)

    def save(self, directory: str | os.PathLike) -> None:
        """``fasttext.json`` + ``words.txt`` + ``counts.npy`` + ``input.npy`` (+ vectors.bin via save_run)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if (d / "input.npy").exists():
            raise PtmError(f"{d} already holds a fastText model; choose another directory")
        np.save(d / ".input.tmp.npy", self.emb)
        np.save(d / "counts.npy", self.counts)
        (d / "words.txt").write_text("\n".join(self.words) + "\n", encoding="utf-8")
        meta = {"min_n": self.min_n, "max_n": self.max_n, "bucket": self.bucket, "dim": self.dim}
        (d / "fasttext.json").write_text(json.dumps(meta) + "\n")
        os.replace(d / ".input.tmp.npy", d / "input.npy")  # last: its presence marks a complete model

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "FastTextModel":
        """Read a model written by :meth:`save`, checked against ``fasttext.json``: words.txt [V]
        distinct words, counts.npy int64 [V], input.npy float32 [V + bucket, dim]."""
        d = Path(directory)
        if not (d / "input.npy").exists() or not (d / "fasttext.json").exists():
            raise PtmError(f"{d} is not a fastText model directory (input.npy and fasttext.json missing)")
        record = d / "fasttext.json"
        meta = read_json(record, "fastText model record")
        min_n, max_n, bucket = (need(meta, k, int, record) for k in ("min_n", "max_n", "bucket"))
        dim = meta.get("dim")  # absent in the records of older ptmkit versions
        if dim is not None:
            need(meta, "dim", int, record)
        try:
            words = (d / "words.txt").read_text(encoding="utf-8").split("\n")[:-1]
        except (OSError, ValueError) as exc:
            raise PtmError(f"{d / 'words.txt'} cannot be read ({exc}); the model directory is damaged") from None
        if len(set(words)) != len(words):
            raise PtmError(f"{d / 'words.txt'} repeats words; it is damaged")
        counts = load_npy(d / "counts.npy", (len(words),), np.int64, "the counts array", f"{len(words)} words in words.txt")
        emb = load_npy(d / "input.npy", (len(words) + bucket, dim), np.float32, "the input matrix",
                       f"{len(words)} words in words.txt + {bucket} buckets in fasttext.json, dim {dim or 'any'}")
        return cls(words, counts, emb, min_n, max_n, bucket)


def train_fasttext(
    data: object,
    cfg: FastTextConfig | dict | None = None,
    out: str | os.PathLike | None = None,
    progress: bool = True,
) -> FastTextModel:
    """Train fastText on ``data`` (text files or tokenised sentences).

    With ``out``: writes the model (see :meth:`FastTextModel.save`), ``vectors.bin`` and ``config.json``.
    """
    cfg = as_config(FastTextConfig, cfg)
    out_dir = check_out_dir(out)
    vocab, corpus = load_corpus(data, cfg.min_count, cfg.max_vocab, cfg.lowercase, cfg.max_sentence_len, cache=cfg.cache)
    model, stats = train_fasttext_ids(vocab, corpus, cfg, progress)
    if out_dir is not None:
        config = {"model": "fasttext", **to_dict(cfg)}
        v = len(model.words)
        require_finite(model.emb, lambda i: repr(model.words[i]) if i < v else f"subword bucket {i - v}",
                       config, "input rows (words and subword buckets)")  # before model.save writes input.npy
        model.save(out_dir)
        save_run(out_dir, model.wv, config, stats)
    return model


def train_fasttext_ids(vocab: Vocab, corpus: IdCorpus, cfg: FastTextConfig, progress: bool = True):
    v, dim = len(vocab), cfg.dim
    hs = cfg.loss == "hs"
    bucket = cfg.bucket if cfg.max_n >= cfg.min_n else 0
    mem = ((v + bucket) + v) * dim * 4
    log.info(
        "fastText %s-%s: %d words, %d buckets, dim %d: %.0f MiB of parameters",
        cfg.model, cfg.loss, v, bucket, dim, mem / 2**20,
    )  # fmt: skip
    rng = np.random.default_rng(cfg.seed)
    emb = rng.random((v + bucket, dim), dtype=np.float32)
    emb *= 2.0 / dim
    emb -= 1.0 / dim  # uniform(-1/dim, 1/dim) as fastText, in place (no float64 copy of a large matrix)
    if hs:  # inner nodes of the Huffman tree of the counts; the other output matrix is a dummy
        tree = build_huffman(vocab.counts)
        codes, points, lengths = tree.codes, tree.points, tree.lengths
        syn1 = np.zeros((max(v - 1, 1), dim), dtype=np.float32)
        syn1neg = np.zeros((1, dim), dtype=np.float32)
    else:
        codes, points, lengths = np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.int32), np.zeros(1, np.int32)
        syn1 = np.zeros((1, dim), dtype=np.float32)
        syn1neg = np.zeros((v, dim), dtype=np.float32)
    ptr, idx = subwords(vocab.words, cfg.min_n, cfg.max_n, bucket, v, True)
    table = negative_table(vocab.counts, cfg.ns_exponent)
    keep = keep_probabilities(vocab.counts, cfg.sample)
    tab = exp_table()
    hot = cfg.hot_rows if n_threads(cfg.workers) > 1 else 0
    sync = sync_interval(cfg.sync_words, hs)
    stats = run_epochs(
        lambda epoch, chunk, s0, s1, a0, a1, before, total: train_ft_chunk(
            emb, syn1neg, syn1, ptr, idx, corpus.ids, corpus.sentences, s0, s1,
            keep, table, codes, points, lengths, tab, cfg.model == "skipgram", hs, cfg.negative, cfg.window,
            a0, a1, before, total, cfg.seed, epoch, chunk, hot, hot, sync,
        ),  # fmt: skip
        corpus, cfg, progress, desc=f"fastText {cfg.model}-{cfg.loss}",
    )
    return FastTextModel(vocab.words, vocab.counts, emb, cfg.min_n, cfg.max_n, bucket), stats


@register("static", "fasttext")
class FastText:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress)``."""

    config_class = FastTextConfig
    train = staticmethod(train_fasttext)
