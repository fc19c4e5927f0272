"""Bilingual lexicon induction gold, English <-> Spanish, from the FreeDict dictionaries.

Sources: the Debian packages ``dict-freedict-eng-spa`` (English -> Spanish) and
``dict-freedict-spa-eng`` (Spanish -> English), FreeDict's TEI converted to dictd: an entry is
``headword /pronunciation/`` on its first line, then its translations, comma-separated, one
line per sense (``1. ...``, ``2. ...``), with grammar notes in angle brackets (``<f>``).

Kept: a word pair whose source is a headword of one lowercase alphabetic word and whose target
is one lowercase alphabetic word (Spanish letters ``á é í ó ú ü ñ`` included); every gold
translation of a word is kept.  Dropped, counted in ``stats.json``:

- ``headword``: headwords of several words, capitalised (names), or with other characters;
- ``phrase_entry``: the English -> Spanish file heads many phrase entries with the phrase's
  first word only (``apple /æpldʒuːs/`` is *apple juice* -> ``jugodemanzana``); among the
  entries of one headword, only those with the shortest pronunciation are kept, preferring the
  plain transcriptions (the stress-marked ``/ˈapəl/`` style is given to phrase entries there);
- ``translation``: translations of several words, with digits, hyphens or other signs;
- ``unattested``: the conversion wrote many multi-word translations without their spaces
  (``take into account`` -> ``takeintoaccount``, ``por ejemplo`` -> ``porejemplo``), which look
  like single words; a target is kept only when it is attested as a word of its language: a
  headword of that language's dictionary, or a word of a headword or translation written with
  spaces in either file.  A real word neither file otherwise writes is dropped with them
  (precision over recall), and a spaceless compound that also heads an entry stays
  (``greatgranddaughter``).

Outputs (``$PTMKIT_HOME/data/freedict-en-es/``): ``en-es.tsv`` and ``es-en.tsv`` (``source<TAB>
target``, a pair per line, sorted by source word, its translations in dictionary order);
``stats.json`` (entries read, pairs, source words, pairs whose two words are spelt alike, drops
by reason).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from ptmkit.data.sources.base import Package, Source, _run
from ptmkit.data.sources.text_formats import read_dictd
from ptmkit.errors import PtmError
from ptmkit.registry import register

PACKAGES = ("dict-freedict-eng-spa", "dict-freedict-spa-eng")
WORD = {"en": re.compile(r"[a-z]+"), "es": re.compile(r"[a-záéíóúüñ]+")}
_SENSE = re.compile(r"^\s*\d+\.\s*")
_NOTE = re.compile(r"<[^<>]*>|\([^()]*\)|\[[^\[\]]*\]")
_STRESS = re.compile("[ˈˌ]")


def parse_entry(text: str) -> tuple[str, str, list[str]]:
    """``(headword, pronunciation, translations)`` of one dictd entry: grammar notes (``<f>``),
    parenthesised and bracketed notes and sense numbers removed, translations split at commas
    and semicolons, trimmed of surrounding punctuation and spaces (empty ones dropped)."""
    first, *senses = text.strip().split("\n")
    head, _, pron = first.partition(" /")
    translations = []
    for line in senses:
        for t in re.split(r"[,;]", _NOTE.sub(" ", _SENSE.sub("", line))):
            t = " ".join(t.split()).strip(".:!¡?¿\"'")
            if t:
                translations.append(t)
    return " ".join(head.split()), pron.strip().rstrip("/"), translations


def main_entries(entries: list[tuple[str, str, list[str]]]) -> tuple[list[tuple[str, list[str]]], int]:
    """``([(headword, translations)], phrase entries dropped)``: per headword, the entries with
    the shortest pronunciation, the plain (unstressed) transcriptions preferred over stress-marked
    ones when a headword has both (see the module docstring)."""
    by_head: dict[str, list[tuple[str, list[str]]]] = {}
    for head, pron, translations in entries:
        by_head.setdefault(head, []).append((pron, translations))
    kept: list[tuple[str, list[str]]] = []
    dropped = 0
    for head, group in by_head.items():
        plain = [g for g in group if not _STRESS.search(g[0])]
        pool = plain or group
        shortest = min(len(p) for p, _ in pool)
        best = [t for p, t in pool if len(p) == shortest]
        dropped += len(group) - len(best)
        kept.extend((head, t) for t in best)
    return kept, dropped


def vocabulary(headwords: list[str], texts: list[str]) -> set[str]:
    """Words attested in a language: its single-word headwords, and every word of a headword or
    translation written with spaces (``texts``: all of them)."""
    words = {h for h in headwords if " " not in h}
    words.update(w for t in [*headwords, *texts] if " " in t for w in t.split())
    return words


def lexicon(entries: list[tuple[str, str, list[str]]], source: str, target: str,
            attested: set[str]) -> tuple[list[tuple[str, str]], Counter]:
    """``(pairs, drops by reason)`` of one dictionary direction (see the module docstring);
    ``attested``: the target language's :func:`vocabulary`."""
    dropped: Counter = Counter()
    kept, dropped["phrase_entry"] = main_entries(entries)
    pairs: dict[tuple[str, str], None] = {}
    for head, translations in kept:
        if not WORD[source].fullmatch(head):
            dropped["headword"] += 1
            continue
        for t in translations:
            if not WORD[target].fullmatch(t):
                dropped["translation"] += 1
            elif t not in attested:
                dropped["unattested"] += 1
            else:
                pairs[(head, t)] = None
    order = sorted({h for h, _ in pairs})
    rank = {h: i for i, h in enumerate(order)}
    return sorted(pairs, key=lambda p: rank[p[0]]), dropped


