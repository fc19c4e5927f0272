"""The Transformer encoder's LLaMA-era options: rotary and ALiBi positions, SwiGLU, RMSNorm, no
biases, grouped-query attention (with the key/value cache), and their config errors."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.generation import GenerationConfig, generate_ids, left_pad
from ptmkit.interop import hf_bert, hf_gpt2
from ptmkit.nn.alibi import AlibiBias, alibi_slopes
from ptmkit.nn.attention import attend
from ptmkit.nn.rotary import apply_rotary, rotary_angles

V = 40
LLAMA = TransformerConfig(
    vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=48,
    norm="pre", norm_type="rmsnorm", ffn="swiglu", positions="rope", bias=False, layer_norm_eps=1e-6,
    embedding_norm=False, type_vocab_size=0, pooler=False, dropout=0.0, attention_dropout=0.0,
)
EXACT = dict(rtol=1e-10, atol=1e-10)


def model(cfg: TransformerConfig = LLAMA, seed: int = 0, dtype=torch.float64) -> TransformerEncoder:
    torch.manual_seed(seed)
    m = TransformerEncoder(cfg).to(dtype).eval()
    with torch.no_grad():  # larger weights: the arg-max changes from step to step
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def tokens(B: int = 3, T: int = 11, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(seed))


# -- ALiBi ---------------------------------------------------------------------------------------
def test_alibi_slopes_follow_the_geometric_sequence_for_any_head_count():
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    assert alibi_slopes(4).tolist() == [2.0 ** -k for k in (2, 4, 6, 8)]
    # 6 heads: the 4-head slopes, then the odd-numbered ones of the 8-head sequence
    assert alibi_slopes(6).tolist() == [2.0 ** -k for k in (2, 4, 6, 8, 1, 3)]
    # 12 heads: the 8-head slopes, then every other one of the 16-head sequence 2^-0.5, 2^-1, ...
    assert alibi_slopes(12).tolist() == pytest.approx([2.0 ** -k for k in (*range(1, 9), 0.5, 1.5, 2.5, 3.5)])
    assert alibi_slopes(1).tolist() == [2.0 ** -8]


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_attention_equals_the_papers_formula_in_float64(causal):
    B, h, T, d = 2, 6, 7, 8
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, h, T, d, generator=g, dtype=torch.float64) for _ in range(3))
    bias = AlibiBias(h)(T, T, bidirectional=not causal).to(torch.float64)
    mask = bias.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")) if causal else bias
    got = attend(q, k, v, mask, False, 0.0, None)
    # the reference, written from Press et al.: score_ij = q_i . k_j / sqrt(d) - m_h |i - j| (causal: j <= i)
    slopes = [2.0 ** -k for k in (2, 4, 6, 8, 1, 3)]
    want = torch.empty_like(got)
    for b in range(B):
        for head in range(h):
            for i in range(T):
                keys = range(i + 1) if causal else range(T)
                s = torch.stack([q[b, head, i] @ k[b, head, j] / math.sqrt(d) - slopes[head] * abs(i - j) for j in keys])
                want[b, head, i] = torch.softmax(s, 0) @ v[b, head, :len(s)]
    assert_close(got, want, rtol=1e-6, atol=1e-6)  # the bias itself is float32, the rest float64


def test_alibi_encoder_cached_equals_uncached_and_positions_shift_nothing():
    m = model(replace(LLAMA, positions="alibi", num_kv_heads=None, num_heads=8))
    x = tokens()
    with torch.no_grad():
        full = m(x, causal=True).last_hidden_state
        shifted = m(x, causal=True, position_ids=torch.arange(7, 7 + x.shape[1])[None]).last_hidden_state
        first = m(x[:, :5], causal=True, cache=m.start_cache())
        rest = m(x[:, 5:], causal=True, cache=first.extras["cache"])
        bidirectional = m(x).last_hidden_state
    assert_close(shifted, full, **EXACT)  # only distances count
    assert_close(torch.cat([first.last_hidden_state, rest.last_hidden_state], 1), full, **EXACT)
    assert not torch.allclose(bidirectional[:, :-1], full[:, :-1])
    assert m.max_positions() is None and not any("alibi" in n for n in m.state_dict())


# -- RoPE ----------------------------------------------------------------------------------------
def test_rotary_rotates_each_pair_of_halves_by_position_times_frequency():
    d, theta = 8, 100.0
    x = torch.randn(1, 1, 5, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pos = torch.tensor([[0, 1, 2, 7, 30]])
    got = apply_rotary(x, rotary_angles(pos, d, theta, torch.float64))
    # as complex numbers: z_p = x_p + i x_{p + d/2} turns by exp(i m theta^(-2p/d))
    z = torch.complex(x[..., :d // 2], x[..., d // 2:])
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = z * torch.exp(1j * pos[0, :, None].double() * freq)
    assert_close(got, torch.cat([z.real, z.imag], -1), **EXACT)


def test_rotary_scores_depend_on_the_offset_only():
    d = 16
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64), torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        rq = apply_rotary(q, rotary_angles(torch.tensor([[m]]), d, 10000.0, torch.float64))
        rk = apply_rotary(k, rotary_angles(torch.tensor([[n]]), d, 10000.0, torch.float64))
        return float((rq * rk).sum())
    assert score(9, 4) == pytest.approx(score(105, 100), abs=1e-9)
    assert score(9, 4) != pytest.approx(score(9, 5), abs=1e-6)


# -- cached generation with RoPE and grouped-query attention -------------------------------------
def test_cache_in_chunks_equals_one_causal_pass_and_keeps_the_kv_heads():
    m = model()
    x = tokens()
    with torch.no_grad():
        full = m(x, causal=True).last_hidden_state
        cache, parts = m.start_cache(), []
        for a, b in ((0, 4), (4, 5), (5, 6), (6, 11)):
            out = m(x[:, a:b], causal=True, cache=cache)
            cache, parts = out.extras["cache"], parts + [out.last_hidden_state]
    assert_close(torch.cat(parts, 1), full, **EXACT)
    assert cache.kv[0][0].shape == (3, 2, 11, 8)  # 2 key/value heads cached, not 4


def test_cache_with_left_padding_matches_each_row_alone():
    m = model()
    rows = [[7, 8, 9, 10, 11], [12, 13], [14, 15, 16]]
    ids, mask = left_pad(rows, pad_id=0)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = m(ids, attention_mask=mask, position_ids=pos, causal=True, cache=m.start_cache())
        step = m(torch.tensor([[20], [21], [22]]), position_ids=mask.sum(1, keepdim=True), causal=True,
                 cache=out.extras["cache"])
        for i, row in enumerate(rows):
            alone = m(torch.tensor([row + [20 + i]]), causal=True).last_hidden_state[0]
            assert_close(out.last_hidden_state[i, -len(row):], alone[:-1], **EXACT)
            assert_close(step.last_hidden_state[i, 0], alone[-1], **EXACT)


@pytest.mark.parametrize("dtype,positions", [(torch.float64, "rope"), (torch.float32, "rope"), (torch.float64, "alibi")])
def test_cached_greedy_generation_equals_uncached_recomputation(dtype, positions):
    m = model(replace(LLAMA, positions=positions), dtype=dtype)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
    cfg = GenerationConfig(max_new_tokens=12, greedy=True)
    cached = generate_ids(m, "causal_lm", prompts, cfg, eos_id=None, pad_id=0)
    assert cached == generate_ids(m, "causal_lm", prompts, replace(cfg, use_cache=False), eos_id=None, pad_id=0)
    assert len({tuple(r) for r in cached}) == 3 and len(set(cached[0])) > 2
    # and a plain loop that re-runs the whole sequence each step, reading logits off the tied embeddings
    for prompt, row in zip(prompts, cached):
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(12):
                h = m(torch.tensor([seq]), causal=True).last_hidden_state[0, -1]
                seq.append(int((h @ m.embeddings.word_embeddings.weight.T).argmax()))
        assert seq[len(prompt):] == row


# -- grouped-query attention ---------------------------------------------------------------------
def test_grouped_query_attention_equals_full_attention_with_repeated_key_value_weights():
    gqa = model()
    mha = TransformerEncoder(replace(LLAMA, num_kv_heads=None)).to(torch.float64).eval()
    state, d, H = dict(gqa.state_dict()), 8, 32
    for i in range(2):
        w = state[f"layers.{i}.attn.qkv.weight"]
        q, k, v = w[:H], w[H:H + 2 * d], w[H + 2 * d:]
        repeat = lambda t: t.view(2, 1, d, H).expand(2, 2, d, H).reshape(4 * d, H)  # noqa: E731
        state[f"layers.{i}.attn.qkv.weight"] = torch.cat([q, repeat(k), repeat(v)])
    mha.load_state_dict(state)
    x = tokens()
    mask = torch.ones_like(x)
    mask[1, 7:] = 0  # padded: the packed path too
    with torch.no_grad():
        for kw in ({"causal": True}, {"attention_mask": mask}, {"output_attentions": True}):
            a, b = gqa(x, **kw), mha(x, **kw)
            assert_close(a.last_hidden_state, b.last_hidden_state, **EXACT)
    assert a.attentions[0].shape == (3, 4, 11, 11)
    names = gqa.projections()
    assert [names[f"layers.0.attn.{n}"].out_features for n in "qkvo"] == [32, 16, 16, 32]


def test_training_step_with_dropout_runs_the_written_out_path():
    m = TransformerEncoder(replace(LLAMA, dropout=0.1, attention_dropout=0.1)).train()
    out = m(tokens(), causal=True).last_hidden_state
    out.square().mean().backward()
    assert all(p.grad is not None for p in m.parameters())


# -- SwiGLU, RMSNorm, no biases ------------------------------------------------------------------
def test_swiglu_and_rmsnorm_compute_the_papers_formulas():
    m = model()
    layer = m.layers[0]
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    ffn = layer.ffn
    want = ffn.fc2.weight @ (F.silu(ffn.fc1.weight @ x[..., None]) * (ffn.fc1_linear.weight @ x[..., None]))
    assert_close(ffn(x), want[..., 0], **EXACT)
    g = layer.attn_norm.weight
    assert_close(layer.attn_norm(x), x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6) * g, **EXACT)


def test_bias_false_leaves_out_every_bias_and_layernorm_keeps_its_type():
    m = TransformerEncoder(replace(LLAMA, norm_type="layernorm", embedding_norm=True, embedding_size=16))
    assert not [n for n, _ in m.named_parameters() if n.endswith("bias")]
    assert isinstance(m.final_norm, torch.nn.LayerNorm) and m.final_norm.bias is None
    m.reset_parameters()  # norms without a bias re-initialise
    default = TransformerEncoder(TransformerConfig(vocab_size=V, hidden_size=32, num_layers=1, num_heads=4,
                                                   intermediate_size=48))
    assert default.layers[0].attn.qkv.weight.shape == (96, 32) and default.layers[0].attn_norm.bias is not None
    assert default.layers[0].ffn.fc1_linear is None


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad,match", [
    ({"num_kv_heads": 3}, r"num_kv_heads must be a positive integer dividing model.num_heads=4"),
    ({"num_kv_heads": 0}, r"num_kv_heads"),
    ({"positions": "rotary"}, r"positions='rotary' is not one of .*'rope'"),
    ({"ffn": "geglu"}, r"ffn='geglu' is not one of \('plain', 'swiglu'\)"),
    ({"norm_type": "rms"}, r"norm_type='rms' is not one of \('layernorm', 'rmsnorm'\)"),
    ({"bias": "no"}, r"model.bias must be true or false"),
    ({"rope_theta": 0}, r"rope_theta must be a positive number"),
    ({"rope_theta": True}, r"rope_theta must be a positive number"),
    ({"rope_theta": "lots"}, r"rope_theta must be a number"),
    ({"hidden_size": 36, "num_heads": 4, "num_kv_heads": None}, r"head size .* = 9 must be even"),
    ({"pruned_heads": {0: [1]}}, r"pruned_heads cannot be set with grouped-query attention"),
])
def test_bad_values_are_one_line_errors_naming_the_allowed_values(bad, match):
    with pytest.raises(PtmError, match=match) as info:
        replace(LLAMA, **bad)
    assert "\n" not in str(info.value) and len(str(info.value)) <= 200


def test_grouped_heads_cannot_be_pruned():
    m = model()
    with pytest.raises(PtmError, match="grouped-query attention .* cannot be pruned"):
        m.prune_heads({0: [1]})
    full = model(replace(LLAMA, num_kv_heads=4))
    full.prune_heads({0: [1]})  # as many key/value heads as query heads: pruning as before
    assert full.layers[0].attn.qkv.weight.shape == (72, 32)


def test_the_bert_and_gpt2_formats_refuse_the_options_they_cannot_express():
    cfg = replace(LLAMA, positions="absolute")
    for family in (hf_gpt2, hf_bert):
        assert any("ffn='swiglu', norm_type='rmsnorm', bias=False, num_kv_heads=2" in p for p in family.problems(cfg))
    assert not [p for p in hf_gpt2.problems(replace(cfg, ffn="plain", norm_type="layernorm", bias=True,
                                                      num_kv_heads=None)) if "not part of" in p]
