"""LoRA (Hu et al. 2021): the identity at step 0, the update ``(alpha / r) B A`` on exactly the
chosen blocks of a fused projection, and merging it into the weights changes no output."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder
from ptmkit.encoders.encoder_decoder_config import EncoderDecoderConfig
from ptmkit.errors import PtmError
from ptmkit.nn.lora import add_lora, merge_lora


def _bert(**kw):
    torch.manual_seed(0)
    return TransformerEncoder(TransformerConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2,
                                                intermediate_size=24, max_position=16, dropout=0.0,
                                                attention_dropout=0.0, **kw)).eval()


def _bart(**kw):
    torch.manual_seed(0)
    return EncoderDecoder(EncoderDecoderConfig(vocab_size=40, hidden_size=16, encoder_layers=2, decoder_layers=2,
                                               num_heads=2, intermediate_size=24, max_position=16, dropout=0.0,
                                               attention_dropout=0.0, activation_dropout=0.0, **kw)).eval()


def _randomise(lora, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for update in lora.updates.values():
            update.B.copy_(torch.randn(update.B.shape, generator=g, dtype=update.B.dtype) * 0.5)


IDS = torch.tensor([[2, 7, 9, 11, 3, 0], [2, 5, 6, 3, 0, 0]])
MASK = (IDS != 0).long()


def test_step_zero_is_the_base_model_and_only_the_chosen_projections_get_updates():
    enc = _bert()
    before = enc(IDS, MASK).last_hidden_state
    lora = add_lora(enc, rank=4)
    assert lora.names() == ["layers.0.attn.q", "layers.0.attn.v", "layers.1.attn.q", "layers.1.attn.v"]
    assert torch.equal(enc(IDS, MASK).last_hidden_state, before)  # B = 0: not a bit changes
    assert all(torch.count_nonzero(u.A) > 0 and torch.count_nonzero(u.B) == 0 for u in lora.updates.values())
    assert add_lora(_bert(), 2, targets="layers.1.attn.*").names() == [f"layers.1.attn.{n}" for n in "qkvo"]
    assert add_lora(_bert(), 2, targets="fc*").names() == ["layers.0.ffn.fc1", "layers.0.ffn.fc2",
                                                            "layers.1.ffn.fc1", "layers.1.ffn.fc2"]


def test_fused_qkv_gets_the_update_on_the_query_and_value_blocks_only():
    enc = _bert()
    lora = add_lora(enc, rank=3, alpha=6.0)
    _randomise(lora)
    attn = enc.layers[0].attn
    x = torch.randn(2, 5, 16)
    got = attn.qkv(x)
    W, b = attn.qkv.weight, attn.qkv.bias
    q, v = lora.updates["layers/0/attn/q"], lora.updates["layers/0/attn/v"]
    # by hand: W x + b, plus (alpha / r) B A x on the q rows 0..16 and the v rows 32..48
    ref = x @ W.T + b
    ref_q = ref[..., :16] + 2.0 * (x @ q.A.T @ q.B.T)
    ref_v = ref[..., 32:] + 2.0 * (x @ v.A.T @ v.B.T)
    torch.testing.assert_close(got[..., :16], ref_q)
    assert torch.equal(got[..., 16:32], nn.functional.linear(x, W, b)[..., 16:32])  # the key block: untouched
    torch.testing.assert_close(got[..., 32:], ref_v)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_merged_weights_give_the_outputs_of_the_unmerged_updates(dtype):
    enc = _bert().to(dtype)
    lora = add_lora(enc, rank=4, alpha=8, targets="q,k,v,o,fc1,fc2")
    _randomise(lora)
    with torch.no_grad():
        unmerged = enc(IDS, MASK, output_hidden_states=True)
        plain = _bert().to(dtype)(IDS, MASK).last_hidden_state
        assert not torch.allclose(unmerged.last_hidden_state, plain, atol=1e-3)  # the updates act
        merge_lora(enc, lora)
        assert not any(m._forward_hooks for m in enc.modules())
        merged = enc(IDS, MASK, output_hidden_states=True)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 2e-5}
    real = MASK.bool()
    for a, b in zip(unmerged.hidden_states, merged.hidden_states):
        torch.testing.assert_close(a[real], b[real], **tol)


def test_shared_layers_get_one_update_and_merge_once():
    enc = _bert(sharing="all")
    lora = add_lora(enc, rank=2)
    assert lora.names() == ["layers.0.attn.q", "layers.0.attn.v"]
    _randomise(lora)
    with torch.no_grad():
        a = enc(IDS, MASK).last_hidden_state
        merge_lora(enc, lora)
        torch.testing.assert_close(enc(IDS, MASK).last_hidden_state, a, rtol=1e-5, atol=2e-5)


def test_encoder_decoder_cross_attention_and_decoding_take_the_updates():
    enc = _bart().double()
    before = enc(IDS, MASK).last_hidden_state
    lora = add_lora(enc, rank=2)
    names = lora.names()
    assert "decoder.layers.1.cross_attn.v" in names and "encoder.layers.0.attn.q" in names
    assert len(names) == 2 * (2 + 2 + 2)
    assert torch.equal(enc(IDS, MASK).last_hidden_state, before)
    _randomise(lora)
    with torch.no_grad():
        unmerged = enc(IDS, MASK).last_hidden_state
        merge_lora(enc, lora)
        torch.testing.assert_close(enc(IDS, MASK).last_hidden_state, unmerged, rtol=1e-12, atol=1e-12)


def test_a_copied_model_carries_its_own_updates():
    model = nn.Module()
    model.backbone = _bert()
    model.lora = add_lora(model.backbone, rank=2)
    twin = copy.deepcopy(model)
    _randomise(twin.lora)
    base = _bert()(IDS, MASK).last_hidden_state
    assert torch.equal(model.backbone(IDS, MASK).last_hidden_state, base)  # the original's B is still 0
    assert not torch.allclose(twin.backbone(IDS, MASK).last_hidden_state, base, atol=1e-4)


def test_bad_settings_are_refused_with_what_there_is():
    with pytest.raises(PtmError, match="pattern 'query' names no projection.*q, v"):
        add_lora(_bert(), 2, targets="query")
    with pytest.raises(PtmError, match="comma-separated"):
        add_lora(_bert(), 2, targets="q,,v")
    with pytest.raises(PtmError, match="positive integer"):
        add_lora(_bert(), 0)
    with pytest.raises(PtmError, match="exceeds"):
        add_lora(_bert(), 17)
