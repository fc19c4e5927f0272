"""Labelled data for sequence classification: the built-in MR task and the user's own files.

A :class:`TaskData` holds three :class:`TaskSplit` (train/dev/test) and the label vocabulary,
taken from the training split (sorted, so it does not depend on row order).  Files can be
JSONL, CSV or TSV, with one sentence or a sentence pair per row and string or integer labels.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit import registry
from ptmkit.data.sources.base import fetch
from ptmkit.errors import PtmError, require_file, suggest

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class TaskSplit:
    """One split: ``texts[N]``, optional ``text_pairs[N]``, ``labels[N]`` (int64 indices)."""

    texts: list[str]
    labels: np.ndarray
    text_pairs: list[str] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, index: np.ndarray) -> "TaskSplit":
        """The rows ``index`` (an integer array), in that order."""
        idx = [int(i) for i in index]
        pairs = [self.text_pairs[i] for i in idx] if self.text_pairs is not None else None
        return TaskSplit([self.texts[i] for i in idx], self.labels[np.asarray(idx, dtype=np.int64)], pairs)


class TaskSplits:
    """What every task's data has: ``name``, ``train`` / ``dev`` / ``test`` splits with ``subset``,
    and ``meta``; mixed into the data classes of every task type."""

    name: str
    meta: dict[str, Any]

    def split(self, name: str) -> Any:
        if name not in SPLITS:
            raise PtmError(f"unknown split {name!r}{suggest(name, SPLITS)}; splits: {', '.join(SPLITS)}")
        return getattr(self, name)

    def with_train_size(self, n: int, seed: int = 0) -> Any:
        """Keep a fixed random subset of ``n`` training rows (the same for a given ``seed``)."""
        train = self.train  # type: ignore[attr-defined]
        if n <= 0:
            raise PtmError(f"--train-size must be a positive number of examples, got {n}")
        if n > len(train):
            raise PtmError(
                f"--train-size {n} exceeds the {len(train)} training examples of {self.name}; "
                f"give at most {len(train)}, or leave --train-size out to use them all"
            )
        if n == len(train):
            return self
        rng = np.random.default_rng(seed)
        index = np.sort(rng.permutation(len(train))[:n])
        return replace(self, train=train.subset(index), meta={**self.meta, "train_size": n, "train_subset_seed": seed})


@dataclass(frozen=True)
class TaskData(TaskSplits):
    """A classification task: ``label_names[k]`` is the original value of label index ``k``."""

    name: str
    label_names: list[Any]
    train: TaskSplit
    dev: TaskSplit
    test: TaskSplit
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def is_pair(self) -> bool:
        return self.train.text_pairs is not None


# ---------------------------------------------------------------------------------------- reading


def _sniff_format(path: Path) -> str:
    """``jsonl``, ``csv`` or ``tsv`` from the extension, else from the first line."""
    ext = path.suffix.lower()
    if ext in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if ext == ".tsv":
        return "tsv"
    if ext == ".csv":
        return "csv"
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    if first.lstrip().startswith("{"):
        return "jsonl"
    return "tsv" if first.count("\t") >= first.count(",") and "\t" in first else "csv"


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL/CSV/TSV file as dicts (CSV/TSV need a header line)."""
    return [row for _, row in read_numbered_rows(path)]



