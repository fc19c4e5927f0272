"""Streaming, multi-process corpus preparation: text files -> :class:`~ptmkit.data.corpus.Corpus`.

The reader cuts each file into blocks of about ``chunk_bytes`` ending at a newline, so memory is
bounded by the number of blocks in flight (``2 * workers``), never by the corpus size.  Workers
decode (strict UTF-8), split lines and run the Rust batch encoder; the parent appends their ids
and offsets to files in the order the blocks were read, so the result does not depend on
``workers``.  Each token's word start (from the tokenizer's ``word_ids``, optionally refined by
a word segmenter such as ``jieba``) is appended the same way, one bit per token, to
``word_starts.bin``.  Everything is written to a scratch directory published at the end
(:func:`ptmkit.outputs.staged`): a failure (bad bytes, empty corpus, Ctrl-C) leaves nothing
behind and never touches an existing corpus.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import multiprocessing as mp
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from ptmkit import outputs
from ptmkit.data.corpus import (
    DOCUMENTS,
    FORMAT_VERSION,
    META,
    SENTENCES,
    TOKENIZER,
    TOKENS,
    WORD_STARTS,
    Corpus,
    token_dtype,
)
from ptmkit.data.sources.base import sha256
from ptmkit.errors import PtmError, require_file
from ptmkit.tokenization import Tokenizer, kinds
from ptmkit.tokenization.segmenters import Segmenter, get_segmenter
from ptmkit.train.progress import progress as progress_display

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 1 << 20
UNK_WARNING = 0.05  # warn when more than this share of the tokens is [UNK]
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class _Chunk:
    """A block of whole lines of one file: ``data`` starts at byte ``offset``, line ``line`` (1-based)."""

    path: str
    offset: int
    line: int
    data: bytes
    end_of_file: bool


@dataclass(frozen=True)
class _Encoded:
    """A chunk's result: ids [n_ids] uint32, word_starts [n_ids] bool, lengths [n_sentences]
    (all > 0), doc_breaks, counts."""

    ids: np.ndarray
    word_starts: np.ndarray
    lengths: np.ndarray
    doc_breaks: np.ndarray  # sentences of this chunk before each blank line (non-decreasing)
    n_bytes: int
    n_empty: int  # non-blank lines that encoded to no token (skipped)
    end_of_file: bool


# ---------------------------------------------------------------------------- workers
_TOKENIZER: Tokenizer | None = None
_SEGMENTER: Segmenter | None = None


def _init_worker(tokenizer_json: str, segmenter: str | Segmenter | None) -> None:
    global _TOKENIZER, _SEGMENTER
    # Each worker is one process; the Rust encoder's own thread pool would oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    hf = HFTokenizer.from_str(tokenizer_json)
    kind, lowercase = kinds.detect_kind(json.loads(tokenizer_json))
    _TOKENIZER = Tokenizer(hf, kind or "wordpiece", lowercase)
    _SEGMENTER = get_segmenter(segmenter)


def _decode(chunk: _Chunk) -> str:
    data = chunk.data
    nul = data.find(b"\0")
    if nul >= 0:
        line = chunk.line + data.count(b"\n", 0, nul)
        raise PtmError(
            f"{chunk.path}: NUL byte at byte {chunk.offset + nul} (line {line}); this looks like a binary file, "
            "not UTF-8 text"
        )
    if chunk.offset == 0 and data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        skipped = len(chunk.data) - len(data)
        line = chunk.line + data.count(b"\n", 0, exc.start)
        raise PtmError(
            f"{chunk.path}: invalid UTF-8 at byte {chunk.offset + skipped + exc.start} (line {line}): {exc.reason}; "
            "convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None


def _encode_chunk(chunk: _Chunk) -> _Encoded:
    """Decode, split into lines and encode one chunk (runs in a worker)."""
    assert _TOKENIZER is not None
    text = _decode(chunk)
    lines = [line.strip() for line in text.split("\n")] if text else []
    if text.endswith("\n"):
        lines.pop()  # the text after the last newline is not a line
    blank = np.fromiter((not line for line in lines), dtype=bool, count=len(lines))
    ids_per_line, word_starts = _TOKENIZER.encode_batch_with_word_starts([line for line in lines if line], _SEGMENTER)
    lengths = np.fromiter((len(x) for x in ids_per_line), dtype=np.int64, count=len(ids_per_line))
    ids = np.fromiter(itertools.chain.from_iterable(ids_per_line), dtype=np.uint32, count=int(lengths.sum()))
    # Sentence index of each line among the kept (non-blank, non-empty) sentences.
    kept = np.zeros(len(lines), dtype=np.int64)
    kept[~blank] = lengths > 0
    before = np.cumsum(kept) - kept
    return _Encoded(
        ids=ids,
        word_starts=word_starts,
        lengths=lengths[lengths > 0],
        doc_breaks=before[blank],
        n_bytes=len(chunk.data),
        n_empty=int((lengths == 0).sum()),
        end_of_file=chunk.end_of_file,
    )


# ---------------------------------------------------------------------------- reader
def _chunks(files: Sequence[Path], chunk_bytes: int) -> Iterator[_Chunk]:
    """Blocks of whole lines, ``chunk_bytes`` or a little more (a long line is never cut)."""
    for path in files:
        offset, line = 0, 1
        with open(path, "rb") as f:
            carry = b""
            while True:
                block = f.read(chunk_bytes)
                if not block:
                    break
                data = carry + block
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                head, carry = data[: cut + 1], data[cut + 1 :]
                yield _Chunk(str(path), offset, line, head, False)
                offset += len(head)
                line += head.count(b"\n")
            yield _Chunk(str(path), offset, line, carry, True)


# ---------------------------------------------------------------------------- writer
class _Writer:
    """Appends ids and offsets to files in the order chunks arrive."""

    def __init__(self, root: Path, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.tokens = open(root / TOKENS, "wb")
        self.word_starts = open(root / WORD_STARTS, "wb")
        self.bits = np.zeros(0, dtype=bool)  # word-start bits not yet filling a whole byte (< 8)
        self.sent_raw = open(root / (SENTENCES + ".raw"), "wb")
        self.doc_raw = open(root / (DOCUMENTS + ".raw"), "wb")
        self.n_tokens = self.n_sentences = self.n_documents = self.n_empty = 0
        self.last_break = 0  # sentence index where the current document starts
        np.zeros(1, np.int64).tofile(self.sent_raw)
        np.zeros(1, np.int64).tofile(self.doc_raw)

    def add(self, enc: _Encoded) -> None:
        enc.ids.astype(self.dtype, copy=False).tofile(self.tokens)
        bits = np.concatenate([self.bits, enc.word_starts])
        whole = len(bits) - len(bits) % 8
        np.packbits(bits[:whole]).tofile(self.word_starts)
        self.bits = bits[whole:]
        (np.cumsum(enc.lengths) + self.n_tokens).tofile(self.sent_raw)
        breaks = enc.doc_breaks + self.n_sentences
        self.n_tokens += int(enc.lengths.sum())
        self.n_sentences += int(enc.lengths.size)
        self.n_empty += enc.n_empty
        if enc.end_of_file:  # a new file starts a new document
            breaks = np.append(breaks, self.n_sentences)
        # Several blank lines in a row (or a blank line at a file's end) make no empty document.
        breaks = np.unique(breaks[breaks > self.last_break])
        if breaks.size:
            breaks.tofile(self.doc_raw)
            self.n_documents += int(breaks.size)
            self.last_break = int(breaks[-1])

    def close(self, root: Path) -> None:
        if self.n_sentences > self.last_break:
            np.array([self.n_sentences], np.int64).tofile(self.doc_raw)
            self.n_documents += 1
            self.last_break = self.n_sentences
        np.packbits(self.bits).tofile(self.word_starts)  # the last byte, zero-padded
        self.bits = np.zeros(0, dtype=bool)
        for f in (self.tokens, self.word_starts, self.sent_raw, self.doc_raw):
            f.close()
        _raw_to_npy(root / (SENTENCES + ".raw"), root / SENTENCES, self.n_sentences + 1)
        _raw_to_npy(root / (DOCUMENTS + ".raw"), root / DOCUMENTS, self.n_documents + 1)

    def abort(self) -> None:
        for f in (self.tokens, self.word_starts, self.sent_raw, self.doc_raw):
            f.close()


def _raw_to_npy(raw: Path, npy: Path, n: int) -> None:
    """Prefix a raw little-endian int64 file with an ``.npy`` header (streamed copy)."""
    with open(npy, "wb") as out, open(raw, "rb") as src:
        np.lib.format.write_array_header_1_0(out, {"descr": "<i8", "fortran_order": False, "shape": (n,)})
        shutil.copyfileobj(src, out, 1 << 22)
    raw.unlink()


# ---------------------------------------------------------------------------- entry point
def prepare(
    files: Sequence[str | os.PathLike[str]],
    tokenizer: Tokenizer | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    workers: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    overwrite: bool = False,
    progress: bool = True,
    segmenter: str | Segmenter | None = None,
    user_dict: str | os.PathLike[str] | None = None,
) -> Corpus:
    """Tokenize text ``files`` into a memory-mapped corpus in ``out_dir`` and open it.

    One line is one sentence; a blank line or the end of a file ends a document; lines that
    encode to no token are skipped.  ``workers`` defaults to the number of CPU cores.
    ``segmenter``: a word segmenter name (``"jieba"``) or callable refining the word starts
    (see :mod:`ptmkit.tokenization.segmenters`); a callable must be picklable when the
    platform cannot fork.  ``user_dict``: a jieba user dictionary (one word per line, optionally
    with a frequency and a POS tag) for ``segmenter="jieba"``; its SHA-256 goes into ``meta.json``.
    """
    paths = [Path(f) for f in files]
    if not paths:
        raise PtmError("no input files given")
    for p in paths:
        require_file(p, "input file")
    seg = get_segmenter(segmenter, user_dict)  # an unknown or uninstalled segmenter fails before any work
    seg_record = _segmenter_record(segmenter, user_dict)
    tok_path = None if isinstance(tokenizer, Tokenizer) else Path(tokenizer)
    out = Path(out_dir)
    inputs = [*paths, tok_path]
    outputs.check(out, "corpus", inputs, overwrite)  # before the tokenizer is even read
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
    if chunk_bytes < 1:
        raise PtmError(f"chunk_bytes must be positive, got {chunk_bytes}")
    n_blocks = sum(max(1, -(-p.stat().st_size // chunk_bytes)) for p in paths)
    workers = max(1, min(workers or os.cpu_count() or 1, n_blocks))

    # Written into a scratch directory, published into ``out`` only when complete; with
    # overwrite, the previous corpus files are replaced then (the user's other files stay).
    with outputs.staged(out, "corpus", inputs, overwrite) as tmp:
        _write_corpus(tmp, paths, tok, chunk_bytes, workers, progress, seg, seg_record)
    return Corpus.open(out)


def _segmenter_record(segmenter: str | Segmenter | None, user_dict: str | os.PathLike[str] | None) -> dict | str | None:
    """What ``meta.json`` records of the segmenter: its name, with a user dictionary its path and hash."""
    name = segmenter if isinstance(segmenter, str) or segmenter is None else repr(segmenter)
    if user_dict is None:
        return name
    return {"name": name, "user_dict": str(Path(user_dict).resolve()), "user_dict_sha256": sha256(Path(user_dict))}


def _write_corpus(root: Path, paths: list[Path], tok: Tokenizer, chunk_bytes: int, workers: int, progress: bool,
                  segmenter: str | Segmenter | None = None, seg_record: dict | str | None = None) -> None:
    """Tokenize ``paths`` into the corpus files in ``root`` (open files are closed on failure)."""
    writer = None
    try:
        tok_file = tok.save(root / TOKENIZER)
        dtype = token_dtype(tok.vocab_size)
        writer = _Writer(root, dtype)
        total_bytes = sum(p.stat().st_size for p in paths)
        bar = progress_display(total_bytes, desc="prepare", unit="B", unit_scale=True, disable=not progress)
        n_unk = 0
        with bar:
            for enc in _encode_all(_chunks(paths, chunk_bytes), tok, workers, segmenter):
                writer.add(enc)
                n_unk += int(np.count_nonzero(enc.ids == tok.unk_id))
                bar.update(enc.n_bytes)
        writer.close(root)
        if writer.n_tokens == 0:
            raise PtmError(f"no tokens in {', '.join(map(str, paths))}: the corpus is empty")
        meta = {
            "format": FORMAT_VERSION,
            "dtype": dtype.name,
            "n_tokens": writer.n_tokens,
            "n_sentences": writer.n_sentences,
            "n_documents": writer.n_documents,
            "skipped_empty_lines": writer.n_empty,
            "unk_tokens": n_unk,
            "vocab_size": tok.vocab_size,
            "tokenizer_kind": tok.kind,
            "tokenizer_sha256": sha256(tok_file),
            "word_starts": WORD_STARTS,
            "word_segmenter": seg_record,
            "sources": [{"path": str(p.resolve()), "bytes": p.stat().st_size} for p in paths],
        }
        (root / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if n_unk > UNK_WARNING * writer.n_tokens:
            log.warning(
                "%.1f%% of the tokens (%d of %d) are [UNK]: the tokenizer does not cover this text (Chinese text "
                "through a tokenizer trained on English, say); train one on it: ptm tokenizer train FILES --kind "
                "wordpiece (every CJK character becomes a token) or --kind char",
                100 * n_unk / writer.n_tokens, n_unk, writer.n_tokens)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def _encode_all(
    chunks: Iterator[_Chunk], tok: Tokenizer, workers: int, segmenter: str | Segmenter | None = None
) -> Iterator[_Encoded]:
    """Encoded chunks in input order; at most ``2 * workers`` chunks in flight."""
    global _TOKENIZER, _SEGMENTER
    if workers <= 1:
        _TOKENIZER = tok  # in-process: the Rust encoder parallelises each batch itself
        _SEGMENTER = get_segmenter(segmenter)
        try:
            yield from map(_encode_chunk, chunks)
        finally:
            _TOKENIZER = _SEGMENTER = None
        return
    # "fork" needs no importable __main__ (scripts and notebooks work unguarded); ``tokenizers``
    # notices the fork and keeps its thread pool off in the children.
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers, initializer=_init_worker, initargs=(tok.to_json(), segmenter)) as pool:
        pending: collections.deque = collections.deque()
        for chunk in chunks:
            pending.append(pool.apply_async(_encode_chunk, (chunk,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
