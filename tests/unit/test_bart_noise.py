"""BART's noising functions: each one's statistics within tolerance, and the batches they make."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ptmkit.build import build_model
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.errors import PtmError
from ptmkit.objectives.bart import (
    BartDenoising,
    DenoisingConfig,
    delete_tokens,
    infill,
    infilling_spans,
    mask_tokens,
    permute_sentences,
    rotate,
)

MASK = 4
TOK = SimpleNamespace(vocab_size=300, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=MASK)


def distinct(n: int) -> np.ndarray:
    """Tokens that are all different (so each output token says where it came from)."""
    return np.arange(10, 10 + n, dtype=np.int64)


def test_text_infilling_statistics() -> None:
    rng = np.random.default_rng(0)
    n, share, lam = 200, 0.3, 3.0
    lengths_all, masked_shares, n_spans, expansions = [], [], 0, 0
    for _ in range(400):
        starts, lengths = infilling_spans(n, share, lam, rng)
        assert lengths.sum() == round(share * n) and (lengths >= 0).all()
        assert (np.diff(starts) >= 0).all() and (starts + lengths <= n).all()
        assert (starts[1:] >= starts[:-1] + lengths[:-1]).all()  # spans never overlap
        lengths_all.append(lengths[:-1])  # the last one is cut to fit
        x = distinct(n)
        y = infill(x, starts, lengths, MASK)
        # each span is ONE [MASK]; zero-length spans insert one
        assert (y == MASK).sum() == len(starts) and len(y) == n - lengths.sum() + len(starts)
        kept = y[y != MASK]
        covered = np.zeros(n, dtype=bool)
        for s, l in zip(starts, lengths):
            covered[s : s + l] = True
        assert np.array_equal(kept, x[~covered])  # the rest stays, in order
        masked_shares.append(covered.mean())
        n_spans += len(starts)
        expansions += int((lengths == 0).sum())
    spans = np.concatenate(lengths_all)
    assert np.mean(masked_shares) == pytest.approx(share, abs=1e-9)
    assert spans.mean() == pytest.approx(lam, abs=0.1)  # Poisson(3): mean 3, variance 3
    assert spans.var() == pytest.approx(lam, abs=0.3)
    assert (spans == 0).mean() == pytest.approx(math.exp(-lam), abs=0.015)
    assert expansions > 0 and n_spans == pytest.approx(400 * share * n / lam, rel=0.1)


def test_text_infilling_places_spans_uniformly() -> None:
    rng = np.random.default_rng(1)
    n = 50
    hits = np.zeros(n)
    for _ in range(3000):
        starts, lengths = infilling_spans(n, 0.3, 3.0, rng)
        for s, l in zip(starts, lengths):
            hits[s : s + l] += 1
    share = hits / 3000
    assert share.mean() == pytest.approx(0.3, abs=1e-9)
    # inside the sequence no position is favoured; the first and last few are masked less often
    # (a span covers position 0 only if it comes first), as with any span masking
    assert share[5:-5].min() > 0.26 and share[5:-5].max() < 0.37
    assert share[0] > 0.08 and share[-1] > 0.08


def test_token_masking_and_deletion_rates() -> None:
    rng = np.random.default_rng(2)
    n = 120
    x = distinct(n)
    positions = np.zeros(n)
    for _ in range(500):
        y = mask_tokens(x, 0.15, MASK, rng)
        assert len(y) == n and (y == MASK).sum() == round(0.15 * n)
        assert np.array_equal(y[y != MASK], x[y != MASK])
        positions += y == MASK
        z = delete_tokens(x, 0.2, rng)
        assert len(z) == n - round(0.2 * n) and (np.diff(z) > 0).all()  # a subsequence, in order
    assert (positions / 500).mean() == pytest.approx(0.15, abs=1e-9)
    assert abs((positions / 500) - 0.15).max() < 0.08
    assert mask_tokens(x[:2], 0.15, MASK, rng).tolist() == x[:2].tolist()  # round(0.3) = 0


def test_sentence_permutation_keeps_the_sentences() -> None:
    rng = np.random.default_rng(3)
    x = distinct(12)
    bounds = np.array([0, 3, 4, 9, 12])
    sentences = [tuple(x[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    orders = Counter()
    for _ in range(2400):
        y = permute_sentences(x, bounds, rng)
        assert sorted(y.tolist()) == x.tolist()
        # y is the sentences in some order
        order, pos = [], 0
        while pos < len(y):
            k = next(i for i, s in enumerate(sentences) if tuple(y[pos : pos + len(s)]) == s)
            order.append(k)
            pos += len(sentences[k])
        assert sorted(order) == [0, 1, 2, 3]
        orders[tuple(order)] += 1
    assert len(orders) == 24  # every order appears, each about 1/24 of the time
    assert max(orders.values()) / 2400 < 1 / 24 + 0.025 and min(orders.values()) / 2400 > 1 / 24 - 0.025
    assert permute_sentences(x, np.array([0, 12]), rng).tolist() == x.tolist()


def test_document_rotation() -> None:
    rng = np.random.default_rng(4)
    x = distinct(10)
    firsts = Counter()
    for _ in range(2000):
        y = rotate(x, rng)
        k = int(np.flatnonzero(x == y[0])[0])
        assert np.array_equal(y, np.concatenate([x[k:], x[:k]]))
        firsts[k] += 1
    assert len(firsts) == 10 and max(firsts.values()) / 2000 < 0.14 and min(firsts.values()) / 2000 > 0.06


def corpus(n_docs: int = 12, seed: int = 0) -> SimpleNamespace:
    """Documents of 5 sentences of 3-9 distinct-ish tokens."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(3, 10, size=n_docs * 5)
    tokens = rng.integers(10, 300, size=int(lens.sum())).astype(np.uint16)
    sentences = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    documents = np.arange(0, n_docs * 5 + 1, 5, dtype=np.int64)
    return SimpleNamespace(tokens=tokens, sentences=sentences, documents=documents)


