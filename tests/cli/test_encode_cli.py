"""``ptm encode`` / ``ptmkit.encode``: pooled states equal a float64 computation over the encoder's
own states, ``--normalize`` gives unit rows, SIF equals a hand computation, the .npy is one
float32 row per input line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_checkpoint

import ptmkit
from ptmkit.cli import main
from ptmkit.pretrained import load_pretrained

TEXTS = ["the cat sat on the mat", "a dog ran", "the mat", "dogs and cats sat on a very small mat today",
         "cat"]


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    d = tmp_path_factory.mktemp("encode")
    return tiny_checkpoint(d / "bert", TEXTS * 4, layers=2, hidden=32)


def _reference(ck, pooling):
    """Each text alone (no padding), states in float64, pooled by hand."""
    pre = load_pretrained(ck, heads=False)
    tok, out = pre.tokenizer, []
    for text in TEXTS:
        ids = torch.tensor([[tok.cls_id, *tok.encode(text), tok.sep_id]])
        with torch.no_grad():
            h = pre.backbone(ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0].double()
        out.append({"mean": h.mean(0), "cls": h[0], "last": h[-1]}[pooling].numpy())
    return np.stack(out)


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_pooling_equals_a_float64_computation_over_the_states(ck, pooling):
    got = ptmkit.encode(ck, TEXTS, pooling=pooling, batch_size=2)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 32)
    assert np.abs(got - _reference(ck, pooling)).max() < 1e-5


def test_the_cli_writes_one_float32_row_per_line_normalised(ck, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    assert main(["encode", str(ck), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "v.npy"),
                 "--chunk-size", "2", "--batch-size", "2"]) == 0
    x = np.load(tmp_path / "v.npy")
    assert x.dtype == np.float32 and x.shape == (len(TEXTS), 32)
    assert np.abs(x - _reference(ck, "mean")).max() < 1e-5
    assert main(["encode", str(ck), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "n.npy"),
                 "--normalize"]) == 0
    n = np.load(tmp_path / "n.npy")
    assert np.allclose(np.linalg.norm(n, axis=1), 1.0, atol=1e-6)
    assert np.allclose(n, x / np.linalg.norm(x, axis=1, keepdims=True), atol=1e-6)
    assert np.allclose(np.linalg.norm(ptmkit.encode(ck, TEXTS, normalize=True), axis=1), 1.0, atol=1e-6)


def _toy_vectors(d):
    words = ["the", "cat", "sat", "mat", "dog", "ran"]
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(len(words), 4)).astype(np.float32)
    counts = [50, 10, 5, 4, 3, 1]
    d.mkdir()
    (d / "vectors.txt").write_text(f"{len(words)} 4\n" + "".join(
        f"{w} {' '.join(f'{v:.6f}' for v in row)}\n" for w, row in zip(words, vecs)))
    (d / "vocab.txt").write_text("".join(f"{w} {c}\n" for w, c in zip(words, counts)))
    vecs = np.array([[float(f"{v:.6f}") for v in row] for row in vecs])  # as written
    return words, vecs, np.array(counts, dtype=np.float64)


def test_sif_equals_a_hand_computation(tmp_path):
    words, vecs, counts = _toy_vectors(tmp_path / "w2v")
    lines = ["the cat sat", "The dog ran ran", "mat", "unknown words only", "cat dog"]
    p = counts / counts.sum()
    a = 1e-3
    rows = []
    for line in lines:
        known = [words.index(w.lower()) for w in line.split() if w.lower() in words]
        rows.append(sum(a / (a + p[k]) * vecs[k] for k in known) / len(known) if known else np.zeros(4))
    x = np.array(rows)
    u = np.linalg.svd(x)[2][0]  # first right-singular vector of the uncentred matrix
    expected = x - np.outer(x @ u, u)
    got = ptmkit.encode(tmp_path / "w2v" / "vectors.txt", lines)
    assert np.abs(got - expected).max() < 1e-5
    assert not got[3].any()  # no known word: a zero row
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert main(["encode", str(tmp_path / "w2v"), "--input", str(tmp_path / "in.txt"), "-o",
                 str(tmp_path / "sif.npy"), "--chunk-size", "2"]) == 0
    assert np.abs(np.load(tmp_path / "sif.npy") - expected).max() < 1e-5


def test_bad_inputs_are_one_line(ck, tmp_path, capsys):
    gpt = tiny_checkpoint(tmp_path / "gpt", TEXTS * 4, layers=1, causal=True)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "in.txt").write_text("the cat\n")
    cases = [(["encode", str(gpt), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "a.npy"),
               "--pooling", "cls"], "left-to-right"),
             (["encode", str(ck), "--input", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "b.npy")], "no lines"),
             (["encode", str(tmp_path / "nothing"), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "c.npy")],
              "does not exist")]
    for argv, what in cases:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert what in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob(".tmp-*"))
    last = ptmkit.encode(gpt, TEXTS, pooling="last")
    assert last.shape == (len(TEXTS), 32) and np.isfinite(last).all()
