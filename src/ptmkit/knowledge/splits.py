"""WN18 and WN18RR rebuilt from WordNet 3.0: the link-prediction benchmarks' relation sets and a
leak-free split.

WN18 (Bordes et al. 2013, TransE; built for Bordes et al. 2014, SME) keeps 18 WordNet relations
(:data:`WN18_RELATIONS`) over 40,943 synsets.  Its entity filter is reproduced here as
``min_triples``: a synset is kept when it takes part in at least that many WN18-relation triples
(counted once, before filtering; an entity left with no triple after filtering drops out too).
WN18RR (Dettmers et al. 2018) found that most WN18 test triples have their inverse in training
(``(a, _hyponym, b)`` in test, ``(b, _hypernym, a)`` in train), so a rule reading the inverse
scores as well as any embedding; it drops one relation of each inverse pair (:data:`INVERSES`),
leaving 11 relations.  This split goes one step further: triples are grouped by their *unordered*
entity pair, and a group lies wholly in one part, so neither a symmetric relation's reverse
(``_derivationally_related_form``, ``_verb_group``, ``_similar_to``, ``_also_see``) nor any other
triple between the same two synsets is in training when one of them is tested (WN18RR itself
still has such pairs).  Groups are shuffled with ``np.random.default_rng(seed)``; a valid or test
triple whose head or tail no training triple has is moved to training, so no test entity is
unseen in training.
"""

from __future__ import annotations

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import KnowledgeGraph
from ptmkit.knowledge.triples import KGSplit

WN18_RELATIONS = (
    "_also_see", "_derivationally_related_form", "_has_part", "_hypernym", "_hyponym", "_instance_hypernym",
    "_instance_hyponym", "_member_holonym", "_member_meronym", "_member_of_domain_region", "_member_of_domain_topic",
    "_member_of_domain_usage", "_part_of", "_similar_to", "_synset_domain_region_of", "_synset_domain_topic_of",
    "_synset_domain_usage_of", "_verb_group",
)
# kept relation -> its inverse, which WN18RR drops
INVERSES = {
    "_hypernym": "_hyponym", "_instance_hypernym": "_instance_hyponym", "_member_meronym": "_member_holonym",
    "_has_part": "_part_of", "_synset_domain_topic_of": "_member_of_domain_topic",
    "_member_of_domain_usage": "_synset_domain_usage_of", "_member_of_domain_region": "_synset_domain_region_of",
}
WN18RR_RELATIONS = tuple(r for r in WN18_RELATIONS if r not in INVERSES.values())
SEED = 2018  # Dettmers et al. (2018)
MIN_TRIPLES = 5
HELD_OUT = 0.034  # valid and test each: WN18RR's 3,034 and 3,134 of 93,003 triples


def restrict(graph: KnowledgeGraph, relations: tuple[str, ...], min_triples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(triples int64 [N, 3] in new ids, entity ids kept [E'] (graph ids), relation ids [R'])``:
    the graph's triples of ``relations`` between entities in at least ``min_triples`` of them."""
    missing = [r for r in relations if r not in graph.relations]
    if missing:
        raise PtmError(f"the graph has no relation {missing[0]!r}; WN18 needs WordNet 3.0's pointer relations")
    rel_ids = np.array([graph.relations.index(r) for r in relations], dtype=np.int64)
    t = graph.triples[np.isin(graph.triples[:, 1], rel_ids)]
    degree = np.bincount(t[:, [0, 2]].ravel(), minlength=graph.num_entities)
    t = t[(degree[t[:, 0]] >= min_triples) & (degree[t[:, 2]] >= min_triples)]
    kept = np.unique(t[:, [0, 2]])
    new_entity = np.full(graph.num_entities, -1, dtype=np.int64)
    new_entity[kept] = np.arange(len(kept))
    new_rel = np.full(graph.num_relations, -1, dtype=np.int64)
    new_rel[rel_ids] = np.arange(len(rel_ids))
    return np.stack([new_entity[t[:, 0]], new_rel[t[:, 1]], new_entity[t[:, 2]]], axis=1), kept, rel_ids


def split_by_pair(triples: np.ndarray, n_entities: int, held_out: float = HELD_OUT, seed: int = SEED,
                  by: str = "pair") -> tuple[np.ndarray, ...]:
    """``triples`` int64 ``[N, 3]`` -> ``(train, valid, test)``: groups of one unordered entity
    pair in one part (``by="triple"``: each triple its own group, WN18RR's protocol, which lets a
    symmetric relation's reverse sit in training); ``held_out`` of the triples (about) each for
    valid and test; held-out triples with an entity absent from training moved to training."""
    if by not in ("pair", "triple"):
        raise PtmError(f"by={by!r}: split by 'pair' (leak-free) or 'triple' (WN18RR's protocol)")
    lo, hi = np.minimum(triples[:, 0], triples[:, 2]), np.maximum(triples[:, 0], triples[:, 2])
    _, group = np.unique(lo * n_entities + hi if by == "pair" else np.arange(len(triples)), return_inverse=True)
    order = np.random.default_rng(seed).permutation(group.max() + 1 if len(group) else 0)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    # cut the shuffled groups where the cumulative triple count reaches the held-out shares
    sizes = np.bincount(group, minlength=len(order))[order]
    cum = np.cumsum(sizes)
    n_valid_groups = int(np.searchsorted(cum, held_out * len(triples)))
    n_test_groups = int(np.searchsorted(cum, 2 * held_out * len(triples)))
    part = np.where(rank[group] < n_valid_groups, 1, np.where(rank[group] < n_test_groups, 2, 0))
    in_train = np.zeros(n_entities, dtype=bool)
    in_train[triples[part == 0][:, [0, 2]].ravel()] = True
    unseen = (part > 0) & ~(in_train[triples[:, 0]] & in_train[triples[:, 2]])
    # a moved triple's whole group moves with it, so the pair rule still holds
    part[np.isin(group, group[unseen])] = 0
    return tuple(triples[part == k] for k in (0, 1, 2))


def wn18rr_split(graph: KnowledgeGraph, min_triples: int = MIN_TRIPLES, seed: int = SEED,
                 relations: tuple[str, ...] = WN18RR_RELATIONS, by: str = "pair") -> KGSplit:
    """The WN18RR-style split of a WordNet graph (see the module docstring).  The entity filter
    counts triples of all 18 WN18 relations (WN18's entity set), then only ``relations`` are kept."""
    _, kept18, _ = restrict(graph, WN18_RELATIONS, min_triples)
    rel_ids = np.array([graph.relations.index(r) for r in relations], dtype=np.int64)
    t = graph.triples[np.isin(graph.triples[:, 1], rel_ids) & np.isin(graph.triples[:, 0], kept18)
                      & np.isin(graph.triples[:, 2], kept18)]
    kept = np.unique(t[:, [0, 2]])
    new_entity = np.full(graph.num_entities, -1, dtype=np.int64)
    new_entity[kept] = np.arange(len(kept))
    new_rel = np.full(graph.num_relations, -1, dtype=np.int64)
    new_rel[rel_ids] = np.arange(len(rel_ids))
    triples = np.stack([new_entity[t[:, 0]], new_rel[t[:, 1]], new_entity[t[:, 2]]], axis=1)
    train, valid, test = split_by_pair(triples, len(kept), seed=seed, by=by)
    return KGSplit([graph.entities[i] for i in kept], list(relations), train, valid, test)
