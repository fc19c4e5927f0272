"""Labelled lines for the fastText classifier: fastText's ``__label__`` files and built-in tasks.

A data set is :class:`LabelledLines`: ``texts[N]`` (whitespace-tokenised when encoded, as fastText)
and ``labels[N]``, each a list of label names (empty for unlabelled text to predict).

- :func:`read_label_file`: fastText's format, one example per line, labels are the tokens starting
  with ``__label__`` (anywhere in the line), the rest is the text;
- :func:`task_lines`: a split of a built-in classification task (``ptmkit.data.tasks.load_task``,
  a sentence pair joined with a space) or of ``brown-genre``, built here from the Brown corpus:
  passages of 5 consecutive sentences labelled with their document's genre (15 genres), split by
  document (the k-th document of each genre goes to dev if k % 5 = 3, to test if k % 5 = 4), so no
  document is on both sides, each split in a fixed random order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import fetch
from ptmkit.data.tasks import TaskData, builtin_tasks, load_task
from ptmkit.errors import PtmError, require_file

LABEL_PREFIX = "__label__"
BROWN_GENRE = "brown-genre"
PASSAGE_SENTENCES = 5


@dataclass(frozen=True)
class LabelledLines:
    """texts[N] and labels[N] (list of label names per line, without the ``__label__`` prefix)."""

    texts: list[str]
    labels: list[list[str]]

    def __len__(self) -> int:
        return len(self.texts)

    def to_label_file(self, path: str | Path) -> None:
        """Write in fastText's format (``__label__A __label__B text``, one line each)."""
        with open(path, "w", encoding="utf-8") as f:
            for text, labels in zip(self.texts, self.labels):
                f.write(" ".join([LABEL_PREFIX + lab for lab in labels] + text.split()) + "\n")


def parse_label_lines(lines: Iterable[str], source: str = "input", require_labels: bool = True) -> LabelledLines:
    """fastText-format lines (see :func:`read_label_file`); ``source`` names them in errors."""
    label_re = re.compile(r"(?<!\S)" + re.escape(LABEL_PREFIX) + r"(\S+)")
    texts: list[str] = []
    labels: list[list[str]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        found = label_re.findall(line)
        if not found and require_labels:
            raise PtmError(
                f"{source}:{number}: no label on this line; every line of a training or test file needs "
                f"at least one '{LABEL_PREFIX}NAME' token (e.g. '{LABEL_PREFIX}positive a fine film')"
            )
        texts.append(" ".join(label_re.sub(" ", line).split()))
        labels.append(found)
    if not texts:
        raise PtmError(f"{source} holds no examples")
    return LabelledLines(texts, labels)


def read_label_file(path: str | Path, require_labels: bool = True) -> LabelledLines:
    """Lines of a fastText-format file; blank lines are skipped.

    With ``require_labels`` a line holding text but no ``__label__`` token is a PtmError naming
    its line number (fastText silently skips it, which hides a broken file).
    """
    path = require_file(path, "labelled data file")
    try:
        with open(path, encoding="utf-8") as f:
            return parse_label_lines(f, str(path), require_labels)
    except UnicodeDecodeError as exc:
        raise PtmError(f"{path} is not UTF-8 text ({exc.reason}); re-encode it as UTF-8") from exc


def _brown_genre() -> dict[str, LabelledLines]:
    root = fetch("brown")
    docs = [d for d in (root / "brown.txt").read_text(encoding="utf-8").split("\n\n") if d.strip()]
    ids_genres = [ln.split("\t") for ln in (root / "categories.tsv").read_text().splitlines() if ln.strip()]
    if len(docs) != len(ids_genres):
        raise PtmError(f"{root}: {len(docs)} documents in brown.txt but {len(ids_genres)} in categories.tsv; "
                       f"rebuild it with 'ptm data get brown --force'")  # fmt: skip
    genres = [g for _, g in sorted(ids_genres)]  # brown.txt holds the documents in file-id order
    out = {split: LabelledLines([], []) for split in ("train", "dev", "test")}
    seen: dict[str, int] = {}
    for doc, genre in zip(docs, genres):
        k = seen.get(genre, 0)
        seen[genre] = k + 1
        split = "dev" if k % 5 == 3 else "test" if k % 5 == 4 else "train"
        sents = doc.split("\n")
        for i in range(0, len(sents), PASSAGE_SENTENCES):
            out[split].texts.append(" ".join(sents[i : i + PASSAGE_SENTENCES]))
            out[split].labels.append([genre])
    # brown.txt is ordered by genre; SGD in file order would end each epoch on one genre
    for part in out.values():
        order = np.random.default_rng(0).permutation(len(part))
        part.texts[:] = [part.texts[i] for i in order]
        part.labels[:] = [part.labels[i] for i in order]
    return out


def task_lines(name: str, split: str) -> LabelledLines:
    """Split ``train``/``dev``/``test`` of a built-in classification task (or ``brown-genre``)."""
    if split not in ("train", "dev", "test"):
        raise PtmError(f"unknown split {split!r}; splits: train, dev, test")
    if name == BROWN_GENRE:
        return _brown_genre()[split]

    data = load_task(name)
    if not isinstance(data, TaskData):
        kinds = [t for t, (_, spec) in builtin_tasks().items() if spec.get("type", "classification") == "classification"]
        raise PtmError(f"task {name!r} is not a classification task; the fastText classifier takes "
                       f"{', '.join(kinds + [BROWN_GENRE])} or a '{LABEL_PREFIX}' file")  # fmt: skip
    part = data.split(split)
    texts = part.texts if part.text_pairs is None else [a + " " + b for a, b in zip(part.texts, part.text_pairs)]
    names = [str(n) for n in data.label_names]
    return LabelledLines(list(texts), [[names[int(y)]] for y in part.labels])


__all__ = ["BROWN_GENRE", "LABEL_PREFIX", "LabelledLines", "parse_label_lines", "read_label_file", "task_lines"]
