"""english-mix recipe: sentence splitting, normalisation, deduplication and the format readers."""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib

import numpy as np
import pytest

from ptmkit import registry
from ptmkit.data.sources import english_mix as em
from ptmkit.data.sources import text_formats


def test_split_sentences_respects_abbreviations_and_initials():
    text = 'Mr. Smith went to Washington. He met J. R. Jones there!  "Why?" asked e.g. Dr. Who. 42 came next.'
    assert em.split_sentences(text) == [
        "Mr. Smith went to Washington.",
        "He met J. R. Jones there!",
        '"Why?" asked e.g. Dr. Who.',
        "42 came next.",
    ]
    assert em.split_sentences("no capital after the stop. so one sentence") == ["no capital after the stop. so one sentence"]


def test_normalise_like_word2vec_demo():
    assert em.normalise("Don\u2019t PANIC -- it's 42, (really)!") == "don't panic it's 42 really"
    assert em.normalise("well-known `quotes' and \"double\" ones...") == "well known quotes and double ones"
    assert em.normalise("caf\u00e9 na\u00efve \ufb01ne") == "caf\u00e9 na\u00efve fine"  # letters kept, ligature folded
    assert em.normalise("rock 'n' roll") == "rock n roll"


def test_normalise_paragraph_drops_short_lines():
    assert em.normalise_paragraph("Yes. Indeed it is so. No!") == ["indeed it is so"]
    assert em.normalise_paragraph("Two words. Three words here.", min_words=2) == ["two words", "three words here"]


def test_dedup_and_stats():
    sources = {
        "a": [["The cat sat. The cat sat.", "A dog ran home."], ["Tiny."]],
        "b": [["the CAT, sat!", "Something else entirely here."], ["A dog ran home."]],
    }
    out = io.StringIO()
    stats = em.mix(sources, out)
    assert out.getvalue() == "the cat sat\na dog ran home\n\nsomething else entirely here\n\n"
    assert stats["a"] == {"documents_before": 2, "lines_before": 3, "words_before": 10,
                          "documents": 1, "lines": 2, "words": 7}
    assert stats["b"] == {"documents_before": 2, "lines_before": 3, "words_before": 11,
                          "documents": 1, "lines": 1, "words": 4}
    assert em.line_hash("abc") == em.line_hash("abc") != em.line_hash("abd")
    assert 0 <= em.line_hash("abc") < 2**64


