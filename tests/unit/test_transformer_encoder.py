"""TransformerEncoder: shapes, parameter names, masks as data, causality, errors, initialisation, HF sanity."""

from __future__ import annotations

import math

import pytest
import torch

from ptmkit.encoders import EncoderOutput, TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError


def bert_cfg(**kw) -> TransformerConfig:
    base = dict(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=40)
    base.update(kw)
    return TransformerConfig(**base)


def gpt_cfg(**kw) -> TransformerConfig:
    base = dict(
        vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=40,
        type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
        embedding_norm=False, pooler=False, scaled_residual_init=True,
    )
    base.update(kw)
    return TransformerConfig(**base)


def make(cfg: TransformerConfig, seed: int = 0) -> TransformerEncoder:
    torch.manual_seed(seed)
    return TransformerEncoder(cfg).eval()


def test_shapes_and_hidden_states() -> None:
    model = make(bert_cfg())
    ids = torch.randint(0, 50, (3, 7))
    out = model(ids, output_hidden_states=True)
    assert isinstance(out, EncoderOutput)
    assert out.last_hidden_state.shape == (3, 7, 32)
    assert out.pooled is not None and out.pooled.shape == (3, 32)
    assert out.hidden_states is not None and len(out.hidden_states) == 3
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    gpt = make(gpt_cfg())
    out = gpt(ids, output_hidden_states=True, causal=True)
    assert out.pooled is None and len(out.hidden_states) == 3
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)  # after final_norm, as HF
    assert model(ids).hidden_states is None


def test_parameter_names_follow_contract() -> None:
    names = dict(make(bert_cfg()).named_parameters())
    shapes = {k: tuple(v.shape) for k, v in names.items()}
    assert shapes["embeddings.word_embeddings.weight"] == (50, 32)
    assert shapes["embeddings.position_embeddings.weight"] == (40, 32)
    assert shapes["embeddings.token_type_embeddings.weight"] == (2, 32)
    assert "embeddings.norm.weight" in names and "pooler.dense.weight" in names
    assert shapes["layers.1.attn.qkv.weight"] == (96, 32) and shapes["layers.1.attn.qkv.bias"] == (96,)
    assert shapes["layers.0.attn.out.weight"] == (32, 32)
    assert shapes["layers.0.ffn.fc1.weight"] == (64, 32) and shapes["layers.0.ffn.fc2.weight"] == (32, 64)
    assert "layers.0.attn_norm.weight" in names and "layers.0.ffn_norm.bias" in names
    assert not any(k.startswith("final_norm") for k in names)
    gnames = dict(make(gpt_cfg()).named_parameters())
    assert "final_norm.weight" in gnames
    assert not any("token_type" in k or k.startswith("pooler") or k.startswith("embeddings.norm") for k in gnames)


CASES = [(bert_cfg(), False), (gpt_cfg(), True), (bert_cfg(positions="relative"), False), (gpt_cfg(positions="relative"), True)]
CASE_IDS = ["bert", "gpt", "bert-relative", "gpt-relative"]


@pytest.mark.parametrize("cfg, causal", CASES, ids=CASE_IDS)
def test_fully_padded_rows_are_finite(cfg: TransformerConfig, causal: bool) -> None:
    model = make(cfg).train()
    ids = torch.randint(0, 50, (3, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1]])  # right, all, left padding
    out = model(ids, attention_mask=mask, output_hidden_states=True, causal=causal)
    assert all(torch.isfinite(h).all() for h in out.hidden_states)
    out.last_hidden_state.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # an explicit boolean mask with an all-False row and an additive mask with -inf rows
    explicit = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    explicit[..., 2, :] = False
    assert torch.isfinite(model(ids, attn_mask=explicit).last_hidden_state).all()
    additive = torch.zeros(1, 1, 6, 6)
    additive[..., 3, :] = -math.inf
    assert torch.isfinite(model(ids, attn_mask=additive).last_hidden_state).all()


@pytest.mark.parametrize("cfg, causal", CASES, ids=CASE_IDS)
def test_padding_does_not_change_real_positions(cfg: TransformerConfig, causal: bool) -> None:
    model = make(cfg)
    ids = torch.randint(5, 50, (2, 5))
    alone = model(ids, causal=causal).last_hidden_state
    padded = torch.cat([ids, torch.randint(0, 50, (2, 3))], dim=1)  # arbitrary tokens under padding
    mask = torch.tensor([[1] * 5 + [0] * 3] * 2)
    out = model(padded, attention_mask=mask, causal=causal).last_hidden_state
    torch.testing.assert_close(out[:, :5], alone, rtol=1e-5, atol=1e-5)


def test_causal_future_does_not_change_past() -> None:
    model = make(gpt_cfg())
    a = torch.randint(0, 50, (2, 8))
    b = a.clone()
    b[:, 5:] = torch.randint(0, 50, (2, 3))
    ha, hb = model(a, causal=True).last_hidden_state, model(b, causal=True).last_hidden_state
    torch.testing.assert_close(ha[:, :5], hb[:, :5], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ha[:, 5:], hb[:, 5:])
    # a bidirectional model does see the future
    bert = make(bert_cfg())
    assert not torch.allclose(bert(a).last_hidden_state[:, :5], bert(b).last_hidden_state[:, :5])


def test_explicit_mask_overrides_causality() -> None:
    ids = torch.randint(0, 50, (2, 6))
    model = make(gpt_cfg(), seed=1)
    tril = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    causal = model(ids, causal=True).last_hidden_state
    torch.testing.assert_close(model(ids, attn_mask=tril).last_hidden_state, causal)
    additive = torch.zeros(6, 6).masked_fill(~tril[0, 0], -math.inf)[None, None]
    torch.testing.assert_close(model(ids, attn_mask=additive).last_hidden_state, causal)
    full = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    torch.testing.assert_close(model(ids, attn_mask=full, causal=True).last_hidden_state, model(ids).last_hidden_state)
    # causal + padding combined (left padding as in batched generation)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    out = model(ids, attention_mask=mask, position_ids=None, causal=True).last_hidden_state
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1], model(ids[1:], causal=True).last_hidden_state[0])


