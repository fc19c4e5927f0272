"""The K-BERT triples, SenseBERT lexicon and LIBERT pairs derived from a knowledge graph
(:mod:`ptmkit.knowledge.lexicons`), on a five-synset graph worked by hand."""

from __future__ import annotations

import numpy as np

from ptmkit.knowledge.graph import KnowledgeGraph, surface_table
from ptmkit.knowledge.lexicons import entity_alignment, kbert_triples, related_pairs, supersense_lexicon, write_lexicons
from ptmkit.objectives.lexicon import read_alignment, read_pairs, read_supersenses
from ptmkit.tasks.kbert import Knowledge


def graph() -> KnowledgeGraph:
    """dog (most frequent sense: the animal; also a cad) -> canine -> animal; puppy -> dog."""
    entities = ["dog.n", "canine.n", "animal.n", "pup.n", "cad.n"]
    relations = ["_hypernym", "_hyponym", "_part_of"]
    triples = np.array([[0, 0, 1], [1, 0, 2], [3, 0, 0], [1, 1, 0], [4, 0, 2]])
    surfaces = surface_table([("dog", 0, 5), ("dog", 4, 1), ("domestic_dog", 0, 0), ("canine", 1, 1), ("animal", 2, 3),
                              ("pup", 3, 1), ("puppy", 3, 1), ("cad", 4, 1)])
    return KnowledgeGraph(entities, relations, triples, *surfaces, supersense=np.array([5, 5, 3, 5, 18], np.int16),
                          supersense_names=[f"s{i}" for i in range(20)],
                          labels=["dog.n.01", "canine.n.02", "animal.n.01", "puppy.n.01", "cad.n.01"])


def test_kbert_injects_the_most_frequent_senses_hypernyms():
    rows = kbert_triples(graph())
    assert ("dog", "is a", "canine") in rows and ("puppy", "is a", "dog") in rows
    assert ("dog", "is a", "animal") not in rows  # the cad sense is not the most frequent one
    assert not any(t[1] == "_hyponym" for t in rows)  # only the relations K-BERT injects


def test_every_sense_gives_its_supersense_and_synonyms_and_hypernyms_pair_up():
    g = graph()
    assert {s for w, s in supersense_lexicon(g) if w == "dog"} == {"s5", "s18"}
    pairs = related_pairs(g)
    assert ("dog", "domestic dog") in pairs and ("pup", "puppy") in pairs and ("dog", "canine") in pairs
    assert ("canine", "dog") not in pairs  # a hyponym first, its hypernym second, each pair once


def test_written_lexicons_read_back_with_the_models_readers(tmp_path):
    counts = write_lexicons(graph(), tmp_path)
    assert counts["kbert.tsv"] == 6
    kg = Knowledge.read(tmp_path / "kbert.tsv")
    assert kg.triples["domestic dog"] == [("is a", "canine")]
    senses, names = read_supersenses(tmp_path / "supersenses.tsv")
    assert senses["dog"] == {"s5", "s18"} and "s3" in names
    words, pairs = read_pairs(tmp_path / "pairs.tsv")
    assert len(pairs) == counts["pairs.tsv"] and "domestic dog" in words
    alignment = read_alignment(tmp_path / "alignment.tsv")
    assert alignment["dog"] == "dog.n" and alignment["puppy"] == "pup.n" and len(alignment) == counts["alignment.tsv"]


def test_alignment_and_kbert_take_the_most_frequent_sense_and_skip_function_words():
    entities = ["a.unit", "a.vitamin", "cappella.n", "dog.n"]
    surfaces = surface_table([("a", 0, 3), ("a", 1, 1), ("a_cappella", 2, 1), ("dog", 3, 2)])
    g = KnowledgeGraph(entities, ["_hypernym"], np.zeros((0, 3), np.int64), *surfaces)
    assert entity_alignment(g) == [("a cappella", "cappella.n"), ("dog", "dog.n")]
    g.triples = np.array([[0, 0, 3], [2, 0, 3]])  # "a" and "a cappella" each with a hypernym
    assert [r[0] for r in kbert_triples(g, {"_hypernym": "is a"})] == ["a cappella"]
    assert ("a", "a.unit") in entity_alignment(g, stop_words=frozenset())
