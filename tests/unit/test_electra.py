"""ELECTRA: generator sizing, corruption, the stop-gradient between the two losses, learning."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import special_ids

from ptmkit import registry
from ptmkit.config import from_dict
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.electra import ELECTRA, ELECTRAConfig, generator_config, gumbel_sample

TOK = special_ids(200)


def corpus(n_sent: int = 300, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    sent = np.concatenate([[0], np.cumsum(rng.integers(3, 21, size=n_sent))]).astype(np.int64)
    tokens = rng.integers(5, 200, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, n_sent], dtype=np.int64))


def model_cfg(**kw) -> TransformerConfig:
    base = dict(vocab_size=200, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)
    base.update(kw)
    return TransformerConfig(**base)


def model(**kw) -> PretrainModel:
    cfg = model_cfg()
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, ELECTRA(ELECTRAConfig(**kw), encoder, TOK))


def test_registered_defaults_and_errors() -> None:
    assert registry.get("objective", "electra") is ELECTRA
    cfg = from_dict(ELECTRAConfig, {"generator_size": "0.5"})
    assert (cfg.mask_prob, cfg.mask_token_ratio, cfg.random_token_ratio, cfg.disc_weight) == (0.15, 0.85, 0.0, 50.0)
    assert cfg.generator_size == 0.5 and not cfg.nsp
    with pytest.raises(PtmError, match="nsp"):
        ELECTRAConfig(nsp=True)
    with pytest.raises(PtmError, match="generator_size"):
        ELECTRAConfig(generator_size=0.0)
    assert not ELECTRA.causal and ELECTRA.encoders == ("transformer",)


def test_generator_is_a_fraction_of_the_backbone() -> None:
    g = generator_config(model_cfg(hidden_size=256, num_heads=4, intermediate_size=1024), ELECTRAConfig(generator_size=0.25))
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.num_layers) == (64, 1, 256, 2)
    g = generator_config(model_cfg(hidden_size=128, num_heads=2, intermediate_size=512), ELECTRAConfig(generator_layers=1))
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.num_layers) == (32, 1, 128, 1)
    m = model()
    keys = set(m.state_dict())
    assert "objective.generator.project.weight" in keys and "objective.rtd_head.out.weight" in keys
    assert not any(k.startswith("backbone.") and "generator" in k for k in keys)  # the backbone is the discriminator


def test_corruption_marks_exactly_the_changed_tokens() -> None:
    torch.manual_seed(0)
    m = model()
    c = corpus()
    obj = m.objective
    batch = obj.collate(c, obj.example_spans(c, 48)[:16], np.random.default_rng(0))
    ids, labels = batch["input_ids"], batch["mlm_labels"]
    rows, slots = (labels != -100).nonzero(as_tuple=True)
    positions, target = batch["mlm_positions"][rows, slots], labels[rows, slots]
    logits = torch.randn(len(rows), 200)
    logits[: len(rows) // 2, :] = -1e4
    logits[torch.arange(len(rows) // 2), target[: len(rows) // 2]] = 0.0  # these rows can only sample the original
    corrupted, replaced = obj.corrupt(ids, rows, positions, target, logits)
    original = ids.clone()
    original[rows, positions] = target
    np.testing.assert_array_equal(replaced.bool().numpy(), (corrupted != original).numpy())
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    chosen[rows, positions] = True
    assert torch.equal(corrupted[~chosen], ids[~chosen])  # only the chosen positions change
    assert not replaced[rows[: len(rows) // 2], positions[: len(rows) // 2]].any()
    assert replaced.sum() > 0.8 * (len(rows) - len(rows) // 2)


def test_gumbel_sampling_follows_the_softmax() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]]).repeat(40000, 1)
    for temperature in (1.0, 2.0):
        counts = np.bincount(gumbel_sample(logits, temperature).numpy(), minlength=4) / 40000
        expected = torch.softmax(logits[0] / temperature, -1).numpy()
        np.testing.assert_allclose(counts, expected, atol=0.01)


def test_discriminator_loss_does_not_reach_the_generator() -> None:
    c = corpus()
    grads = {}
    for weight in (1.0, 50.0):
        torch.manual_seed(0)
        m = model(disc_weight=weight)
        m.eval()  # no dropout: both runs are the same function
        batch = m.objective.collate(c, m.objective.example_spans(c, 48)[:8], np.random.default_rng(0))
        torch.manual_seed(1)  # the same generator samples
        m(batch).loss.backward()
        grads[weight] = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    for name in grads[1.0]:
        if ".generator." in name or ".mlm_head." in name:
            torch.testing.assert_close(grads[1.0][name], grads[50.0][name], msg=name)
    emb = "backbone.layers.0.attn.out.weight"
    assert not torch.allclose(grads[1.0][emb], grads[50.0][emb])  # the discriminator does feel λ


def electra_grads(c, **kw) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    m = model(**kw)
    m.eval()  # no dropout: every call is the same function
    batch = m.objective.collate(c, m.objective.example_spans(c, 48)[:8], np.random.default_rng(0))
    torch.manual_seed(1)  # the same generator samples
    m(batch).loss.backward()
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def test_embedding_rtd_weight_scales_only_the_embeddings_share() -> None:
    """λ = 50 with embedding_rtd_weight = 1/50 gives the shared embeddings exactly λ = 1's gradient
    while the discriminator's layers keep λ = 50's; at 0 the embeddings learn from the MLM alone."""
    c = corpus()
    paper = electra_grads(c, disc_weight=50.0)
    l1 = electra_grads(c, disc_weight=1.0)
    scaled = electra_grads(c, disc_weight=50.0, embedding_rtd_weight=0.02)
    emb, layer = "backbone.embeddings.word_embeddings.weight", "backbone.layers.0.attn.out.weight"
    torch.testing.assert_close(scaled[emb], l1[emb], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(scaled[layer], paper[layer])
    assert not torch.allclose(paper[emb], l1[emb], rtol=1e-2)
    mlm_only = electra_grads(c, disc_weight=50.0, embedding_rtd_weight=0.0)
    mlm_only_l1 = electra_grads(c, disc_weight=1.0, embedding_rtd_weight=0.0)
    torch.testing.assert_close(mlm_only[emb], mlm_only_l1[emb])  # no λ in the embeddings at all
    torch.testing.assert_close(mlm_only[layer], paper[layer])
    with pytest.raises(PtmError, match="embedding_rtd_weight"):
        ELECTRAConfig(embedding_rtd_weight=1.5)
    with pytest.raises(PtmError, match="uniform"):
        ELECTRAConfig(embedding_rtd_weight=0, generator="uniform")


def test_learns_to_detect_replacements() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = rng.integers(5, 40, size=12)
    tokens = np.tile(sentence, 60).astype(np.uint16)
    c = SimpleNamespace(tokens=tokens, sentences=np.arange(0, len(tokens) + 1, 12, dtype=np.int64),
                        documents=np.array([0, 60], dtype=np.int64))
    tok = special_ids(40)
    cfg = model_cfg(vocab_size=40, dropout=0.0, attention_dropout=0.0)
    encoder = TransformerEncoder(cfg)
    m = PretrainModel(encoder, ELECTRA(ELECTRAConfig(mask_prob=0.3), encoder, tok))
    spans = m.objective.example_spans(c, 32)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    history = []
    for _ in range(60):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        history.append({k: v.item() for k, v in out.metrics.items()})
    first, last = history[:5], history[-5:]
    mean = lambda rows, k: float(np.mean([r[k] for r in rows]))  # noqa: E731
    assert mean(last, "mlm_loss") < 0.6 * mean(first, "mlm_loss")
    assert mean(last, "rtd_loss") < 0.6 * mean(first, "rtd_loss")
