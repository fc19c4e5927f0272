"""Verse alignment of Bibles in several languages against the King James Version's versification.

Every Bible comes in as ``{chapter: [verse texts]}`` (chapter ``"Gen.1"``, verse ``v`` at index
``v - 1``, ``""`` for an empty verse), read by :func:`sword_bible` (a SWORD module, verse
numbers counted from the chapter's milestone) or :func:`json_bible` (one JSON list of verse
texts per chapter, books in canonical order).  :func:`align` pairs each language's verses with
the reference language's (English, KJV) under the same ``Book.chapter.verse`` reference and
never with another: a verse whose place may be wrong is dropped, not guessed.

Rules, in order, per language other than the reference (which only loses its empty verses):

- ``chapter_count``: the chapter's verse count (its last non-empty verse) differs from the
  reference's: the translation numbers that chapter differently, so none of it is paired;
- ``beside_count``: a chapter next to such a chapter in the same book: the verses that moved
  across the chapter boundary shift its numbering too (Numbers 12:16 of the KJV is 13:1 in the
  Reina-Valera, so all of its Numbers 13 sits one verse late);
- ``empty``: an empty verse (its text was merged into a neighbour);
- ``merged``: a verse more than ``MERGE_RATIO`` times as long, relative to the reference verse,
  as the language's median verse: it holds two verses' text.  Beside an empty verse, or as a
  chapter's first verse (a psalm's title written into verse 1), only that verse is dropped;
- ``uncompensated_merge``: any other merged verse means the chapter's numbering slipped by one
  somewhere before or after it (a verse split in two elsewhere), so the whole chapter is dropped.

What the recipe's texts hold (``bible-multilingual``, measured on the packaged texts): no
verse-range marker and no digit in any verse of the Reina-Valera 1909 or the Chichewa text, so
merges show only as an empty neighbour or an overlong verse.  The Reina-Valera module (KJV
versification declared) numbers 12 chapters as the Hebrew Bible does (Numbers 12 and 29,
1 Samuel 23, 2 Samuel 20, 2 Chronicles 33, Job 35 and 38-40, Hosea 11, Jonah 1, Acts 19,
2 Corinthians 13): its 18 empty verses all sit at their ends, the verses they lost shift the
next or previous chapter (Numbers 13, Job 39, Jonah 2, ...), and the overflow is merged into a
last verse (Job 39:30 holds nine verses).  Other merges: inside 1 Chronicles 21, Judges 14 and
1 Kings 22 (a verse split earlier in the chapter), the closing notes of seven letters appended
to their last verses (``uncompensated_merge`` too: length cannot tell a note from a merge) and
ten psalm titles written into verse 1 (the KJV module has them as headings).  Dropped: 12
chapters ``chapter_count``, 21 ``beside_count``, 10 ``uncompensated_merge``, 10 ``merged``
verses; 29,948 of the KJV's 31,102 verses stay paired.  The Chichewa text has no empty verse,
two chapters counted differently (3 John 1 and Revelation 12 have one verse more: 4 chapters
left out with their neighbours) and one merge (Matthew 22:45 holds half of 22:46): 30,988
verses stay paired.  ``stats.json`` of the recipe counts every rule's verses and chapters.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np

from ptmkit.data.sources.bible_books import BOOKS
from ptmkit.data.sources.bible_paraphrase import verses
from ptmkit.errors import PtmError

MERGE_RATIO = 2.5  # a verse this many times longer (relative to the reference) than usual holds two

Bible = dict[str, list[str]]  # {"Gen.1": [text of verse 1, text of verse 2, ...]}


def sword_bible(module_dir: Path) -> Bible:
    """A SWORD Bible module as ``{chapter: [verse texts]}``; verses without text are ``""``."""
    found = verses(module_dir)
    last: dict[str, int] = {}
    for chapter, v in found:
        last[chapter] = max(last.get(chapter, 0), v)
    return {chapter: [found[(chapter, v)][1] if (chapter, v) in found else "" for v in range(1, n + 1)]
            for chapter, n in last.items()}


_GLUED = re.compile(r"([.,;:!?])(?=[^\W\d_])")


def json_bible(root: Path) -> Bible:
    """A Bible stored as ``content/books.json`` (66 ``{"name", "chapters"}`` in canonical order)
    and ``resources/{book number from 1}/{chapter}.json`` (a list of verse texts).  Whitespace is
    collapsed and a space put after punctuation glued to the next word (the Chichewa text writes
    ``Mulungu;mverani`` in one verse of six)."""
    books = json.loads((root / "content" / "books.json").read_text(encoding="utf-8"))
    if len(books) != len(BOOKS):
        raise PtmError(f"{root / 'content' / 'books.json'} lists {len(books)} books, expected {len(BOOKS)}; "
                       f"the package layout changed")
    out: Bible = {}
    for number, (book, info) in enumerate(zip(BOOKS, books), 1):
        for c in range(1, int(info["chapters"]) + 1):
            path = root / "resources" / str(number) / f"{c}.json"
            if not path.exists():
                raise PtmError(f"{path} is missing ({info['name']} has {info['chapters']} chapters); the package is incomplete")
            texts = json.loads(path.read_text(encoding="utf-8"))
            out[f"{book}.{c}"] = [" ".join(_GLUED.sub(r"\1 ", str(t)).split()) for t in texts]
    return out


_DROP_CAP = re.compile(r"^(\W*)(\w\s+)?(\w{2,})\b")


def drop_caps(bible: Bible) -> tuple[Bible, int]:
    """``(bible, chapters changed)``: a chapter's first word written in capitals (a printed drop
    cap: the Reina-Valera's ``EN el principio``, ``Y LLAMÓ Jehová``) in ordinary case."""
    out: Bible = {}
    changed = 0
    for chapter, texts in bible.items():
        found = _DROP_CAP.match(texts[0]) if texts else None
        if found and found.group(3).isupper():
            word = found.group(3).lower() if found.group(2) else found.group(3)[0] + found.group(3)[1:].lower()
            texts = [texts[0][: found.start(3)] + word + texts[0][found.end(3):], *texts[1:]]
            changed += 1
        out[chapter] = texts
    return out, changed


