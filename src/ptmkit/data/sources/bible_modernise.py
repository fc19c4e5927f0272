"""Modernising English: King James Version verses (1611, revised 1769) rewritten as the World
English Bible (2000s) has them, a text-to-text task for encoder–decoders.

The verses are aligned as in ``bible-paraphrase`` (the Debian ``sword-text-kjv`` and
``sword-text-web`` SWORD modules, by chapter milestone and verse number: :func:`verses`).  Each
verse present in both translations with ``MIN_WORDS`` to ``MAX_WORDS`` words in each gives one
pair, source = KJV, target = WEB ("And God said, Let there be light" -> "God said, “Let there be
light,”").  The length cap keeps every target within a small decoder's positions; a few chapters
whose versifications differ may pair neighbouring verses.

Split by *book*, so no verse of a test book is seen in training (a book's names, phrasing and
topics stay out of training): of the books in canonical order, ``k % 10 == 8`` are dev
(1 Samuel, Psalms, Joel, Malachi, Ephesians, James), ``k % 10 == 9`` test (2 Samuel, Proverbs,
Amos, Matthew, Philippians, 1 Peter), the other 54 train: 21,448 / 3,467 / 2,836 pairs.

Outputs (``$PTMKIT_HOME/data/bible-modernise/``): ``train/dev/test.jsonl`` with ``source``,
``target`` and ``verse`` (``Gen.1.3``); ``stats.json``.  Built-in task: ``bible-modernise``
(seq2seq); report its scores beside the copy baseline (output = source), which the task type
computes with every score.
"""

from __future__ import annotations

import json
from pathlib import Path

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.bible_paraphrase import PACKAGES, read_bibles
from ptmkit.registry import register

MIN_WORDS = 3
MAX_WORDS = 40


def make_pairs(kjv: dict, web: dict) -> list[dict]:
    """``{"source", "target", "verse"}`` for the verses both translations have, in KJV order."""
    rows = []
    for key, (_chapter, text) in kjv.items():
        if key not in web:
            continue
        target = web[key][1]
        n_src, n_tgt = len(text.split()), len(target.split())
        if MIN_WORDS <= min(n_src, n_tgt) and max(n_src, n_tgt) <= MAX_WORDS:
            rows.append({"source": text, "target": target, "verse": f"{key[0]}.{key[1]}"})
    return rows


def split_by_book(rows: list[dict]) -> dict[str, list[dict]]:
    """Books in canonical order (as the verses come): ``k % 10 == 8`` dev, ``== 9`` test."""
    books = list(dict.fromkeys(r["verse"].split(".", 1)[0] for r in rows))
    number = {b: k for k, b in enumerate(books)}
    parts: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for r in rows:
        k = number[r["verse"].split(".", 1)[0]] % 10
        parts["dev" if k == 8 else "test" if k == 9 else "train"].append(r)
    return parts


@register("source", "bible-modernise")
class BibleModernise(Source):
    name = "bible-modernise"
    description = "KJV -> WEB verse pairs (modernising English), split by book"
    packages = tuple(Package("debian", p) for p in PACKAGES)
    license = "public domain (King James Version; World English Bible)"
    tasks = {"bible-modernise": {"type": "seq2seq", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                                 "source": "source", "target": "target"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        texts = read_bibles(files, work)
        parts = split_by_book(make_pairs(*texts))
        stats: dict = {"kjv_verses": len(texts[0]), "web_verses": len(texts[1]), "min_words": MIN_WORDS,
                       "max_words": MAX_WORDS, "parts": {}}
        for name, part in parts.items():
            with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
            books = list(dict.fromkeys(r["verse"].split(".", 1)[0] for r in part))
            stats["parts"][name] = {"pairs": len(part), "books": len(books), "first_books": books[:8]}
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
