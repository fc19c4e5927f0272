"""Word vocabulary and integer corpus for the static-embedding models (word2vec, fastText,
GloVe, SVD-PPMI and, with ``<unk>`` and ``</s>`` added, the NNLM's closed vocabulary).

Text is whitespace-tokenised, one line = one sentence (as word2vec's and fastText's tools,
gensim's ``LineSentence``).  Files are streamed in chunks of ``CHUNK_BYTES``; every per-token
step (splitting, counting, id lookup) runs inside C-level iterators (``str.split``,
``Counter.update``, ``map(dict.get, ...)`` consumed by ``np.fromiter``), never as Python
bytecode per token.  Measured (single thread, Brown corpus, 1.16M words, on a 2-core machine
shared with other jobs): counting 1.7M words/s, encoding to ids 1.4M words/s.  The result is
cached as ``.npy`` so a second run on the same text and vocabulary settings skips both.

The cache is keyed by content: a BLAKE2b digest of every input file's bytes (streamed, 1 MiB at a
time) and the vocabulary settings.  No stat (path, size, mtime) decides on its own that a file is
unchanged, since a file rewritten with the same size and its mtime restored (``cp -p``, a restore,
``touch -r``) would then be served another text's vocabulary.  Hashing every input on every use
costs one read of the text, far below counting and encoding it (``benchmarks/bench_content_hash.py``;
the figures are in docs/first-generation.md).  A cached entry whose arrays disagree with each other
(a damaged cache) is rebuilt.

The encoded corpus keeps only in-vocabulary words (words below ``min_count`` are dropped
before windows are formed, as in word2vec.c and gensim) and splits sentences longer than
``max_sentence_len`` words (gensim's 10,000-word limit); a language model instead maps them to
its ``<unk>`` id and keeps every sentence whole (``encode(..., unk=ID, max_sentence_len=None)``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ptmkit import paths
from ptmkit.data.textfiles import TextFile
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_dir

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 24  # 16 MiB of text per chunk: bounded memory, few Python round trips
CACHE_VERSION = 2  # 2: keyed by the inputs' content (1: by path, size and mtime)
HASH_BLOCK = 1 << 20  # bytes read per step when hashing an input

Sentences = Iterable[Sequence[str]]
TextInput = "str | os.PathLike | Sequence[str | os.PathLike] | Sentences"


@dataclass
class Vocab:
    """Frequency-sorted vocabulary.

    words: [V] most frequent first (ties keep first-occurrence order, like gensim).
    counts: int64 [V] corpus counts.
    """

    words: list[str]
    counts: np.ndarray
    index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    @property
    def total(self) -> int:
        """Number of in-vocabulary tokens in the corpus."""
        return int(self.counts.sum())


@dataclass
class IdCorpus:
    """A corpus as vocabulary ids.

    ids: int32 [N] in-vocabulary tokens, sentences concatenated.
    sentences: int64 [S+1] offsets of sentence starts in ``ids`` (``ids[sentences[s]:sentences[s+1]]``).
    """

    ids: np.ndarray
    sentences: np.ndarray

    @property
    def n_words(self) -> int:
        return int(self.ids.shape[0])

    @property
    def n_sentences(self) -> int:
        return int(self.sentences.shape[0] - 1)


# ----------------------------------------------------------------------------- reading


def _as_files(data: object) -> list[Path] | None:
    """The list of files in ``data``, or ``None`` when ``data`` is an in-memory corpus."""
    if isinstance(data, (str, os.PathLike)):
        return [Path(data)]
    if isinstance(data, (list, tuple)) and data and all(isinstance(x, (str, os.PathLike)) for x in data):
        return [Path(x) for x in data]
    return None


def iter_line_chunks(files: Sequence[Path], lowercase: bool = False) -> Iterator[list[str]]:
    """Yield lists of text lines, about ``CHUNK_BYTES`` at a time, from UTF-8 ``files``: plain text
    or, read as their plain text copies, JSON Lines, CSV/TSV, Parquet and compressed files (the
    field or column ``text``; :mod:`ptmkit.data.textfiles`)."""
    for path in files:
        if not path.is_file():
            raise PtmError(f"corpus file {path} does not exist")
        with TextFile(path) as f:
            if not f.plain:
                yield from _structured_line_chunks(f, lowercase)
                continue
            rest = b""
            offset = 0
            while True:
                block = f.read(CHUNK_BYTES)
                if not block:
                    break
                block = rest + block
                cut = block.rfind(b"\n")
                if cut < 0:
                    rest = block
                    continue
                rest, block = block[cut + 1 :], block[: cut + 1]
                yield _decode(block, path, offset, lowercase)
                offset += len(block)
            if rest:
                yield _decode(rest, path, offset, lowercase)


def _structured_line_chunks(f: TextFile, lowercase: bool) -> Iterator[list[str]]:
    """The lines of a structured file's text (without their newlines), about ``CHUNK_BYTES`` at a time."""
    lines: list[str] = []
    size = 0
    for line in f.lines():
        lines.append(line.lower()[:-1] if lowercase else line[:-1])
        size += len(line)
        if size >= CHUNK_BYTES:
            yield lines
            lines, size = [], 0
    if lines:
        yield lines


