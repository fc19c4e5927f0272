"""Multiple choice on any registered encoder (SWAG / RACE style; WordNet sense selection).

Each (text, choice) pair is read as one sequence, BERT: ``[CLS] text [SEP] choice [SEP]``, GPT:
``text [SEP] choice [SEP]`` (Radford et al. 2018's input transformation for choices: the
delimiter between the two, the last token's state as the representation).  A linear layer maps
the pooled state to one score per choice; a softmax over the example's choices gives the loss
(Devlin et al. 2019, §4.4; Radford et al. 2018, §3.3).  Examples may have different numbers of
choices: a batch holds only the real (example, choice) pairs, flattened, and the scores are
scattered back into ``[B, C_max]`` with ``-inf`` for the missing choices.

Batches: ``input_ids [P, T]``, ``attention_mask [P, T]``, ``token_type_ids [P, T]`` over the ``P``
pairs; ``pair_example [P]`` and ``pair_choice [P]`` (which example and which choice a pair is);
``labels [B]`` (the answer's index).  The example dimension is not first for the pair tensors,
so one Trainer step takes one batch as a whole (no DDP row split for this task type).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.data.tasks import TaskSplits
from ptmkit.errors import PtmError, require_file
from ptmkit.fileio import atomic_write_text
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.batches import ShuffledBatches, by_length
from ptmkit.tasks.classification import SequenceClassifier, encode_inputs
from ptmkit.tasks.gpt_inputs import GptTokens, encode_gpt
from ptmkit.train.step import StepOutput, input_tokens


@dataclass(frozen=True)
class ChoiceSplit:
    """``texts[N]``, ``choices[N]`` (lists of strings), ``labels[N]`` (the answer's index)."""

    texts: list[str]
    choices: list[list[str]]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: np.ndarray) -> "ChoiceSplit":
        idx = [int(i) for i in index]
        return ChoiceSplit([self.texts[i] for i in idx], [self.choices[i] for i in idx], self.labels[np.asarray(idx, dtype=np.int64)])


@dataclass(frozen=True)
class ChoiceData(TaskSplits):
    """A multiple-choice task (three :class:`ChoiceSplit`)."""

    name: str
    train: ChoiceSplit
    dev: ChoiceSplit
    test: ChoiceSplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "multiple_choice"
    label_names = ["answer"]
    is_pair = True


