"""fastText's supervised classifier: SGD steps and predictions against a float64 NumPy replay,
separable toy data, determinism, the ``__label__`` format and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.static.classify_data import LabelledLines, parse_label_lines, read_label_file
from ptmkit.static.fasttext_classify import FastTextClassifier, train_classifier
from ptmkit.static.huffman import build_huffman
from ptmkit.static.kernels.w2v import MAX_EXP, exp_table

TOY = LabelledLines(
    ["good fine film", "bad dull film", "fine good", "dull plot bad bad", "a film with a plot", "fine fine"],
    [["pos"], ["neg"], ["pos"], ["neg"], ["meh"], ["pos"]],
)


def _fnv(word: str) -> int:
    """fastText's word hash as a signed 32-bit value (bytes sign-extended as int8)."""
    h = 2166136261
    for b in word.encode("utf-8"):
        h = ((h ^ (b | 0xFFFFFF00 if b >= 128 else b)) * 16777619) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def _rows(text: str, words: list[str], bucket: int, n: int) -> list[int]:
    toks = text.split() + ["</s>"]
    index = {w: i for i, w in enumerate(words)}
    rows = [index[t] for t in toks if t in index]
    hashes = [_fnv(t) for t in toks]
    for i in range(len(toks)):
        h = hashes[i] % 2**64
        for j in range(i + 1, min(len(toks), i + n)):
            h = (h * 116049371 + hashes[j]) % 2**64
            rows.append(len(words) + h % bucket)
    return rows


def _log_sigmoid(x: float) -> float:
    return -np.logaddexp(0.0, -x)


def _replay(data, clf, cfg):
    """float64 replay of training: returns (emb, wo)."""
    rng = np.random.default_rng(cfg["seed"])
    v, bucket, dim = len(clf.words), clf.bucket, cfg["dim"]
    emb = rng.random((v + bucket, dim), dtype=np.float32)
    emb *= 2.0 / dim
    emb -= 1.0 / dim
    emb = emb.astype(np.float64)
    hs = cfg["loss"] == "hs"
    wo = np.zeros((len(clf.labels) - hs, dim))
    tree = build_huffman(clf.label_counts)
    tab, scale = exp_table(), 1000 / MAX_EXP / 2.0
    lines = [(_rows(t, clf.words, bucket, cfg["word_ngrams"]), clf.labels.index(ls[0])) for t, ls in zip(data.texts, data.labels)]
    sizes = [len(t.split()) + 1 for t in data.texts]
    total = sum(sizes) * cfg["epochs"]
    seen = 0
    for _ in range(cfg["epochs"]):
        for (rows, y), size in zip(lines, sizes):
            lr = cfg["lr"] * (1.0 - seen / total)
            seen += size
            h = emb[rows].mean(axis=0)
            grad = np.zeros(dim)
            if hs:
                for j in range(tree.lengths[y]):
                    u = wo[tree.points[y, j]]
                    f = h @ u
                    if abs(f) >= MAX_EXP:
                        continue
                    g = (1.0 - tree.codes[y, j] - tab[int((f + MAX_EXP) * scale)]) * lr
                    grad += g * u
                    u += g * h
            else:
                p = np.exp(wo @ h - (wo @ h).max())
                p /= p.sum()
                alpha = lr * (np.eye(len(clf.labels))[y] - p)
                grad += alpha @ wo
                wo += np.outer(alpha, h)
            np.add.at(emb, rows, grad / len(rows))
    return emb, wo, tree


def _ref_log_probs(texts, clf, emb, wo, tree, hs, n):
    out = np.zeros((len(texts), len(clf.labels)))
    for i, t in enumerate(texts):
        rows = _rows(t, clf.words, clf.bucket, n)
        h = emb[rows].mean(axis=0) if rows else np.zeros(emb.shape[1])
        if hs:
            for y in range(len(clf.labels)):
                out[i, y] = sum(_log_sigmoid((1 - 2 * int(tree.codes[y, j])) * (wo[tree.points[y, j]] @ h))
                                for j in range(tree.lengths[y]))  # fmt: skip
        else:
            s = wo @ h
            out[i] = s - s.max() - np.log(np.exp(s - s.max()).sum())
    return out


