"""Token tagging (POS tagging, named entities, Chinese word segmentation) on any registered encoder.

Words are split into the model's pieces; the word is represented by its *first* piece (BERT's
choice, Devlin et al. 2019, §5.3): only first pieces carry a label, the rest are ignored, and
predictions and scores are per word.  On top of the (mixed) encoder states of the first pieces:
dropout, an optional task network (``mlp``, or a ``bilstm`` over the words: the BiLSTM-CRF tagger
of Huang et al. 2015 when the encoder is frozen), a linear layer to tag scores, and either a
softmax per word or a linear-chain CRF over the sentence (:class:`~ptmkit.tasks.crf.CRF`).

Scores: word accuracy, and for chunk tag sets (``B-``/``I-``/``E-``/``S-`` prefixes, or Chinese
segmentation's ``B``/``M``/``E``/``S``) chunk precision / recall / F1 as CoNLL's ``conlleval``
(:mod:`ptmkit.tasks.span_f1`).  A dev or test tag that the training split lacks cannot be
predicted; such words are counted (``unknown_tags``) and scored as errors, not hidden.

Batches: ``input_ids [B, T]``, ``attention_mask [B, T]``, ``word_pos [B, W]`` (each word's first
piece), ``word_mask [B, W]`` (bool, left-aligned), ``labels [B, W]`` (-100 where there is none).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.data.tasks import SPLITS, TaskSplits
from ptmkit.errors import PtmError, require_file
from ptmkit.fileio import atomic_write_text
from ptmkit.nn.layer_mix import build_mix
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.batches import ShuffledBatches, by_length
from ptmkit.tasks.crf import CRF
from ptmkit.tasks.span_f1 import span_scores
from ptmkit.train.step import StepOutput, input_tokens

log = logging.getLogger(__name__)

HEADS = ("linear", "mlp", "bilstm")
_SEGMENTATION = {"B", "M", "E", "S"}


# ------------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class TaggingSplit:
    """``words[N]`` (lists of strings), ``tags[N]`` (lists of strings, the gold tags)."""

    words: list[list[str]]
    tags: list[list[str]]

    def __len__(self) -> int:
        return len(self.words)

    def subset(self, index: np.ndarray) -> "TaggingSplit":
        idx = [int(i) for i in index]
        return TaggingSplit([self.words[i] for i in idx], [self.tags[i] for i in idx])


@dataclass(frozen=True)
class TaggingData(TaskSplits):
    """A tagging task; ``label_names`` are the training split's tags (sorted)."""

    name: str
    label_names: list[str]
    train: TaggingSplit
    dev: TaggingSplit
    test: TaggingSplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "tagging"

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def chunked(self) -> bool:
        """The tags mark chunks (BIO/BIOES with types, or B/M/E/S segmentation): score chunk F1."""
        names = set(self.label_names)
        return names <= _SEGMENTATION or all(t == "O" or t[:2] in ("B-", "I-", "E-", "S-") for t in names)

    def label_ids(self, split: TaggingSplit) -> list[np.ndarray]:
        """Gold tag indices per sentence, ``IGNORE_INDEX`` for a tag the training split lacks."""
        index = {t: i for i, t in enumerate(self.label_names)}
        return [np.array([index.get(t, IGNORE_INDEX) for t in tags], dtype=np.int64) for tags in split.tags]


def read_tagged(path: str | Path, tokens: str = "tokens", tags: str = "tags") -> TaggingSplit:
    """A tagging file: JSONL (``{"tokens": [...], "tags": [...]}`` per line) or CoNLL style (one
    ``word<TAB>tag`` or ``word tag`` per line, a blank line between sentences, tag last)."""
    path = require_file(path, "tagging file")
    words: list[list[str]] = []
    labels: list[list[str]] = []
    with open(path, encoding="utf-8") as f:
        first = f.readline()
        f.seek(0)
        if first.lstrip().startswith("{"):
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    w, t = row[tokens], row[tags]
                except (ValueError, KeyError, TypeError) as exc:
                    raise PtmError(f"{path}:{n}: expected a JSON object with {tokens!r} and {tags!r} lists ({exc})") from None
                if len(w) != len(t):
                    raise PtmError(f"{path}:{n}: {len(w)} tokens but {len(t)} tags; every token needs one tag")
                if w:
                    words.append([str(x) for x in w])
                    labels.append([str(x) for x in t])
        else:
            sent_w: list[str] = []
            sent_t: list[str] = []
            for n, line in enumerate(list(f) + [""], 1):
                cols = line.split()
                if not cols:
                    if sent_w:
                        words.append(sent_w)
                        labels.append(sent_t)
                    sent_w, sent_t = [], []
                    continue
                if len(cols) < 2:
                    raise PtmError(f"{path}:{n}: expected 'word tag', got {line.strip()!r} (a token without a tag)")
                sent_w.append(cols[0])
                sent_t.append(cols[-1])
    if not words:
        raise PtmError(f"{path} holds no tagged sentence (an empty split)")
    return TaggingSplit(words, labels)


