"""The WordNet pair tasks built on a synthetic WordNet written here in wndb(5)'s format:
Word-in-Context (balanced, split by lemma, no lemma in two parts) and hypernym detection (true
ancestors within two levels, reversed and random negatives, split by synset with no synset in
two parts), read back as the classification task type reads a recipe's task."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit import registry
from ptmkit.data.sources.parts import write_parts
from ptmkit.data.sources.wordnet_hypernym import WordNetHypernym, hypernym_closure, hypernym_pairs, synset_texts
from ptmkit.data.sources.wordnet_wic import WordNetWiC, part_stats, split_by_lemma, wic_pairs
from ptmkit.data.sources.wordnet_wsd import instances, read_wordnet_dir
from ptmkit.knowledge.wordnet import read_graph

N_LEMMAS, N_MID = 200, 20


def _off(i: int) -> str:
    return f"{i:08d}"


@pytest.fixture(scope="module")
def wordnet(tmp_path_factory):
    """root <- 20 mid synsets <- 400 leaves; lemma wordK has two leaf senses under different mids,
    each sense with two example sentences holding the lemma."""
    wn = tmp_path_factory.mktemp("wn")
    root, mid = 10, [100 + m for m in range(N_MID)]
    leaf = {(k, s): 1000 + 2 * k + s for k in range(N_LEMMAS) for s in range(2)}
    lines = [f"{_off(root)} 03 n 01 root 0 000 | the top"]
    lines += [f"{_off(m)} 03 n 01 mid{i} 0 001 @ {_off(root)} n 0000 | middle kind {i}" for i, m in enumerate(mid)]
    for (k, s), off in leaf.items():
        parent = mid[(k + s) % N_MID]
        lines.append(f'{_off(off)} 05 n 01 word{k} 0 001 @ {_off(parent)} n 0000 | sense {s} of word{k}; '
                     f'"the word{k} stood {"tall" if s else "still"} here"; "a word{k} was seen {"near" if s else "far"} {s}"')
    index = [f"root n 1 0 1 0 {_off(root)}"] + [f"mid{i} n 1 1 @ 1 0 {_off(m)}" for i, m in enumerate(mid)]
    index += [f"word{k} n 2 1 @ 2 0 {_off(leaf[(k, 0)])} {_off(leaf[(k, 1)])}" for k in range(N_LEMMAS)]
    header = "  1 licence header\n"
    (wn / "data.noun").write_text(header + "".join(line + "  \n" for line in lines))
    (wn / "index.noun").write_text(header + "".join(line + "  \n" for line in sorted(index)))
    for name in ("verb", "adj", "adv"):
        (wn / f"data.{name}").write_text(header)
        (wn / f"index.{name}").write_text(header)
    return wn


def _read_back(tmp_path, source, parts):
    write_parts(parts, tmp_path, {}, part_stats)
    name, spec = next(iter(source.tasks.items()))
    return registry.get("task_type", spec["type"]).read_builtin(name, spec, tmp_path)


def test_wic_balanced_marked_and_split_by_lemma(wordnet, tmp_path):
    synsets, senses = read_wordnet_dir(wordnet)
    rows = instances(synsets, senses)
    assert len(rows) == 4 * N_LEMMAS  # every example holds its lemma
    groups = wic_pairs(rows, np.random.default_rng(0))
    parts = split_by_lemma(groups, np.random.default_rng(1))
    lemmas = {p: {r["lemma"] for r in rows} for p, rows in parts.items()}
    assert not lemmas["train"] & (lemmas["dev"] | lemmas["test"]) and not lemmas["dev"] & lemmas["test"]
    assert len(lemmas["test"]) == N_LEMMAS - int(0.8 * N_LEMMAS) - int(0.1 * N_LEMMAS)
    for part in parts.values():
        labels = [r["label"] for r in part]
        assert sum(labels) * 2 == len(labels) > 0  # balanced
        for r in part:
            same = r["synsets"][0] == r["synsets"][1]
            assert r["label"] == int(same) and r["text"] != r["text_pair"]
            assert f"*{r['lemma']}*" in r["text"] and f"*{r['lemma']}*" in r["text_pair"]
    data = _read_back(tmp_path, WordNetWiC, parts)
    assert len(data.test) == len(parts["test"]) and data.test.text_pairs[0] == parts["test"][0]["text_pair"]


def test_hypernym_pairs_true_labels_and_no_shared_synset(wordnet, tmp_path):
    graph = read_graph(wordnet)
    parent = {graph.entities[h]: graph.entities[t] for h, r, t in graph.triples if graph.relations[r] == "_hypernym"}
    ancestors = {e: {parent.get(e), parent.get(parent.get(e))} - {None} for e in graph.entities}
    _, closure = hypernym_closure(graph)
    leaf, mid, root = graph.entity_id(f"{_off(1000)}-n"), graph.entity_id(f"{_off(100)}-n"), graph.entity_id(f"{_off(10)}-n")
    assert {tuple(row) for row in closure.tolist() if row[0] == leaf} == {(leaf, mid, 1), (leaf, root, 2)}
    texts = synset_texts(graph, {f"{_off(1000)}-n": "sense 0 of word0"})
    assert texts[leaf] == "word0: sense 0 of word0"
    parts = hypernym_pairs(graph, texts, np.random.default_rng(0))
    synsets = {p: {s for r in rows for s in r["synsets"]} for p, rows in parts.items()}
    assert not synsets["train"] & (synsets["dev"] | synsets["test"]) and not synsets["dev"] & synsets["test"]
    for rows in parts.values():
        assert len(rows) > 0 and sum(r["label"] for r in rows) * 2 == len(rows)
        for r in rows:
            a, b = r["synsets"]
            if r["kind"] == "hypernym":
                assert r["label"] == 1 and b in ancestors[a] and r["depth"] in (1, 2)
            elif r["kind"] == "reversed":
                assert r["label"] == 0 and a in ancestors[b]
            else:
                assert r["label"] == 0 and b not in ancestors[a] and b != a
    data = _read_back(tmp_path, WordNetHypernym, parts)
    assert data.label_names == [0, 1] and len(data.train) == len(parts["train"])
