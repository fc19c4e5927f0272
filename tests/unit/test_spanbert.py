"""SpanBERT: span batches, the span boundary head (shapes, what it reads), the loss, learning, CLI."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import special_ids

from ptmkit import registry
from ptmkit.config import from_dict
from ptmkit.data.corpus import PackedBits
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.spanbert import SpanBERT, SpanBERTConfig
from ptmkit.presets import load_preset

V = 120
TOK = special_ids(V)


def corpus(n_sent: int = 200, seed: int = 0, repeat: bool = False) -> SimpleNamespace:
    """Sentences of 6..30 ordinary tokens in words of 1-3 tokens (word starts recorded).
    ``repeat``: one sentence over and over (something to learn)."""
    rng = np.random.default_rng(seed)
    if repeat:
        sentence = rng.integers(5, 40, size=16)
        tokens = np.tile(sentence, n_sent).astype(np.uint16)
        sent = np.arange(0, len(tokens) + 1, 16, dtype=np.int64)
    else:
        sent = np.concatenate([[0], np.cumsum(rng.integers(6, 31, size=n_sent))]).astype(np.int64)
        tokens = rng.integers(5, V, size=int(sent[-1])).astype(np.uint16)
    n = len(tokens)
    starts = np.zeros(n, dtype=bool)
    ends = np.cumsum(np.random.default_rng(seed + 1).integers(1, 4, size=n))
    starts[ends[ends < n]] = True
    starts[sent[:-1]] = True
    if repeat:
        starts[:] = np.tile(np.arange(16) % 2 == 0, n_sent)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, n_sent], dtype=np.int64),
                           word_starts=PackedBits(np.packbits(starts), n))


def model_cfg(**kw) -> TransformerConfig:
    base = dict(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)
    base.update(kw)
    return TransformerConfig(**base)


def model(cfg=None, **kw) -> PretrainModel:
    encoder = TransformerEncoder(cfg or model_cfg())
    return PretrainModel(encoder, SpanBERT(SpanBERTConfig(**kw), encoder, TOK))


def test_registered_preset_and_config() -> None:
    assert registry.get("objective", "spanbert") is SpanBERT
    cfg = from_dict(SpanBERTConfig, {})
    assert (cfg.masking, cfg.corruption, cfg.span_p, cfg.max_span, cfg.mask_prob, cfg.nsp) == ("span", "span", 0.2, 10, 0.15, False)
    preset = load_preset("spanbert-tiny")
    assert preset["objective"]["name"] == "spanbert" and preset["model"]["hidden_size"] == 128  # base: bert-tiny
    with pytest.raises(PtmError, match="nsp"):
        SpanBERTConfig(nsp=True)
    with pytest.raises(PtmError, match="needs spans"):
        SpanBERTConfig(masking="token")
    with pytest.raises(PtmError, match="did you mean 'span'"):
        from_dict(SpanBERTConfig, {"masking": "spam"})
    keys = set(model().state_dict())
    assert {"objective.sbo_head.position.weight", "objective.sbo_head.dense1.weight", "objective.sbo_head.norm2.weight",
            "objective.sbo_head.bias", "objective.mlm_head.bias"} <= keys
    assert "objective.nsp_head.weight" not in keys and SpanBERT.hf_heads == ("mlm",)


def test_batch_carries_span_boundaries() -> None:
    m = model()
    c = corpus()
    spans = m.objective.example_spans(c, 64)
    batch = m.objective.collate(c, spans[:32], np.random.default_rng(0))
    labels, pos = batch["mlm_labels"].numpy(), batch["mlm_positions"].numpy()
    left, right = batch["sbo_left"].numpy(), batch["sbo_right"].numpy()
    att = batch["attention_mask"].numpy()
    used = labels != -100
    rows = np.nonzero(used)[0]
    assert "nsp_labels" not in batch and used.sum() > 0
    assert ((left < pos) & (pos < right))[used].all()
    assert (att[rows, left[used]] == 1).all() and (att[rows, right[used]] == 1).all()  # real tokens
    assert (left[~used] == 0).all() and (right[~used] == 0).all()
    # every position strictly between the boundaries is predicted: a span is one contiguous unit
    chosen = np.zeros(batch["input_ids"].shape, dtype=bool)
    chosen[rows, pos[used]] = True
    for r, a, b in zip(rows, left[used], right[used]):
        assert chosen[r, a + 1 : b].all()


def test_sbo_head_shapes_and_reads_only_boundaries_and_position() -> None:
    torch.manual_seed(0)
    m = model().eval()
    c = corpus()
    batch = m.objective.collate(c, m.objective.example_spans(c, 64)[:8], np.random.default_rng(1))
    out = m.backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    h = out.last_hidden_state.detach()
    W = m.backbone.output_embeddings()
    target, mlm_logits, sbo_logits = m.objective.heads(h, batch, W)
    n = int((batch["mlm_labels"] != -100).sum())
    assert target.shape == (n,) and mlm_logits.shape == (n, V) and sbo_logits.shape == (n, V)

    # perturb every hidden state inside the spans: SBO unchanged, MLM changed
    inside = torch.zeros(h.shape[:2], dtype=torch.bool)
    used = batch["mlm_labels"] != -100
    rows = used.nonzero()[:, 0]
    inside[rows, batch["mlm_positions"][used]] = True
    assert not (inside[rows, batch["sbo_left"][used]] | inside[rows, batch["sbo_right"][used]]).any()
    noisy = h + 5.0 * torch.randn_like(h) * inside[..., None]
    _, mlm2, sbo2 = m.objective.heads(noisy, batch, W)
    torch.testing.assert_close(sbo2, sbo_logits)
    assert (mlm2 - mlm_logits).abs().max() > 1e-2
    # perturbing the boundaries, or shifting the relative positions, does change it
    edge = torch.zeros_like(inside)
    edge[rows, batch["sbo_left"][used]] = True
    _, _, sbo3 = m.objective.heads(h + 5.0 * torch.randn_like(h) * edge[..., None], batch, W)
    assert (sbo3 - sbo_logits).abs().max() > 1e-2
    with torch.no_grad():  # same boundary states, other relative position embeddings
        m.objective.sbo_head.position.weight.normal_()
    _, _, sbo4 = m.objective.heads(h, batch, W)
    assert (sbo4 - sbo_logits).abs().max() > 1e-2


def test_loss_equals_direct_computation() -> None:
    torch.manual_seed(0)
    m = model().eval()
    obj = m.objective
    c = corpus()
    batch = obj.collate(c, obj.example_spans(c, 64)[:6], np.random.default_rng(2))
    out = m(batch)
    h = m.backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
    W = m.backbone.output_embeddings()
    head = obj.sbo_head
    mlm_terms, sbo_terms = [], []
    labels = batch["mlm_labels"]
    for b in range(labels.shape[0]):
        for j in range(labels.shape[1]):
            y = int(labels[b, j])
            if y == -100:
                continue
            i, s1, e1 = (int(batch[k][b, j]) for k in ("mlm_positions", "sbo_left", "sbo_right"))
            # SBO: y_i = f([h_{s-1}; h_{e+1}; p_{i-s+1}]), s - 1 = s1, so i - s = i - s1 - 1
            x = torch.cat([h[b, s1], h[b, e1], head.position.weight[i - s1 - 1]])
            x = F.layer_norm(F.gelu(x @ head.dense1.weight.T + head.dense1.bias), (32,), head.norm1.weight, head.norm1.bias, 1e-12)
            x = F.layer_norm(F.gelu(x @ head.dense2.weight.T + head.dense2.bias), (32,), head.norm2.weight, head.norm2.bias, 1e-12)
            sbo_terms.append(-torch.log_softmax(W @ x + head.bias, -1)[y])
            # MLM: BERT's head on h_i
            mh = obj.mlm_head
            z = F.layer_norm(F.gelu(h[b, i] @ mh.dense.weight.T + mh.dense.bias), (32,), mh.norm.weight, mh.norm.bias, 1e-12)
            mlm_terms.append(-torch.log_softmax(W @ z + mh.bias, -1)[y])
    mlm, sbo = torch.stack(mlm_terms).mean(), torch.stack(sbo_terms).mean()
    torch.testing.assert_close(out.metrics["mlm_loss"], mlm)
    torch.testing.assert_close(out.metrics["sbo_loss"], sbo)
    torch.testing.assert_close(out.loss, mlm + sbo)
    assert out.n_predictions == len(sbo_terms) and set(out.metrics) == {"mlm_loss", "mlm_acc", "sbo_loss", "sbo_acc"}
    # sbo_weight scales the boundary term
    half = model(sbo_weight=0.5)
    half.load_state_dict(m.state_dict())
    torch.testing.assert_close(half.eval()(batch).loss, mlm + 0.5 * sbo)


def test_loss_falls_on_a_toy_corpus() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    c = corpus(n_sent=40, repeat=True)
    m = model(model_cfg(dropout=0.0, attention_dropout=0.0), mask_prob=0.2)
    spans = m.objective.example_spans(c, 36)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    mlm, sbo = [], []
    for _ in range(40):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        mlm.append(out.metrics["mlm_loss"].item())
        sbo.append(out.metrics["sbo_loss"].item())
    assert np.mean(mlm[-5:]) < 0.6 * np.mean(mlm[:5])
    assert np.mean(sbo[-5:]) < 0.6 * np.mean(sbo[:5])


def test_cli_pretrain_spanbert_tiny(tmp_path) -> None:
    pytest.importorskip("ptmkit.data.batches")
    from ptmkit.cli import main
    from ptmkit.train.trainer import read_metrics

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()
    text = tmp_path / "train.txt"
    with open(text, "w", encoding="utf-8") as f:
        for _ in range(40):
            for _ in range(6):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "\n")
            f.write("\n")
    run = tmp_path / "run"
    rc = main([
        "pretrain", "spanbert-tiny", "--data", str(text), "-o", str(run),
        "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
        "tokenizer.vocab_size=100", "tokenizer.min_frequency=1",
        "train.batch_size=8", "train.seq_len=48", "train.max_steps=20", "train.warmup_steps=2", "train.lr=3e-3",
        "train.log_every=5", "train.eval_every=20", "train.save_every=20", "train.eval_batches=2", "train.num_threads=1",
    ])
    assert rc == 0
    config = json.loads((run / "config.json").read_text())
    assert config["objective"]["name"] == "spanbert" and config["objective"]["masking"] == "span"
    train = read_metrics(run / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == [5, 10, 15, 20]
    assert all({"loss", "mlm_loss", "sbo_loss", "sbo_acc"} <= set(r) for r in train)
    assert train[-1]["loss"] < train[0]["loss"]
    assert (run / "data" / "word_starts.bin").is_file()
