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

Word starts (what whole-word, span and n-gram masking stand on) come from the tokenizer's
``word_ids`` (the pre-tokenizer's words), optionally refined by a word segmenter (Chinese).
A corpus prepared before they were recorded has no ``word_starts.bin``: ``Corpus.word_starts``
is then ``None`` and word-level maskers treat every token as a word (with a warning).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

TOKENS, SENTENCES, DOCUMENTS, META, TOKENIZER = "tokens.bin", "sentences.npy", "documents.npy", "meta.json", "tokenizer.json"
WORD_STARTS = "word_starts.bin"
FORMAT_VERSION = 1


class PackedBits:
    """A read-only bit array over ``np.packbits`` bytes: ``bits[i]`` is bit ``i`` (most significant
    bit of each byte first).  Indexing with an int, a slice or an integer array returns bools, so
    ``bits[src]`` for ``src [B, T]`` gathers a batch like ``tokens[src]`` does."""

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
        tokens = np.memmap(root / TOKENS, dtype=dtype, mode="r", shape=(n_tokens,)) if n_tokens else np.zeros(0, dtype)
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