def load_tagging_files(train: str | Path, dev: str | Path, test: str | Path, tokens: str = "tokens",
                       tags: str = "tags", name: str | None = None) -> TaggingData:
    """Three tagging files -> :class:`TaggingData` (the tag set is the training split's)."""
    splits = {s: read_tagged(p, tokens, tags) for s, p in zip(SPLITS, (train, dev, test))}
    label_names = sorted({t for sent in splits["train"].tags for t in sent})
    if len(label_names) < 2:
        raise PtmError(f"{train}: the training split has a single tag ({label_names[0]!r}); need at least two")
    known = set(label_names)
    unknown = {s: Counter(t for sent in splits[s].tags for t in sent if t not in known) for s in ("dev", "test")}
    for s, counts in unknown.items():
        if counts:
            log.warning("%s: %d %s words carry tags the training split lacks (%s); they count as errors",
                        name or Path(train).stem, sum(counts.values()), s, ", ".join(sorted(counts)[:8]))
    return TaggingData(name or Path(train).stem, label_names, splits["train"], splits["dev"], splits["test"],
                       meta={"files": [str(train), str(dev), str(test)],
                             "unknown_tags": {s: dict(c) for s, c in unknown.items()}})


# --------------------------------------------------------------------------------------- encoding


@dataclass
class EncodedWords:
    """Per sentence: piece ids with the family's special tokens, each word's first-piece position
    (``-1`` for a word cut off by ``max_len``) and the gold tag ids."""

    ids: list[np.ndarray]
    word_pos: list[np.ndarray]
    labels: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))


def encode_words(words: list[list[str]], labels: list[np.ndarray], tokenizer: Any, max_len: int,
                 causal: bool) -> EncodedWords:
    """Split every word into pieces (one ``encode_batch`` over all words), add ``[CLS]`` (not for a
    causal model) and ``[SEP]``, and truncate to ``max_len`` pieces; a word that yields no piece
    is read as ``[UNK]``."""
    flat = [w for sent in words for w in sent]
    pieces = tokenizer.encode_batch(flat) if flat else []
    start = 0 if causal else 1
    budget = max_len - start - 1
    if budget < 1:
        raise PtmError(f"max_seq_len={max_len} leaves no room for words after the special tokens")
    head = [] if causal else [tokenizer.cls_id]
    out = EncodedWords([], [], [])
    k = 0
    for sent, gold in zip(words, labels):
        per_word = [list(pieces[k + i]) or [tokenizer.unk_id] for i in range(len(sent))]
        k += len(sent)
        counts = np.fromiter((len(p) for p in per_word), dtype=np.int64, count=len(per_word))
        first = start + np.cumsum(counts) - counts  # [W] position of each first piece
        ids = np.array(head + [t for p in per_word for t in p][:budget] + [tokenizer.sep_id], dtype=np.int64)
        out.ids.append(ids)
        out.word_pos.append(np.where(first < start + budget, first, -1))
        out.labels.append(np.asarray(gold, dtype=np.int64))
    return out


