"""Multi-label classification: each text (or text pair) has a *set* of labels out of a vocabulary.

Data: three files (JSONL, CSV or TSV) with a ``text`` column (``text_pair`` for pairs) and a
``labels`` column: a JSON list in JSONL (``"labels": ["noun.animal", "noun.food"]``), or in any
format a string of labels joined by the delimiter ``|`` (``noun.animal|noun.food``; another one
with ``--column label_delimiter=;``).  Labels are stripped of surrounding white space; a label given
twice in a row counts once.  The label vocabulary is the training split's labels, sorted.  Refused,
with the file and line: a row without labels (an example that has none needs a label of its own,
``none`` say), and a dev or test label that the training split never has (the model has no output
for it).

Model (:class:`MultiLabelClassifier`): :class:`~ptmkit.tasks.classification.SequenceClassifier`
(the same pooling, mix and heads) with one logit per label, trained by the binary cross-entropy of
each label's sigmoid against the example's multi-hot vector (mean over ``B x K``).  Its buffer
``thresholds [K]`` holds the decision threshold of each label: a label is predicted when its
probability is at least its threshold.

Thresholds: after every epoch the dev split's probabilities set each label's threshold to the one
maximising that label's F1 on dev (:func:`choose_thresholds`); a label that dev never has keeps
0.5.  The thresholds are part of the model's weights, so the selected epoch's model carries the
thresholds chosen with it, and the test split, ``ptm finetune RUN --eval-only`` and ``ptm predict``
use them.  The dev scores are therefore those of thresholds fitted on dev (optimistic); the test
scores are not.

Scores (:func:`multi_label_scores`): ``micro_f1`` (the default ``select``: F1 over all
(example, label) decisions), ``macro_f1`` (the mean of the per-label F1 over the labels that the
split's gold or predicted sets hold; a label neither has is left out) and ``exact_match`` (subset
accuracy: the predicted set is the gold set); ``micro_f1_at_half`` is micro-F1 with every threshold
at 0.5, for comparison.  Per-label thresholds maximise each label's F1, so dev macro-F1 is never
below that at 0.5; micro-F1 usually gains too but is not guaranteed to.

``ptm predict``: a row with ``text`` (and ``text_pair``) gets ``prediction`` (the labels, in
vocabulary order) and ``probabilities`` (every label's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.data.tasks import TaskSplit, TaskSplits, read_numbered_rows
from ptmkit.errors import PtmError, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.registry import register
from ptmkit.tasks.batches import by_length
from ptmkit.tasks.classification import Classification, SequenceClassifier, collate
from ptmkit.tasks.metrics import multi_hot, multi_label_scores, per_label_f1
from ptmkit.train.step import StepOutput, input_tokens

DELIMITER = "|"

# ------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class MultiLabelData(TaskSplits):
    """Three :class:`~ptmkit.data.tasks.TaskSplit` whose ``labels`` are multi-hot ``[N, K]`` (uint8)
    over ``label_names[K]``."""

    name: str
    label_names: list[str]
    train: TaskSplit
    dev: TaskSplit
    test: TaskSplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "multi_label"

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def is_pair(self) -> bool:
        return self.train.text_pairs is not None


def label_set(value: Any, delimiter: str) -> list[str]:
    """The labels of one row's ``labels`` value (a list, or a string joined by ``delimiter``), in
    the order given, each once; empty ones dropped."""
    if isinstance(value, (list, tuple)):
        items = [str(x) for x in value]
    elif isinstance(value, str):
        items = value.split(delimiter)
    else:
        items = [str(value)]
    return list(dict.fromkeys(x.strip() for x in items if x is not None and x.strip()))


def read_label_rows(path: str | Path, text: str = "text", text_pair: str | None = None, label: str = "labels",
                    delimiter: str = DELIMITER) -> tuple[list[str], list[str] | None, list[list[str]], list[int]]:
    """``(texts, text_pairs, label sets, line numbers)`` of one file; a missing column, an empty
    text or a row without labels is refused naming the line."""
    rows = read_numbered_rows(path)
    have = list(rows[0][1])
    for column in (text, *([text_pair] if text_pair else []), label):
        if column not in have:
            raise PtmError(f"{path}: no {column!r} column{suggest(column, have)}; its columns: {', '.join(have)}")
    texts, pairs, sets, lines = [], [] if text_pair else None, [], []
    for n, row in rows:
        for column in (text, *([text_pair] if text_pair else [])):
            if row.get(column) is None or not str(row[column]).strip():
                raise PtmError(f"{path}:{n}: the {column!r} column is missing or empty")
        labels = label_set(row.get(label), delimiter) if row.get(label) is not None else []
        if not labels:
            raise PtmError(f"{path}:{n}: no label in the {label!r} column; every row needs at least one (give an "
                           f"example without any a label of its own, such as none)")
        texts.append(str(row[text]))
        if pairs is not None:
            pairs.append(str(row[text_pair]))
        sets.append(labels)
        lines.append(n)
    return texts, pairs, sets, lines


def load_multi_label_files(train: str | Path, dev: str | Path, test: str | Path, text_column: str = "text",
                           text_pair_column: str | None = None, label_column: str = "labels",
                           delimiter: str = DELIMITER, name: str | None = None) -> MultiLabelData:
    """Three files (JSONL/CSV/TSV) with a text (and pair) column and a column of label sets."""
    if not isinstance(delimiter, str) or not delimiter:
        raise PtmError(f"label_delimiter must be a non-empty string, got {delimiter!r}")
    read = [read_label_rows(p, text_column, text_pair_column, label_column, delimiter) for p in (train, dev, test)]
    names = sorted({x for labels in read[0][2] for x in labels})
    for path, (_, _, sets, lines) in zip((dev, test), read[1:]):
        known = set(names)
        for labels, n in zip(sets, lines):
            unknown = [x for x in labels if x not in known]
            if unknown:
                raise PtmError(f"{path}:{n}: the label {unknown[0]!r} never occurs in the training file {train}, so "
                               f"the model has no output for it; add training examples with it or drop it")
    splits = [TaskSplit(texts, multi_hot(sets, names), pairs) for texts, pairs, sets, _ in read]
    if len(names) < 2:
        raise PtmError(f"{train}: the training file has {len(names)} label ({', '.join(names)}); multi-label "
                       f"classification needs at least 2")
    return MultiLabelData(name or Path(train).stem, names, *splits,
                          meta={"files": [str(train), str(dev), str(test)]})


# ------------------------------------------------------------------------------------------ model


class MultiLabelClassifier(SequenceClassifier):
    """:class:`SequenceClassifier` with ``num_labels`` independent sigmoid outputs and a buffer
    ``thresholds [num_labels]`` (0.5 until chosen on dev)."""

    def __init__(self, backbone: nn.Module, num_labels: int, **classifier_args: Any) -> None:
        super().__init__(backbone, num_labels, **classifier_args)
        self.register_buffer("thresholds", torch.full((num_labels,), 0.5))

    def probabilities(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each label's probability ``[B, K]`` (float64)."""
        return torch.sigmoid(self.logits(batch).double())

    def distillation_logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        raise PtmError("distillation matches a softmax over classes; multi_label models are not distilled")

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """Binary cross-entropy of the logits ``[B, K]`` against ``batch["labels"]`` (multi-hot
        ``[B, K]``), the mean over ``B x K`` (+ ``aux_lm_weight`` x the LM loss of the input text);
        metric: ``exact_match`` at the current thresholds."""
        out, hidden = self._states(batch)
        logits = self._classify(self._add_swapped(batch, self._pool(batch, out, hidden))).float()
        target = batch["labels"].float()
        loss = F.binary_cross_entropy_with_logits(logits, target)
        with torch.no_grad():
            predicted = torch.sigmoid(logits) >= self.thresholds
            exact = (predicted == (target > 0.5)).all(dim=1).float().mean()
        metrics = {"exact_match": exact}
        if self.aux_lm_weight > 0:
            lm = self.lm_loss(batch, out.last_hidden_state)
            metrics.update(task_loss=loss.detach(), lm_loss=lm.detach())
            loss = loss + self.aux_lm_weight * lm
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=int(target.shape[0]))


