"""T5 (Raffel et al. 2020): span corruption with sentinels, the tokenizer's sentinel tokens, the
encoder-decoder's T5 switches (RMS norm, relative position buckets, unscaled attention, gated FFN,
rescaled tied output), the cached decoder with relative positions, and the loss."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from ptmkit import registry
from ptmkit.build import build_model, encoder_config
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.encoders.encoder_decoder_layers import make_norm
from ptmkit.errors import PtmError
from ptmkit.nn.positions import relative_position_bucket
from ptmkit.objectives.bart import greedy_decode
from ptmkit.objectives.t5 import (
    SpanCorruption,
    SpanCorruptionConfig,
    fill_sentinels,
    num_noise_spans,
    random_segmentation,
    random_spans_noise_mask,
    span_corrupt,
)
from ptmkit.presets import load_preset

V = 80
SENTINELS = tuple(range(V - 1, V - 21, -1))  # <extra_id_0> = V - 1, as T5 numbers them
TOK = SimpleNamespace(vocab_size=V, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, sentinel_ids=SENTINELS)
T5 = dict(norm="pre", norm_type="rms", bias=False, positions="relative", relative_buckets=8, relative_max_distance=20,
          scale_attention=False, scale_decoder_output=True, embedding_norm=False, layer_norm_eps=1e-6,
          activation="relu", init="t5", decoder_start_token_id=0)
CFG = EncoderDecoderConfig(vocab_size=V, hidden_size=32, encoder_layers=2, decoder_layers=2, num_heads=4,
                           intermediate_size=64, max_position=64, dropout=0.0, **T5)
TOL = dict(rtol=1e-5, atol=1e-5)


def t5_model(cfg: EncoderDecoderConfig = CFG) -> EncoderDecoder:
    torch.manual_seed(0)
    return EncoderDecoder(cfg).eval()


class Corpus:
    """Ten documents of five sentences of random tokens (ids 5 .. 59, below the sentinels)."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        lens = rng.integers(4, 12, 50)
        self.sentences = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        self.documents = np.arange(0, 51, 5, dtype=np.int64)
        self.tokens = rng.integers(5, 60, int(self.sentences[-1])).astype(np.int64)


# -- registration, config, presets -----------------------------------------------------------------
def test_registered_and_presets() -> None:
    assert registry.get("objective", "t5") is SpanCorruption
    assert SpanCorruptionConfig() == SpanCorruptionConfig(noise_density=0.15, mean_noise_span_length=3.0)
    tiny = load_preset("t5-tiny")
    _, cfg = encoder_config(tiny["model"])
    sizes = (cfg.encoder_layers, cfg.decoder_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size)
    assert sizes == (2, 2, 128, 2, 512)
    assert tiny["tokenizer"]["extra_ids"] == 100 and tiny["objective"]["name"] == "t5"
    _, small = encoder_config(load_preset("t5-small")["model"])
    assert (small.hidden_size, small.encoder_layers, small.decoder_layers, small.num_heads, small.intermediate_size,
            small.relative_buckets, small.relative_max_distance) == (512, 6, 6, 8, 2048, 32, 128)
    switches = (small.norm, small.norm_type, small.bias, small.positions, small.scale_attention)
    assert switches == ("pre", "rms", False, "relative", False)


def test_t5_small_has_the_hf_parameter_count() -> None:
    """t5-small at T5's vocabulary (32128) has exactly HF ``t5-small``'s parameters (60.5 M)."""
    transformers = pytest.importorskip("transformers")
    data = load_preset("t5-small")
    data["model"]["vocab_size"] = 32128
    tok = SimpleNamespace(vocab_size=32128, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, sentinel_ids=SENTINELS)
    with torch.device("meta"):
        ours = sum(p.numel() for p in build_model(data, tok).parameters())
        hf = transformers.T5ForConditionalGeneration(transformers.T5Config())
    theirs = sum(p.numel() for p in hf.parameters())  # the tied lm_head counted once
    assert ours == theirs == 60506624


