"""Greek–English word alignments of the New Testament: the SBL Greek New Testament (SBLGNT) aligned
word by word by hand to the Berean Standard Bible (BSB), an evaluation set for word alignment.

Source: the PyPI wheel ``bible-alignments==0.4.2`` (Clear Bible / Biblica; alignments CC-BY-4.0,
SBLGNT CC-BY-4.0, BSB public domain).  Three of its files are read:

- ``data/sources/SBLGNT.tsv``: one Greek token a row; ``id`` is ``n`` + BBCCCVVVWWW (book number
  40-66, chapter, verse, word), ``text`` the word as printed (with accents, no punctuation);
- ``data/eng/targets/BSB/nt_BSB.tsv``: one English token a row, ``id`` BBCCCVVVWWW in the BSB's
  own versification; ``exclude`` (``y``) marks the punctuation tokens, which are not eligible for
  alignment and are left out of the English words here;
- ``data/eng/alignments/BSB/SBLGNT-BSB-manual.json``: alignment records ``{"source": [Greek ids],
  "target": [English ids], "meta": {"process", ...}}``; a record links each of its Greek tokens
  with each of its English tokens.  Records carry a ``process`` ("manual" for every record of
  0.4.2); only manual ones are kept (the others would be counted in ``stats.json``), and their
  links are the *sure* links of the evaluation (the set has no *possible* links).

One row per verse (``Matt.1.1``; OSIS ids of :data:`bible_books.BOOKS`, the book number ``b``
being ``BOOKS[b - 1]``): the Greek words, the English words and the links ``[i, j]`` (Greek word
``i``, English word ``j``, 0-based within the verse).  A verse is left out when no link falls in it,
or when a record links one of its words to a word of another verse (the versifications differ
in a few places: 80 records); ``stats.json`` counts both.  Split by book with
:func:`bible_books.split_of`, as every Bible recipe (test: Luke, 2 Corinthians, Colossians,
2 Timothy, James, 2 John).

Outputs (``$PTMKIT_HOME/data/bible-greek-alignments/``): ``{train,dev,test}.jsonl`` rows ``{"ref",
"grc", "en", "links"}``; ``text/grc.{split}.txt`` and ``text/en.{split}.txt``, one verse a line,
the words joined by spaces, line ``k`` of one the translation of line ``k`` of the other, for every
verse both texts have (links or not), and the same verses as ``parallel/en-grc.{split}.jsonl``
rows ``{"ref", "en", "grc"}`` (the lines as text: ``ptm prepare --field en`` reads them);
``stats.json`` (verses, words and links per split, what was left out and why).  No built-in task:
``ptmkit.analysis.word_alignment`` scores aligners on it.
"""

from __future__ import annotations

import csv
import json
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.bible_books import BOOKS, split_of
from ptmkit.errors import PtmError
from ptmkit.registry import register

GREEK = "data/sources/SBLGNT.tsv"
ENGLISH = "data/eng/targets/BSB/nt_BSB.tsv"
ALIGNMENTS = "data/eng/alignments/BSB/SBLGNT-BSB-manual.json"
KEPT_PROCESS = "manual"
SPLITS = ("train", "dev", "test")


def ref_of(token_id: str) -> str:
    """``"40001001011"`` or ``"n40001001011"`` (BBCCCVVVWWW) -> ``"Matt.1.1"``."""
    digits = token_id.lstrip("n")
    if len(digits) < 8 or not digits[:8].isdigit() or not 1 <= int(digits[:2]) <= len(BOOKS):
        raise PtmError(f"token id {token_id!r} is not BBCCCVVVWWW (book, chapter, verse, word); "
                       "the alignment package's format changed: pin the version this recipe reads")
    return f"{BOOKS[int(digits[:2]) - 1]}.{int(digits[2:5])}.{int(digits[5:8])}"


def read_tokens(text: str, keep_excluded: bool = False) -> dict[str, dict[str, Any]]:
    """Verses of a token TSV (columns ``id``, ``text``, optionally ``exclude``):
    ``{ref: {"ids": [token id, ...], "words": [text, ...]}}`` in file order; the tokens marked
    ``exclude`` are left out unless ``keep_excluded``."""
    rows = csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    if rows.fieldnames is None or not {"id", "text"} <= set(rows.fieldnames):
        raise PtmError(f"a token table has the columns {rows.fieldnames}, not id and text; pin the version this recipe reads")
    verses: dict[str, dict[str, Any]] = {}
    for row in rows:
        if not keep_excluded and (row.get("exclude") or "").strip().lower() in ("y", "true"):
            continue
        verse = verses.setdefault(ref_of(row["id"]), {"ids": [], "words": []})
        verse["ids"].append(row["id"])
        verse["words"].append(row["text"])
    return verses