def read_choices(path: str | Path, text: str = "text", choices: str = "choices", label: str = "label",
                 prefix: str | None = None) -> ChoiceSplit:
    """A JSONL file of ``{"text", "choices": [...], "label": index}``; ``prefix``: a column whose
    value is put before every choice (WordNet senses: ``"target: definition"``)."""
    path = require_file(path, "multiple-choice file")
    texts, opts, labels = [], [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                t, c, y = str(row[text]), [str(x) for x in row[choices]], int(row[label])
                head = f"{row[prefix]}: " if prefix else ""
            except (ValueError, KeyError, TypeError) as exc:
                raise PtmError(f"{path}:{n}: expected a JSON object with {text!r}, {choices!r} (a list) and {label!r} ({exc})") from None
            if len(c) < 2:
                raise PtmError(f"{path}:{n}: {len(c)} choice(s); a multiple-choice example needs at least two")
            if not 0 <= y < len(c):
                raise PtmError(f"{path}:{n}: label {y} is not the index of one of its {len(c)} choices")
            texts.append(t)
            opts.append([head + x for x in c])
            labels.append(y)
    if not texts:
        raise PtmError(f"{path} holds no example (an empty split)")
    return ChoiceSplit(texts, opts, np.asarray(labels, dtype=np.int64))


def load_choice_files(train: str | Path, dev: str | Path, test: str | Path, name: str | None = None, **columns: Any) -> ChoiceData:
    splits = [read_choices(p, **columns) for p in (train, dev, test)]
    return ChoiceData(name or Path(train).stem, *splits, meta={"files": [str(train), str(dev), str(test)]})


# -------------------------------------------------------------------------------------- encoding


@dataclass
class EncodedChoices:
    """Per example, the token ids and types of each (text, choice) sequence."""

    ids: list[list[np.ndarray]]
    types: list[list[np.ndarray]]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((max(len(x) for x in ex) for ex in self.ids), dtype=np.int64, count=len(self.ids))


def encode_choices(split: ChoiceSplit, tokenizer: Any, max_len: int, causal: bool, gpt_transform: bool = False) -> EncodedChoices:
    """One sequence per choice with the family's special tokens, longest-first truncation;
    ``gpt_transform``: GPT's ``<start> context <delim> answer_k <extract>`` (:mod:`ptmkit.tasks.gpt_inputs`)."""
    flat_text = [t for t, cs in zip(split.texts, split.choices) for _ in cs]
    flat_choice = [c for cs in split.choices for c in cs]
    a = [list(x) for x in tokenizer.encode_batch(flat_text)]
    b = [list(x) for x in tokenizer.encode_batch(flat_choice)]
    if gpt_transform:
        enc = encode_gpt(a, b, max_len, GptTokens.of(tokenizer))
    else:
        enc = encode_inputs(a, b, max_len, tokenizer.cls_id, tokenizer.sep_id, causal)
    ids, types, k = [], [], 0
    for cs in split.choices:
        ids.append(enc.ids[k : k + len(cs)])
        types.append(enc.types[k : k + len(cs)])
        k += len(cs)
    return EncodedChoices(ids, types, split.labels)


def collate_choices(enc: EncodedChoices, index: np.ndarray, pad_id: int, with_token_types: bool) -> dict[str, torch.Tensor]:
    seqs = [(e, c, s, t) for e, i in enumerate(index) for c, (s, t) in enumerate(zip(enc.ids[i], enc.types[i]))]
    T = max(len(s) for _, _, s, _ in seqs)
    P = len(seqs)
    ids = np.full((P, T), pad_id, dtype=np.int64)
    types = np.zeros((P, T), dtype=np.int64)
    mask = np.zeros((P, T), dtype=np.int64)
    for p, (_, _, s, t) in enumerate(seqs):
        ids[p, : len(s)], types[p, : len(t)], mask[p, : len(s)] = s, t, 1
    batch = {
        "input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
        "pair_example": torch.tensor([e for e, _, _, _ in seqs]), "pair_choice": torch.tensor([c for _, c, _, _ in seqs]),
        "labels": torch.from_numpy(enc.labels[index].astype(np.int64)),
    }
    if with_token_types:
        batch["token_type_ids"] = torch.from_numpy(types)
    return batch


# ------------------------------------------------------------------------------------------ model


class ChoiceScorer(nn.Module):
    """A sequence classifier with one output: the score of a (text, choice) sequence.  Pooling,
    mix, task network and freezing are :class:`SequenceClassifier`'s."""

    def __init__(self, **classifier_args: Any) -> None:
        super().__init__()
        self.scorer = SequenceClassifier(num_labels=1, **classifier_args)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[B, C_max]`` choice scores, ``-inf`` where an example has fewer choices."""
        flat = self.scorer.logits(batch).squeeze(-1).float()  # [P]
        ex, ch = batch["pair_example"], batch["pair_choice"]
        out = flat.new_full((int(batch["labels"].shape[0]), int(ch.max()) + 1), float("-inf"))
        return out.index_put((ex, ch), flat)

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        s = self.scores(batch)
        labels = batch["labels"]
        loss = F.cross_entropy(s, labels)
        acc = (s.detach().argmax(-1) == labels).float().mean()
        return StepOutput(loss=loss, metrics={"accuracy": acc}, n_tokens=input_tokens(batch),
                          n_predictions=int(labels.shape[0]))


@torch.no_grad()
def predict_choices(model: ChoiceScorer, enc: EncodedChoices, pad_id: int, batch_size: int, with_token_types: bool,
                    device: Any = "cpu") -> list[np.ndarray]:
    """Per example, the softmax over its choices (float64)."""
    model.eval()
    out: list[np.ndarray] = [np.empty(0)] * len(enc)
    rows = lambda index: collate_choices(enc, index, pad_id, with_token_types)  # noqa: E731
    for index, batch in by_length(enc.lengths, batch_size, rows, device):
        probs = torch.softmax(model.scores(batch).double(), -1).cpu().numpy()
        for r, i in enumerate(index):
            out[i] = probs[r, : len(enc.ids[i])]
    return out


def score_choices(split: ChoiceSplit, probs: list[np.ndarray]) -> dict[str, float]:
    """Accuracy, mean cross-entropy, and the share a uniform guess would get right."""
    right = [int(p.argmax() == y) for p, y in zip(probs, split.labels)]
    loss = [-math.log(max(float(p[y]), 1e-12)) for p, y in zip(probs, split.labels)]
    return {"accuracy": float(np.mean(right)), "loss": float(np.mean(loss)),
            "chance": float(np.mean([1 / len(c) for c in split.choices]))}


def write_choice_predictions(path: Path, split: ChoiceSplit, probs: list[np.ndarray]) -> None:
    rows = (json.dumps({"text": t, "choices": c, "label": int(y), "prediction": int(p.argmax()),
                        "probabilities": [round(float(x), 6) for x in p]}, ensure_ascii=False)
            for t, c, y, p in zip(split.texts, split.choices, split.labels, probs))
    atomic_write_text(path, "\n".join(rows) + "\n")


@register("task_type", "multiple_choice")
class MultipleChoice(TaskType):
    """One score per (text, choice) sequence, softmax over the choices."""

    name = "multiple_choice"
    metrics = ("accuracy", "loss")
    columns = {"text": "text", "choices": "choices", "label": "label", "prefix": None}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.cfg.aux_lm_weight > 0:
            raise PtmError("aux_lm_weight applies to classification; set aux_lm_weight=0 for multiple choice")
        if self.cfg.symmetric_pairs:
            raise PtmError("symmetric_pairs applies to similarity pairs; a context and its answer have an order: "
                           "set symmetric_pairs=false")

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, **columns: Any) -> ChoiceData:
        return load_choice_files(train, dev, test, name=name, **columns)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        return "choices" in fields

    def encode(self, split: str) -> EncodedChoices:
        return encode_choices(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.causal,
                              self.cfg.gpt_transform)

    def build(self, backbone: nn.Module) -> ChoiceScorer:
        c = self.cfg
        return ChoiceScorer(backbone=backbone, pooling=c.pooling, dropout=c.dropout, causal=self.causal, mix=c.resolved_mix,
                            head=c.head, head_hidden=c.head_hidden, frozen=c.mode == "features")

    def batches(self, encoded_train: EncodedChoices, seed: int) -> ShuffledBatches:
        pad, types = self.tokenizer.pad_id, self.with_types
        return ShuffledBatches(len(encoded_train), lambda rows: collate_choices(encoded_train, rows, pad, types),
                               self.cfg.batch_size, seed)

    def predict(self, model: nn.Module, encoded: EncodedChoices, device: Any) -> list[np.ndarray]:
        return predict_choices(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types, device)

    def score(self, split: str, predictions: list[np.ndarray]) -> dict[str, float]:
        return score_choices(self.data.split(split), predictions)

    def write_predictions(self, path: Path, split: str, predictions: list[np.ndarray]) -> None:
        write_choice_predictions(path, self.data.split(split), predictions)

    # -- prediction on new rows (ptm predict) ----------------------------------------------------
    input_columns = ("text", "choices")
    optional_columns = ("prefix",)  # put before every choice as "PREFIX: choice", as the files' prefix column

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> ChoiceData:
        choices = []
        for n, r in enumerate(rows, 1):
            c = r["choices"]
            if isinstance(c, str):  # a CSV / TSV cell: a JSON list
                try:
                    c = json.loads(c)
                except ValueError:
                    c = None
            if not isinstance(c, list) or not c:
                raise PtmError(f"row {n}: choices must be a non-empty list (in CSV / TSV: a JSON list such as "
                               f'["yes", "no"]), got {r["choices"]!r}')
            head = f"{r['prefix']}: " if r.get("prefix") is not None else ""
            choices.append([head + str(x) for x in c])
        empty = ChoiceSplit([], [], np.zeros(0, np.int64))
        test = ChoiceSplit([str(r["text"]) for r in rows], choices, np.zeros(len(rows), np.int64))
        return ChoiceData(str(info.get("task", "task")), empty, empty, test)

    def records(self, predictions: list[np.ndarray]) -> list[dict[str, Any]]:
        part = self.data.test
        return [{"text": t, "choices": c, "prediction": int(p.argmax()), "answer": c[int(p.argmax())],
                 "probabilities": [round(float(x), 6) for x in p]} for t, c, p in zip(part.texts, part.choices, predictions)]
