"""``ptm evaluate``: a suite of tasks under one protocol, with the from-scratch baseline, written
as a Markdown table, a JSON file and a plot."""

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
from ptmkit.workflows.evaluate import Protocol, evaluate, markdown, summarize


def test_summary_and_table_over_seeds():
    rows = [{"model": "m", "mode": "finetune", "task": "t", "metric": "accuracy", "test": v, "dev": 0, "seed": s, "lr": 1}
            for s, v in ((1, 0.5), (2, 0.7))]
    (cell,) = summarize(rows)
    assert cell["mean"] == pytest.approx(0.6) and cell["sd"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert "| m | finetune | 0.600 ± 0.141 |" in markdown([cell], ["t"])


def test_evaluate_runs_the_protocol_on_a_suite(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)

    def split(n):
        y = rng.integers(0, 2, n)
        return TaskSplit([("good " if v else "bad ") + "film plot" for v in y], y)

    data = TaskData("toy", [0, 1], split(40), split(30), split(30))
    monkeypatch.setattr("ptmkit.workflows.evaluate.load_task", lambda name: data)
    (tmp_path / "t.txt").write_text("good film plot\nbad film plot\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="wordpiece", vocab_size=40, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position=128)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    protocol = Protocol(train_size=20, eval_size=10, seeds=(1, 2), lrs=(1e-3,), features_lrs=(3e-3,), epochs=1,
                        max_seq_len=16)
    out = evaluate({"tiny": ck}, ("toy",), tmp_path / "eval", protocol)
    keys = {(t["model"], t["mode"]) for t in out["table"]}
    assert keys == {("tiny", "finetune"), ("tiny", "features"), ("from scratch (tiny)", "finetune")}
    assert all(t["n"] == 2 for t in out["table"])
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert {(r["mode"], r["lr"]) for r in saved["runs"]} == {("finetune", 1e-3), ("features", 3e-3)}
    assert len(saved["runs"]) == 6 and (tmp_path / "eval" / "table.png").stat().st_size > 0
    assert "from scratch (tiny)" in (tmp_path / "eval" / "table.md").read_text()
    # resume reads every finished run back: same rows, nothing trained again
    mtimes = {f: f.stat().st_mtime_ns for f in (tmp_path / "eval").rglob("best.safetensors")}
    again = evaluate({"tiny": ck}, ("toy",), tmp_path / "eval", protocol, resume=True)
    assert again["runs"] == out["runs"]
    assert mtimes and {f: f.stat().st_mtime_ns for f in mtimes} == mtimes
    # the command line: the same protocol, resumable; the output directory is ptm's evaluation
    from ptmkit.cli import main

    argv = ["evaluate", str(ck), "--suite", "toy", "-o", str(tmp_path / "cli"), "--train-size", "20", "--eval-size", "10",
            "--seeds", "1", "--lrs", "1e-3", "--epochs", "1", "--modes", "finetune", "--no-baseline"]
    assert main(argv) == 0 and main([*argv, "--resume"]) == 0
    assert "| ck | finetune |" in (tmp_path / "cli" / "table.md").read_text()
    with pytest.raises(PtmError, match="unknown suite"):
        evaluate({"tiny": ck}, "fr", tmp_path / "e2", protocol)
