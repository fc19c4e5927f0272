"""Hypernym detection from WordNet 3.0: is synset B a hypernym of synset A?

A pair of texts, each a synset's first lemma and definition (``"dog: a member of the genus
Canis ..."`` / ``"canine: any of various fissiped mammals ..."``), labelled

- 1: B is a hypernym of A, directly or inherited over two levels (``_hypernym`` and
  ``_instance_hypernym`` pointers; ``depth`` 1 or 2);
- 0 (``kind: reversed``): a positive pair the other way round, so direction matters (the
  hyponym is never the hypernym's hypernym: WordNet's hypernymy has no cycles);
- 0 (``kind: random``): B drawn uniformly among the synsets of A's part of speech in the same
  part, never A nor any ancestor of A at any depth (the transitive closure is excluded, so a
  random negative is never a true hypernym further up).

Half the pairs are positive, a quarter reversed, a quarter random.  Nouns and verbs (the parts of
speech with hypernyms).  Split **by synset**: the synsets are shuffled and cut 70/15/15, and a pair
is kept only when both its synsets lie in one part, so no dev or test pair shares a synset with
a training pair (pairs across parts are dropped: about half of all positives).  Deterministic
(``np.random.default_rng(SEED)``).

Outputs (``$PTMKIT_HOME/data/wordnet-hypernym/``): ``train/dev/test.jsonl`` with ``text``,
``text_pair``, ``label``, ``kind`` (``hypernym`` | ``reversed`` | ``random``), ``depth``,
``synsets`` (A, B); ``stats.json`` (sizes, majority baseline, synsets shared across parts: 0).
Built-in task: ``wordnet-hypernym`` (sentence-pair classification).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.parts import write_parts
from ptmkit.data.sources.wordnet_wic import part_stats
from ptmkit.data.sources.wordnet_wsd import read_wordnet
from ptmkit.knowledge.graph import KnowledgeGraph
from ptmkit.knowledge.wordnet import read_graph
from ptmkit.registry import register

SEED = 1985  # WordNet's beginning (Miller et al.)
FRACTIONS = (0.7, 0.15, 0.15)
RELATIONS = ("_hypernym", "_instance_hypernym")


def _join(pairs: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``pairs [N, 2]`` (a, b) and ``edges [M, 2]`` (b, c) sorted by b -> every (a, c), int64 ``[K, 2]``."""
    lo = np.searchsorted(edges[:, 0], pairs[:, 1], side="left")
    hi = np.searchsorted(edges[:, 0], pairs[:, 1], side="right")
    counts = hi - lo
    rows = np.repeat(np.arange(len(pairs)), counts)
    at = np.repeat(lo, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.stack([pairs[rows, 0], edges[at, 1]], axis=1)


def hypernym_closure(graph: KnowledgeGraph) -> tuple[np.ndarray, np.ndarray]:
    """``(edges [M, 2] (hyponym, hypernym) sorted by hyponym, closure [K, 3] (a, ancestor, depth))``
    with each ancestor at its shortest depth, found by joining the edges level by level."""
    rel = [graph.relations.index(r) for r in RELATIONS]
    t = graph.triples[np.isin(graph.triples[:, 1], rel)]
    edges = np.unique(t[:, [0, 2]], axis=0)  # sorted by hyponym
    n = graph.num_entities
    seen = np.unique(edges[:, 0] * n + edges[:, 1])
    closure = [np.column_stack([edges, np.ones(len(edges), dtype=np.int64)])]
    frontier, depth = edges, 1
    while len(frontier):
        depth += 1
        nxt = _join(frontier, edges)
        keys = np.unique(nxt[:, 0] * n + nxt[:, 1])
        keys = keys[~np.isin(keys, seen)]
        seen = np.union1d(seen, keys)
        frontier = np.stack([keys // n, keys % n], axis=1)
        closure.append(np.column_stack([frontier, np.full(len(frontier), depth, dtype=np.int64)]))
    return edges, np.concatenate(closure)


def hypernym_pairs(graph: KnowledgeGraph, texts: list[str], rng: np.random.Generator,
                   max_depth: int = 2) -> dict[str, list[dict]]:
    """The pairs of every part (see the module docstring); ``texts[e]`` is entity ``e``'s text."""
    _, closure = hypernym_closure(graph)
    n = graph.num_entities
    ancestor_keys = np.sort(closure[:, 0] * n + closure[:, 1])
    positives = closure[closure[:, 2] <= max_depth]
    pos_of = np.array([e.rsplit("-", 1)[1] for e in graph.entities])
    has_hypernym = np.isin(pos_of, ["n", "v"])
    part_of = np.full(n, -1, dtype=np.int64)
    candidates = np.nonzero(has_hypernym)[0]
    order = rng.permutation(len(candidates))
    cut = np.cumsum([int(f * len(candidates)) for f in FRACTIONS[:-1]])
    for k, idx in enumerate(np.split(order, cut)):
        part_of[candidates[idx]] = k
    out = {}
    for k, part in enumerate(("train", "dev", "test")):
        pos = positives[(part_of[positives[:, 0]] == k) & (part_of[positives[:, 1]] == k)]
        pos = pos[rng.permutation(len(pos))]
        n_rev = len(pos) // 2
        reversed_ = pos[rng.permutation(len(pos))[:n_rev]][:, [1, 0, 2]]
        # random negatives: same part of speech, same part, not A, not an ancestor of A
        n_rand = len(pos) - n_rev
        heads = pos[rng.permutation(len(pos))[:n_rand], 0]
        rand_tails = np.full(len(heads), -1, dtype=np.int64)
        for p in ("n", "v"):  # draw per part of speech, redraw the few that hit an ancestor
            pool = np.nonzero((part_of == k) & (pos_of == p))[0]
            todo = np.nonzero(pos_of[heads] == p)[0]
            for _ in range(100):  # a head whose part holds nothing but its ancestors gets none
                if not len(todo):
                    break
                rand_tails[todo] = pool[rng.integers(0, len(pool), len(todo))]
                bad_key = heads[todo] * n + rand_tails[todo]
                hit = np.searchsorted(ancestor_keys, bad_key)
                bad = (rand_tails[todo] == heads[todo]) | (ancestor_keys[np.minimum(hit, len(ancestor_keys) - 1)] == bad_key)
                todo = todo[bad]
            rand_tails[todo] = -1
        rows = [(int(a), int(b), 1, "hypernym", int(d)) for a, b, d in pos]
        rows += [(int(a), int(b), 0, "reversed", -int(d)) for a, b, d in reversed_]
        rows += [(int(a), int(b), 0, "random", 0) for a, b in zip(heads, rand_tails) if b >= 0]
        out[part] = [{"text": texts[a], "text_pair": texts[b], "label": y, "kind": kind, "depth": d,
                      "synsets": [graph.entities[a], graph.entities[b]]} for a, b, y, kind, d in
                     (rows[i] for i in rng.permutation(len(rows)))]
    return out


def synset_texts(graph: KnowledgeGraph, definitions: dict[str, str]) -> list[str]:
    """``"lemma: definition"`` per entity (the label's lemma, ``_`` read as a space)."""
    return [f"{label.rsplit('.', 2)[0].replace('_', ' ')}: {definitions.get(e, '')}".strip()
            for e, label in zip(graph.entities, graph.labels or graph.entities)]


@register("source", "wordnet-hypernym")
class WordNetHypernym(Source):
    name = "wordnet-hypernym"
    description = "hypernym detection between WordNet 3.0 synsets (lemma + definition pairs), 2 levels, split by synset"
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"
    tasks = {"wordnet-hypernym": {"type": "classification", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                                  "text": "text", "text_pair": "text_pair", "label": "label"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        synsets, _ = read_wordnet(files[0], work)  # unpacks into work/root
        graph = read_graph(work / "root/usr/share/wordnet")
        texts = synset_texts(graph, {k: v[3] for k, v in synsets.items()})
        parts = hypernym_pairs(graph, texts, np.random.default_rng(SEED))
        sets = {p: {s for r in rows for s in r["synsets"]} for p, rows in parts.items()}
        shared = len(sets["train"] & (sets["dev"] | sets["test"])) + len(sets["dev"] & sets["test"])
        write_parts(parts, out, {"synsets": graph.num_entities, "seed": SEED, "max_depth": 2,
                                 "synsets_shared_across_parts": shared}, part_stats)