def json_objects(lines: Iterable[tuple[int, str]], source: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of JSONL ``lines`` (numbered); a line
    that is not a JSON object is an error naming ``source`` and the line."""
    for n, line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PtmError(f"{source}:{n}: not valid JSON ({exc.msg}); expected one JSON object per line") from None
        if not isinstance(row, dict):
            raise PtmError(f"{source}:{n}: expected a JSON object per line, got {type(row).__name__}")
        yield n, row


def read_numbered_rows(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line, row)`` of every row of a JSONL/CSV/TSV file, for messages naming the line."""
    path = require_file(path, "data file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PtmError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); re-encode it as UTF-8") from exc
    if "\x00" in text:
        raise PtmError(f"{path} looks binary (it contains NUL bytes); expected JSONL, CSV or TSV text")
    fmt = _sniff_format(path)
    rows: list[tuple[int, dict[str, Any]]] = []
    if fmt == "jsonl":
        rows.extend(json_objects(enumerate(text.splitlines(), 1), path))
    else:
        reader = csv.DictReader(io.StringIO(text), delimiter="\t" if fmt == "tsv" else ",")
        if not reader.fieldnames:
            raise PtmError(f"{path} is empty; a {fmt.upper()} file needs a header line naming its columns")
        for n, row in enumerate(reader, 2):
            if None in row:
                raise PtmError(f"{path}:{n}: more fields than the header has columns ({', '.join(reader.fieldnames)})")
            rows.append((n, row))
    if not rows:
        raise PtmError(f"{path} has no rows (an empty split); every split needs at least one example")
    return rows


def _column(rows: list[dict[str, Any]], column: str, path: Path) -> list[Any]:
    available = list(rows[0].keys())
    if column not in available:
        raise PtmError(
            f"{path}: no column {column!r}{suggest(column, available)}; available columns: {', '.join(available)}"
        )
    values = []
    for n, row in enumerate(rows, 1):
        if column not in row or row[column] is None:
            raise PtmError(f"{path}: row {n} has no value in column {column!r}")
        values.append(row[column])
    return values


def _texts(rows: list[dict[str, Any]], column: str, path: Path) -> list[str]:
    """The column's texts.  Empty texts give the classifier nothing but [CLS] [SEP] to go on: all of
    them or most empty is an error (usually the wrong --text-column or a broken export), a few
    empty ones are reported."""
    texts = [str(t) for t in _column(rows, column, path)]
    empty = [n for n, t in enumerate(texts, 1) if not t.strip()]
    if empty and 2 * len(empty) > len(texts):
        raise PtmError(
            f"{path}: {len(empty)} of {len(texts)} rows have an empty {column!r} column (first: row {empty[0]}); "
            f"check --text-column / --pair-column or the file"
        )
    if empty:
        log.warning("%s: %d of %d rows have an empty %r column (first: row %d); they are kept", path, len(empty),
                    len(texts), column, empty[0])
    return texts


def _label_key(value: Any) -> Any:
    # JSON numbers and CSV strings both become one comparable key; "1" and 1 are the same label.
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        try:
            return int(s)
        except ValueError:
            return s
    if isinstance(value, int):
        return value
    raise PtmError(f"label {value!r} is neither a string nor an integer")


def _sorted_labels(keys: set[Any]) -> list[Any]:
    ints = sorted(k for k in keys if isinstance(k, int))
    strs = sorted(str(k) for k in keys if not isinstance(k, int))
    return ints + strs


def load_files(
    train: str | Path,
    dev: str | Path,
    test: str | Path,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    name: str | None = None,
) -> TaskData:
    """Read a classification task from three files (JSONL, CSV or TSV by extension/sniffing).

    The label vocabulary comes from ``train``; a label in ``dev``/``test`` that ``train`` lacks
    is an error (the classifier could never predict it).
    """
    raw: dict[str, tuple[list[str], list[str] | None, list[Any]]] = {}
    for split, path in zip(SPLITS, (train, dev, test)):
        path = Path(path)
        rows = read_rows(path)
        texts = _texts(rows, text_column, path)
        pairs = _texts(rows, text_pair_column, path) if text_pair_column else None
        labels = [_label_key(v) for v in _column(rows, label_column, path)]
        raw[split] = (texts, pairs, labels)
    label_names = _sorted_labels(set(raw["train"][2]))
    if len(label_names) < 2:
        raise PtmError(f"{train}: the training split has a single label ({label_names[0]!r}); need at least two classes")
    index = {k: i for i, k in enumerate(label_names)}
    splits: dict[str, TaskSplit] = {}
    for split, path in zip(SPLITS, (train, dev, test)):
        texts, pairs, labels = raw[split]
        unseen = sorted({str(k) for k in labels if k not in index})
        if unseen:
            raise PtmError(
                f"{path}: label(s) {', '.join(unseen)} do not occur in the training file {train}; "
                f"known labels: {', '.join(map(str, label_names))}"
            )
        splits[split] = TaskSplit(texts, np.array([index[k] for k in labels], dtype=np.int64), pairs)
    return TaskData(
        name=name or Path(train).stem,
        label_names=label_names,
        train=splits["train"],
        dev=splits["dev"],
        test=splits["test"],
        meta={"files": [str(train), str(dev), str(test)]},
    )


def builtin_tasks() -> dict[str, tuple[str, dict[str, Any]]]:
    """``{task name: (data recipe, task spec)}`` over every registered recipe's ``tasks``."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for source in registry.names("source"):
        for task, spec in getattr(registry.get("source", source), "tasks", {}).items():
            out[task] = (source, spec)
    return dict(sorted(out.items()))


def load_task(name: str) -> Any:
    """A built-in task by name, fetched on first use and read by its recipe's task type (the
    spec's ``type``, registered in :mod:`ptmkit.tasks`): a :class:`TaskData` for classification
    (``"mr"``, ``"zh-reviews"``), a ``TaggingData`` for tagging (``"brown-pos"``), ..."""
    tasks = builtin_tasks()
    if name not in tasks:
        raise PtmError(f"unknown task {name!r}{suggest(name, tasks)}; built-in tasks: {', '.join(tasks)}")
    source, spec = tasks[name]
    kind = spec.get("type", "classification")
    if kind not in registry.names("task_type"):
        raise PtmError(f"task {name!r} is a {kind} task, which ptm finetune cannot train; task types: "
                       f"{', '.join(registry.names('task_type'))}")
    root = fetch(source)
    data = registry.get("task_type", kind).read_builtin(name, spec, root)
    languages = {"languages": dict(spec["languages"])} if spec.get("languages") else {}  # per split (XLM)
    return replace(data, meta={**data.meta, "source": source, "dir": str(root), **languages})
