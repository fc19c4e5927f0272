"""What the knowledge-enhanced models read, derived from a :class:`KnowledgeGraph`:

* :func:`kbert_triples`: ``surface<TAB>relation<TAB>tail`` rows for K-BERT's injection
  (``knowledge=FILE``, :mod:`ptmkit.tasks.kbert`): each surface form's most frequent sense and
  its hypernyms (and holonyms), written as words (``dog  is a  canine``);
* :func:`supersense_lexicon`: ``word<TAB>supersense`` rows for SenseBERT
  (``objective.lexicon=FILE``): every supersense of every sense a surface form may take;
* :func:`related_pairs`: ``word<TAB>word`` rows for LIBERT (``objective.pairs=FILE``): synonyms
  (two surface forms of one entity) and hyponym–hypernym pairs;
* :func:`entity_alignment`: ``surface<TAB>entity`` rows for ERNIE (Tsinghua)
  (``objective.alignment=FILE``): each surface form's most frequent sense.

:func:`write_lexicons` writes them all; :func:`named_lexicons` gives them for a named graph
(``wordnet``: the ``wordnet-kg`` data set), derived once into a cache keyed by the graph's content
(``$PTMKIT_HOME/cache/knowledge/KEY``), so ``knowledge=wordnet``, ``objective.lexicon=wordnet``,
``objective.pairs=wordnet`` and ``objective.alignment=wordnet`` need no file of the user's.  Everything is computed on the graph's
arrays; the only loops are over output rows.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from ptmkit import fileio, paths
from ptmkit.data.sources.base import fetch
from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import ARRAYS, STRINGS, KnowledgeGraph
from ptmkit.knowledge.stopwords import FUNCTION_WORDS

# relation name -> the words K-BERT injects for it
RELATION_WORDS = {
    "_hypernym": "is a", "_instance_hypernym": "is a", "_part_of": "part of", "_member_holonym": "member of",
    "_substance_holonym": "made of",
}
KBERT_FILE, SUPERSENSE_FILE, PAIRS_FILE, ALIGNMENT_FILE = "kbert.tsv", "supersenses.tsv", "pairs.tsv", "alignment.tsv"
DERIVED_VERSION = 3  # raised whenever a derived file's content changes for the same graph
GRAPHS = {"wordnet": ("wordnet-kg", "graph")}  # a knowledge option's names -> (data set, its graph directory)


def surface_rows(graph: KnowledgeGraph) -> tuple[np.ndarray, np.ndarray]:
    """Every (surface, candidate entity) of the graph: ``surface int64 [M]``, ``entity int64 [M]``."""
    counts = np.diff(graph.surface_offsets)
    return np.repeat(np.arange(len(graph.surfaces)), counts), graph.surface_entities.astype(np.int64)


def entity_words(graph: KnowledgeGraph) -> list[str]:
    """A word for each entity: its label's lemma (``dog.n.01`` -> ``dog``), else its first
    surface form, else its name."""
    if graph.labels:
        return [label.rsplit(".", 2)[0].replace("_", " ") for label in graph.labels]
    words = list(graph.entities)
    s, e = surface_rows(graph)
    for surface, entity in zip(s[::-1], e[::-1]):  # the first surface wins
        words[entity] = graph.surfaces[surface]
    return words


def kbert_triples(graph: KnowledgeGraph, relations: dict[str, str] | None = None, per_surface: int = 2,
                  stop_words: frozenset[str] = FUNCTION_WORDS) -> list[tuple[str, str, str]]:
    """``(surface, relation words, tail word)`` for each surface's most frequent sense: its first
    ``per_surface`` triples whose relation is one of ``relations`` (default :data:`RELATION_WORDS`),
    in the graph's triple order.  Function words get no branch (``a  is a  metric linear unit``)."""
    relations = RELATION_WORDS if relations is None else relations
    rel_ids = {graph.relations.index(r): words for r, words in relations.items() if r in graph.relations}
    keep = np.isin(graph.triples[:, 1], list(rel_ids))
    t = graph.triples[keep]
    t = t[np.argsort(t[:, 0], kind="stable")]
    starts = np.searchsorted(t[:, 0], np.arange(graph.num_entities + 1))
    words = entity_words(graph)
    first = graph.first_candidate(np.arange(len(graph.surfaces)))
    rows = []
    for s, e in enumerate(first):
        if graph.surfaces[s] in stop_words:
            continue
        for _, r, tail in t[starts[e] : min(starts[e + 1], starts[e] + per_surface)]:
            if words[tail] != graph.surfaces[s]:
                rows.append((graph.surfaces[s], rel_ids[int(r)], words[tail]))
    return rows