def _decode(block: bytes, path: Path, offset: int, lowercase: bool) -> list[str]:
    if b"\x00" in block:
        raise PtmError(f"{path} looks like a binary file (NUL byte near offset {offset}); give a UTF-8 text corpus")
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PtmError(
            f"{path} is not UTF-8 text (bad byte at offset {offset + exc.start}); convert it, e.g. with iconv"
        ) from None
    if lowercase:
        text = text.lower()
    return text.split("\n")


def _iter_sentence_chunks(data: object, lowercase: bool) -> Iterator[list[list[str]]]:
    """Yield lists of tokenised sentences (lists of words)."""
    files = _as_files(data)
    if files is not None:
        for lines in iter_line_chunks(files, lowercase):
            yield list(map(str.split, lines))
        return
    batch: list[list[str]] = []
    for sent in data:  # type: ignore[union-attr]
        if isinstance(sent, str):
            raise PtmError("an in-memory corpus must be a list of tokenised sentences (lists of words)")
        sent = [w.lower() for w in sent] if lowercase else list(sent)
        batch.append(sent)
        if len(batch) >= 100_000:
            yield batch
            batch = []
    if batch:
        yield batch


# ----------------------------------------------------------------------------- vocabulary


def count_words(data: object, lowercase: bool = False) -> Counter:
    """Count every word of ``data`` (files or tokenised sentences)."""
    return count_corpus(data, lowercase)[0]


def count_corpus(data: object, lowercase: bool = False, max_sentences: int | None = None) -> tuple[Counter, int]:
    """Word counts of ``data`` and the number of (non-empty) sentences counted.

    With ``max_sentences`` only the first ``max_sentences`` sentences are counted (a language
    model holds out the rest for validation, which must not shape its vocabulary).
    """
    counter: Counter = Counter()
    n_sent = 0
    for sents in _iter_sentence_chunks(data, lowercase):
        sents = [s for s in sents if s]  # a blank line is no sentence
        if max_sentences is not None:
            sents = sents[: max(0, max_sentences - n_sent)]
        n_sent += len(sents)
        counter.update(itertools.chain.from_iterable(sents))  # C-level counting
        if max_sentences is not None and n_sent >= max_sentences:
            break
    return counter, n_sent


def vocab_from_counts(counter: Counter, min_count: int = 5, max_vocab: int | None = None) -> Vocab:
    """Keep words with ``count >= min_count``, most frequent first, at most ``max_vocab``."""
    if not counter:
        raise PtmError("the corpus is empty: no words found")
    kept = [(w, c) for w, c in counter.items() if c >= min_count]
    kept.sort(key=lambda wc: -wc[1])  # stable: ties keep first-occurrence order
    if max_vocab is not None:
        kept = kept[: int(max_vocab)]
    if not kept:
        top = max(counter.values())
        raise PtmError(
            f"the vocabulary is empty: no word occurs at least min_count={min_count} times "
            f"(the most frequent occurs {top} times); lower min_count or give a larger corpus"
        )
    words = [w for w, _ in kept]
    counts = np.fromiter((c for _, c in kept), dtype=np.int64, count=len(kept))
    return Vocab(words, counts)


def build_vocab(data: object, min_count: int = 5, max_vocab: int | None = None, lowercase: bool = False) -> Vocab:
    return vocab_from_counts(count_words(data, lowercase), min_count, max_vocab)


# ----------------------------------------------------------------------------- encoding


def encode(
    data: object, vocab: Vocab, lowercase: bool = False, max_sentence_len: int | None = 10_000, unk: int | None = None
) -> IdCorpus:
    """Map ``data`` to vocabulary ids (int32), dropping empty sentences.

    Out-of-vocabulary words are dropped (word2vec and the co-occurrence models: they never enter
    a window), or become id ``unk`` when it is given (a language model predicts them as one
    symbol).  Sentences longer than ``max_sentence_len`` words are split (None: never).
    """
    get = vocab.index.get
    id_parts: list[np.ndarray] = []
    len_parts: list[np.ndarray] = []
    for sents in _iter_sentence_chunks(data, lowercase):
        lens = np.fromiter(map(len, sents), dtype=np.int64, count=len(sents))
        n = int(lens.sum())
        if n == 0:
            continue
        words = itertools.chain.from_iterable(sents)
        ids = np.fromiter(map(get, words, itertools.repeat(-1 if unk is None else unk)), dtype=np.int32, count=n)
        if unk is not None:
            id_parts.append(ids)
            len_parts.append(lens[lens > 0])
            continue
        keep = ids >= 0
        sent_of = np.repeat(np.arange(len(sents)), lens)
        kept_lens = np.bincount(sent_of[keep], minlength=len(sents))
        id_parts.append(ids[keep])
        len_parts.append(kept_lens[kept_lens > 0])
    if not id_parts:
        raise PtmError("the corpus is empty" if unk is not None else
                       "the corpus is empty after removing out-of-vocabulary words")
    ids = np.concatenate(id_parts)
    lens = _split_long(np.concatenate(len_parts), max_sentence_len)
    sentences = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=sentences[1:])
    return IdCorpus(ids, sentences)