@dataclass
class MultiLabelPredictions:
    """``probabilities [N, K]`` (float64) and the ``thresholds [K]`` they are decided at."""

    probabilities: np.ndarray
    thresholds: np.ndarray

    @property
    def predicted(self) -> np.ndarray:
        """``[N, K]`` bool: each label's probability at least its threshold."""
        return self.probabilities >= self.thresholds[None, :]


@torch.no_grad()
def predict_probabilities(model: MultiLabelClassifier, inputs: Any, pad_id: int, batch_size: int,
                          with_token_types: bool, device: Any = "cpu") -> MultiLabelPredictions:
    """Every label's probability ``[N, K]`` in the order of ``inputs``, with the model's thresholds
    (leaves ``model`` in eval mode)."""
    model.eval()
    probs = np.zeros((len(inputs), model.num_labels), dtype=np.float64)
    rows = lambda index: collate(inputs, index, pad_id, with_token_types=with_token_types)  # noqa: E731
    for index, batch in by_length(inputs.lengths, batch_size, rows, device):
        probs[index] = model.probabilities(batch).cpu().numpy()
    return MultiLabelPredictions(probs, model.thresholds.detach().double().cpu().numpy())


# ------------------------------------------------------------------------------ thresholds, scores


def choose_thresholds(probs: np.ndarray, gold: np.ndarray, default: float = 0.5) -> np.ndarray:
    """Per label, the threshold ``[K]`` that maximises its F1 on ``probs [N, K]`` against ``gold
    [N, K]`` (0/1), predicting the label where ``probability >= threshold``.

    Every cut between two distinct probabilities is tried (ties are never split); of equal F1 the
    cut predicting fewer examples wins.  The threshold is the midpoint between the lowest
    probability predicted positive and the next lower one (half of it when every example is
    predicted positive), so the chosen predictions on ``probs`` are exactly those scored.  A label
    that ``gold`` never has keeps ``default``."""
    n, k = probs.shape
    out = np.full(k, float(default))
    for j in range(k):
        y = gold[:, j] > 0
        positives = int(y.sum())
        if positives == 0:
            continue
        order = np.argsort(-probs[:, j], kind="stable")
        p, hit = probs[order, j], y[order]
        tp = np.cumsum(hit)  # [N]: true positives when the top i + 1 are predicted
        cuts = np.flatnonzero(np.append(p[:-1] > p[1:], True))  # last index of each run of equal probabilities
        f1 = 2 * tp[cuts] / (cuts + 1 + positives)
        best = cuts[int(np.argmax(f1))]  # argmax: the first (fewest predicted) of equal F1
        below = p[best + 1] if best + 1 < n else 0.0
        out[j] = (p[best] + below) / 2
    return out


