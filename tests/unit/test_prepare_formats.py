"""Corpora in JSON Lines, CSV/TSV, Parquet and compressed files prepare (and train tokenizers) to
exactly what their plain text copy gives; bad files are refused in one line through the CLI."""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomllib
import zstandard

from ptmkit.cli import main as cli_main
from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.data.textfiles import TextFile, TextFormat, describe
from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

# Rows as a dataset holds them: several lines, a blank line inside a row (no document break),
# CRLF, surrounding spaces, non-ASCII, an empty row.
ROWS = [
    "the cat sat on the mat.\nthen it slept.",
    "a dog barked\n\nat the red house, twice.",
    "  Über-naïve café: 3.14 apples  \r\nand 12,000 oranges!",
    "",
    "one line, one document",
    "我们在北京大学学习 machine learning",
]


def plain_copy(rows: list[str]) -> str:
    """What a row stands for as plain text: its non-blank lines, then a blank line."""
    return "".join("".join(line + "\n" for line in row.split("\n") if line.strip()) + "\n" for row in rows)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    text = plain_copy(ROWS)
    (root / "plain.txt").write_text(text, encoding="utf-8")
    files = {"plain": root / "plain.txt"}
    with open(root / "rows.jsonl", "w", encoding="utf-8") as f:
        for i, row in enumerate(ROWS):
            f.write(json.dumps({"id": i, "text": row}, ensure_ascii=i % 2 == 0) + "\n")
    files["jsonl"] = root / "rows.jsonl"
    with gzip.open(root / "rows.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write((root / "rows.jsonl").read_text(encoding="utf-8"))
    files["jsonl.gz"] = root / "rows.jsonl.gz"
    with open(root / "rows.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "body", "label"])
        w.writerows([i, row, "x,y"] for i, row in enumerate(ROWS))
    files["csv"] = root / "rows.csv"
    with open(root / "rows.tsv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, dialect="excel-tab")
        w.writerow(["body", "id"])
        w.writerows([row, i] for i, row in enumerate(ROWS))
    files["tsv"] = root / "rows.tsv"
    pq.write_table(pa.table({"id": list(range(len(ROWS))), "text": ROWS}), root / "rows.parquet", row_group_size=2)
    files["parquet"] = root / "rows.parquet"
    raw = text.encode("utf-8")
    (root / "plain.txt.gz").write_bytes(gzip.compress(raw))
    (root / "plain.txt.bz2").write_bytes(bz2.compress(raw))
    (root / "plain.txt.xz").write_bytes(lzma.compress(raw))
    (root / "plain.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    for suffix in ("gz", "bz2", "xz", "zst"):
        files[f"txt.{suffix}"] = root / f"plain.txt.{suffix}"
    return files


FMT = TextFormat(field="text", column="body")


@pytest.fixture(scope="module")
def tok(corpora, tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    Tokenizer.train([corpora["plain"]], "wordpiece", 200, min_frequency=1).save(path)
    return path


@pytest.mark.parametrize("name", ["jsonl", "jsonl.gz", "csv", "tsv", "parquet", "txt.gz", "txt.bz2", "txt.xz", "txt.zst"])
def test_each_format_prepares_to_the_plain_copys_corpus(name, corpora, tok, tmp_path):
    ref = prepare([corpora["plain"]], tok, tmp_path / "plain", workers=1, progress=False)
    for workers, chunk in ((1, 1 << 20), (2, 16)):  # blocks of a few lines: documents across blocks
        got = prepare([corpora[name]], tok, tmp_path / f"{workers}", workers=workers, chunk_bytes=chunk,
                      progress=False, fmt=FMT)
        np.testing.assert_array_equal(got.tokens, ref.tokens)
        np.testing.assert_array_equal(got.sentences, ref.sentences)
        np.testing.assert_array_equal(got.documents, ref.documents)
        np.testing.assert_array_equal(got.word_starts[:], ref.word_starts[:])
    # one document per non-empty row
    assert got.n_documents == sum(bool(r.strip()) for r in ROWS)
    source = got.meta["sources"][0]
    assert source["format"] == describe(corpora[name])
    assert source["bytes"] == corpora[name].stat().st_size


def test_formats_mixed_in_one_prepare_are_their_copies_in_order(corpora, tok, tmp_path):
    ref = prepare([corpora["plain"]] * 3, tok, tmp_path / "plain", workers=1, progress=False)
    got = prepare([corpora["parquet"], corpora["txt.zst"], corpora["csv"]], tok, tmp_path / "mixed", workers=2,
                  chunk_bytes=64, progress=False, fmt=FMT)
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_array_equal(got.documents, ref.documents)
    assert [s["format"] for s in got.meta["sources"]] == ["parquet", "text+zstd", "csv"]
    assert got.meta["sources"][0]["field"] == "text" and got.meta["sources"][2]["column"] == "body"


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram", "char", "word"])
def test_tokenizers_train_on_any_format_as_on_the_plain_copy(kind, corpora):
    ref = Tokenizer.train([corpora["plain"]], kind, 120, min_frequency=1).to_json()
    for name in ("jsonl.gz", "csv", "parquet", "txt.zst"):
        assert Tokenizer.train([corpora[name]], kind, 120, min_frequency=1, fmt=FMT).to_json() == ref, name


def test_lines_are_read_one_at_a_time(corpora):
    """The reader is a stream: the first line comes before the rest is read."""
    with TextFile(corpora["jsonl.gz"]) as f:
        lines = f.lines()
        assert next(lines) == "the cat sat on the mat.\n"
        assert f.consumed() <= corpora["jsonl.gz"].stat().st_size
    with TextFile(corpora["parquet"]) as f:
        assert next(f.lines()) == "the cat sat on the mat.\n"


# ---------------------------------------------------------------------------- refusals
def _write(path, data: str | bytes):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


BAD = {
    "jsonl-without-field": ("c.jsonl", '{"content": "a b", "id": 1}\n', [],
                            r"c\.jsonl: line 1 has no field 'text' \(its fields: content, id\); give the text's field "
                            r"with --field NAME"),
    "jsonl-other-field-missing": ("c.jsonl", '{"text": "a b"}\n', ["--field", "body"],
                                  r"line 1 has no field 'body' \(its fields: text\)"),
    "malformed-jsonl": ("c.jsonl", '{"text": "a b"}\n\n{"text": "c d",\n', [],
                        r"c\.jsonl: line 3 is not valid JSON \(Expecting property name enclosed in double quotes at character 17\); "
                        r"JSON Lines hold one object a line"),
    "jsonl-not-object": ("c.jsonl", '["a", "b"]\n', [], r"line 1 is a JSON list, not an object"),
    "jsonl-number-text": ("c.jsonl", '{"text": 3}\n', [], r"line 1: field 'text' is not text \(it holds '3' of type int\)"),
    "jsonl-latin1": ("c.jsonl", '{"text": "caf\xe9"}\n'.encode("latin-1"), [], r"c\.jsonl: invalid UTF-8 on line 1"),
    "jsonl-nul": ("c.jsonl", '{"text": "a\\u0000b"}\n', [], r"line 1: field 'text' holds a NUL character"),
    "jsonl-surrogate": ("c.jsonl", '{"text": "a\\ud800b"}\n', [], r"line 1: field 'text' holds '\\ud800'"),
    "csv-without-column": ("c.csv", "id,review\n1,a b\n", [],
                           r"c\.csv: no column 'text' in the header row \(its columns: id, review\); give the text's "
                           r"column with --column NAME"),
    "csv-ragged-row": ("c.csv", "id,text\n1,a b\n2\n", [], r"c\.csv: line 3 has 1 columns, the header 2"),
    "unknown-compression": ("c.txt.lz4", b"\x04\x22\x4d\x18rest", [],
                            r"c\.txt\.lz4: \.lz4 files are not read; decompress it, or recompress it as one of"),
    "archive": ("c.zip", b"PK\x03\x04rest", [], r"c\.zip: \.zip files are not read"),
    "compressed-archive": ("c.tar.gz", gzip.compress(b"x"), [], r"c\.tar\.gz: \.tar files are not read"),
    "compressed-named-as-text": ("c.txt", gzip.compress(b"a b\n"), [],
                                 r"c\.txt holds gzip data, not text; name it with its suffix \(c\.txt\.gz\)"),
    "not-gzip": ("c.txt.gz", "plain text\n", [], r"c\.txt\.gz: cannot decompress it as gzip"),
    "not-bzip2": ("c.csv.bz2", "plain text\n", [], r"c\.csv\.bz2: cannot decompress it as bzip2"),
    "not-zstd": ("c.jsonl.zst", "plain text\n", [], r"c\.jsonl\.zst: cannot decompress it as zstd"),
    "truncated-xz": ("c.txt.xz", lzma.compress(b"a b c\n" * 1000)[:40], [], r"c\.txt\.xz: cannot decompress it as xz"),
    "parquet-compressed": ("c.parquet.gz", b"x", [], r"a Parquet file compresses its own columns"),
    "not-parquet": ("c.parquet", "a b\n", [], r"c\.parquet: not a readable Parquet file"),
}


def test_parquet_without_the_field_names_the_fields(tok, tmp_path, capsys):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [1], "content": ["a b"]}), path)
    rc, err = _prepare_cli([path], tok, tmp_path / "out", capsys)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "c.parquet: no field 'text' (its fields: id, content); give the text's field with --field NAME" in err
    with pytest.raises(PtmError, match="no field 'text'"):
        Tokenizer.train([path], "wordpiece", 60)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_are_refused_in_one_line(name, tok, tmp_path, capsys):
    file_name, data, extra, pattern = BAD[name]
    path = _write(tmp_path / file_name, data)
    out = tmp_path / "out"
    rc, err = _prepare_cli([path, *extra], tok, out, capsys)
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert re.search(pattern, err), err
    assert not out.exists() or not any(out.iterdir())  # nothing left behind
    rc, err = _cli(["tokenizer", "train", str(path), *extra, "--vocab-size", "60", "-o", str(tmp_path / "t.json")],
                   capsys)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err


def _prepare_cli(args, tok, out, capsys):
    return _cli(["prepare", *map(str, args), "-t", str(tok), "-o", str(out), "--workers", "1"], capsys)


def _cli(argv, capsys):
    capsys.readouterr()
    rc = cli_main(argv)
    return rc, capsys.readouterr().err


def test_cli_reads_field_and_column(corpora, tok, tmp_path):
    ref = Corpus.open(prepare([corpora["plain"]], tok, tmp_path / "plain", workers=1, progress=False).path)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"body": r}) + "\n" for r in ROWS), encoding="utf-8")
    assert cli_main(["prepare", str(jsonl), "-t", str(tok), "-o", str(tmp_path / "j"), "--field", "body"]) == 0
    assert cli_main(["prepare", str(corpora["csv"]), "-t", str(tok), "-o", str(tmp_path / "c"), "--column",
                     "body"]) == 0
    for out in ("j", "c"):
        np.testing.assert_array_equal(Corpus.open(tmp_path / out).tokens, ref.tokens)


