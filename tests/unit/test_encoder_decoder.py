"""The encoder–decoder (BART's architecture): contract, shapes, causality, padding and
cross-attention masks, the key/value cache, declared depth."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

from ptmkit import registry
from ptmkit.encoders import Encoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.errors import PtmError

V, H, S, T = 60, 32, 9, 7
CFG = EncoderDecoderConfig(vocab_size=V, hidden_size=H, encoder_layers=2, decoder_layers=3, num_heads=4,
                           intermediate_size=48, max_position=20, dropout=0.0)
TOL = dict(rtol=1e-5, atol=1e-5)


def model(cfg: EncoderDecoderConfig = CFG, seed: int = 0) -> EncoderDecoder:
    torch.manual_seed(seed)
    enc = EncoderDecoder(cfg).eval()
    with torch.no_grad():  # larger weights than the 0.02 init: differences must show
        for p in enc.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return enc


def ids(shape, seed: int = 1) -> torch.Tensor:
    return torch.randint(5, V, shape, generator=torch.Generator().manual_seed(seed))


def test_registered_and_contract() -> None:
    assert registry.get("encoder", "encoder_decoder") is EncoderDecoder
    enc = EncoderDecoder(CFG)
    assert isinstance(enc, Encoder) and enc.output_size == H and enc.num_layers == 5
    assert enc.output_embeddings() is enc.input_embeddings().weight
    assert enc.encoder.position_embeddings.weight.shape == (CFG.max_position + 2, H)  # BART's offset 2
    assert torch.equal(enc.final_logits_bias, torch.zeros(V)) and "final_logits_bias" in enc.state_dict()
    assert not any(n == "final_logits_bias" for n, _ in enc.named_parameters())  # a buffer, never trained
    assert torch.equal(enc.word_embeddings.weight[CFG.pad_token_id], torch.zeros(H))
    depth = {n: enc.layer_index(n) for n, _ in enc.named_parameters()}
    assert depth["word_embeddings.weight"] == 0 and depth["decoder.position_embeddings.weight"] == 0
    assert depth["encoder.embedding_norm.weight"] == 0 and depth["decoder.embedding_norm.bias"] == 0
    assert depth["encoder.layers.0.attn.qkv.weight"] == 1 and depth["encoder.layers.1.ffn.fc2.bias"] == 2
    assert depth["decoder.layers.0.cross_attn.kv.weight"] == 3 and depth["decoder.layers.2.ffn_norm.weight"] == 5
    assert set(depth.values()) == set(range(6))


def test_shapes_and_outputs() -> None:
    enc = model()
    src, tgt = ids((2, S)), ids((2, T), 2)
    out = enc(src, decoder_input_ids=tgt, output_hidden_states=True)
    assert out.last_hidden_state.shape == (2, T, H)
    assert out.extras["encoder_last_hidden_state"].shape == (2, S, H)
    assert len(out.hidden_states) == enc.num_layers + 1
    assert [h.shape[1] for h in out.hidden_states] == [S] * 3 + [T] * 3
    assert len(out.extras["encoder_hidden_states"]) == 3 and len(out.extras["decoder_hidden_states"]) == 4
    assert out.extras["decoder_hidden_states"][-1] is out.last_hidden_state
    assert out.pooled.shape == (2, H) and torch.equal(out.pooled, out.last_hidden_state[:, -1])
    assert enc.logits(out.last_hidden_state).shape == (2, T, V)
    # without decoder inputs the decoder reads the source shifted right (HF BartModel's behaviour)
    plain = enc(src, token_type_ids=torch.zeros_like(src))
    shifted = enc.shift_right(src)
    assert shifted[0, 0] == CFG.decoder_start_token_id and torch.equal(shifted[:, 1:], src[:, :-1])
    assert_close(plain.last_hidden_state, enc(src, decoder_input_ids=shifted).last_hidden_state)
    assert torch.equal(enc.shift_right(torch.tensor([[7, 8, -100, -100]])), torch.tensor([[3, 7, 8, 0]]))


def test_decoder_is_causal_and_encoder_is_not() -> None:
    enc = model()
    src, tgt = ids((2, S)), ids((2, T), 2)
    base = enc(src, decoder_input_ids=tgt)
    later = tgt.clone()
    later[:, 4:] = ids((2, T - 4), 3)
    out = enc(src, decoder_input_ids=later)
    assert_close(out.last_hidden_state[:, :4], base.last_hidden_state[:, :4], **TOL)  # the past ignores the future
    assert not torch.allclose(out.last_hidden_state[:, 4:], base.last_hidden_state[:, 4:])
    # every encoder position sees the whole source, and so does every decoder position
    src2 = src.clone()
    src2[:, -1] = (src[:, -1] + 1 - 5) % (V - 5) + 5
    out2 = enc(src2, decoder_input_ids=tgt)
    assert not torch.allclose(out2.extras["encoder_last_hidden_state"][:, 0], base.extras["encoder_last_hidden_state"][:, 0])
    assert not torch.allclose(out2.last_hidden_state[:, 0], base.last_hidden_state[:, 0])
    # causal=True makes the encoder's own attention causal
    c1, c2 = enc.encode(src, causal=True), enc.encode(src2, causal=True)
    assert_close(c1.last_hidden_state[:, :-1], c2.last_hidden_state[:, :-1], **TOL)


def test_source_padding_is_invisible_to_cross_attention() -> None:
    enc = model()
    src, tgt = ids((2, S)), ids((2, T), 2)
    mask = torch.ones(2, S, dtype=torch.long)
    mask[1, 5:] = 0
    out = enc(src, mask, decoder_input_ids=tgt)
    # row 1 alone, without its padding, gives the same encoder and decoder states
    alone = enc(src[1:, :5], decoder_input_ids=tgt[1:])
    assert_close(out.last_hidden_state[1], alone.last_hidden_state[0], **TOL)
    assert_close(out.extras["encoder_last_hidden_state"][1, :5], alone.extras["encoder_last_hidden_state"][0], **TOL)
    # whatever sits at padded source positions changes nothing
    other = src.clone()
    other[1, 5:] = ids((1, S - 5), 9)
    assert_close(enc(other, mask, decoder_input_ids=tgt).last_hidden_state, out.last_hidden_state, **TOL)


def test_decoder_padding_and_fully_padded_rows_stay_finite() -> None:
    enc = model()
    src, tgt = ids((3, S)), ids((3, T), 2)
    mask = torch.ones(3, S, dtype=torch.long)
    mask[2] = 0  # a source that is all padding: no NaN anywhere
    dmask = torch.ones(3, T, dtype=torch.long)
    dmask[1, 4:] = 0
    dmask[0, :2] = 0  # left padding leaves the first decoder queries with no key: still finite
    out = enc(src, mask, decoder_input_ids=tgt, decoder_attention_mask=dmask)
    assert torch.isfinite(out.last_hidden_state).all() and torch.isfinite(out.extras["encoder_last_hidden_state"]).all()
    # right padding of the decoder changes nothing at the real positions (causal attention)
    free = enc(src, mask, decoder_input_ids=tgt)
    assert_close(out.last_hidden_state[1, :4], free.last_hidden_state[1, :4], **TOL)
    assert torch.equal(out.pooled[1], out.last_hidden_state[1, 3])


def test_cached_decoding_matches_full_decoding() -> None:
    enc = model()
    src, tgt = ids((2, S)), ids((2, T), 2)
    mask = torch.ones(2, S, dtype=torch.long)
    mask[0, 6:] = 0
    memory = enc.encode(src, mask).last_hidden_state
    full = enc.decode(tgt, memory, mask).last_hidden_state
    cache = enc.start_cache(memory, mask)
    steps = []
    for t in range(T):  # one token at a time
        out = enc.decode(tgt[:, t : t + 1], cache=cache)
        cache = out.extras["cache"]
        steps.append(out.last_hidden_state)
    assert cache.length == T
    assert_close(torch.cat(steps, dim=1), full, **TOL)
    cache = enc.start_cache(memory, mask)  # a prompt of 3, then 4 more at once
    a = enc.decode(tgt[:, :3], cache=cache)
    b = enc.decode(tgt[:, 3:], cache=a.extras["cache"])
    assert_close(torch.cat([a.last_hidden_state, b.last_hidden_state], dim=1), full, **TOL)


def test_dropout_only_in_training_and_scale_embedding() -> None:
    cfg = replace(CFG, dropout=0.3, attention_dropout=0.2, activation_dropout=0.2)
    enc = model(cfg)
    src, tgt = ids((2, S)), ids((2, T), 2)
    assert_close(enc(src, decoder_input_ids=tgt).last_hidden_state, enc(src, decoder_input_ids=tgt).last_hidden_state)
    enc.train()
    a, b = (enc(src, decoder_input_ids=tgt).last_hidden_state for _ in range(2))
    assert not torch.allclose(a, b)
    scaled = EncoderDecoder(replace(CFG, scale_embedding=True, embedding_norm=False)).eval()
    plain = EncoderDecoder(replace(CFG, embedding_norm=False)).eval()
    plain.load_state_dict(scaled.state_dict())
    a = scaled.encoder.embed(scaled._tokens(src))
    b = plain.encoder.embed(plain._tokens(src) * H ** 0.5)
    assert_close(a, b)


def test_refusals() -> None:
    enc = model()
    with pytest.raises(PtmError, match="max_position"):
        enc(ids((1, 21)))
    with pytest.raises(PtmError, match="max_position"):
        enc(ids((1, 5)), decoder_input_ids=ids((1, 21)))
    with pytest.raises(PtmError, match="vocab"):
        enc(torch.tensor([[5, V]]))
    with pytest.raises(PtmError, match="divisible"):
        EncoderDecoderConfig(hidden_size=30, num_heads=4)
    with pytest.raises(PtmError, match="did you mean 'gelu'"):
        EncoderDecoderConfig(activation="gelv")
    with pytest.raises(PtmError, match="decoder_start_token_id"):
        EncoderDecoderConfig(vocab_size=10, decoder_start_token_id=10)
    assert EncoderDecoderConfig(dropout="0.2", layer_norm_eps="1e-5").layer_norm_eps == 1e-5  # YAML strings


def test_bart_tiny_preset_builds() -> None:
    from types import SimpleNamespace

    from ptmkit.build import build_model, encoder_config
    from ptmkit.presets import list_presets, load_preset

    assert "bart-tiny" in list_presets()
    data = load_preset("bart-tiny")
    name, cfg = encoder_config(data["model"])
    assert name == "encoder_decoder" and data["objective"]["name"] == "bart"
    assert data["tokenizer"]["vocab_size"] == cfg.vocab_size and data["train"]["seq_len"] <= cfg.max_position
    assert (cfg.encoder_layers, cfg.decoder_layers, cfg.hidden_size, cfg.num_heads) == (2, 2, 128, 2)
    tok = SimpleNamespace(vocab_size=cfg.vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    with torch.device("meta"):
        model = build_model(data, tok)
    n = sum(p.numel() for p in model.parameters())
    assert abs(n / 1e6 - 2.01) < 0.05, n  # 8000 x 128 shared embeddings + 2 x 2 layers
