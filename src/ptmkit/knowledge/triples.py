"""A user's own knowledge graph from text files, and the train/valid/test split of a graph.

Triples: one per line, ``head<TAB>relation<TAB>tail`` (names of your choice; blank lines and
lines starting with ``#`` are skipped).  Surface forms: ``surface<TAB>entity`` per line, the
candidates of a surface in the order the file gives them (put the most likely sense first).  A
line without exactly those fields, a relation outside the given list, or a surface naming an
entity no triple has, is a :class:`PtmError` naming the file and line.

A :class:`KGSplit` is what link prediction trains and evaluates on: entity and relation names
and three int64 ``[N, 3]`` arrays of ``(head, relation, tail)`` ids.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError, require_file, suggest
from ptmkit.knowledge.graph import KnowledgeGraph, surface_table


@dataclass
class KGSplit:
    """``entities [E]``, ``relations [R]`` names; ``train``, ``valid``, ``test``: int64 ``[N, 3]``."""

    entities: list[str]
    relations: list[str]
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray

    @property
    def all_triples(self) -> np.ndarray:
        """Every known triple, int64 ``[N, 3]`` (what filtered ranking removes)."""
        return np.concatenate([self.train, self.valid, self.test]).reshape(-1, 3)

    def unseen_entities(self, part: str = "test") -> np.ndarray:
        """Ids of entities of ``part`` that no training triple has."""
        rows = getattr(self, part)
        return np.setdiff1d(np.unique(rows[:, [0, 2]]), np.unique(self.train[:, [0, 2]]))


def _rows(path: Path, n_fields: int, what: str) -> list[tuple[int, list[str]]]:
    require_file(path, what)
    out = []
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n").rstrip("\r")
                if not line.strip() or line.startswith("#"):
                    continue
                parts = line.split("\t")
                if len(parts) != n_fields or not all(p.strip() for p in parts):
                    raise PtmError(f"{path}:{n}: expected {n_fields} non-empty tab-separated fields "
                                   f"({'head, relation, tail' if n_fields == 3 else 'surface, entity'}), got {len(parts)}: {line[:60]!r}")
                out.append((n, [p.strip() for p in parts]))
        except UnicodeDecodeError as exc:
            raise PtmError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from exc
    return out


def read_triples(paths: Sequence[str | os.PathLike], relations: Sequence[str] | None = None,
                 entities: Sequence[str] | None = None) -> tuple[list[str], list[str], list[np.ndarray]]:
    """Triple files -> ``(entities, relations, [int64 [N, 3] per file])``.  Names get ids in order
    of first appearance across the files (after ``entities`` / ``relations`` when given);
    with ``relations`` given, any other relation is an error naming file and line."""
    ent: dict[str, int] = {e: i for i, e in enumerate(entities or ())}
    rel: dict[str, int] = {r: i for i, r in enumerate(relations or ())}
    fixed = relations is not None
    out = []
    for path in map(Path, paths):
        ids = []
        for n, (h, r, t) in _rows(path, 3, "triples file"):
            if r not in rel:
                if fixed:
                    raise PtmError(f"{path}:{n}: unknown relation {r!r}{suggest(r, rel)}; "
                                   f"known: {', '.join(list(rel)[:10])}{' ...' if len(rel) > 10 else ''}")
                rel[r] = len(rel)
            ids.append((ent.setdefault(h, len(ent)), rel[r], ent.setdefault(t, len(ent))))
        out.append(np.array(ids, dtype=np.int64).reshape(-1, 3))
    return list(ent), list(rel), out


def read_split(train: str | os.PathLike, valid: str | os.PathLike | None = None, test: str | os.PathLike | None = None,
               relations: Sequence[str] | None = None) -> KGSplit:
    """Triple files as a :class:`KGSplit` (a missing valid or test part is empty)."""
    paths = [p for p in (train, valid, test) if p is not None]
    entities, rels, parts = read_triples(paths, relations)
    empty = np.zeros((0, 3), dtype=np.int64)
    parts = parts + [empty] * (3 - len(parts))
    valid_part, test_part = (parts[1], parts[2]) if valid is not None else (empty, parts[1])
    return KGSplit(entities, rels, parts[0], valid_part, test_part)


def read_graph(triples: str | os.PathLike, surfaces: str | os.PathLike | None = None,
               relations: Sequence[str] | None = None) -> KnowledgeGraph:
    """A user's graph: a triples TSV and optionally a surface-form TSV (see the module docstring)."""
    entities, rels, (ids,) = read_triples([triples], relations)
    index = {e: i for i, e in enumerate(entities)}
    pairs = []
    if surfaces is not None:
        rows = _rows(Path(surfaces), 2, "surface-form file")
        for order, (n, (surface, entity)) in enumerate(rows):
            if entity not in index:
                raise PtmError(f"{surfaces}:{n}: entity {entity!r} is in no triple of {triples}{suggest(entity, index)}")
            pairs.append((surface, index[entity], float(len(rows) - order)))  # file order is the prior order
    names, offsets, cand, counts = surface_table(pairs)
    return KnowledgeGraph(entities=entities, relations=rels, triples=ids, surfaces=names, surface_offsets=offsets,
                          surface_entities=cand, surface_counts=counts)


def triples_text(triples: np.ndarray, entities: Sequence[str], relations: Sequence[str]) -> str:
    """The TSV text of ``triples`` (int64 ``[N, 3]``) by name (the caller writes it through fileio)."""
    ent, rel = np.asarray(entities, dtype=object), np.asarray(relations, dtype=object)
    h, r, t = ent[triples[:, 0]], rel[triples[:, 1]], ent[triples[:, 2]]
    return "".join(f"{a}\t{b}\t{c}\n" for a, b, c in zip(h, r, t))
