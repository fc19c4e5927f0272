"""Corpus files in the formats people have, read as the lines of plain text.

A corpus file is plain UTF-8 text (one sentence per line, a blank line between documents), JSON
Lines (``.jsonl``, ``.ndjson``, ``.json``: one object a line, its text in ``field``), CSV or TSV
(``.csv``, ``.tsv``: a header row, the text in ``column``) or Parquet (``.parquet``, ``.pq``: the
text in ``field``).  Any but Parquet (which compresses itself) may be compressed, named by a
second suffix: ``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``/``.zstd`` (``corpus.jsonl.gz``,
``wiki.txt.zst``).  A file with another suffix is plain text.

:class:`TextFile` reads one such file as a stream, never whole: :meth:`TextFile.read` gives the
decompressed bytes of a plain text file in blocks, :meth:`TextFile.lines` the lines of any file
as the plain text it stands for.  A row of JSON Lines, CSV or Parquet is one document: its
non-blank lines, then a blank line (a blank line inside the text does not split it).  So a
structured file reads exactly as its plain text copy would, and everything that reads text
(``ptm prepare``, tokenizer training) reads every format alike.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ptmkit.errors import PtmError

TEXT, JSONL, CSV, TSV, PARQUET = "text", "jsonl", "csv", "tsv", "parquet"
FORMATS = {".jsonl": JSONL, ".ndjson": JSONL, ".json": JSONL, ".csv": CSV, ".tsv": TSV, ".parquet": PARQUET,
           ".pq": PARQUET}
COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "xz", ".zst": "zstd", ".zstd": "zstd"}
# Suffixes of compressions and archives that are not read (refused by name rather than read as text).
UNSUPPORTED = (".zip", ".7z", ".rar", ".lz4", ".br", ".lz", ".lzo", ".z", ".sz", ".snappy", ".tar", ".tgz",
               ".tbz2", ".txz", ".zz")
# Leading bytes of compressed data, to catch a compressed file named as plain text.
MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"PK\x03\x04", "zip"),
         (b"7z\xbc\xaf\x27\x1c", "7z"), (b"\x04\x22\x4d\x18", "lz4"), (b"PAR1", "parquet"))
_SUFFIX_OF = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst", "parquet": ".parquet"}
_BOM = b"\xef\xbb\xbf"
PARQUET_BATCH_ROWS = 256  # rows decoded at once: bounded by the documents, not the row group


@dataclass(frozen=True)
class TextFormat:
    """Where the text is in a structured file: ``field`` of a JSON object or Parquet row,
    ``column`` (by its header name) of a CSV/TSV row."""

    field: str = "text"
    column: str = "text"

    def record(self, kind: str) -> dict[str, str]:
        """What ``meta.json`` notes of the format of a file of ``kind``."""
        if kind in (JSONL, PARQUET):
            return {"field": self.field}
        return {"column": self.column} if kind in (CSV, TSV) else {}


def detect(path: str | Path) -> tuple[str, str | None]:
    """``(kind, compression)`` of ``path`` by its suffixes: kind in text, jsonl, csv, tsv, parquet;
    compression gzip, bzip2, xz, zstd or None.  An archive or a compression not read is a
    :class:`PtmError`."""
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    compression = None
    if suffixes and suffixes[-1] in COMPRESSIONS:
        compression = COMPRESSIONS[suffixes.pop()]
    if suffixes and suffixes[-1] in UNSUPPORTED:  # corpus.zip, and corpus.tar.gz too
        raise PtmError(f"{p}: {suffixes[-1]} files are not read; decompress it, or recompress it as one of "
                       f"{', '.join(sorted(set(_SUFFIX_OF[c] for c in COMPRESSIONS.values())))} (e.g. `zstd`)")
    kind = FORMATS.get(suffixes[-1], TEXT) if suffixes else TEXT
    if kind == PARQUET and compression is not None:
        raise PtmError(f"{p}: a Parquet file compresses its own columns and is read in place; decompress it")
    return kind, compression


def describe(path: str | Path) -> str:
    """``jsonl``, ``text+gzip``, ...: the kind and compression of ``path`` in one word."""
    kind, compression = detect(path)
    return kind if compression is None else f"{kind}+{compression}"


class TextFile:
    """One corpus file opened for streaming (a context manager).

    ``max_line``: the longest line (bytes) read whole, None for no limit; longer is a
    :class:`PtmError` naming the file and line (``limit_hint`` says how to lift it).
    """

    def __init__(self, path: str | Path, fmt: TextFormat = TextFormat(), max_line: int | None = None,
                 limit_hint: str = "") -> None:
        self.path = Path(path)
        self.fmt = fmt
        self.max_line = max_line
        self.limit_hint = limit_hint
        self.kind, self.compression = detect(self.path)
        self.size = self.path.stat().st_size
        self._raw: IO[bytes] | None = None
        self._stream: IO[bytes] | None = None
        self._rows_done = 0.0  # Parquet: the share of the rows read

    @property
    def plain(self) -> bool:
        """Plain text (maybe compressed): :meth:`read` gives its bytes as they are."""
        return self.kind == TEXT

    def __enter__(self) -> TextFile:
        if self.kind != PARQUET:
            self._raw = open(self.path, "rb")
            self._stream = self._open_stream(self._raw)
        return self

    def __exit__(self, *exc: Any) -> None:
        for f in (self._stream, self._raw):
            if f is not None:
                f.close()
        self._stream = self._raw = None

    def consumed(self) -> int:
        """Bytes of the file on disk read so far (for progress; compressed bytes when compressed)."""
        if self.kind == PARQUET:
            return int(self.size * self._rows_done)
        return self._raw.tell() if self._raw is not None and not self._raw.closed else self.size

    # ------------------------------------------------------------------ plain bytes
    def read(self, n: int) -> bytes:
        """Up to ``n`` decompressed bytes of a plain text file (b"" at its end)."""
        assert self._stream is not None and self.plain
        try:
            return self._stream.read(n)
        except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
            raise self._damaged(exc) from None
        except Exception as exc:  # zstandard.ZstdError derives from Exception alone
            if type(exc).__name__ == "ZstdError":
                raise self._damaged(exc) from None
            raise

    # ------------------------------------------------------------------ lines
    def lines(self) -> Iterator[str]:
        """The file as plain text, line by line, each line ending in ``"\\n"``: a text file's own
        lines (a line without a final newline gets one); a row of the other formats as its
        non-blank lines, then ``"\\n"`` (the blank line that ends a document)."""
        if self.kind == TEXT:
            yield from self._text_lines()
        else:
            rows = {JSONL: self._jsonl_rows, CSV: self._csv_rows, TSV: self._csv_rows, PARQUET: self._parquet_rows}
            for text, where in rows[self.kind]():
                yield from _document_lines(self._checked(text, where))

    def _text_lines(self) -> Iterator[str]:
        for number, raw in enumerate(self._byte_lines(), 1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if b"\0" in raw:
                raise PtmError(f"{self.path}: NUL byte on line {number}; this looks like a binary file, not UTF-8 text")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PtmError(f"{self.path}: invalid UTF-8 on line {number}: {exc.reason}; convert the file to "
                               f"UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from None
            yield line if line.endswith("\n") else line + "\n"

    def _byte_lines(self) -> Iterator[bytes]:
        """The raw lines, each read with at most ``max_line`` bytes held."""
        assert self._stream is not None
        limit = -1 if self.max_line is None else self.max_line + 1
        number = 0
        while True:
            try:
                raw = self._stream.readline(limit)
            except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
                raise self._damaged(exc) from None
            except Exception as exc:
                if type(exc).__name__ == "ZstdError":
                    raise self._damaged(exc) from None
                raise
            if not raw:
                return
            number += 1
            if self.max_line is not None and len(raw) > self.max_line and not raw.endswith(b"\n"):
                raise PtmError(f"{self.path}: line {number} is longer than {self.max_line:,} bytes{self.limit_hint}")
            yield raw

    def _jsonl_rows(self) -> Iterator[tuple[Any, str]]:
        field = self.fmt.field
        for number, raw in enumerate(self._byte_lines(), 1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise PtmError(f"{self.path}: line {number} is not valid JSON ({exc.msg} at character "
                               f"{exc.pos + 1}); JSON Lines hold one object a line") from None
            except UnicodeDecodeError as exc:
                raise PtmError(f"{self.path}: invalid UTF-8 on line {number}: {exc.reason}; convert the file to "
                               f"UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from None
            if not isinstance(row, dict):
                raise PtmError(f"{self.path}: line {number} is a JSON {type(row).__name__}, not an object; "
                               f"JSON Lines hold one object a line with the text in a field")
            if field not in row:
                raise PtmError(f"{self.path}: line {number} has no field {field!r} (its fields: "
                               f"{', '.join(map(str, row)) or 'none'}); give the text's field with --field NAME")
            yield row[field], f"line {number}"

    def _csv_rows(self) -> Iterator[tuple[Any, str]]:
        assert self._stream is not None
        # csv's default limit (128 KiB) would refuse a long document; under a budget a field is
        # held whole, so the budget's line bound is the limit (csv keeps one limit per process)
        csv.field_size_limit(self.max_line or sys.maxsize)
        text = io.TextIOWrapper(self._stream, encoding="utf-8-sig", newline="")
        reader = csv.reader(text, dialect="excel-tab" if self.kind == TSV else "excel")
        try:
            header = next(reader, None)
            if header is None:
                return
            if self.fmt.column not in header:
                raise PtmError(f"{self.path}: no column {self.fmt.column!r} in the header row (its columns: "
                               f"{', '.join(header) or 'none'}); give the text's column with --column NAME")
            at = header.index(self.fmt.column)
            for row in reader:
                if not row:
                    continue
                if at >= len(row):
                    raise PtmError(f"{self.path}: line {reader.line_num} has {len(row)} columns, the header "
                                   f"{len(header)}; no {self.fmt.column!r} there")
                yield row[at], f"line {reader.line_num}"
        except csv.Error as exc:
            raise PtmError(f"{self.path}: line {reader.line_num} is not valid {self.kind.upper()} ({exc})"
                           f"{self.limit_hint if 'field larger' in str(exc) else ''}") from None
        except UnicodeDecodeError as exc:
            raise PtmError(f"{self.path}: invalid UTF-8 near line {reader.line_num + 1}: {exc.reason}; convert the "
                           f"file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from None
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise self._damaged(exc) from None
        finally:
            text.detach()  # the stream is closed by __exit__, once

    def _parquet_rows(self) -> Iterator[tuple[Any, str]]:
        pq = _parquet()
        try:
            pf = pq.ParquetFile(self.path)
        except Exception as exc:  # pyarrow.ArrowInvalid: not a Parquet file
            raise PtmError(f"{self.path}: not a readable Parquet file ({exc})") from None
        names = pf.schema_arrow.names
        if self.fmt.field not in names:
            raise PtmError(f"{self.path}: no field {self.fmt.field!r} (its fields: {', '.join(names) or 'none'}); "
                           f"give the text's field with --field NAME")
        total, row = max(1, pf.metadata.num_rows), 0
        try:
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[self.fmt.field]):
                for value in batch.column(0).to_pylist():
                    row += 1
                    yield value, f"row {row}"
                self._rows_done = row / total
        finally:
            pf.close()

    # ------------------------------------------------------------------ helpers
    def _checked(self, text: Any, where: str) -> str:
        """A row's text, refused unless a string of UTF-8-encodable text (None: an empty row)."""
        if text is None:
            return ""
        if not isinstance(text, str):
            raise PtmError(f"{self.path}: {where}: {self._name} is not text (it holds {str(text)[:40]!r} of type "
                           f"{type(text).__name__}); give the field or column that holds the text")
        if "\0" in text:
            raise PtmError(f"{self.path}: {where}: {self._name} holds a NUL character; that is not text")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PtmError(f"{self.path}: {where}: {self._name} holds {exc.object[exc.start:exc.end]!a}, which is "
                           f"not a character (a lone surrogate); fix the text") from None
        return text

    @property
    def _name(self) -> str:
        return f"column {self.fmt.column!r}" if self.kind in (CSV, TSV) else f"field {self.fmt.field!r}"

    def _open_stream(self, raw: IO[bytes]) -> IO[bytes]:
        """``raw`` decompressed; a plain file named as text but holding compressed data is refused."""
        if self.compression is None:
            head = raw.read(8)
            raw.seek(0)
            for magic, what in MAGIC:
                if head.startswith(magic):
                    fix = (f"name it with its suffix ({self.path.name}{_SUFFIX_OF[what]}) to have it read"
                           if what in _SUFFIX_OF else "decompress it first")
                    raise PtmError(f"{self.path} holds {what} data, not text; {fix}")
            return raw
        if self.compression == "gzip":
            return gzip.GzipFile(fileobj=raw, mode="rb")
        if self.compression == "bzip2":
            return bz2.BZ2File(raw, mode="rb")
        if self.compression == "xz":
            return lzma.LZMAFile(raw, mode="rb")
        return io.BufferedReader(_zstd().ZstdDecompressor().stream_reader(raw, read_across_frames=True))

    def _damaged(self, exc: BaseException) -> PtmError:
        return PtmError(f"{self.path}: cannot decompress it as {self.compression} ({exc or type(exc).__name__}); "
                        f"the file is truncated, damaged or compressed otherwise than its suffix says")


def _document_lines(text: str) -> Iterator[str]:
    """A row's text as one document: its non-blank lines, then the blank line that ends it."""
    for line in text.split("\n"):
        if line.strip():
            yield line + "\n"
    yield "\n"


def has_text(path: str | Path, fmt: TextFormat = TextFormat()) -> bool:
    """Whether the file holds anything but whitespace (read until the first such line)."""
    with TextFile(path, fmt) as f:
        if f.plain:
            return any(block.strip() for block in iter(lambda: f.read(1 << 20), b""))
        return any(line.strip() for line in f.lines())


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        raise PtmError("reading .zst files needs zstandard: pip install 'ptmkit[corpus]'") from None
    return zstandard


def _parquet() -> Any:
    # Arrow's default allocator, jemalloc, runs a background thread; `ptm prepare` forks its workers
    # after the parent has read Parquet, and a fork while that thread holds jemalloc's lock leaves the
    # process waiting forever.  The system allocator has no such thread (set before Arrow starts).
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PtmError("reading Parquet files needs pyarrow: pip install 'ptmkit[corpus]'") from None
    return pq


__all__ = ["TextFile", "TextFormat", "describe", "detect", "has_text"]
