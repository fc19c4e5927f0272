"""Maskers: token / whole-word / span / n-gram / pre-marked units, statistics within tolerance."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.masking import (
    Masker,
    geometric_lengths,
    length_probs,
    ngram_lengths,
)

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
V = 200
POOL = np.arange(5, V)
UNMASKABLE = np.array([PAD, CLS, SEP, MASK])


def masker(masking: str = "token", **kw) -> Masker:
    return Masker(masking, mask_id=MASK, random_pool=POOL, unmaskable=UNMASKABLE, **kw)


def batch(B: int, T: int, seed: int = 0, max_word: int = 3, pairs: bool = True):
    """Rows ``[CLS] A [SEP] B [SEP] pad...`` of random lengths (or ``[CLS] A [SEP] pad`` with
    ``pairs=False``), words of 1..max_word tokens, and a few literal [MASK] tokens in the text
    (never maskable).  Returns ids, attention, word_starts, word_id (-1 outside words)."""
    rng = np.random.default_rng(seed)
    ids = np.full((B, T), PAD, dtype=np.int64)
    attention = np.zeros((B, T), dtype=np.int64)
    for b in range(B):
        n = int(rng.integers(T * 3 // 4, T + 1))
        attention[b, :n] = 1
        ids[b, :n] = rng.integers(5, V, size=n)
        ids[b, 0] = CLS
        ids[b, n - 1] = SEP
        if pairs:
            ids[b, int(rng.integers(2, n - 2))] = SEP
        ids[b, rng.integers(1, n - 1, size=2)] = MASK
    word_len = rng.integers(1, max_word + 1, size=(B, T))
    word_starts = np.zeros((B, T), dtype=bool)
    for b in range(B):  # word boundaries every 1..max_word tokens (per example, test data only)
        word_starts[b, np.cumsum(word_len[b])[np.cumsum(word_len[b]) < T]] = True
    word_starts[:, 0] = True
    text = (attention > 0) & ~np.isin(ids, UNMASKABLE)
    # a word never spans a special token: anything after a non-text position starts a new word
    after = np.zeros_like(text)
    after[:, 1:] = ~text[:, :-1]
    word_starts |= after
    word_id = np.where(text, np.cumsum(word_starts | ~text, axis=1), -1)
    return ids, attention, word_starts, word_id


def run(m: Masker, B: int, T: int, seed: int = 0, **kw):
    ids, attention, word_starts, word_id = batch(B, T, seed, **kw)
    clean = ids.copy()
    out = m(ids, attention, np.random.default_rng(seed + 1), word_starts)
    return clean, ids, attention, word_id, out


def bert_reference(ids, attention, rng, mask_prob=0.15, ratios=(0.8, 0.1), max_predictions=None):
    """MaskedLM.mask_tokens as it was before maskers became pieces (the bit-exact reference)."""
    B, T = ids.shape
    candidate = (attention > 0) & ~np.isin(ids, UNMASKABLE)
    n_cand = candidate.sum(axis=1)
    P = max_predictions or max(1, math.ceil(mask_prob * T))
    k = np.where(n_cand > 0, np.maximum(1, np.rint(n_cand * mask_prob)), 0).astype(np.int64)
    k = np.minimum(k, min(P, T))
    P = min(P, T)
    keys = rng.random((B, T))
    keys[~candidate] = 2.0
    positions = np.argsort(keys, axis=1)[:, :P]
    used = np.arange(P)[None, :] < k[:, None]
    rows = np.arange(B)[:, None]
    labels = np.where(used, ids[rows, positions], IGNORE_INDEX).astype(np.int64)
    u = rng.random((B, P))
    to_mask = used & (u < ratios[0])
    to_random = used & (u >= ratios[0]) & (u < ratios[0] + ratios[1])
    random_ids = POOL[rng.integers(0, len(POOL), size=(B, P))]
    new = np.where(to_mask, MASK, np.where(to_random, random_ids, labels))
    r, c = np.nonzero(used)
    ids[r, positions[r, c]] = new[r, c]
    return np.where(used, positions, 0).astype(np.int64), labels


@pytest.mark.parametrize("max_predictions", [None, 7])
def test_token_masking_is_bit_identical_to_the_previous_mlm(max_predictions) -> None:
    m = masker("token", max_predictions=max_predictions)
    for seed in range(3):
        ids, attention, _, _ = batch(32, 40, seed)
        ref_ids = ids.copy()
        positions, labels = bert_reference(ref_ids, attention, np.random.default_rng(seed), max_predictions=max_predictions)
        out = m(ids, attention, np.random.default_rng(seed))
        np.testing.assert_array_equal(out.positions, positions)
        np.testing.assert_array_equal(out.labels, labels)
        np.testing.assert_array_equal(ids, ref_ids)


def test_length_laws_exact() -> None:
    probs = geometric_lengths(0.2, 10)
    assert probs.shape == (10,) and probs.sum() == pytest.approx(1.0)
    assert probs[1] / probs[0] == pytest.approx(0.8)
    mean = float((np.arange(1, 11) * probs).sum())
    assert mean == pytest.approx(3.797, abs=5e-4)  # SpanBERT's "mean 3.8 words"
    np.testing.assert_allclose(ngram_lengths(3), np.array([6, 3, 2]) / 11)
    assert length_probs("token") is None and list(length_probs("whole_word")) == [1.0]


def test_unknown_masker_suggests_nearest() -> None:
    with pytest.raises(PtmError, match=r"unknown masker 'spam' \(did you mean 'span'\?\).*whole_word"):
        masker("spam")
    with pytest.raises(PtmError, match="did you mean 'whole_word'"):
        masker("whole_words")
    with pytest.raises(PtmError, match="did you mean 'span'"):
        masker("span", corruption="spam")
    with pytest.raises(PtmError, match="span_p"):
        masker("span", span_p=0.0)


def _check_common(clean, ids, attention, word_id, out, masking):
    """Invariants every masker keeps; returns (chosen, candidates) counts."""
    used = out.used
    rows = np.nonzero(used)[0]
    pos = out.positions[used]
    text = (attention > 0) & ~np.isin(clean, UNMASKABLE)
    assert text[rows, pos].all()  # never a special token, a literal [MASK] or padding
    for r in range(len(ids)):  # each position at most once per row
        assert len(set(out.positions[r][used[r]])) == used[r].sum()
    # corruption only at chosen positions
    other = np.ones_like(ids, dtype=bool)
    other[rows, pos] = False
    assert np.array_equal(ids[other], clean[other])
    np.testing.assert_array_equal(out.labels[used], clean[rows, pos])
    # each unit is a contiguous run of text tokens inside one segment, bounded by real tokens
    s, e = out.span_start[used], out.span_end[used]
    assert ((s <= pos) & (pos <= e)).all()
    cum = np.concatenate([np.zeros((len(ids), 1), np.int64), np.cumsum(~text, axis=1)], axis=1)
    assert (cum[rows, e + 1] - cum[rows, s] == 0).all()  # no special / padding inside a span
    assert (s >= 1).all() and attention[rows, e + 1].all()  # boundaries s-1 and e+1 are real tokens
    if masking != "token":
        # whole words: a word is masked entirely or not at all
        chosen = np.zeros_like(text)
        chosen[rows, pos] = True
        for r in range(len(ids)):
            w = word_id[r][text[r]]
            c = chosen[r][text[r]]
            per_word = np.bincount(w, weights=c)
            size = np.bincount(w)
            assert np.all((per_word == 0) | (per_word == size))
    return int(used.sum()), int(text.sum())


@pytest.mark.parametrize("masking", ["token", "whole_word", "span", "ngram"])
@pytest.mark.parametrize("corruption", ["token", "span"])
def test_rates_and_invariants(masking: str, corruption: str) -> None:
    m = masker(masking, corruption=corruption)
    clean, ids, attention, word_id, out = run(m, 600, 128, seed=3)
    chosen, candidates = _check_common(clean, ids, attention, word_id, out, masking)
    rate = chosen / candidates
    assert abs(rate - 0.15) < 0.01, rate
    used = out.used
    rows = np.nonzero(used)[0]
    new = ids[rows, out.positions[used]]
    old = out.labels[used]
    is_mask, is_kept = new == MASK, new == old
    is_random = ~is_mask & ~is_kept
    assert not np.isin(new[is_random], [PAD, UNK, CLS, SEP, MASK]).any()  # random tokens are ordinary
    if corruption == "token":
        # a random draw equal to the original (p = 1/195) counts as kept
        assert abs(is_mask.mean() - 0.8) < 0.015
        assert abs(is_random.mean() - 0.1) < 0.01
        assert abs(is_kept.mean() - 0.1) < 0.01
    else:
        # one decision per unit: a unit is all [MASK], all kept, or all replaced by random tokens
        key = rows * 1000 + out.span_id[used]
        units, inv = np.unique(key, return_inverse=True)
        kind = np.where(is_mask, 0, np.where(is_random, 2, 1))
        n_kinds = np.zeros((len(units), 3))
        np.add.at(n_kinds, (inv, kind), 1)
        # a random token equal to the original looks "kept" inside a random span: allow that mix only
        mixed = (n_kinds > 0).sum(axis=1) > 1
        assert not (mixed & (n_kinds[:, 0] > 0)).any()
        unit_kind = np.argmax(n_kinds > 0, axis=1)  # 0 mask, 1 kept, 2 random (first present)
        unit_kind[(n_kinds[:, 2] > 0)] = 2
        share = np.bincount(unit_kind, minlength=3) / len(units)
        tol = 0.015 if masking == "token" else 0.03  # fewer units than tokens with runs
        assert abs(share[0] - 0.8) < tol and abs(share[1] - 0.1) < tol and abs(share[2] - 0.1) < tol, share


def _run_lengths_where_budget_is_slack(out, word_id, longest_run_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Length in words of every run chosen while the remaining budget could hold any run (so
    it is exactly the drawn length), and of all runs."""
    slack, every = [], []
    for r in range(out.positions.shape[0]):
        used = out.used[r]
        budget = int(used.sum())
        ids, first = np.unique(out.span_id[r][used], return_index=True)
        remaining = budget
        for sid in ids:
            sel = used & (out.span_id[r] == sid)
            n_tok = int(sel.sum())
            n_words = len(np.unique(word_id[r][out.positions[r][sel]]))
            every.append(n_words)
            if remaining >= longest_run_tokens:
                slack.append(n_words)
            remaining -= n_tok
    return np.array(slack), np.array(every)


