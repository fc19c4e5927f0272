"""Multi-task fine-tuning (MT-DNN, Liu et al. 2019): one shared encoder, one head per task.

The tasks may be of any types at once (classification, tagging, multiple choice, span QA,
regression): every task keeps its own :class:`~ptmkit.tasks.base.TaskType`, and
:class:`MultiTask` composes them behind the same interface, so the multi-task run goes through
:func:`ptmkit.tasks.finetune.finetune` and the shared Trainer unchanged (checkpoints, exact
resume, dev selection, ``--after`` for a second, per-task stage).

Training (MT-DNN, Algorithm 1): every optimizer step takes one task's mini-batch.
``schedule="proportional"`` merges the mini-batches of all tasks of an epoch and shuffles them, so
each task gets ``ceil(N_t / batch_size)`` steps an epoch, in proportion to its size;
``"round_robin"`` alternates strictly ``t_0, t_1, ..., t_0, t_1, ...`` for ``max_t ceil(N_t / B)``
rounds, smaller tasks starting another reshuffled pass when theirs is used up.  The order is a
pure function of ``(seed, epoch)``, so a resumed run sees the same batches.

Model selection uses the mean over tasks of each task's ``select`` metric on its dev split
(``mean`` in the dev record, next to ``{task}/{metric}`` for every task's metrics).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from ptmkit.data.tasks import load_task
from ptmkit.errors import PtmError
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType, option_keys, type_of
from ptmkit.train.step import StepOutput

TASK_SCHEDULES = ("proportional", "round_robin")
# a task whose data runs out within a round-robin epoch reshuffles with this "epoch" offset per pass,
# so that no pass repeats another epoch's order (for runs of fewer than this many epochs)
_PASS_OFFSET = 1_000_003


# ------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class MultiSplit:
    """One split of every task: ``parts[name]`` is that task's split."""

    parts: dict[str, Any]

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts.values())


@dataclass(frozen=True)
class MultiTaskData:
    """Several tasks' data, trained together; ``tasks[name]`` is a task's own data object."""

    tasks: dict[str, Any]
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "multi_task"

    def __post_init__(self) -> None:
        if len(self.tasks) < 2:
            raise PtmError(f"multi-task fine-tuning needs at least two tasks, got {len(self.tasks)}: "
                           f"give several, e.g. --tasks mr,brown-pos")
        for name, data in self.tasks.items():
            if getattr(data, "task_type", "classification") == "multi_task":
                raise PtmError(f"task {name!r} is itself a multi-task set; list its tasks instead")
            if not name or "." in name:
                raise PtmError(f"task name {name!r} must be non-empty and contain no '.'")
        if not self.name:
            object.__setattr__(self, "name", "+".join(self.tasks))

    def split(self, name: str) -> MultiSplit:
        return MultiSplit({t: d.split(name) for t, d in self.tasks.items()})

    @property
    def train(self) -> MultiSplit:
        return self.split("train")

    @property
    def dev(self) -> MultiSplit:
        return self.split("dev")

    @property
    def test(self) -> MultiSplit:
        return self.split("test")

    @property
    def is_pair(self) -> bool:
        return any(getattr(d, "is_pair", False) for d in self.tasks.values())

    @property
    def label_names(self) -> list[str]:
        """``task:label`` for every labelled task (tasks without a label set add nothing)."""
        return [f"{t}:{x}" for t, d in self.tasks.items() for x in getattr(d, "label_names", [])]

    def with_train_size(self, n: int, seed: int = 0) -> "MultiTaskData":
        """At most ``n`` training examples of each task (a smaller task keeps all of its own)."""
        tasks = {t: d.with_train_size(min(n, len(d.train)), seed) for t, d in self.tasks.items()}
        return replace(self, tasks=tasks, meta={**self.meta, "train_size": n, "train_subset_seed": seed})


