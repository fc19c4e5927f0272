"""A prepared corpus: memory-mapped token ids with a sentence and document index.

Directory layout (written by :func:`ptmkit.data.prepare.prepare`)::

    tokens.bin      all token ids, concatenated, raw uint16 (vocab <= 65535) or uint32
    word_starts.bin one bit per token (``np.packbits`` order): 1 where the token begins a word
    sentences.npy   int64 [n_sentences + 1]: sentence i is tokens[sentences[i]:sentences[i+1]]
    documents.npy   int64 [n_documents + 1]: document d is sentences documents[d]..documents[d+1]-1
    meta.json       dtype, counts, tokenizer digest, source files
    tokenizer.json  the tokenizer that produced the ids

One input line is one sentence; a blank line (or the end of a file) ends a document.
Nothing is read into memory: the arrays are memory maps, so corpora larger than RAM work.

A sharded set (``ptm prepare --shard-size``) is a directory whose ``meta.json`` lists its shards,
``shards/NNNNN/``, each a corpus directory as above, with their counts and where each begins in the
whole (``first_token``, ``first_sentence``, ``continues_document``: the shard starts inside a
document of the one before).  :meth:`Corpus.open` of that directory returns a :class:`ShardedCorpus`:
``tokens`` and ``word_starts`` read across the shards' memory maps (:class:`~ptmkit.data.concat.ConcatArray`),
``sentences`` and ``documents`` are the whole set's offsets (in memory, 8 bytes a sentence), so
everything that reads a corpus reads the set as the one corpus it was cut from.

Word starts (what whole-word, span and n-gram masking stand on) come from the tokenizer's
``word_ids`` (the pre-tokenizer's words), optionally refined by a word segmenter (Chinese).
A corpus prepared before they were recorded has no ``word_starts.bin``: ``Corpus.word_starts``
is then ``None`` and word-level maskers treat every token as a word (with a warning).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.data.concat import ConcatArray
from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

TOKENS, SENTENCES, DOCUMENTS, META, TOKENIZER = "tokens.bin", "sentences.npy", "documents.npy", "meta.json", "tokenizer.json"
WORD_STARTS = "word_starts.bin"
SHARDS_DIR = "shards"
FORMAT_VERSION = 1


def shard_name(i: int) -> str:
    """The directory name of shard ``i`` (``00000``, ``00001``, ...)."""
    return f"{i:05d}"


class PackedBits:
    """A read-only bit array over ``np.packbits`` bytes: ``bits[i]`` is bit ``i`` (most significant
    bit of each byte first).  Indexing with an int, a slice or an integer array returns bools, so
    ``bits[src]`` for ``src [B, T]`` gathers a batch like ``tokens[src]`` does."""

    dtype = np.dtype(bool)

    def __init__(self, data: np.ndarray, n: int) -> None:
        if data.shape != ((n + 7) // 8,):
            raise ValueError(f"{data.shape[0]} bytes cannot hold exactly {n} bits")
        self.data = data
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self.n)
            if step != 1:
                return self[np.arange(start, stop, step)]
            stop = max(stop, start)
            bits = np.unpackbits(np.asarray(self.data[start >> 3 : (stop + 7) >> 3]))
            return bits[start & 7 : (start & 7) + stop - start].astype(bool)
        idx = np.asarray(index)
        if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"PackedBits indices must be integers or slices, got {idx.dtype}")
        idx = idx.astype(np.int64)
        if idx.size and (int(idx.max()) >= self.n or int(idx.min()) < -self.n):
            raise IndexError(f"bit index out of range for {self.n} bits")
        idx = np.where(idx < 0, idx + self.n, idx)
        out = (np.asarray(self.data[idx >> 3]) >> (7 - (idx & 7)).astype(np.uint8)) & 1
        return out.astype(bool) if out.ndim else bool(out)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"PackedBits({self.n} bits)"


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


@dataclass
class Corpus:
    """A prepared corpus opened with :meth:`open` (arrays are read-only memory maps).

    tokens: [n_tokens] uint16/uint32; sentences: [n_sentences + 1] int64 token offsets;
    documents: [n_documents + 1] int64 sentence offsets; word_starts: [n_tokens] bits (True where
    a token begins a word), or ``None`` for a corpus prepared before word starts were recorded.
    """

    path: Path
    tokens: np.ndarray
    sentences: np.ndarray
    documents: np.ndarray
    meta: dict[str, Any]
    word_starts: PackedBits | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Corpus":
        """Memory-map the corpus in ``path``; missing or truncated files raise :class:`PtmError`."""
        root = Path(path)
        if not root.is_dir():
            raise PtmError(f"corpus directory not found: {root} (create one with `ptm prepare`)")
        index = _shard_index(root)
        if index is not None:
            return ShardedCorpus.open_set(root, index)
        for name in (TOKENS, SENTENCES, DOCUMENTS, META, TOKENIZER):
            if not (root / name).is_file():
                raise PtmError(f"{root} is not a prepared corpus: {name} is missing (re-run `ptm prepare`)")
        try:
            meta = json.loads((root / META).read_text(encoding="utf-8"))
            dtype = np.dtype(meta["dtype"])
            n_tokens, n_sent, n_docs = int(meta["n_tokens"]), int(meta["n_sentences"]), int(meta["n_documents"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PtmError(f"{root / META} is damaged ({exc}); re-run `ptm prepare`") from exc
        size = (root / TOKENS).stat().st_size
        if size != n_tokens * dtype.itemsize:
            raise PtmError(
                f"{root / TOKENS} has {size} bytes but meta.json says {n_tokens} {dtype} tokens "
                f"({n_tokens * dtype.itemsize} bytes): the corpus is truncated or damaged; re-run `ptm prepare`"
            )
        try:
            sentences = np.load(root / SENTENCES, mmap_mode="r")
            documents = np.load(root / DOCUMENTS, mmap_mode="r")
        except (ValueError, OSError, EOFError) as exc:
            raise PtmError(f"{root}: offset index is truncated or damaged ({exc}); re-run `ptm prepare`") from exc
        if sentences.shape != (n_sent + 1,) or documents.shape != (n_docs + 1,):
            raise PtmError(
                f"{root}: index sizes {sentences.shape}/{documents.shape} disagree with meta.json "
                f"({n_sent} sentences, {n_docs} documents); re-run `ptm prepare`"
            )
        if int(sentences[-1]) != n_tokens or int(documents[-1]) != n_sent:
            raise PtmError(f"{root}: index does not end at the corpus end; the corpus is damaged, re-run `ptm prepare`")
        tokens = _map_tokens(root, dtype, n_tokens)
        return cls(root, tokens, sentences, documents, meta, _open_word_starts(root, meta, n_tokens))

    # ------------------------------------------------------------------ counts
    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_sentences(self) -> int:
        return int(self.sentences.shape[0]) - 1

    @property
    def n_documents(self) -> int:
        return int(self.documents.shape[0]) - 1

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER

    def load_tokenizer(self) -> Any:
        """The corpus's :class:`~ptmkit.tokenization.Tokenizer`."""
        return Tokenizer.load(self.tokenizer_path)

    # ------------------------------------------------------------------ access
    def sentence(self, i: int) -> np.ndarray:
        """Token ids of sentence ``i`` ([length], a view into the memory map)."""
        if not -self.n_sentences <= i < self.n_sentences:
            raise IndexError(f"sentence {i} out of range (corpus has {self.n_sentences})")
        i %= self.n_sentences
        return self.tokens[int(self.sentences[i]) : int(self.sentences[i + 1])]

    def document(self, d: int) -> np.ndarray:
        """Token ids of document ``d`` ([length])."""
        if not -self.n_documents <= d < self.n_documents:
            raise IndexError(f"document {d} out of range (corpus has {self.n_documents})")
        d %= self.n_documents
        lo, hi = int(self.documents[d]), int(self.documents[d + 1])
        return self.tokens[int(self.sentences[lo]) : int(self.sentences[hi])]

    def document_token_offsets(self) -> np.ndarray:
        """int64 [n_documents + 1]: token offset of each document start (and the end)."""
        return np.asarray(self.sentences)[np.asarray(self.documents)]

    def __repr__(self) -> str:
        return (
            f"Corpus({str(self.path)!r}, {self.n_tokens} tokens, {self.n_sentences} sentences, "
            f"{self.n_documents} documents, {self.tokens.dtype})"
        )