def test_span_lengths_follow_the_clipped_geometric() -> None:
    probs = geometric_lengths(0.2, 10)
    exact = float((np.arange(1, 11) * probs).sum())
    m = masker("span", mask_prob=0.15)
    # long single-segment rows (512 tokens, budget ~75), words of 1-2 tokens
    clean, ids, attention, word_id, out = run(m, 600, 512, seed=5, max_word=2, pairs=False)
    chosen, candidates = _check_common(clean, ids, attention, word_id, out, "span")
    assert abs(chosen / candidates - 0.15) < 0.01
    slack, every = _run_lengths_where_budget_is_slack(out, word_id, longest_run_tokens=10 * 2)
    assert len(slack) > 5000
    print(f"span: {chosen / candidates:.4f} masked; mean run {slack.mean():.3f} words while the budget is slack "
          f"({len(slack)} runs), {every.mean():.3f} over all {len(every)} runs; exact {exact:.3f}")
    assert abs(slack.mean() - exact) < 0.03 * exact, (slack.mean(), exact)
    hist = np.bincount(slack, minlength=11)[1:] / len(slack)
    np.testing.assert_allclose(hist, probs, atol=0.015)
    # all runs, the budget-bound last ones included, come out a little shorter
    assert exact * 0.85 < every.mean() < exact


