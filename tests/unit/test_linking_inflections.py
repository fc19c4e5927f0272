"""Inflected words link to the lemma of the right part of speech: ``doing`` is the verb ``do``,
not the noun ``doe``; a word that is a rare lemma itself (``making``, ``running``, ``lying``) is
read as its far more frequent base, a frequent one (``building``) stays itself."""

from __future__ import annotations

import pytest

from ptmkit.knowledge.graph import KnowledgeGraph, surface_table
from ptmkit.knowledge.linking import Linker, base_forms
from ptmkit.knowledge.morphy import lemma_parts

# (surface, synset named offset-pos as WordNet's are, prior count): WordNet 3.0's counts for these
SENSES = [
    ("doe", "00000001-n", 0), ("do", "00000002-v", 526), ("make", "00000003-v", 508), ("making", "00000004-n", 7),
    ("run", "00000005-v", 106), ("running", "00000006-a", 3), ("lie", "00000007-v", 88), ("lye", "00000008-n", 0),
    ("lying", "00000009-n", 0), ("dog", "00000010-n", 42), ("dog", "00000011-v", 2), ("building", "00000012-n", 48),
    ("build", "00000013-v", 123), ("sing", "00000014-v", 40), ("singe", "00000015-v", 1), ("us", "00000016-n", 3),
    ("use", "00000017-v", 100), ("hot dog", "00000018-n", 1),
]
EXCEPTIONS = {"lying": ["lie"], "running": ["run"]}  # WordNet's verb.exc lists both


@pytest.fixture(scope="module")
def graph() -> KnowledgeGraph:
    entities = sorted({e for _, e, _ in SENSES})
    rows = [(s, entities.index(e), float(c)) for s, e, c in SENSES]
    surfaces, offsets, cand, counts = surface_table(rows)
    return KnowledgeGraph(entities=entities, relations=[], triples=[], surfaces=surfaces, surface_offsets=offsets,
                          surface_entities=cand, surface_counts=counts, exceptions=EXCEPTIONS)


def test_a_rule_gives_only_lemmas_of_its_part_of_speech(graph):
    lemmas = lemma_parts(graph)
    assert lemmas["dog"] == {"n": 42.0, "v": 2.0}
    assert base_forms("doing", {}, lemmas) == ["do"]  # "ing" -> "e" is a verb rule; doe is a noun
    assert base_forms("making", {}, lemmas) == ["make"]
    assert base_forms("running", {}, lemmas) == ["run"]  # undoubled
    assert base_forms("dogged", {}, lemmas) == ["dog"]  # undoubled, the verb dog
    assert base_forms("using", {}, lemmas) == ["use"]  # not the noun us
    assert base_forms("lying", EXCEPTIONS, lemmas) == ["lie"]  # the exception; lye is a noun
    assert base_forms("singing", {}, lemmas) == ["sing", "singe"]  # both verbs: the more frequent first
    # without a graph's lemmas every rule's base, in morphy's rule order, as before
    assert base_forms("doing", {})[:2] == ["doe", "do"]


@pytest.mark.parametrize("word, lemma", [
    ("doing", "do"), ("making", "make"), ("running", "run"), ("dogged", "dog"), ("lying", "lie"), ("using", "use"),
    ("singing", "sing"), ("building", "building"), ("Making", "make"),
])
def test_common_verbs_link_to_their_lemma(graph, word, lemma):
    links = Linker(graph, stop_words=()).link([word])
    assert len(links) == 1 and graph.surfaces[links.surfaces[0]] == lemma


def test_a_base_that_wins_does_not_change_multiword_matches(graph):
    linker = Linker(graph, stop_words=())
    links = linker.link("two hot dogs making".split())
    assert [graph.surfaces[s] for s in links.surfaces] == ["hot dog", "make"]
    assert links.starts.tolist() == [1, 3] and links.ends.tolist() == [3, 4]
