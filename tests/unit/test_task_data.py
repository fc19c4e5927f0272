"""Labelled task files: formats, pairs, label vocabularies and errors."""

import json

import numpy as np
import pytest

from ptmkit.data.tasks import load_files, load_task, read_rows
from ptmkit.errors import PtmError


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _three(tmp_path, ext, write):
    return [write(tmp_path / f"{s}.{ext}", s) for s in ("train", "dev", "test")]


def test_jsonl_string_labels(tmp_path):
    rows = [{"text": "good film", "label": "pos"}, {"text": "bad film", "label": "neg"}, {"text": "ok", "label": "pos"}]
    files = _three(tmp_path, "jsonl", lambda p, s: _jsonl(p, rows))
    data = load_files(*files)
    assert data.label_names == ["neg", "pos"]  # sorted, independent of row order
    assert data.train.labels.tolist() == [1, 0, 1]
    assert data.train.texts[1] == "bad film"
    assert data.num_labels == 2 and not data.is_pair


def test_csv_int_labels_and_pairs(tmp_path):
    def write(p, s):
        p.write_text('premise,hypothesis,gold\n"a man, walking",someone moves,2\nx,y,0\nz,w,1\n', encoding="utf-8")
        return p

    files = _three(tmp_path, "csv", write)
    data = load_files(*files, text_column="premise", text_pair_column="hypothesis", label_column="gold")
    assert data.label_names == [0, 1, 2]
    assert data.is_pair
    assert data.dev.texts[0] == "a man, walking" and data.dev.text_pairs[0] == "someone moves"
    assert data.test.labels.tolist() == [2, 0, 1]


def test_tsv_sniffed_without_extension(tmp_path):
    def write(p, s):
        p.write_text("sentence\tlabel\nnice\t1\nawful\t0\n", encoding="utf-8")
        return p

    files = _three(tmp_path, "txt", write)
    assert read_rows(files[0]) == [{"sentence": "nice", "label": "1"}, {"sentence": "awful", "label": "0"}]
    data = load_files(*files, text_column="sentence")
    assert data.train.labels.dtype == np.int64
    assert data.train.labels.tolist() == [1, 0]


def test_json_int_and_csv_string_labels_agree(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\nc,1\n", encoding="utf-8")
    data = load_files(train, dev, dev)
    assert data.dev.labels.tolist() == [1]


def test_unseen_label_in_dev_is_an_error(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", [{"text": "a", "label": "pos"}, {"text": "b", "label": "neg"}])
    dev = _jsonl(tmp_path / "dev.jsonl", [{"text": "c", "label": "neutral"}])
    with pytest.raises(PtmError, match="neutral"):
        load_files(train, dev, train)


def test_missing_column_names_available_columns(tmp_path):
    rows = [{"sentence": "a", "label": 0}, {"sentence": "b", "label": 1}]
    files = _three(tmp_path, "jsonl", lambda p, s: _jsonl(p, rows))
    with pytest.raises(PtmError, match=r"available columns: sentence, label"):
        load_files(*files)  # text_column defaults to "text"


def test_bad_files(tmp_path):
    with pytest.raises(PtmError, match="not found"):
        load_files(tmp_path / "nope.jsonl", tmp_path / "nope.jsonl", tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": 1}\n{oops\n', encoding="utf-8")
    with pytest.raises(PtmError, match=r"bad.jsonl:2"):
        read_rows(bad)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(PtmError):
        read_rows(binary)
    one = _jsonl(tmp_path / "one.jsonl", [{"text": "a", "label": 1}])
    with pytest.raises(PtmError, match="single label"):
        load_files(one, one, one)


def test_train_subset_is_fixed(tmp_path):
    rows = [{"text": f"t{i}", "label": i % 2} for i in range(50)]
    files = _three(tmp_path, "jsonl", lambda p, s: _jsonl(p, rows))
    data = load_files(*files)
    a, b = data.with_train_size(10, seed=3), data.with_train_size(10, seed=3)
    assert len(a.train) == 10 and a.train.texts == b.train.texts
    assert data.with_train_size(10, seed=4).train.texts != a.train.texts
    assert len(a.test) == 50  # only train is subsampled


def test_unknown_task():
    with pytest.raises(PtmError, match=r"built-in tasks: .*\bmr\b.*zh-reviews"):
        load_task("sst9")


def test_mr_task_fetched_through_recipe():
    data = load_task("mr")
    assert data.num_labels == 2
    assert min(len(data.train), len(data.dev), len(data.test)) > 500
    # the held-out splits share no sentence with train
    assert not set(data.test.texts) & set(data.train.texts)
