"""Streaming, multi-process corpus preparation: text files -> :class:`~ptmkit.data.corpus.Corpus`.

The reader cuts each file into blocks of about ``chunk_bytes`` ending at a newline, so memory is
bounded by the number of blocks in flight (``2 * workers``), never by the corpus size.  Workers
decode (strict UTF-8), split lines and run the Rust batch encoder; the parent appends their ids
and offsets to files in the order the blocks were read (:mod:`ptmkit.data.writer`), so the result
does not depend on ``workers``.  Each token's word start (from the tokenizer's ``word_ids``,
optionally refined by a word segmenter such as ``jieba``) is appended the same way, one bit per
token, to ``word_starts.bin``.  Everything is written to a scratch directory published at the end
(:func:`ptmkit.outputs.staged`): a failure (bad bytes, empty corpus, Ctrl-C) leaves nothing
behind and never touches an existing corpus.

``memory_budget`` bounds the memory of the text in flight in all processes together
(:mod:`ptmkit.data.memory` picks the block size, the slice encoded at once and the blocks in
flight; a line longer than a block is refused).  ``shard_tokens`` cuts the output into shards of
about that many tokens under ``shards/`` with an index in ``meta.json`` (:class:`~ptmkit.data.writer.ShardWriter`);
:meth:`Corpus.open` reads the set back as one corpus.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from ptmkit import outputs
from ptmkit.data import memory
from ptmkit.data.corpus import TOKENIZER, Corpus, token_dtype
from ptmkit.data.dedup import DEFAULT_THRESHOLD, Dedup, unique_lines
from ptmkit.data.sources.base import sha256
from ptmkit.data.textfiles import TextFile, TextFormat, describe
from ptmkit.data.writer import CorpusWriter, Encoded, ShardWriter, common_meta
from ptmkit.errors import PtmError, require_file
from ptmkit.knowledge.corpus_entities import load_graph, write_entities
from ptmkit.tokenization import Tokenizer, kinds
from ptmkit.tokenization.languages import check_language
from ptmkit.tokenization.segmenters import Segmenter, get_segmenter
from ptmkit.train.progress import progress as progress_display

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 1 << 20
UNK_WARNING = 0.05  # warn when more than this share of the tokens is [UNK]
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class _Chunk:
    """A block of whole lines of one file's text: ``data`` starts at byte ``offset``, line ``line``
    (1-based) of that text; ``read``: the bytes of the file on disk read for it (progress)."""

    path: str
    offset: int
    line: int
    data: bytes
    end_of_file: bool
    read: int = 0


@dataclass(frozen=True)
class _Settings:
    """What a worker needs besides the tokenizer: the ids' dtype and how many characters of text
    go to the encoder at once (None: the whole block)."""

    dtype: str
    encode_chars: int | None = None


# ---------------------------------------------------------------------------- workers
_TOKENIZER: Tokenizer | None = None
_SEGMENTER: Segmenter | None = None
_SETTINGS = _Settings("uint32")
_BASE_RSS: int | None = None  # a worker's resident size after its start (see _encode_task)


def _init_worker(tokenizer_json: str, segmenter: str | Segmenter | None, settings: _Settings) -> None:
    global _TOKENIZER, _SEGMENTER, _SETTINGS, _BASE_RSS
    # Each worker is one process; the Rust encoder's own thread pool would oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    hf = HFTokenizer.from_str(tokenizer_json)
    kind, lowercase = kinds.detect_kind(json.loads(tokenizer_json))
    _TOKENIZER = Tokenizer(hf, kind or "wordpiece", lowercase)
    _SEGMENTER = get_segmenter(segmenter)
    _SETTINGS = settings
    _warm_up()
    _BASE_RSS = memory.reset_peak()


def _warm_up() -> None:
    """Encode one line before measuring: the encoder's thread pool and the code it runs are the
    process's footprint, not memory the text takes (without the segmenter: a user's may know
    only its own text)."""
    assert _TOKENIZER is not None
    _TOKENIZER.encode_batch_with_word_starts(["warm up, 1."], None)


def _encode_task(chunk: _Chunk) -> tuple[Encoded, int, int | None]:
    """A worker's task: the encoded chunk, the worker's pid and its peak memory so far beyond its
    size at the start (what it took for the text; pages shared with the parent are not counted)."""
    enc = _encode_chunk(chunk)
    return enc, os.getpid(), memory.worker_peak(_BASE_RSS)


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


def _encode_chunk(chunk: _Chunk) -> Encoded:
    """Decode, split into lines and encode one chunk (runs in a worker)."""
    text = _decode(chunk)
    lines = [line.strip() for line in text.split("\n")] if text else []
    del text
    if lines and chunk.data.endswith(b"\n"):
        lines.pop()  # the text after the last newline is not a line
    blank = np.fromiter((not line for line in lines), dtype=bool, count=len(lines))
    ids, word_starts, lengths = _encode_lines([line for line in lines if line])
    # Sentence index of each line among the kept (non-blank, non-empty) sentences.
    kept = np.zeros(len(lines), dtype=np.int64)
    kept[~blank] = lengths > 0
    before = np.cumsum(kept) - kept
    return Encoded(
        ids=ids,
        word_starts=word_starts,
        lengths=lengths[lengths > 0],
        doc_breaks=before[blank],
        n_bytes=chunk.read,
        n_empty=int((lengths == 0).sum()),
        end_of_file=chunk.end_of_file,
    )


def _encode_lines(lines: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids [n], word_starts [n], lengths [len(lines)])`` of the lines, encoded ``encode_chars``
    characters at a time: the Rust encodings and the Python lists of ids of one slice at most are
    alive at once (each line encodes on its own, so the slicing does not change the ids)."""
    assert _TOKENIZER is not None
    step = _SETTINGS.encode_chars
    groups: list[list[str]] = [lines]
    if step is not None:
        groups, size = [[]], 0
        for line in lines:
            if size >= step:
                groups.append([])
                size = 0
            groups[-1].append(line)
            size += len(line)
    parts = []
    for group in groups:
        ids_per_line, word_starts = _TOKENIZER.encode_batch_with_word_starts(group, _SEGMENTER)
        lengths = np.fromiter((len(x) for x in ids_per_line), dtype=np.int64, count=len(ids_per_line))
        ids = np.fromiter(itertools.chain.from_iterable(ids_per_line), dtype=_SETTINGS.dtype, count=int(lengths.sum()))
        del ids_per_line
        parts.append((ids, np.asarray(word_starts, dtype=bool), lengths))
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