def load_tasks(names: str | list[str]) -> MultiTaskData:
    """Built-in tasks by name (``"mr,brown-pos"`` or a list) as one :class:`MultiTaskData`."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise PtmError(f"a task is listed twice in {','.join(names)}; give each task once")
    return MultiTaskData({n: load_task(n) for n in names})


# ---------------------------------------------------------------------------------------- batches


class MultiTaskBatches:
    """One task's mini-batch per step, from the tasks' own batch sources (a ``BatchSource``).

    Batch ``(epoch, step)`` is task ``t``'s batch with ``task = t`` (a 0-d tensor) added.
    """

    def __init__(self, sources: list[Any], seed: int, schedule: str = "proportional") -> None:
        if schedule not in TASK_SCHEDULES:
            raise PtmError(f"task_schedule must be one of {', '.join(TASK_SCHEDULES)}, got {schedule!r}")
        self.sources, self.seed, self.schedule = sources, seed, schedule
        self.counts = np.array([int(s.steps_per_epoch) for s in sources], dtype=np.int64)  # batches per task
        self.steps_per_epoch = int(self.counts.sum() if schedule == "proportional" else len(sources) * self.counts.max())
        self._plan: tuple[int, np.ndarray, np.ndarray] | None = None

    def plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(task[S], k[S])``: step ``s`` of ``epoch`` takes the ``k[s]``-th batch of task ``task[s]``."""
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1], self._plan[2]
        T = len(self.sources)
        if self.schedule == "round_robin":
            rounds = int(self.counts.max())
            task = np.tile(np.arange(T), rounds)
            k = np.repeat(np.arange(rounds), T)
        else:
            merged = np.repeat(np.arange(T), self.counts)
            task = merged[np.random.default_rng([self.seed, epoch, T]).permutation(len(merged))]
            # k-th occurrence of each task in the shuffled order: a stable sort groups the tasks
            # and keeps their order, so arange within each group numbers the occurrences
            order = np.argsort(task, kind="stable")
            k = np.empty(len(task), dtype=np.int64)
            k[order] = np.arange(len(task)) - np.repeat(np.cumsum(self.counts) - self.counts, self.counts)
        self._plan = (epoch, task, k)
        return task, k

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        task, k = self.plan(epoch)
        t = int(task[step])
        passes, within = divmod(int(k[step]), int(self.counts[t]))
        batch = dict(self.sources[t](epoch + passes * _PASS_OFFSET, within))
        batch["task"] = torch.tensor(t, dtype=torch.int64)
        return batch

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        return iter(())


# ------------------------------------------------------------------------------------------ model


class MultiTaskModel(nn.Module):
    """A shared ``backbone`` and one task model per task (``heads[name]``, built on that backbone).

    The task models keep using ``self.backbone`` but no longer own it: it is registered once, here,
    so the state dict holds ``backbone.*`` once (what ``--after`` reads) and ``heads.{name}.*``.
    ``forward(batch)`` runs the head of ``batch["task"]``: only that head and the encoder get
    gradients from the batch.  Its metrics keep the head's names, so a logged train ``accuracy``
    is the mean over the window's steps, whichever task each step had.
    """

    def __init__(self, backbone: nn.Module, heads: dict[str, nn.Module]) -> None:
        super().__init__()
        self.backbone = backbone
        self.heads = nn.ModuleDict()
        for name, model in heads.items():
            # the module holding the encoder may be nested (a regressor wraps a classifier)
            owners = [m for m in model.modules() if m._modules.get("backbone") is backbone]
            if not owners:
                raise PtmError(f"the model of task {name!r} is not built on the shared encoder")
            for owner in owners:
                del owner._modules["backbone"]
                owner.__dict__["backbone"] = backbone  # a plain reference: read by the head, owned here
            self.heads[name] = model
        self.task_names = list(heads)

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        name = self.task_names[int(batch["task"])]
        return self.heads[name]({k: v for k, v in batch.items() if k != "task"})


# -------------------------------------------------------------------------------------- task type


