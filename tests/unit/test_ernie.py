"""ERNIE 1.0 knowledge masking: per-unit Bernoulli selection, entities and phrases as whole units."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.knowledge_units import (
    EntityTable,
    PhraseTable,
    bio_entities,
    read_entities,
    sequence_hashes,
    window_hashes,
)
from ptmkit.objectives.masking import Masker, mark_units, select_bernoulli

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
V = 300
POOL = np.arange(5, V)
UNMASKABLE = np.array([PAD, CLS, SEP, MASK])


def rows(B: int, T: int, seed: int = 0):
    """``[CLS] text [SEP] pad`` rows with random words of 1..4 tokens; ids, attention, word starts."""
    rng = np.random.default_rng(seed)
    ids = np.full((B, T), PAD, np.int64)
    att = np.zeros((B, T), np.int64)
    starts = np.zeros((B, T), bool)
    for b in range(B):  # test data only
        n = int(rng.integers(T // 2, T + 1))
        ids[b, 0], ids[b, 1 : n - 1], ids[b, n - 1] = CLS, rng.integers(5, V, n - 2), SEP
        att[b, :n] = 1
        t = 1
        while t < n - 1:
            starts[b, t] = True
            t += int(rng.integers(1, 5))
    return ids, att, starts


def units_of(starts: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Global unit id of each token (brute force, per token) for checking."""
    uid = np.full(starts.shape, -1)
    u = -1
    for b in range(starts.shape[0]):
        for t in range(starts.shape[1]):
            if cand[b, t]:
                if starts[b, t] or t == 0 or not cand[b, t - 1]:
                    u += 1
                uid[b, t] = u
    return uid


def test_bernoulli_unit_rate_and_80_10_10() -> None:
    ids, att, starts = rows(400, 64)
    cand = (att > 0) & ~np.isin(ids, UNMASKABLE)
    uid = units_of(starts, cand)
    n_units = uid.max() + 1
    m = Masker("whole_word", mask_id=MASK, random_pool=POOL, unmaskable=UNMASKABLE, selection="bernoulli", max_predictions=64)
    orig = ids.copy()
    out = m(ids, att, np.random.default_rng(1), starts)
    used = out.used
    pos = out.positions[used]
    b = np.nonzero(used)[0]
    chosen_units = np.unique(uid[b, pos])
    # Whole units only: every token of a chosen unit is predicted.
    assert (np.isin(uid[cand], chosen_units) == np.isin(np.flatnonzero(cand.ravel()), b * 64 + pos)).all()
    rate = len(chosen_units) / n_units
    # 0.15, plus the rows that got one unit because none was drawn (few: ~0.85^10 of the rows).
    assert 0.14 < rate < 0.17
    labels = out.labels[used]
    assert (labels == orig[b, pos]).all()
    now = ids[b, pos]
    is_mask = now == MASK
    kept = now == labels
    assert abs(is_mask.mean() - 0.8) < 0.02
    assert abs(kept.mean() - (0.1 + 0.1 / len(POOL))) < 0.02
    assert abs((~is_mask & ~kept).mean() - 0.1) < 0.02
    # Specials and padding untouched.
    assert (ids[~cand] == orig[~cand]).all()


def test_bernoulli_span_bounds_and_slots() -> None:
    ids, att, starts = rows(50, 40, seed=3)
    cand = (att > 0) & ~np.isin(ids, UNMASKABLE)
    positions, used, span_id, first, last = select_bernoulli(cand, starts, 0.5, 6, np.random.default_rng(0))
    assert used.sum(axis=1).max() <= 6 and used.any(axis=1).all()
    uid = units_of(starts, cand)
    for b in range(50):  # check the boundaries token by token
        p = positions[b, used[b]]
        assert (np.diff(p) > 0).all()
        for slot in np.flatnonzero(used[b]):
            u = uid[b, positions[b, slot]]
            members = np.flatnonzero(uid[b] == u)
            assert first[b, slot] == members[0] and last[b, slot] == members[-1]
            assert set(members) <= set(p)  # a unit is never cut by the slot limit
        # span_id counts units in order of position
        ids_in_row = uid[b, p]
        assert (span_id[b, used[b]] == np.unique(ids_in_row, return_inverse=True)[1]).all()


def test_mark_units_vectorised_matches_lists() -> None:
    starts = np.ones((2, 10), bool)
    lists = [np.array([[2, 5], [4, 7]]), np.array([[0, 3]])]
    a = mark_units(starts, (2, 10), lists)
    b = mark_units(starts, (2, 10), np.array([[0, 2, 5], [0, 4, 7], [1, 0, 3]]))
    assert (a == b).all()
    # overlapping units 2..5 and 4..7 merge into 2..7
    assert a[0].tolist() == [True, True, True, False, False, False, False, True, True, True]
    assert a[1].tolist() == [True, False, False] + [True] * 7


