"""MASS: config and presets, fragment lengths and positions, the encoder's 80/10/10, decoder inputs
at the fragment's positions against a direct reference, decoder position ids, the loss against a
direct computation, greedy fragment decoding, learning on a toy corpus."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from ptmkit import registry
from ptmkit.build import encoder_config
from ptmkit.config import from_dict
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.mass import MASS, MASSConfig, draw_spans, greedy_span_decode, span_lengths
from ptmkit.presets import load_preset
from ptmkit.train.config import TrainConfig

V = 80
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
TOK = SimpleNamespace(vocab_size=V, pad_id=PAD, unk_id=UNK, cls_id=CLS, sep_id=SEP, mask_id=MASK)


def corpus(lengths, seed: int = 0) -> SimpleNamespace:
    """Sentences of the given lengths, ordinary tokens only, one document."""
    sent = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.random.default_rng(seed).integers(5, V, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, len(lengths)], dtype=np.int64))


def model(seed: int = 0, dropout: float = 0.0, **kw) -> PretrainModel:
    torch.manual_seed(seed)
    cfg = EncoderDecoderConfig(vocab_size=V, hidden_size=32, encoder_layers=2, decoder_layers=2, num_heads=4,
                               intermediate_size=48, max_position=64, dropout=dropout)
    enc = EncoderDecoder(cfg)
    with torch.no_grad():  # larger weights than the 0.02 init: differences must show
        for p in enc.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return PretrainModel(enc, MASS(MASSConfig(**kw), enc, TOK))


def k_of(ratio: float, m: int) -> int:
    """The fragment length in exact decimal arithmetic: ratio * m rounded half up, within 1 .. m."""
    k = int((Decimal(str(ratio)) * int(m)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    return min(max(1, k), int(m))


# -- config and presets -------------------------------------------------------------------------
def test_registered_presets_and_config() -> None:
    assert registry.get("objective", "mass") is MASS and MASS.encoders == ("encoder_decoder",)
    tiny, bart = load_preset("mass-tiny"), load_preset("bart-tiny")
    assert tiny["objective"]["name"] == "mass" and "text_infilling" not in tiny["objective"]
    assert tiny["model"] == bart["model"] and tiny["tokenizer"] == bart["tokenizer"] and tiny["train"] == bart["train"]
    cfg = from_dict(MASSConfig, {k: v for k, v in tiny["objective"].items() if k != "name"}, "objective")
    assert cfg == MASSConfig() and cfg.span_ratio == 0.5 and (cfg.mask_token_ratio, cfg.random_token_ratio) == (0.8, 0.1)
    base = load_preset("mass-base")
    _, mcfg = encoder_config(base["model"])
    assert (mcfg.encoder_layers, mcfg.decoder_layers, mcfg.hidden_size, mcfg.intermediate_size) == (6, 6, 1024, 4096)
    assert base["objective"]["name"] == "mass" and base["train"]["seq_len"] <= mcfg.max_position
    train = from_dict(TrainConfig, base["train"], "train")
    assert train.schedule == "inverse_sqrt" and tuple(train.betas) == (0.9, 0.98)
    for bad in ({"span_ratio": 0.0}, {"span_ratio": 1.5}, {"span_ratio": "half"}, {"mask_token_ratio": 0.95},
                {"first_input": "prev"}, {"pack_sentences": "yes"}):
        with pytest.raises(PtmError, match="objective\\."):
            MASSConfig(**bad)
    assert MASSConfig(span_ratio="0.25").span_ratio == 0.25
    with pytest.raises(PtmError, match="seq_len"):
        model().objective.example_spans(corpus([5]), 2)


def test_examples_are_sentences_or_packed_runs() -> None:
    c = corpus([3, 7, 40, 2])
    obj = model().objective
    assert obj.example_spans(c, 22).tolist() == [[0, 3], [3, 10], [10, 30], [30, 50], [50, 52]]
    packed = model(pack_sentences=True).objective.example_spans(c, 22)
    assert packed.tolist() == [[0, 10], [10, 30], [30, 50], [50, 52]]


# -- fragment lengths and positions -------------------------------------------------------------
def test_span_length_is_ratio_times_m_rounded() -> None:
    for ratio in (0.01, 0.1, 0.25, 0.3, 0.5, 0.7, 0.75, 1.0):
        m = np.arange(1, 121)
        expect = [k_of(ratio, n) for n in m]
        assert span_lengths(m, ratio).tolist() == expect, ratio
    assert span_lengths(np.array([1, 2, 3, 5, 10]), 0.5).tolist() == [1, 1, 2, 3, 5]  # 0.5 and 2.5 round up
    assert span_lengths(np.array([1, 2, 9]), 1.0).tolist() == [1, 2, 9]  # the whole sentence
    assert span_lengths(np.array([1, 7, 99]), 0.001).tolist() == [1, 1, 1]  # never empty


def test_span_starts_are_uniform() -> None:
    """m = 10, k = 3: the start is uniform over the 8 places the fragment fits (chi-square)."""
    rng = np.random.default_rng(0)
    starts, k = draw_spans(np.full(16000, 10), 0.3, rng)
    assert set(k.tolist()) == {3}
    counts = np.bincount(starts, minlength=8)
    assert len(counts) == 8 and counts.min() > 0
    chi2 = float(((counts - 2000.0) ** 2 / 2000.0).sum())
    assert chi2 < 24.3  # 7 degrees of freedom, p = 0.001
    # ratio 1.0: the only place is 0; a one-token sentence: its token
    starts, k = draw_spans(np.array([1, 4, 9]), 1.0, rng)
    assert starts.tolist() == [0, 0, 0] and k.tolist() == [1, 4, 9]


def test_span_positions_through_collate_are_uniform() -> None:
    obj = model(span_ratio=0.5).objective
    c = corpus([6] * 400)
    spans = obj.example_spans(c, 20)
    rng = np.random.default_rng(1)
    first = np.concatenate([obj.collate(c, spans, rng)["decoder_position_ids"][:, 0].numpy() for _ in range(10)])
    counts = np.bincount(first - 1, minlength=4)  # m = 6, k = 3: starts 0..3, position = 1 + start
    assert len(counts) == 4
    assert float(((counts - 1000.0) ** 2 / 1000.0).sum()) < 16.3  # 3 degrees of freedom, p = 0.001


# -- the batch against a direct reference -------------------------------------------------------
def reference_row(x: list[int], u: int, k: int, first_input: str) -> dict[str, list[int]]:
    """The MASS arrays of one sentence ``x`` with fragment ``x[u:u+k]``, written out token by token."""
    seq = [CLS] + x + [SEP]
    dec_in, dec_pos, labels = [], [], []
    for j in range(k):
        p = 1 + u + j  # the fragment token's place in [CLS] x [SEP]
        labels.append(seq[p])
        dec_pos.append(p)
        dec_in.append(seq[p - 1] if (j > 0 or first_input == "previous") else MASK)
    return {"seq": seq, "decoder_input_ids": dec_in, "decoder_position_ids": dec_pos, "labels": labels}


@pytest.mark.parametrize("first_input", ["previous", "mask"])
@pytest.mark.parametrize("ratio", [0.5, 0.2, 1.0, 0.01])
def test_batch_matches_direct_reference(ratio: float, first_input: str) -> None:
    lengths = [1, 2, 3, 4, 5, 9, 17, 30]
    c = corpus(lengths, seed=3)
    obj = model(span_ratio=ratio, first_input=first_input).objective
    spans = obj.example_spans(c, 40)
    for seed in range(5):
        b = obj.collate(c, spans, np.random.default_rng(seed))
        P = b["labels"].shape[1]
        assert set(b) == {"input_ids", "attention_mask", "decoder_input_ids", "decoder_position_ids", "labels"}
        assert b["input_ids"].shape == b["attention_mask"].shape == (len(lengths), max(lengths) + 2)
        assert b["decoder_input_ids"].shape == b["decoder_position_ids"].shape == (len(lengths), P)
        for i, (st, en) in enumerate(spans.tolist()):
            x = [int(t) for t in c.tokens[st:en]]
            m = len(x)
            k = int((b["labels"][i] != IGNORE_INDEX).sum())
            assert k == k_of(ratio, m)
            u = int(b["decoder_position_ids"][i, 0]) - 1
            assert 0 <= u <= m - k
            ref = reference_row(x, u, k, first_input)
            assert b["labels"][i, :k].tolist() == ref["labels"] and (b["labels"][i, k:] == IGNORE_INDEX).all()
            assert b["decoder_input_ids"][i, :k].tolist() == ref["decoder_input_ids"]
            assert b["decoder_position_ids"][i, :k].tolist() == ref["decoder_position_ids"]
            assert (b["decoder_input_ids"][i, k:] == PAD).all()
            src = b["input_ids"][i].tolist()
            assert b["attention_mask"][i].tolist() == [1] * (m + 2) + [0] * (len(src) - m - 2)
            outside = [p for p in range(m + 2) if not 1 + u <= p < 1 + u + k]
            assert [src[p] for p in outside] == [ref["seq"][p] for p in outside]  # only the fragment changes
            assert src[m + 2 :] == [PAD] * (len(src) - m - 2)
            assert all(t not in (PAD, CLS, SEP) for t in src[1 + u : 1 + u + k])


def test_encoder_corruption_is_80_10_10() -> None:
    obj = model(span_ratio=0.5).objective
    c = corpus([20] * 2000, seed=5)
    b = obj.collate(c, obj.example_spans(c, 30), np.random.default_rng(0))
    rows, cols = torch.nonzero(b["labels"] != IGNORE_INDEX, as_tuple=True)
    seen = b["input_ids"][rows, b["decoder_position_ids"][rows, cols]]
    truth = b["labels"][rows, cols]
    n = len(truth)
    assert n == 2000 * 10
    masked = (seen == MASK).float().mean().item()
    kept = (seen == truth).float().mean().item()
    random = ((seen != MASK) & (seen != truth)).float().mean().item()
    pool = V - 5
    assert abs(masked - 0.8) < 0.012
    assert abs(kept - (0.1 + 0.1 / pool)) < 0.008 and abs(random - 0.1 * (1 - 1 / pool)) < 0.008
    assert int(seen.min()) >= MASK  # random replacements are ordinary tokens (or [MASK] itself)


def test_collate_is_a_function_of_the_rng() -> None:
    obj = model().objective
    c = corpus([7, 12, 3, 25])
    spans = obj.example_spans(c, 30)
    a = obj.collate(c, spans, np.random.default_rng(9))
    b = obj.collate(c, spans, np.random.default_rng(9))
    assert all(torch.equal(a[key], b[key]) for key in a)


# -- decoder position ids in the encoder–decoder ------------------------------------------------
def test_decoder_position_ids_reach_the_decoder() -> None:
    enc = model().backbone.eval()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(5, V, (2, 9), generator=g)
    tgt = torch.randint(5, V, (2, 4), generator=g)
    default = enc(src, decoder_input_ids=tgt).last_hidden_state
    # the default numbering is 0 .. T-1: given explicitly, bit-identical (BART is unchanged)
    explicit = enc(src, decoder_input_ids=tgt, decoder_position_ids=torch.arange(4).expand(2, 4)).last_hidden_state
    assert torch.equal(default, explicit)
    moved = enc(src, decoder_input_ids=tgt, decoder_position_ids=torch.tensor([[3, 4, 5, 6], [0, 1, 2, 3]]))
    assert not torch.allclose(moved.last_hidden_state[0], default[0], atol=1e-3)  # every step of row 0 moves
    assert torch.equal(moved.last_hidden_state[1], default[1])
    # position p reads row p + 2 of the decoder's table: shifting the table by one = shifting the ids by one
    table = enc.decoder.position_embeddings.weight
    with torch.no_grad():
        saved = table.clone()
        table[2:-1].copy_(saved[3:])  # row t + 2 now holds what row t + 3 held
        shifted_table = enc(src, decoder_input_ids=tgt).last_hidden_state
        table.copy_(saved)
    assert_close(shifted_table, enc(src, decoder_input_ids=tgt, decoder_position_ids=torch.arange(4).expand(2, 4) + 1
                                    ).last_hidden_state, rtol=0, atol=1e-6)
    with pytest.raises(PtmError, match="max_position"):
        enc(src, decoder_input_ids=tgt, decoder_position_ids=torch.full((2, 4), 64))
    with pytest.raises(PtmError, match="shape"):
        enc(src, decoder_input_ids=tgt, decoder_position_ids=torch.zeros(2, 3, dtype=torch.long))


def test_cached_decoding_with_position_ids_matches_full_decoding() -> None:
    enc = model().backbone.eval()
    g = torch.Generator().manual_seed(1)
    src = torch.randint(5, V, (3, 11), generator=g)
    mask = torch.ones_like(src)
    mask[1, 8:] = 0
    tgt = torch.randint(5, V, (3, 5), generator=g)
    pos = torch.tensor([[4, 5, 6, 7, 8], [1, 2, 3, 4, 5], [9, 10, 11, 12, 13]])
    memory = enc.encode(src, mask).last_hidden_state
    full = enc.decode(tgt, memory, mask, position_ids=pos).last_hidden_state
    cache = enc.start_cache(memory, mask)
    steps = []
    for j in (0, 2, 3):  # one token, then two at once, then the last two
        e = {0: 1, 2: 3, 3: 5}[j]
        s = {0: 0, 2: 1, 3: 3}[j]
        out = enc.decode(tgt[:, s:e], cache=cache, position_ids=pos[:, s:e])
        cache = out.extras["cache"]
        steps.append(out.last_hidden_state)
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    first = tgt[:, 0]
    cached = greedy_span_decode(enc, src, mask, first, pos, use_cache=True)
    plain = greedy_span_decode(enc, src, mask, first, pos, use_cache=False)
    assert cached.shape == (3, 5) and torch.equal(cached, plain)


# -- the loss -----------------------------------------------------------------------------------
def test_loss_equals_a_direct_computation() -> None:
    """Each example alone, unpadded, in float64: encoder over its corrupted sentence, decoder over
    its fragment's inputs at the fragment's positions, tied logits + bias, cross-entropy averaged
    over every fragment token of the batch."""
    m = model(seed=2)
    m.eval()
    with torch.no_grad():
        m.backbone.final_logits_bias.normal_()
    obj, enc = m.objective, m.backbone
    c = corpus([4, 9, 1, 15, 6], seed=4)
    b = obj.collate(c, obj.example_spans(c, 20), np.random.default_rng(0))
    loss = m(b).loss.detach()
    enc64 = EncoderDecoder(enc.config).double().eval()
    enc64.load_state_dict({k: v.double() for k, v in enc.state_dict().items()})
    enc64.requires_grad_(False)
    total, count = torch.zeros((), dtype=torch.float64), 0
    for i in range(b["input_ids"].shape[0]):
        n_src = int(b["attention_mask"][i].sum())
        k = int((b["labels"][i] != IGNORE_INDEX).sum())
        src = b["input_ids"][i : i + 1, :n_src]
        memory = enc64.encode(src).last_hidden_state
        h = enc64.decode(b["decoder_input_ids"][i : i + 1, :k], memory,
                         position_ids=b["decoder_position_ids"][i : i + 1, :k]).last_hidden_state[0]
        logits = h @ enc64.word_embeddings.weight.T + enc64.final_logits_bias
        total = total + F.cross_entropy(logits, b["labels"][i, :k], reduction="sum")
        count += k
    assert count == int((b["labels"] != IGNORE_INDEX).sum()) == m(b).n_predictions
    assert abs(loss.item() - (total / count).item()) < 1e-5
    assert m(b).metrics["mass_loss"] == loss


def test_loss_reads_only_the_fragment_positions() -> None:
    """Changing the decoder inputs past an example's fragment (padding slots) leaves the loss as it is."""
    m = model(seed=3)
    m.eval()
    obj = m.objective
    c = corpus([3, 12, 8], seed=6)
    b = obj.collate(c, obj.example_spans(c, 20), np.random.default_rng(0))
    base = m(b).loss
    noisy = dict(b)
    pad = b["labels"] == IGNORE_INDEX
    assert pad.any()
    noisy["decoder_input_ids"] = torch.where(pad, torch.full_like(b["decoder_input_ids"], 17), b["decoder_input_ids"])
    assert_close(m(noisy).loss, base, rtol=0, atol=1e-6)


