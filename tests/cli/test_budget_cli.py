"""``ptm budget`` from the command line: presets with trailing overrides, a study whose main run
is stopped between saving a branch point and copying it out, resumed to the same weights as an
uninterrupted study, and a finished study read back without training anything again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file

from ptmkit.cli import main
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.train import checkpoint as ckpt
from ptmkit.workflows import budget as workflow

TINY = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=32",
        "model.max_position=32", "tokenizer.vocab_size=120", "train.seq_len=16", "train.batch_size=4",
        "train.log_every=1", "train.eval_batches=2", "train.eval_fraction=0.1", "objective.nsp=false"]
BUDGETS = "2.6e7,4.3e7,6.4e7"  # about 12, 20 and 30 steps of the tiny BERT (2.08 MFLOPs each)


def toy_task() -> TaskData:
    rng = np.random.default_rng(1)

    def split(n):
        y = rng.integers(0, 2, n)
        return TaskSplit([("good fun " if v else "bad dull ") + "film plot" for v in y], y)

    return TaskData("toy", [0, 1], split(24), split(12), split(12))


@pytest.fixture()
def text(tmp_path):
    rng = np.random.default_rng(0)
    words = "the a film plot good bad actor scene story long short fun dull music".split()
    path = tmp_path / "text.txt"
    path.write_text("\n".join(" ".join(rng.choice(words, rng.integers(5, 12))) for _ in range(300)) + "\n")
    return path


def _argv(text, out, *extra):
    # overrides before and after the options
    return ["budget", "bert-tiny", *TINY[:4], "--data", str(text), "--budgets", BUDGETS, "-o", str(out), "--tasks", "toy",
            "--train-size", "16", "--eval-size", "12", "--seeds", "1", "--lrs", "1e-3", "--epochs", "1", *TINY[4:], *extra]


def _finals(out):
    runs = out / "runs" / "bert-tiny"
    return {d.name: load_file(str(ckpt.latest_checkpoint(d) / ckpt.MODEL_FILE)) for d in sorted(runs.iterdir()) if d.is_dir()}


def test_budget_command_stopped_and_resumed(text, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ptmkit.workflows.budget.load_task", lambda name: toy_task())
    plain = tmp_path / "plain"
    assert main(_argv(text, plain)) == 0
    printed = capsys.readouterr().out
    assert "| random init |" in printed and "Crossover" in printed
    for name in ("results.json", "table.md", "budget.png"):
        assert (plain / name).stat().st_size > 0
    assert len(_finals(plain)) == 3

    # killed after the second branch point was saved, before it was copied out
    copy = workflow.make_branch
    calls = []

    def dies_the_second_time(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return copy(*args, **kwargs)

    monkeypatch.setattr(workflow, "make_branch", dies_the_second_time)
    stopped = tmp_path / "stopped"
    assert main(_argv(text, stopped)) == 130  # "interrupted"
    assert not (stopped / "runs" / "bert-tiny" / "budget-4.3e7" / "checkpoints").exists()
    monkeypatch.setattr(workflow, "make_branch", copy)
    assert main(_argv(text, stopped, "--resume")) == 0
    a, b = _finals(plain), _finals(stopped)
    assert a.keys() == b.keys()
    for name in a:
        assert all(np.array_equal(a[name][k].numpy(), b[name][k].numpy()) for k in a[name]), name

    # finished: read back, nothing trained again
    mtimes = {f: f.stat().st_mtime_ns for f in plain.rglob("*.safetensors")}
    before = json.loads((plain / "results.json").read_text())["runs"]
    assert main(_argv(text, plain, "--resume")) == 0
    assert {f: f.stat().st_mtime_ns for f in mtimes} == mtimes
    assert json.loads((plain / "results.json").read_text())["runs"] == before
    capsys.readouterr()
    assert main([*_argv(text, plain), "--decay-fraction", "0.2", "--resume"]) == 2
    assert "other settings (decay_fraction: 0.1 in the run, 0.2 now)" in capsys.readouterr().err


def test_budget_command_refuses_bad_budgets(text, tmp_path, capsys):
    assert main(["budget", "bert-tiny", "--data", str(text), "--budgets", "3e7,2e7", "-o", str(tmp_path / "o1")]) == 2
    assert "the budgets must increase: 20.0 MFLOP follows 30.0 MFLOP" in capsys.readouterr().err
    assert main(["budget", "bert-tiny", *TINY, "--data", str(text), "--budgets", "1e6,6e7", "-o", str(tmp_path / "o2")]) == 2
    assert "bert-tiny: the budget 1.0 MFLOP buys 0 steps" in capsys.readouterr().err
    assert not (tmp_path / "o2" / "runs").exists()
    assert main(["budget", "train.lr=1e-3", "--data", str(text), "--budgets", "1e6", "-o", str(tmp_path / "o3")]) == 2
    assert "no preset given" in capsys.readouterr().err
