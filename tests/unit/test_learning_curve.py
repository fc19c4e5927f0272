"""The learning curve: the evaluation protocol at several training sizes (nested subsets, "all"
run once per task), tabulated with the pre-training gain and plotted against the size."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import save_pretrained
from ptmkit.tokenization import Tokenizer
from ptmkit.workflows.evaluate import Protocol
from ptmkit.workflows.learning_curve import gains, learning_curve, markdown, parse_train_sizes


def test_parse_train_sizes():
    assert parse_train_sizes("2000,100, 500,all") == (100, 500, 2000, None)
    assert parse_train_sizes([50, "ALL", 50]) == (50, None)
    for bad in ("100,0", "100,ten", "1e3", "", "-5"):
        with pytest.raises(PtmError, match="train-sizes"):
            parse_train_sizes(bad)


def test_gain_is_best_pretrained_minus_scratch_per_size():
    cell = lambda model, mode, n, mean: {"model": model, "mode": mode, "task": "t", "n_train": n,  # noqa: E731
                                         "train_size": str(n), "metric": "accuracy", "mean": mean, "sd": 0.0, "n": 1}
    table = [cell("a", "finetune", 10, 0.7), cell("a", "features", 10, 0.8), cell("from scratch (a)", "finetune", 10, 0.5),
             cell("a", "finetune", 100, 0.9), cell("from scratch (a)", "finetune", 100, 0.85)]
    assert gains(table, "t") == pytest.approx({10: 0.3, 100: 0.05})
    text = markdown(table, ["t"])
    assert "| **pre-training gain** | best − scratch | +0.300 | +0.050 |" in text
    assert "| a | features | 0.800 ± 0.000 | – |" in text


def test_learning_curve_runs_each_size_once(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)

    def split(n):
        y = rng.integers(0, 2, n)
        return TaskSplit([("good " if v else "bad ") + "film plot" for v in y], y)

    data = TaskData("toy", [0, 1], split(24), split(10), split(10))
    monkeypatch.setattr("ptmkit.workflows.evaluate.load_task", lambda name: data)
    monkeypatch.setattr("ptmkit.workflows.learning_curve.load_task", lambda name: data)
    (tmp_path / "t.txt").write_text("good film plot\nbad film plot\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="wordpiece", vocab_size=40, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position=16)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    protocol = Protocol(eval_size=10, seeds=(1, 2), lrs=(1e-3,), epochs=1, max_seq_len=16, modes=("finetune",))
    out = tmp_path / "curve"
    # 30 exceeds the 24 training examples: it is the task's "all" and runs once, not twice
    result = learning_curve({"tiny": ck}, ("toy",), out, protocol, (8, 30, None))
    cells = {(c["model"], c["n_train"]): c for c in result["table"]}
    assert set(cells) == {(m, n) for m in ("tiny", "from scratch (tiny)") for n in (8, 24)}
    assert all(c["n"] == 2 for c in cells.values())
    assert cells[("tiny", 8)]["train_size"] == "8" and cells[("tiny", 24)]["train_size"] == "all"
    assert sorted({r["n_train"] for r in result["runs"]}) == [8, 24] and len(result["runs"]) == 8
    assert (out / "n-8" / "table.md").is_file() and (out / "n-30" / "table.md").is_file()
    assert not (out / "n-all").exists()
    saved = json.loads((out / "learning_curve.json").read_text())
    assert saved["train_sizes"] == ["8", "30", "all"] and saved["table"] == result["table"]
    text = (out / "learning_curve.md").read_text()
    assert "| model | mode | n = 8 | all (24) |" in text and "pre-training gain" in text
    assert (out / "learning_curve.png").stat().st_size > 0


def test_cli_train_sizes_refuses_a_bad_list_before_writing(tmp_path):
    from ptmkit.cli import main

    assert main(["evaluate", str(tmp_path / "nothing"), "--suite", "mr", "-o", str(tmp_path / "o"),
                 "--train-sizes", "100,lots"]) == 2
    assert not (tmp_path / "o").exists()
