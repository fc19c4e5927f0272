"""Multiple choice: encoding of (text, choice) sequences, scores scattered over a variable number of
choices, the softmax loss, and learning a toy task through the shared fine-tuning path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ptmkit.build import build_model
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.multiple_choice import (
    ChoiceData,
    ChoiceScorer,
    ChoiceSplit,
    collate_choices,
    encode_choices,
    read_choices,
)
from ptmkit.tokenization import Tokenizer

FILLER = "the film plot was very quite".split()
ANSWERS = {"good": "i liked it", "bad": "i hated it"}
NEUTRAL = ["it was long", "i saw it", "no idea"]


def _split(n, rng):
    """A review with 'good' or 'bad'; 2-4 choices, one of them the matching reaction (the other
    reaction and neutral remarks as distractors, in random order)."""
    texts, choices, labels = [], [], []
    for _ in range(n):
        mood = str(rng.choice(["good", "bad"]))
        words = list(rng.choice(FILLER, 4))
        words.insert(int(rng.integers(5)), mood)
        options = [ANSWERS[mood], ANSWERS["bad" if mood == "good" else "good"]]
        options += list(rng.choice(NEUTRAL, int(rng.integers(0, 3)), replace=False))
        order = rng.permutation(len(options))
        texts.append(" ".join(words))
        choices.append([options[i] for i in order])
        labels.append(int(np.flatnonzero(order == 0)[0]))
    return ChoiceSplit(texts, choices, np.array(labels))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return ChoiceData("reactions", _split(200, rng), _split(50, rng), _split(50, rng))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("mcckpt")
    (d / "text.txt").write_text("\n".join(data.train.texts + [c for cs in data.train.choices for c in cs]) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=80, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_position=32, dropout=0.0, attention_dropout=0.0)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {"kind": "wordpiece"},
              "train": {}}
    return save_pretrained(d / "ck", config, build_model(config, tok), tok), tok


def test_sequences_scores_and_loss(data, checkpoint):
    _, tok = checkpoint
    enc = encode_choices(data.train, tok, max_len=16, causal=False)
    assert [len(x) for x in enc.ids[:3]] == [len(c) for c in data.train.choices[:3]]
    first = enc.ids[0][0].tolist()
    assert first[0] == tok.cls_id and first.count(tok.sep_id) == 2 and enc.types[0][0].tolist()[-1] == 1
    index = np.array([0, 1, 2])
    batch = collate_choices(enc, index, tok.pad_id, with_token_types=True)
    assert batch["input_ids"].shape[0] == sum(len(data.train.choices[i]) for i in index)
    pre = load_pretrained(checkpoint[0])
    model = ChoiceScorer(backbone=pre.backbone, dropout=0.0)
    model.eval()
    s = model.scores(batch)
    assert s.shape == (3, max(len(data.train.choices[i]) for i in index))
    for r, i in enumerate(index):  # missing choices are -inf; each real score is its sequence's own
        k = len(data.train.choices[i])
        assert torch.isinf(s[r, k:]).all() and torch.isfinite(s[r, :k]).all()
        alone = collate_choices(enc, np.array([i]), tok.pad_id, with_token_types=True)
        assert torch.allclose(model.scores(alone)[0, :k], s[r, :k], atol=1e-5)
    out = model(batch)
    ref = -torch.stack([torch.log_softmax(s[r, : len(data.train.choices[i])], 0)[data.train.labels[i]] for r, i in enumerate(index)]).mean()
    assert out.loss.item() == pytest.approx(ref.item(), abs=1e-5)


def test_finetune_learns_to_choose(data, checkpoint, tmp_path):
    cfg = FinetuneConfig(epochs=12, lr=5e-3, batch_size=16, max_seq_len=16, warmup=0.0, pooling="mean")
    r = finetune(load_pretrained(checkpoint[0]), data, tmp_path / "run", cfg, seed=0, progress=False)
    assert r["task_type"] == "multiple_choice"
    assert r["test"]["accuracy"] >= 0.9 > r["test"]["chance"] + 0.4, r["test"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 50 and all(len(x["probabilities"]) == len(x["choices"]) for x in rows)


def test_read_choices_errors(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"text": "t", "choices": ["a", "b"], "label": 2}) + "\n")
    with pytest.raises(PtmError, match=r"a.jsonl:1: label 2 is not the index of one of its 2 choices"):
        read_choices(p)
    p.write_text(json.dumps({"text": "t", "choices": ["a"], "label": 0}) + "\n")
    with pytest.raises(PtmError, match="at least two"):
        read_choices(p)
    p.write_text(json.dumps({"text": "t", "choices": ["x", "y"], "label": 1, "target": "w"}) + "\n")
    assert read_choices(p, prefix="target").choices == [["w: x", "w: y"]]
