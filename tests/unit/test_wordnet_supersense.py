"""wordnet-supersense: WordNet examples tagged with the BIO supersense of the lemma they
illustrate, split by lemma.  Known lemmas from real WordNet 3.0 lines (their lexicographer files
and examples as in the database, pointers left out), the split on a synthetic WordNet of 100
lemmas, and the recipe's files read back as the tagging task type reads a built-in task."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit import registry
from ptmkit.data.sources import wordnet_supersense as ss
from ptmkit.data.sources.wordnet_wsd import read_wordnet_dir

HEADER = "  1 licence header\n"
NOUNS = [  # offset lex_filenum ss_type w_cnt words p_cnt | gloss (WordNet 3.0, pointers dropped)
    '02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 000 | a member of the genus Canis; "the dog barked all night"',
    '09213565 17 n 01 bank 1 000 | sloping land (especially the slope beside a body of water); '
    '"they pulled the canoe up on the bank"; "he sat on the bank of the river and watched the currents"',
    '08420278 14 n 04 depository_financial_institution 0 bank 0 banking_concern 0 banking_company 0 000 | '
    'a financial institution that accepts deposits; "he cashed a check at the bank"; "that bank holds the mortgage on my home"',
]
VERBS = [
    '01168486 34 v 01 eat 0 000 01 + 08 00 | take in solid food; "She was eating a banana"; "What did you eat for dinner last night?"',
    '01927002 38 v 01 run d 000 02 + 02 00 + 22 00 | travel rapidly, by any (unspecified) means; "Run to the store!"; '
    '"She always runs to Italy, because she has a lover there"',
    '00050454 29 v 01 take_off 3 000 01 + 08 00 | remove clothes; "take off your shirt--it\'s very hot in here"',
    '02014571 38 v 02 take_off 2 lift_off 0 000 02 + 01 00 + 04 00 | depart from the ground; "The plane took off two hours late"',
]
ADJS = ['00001740 00 a 01 able 0 000 | having the necessary means or skill; "able to swim"']
INDEX = {
    "noun": ["bank n 2 0 2 0 09213565 08420278", "dog n 1 0 1 0 02084071"],
    "verb": ["eat v 1 0 1 0 01168486", "run v 1 0 1 0 01927002", "take_off v 2 0 2 0 00050454 02014571"],
    "adj": ["able a 1 0 1 0 00001740"], "adv": [],
}


def _write(wn, data: dict[str, list[str]], index: dict[str, list[str]]):
    wn.mkdir(parents=True, exist_ok=True)
    for name in ("noun", "verb", "adj", "adv"):
        (wn / f"data.{name}").write_text(HEADER + "".join(line + "  \n" for line in data.get(name, [])))
        (wn / f"index.{name}").write_text(HEADER + "".join(line + "  \n" for line in sorted(index.get(name, []))))
    return wn


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("wn"), {"noun": NOUNS, "verb": VERBS, "adj": ADJS}, INDEX)


N_LEMMAS = 100


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """wordK: a noun sense (noun.animal, noun.artifact or noun.attribute) and a verb sense
    (verb.motion or verb.change), each with one example holding the lemma (the verb inflected)."""
    nouns, verbs = [], []
    for k in range(N_LEMMAS):
        nouns.append(f'{1000 + k:08d} {5 + k % 3:02d} n 01 word{k} 0 000 | noun sense of word{k}; "the word{k} stood here"')
        verbs.append(f'{5000 + k:08d} {38 if k % 2 else 30:02d} v 01 word{k} 0 000 01 + 02 00 | verb sense; "they word{k}ed twice"')
    index = {"noun": [f"word{k} n 1 0 1 0 {1000 + k:08d}" for k in range(N_LEMMAS)],
             "verb": [f"word{k} v 1 0 1 0 {5000 + k:08d}" for k in range(N_LEMMAS)]}
    return _write(tmp_path_factory.mktemp("wn"), {"noun": nouns, "verb": verbs}, index)


def _rows(wn):
    synsets, _ = read_wordnet_dir(wn)
    return ss.tagged_examples(synsets, ss.supersenses(wn))


def _tagged(row):
    return [(w, t) for w, t in zip(row["tokens"], row["tags"]) if t != "O"]


def test_known_lemmas_get_their_supersense(known):
    assert ss.supersenses(known)["02084071-n"] == "noun.animal" and ss.supersenses(known)["00001740-a"] == "adj.all"
    rows = {" ".join(r["tokens"]): r for r in _rows(known)}
    dog = rows["the dog barked all night"]
    assert dog["tags"] == ["O", "B-noun.animal", "O", "O", "O"] and dog["synset"] == "02084071-n"
    assert _tagged(rows["they pulled the canoe up on the bank"]) == [("bank", "B-noun.object")]  # bank, sense 1
    assert _tagged(rows["he cashed a check at the bank"]) == [("bank", "B-noun.group")]  # bank, sense 2
    assert _tagged(rows["She was eating a banana"]) == [("eating", "B-verb.consumption")]  # inflected
    assert _tagged(rows["She always runs to Italy , because she has a lover there"]) == [("runs", "B-verb.motion")]
    shirt = rows["take off your shirt -- it's very hot in here"]  # a multi-word lemma: B- then I-
    assert _tagged(shirt) == [("take", "B-verb.body"), ("off", "I-verb.body")] and shirt["lemma"] == "take_off"
    assert "The plane took off two hours late" not in " ".join(rows)  # irregular: no match, dropped
    assert all(r["pos"] in ("n", "v") for r in rows.values())  # adjectives are not tagged
    assert len(rows) == 10  # every example but the plane's


def test_words_split_at_the_match_and_every_occurrence_is_tagged():
    tokens, tags = ss.tag_sentence("the dog's dogs -- and a hotdog...", "dog", "noun.animal")
    assert tokens == ["the", "dog", "'s", "dogs", "--", "and", "a", "hotdog", "..."]
    assert tags == ["O", "B-noun.animal", "O", "B-noun.animal", "O", "O", "O", "O", "O"]
    assert ss.tag_sentence("a catalogue", "cat", "noun.animal") is None


def test_split_by_lemma_has_no_shared_lemma_and_is_seeded(synthetic):
    rows = _rows(synthetic)
    assert len(rows) == 2 * N_LEMMAS
    assert {(r["pos"], r["supersense"]) for r in rows} >= {("n", "noun.animal"), ("v", "verb.motion"), ("v", "verb.change")}
    verb = next(r for r in rows if r["synset"] == f"{5001:08d}-v")
    assert verb["tokens"] == ["they", "word1ed", "twice"] and verb["tags"][1] == "B-verb.motion"
    parts = ss.split_by_lemma(rows, np.random.default_rng(ss.SEED))
    lemmas = {p: {r["lemma"] for r in part} for p, part in parts.items()}
    assert not lemmas["train"] & (lemmas["dev"] | lemmas["test"]) and not lemmas["dev"] & lemmas["test"]
    assert [len(lemmas[p]) for p in ("train", "dev", "test")] == [80, 10, 10]
    assert all(len(part) == 2 * len(lemmas[p]) for p, part in parts.items())  # noun and verb stay together
    assert ss.split_by_lemma(rows, np.random.default_rng(ss.SEED)) == parts


def test_recipe_writes_files_the_tagging_task_reads(synthetic, tmp_path, monkeypatch):
    work, out = tmp_path / "work", tmp_path / "out"
    _write(work / "root/usr/share/wordnet", {}, {})
    for f in synthetic.iterdir():  # the unpacked package's layout
        (work / "root/usr/share/wordnet" / f.name).write_text(f.read_text())
    monkeypatch.setattr(ss, "read_wordnet", lambda deb, work: read_wordnet_dir(work / "root/usr/share/wordnet"))
    out.mkdir()
    ss.WordNetSupersense().build([tmp_path / "wordnet-base.deb"], work, out)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["sentences"] == 2 * N_LEMMAS and stats["lemmas"] == N_LEMMAS and stats["seed"] == ss.SEED
    assert [stats["parts"][p]["lemmas"] for p in ("train", "dev", "test")] == [80, 10, 10]
    name, spec = next(iter(ss.WordNetSupersense.tasks.items()))
    data = registry.get("task_type", spec["type"]).read_builtin(name, spec, out)
    assert type(data).__name__ == "TaggingData" and data.chunked and "O" in data.label_names
    assert len(data.train) == stats["parts"]["train"]["sentences"] and len(data.test) == 20
    assert {t for t in data.label_names if t != "O"} <= {f"B-{s}" for s in ("noun.animal", "noun.artifact", "noun.attribute",
                                                                          "verb.motion", "verb.change")}
