"""Extractive span QA (SQuAD style) on a bidirectional encoder (Devlin et al. 2019, §4.2).

Input ``[CLS] question [SEP] context-window [SEP]`` with token types 0 / 1.  A context longer than
the budget is cut into overlapping windows (``doc_stride`` tokens between window starts), so
every answer lies whole inside at least one window.  A linear layer gives each token a start
and an end score; training maximises ``log p(start) + log p(end)`` of the gold span within each
window, and a window that does not contain the whole answer is trained to point at ``[CLS]``
(as BERT's SQuAD code does).  Prediction takes, over all windows of an example, the ``n_best``
highest start and end scores, keeps the pairs inside the context with ``start <= end`` and at
most ``max_answer_len`` tokens, and answers with the text between the first token's first
character and the last token's last character (token offsets from the tokenizer).

Scores (Rajpurkar et al. 2016): exact match and token F1 after SQuAD's normalisation (lower
case, punctuation and the articles a/an/the removed, whitespace collapsed), the best over the
gold answers.

Batches (one row per window): ``input_ids``, ``attention_mask``, ``token_type_ids [W, T]``,
``context_mask [W, T]`` (bool: context tokens and ``[CLS]``, the positions an answer may take),
``start_positions``, ``end_positions [W]``.
"""

from __future__ import annotations

import collections
import json
import math
import re
import string
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
from ptmkit.nn.layer_mix import build_mix
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.batches import ShuffledBatches, by_length
from ptmkit.train.step import StepOutput, input_tokens

# ------------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class QASplit:
    """``questions[N]``, ``contexts[N]``, ``answers[N]`` (lists of ``(text, char start)``)."""

    questions: list[str]
    contexts: list[str]
    answers: list[list[tuple[str, int]]]

    def __len__(self) -> int:
        return len(self.questions)

    def subset(self, index: np.ndarray) -> "QASplit":
        idx = [int(i) for i in index]
        return QASplit([self.questions[i] for i in idx], [self.contexts[i] for i in idx], [self.answers[i] for i in idx])


@dataclass(frozen=True)
class QAData(TaskSplits):
    """A span QA task (three :class:`QASplit`)."""

    name: str
    train: QASplit
    dev: QASplit
    test: QASplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "span_qa"
    label_names = ["span"]
    is_pair = True


def read_qa(path: str | Path, question: str = "question", context: str = "context", answers: str = "answers") -> QASplit:
    """JSONL, one ``{"question", "context", "answers": [{"text", "start"}, ...]}`` per line; an
    answer must be found in its context at its ``start``."""
    path = require_file(path, "QA file")
    qs, cs, ans = [], [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                q, c = str(row[question]), str(row[context])
                a = [(str(x["text"]), int(x["start"])) for x in row[answers]]
            except (ValueError, KeyError, TypeError) as exc:
                raise PtmError(f"{path}:{n}: expected {question!r}, {context!r} and {answers!r} "
                               f"([{{'text', 'start'}}]) ({exc})") from None
            if not a:
                raise PtmError(f"{path}:{n}: no answer given; every question needs one")
            for text, start in a:
                if not text or c[start : start + len(text)] != text:
                    found = c.find(text) if text else -1
                    hint = f" (it occurs at {found})" if found >= 0 else " (it does not occur in the context)"
                    raise PtmError(f"{path}:{n}: the answer {text!r} is not in the context at character {start}{hint}")
            qs.append(q)
            cs.append(c)
            ans.append(a)
    if not qs:
        raise PtmError(f"{path} holds no question (an empty split)")
    return QASplit(qs, cs, ans)


def load_qa_files(train: str | Path, dev: str | Path, test: str | Path, name: str | None = None, **columns: Any) -> QAData:
    return QAData(name or Path(train).stem, *(read_qa(p, **columns) for p in (train, dev, test)),
                  meta={"files": [str(train), str(dev), str(test)]})


# --------------------------------------------------------------------------------------- windows


@dataclass
class Windows:
    """One row per window: ids, token types, the context mask, gold start/end (0 = ``[CLS]``),
    the example it belongs to, and each position's character span in the context (-1 outside)."""

    ids: list[np.ndarray]
    types: list[np.ndarray]
    context: list[np.ndarray]
    start: np.ndarray
    end: np.ndarray
    example: np.ndarray
    offsets: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))