def write_lexicons(en_es: list[str], es_en: list[str], out: Path) -> dict:
    """Parse both dictionaries' entries (dictd texts), write ``en-es.tsv``, ``es-en.tsv`` and
    ``stats.json`` into ``out``; returns the statistics."""
    parsed = {"en-es": [parse_entry(e) for e in en_es], "es-en": [parse_entry(e) for e in es_en]}
    words = {"en": [h for h, _, _ in parsed["en-es"]] + [t for _, _, ts in parsed["es-en"] for t in ts],
             "es": [h for h, _, _ in parsed["es-en"]] + [t for _, _, ts in parsed["en-es"] for t in ts]}
    heads = {"en": [h for h, _, _ in parsed["en-es"]], "es": [h for h, _, _ in parsed["es-en"]]}
    stats: dict = {}
    for direction, entries in parsed.items():
        source, target = direction.split("-")
        attested = vocabulary(heads[target], words[target])
        pairs, dropped = lexicon(entries, source, target, attested)
        if not pairs:
            raise PtmError(f"no {direction} word pair survived parsing; the dictionary format changed")
        (out / f"{direction}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
        stats[direction] = {"entries": len(entries), "pairs": len(pairs), "source_words": len({s for s, _ in pairs}),
                            "identical_spelling": sum(s == t for s, t in pairs), "dropped": dict(sorted(dropped.items()))}
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return stats


def read_package(deb: Path, package: str, work: Path) -> list[str]:
    """The entries of the dictd database in a downloaded FreeDict Debian package."""
    root = work / "root" / package
    root.mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(root)], f"Debian package {package} (unpacking)")
    index = sorted((root / "usr/share/dictd").glob("*.index"))
    if not index:
        raise PtmError(f"Debian package {package} holds no dictd index")
    data = index[0].with_name(index[0].name[: -len(".index")] + ".dict.dz")
    return list(read_dictd(index[0], data))


@register("source", "freedict-en-es")
class FreeDictEnEs(Source):
    name = "freedict-en-es"
    description = "English <-> Spanish word pairs (bilingual lexicon induction gold) from the FreeDict dictionaries"
    packages = tuple(Package("debian", p) for p in PACKAGES)
    license = "GPL-2+ (FreeDict eng-spa and spa-eng)"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        en_es, es_en = (read_package(deb, package, work) for deb, package in zip(files, PACKAGES))
        write_lexicons(en_es, es_en, out)
