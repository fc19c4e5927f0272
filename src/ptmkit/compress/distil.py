"""Task-specific knowledge distillation: a student task model learns from a fine-tuned teacher.

The loss of a training batch (Hinton et al. 2015; TinyBERT, Jiao et al. 2020)::

    L = alpha · CE(student, labels) + (1 - alpha) · T² · CE(softmax(t / T), softmax(s / T))
        + hidden · Σ_m MSE(H_S^m W_h, H_T^g(m)) + attention · Σ_m MSE(A_S^m, A_T^g(m))
        + embedding · MSE(E_S W_e, E_T)

over what the task model predicts (a sentence's label, each word's tag: the task model's
``distillation_logits``), with the teacher in eval mode and without gradients.  ``W_h`` and ``W_e``
are learned projections, present when the widths differ (``projection="auto"``).  Examples without
a gold label (the unlabelled text a workflow adds, labelled by the teacher) count in the soft term
only.  With no intermediate terms, the teacher's logits of the training examples are computed once
(:func:`teacher_logits`) and read back by example, so an epoch does not run the teacher again.

:class:`Distillation` is a :class:`ptmkit.tasks.training.Training`: ``finetune()`` runs it like any
fine-tuning (dev selection of the student, checkpoints, exact resume) and saves the student.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save
from torch import nn
from torch.nn import functional as F

from ptmkit.compress.losses import attention_mse, hidden_mse, layer_map, soft_cross_entropy
from ptmkit.compress.students import copy_head
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_bytes
from ptmkit.identity import content_sha256
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.tasks.saved import encoder_of
from ptmkit.tasks.training import Training
from ptmkit.train.step import StepOutput, input_tokens

PROJECTIONS = ("auto", "off")


@dataclass(frozen=True)
class DistilSettings:
    """alpha: weight of the hard-label loss (the soft loss gets ``1 - alpha``); temperature: ``T``;
    hidden / attention / embedding: weights of TinyBERT's intermediate losses (0 = off);
    layer_map: ``uniform`` | ``last`` | ``"1:2,2:4,3:6"`` (student:teacher, 1-based layers);
    projection: ``auto`` (learned ``W_h``/``W_e`` where the widths differ) or ``off`` (the widths
    must match)."""

    alpha: float = 0.5
    temperature: float = 2.0
    hidden: float = 0.0
    attention: float = 0.0
    embedding: float = 0.0
    layer_map: str = "uniform"
    projection: str = "auto"

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise PtmError(f"alpha weighs the hard-label loss against the teacher's: give 0..1, got {self.alpha}")
        if not self.temperature > 0:
            raise PtmError(f"temperature must be > 0, got {self.temperature}")
        for name in ("hidden", "attention", "embedding"):
            if getattr(self, name) < 0:
                raise PtmError(f"the {name} loss weight must be >= 0, got {getattr(self, name)}")
        if self.projection not in PROJECTIONS:
            raise PtmError(f"projection must be one of {', '.join(PROJECTIONS)}, got {self.projection!r}")

    @property
    def intermediate(self) -> bool:
        return self.hidden > 0 or self.attention > 0 or self.embedding > 0


@contextlib.contextmanager
def capture(encoder: nn.Module, hidden: bool, attentions: bool):
    """Within the block, every call of ``encoder`` also returns its hidden states / attention maps
    (whatever the task model asks for) and its output is kept in the yielded list."""
    seen: list[Any] = []

    def ask(module, args, kwargs):
        if hidden:
            kwargs["output_hidden_states"] = True
        if attentions:
            kwargs["output_attentions"] = True
        return args, kwargs

    def keep(module, args, kwargs, output):
        seen.append(output)

    handles = [encoder.register_forward_pre_hook(ask, with_kwargs=True),
               encoder.register_forward_hook(keep, with_kwargs=True)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def _logits_of(model: nn.Module) -> Any:
    fn = getattr(model, "distillation_logits", None)
    if fn is None:
        raise PtmError(f"{type(model).__name__} cannot be distilled: its task type gives no distillation_logits "
                       f"(classification and tagging do)")
    return fn


class Distiller(nn.Module):
    """The module the Trainer optimises: the student (``student``; its encoder is registered first
    as ``backbone`` so layer-wise LRs and unfreezing read the student's depths), the projections,
    and the teacher outside the module tree (not trained, not saved).

    cache: the teacher's logits per training example (``list[Tensor [n_i, K]]``) or ``None`` (the
    teacher runs on every batch).  labelled: how many training examples have gold labels (those
    after them were labelled by the teacher)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, settings: DistilSettings,
                 cache: list[torch.Tensor] | None, labelled: int) -> None:
        super().__init__()
        self.backbone = encoder_of(student)
        self.student = student
        object.__setattr__(self, "teacher", teacher.eval())
        self.settings = settings
        self.cache = cache
        self.labelled = labelled
        t_enc = encoder_of(teacher)
        s_width, t_width = self.backbone.output_size, t_enc.output_size
        if settings.intermediate:
            self.map = layer_map(settings.layer_map, self.backbone.num_layers, t_enc.num_layers)
            if s_width != t_width and settings.projection == "off":
                raise PtmError(f"the student is {s_width} wide and the teacher {t_width}: intermediate losses need "
                               f"projection=auto (a learned W_h) or a student of the teacher's width")
        self.proj_hidden = nn.Linear(s_width, t_width) if settings.hidden > 0 and s_width != t_width else None
        self.proj_embed = nn.Linear(s_width, t_width) if settings.embedding > 0 and s_width != t_width else None

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        s = self.settings
        index = batch.pop("example_index")
        attn = s.attention > 0
        with capture(self.backbone, s.intermediate, attn) as seen:
            logits, labels = _logits_of(self.student)(batch)
        teacher_out = None
        if self.cache is not None:
            t_logits = torch.cat([self.cache[i] for i in index.tolist()]).to(logits.device)
        else:
            self.teacher.to(logits.device)
            with torch.no_grad(), capture(encoder_of(self.teacher), s.intermediate, attn) as t_seen:
                t_logits, _ = _logits_of(self.teacher)(batch)
            teacher_out = t_seen[-1] if t_seen else None
        if t_logits.shape != logits.shape:
            raise PtmError(f"the teacher predicts {tuple(t_logits.shape)} where the student predicts "
                           f"{tuple(logits.shape)}: teacher and student must be models of the same task")
        soft = soft_cross_entropy(logits, t_logits, s.temperature)
        gold = labels.clone()
        rows = index.cpu() >= self.labelled  # examples the teacher labelled
        if bool(rows.any()):
            gold[_rows_to_items(rows, labels, batch)] = IGNORE_INDEX
        has_gold = gold != IGNORE_INDEX
        hard = F.cross_entropy(logits.float()[has_gold], gold[has_gold]) if bool(has_gold.any()) else logits.new_zeros(())
        loss = s.alpha * hard + (1 - s.alpha) * soft
        metrics = {"hard_loss": hard.detach(), "soft_loss": soft.detach()}
        if s.intermediate:
            inner = self._inner(seen[-1], teacher_out, batch["attention_mask"])
            metrics.update({k: v.detach() for k, v in inner.items()})
            loss = loss + sum(getattr(s, k) * v for k, v in inner.items())
        acc = (logits.detach().argmax(-1)[has_gold] == gold[has_gold]).float().mean() if bool(has_gold.any()) \
            else logits.new_zeros(())
        metrics["accuracy"] = acc
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch),
                          n_predictions=int(labels.shape[0]))

    def _inner(self, s_out: Any, t_out: Any, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """TinyBERT's embedding, hidden-state and attention losses over the mapped layers."""
        s = self.settings
        out: dict[str, torch.Tensor] = {}
        sh, th = s_out.hidden_states, t_out.hidden_states
        if s.embedding > 0:
            e = sh[0] if self.proj_embed is None else self.proj_embed(sh[0])
            out["embedding"] = hidden_mse(e, th[0], mask)
        if s.hidden > 0:
            proj = self.proj_hidden or (lambda x: x)
            out["hidden"] = sum(hidden_mse(proj(sh[m]), th[n], mask) for m, n in self.map.items() if m > 0)
        if s.attention > 0:
            sa, ta = s_out.attentions, t_out.attentions
            out["attention"] = sum(attention_mse(sa[m - 1], ta[n - 1], mask) for m, n in self.map.items()
                                   if m > 0 and n > 0)
        return out


def _rows_to_items(rows: torch.Tensor, labels: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per predicted item, whether its example is one of ``rows`` (a sentence: itself; a word: its
    sentence's row)."""
    if labels.shape[0] == rows.shape[0]:
        return rows.to(labels.device)
    per_row = batch["word_mask"].sum(1).cpu()
    return torch.repeat_interleave(rows, per_row).to(labels.device)


class IndexedBatches:
    """A task's training batches with ``example_index`` (the examples' rows in the training split),
    by which the teacher's cached logits are read back."""

    def __init__(self, batches: Any) -> None:
        if not hasattr(batches, "rows") or not hasattr(batches, "collate"):
            raise PtmError("distillation reads the task's batches by example; this task type's batches cannot be "
                           "indexed (multi-task fine-tuning is not distilled)")
        self.inner = batches
        self.steps_per_epoch = batches.steps_per_epoch

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        b = self.inner
        rows = np.array_split(b.rows(epoch, step), b.world_size)[b.rank]
        return {**b.collate(rows), "example_index": torch.as_tensor(rows, dtype=torch.long)}

    def eval_batches(self):
        return iter(())


@torch.no_grad()
def teacher_logits(teacher: nn.Module, collate: Any, n: int, batch_size: int = 64) -> list[torch.Tensor]:
    """The teacher's ``distillation_logits`` of training examples ``0 .. n-1``, one ``[n_i, K]``
    tensor each (float32, CPU), in eval mode."""
    teacher.eval()
    fn = _logits_of(teacher)
    out: list[torch.Tensor] = []
    for start in range(0, n, batch_size):
        rows = np.arange(start, min(n, start + batch_size))
        batch = collate(rows)
        logits, labels = fn(batch)
        if logits.shape[0] == len(rows):  # one prediction per example
            out.extend(row[None] for row in logits.float())
        else:  # one per word
            out.extend(logits.float().split(batch["word_mask"].sum(1).tolist()))
    return out


CACHE_FILE = "teacher_logits.safetensors"
log = logging.getLogger(__name__)


def logits_key(teacher: nn.Module, examples: Any) -> str:
    """BLAKE2b of the teacher's weights (every tensor's bytes, by name) and of the encoded training
    examples: what the cached logits were computed from."""
    h = hashlib.blake2b(digest_size=32)
    for name, t in sorted(teacher.state_dict().items()):
        h.update(name.encode() + str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(content_sha256(examples).encode())
    return h.hexdigest()


def cached_teacher_logits(teacher: nn.Module, collate: Any, n: int, path: Path | None,
                          key: str = "") -> list[torch.Tensor]:
    """:func:`teacher_logits`, kept on disk in ``path`` (the distillation's output directory): every
    seed and every resumed run reads them back instead of running the teacher over the training
    split again.  The file is keyed by content (``key``: :func:`logits_key` of the teacher's weights
    and the encoded training examples, stored in its metadata); it is used only under the same
    key, for the same number of examples, and when the teacher's logits of the first batch,
    computed again, equal the stored ones."""
    if path is None:
        return teacher_logits(teacher, collate, n)
    file = path / CACHE_FILE
    if file.is_file():
        try:
            with safe_open(str(file), "pt") as f:
                same = (f.metadata() or {}).get("key") == key
            stored = load_file(str(file)) if same else {}
            lengths = stored["lengths"].tolist() if same else []
            rows = list(stored["logits"].split(lengths)) if same and len(lengths) == n else None
        except Exception as exc:  # a damaged cache (truncated, other tensors): safetensors raises many kinds
            log.warning("%s cannot be read (%s): computing the teacher's logits again", file, " ".join(str(exc).split())[:200])
            rows = None
        else:
            if rows is not None:
                first = teacher_logits(teacher, collate, min(n, 64))
                if all(a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(first, rows)):
                    return rows
            log.info("%s was written for another teacher or training set: computing the teacher's logits again", file)
    rows = teacher_logits(teacher, collate, n)
    path.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(file, save({"logits": torch.cat(rows).contiguous(),
                                   "lengths": torch.tensor([len(r) for r in rows], dtype=torch.long)},
                                  metadata={"key": key}))
    return rows


class Distillation(Training):
    """Train the student task model against ``teacher`` (a fine-tuned task model of the same task and
    tokenizer).  ``cache``: reuse the teacher's logits of the training examples when no intermediate
    loss needs the teacher's states (computed once, and kept in ``cache_dir`` when given, for every
    seed and resume: :func:`cached_teacher_logits`); ``labelled``: the number of gold examples at the
    head of the training split (``None``: all); ``augment``: how the synthetic sentences among the
    teacher-labelled examples were made (:func:`ptmkit.compress.augment.synthetic_sentences`'s
    record; ``None``: none were), recorded with the settings."""

    def __init__(self, teacher: nn.Module, settings: DistilSettings, source: dict[str, Any], student: dict[str, Any],
                 labelled: int | None = None, cache: bool = True, cache_dir: Path | None = None,
                 augment: dict[str, Any] | None = None) -> None:
        self.teacher, self.settings, self.source, self.student = teacher, settings, source, student
        self.labelled, self.use_cache, self.cache_dir, self.augment = labelled, cache, cache_dir, augment
        # alpha 1 learns from the gold labels alone: a labels-only run, named so in the plan's warnings
        self.activity = "labels-only training" if settings.alpha == 1.0 else "distillation"

    def wrap(self, model: nn.Module, task: Any, encoded: dict[str, Any], batches: Any, seed: int):
        copy_head(model, self.teacher)  # the head starts from the teacher's where the shapes agree
        indexed = IndexedBatches(batches)
        n = task.train_size(encoded["train"])
        cache = None
        if self.use_cache and not self.settings.intermediate:
            key = logits_key(self.teacher, encoded["train"]) if self.cache_dir is not None else ""
            cache = cached_teacher_logits(self.teacher, batches.collate, n, self.cache_dir, key)
        labelled = n if self.labelled is None else self.labelled
        return Distiller(model, self.teacher, self.settings, cache, labelled), indexed

    def kept(self, trained: nn.Module) -> nn.Module:
        return trained.student

    def _augmentation(self) -> dict[str, Any]:
        # only when on: the records of runs without augmentation stay as they were (resume compares them)
        return {"augment": self.augment} if self.augment is not None else {}

    def describe(self) -> dict[str, Any]:
        return {"method": "distillation", **asdict(self.settings), "student": self.student,
                "teacher": self.source.get("run"), "labelled": self.labelled, **self._augmentation()}

    def derived_from(self) -> dict[str, Any]:
        return {"teacher": self.source}

    def compression(self) -> dict[str, Any]:
        return {"method": "distillation", **asdict(self.settings), "student": self.student, **self._augmentation()}


__all__ = ["CACHE_FILE", "DistilSettings", "Distillation", "Distiller", "IndexedBatches", "cached_teacher_logits",
           "capture", "logits_key", "teacher_logits"]
