"""WordNet 3.0 as a knowledge graph, and the WN18RR-style link-prediction split rebuilt from it.

From the Debian ``wordnet-base`` database files (:mod:`ptmkit.knowledge.wordnet`): every synset
an entity, every pointer a triple, every lemma a surface form with its senses in prior order
(tag counts from ``cntlist.rev``), every synset's lexicographer file its supersense; then the
WN18 relation set, WN18's entity filter as reconstructed here and WN18RR's removal of inverse
relations, split so that no held-out triple shares its entity pair with a training triple and no
held-out entity is unseen in training (:mod:`ptmkit.knowledge.splits`).

Outputs (``$PTMKIT_HOME/data/wordnet-kg/``):

- ``graph/graph.npz`` + ``graph/graph.json``: the whole graph (:meth:`KnowledgeGraph.load`);
- ``wn18rr/train.tsv``, ``valid.tsv``, ``test.tsv``: ``head<TAB>relation<TAB>tail`` by synset
  name (``02084071-n``), the files ``ptm pretrain transe`` reads, split by entity pair (no
  held-out pair in training under any relation or direction); ``wn18rr/entities.tsv``: name,
  label (``dog.n.01``) and supersense of each entity of the split;
- ``wn18rr-triple/``: the same, split triple by triple as WN18RR was (a symmetric relation's
  reverse may be in training), for comparison with the published figures;
- ``wn18/``: WN18's 18 relations, inverses included, split triple by triple as WN18 was (the
  leaky benchmark TransE's paper reported on);
- ``stats.json``: sizes of the graph and of the split, per relation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source, _run, fetch
from ptmkit.fileio import atomic_write_text
from ptmkit.knowledge.graph import KnowledgeGraph
from ptmkit.knowledge.splits import MIN_TRIPLES, SEED, WN18_RELATIONS, WN18RR_RELATIONS, wn18rr_split
from ptmkit.knowledge.triples import KGSplit, triples_text
from ptmkit.knowledge.wordnet import read_graph
from ptmkit.registry import register


def unpack_wordnet(deb: Path, work: Path) -> Path:
    """Unpack ``wordnet-base`` into ``work`` and return its ``usr/share/wordnet`` directory."""
    root = work / "root"
    root.mkdir(exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(root)], "Debian package wordnet-base (unpacking)")
    return root / "usr/share/wordnet"


def load_wordnet_graph() -> KnowledgeGraph:
    """The WordNet graph of the data cache, fetched (``ptm data get wordnet-kg``) on first use."""
    return KnowledgeGraph.load(fetch("wordnet-kg") / "graph")


# directory -> (relations, split_by_pair's ``by``)
SPLITS = {"wn18rr": (WN18RR_RELATIONS, "pair"), "wn18rr-triple": (WN18RR_RELATIONS, "triple"),
          "wn18": (WN18_RELATIONS, "triple")}


def write_split(graph: KnowledgeGraph, split: KGSplit, out: Path) -> dict:
    """``train/valid/test.tsv`` and ``entities.tsv`` of ``split`` into ``out``; returns its sizes."""
    out.mkdir()
    for part in ("train", "valid", "test"):
        atomic_write_text(out / f"{part}.tsv", triples_text(getattr(split, part), split.entities, split.relations))
    index = {e: i for i, e in enumerate(graph.entities)}
    rows = [(e, graph.labels[index[e]], graph.supersense_names[graph.supersense[index[e]]]) for e in split.entities]
    atomic_write_text(out / "entities.tsv", "".join(f"{a}\t{b}\t{c}\n" for a, b, c in rows))
    per_relation = {part: dict(zip(split.relations, np.bincount(getattr(split, part)[:, 1],
                                                                minlength=len(split.relations)).tolist()))
                    for part in ("train", "valid", "test")}
    return {"entities": len(split.entities), "relations": len(split.relations), "min_triples": MIN_TRIPLES,
            "seed": SEED, "train": len(split.train), "valid": len(split.valid), "test": len(split.test),
            "per_relation": per_relation}


@register("source", "wordnet-kg")
class WordNetKG(Source):
    name = "wordnet-kg"
    description = "WordNet 3.0 as a knowledge graph (synsets, pointers, lemma surface forms, supersenses) + a WN18RR-style split"
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        graph = read_graph(unpack_wordnet(files[0], work))
        graph.save(out / "graph")
        stats: dict = {
            "graph": {"entities": graph.num_entities, "relations": graph.num_relations, "triples": len(graph.triples),
                      "surfaces": len(graph.surfaces), "candidates": len(graph.surface_entities),
                      "supersenses": len(graph.supersense_names)},
        }
        for name, (relations, by) in SPLITS.items():
            stats[name] = write_split(graph, wn18rr_split(graph, relations=relations, by=by), out / name)
            stats[name]["split_by"] = by
        atomic_write_text(out / "stats.json", json.dumps(stats, indent=2) + "\n")
