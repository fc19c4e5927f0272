"""The task options of the commands that score a saved model on its task (``ptm prune``, ``ptm quantize``,
``ptm distil``) and the column options ``ptm finetune`` shares with them: one definition, one reading."""

from __future__ import annotations

import argparse
from typing import Any


def column_pair(text: str) -> tuple[str, str]:
    """``NAME=COLUMN`` of ``--column``."""
    name, eq, column = text.partition("=")
    if not eq or not name or not column:
        raise argparse.ArgumentTypeError(f"expected NAME=COLUMN, got {text!r}")
    return name, column


def add_column_arguments(p: argparse.ArgumentParser) -> None:
    """``--text-column``, ``--pair-column``, ``--label-column`` and ``--column NAME=COLUMN``."""
    p.add_argument("--text-column", default=None, help="column of the (first) text (default: text)")
    p.add_argument("--pair-column", default=None, help="column of the second text for sentence pairs")
    p.add_argument("--label-column", default=None, help="column of the label or target (default: label)")
    p.add_argument("--column", dest="columns", action="append", type=column_pair, metavar="NAME=COLUMN",
                   help="any column of the task type's files, e.g. --column tokens=words")


def add_task_arguments(p: Any) -> None:
    """The task a saved model is scored on: the one it was fine-tuned on, another built-in task, or
    the user's own files with their columns."""
    p.add_argument("--task", help="built-in task to score on (default: the one RUN was fine-tuned on): {names:task}")
    p.add_argument("--train", metavar="FILE", help="your own task's training file (JSONL/CSV/TSV)")
    p.add_argument("--dev", metavar="FILE", help="your own task's dev file")
    p.add_argument("--test", metavar="FILE", help="your own task's test file")
    p.add_argument("--type", default=None, metavar="TYPE", help="task type of the files ({names:task_type})")
    add_column_arguments(p)


def add_timing_arguments(p: argparse.ArgumentParser) -> None:
    """``--threads`` and ``--rounds`` of the commands that time a model before and after compressing it."""
    p.add_argument("--threads", type=int, default=2, metavar="N",
                   help="CPU threads for scoring and timing (default: 2)")
    p.add_argument("--rounds", type=int, default=5, metavar="N",
                   help="timing rounds; the speeds are medians over them (default: 5)")


def columns_of(args: argparse.Namespace) -> dict[str, str]:
    """The column names the options give (``--column`` pairs and the three named ones)."""
    columns = dict(args.columns or [])
    for name, value in (("text", args.text_column), ("text_pair", args.pair_column), ("label", args.label_column)):
        if value is not None:
            columns[name] = value
    return columns


def task_files(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    return args.train, args.dev, args.test


def task_loader(args: argparse.Namespace, task_data: Any) -> Any:
    """``() -> the task`` when the options name one, else ``None`` (the model's own task);
    ``task_data`` is :func:`ptmkit.workflows.finetune.task_data`."""
    files, columns = task_files(args), columns_of(args)
    if not (args.task or any(files)):
        return None
    return lambda: task_data(args.task, None, files, args.type, columns)