def make_windows(split: QASplit, tokenizer: Any, max_len: int, doc_stride: int, max_question_len: int = 64) -> Windows:
    """Tokenise and cut every context into windows of at most ``max_len`` tokens in all."""
    questions = tokenizer.encode_batch(split.questions)
    contexts = tokenizer.encode_batch_with_offsets(split.contexts)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    out = Windows([], [], [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), [])
    starts, ends, examples = [], [], []
    for i, (q, (c_ids, c_off)) in enumerate(zip(questions, contexts)):
        q = list(q)[:max_question_len]
        budget = max_len - len(q) - 3
        if budget < 1:
            raise PtmError(f"max_seq_len={max_len} leaves no room for the context after a {len(q)}-token question")
        text, char0 = split.answers[i][0]
        char1 = char0 + len(text)  # the first answer trains; all of them score
        inside = np.flatnonzero((c_off[:, 1] > char0) & (c_off[:, 0] < char1))  # tokens overlapping the answer
        tok0, tok1 = (int(inside[0]), int(inside[-1])) if len(inside) else (-1, -1)
        n = len(c_ids)
        step = max(1, min(doc_stride, budget))
        for w0 in range(0, max(n, 1), step):
            w1 = min(n, w0 + budget)
            head = [cls, *q, sep]
            ids = np.array(head + list(c_ids[w0:w1]) + [sep], dtype=np.int64)
            types = np.array([0] * len(head) + [1] * (w1 - w0 + 1), dtype=np.int64)
            ctx = np.zeros(len(ids), dtype=bool)
            ctx[0] = True
            ctx[len(head) : len(head) + w1 - w0] = True
            offsets = np.full((len(ids), 2), -1, dtype=np.int64)
            offsets[len(head) : len(head) + w1 - w0] = c_off[w0:w1]
            whole = w0 <= tok0 and tok1 < w1
            out.ids.append(ids)
            out.types.append(types)
            out.context.append(ctx)
            out.offsets.append(offsets)
            starts.append(len(head) + tok0 - w0 if whole else 0)
            ends.append(len(head) + tok1 - w0 if whole else 0)
            examples.append(i)
            if w1 >= n:
                break
    out.start, out.end, out.example = np.array(starts), np.array(ends), np.array(examples)
    return out


def collate_windows(win: Windows, index: np.ndarray, pad_id: int, with_token_types: bool = True) -> dict[str, torch.Tensor]:
    T = int(win.lengths[index].max())
    B = len(index)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    ctx = np.zeros((B, T), dtype=bool)
    for r, i in enumerate(index):
        n = len(win.ids[i])
        ids[r, :n], types[r, :n], mask[r, :n], ctx[r, :n] = win.ids[i], win.types[i], 1, win.context[i]
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask), "context_mask": torch.from_numpy(ctx),
             "start_positions": torch.from_numpy(win.start[index]), "end_positions": torch.from_numpy(win.end[index])}
    if with_token_types:
        batch["token_type_ids"] = torch.from_numpy(types)
    return batch


# ------------------------------------------------------------------------------------------ model


