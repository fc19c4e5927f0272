"""Paraphrase identification from two English Bible translations: the King James Version (1611,
revised 1769) and the World English Bible (2000s), verse-aligned.

Verses are aligned by chapter (the OSIS ``<chapter>`` milestones of the Debian ``sword-text-kjv``
and ``sword-text-web`` SWORD modules) and verse number within it (:func:`verses`); where the two versifications number a chapter's verses
differently (a handful of chapters, e.g. Revelation 12-13) a positive pair may hold neighbouring
verses.  A positive pair is a verse in
the two translations (same meaning, 400 years of English apart: "And God said, Let there be
light" / "God said, “Let there be light,”"); a negative pair is a KJV verse with the WEB text of
another verse of the same chapter, at most ``NEAR`` verses away (same topic and names, different
content: a hard negative).  Every verse of at least ``MIN_WORDS`` words in both versions gives
one positive and one negative pair, which translation comes first alternating, so the labels are
balanced and order carries no signal.  The pair order and the negative's distance come from
``np.random.default_rng(SEED)``.

Split by chapter, so a verse and its neighbours never straddle splits: of the chapters in
canonical order, ``k % 10 == 8`` is dev, ``k % 10 == 9`` test, the rest train.

Outputs (``$PTMKIT_HOME/data/bible-paraphrase/``): ``train/dev/test.jsonl`` with ``text``,
``text_pair``, ``label`` (1 = same verse), ``verse`` (the KJV verse, ``Gen.1.3``);
``stats.json``.  Built-in tasks: ``bible-paraphrase`` (sentence-pair classification) and
``bible-retrieval`` (sentence embeddings: the positive pairs of each split, each verse's text to
retrieve its other translation among the split's verses; :mod:`ptmkit.tasks.sentence_embedding`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source, _run
from ptmkit.data.sources.english_mix import osis_to_text, sword_entries
from ptmkit.errors import PtmError
from ptmkit.registry import register

SEED = 1611
NEAR = 3  # a negative's verse lies 1..NEAR verses away, in the same chapter
MIN_WORDS = 5
PACKAGES = ("sword-text-kjv", "sword-text-web")


_CHAPTER = re.compile(r'<chapter\b[^>]*\bsID="([^"]+)"')


def verses(module_dir: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """``{(chapter osisID, verse number): (chapter osisID, plain text)}`` of a Bible module.

    A chapter starts at the entry holding its ``<chapter sID="Gen.1">`` milestone (the chapter's
    heading entry, verse 0); verse ``v`` is the ``v``-th entry after it.  Keys are comparable
    across modules whatever their versification (the KJV module uses KJV's, the WEB module
    NRSVA's, whose index positions drift apart after the first chapter that differs).
    """
    out: dict[tuple[str, int], tuple[str, str]] = {}
    chapter, start = None, 0
    for _part, i, _starts, osis in sword_entries(module_dir):
        found = _CHAPTER.search(osis)
        if found:
            chapter, start = found.group(1), i
        if chapter is None or i == start:
            continue
        text = osis_to_text(osis)
        if text:
            out[(chapter, i - start)] = (chapter, text)
    return out


def make_pairs(kjv: dict, web: dict, seed: int = SEED) -> list[dict]:
    """Positive and hard-negative pairs over the verses both translations have (see module doc)."""
    keys = [k for k in kjv if k in web and min(len(kjv[k][1].split()), len(web[k][1].split())) >= MIN_WORDS]
    chapter_of = {k: kjv[k][0] for k in keys}
    by_chapter: dict[str, list] = {}
    for k in keys:
        by_chapter.setdefault(chapter_of[k], []).append(k)
    rng = np.random.default_rng(seed)
    rows = []
    for ks in by_chapter.values():
        for j, k in enumerate(ks):
            a, b = kjv[k][1], web[k][1]
            flip = bool(rng.integers(2))
            rows.append({"text": b if flip else a, "text_pair": a if flip else b, "label": 1, "verse": f"{k[0]}.{k[1]}"})
            near = [m for m in range(max(0, j - NEAR), min(len(ks), j + NEAR + 1)) if m != j]
            if not near:
                continue
            other = web[ks[int(rng.choice(near))]][1]
            flip = bool(rng.integers(2))
            rows.append({"text": other if flip else a, "text_pair": a if flip else other, "label": 0, "verse": f"{k[0]}.{k[1]}"})
    return rows


def read_bibles(files: list[Path], work: Path) -> list[dict[tuple[str, int], tuple[str, str]]]:
    """The :func:`verses` of each downloaded Debian package of ``PACKAGES`` (KJV, then WEB),
    unpacked under ``work``."""
    return [verses(sword_module(deb, package, work)) for deb, package in zip(files, PACKAGES)]


def sword_module(deb: Path, package: str, work: Path) -> Path:
    """The SWORD Bible module directory of a downloaded Debian package, unpacked under ``work``."""
    root = work / "root" / package
    root.mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(root)], f"Debian package {package} (unpacking)")
    mods = sorted(p for p in (root / "usr/share/sword/modules/texts/ztext").glob("*") if p.is_dir())
    if not mods:
        raise PtmError(f"Debian package {package} holds no SWORD Bible module")
    return mods[0]


@register("source", "bible-paraphrase")
class BibleParaphrase(Source):
    name = "bible-paraphrase"
    description = "paraphrase pairs from verse-aligned KJV and WEB Bibles with same-chapter hard negatives; split by chapter"
    packages = tuple(Package("debian", p) for p in PACKAGES)
    license = "public domain (King James Version; World English Bible)"
    tasks = {"bible-paraphrase": {"type": "classification", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                                  "text": "text", "text_pair": "text_pair", "label": "label"},
             "bible-retrieval": {"type": "sentence_embedding", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                                 "text": "text", "text_pair": "text_pair", "label": "label"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        texts = read_bibles(files, work)
        rows = make_pairs(*texts)
        chapters = list(dict.fromkeys(r["verse"].rsplit(".", 1)[0] for r in rows))  # canonical order
        number = {c: k for k, c in enumerate(chapters)}
        parts: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
        for r in rows:
            k = number[r["verse"].rsplit(".", 1)[0]] % 10
            parts["dev" if k == 8 else "test" if k == 9 else "train"].append(r)
        stats: dict = {"kjv_verses": len(texts[0]), "web_verses": len(texts[1]), "seed": SEED, "near": NEAR, "parts": {}}
        for name, part in parts.items():
            with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
            stats["parts"][name] = {"pairs": len(part), "positive": sum(r["label"] for r in part)}
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
