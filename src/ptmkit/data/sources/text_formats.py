"""Plain text from the English mix's sources: sentence splitting and normalisation (one
lower-cased sentence of words per line), line hashing for deduplication, and the readers of the
formats the sources come in (dictd dictionaries, GCIDE, FOLDOC, WordNet, fortune files, the
Jargon File, SWORD Bible and commentary modules in OSIS).  A reader yields documents: lists of
raw paragraphs."""

from __future__ import annotations

import gzip
import hashlib
import html
import re
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError

MIN_WORDS = 3  # shorter lines (headings, list items, bare headwords) are dropped
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
