"""Beam search and the n-gram ban: against brute force, against greedy decoding, and the
properties a batch of prompts relies on (cache or none, padded batch or each prompt alone)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from ptmkit.beam_search import beam_search
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.errors import PtmError
from ptmkit.generation import CausalLMStepper, GenerationConfig, Seq2SeqStepper, decode, generate_ids, left_pad
from ptmkit.nn.kv_cache import KVCache
from ptmkit.nn.ngram_ban import ban_repeated_ngrams

V = 40
GPT = TransformerConfig(
    vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=48,
    type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5, embedding_norm=False,
    pooler=False, scaled_residual_init=True, dropout=0.0, attention_dropout=0.0,
)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
SOURCES = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [14, 15, 16], [17, 18, 19, 20, 21, 22]]


def gpt(seed: int = 0) -> TransformerEncoder:
    torch.manual_seed(seed)
    model = TransformerEncoder(GPT).double().eval()
    with torch.no_grad():  # larger weights: the next-token distributions are neither flat nor one-hot
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def bart(seed: int = 0) -> EncoderDecoder:
    torch.manual_seed(seed)
    cfg = EncoderDecoderConfig(vocab_size=V, hidden_size=32, encoder_layers=2, decoder_layers=2, num_heads=4,
                               intermediate_size=64, max_position=32, init_std=0.3)
    return EncoderDecoder(cfg).double().eval()


def stepper(model, rows: list[list[int]], use_cache: bool = True):
    if isinstance(model, EncoderDecoder):
        ids, mask = left_pad([r[::-1] for r in rows], 0)
        return Seq2SeqStepper(model, ids.flip(1), mask.flip(1), use_cache)
    ids, mask = left_pad(rows, 0)
    return CausalLMStepper(model, ids, mask, use_cache)


# -- the n-gram ban ------------------------------------------------------------------------------
def banned_reference(tokens: list[int], valid: list[bool], n: int) -> set[int]:
    """The tokens that would complete an n-gram seen before, one window at a time."""
    real = [t for t, ok in zip(tokens, valid) if ok]  # padding is left of the real tokens
    if len(real) < n:
        return set()
    tail = real[len(real) - n + 1:] if n > 1 else []
    return {real[i + n - 1] for i in range(len(real) - n + 1) if real[i:i + n - 1] == tail}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ngram_ban_matches_a_window_by_window_reference(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    tokens = torch.randint(0, 3, (64, 12), generator=g)  # 3 symbols: n-grams repeat often
    lengths = torch.randint(0, 13, (64,), generator=g)
    valid = torch.arange(12)[None, :] >= (12 - lengths)[:, None]  # left padding
    scores = torch.randn(64, 7, generator=g)
    out = ban_repeated_ngrams(scores, tokens, n, valid)
    some = 0
    for row in range(64):
        expect = banned_reference(tokens[row].tolist(), valid[row].tolist(), n)
        assert set(torch.isinf(out[row]).nonzero().flatten().tolist()) == expect, row
        assert torch.equal(out[row][~torch.isinf(out[row])], scores[row][~torch.isinf(out[row])])
        some += bool(expect)
    assert some > 10  # the case is not vacuous
    assert torch.equal(ban_repeated_ngrams(scores, tokens, 0, valid), scores)


def test_greedy_with_no_repeat_ngram_never_repeats_one() -> None:
    model = gpt()
    free = decode(stepper(model, PROMPTS), GenerationConfig(max_new_tokens=20, greedy=True))
    for n in (2, 3):
        out = decode(stepper(model, PROMPTS), GenerationConfig(max_new_tokens=20, greedy=True, no_repeat_ngram_size=n))
        for prompt, row in zip(PROMPTS, out.tolist()):
            seq = prompt + row
            grams = [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
            assert len(grams) == len(set(grams))
        assert not torch.equal(out, free)


# -- beam search ---------------------------------------------------------------------------------
class MarkovStepper:
    """Next-token log-probabilities that depend on the last token only: ``table [V, V]``."""

    capacity = None

    def __init__(self, table: torch.Tensor, starts: list[int]) -> None:
        self.table, self.last = table, torch.tensor(starts)
        self.batch_size = len(starts)

    def first(self) -> torch.Tensor:
        return self.table[self.last]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.last = tokens
        return self.table[tokens]

    def expand(self, k: int) -> None:
        self.last = self.last.repeat_interleave(k)
        self.batch_size *= k

    def reorder(self, rows: torch.Tensor) -> None:
        self.last = self.last[rows]


def test_beam_search_with_room_for_every_prefix_finds_the_best_sequences() -> None:
    """With as many beams as prefixes, the length penalty 0 and ``early_stopping="never"``, beam
    search is exhaustive: its hypotheses are the best sequences by summed log-probability."""
    Vm, steps, R = 4, 3, 5
    table = torch.randn(Vm, Vm, generator=torch.Generator().manual_seed(0), dtype=torch.float64).log_softmax(-1)
    out = beam_search(MarkovStepper(table, [0, 2]), steps, Vm ** (steps - 1), length_penalty=0.0,
                      early_stopping="never", num_return_sequences=R)
    for b, start in enumerate([0, 2]):
        scored = []
        for seq in itertools.product(range(Vm), repeat=steps):
            path = (start, *seq)
            scored.append((sum(float(table[a, c]) for a, c in zip(path, path[1:])), list(seq)))
        scored.sort(key=lambda x: -x[0])
        assert out.tokens[b].tolist() == [s for _, s in scored[:R]]
        assert torch.allclose(out.scores[b].double(), torch.tensor([s for s, _ in scored[:R]], dtype=torch.float64),
                              rtol=1e-6, atol=1e-6)
        assert out.lengths[b].tolist() == [steps] * R


@pytest.mark.parametrize("model", [gpt(), bart()], ids=["gpt", "bart"])
def test_one_beam_is_greedy_decoding(model) -> None:
    rows = PROMPTS if isinstance(model, TransformerEncoder) else SOURCES
    greedy = decode(stepper(model, rows), GenerationConfig(max_new_tokens=12, greedy=True))
    for lp, stop in ((1.0, False), (2.0, True), (-0.5, "never")):  # without an end token every setting is greedy
        one = beam_search(stepper(model, rows), 12, 1, length_penalty=lp, early_stopping=stop)
        assert torch.equal(one.tokens[:, 0], greedy)
    eos = int(greedy[0, 3])  # row 0 ends at its 4th token or before, the others later or never
    first = (greedy[0] == eos).nonzero()[0].item()
    greedy = decode(stepper(model, rows), GenerationConfig(max_new_tokens=12, greedy=True), eos_id=eos)
    one = beam_search(stepper(model, rows), 12, 1, early_stopping=True, eos_id=eos)  # stop at the first end
    width = one.tokens.shape[2]
    assert torch.equal(one.tokens[:, 0], greedy[:, :width]) and (greedy[:, width:] == 0).all()
    assert one.lengths[0, 0] == first + 1


@pytest.mark.parametrize("model", [gpt(), bart()], ids=["gpt", "bart"])
def test_beams_cached_equal_uncached_and_batched_equal_alone(model) -> None:
    rows = PROMPTS if isinstance(model, TransformerEncoder) else SOURCES
    free = decode(stepper(model, rows), GenerationConfig(max_new_tokens=10, num_beams=3, num_return_sequences=3))
    eos = int(free[0, 2])
    cfg = GenerationConfig(max_new_tokens=10, num_beams=3, no_repeat_ngram_size=2, num_return_sequences=2,
                           length_penalty=1.5)
    out = decode(stepper(model, rows), cfg, eos_id=eos)
    assert out.shape[0] == 2 * len(rows) and out.shape[1] <= 10
    assert torch.equal(out, decode(stepper(model, rows, use_cache=False), cfg, eos_id=eos))
    for i, row in enumerate(rows):  # a prompt's hypotheses do not depend on its batch (padding, others' lengths)
        alone = decode(stepper(model, [row]), cfg, eos_id=eos)
        width = alone.shape[1]
        assert torch.equal(out[2 * i:2 * i + 2, :width], alone) and (out[2 * i:2 * i + 2, width:] == 0).all()
    kind = "causal_lm" if isinstance(model, TransformerEncoder) else "seq2seq"
    ids = generate_ids(model, kind, rows, cfg, eos_id=eos)
    assert len(ids) == 2 * len(rows)
    for got, want in zip(ids, out.tolist()):  # each cut after its end token
        assert got == (want[:want.index(eos) + 1] if eos in want else want)


def test_kv_cache_select_gathers_rows() -> None:
    k = torch.arange(2 * 3 * 2, dtype=torch.float64).view(2, 1, 3, 2)
    cache = KVCache([(k, -k), None], torch.tensor([[True, False, True], [True, True, True]]))
    rows = torch.tensor([1, 1, 0])
    out = cache.select(rows)
    assert torch.equal(out.kv[0][0], k[[1, 1, 0]]) and torch.equal(out.kv[0][1], -k[[1, 1, 0]]) and out.kv[1] is None
    assert torch.equal(out.key_mask, cache.key_mask[[1, 1, 0]]) and out.length == 3


# -- settings that are refused -------------------------------------------------------------------
@pytest.mark.parametrize("settings,message", [
    ({"num_beams": 0}, "num_beams must be >= 1"),
    ({"num_beams": 2.0}, "num_beams must be an integer"),
    ({"num_beams": 4, "early_stopping": "sometimes"}, "early_stopping must be True, False or 'never'"),
    ({"num_beams": 4, "early_stopping": 1}, "early_stopping must be True, False or 'never'"),
    ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences must be between 1 and num_beams=2"),
    ({"num_return_sequences": 0}, "num_return_sequences"),
    ({"num_beams": 4, "temperature": 0.7}, r"does not sample, so temperature=0.7"),
    ({"num_beams": 4, "top_k": 5, "top_p": 0.9}, r"top_k=5, top_p=0.9"),
    ({"length_penalty": 2.0}, "only apply to beam search"),
    ({"early_stopping": True}, "only apply to beam search"),
    ({"num_beams": 4, "length_penalty": float("nan")}, "length_penalty must be a finite number"),
    ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size must be >= 0"),
])
def test_config_refuses_what_beam_search_cannot_do(settings, message) -> None:
    with pytest.raises(PtmError, match=message):
        GenerationConfig(**settings)


def test_a_stepper_that_cannot_reorder_is_refused() -> None:
    class Plain:
        batch_size, capacity = 1, None

        def first(self):
            return torch.zeros(1, 5)

        def step(self, tokens):
            return torch.zeros(1, 5)

    with pytest.raises(PtmError, match=r"beam search needs a decoder.*Plain.*num_beams=1"):
        decode(Plain(), GenerationConfig(num_beams=2))
    assert decode(Plain(), replace(GenerationConfig(greedy=True), max_new_tokens=3)).shape == (1, 3)
