"""``ptm prepare --dedup``: exact and near duplicates removed, exactly the planted ones, reported."""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest

from ptmkit.cli import main as cli_main
from ptmkit.data.dedup import Dedup, lsh_bands, normalise
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

VOCAB = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu") for b in ("b", "d", "g", "k", "m", "n",
                                                                                       "p", "r", "s", "t", "v", "z")]


def random_doc(rng: random.Random, words: int = 120) -> list[str]:
    """A document of ``words`` random words as sentences of 8 to 15 words, one per line."""
    flat = [rng.choice(VOCAB) for _ in range(words)]
    lines, i = [], 0
    while i < len(flat):
        n = rng.randint(8, 15)
        lines.append(" ".join(flat[i:i + n]))
        i += n
    return lines


def one_word_changed(doc: list[str], rng: random.Random) -> list[str]:
    lines = [line.split() for line in doc]
    k = rng.randrange(len(lines))
    j = rng.randrange(len(lines[k]))
    lines[k][j] = "changed"
    return [" ".join(words) for words in lines]


def write_text(path, docs: list[list[str]]):
    path.write_text("".join("\n".join(d) + "\n\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    root = tmp_path_factory.mktemp("dedup-tok")
    text = write_text(root / "vocab.txt", [VOCAB, ["changed the cat sat"]])
    path = root / "tokenizer.json"
    Tokenizer.train([text], "word", 200, min_frequency=1).save(path)
    return path


def test_normalised_text_and_bands():
    assert normalise("  The\tCAT\n\nsat\u00a0 on ｔｈｅ ﬁle ") == "the cat sat on the file"
    assert lsh_bands(0.8, 128) == (9, 13)
    assert lsh_bands(0.5, 128)[1] < 13  # a lower threshold: fewer rows per band
    with pytest.raises(PtmError, match="--dedup 'fuzzy': expected one of exact, near"):
        Dedup("fuzzy")
    with pytest.raises(PtmError, match="between 0 and 1"):
        Dedup("near", 1.0)


def test_exact_removes_the_planted_copies_and_nothing_else(tok, tmp_path, caplog):
    rng = random.Random(0)
    docs = [random_doc(rng, rng.randint(20, 60)) for _ in range(40)]
    # copies differing only in case, spacing, line breaks and compatibility forms
    copies = [[" ".join(docs[3]).upper()], [line.replace(" ", "  \t") for line in docs[7]],
              ["\u00a0" + line for line in docs[7]], docs[11], docs[3]]
    near = [one_word_changed(docs[5], rng)]  # not an exact copy: kept
    a = write_text(tmp_path / "a.txt", docs[:20] + copies[:2])
    b = write_text(tmp_path / "b.txt", docs[20:] + copies[2:] + near)
    ref = prepare([write_text(tmp_path / "unique.txt", docs + near)], tok, tmp_path / "ref", workers=1, progress=False)
    with caplog.at_level(logging.INFO, logger="ptmkit.data.prepare"):
        got = prepare([a, b], tok, tmp_path / "out", workers=2, chunk_bytes=256, progress=False, dedup="exact")
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_array_equal(got.documents, ref.documents)
    record = json.loads((tmp_path / "out" / "meta.json").read_text())["dedup"]
    assert record == {"method": "exact", "documents_seen": 46, "documents_removed": 5, "share_removed": 5 / 46}
    assert "--dedup exact: removed 5 of 46 documents (10.87%)" in caplog.text


def test_near_removes_the_planted_near_copies_and_nothing_else(tok, tmp_path):
    rng = random.Random(1)
    # 200 words or more: one word changed leaves a 5-gram Jaccard of 0.95 or more, caught with
    # probability 0.998 (see ptmkit.data.dedup)
    docs = [random_doc(rng, rng.randint(200, 300)) for _ in range(60)]
    planted = [one_word_changed(docs[i], rng) for i in (2, 9, 20, 31, 58)]
    planted.append(docs[44])  # an exact copy is a near copy too
    # far from a copy: a third of the words changed (Jaccard of 5-grams well below 0.8), kept
    far = [line.split() for line in docs[17]]
    for words in far:
        for j in range(0, len(words), 3):
            words[j] = "changed"
    far = [" ".join(w) for w in far]
    mixed = docs[:30] + planted[:3] + docs[30:] + planted[3:] + [far]  # each copy after its original
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": "\n".join(d)}) + "\n" for d in mixed), encoding="utf-8")
    ref = prepare([write_text(tmp_path / "unique.txt", docs + [far])], tok, tmp_path / "ref", workers=1, progress=False)
    got = prepare([rows], tok, tmp_path / "out", workers=1, progress=False, dedup="near")
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_array_equal(got.documents, ref.documents)
    record = got.meta["dedup"]
    assert (record["documents_seen"], record["documents_removed"]) == (67, 6)
    assert (record["threshold"], record["bands"], record["rows"], record["shingle_words"]) == (0.8, 9, 13, 5)


def test_near_threshold_decides(tmp_path):
    """A copy with every 20th word changed (5-gram Jaccard about 0.6) is a near duplicate at 0.3,
    not at 0.8."""
    rng = random.Random(2)
    doc = " ".join(" ".join(line) for line in [random_doc(rng, 300)])
    words = doc.split()
    for j in range(0, len(words), 20):
        words[j] = "changed"
    other = " ".join(words)
    strict, loose = Dedup("near", 0.8), Dedup("near", 0.3)
    assert not strict.is_duplicate(doc) and not strict.is_duplicate(other)
    assert not loose.is_duplicate(doc) and loose.is_duplicate(other)
    assert (strict.removed, loose.removed) == (0, 1)


def test_a_document_too_long_for_the_budget_is_refused(tok, tmp_path, capsys):
    rng = random.Random(3)
    long_doc = random_doc(rng, 20000)  # about 100 KB in one document, more than a 4K block
    path = write_text(tmp_path / "long.txt", [long_doc])
    out = tmp_path / "out"
    assert cli_main(["prepare", str(path), "-t", str(tok), "-o", str(out), "--memory-budget", "2.5M", "--workers", "1",
                     "--dedup", "exact"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a document is longer than" in err and "--memory-budget" in err
    # without --dedup the same file prepares under the same budget (no document is held)
    assert cli_main(["prepare", str(path), "-t", str(tok), "-o", str(out), "--memory-budget", "2.5M", "--workers", "1"]) == 0


def test_cli_dedup_options(tok, tmp_path, capsys):
    path = write_text(tmp_path / "t.txt", [["a b c"], ["A  B c"]])
    with pytest.raises(SystemExit) as exit_:
        cli_main(["prepare", str(path), "-t", str(tok), "-o", str(tmp_path / "o1"), "--dedup", "near",
                  "--dedup-threshold", "1.5"])
    assert exit_.value.code == 2
    assert "must be between 0 and 1" in capsys.readouterr().err
    assert cli_main(["prepare", str(path), "-t", str(tok), "-o", str(tmp_path / "o2"), "--dedup-threshold", "0.5"]) == 2
    assert "give --dedup near with it" in capsys.readouterr().err
    assert cli_main(["prepare", str(path), "-t", str(tok), "-o", str(tmp_path / "o3"), "--dedup", "near",
                     "--dedup-threshold", "0.5"]) == 0
    meta = json.loads((tmp_path / "o3" / "meta.json").read_text())
    assert (meta["n_documents"], meta["dedup"]["documents_removed"], meta["dedup"]["threshold"]) == (1, 1, 0.5)
