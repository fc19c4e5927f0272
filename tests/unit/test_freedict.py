"""freedict-en-es: dictd entries -> word pairs, on a tiny made-up dictionary pair."""

from __future__ import annotations

import json
from pathlib import Path

from ptmkit.data.sources.freedict import parse_entry, write_lexicons
from ptmkit.data.sources.text_formats import read_dictd

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64(n: int) -> str:
    out = ""
    while True:
        out = _B64[n % 64] + out
        n //= 64
        if not n:
            return out


def _dictd(tmp: Path, name: str, entries: list[str]) -> list[str]:
    """Write ``name.index`` + ``name.dict`` (dictd, uncompressed) and read them back."""
    data, index, off = b"", [f"00databaseinfo\t{_b64(0)}\t{_b64(0)}"], 0
    for entry in entries:
        raw = entry.encode("utf-8")
        index.append(f"{entry.split(' /')[0]}\t{_b64(off)}\t{_b64(len(raw))}")
        data, off = data + raw, off + len(raw)
    (tmp / f"{name}.dict").write_bytes(data)
    (tmp / f"{name}.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    return list(read_dictd(tmp / f"{name}.index", tmp / f"{name}.dict"))


def test_parse_entry_strips_pronunciation_notes_and_sense_numbers():
    entry = "abate /əbeit/\n1. calmarse, sosegarse\n2. amainar <v>; (fig.) menguar.\n"
    assert parse_entry(entry) == ("abate", "əbeit", ["calmarse", "sosegarse", "amainar", "menguar"])


def test_pairs_keep_single_attested_words(tmp_path):
    en_es = _dictd(tmp_path, "eng-spa", [
        "apple /æpl/\nmanzana\n",
        "apple /æpldʒuːs/\njugodemanzana\n",  # a phrase entry headed by its first word: dropped
        "apple /ˈapəl/\nmanzano\n",  # stress-marked transcription beside a plain one: a phrase entry
        "dog /dɔg/\n1. perro, can <m>\n2. perro de caza\n",  # "perro de caza": several words
        "Spain /spein/\nEspaña\n",  # capitalised headword
        "give up /giv ʌp/\nrendirse\n",  # headword of two words
        "bank /bæŋk/\nbanco, orilla, porejemplo, banco\n",  # "porejemplo": spaces lost, not a word
        "taxi /tæksi/\ntaxi, auto‐taxi\n",
    ])
    es_en = _dictd(tmp_path, "spa-eng", [
        "manzana /manθˈana/\napple\n",
        "perro /pˈero/\ndog, hound\n",
        "banco /bˈaŋko/\nbank, bench\n",
        "orilla /oɾˈiʎa/\nbank, shore\n",
        "can /kˈan/\ndog\n",
        "taxi /tˈaksi/\ncab\n",
        "por ejemplo /poɾ exˈemplo/\nfor example, takeintoaccount\n",
    ])
    stats = write_lexicons(en_es, es_en, tmp_path)
    rows = (tmp_path / "en-es.tsv").read_text(encoding="utf-8").splitlines()
    assert rows == ["apple\tmanzana", "bank\tbanco", "bank\torilla", "dog\tperro", "dog\tcan", "taxi\ttaxi"]
    assert stats["en-es"]["dropped"] == {"headword": 2, "phrase_entry": 2, "translation": 2, "unattested": 1}
    assert stats["en-es"]["identical_spelling"] == 1 and stats["en-es"]["source_words"] == 4
    back = (tmp_path / "es-en.tsv").read_text(encoding="utf-8").splitlines()
    # "bench", "hound", "shore", "cab" are English words the English side never writes: unattested
    assert back == ["banco\tbank", "can\tdog", "manzana\tapple", "orilla\tbank", "perro\tdog"]
    assert stats["es-en"]["dropped"] == {"headword": 1, "phrase_entry": 0, "unattested": 4}
    assert json.loads((tmp_path / "stats.json").read_text(encoding="utf-8"))["es-en"]["pairs"] == len(back)
