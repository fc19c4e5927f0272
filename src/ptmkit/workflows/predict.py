"""Run a fine-tuned task model on new, unlabelled text: the workflow behind ``ptm predict`` and
``ptmkit.predict``.

The model is any directory holding ``task_model.json`` (a fine-tuning run such as
``OUT/pretrained-seed0``, or a distilled, pruned or quantized model): it loads through
:func:`ptmkit.tasks.saved.load_task_model`, bound to prediction data its task type builds from the
input rows (:meth:`~ptmkit.tasks.base.TaskType.unlabelled`), so no training file is needed.  What
differs between task types (the columns a row needs, what a prediction looks like, CoNLL output
for tagging) is the task type's own: :attr:`~ptmkit.tasks.base.TaskType.input_columns`,
:meth:`~ptmkit.tasks.base.TaskType.records`, :meth:`~ptmkit.tasks.base.TaskType.format_record`.
Each chunk of rows goes through the same ``encode`` and ``predict_split`` as ``ptm finetune
--eval-only`` (batches sorted by length inside the chunk), so the predictions are theirs.

Input: a text file (one example per line: the type's :attr:`line_column`, words at white space
for tagging), or JSONL / CSV / TSV with the task's columns (by extension, or ``input_format``);
``-`` reads stdin.  Rows are read, predicted and written ``chunk_size`` at a time.
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import torch

from ptmkit.data.tasks import json_objects
from ptmkit.devices import resolve_device
from ptmkit.errors import PtmError, require_file
from ptmkit.fileio import atomic_stream
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.saved import TaskModel, load_predictor, uses_token_types

log = logging.getLogger(__name__)

INPUT_FORMATS = ("text", "jsonl", "csv", "tsv")
CHUNK = 1024  # rows read, predicted and written at a time


# ------------------------------------------------------------------------------------ the model


def predict_rows(tm: TaskModel, rows: list[dict[str, Any]], batch_size: int | None = None) -> list[dict[str, Any]]:
    """Predictions of the rows (dicts keyed by the task type's column names), one record each."""
    if not rows:
        return []
    data = type(tm.task).unlabelled(tm.info, rows)
    task = tm.task.bound(data)
    task.with_types = uses_token_types(tm.backbone, data)
    if batch_size is not None:
        task.cfg = replace(task.cfg, eval_batch_size=batch_size)
    device = next(tm.model.parameters(), torch.empty(0)).device
    with torch.no_grad():
        predictions = task.predict_split(tm.model.eval(), "test", task.encode("test"), device)
    return task.records(predictions)


def predict(run: str | Path | TaskModel, texts: Iterable[Any], batch_size: int | None = None,
            chunk_size: int = CHUNK, device: str | torch.device = "cpu") -> list[dict[str, Any]]:
    """``ptmkit.predict``: the fine-tuned task model in ``run`` (or a loaded one) on ``texts``.

    Each item is a string (the task type's line column: the text to classify, a sentence whose
    words are split at white space for tagging), a list of words (tagging), or a dict with the
    task's columns (``{"text": ..., "text_pair": ...}``; multiple choice ``{"text", "choices"}``,
    span QA ``{"question", "context"}``).  Returns one dict per item, in order: classification
    ``{"text", "prediction", "probabilities": {label: p}}``, multi-label ``{"text", "prediction" (the labels),
    "probabilities": {label: p}}``, tagging ``{"tokens", "tags"}``,
    regression ``{"text", "prediction"}``, multiple choice ``{"text", "choices", "prediction",
    "answer", "probabilities"}``, span QA ``{"question", "context", "answer", "score"}``, seq2seq
    ``{"source", "prediction"}``, sentence embedding ``{"text", "vector"}`` (with a ``text_pair``:
    ``{"text", "text_pair", "cosine"}``)."""
    tm = run if isinstance(run, TaskModel) else load_predictor(run, device)
    kind = type(tm.task)
    rows = (_as_row(kind, item, n) for n, item in enumerate(texts, 1))
    out: list[dict[str, Any]] = []
    for chunk in chunks(rows, chunk_size):
        out.extend(predict_rows(tm, chunk, batch_size))
    return out


def _as_row(kind: type[TaskType], item: Any, n: int) -> dict[str, Any]:
    if isinstance(item, dict):
        missing = [c for c in kind.input_columns if c not in item]
        if missing:
            raise PtmError(f"item {n} has no {missing[0]!r}; a {kind.name} model reads "
                           f"{_columns_text(kind)}")
        return item
    if kind.line_column is None:
        raise PtmError(f"a {kind.name} model reads rows with {_columns_text(kind)}: give dicts, not {type(item).__name__}")
    if isinstance(item, (list, tuple)) and kind.line_column == "tokens":
        return {"tokens": [str(w) for w in item]}
    if not isinstance(item, str):
        raise PtmError(f"item {n} is a {type(item).__name__}; give strings or dicts with {_columns_text(kind)}")
    return {kind.line_column: item}


def _columns_text(kind: type[TaskType]) -> str:
    optional = f" (optional: {', '.join(kind.optional_columns)})" if kind.optional_columns else ""
    return f"the columns {', '.join(kind.input_columns)}{optional}"


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    if size < 1:
        raise PtmError(f"--chunk-size must be at least 1, got {size}")
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ------------------------------------------------------------------------------------ the input


def input_format(path: str, given: str | None) -> str:
    """``text``, ``jsonl``, ``csv`` or ``tsv``: as given, else by the extension (stdin and
    anything else: text)."""
    if given is not None:
        if given not in INPUT_FORMATS:
            raise PtmError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}, got {given!r}")
        return given
    ext = Path(path).suffix.lower() if path != "-" else ""
    return {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv"}.get(ext, "text")


def read_lines(stream: IO[bytes], source: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 byte stream, line ends removed; bytes that are not UTF-8
    are one line naming the line."""
    for n, raw in enumerate(stream, 1):
        try:
            yield n, raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise PtmError(f"{source}:{n} is not UTF-8 text (byte {exc.start + 1} of the line); re-encode the "
                           f"input as UTF-8") from None


def read_input(stream: IO[bytes], source: str, fmt: str, kind: type[TaskType],
               columns: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of ``stream`` keyed by the task type's column names (``columns``: the user's
    names for them, ``{"text": "sentence"}``), one at a time."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(kind.input_columns) - set(kind.optional_columns))
    if unknown:
        raise PtmError(f"a {kind.name} model has no {unknown[0]!r} column; it reads {_columns_text(kind)}")
    if fmt == "text":
        if kind.line_column is None:
            raise PtmError(f"{source}: a {kind.name} model reads tables with {_columns_text(kind)}; give a JSONL, "
                           f"CSV or TSV file (or --input-format jsonl|csv|tsv)")
        for _, line in read_lines(stream, source):
            yield {kind.line_column: line}
        return
    if fmt == "jsonl":
        numbered = _json_rows(stream, source)
    else:
        text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
        reader = csv.DictReader(text, delimiter="\t" if fmt == "tsv" else ",")
        numbered = ((reader.line_num, row) for row in reader)
    wanted = {name: columns.get(name, name) for name in (*kind.input_columns, *kind.optional_columns)}
    present: dict[str, str] | None = None
    for n, row in _decoded(numbered, source):
        if present is None:  # the first row (a CSV header) decides which optional columns there are
            missing = [c for c in kind.input_columns if wanted[c] not in row]
            if missing:
                have = ", ".join(k for k in row if k is not None) or "none"
                raise PtmError(f"{source}: no column {wanted[missing[0]]!r}, which a {kind.name} model reads; the "
                               f"task's columns: {', '.join(kind.input_columns)}"
                               f"{' (optional: ' + ', '.join(kind.optional_columns) + ')' if kind.optional_columns else ''};"
                               f" the input has {have} (name yours: --column {missing[0]}=COLUMN)")
            present = {name: col for name, col in wanted.items() if col in row}
        if None in row:
            raise PtmError(f"{source}:{n}: more fields than the header has columns")
        values = {}
        for name, col in present.items():
            if row.get(col) is None:
                raise PtmError(f"{source}:{n}: no value in column {col!r}")
            values[name] = row[col]
        yield values


def _decoded(numbered: Iterator[tuple[int, dict[str, Any]]], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        yield from numbered
    except UnicodeDecodeError:
        raise PtmError(f"{source} is not UTF-8 text; re-encode it as UTF-8") from None
    except csv.Error as exc:
        raise PtmError(f"{source}: not a readable CSV/TSV table ({exc})") from None


def _json_rows(stream: IO[bytes], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    yield from json_objects(read_lines(stream, source), source)


# ----------------------------------------------------------------------------------- the output


def output_format(out: str, given: str | None, kind: type[TaskType]) -> str:
    """``jsonl``, or ``conll`` for a tagging model when given or when OUT ends in ``.conll``."""
    fmt = given or ("conll" if out != "-" and Path(out).suffix.lower() == ".conll" else kind.formats[0])
    if fmt not in kind.formats:
        raise PtmError(f"--format {fmt}: a {kind.name} model writes {', '.join(kind.formats)}")
    return fmt


def check_output(out: str, inputs: Iterable[str | Path], force: bool) -> None:
    """OUT is a new file, or an existing file replaced with ``force``; never an input or a directory."""
    if out == "-":
        return
    p = Path(out)
    if p.is_dir():
        raise PtmError(f"{p} is a directory; -o names the output file (e.g. {p / 'predictions.jsonl'})")
    for given in inputs:
        if given != "-" and Path(given).exists() and p.exists() and p.resolve() == Path(given).resolve():
            raise PtmError(f"{p} is an input of this command; write the output to another file")
        if given != "-" and p.resolve().is_relative_to(Path(given).resolve()) and Path(given).is_dir():
            raise PtmError(f"{p} is inside the model directory {given}; write the output elsewhere")
    if p.exists() and not force:
        raise PtmError(f"{p} exists; pass --force to replace it")


def open_source(path: str) -> tuple[IO[bytes], str]:
    if path == "-":
        return sys.stdin.buffer, "stdin"
    require_file(path, "input file")
    return open(path, "rb"), str(path)


def predict_file(run: str | Path, input_path: str, out: str, fmt: str | None = None, in_format: str | None = None,
                 columns: dict[str, str] | None = None, chunk_size: int = CHUNK, batch_size: int | None = None,
                 force: bool = False, device: str | torch.device = "cpu") -> int:
    """``ptm predict``: the predictions of every row of ``input_path`` written to ``out`` (``-``:
    stdout) as JSONL (or CoNLL for tagging), ``chunk_size`` rows at a time.  Returns the row count."""
    check_output(out, [input_path, str(run)], force)
    if chunk_size < 1:
        raise PtmError(f"--chunk-size must be at least 1, got {chunk_size}")
    if batch_size is not None and batch_size < 1:
        raise PtmError(f"--batch-size must be at least 1, got {batch_size}")
    tm = load_predictor(run, device)
    kind = type(tm.task)
    fmt = output_format(out, fmt, kind)
    stream, source = open_source(input_path)
    try:
        rows = read_input(stream, source, input_format(input_path, in_format), kind, columns)
        if out == "-":
            n = _write_all(tm, rows, sys.stdout.buffer, fmt, chunk_size, batch_size, source)
        else:
            with atomic_stream(out) as f:
                n = _write_all(tm, rows, f, fmt, chunk_size, batch_size, source)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    log.info("%d rows predicted -> %s", n, out if out != "-" else "stdout")
    return n


def _write_all(tm: TaskModel, rows: Iterator[dict[str, Any]], f: IO[bytes], fmt: str, chunk_size: int,
               batch_size: int | None, source: str) -> int:
    n = 0
    for chunk in chunks(rows, chunk_size):
        text = "".join(tm.task.format_record(r, fmt) for r in predict_rows(tm, chunk, batch_size))
        f.write(text.encode("utf-8"))
        f.flush()
        n += len(chunk)
    if n == 0:
        raise PtmError(f"{source} holds no rows to predict; give one example per line (a table: a header and rows)")
    return n


__all__ = ["CHUNK", "INPUT_FORMATS", "chunks", "load_predictor", "predict", "predict_file", "predict_rows", "read_input",
           "resolve_device"]
