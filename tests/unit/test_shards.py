"""Sharded sets (ptm prepare --shard-size): the set reads back as exactly the corpus one directory
holds (arrays, word starts, and the MLM and CLM batches built from them), each shard is an
ordinary corpus, reading maps only a few shards at a time, and a damaged set is refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import write_corpus

from ptmkit.build import build_model, resolve_config
from ptmkit.cli import main as cli_main
from ptmkit.config import apply_overrides
from ptmkit.data import concat
from ptmkit.data.batches import PretrainBatches, split_spans
from ptmkit.data.corpus import Corpus, ShardedCorpus
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.presets import load_preset
from ptmkit.tokenization import Tokenizer

SMALL = ["model.hidden_size=32", "model.intermediate_size=64", "model.num_heads=2", "model.max_position=64",
         "train.seq_len=48", "train.batch_size=8"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """Two files: documents of several sentences, a file ending without a newline, blank-line runs."""
    root = tmp_path_factory.mktemp("shards")
    a = write_corpus(root / "a.txt", docs=30, seed=1)
    b = root / "b.txt"
    b.write_text("\n\n".join(" ".join(["the cat sat on the mat"] * (i % 3 + 1)) for i in range(40)) + "\n\n\nlast line")
    tok = Tokenizer.train([a, b], "wordpiece", 120, min_frequency=1)
    path = root / "tok.json"
    tok.save(path)
    one = prepare([a, b], path, root / "one", workers=1, progress=False)
    return [a, b], path, one


def _same(x, y) -> None:
    for name in ("tokens", "sentences", "documents", "word_starts"):
        np.testing.assert_array_equal(np.asarray(getattr(x, name)), np.asarray(getattr(y, name)), err_msg=name)
    assert (x.n_tokens, x.n_sentences, x.n_documents) == (y.n_tokens, y.n_sentences, y.n_documents)


@pytest.mark.parametrize("shard_tokens, workers", [(1, 1), (97, 2), (500, 1), (10**9, 1)])
def test_the_set_reads_as_the_single_corpus(text, tmp_path, shard_tokens, workers):
    files, tok, one = text
    out = tmp_path / "set"
    sharded = prepare(files, tok, out, workers=workers, chunk_bytes=700, progress=False, shard_tokens=shard_tokens)
    assert isinstance(sharded, ShardedCorpus) and isinstance(Corpus.open(out), ShardedCorpus)
    _same(sharded, one)
    meta = json.loads((out / "meta.json").read_text())
    entries = meta["shards"]
    assert len(entries) == len(sharded.shards) and meta["shard_tokens"] == shard_tokens
    assert meta["tokenizer_sha256"] == one.meta["tokenizer_sha256"] and (out / "tokenizer.json").is_file()
    sent_ends = set(np.asarray(one.sentences).tolist())
    doc_starts = set(np.asarray(one.sentences)[np.asarray(one.documents)].tolist())
    for i, e in enumerate(entries):
        shard = Corpus.open(out / e["path"])  # an ordinary corpus
        assert type(shard) is Corpus and e["path"] == f"shards/{i:05d}"
        np.testing.assert_array_equal(shard.tokens, one.tokens[e["first_token"]: e["first_token"] + e["n_tokens"]])
        assert e["first_token"] in sent_ends  # cut at sentence ends only
        assert e["continues_document"] == (i > 0 and e["first_token"] not in doc_starts)
        if i + 1 < len(entries):  # every shard but the last reaches its size
            assert shard_tokens <= e["n_tokens"] < shard_tokens + max(np.diff(one.sentences))
    rng = np.random.default_rng(0)
    src = rng.integers(-one.n_tokens, one.n_tokens, size=(6, 40))
    np.testing.assert_array_equal(sharded.tokens[src], one.tokens[src])
    np.testing.assert_array_equal(sharded.word_starts[src], one.word_starts[src])
    assert [sharded.sentence(i).tolist() for i in (0, 7, -1)] == [one.sentence(i).tolist() for i in (0, 7, -1)]
    assert sharded.document(-1).tolist() == one.document(-1).tolist()


def _batches(preset, overrides, corpus, tok):
    config = resolve_config(apply_overrides(load_preset(preset), SMALL + overrides), tok)
    torch.manual_seed(0)
    model = build_model(config, tok)
    spans = model.objective.example_spans(corpus, 48)
    train, _ = split_spans(spans, 0.1, 3)
    return spans, PretrainBatches(corpus, model.objective, train, seq_len=48, batch_size=8, seed=5)


@pytest.mark.parametrize("preset, overrides", [
    ("bert-tiny", ["objective.masking=whole_word"]),  # NSP pairs (documents), whole words (word starts)
    ("gpt2-tiny", []),  # CLM blocks across sentences and documents
])
def test_batches_of_the_set_equal_the_single_corpus(text, tmp_path, preset, overrides):
    files, tok_path, one = text
    tok = Tokenizer.load(tok_path)
    sharded = prepare(files, tok_path, tmp_path / "set", workers=1, progress=False, shard_tokens=150)
    assert len(sharded.shards) > 5
    spans_one, ref = _batches(preset, overrides, one, tok)
    spans_set, got = _batches(preset, overrides, sharded, tok)
    np.testing.assert_array_equal(spans_set, spans_one)
    assert ref.steps_per_epoch == got.steps_per_epoch > 2
    for epoch, step in [(0, 0), (0, 2), (3, 1)]:
        a, b = ref(epoch, step), got(epoch, step)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (preset, k)


def test_concat_array_indexes_as_numpy():
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 1000, n).astype(np.uint16) for n in (5, 0, 1, 17, 3)]
    ref = np.concatenate(parts)
    cat = concat.ConcatArray(parts)
    lazy = concat.ConcatArray.lazy([len(p) for p in parts], np.uint16, lambda k: parts[k], max_open=2)
    for arr in (cat, lazy):
        assert len(arr) == arr.shape[0] == 26 and arr.dtype == np.uint16
        for index in (0, 5, 25, -1, -26, slice(None), slice(3, 22), slice(20, 3), slice(-5, None), slice(1, 20, 3),
                      rng.integers(-26, 26, (4, 7)), rng.random(26) < 0.5, np.zeros(0, np.int64)):
            np.testing.assert_array_equal(arr[index], ref[index])
        np.testing.assert_array_equal(np.asarray(arr), ref)
        for bad in (26, -27, np.array([3, 26])):
            with pytest.raises(IndexError):
                arr[bad]
    assert len(lazy.parts[0].cache.arrays) <= 2  # at most max_open parts held open


def test_a_large_set_keeps_few_files_open(text, tmp_path, monkeypatch):
    files, tok, one = text
    monkeypatch.setattr(concat, "MAX_OPEN", 3)
    sharded = prepare(files, tok, tmp_path / "set", workers=1, progress=False, shard_tokens=40)
    assert len(sharded.shards) > 20
    _same(sharded, one)
    assert len(sharded.tokens.parts[0].cache.arrays) <= 3


def test_missing_or_foreign_shard_and_damaged_index(text, tmp_path):
    files, tok, _ = text
    out = tmp_path / "set"
    prepare(files, tok, out, workers=1, progress=False, shard_tokens=300)
    meta = json.loads((out / "meta.json").read_text())
    shutil.move(out / "shards" / "00001", tmp_path / "aside")
    with pytest.raises(PtmError, match=r"lists the shard shards/00001, which is missing: the set is incomplete"):
        Corpus.open(out)
    shutil.move(tmp_path / "aside", out / "shards" / "00001")
    Corpus.open(out)
    # a shard of another set in its place
    other = prepare(files[:1], tok, tmp_path / "other", workers=1, progress=False, shard_tokens=300)
    shutil.rmtree(out / "shards" / "00001")
    shutil.copytree(other.shards[0], out / "shards" / "00001")
    with pytest.raises(PtmError, match=r"00001 holds .* but the index .* says .*re-run `ptm prepare`"):
        Corpus.open(out)
    for damage, match in [({"shards": "nope"}, "damaged shard index"), ({"shards": []}, "lists no shards"),
                          ({"n_tokens": meta["n_tokens"] + 1}, "do not add up"),
                          ({"shards": [{**meta["shards"][0], "path": "../one"}, *meta["shards"][1:]]}, "not inside the set")]:
        (out / "meta.json").write_text(json.dumps({**meta, **damage}))
        with pytest.raises(PtmError, match=match):
            Corpus.open(out)


def test_cli_writes_shards_and_refuses_a_bad_size(text, tmp_path, capsys):
    files, tok, one = text
    out = tmp_path / "set"
    assert cli_main(["prepare", *map(str, files), "-t", str(tok), "-o", str(out), "--shard-size", "0.3k"]) == 0
    corpus = Corpus.open(out)
    assert corpus.meta["shard_tokens"] == 300 and len(corpus.shards) > 2
    _same(corpus, one)
    for bad in ("x", "0", "1.5.2M"):
        with pytest.raises(SystemExit):
            cli_main(["prepare", str(files[0]), "-t", str(tok), "-o", str(tmp_path / "bad"), f"--shard-size={bad}"])
        assert "--shard-size" in capsys.readouterr().err
