"""The biLM objective: blocks and both directions' labels, the loss against a direct float64
computation, the shared softmax (tied or own), the unigram bias, learning, builder errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ptmkit import registry
from ptmkit.build import build_encoder, build_model, resolve_config
from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.bilm import BidirectionalLM, BiLMConfig
from ptmkit.presets import load_preset

V = 40
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
TOK = SimpleNamespace(vocab_size=V, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, id_to_token=lambda i: VOCAB[i])
SMALL = dict(num_layers=2, hidden_size=12, projection_size=6, filters=[[1, 4], [2, 4], [3, 8]], max_chars=8)


def model(seed: int = 0, char_cnn: bool = True, dropout: float = 0.0, **obj) -> PretrainModel:
    torch.manual_seed(seed)
    enc = LSTMEncoder(LSTMConfig(vocab_size=V, char_cnn=char_cnn, dropout=dropout, **SMALL))
    enc.bind_tokenizer(TOK)
    return PretrainModel(enc, BidirectionalLM(BiLMConfig(dropout=dropout, **obj), enc, TOK))


def corpus(n_sent: int = 120, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 12, size=n_sent)  # includes empty sentences
    sent = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    tokens = rng.integers(5, V, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, 50, n_sent], dtype=np.int64))


def stream(c: SimpleNamespace, sep: int = 3) -> np.ndarray:
    parts = []
    for i in range(len(c.sentences) - 1):
        parts += [c.tokens[c.sentences[i] : c.sentences[i + 1]].astype(np.int64), np.array([sep])]
    return np.concatenate(parts)


def test_registered_and_declared() -> None:
    assert registry.get("objective", "bilm") is BidirectionalLM
    assert BidirectionalLM.encoders == ("lstm",) and not BidirectionalLM.causal and BidirectionalLM.hf_heads == ()


def test_blocks_and_labels_of_both_directions() -> None:
    obj = model().objective
    c = corpus()
    s = stream(c)
    T = 10
    spans = obj.example_spans(c, T)
    assert len(spans) == (len(s) - 1) // T and np.all(spans[:, 1] - spans[:, 0] == T + 1)
    batch = obj.collate(c, spans, np.random.default_rng(0))
    ids, fwd, bwd = (batch[k].numpy() for k in ("input_ids", "labels_forward", "labels_backward"))
    assert ids.shape == fwd.shape == bwd.shape == (len(spans), T + 1) and "attention_mask" not in batch
    for i, (a, b) in enumerate(spans):
        np.testing.assert_array_equal(ids[i], s[a:b])
        np.testing.assert_array_equal(fwd[i, :-1], s[a + 1 : b])  # t predicts t + 1
        np.testing.assert_array_equal(bwd[i, 1:], s[a : b - 1])  # t predicts t - 1
        assert fwd[i, -1] == -100 and bwd[i, 0] == -100
    # each direction predicts every stream token once (forward: all but the first, backward: all but the last)
    n = len(spans) * T
    np.testing.assert_array_equal(fwd[:, :-1].reshape(-1), s[1 : 1 + n])
    np.testing.assert_array_equal(bwd[:, 1:].reshape(-1), s[:n])
    # a shorter block is padded and masked
    short = obj.collate(c, np.array([[0, T + 1], [5, 9]]), np.random.default_rng(0))
    mask = short["attention_mask"].numpy()
    assert mask[1].tolist() == [1] * 4 + [0] * (T - 3)
    assert (short["labels_forward"][1, 3:] == -100).all() and (short["labels_backward"][1, 4:] == -100).all()
    assert short["labels_backward"][1, 3] == s[7] and short["labels_forward"][1, 2] == s[8]


def reference_loss(m: PretrainModel, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The biLM loss computed directly: both stacks run by hand over each row's real tokens
    (the backward stack over the reversed tokens), the softmax as explicit float64 logits."""
    enc, obj = m.backbone, m.objective
    W = enc.output_embeddings() if obj.tied else obj.softmax.weight
    b = obj.softmax.bias
    ids = batch["input_ids"]
    lengths = batch.get("attention_mask", torch.ones_like(ids)).sum(1)
    nll = {"forward": [], "backward": []}
    for row in range(ids.shape[0]):
        n = int(lengths[row])
        tokens = ids[row, :n]
        x = enc.embed(tokens[None])  # [1, n, P]

        def run(layers, h):
            for j, lstm in enumerate(layers):
                out = lstm(h)[0]
                h = out + h if j > 0 else out
            return h[0]

        forward = run(enc.forward_layers, x)  # [n, P]; state t has read tokens 0..t
        backward = run(enc.backward_layers, x.flip(1)).flip(0)  # state t has read tokens n-1..t
        for t in range(n):
            if t + 1 < n:
                nll["forward"].append(-torch.log_softmax(forward[t] @ W.T + b, -1)[tokens[t + 1]])
            if t >= 1:
                nll["backward"].append(-torch.log_softmax(backward[t] @ W.T + b, -1)[tokens[t - 1]])
    return torch.stack(nll["forward"]).mean(), torch.stack(nll["backward"]).mean()


