"""bible-multilingual: verse alignment rules and the written files, on small made-up Bibles."""

from __future__ import annotations

import json
from pathlib import Path

from ptmkit import registry
from ptmkit.data.sources.bible_align import align, align_language, drop_caps, json_bible
from ptmkit.data.sources.bible_books import BOOKS, GENRES, SPLIT
from ptmkit.data.sources.bible_multilingual import LANGS, BibleMultilingual, write_dataset


def _verse(lang: str, ref: str) -> str:
    return f"{lang} {ref} and some words of the verse"  # the reference is in the text: pairs can be checked


def _bible(lang: str, chapters: dict[str, int]) -> dict[str, list[str]]:
    return {ch: [_verse(lang, f"{ch}.{v}") for v in range(1, n + 1)] for ch, n in chapters.items()}


def _paired_with_own_reference(kept: dict[str, str]) -> bool:
    return all(text.split()[1] == ref for ref, text in kept.items())


def test_empty_and_merged_verses_are_dropped():
    en = _bible("en", {"Gen.1": 6})
    es = _bible("es", {"Gen.1": 6})
    es["Gen.1"][2] = ""  # verse 3 empty: its text went into verse 2
    es["Gen.1"][1] = _verse("es", "Gen.1.2") + " " + _verse("es", "Gen.1.3") * 3
    es["Gen.1"][3] = "4-5 " + _verse("es", "Gen.1.4")  # a verse-range marker: verses 4 and 5 in one
    es["Gen.1"][4] = ""
    kept, dropped, chapters = align_language(es, en)
    assert sorted(kept) == ["Gen.1.1", "Gen.1.6"]
    assert dropped == {"empty": 2, "merged": 2} and not chapters
    assert _paired_with_own_reference(kept)


def test_a_chapter_counted_differently_is_left_out_with_its_neighbours():
    en = _bible("en", {f"Gen.{c}": 5 for c in range(1, 6)})
    es = _bible("es", {f"Gen.{c}": 5 for c in range(1, 6)})
    es["Gen.2"] = es["Gen.2"][:4]  # Gen.2.5 moved into Gen.3, whose numbering is then shifted
    es["Gen.3"] = [_verse("es", "Gen.2.5")] + es["Gen.3"][:3] + [es["Gen.3"][3] + " " + es["Gen.3"][4]]
    kept, dropped, chapters = align_language(es, en)
    assert sorted({r.rsplit(".", 1)[0] for r in kept}) == ["Gen.4", "Gen.5"]
    assert chapters == {"chapter_count": 1, "beside_count": 2}
    assert dropped["chapter_count"] == 4 and dropped["beside_count"] == 10 and dropped["empty"] == 1
    assert _paired_with_own_reference(kept)


def test_a_merge_without_an_empty_neighbour_drops_the_chapter():
    en = _bible("en", {"Gen.1": 5, "Gen.2": 5, "Gen.3": 5})
    es = _bible("es", {"Gen.1": 5, "Gen.2": 5, "Gen.3": 5})
    es["Gen.1"][0] = "A title written into verse one, long enough. " * 3 + es["Gen.1"][0]  # first verse: only it goes
    es["Gen.2"][2:] = [es["Gen.2"][1], es["Gen.2"][2], es["Gen.2"][3] + " " + es["Gen.2"][4] * 3]  # split + merge
    es["Gen.2"][1] = "es Gen.2.2 half"
    kept, dropped, chapters = align_language(es, en)
    assert sorted(kept) == [f"Gen.{c}.{v}" for c, vs in ((1, range(2, 6)), (3, range(1, 6))) for v in vs]
    assert chapters == {"uncompensated_merge": 1} and dropped["merged"] == 1


def test_align_keeps_every_reference_verse_and_counts_by_language():
    en = _bible("en", {"Gen.1": 3})
    en["Gen.1"][1] = ""
    aligned, stats = align({"en": en, "es": _bible("es", {"Gen.1": 3})})
    assert sorted(aligned["en"]) == ["Gen.1.1", "Gen.1.3"] and sorted(aligned["es"]) == ["Gen.1.1", "Gen.1.3"]
    assert stats["en"]["dropped_verses"] == {"empty": 1} and stats["es"]["dropped_verses"] == {"reference_empty": 1}