# -- reconstruction and learning ----------------------------------------------------------------
class WordTok:
    """Whitespace ids: ``"12 13"`` <-> ``[12, 13]`` (special ids are kept: an untrained model predicts them)."""

    unk_id = UNK

    def encode(self, text: str) -> list[int]:
        return [int(w) for w in text.split()]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return " ".join(str(int(i)) for i in ids if not (skip_special_tokens and int(i) < 5))


def test_reconstruct_predicts_the_fragment_at_its_positions() -> None:
    m = model(seed=4)
    texts = ["10 11 12 13 14 15 16 17", "20 21\n22", "30"]
    out = m.objective.reconstruct(m.backbone, WordTok(), texts, seed=0)
    assert [r["original"] for r in out] == ["10 11 12 13 14 15 16 17", "20 21 22", "30"]
    for r, n in zip(out, (8, 3, 1)):
        k = span_lengths(np.array([n]), 0.5)[0]
        noised, orig, rec = r["noised"].split(), r["original"].split(), r["reconstruction"].split()
        assert noised.count("4") == k and len(rec) == n and len(r["predicted_span"].split()) == k
        u = noised.index("4")
        assert rec[:u] == orig[:u] and rec[u + k :] == orig[u + k :]
        assert rec[u : u + k] == r["predicted_span"].split() and r["masked_span"].split() == orig[u : u + k]
    # the prediction is the greedy decoder at the fragment's positions, checked step by step
    obj, enc = m.objective, m.backbone.eval()
    x = torch.tensor([[CLS, 10, 11, 12, MASK, MASK, MASK, MASK, 17, SEP]])
    prefix, pos = [13 - 1], [4, 5, 6, 7]  # first input: the token before the fragment (x[3] = 12)
    memory = enc.encode(x).last_hidden_state
    for j in range(4):
        h = enc.decode(torch.tensor([prefix]), memory, position_ids=torch.tensor([pos[: j + 1]])).last_hidden_state
        prefix.append(int(enc.logits(h[0, -1]).argmax()))
    again = greedy_span_decode(enc, x, None, torch.tensor([12]), torch.tensor([pos]))
    assert again[0].tolist() == prefix[1:]
    assert out == obj.reconstruct(m.backbone, WordTok(), texts, seed=0)  # seeded


def test_loss_falls_on_a_toy_corpus() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = np.random.default_rng(1).integers(5, 30, size=12)
    c = SimpleNamespace(tokens=np.tile(sentence, 60).astype(np.uint16),
                        sentences=np.arange(0, 12 * 60 + 1, 12, dtype=np.int64), documents=np.array([0, 60]))
    m = model(seed=0, dropout=0.0)
    spans = m.objective.example_spans(c, 20)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
