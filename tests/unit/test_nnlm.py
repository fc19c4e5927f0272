"""NNLM (Bengio et al. 2003): architecture, deterministic batches, training with the Trainer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.static.nnlm import NNLM, NGramWindows, NNLMConfig, build_lm_vocab, encode_lm, train_nnlm
from ptmkit.train.config import TrainConfig


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: one thread avoids OpenMP barrier waits on a busy machine (restored afterwards)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture()
def text(tmp_path):
    rng = np.random.default_rng(0)
    # a deterministic grammar: "a b c d" cycles with noise words, so context matters
    lines = []
    for _ in range(300):
        start = rng.integers(0, 4)
        lines.append(" ".join(["a", "b", "c", "d"][(start + k) % 4] for k in range(rng.integers(3, 9))))
    lines += ["rare"]
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n\n")
    return path


def test_vocab_and_encoding(text):
    vocab = build_lm_vocab(text, min_count=3)
    assert vocab.words[-2:] == ["<unk>", "</s>"] and "rare" not in vocab.index
    ids, offsets = encode_lm(text, vocab)
    assert offsets.shape[0] == 302 and ids[offsets[-2]] == vocab.unk
    assert vocab.bos == len(vocab)


def test_vocab_of_the_training_sentences_with_written_symbols(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b <unk> a\n\n  \nb </s> c <s>\na a\nheld out z z z\n")
    vocab = build_lm_vocab(path, min_count=2, max_sentences=3)  # the last sentence is held out
    assert vocab.words == ["a", "b", "<unk>", "</s>"] and (vocab.unk, vocab.eos, vocab.bos) == (2, 3, 4)
    # <unk> stands for the rare c, </s> and <s> and the written <unk>; </s> counts the 3 sentences
    assert vocab.counts.tolist() == [4, 2, 4, 3]
    ids, offsets = encode_lm(path, vocab)
    assert offsets.tolist() == [0, 4, 8, 10, 15] and ids.dtype == offsets.dtype == np.int64
    assert ids.tolist() == [0, 1, 2, 0, 1, 3, 2, 2, 0, 0, 2, 2, 2, 2, 2]  # a written </s> is </s>


def test_forward_matches_formula():
    torch.manual_seed(0)
    cfg = NNLMConfig(order=3, dim=4, hidden=5, direct=True)
    m = NNLM(7, cfg)
    ctx = torch.tensor([[7, 7], [1, 2], [3, 0]])
    x = m.C.weight[ctx].flatten(1)
    want = m.b + x @ m.W.weight.T + torch.tanh(x @ m.H.weight.T + m.H.bias) @ m.U.weight.T
    torch.testing.assert_close(m.logits(ctx), want)
    out = m({"context": ctx, "target": torch.tensor([1, 2, 3])})
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(want, torch.tensor([1, 2, 3])))
    assert out.n_predictions == 3
    assert NNLM(7, NNLMConfig(order=3, dim=4, hidden=5)).W is None
    with pytest.raises(PtmError):
        NNLMConfig(hidden=0, direct=False)
    with pytest.raises(PtmError):
        NNLMConfig(dropout=1.0)


def test_direct_connections_gradients_match_autograd_reference():
    torch.manual_seed(1)
    cfg = NNLMConfig(order=3, dim=4, hidden=5, direct=True)
    m = NNLM(30, cfg).double()
    m.slice_size = 7
    batch = {"context": torch.randint(0, 31, (9, 2)), "target": torch.randint(0, 30, (9,))}
    m(batch).loss.backward()
    got = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    torch.nn.functional.cross_entropy(m.logits(batch["context"]), batch["target"]).backward()
    for n, p in m.named_parameters():
        torch.testing.assert_close(got[n], p.grad, rtol=0, atol=1e-12, msg=n)


def test_batches_are_a_pure_function_of_epoch_and_step(text):
    vocab = build_lm_vocab(text)
    ids, offsets = encode_lm(text, vocab)
    src = NGramWindows(ids, offsets, vocab, order=3, batch_size=16, seed=1)
    assert len(src) == len(ids) + len(offsets) - 1
    a, b = src(1, 3), src(0, 0)
    again = NGramWindows(ids, offsets, vocab, order=3, batch_size=16, seed=1)
    assert torch.equal(again(1, 3)["context"], a["context"]) and torch.equal(again(0, 0)["target"], b["target"])
    assert not torch.equal(src(2, 3)["target"], a["target"])
    # contexts: the n-1 preceding symbols, <s> padding at sentence starts
    first = next(src.eval_batches())
    assert first["context"][0].tolist() == [vocab.bos, vocab.bos] and first["target"][0] == ids[0]
    assert first["context"][1].tolist() == [vocab.bos, ids[0]]


def test_training_with_trainer_beats_unigram(text, tmp_path):
    vocab = build_lm_vocab(text)
    data = encode_lm(text, vocab)
    cfg = NNLMConfig(order=3, dim=8, hidden=16, direct=True)
    tcfg = TrainConfig(batch_size=64, lr=1e-2, max_steps=120, eval_every=40, eval_batches=100, schedule="constant",
                       weight_decay=0.0, device="cpu", log_every=40)
    model, stats = train_nnlm(data, data, vocab, cfg, tcfg, run_dir=tmp_path / "run", patience=3)
    lp = model.log_probs(NGramWindows(*data, vocab, cfg.order, 64))
    ppl = math.exp(-lp.mean())
    assert ppl == pytest.approx(stats["valid_ppl"], rel=1e-4)
    counts = np.bincount(NGramWindows(*data, vocab, 3, 64).padded[NGramWindows(*data, vocab, 3, 64).targets])
    p = counts[counts > 0] / counts.sum()
    unigram_ppl = math.exp(-(p * np.log(p)).sum())
    assert ppl < 0.6 * unigram_ppl
    wv = model.word_vectors(vocab)
    assert wv.vectors.shape == (len(vocab), 8)
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    assert stats["stop_reason"] in ("max_steps", "no improvement in 3 evaluations")


def test_training_stops_at_the_time_budget(text):
    vocab = build_lm_vocab(text)
    data = encode_lm(text, vocab)
    tcfg = TrainConfig(batch_size=32, lr=1e-2, max_steps=10**6, eval_every=20, eval_batches=100, schedule="constant",
                       device="cpu", log_every=0)
    model, stats = train_nnlm(data, data, vocab, NNLMConfig(order=3, dim=4, hidden=8), tcfg, max_seconds=0.0)
    assert stats["stop_reason"] == "time budget" and stats["steps"] == 1
    assert math.isfinite(stats["valid_ppl"]) and stats["history"][-1][0] == 1