@pytest.mark.parametrize("loss", ["softmax", "hs"])
def test_sgd_steps_and_predictions_match_float64_replay(loss):
    cfg = dict(dim=6, epochs=2, lr=0.4, word_ngrams=3, bucket=13, loss=loss, workers=1, seed=5)
    clf = train_classifier(TOY, cfg)
    counts = [sum(t.split().count(w) for t in TOY.texts) if w != "</s>" else len(TOY) for w in clf.words]
    assert counts == sorted(counts, reverse=True) and clf.labels[0] == "pos"  # by decreasing count
    emb, wo, tree = _replay(TOY, clf, cfg)
    assert np.abs(wo).max() > 0.01  # the steps moved the output layer
    np.testing.assert_allclose(clf.wo, wo, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(clf.emb, emb, rtol=1e-4, atol=1e-7)
    texts = ["good unseen film", "bad bad", "nothing known here"]  # out-of-vocabulary words still form n-grams
    want = _ref_log_probs(texts, clf, emb, wo, tree, loss == "hs", cfg["word_ngrams"])
    np.testing.assert_allclose(clf.log_probs(texts), want, atol=1e-5)
    assert np.allclose(np.exp(want).sum(axis=1), 1.0)  # both outputs are distributions over the labels
    top = [row[0][0] for row in clf.predict(texts)]
    assert top == [clf.labels[i] for i in want.argmax(axis=1)]


def _separable(n, seed):
    rng = np.random.default_rng(seed)
    classes = {c: [f"{c}{i}" for i in range(6)] for c in ("red", "green", "blue")}
    shared = [f"w{i}" for i in range(20)]
    names = list(classes)
    texts, labels = [], []
    for y in rng.integers(0, 3, n):
        words = list(rng.choice(classes[names[y]], 2)) + list(rng.choice(shared, 4))
        texts.append(" ".join(rng.permutation(words)))
        labels.append([names[y]])
    return LabelledLines(texts, labels)


@pytest.mark.parametrize("loss", ["softmax", "hs"])
def test_separable_toy_data_is_learned(loss):
    clf = train_classifier(_separable(300, 0), dict(dim=10, epochs=10, lr=0.5, loss=loss, workers=1, word_ngrams=2,
                                                    bucket=1000))  # fmt: skip
    assert clf.test(_separable(200, 1)) == {"n": 200, "precision_at_1": 1.0, "recall_at_1": 1.0, "accuracy": 1.0}
    multi = LabelledLines(["red1 red2 w3", "blue0 w1", "green5"], [["red", "green"], ["blue"], ["red"]])
    hits = sum(lab in gold for row, gold in zip(clf.predict(multi, k=2), multi.labels) for lab, _ in row)
    assert 2 <= hits <= 4  # red and blue are found at least
    assert clf.test(multi, k=2) == {"n": 3, "precision_at_2": hits / 6, "recall_at_2": hits / 4, "accuracy": 2 / 3}


def test_seeded_single_thread_runs_are_identical():
    data = _separable(200, 2)
    cfg = dict(dim=8, epochs=3, word_ngrams=2, bucket=500, workers=1, chunk_words=100)  # several chunks per epoch
    a, b = train_classifier(data, {**cfg, "seed": 3}), train_classifier(data, {**cfg, "seed": 3})
    np.testing.assert_array_equal(a.emb, b.emb)
    np.testing.assert_array_equal(a.wo, b.wo)
    assert not np.array_equal(a.emb, train_classifier(data, {**cfg, "seed": 4}).emb)


def test_label_file_format_and_bad_input(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("__label__a __label__b one two\n\nthree __label__c four\n")
    lines = read_label_file(good)
    assert lines.texts == ["one two", "three four"] and lines.labels == [["a", "b"], ["c"]]
    lines.to_label_file(tmp_path / "back.txt")
    assert read_label_file(tmp_path / "back.txt") == lines

    bad = tmp_path / "bad.txt"
    bad.write_text("__label__a one\n__label__b two\nno label here\n")
    with pytest.raises(PtmError, match=r"bad\.txt:3: no label"):
        read_label_file(bad)
    with pytest.raises(PtmError, match=r"bad\.txt:3: no label"):
        train_classifier(bad)
    assert read_label_file(bad, require_labels=False).labels[2] == []  # text to predict
    with pytest.raises(PtmError, match="no examples"):
        parse_label_lines(["", "  "])
    with pytest.raises(PtmError, match="at least 2"):
        train_classifier(parse_label_lines(["__label__a x", "__label__a y"]))
    with pytest.raises(PtmError, match="unknown config key"):
        train_classifier(TOY, {"wordNgrams": 2})
    with pytest.raises(PtmError, match="not a fastText classifier"):
        FastTextClassifier.load(tmp_path)


def test_cli_train_test_predict(tmp_path, capsys, monkeypatch):
    train, dev = _separable(300, 0), _separable(50, 1)
    train.to_label_file(tmp_path / "train.txt")
    dev.to_label_file(tmp_path / "dev.txt")
    out = tmp_path / "model"
    args = ["fasttext-classify", "train", "--input", str(tmp_path / "train.txt"), "--valid", str(tmp_path / "dev.txt"),
            "-o", str(out), "--dim", "10", "--epoch", "10", "--lr", "0.5", "--thread", "1", "--loss", "hs"]
    assert main(args) == 0
    assert json.loads((out / "scores.json").read_text())["scores"]["valid"]["accuracy"] == 1.0
    assert main(args) == 2  # no silent overwrite
    assert "--overwrite" in capsys.readouterr().err
    clf = FastTextClassifier.load(out)
    assert clf.cfg.loss == "hs" and clf.test(dev)["accuracy"] == 1.0

    assert main(["fasttext-classify", "test", str(out), str(tmp_path / "dev.txt"), "-k", "1"]) == 0
    assert "accuracy\t1.0000" in capsys.readouterr().out
    (tmp_path / "q.txt").write_text("red1 red3 w2\nblue4\n")
    assert main(["fasttext-classify", "predict", str(out), str(tmp_path / "q.txt"), "-k", "2", "--prob"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in printed] == ["__label__red", "__label__blue"]
    assert all(len(ln.split()) == 4 for ln in printed)