def supersense_lexicon(graph: KnowledgeGraph) -> list[tuple[str, str]]:
    """``(surface, supersense)`` for every supersense any candidate of the surface has."""
    s, e = surface_rows(graph)
    sense = graph.supersense[e].astype(np.int64)
    pairs = np.unique(np.stack([s, sense], 1)[sense >= 0], axis=0)
    return [(graph.surfaces[a], graph.supersense_names[b]) for a, b in pairs]


def related_pairs(graph: KnowledgeGraph, hypernym: tuple[str, ...] = ("_hypernym", "_instance_hypernym"),
                  max_synonyms: int = 8) -> list[tuple[str, str]]:
    """Synonyms (surfaces of one entity, the first ``max_synonyms`` of each) and hyponym–hypernym
    word pairs, each pair once."""
    s, e = surface_rows(graph)
    order = np.lexsort((s, e))
    s, e = s[order], e[order]
    bounds = np.flatnonzero(np.diff(np.concatenate([[-1], e, [graph.num_entities]])))
    out: set[tuple[str, str]] = set()
    for a, b in zip(bounds[:-1], bounds[1:]):
        names = [graph.surfaces[x] for x in s[a:b][:max_synonyms]]
        out.update((x, y) for i, x in enumerate(names) for y in names[i + 1 :])
    words = entity_words(graph)
    rel = [graph.relations.index(r) for r in hypernym if r in graph.relations]
    for head, _, tail in graph.triples[np.isin(graph.triples[:, 1], rel)]:
        if words[head] != words[tail]:
            out.add((words[head], words[tail]))
    return sorted(out)


def entity_alignment(graph: KnowledgeGraph, stop_words: frozenset[str] = FUNCTION_WORDS) -> list[tuple[str, str]]:
    """``(surface, entity name)`` rows, each surface form with its most frequent sense: the
    word-to-entity alignment ERNIE (Tsinghua) reads (``objective.alignment=FILE``).  Function
    words (``a`` -> ångström, :mod:`ptmkit.knowledge.stopwords`) are left out."""
    first = graph.first_candidate(np.arange(len(graph.surfaces)))
    return [(graph.surfaces[s], graph.entities[e]) for s, e in enumerate(first.tolist())
            if e >= 0 and graph.surfaces[s] not in stop_words]


def write_lexicons(graph: KnowledgeGraph, out: str | os.PathLike) -> dict[str, int]:
    """Write :data:`KBERT_FILE`, :data:`SUPERSENSE_FILE`, :data:`PAIRS_FILE` and
    :data:`ALIGNMENT_FILE` into ``out``; returns their row counts."""
    out = Path(out)
    tables = {KBERT_FILE: kbert_triples(graph), SUPERSENSE_FILE: supersense_lexicon(graph),
              PAIRS_FILE: related_pairs(graph), ALIGNMENT_FILE: entity_alignment(graph)}
    for name, rows in tables.items():
        fileio.atomic_write_text(out / name, "".join("\t".join(r) + "\n" for r in rows))
    return {name: len(rows) for name, rows in tables.items()}


def named_lexicons(name: str) -> dict[str, Path]:
    """The derived files for the graph called ``name`` (a key of :data:`GRAPHS`), fetched and
    derived on first use into a cache keyed by the BLAKE2b of the graph's files and
    :data:`DERIVED_VERSION`."""
    if name not in GRAPHS:
        raise PtmError(f"no knowledge graph is called {name!r}; give a file, or one of {', '.join(GRAPHS)}")
    source, sub = GRAPHS[name]
    graph_dir = fetch(source) / sub
    h = hashlib.blake2b(digest_size=16)
    h.update(f"derived-v{DERIVED_VERSION}".encode())  # what the files hold changes with the code too
    for f in (ARRAYS, STRINGS):
        with open(graph_dir / f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    root = paths.home() / "cache" / "knowledge" / f"{name}-{h.hexdigest()}"
    files = {n: root / n for n in (KBERT_FILE, SUPERSENSE_FILE, PAIRS_FILE, ALIGNMENT_FILE)}
    if not all(f.is_file() for f in files.values()):
        with fileio.atomic_dir(root, durable=False) as tmp:  # a cache: rebuilt if lost
            write_lexicons(KnowledgeGraph.load(graph_dir), tmp)
    return files


__all__ = ["ALIGNMENT_FILE", "GRAPHS", "KBERT_FILE", "PAIRS_FILE", "RELATION_WORDS", "SUPERSENSE_FILE", "entity_alignment",
           "entity_words", "kbert_triples", "named_lexicons", "related_pairs", "supersense_lexicon", "write_lexicons"]