def test_config_refusals() -> None:
    for bad in ({"noise_density": 0.0}, {"noise_density": 1.0}, {"mean_noise_span_length": 0.5},
                {"noise_density": "x"}):
        with pytest.raises(PtmError, match="objective"):
            SpanCorruptionConfig(**bad)
    for bad in ({"norm": "sandwich"}, {"norm_type": "batch"}, {"positions": "rotary"}, {"bias": "no"},
                {"relative_buckets": 2}, {"init": "xavier"}):
        with pytest.raises(PtmError, match=next(iter(bad))):
            replace(CFG, **bad)


def test_a_tokenizer_without_sentinels_is_refused_with_the_fix() -> None:
    enc = t5_model()
    bare = SimpleNamespace(**{k: v for k, v in vars(TOK).items() if k != "sentinel_ids"})
    with pytest.raises(PtmError, match=r"tokenizer\.extra_ids"):
        SpanCorruption(SpanCorruptionConfig(), enc, bare)
    few = SimpleNamespace(**{**vars(TOK), "sentinel_ids": SENTINELS[:2]})
    obj = SpanCorruption(SpanCorruptionConfig(), enc, few)
    assert num_noise_spans(63, 0.15, 3.0) == (9, 3)  # examples of up to seq_len - 1 = 63 tokens
    with pytest.raises(PtmError, match=r"raise tokenizer\.extra_ids to at least 3"):
        obj.example_spans(Corpus(), 64)
    assert len(obj.example_spans(Corpus(), 40)) > 0  # 39 tokens -> 6 noise tokens -> 2 spans: enough


# -- the noise mask ------------------------------------------------------------------------------
def test_noise_mask_follows_t5() -> None:
    """Kept runs and noise spans alternate, a kept run first, k of each, all non-empty; the
    counts are T5's roundings."""
    rng = np.random.default_rng(0)
    for n in [2, 3, 5, 10, 37, 100, 511]:
        noise_n, k = num_noise_spans(n, 0.15, 3.0)
        assert noise_n == min(max(round(n * 0.15), 1), n - 1) and k == max(round(noise_n / 3.0), 1)
        for _ in range(20):
            mask = random_spans_noise_mask(n, 0.15, 3.0, rng)
            assert mask.shape == (n,) and mask.sum() == noise_n and not mask[0] and mask[-1]
            changes = np.flatnonzero(np.diff(mask.astype(int)))
            assert len(changes) == 2 * k - 1  # k kept runs and k noise spans, alternating


def test_noise_density_and_mean_span_length_over_many_draws() -> None:
    rng = np.random.default_rng(1)
    noise = spans = total = 0
    for n in rng.integers(20, 300, 400):
        mask = random_spans_noise_mask(int(n), 0.15, 3.0, rng)
        noise += int(mask.sum())
        spans += int((mask & ~np.concatenate([[False], mask[:-1]])).sum())
        total += int(n)
    assert abs(noise / total - 0.15) < 0.005
    assert abs(noise / spans - 3.0) < 0.1


def test_segmentation_is_uniform() -> None:
    """A uniform split of N items into k non-empty segments: the first segment has length l with
    probability C(N - l - 1, k - 2) / C(N - 1, k - 1) (compositions of N counted by brute force)."""
    rng = np.random.default_rng(2)
    N, k, draws = 9, 3, 20000
    first = np.array([random_segmentation(N, k, rng)[0] for _ in range(draws)])
    assert all((random_segmentation(N, k, rng) >= 1).all() and random_segmentation(N, k, rng).sum() == N for _ in range(50))
    for length in range(1, N - k + 2):
        p = math.comb(N - length - 1, k - 2) / math.comb(N - 1, k - 1)
        assert abs((first == length).mean() - p) < 4 * math.sqrt(p * (1 - p) / draws) + 1e-3


