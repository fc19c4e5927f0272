"""The bible-greek-alignments recipe on a hand-made imitation of the bible-alignments wheel's three files."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ptmkit.data.sources.bible_greek_alignments import ALIGNMENTS, ENGLISH, GREEK, BibleGreekAlignments, ref_of
from ptmkit.errors import PtmError

# Made-up words; ids as in the package: [n]BBCCCVVVWWW (40 = Matthew, 41 = Mark, 42 = Luke).
GREEK_TSV = "id\taltId\ttext\tstrongs\tgloss\n" + "".join(f"{i}\t{w}-1\t{w}\tG0001\tx\n" for i, w in [
    ("n40001001001", "ἄλφα"), ("n40001001002", "βῆτα"), ("n40001001003", "γάμμα"),  # Matt.1.1: 3 words
    ("n40001002001", "δέλτα"),                                                       # Matt.1.2: no link
    ("n41001001001", "ζῆτα"), ("n41001002001", "ἦτα"),                              # Mark.1.1-2: crossing
    ("n42001001001", "θῆτα"), ("n42001001002", "ἰῶτα"),                             # Luke.1.1 (test)
    ("n42001002001", "κάππα"),                                                       # Luke.1.2: Greek only
])
ENGLISH_TSV = "id\tsource_verse\ttext\tskip_space_after\texclude\n" + "".join(f"{i}\t{i[:8]}\t{w}\t\t{x}\n" for i, w, x in [
    ("40001001001", "one", ""), ("40001001002", "two", ""), ("40001001003", ",", "y"), ("40001001004", "three", ""),
    ("40001002001", "four", ""),
    ("41001001001", "six", ""), ("41001002001", "seven", ""),
    ("42001001001", "eight", ""), ("42001001002", "nine", ""), ("42001001003", ".", "y"),
])


def _record(src, tgt, process="manual"):
    return {"source": src, "target": tgt, "meta": {"id": "x", "process": process, "status": "created"}}


RECORDS = [
    _record(["n40001001001"], ["40001001001"]),
    _record(["n40001001002", "n40001001003"], ["40001001002", "40001001004"]),  # 2 x 2 links
    _record(["n40001002001"], ["40001002001"], process="automatic"),             # not manual: dropped
    _record(["n41001001001"], ["41001001001"]),
    _record(["n41001002001"], ["41001001001"]),                                  # Mark.1.2 -> Mark.1.1: crossing
    _record(["n42001001001"], ["42001001002"]),
    _record(["n42001001002"], ["42001001003"]),                                  # punctuation: not a word
    _record(["n42001001002"], ["42001001001"]),
]


def _wheel(path: Path, records=RECORDS) -> Path:
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(GREEK, GREEK_TSV)
        whl.writestr(ENGLISH, ENGLISH_TSV)
        whl.writestr(ALIGNMENTS, json.dumps({"documents": [], "records": records}))
    return path


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_ids_map_to_osis_references():
    assert ref_of("n40001001002") == "Matt.1.1" and ref_of("66022021003") == "Rev.22.21"
    assert ref_of("46013012004") == "1Cor.13.12"
    with pytest.raises(PtmError, match="BBCCCVVVWWW"):
        ref_of("n99001001001")


def test_build_writes_verses_links_text_and_counts(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    BibleGreekAlignments().build([_wheel(tmp_path / "b.whl")], tmp_path, out)
    train, test = _jsonl(out / "train.jsonl"), _jsonl(out / "test.jsonl")
    assert _jsonl(out / "dev.jsonl") == []  # Mark (dev) has only the crossing verses
    assert train == [{"ref": "Matt.1.1", "grc": ["ἄλφα", "βῆτα", "γάμμα"], "en": ["one", "two", "three"],
                      "links": [[0, 0], [1, 1], [1, 2], [2, 1], [2, 2]]}]
    assert test == [{"ref": "Luke.1.1", "grc": ["θῆτα", "ἰῶτα"], "en": ["eight", "nine"], "links": [[0, 1], [1, 0]]}]
    # text and parallel files: every verse both texts have, line by line, punctuation left out
    assert (out / "text" / "grc.train.txt").read_text(encoding="utf-8") == "ἄλφα βῆτα γάμμα\nδέλτα\n"
    assert (out / "text" / "en.train.txt").read_text(encoding="utf-8") == "one two three\nfour\n"
    assert (out / "text" / "en.dev.txt").read_text(encoding="utf-8") == "six\nseven\n"
    assert _jsonl(out / "parallel" / "en-grc.test.jsonl") == [{"ref": "Luke.1.1", "en": "eight nine", "grc": "θῆτα ἰῶτα"}]
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["records_skipped"] == {"not_manual": 1, "unknown_token": 1, "crossing_verses": 1}
    assert stats["verses_left_out"] == {"no_links": 1, "links_outside_verse": 2}
    assert stats["verses_only_greek"] == ["Luke.1.2"] and stats["verses_only_english"] == []
    assert stats["splits"]["train"] == {"verses": 1, "grc_words": 3, "en_words": 3, "links": 5, "text_verses": 2, "books": ["Matt"]}
    assert stats["splits"]["test"]["links"] == 2 and stats["splits"]["dev"]["text_verses"] == 2


def test_a_wheel_without_the_files_is_a_clear_error(tmp_path):
    path = tmp_path / "b.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(GREEK, GREEK_TSV)
    with pytest.raises(PtmError, match="lacks"):
        BibleGreekAlignments().build([path], tmp_path, tmp_path)
