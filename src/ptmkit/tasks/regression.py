"""Sentence (or pair) regression: a real-valued score per text, e.g. STS-B's similarity or MR's
mean human rating (Devlin et al. 2019 fine-tune STS-B this way).

The model is :class:`~ptmkit.tasks.classification.SequenceClassifier` with one output (same
pooling, mix and task networks), trained by the mean squared error on *standardised* targets
(``(y - mean) / sd`` of the training split, so the output layer's initial scale fits any target
range); predictions are mapped back.  Scores: Pearson's and Spearman's correlation and the MSE.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats
from torch import nn
from torch.nn import functional as F

from ptmkit.data.tasks import TaskSplit, TaskSplits, _column, _texts, read_rows
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.registry import register
from ptmkit.tasks.batches import by_length
from ptmkit.tasks.classification import Classification, SequenceClassifier, collate, unlabelled_split
from ptmkit.train.step import StepOutput, input_tokens


@dataclass(frozen=True)
class RegressionData(TaskSplits):
    """Three :class:`TaskSplit` whose ``labels`` are float targets."""

    name: str
    train: TaskSplit
    dev: TaskSplit
    test: TaskSplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "regression"
    label_names = ["score"]

    @property
    def is_pair(self) -> bool:
        return self.train.text_pairs is not None


def load_regression_files(train: str | Path, dev: str | Path, test: str | Path, text_column: str = "text",
                          text_pair_column: str | None = None, label_column: str = "label",
                          name: str | None = None) -> RegressionData:
    """Three files (JSONL/CSV/TSV) with a text (and pair) column and a numeric target column."""
    splits = []
    for path in (train, dev, test):
        path = Path(path)
        rows = read_rows(path)
        values = []
        for n, v in enumerate(_column(rows, label_column, path), 1):
            try:
                values.append(float(v))
            except (TypeError, ValueError):
                raise PtmError(f"{path}: row {n}: {label_column}={v!r} is not a number (a regression target)") from None
        y = np.asarray(values, dtype=np.float64)
        if not np.isfinite(y).all():
            raise PtmError(f"{path}: {label_column} holds NaN or infinite values")
        pairs = _texts(rows, text_pair_column, path) if text_pair_column else None
        splits.append(TaskSplit(_texts(rows, text_column, path), y, pairs))
    if float(np.std(splits[0].labels)) == 0.0:
        raise PtmError(f"{train}: every training target is {splits[0].labels[0]:g}; nothing to learn")
    return RegressionData(name or Path(train).stem, *splits, meta={"files": [str(train), str(dev), str(test)]})


class Regressor(nn.Module):
    """``SequenceClassifier`` with one output: ``predict = mean + sd * output``."""

    def __init__(self, mean: float, sd: float, **classifier_args: Any) -> None:
        super().__init__()
        self.model = SequenceClassifier(num_labels=1, **classifier_args)
        self.register_buffer("target_mean", torch.tensor(float(mean)))
        self.register_buffer("target_sd", torch.tensor(float(sd)))

    def predict(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Predicted targets ``[B]`` in the data's units."""
        return self.target_mean + self.target_sd * self.model.logits(batch).squeeze(-1).float()

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        out = self.model.logits(batch).squeeze(-1).float()
        z = (batch["labels"].float() - self.target_mean) / self.target_sd
        loss = F.mse_loss(out, z)
        return StepOutput(loss=loss, metrics={"mse_std": loss.detach()}, n_tokens=input_tokens(batch),
                          n_predictions=int(z.shape[0]))


@torch.no_grad()
def predict_values(model: Regressor, inputs: Any, pad_id: int, batch_size: int, with_token_types: bool,
                   device: Any = "cpu") -> np.ndarray:
    model.eval()
    out = np.zeros(len(inputs), dtype=np.float64)
    rows = lambda index: collate(inputs, index, pad_id, with_token_types=with_token_types)  # noqa: E731
    for index, batch in by_length(inputs.lengths, batch_size, rows, device):
        out[index] = model.predict(batch).double().cpu().numpy()
    return out


def score_values(gold: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Pearson's r, Spearman's rho and the mean squared error (constant predictions: r = 0)."""
    constant = float(np.std(pred)) == 0.0
    return {
        "pearson": 0.0 if constant else float(stats.pearsonr(gold, pred)[0]),
        "spearman": 0.0 if constant else float(stats.spearmanr(gold, pred)[0]),
        "mse": float(np.mean((gold - pred) ** 2)),
    }


def write_values(path: Path, split: TaskSplit, pred: np.ndarray) -> None:
    rows = (json.dumps({"text": t, "label": float(y), "prediction": round(float(p), 6)}, ensure_ascii=False)
            for t, y, p in zip(split.texts, split.labels, pred))
    atomic_write_text(path, "\n".join(rows) + "\n")


@register("task_type", "regression")
class Regression(Classification):
    """One real-valued score per text or pair (standardised targets, Pearson / Spearman)."""

    name = "regression"
    metrics = ("pearson", "spearman")

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, text: str = "text",
                   text_pair: str | None = None, label: str = "label") -> RegressionData:
        return load_regression_files(train, dev, test, text_column=text, text_pair_column=text_pair, label_column=label,
                                     name=name)

    def build(self, backbone: nn.Module) -> Regressor:
        c, y = self.cfg, self.data.train.labels
        # (no training split: a saved model's prediction data; its loaded buffers hold the values)
        mean, sd = (float(np.mean(y)), float(np.std(y))) if len(y) else (0.0, 1.0)
        return Regressor(mean, sd, backbone=backbone, pooling=c.pooling, dropout=c.dropout,
                         causal=self.causal, mix=c.resolved_mix, head=c.head, head_hidden=c.head_hidden,
                         frozen=c.mode == "features", aux_lm_weight=c.aux_lm_weight)

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> np.ndarray:
        return predict_values(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types, device)

    def score(self, split: str, predictions: np.ndarray) -> dict[str, float]:
        return score_values(self.data.split(split).labels, predictions)

    def write_predictions(self, path: Path, split: str, predictions: np.ndarray) -> None:
        write_values(path, self.data.split(split), predictions)

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> RegressionData:
        test = unlabelled_split(rows)
        test = TaskSplit(test.texts, np.zeros(len(test), np.float64), test.text_pairs)
        empty = TaskSplit([], np.zeros(0, np.float64), None if test.text_pairs is None else [])
        return RegressionData(str(info.get("task", "task")), empty, empty, test)

    def records(self, predictions: np.ndarray) -> list[dict[str, Any]]:
        part = self.data.test
        out = []
        for i, text in enumerate(part.texts):
            row: dict[str, Any] = {"text": text}
            if part.text_pairs is not None:
                row["text_pair"] = part.text_pairs[i]
            row["prediction"] = round(float(predictions[i]), 6)
            out.append(row)
        return out