@dataclass(repr=False)
class ShardedCorpus(Corpus):
    """Several corpora read as one, in order: the shards of a set that ``ptm prepare --shard-size``
    wrote (:meth:`open_set`, what :meth:`Corpus.open` returns for such a directory), or prepared
    corpora joined for a blend (:meth:`concat`).

    ``tokens`` and ``word_starts`` read the pieces' memory maps (:class:`ConcatArray`; a set maps a
    shard's files when they are first read); ``sentences`` and ``documents`` are the offsets of the
    whole (int64, in memory).  members: the corpora joined (empty for a set); shards: the shard
    directories of a set (empty for a join); starts: int64 [n_pieces + 1], where each member or
    shard begins in ``tokens`` (and the end).
    """

    members: list[Corpus] = field(default_factory=list)
    shards: list[Path] = field(default_factory=list)
    starts: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))

    @classmethod
    def concat(cls, members: list[Corpus], path: Path, meta: dict[str, Any]) -> "ShardedCorpus":
        """``members`` one after another (each document stays in its corpus)."""
        if not members:
            raise PtmError(f"{path}: no corpora to read")
        dtypes = sorted({str(m.tokens.dtype) for m in members})
        if len(dtypes) > 1:
            raise PtmError(f"{path}: the corpora hold token ids of different types ({', '.join(dtypes)}); "
                           f"they were prepared with different tokenizers")
        starts = np.concatenate([[0], np.cumsum([m.n_tokens for m in members])]).astype(np.int64)
        sent_starts = np.concatenate([[0], np.cumsum([m.n_sentences for m in members])]).astype(np.int64)
        sentences = np.concatenate([np.asarray(m.sentences[:-1], dtype=np.int64) + starts[i]
                                    for i, m in enumerate(members)] + [starts[-1:]])
        documents = np.concatenate([np.asarray(m.documents[:-1], dtype=np.int64) + sent_starts[i]
                                    for i, m in enumerate(members)] + [sent_starts[-1:]])
        bits = [m.word_starts for m in members]
        word_starts = ConcatArray(bits) if all(b is not None for b in bits) else None
        return cls(Path(path), ConcatArray([m.tokens for m in members]), sentences, documents, meta, word_starts,
                   members=list(members), starts=starts)

    @classmethod
    def open_set(cls, root: Path, meta: dict[str, Any]) -> "ShardedCorpus":
        """The sharded set in ``root`` whose ``meta.json`` is ``meta``; a missing, damaged or
        foreign shard raises :class:`PtmError` naming it.  Each shard is checked as
        :meth:`Corpus.open` checks a corpus; its offsets are copied into the set's, its token and
        word-start files are mapped when first read."""
        try:
            entries = list(meta["shards"])
            paths = [str(e["path"]) for e in entries]
            continues = [bool(e.get("continues_document", False)) for e in entries]
            expected = [(int(e["n_tokens"]), int(e["n_sentences"]), int(e["n_documents"])) for e in entries]
            totals = (int(meta["n_tokens"]), int(meta["n_sentences"]), int(meta["n_documents"]))
            dtype = np.dtype(meta["dtype"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PtmError(f"{root / META} is a damaged shard index ({exc!r}); re-run `ptm prepare`") from exc
        if not entries:
            raise PtmError(f"{root / META} lists no shards; re-run `ptm prepare`")
        if sum(n for n, _, _ in expected) != totals[0] or sum(s for _, s, _ in expected) != totals[1] \
                or sum(d for _, _, d in expected) - sum(continues[1:]) != totals[2]:
            raise PtmError(f"{root / META}: the shards it lists do not add up to the {totals[0]} tokens, {totals[1]} "
                           f"sentences and {totals[2]} documents it records; re-run `ptm prepare`")
        sentences = np.empty(totals[1] + 1, np.int64)
        documents = np.empty(totals[2] + 1, np.int64)
        shards, has_bits = [], True
        tok, sent, doc = 0, 0, 0
        for rel, want, cont in zip(paths, expected, continues):
            shard = _open_shard(root, rel, want, meta, dtype)
            shards.append(shard.path)
            has_bits = has_bits and shard.word_starts is not None
            sentences[sent : sent + want[1]] = np.asarray(shard.sentences[:-1]) + tok
            first = 1 if cont and sent > 0 else 0
            docs = np.asarray(shard.documents[first:-1]) + sent
            documents[doc : doc + len(docs)] = docs
            tok, sent, doc = tok + want[0], sent + want[1], doc + len(docs)
            del shard  # its memory maps (and their file descriptors) go with it
        sentences[-1], documents[-1] = tok, sent
        lengths = [n for n, _, _ in expected]
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = ConcatArray.lazy(lengths, dtype, lambda k: _map_tokens(shards[k], dtype, lengths[k]))
        bits = ConcatArray.lazy(lengths, bool, lambda k: _open_word_starts(shards[k], meta, lengths[k])) \
            if has_bits else None
        return cls(root, tokens, sentences, documents, meta, bits, shards=shards, starts=starts)

    def __repr__(self) -> str:
        what = f"{len(self.shards)} shards" if self.shards else f"{len(self.members)} corpora"
        return (
            f"ShardedCorpus({str(self.path)!r}, {self.n_tokens} tokens, {self.n_sentences} sentences, "
            f"{self.n_documents} documents, {self.tokens.dtype}, {what})"
        )


def _open_shard(root: Path, rel: str, want: tuple[int, int, int], meta: dict[str, Any], dtype: np.dtype) -> Corpus:
    """Shard ``rel`` of the set in ``root``, checked against the index (``want``: its counts)."""
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise PtmError(f"{root / META}: shard path {rel!r} is not inside the set; re-run `ptm prepare`")
    sub = root / rel
    if not sub.is_dir():
        raise PtmError(f"{root / META} lists the shard {rel}, which is missing: the set is incomplete "
                       f"(copied in part?); re-run `ptm prepare` or copy the whole directory")
    shard = Corpus.open(sub)
    got = (shard.n_tokens, shard.n_sentences, shard.n_documents)
    if got != want:
        raise PtmError(f"{sub} holds {got[0]} tokens, {got[1]} sentences, {got[2]} documents but the index "
                       f"{root / META} says {want[0]}, {want[1]}, {want[2]}; re-run `ptm prepare`")
    if shard.meta.get("tokenizer_sha256") != meta.get("tokenizer_sha256") or shard.tokens.dtype != dtype:
        raise PtmError(f"{sub} was prepared with another tokenizer than the set {root}: the shard is not "
                       f"this set's; re-run `ptm prepare`")
    return shard


def _map_tokens(root: Path, dtype: np.dtype, n: int) -> np.ndarray:
    return np.memmap(root / TOKENS, dtype=dtype, mode="r", shape=(n,)) if n else np.zeros(0, dtype)


def _shard_index(root: Path) -> dict[str, Any] | None:
    """``meta.json`` of ``root`` when it is a sharded set's index, else None (a plain corpus, or a
    missing or damaged ``meta.json``, which :meth:`Corpus.open` reports)."""
    try:
        meta = json.loads((root / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and "shards" in meta else None


def _open_word_starts(root: Path, meta: dict[str, Any], n_tokens: int) -> PackedBits | None:
    """The word-start bits, or ``None`` for a corpus prepared before they were recorded."""
    recorded = meta.get("word_starts")
    path = root / WORD_STARTS
    if not recorded:
        return None
    if not path.is_file():
        raise PtmError(f"{root} is not a complete corpus: {WORD_STARTS} is missing (re-run `ptm prepare`)")
    n_bytes = (n_tokens + 7) // 8
    size = path.stat().st_size
    if size != n_bytes:
        raise PtmError(
            f"{path} has {size} bytes but {n_tokens} tokens need {n_bytes}: the corpus is truncated or damaged; "
            "re-run `ptm prepare`"
        )
    data = np.memmap(path, dtype=np.uint8, mode="r", shape=(n_bytes,)) if n_bytes else np.zeros(0, np.uint8)
    return PackedBits(data, n_tokens)
