"""Base forms of an inflected word, as WordNet's ``morphy`` finds them, for entity linking.

The irregular forms of the graph's exception lists come first (``mice`` -> ``mouse``, ``lying``
-> ``lie``), then WordNet's detachment rules (:data:`RULES`, morph.c): each belongs to a part of
speech, and, as in morphy, a rule's base counts only when it is a lemma of *that* part of speech.
Without that check ``doing`` gives the noun ``doe`` (a female deer; verb rule ``ing`` -> ``e``)
before the verb ``do`` (``ing`` -> ``""``), and ``using`` the noun ``us`` (the United States).
A base ending in a doubled consonant is also tried undoubled (``dogged``, ``running``,
``bigger``), which morphy leaves to the exception lists.

When several rules give a lemma (``singing``: the verbs ``singe`` and ``sing``) the one tagged
most often in the graph's prior counts comes first (WordNet's: SemCor tag counts), rule order
breaking ties; morphy itself would return ``singe`` first.  A graph whose entities carry no part
of speech (a user's triples) gives every base a pass, in rule order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ptmkit.knowledge.graph import KnowledgeGraph

# WordNet's morphy detachment rules (morph.c): (suffix, ending, part of speech), noun, verb and
# adjective lists in morphy's order.
RULES = (
    ("s", "", "n"), ("ses", "s", "n"), ("xes", "x", "n"), ("zes", "z", "n"), ("ches", "ch", "n"), ("shes", "sh", "n"),
    ("men", "man", "n"), ("ies", "y", "n"),
    ("s", "", "v"), ("ies", "y", "v"), ("es", "e", "v"), ("es", "", "v"), ("ed", "e", "v"), ("ed", "", "v"),
    ("ing", "e", "v"), ("ing", "", "v"),
    ("er", "", "a"), ("est", "", "a"), ("er", "e", "a"), ("est", "e", "a"),
)
ANY = ""  # the part of speech of an entity whose name does not say it
WORDNET_POS = {"n": "n", "v": "v", "a": "a", "s": "a", "r": "r"}  # a satellite adjective is an adjective

Lemmas = Mapping[str, Mapping[str, float]]  # lemma -> {part of speech: prior count of its senses}


def lemma_parts(graph: KnowledgeGraph) -> dict[str, dict[str, float]]:
    """Every one-word surface of ``graph`` -> ``{part of speech: summed prior count}`` over its
    candidates; the part of speech is read from WordNet's entity names (``02084071-n``), ``ANY``
    for an entity named otherwise."""
    pos = [WORDNET_POS.get(e.rsplit("-", 1)[-1], ANY) if "-" in e else ANY for e in graph.entities]
    counts = np.asarray(graph.surface_counts, dtype=np.float64)
    out: dict[str, dict[str, float]] = {}
    for s, surface in enumerate(graph.surfaces):  # once per surface, when a linker is built
        if " " in surface:
            continue
        parts = out[surface] = {}
        for k in range(int(graph.surface_offsets[s]), int(graph.surface_offsets[s + 1])):
            p = pos[int(graph.surface_entities[k])]
            parts[p] = parts.get(p, 0.0) + (float(counts[k]) if k < len(counts) else 0.0)
    return out


def ranked_bases(word: str, exceptions: Mapping[str, list[str]], lemmas: Lemmas | None = None
                 ) -> list[tuple[str, float]]:
    """``(base, prior count)`` candidates of ``word`` (lower-cased): its exceptions in file order
    (count: all the base's senses), then the rules' bases that are lemmas of the rule's part of
    speech (count: the senses of that part of speech), most counted first.  ``lemmas`` ``None``:
    every rule's base, counts 0, in rule order."""
    def total(base: str) -> float:
        return float(sum(lemmas.get(base, {}).values())) if lemmas is not None else 0.0

    out = [(b, total(b)) for b in dict.fromkeys(exceptions.get(word, ()))]
    found: dict[str, float] = {}
    for suffix, ending, pos in RULES:
        if not (word.endswith(suffix) and len(word) > len(suffix) + 1):
            continue
        stem = word[: -len(suffix)]
        bases = [stem + ending]
        if not ending and len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "aeiouy":
            bases.append(stem[:-1])  # a doubled final consonant: dogged, running, bigger
        for b in bases:
            if lemmas is None:
                found.setdefault(b, 0.0)
                continue
            parts = lemmas.get(b)
            if parts is None or (pos not in parts and ANY not in parts):
                continue  # not a lemma of the rule's part of speech: doing -> doe
            found[b] = max(found.get(b, 0.0), parts.get(pos, 0.0) + parts.get(ANY, 0.0))
    seen = {b for b, _ in out}
    ranked = sorted(((b, c) for b, c in found.items() if b not in seen), key=lambda bc: -bc[1])  # stable
    return out + ranked


def base_forms(word: str, exceptions: Mapping[str, list[str]], lemmas: Lemmas | None = None) -> list[str]:
    """Candidate lemmas of an inflected ``word`` (lower-cased), most likely first: see
    :func:`ranked_bases` (``lemmas`` from :func:`lemma_parts`)."""
    return [b for b, _ in ranked_bases(word, exceptions, lemmas)]


__all__ = ["ANY", "RULES", "base_forms", "lemma_parts", "ranked_bases"]
