"""The ``wordnet-word-supersenses`` recipe on a synthetic WordNet written in wndb(5)'s format: one
example per polysemous lemma (nouns and verbs together), its labels the supersenses of all its
synsets, no lemma in two parts, the baselines, and the task read back as multi_label."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit import registry
from ptmkit.data.sources.parts import cut, write_parts
from ptmkit.data.sources.wordnet_supersense import supersenses
from ptmkit.data.sources.wordnet_word_supersenses import (
    FRACTIONS,
    WordNetWordSupersenses,
    baselines,
    lemma_rows,
    part_stats,
)
from ptmkit.data.sources.wordnet_wsd import read_wordnet_dir
from ptmkit.knowledge.wordnet import LEXNAMES

N_LEMMAS = 100
NOUN_FILES = ("noun.animal", "noun.artifact", "noun.food")
VERB_FILES = ("verb.motion", "verb.possession")


def _off(i: int) -> str:
    return f"{i:08d}"


@pytest.fixture(scope="module")
def wordnet(tmp_path_factory):
    """lemma wordK: two noun synsets (files K % 3 and (K + 1) % 3 of NOUN_FILES) and, for even K, a
    verb synset (file K % 2 of VERB_FILES); lemma single: one synset only; lemma twice_v: two
    verb synsets of one file."""
    wn = tmp_path_factory.mktemp("wn")
    nouns, verbs, noun_index, verb_index = [], [], [], []
    offset = 1000

    def synset(lines, lemma, pos, lexname):
        nonlocal offset
        offset += 1
        lines.append(f"{_off(offset)} {LEXNAMES.index(lexname):02d} {pos} 01 {lemma} 0 000 | a sense of {lemma}")
        return _off(offset)

    for k in range(N_LEMMAS):
        offs = [synset(nouns, f"word{k}", "n", NOUN_FILES[(k + s) % 3]) for s in range(2)]
        noun_index.append(f"word{k} n 2 0 2 0 {' '.join(offs)}")
        if k % 2 == 0:
            verb_index.append(f"word{k} v 1 0 1 0 {synset(verbs, f'word{k}', 'v', VERB_FILES[k // 2 % 2])}")
    noun_index.append(f"single n 1 0 1 0 {synset(nouns, 'single', 'n', 'noun.food')}")
    twice = [synset(verbs, "twice_v", "v", "verb.motion") for _ in range(2)]
    verb_index.append(f"twice_v v 2 0 2 0 {' '.join(twice)}")
    header = "  1 licence header\n"
    for name, data, index in (("noun", nouns, noun_index), ("verb", verbs, verb_index), ("adj", [], []), ("adv", [], [])):
        (wn / f"data.{name}").write_text(header + "".join(line + "  \n" for line in data))
        (wn / f"index.{name}").write_text(header + "".join(line + "  \n" for line in sorted(index)))
    return wn


def test_one_example_per_polysemous_lemma_with_the_supersenses_of_all_its_synsets(wordnet, tmp_path):
    _, senses = read_wordnet_dir(wordnet)
    rows = lemma_rows(senses, supersenses(wordnet))
    by_text = {r["text"]: r for r in rows}
    assert "single" not in by_text and len(rows) == N_LEMMAS + 1  # one synset: not an example
    assert by_text["twice v"] == {"text": "twice v", "labels": ["verb.motion"], "synsets": 2}  # underscores: spaces
    assert by_text["word0"]["labels"] == ["noun.animal", "noun.artifact", "verb.motion"]  # nouns and verbs together
    assert by_text["word1"]["labels"] == ["noun.artifact", "noun.food"] and by_text["word1"]["synsets"] == 2
    assert by_text["word2"]["labels"] == ["noun.animal", "noun.food", "verb.possession"]
    stats = part_stats(rows)
    assert stats["cardinality"] == pytest.approx(np.mean([len(r["labels"]) for r in rows]), abs=1e-4)
    assert stats["labels"] == 5 and stats["more_than_one"] == pytest.approx(N_LEMMAS / len(rows))

    parts = {p: [rows[i] for i in idx] for p, idx in cut(len(rows), np.random.default_rng(0), FRACTIONS).items()}
    texts = {p: {r["text"] for r in part} for p, part in parts.items()}
    assert not (texts["train"] & texts["dev"] or texts["train"] & texts["test"] or texts["dev"] & texts["test"])
    assert sum(len(t) for t in texts.values()) == len(rows)
    base = baselines(parts)
    assert base["most_frequent_set"]["labels"] and 1 <= base["frequent_labels"]["k"] <= 5
    write_parts(parts, tmp_path, {}, part_stats)
    name, spec = next(iter(WordNetWordSupersenses.tasks.items()))
    data = registry.get("task_type", spec["type"]).read_builtin(name, spec, tmp_path)
    assert data.task_type == "multi_label" and len(data.train) == len(parts["train"])
    assert data.label_names == sorted({x for r in parts["train"] for x in r["labels"]})
    first = parts["test"][0]
    assert [n for n, y in zip(data.label_names, data.test.labels[0]) if y] == first["labels"]