def objective(**kw) -> tuple[EncoderDecoder, BartDenoising]:
    enc = EncoderDecoder(EncoderDecoderConfig(vocab_size=300, hidden_size=16, encoder_layers=1, decoder_layers=1,
                                              num_heads=2, intermediate_size=32, max_position=64))
    return enc, BartDenoising(DenoisingConfig(**kw), enc, TOK)


def test_collate_builds_source_target_and_teacher_forcing() -> None:
    c = corpus()
    enc, obj = objective()
    spans = obj.example_spans(c, 24)
    assert len(spans) >= 8 and (spans[:, 1] - spans[:, 0] <= 22).all()
    batch = obj.collate(c, spans[:8], np.random.default_rng(0))
    assert set(batch) == {"input_ids", "attention_mask", "decoder_input_ids", "labels"}
    src, am, dec, labels = (batch[k].numpy() for k in ("input_ids", "attention_mask", "decoder_input_ids", "labels"))
    assert src.shape[0] == dec.shape[0] == 8 and dec.shape == labels.shape
    masked, total = 0, 0
    for i, (st, en) in enumerate(spans[:8]):
        x = np.asarray(c.tokens[st:en], dtype=np.int64)
        n = len(x)
        assert labels[i, : n + 2].tolist() == [2, *x.tolist(), 3] and (labels[i, n + 2 :] == -100).all()
        assert dec[i, : n + 2].tolist() == [3, 2, *x.tolist()] and (dec[i, n + 2 :] == 0).all()
        m = int(am[i].sum())
        s = src[i, :m]
        assert s[0] == 2 and s[-1] == 3 and (src[i, m:] == 0).all() and (am[i, :m] == 1).all()
        body = s[1:-1]
        assert Counter(body[body != MASK].tolist()) <= Counter(x.tolist())  # permuted, some tokens gone
        masked += n - (body != MASK).sum()
        total += n
    assert masked / total == pytest.approx(0.3, abs=0.03)  # text infilling at 30 %
    again = obj.collate(c, spans[:8], np.random.default_rng(0))
    assert all(torch.equal(batch[k], again[k]) for k in batch)  # all randomness from the rng


def test_noising_off_gives_the_original_and_loss_runs() -> None:
    c = corpus()
    enc, obj = objective(text_infilling=0.0, sentence_permutation=False)
    spans = obj.example_spans(c, 40)
    batch = obj.collate(c, spans[:4], np.random.default_rng(0))
    src = batch["input_ids"]
    tgt = torch.where(batch["labels"] == -100, 0, batch["labels"])
    assert torch.equal(src, tgt[:, : src.shape[1]])  # identity noising: source == target
    out = obj(enc, batch)
    assert out.loss.ndim == 0 and out.n_predictions == int((batch["labels"] != -100).sum())
    assert out.loss.item() == pytest.approx(math.log(300), rel=0.05)  # untrained: about uniform
    out.loss.backward()
    assert enc.word_embeddings.weight.grad is not None and enc.final_logits_bias.grad is None
    _, deleted = objective(token_deletion=0.5, text_infilling=0.0, sentence_permutation=False, document_rotation=True)
    b = deleted.collate(c, spans[:4], np.random.default_rng(0))
    assert (b["attention_mask"].sum(1) - 2 == (torch.as_tensor(spans[:4, 1] - spans[:4, 0]) + 1) // 2).all()


def test_config_and_pairing_refusals() -> None:
    with pytest.raises(PtmError, match="text_infilling"):
        DenoisingConfig(text_infilling=1.2)
    with pytest.raises(PtmError, match="poisson_lambda"):
        DenoisingConfig(poisson_lambda=0)
    with pytest.raises(PtmError, match="sentence_permutation"):
        DenoisingConfig(sentence_permutation="yes")
    enc = EncoderDecoder(EncoderDecoderConfig(vocab_size=300, hidden_size=16, encoder_layers=1, decoder_layers=1,
                                              num_heads=2, intermediate_size=32, max_position=64, pad_token_id=1))
    with pytest.raises(PtmError, match="pad_token_id"):
        BartDenoising(DenoisingConfig(), enc, TOK)
    bert = {"model": {"encoder": "transformer", "vocab_size": 300, "hidden_size": 16, "num_layers": 1, "num_heads": 2,
                      "intermediate_size": 32}, "objective": {"name": "bart"}}
    with pytest.raises(PtmError, match="'bart' cannot be used with encoder 'transformer'"):
        build_model(bert, TOK)
    wrong = {"model": {"encoder": "encoder_decoder", "vocab_size": 300, "hidden_size": 16, "num_heads": 2},
             "objective": {"name": "mlm"}}
    with pytest.raises(PtmError, match="'mlm' cannot be used with encoder 'encoder_decoder'"):
        build_model(wrong, TOK)