def test_missing_packages_are_named_with_the_extra(corpora, monkeypatch):
    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {d.split(">")[0] for d in extras["corpus"]} == {"pyarrow", "zstandard"}
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "zstandard", None)
    for name, package in (("parquet", "pyarrow"), ("txt.zst", "zstandard")):
        with pytest.raises(PtmError, match=rf"needs {package}: pip install 'ptmkit\[corpus\]'"):
            with TextFile(corpora[name]) as f:
                next(f.lines())


def test_static_models_read_any_format_as_the_plain_copy(corpora):
    """word2vec, GloVe, fastText and the NNLM read ``--data`` files through the same reader."""
    from ptmkit.static.vocab import iter_line_chunks

    def sentences(path):
        return [line for lines in iter_line_chunks([path], lowercase=True) for line in lines if line.strip()]

    ref = sentences(corpora["plain"])
    assert len(ref) == 8
    for name in ("jsonl.gz", "parquet", "txt.bz2"):
        assert sentences(corpora[name]) == ref, name


def test_a_csv_document_longer_than_csvs_default_limit_reads(tok, tmp_path):
    long_row = " ".join(["the cat sat on the mat."] * 8000)  # 190 KB in one field
    path = tmp_path / "long.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["text"], [long_row]])
    plain = tmp_path / "long.txt"
    plain.write_text(long_row + "\n", encoding="utf-8")
    got = prepare([path], tok, tmp_path / "csv", workers=1, progress=False)
    ref = prepare([plain], tok, tmp_path / "plain", workers=1, progress=False)
    np.testing.assert_array_equal(got.tokens, ref.tokens)