# -- sentinels -----------------------------------------------------------------------------------
def test_inputs_and_targets_reassemble_the_original_exactly() -> None:
    rng = np.random.default_rng(3)
    sentinels = np.array(SENTINELS)
    for _ in range(300):
        n = int(rng.integers(2, 120))
        x = rng.integers(5, 60, n)
        mask = random_spans_noise_mask(n, 0.15, 3.0, rng)
        k = num_noise_spans(n, 0.15, 3.0)[1]
        inputs, target = span_corrupt(x, mask, sentinels)
        # the input: kept tokens in order, one distinct sentinel per span, in order
        assert np.array_equal(inputs[~np.isin(inputs, sentinels)], x[~mask])
        assert np.array_equal(inputs[np.isin(inputs, sentinels)], sentinels[:k])
        # the target: sentinel i then span i, for every span; the tokens are the noise tokens
        assert target[0] == sentinels[0]
        assert np.array_equal(target[np.isin(target, sentinels)], sentinels[:k])
        assert np.array_equal(target[~np.isin(target, sentinels)], x[mask])
        assert len(inputs) + len(target) == n + 2 * k
        assert np.array_equal(fill_sentinels(inputs, target, sentinels), x)


def test_paper_example() -> None:
    """The paper's Figure 2: 'Thank you <X> me to your party <Y> week.' / '<X> for inviting <Y> last <Z>'
    (its mask ends in kept text, so the target closes with a third sentinel; ours never do)."""
    words = "Thank you for inviting me to your party last week .".split()
    x = np.arange(len(words)) + 10
    mask = np.isin(np.arange(len(words)), [2, 3, 8])
    inputs, target = span_corrupt(x, mask, np.array([90, 91, 92]))
    assert inputs.tolist() == [10, 11, 90, 14, 15, 16, 17, 91, 19, 20]
    assert target.tolist() == [90, 12, 13, 91, 18]


def test_collate() -> None:
    obj = SpanCorruption(SpanCorruptionConfig(), t5_model(), TOK)
    corpus = Corpus()
    spans = obj.example_spans(corpus, 48)
    assert (np.diff(spans, axis=1) <= 47).all()
    batch = obj.collate(corpus, spans[:6], np.random.default_rng(0))
    again = obj.collate(corpus, spans[:6], np.random.default_rng(0))
    assert all(torch.equal(batch[k], again[k]) for k in batch)  # all randomness from the rng
    ids, labels, dec = batch["input_ids"], batch["labels"], batch["decoder_input_ids"]
    src_len, tgt_len = batch["attention_mask"].sum(1), (labels != -100).sum(1)
    for i, (st, en) in enumerate(spans[:6]):
        x = corpus.tokens[st:en]
        inputs, target = ids[i, : src_len[i]].numpy(), labels[i, : tgt_len[i]].numpy()
        assert inputs[-1] == TOK.sep_id and target[-1] == TOK.sep_id and target[0] == SENTINELS[0]
        assert np.array_equal(fill_sentinels(inputs[:-1], target[:-1], np.array(SENTINELS)), x)
        assert (ids[i, src_len[i]:] == 0).all()
    assert (dec[:, 0] == 0).all()  # T5 starts its decoder from [PAD]
    assert torch.equal(dec[:, 1:][labels[:, 1:] != -100], labels[:, :-1][labels[:, 1:] != -100])


# -- the T5 switches of the encoder-decoder --------------------------------------------------------
def test_rms_norm_against_float64_and_hf() -> None:
    torch.manual_seed(0)
    norm = make_norm(CFG)
    assert isinstance(norm, torch.nn.RMSNorm) and [n for n, _ in norm.named_parameters()] == ["weight"]
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.3)
    x = 3 * torch.randn(4, 7, 32) + 0.5
    x64, g64 = x.double(), norm.weight.detach().double()
    ref = x64 / torch.sqrt((x64 ** 2).mean(-1, keepdim=True) + 1e-6) * g64  # no mean subtraction, no bias
    assert_close(norm(x).double(), ref, rtol=1e-6, atol=1e-6)
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    theirs = t5.T5LayerNorm(32, eps=1e-6)
    theirs.load_state_dict(norm.state_dict())
    assert_close(norm(x), theirs(x), rtol=1e-5, atol=1e-5)


