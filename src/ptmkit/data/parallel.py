"""Parallel text (translation pairs) prepared as a corpus, for XLM's translation language model.

``ptm prepare PAIRS --parallel en,es -t tok.json -o par-en-es`` reads pairs from

* one JSON Lines, CSV or TSV file with a field (column) per language code (``{"ref": "Gen.1.1",
  "en": "...", "es": "..."}``), or
* one file per language (``en.txt es.txt``, in the order of ``--parallel``), line ``k`` of each
  being pair ``k``: plain text (one sentence a line) or JSON Lines whose text is in ``--field``.
  Files of unequal length are refused, naming both counts; JSON Lines that carry a ``ref`` must
  carry the same reference on each line (the first line where they differ is named).

Every pair needs text on both sides (an empty side is refused with its line number: a missing
translation would silently shift every later pair).  The pairs are written as an ordinary
prepared corpus whose document ``k`` is pair ``k``: its sentence 0 in the first language, its
sentence 1 in the second; ``meta.json`` records ``parallel: [first, second]`` and ``pairs``.  So
every reader of corpora reads it, and :func:`pair_ranges` gives the token ranges of both sides.
"""

from __future__ import annotations

import csv
import itertools
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.data.tasks import json_objects
from ptmkit.data.textfiles import TextFormat
from ptmkit.data.writer import source_record
from ptmkit.errors import PtmError, require_file
from ptmkit.tokenization.languages import check_codes

PAIR_SENTENCES = 2  # a pair is a document of two sentences


def _one_line(text: Any, where: str) -> str:
    if not isinstance(text, str):
        raise PtmError(f"{where}: expected text, found {type(text).__name__}")
    flat = " ".join(text.split())  # a line break inside a side would make it two sentences
    if not flat:
        raise PtmError(f"{where}: the text is empty; every pair needs text in both languages (drop the pair, or "
                       f"fill in the translation)")
    return flat


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        yield from json_objects(enumerate(f, 1), path)


