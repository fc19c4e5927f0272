"""fastText's supervised text classifier (Joulin et al. 2016, "Bag of Tricks for Efficient Text
Classification").

A linear model: a line's hidden vector is the mean of the embeddings of its words and (with
``word_ngrams`` = n > 1) of its word 2..n-grams hashed into ``bucket`` rows; the output is a softmax
over the labels or a hierarchical softmax over the Huffman tree of the label counts.  Training is
plain SGD, one line at a time in file order (no shuffling, as the fastText tool), with the
learning rate falling linearly from ``lr`` to 0 over ``epochs`` passes, Hogwild over chunks of lines
in ``workers`` threads (:mod:`ptmkit.static.kernels.classify`, :mod:`ptmkit.static.hogwild`).

As the fastText tool: text is split on whitespace (no lowercasing), each line ends with the token
``</s>``, words are kept from ``min_count`` (1) occurrences and sorted by decreasing count, word
hashes are FNV-1a, n-gram hashes chain them as fastText does (an out-of-vocabulary word still enters
its n-grams), the input matrix starts uniform in ±1/dim and the output at zero, and the gradient
w.r.t. the mean is divided among the rows.  There are no hash buckets when ``word_ngrams`` is 1.

Memory: (V + bucket) × dim float32 input rows, 0.8 GB at the default 2M buckets and dim 100.

    clf = train_classifier("train.txt", {"word_ngrams": 2, "epochs": 5})   # or task_lines("mr", "train")
    clf.predict(["a fine film"], k=1)   # [[("1", 0.93)]]
    clf.test(task_lines("mr", "test"))  # {"n": ..., "precision_at_1": ..., "recall_at_1": ...}
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmkit.artefacts import check_shape, load_npy, need, read_json
from ptmkit.config import check_finite, from_dict, to_dict
from ptmkit.errors import PtmError
from ptmkit.static.classify_data import LabelledLines, read_label_file
from ptmkit.static.hogwild import run_epochs
from ptmkit.static.huffman import HuffmanTree, build_huffman
from ptmkit.static.kernels.classify import input_rows, label_log_probs, train_sup_chunk, word_hashes_utf8
from ptmkit.static.kernels.w2v import exp_table

log = logging.getLogger(__name__)

EOS = "</s>"
LOSSES = ("softmax", "hs")


@dataclass(frozen=True)
class ClassifierConfig:
    """Hyper-parameters; defaults are those of ``fasttext supervised``.

    dim (-dim), epochs (-epoch), lr (-lr), word_ngrams (-wordNgrams), bucket (-bucket),
    min_count (-minCount), loss (-loss: "softmax" | "hs"), workers (-thread; 0 = all cores),
    seed: initialisation and label draws; chunk_words: tokens per Hogwild work unit.
    """

    dim: int = 100
    epochs: int = 5
    lr: float = 0.1
    word_ngrams: int = 1
    bucket: int = 2_000_000
    min_count: int = 1
    loss: str = "softmax"
    workers: int = 0
    seed: int = 1
    chunk_words: int = 10_000

    def __post_init__(self) -> None:
        for name in ("dim", "epochs", "word_ngrams", "min_count", "chunk_words"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.bucket < 0:
            raise ValueError("bucket must be >= 0")

    # the interface run_epochs reads (the word2vec family's names)
    @property
    def start_alpha(self) -> float:
        return self.lr

    @property
    def end_alpha(self) -> float:
        return 0.0


@dataclass(frozen=True)
class EncodedLines:
    """A data set as arrays: token offsets of the lines ``line_ptr`` int64 [N+1] (``</s>`` included);
    input rows ``row_ptr`` int64 [N+1] / ``row_idx`` int32 (see :func:`ptmkit.static.kernels.classify.input_rows`);
    labels ``lab_ptr`` int64 [N+1] / ``lab_idx`` int32 (-1: a label the model does not know)."""

    line_ptr: np.ndarray
    row_ptr: np.ndarray
    row_idx: np.ndarray
    lab_ptr: np.ndarray
    lab_idx: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.line_ptr[-1])

    @property
    def n_words(self) -> int:  # run_epochs' corpus interface: progress is counted in tokens
        return self.n_tokens

    @property
    def sentences(self) -> np.ndarray:
        return self.line_ptr


def word_hashes(words: list[str]) -> np.ndarray:
    """uint64 [W]: fastText's 32-bit FNV-1a hash of each word, sign-extended as fastText's int32."""
    encoded = [w.encode("utf-8") for w in words]
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=starts[1:])
    return word_hashes_utf8(np.frombuffer(b"".join(encoded), dtype=np.uint8), starts)


def _tokens(texts: list[str]) -> tuple[list[str], np.ndarray]:
    """All tokens (each line's whitespace-split words, then ``</s>``) and int64 [N+1] line offsets."""
    split = [t.split() + [EOS] for t in texts]
    ptr = np.zeros(len(split) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in split], out=ptr[1:])
    return list(itertools.chain.from_iterable(split)), ptr


