"""Deterministic batch source: order = f(seed, epoch, step), rank slicing, eval batches, splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.data.batches import PretrainBatches, split_spans
from ptmkit.errors import PtmError


class DummyObjective:
    """collate returns the span starts and one random draw per example (to see the rng)."""

    def collate(self, corpus, spans, rng):
        return {
            "x": torch.from_numpy(np.asarray(spans[:, 0]).copy()),
            "r": torch.from_numpy(rng.random(len(spans))),
        }


SPANS = np.stack([np.arange(0, 1000, 10), np.arange(10, 1010, 10)], axis=1)  # 100 spans


def make(**kw):
    args = dict(corpus=None, objective=DummyObjective(), spans=SPANS, seq_len=10, batch_size=8, seed=7)
    args.update(kw)
    return PretrainBatches(**args)


def test_order_is_a_pure_function_of_seed_epoch_step():
    src = make()
    assert src.steps_per_epoch == 12  # 100 // 8, last partial batch dropped
    perm = np.random.default_rng([7, 3]).permutation(100)
    b = src(3, 5)
    np.testing.assert_array_equal(b["x"].numpy(), SPANS[perm[40:48], 0])
    np.testing.assert_array_equal(b["r"].numpy(), np.random.default_rng([7, 3, 5, 1]).random(8))
    # a fresh source (as after a resume) jumps straight to the same batch
    again = make()(3, 5)
    assert all(torch.equal(b[k], again[k]) for k in b)
    assert not torch.equal(src(4, 5)["x"], b["x"])  # a new epoch reshuffles
    assert not torch.equal(make(seed=8)(3, 5)["x"], b["x"])
    epoch = torch.cat([src(0, s)["x"] for s in range(src.steps_per_epoch)])
    assert len(set(epoch.tolist())) == 96  # no span repeats within an epoch
    with pytest.raises(IndexError):
        src(0, 12)


@pytest.mark.parametrize("world_size", [2, 4])
def test_ranks_split_the_global_batch(world_size):
    full = make()(1, 2)
    parts = [make(rank=r, world_size=world_size)(1, 2) for r in range(world_size)]
    for k in full:
        assert all(len(p[k]) == 8 // world_size for p in parts)
        assert torch.equal(torch.cat([p[k] for p in parts]), full[k])


def test_bad_sizes():
    with pytest.raises(PtmError, match="not divisible"):
        make(world_size=3)
    small = make(batch_size=128)  # fine for evaluation (a partial batch) ...
    assert len(list(small.eval_batches())) == 1
    with pytest.raises(PtmError, match="only 100 training examples"):
        small(0, 0)  # ... but it cannot give one training batch
    with pytest.raises(PtmError, match=r"\[N, 2\]"):
        make(spans=np.zeros((4, 3)))


def test_eval_batches_are_fixed_and_cover_all_spans():
    src = make()
    first = list(src.eval_batches())
    second = list(src.eval_batches())
    assert len(first) == src.eval_steps == 13  # partial last batch kept
    np.testing.assert_array_equal(torch.cat([b["x"] for b in first]).numpy(), SPANS[:, 0])
    for a, b in zip(first, second):
        assert torch.equal(a["r"], b["r"])
    np.testing.assert_array_equal(first[2]["r"].numpy(), np.random.default_rng([7, 999_999, 2]).random(8))
    # two ranks together see each eval example exactly once
    ranks = [list(make(rank=r, world_size=2).eval_batches()) for r in range(2)]
    xs = sorted(torch.cat([b["x"] for rb in ranks for b in rb]).tolist())
    assert xs == SPANS[:, 0].tolist()


def test_split_spans():
    train, held = split_spans(SPANS, 0.1, seed=3)
    assert (len(train), len(held)) == (90, 10)
    assert set(map(tuple, train)).isdisjoint(map(tuple, held))
    assert sorted(map(tuple, np.concatenate([train, held]))) == sorted(map(tuple, SPANS))
    assert np.all(np.diff(train[:, 0]) > 0) and np.all(np.diff(held[:, 0]) > 0)  # corpus order kept
    t2, h2 = split_spans(SPANS, 0.1, seed=3)
    assert np.array_equal(train, t2) and np.array_equal(held, h2)
    assert not np.array_equal(split_spans(SPANS, 0.1, seed=4)[1], held)
    assert len(split_spans(SPANS, 0.001, seed=0)[1]) == 1
    t0, h0 = split_spans(SPANS, 0.0, seed=0)
    assert len(t0) == 100 and h0.shape == (0, 2)
    with pytest.raises(PtmError):
        split_spans(SPANS, 1.0, seed=0)
    with pytest.raises(PtmError, match="too small"):
        split_spans(SPANS[:1], 0.5, seed=0)


@pytest.mark.parametrize("name", ["mlm", "clm"])
def test_real_objectives_over_a_prepared_corpus(name, tmp_path):
    """The batch source drives the registered objectives over a real prepared corpus."""
    from ptmkit import registry
    from ptmkit.config import from_dict
    from ptmkit.data.prepare import prepare
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.tokenization import Tokenizer

    cls = registry.get("objective", name)
    text = tmp_path / "t.txt"
    lines = [f"sentence number {i} of the tiny corpus ." if i % 7 else "" for i in range(300)]
    text.write_text("\n".join(lines) + "\n")
    tok = Tokenizer.train([text], "wordpiece", 200, min_frequency=1)
    corpus = prepare([text], tok, tmp_path / "c", workers=1, progress=False)
    model_cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2,
                                  intermediate_size=32, max_position=64)
    objective = cls(from_dict(cls.config_class, {}), TransformerEncoder(model_cfg), tok)
    spans = objective.example_spans(corpus, 32)
    train, held = split_spans(spans, 0.1, seed=0)
    src = PretrainBatches(corpus, objective, train, 32, 4, seed=1)
    a, b = src(0, 1), PretrainBatches(corpus, objective, train, 32, 4, seed=1)(0, 1)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert a["input_ids"].shape[0] == 4 and a["input_ids"].max() < tok.vocab_size
    halves = [PretrainBatches(corpus, objective, train, 32, 4, seed=1, rank=r, world_size=2)(0, 1) for r in (0, 1)]
    assert all(torch.equal(torch.cat([h[k] for h in halves]), a[k]) for k in a)
    assert sum(len(x["input_ids"]) for x in PretrainBatches(corpus, objective, held, 32, 1, seed=1).eval_batches()) == len(held)