# ------------------------------------------------------------------------------------ the task type


@register("task_type", "multi_label")
class MultiLabel(Classification):
    """A set of labels per text or pair: sigmoid outputs, BCE, per-label thresholds chosen on dev."""

    name = "multi_label"
    metrics = ("micro_f1", "macro_f1", "exact_match")
    columns = {"text": "text", "text_pair": None, "label": "labels", "label_delimiter": DELIMITER}

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, text: str = "text",
                   text_pair: str | None = None, label: str = "labels",
                   label_delimiter: str = DELIMITER) -> MultiLabelData:
        return load_multi_label_files(train, dev, test, text_column=text, text_pair_column=text_pair,
                                      label_column=label, delimiter=label_delimiter, name=name)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        return "text" in fields and "labels" in fields and "label" not in fields

    def build(self, backbone: nn.Module) -> MultiLabelClassifier:
        if self.knowledge.knowledge and self.knowledge.knowledge_mode == "kbert":
            refusal = backbone.visible_matrix_refusal()
            if refusal is not None:
                raise PtmError(f"knowledge_mode=kbert: {refusal}; use knowledge_mode=plain (the triples as text) "
                               f"or a Transformer encoder with absolute positions")
        c = self.cfg
        return MultiLabelClassifier(backbone, self.data.num_labels, pooling=c.pooling, dropout=c.dropout,
                                    causal=self.causal, mix=c.resolved_mix, head=c.head, head_hidden=c.head_hidden,
                                    frozen=c.mode == "features", aux_lm_weight=c.aux_lm_weight)

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> MultiLabelPredictions:
        return predict_probabilities(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size,
                                     self.with_types, device)

    def choose_on_dev(self, model: nn.Module, predictions: MultiLabelPredictions) -> MultiLabelPredictions:
        """Each label's threshold from the dev split (:func:`choose_thresholds`), into ``model.thresholds``."""
        chosen = choose_thresholds(predictions.probabilities, self.data.dev.labels)
        with torch.no_grad():
            model.thresholds.copy_(torch.as_tensor(chosen, dtype=model.thresholds.dtype))
        # the thresholds as the model holds them (float32), so the dev scores are the saved model's
        return MultiLabelPredictions(predictions.probabilities, model.thresholds.detach().double().cpu().numpy())

    def score(self, split: str, predictions: MultiLabelPredictions) -> dict[str, float]:
        gold = self.data.split(split).labels
        out = multi_label_scores(gold, predictions.predicted)
        out["micro_f1_at_half"] = multi_label_scores(gold, predictions.probabilities >= 0.5)["micro_f1"]
        return out

    def _rows(self, part: TaskSplit, predictions: MultiLabelPredictions, gold: bool) -> list[dict[str, Any]]:
        names, chosen = self.data.label_names, predictions.predicted
        out = []
        for i, text in enumerate(part.texts):
            row: dict[str, Any] = {"text": text}
            if part.text_pairs is not None:
                row["text_pair"] = part.text_pairs[i]
            if gold:
                row["labels"] = [n for n, y in zip(names, part.labels[i]) if y]
            row["prediction"] = [n for n, y in zip(names, chosen[i]) if y]
            row["probabilities"] = {n: round(float(p), 6) for n, p in zip(names, predictions.probabilities[i])}
            out.append(row)
        return out

    def write_predictions(self, path: Path, split: str, predictions: MultiLabelPredictions) -> None:
        """One JSON line per example: text (and pair), gold ``labels``, ``prediction`` (the labels at
        the thresholds) and every label's probability."""
        rows = self._rows(self.data.split(split), predictions, gold=True)
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

    # -- prediction on new rows (ptm predict) ----------------------------------------------------
    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> MultiLabelData:
        names = [str(x) for x in info.get("labels") or []]
        texts = [str(r["text"]) for r in rows]
        pairs = [str(r["text_pair"]) for r in rows] if rows and "text_pair" in rows[0] else None
        test = TaskSplit(texts, np.zeros((len(texts), len(names)), np.uint8), pairs)
        empty = TaskSplit([], np.zeros((0, len(names)), np.uint8), None if pairs is None else [])
        return MultiLabelData(str(info.get("task", "task")), names, empty, empty, test)

    def records(self, predictions: MultiLabelPredictions) -> list[dict[str, Any]]:
        return self._rows(self.data.test, predictions, gold=False)


__all__ = ["MultiLabel", "MultiLabelClassifier", "MultiLabelData", "MultiLabelPredictions", "choose_thresholds",
           "label_set", "load_multi_label_files", "multi_hot", "multi_label_scores", "per_label_f1",
           "predict_probabilities"]
