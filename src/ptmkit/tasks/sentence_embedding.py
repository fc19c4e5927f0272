"""Sentence embeddings trained contrastively: SimCSE (Gao, Yao & Chen 2021) with the InfoNCE loss.

Data: three files (JSONL, CSV or TSV) with a ``text`` and a ``text_pair`` column (a positive
pair: a paraphrase, the same verse in another translation, an entailed hypothesis) and an optional
``negative`` column (a hard negative of the row's text).  With ``--label-column`` (a built-in
recipe's ``label``) only the rows labelled 1 are pairs; the others are left out.

Training (:class:`SentenceEncoder`): every sentence is encoded on its own (``[CLS] s [SEP]``) and
pooled into one vector; a batch of ``B`` rows gives ``B`` queries (the texts) and ``B`` keys (their
positives), ``B`` more keys with a ``negative`` column; the loss is
:func:`~ptmkit.nn.info_nce.info_nce` over the ``[B, B]`` (or ``[B, 2B]``) cosine similarities
divided by ``temperature`` (SimCSE's 0.05): each text must pick its own positive among the batch's
(supervised SimCSE, eq. 5).  ``unsupervised=true`` is the paper's unsupervised SimCSE (eq. 1):
every distinct sentence of the training split (its ``text`` and ``text_pair`` columns, and
``negative`` if any; the pairing unused, ``text_pair`` optional) is paired with *itself*, the two
views passed through the encoder in one batch with independent dropout masks: dropout is the only
noise, so an encoder without dropout sees identical views.

Pooling (the shared ``pooling`` setting): ``mean`` (the default, ``auto``) averages the top layer's
states over the real tokens; ``cls`` reads the first token's state with an MLP on top during
training (SimCSE's ``Linear + tanh``, new weights) that is dropped at evaluation, as the paper's
unsupervised models are used; ``last`` (a left-to-right model) the last real token's state.  Mean
pooling is the default because it needs no extra layer, so the trained encoder alone *is* the
sentence encoder, and because sentence-transformers models such as all-MiniLM-L6-v2 were trained
with it: fine-tuning keeps the space they were built in.  Either way what is scored on dev and test
is the encoder's pooled vector, exactly what ``ptm encode RUN --pooling P`` writes (the paper keeps
the MLP at test time for its supervised models; here it is dropped for both, so the run's encoder
is all a user needs).

Dev / test (:mod:`ptmkit.tasks.retrieval`): each ``text`` retrieves its ``text_pair`` among all
distinct ``text_pair`` strings of the split by cosine similarity: ``mrr`` (the default ``select``),
``recall_at_1``, ``recall_at_10``.

``ptm predict`` on a trained run: a row with ``text`` gets its ``vector``; a row with ``text`` and
``text_pair`` gets their ``cosine``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.data.tasks import TaskSplits, read_numbered_rows
from ptmkit.errors import PtmError, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.nn.info_nce import TEMPERATURE, cosine_logits, info_nce
from ptmkit.nn.pooling import pool
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.batches import ShuffledBatches, by_length
from ptmkit.tasks.classification import collate, encode_inputs, token_ids
from ptmkit.tasks.inputs import ENCODER_KEYS, EncodedInputs
from ptmkit.tasks.retrieval import cosine_retrieval, retrieval_scores, unit
from ptmkit.train.step import StepOutput, input_tokens

VIEWS = ("", "positive_", "negative_")  # batch key prefixes: the queries, their positives, hard negatives
POSITIVE_LABELS = {"1", "true", "yes"}

# ------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PairSplit:
    """``texts[N]``, their positives ``text_pairs[N]`` (``None``: a file without them, usable for
    unsupervised training only) and optional hard ``negatives[N]``."""

    texts: list[str]
    text_pairs: list[str] | None = None
    negatives: list[str] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: np.ndarray) -> PairSplit:
        idx = [int(i) for i in index]
        pick = lambda items: None if items is None else [items[i] for i in idx]  # noqa: E731
        return PairSplit(pick(self.texts), pick(self.text_pairs), pick(self.negatives))


@dataclass(frozen=True)
class SentenceEmbeddingData(TaskSplits):
    """Three :class:`PairSplit`; ``meta["columns"]`` names the training file's columns (for the
    refusal of supervised training without positives)."""

    name: str
    train: PairSplit
    dev: PairSplit
    test: PairSplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "sentence_embedding"
    label_names = ()
    is_pair = False  # every sentence is encoded on its own


def _is_positive(value: Any) -> bool:
    return str(value).strip().lower() in POSITIVE_LABELS or (isinstance(value, (int, float)) and value == 1)


def read_pair_split(path: str | Path, text: str = "text", text_pair: str = "text_pair", negative: str | None = None,
                    label: str | None = None, need_pairs: bool = True) -> PairSplit:
    """One split; ``need_pairs``: a missing ``text_pair`` column is an error (dev and test are scored
    on the pairs), else the split has none.  Every refusal names the file (and line)."""
    rows = read_numbered_rows(path)
    have = list(rows[0][1])
    wanted = [text, *([negative] if negative else []), *([label] if label else []), *([text_pair] if need_pairs else [])]
    for column in wanted:
        if column not in have:
            raise PtmError(f"{path}: no {column!r} column{suggest(column, have)}; its columns: {', '.join(have)}")
    if label:
        rows = [(n, r) for n, r in rows if _is_positive(r.get(label))]
        if not rows:
            raise PtmError(f"{path}: no row has {label}=1 (a positive pair)")
    columns = [text, *([text_pair] if text_pair in have else []), *([negative] if negative else [])]
    values: dict[str, list[str]] = {c: [] for c in columns}
    for n, row in rows:
        for c in columns:
            v = row.get(c)
            if v is None or not str(v).strip():
                raise PtmError(f"{path}:{n}: the {c!r} column is missing or empty")
            values[c].append(str(v))
    return PairSplit(values[text], values.get(text_pair), values[negative] if negative else None)


def load_pair_files(train: str | Path, dev: str | Path, test: str | Path, name: str | None = None, text: str = "text",
                    text_pair: str = "text_pair", negative: str | None = None,
                    label: str | None = None) -> SentenceEmbeddingData:
    splits = [read_pair_split(p, text, text_pair, negative, label, need_pairs=i > 0)
              for i, p in enumerate((train, dev, test))]
    meta = {"files": [str(train), str(dev), str(test)], "text_pair_column": text_pair,
            "columns": list(read_numbered_rows(train)[0][1]) if splits[0].text_pairs is None else []}
    return SentenceEmbeddingData(name or Path(train).stem, *splits, meta=meta)


# --------------------------------------------------------------------------------------- encoding


@dataclass
class EncodedSentences:
    """Each distinct sentence of a split once (``inputs``, ``[CLS] s [SEP]``) and, per item, the row
    of its query, of its positive and (optional) of its hard negative in ``inputs``."""

    inputs: EncodedInputs
    queries: np.ndarray  # [N] int64
    positives: np.ndarray | None  # [N] int64
    negatives: np.ndarray | None  # [N] int64

    def __len__(self) -> int:
        return len(self.queries)


def encode_sentences(groups: list[list[str] | None], tokenizer: Any, max_len: int, causal: bool) -> EncodedSentences:
    """The distinct sentences of ``groups`` ([queries, positives, negatives], each ``None`` or ``[N]``
    texts) encoded once; the groups as rows of them."""
    index: dict[str, int] = {}
    for texts in groups:
        for t in texts or ():
            index.setdefault(t, len(index))
    sentences = list(index)
    inputs = encode_inputs(token_ids(tokenizer, sentences), None, max_len, tokenizer.cls_id, tokenizer.sep_id, causal)
    rows = [None if texts is None else np.array([index[t] for t in texts], dtype=np.int64) for texts in groups]
    return EncodedSentences(inputs, *rows)


def collate_views(enc: EncodedSentences, items: np.ndarray, pad_id: int, with_types: bool) -> dict[str, torch.Tensor]:
    """A training batch of ``B`` items: the queries' ``input_ids`` / ``attention_mask`` (/
    ``token_type_ids``) ``[B, T]``, the same keys prefixed ``positive_`` and, with hard negatives,
    ``negative_`` — all padded to one length ``T``, so the model reads them in one pass."""
    groups = [g[items] for g in (enc.queries, enc.positives, enc.negatives) if g is not None]
    batch = collate(enc.inputs, np.concatenate(groups), pad_id, with_token_types=with_types)
    n = len(items)
    return {prefix + k: v[i * n : (i + 1) * n] for i, prefix in enumerate(VIEWS[: len(groups)]) for k, v in batch.items()}


# ------------------------------------------------------------------------------------------ model


class SentenceEncoder(nn.Module):
    """An encoder, its pooling and (``cls`` pooling) SimCSE's training-time MLP; :meth:`forward`
    is the InfoNCE loss of a :func:`collate_views` batch, :meth:`embed` the sentence vectors."""

    def __init__(self, backbone: nn.Module, pooling: str = "mean", temperature: float = TEMPERATURE,
                 causal: bool = False) -> None:
        super().__init__()
        self.backbone, self.pooling, self.temperature, self.causal = backbone, pooling, float(temperature), causal
        if pooling == "cls":
            width = backbone.output_size
            self.mlp = nn.Sequential(nn.Linear(width, width), nn.Tanh())
            with torch.no_grad():  # BERT's initialisation for a new layer
                self.mlp[0].weight.normal_(0.0, getattr(backbone.config, "init_std", 0.02))
                self.mlp[0].bias.zero_()

    def embed(self, batch: dict[str, torch.Tensor], prefix: str = "") -> torch.Tensor:
        """Sentence vectors ``[B, H]`` of the inputs under ``prefix`` (the top layer pooled; no MLP)."""
        ids = batch[prefix + "input_ids"]
        extra = {k: batch[prefix + k] for k in ENCODER_KEYS if prefix + k in batch}
        hidden = self.backbone(ids, **extra, causal=self.causal).last_hidden_state  # [B, T, H]
        return pool(hidden, batch[prefix + "attention_mask"], self.pooling)

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """InfoNCE of the queries against their positives (and the hard negatives); the views pass
        through the encoder as one ``[V B, T]`` batch (independent dropout masks).  Metric:
        ``accuracy``, the share of queries whose nearest key is their positive."""
        views = [p for p in VIEWS if p + "input_ids" in batch]
        names = ["input_ids", *(k for k in ENCODER_KEYS if k in batch)]
        merged = {k: torch.cat([batch[p + k] for p in views]) for k in names}  # [V B, T]
        vectors = self.embed(merged)  # [V B, H]
        if self.pooling == "cls":
            vectors = self.mlp(vectors)
        n = batch["input_ids"].shape[0]
        queries, keys = vectors[:n], vectors[n:]  # [B, H], [(V - 1) B, H]: positives, then hard negatives
        loss = info_nce(queries, keys, self.temperature)
        with torch.no_grad():
            hit = cosine_logits(queries, keys, self.temperature).argmax(dim=-1) == torch.arange(n, device=vectors.device)
        return StepOutput(loss=loss, metrics={"accuracy": hit.float().mean()}, n_tokens=input_tokens(merged),
                          n_predictions=n)


@dataclass
class SentenceVectors:
    """The vectors ``[S, H]`` (float32) of a split's distinct sentences and the split's rows of them."""

    vectors: np.ndarray
    queries: np.ndarray
    positives: np.ndarray | None

    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct positives (rows of :attr:`vectors`) ``[C]`` and each query's gold candidate ``[N]``."""
        rows, gold = np.unique(self.positives, return_inverse=True)
        return rows, gold.reshape(-1)


