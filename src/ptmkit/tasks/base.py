"""The task-type contract: one registered file per downstream task type.

A task type (``@register("task_type", "tagging")``) owns everything that differs between
downstream tasks: its data readers (built-in recipes' task specs and the user's own files), the
encoding of a split, the model it builds on the encoder, its batches, prediction, metrics and
prediction writer, and its own options (``options_class``, a frozen dataclass: ``crf`` for
tagging, ``doc_stride`` for span QA, ...).  Everything else — the Trainer, dev selection, staged
unfreezing, checkpoints and exact resume, the output directory, the common fine-tuning settings
(:class:`~ptmkit.tasks.finetune.FinetuneConfig`) — is shared by
:func:`ptmkit.tasks.finetune.finetune`, which knows no task type by name.

A task's data object names its type (``task_type`` attribute); built-in recipes declare it in
their task specs (``"type": "tagging"``); the user's files get it from ``--type`` or from their
columns (:func:`sniff_type`).  The options a user gives (``crf=true``) travel in
``FinetuneConfig.task`` and are validated by the type that reads them (unknown keys get the
nearest valid key).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from ptmkit import registry
from ptmkit.config import from_dict
from ptmkit.data.tasks import SPLITS, read_rows
from ptmkit.errors import PtmError, suggest


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A task type without options of its own."""


class TaskType:
    """Base class of registered task types; ``data`` is the task's data object, ``cfg`` a
    :class:`~ptmkit.tasks.finetune.FinetuneConfig` whose ``task`` dict holds this type's options
    (``self.options``, an ``options_class``)."""

    name: ClassVar[str]
    options_class: ClassVar[type] = NoOptions
    metrics: ClassVar[tuple[str, ...]] = ()  # the dev metrics ``select`` may name; the first is the default
    # the columns of the user's files and their defaults (``--text-column`` and friends map onto these)
    columns: ClassVar[dict[str, str | None]] = {}

    def __init__(self, data: Any, cfg: Any, tokenizer: Any, causal: bool, with_types: bool,
                 strict_options: bool = True) -> None:
        self.data, self.cfg, self.tokenizer, self.causal, self.with_types = data, cfg, tokenizer, causal, with_types
        self.options = self.read_options(cfg.task, strict_options)
        if cfg.select in self.metrics:
            self.select = cfg.select
        elif cfg.select == "accuracy":  # the config's default, for a task type without accuracy
            self.select = self.metrics[0]
        else:
            raise PtmError(f"select={cfg.select!r} is not a metric of {self.name} tasks; choose one of "
                           f"{', '.join(self.metrics)}")

    # -- options ------------------------------------------------------------------------------
    @classmethod
    def read_options(cls, given: dict[str, Any], strict: bool = True) -> Any:
        """This type's options from ``given``; with ``strict``, a key of another task type is an
        error naming the types it belongs to (``crf`` on a classification task)."""
        own = {f.name for f in dataclasses.fields(cls.options_class)}
        foreign = sorted(k for k in given if k not in own)
        if strict and foreign:
            key = foreign[0]
            owners = [t for t in registry.names("task_type") if key in option_keys(t)]
            if not owners:
                raise PtmError(f"unknown config key {key!r}{suggest(key, sorted(own))} for a {cls.name} task"
                               f"{_options_hint(cls)}")
            raise PtmError(f"{key} applies to {' and '.join(owners)} tasks; this is a {cls.name} task"
                           f"{_options_hint(cls)}")
        return from_dict(cls.options_class, {k: v for k, v in given.items() if k in own}, "finetune")

    # -- data ---------------------------------------------------------------------------------
    @classmethod
    def read_files(cls, train: str | Path, dev: str | Path, test: str | Path, name: str | None = None,
                   **columns: Any) -> Any:
        """The task from the user's three files (column names as in :attr:`columns`)."""
        raise NotImplementedError

    @classmethod
    def read_builtin(cls, name: str, spec: dict[str, Any], root: Path) -> Any:
        """A built-in recipe's task: ``spec["files"]`` under ``root``, its columns from ``spec``."""
        files = [root / f for f in spec["files"]]
        columns = {k: spec[k] for k in cls.columns if k in spec}
        return cls.read_files(*files, name=name, **columns)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        """Whether rows with these fields (a JSONL object's keys, a CSV header) are this type's."""
        return False

    # -- training and prediction ---------------------------------------------------------------
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

    def choose_on_dev(self, model: nn.Module, predictions: Any) -> Any:
        """Settle what the task type chooses on the dev split during fine-tuning (decision thresholds,
        say) from ``predictions`` of the dev split, storing it in ``model`` so the selected epoch's
        weights carry it; returns the dev predictions under that choice.  Called on every epoch's dev
        evaluation by :func:`~ptmkit.tasks.finetune.finetune` only: a saved model scored again or
        run on new text keeps what was chosen.  Default: nothing to choose."""
        return predictions

    def train_size(self, encoded_train: Any) -> int:
        """Training items per epoch (examples; span QA: windows)."""
        return len(self.data.train)

    def score(self, split: str, predictions: Any) -> dict[str, float]:
        raise NotImplementedError

    def write_predictions(self, path: Path, split: str, predictions: Any) -> None:
        raise NotImplementedError

    # -- prediction on new, unlabelled rows (``ptm predict``, :mod:`ptmkit.workflows.predict`) ---
    # the columns a prediction input needs (names of :attr:`columns`; none: not offered yet), the
    # optional ones, and the column one line of a plain text file fills (``None``: tables only)
    input_columns: ClassVar[tuple[str, ...]] = ()
    optional_columns: ClassVar[tuple[str, ...]] = ()
    line_column: ClassVar[str | None] = None
    formats: ClassVar[tuple[str, ...]] = ("jsonl",)  # output formats of ``ptm predict`` (the first: default)

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
        """The task data of a saved model (``info``: its ``task_model.json``) whose ``test`` split is
        ``rows`` (dicts keyed by this type's column names, no labels) and whose other splits are
        empty; with no rows, what builds the model."""
        raise PtmError(f"ptm predict does not run {cls.name} models yet; score them with ptm finetune RUN "
                       f"--eval-only")

    def bound(self, data: Any) -> "TaskType":
        """This task type bound to other data of the same task (caches kept)."""
        other = copy.copy(self)
        other.data = data
        return other

    def records(self, predictions: Any) -> list[dict[str, Any]]:
        """One JSON-able object per row of the ``test`` split: the inputs and the prediction."""
        raise NotImplementedError

    def format_record(self, record: dict[str, Any], fmt: str) -> str:
        """``record`` as text in output format ``fmt`` (one of :attr:`formats`), newline included."""
        return json.dumps(record, ensure_ascii=False) + "\n"


