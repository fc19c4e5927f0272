"""Dependency-annotated sentences for the syntactic analyses: JSONL, one sentence per line,
``{"tokens": [...], "heads": [...], "relations": [...]}`` with CoNLL-U's heads (1-based, 0 for the
root) and relation labels (``punct`` marks punctuation); optional ``upos``.  A data recipe's
directory (``train.jsonl``, ``test.jsonl``) or a single file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ptmkit.analysis.align import align_sentences
from ptmkit.analysis.trees import check_tree
from ptmkit.errors import PtmError

OPTIONAL = ("upos", "tags")  # per-token fields a trees file may carry beside tokens, heads and relations


@dataclass(frozen=True)
class Tree:
    """One sentence: ``words``, ``heads [W]`` 0-based (-1 at the root), ``relations``, ``punct [W]``."""

    words: list[str]
    heads: np.ndarray
    relations: list[str]

    @property
    def punct(self) -> np.ndarray:
        return np.array([r == "punct" for r in self.relations], dtype=bool)

    def cut(self, n: int) -> "Tree | None":
        """The first ``n`` words as a tree (a word whose head was cut attaches to nothing: ``None`` if
        the cut breaks the tree)."""
        if n >= len(self.words):
            return self
        heads = self.heads[:n]
        if (heads >= n).any() or (heads == -1).sum() != 1:
            return None
        return Tree(self.words[:n], heads, self.relations[:n])


def read_trees(path: str | Path, limit: int | None = None) -> list[Tree]:
    """The trees of a JSONL file (at most ``limit``); each checked to be one tree."""
    path = Path(path)
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if limit is not None and len(out) >= limit:
                break
            try:
                row = json.loads(line)
                words, heads, rels = row["tokens"], row["heads"], row["relations"]
            except (ValueError, KeyError, TypeError) as exc:
                raise PtmError(f"{path}:{n}: expected a JSON object with tokens, heads and relations ({exc})") from None
            if not (len(words) == len(heads) == len(rels)) or not words:
                raise PtmError(f"{path}:{n}: tokens, heads and relations differ in length or are empty")
            for key in OPTIONAL:
                if key in row and len(row[key]) != len(words):
                    raise PtmError(f"{path}:{n}: {len(row[key])} {key} for {len(words)} tokens")
            bad = [w for w in words if not isinstance(w, str) or not w.strip()]
            if bad:
                raise PtmError(f"{path}:{n}: every token must be a non-empty string; got {bad[0]!r}")
            if not all(isinstance(x, int) and 0 <= x <= len(words) for x in heads) or heads.count(0) != 1:
                raise PtmError(f"{path}:{n}: heads are CoNLL-U's: 1-based word numbers, exactly one 0 (the root), "
                               f"at most {len(words)}; got {heads} (0-based heads? add 1 to each)")
            h = np.asarray(heads, dtype=np.int64) - 1
            try:
                check_tree(h)
            except PtmError as exc:
                raise PtmError(f"{path}:{n}: {exc}") from None
            out.append(Tree([str(w).replace(" ", "_") for w in words], h, [str(r) for r in rels]))
    return out


def treebank_splits(source: str | Path, train: int, test: int) -> tuple[list[Tree], list[Tree], str]:
    """``(train trees, test trees, description)`` from a recipe directory or a file (its first
    ``train`` trees train, the next ``test`` test)."""
    path = Path(source)
    if path.is_dir():
        files = [path / "train.jsonl", path / "test.jsonl"]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise PtmError(f"{path} has no {', '.join(missing)}: give a treebank directory or JSONL file")
        return read_trees(files[0], train), read_trees(files[1], test), str(path)
    if not path.is_file():
        raise PtmError(f"treebank {source} is neither a data set directory nor a JSONL file")
    trees = read_trees(path, train + test)
    if len(trees) < 2:
        raise PtmError(f"{path} holds {len(trees)} trees; the probes need some to train on and some to test")
    k = min(train, len(trees) * 3 // 4)
    return trees[:k], trees[k:], str(path)


def check_words(trees: Sequence[Tree], tokenizer: Any, causal: bool, source: str, batch: int = 256) -> None:
    """Refuse, naming the tree, a treebank whose words the model's tokenizer cannot align piece by
    piece (before any model runs; tokenization alone)."""
    for start in range(0, len(trees), batch):
        chunk = trees[start:start + batch]
        try:
            align_sentences(tokenizer, [t.words for t in chunk], causal)
        except PtmError:
            for k, t in enumerate(chunk, start):
                try:
                    align_sentences(tokenizer, [t.words], causal)
                except PtmError as exc:
                    raise PtmError(f"{source}: tree {k + 1} ({' '.join(t.words)[:60]!r}): {exc}") from None
            raise


__all__ = ["OPTIONAL", "Tree", "check_words", "read_trees", "treebank_splits"]