def test_ngram_lengths_are_inverse_n() -> None:
    m = masker("ngram", max_ngram=3)
    clean, ids, attention, word_id, out = run(m, 400, 256, seed=7, max_word=2, pairs=False)
    chosen, candidates = _check_common(clean, ids, attention, word_id, out, "ngram")
    assert abs(chosen / candidates - 0.15) < 0.01
    slack, _ = _run_lengths_where_budget_is_slack(out, word_id, longest_run_tokens=3 * 2)
    hist = np.bincount(slack, minlength=4)[1:] / len(slack)
    np.testing.assert_allclose(hist, np.array([6, 3, 2]) / 11, atol=0.015)


def test_whole_word_with_every_token_a_word_is_token_masking_in_law() -> None:
    m = masker("whole_word")
    ids, attention, _, _ = batch(300, 64, seed=2)
    text = (attention > 0) & ~np.isin(ids, UNMASKABLE)
    out = m(ids, attention, np.random.default_rng(0), None)  # no word starts: every token a word
    assert (out.span_start[out.used] == out.positions[out.used]).all()
    assert (out.span_end[out.used] == out.positions[out.used]).all()
    budget = np.maximum(1, np.rint(text.sum(1) * 0.15))
    np.testing.assert_array_equal(out.used.sum(1), np.minimum(budget, math.ceil(0.15 * 64)))