def test_window_and_sequence_hashes_agree() -> None:
    ids = np.array([[7, 8, 9, 7, 8]])
    h = window_hashes(ids, 2)
    assert h[0, 0] == h[0, 3] == sequence_hashes([[7, 8]])[0]
    assert h[0, 1] != h[0, 0]


class CharTok:
    """Each character one token (ids from a fixed table), as the ``char`` kind does for Chinese."""

    unk_id = UNK

    def __init__(self, chars: str) -> None:
        self.table = {c: i + 5 for i, c in enumerate(dict.fromkeys(chars))}

    def encode_batch(self, texts):
        return [[self.table.get(c, UNK) for c in t] for t in texts]


def test_entities_found_and_always_masked_whole(tmp_path) -> None:
    tok = CharTok("李小龙在香港拍电影北京天安门我爱")
    f = tmp_path / "names.txt"
    f.write_text("李小龙 10 nr\n香港 8 ns\n电影 20 n\n", encoding="utf-8")  # 电影 is not a name: skipped
    names = read_entities(f)
    assert names == ["李小龙", "香港"]
    table = EntityTable.from_strings(names, tok)
    text = tok.encode_batch(["我爱李小龙在香港拍电影"])[0]
    B = 300
    ids = np.tile(np.array([CLS, *text, SEP]), (B, 1))
    att = np.ones_like(ids)
    cand = ~np.isin(ids, UNMASKABLE)
    found = table.find(ids, cand)
    assert sorted(map(tuple, found[found[:, 0] == 0][:, 1:].tolist())) == [(3, 6), (7, 9)]
    m = Masker("units", mask_id=MASK, random_pool=POOL, unmaskable=UNMASKABLE, selection="bernoulli")
    out = m(ids.copy(), att, np.random.default_rng(0), np.ones_like(cand), units=found)
    hits = {(3, 6): 0, (7, 9): 0}
    for b in range(B):  # every chosen entity is masked entirely
        p = set(out.positions[b, out.used[b]].tolist())
        for s, e in hits:
            inside = p & set(range(s, e))
            assert not inside or inside == set(range(s, e))
            hits[(s, e)] += bool(inside)
    for s, e in hits:  # each entity is one unit chosen with p = 0.15 (plus the rows' one-unit floor)
        assert 0.09 < hits[(s, e)] / B < 0.26


def test_bio_entities_and_jsonl(tmp_path) -> None:
    assert bio_entities(list("江泽民在北京"), ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC"]) == ["江泽民", "北京"]
    f = tmp_path / "ner.jsonl"
    f.write_text(json.dumps({"tokens": list("到上海去"), "tags": ["O", "B-LOC", "I-LOC", "O"]}, ensure_ascii=False) + "\n")
    assert read_entities(f) == ["上海"]
    with pytest.raises(PtmError, match="does not exist"):
        read_entities(tmp_path / "missing.txt")


def test_phrase_pmi_brute_force() -> None:
    # Words as single tokens: "7 8" always together (high PMI); other pairs random.
    rng = np.random.default_rng(0)
    sents = []
    for i in range(400):  # test data only
        s = list(rng.integers(20, 120, 6))
        s[2:2] = [7, 8]
        s[5:5] = [9, 10] if i % 2 else [9, 11, 12, 13]  # 9 10: frequent but 9 often elsewhere
        sents.append(s)
    tokens = np.concatenate(sents)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sents])])
    table = PhraseTable.from_corpus(tokens, None, offsets, max_words=2, min_count=5, min_pmi=1.5)
    # brute force: count bigrams within sentences
    from collections import Counter

    uni = Counter(tokens.tolist())
    bi = Counter((a, b) for s in sents for a, b in zip(s, s[1:]))
    W = len(tokens)
    expect = {k for k, c in bi.items() if c >= 5 and np.log(c * W / (uni[k[0]] * uni[k[1]])) >= 1.5}
    assert (7, 8) in expect and (11, 12) in expect and len(expect) < len([k for k, c in bi.items() if c >= 5])
    keys = set(table.by_length[2].tolist())
    with np.errstate(over="ignore"):
        hashes = {(a, b): int(sequence_hashes([[a]])[0] * np.uint64(0xC2B2AE3D27D4EB4F) + sequence_hashes([[b]])[0])
                  for a, b in bi}
    assert {k for k in bi if hashes[k] in keys} == expect
    # found in a batch only where the two words are adjacent inside the text
    ids = np.array([[CLS, 7, 8, 9, SEP, 7, 8, SEP]])
    cand = ~np.isin(ids, UNMASKABLE)
    found = table.find(ids, None, cand)
    assert sorted(map(tuple, found.tolist())) == [(0, 1, 3), (0, 5, 7)]