def _bucket_by_hand(offset: int, bidirectional: bool, buckets: int, max_distance: int) -> int:
    """T5's bucket of one offset ``j - i``, written from the paper's description with Python floats."""
    base = 0
    if bidirectional:
        buckets //= 2
        base = buckets if offset > 0 else 0
        n = abs(offset)
    else:
        n = max(-offset, 0)
    exact = buckets // 2
    if n < exact:
        return base + n
    return base + min(exact + int(math.log(n / exact) / math.log(max_distance / exact) * (buckets - exact)), buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets, max_distance", [(32, 128), (8, 20)])
def test_relative_buckets(bidirectional: bool, buckets: int, max_distance: int) -> None:
    offsets = torch.arange(-400, 401)
    ours = relative_position_bucket(offsets, bidirectional, buckets, max_distance)
    expected = [_bucket_by_hand(int(o), bidirectional, buckets, max_distance) for o in offsets]
    assert ours.tolist() == expected
    assert ours.min() >= 0 and ours.max() == buckets - 1
    if not bidirectional:
        assert (ours[offsets > 0] == 0).all()  # the future never counts: it is masked anyway


def test_one_relative_bias_per_stack_shared_by_its_layers() -> None:
    enc = t5_model()
    names = [n for n, _ in enc.named_parameters() if "relative" in n]
    assert names == ["encoder.relative_bias.bias.weight", "decoder.relative_bias.bias.weight"]
    assert not any(n.endswith(".bias") or "position_embeddings" in n for n, _ in enc.named_parameters())
    assert enc.layer_index("encoder.relative_bias.bias.weight") == 1
    assert enc.layer_index("decoder.relative_bias.bias.weight") == CFG.encoder_layers + 1
    # the encoder's attention is bidirectional with a position-dependent bias; a token's output depends on order
    x = torch.randint(5, 60, (1, 6))
    h = enc.encode(x).last_hidden_state
    h_rev = enc.encode(x.flip(1)).last_hidden_state.flip(1)
    assert not torch.allclose(h, h_rev, atol=1e-4)


def test_unscaled_attention_and_t5_init() -> None:
    """``scale_attention=False`` drops 1/sqrt(d); T5's init puts it into W_q instead."""
    enc = t5_model(replace(CFG, hidden_size=256, num_heads=4, intermediate_size=1024))
    H, d = 256, 64
    qkv = enc.encoder.layers[0].attn.qkv.weight
    assert abs(qkv[:H].std().item() - (H * d) ** -0.5) < 0.1 * (H * d) ** -0.5
    assert abs(qkv[H:].std().item() - H ** -0.5) < 0.1 * H ** -0.5
    assert abs(enc.encoder.layers[0].ffn.fc2.weight.std().item() - 1024 ** -0.5) < 0.1 * 1024 ** -0.5
    assert abs(enc.word_embeddings.weight[1:].std().item() - 1.0) < 0.05
    attn = enc.encoder.layers[0].attn
    assert attn.scale == 1.0
    x = torch.randn(2, 5, H)
    q, k, v = F.linear(x, attn.qkv.weight).view(2, 5, 3, 4, d).permute(2, 0, 3, 1, 4)
    manual = (torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v).transpose(1, 2).reshape(2, 5, H)
    assert_close(attn(x), F.linear(manual, attn.out.weight), **TOL)


def test_gated_ffn() -> None:
    cfg = replace(CFG, gated_ffn=True, activation="gelu_tanh")
    ffn = t5_model(cfg).encoder.layers[0].ffn
    x = torch.randn(3, 32)
    expected = F.linear(F.gelu(F.linear(x, ffn.fc1.weight), approximate="tanh") * F.linear(x, ffn.fc1_linear.weight), ffn.fc2.weight)
    assert_close(ffn(x), expected, **TOL)


@pytest.mark.parametrize("cfg", [CFG, replace(CFG, positions="absolute"), replace(CFG, gated_ffn=True, activation="gelu_tanh")])
def test_cached_decoding_matches_full_decoding(cfg: EncoderDecoderConfig) -> None:
    """The relative bias of a cached step reads positions ``t0 ..``, not ``0 ..``."""
    enc = t5_model(cfg)
    src, tgt = torch.randint(5, 60, (2, 9)), torch.randint(5, 60, (2, 7))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 6:] = 0
    memory = enc.encode(src, mask).last_hidden_state
    full = enc.decode(tgt, memory, mask).last_hidden_state
    cache, steps = enc.start_cache(memory, mask), []
    for t in range(7):
        out = enc.decode(tgt[:, t : t + 1], cache=cache)
        cache = out.extras["cache"]
        steps.append(out.last_hidden_state)
    assert_close(torch.cat(steps, dim=1), full, **TOL)
    a = enc.decode(tgt[:, :3], cache=enc.start_cache(memory, mask))
    b = enc.decode(tgt[:, 3:], cache=a.extras["cache"])
    assert_close(torch.cat([a.last_hidden_state, b.last_hidden_state], dim=1), full, **TOL)
    assert torch.equal(greedy_decode(enc, src, mask, 8), greedy_decode(enc, src, mask, 8, use_cache=False))