def _b64(n: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    s = ""
    while True:
        s = alphabet[n % 64] + s
        n //= 64
        if n == 0:
            return s


def test_read_dictd_and_gcide_entry(tmp_path):
    entries = [
        "00-database-info\n This file was converted.\n",
        'Affect \\Af*fect"\\, v. t. [L. affectus, p. p. of\n   afficere. See {Fact}.]\n'
        "   1. To act upon; to produce an effect upon. --Milton.\n   [1913 Webster]\n\n"
        "         The climate affected their health and spirits.\n                    --Macaulay.\n"
        "   [1913 Webster]\n",
        'Choree \\Cho"ree\\, n. (Anc. Pros.)\n   A trochee, a foot of two syllables. [Obs.]\n',
    ]
    blob = "".join(entries).encode()
    index, off = [], 0
    for name, e in zip(["00-database-info", "affect", "choree"], entries):
        index.append(f"{name}\t{_b64(off)}\t{_b64(len(e.encode()))}")
        off += len(e.encode())
    index.append(f"Affect\t{_b64(len(entries[0]))}\t{_b64(len(entries[1]))}")  # a second headword
    (tmp_path / "x.index").write_text("\n".join(sorted(index)) + "\n")
    (tmp_path / "x.dict.dz").write_bytes(gzip.compress(blob))
    got = list(em.read_dictd(tmp_path / "x.index", tmp_path / "x.dict.dz"))
    assert got == entries[1:]
    assert em.gcide_entry(got[0]) == ["To act upon; to produce an effect upon.", "The climate affected their health and spirits."]
    assert em.gcide_entry(got[1]) == ["A trochee, a foot of two syllables."]


def test_wordnet_fortunes_jargon_foldoc_readers():
    line = ("00001740 29 v 04 breathe 0 take_a_breath 0 001 @ 00004227 v 0000 | draw air into, and expel out "
            'of, the lungs; "I can breathe better now"; "Breathe deeply"  \n')
    assert em.wordnet_synset(line) == ["draw air into, and expel out of, the lungs", "I can breathe better now.",
                                       "Breathe deeply."]
    assert em.wordnet_synset("  1 This software and database is provided\n") == []
    cookies = "A clash of doctrine is not a disaster.\n\t\t-- Whitehead\n%\nSecond one\nspans lines.\n%\n"
    assert em.fortune_file(cookies) == [["A clash of doctrine is not a disaster."], ["Second one spans lines."]]
    jargon = ("Front matter.\n\n   :cruft: /kruhft/, n.\n\n   1. An unpleasant substance. See {crufty}.\n\n"
              "   :foo: n.\n\n   A metasyntactic variable.\n")
    assert em.jargon_text(jargon) == [["An unpleasant substance. See crufty."], ["A metasyntactic variable."]]
    foldoc = "Aiken code\n\n   <code> A {BCD} code.\n\n   (2007-07-16)\n"
    assert em.foldoc_entry(foldoc) == ["A BCD code."]


def _write_ztext(d, verses: list[str], width: int):
    """A one-testament SWORD module whose verses are split over two zlib blocks."""
    blocks = [verses[:2], verses[2:]]
    bzs, bzv, bzz = [], [], b""
    for b, vs in enumerate(blocks):
        raw = "".join(vs).encode()
        comp = zlib.compress(raw)
        bzs.append((len(bzz), len(comp), len(raw)))
        bzz += comp
        off = 0
        for v in vs:
            bzv.append((b, off, len(v.encode())))
            off += len(v.encode())
    bzv.insert(0, (0, 0, 0))  # an empty entry (book introduction)
    np.array(bzs, dtype=text_formats._ZBLOCK).tofile(d / "ot.bzs")
    np.array(bzv, dtype=text_formats._ZVERSE[width]).tofile(d / "ot.bzv")
    (d / "ot.bzz").write_bytes(bzz)


@pytest.mark.parametrize("width", [10, 12])
def test_read_sword_chapters_markup_and_repeats(tmp_path, width):
    verses = [
        '<chapter osisID="Gen.1" sID="Gen.1"/><title>Creation</title><w lemma="H1">In</w> the beginning. ',
        "<w>Yahweh</w>\u2019s word<note>a footnote</note>.<l eID='x'/><l sID='y'/>And light. ",
        '<chapter osisID="Gen.2" sID="Gen.2"/>Then rest &amp; peace. ',
        "Then rest &amp; peace. ",  # a note repeated under the next verse
    ]
    _write_ztext(tmp_path, verses, width)
    assert list(em.read_sword(tmp_path, by_chapter=True)) == [
        ["In the beginning.", "Yahweh\u2019s word. And light."],
        ["Then rest & peace."],
    ]
    assert len(list(em.read_sword(tmp_path, by_chapter=False))) == 3


def test_registered():
    assert registry.get("source", "english-mix") is em.EnglishMix


@pytest.mark.slow
def test_build_real_corpus():
    """The real build (downloads ~80 MB of Debian packages, ~3 minutes)."""
    from ptmkit.data.sources.base import fetch

    out = fetch("english-mix")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["total"]["words"] >= 10_000_000
    assert set(stats["sources"]) == set(em.SOURCES)
    with open(out / "english-mix.txt", encoding="utf-8") as f:
        head = [next(f) for _ in range(1000)]
    assert all(ln == ln.lower() for ln in head)
    assert os.path.getsize(out / "english-mix.txt") > 50_000_000