def test_premarked_units_are_masked_whole() -> None:
    m = masker("units")
    ids, attention, word_starts, _ = batch(200, 64, seed=4, pairs=False)
    # one "entity" of 4 tokens at positions 5..8 and a "phrase" at 20..25 in every row
    units = [np.array([[5, 9], [20, 26]])] * 200
    text = (attention > 0) & ~np.isin(ids, UNMASKABLE)
    out = m(ids, attention, np.random.default_rng(1), word_starts.copy(), units=units)
    chosen = np.zeros(ids.shape, dtype=bool)
    chosen[np.nonzero(out.used)[0], out.positions[out.used]] = True
    for lo, hi in ((5, 9), (20, 26)):
        inside = chosen[:, lo:hi].sum(1)
        whole = text[:, lo:hi].all(1)  # a literal [MASK] inside splits the unit
        assert np.isin(inside[whole], [0, hi - lo]).all()
        assert (inside[whole] == hi - lo).sum() >= 3  # the units do get chosen
    with pytest.raises(PtmError, match="pre-marked"):
        m(ids, attention, np.random.default_rng(1), word_starts)


def test_deterministic_given_the_rng() -> None:
    m = masker("span", corruption="span")
    a = run(m, 16, 64, seed=9)[4]
    b = run(m, 16, 64, seed=9)[4]
    for key in ("positions", "labels", "span_start", "span_end", "span_id"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))


# ---------------------------------------------------------------------------- through MaskedLM
def _mlm(**kw):
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.objectives.mlm import MaskedLM, MLMConfig

    tok = SimpleNamespace(vocab_size=V, pad_id=PAD, unk_id=UNK, cls_id=CLS, sep_id=SEP, mask_id=MASK)
    cfg = TransformerConfig(vocab_size=V, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position=64)
    return MaskedLM(MLMConfig(**kw), TransformerEncoder(cfg), tok)


def _corpus(with_word_starts: bool):
    from ptmkit.data.corpus import PackedBits

    rng = np.random.default_rng(0)
    sent = np.concatenate([[0], np.cumsum(rng.integers(8, 30, size=300))]).astype(np.int64)
    n = int(sent[-1])
    tokens = rng.integers(5, V, size=n).astype(np.uint16)
    starts = rng.random(n) < 0.5
    starts[sent[:-1]] = True
    c = SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, 100, 300]), starts=starts)
    if with_word_starts:
        c.word_starts = PackedBits(np.packbits(starts), n)
    return c


@pytest.mark.parametrize("nsp", [False, True])
def test_mlm_whole_word_masks_corpus_words(nsp: bool) -> None:
    obj = _mlm(masking="whole_word", nsp=nsp)
    c = _corpus(True)
    spans = obj.example_spans(c, 64)
    batch = obj.collate(c, spans[:64], np.random.default_rng(0))
    labels, pos = batch["mlm_labels"].numpy(), batch["mlm_positions"].numpy()
    ids = batch["input_ids"].numpy()
    used = labels != IGNORE_INDEX
    assert used.sum() > 0
    if not nsp:  # check against the corpus: position j of row r is token spans[r, 0] + j - 1
        src = spans[:64, 0][:, None] + np.arange(ids.shape[1])[None, :] - 1
        chosen = np.zeros(ids.shape, dtype=bool)
        chosen[np.nonzero(used)[0], pos[used]] = True
        text = batch["attention_mask"].numpy().astype(bool) & ~np.isin(ids, [CLS, SEP]) | chosen
        for r in range(64):
            idx = np.flatnonzero(text[r])
            words = np.cumsum(c.starts[src[r, idx]])
            per_word = np.bincount(words, weights=chosen[r, idx])
            assert np.all((per_word == 0) | (per_word == np.bincount(words)))


def test_mlm_without_recorded_word_starts_warns_and_masks_tokens(caplog) -> None:
    obj = _mlm(masking="span", nsp=False)
    c = _corpus(False)
    spans = obj.example_spans(c, 64)
    with caplog.at_level(logging.WARNING, logger="ptmkit.objectives.masking"):
        obj.collate(c, spans[:8], np.random.default_rng(0))
        obj.collate(c, spans[:8], np.random.default_rng(1))
    warnings = [r for r in caplog.records if "no word starts" in r.getMessage()]
    assert len(warnings) == 1 and "ptm prepare" in warnings[0].getMessage()


def test_mlm_config_names_the_masker() -> None:
    from ptmkit.config import from_dict
    from ptmkit.objectives.mlm import MLMConfig

    assert from_dict(MLMConfig, {"masking": "whole_word"}).masking == "whole_word"
    with pytest.raises(PtmError, match="did you mean 'ngram'"):
        from_dict(MLMConfig, {"masking": "ngrams"})
    with pytest.raises(PtmError, match="pre-marked"):
        MLMConfig(masking="units")
    # ELECTRA takes its masking from the same config
    from ptmkit.objectives.electra import ELECTRAConfig

    assert ELECTRAConfig(masking="span").masking == "span"
