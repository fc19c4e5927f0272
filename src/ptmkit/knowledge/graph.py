"""A knowledge graph as arrays: entities, relations, triples, surface forms and supersenses.

The layer that knowledge-enhanced PTMs read (ERNIE-THU's entity embeddings, K-BERT's injected
triples, KnowBert's entity linker): a :class:`KnowledgeGraph` holds

- ``entities`` (names, ``[E]``; WordNet: ``offset-pos`` such as ``02084071-n``) with optional
  readable ``labels`` (``dog.n.01``),
- ``relations`` (names, ``[R]``; ``_hypernym``, ...),
- ``triples``: int64 ``[N, 3]`` rows ``(head, relation, tail)`` of entity / relation ids,
- surface forms: ``surfaces`` (sorted strings ``[S]``: lower-cased, multi-word lemmas with ``_``
  read as a space) -> candidate entities in CSR form (``surface_offsets`` int64 ``[S + 1]``,
  ``surface_entities`` int32 ``[M]``, ``surface_counts`` float32 ``[M]``: each surface's
  candidates in prior order, most frequent sense first, with their prior counts),
- ``supersense``: int16 ``[E]`` (index into ``supersense_names``, ``-1`` for none; WordNet: the
  lexicographer file, ``noun.person``, ...),
- ``exceptions``: irregular inflection -> base forms (WordNet's ``noun.exc`` ...), which entity
  linking uses before the regular suffix rules.

:meth:`save` writes ``graph.npz`` (the arrays, uncompressed, so :meth:`load` maps nothing it does
not need) and ``graph.json`` (the strings) through :mod:`ptmkit.fileio`.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ptmkit import fileio
from ptmkit.errors import PtmError

ARRAYS = "graph.npz"
STRINGS = "graph.json"
FORMAT = 1


@dataclass
class KnowledgeGraph:
    """See the module docstring for the fields and their shapes."""

    entities: list[str]
    relations: list[str]
    triples: np.ndarray  # int64 [N, 3]
    surfaces: list[str] = field(default_factory=list)
    surface_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    surface_entities: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    surface_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    supersense: np.ndarray | None = None  # int16 [E], -1 = none
    supersense_names: list[str] = field(default_factory=list)
    labels: list[str] | None = None
    exceptions: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.triples = np.asarray(self.triples, dtype=np.int64).reshape(-1, 3)
        if self.supersense is None:
            self.supersense = np.full(len(self.entities), -1, dtype=np.int16)
        n_e, n_r = len(self.entities), len(self.relations)
        if len(self.triples) and (self.triples[:, [0, 2]].min() < 0 or self.triples[:, [0, 2]].max() >= n_e
                                  or self.triples[:, 1].min() < 0 or self.triples[:, 1].max() >= n_r):
            raise PtmError(f"a triple names an entity outside 0..{n_e - 1} or a relation outside 0..{n_r - 1}")
        if len(self.surface_offsets) != len(self.surfaces) + 1:
            raise PtmError(f"{len(self.surfaces)} surfaces but {len(self.surface_offsets)} offsets (expected one more)")
        self._entity_index: dict[str, int] | None = None
        self._surface_index: dict[str, int] | None = None

    # ------------------------------------------------------------------ lookups
    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def entity_id(self, name: str) -> int:
        """The id of entity ``name``; :class:`PtmError` when the graph has none of that name."""
        if self._entity_index is None:
            self._entity_index = {e: i for i, e in enumerate(self.entities)}
        if name not in self._entity_index:
            raise PtmError(f"the knowledge graph has no entity {name!r}")
        return self._entity_index[name]

    def surface_id(self, surface: str) -> int:
        """The id of a surface form (lower-cased, ``_`` read as a space), ``-1`` when unknown."""
        if self._surface_index is None:
            self._surface_index = {s: i for i, s in enumerate(self.surfaces)}
        return self._surface_index.get(normalise(surface), -1)

    def candidates(self, surface: str | int) -> np.ndarray:
        """Candidate entity ids (int32, most frequent sense first) of a surface form or surface id."""
        s = self.surface_id(surface) if isinstance(surface, str) else int(surface)
        if s < 0:
            return np.zeros(0, dtype=np.int32)
        return self.surface_entities[self.surface_offsets[s] : self.surface_offsets[s + 1]]

    def first_candidate(self, surface_ids: np.ndarray) -> np.ndarray:
        """The most frequent sense of each surface id (int32 ``[M]``; ``-1`` for ``-1``)."""
        surface_ids = np.asarray(surface_ids, dtype=np.int64)
        out = np.full(surface_ids.shape, -1, dtype=np.int32)
        known = surface_ids >= 0
        out[known] = self.surface_entities[self.surface_offsets[surface_ids[known]]]
        return out

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``graph.npz`` and ``graph.json`` into the directory ``path`` (atomic writes)."""
        root = fileio.make_dirs(path)
        buf = io.BytesIO()
        np.savez(buf, triples=self.triples, surface_offsets=self.surface_offsets,
                 surface_entities=self.surface_entities, surface_counts=self.surface_counts, supersense=self.supersense)
        fileio.atomic_write_bytes(root / ARRAYS, buf.getvalue())
        strings = {"format": FORMAT, "entities": self.entities, "relations": self.relations, "surfaces": self.surfaces,
                   "supersense_names": self.supersense_names, "labels": self.labels, "exceptions": self.exceptions}
        fileio.atomic_write_text(root / STRINGS, json.dumps(strings, ensure_ascii=False) + "\n")
        return root

    @classmethod
    def load(cls, path: str | os.PathLike) -> "KnowledgeGraph":
        """Read a graph written by :meth:`save` (a directory, or its ``graph.json``)."""
        root = Path(path)
        root = root.parent if root.name in (ARRAYS, STRINGS) else root
        for name in (ARRAYS, STRINGS):
            if not (root / name).is_file():
                raise PtmError(f"{root} is not a knowledge graph: {name} is missing "
                               f"(build one with `ptm data get wordnet-kg` or KnowledgeGraph.save)")
        strings = fileio.read_record(root / STRINGS, "build the graph again (ptm data get wordnet-kg --force)")
        try:
            with np.load(root / ARRAYS, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            return cls(entities=strings["entities"], relations=strings["relations"], triples=arrays["triples"],
                       surfaces=strings["surfaces"], surface_offsets=arrays["surface_offsets"],
                       surface_entities=arrays["surface_entities"], surface_counts=arrays["surface_counts"],
                       supersense=arrays["supersense"], supersense_names=strings["supersense_names"],
                       labels=strings.get("labels"), exceptions=strings.get("exceptions") or {})
        except (KeyError, ValueError, OSError) as exc:
            raise PtmError(f"{root / ARRAYS}: damaged knowledge graph ({exc}); build it again") from exc


def normalise(surface: str) -> str:
    """A surface form as graphs store it: ``_`` read as a space, lower-cased, single spaces."""
    return " ".join(surface.replace("_", " ").lower().split())


def surface_table(pairs: list[tuple[str, int, float]]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(surface, entity, prior count)`` rows -> ``(surfaces [S] sorted, offsets int64 [S + 1],
    entities int32 [M], counts float32 [M])``; within a surface the candidates keep the order of
    their first row among equal counts and are sorted by count, highest first (a stable sort, so
    WordNet's sense order breaks ties).  A repeated (surface, entity) keeps its first row."""
    seen: dict[tuple[str, int], None] = {}
    rows = []
    for order, (s, e, c) in enumerate(pairs):
        key = (normalise(s), int(e))
        if key[0] and key not in seen:
            seen[key] = None
            rows.append((key[0], -float(c), order, key[1]))
    rows.sort()
    surfaces = sorted({r[0] for r in rows})
    sid = {s: i for i, s in enumerate(surfaces)}
    per = np.bincount(np.array([sid[r[0]] for r in rows], dtype=np.int64), minlength=len(surfaces))
    offsets = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    entities = np.array([r[3] for r in rows], dtype=np.int32)
    counts = np.array([-r[1] for r in rows], dtype=np.float32)
    return surfaces, offsets, entities, counts
