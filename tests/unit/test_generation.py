"""Text generation: the key/value cache, top-k / top-p filtering, sampling, the decoding loop."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import special_ids
from torch.testing import assert_close

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.generation import (
    CausalLMStepper,
    GenerationConfig,
    choose,
    decode,
    filter_top_k,
    filter_top_p,
    generate_ids,
    left_pad,
    next_token_probs,
)
from ptmkit.workflows.generate import generation_kind

V = 40
GPT = TransformerConfig(
    vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=48,
    type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5, embedding_norm=False,
    pooler=False, scaled_residual_init=True, dropout=0.0, attention_dropout=0.0,
)


def gpt(cfg: TransformerConfig = GPT, seed: int = 0, dtype=torch.float64) -> TransformerEncoder:
    torch.manual_seed(seed)
    model = TransformerEncoder(cfg).to(dtype).eval()
    with torch.no_grad():  # larger weights: the arg-max changes from step to step
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


# -- the key/value cache -------------------------------------------------------------------------
@pytest.mark.parametrize("variant", [
    {}, {"positions": "relative"}, {"positions": "none"}, {"norm": "post", "embedding_norm": True},
    {"sharing": "all"},
])
def test_cache_in_chunks_equals_one_causal_pass(variant) -> None:
    model = gpt(replace(GPT, **variant))
    ids = torch.randint(5, V, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids, causal=True).last_hidden_state
        cache, parts = model.start_cache(), []
        for a, b in ((0, 4), (4, 5), (5, 6), (6, 11)):  # a prefill, single steps, a chunk
            out = model(ids[:, a:b], causal=True, cache=cache)
            cache = out.extras["cache"]
            parts.append(out.last_hidden_state)
    assert cache.length == 11
    assert_close(torch.cat(parts, dim=1), full, rtol=1e-10, atol=1e-10)


def test_cache_with_left_padding_matches_each_row_alone() -> None:
    model = gpt()
    rows = [[7, 8, 9, 10, 11], [12, 13], [14, 15, 16]]
    ids, mask = left_pad(rows, pad_id=0)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    nxt = torch.tensor([[20], [21], [22]])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, position_ids=pos, causal=True, cache=model.start_cache())
        step = model(nxt, position_ids=mask.sum(1, keepdim=True), causal=True, cache=out.extras["cache"])
        for i, row in enumerate(rows):
            alone = model(torch.tensor([row + [20 + i]]), causal=True).last_hidden_state[0]
            assert_close(out.last_hidden_state[i, -len(row):], alone[:-1], rtol=1e-10, atol=1e-10)
            assert_close(step.last_hidden_state[i, 0], alone[-1], rtol=1e-10, atol=1e-10)


def test_cache_refuses_bidirectional_use_and_overflow() -> None:
    model = gpt()
    with pytest.raises(PtmError, match="causal"):
        model(torch.ones(1, 3, dtype=torch.long), cache=model.start_cache())
    out = model(torch.ones(1, 40, dtype=torch.long), causal=True, cache=model.start_cache())
    with pytest.raises(PtmError, match="max_position"):
        model(torch.ones(1, 9, dtype=torch.long), causal=True, cache=out.extras["cache"])


# -- filtering and sampling ----------------------------------------------------------------------
def reference_survivors(row: list[float], k: int, p: float) -> set[int]:
    """Tokens that top-k then top-p keep, computed one token at a time in float64."""
    ranked = sorted(range(len(row)), key=lambda i: -row[i])
    if 0 < k < len(row):
        kth = row[ranked[k - 1]]
        ranked = [i for i in ranked if row[i] >= kth]
    z = sum(torch.tensor(row, dtype=torch.float64)[ranked].exp().tolist())
    kept, mass = [], 0.0
    for i in ranked:
        if mass >= p:
            break
        kept.append(i)
        mass += float(torch.tensor(row[i], dtype=torch.float64).exp()) / z
    return set(kept)


@pytest.mark.parametrize("k,p", [(0, 1.0), (3, 1.0), (0, 0.5), (5, 0.8), (1, 0.3), (0, 0.999), (50, 0.9)])
def test_filters_keep_the_reference_tokens(k: int, p: float) -> None:
    logits = torch.randn(6, 12, generator=torch.Generator().manual_seed(k * 7 + int(p * 100)), dtype=torch.float64)
    logits[0, 3] = logits[0, 5]  # a tie
    kept = filter_top_p(filter_top_k(logits, k), p)
    for row, out in zip(logits.tolist(), kept):
        assert set(torch.isfinite(out).nonzero().flatten().tolist()) == reference_survivors(row, k, p)


def test_sampling_frequencies_match_the_filtered_distribution() -> None:
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -0.5, -1.0]])
    cfg = GenerationConfig(temperature=0.7, top_k=4, top_p=0.9)
    scaled = (logits[0].double() / 0.7)
    keep = sorted(reference_survivors(scaled.tolist(), 4, 0.9))
    target = torch.zeros(6, dtype=torch.float64)
    target[keep] = scaled[keep].softmax(0)  # renormalised over the survivors
    assert_close(next_token_probs(logits, cfg)[0].double(), target, rtol=1e-6, atol=1e-6)
    n = 40_000
    g = torch.Generator().manual_seed(0)
    draws = choose(logits.expand(n, 6), cfg, g)  # n independent draws through the decoding loop's chooser
    freq = torch.bincount(draws, minlength=6).double() / n
    assert (freq[target == 0] == 0).all()
    sd = (target * (1 - target) / n).sqrt()
    assert ((freq - target).abs() <= 5 * sd + 1e-12).all(), (freq, target)


def test_config_rejects_out_of_range_values() -> None:
    for bad, match in (({"temperature": 0.0}, "temperature"), ({"temperature": -1}, "temperature"),
                       ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_k": -1}, "top_k"),
                       ({"max_new_tokens": 0}, "max_new_tokens")):
        with pytest.raises(PtmError, match=match):
            GenerationConfig(**bad)


# -- the loop ------------------------------------------------------------------------------------
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]


def _run(model, prompts, cfg, eos=None):
    return generate_ids(model, "causal_lm", prompts, cfg, eos_id=eos, pad_id=0)


@pytest.mark.parametrize("cfg", [GenerationConfig(max_new_tokens=12, greedy=True),
                                 GenerationConfig(max_new_tokens=12, top_k=8, top_p=0.9, temperature=1.3, seed=3)])
def test_cached_equals_uncached_and_batched_equals_alone(cfg) -> None:
    model = gpt()
    cached = _run(model, PROMPTS, cfg)
    assert cached == _run(model, PROMPTS, replace(cfg, use_cache=False))
    assert len({tuple(r) for r in cached}) == 3 and len(set(cached[0])) > 2
    if cfg.greedy:  # a sampled row depends on the draws of the rows before it; greedy rows do not
        assert cached == [_run(model, [p], cfg)[0] for p in PROMPTS]
    assert _run(model, PROMPTS, cfg) == cached  # the seed fixes the draws


def test_float32_batch_gives_the_tokens_of_each_prompt_alone() -> None:
    model = gpt(dtype=torch.float32)
    cfg = GenerationConfig(max_new_tokens=10, greedy=True)
    assert _run(model, PROMPTS, cfg) == [_run(model, [p], cfg)[0] for p in PROMPTS]


def test_eos_stops_a_row_and_pads_the_rest() -> None:
    model = gpt()
    cfg = GenerationConfig(max_new_tokens=10, greedy=True)
    free = _run(model, PROMPTS, cfg)
    eos = free[0][3]
    ids, mask = left_pad(PROMPTS, 0)
    out = decode(CausalLMStepper(model, ids, mask), cfg, eos_id=eos, pad_id=0)
    row0 = out[0].tolist()
    assert row0[: row0.index(eos) + 1] == free[0][: free[0].index(eos) + 1]
    assert all(t == 0 for t in row0[row0.index(eos) + 1:])
    cut = _run(model, PROMPTS, cfg, eos=eos)
    assert cut[0] == free[0][: free[0].index(eos) + 1]


def test_prompt_longer_than_the_context_is_an_error_with_the_numbers() -> None:
    model = gpt()
    with pytest.raises(PtmError, match="50 tokens.*48"):
        _run(model, [[5] * 50], GenerationConfig(max_new_tokens=1))
    with pytest.raises(PtmError, match=r"max_new_tokens <= 8"):
        _run(model, [[5] * 40], GenerationConfig(max_new_tokens=9))
    assert len(_run(model, [[5] * 40], GenerationConfig(max_new_tokens=8, greedy=True))[0]) == 8


def test_which_objectives_generate_is_declared() -> None:
    assert generation_kind({"objective": {"name": "clm"}}) == "causal_lm"
    assert generation_kind({"objective": {"name": "bart"}}) == "seq2seq"
    with pytest.raises(PtmError, match=r"'mlm' objective, which cannot generate.*bart \(seq2seq\).*clm \(causal_lm\)"):
        generation_kind({"objective": {"name": "mlm"}})


# -- BART through the shared loop ----------------------------------------------------------------
def test_bart_greedy_decode_equals_a_direct_reference_loop() -> None:
    from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
    from ptmkit.objectives.bart import greedy_decode

    torch.manual_seed(0)
    cfg = EncoderDecoderConfig(vocab_size=V, hidden_size=32, encoder_layers=2, decoder_layers=2, num_heads=4,
                               intermediate_size=64, max_position=32, init_std=0.3)
    enc = EncoderDecoder(cfg).eval()
    ids = torch.randint(5, V, (3, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[mask == 0] = 0
    with torch.no_grad():  # the arg-max of a full re-run of the decoder, step by step, no eos
        memory = enc.encode(ids, mask).last_hidden_state
        prefix = torch.full((3, 1), cfg.decoder_start_token_id)
        for _ in range(10):
            nxt = enc.logits(enc.decode(prefix, memory, mask).last_hidden_state[:, -1]).argmax(-1)
            prefix = torch.cat([prefix, nxt[:, None]], dim=1)
    ref = prefix[:, 1:]
    assert torch.equal(greedy_decode(enc, ids, mask, max_length=10), ref)
    eos = int(ref[0, 2])
    out = greedy_decode(enc, ids, mask, max_length=10, eos_id=eos)
    first = int((ref[0] == eos).nonzero()[0])
    assert out[0, : first + 1].tolist() == ref[0, : first + 1].tolist()
    generated = generate_ids(enc, "seq2seq", [ids[0].tolist(), ids[1, :6].tolist()],
                             GenerationConfig(max_new_tokens=10, greedy=True))
    assert generated == [ref[0].tolist(), ref[1].tolist()]
    tok = special_ids(V)
    from ptmkit.objectives.bart import BartDenoising, DenoisingConfig

    assert torch.equal(BartDenoising(DenoisingConfig(), enc, tok).generate(enc, ids, mask, max_length=10)[0],
                       greedy_decode(enc, ids, mask, max_length=10, eos_id=3)[0])