@dataclass(frozen=True)
class MultiTaskOptions:
    """task_schedule: ``proportional`` (each step one task's batch, the epoch's batches of all
    tasks shuffled together, so tasks train in proportion to their size) or ``round_robin``
    (strict alternation of the tasks)."""

    task_schedule: str = "proportional"

    def __post_init__(self) -> None:
        if self.task_schedule not in TASK_SCHEDULES:
            raise PtmError(f"task_schedule must be one of {', '.join(TASK_SCHEDULES)}, got {self.task_schedule!r}")


@register("task_type", "multi_task")
class MultiTask(TaskType):
    """The tasks of a :class:`MultiTaskData` composed into one task type for ``finetune``: each
    part reads its own options from the same settings (``crf`` reaches the tagging tasks)."""

    name = "multi_task"
    options_class = MultiTaskOptions
    metrics = ("mean",)

    def __init__(self, data: MultiTaskData, cfg: Any, tokenizer: Any, causal: bool, with_types: bool,
                 strict_options: bool = True) -> None:
        self.data, self.cfg, self.tokenizer, self.causal, self.with_types = data, cfg, tokenizer, causal, with_types
        self.options = self.read_options(cfg.task, strict=False)
        part_types = {name: type_of(getattr(d, "task_type", "classification")) for name, d in data.tasks.items()}
        known = set(option_keys("multi_task")).union(*(option_keys(t.name) for t in part_types.values()))
        unknown = sorted(k for k in cfg.task if k not in known)
        if unknown:
            raise PtmError(f"{unknown[0]} applies to none of the tasks {', '.join(data.tasks)} "
                           f"({', '.join(sorted({t.name for t in part_types.values()}))})")
        self.parts = {name: part_types[name](d, cfg, tokenizer, causal, with_types, strict_options=False)
                      for name, d in data.tasks.items()}
        losses = [name for name, p in self.parts.items() if p.select == "loss"]
        if losses:
            raise PtmError(f"multi-task selection averages the tasks' dev scores, but select=loss for {', '.join(losses)}; "
                           f"choose a score that grows (select=accuracy picks each task's main metric)")
        self.select = "mean"

    def encode(self, split: str) -> dict[str, Any]:
        return {name: p.encode(split) for name, p in self.parts.items()}

    def build(self, backbone: nn.Module) -> MultiTaskModel:
        # the heads are built in task order after the backbone, so they depend only on the seed
        return MultiTaskModel(backbone, {name: p.build(backbone) for name, p in self.parts.items()})

    def batches(self, encoded_train: dict[str, Any], seed: int) -> MultiTaskBatches:
        sources = [p.batches(encoded_train[name], seed) for name, p in self.parts.items()]
        return MultiTaskBatches(sources, seed, self.options.task_schedule)

    def train_size(self, encoded_train: dict[str, Any]) -> int:
        return sum(p.train_size(encoded_train[name]) for name, p in self.parts.items())

    def predict_split(self, model: MultiTaskModel, split: str, encoded: dict[str, Any], device: Any) -> dict[str, Any]:
        model.eval()  # the heads' own eval() does not reach the shared encoder they do not own
        return {name: p.predict_split(model.heads[name], split, encoded[name], device) for name, p in self.parts.items()}

    def choose_on_dev(self, model: MultiTaskModel, predictions: dict[str, Any]) -> dict[str, Any]:
        return {name: p.choose_on_dev(model.heads[name], predictions[name]) for name, p in self.parts.items()}

    def score(self, split: str, predictions: dict[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, p in self.parts.items():
            scores = p.score(split, predictions[name])
            out.update({f"{name}/{k}": v for k, v in scores.items()})
        out["mean"] = float(np.mean([out[f"{name}/{p.select}"] for name, p in self.parts.items()]))
        return dict(sorted(out.items()))

    def write_predictions(self, path: Path, split: str, predictions: dict[str, Any]) -> None:
        """One file per task next to ``path``: ``predictions-{task}.jsonl``."""
        for name, p in self.parts.items():
            p.write_predictions(path.with_name(f"{path.stem}-{name}{path.suffix}"), split, predictions[name])