def _split_long(lens: np.ndarray, limit: int | None) -> np.ndarray:
    """Split sentence lengths above ``limit`` into pieces of ``limit`` (+ a remainder); None: no limit."""
    if limit is None or lens.size == 0 or lens.max() <= limit:
        return lens
    pieces = -(-lens // limit)
    out = np.full(int(pieces.sum()), limit, dtype=np.int64)
    last = np.cumsum(pieces) - 1
    out[last] = lens - (pieces - 1) * limit
    return out


# ----------------------------------------------------------------------------- cache


def content_digest(path: Path) -> str:
    """BLAKE2b (256-bit) hex digest of ``path``'s bytes, read ``HASH_BLOCK`` bytes at a time into
    one reused buffer."""
    h = hashlib.blake2b(digest_size=32)
    buf = bytearray(HASH_BLOCK)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def _cache_key(files: Sequence[Path], **params: object) -> str:
    """Cache key of ``files`` (in order) read with the vocabulary settings ``params``: their
    content, never their paths or stats (the same text under another name shares the entry)."""
    blob = json.dumps({"v": CACHE_VERSION, "files": [content_digest(p) for p in files], **params}, sort_keys=True)
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


def cache_root() -> Path:
    return paths.home() / "cache" / "static-corpus"


def load_corpus(
    data: object,
    min_count: int = 5,
    max_vocab: int | None = None,
    lowercase: bool = False,
    max_sentence_len: int = 10_000,
    cache: bool = True,
) -> tuple[Vocab, IdCorpus]:
    """Vocabulary + id corpus of ``data`` (files or tokenised sentences).

    For files with ``cache=True`` the result is stored under ``$PTMKIT_HOME/cache/static-corpus/KEY``
    (KEY = hash of the files' contents and the vocabulary settings, see :func:`_cache_key`) and reused.
    """
    files = _as_files(data)
    key_dir = None
    if files is not None:
        for p in files:
            if not p.is_file():
                raise PtmError(f"corpus file {p} does not exist")
        if cache:
            key = _cache_key(
                files, min_count=min_count, max_vocab=max_vocab, lowercase=lowercase, max_len=max_sentence_len
            )
            key_dir = cache_root() / key
            if (key_dir / "DONE").exists() and (cached := _read_cache(key_dir)) is not None:
                return cached
    vocab = build_vocab(data, min_count, max_vocab, lowercase)
    corpus = encode(data, vocab, lowercase, max_sentence_len)
    if key_dir is not None:
        try:
            _write_cache(key_dir, vocab, corpus)
        except (OSError, PtmError) as exc:  # a read-only or full cache must not stop training
            log.warning("could not cache the encoded corpus in %s: %s", key_dir, exc)
    return vocab, corpus


def _write_cache(key_dir: Path, vocab: Vocab, corpus: IdCorpus) -> None:
    # A cache: rebuilt if lost, so no fsync (durable=False).
    with atomic_dir(key_dir, durable=False) as tmp:
        np.save(tmp / "ids.npy", corpus.ids)
        np.save(tmp / "sentences.npy", corpus.sentences)
        np.save(tmp / "counts.npy", vocab.counts)
        (tmp / "words.txt").write_text("\n".join(vocab.words) + "\n", encoding="utf-8")
        (tmp / "DONE").write_text("")


def _read_cache(key_dir: Path) -> tuple[Vocab, IdCorpus] | None:
    """The cached vocabulary and corpus, or ``None`` (logged) when the entry cannot be read or its
    arrays disagree: words [V] and counts int64 [V], ids int32 [N] in ``0..V-1``, sentences int64
    [S+1] rising from 0 to N."""
    try:
        words = (key_dir / "words.txt").read_text(encoding="utf-8").split("\n")[:-1]
        counts = np.load(key_dir / "counts.npy")
        ids = np.load(key_dir / "ids.npy", mmap_mode="r")
        sentences = np.load(key_dir / "sentences.npy")
    except (OSError, ValueError, EOFError) as exc:
        log.warning("the cached encoded corpus %s cannot be read (%s); encoding the text again", key_dir, exc)
        return None
    ids = np.ascontiguousarray(ids)
    problem = (
        "counts.npy is not int64 [words]" if counts.dtype != np.int64 or counts.shape != (len(words),)
        else "ids.npy is not int32 [N]" if ids.dtype != np.int32 or ids.ndim != 1
        else "sentences.npy is not int64 offsets from 0 to N" if (
            sentences.dtype != np.int64 or sentences.ndim != 1 or sentences.size < 1 or sentences[0] != 0
            or sentences[-1] != ids.shape[0] or bool(np.any(np.diff(sentences) < 0)))
        else "ids.npy holds ids outside the vocabulary" if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= len(words))
        else ""
    )
    if problem:
        log.warning("the cached encoded corpus %s is damaged (%s); encoding the text again", key_dir, problem)
        return None
    log.info("using the cached encoded corpus %s", key_dir)
    return Vocab(words, counts), IdCorpus(ids, sentences)