# ---------------------------------------------------------------------------- reader
def _chunks(files: Sequence[Path], chunk_bytes: int, max_line: int | None = None, budget: int | None = None,
            fmt: TextFormat = TextFormat(), dedup: Dedup | None = None) -> Iterator[_Chunk]:
    """Blocks of whole lines of the files' text (:mod:`ptmkit.data.textfiles`), ``chunk_bytes`` or a
    little more (a long line is never cut; with ``max_line``, a line longer than that is refused:
    the memory budget has no room for it).  Plain text is cut from its bytes as they are; the
    other formats, and any text with ``dedup``, are read line by line."""
    hint = _limit_hint(max_line, budget)
    for path in files:
        with TextFile(path, fmt, max_line, hint) as f:
            if f.plain and dedup is None:
                yield from _plain_chunks(f, chunk_bytes, max_line, hint)
                continue
            lines = f.lines()
            if dedup is not None:
                lines = unique_lines(lines, dedup, max_line, str(path), _document_hint(budget))
            yield from _line_chunks(f, lines, chunk_bytes, max_line, hint)


def _plain_chunks(f: TextFile, chunk_bytes: int, max_line: int | None, hint: str) -> Iterator[_Chunk]:
    """A plain text file's bytes cut after the last newline of each block read."""
    offset, line, read = 0, 1, 0
    carry: list[bytes] = []  # the start of a line whose newline is not read yet
    held = 0
    while True:
        block = f.read(chunk_bytes)
        if not block:
            break
        cut = block.rfind(b"\n")
        if cut < 0:
            carry.append(block)
            held += len(block)
            if max_line is not None and held > max_line:
                raise PtmError(f"{f.path}: line {line} is longer than {max_line:,} bytes{hint}")
            continue
        head = b"".join([*carry, block[: cut + 1]])
        carry, held = [block[cut + 1 :]], len(block) - cut - 1
        pos = f.consumed()
        yield _Chunk(str(f.path), offset, line, head, False, pos - read)
        offset += len(head)
        line += head.count(b"\n")
        read = pos
    yield _Chunk(str(f.path), offset, line, b"".join(carry), True, f.size - read)