def test_json_bible_maps_book_numbers_to_osis_ids(tmp_path):
    (tmp_path / "content").mkdir()
    books = [{"name": f"Book {i}", "chapters": 1} for i in range(1, len(BOOKS) + 1)]
    books[39]["chapters"] = 2
    (tmp_path / "content" / "books.json").write_text(json.dumps(books), encoding="utf-8")
    for i, book in enumerate(books, 1):
        for c in range(1, book["chapters"] + 1):
            (tmp_path / "resources" / str(i)).mkdir(parents=True, exist_ok=True)
            verses = [f"Mau a buku {i};mutu {c}.Vesi", "  ndime   yachiwiri "]
            (tmp_path / "resources" / str(i) / f"{c}.json").write_text(json.dumps(verses), encoding="utf-8")
    bible = json_bible(tmp_path)
    assert len(bible) == len(BOOKS) + 1 and bible["Matt.2"] == ["Mau a buku 40; mutu 2. Vesi", "ndime yachiwiri"]
    assert bible["Gen.1"][0].startswith("Mau a buku 1;") and bible["Rev.1"][0].startswith("Mau a buku 66;")


def test_drop_caps_are_written_in_ordinary_case():
    bible = {"Gen.1": ["EN el principio", "DOS"], "Lev.1": ["Y LLAMÓ Jehová"], "Job.39": ["¿CAZARÁS tú"],
             "Ps.23": ["Jehová es mi pastor"]}
    fixed, changed = drop_caps(bible)
    assert changed == 3 and fixed["Gen.1"] == ["En el principio", "DOS"]  # only a chapter's first word
    assert fixed["Lev.1"] == ["Y llamó Jehová"] and fixed["Job.39"] == ["¿Cazarás tú"] and fixed["Ps.23"] == bible["Ps.23"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_written_files_split_by_book_and_balance_genres(tmp_path):
    chapters = {f"{book}.{c}": 3 + (i + c) % 4 for i, book in enumerate(BOOKS) for c in (1, 2)}
    bibles = {lang: _bible(lang, chapters) for lang in LANGS}
    bibles["ny"]["Gen.1"][1] = ""  # Gen.1.2 has no Chichewa: it may not be drawn for the genre files
    stats = write_dataset(bibles, tmp_path)
    rows = _rows(tmp_path / "verses.jsonl")
    assert len(rows) == sum(chapters.values()) and "ny" not in rows[1] and rows[1]["ref"] == "Gen.1.2"
    split_of: dict[str, str] = {}
    for path in sorted(tmp_path.rglob("*.jsonl")):
        if path.name == "verses.jsonl":
            continue
        split = path.name.split(".")[-2]
        for row in _rows(path):
            assert SPLIT[row["ref"].split(".", 1)[0]] == split  # no verse of another split's book
            assert split_of.setdefault(row["ref"], split) == split  # no reference in two splits
            texts = [v for k, v in row.items() if k not in ("ref", "label")]
            assert all(t.split()[1] == row["ref"] for t in texts)  # every text is its reference's verse
    for split in ("train", "dev", "test"):
        lines = (tmp_path / "text" / f"en.{split}.txt").read_text(encoding="utf-8").splitlines()
        assert lines == [r["en"] for r in rows if r["split"] == split]
        genre = {lang: _rows(tmp_path / "genre" / f"{lang}.{split}.jsonl") for lang in LANGS}
        counts = {g: sum(r["label"] == g for r in genre["en"]) for g in GENRES}
        assert len(set(counts.values())) == 1 and counts["law"] == stats["genre"][split]["per_genre"] > 0
        assert [r["ref"] for r in genre["es"]] == [r["ref"] for r in genre["ny"]] == [r["ref"] for r in genre["en"]]
        assert "Gen.1.2" not in {r["ref"] for r in genre["en"]}
    tasks = BibleMultilingual.tasks
    assert tasks["bible-genre-en-ny"]["files"] == ("genre/en.train.jsonl", "genre/en.dev.jsonl", "genre/ny.test.jsonl")
    for spec in tasks.values():
        assert all((tmp_path / f).is_file() for f in spec["files"])
    data = registry.get("task_type", "classification").read_builtin("bible-genre-en-es", tasks["bible-genre-en-es"], tmp_path)
    assert sorted(data.label_names) == sorted(GENRES) and data.test.texts[0].startswith("es ")
    pairs = _rows(tmp_path / "translate" / "en-es.dev.jsonl")
    assert pairs and set(pairs[0]) == {"source", "target", "ref"} and pairs[0]["target"].startswith("es ")