def test_errors() -> None:
    model = make(bert_cfg())
    with pytest.raises(PtmError, match=r"41.*40"):
        model(torch.zeros(1, 41, dtype=torch.long))
    with pytest.raises(PtmError, match="vocab"):
        model(torch.tensor([[1, 2, 50]]))
    with pytest.raises(PtmError, match="divisible"):
        bert_cfg(hidden_size=30)
    with pytest.raises(PtmError, match="norm"):
        bert_cfg(norm="middle")
    with pytest.raises(PtmError, match="gelu"):
        bert_cfg(activation="gelu_tan")


def test_initialisation() -> None:
    cfg = gpt_cfg(hidden_size=128, intermediate_size=512, num_layers=8, vocab_size=2000)
    model = TransformerEncoder(cfg)
    emb = model.embeddings.word_embeddings.weight
    assert abs(emb.std().item() - 0.02) < 0.001
    layer = model.layers[3]
    assert abs(layer.attn.qkv.weight.std().item() - 0.02) < 0.001
    assert abs(layer.ffn.fc2.weight.std().item() - 0.02 / math.sqrt(16)) < 0.0005
    assert abs(layer.attn.out.weight.std().item() - 0.02 / math.sqrt(16)) < 0.0007
    assert torch.all(layer.attn.qkv.bias == 0) and torch.all(layer.attn_norm.weight == 1)
    bert = TransformerEncoder(bert_cfg(hidden_size=128, intermediate_size=512, num_layers=8))
    assert abs(bert.layers[3].ffn.fc2.weight.std().item() - 0.02) < 0.001


def _copy_to_hf_bert(model: TransformerEncoder, hf) -> None:
    sd = model.state_dict()
    H = model.config.hidden_size
    new = {
        "embeddings.word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
        "embeddings.position_embeddings.weight": sd["embeddings.position_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
        "embeddings.LayerNorm.weight": sd["embeddings.norm.weight"],
        "embeddings.LayerNorm.bias": sd["embeddings.norm.bias"],
        "pooler.dense.weight": sd["pooler.dense.weight"],
        "pooler.dense.bias": sd["pooler.dense.bias"],
    }
    for i in range(model.config.num_layers):
        p, q = f"layers.{i}.", f"encoder.layer.{i}."
        for j, name in enumerate(("query", "key", "value")):
            new[q + f"attention.self.{name}.weight"] = sd[p + "attn.qkv.weight"][j * H : (j + 1) * H]
            new[q + f"attention.self.{name}.bias"] = sd[p + "attn.qkv.bias"][j * H : (j + 1) * H]
        pairs = {
            "attention.output.dense": "attn.out", "attention.output.LayerNorm": "attn_norm",
            "intermediate.dense": "ffn.fc1", "output.dense": "ffn.fc2", "output.LayerNorm": "ffn_norm",
        }
        for hk, ok in pairs.items():
            new[q + hk + ".weight"] = sd[p + ok + ".weight"]
            new[q + hk + ".bias"] = sd[p + ok + ".bias"]
    missing, unexpected = hf.load_state_dict(new, strict=False)
    assert not unexpected and all("position_ids" in m for m in missing)


def test_matches_hf_bert_and_gpt2() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = bert_cfg()
    model = make(cfg)
    hf = transformers.BertModel(transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=40, hidden_act="gelu", layer_norm_eps=1e-12, attn_implementation="eager",
    )).eval()
    _copy_to_hf_bert(model, hf)
    ids = torch.randint(0, 50, (2, 9))
    seg = torch.randint(0, 2, (2, 9))
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=seg)
    out = model(ids, attention_mask=mask, token_type_ids=seg)
    torch.testing.assert_close(out.last_hidden_state[0], ref.last_hidden_state[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.last_hidden_state[1, :6], ref.last_hidden_state[1, :6], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.pooled, ref.pooler_output, rtol=1e-4, atol=1e-5)

    gcfg = gpt_cfg()
    gpt = make(gcfg)
    hf2 = transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=40,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, attn_implementation="eager",
    )).eval()
    sd = gpt.state_dict()
    new = {"wte.weight": sd["embeddings.word_embeddings.weight"], "wpe.weight": sd["embeddings.position_embeddings.weight"],
           "ln_f.weight": sd["final_norm.weight"], "ln_f.bias": sd["final_norm.bias"]}
    for i in range(2):
        p, q = f"layers.{i}.", f"h.{i}."
        for hk, ok in {"ln_1": "attn_norm", "ln_2": "ffn_norm"}.items():
            new[q + hk + ".weight"], new[q + hk + ".bias"] = sd[p + ok + ".weight"], sd[p + ok + ".bias"]
        for hk, ok in {"attn.c_attn": "attn.qkv", "attn.c_proj": "attn.out", "mlp.c_fc": "ffn.fc1", "mlp.c_proj": "ffn.fc2"}.items():
            new[q + hk + ".weight"], new[q + hk + ".bias"] = sd[p + ok + ".weight"].t(), sd[p + ok + ".bias"]  # Conv1D
    missing, unexpected = hf2.load_state_dict(new, strict=False)
    assert not unexpected and not [m for m in missing if "bias" not in m or "attn.bias" not in m]
    ref = hf2(input_ids=ids, output_hidden_states=True)
    out = gpt(ids, output_hidden_states=True, causal=True)
    torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, rtol=1e-4, atol=1e-5)
    for a, b in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