def test_phrases_never_cross_sentences() -> None:
    # "7" ends every sentence and "8" starts the next: adjacent in the stream, never in a sentence.
    sents = [[7], [8]] * 50
    tokens = np.concatenate(sents)
    offsets = np.arange(len(tokens) + 1)
    assert len(PhraseTable.from_corpus(tokens, None, offsets, 2, 1, -100.0)) == 0


def test_ernie_objective_collate(tmp_path) -> None:
    from ptmkit.build import build_model
    from ptmkit.presets import load_preset

    names = tmp_path / "names.txt"
    names.write_text("12\n", encoding="utf-8")
    cfg = load_preset("ernie-tiny")
    cfg["model"].update(vocab_size=60, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    cfg["objective"].update(entities=str(names), phrase_min_count=2, phrase_min_pmi=0.5)

    class Tok:
        vocab_size, pad_id, unk_id, cls_id, sep_id, mask_id = 60, PAD, UNK, CLS, SEP, MASK

        def encode_batch(self, texts):
            return [[10 + int(x) for x in t] for t in texts]  # "12" -> [11, 12]

    model = build_model(cfg, Tok())
    rng = np.random.default_rng(0)
    tokens = np.concatenate([np.r_[[11, 12], rng.integers(20, 60, 10), [30, 31]] for _ in range(50)])
    corpus = SimpleNamespace(tokens=tokens, sentences=np.arange(0, len(tokens) + 1, 14), documents=np.array([0, 50]),
                             word_starts=np.ones(len(tokens), bool), path=tmp_path / "c")
    obj = model.objective
    assert obj.entity_table is not None and len(obj.entity_table) == 1
    spans = np.array([[i * 14, i * 14 + 14] for i in range(50)])
    batch = obj.collate(corpus, spans, np.random.default_rng(0))
    assert set(batch) >= {"input_ids", "attention_mask", "mlm_positions", "mlm_labels"}
    # the entity [11, 12] at positions 1..2 is chosen whole or not at all, in every row
    pos = batch["mlm_positions"].numpy()
    used = batch["mlm_labels"].numpy() != IGNORE_INDEX
    for b in range(50):
        p = set(pos[b, used[b]].tolist())
        assert len(p & {1, 2}) in (0, 2)
    out = model(batch)
    assert torch.isfinite(out.loss)


def test_ernie_config_errors() -> None:
    from ptmkit.objectives.ernie import ERNIEConfig

    with pytest.raises(PtmError, match="nsp"):
        ERNIEConfig(nsp=True)
    with pytest.raises(PtmError, match="masking"):
        ERNIEConfig(masking="span")
    with pytest.raises(PtmError, match="selection"):
        Masker("span", mask_id=MASK, random_pool=POOL, unmaskable=UNMASKABLE, selection="bernoulli")


def test_phrases_never_hold_blocked_tokens() -> None:
    # "7 8" and "8 9" are both always together, but 9 is punctuation (blocked)
    sents = [[7, 8, 9, 20 + i % 50] for i in range(200)]
    tokens = np.concatenate(sents)
    offsets = np.arange(0, len(tokens) + 1, 4)
    blocked = np.zeros(100, bool)
    blocked[9] = True
    free = PhraseTable.from_corpus(tokens, None, offsets, 2, 5, 0.5)
    table = PhraseTable.from_corpus(tokens, None, offsets, 2, 5, 0.5, blocked=blocked)
    assert len(free.by_length[2]) == 2 and len(table.by_length[2]) == 1
    ids = np.array([[CLS, 7, 8, 9, SEP]])
    assert table.find(ids, None, ~np.isin(ids, UNMASKABLE)).tolist() == [[0, 1, 3]]


def test_punctuation_ids() -> None:
    from ptmkit.objectives.ernie import punctuation_ids

    class Tok:
        vocab = ["[PAD]", "[CLS]", "，", "中", "。", "\u2581", "##!", "ab", "%"]

        def id_to_token(self, i):
            return self.vocab[i]

    assert punctuation_ids(Tok(), 9).tolist() == [True, True, True, False, True, True, True, False, True]


def test_phrases_do_not_join_rows() -> None:
    tokens = np.array([7, 8] * 50)
    table = PhraseTable.from_corpus(tokens, None, np.arange(0, 101, 2), 2, 5, -10.0)
    ids = np.array([[5, 6, 7], [8, 9, 10]])  # 7 ends row 0, 8 begins row 1: not a phrase
    assert len(table.find(ids, None, np.ones_like(ids, bool))) == 0
    assert table.find(np.array([[7, 8, 5]]), None, np.ones((1, 3), bool)).tolist() == [[0, 0, 2]]
