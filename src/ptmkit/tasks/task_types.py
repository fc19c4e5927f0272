"""What differs between downstream task types, behind one interface for ``finetune``.

A task type turns its data into encoded splits, builds its model on a backbone, gives the
Trainer its batches, and predicts, scores and writes a split.  Everything else — the Trainer,
dev selection, staged unfreezing, checkpoints and exact resume, the output directory — is shared
by :func:`ptmkit.tasks.finetune.finetune`.  Which type a task has is declared by its data object
(``task_type`` attribute; ``TaskData`` is classification).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ptmkit.errors import PtmError


class TaskType:
    """Interface; ``data`` is the task's data object, ``cfg`` a ``FinetuneConfig``."""

    metrics: tuple[str, ...] = ()  # the dev metrics ``select`` may name; the first is the default

    def __init__(self, data: Any, cfg: Any, tokenizer: Any, causal: bool, with_types: bool) -> None:
        self.data, self.cfg, self.tokenizer, self.causal, self.with_types = data, cfg, tokenizer, causal, with_types
        if cfg.select in self.metrics:
            self.select = cfg.select
        elif cfg.select == "accuracy":  # the config's default, for a task type without accuracy
            self.select = self.metrics[0]
        else:
            raise PtmError(f"select={cfg.select!r} is not a metric of {type(self).__name__}; choose one of {', '.join(self.metrics)}")

    def encode(self, split: str) -> Any:
        raise NotImplementedError

    def build(self, backbone: nn.Module) -> nn.Module:
        raise NotImplementedError

    def batches(self, encoded_train: Any, seed: int) -> Any:
        raise NotImplementedError

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> Any:
        raise NotImplementedError

    def predict_split(self, model: nn.Module, split: str, encoded: Any, device: Any) -> Any:
        """Predictions for ``split`` from its encoding (most types need only the encoding)."""
        return self.predict(model, encoded, device)

    def train_size(self, encoded_train: Any) -> int:
        """Training items per epoch (examples; span QA: windows)."""
        return len(self.data.train)

    def score(self, split: str, predictions: Any) -> dict[str, float]:
        raise NotImplementedError

    def write_predictions(self, path: Path, split: str, predictions: Any) -> None:
        raise NotImplementedError


class Classification(TaskType):
    """Sentence and sentence-pair classification (:mod:`ptmkit.tasks.classification`)."""

    metrics = ("accuracy", "macro_f1", "f1", "loss")

    def encode(self, split: str) -> Any:
        from ptmkit.tasks.finetune import encode_split

        return encode_split(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.causal,
                            self.cfg.gpt_transform, self.cfg.symmetric_pairs)

    def build(self, backbone: nn.Module) -> nn.Module:
        from ptmkit.tasks.finetune import classifier_on

        return classifier_on(backbone, self.data.num_labels, self.cfg, self.causal)

    def batches(self, encoded_train: Any, seed: int) -> Any:
        from ptmkit.tasks.batches import LabelledBatches

        return LabelledBatches(encoded_train, self.data.train.labels, self.cfg.batch_size, self.tokenizer.pad_id, seed,
                               self.with_types)

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> np.ndarray:
        from ptmkit.tasks.finetune import predict

        return predict(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types, device)

    def score(self, split: str, predictions: np.ndarray) -> dict[str, float]:
        from ptmkit.tasks.finetune import score

        return score(predictions, self.data.split(split).labels, self.data.num_labels)

    def write_predictions(self, path: Path, split: str, predictions: np.ndarray) -> None:
        from ptmkit.tasks.finetune import write_predictions

        write_predictions(path, self.data.split(split), self.data.label_names, predictions)