def _line_chunks(f: TextFile, lines: Iterator[str], chunk_bytes: int, max_line: int | None,
                 hint: str) -> Iterator[_Chunk]:
    """``lines`` (each ending in a newline) packed into blocks of ``chunk_bytes`` or a little more."""
    offset, line, read = 0, 1, 0
    held: list[bytes] = []
    size = 0
    for text in lines:
        data = text.encode("utf-8")  # textfiles yields only encodable text
        if max_line is not None and len(data) > max_line:
            raise PtmError(f"{f.path}: line {line + len(held)} of its text is longer than {max_line:,} bytes{hint}")
        held.append(data)
        size += len(data)
        if size >= chunk_bytes:
            head = b"".join(held)
            pos = f.consumed()
            yield _Chunk(str(f.path), offset, line, head, False, pos - read)
            offset, line, read = offset + len(head), line + len(held), pos
            held, size = [], 0
    yield _Chunk(str(f.path), offset, line, b"".join(held), True, f.size - read)


def _document_hint(budget: int | None) -> str:
    """How a document too long for the memory budget to hold for --dedup is explained."""
    if budget is None:
        return ""
    return (f" within --memory-budget {memory.format_size(budget)}: separate its documents by blank lines, or give "
            f"a larger --memory-budget")


def _limit_hint(max_line: int | None, budget: int | None) -> str:
    """How a line too long for the memory budget is explained (after the limit itself)."""
    if max_line is None:
        return ""
    return (f", the longest line --memory-budget {memory.format_size(budget or 0)} leaves room for (one line is "
            f"one sentence: break the text into lines, or give a larger --memory-budget)")


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
    memory_budget: int | str | None = None,
    shard_tokens: int | str | None = None,
    link: str | None = None,
    fmt: TextFormat | None = None,
    dedup: str | None = None,
    dedup_threshold: float = DEFAULT_THRESHOLD,
    language: str | None = None,
    labels: dict[str, Any] | None = None,
    verify: Callable[[Path], None] | None = None,
) -> Corpus:
    """Tokenize text ``files`` into a memory-mapped corpus in ``out_dir`` and open it.

    One line is one sentence; a blank line or the end of a file ends a document; lines that
    encode to no token are skipped.  ``workers`` defaults to the number of CPU cores.
    ``segmenter``: a word segmenter name (``"jieba"``) or callable refining the word starts
    (see :mod:`ptmkit.tokenization.segmenters`); a callable must be picklable when the
    platform cannot fork.  ``user_dict``: a jieba user dictionary (one word per line, optionally
    with a frequency and a POS tag) for ``segmenter="jieba"``; its SHA-256 goes into ``meta.json``.

    ``memory_budget`` (bytes, or a size such as ``"512M"``): the most memory the text in flight
    may take in all processes together (:mod:`ptmkit.data.memory`; ``chunk_bytes`` is then an
    upper bound of the block size, and without an explicit ``workers`` fewer workers are used
    when the budget cannot feed them all).  ``shard_tokens`` (a count, or ``"50M"``): write
    shards of about that many tokens under ``out_dir/shards/`` with the index in
    ``out_dir/meta.json``; the result opens as a :class:`~ptmkit.data.corpus.ShardedCorpus`.
    ``link``: a knowledge graph (``"wordnet"`` or a graph directory) every word is linked to,
    recorded beside the word starts (:mod:`ptmkit.knowledge.corpus_entities`).

    ``files`` may be plain text, JSON Lines, CSV/TSV or Parquet, compressed by suffix (gzip, bzip2,
    xz, zstd): :mod:`ptmkit.data.textfiles`; ``fmt`` says where their text is (default: the field or
    column ``text``), and a row is one document.  ``dedup``: ``"exact"`` or ``"near"`` drops the
    documents that repeat an earlier one (:mod:`ptmkit.data.dedup`; ``dedup_threshold``: the Jaccard
    similarity of word 5-grams from which ``near`` drops), recorded in ``meta.json`` as ``dedup``.

    ``language``: the language of the text, one the tokenizer was trained on
    (:mod:`ptmkit.tokenization.languages`), recorded in ``meta.json``; a multilingual pre-training
    joins one corpus per language.  ``labels``: more keys for ``meta.json``; ``verify(scratch)``
    checks the finished corpus before it is published (:mod:`ptmkit.data.parallel`'s pairs).
    """
    paths = [Path(f) for f in files]
    if not paths:
        raise PtmError("no input files given")
    for p in paths:
        require_file(p, "input file")
        describe(p)  # an archive or an unknown compression fails before any work
    fmt = fmt or TextFormat()
    dedup_filter = Dedup(dedup, dedup_threshold) if dedup is not None else None
    budget = memory.parse_size(memory_budget) if memory_budget is not None else None
    shard_size = memory.parse_count(shard_tokens) if shard_tokens is not None else None
    if chunk_bytes < 1:
        raise PtmError(f"chunk_bytes must be positive, got {chunk_bytes}")
    if workers is not None and workers < 1:
        raise PtmError(f"workers must be at least 1, got {workers}")
    if link is not None and shard_tokens is not None:
        raise PtmError("--link records entity links in one corpus directory; prepare without --shard-size")
    graph = load_graph(link) if link is not None else None  # an unknown graph fails before any work
    cores = workers or os.cpu_count() or 1
    plan = memory.plan(budget, cores, workers is not None, chunk_bytes) if budget is not None else None
    seg = get_segmenter(segmenter, user_dict)  # an unknown or uninstalled segmenter fails before any work
    seg_record = _segmenter_record(segmenter, user_dict)
    tok_path = None if isinstance(tokenizer, Tokenizer) else Path(tokenizer)
    out = Path(out_dir)
    inputs = [*paths, tok_path]
    outputs.check(out, "corpus", inputs, overwrite)  # before the tokenizer is even read
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
    labels = dict(labels or {})
    if language is not None:
        check_language(tok.languages, language, "--language")
        labels["language"] = language
    for code in labels.get("parallel", ()):
        check_language(tok.languages, code, "--parallel")
    if plan is not None:
        chunk_bytes = plan.block_bytes
        log.info("--memory-budget %s: %d worker(s), blocks of %s, %d in flight (about %s at most)",
                 memory.format_size(plan.budget), plan.workers, memory.format_size(plan.block_bytes), plan.in_flight,
                 memory.format_size(plan.estimate))
    n_blocks = sum(max(1, -(-p.stat().st_size // chunk_bytes)) for p in paths)
    workers = max(1, min(plan.workers if plan is not None else cores, n_blocks))
    run = _Run(chunk_bytes, workers, plan, shard_size, progress, seg, seg_record, fmt, dedup_filter, labels)

    # Written into a scratch directory, published into ``out`` only when complete; with
    # overwrite, the previous corpus files are replaced then (the user's other files stay).
    with outputs.staged(out, "corpus", inputs, overwrite) as tmp:
        _write_corpus(tmp, paths, tok, run)
        if verify is not None:
            verify(tmp)
        if graph is not None:
            index = write_entities(tmp, graph, link)
            log.info("--link %s: %d of %d words linked (%d spans, %d distinct entities)", link,
                     index["linked_words"], index["words"], index["spans"], index["entities"])
    return Corpus.open(out)


@dataclass(frozen=True)
class _Run:
    """How one prepare runs: block size, processes, the memory plan, shards, progress, segmenter,
    where the text is in structured files, and the duplicate filter."""

    chunk_bytes: int
    workers: int
    plan: memory.MemoryPlan | None
    shard_tokens: int | None
    progress: bool
    segmenter: str | Segmenter | None
    seg_record: dict | str | None
    fmt: TextFormat = TextFormat()
    dedup: Dedup | None = None
    labels: dict[str, Any] | None = None  # more keys for meta.json (language, parallel)

    @property
    def in_flight(self) -> int:
        return 2 * self.workers if self.plan is None else min(self.plan.in_flight, 2 * self.workers)

    def settings(self, dtype: np.dtype) -> _Settings:
        return _Settings(np.dtype(dtype).name, self.plan.encode_bytes if self.plan is not None else None)


def _segmenter_record(segmenter: str | Segmenter | None, user_dict: str | os.PathLike[str] | None) -> dict | str | None:
    """What ``meta.json`` records of the segmenter: its name, with a user dictionary its path and hash."""
    name = segmenter if isinstance(segmenter, str) or segmenter is None else repr(segmenter)
    if user_dict is None:
        return name
    return {"name": name, "user_dict": str(Path(user_dict).resolve()), "user_dict_sha256": sha256(Path(user_dict))}


def _write_corpus(root: Path, paths: list[Path], tok: Tokenizer, run: _Run) -> None:
    """Tokenize ``paths`` into the corpus files (or shards) in ``root`` (open files are closed on failure)."""
    writer: CorpusWriter | ShardWriter | None = None
    try:
        tok_file = tok.save(root / TOKENIZER)
        dtype = token_dtype(tok.vocab_size)
        common = {**common_meta(paths, tok, tok_file, dtype, run.seg_record, run.fmt), **(run.labels or {})}
        if run.shard_tokens is not None:
            writer = ShardWriter(root, dtype, tok.unk_id, run.shard_tokens, tok_file, common)
        else:
            writer = CorpusWriter(root, dtype, tok.unk_id)
        total_bytes = sum(p.stat().st_size for p in paths)
        bar = progress_display(total_bytes, desc="prepare", unit="B", unit_scale=True, disable=not run.progress)
        max_line = run.plan.max_line if run.plan is not None else None
        chunks = _chunks(paths, run.chunk_bytes, max_line, run.plan.budget if run.plan is not None else None,
                         run.fmt, run.dedup)
        meter = memory.Meter()
        with bar:
            for enc in _encode_all(chunks, tok, run, dtype, meter):
                writer.add(enc)
                bar.update(enc.n_bytes)
        writer.close()
        if run.plan is not None:
            log.info("prepare: peak memory for the text in flight %s, budget %s", meter.describe(),
                     memory.format_size(run.plan.budget))
        else:
            log.debug("prepare: peak memory for the text in flight %s, no budget", meter.describe())
        if run.dedup is not None:
            log.info("%s", run.dedup.describe())
        counts = writer.counts()
        if counts["n_tokens"] == 0:
            raise PtmError(f"no tokens in {', '.join(map(str, paths))}: the corpus is empty")
        writer.write_meta({**common, "dedup": run.dedup.record()} if run.dedup is not None else common)
        n_unk, n_tokens = counts["unk_tokens"], counts["n_tokens"]
        if n_unk > UNK_WARNING * n_tokens:
            log.warning(
                "%.1f%% of the tokens (%d of %d) are [UNK]: the tokenizer does not cover this text; train one on it "
                "(ptm tokenizer train; --kind char for Chinese)",
                100 * n_unk / n_tokens, n_unk, n_tokens)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def _encode_all(chunks: Iterator[_Chunk], tok: Tokenizer, run: _Run, dtype: np.dtype,
                meter: memory.Meter | None = None) -> Iterator[Encoded]:
    """Encoded chunks in input order; at most ``run.in_flight`` chunks in flight; the workers'
    peak memory goes to ``meter``."""
    global _TOKENIZER, _SEGMENTER, _SETTINGS
    settings = run.settings(dtype)
    if run.workers <= 1:
        _TOKENIZER = tok  # in-process: the Rust encoder parallelises each batch itself
        _SEGMENTER = get_segmenter(run.segmenter)
        _SETTINGS = settings
        _warm_up()
        if meter is not None:
            meter.start()
        try:
            yield from map(_encode_chunk, chunks)
        finally:
            _TOKENIZER = _SEGMENTER = None
        return
    # "fork" needs no importable __main__ (scripts and notebooks work unguarded); ``tokenizers``
    # notices the fork and keeps its thread pool off in the children.
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(run.workers, initializer=_init_worker, initargs=(tok.to_json(), run.segmenter, settings)) as pool:
        if meter is not None:
            meter.start()
        pending: collections.deque = collections.deque()
        for chunk in chunks:
            pending.append(pool.apply_async(_encode_task, (chunk,)))
            del chunk  # the pool holds it until a worker takes it
            if len(pending) >= run.in_flight:
                yield _received(pending.popleft().get(), meter)
        while pending:
            yield _received(pending.popleft().get(), meter)


def _received(result: tuple[Encoded, int, int | None], meter: memory.Meter | None) -> Encoded:
    enc, pid, peak = result
    if meter is not None:
        meter.worker(pid, peak)
    return enc
