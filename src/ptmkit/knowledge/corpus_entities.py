"""Entity links recorded in a prepared corpus: ``ptm prepare FILES -t TOK -o DIR --link wordnet``.

After the tokens and word starts are written, every word of the corpus is linked to the
knowledge graph (:func:`ptmkit.knowledge.linking.link_corpus`: longest match, inflections through
morphy, function words not linked alone, the most frequent sense; streamed chunk by chunk) and the
result is stored beside the word starts:

    entities.npy    int32 [n_tokens]: at the first token of each linked word, the row of its entity
                    in entities.json's ``names`` (every word of a multi-word mention carries it);
                    -1 elsewhere
    entities.json   {"graph": what --link named, "names": [entity names], "linked_words": ...,
                     "spans": ..., "words": ...}

Only the entities the corpus uses are listed, so the corpus stays self-contained: ERNIE
(``objective.alignment=corpus``) maps the names to rows of its entity vectors.  Memory: one
linking chunk, plus four bytes per word and per token.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np

from ptmkit import fileio
from ptmkit.data.corpus import Corpus
from ptmkit.data.sources.base import fetch
from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import KnowledgeGraph
from ptmkit.knowledge.lexicons import GRAPHS
from ptmkit.knowledge.linking import link_corpus

log = logging.getLogger(__name__)

ENTITIES, ENTITY_INDEX = "entities.npy", "entities.json"


def load_graph(spec: str) -> KnowledgeGraph:
    """A graph by name (``wordnet``: the ``wordnet-kg`` data set) or from a directory written by
    :meth:`KnowledgeGraph.save`."""
    if spec in GRAPHS:
        source, sub = GRAPHS[spec]
        return KnowledgeGraph.load(fetch(source) / sub)
    if not Path(spec).is_dir():
        raise PtmError(f"--link {spec}: give a knowledge graph's name ({', '.join(GRAPHS)}) or a graph directory "
                       f"(graph.npz + graph.json, as `ptm data get wordnet-kg` writes in graph/)")
    return KnowledgeGraph.load(spec)


def word_positions(corpus: Corpus) -> np.ndarray:
    """int64 ``[n_words]``: the first token of each word, in the order :func:`link_corpus` numbers
    the words of a prepared corpus (a sentence's first token always starts a word)."""
    starts = np.asarray(corpus.word_starts[: corpus.n_tokens], dtype=bool).copy()
    sentence_starts = np.asarray(corpus.sentences[:-1])
    starts[sentence_starts[sentence_starts < corpus.n_tokens]] = True
    return np.flatnonzero(starts)


def write_entities(root: str | Path, graph: KnowledgeGraph, spec: str) -> dict:
    """Link the corpus in ``root`` to ``graph`` and write :data:`ENTITIES` and
    :data:`ENTITY_INDEX` there; returns the index (without the names)."""
    root = Path(root)
    corpus = Corpus.open(root)
    links = link_corpus(root, graph)
    positions = word_positions(corpus)
    if len(positions) != len(links.entities):
        raise PtmError(f"{root}: linking numbered {len(links.entities)} words but the word starts give "
                       f"{len(positions)}; the corpus is damaged, prepare it again")
    used, rows = np.unique(links.entities, return_inverse=True)  # -1 first when present
    offset = 1 if len(used) and used[0] < 0 else 0
    per_token = np.full(corpus.n_tokens, -1, dtype=np.int32)
    per_token[positions] = (rows - offset).astype(np.int32)
    buf = io.BytesIO()
    np.save(buf, per_token, allow_pickle=False)
    fileio.atomic_write_bytes(root / ENTITIES, buf.getvalue())
    index = {"graph": spec, "words": int(len(positions)), "linked_words": int(links.linked_words),
             "spans": int(links.spans), "entities": int(len(used) - offset)}
    fileio.atomic_write_text(root / ENTITY_INDEX, json.dumps(
        {**index, "names": [graph.entities[e] for e in used[offset:].tolist()]}) + "\n")
    if links.linked_words == 0:
        log.warning("--link %s: no word of the corpus matched the graph's surface forms (0 of %d words); are "
                    "the graph and the text in one language?", spec, len(positions))
    return index


def read_entities(corpus) -> tuple[np.ndarray, list[str]]:
    """``(entity rows int32 [n_tokens] (memory-mapped), entity names)`` of a corpus prepared with
    ``--link``; an error saying how to record them otherwise."""
    root = Path(getattr(corpus, "path", ""))
    if not (root / ENTITY_INDEX).is_file() or not (root / ENTITIES).is_file():
        raise PtmError(f"the corpus {root} has no entity links: prepare it with `ptm prepare FILES -t TOKENIZER -o DIR "
                       f"--link wordnet` (one corpus directory, not shards) and train on DIR")
    index = fileio.read_record(root / ENTITY_INDEX, "prepare the corpus again with --link")
    ids = np.load(root / ENTITIES, mmap_mode="r", allow_pickle=False)
    if ids.shape != (corpus.n_tokens,):
        raise PtmError(f"{root / ENTITIES} holds {ids.shape} entries for {corpus.n_tokens} tokens: prepare the corpus "
                       f"again with --link")
    return ids, list(index["names"])


__all__ = ["ENTITIES", "ENTITY_INDEX", "load_graph", "read_entities", "word_positions", "write_entities"]