@torch.no_grad()
def embed_inputs(model: SentenceEncoder, inputs: EncodedInputs, pad_id: int, batch_size: int, with_types: bool,
                 device: Any = "cpu") -> np.ndarray:
    """``[N, H]`` float32 vectors of the encoded sentences, in their order (leaves ``model`` in eval mode)."""
    model.eval()
    out = np.zeros((len(inputs), model.backbone.output_size), dtype=np.float32)
    rows = lambda index: collate(inputs, index, pad_id, with_token_types=with_types)  # noqa: E731
    for index, batch in by_length(inputs.lengths, batch_size, rows, device):
        out[index] = model.embed(batch).float().cpu().numpy()
    return out


# ------------------------------------------------------------------------------------ the task type


@dataclass(frozen=True)
class SentenceEmbeddingOptions:
    """unsupervised: SimCSE without pairs (each sentence its own positive, dropout the noise).
    temperature: τ of the InfoNCE loss (SimCSE: 0.05)."""

    unsupervised: bool = False
    temperature: float = TEMPERATURE

    def __post_init__(self) -> None:
        if not isinstance(self.unsupervised, bool):
            raise PtmError(f"unsupervised must be true or false, got {self.unsupervised!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise PtmError(f"temperature must be a positive number (SimCSE: 0.05), got {t!r}")


@register("task_type", "sentence_embedding")
class SentenceEmbedding(TaskType):
    """Contrastive sentence embeddings (SimCSE), scored by retrieving each text's pair."""

    name = "sentence_embedding"
    options_class = SentenceEmbeddingOptions
    metrics = ("mrr", "recall_at_1", "recall_at_10")
    columns = {"text": "text", "text_pair": "text_pair", "negative": None, "label": None}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c = self.cfg
        for name in ("aux_lm_weight", "gpt_transform", "symmetric_pairs"):
            if getattr(c, name):
                raise PtmError(f"{name} does not apply to sentence_embedding fine-tuning; leave it at its default")
        if c.mode == "features":
            raise PtmError("sentence_embedding trains the encoder itself (mode=features would train nothing that is "
                           "kept): use mode=finetune")
        if c.dropout is not None:
            raise PtmError("dropout sets the rate before a classifier, and sentence_embedding has none; its noise is "
                           "the encoder's own dropout: leave dropout unset")
        if c.head != "linear" or c.resolved_mix != "last":
            raise PtmError("head and mix shape a classifier's input; sentence_embedding pools the top layer: leave them "
                           "at their defaults")
        self.pooling = {"auto": "mean"}.get(c.pooling, c.pooling)
        if self.pooling not in ("mean", "cls", "last"):
            raise PtmError(f"pooling={c.pooling} does not give a sentence vector here; use mean (default), cls or last")
        if self.pooling == "cls" and self.causal:
            raise PtmError("pooling=cls reads a [CLS] token in front, which a left-to-right model does not have; use "
                           "last or mean")
        train = getattr(self.data, "train", None)
        if (not self.options.unsupervised and train is not None and len(train) and train.text_pairs is None):
            meta = self.data.meta
            column = meta.get("text_pair_column", "text_pair")
            where = (meta.get("files") or [self.data.name])[0]
            raise PtmError(f"{where}: no {column!r} column (each text's positive); its columns: "
                           f"{', '.join(meta.get('columns', []))}; name it with --pair-column, or train without pairs "
                           f"with unsupervised=true")

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, text: str = "text",
                   text_pair: str = "text_pair", negative: str | None = None,
                   label: str | None = None) -> SentenceEmbeddingData:
        return load_pair_files(train, dev, test, name=name, text=text, text_pair=text_pair, negative=negative,
                               label=label)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        return {"text", "text_pair"} <= fields and "label" not in fields  # with a label: pair classification

    def encode(self, split: str) -> EncodedSentences:
        part = self.data.split(split)
        c = self.cfg
        if split == "train" and self.options.unsupervised:
            every = [t for texts in (part.texts, part.text_pairs, part.negatives) for t in texts or ()]
            unique = list(dict.fromkeys(every))
            return encode_sentences([unique, unique, None], self.tokenizer, c.max_seq_len, self.causal)
        return encode_sentences([part.texts, part.text_pairs, part.negatives], self.tokenizer, c.max_seq_len,
                                self.causal)

    def build(self, backbone: nn.Module) -> SentenceEncoder:
        return SentenceEncoder(backbone, self.pooling, self.options.temperature, self.causal)

    def batches(self, encoded_train: EncodedSentences, seed: int) -> ShuffledBatches:
        pad, types = self.tokenizer.pad_id, self.with_types
        return ShuffledBatches(len(encoded_train), lambda rows: collate_views(encoded_train, rows, pad, types),
                               self.cfg.batch_size, seed)

    def train_size(self, encoded_train: EncodedSentences) -> int:
        return len(encoded_train)  # unsupervised: the distinct sentences

    def predict(self, model: nn.Module, encoded: EncodedSentences, device: Any) -> SentenceVectors:
        vectors = embed_inputs(model, encoded.inputs, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types,
                               device)
        return SentenceVectors(vectors, encoded.queries, encoded.positives)

    def score(self, split: str, predictions: SentenceVectors) -> dict[str, float]:
        if predictions.positives is None:
            raise PtmError(f"the {split} split has no text_pair column to retrieve")
        rows, gold = predictions.candidates()
        v = predictions.vectors
        ranks, _, _ = cosine_retrieval(v[predictions.queries], v[rows], gold)
        return retrieval_scores(ranks)

    def write_predictions(self, path: Path, split: str, predictions: SentenceVectors) -> None:
        """Per row: the text, its pair, the pair's rank among the split's candidates, and the
        candidate retrieved first with its cosine."""
        part = self.data.split(split)
        rows, gold = predictions.candidates()
        v = predictions.vectors
        ranks, best, cos = cosine_retrieval(v[predictions.queries], v[rows], gold)
        candidates = [part.text_pairs[i] for i in np.unique(predictions.positives, return_index=True)[1]]
        lines = (json.dumps({"text": t, "text_pair": p, "rank": int(r), "retrieved": candidates[int(b)],
                             "cosine": round(float(c), 6)}, ensure_ascii=False)
                 for t, p, r, b, c in zip(part.texts, part.text_pairs, ranks, best, cos))
        atomic_write_text(path, "\n".join(lines) + "\n")

    # -- prediction on new rows (ptm predict), and the model ptm encode reads ----------------------
    input_columns = ("text",)
    optional_columns = ("text_pair",)
    line_column = "text"

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> SentenceEmbeddingData:
        texts = [str(r["text"]) for r in rows]
        pairs = [str(r["text_pair"]) for r in rows] if rows and "text_pair" in rows[0] else None
        empty = PairSplit([], None if pairs is None else [])
        return SentenceEmbeddingData(str(info.get("task", "task")), empty, empty, PairSplit(texts, pairs))

    def records(self, predictions: SentenceVectors) -> list[dict[str, Any]]:
        part, v = self.data.test, predictions.vectors
        queries = v[predictions.queries]
        if predictions.positives is None:
            return [{"text": t, "vector": [round(float(x), 6) for x in q]} for t, q in zip(part.texts, queries)]
        cos = (unit(queries) * unit(v[predictions.positives])).sum(axis=1)
        return [{"text": t, "text_pair": p, "cosine": round(float(c), 6)}
                for t, p, c in zip(part.texts, part.text_pairs, cos)]


__all__ = ["EncodedSentences", "PairSplit", "SentenceEmbedding", "SentenceEmbeddingData", "SentenceEmbeddingOptions",
           "SentenceEncoder", "SentenceVectors", "collate_views", "embed_inputs", "encode_sentences", "load_pair_files",
           "read_pair_split"]