def collate_words(enc: EncodedWords, index: np.ndarray, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch of the sentences ``index`` (see the module docstring for the keys)."""
    T = int(enc.lengths[index].max())
    W = max(1, max(int((enc.word_pos[i] >= 0).sum()) for i in index))
    B = len(index)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    pos = np.zeros((B, W), dtype=np.int64)
    wmask = np.zeros((B, W), dtype=bool)
    labels = np.full((B, W), IGNORE_INDEX, dtype=np.int64)
    for r, i in enumerate(index):
        n = len(enc.ids[i])
        ids[r, :n] = enc.ids[i]
        mask[r, :n] = 1
        kept = enc.word_pos[i] >= 0
        w = int(kept.sum())
        pos[r, :w] = enc.word_pos[i][kept]
        wmask[r, :w] = True
        labels[r, :w] = enc.labels[i][kept]
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "word_pos": torch.from_numpy(pos), "word_mask": torch.from_numpy(wmask), "labels": torch.from_numpy(labels)}


# ------------------------------------------------------------------------------------------ model


class TokenTagger(nn.Module):
    """encoder -> first-piece states ``[B, W, H]`` -> task network -> tag scores ``[B, W, K]``
    -> softmax per word or a CRF.  ``mix``, ``frozen`` and ``dropout`` as in
    :class:`~ptmkit.tasks.classification.SequenceClassifier`; ``head``: ``linear``, ``mlp`` or
    ``bilstm`` (over the words, ``head_hidden`` units per direction); ``crf``: a linear-chain CRF
    on the tag scores (trained by the sentence log-likelihood, decoded by Viterbi)."""

    def __init__(self, backbone: nn.Module, num_labels: int, dropout: float | None = None, causal: bool = False,
                 mix: str = "last", head: str = "linear", head_hidden: int = 128, frozen: bool = False,
                 crf: bool = False) -> None:
        super().__init__()
        if head not in HEADS:
            raise PtmError(f"head must be one of {', '.join(HEADS)}, got {head!r}")
        if num_labels < 2:
            raise PtmError(f"a tagger needs at least 2 tags, got {num_labels}")
        cfg = backbone.config
        self.backbone, self.causal, self.frozen, self.num_labels, self.head_kind = backbone, causal, frozen, num_labels, head
        self.mix = build_mix(mix, backbone)
        self.dropout = nn.Dropout(getattr(cfg, "dropout", 0.1) if dropout is None else dropout)
        width = backbone.output_size
        if head == "bilstm":
            self.lstm = nn.LSTM(width, head_hidden, batch_first=True, bidirectional=True)
            width = 2 * head_hidden
        if head == "mlp":
            self.hidden = nn.Linear(width, head_hidden)
            width = head_hidden
        self.classifier = nn.Linear(width, num_labels)
        std = getattr(cfg, "init_std", 0.02)
        with torch.no_grad():
            for layer in (self.classifier, getattr(self, "hidden", None)):
                if layer is not None:
                    layer.weight.normal_(0.0, std)
                    layer.bias.zero_()
        self.crf = CRF(num_labels) if crf else None
        if frozen:
            self.backbone.requires_grad_(False)

    def train(self, mode: bool = True) -> "TokenTagger":
        super().train(mode)
        if self.frozen:
            self.backbone.eval()
        return self

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Tag scores ``[B, W, K]`` of every word (padding words included)."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            out = self.backbone(batch["input_ids"], attention_mask=batch["attention_mask"], causal=self.causal,
                                output_hidden_states=self.mix is not None)
        hidden = self.mix(out.hidden_states) if self.mix is not None else out.last_hidden_state  # [B, T, H]
        pos = batch["word_pos"]
        words = hidden.gather(1, pos.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))  # [B, W, H]
        x = self.dropout(words)
        if self.head_kind == "bilstm":
            lengths = batch["word_mask"].sum(1).clamp(min=1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            x, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=words.shape[1])
            x = self.dropout(x)
        elif self.head_kind == "mlp":
            x = self.dropout(torch.relu(self.hidden(x)))
        return self.classifier(x)

    def loss(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean negative log-likelihood per word (softmax) or per sentence / its words (CRF)."""
        labels, wmask = batch["labels"], batch["word_mask"]
        if self.crf is None:
            return F.cross_entropy(scores.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        nll = -self.crf.log_likelihood(scores.float(), labels.clamp(min=0), wmask)  # [B]
        return nll.sum() / wmask.sum().clamp(min=1)

    def decode(self, scores: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Predicted tag ids ``[B, W]`` (-1 at padding)."""
        if self.crf is not None:
            return self.crf.decode(scores.float(), word_mask)
        return scores.argmax(-1).masked_fill(~word_mask, -1)

    def distillation_logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores [N, K], labels [N])`` of the ``N`` real words of the batch, row by row (each
        sentence's words in the same order whatever it is batched with): what a distilled student
        matches (:mod:`ptmkit.compress.distil`)."""
        real = batch["word_mask"]
        return self.emissions(batch)[real], batch["labels"][real]

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        scores = self.emissions(batch)
        loss = self.loss(scores, batch)
        real = batch["labels"] != IGNORE_INDEX
        pred = scores.detach().argmax(-1)
        acc = (pred[real] == batch["labels"][real]).float().mean() if bool(real.any()) else scores.new_zeros(())
        return StepOutput(loss=loss, metrics={"accuracy": acc.detach()}, n_tokens=input_tokens(batch),
                          n_predictions=int(real.sum()))


# ------------------------------------------------------------------------------------ evaluation


@torch.no_grad()
def predict_tags(model: TokenTagger, enc: EncodedWords, pad_id: int, batch_size: int, fallback: int,
                 device: torch.device | str = "cpu") -> tuple[list[np.ndarray], float]:
    """Predicted tag ids per sentence (words cut off by ``max_seq_len`` get ``fallback``, the most
    frequent training tag) and the mean loss over the scorable words."""
    model.eval()
    preds: list[np.ndarray] = [np.full(len(p), fallback, dtype=np.int64) for p in enc.word_pos]
    total, weight = 0.0, 0
    for index, batch in by_length(enc.lengths, batch_size, lambda rows: collate_words(enc, rows, pad_id), device):
        scores = model.emissions(batch)
        # the loss (a diagnostic; selection uses accuracy or F1 by default) over the sentences
        # whose gold tags are all known: the CRF scores whole sentences
        full = ((batch["labels"] != IGNORE_INDEX) | ~batch["word_mask"]).all(1)
        if bool(full.any()):
            n = int(batch["word_mask"][full].sum())
            total += float(model.loss(scores[full], {k: v[full] for k, v in batch.items()})) * n
            weight += n
        decoded = model.decode(scores, batch["word_mask"]).cpu().numpy()
        for r, i in enumerate(index):
            kept = np.flatnonzero(enc.word_pos[i] >= 0)
            preds[i][kept] = decoded[r, : len(kept)]
    return preds, total / max(weight, 1)


def score_tags(data: TaggingData, split: TaggingSplit, preds: list[np.ndarray]) -> dict[str, float]:
    """Word accuracy (``unknown_tags``: words whose gold tag the training split lacks, scored as
    errors), and chunk precision / recall / F1 for chunk tag sets."""
    names = data.label_names
    pred_tags = [[names[int(i)] for i in p] for p in preds]
    n = sum(len(t) for t in split.tags)
    correct = sum(int(a == b) for gold, pred in zip(split.tags, pred_tags) for a, b in zip(gold, pred))
    known = set(names)
    unknown = sum(int(t not in known) for gold in split.tags for t in gold)
    # words whose gold tag the training split lacks: unpredictable, so scored as errors and counted here
    out = {"accuracy": correct / max(n, 1), "words": float(n), "unknown_tags": float(unknown)}
    if data.chunked:
        to_chunks = _segmentation_chunks if set(names) <= _SEGMENTATION else (lambda tags: tags)
        s = span_scores([to_chunks(t) for t in split.tags], [to_chunks(t) for t in pred_tags])
        out.update(precision=s.precision, recall=s.recall, f1=s.f1)
    return out


def _segmentation_chunks(tags: list[str]) -> list[str]:
    """B/M/E/S segmentation tags as typed chunk tags (one type ``W``: a word)."""
    return [{"B": "B-W", "M": "I-W", "E": "E-W", "S": "S-W"}[t] if t in _SEGMENTATION else "O" for t in tags]


def write_tag_predictions(path: Path, data: TaggingData, split: TaggingSplit, preds: list[np.ndarray]) -> None:
    rows = (json.dumps({"tokens": w, "tags": t, "predicted": [data.label_names[int(i)] for i in p]}, ensure_ascii=False)
            for w, t, p in zip(split.words, split.tags, preds))
    atomic_write_text(path, "\n".join(rows) + "\n")


@dataclass(frozen=True)
class TaggingOptions:
    """crf: a linear-chain CRF over the tag scores (trained by the sentence log-likelihood,
    decoded by Viterbi) instead of a softmax per word."""

    crf: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.crf, bool):
            raise PtmError(f"crf must be true or false, got {self.crf!r}")


@register("task_type", "tagging")
class Tagging(TaskType):
    """Token tagging with a softmax or a CRF; ``f1`` is chunk F1 (conlleval)."""

    name = "tagging"
    options_class = TaggingOptions
    metrics = ("accuracy", "f1", "loss")
    columns = {"tokens": "tokens", "tags": "tags"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.cfg.select == "f1" and not self.data.chunked:
            raise PtmError(f"select=f1 is chunk F1, but the tags of {self.data.name} do not mark chunks; use select=accuracy")
        if self.cfg.aux_lm_weight > 0:
            raise PtmError("aux_lm_weight applies to classification; set aux_lm_weight=0 for tagging")
        if self.cfg.gpt_transform:
            raise PtmError("gpt_transform frames whole sequences for one prediction; tagging predicts every word: "
                           "set gpt_transform=false")
        # predicted for words cut off by max_seq_len: the most frequent training tag (without a
        # training split, a saved model's prediction data: the first tag)
        ids = self.data.label_ids(self.data.train)
        counts = np.bincount(np.concatenate(ids), minlength=self.data.num_labels) if ids else np.zeros(1, np.int64)
        self.fallback = int(counts.argmax())

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, tokens: str = "tokens",
                   tags: str = "tags") -> TaggingData:
        return load_tagging_files(train, dev, test, tokens=tokens, tags=tags, name=name)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        return {"tokens", "tags"} <= fields

    def encode(self, split: str) -> EncodedWords:
        part = self.data.split(split)
        return encode_words(part.words, self.data.label_ids(part), self.tokenizer, self.cfg.max_seq_len, self.causal)

    def build(self, backbone: nn.Module) -> TokenTagger:
        c = self.cfg
        return TokenTagger(backbone, self.data.num_labels, dropout=c.dropout, causal=self.causal, mix=c.resolved_mix,
                           head=c.head, head_hidden=c.head_hidden, frozen=c.mode == "features", crf=self.options.crf)

    def batches(self, encoded_train: EncodedWords, seed: int) -> ShuffledBatches:
        pad = self.tokenizer.pad_id
        return ShuffledBatches(len(encoded_train), lambda rows: collate_words(encoded_train, rows, pad),
                               self.cfg.batch_size, seed)

    def predict(self, model: nn.Module, encoded: EncodedWords, device: Any) -> tuple[list[np.ndarray], float]:
        return predict_tags(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.fallback, device)

    def score(self, split: str, predictions: tuple[list[np.ndarray], float]) -> dict[str, float]:
        preds, loss = predictions
        return {**score_tags(self.data, self.data.split(split), preds), "loss": loss}

    def write_predictions(self, path: Path, split: str, predictions: tuple[list[np.ndarray], float]) -> None:
        write_tag_predictions(path, self.data, self.data.split(split), predictions[0])

    # -- prediction on new rows (ptm predict) ----------------------------------------------------
    input_columns = ("tokens",)
    line_column = "tokens"  # a line of a text file: its words, split at white space
    formats = ("jsonl", "conll")

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> TaggingData:
        words = [r["tokens"].split() if isinstance(r["tokens"], str) else [str(w) for w in r["tokens"]] for r in rows]
        empty = TaggingSplit([], [])
        return TaggingData(str(info.get("task", "task")), [str(t) for t in info.get("labels") or []], empty, empty,
                           TaggingSplit(words, [[""] * len(w) for w in words]))  # "": no tag (not scored)

    def records(self, predictions: tuple[list[np.ndarray], float]) -> list[dict[str, Any]]:
        names = self.data.label_names
        return [{"tokens": w, "tags": [names[int(i)] for i in p]} for w, p in zip(self.data.test.words, predictions[0])]

    def format_record(self, record: dict[str, Any], fmt: str) -> str:
        if fmt == "conll":  # word<TAB>tag lines, a blank line after each sentence
            return "".join(f"{w}\t{t}\n" for w, t in zip(record["tokens"], record["tags"])) + "\n"
        return super().format_record(record, fmt)


__all__ = [
    "EncodedWords", "Tagging", "TaggingData", "TaggingOptions", "TaggingSplit", "TokenTagger", "collate_words", "encode_words",
    "load_tagging_files", "predict_tags", "read_tagged", "score_tags", "write_tag_predictions",
]