def test_decoder_is_causal_and_padding_is_invisible() -> None:
    enc = t5_model()
    src, tgt = torch.randint(5, 60, (1, 8)), torch.randint(5, 60, (1, 6))
    memory = enc.encode(src).last_hidden_state
    base = enc.decode(tgt, memory).last_hidden_state
    changed = tgt.clone()
    changed[0, 4] = 7
    after = enc.decode(changed, memory).last_hidden_state
    assert_close(after[:, :4], base[:, :4], **TOL) and not torch.allclose(after[:, 4:], base[:, 4:])
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 8), torch.zeros(1, 3)], dim=1).long()
    assert_close(enc.encode(padded, mask).last_hidden_state[:, :8], memory, **TOL)


# -- the loss ------------------------------------------------------------------------------------
def test_loss_equals_a_direct_computation() -> None:
    enc = t5_model()
    obj = SpanCorruption(SpanCorruptionConfig(), enc, TOK)
    corpus = Corpus()
    batch = obj.collate(corpus, obj.example_spans(corpus, 48)[:4], np.random.default_rng(0))
    out = obj(enc, batch)
    # logits by hand: the decoder's states * H^-1/2 against the embeddings, over every real target position
    h = enc(batch["input_ids"], batch["attention_mask"], decoder_input_ids=batch["decoder_input_ids"]).last_hidden_state
    logits = (h.double() * 32 ** -0.5) @ enc.word_embeddings.weight.double().T
    labels = batch["labels"]
    real = labels != -100
    nll = -torch.log_softmax(logits, dim=-1)[real].gather(1, labels[real][:, None]).squeeze(1)
    assert out.loss.item() == pytest.approx(nll.mean().item(), rel=1e-5)
    assert out.n_predictions == int(real.sum()) and set(out.metrics) == {"t5_loss"}
    out.loss.backward()
    assert enc.encoder.relative_bias.bias.weight.grad.abs().sum() > 0


# -- the tokenizer's sentinels ---------------------------------------------------------------------
def test_tokenizer_extra_ids(tmp_path) -> None:
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\na dog ran under the red house\n" * 20)
    plain = Tokenizer.train([text], "wordpiece", 60, min_frequency=1)
    with_ids = Tokenizer.train([text], "wordpiece", 60, min_frequency=1, extra_ids=5)
    assert plain.sentinel_ids == () and with_ids.vocab_size == plain.vocab_size + 5
    assert with_ids.sentinel_ids == tuple(range(plain.vocab_size + 4, plain.vocab_size - 1, -1))  # <extra_id_0> last
    assert [with_ids.id_to_token(i) for i in with_ids.sentinel_ids[:2]] == ["<extra_id_0>", "<extra_id_1>"]
    assert with_ids.encode("the cat") == plain.encode("the cat")
    assert with_ids.encode("the <extra_id_1> cat") == [plain.encode("the")[0], with_ids.sentinel_ids[1], plain.encode("cat")[0]]
    assert set(with_ids.sentinel_ids) <= with_ids.special_ids
    with_ids.save(tmp_path / "tok.json")
    assert Tokenizer.load(tmp_path / "tok.json").sentinel_ids == with_ids.sentinel_ids
    with pytest.raises(PtmError, match="extra_ids"):
        Tokenizer.train([text], "wordpiece", 60, extra_ids=-1)