class SpanExtractor(nn.Module):
    """encoder (+ scalar mix) -> dropout -> Linear(H, 2): start and end scores ``[B, T]`` each,
    ``-inf`` outside the context (``[CLS]`` allowed: "not in this window")."""

    def __init__(self, backbone: nn.Module, dropout: float | None = None, mix: str = "last", frozen: bool = False) -> None:
        super().__init__()
        cfg = backbone.config
        self.backbone, self.frozen = backbone, frozen
        self.mix = build_mix(mix, backbone)
        self.dropout = nn.Dropout(getattr(cfg, "dropout", 0.1) if dropout is None else dropout)
        self.span = nn.Linear(backbone.output_size, 2)
        with torch.no_grad():
            self.span.weight.normal_(0.0, getattr(cfg, "init_std", 0.02))
            self.span.bias.zero_()
        if frozen:
            self.backbone.requires_grad_(False)

    def train(self, mode: bool = True) -> "SpanExtractor":
        super().train(mode)
        if self.frozen:
            self.backbone.eval()
        return self

    def scores(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            out = self.backbone(batch["input_ids"], attention_mask=batch["attention_mask"],
                                token_type_ids=batch.get("token_type_ids"), output_hidden_states=self.mix is not None)
        hidden = self.mix(out.hidden_states) if self.mix is not None else out.last_hidden_state
        logits = self.span(self.dropout(hidden)).float().masked_fill(~batch["context_mask"].unsqueeze(-1), float("-inf"))
        return logits[..., 0], logits[..., 1]

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        start, end = self.scores(batch)
        loss = 0.5 * (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"]))
        hit = (start.detach().argmax(-1) == batch["start_positions"]) & (end.detach().argmax(-1) == batch["end_positions"])
        return StepOutput(loss=loss, metrics={"span_acc": hit.float().mean()}, n_tokens=input_tokens(batch),
                          n_predictions=int(start.shape[0]))


@torch.no_grad()
def predict_answers(model: SpanExtractor, win: Windows, split: QASplit, pad_id: int, batch_size: int, with_token_types: bool,
                    n_best: int = 20, max_answer_len: int = 30, device: Any = "cpu") -> "Answers":
    """The best answer text of every example, over all its windows (see the module docstring);
    ``.scores``: each answer's start + end score (``None`` where no span qualified)."""
    model.eval()
    best: list[tuple[float, str]] = [(-math.inf, "")] * len(split)
    rows = lambda index: collate_windows(win, index, pad_id, with_token_types)  # noqa: E731
    for index, batch in by_length(win.lengths, batch_size, rows, device):
        start, end = (x.cpu() for x in model.scores(batch))
        k = min(n_best, start.shape[1])
        top_s, arg_s = start.topk(k, dim=-1)
        top_e, arg_e = end.topk(k, dim=-1)
        total = top_s[:, :, None] + top_e[:, None, :]  # [B, k, k]: every (start, end) candidate
        length = arg_e[:, None, :] - arg_s[:, :, None]
        ok = (length >= 0) & (length < max_answer_len) & (arg_s[:, :, None] > 0) & torch.isfinite(total)
        total = total.masked_fill(~ok, -math.inf)
        flat = total.flatten(1).argmax(-1)
        for r, i in enumerate(index):
            score = float(total[r].flatten()[flat[r]])
            if score == -math.inf:
                continue
            a, b = int(arg_s[r, flat[r] // k]), int(arg_e[r, flat[r] % k])
            ex = int(win.example[i])
            if score > best[ex][0]:
                off = win.offsets[i]
                best[ex] = (score, split.contexts[ex][int(off[a, 0]) : int(off[b, 1])])
    return Answers([text for _, text in best], [None if score == -math.inf else score for score, _ in best])


class Answers(list):
    """The answer texts (a list of strings), with ``scores``: the start + end score of each."""

    def __init__(self, texts: list[str], scores: list[float | None]) -> None:
        super().__init__(texts)
        self.scores = scores


# --------------------------------------------------------------------------------------- metrics


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def answer_f1(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if not p or not g:
        return float(p == g)
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def score_answers(split: QASplit, predictions: list[str]) -> dict[str, float]:
    """Exact match and F1 (each the best over the gold answers), averaged over questions."""
    em = [max(float(normalize_answer(p) == normalize_answer(g)) for g, _ in gold) for p, gold in zip(predictions, split.answers)]
    f1 = [max(answer_f1(p, g) for g, _ in gold) for p, gold in zip(predictions, split.answers)]
    return {"exact_match": float(np.mean(em)), "f1": float(np.mean(f1))}


def write_answers(path: Path, split: QASplit, predictions: list[str]) -> None:
    rows = (json.dumps({"question": q, "answers": [a for a, _ in gold], "prediction": p}, ensure_ascii=False)
            for q, gold, p in zip(split.questions, split.answers, predictions))
    atomic_write_text(path, "\n".join(rows) + "\n")


@dataclass(frozen=True)
class SpanQAOptions:
    """doc_stride: tokens between the starts of a long context's windows; max_answer_len: the
    longest answer in tokens; n_best: start and end candidates per window."""

    doc_stride: int = 128
    max_answer_len: int = 30
    n_best: int = 20

    def __post_init__(self) -> None:
        for name in ("doc_stride", "max_answer_len", "n_best"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"{name} must be a positive integer, got {value!r}")


@register("task_type", "span_qa")
class SpanQA(TaskType):
    """Extractive QA over windows of long contexts."""

    name = "span_qa"
    options_class = SpanQAOptions
    metrics = ("f1", "exact_match")
    columns = {"question": "question", "context": "context", "answers": "answers"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.causal:
            raise PtmError("span QA reads the context in both directions; fine-tune a bidirectional encoder "
                           "(a model pre-trained with a causal LM cannot point back at an answer it has passed)")
        if self.cfg.aux_lm_weight > 0:
            raise PtmError("aux_lm_weight applies to classification; set aux_lm_weight=0 for span QA")

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, **columns: Any) -> QAData:
        return load_qa_files(train, dev, test, name=name, **columns)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        return {"question", "context", "answers"} <= fields

    def encode(self, split: str) -> Windows:
        return make_windows(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.options.doc_stride)

    def build(self, backbone: nn.Module) -> SpanExtractor:
        return SpanExtractor(backbone, dropout=self.cfg.dropout, mix=self.cfg.resolved_mix, frozen=self.cfg.mode == "features")

    def batches(self, encoded_train: Windows, seed: int) -> ShuffledBatches:
        pad, types = self.tokenizer.pad_id, self.with_types
        return ShuffledBatches(len(encoded_train), lambda rows: collate_windows(encoded_train, rows, pad, types),
                               self.cfg.batch_size, seed)

    def train_size(self, encoded_train: Windows) -> int:
        return len(encoded_train)  # an epoch is one pass over the windows

    def predict_split(self, model: nn.Module, split: str, encoded: Windows, device: Any) -> list[str]:
        o = self.options
        return predict_answers(model, encoded, self.data.split(split), self.tokenizer.pad_id, self.cfg.eval_batch_size,
                               self.with_types, o.n_best, o.max_answer_len, device)

    def score(self, split: str, predictions: list[str]) -> dict[str, float]:
        return score_answers(self.data.split(split), predictions)

    def write_predictions(self, path: Path, split: str, predictions: list[str]) -> None:
        write_answers(path, self.data.split(split), predictions)

    # -- prediction on new rows (ptm predict) ----------------------------------------------------
    input_columns = ("question", "context")

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> QAData:
        empty = QASplit([], [], [])
        test = QASplit([str(r["question"]) for r in rows], [str(r["context"]) for r in rows], [[("", 0)] for _ in rows])
        return QAData(str(info.get("task", "task")), empty, empty, test)

    def records(self, predictions: Answers) -> list[dict[str, Any]]:
        scores = getattr(predictions, "scores", [None] * len(predictions))
        return [{"question": q, "context": c, "answer": a, "score": None if s is None else round(float(s), 6)}
                for q, c, a, s in zip(self.data.test.questions, self.data.test.contexts, predictions, scores)]