def _encode(data: LabelledLines, words: list[str], labels: list[str], bucket: int, word_ngrams: int) -> EncodedLines:
    tokens, line_ptr = _tokens(data.texts)
    types = list(dict.fromkeys(tokens))  # distinct tokens of this data, hashed once each
    type_index = dict(zip(types, range(len(types))))
    tok_type = np.fromiter(map(type_index.__getitem__, tokens), np.int64, len(tokens))
    word_index = dict(zip(words, range(len(words))))
    type_word = np.fromiter(map(word_index.get, types, itertools.repeat(-1)), np.int32, len(types))
    type_hash = word_hashes(types) if bucket > 0 and word_ngrams > 1 else np.zeros(len(types), np.uint64)
    row_ptr, row_idx = input_rows(type_word[tok_type], type_hash[tok_type], line_ptr, len(words), bucket, word_ngrams)
    label_index = dict(zip(labels, range(len(labels))))
    lab_ptr = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(ls) for ls in data.labels], out=lab_ptr[1:])
    flat = list(itertools.chain.from_iterable(data.labels))
    lab_idx = np.fromiter(map(label_index.get, flat, itertools.repeat(-1)), np.int32, len(flat))
    return EncodedLines(line_ptr, row_ptr, row_idx, lab_ptr, lab_idx)


