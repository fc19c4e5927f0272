"""CLM objective: stream packing, shifted labels, loss, learning, tied gradient."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import special_ids

from ptmkit import registry
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.clm import CausalLM, CLMConfig

TOK = special_ids(100)


def gpt_cfg(**kw) -> TransformerConfig:
    base = dict(
        vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64,
        type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
        embedding_norm=False, pooler=False, scaled_residual_init=True,
    )
    base.update(kw)
    return TransformerConfig(**base)


def corpus(n_sent: int = 200, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 15, size=n_sent)  # includes empty sentences
    sent = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    tokens = rng.integers(5, 100, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, 80, n_sent], dtype=np.int64))


def reference_stream(c: SimpleNamespace, sep: int) -> np.ndarray:
    parts = []
    for i in range(len(c.sentences) - 1):
        parts += [c.tokens[c.sentences[i] : c.sentences[i + 1]].astype(np.int64), np.array([sep])]
    return np.concatenate(parts)


def test_blocks_cover_the_stream_with_separators() -> None:
    obj = CausalLM(CLMConfig(), TransformerEncoder(gpt_cfg()), TOK)
    assert registry.get("objective", "clm") is CausalLM
    c = corpus()
    stream = reference_stream(c, 3)
    spans = obj.example_spans(c, 16)
    assert len(spans) == (len(stream) - 1) // 16
    batch = obj.collate(c, spans, np.random.default_rng(0))
    ids, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
    assert ids.shape == labels.shape == (len(spans), 16) and "attention_mask" not in batch
    for i, (s, e) in enumerate(spans):
        np.testing.assert_array_equal(ids[i], stream[s : e - 1])
        np.testing.assert_array_equal(labels[i], stream[s + 1 : e])
    # every stream token but the first is a target exactly once
    np.testing.assert_array_equal(labels.reshape(-1), stream[1 : 1 + labels.size])


def test_loss_is_next_token_cross_entropy() -> None:
    torch.manual_seed(0)
    obj = CausalLM(CLMConfig(), TransformerEncoder(gpt_cfg()), TOK)
    backbone = TransformerEncoder(gpt_cfg()).eval()
    c = corpus()
    batch = obj.collate(c, obj.example_spans(c, 16)[:4], np.random.default_rng(0))
    out = obj(backbone, batch)
    h = backbone(batch["input_ids"], causal=True).last_hidden_state
    logits = h @ backbone.output_embeddings().T
    ref = F.cross_entropy(logits[:, :-1].reshape(-1, 100), batch["input_ids"][:, 1:].reshape(-1), reduction="sum")
    ref = (ref + F.cross_entropy(logits[:, -1], batch["labels"][:, -1], reduction="sum")) / 64
    torch.testing.assert_close(out.loss, ref)
    assert out.n_tokens == 64 and out.n_predictions == 64 and set(out.metrics) == {"clm_loss"}


def test_errors() -> None:
    assert CausalLM.causal  # it asks the encoder for causal attention; downstream use follows
    with pytest.raises(PtmError, match="embedding_size"):
        CausalLM(CLMConfig(), TransformerEncoder(gpt_cfg(embedding_size=16)), TOK)
    obj = CausalLM(CLMConfig(), TransformerEncoder(gpt_cfg()), TOK)
    tiny = SimpleNamespace(tokens=np.arange(5, 10, dtype=np.uint16), sentences=np.array([0, 5]), documents=np.array([0, 1]))
    with pytest.raises(PtmError, match="too few"):
        obj.example_spans(tiny, 16)
    with pytest.raises(PtmError, match="max_position"):
        obj.example_spans(corpus(), 65)


def test_learns_and_trains_tied_embeddings() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = rng.integers(5, 50, size=11)
    tokens = np.tile(sentence, 60).astype(np.uint16)
    c = SimpleNamespace(tokens=tokens, sentences=np.arange(0, len(tokens) + 1, 11, dtype=np.int64),
                        documents=np.array([0, 60], dtype=np.int64))
    cfg = gpt_cfg(dropout=0.0, attention_dropout=0.0)
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, CausalLM(CLMConfig(), encoder, TOK))
    assert not list(model.objective.parameters())  # the LM head is the embedding matrix
    spans = model.objective.example_spans(c, 24)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(30):
        batch = model.objective.collate(c, spans[rng.integers(0, len(spans), 8)], rng)
        out = model(batch)
        opt.zero_grad()
        out.loss.backward()
        if step == 0:
            grad = model.backbone.input_embeddings().weight.grad
            absent = sorted(set(range(100)) - set(batch["input_ids"].unique().tolist()))
            assert grad[absent].abs().sum() > 0  # only reachable through the tied output layer
        opt.step()
        losses.append(out.loss.item())
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