class Tagging(TaskType):
    """Token tagging with a softmax or a CRF (:mod:`ptmkit.tasks.tagging`); ``f1`` is chunk F1."""

    metrics = ("accuracy", "f1", "loss")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.cfg.select == "f1" and not self.data.chunked:
            raise PtmError(f"select=f1 is chunk F1, but the tags of {self.data.name} do not mark chunks; use select=accuracy")
        if self.cfg.aux_lm_weight > 0:
            raise PtmError("aux_lm_weight applies to classification; set aux_lm_weight=0 for tagging")
        if self.cfg.gpt_transform:
            raise PtmError("gpt_transform frames whole sequences for one prediction; tagging predicts every word: "
                           "set gpt_transform=false")
        counts = np.bincount(np.concatenate(self.data.label_ids(self.data.train)), minlength=self.data.num_labels)
        self.fallback = int(counts.argmax())  # predicted for words cut off by max_seq_len

    def encode(self, split: str) -> Any:
        from ptmkit.tasks.tagging import encode_words

        part = self.data.split(split)
        return encode_words(part.words, self.data.label_ids(part), self.tokenizer, self.cfg.max_seq_len, self.causal)

    def build(self, backbone: nn.Module) -> nn.Module:
        from ptmkit.tasks.tagging import TokenTagger

        c = self.cfg
        return TokenTagger(backbone, self.data.num_labels, dropout=c.dropout, causal=self.causal, mix=c.resolved_mix,
                           head=c.head, head_hidden=c.head_hidden, frozen=c.mode == "features", crf=c.crf)

    def batches(self, encoded_train: Any, seed: int) -> Any:
        from ptmkit.tasks.tagging import TaggedBatches

        return TaggedBatches(encoded_train, self.cfg.batch_size, self.tokenizer.pad_id, seed)

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> tuple[list[np.ndarray], float]:
        from ptmkit.tasks.tagging import predict_tags

        return predict_tags(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.fallback, device)

    def score(self, split: str, predictions: tuple[list[np.ndarray], float]) -> dict[str, float]:
        from ptmkit.tasks.tagging import score_tags

        preds, loss = predictions
        return {**score_tags(self.data, self.data.split(split), preds), "loss": loss}

    def write_predictions(self, path: Path, split: str, predictions: tuple[list[np.ndarray], float]) -> None:
        from ptmkit.tasks.tagging import write_tag_predictions

        write_tag_predictions(path, self.data, self.data.split(split), predictions[0])


class MultipleChoice(TaskType):
    """One score per (text, choice) sequence, softmax over the choices (:mod:`ptmkit.tasks.multiple_choice`)."""

    metrics = ("accuracy", "loss")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.cfg.aux_lm_weight > 0:
            raise PtmError("aux_lm_weight applies to classification; set aux_lm_weight=0 for multiple choice")
        if self.cfg.symmetric_pairs:
            raise PtmError("symmetric_pairs applies to similarity pairs; a context and its answer have an order: "
                           "set symmetric_pairs=false")

    def encode(self, split: str) -> Any:
        from ptmkit.tasks.multiple_choice import encode_choices

        return encode_choices(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.causal,
                              self.cfg.gpt_transform)

    def build(self, backbone: nn.Module) -> nn.Module:
        from ptmkit.tasks.multiple_choice import ChoiceScorer

        c = self.cfg
        return ChoiceScorer(backbone=backbone, pooling=c.pooling, dropout=c.dropout, causal=self.causal, mix=c.resolved_mix,
                            head=c.head, head_hidden=c.head_hidden, frozen=c.mode == "features")

    def batches(self, encoded_train: Any, seed: int) -> Any:
        from ptmkit.tasks.multiple_choice import ChoiceBatches

        return ChoiceBatches(encoded_train, self.cfg.batch_size, self.tokenizer.pad_id, seed, self.with_types)

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> list[np.ndarray]:
        from ptmkit.tasks.multiple_choice import predict_choices

        return predict_choices(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types, device)

    def score(self, split: str, predictions: list[np.ndarray]) -> dict[str, float]:
        from ptmkit.tasks.multiple_choice import score_choices

        return score_choices(self.data.split(split), predictions)

    def write_predictions(self, path: Path, split: str, predictions: list[np.ndarray]) -> None:
        from ptmkit.tasks.multiple_choice import write_choice_predictions

        write_choice_predictions(path, self.data.split(split), predictions)


