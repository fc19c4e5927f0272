"""The writing side of :func:`ptmkit.data.prepare.prepare`: encoded blocks appended to files.

:class:`CorpusWriter` appends one block after another to a corpus directory (``tokens.bin``,
``word_starts.bin``, ``sentences.npy``, ``documents.npy``); it keeps no array that grows with the
corpus: the offsets go straight into the ``.npy`` files, whose header is written first with a
placeholder shape and rewritten with the real one at the end (the header has the same length
for any count below 10^18, so nothing is copied).

:class:`ShardWriter` cuts the same stream into shards of about ``shard_tokens`` tokens, each an
ordinary corpus directory ``shards/NNNNN/``, and keeps the index that ``meta.json`` of the set
records (:mod:`ptmkit.data.shards`).  A shard is closed at the first sentence end at or past its
size, so no sentence is split; a document may run on into the next shard, which the index marks
(``continues_document``), so the set reads back as exactly the corpus one directory would hold.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.data.corpus import (
    DOCUMENTS,
    FORMAT_VERSION,
    META,
    SENTENCES,
    SHARDS_DIR,
    TOKENIZER,
    TOKENS,
    WORD_STARTS,
    shard_name,
)
from ptmkit.data.sources.base import sha256
from ptmkit.data.textfiles import TextFormat, describe


@dataclass(frozen=True)
class Encoded:
    """An encoded block: ids [n_ids] (the corpus dtype), word_starts [n_ids] bool, lengths
    [n_sentences] int64 (all > 0), doc_breaks int64 (the block's sentences before each blank line,
    non-decreasing), the bytes of its file read for it (progress), the non-blank lines that encoded
    to nothing, and whether the block ends its file (which ends a document)."""

    ids: np.ndarray
    word_starts: np.ndarray
    lengths: np.ndarray
    doc_breaks: np.ndarray
    n_bytes: int
    n_empty: int
    end_of_file: bool

    def split(self, k: int) -> tuple["Encoded", "Encoded"]:
        """The first ``k`` sentences (with the blank lines up to the k-th sentence's end) and the rest."""
        t = int(self.lengths[:k].sum())
        head = replace(self, ids=self.ids[:t], word_starts=self.word_starts[:t], lengths=self.lengths[:k],
                       doc_breaks=self.doc_breaks[self.doc_breaks <= k], n_bytes=0, end_of_file=False)
        tail = replace(self, ids=self.ids[t:], word_starts=self.word_starts[t:], lengths=self.lengths[k:],
                       doc_breaks=self.doc_breaks[self.doc_breaks > k] - k, n_empty=0)
        return head, tail


class NpyAppender:
    """A 1-D little-endian int64 ``.npy`` file written by appending; the shape goes into the header
    at :meth:`close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "wb")
        self.header = _npy_header(0)
        self.file.write(self.header)
        self.n = 0

    def append(self, values: np.ndarray) -> None:
        np.asarray(values, dtype="<i8").tofile(self.file)
        self.n += int(np.size(values))

    def close(self) -> None:
        header = _npy_header(self.n)
        if len(header) != len(self.header):  # not below 10^18 entries: cannot happen for a file on a disk
            raise AssertionError(f"npy header of {self.n} entries changed length")
        self.file.seek(0)
        self.file.write(header)
        self.file.close()

    def abort(self) -> None:
        self.file.close()


def _npy_header(n: int) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": (n,)})
    return buf.getvalue()


class CorpusWriter:
    """Appends encoded blocks to the corpus files in ``root``, in the order they arrive."""

    def __init__(self, root: Path, dtype: np.dtype, unk_id: int | None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.dtype = np.dtype(dtype)
        self.unk_id = unk_id
        self.tokens = open(root / TOKENS, "wb")
        self.word_starts = open(root / WORD_STARTS, "wb")
        self.bits = np.zeros(0, dtype=bool)  # word-start bits not yet filling a whole byte (< 8)
        self.sentences = NpyAppender(root / SENTENCES)
        self.documents = NpyAppender(root / DOCUMENTS)
        self.n_tokens = self.n_sentences = self.n_documents = self.n_empty = self.n_unk = 0
        self.last_break = 0  # sentence index where the current document starts
        self.sentences.append(np.zeros(1, np.int64))
        self.documents.append(np.zeros(1, np.int64))

    @property
    def open_document(self) -> bool:
        """Whether the last document has sentences and no end yet."""
        return self.n_sentences > self.last_break

    def add(self, enc: Encoded) -> None:
        enc.ids.astype(self.dtype, copy=False).tofile(self.tokens)
        if self.unk_id is not None:
            self.n_unk += int(np.count_nonzero(enc.ids == self.unk_id))
        bits = np.concatenate([self.bits, enc.word_starts])
        whole = len(bits) - len(bits) % 8
        np.packbits(bits[:whole]).tofile(self.word_starts)
        self.bits = bits[whole:]
        self.sentences.append(np.cumsum(enc.lengths) + self.n_tokens)
        breaks = enc.doc_breaks + self.n_sentences
        self.n_tokens += int(enc.lengths.sum())
        self.n_sentences += int(enc.lengths.size)
        self.n_empty += enc.n_empty
        if enc.end_of_file:  # a new file starts a new document
            breaks = np.append(breaks, self.n_sentences)
        # Several blank lines in a row (or a blank line at a file's end) make no empty document.
        breaks = np.unique(breaks[breaks > self.last_break])
        if breaks.size:
            self.documents.append(breaks)
            self.n_documents += int(breaks.size)
            self.last_break = int(breaks[-1])

    def close(self) -> None:
        if self.open_document:
            self.documents.append(np.array([self.n_sentences], np.int64))
            self.n_documents += 1
            self.last_break = self.n_sentences
        np.packbits(self.bits).tofile(self.word_starts)  # the last byte, zero-padded
        self.bits = np.zeros(0, dtype=bool)
        self.tokens.close()
        self.word_starts.close()
        self.sentences.close()
        self.documents.close()

    def abort(self) -> None:
        for f in (self.tokens, self.word_starts, self.sentences, self.documents):
            (f.abort if isinstance(f, NpyAppender) else f.close)()

    def counts(self) -> dict[str, int]:
        return {"n_tokens": self.n_tokens, "n_sentences": self.n_sentences, "n_documents": self.n_documents,
                "skipped_empty_lines": self.n_empty, "unk_tokens": self.n_unk}

    def write_meta(self, common: dict[str, Any]) -> None:
        """``meta.json``: ``common`` (dtype, tokenizer, sources, ...) with this corpus's counts."""
        _write_meta(self.root, common, self.counts())


class ShardWriter:
    """Cuts the stream of encoded blocks into shard directories of about ``shard_tokens`` tokens
    (the first sentence end at or past the size closes a shard)."""

    def __init__(self, root: Path, dtype: np.dtype, unk_id: int | None, shard_tokens: int, tokenizer_file: Path,
                 common: dict[str, Any]) -> None:
        if shard_tokens < 1:
            raise ValueError(f"shard_tokens must be positive, got {shard_tokens}")
        self.root, self.dtype, self.unk_id, self.shard_tokens = root, dtype, unk_id, shard_tokens
        self.tokenizer_file, self.common = tokenizer_file, common
        self.shards: list[dict[str, Any]] = []  # the index: one entry per closed shard
        self.current: CorpusWriter | None = None
        self.continues = False  # whether the shard being written starts inside a document

    def add(self, enc: Encoded) -> None:
        while True:
            w = self.current if self.current is not None else self._open()
            room = self.shard_tokens - w.n_tokens
            if room <= 0 and enc.lengths.size:
                # The shard is full and a sentence comes: blank lines before it end the document here.
                lead = enc.doc_breaks == 0
                if lead.any():
                    w.add(replace(enc, ids=enc.ids[:0], word_starts=enc.word_starts[:0], lengths=enc.lengths[:0],
                                  doc_breaks=enc.doc_breaks[lead], n_empty=0, end_of_file=False))
                    enc = replace(enc, doc_breaks=enc.doc_breaks[~lead])
                self._close_current()
                continue
            ends = np.cumsum(enc.lengths)
            k = int(np.searchsorted(ends, room)) + 1  # sentences up to the first end at or past the room
            if k >= enc.lengths.size:
                w.add(enc)
                return
            head, enc = enc.split(k)
            w.add(head)

    def _open(self) -> CorpusWriter:
        path = self.root / SHARDS_DIR / shard_name(len(self.shards))
        self.current = CorpusWriter(path, self.dtype, self.unk_id)
        shutil.copyfile(self.tokenizer_file, path / TOKENIZER)  # each shard is a corpus of its own
        return self.current

    def _close_current(self) -> None:
        w = self.current
        assert w is not None
        runs_on = w.open_document
        w.close()
        w.write_meta(self.common)
        before = self.shards[-1] if self.shards else None
        self.shards.append({
            "path": f"{SHARDS_DIR}/{w.root.name}",
            **w.counts(),
            "first_token": before["first_token"] + before["n_tokens"] if before else 0,
            "first_sentence": before["first_sentence"] + before["n_sentences"] if before else 0,
            "continues_document": self.continues,
        })
        self.continues = runs_on
        self.current = None

    def close(self) -> None:
        if self.current is not None:
            self._close_current()

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()

    def counts(self) -> dict[str, int]:
        """The set's counts: a document running across shards counts once."""
        total = {k: sum(s[k] for s in self.shards) for k in ("n_tokens", "n_sentences", "n_documents",
                                                              "skipped_empty_lines", "unk_tokens")}
        total["n_documents"] -= sum(bool(s["continues_document"]) for s in self.shards)
        return total

    def write_meta(self, common: dict[str, Any]) -> None:
        _write_meta(self.root, common, self.counts(), {"shard_tokens": self.shard_tokens, "shards": self.shards})


def _write_meta(root: Path, common: dict[str, Any], counts: dict[str, int], extra: dict[str, Any] | None = None) -> None:
    """``meta.json``: format and dtype, the counts, the rest of ``common``, then ``extra``."""
    meta = {k: common[k] for k in ("format", "dtype")}
    meta.update(counts)
    meta.update((k, v) for k, v in common.items() if k not in meta)
    meta.update(extra or {})
    (root / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def common_meta(paths: list[Path], tok: Any, tok_file: Path, dtype: np.dtype,
                 seg_record: dict | str | None, fmt: TextFormat) -> dict[str, Any]:
    """What ``meta.json`` records besides the counts (the same for a corpus, a set and its shards)."""
    return {
        "format": FORMAT_VERSION,
        "dtype": np.dtype(dtype).name,
        "vocab_size": tok.vocab_size,
        "tokenizer_kind": tok.kind,
        "tokenizer_sha256": sha256(tok_file),
        "word_starts": WORD_STARTS,
        "word_segmenter": seg_record,
        "sources": [source_record(p, fmt) for p in paths],
    }


def source_record(path: Path, fmt: TextFormat) -> dict[str, Any]:
    """A source file in ``meta.json``: its path, size, format (``jsonl+gzip``) and where its text was."""
    kind = describe(path)
    return {"path": str(path.resolve()), "bytes": path.stat().st_size, "format": kind,
            **fmt.record(kind.split("+")[0])}


__all__ = ["CorpusWriter", "Encoded", "NpyAppender", "ShardWriter", "common_meta", "source_record"]