def verse_links(records: list[dict], greek: dict[str, dict], english: dict[str, dict]) -> tuple[dict[str, set], dict[str, int], set[str]]:
    """The sure links of each verse from the alignment records.

    Returns ``(links, skipped, crossing)``: ``links[ref]`` the set of ``(i, j)`` (Greek word ``i``,
    English word ``j`` of verse ``ref``); ``skipped`` the records left out, by reason
    (``not_manual``, ``unknown_token``: an id that is not a word of the tables, punctuation
    included, ``crossing_verses``: words of two verses); ``crossing`` the verses those records touch."""
    g_pos = {tid: (ref, i) for ref, v in greek.items() for i, tid in enumerate(v["ids"])}
    e_pos = {tid: (ref, j) for ref, v in english.items() for j, tid in enumerate(v["ids"])}
    links: dict[str, set] = defaultdict(set)
    skipped = {"not_manual": 0, "unknown_token": 0, "crossing_verses": 0}
    crossing: set[str] = set()
    for rec in records:
        if (rec.get("meta") or {}).get("process") != KEPT_PROCESS:
            skipped["not_manual"] += 1
            continue
        src = [g_pos.get(t) for t in rec.get("source", [])]
        tgt = [e_pos.get(t) for t in rec.get("target", [])]
        if not src or not tgt or None in src or None in tgt:
            skipped["unknown_token"] += 1
            continue
        refs = {ref for ref, _ in src} | {ref for ref, _ in tgt}
        if len(refs) > 1:
            skipped["crossing_verses"] += 1
            crossing |= refs
            continue
        ref = refs.pop()
        links[ref].update((i, j) for _, i in src for _, j in tgt)
    return dict(links), skipped, crossing


def make_rows(greek: dict[str, dict], english: dict[str, dict], records: list[dict]) -> tuple[list[dict], list[dict], dict]:
    """``(rows, parallel, stats)``: the aligned verses ``{"ref", "grc", "en", "links"}`` (word lists,
    links sorted), every verse both texts have ``{"ref", "en", "grc"}`` (the words joined by spaces),
    both in canonical order, and what was left out."""
    links, skipped, crossing = verse_links(records, greek, english)
    both = [ref for ref in greek if ref in english]
    order = {book: k for k, book in enumerate(BOOKS)}
    both.sort(key=lambda r: (order[r.split(".")[0]], *map(int, r.split(".")[1:])))
    rows, parallel = [], []
    left_out = {"no_links": 0, "links_outside_verse": 0}
    for ref in both:
        grc, en = greek[ref]["words"], english[ref]["words"]
        parallel.append({"ref": ref, "en": " ".join(en), "grc": " ".join(grc)})
        if ref in crossing:
            left_out["links_outside_verse"] += 1
        elif not links.get(ref):
            left_out["no_links"] += 1
        else:
            rows.append({"ref": ref, "grc": grc, "en": en, "links": [list(p) for p in sorted(links[ref])]})
    stats = {"records": len(records), "records_skipped": skipped, "link_process_kept": KEPT_PROCESS,
             "verses_greek": len(greek), "verses_english": len(english), "verses_in_both": len(both),
             "verses_left_out": left_out,
             "verses_only_greek": sorted(set(greek) - set(english)),
             "verses_only_english": sorted(set(english) - set(greek))}
    return rows, parallel, stats


def read_wheel(path: Path) -> tuple[dict, dict, list[dict]]:
    """The Greek and English verses and the alignment records of the ``bible-alignments`` wheel."""
    try:
        with zipfile.ZipFile(path) as whl:
            greek = read_tokens(whl.read(GREEK).decode("utf-8"))
            english = read_tokens(whl.read(ENGLISH).decode("utf-8"))
            data = json.loads(whl.read(ALIGNMENTS).decode("utf-8"))
    except KeyError as exc:
        raise PtmError(f"{path.name} lacks {exc.args[0]}; pin the bible-alignments version this recipe reads") from exc
    except (zipfile.BadZipFile, ValueError) as exc:
        raise PtmError(f"{path.name} is not a readable bible-alignments wheel ({exc}); fetch it again") from exc
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise PtmError(f"{ALIGNMENTS} in {path.name} holds no list of records")
    return greek, english, records


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_outputs(out: Path, rows: list[dict], parallel: list[dict], stats: dict) -> None:
    """The files of the module docstring, under ``out``."""
    (out / "text").mkdir(exist_ok=True)
    (out / "parallel").mkdir(exist_ok=True)
    stats["splits"] = {}
    for split in SPLITS:
        part = [r for r in rows if split_of(r["ref"]) == split]
        text = [p for p in parallel if split_of(p["ref"]) == split]
        _write_jsonl(out / f"{split}.jsonl", part)
        _write_jsonl(out / "parallel" / f"en-grc.{split}.jsonl", text)
        for lang in ("grc", "en"):
            (out / "text" / f"{lang}.{split}.txt").write_text("".join(p[lang] + "\n" for p in text), encoding="utf-8")
        stats["splits"][split] = {
            "verses": len(part), "grc_words": sum(len(r["grc"]) for r in part), "en_words": sum(len(r["en"]) for r in part),
            "links": sum(len(r["links"]) for r in part), "text_verses": len(text),
            "books": list(dict.fromkeys(r["ref"].split(".")[0] for r in part)),
        }
    (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@register("source", "bible-greek-alignments")
class BibleGreekAlignments(Source):
    name = "bible-greek-alignments"
    description = "SBLGNT Greek New Testament <-> Berean Standard Bible: manual word alignments, split by book"
    packages = (Package("pypi", "bible-alignments==0.4.2",
                        sha256="84f6b15e706657777824aac811567cb5cb2b38ad2b94497209f5f3c3f67b0984"),)
    license = "CC-BY-4.0 (alignments: Biblica; SBLGNT: Society of Biblical Literature and Logos); BSB public domain"
    tasks: dict[str, dict[str, Any]] = {}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        rows, parallel, stats = make_rows(*read_wheel(files[0]))
        write_outputs(out, rows, parallel, stats)