class SpanQA(TaskType):
    """Extractive QA over windows of long contexts (:mod:`ptmkit.tasks.span_qa`)."""

    metrics = ("f1", "exact_match")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.causal:
            raise PtmError("span QA reads the context in both directions; fine-tune a bidirectional encoder "
                           "(a model pre-trained with a causal LM cannot point back at an answer it has passed)")
        if self.cfg.aux_lm_weight > 0:
            raise PtmError("aux_lm_weight applies to classification; set aux_lm_weight=0 for span QA")

    def encode(self, split: str) -> Any:
        from ptmkit.tasks.span_qa import make_windows

        return make_windows(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.cfg.doc_stride)

    def build(self, backbone: nn.Module) -> nn.Module:
        from ptmkit.tasks.span_qa import SpanExtractor

        return SpanExtractor(backbone, dropout=self.cfg.dropout, mix=self.cfg.resolved_mix, frozen=self.cfg.mode == "features")

    def batches(self, encoded_train: Any, seed: int) -> Any:
        from ptmkit.tasks.span_qa import WindowBatches

        return WindowBatches(encoded_train, self.cfg.batch_size, self.tokenizer.pad_id, seed, self.with_types)

    def train_size(self, encoded_train: Any) -> int:
        return len(encoded_train)  # an epoch is one pass over the windows

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> list[str]:
        raise NotImplementedError("SpanQA predicts per split: use predict_split")

    def predict_split(self, model: nn.Module, split: str, encoded: Any, device: Any) -> list[str]:
        from ptmkit.tasks.span_qa import predict_answers

        c = self.cfg
        return predict_answers(model, encoded, self.data.split(split), self.tokenizer.pad_id, c.eval_batch_size,
                               self.with_types, c.n_best, c.max_answer_len, device)

    def score(self, split: str, predictions: list[str]) -> dict[str, float]:
        from ptmkit.tasks.span_qa import score_answers

        return score_answers(self.data.split(split), predictions)

    def write_predictions(self, path: Path, split: str, predictions: list[str]) -> None:
        from ptmkit.tasks.span_qa import write_answers

        write_answers(path, self.data.split(split), predictions)


class Regression(Classification):
    """One real-valued score per text or pair (:mod:`ptmkit.tasks.regression`)."""

    metrics = ("pearson", "spearman")

    def build(self, backbone: nn.Module) -> nn.Module:
        from ptmkit.tasks.regression import Regressor

        c, y = self.cfg, self.data.train.labels
        return Regressor(float(np.mean(y)), float(np.std(y)), backbone=backbone, pooling=c.pooling, dropout=c.dropout,
                         causal=self.causal, mix=c.resolved_mix, head=c.head, head_hidden=c.head_hidden,
                         frozen=c.mode == "features", aux_lm_weight=c.aux_lm_weight)

    def predict(self, model: nn.Module, encoded: Any, device: Any) -> np.ndarray:
        from ptmkit.tasks.regression import predict_values

        return predict_values(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types, device)

    def score(self, split: str, predictions: np.ndarray) -> dict[str, float]:
        from ptmkit.tasks.regression import score_values

        return score_values(self.data.split(split).labels, predictions)

    def write_predictions(self, path: Path, split: str, predictions: np.ndarray) -> None:
        from ptmkit.tasks.regression import write_values

        write_values(path, self.data.split(split), predictions)


TASK_TYPES: dict[str, type[TaskType]] = {"classification": Classification, "tagging": Tagging,
                                         "multiple_choice": MultipleChoice, "span_qa": SpanQA, "regression": Regression}


def task_type_of(data: Any, cfg: Any, tokenizer: Any, causal: bool, with_types: bool) -> TaskType:
    kind = getattr(data, "task_type", "classification")
    if kind == "multi_task":  # composed of the types above (imported here: it imports this module)
        from ptmkit.tasks.multitask import MultiTask

        return MultiTask(data, cfg, tokenizer, causal, with_types)
    if kind not in TASK_TYPES:
        raise PtmError(f"no fine-tuning path for {kind} tasks; task types: {', '.join(TASK_TYPES)}")
    return TASK_TYPES[kind](data, cfg, tokenizer, causal, with_types)