def _table(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        for number, row in enumerate(reader, 2):
            yield number, row


def read_pairs(files: Sequence[str | os.PathLike[str]], languages: Sequence[str],
               field: str = "text") -> Iterator[tuple[str | None, str, str]]:
    """``(ref or None, first, second)`` for each pair, in order (see the module docstring)."""
    a, b = check_codes(languages) if len(languages) == 2 else (None, None)
    if a is None or a == b:
        raise PtmError(f"--parallel names two different languages (en,es), got {','.join(languages)!r}")
    paths = [Path(f) for f in files]
    for p in paths:
        require_file(p, "parallel text file")
    if len(paths) == 1:
        path = paths[0]
        kind = path.suffix.lower()
        if kind not in (".jsonl", ".json", ".ndjson", ".csv", ".tsv"):
            raise PtmError(f"{path}: one parallel file must be JSON Lines, CSV or TSV with a field per language "
                           f"({a}, {b}); or give one plain text file per language, line-aligned")
        rows = _jsonl(path) if kind in (".jsonl", ".json", ".ndjson") else _table(path)
        for number, row in rows:
            missing = [c for c in (a, b) if c not in row]
            if missing:
                raise PtmError(f"{path}, line {number}: no field {missing[0]!r}; each row needs a field per "
                               f"language of --parallel ({a}, {b})")
            where = f"{path}, line {number}"
            yield row.get("ref"), _one_line(row[a], f"{where} ({a})"), _one_line(row[b], f"{where} ({b})")
        return
    if len(paths) != 2:
        raise PtmError(f"--parallel {a},{b} reads one file with both languages or one file per language; got "
                       f"{len(paths)} files")
    yield from _aligned_files(paths, (a, b), field)


def _side(path: Path, field: str) -> Iterator[tuple[int, str | None, Any]]:
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        for number, row in _jsonl(path):
            if field not in row:
                raise PtmError(f"{path}, line {number}: no field {field!r} (the text; name it with --field)")
            yield number, row.get("ref"), row[field]
        return
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            yield number, None, line.rstrip("\r\n")


def _aligned_files(paths: list[Path], codes: tuple[str, str], field: str) -> Iterator[tuple[str | None, str, str]]:
    first, second = _side(paths[0], field), _side(paths[1], field)
    count = 0
    while True:
        x, y = next(first, None), next(second, None)
        if x is None or y is None:
            if x is not y:
                longer, shorter = (paths[0], paths[1]) if y is None else (paths[1], paths[0])
                rest = 1 + sum(1 for _ in (first if y is None else second))
                raise PtmError(f"{longer} has {count + rest} lines but {shorter} {count}: the files of --parallel must "
                               f"be line-aligned (pair k = line k of each); fix or drop the unpaired lines")
            return
        count += 1
        if x[1] is not None and y[1] is not None and x[1] != y[1]:
            raise PtmError(f"line {x[0]} of {paths[0]} is {x[1]!r} but line {y[0]} of {paths[1]} is {y[1]!r}: the "
                           f"files are not aligned by reference; pair the lines by ref before preparing")
        yield (x[1] if x[1] is not None else y[1], _one_line(x[2], f"{paths[0]}, line {x[0]} ({codes[0]})"),
               _one_line(y[2], f"{paths[1]}, line {y[0]} ({codes[1]})"))


def write_pairs_text(pairs: Iterator[tuple[str | None, str, str]], path: Path) -> int:
    """The pairs as plain text a prepare reads: ``first\\nsecond\\n\\n`` per pair; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for _ref, x, y in pairs:
            f.write(f"{x}\n{y}\n\n")
            n += 1
    if not n:
        raise PtmError("no pairs to prepare: the parallel file(s) hold no rows")
    return n


def check_pairs(corpus: Any, n_pairs: int) -> None:
    """A prepared parallel corpus must hold ``n_pairs`` documents of exactly two sentences each."""
    docs = np.asarray(corpus.documents, dtype=np.int64)
    sizes = np.diff(docs)
    if len(sizes) != n_pairs or np.any(sizes != PAIR_SENTENCES):
        bad = int(np.flatnonzero(sizes != PAIR_SENTENCES)[0]) if np.any(sizes != PAIR_SENTENCES) else len(sizes)
        raise PtmError(f"pair {bad + 1} has a side the tokenizer turns into no token (only characters it drops); "
                       f"remove or fix that pair")


def pair_ranges(corpus: Any, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Token ranges of the pairs ``docs [N]`` of a parallel corpus: ``a0, a1, b0, b1`` ``int64 [N]``
    (first side ``[a0, a1)``, second ``[b0, b1)``)."""
    sent = np.asarray(corpus.sentences, dtype=np.int64)
    first = np.asarray(corpus.documents, dtype=np.int64)[np.asarray(docs, dtype=np.int64)]
    return sent[first], sent[first + 1], sent[first + 1], sent[first + 2]


def prepare_parallel(files: Sequence[str | os.PathLike[str]], languages: Sequence[str], tokenizer: Any,
                     out_dir: str | os.PathLike[str], field: str = "text", **options: Any) -> Any:
    """Read, check and prepare the pairs of ``files`` (see the module docstring) into ``out_dir``;
    ``options`` go to :func:`~ptmkit.data.prepare.prepare`.  Returns the opened corpus."""
    pairs = read_pairs(files, languages, field)
    first = next(pairs, None)  # bad arguments fail before any file is written
    if first is None:
        raise PtmError(f"no pairs in {', '.join(map(str, files))}: the parallel file(s) hold no rows")
    with tempfile.TemporaryDirectory(prefix="ptm-pairs-") as tmp:
        text = Path(tmp) / "pairs.txt"
        n = write_pairs_text(itertools.chain([first], pairs), text)
        labels = {"parallel": list(languages), "pairs": n,
                  "sources": [source_record(Path(f), TextFormat(field=field)) for f in files]}
        return prepare([text], tokenizer, out_dir, labels=labels,
                       verify=lambda root: check_pairs(Corpus.open(root), n), **options)


__all__ = ["check_pairs", "pair_ranges", "prepare", "prepare_parallel", "read_pairs", "write_pairs_text"]
