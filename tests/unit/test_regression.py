"""Regression: float targets through the shared fine-tuning path, standardised targets, the
correlation scores, and the reader's errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskSplit
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.regression import RegressionData, load_regression_files, score_values
from ptmkit.tokenization import Tokenizer

GRADES = {"awful": -3.0, "bad": -1.5, "fine": 0.5, "good": 2.0, "superb": 3.5}
FILLER = "the film plot was very quite".split()


def _split(n, rng):
    """Target = the grade of the one rated word in the sentence (+ small noise), in [-3, 3.5]."""
    texts, y = [], []
    for _ in range(n):
        w = str(rng.choice(list(GRADES)))
        words = list(rng.choice(FILLER, 4))
        words.insert(int(rng.integers(5)), w)
        texts.append(" ".join(words))
        y.append(GRADES[w] + rng.normal(0, 0.1))
    return TaskSplit(texts, np.array(y))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return RegressionData("grades", _split(200, rng), _split(50, rng), _split(50, rng))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("regckpt")
    (d / "text.txt").write_text("\n".join(data.train.texts) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=60, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_position=32, dropout=0.0, attention_dropout=0.0)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {"kind": "wordpiece"},
              "train": {}}
    return save_pretrained(d / "ck", config, build_model(config, tok), tok)


def test_scores_match_scipy():
    rng = np.random.default_rng(1)
    g, p = rng.normal(size=30), rng.normal(size=30)
    s = score_values(g, p)
    assert s["pearson"] == pytest.approx(stats.pearsonr(g, p)[0]) and s["spearman"] == pytest.approx(stats.spearmanr(g, p)[0])
    assert s["mse"] == pytest.approx(np.mean((g - p) ** 2))
    assert score_values(g, np.zeros(30))["pearson"] == 0.0  # a constant prediction correlates with nothing


def test_finetune_learns_the_grades(data, checkpoint, tmp_path):
    cfg = FinetuneConfig(epochs=8, lr=3e-3, batch_size=16, max_seq_len=16, warmup=0.0, pooling="mean")
    r = finetune(load_pretrained(checkpoint), data, tmp_path / "run", cfg, seed=0, progress=False)
    assert r["task_type"] == "regression" and r["select"] == "pearson"
    assert r["test"]["pearson"] > 0.95 and r["test"]["mse"] < 0.3, r["test"]  # targets span [-3, 3.5]
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 50 and -4 < min(x["prediction"] for x in rows) < -2  # predictions in the data's units


def test_reader_errors(tmp_path):
    (tmp_path / "a.csv").write_text("text,score\nthe film,1.5\nbad film,oops\n")
    with pytest.raises(PtmError, match="row 2: score='oops' is not a number"):
        load_regression_files(tmp_path / "a.csv", tmp_path / "a.csv", tmp_path / "a.csv", label_column="score")
    (tmp_path / "b.csv").write_text("text,score\nthe film,1\nbad film,1\n")
    with pytest.raises(PtmError, match="nothing to learn"):
        load_regression_files(tmp_path / "b.csv", tmp_path / "b.csv", tmp_path / "b.csv", label_column="score")
