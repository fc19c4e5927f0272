"""Parity of the Transformer encoder's LLaMA-style options (pre-norm RMSNorm, SwiGLU, rotary
positions, grouped-query attention, no biases) with HF transformers' ``LlamaModel`` on the same
tiny random weights."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaModel  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402

V, H, L, HEADS, KV_HEADS, INNER, EPS = 100, 64, 2, 4, 2, 128, 1e-6
# HF's LLaMA normalises in float32 and computes the rotary angles in float32 whatever the model's
# dtype, so in float64 the two agree to float32 rounding (about 5e-7 here), not to float64's
FLOAT64_TOL = dict(rtol=0, atol=1e-6)


def hf_llama(seed: int = 0, theta: float = 10000.0, kv_heads: int = KV_HEADS) -> LlamaModel:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=INNER, num_hidden_layers=L,
                      num_attention_heads=HEADS, num_key_value_heads=kv_heads, rms_norm_eps=EPS, rope_theta=theta,
                      attention_bias=False, mlp_bias=False, max_position_embeddings=64, attn_implementation="eager")
    model = LlamaModel(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # norm gains away from 1, so a misplaced norm weight shows
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


def llama_config(theta: float = 10000.0, kv_heads: int = KV_HEADS) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=V, hidden_size=H, num_layers=L, num_heads=HEADS, num_kv_heads=kv_heads, intermediate_size=INNER,
        norm="pre", norm_type="rmsnorm", ffn="swiglu", positions="rope", rope_theta=theta, bias=False,
        layer_norm_eps=EPS, embedding_norm=False, type_vocab_size=0, pooler=False, dropout=0.0,
        attention_dropout=0.0,
    )


def llama_state(hf: LlamaModel) -> dict[str, torch.Tensor]:
    """HF LLaMA's weights under ptmkit's names: q, k and v stacked into ``qkv``; gate, up and down
    as ``fc1``, ``fc1_linear`` and ``fc2``."""
    sd = hf.state_dict()
    out = {"embeddings.word_embeddings.weight": sd["embed_tokens.weight"], "final_norm.weight": sd["norm.weight"]}
    for i in range(L):
        p = f"layers.{i}."
        out[p + "attn.qkv.weight"] = torch.cat([sd[f"{p}self_attn.{n}_proj.weight"] for n in "qkv"])
        out[p + "attn.out.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[p + "attn_norm.weight"] = sd[p + "input_layernorm.weight"]
        out[p + "ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        for ours, theirs in (("fc1", "gate_proj"), ("fc1_linear", "up_proj"), ("fc2", "down_proj")):
            out[f"{p}ffn.{ours}.weight"] = sd[f"{p}mlp.{theirs}.weight"]
    return out


def pair(theta: float = 10000.0, kv_heads: int = KV_HEADS, dtype: torch.dtype = torch.float64):
    hf = hf_llama(theta=theta, kv_heads=kv_heads).to(dtype)
    ours = TransformerEncoder(llama_config(theta, kv_heads)).eval()
    ours.load_state_dict(llama_state(hf), strict=True)  # strict: the parameter sets are the same
    return hf, ours.to(dtype)


def ids(seed: int = 0, B: int = 3, T: int = 13) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("theta,kv_heads", [(10000.0, KV_HEADS), (500000.0, 1), (10000.0, HEADS)])
@torch.no_grad()
def test_last_hidden_state_matches_llama(theta, kv_heads):
    hf, ours = pair(theta, kv_heads)
    x = ids()
    theirs = hf(input_ids=x).last_hidden_state
    mine = ours(x, causal=True).last_hidden_state
    assert_close(mine, theirs, **FLOAT64_TOL)


@torch.no_grad()
def test_float32_and_every_layer_match_llama():
    hf, ours = pair(dtype=torch.float32)
    x = ids(1)
    theirs = hf(input_ids=x, output_hidden_states=True)
    mine = ours(x, causal=True, output_hidden_states=True)
    assert_close(mine.last_hidden_state, theirs.last_hidden_state, rtol=0, atol=1e-5)
    # HF's hidden_states: the embeddings, each layer's output, and the last one after the final norm
    for a, b in zip(mine.hidden_states[:-1], theirs.hidden_states[:-1]):
        assert_close(a, b, rtol=0, atol=1e-5)


@torch.no_grad()
def test_right_padding_and_position_ids_match_llama():
    hf, ours = pair()
    x = ids(2)
    mask = torch.ones_like(x)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    theirs = hf(input_ids=x, attention_mask=mask).last_hidden_state
    mine = ours(x, attention_mask=mask, causal=True).last_hidden_state
    real = mask.bool()
    assert_close(mine[real], theirs[real], **FLOAT64_TOL)
    positions = torch.arange(5, 5 + x.shape[1])[None]  # shifted positions reach the rotation
    assert_close(ours(x, causal=True, position_ids=positions).last_hidden_state,
                 hf(input_ids=x, position_ids=positions).last_hidden_state, **FLOAT64_TOL)
