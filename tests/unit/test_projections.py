"""``Encoder.projections()``: each named projection computes exactly its rows of the module that
holds it, fused q/k/v blocks included, and shared layers are listed once."""

from __future__ import annotations

import pytest
import torch

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder
from ptmkit.encoders.encoder_decoder_config import EncoderDecoderConfig
from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
from ptmkit.errors import PtmError


def _bert(**kw):
    torch.manual_seed(0)
    return TransformerEncoder(TransformerConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2,
                                                intermediate_size=24, max_position=16, **kw))


def test_transformer_names_its_projections_and_the_qkv_blocks_are_the_attention_inputs():
    enc = _bert().eval()
    p = enc.projections()
    assert sorted(p) == sorted(f"layers.{i}.{n}" for i in range(2)
                               for n in ("attn.q", "attn.k", "attn.v", "attn.o", "ffn.fc1", "ffn.fc2"))
    attn = enc.layers[1].attn
    x = torch.randn(3, 5, 16)
    qkv = attn.qkv(x)
    for j, name in enumerate("qkv"):  # the fused module's output is q, k, v in that order
        proj = p[f"layers.1.attn.{name}"]
        assert proj.linear is attn.qkv and (proj.in_features, proj.out_features) == (16, 16)
        expected = torch.nn.functional.linear(x, attn.qkv.weight[proj.rows], attn.qkv.bias[proj.rows])
        torch.testing.assert_close(qkv[..., 16 * j:16 * (j + 1)], expected)
    assert p["layers.0.ffn.fc1"].out_features == 24 and p["layers.0.attn.o"].linear is enc.layers[0].attn.out


def test_pruned_heads_shrink_the_blocks_and_shared_layers_are_listed_once():
    enc = _bert()
    enc.prune_heads({0: [1]})
    p = enc.projections()
    assert p["layers.0.attn.v"].rows == slice(16, 24) and p["layers.1.attn.v"].rows == slice(32, 48)
    shared = _bert(sharing="all").projections()
    assert sorted(shared) == sorted(f"layers.0.{n}" for n in ("attn.q", "attn.k", "attn.v", "attn.o", "ffn.fc1", "ffn.fc2"))


def test_encoder_decoder_lists_self_and_cross_attention_and_the_fused_kv():
    torch.manual_seed(0)
    enc = EncoderDecoder(EncoderDecoderConfig(vocab_size=40, hidden_size=16, encoder_layers=1, decoder_layers=1,
                                              num_heads=2, intermediate_size=24, max_position=16))
    p = enc.projections()
    assert {"encoder.layers.0.attn.q", "decoder.layers.0.self_attn.v", "decoder.layers.0.cross_attn.q",
            "decoder.layers.0.cross_attn.k", "decoder.layers.0.ffn.fc2"} <= set(p)
    cross = enc.decoder.layers[0].cross_attn
    assert p["decoder.layers.0.cross_attn.v"].linear is cross.kv and p["decoder.layers.0.cross_attn.v"].rows == slice(16, 32)
    assert len(p) == 4 + 2 + 4 + 4 + 2


def test_an_encoder_without_attention_refuses():
    with pytest.raises(PtmError, match="lstm encoder declares no named projections for LoRA"):
        LSTMEncoder(LSTMConfig(vocab_size=20, hidden_size=8, num_layers=1, projection_size=None, char_cnn=False)).projections()