def _count(texts: list[str]) -> int:
    """A chapter's verse count: its last non-empty verse."""
    return max((v for v, t in enumerate(texts, 1) if t), default=0)


def _neighbours(chapter: str, bible: Bible) -> list[str]:
    book, c = chapter.rsplit(".", 1)
    return [f"{book}.{int(c) + d}" for d in (-1, 1) if f"{book}.{int(c) + d}" in bible]


_RANGE = re.compile(r"^\s*\(?\d+\s*[-\u2013]\s*\d+\)?\s")


def median_ratio(texts: Bible, ref: Bible) -> float:
    """The median length ratio (characters) of a language's verses to the reference's."""
    ratios = [len(t) / len(r) for ch, ts in texts.items() if ch in ref
              for t, r in zip(ts, ref[ch]) if t and r]
    return float(np.median(ratios)) if ratios else 1.0


def align_language(texts: Bible, ref: Bible) -> tuple[dict[str, str], Counter, Counter]:
    """``(verses, dropped verses by rule, dropped chapters by rule)`` of one language against the
    reference Bible ``ref``: ``verses`` is ``{"Gen.1.1": text}`` of the verses that pair with the
    reference verse of the same reference (see the module docstring for the rules)."""
    dropped, chapters = Counter(), Counter()
    out_chapters: dict[str, str] = {}  # chapter -> rule that drops it
    for chapter, ts in texts.items():
        if chapter not in ref:
            out_chapters[chapter] = "not_in_reference"
        elif _count(ts) != _count(ref[chapter]):
            out_chapters[chapter] = "chapter_count"
    for chapter in [c for c, why in out_chapters.items() if why == "chapter_count"]:
        for other in _neighbours(chapter, texts):
            out_chapters.setdefault(other, "beside_count")
    usual = median_ratio(texts, ref)
    kept: dict[str, str] = {}
    for chapter, ts in texts.items():
        if chapter not in out_chapters:
            verses_, rules = _chapter_verses(ts, ref[chapter], usual)
            if "uncompensated_merge" in rules:
                out_chapters[chapter] = "uncompensated_merge"
            else:
                dropped.update(rules)
                kept.update({f"{chapter}.{v}": t for v, t in verses_.items()})
        if chapter in out_chapters:
            chapters[out_chapters[chapter]] += 1
            dropped[out_chapters[chapter]] += sum(1 for t in ts if t)
            dropped["empty"] += sum(1 for t in ts if not t) + max(0, len(ref.get(chapter, ())) - len(ts))
    return kept, dropped, chapters


def _chapter_verses(ts: list[str], ref: list[str], usual: float) -> tuple[dict[int, str], list[str]]:
    """``({verse: text}, [rule of each dropped verse])`` of one chapter whose count matches."""
    n = len(ref)
    ts = (ts + [""] * n)[:n]
    rules: list[str] = []
    out: dict[int, str] = {}
    for v, (t, r) in enumerate(zip(ts, ref), 1):
        if not t:
            rules.append("empty")
            continue
        if not r:
            rules.append("reference_empty")
            continue
        if _RANGE.match(t) or len(t) / len(r) > MERGE_RATIO * usual:
            beside_empty = (v > 1 and not ts[v - 2]) or (v < n and not ts[v])
            rules.append("merged" if beside_empty or v == 1 else "uncompensated_merge")
            continue
        out[v] = t
    return out, rules


def align(bibles: dict[str, Bible], reference: str = "en") -> tuple[dict[str, dict[str, str]], dict]:
    """``({language: {ref: text}}, stats)``: every language's verses that pair with the reference
    language's under the same reference.  The reference keeps all its non-empty verses; ``stats``
    has, per language, the verses kept and the verses and chapters dropped by rule."""
    ref = bibles[reference]
    out = {reference: {f"{ch}.{v}": t for ch, ts in ref.items() for v, t in enumerate(ts, 1) if t}}
    stats: dict = {reference: {"verses": len(out[reference]),
                               "dropped_verses": {"empty": sum(1 for ts in ref.values() for t in ts if not t)},
                               "dropped_chapters": {}}}
    for lang, texts in bibles.items():
        if lang == reference:
            continue
        kept, dropped, chapters = align_language(texts, ref)
        out[lang] = kept
        stats[lang] = {"verses": len(kept), "dropped_verses": dict(sorted(dropped.items())),
                       "dropped_chapters": dict(sorted(chapters.items()))}
    return out, stats