@pytest.mark.parametrize("char_cnn", [True, False])
def test_loss_equals_direct_float64_computation(char_cnn: bool) -> None:
    m = model(char_cnn=char_cnn).double().eval()
    with torch.no_grad():
        m.objective.softmax.bias.normal_(0, 1.0)
    c = corpus()
    spans = m.objective.example_spans(c, 9)[:3]
    spans = np.concatenate([spans, [[4, 10]]])  # and a short, padded block
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    out = m(batch)
    ref_f, ref_b = reference_loss(m, batch)
    torch.testing.assert_close(out.metrics["forward_loss"], ref_f, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.metrics["backward_loss"], ref_b, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.loss, 0.5 * (ref_f + ref_b), rtol=1e-10, atol=1e-10)
    assert out.n_predictions == 3 * 9 + 5 and out.n_tokens == 3 * 10 + 6
    # gradients agree with autograd through the reference
    m.zero_grad()
    out.loss.backward()
    got = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    ref_f, ref_b = reference_loss(m, batch)
    (0.5 * (ref_f + ref_b)).backward()
    for n, p in m.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(got[n], p.grad, rtol=1e-8, atol=1e-10, msg=n)


def test_one_softmax_tied_or_own() -> None:
    chars = model()
    assert not chars.objective.tied and chars.objective.softmax.weight.shape == (V, 6)
    words = model(char_cnn=False)
    assert words.objective.tied and words.objective.softmax.weight is None
    assert {n for n, _ in words.objective.named_parameters()} == {"softmax.bias"}
    untied = model(char_cnn=False, tie_embeddings=False)
    assert not untied.objective.tied and untied.objective.softmax.weight.shape == (V, 6)
    # the tied table gets a gradient through the softmax, even for rows absent from the input
    c = corpus()
    batch = words.objective.collate(c, words.objective.example_spans(c, 8)[:2], np.random.default_rng(0))
    words(batch).loss.backward()
    grad = words.backbone.input_embeddings().weight.grad
    absent = sorted(set(range(V)) - set(batch["input_ids"].unique().tolist()))
    assert absent and grad[absent].abs().sum() > 0


def test_unigram_output_bias() -> None:
    m = model()
    c = corpus()
    spans = m.objective.example_spans(c, 10)
    m.objective.init_from_corpus(c, spans)
    s = stream(c)
    covered = np.concatenate([s[a:b] for a, b in spans])
    counts = np.bincount(covered, minlength=V) + 1.0
    np.testing.assert_allclose(m.objective.softmax.bias.detach().numpy(), np.log(counts / counts.sum()), rtol=1e-6)
    zero = model(output_bias="zero")
    zero.objective.init_from_corpus(c, spans)
    assert torch.all(zero.objective.softmax.bias == 0)


def test_learns_a_toy_corpus() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = rng.integers(5, V, size=9)
    tokens = np.tile(sentence, 50).astype(np.uint16)
    c = SimpleNamespace(tokens=tokens, sentences=np.arange(0, len(tokens) + 1, 9, dtype=np.int64),
                        documents=np.array([0, 50], dtype=np.int64))
    m = model(dropout=0.0)
    spans = m.objective.example_spans(c, 12)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    history = []
    for _ in range(40):
        batch = m.objective.collate(c, spans[rng.integers(0, len(spans), 8)], rng)
        out = m(batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        history.append([out.metrics["forward_loss"].item(), out.metrics["backward_loss"].item()])
    h = np.array(history)
    assert np.all(h[-5:].mean(0) < 0.5 * h[:5].mean(0)), h[[0, -1]]  # both directions learn


def test_errors_and_pairings() -> None:
    enc = LSTMEncoder(LSTMConfig(vocab_size=V, bidirectional=False, **SMALL))
    enc.bind_tokenizer(TOK)
    with pytest.raises(PtmError, match="bidirectional"):
        BidirectionalLM(BiLMConfig(), enc, TOK)
    with pytest.raises(PtmError, match="output_bias.*did you mean 'unigram'"):
        BiLMConfig(output_bias="unigam")
    raw = load_preset("elmo-tiny")
    raw["model"].update(SMALL)
    assert build_model(resolve_config(raw, TOK), TOK).objective.__class__ is BidirectionalLM
    bad = {**raw, "objective": {"name": "mlm"}}
    with pytest.raises(PtmError, match="objective 'mlm' cannot be used with encoder 'lstm'.*'transformer'"):
        resolve_config(bad, TOK)
    bert = load_preset("bert-tiny")
    bert["objective"] = {"name": "bilm"}
    with pytest.raises(PtmError, match="objective 'bilm' cannot be used with encoder 'transformer'.*'lstm'"):
        resolve_config(bert, TOK)
    with pytest.raises(PtmError, match="unknown encoder 'lstn'.*did you mean 'lstm'"):
        build_encoder({"encoder": "lstn"})
    with pytest.raises(PtmError, match="hiden_size.*did you mean 'hidden_size'"):
        build_encoder({"encoder": "lstm", "hiden_size": 8})