def _options_hint(cls: type[TaskType]) -> str:
    keys = option_keys(cls.name)
    return f" (its own settings: {', '.join(keys)})" if keys else ""


def type_of(name: str) -> type[TaskType]:
    """The registered task type ``name``."""
    return registry.get("task_type", name)


def task_type_names() -> list[str]:
    return registry.names("task_type")


def option_keys(name: str | None = None) -> list[str]:
    """The option keys of task type ``name`` (every type's, without a name)."""
    types = [type_of(name)] if name is not None else [type_of(n) for n in task_type_names()]
    return sorted({f.name for t in types for f in dataclasses.fields(t.options_class)})


def task_type_of(data: Any, cfg: Any, tokenizer: Any, causal: bool, with_types: bool) -> TaskType:
    """The task type of ``data`` (its ``task_type``; plain classification data has none)."""
    return type_of(getattr(data, "task_type", "classification"))(data, cfg, tokenizer, causal, with_types)


def sniff_type(path: str | Path) -> str:
    """The task type whose columns the first row of ``path`` has (classification if none)."""
    p = Path(path)
    try:
        fields = set(read_rows(p)[0])
    except PtmError:
        return "classification"  # not a JSONL/CSV/TSV table (CoNLL tagging files are named by --type)
    found = [n for n in task_type_names() if type_of(n).matches(fields)]
    if len(found) > 1:
        raise PtmError(f"{p}: the columns {', '.join(sorted(fields))} fit several task types ({', '.join(found)}); "
                       f"name one with --type")
    return found[0] if found else "classification"


def read_task_files(type_name: str | None, train: str | Path, dev: str | Path, test: str | Path,
                    **columns: Any) -> Any:
    """The user's task from three files: of ``type_name``, or the type their columns show."""
    if type_name is None:
        type_name = sniff_type(train)
    if type_name not in task_type_names():
        raise PtmError(f"unknown task type {type_name!r}{suggest(type_name, task_type_names())}; "
                       f"task types: {', '.join(task_type_names())}")
    cls = type_of(type_name)
    if cls.read_files.__func__ is TaskType.read_files.__func__:
        raise PtmError(f"{type_name} tasks are not read from files (multi_task: name built-in tasks with --tasks)")
    given = {k: v for k, v in columns.items() if v is not None}
    unknown = sorted(k for k in given if k not in cls.columns)
    if unknown:
        raise PtmError(f"{type_name} files have no {unknown[0]} column option; theirs: "
                       f"{', '.join(cls.columns) or 'none'}")
    return cls.read_files(train, dev, test, **given)


__all__ = ["NoOptions", "SPLITS", "TaskType", "option_keys", "read_task_files", "sniff_type", "task_type_names",
           "task_type_of", "type_of"]
