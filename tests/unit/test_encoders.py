"""The encoder contract and the Transformer's variants: relative positions, factorized
embeddings, cross-layer sharing, declared depth."""

from __future__ import annotations

import pytest
import torch
from conftest import special_ids

from ptmkit import registry
from ptmkit.encoders import Encoder, TransformerConfig, TransformerEncoder
from ptmkit.nn.positions import relative_position_bucket


def cfg(**kw) -> TransformerConfig:
    base = dict(vocab_size=60, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=64, max_position=40)
    base.update(kw)
    return TransformerConfig(**base)


def test_registered_and_contract() -> None:
    assert registry.get("encoder", "transformer") is TransformerEncoder
    enc = TransformerEncoder(cfg())
    assert isinstance(enc, Encoder) and enc.output_size == 32 and enc.num_layers == 3
    assert enc.output_embeddings() is enc.input_embeddings().weight
    depths = {n: enc.layer_index(n) for n, _ in enc.named_parameters()}
    assert depths["embeddings.word_embeddings.weight"] == 0
    assert depths["layers.2.ffn.fc1.weight"] == 3 and depths["pooler.dense.weight"] == 4


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_buckets_match_t5(bidirectional: bool) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-300, 300)[None, :]
    ours = relative_position_bucket(rel, bidirectional, 32, 128)
    theirs = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    assert torch.equal(ours, theirs)
    del transformers


def test_relative_positions_are_translation_invariant() -> None:
    torch.manual_seed(0)
    enc = TransformerEncoder(cfg(positions="relative", dropout=0.0, attention_dropout=0.0)).eval()
    assert enc.embeddings.position_embeddings is None and enc.relative_bias is not None
    with torch.no_grad():
        enc.relative_bias.bias.weight.normal_(0, 1.0)
    ids = torch.randint(5, 60, (1, 6))
    out = enc(ids).last_hidden_state
    # the same tokens with other tokens prepended see the same relative offsets among themselves
    # only when the extra tokens are masked out as padding keys
    padded = torch.cat([torch.randint(5, 60, (1, 3)), ids], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    shifted = enc(padded, attention_mask=mask).last_hidden_state[:, 3:]
    torch.testing.assert_close(shifted, out, rtol=1e-5, atol=1e-5)
    # and sequences longer than max_position are fine
    assert enc(torch.randint(5, 60, (1, 50))).last_hidden_state.shape == (1, 50, 32)


def test_factorized_embeddings() -> None:
    enc = TransformerEncoder(cfg(embedding_size=8))
    assert enc.input_embeddings().weight.shape == (60, 8) and enc.embeddings.project.weight.shape == (32, 8)
    assert enc(torch.randint(0, 60, (2, 5))).last_hidden_state.shape == (2, 5, 32)

    from ptmkit.objectives.mlm import MaskedLM, MLMConfig

    tok = special_ids(60)
    mlm = MaskedLM(MLMConfig(nsp=False), enc, tok)
    assert mlm.mlm_head.dense.weight.shape == (8, 32)  # H -> E, then the tied [V, E] decoder


@pytest.mark.parametrize("sharing, shared", [("all", {"attn", "ffn"}), ("attention", {"attn"}), ("ffn", {"ffn"}), ("none", set())])
def test_cross_layer_sharing(sharing: str, shared: set[str], tmp_path) -> None:
    torch.manual_seed(0)
    enc = TransformerEncoder(cfg(sharing=sharing))
    for part in ("attn", "ffn"):
        same = getattr(enc.layers[0], part) is getattr(enc.layers[2], part)
        assert same == (part in shared)
    n_layer = sum(p.numel() for p in TransformerEncoder(cfg(num_layers=1)).layers.parameters())
    n_attn = sum(p.numel() for p in enc.layers[0].attn.parameters()) + 2 * 32
    expected = {"all": n_layer, "none": 3 * n_layer, "attention": 3 * n_layer - 2 * n_attn, "ffn": n_layer + 2 * n_attn}
    assert sum(p.numel() for p in enc.layers.parameters()) == expected[sharing]
    # a checkpoint stores each shared tensor once and loads back into the same sharing
    from safetensors.torch import load_model, save_model

    save_model(enc, str(tmp_path / "m.safetensors"))
    back = TransformerEncoder(cfg(sharing=sharing))
    load_model(back, str(tmp_path / "m.safetensors"))
    ids = torch.randint(0, 60, (2, 5))
    torch.testing.assert_close(back.eval()(ids).last_hidden_state, enc.eval()(ids).last_hidden_state)
    if sharing == "all":
        assert back.layers[0] is back.layers[1]