class FastTextClassifier:
    """A trained classifier.

    words [V] and labels [L] (by decreasing count), label_counts int64 [L]; emb float32
    [V + bucket, D]; wo float32 [L, D] (softmax) or [L-1, D] (hs: inner nodes of the label tree).
    """

    def __init__(self, words, labels, label_counts, emb, wo, cfg: ClassifierConfig, bucket: int):
        self.words, self.labels = list(words), list(labels)
        self.label_counts = np.asarray(label_counts, np.int64)
        self.emb, self.wo, self.cfg, self.bucket = emb, wo, cfg, bucket
        self.tree: HuffmanTree | None = build_huffman(self.label_counts) if cfg.loss == "hs" else None
        self.train_stats: dict | None = None  # run_epochs' timing of the training, when trained here

    def encode(self, data: LabelledLines) -> EncodedLines:
        return _encode(data, self.words, self.labels, self.bucket, self.cfg.word_ngrams)

    def log_probs(self, data: LabelledLines | list[str]) -> np.ndarray:
        """float32 [N, L]: log p(label | text) for each line."""
        if not isinstance(data, LabelledLines):
            data = LabelledLines(list(data), [[] for _ in data])
        enc = self.encode(data)
        tree = self.tree or HuffmanTree(np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.int32), np.zeros(1, np.int32))
        return label_log_probs(self.emb, self.wo, enc.row_ptr, enc.row_idx, self.tree is not None,
                               tree.codes, tree.points, tree.lengths, len(self.labels))  # fmt: skip

    def predict(self, texts: LabelledLines | list[str], k: int = 1) -> list[list[tuple[str, float]]]:
        """The ``k`` most probable labels of each text with their probabilities."""
        lp = self.log_probs(texts)
        k = min(k, lp.shape[1])
        top = np.argsort(-lp, axis=1, kind="stable")[:, :k]
        probs = np.exp(np.take_along_axis(lp, top, axis=1))
        return [[(self.labels[j], float(p)) for j, p in zip(row, prow)] for row, prow in zip(top, probs)]

    def test(self, data: LabelledLines | str | os.PathLike, k: int = 1) -> dict:
        """fastText's ``test``: precision and recall at k over the lines, plus accuracy (top-1 in the gold set).

        precision@k = correct labels among the top k / (k × lines); recall@k = correct / gold labels.
        """
        if not isinstance(data, LabelledLines):
            data = read_label_file(data)
        enc = self.encode(data)
        lp = self.log_probs(data)
        k = min(k, lp.shape[1])
        top = np.argsort(-lp, axis=1, kind="stable")[:, :k]
        gold = np.zeros_like(lp, dtype=bool)
        line_of = np.repeat(np.arange(len(data)), np.diff(enc.lab_ptr))
        known = enc.lab_idx >= 0
        gold[line_of[known], enc.lab_idx[known]] = True
        hits = np.take_along_axis(gold, top, axis=1)
        n_gold = int(enc.lab_idx.shape[0])
        return {
            "n": len(data),
            f"precision_at_{k}": float(hits.sum() / max(k * len(data), 1)),
            f"recall_at_{k}": float(hits.sum() / max(n_gold, 1)),
            "accuracy": float(hits[:, 0].mean()) if len(data) else 0.0,
        }

    def save(self, directory: str | os.PathLike) -> None:
        """``classifier.json`` (config, words, labels, counts) + ``input.npy`` + ``output.npy``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if (d / "classifier.json").exists():
            raise PtmError(f"{d} already holds a classifier; choose another directory")
        np.save(d / "input.npy", self.emb)
        np.save(d / "output.npy", self.wo)
        meta = {"config": to_dict(self.cfg), "bucket": self.bucket, "words": self.words, "labels": self.labels,
                "label_counts": self.label_counts.tolist()}  # fmt: skip
        tmp = d / ".classifier.json.tmp"
        tmp.write_text(json.dumps(meta, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, d / "classifier.json")  # last: its presence marks a complete model

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "FastTextClassifier":
        """Read a classifier written by :meth:`save`, every part checked against ``classifier.json``:
        words [V] and labels [L] (distinct strings), label_counts [L], input.npy float32
        [V + bucket, dim], output.npy float32 [L, dim] (softmax) or [L-1, dim] (hs)."""
        d = Path(directory)
        if not (d / "classifier.json").exists():
            raise PtmError(f"{d} is not a fastText classifier directory (classifier.json missing); "
                           f"train one with 'ptm fasttext-classify train'")  # fmt: skip
        record = d / "classifier.json"
        meta = read_json(record, "fastText classifier record")
        try:
            cfg = from_dict(ClassifierConfig, need(meta, "config", dict, record))
        except (PtmError, ValueError, TypeError) as exc:
            raise PtmError(f"{record}: its config cannot be read ({exc}); the file is damaged") from None
        words, labels = need(meta, "words", list, record), need(meta, "labels", list, record)
        label_counts, bucket = need(meta, "label_counts", list, record), need(meta, "bucket", int, record)
        for name, items in (("words", words), ("labels", labels)):
            if not all(isinstance(w, str) for w in items) or len(set(items)) != len(items):
                raise PtmError(f"{record}: {name!r} is not a list of distinct strings; the file is damaged")
        if len(labels) < 2:
            raise PtmError(f"{record}: {len(labels)} label(s), a classifier has at least 2; the file is damaged")
        check_shape(record, "label_counts", (len(label_counts),), (len(labels),), "one count per label")
        if bucket < 0 or bucket not in (0, cfg.bucket):
            raise PtmError(f"{record}: bucket is {bucket}, expected 0 or the config's {cfg.bucket}; the file is damaged")
        emb = load_npy(d / "input.npy", (len(words) + bucket, cfg.dim), np.float32, "the input matrix",
                       f"{len(words)} words + {bucket} buckets and dim {cfg.dim} in classifier.json")
        n_out = len(labels) - 1 if cfg.loss == "hs" else len(labels)
        wo = load_npy(d / "output.npy", (n_out, cfg.dim), np.float32, "the output matrix",
                      f"{n_out} rows for {len(labels)} labels ({cfg.loss}) and dim {cfg.dim} in classifier.json")
        return cls(words, labels, label_counts, emb, wo, cfg, bucket)


def build_dictionary(data: LabelledLines, min_count: int) -> tuple[list[str], list[str], np.ndarray]:
    """(words, labels, label counts): by decreasing count, ties in first-seen order; ``</s>`` is a word."""
    tokens, _ = _tokens(data.texts)
    word_counts = Counter(tokens)
    words = [w for w, c in sorted(word_counts.items(), key=lambda wc: -wc[1]) if c >= min_count]
    label_counts = Counter(itertools.chain.from_iterable(data.labels))
    ranked = sorted(label_counts.items(), key=lambda lc: -lc[1])
    return words, [lab for lab, _ in ranked], np.array([c for _, c in ranked], dtype=np.int64)


def train_classifier(
    data: LabelledLines | str | os.PathLike,
    cfg: ClassifierConfig | dict | None = None,
    progress: bool = False,
) -> FastTextClassifier:
    """Train on ``data`` (a :class:`LabelledLines` or a ``__label__`` file); returns the classifier."""
    if cfg is None:
        cfg = ClassifierConfig()
    elif isinstance(cfg, dict):
        cfg = from_dict(ClassifierConfig, cfg)
    else:
        check_finite(cfg)
    if not isinstance(data, LabelledLines):
        data = read_label_file(data)
    unlabelled = next((i for i, labs in enumerate(data.labels) if not labs), None)
    if unlabelled is not None:
        raise PtmError(f"training example {unlabelled} has no label; every training line needs one")
    words, labels, label_counts = build_dictionary(data, cfg.min_count)
    if len(labels) < 2:
        raise PtmError(f"the training data has {len(labels)} distinct label(s); a classifier needs at least 2")
    bucket = cfg.bucket if cfg.word_ngrams > 1 else 0  # fastText drops the buckets when nothing is hashed
    enc = _encode(data, words, labels, bucket, cfg.word_ngrams)
    v, dim = len(words), cfg.dim
    log.info("fastText classifier: %d lines, %d tokens, %d words, %d labels, %d buckets, dim %d, loss %s",
             len(data), enc.n_tokens, v, len(labels), bucket, dim, cfg.loss)  # fmt: skip
    rng = np.random.default_rng(cfg.seed)
    emb = rng.random((v + bucket, dim), dtype=np.float32)
    emb *= 2.0 / dim
    emb -= 1.0 / dim  # uniform(-1/dim, 1/dim), in place
    hs = cfg.loss == "hs"
    if hs:
        tree = build_huffman(label_counts)
        codes, points, lengths = tree.codes, tree.points, tree.lengths
    else:
        codes, points, lengths = np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.int32), np.zeros(1, np.int32)
    wo = np.zeros((len(labels) - 1 if hs else len(labels), dim), dtype=np.float32)
    tab = exp_table()
    stats = run_epochs(
        lambda epoch, chunk, s0, s1, a0, a1, before, total: train_sup_chunk(
            emb, wo, enc.row_ptr, enc.row_idx, enc.line_ptr, enc.lab_ptr, enc.lab_idx, s0, s1,
            hs, codes, points, lengths, tab, a0, before, total, cfg.seed, epoch, chunk,
        ),  # fmt: skip
        enc, cfg, progress, desc=f"fastText classifier ({cfg.loss})",
    )
    clf = FastTextClassifier(words, labels, label_counts, emb, wo, cfg, bucket)
    clf.train_stats = stats
    return clf


__all__ = ["ClassifierConfig", "FastTextClassifier", "LabelledLines", "build_dictionary", "train_classifier"]
