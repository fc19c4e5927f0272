"""Every artefact is a run: ``ptm prune``, ``ptm quantize`` and ``ptm distil`` write run cards that
``ptm runs`` lists (with their kind and key metrics) and ``ptm info`` / ``ptm info --json``
describe; each command draws its figure (a non-empty PNG) through ``fileio.save_figure``, as do
``ptm finetune --init both`` and a pre-training run shorter than its logging interval."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import fine_tuned_toy, run_cli, task_file_args, toy_sentiment, write_corpus

from ptmkit.runcard import card_json, describe
from ptmkit.runcard.facts import Card
from ptmkit.train.metrics_log import read_metrics

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path) -> bool:
    return path.is_file() and path.stat().st_size > 100 and path.read_bytes()[:8] == PNG


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("compressed-runs")
    fine_tuned_toy(root, task, epochs=1, max_seq_len=24, layers=2, heads=4, hidden=16)
    return root, [str(a) for a in task_file_args(task, root)]


def runs_lines(root, capsys) -> dict[str, str]:
    """``ptm runs ROOT`` as {relative path: its line}."""
    capsys.readouterr()
    from ptmkit.cli import main

    assert main(["runs", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    return {line.split()[0]: line for line in lines}


def info(path, capsys, *extra) -> str:
    from ptmkit.cli import main

    capsys.readouterr()
    assert main(["info", str(path), *extra]) == 0
    return capsys.readouterr().out


def check_described(path, kind, label, capsys, *words) -> dict:
    text = info(path, capsys)
    assert f": {label}" in text and "derives from" in text
    for word in words:
        assert word in text, word
    facts = json.loads(info(path, capsys, "--json"))
    assert facts["kind"] == kind and facts["label"] == label
    return facts


def test_a_pruned_model_is_a_run_with_its_curve(toy, capsys):
    root, files = toy
    out = root / "pruned"
    rc, err = run_cli(["prune", root / "run", *files, "--fraction", "0.25", "--rounds", "1", "--threads", "1",
                       "-o", out], capsys)
    assert rc == 0, err
    assert is_png(out / "curve.png") and not (out / "curve.json").exists()  # drawn without --curve
    assert "README.md" in json.loads((out / ".ptmkit-output.json").read_text())["entries"]
    line = runs_lines(root, capsys)["pruned"]
    assert "pruned task model" in line and "dev accuracy=" in line and "speed-up=" in line
    facts = check_described(out, "prune", "pruned task model", capsys, "heads pruning", "dev accuracy unpruned")
    assert facts["derives_from"] == [str(root / "run")]


def test_pruning_layers_draws_before_and_after(toy, capsys):
    root, files = toy
    out = root / "layers"
    rc, err = run_cli(["prune", root / "run", *files, "--method", "layers", "--keep-layers", "0", "--rounds", "1",
                       "--threads", "1", "-o", out], capsys)
    assert rc == 0, err
    assert is_png(out / "curve.png")
    check_described(out, "prune", "pruned task model", capsys, "kept layers 0")


def test_a_quantized_model_is_a_run_with_its_figure(toy, capsys):
    root, files = toy
    out = root / "int8"
    rc, err = run_cli(["quantize", root / "run", "--int8", *files, "--rounds", "1", "-o", out], capsys)
    assert rc == 0, err
    assert is_png(out / "quantize.png")
    line = runs_lines(root, capsys)["int8"]
    assert "quantized task model (int8)" in line and "size ratio=" in line and "test accuracy=" in line
    facts = check_described(out, "quantize", "quantized task model (int8)", capsys, "int8 (", "test accuracy float32")
    assert facts["derives_from"] == [str(root / "run")]


def test_distilled_students_are_runs_of_their_own_kind(toy, capsys):
    root, files = toy
    out = root / "distilled"
    rc, err = run_cli(["distil", root / "run", *files, "-o", out, "--layers", "1", "epochs=1", "lr=3e-3",
                       "batch_size=16", "max_seq_len=24", "--seeds", "0", "1", "--quiet"], capsys)
    assert rc == 0, err
    assert is_png(out / "distil.png")
    lines = runs_lines(root, capsys)
    assert "distillation" in lines["distilled"] and "test retention=" in lines["distilled"]
    assert "distilled student" in lines["distilled/student-seed0"] and "test accuracy=" in lines["distilled/student-seed0"]
    assert "fine-tuning run" in lines["run"]
    facts = check_described(out, "distil", "distillation", capsys, "student-seed0, student-seed1", "test retention")
    assert facts["derives_from"] == [str(root / "run")]
    student = check_described(out / "student-seed0", "student", "distilled student", capsys, "distillation (")
    assert str(root / "run") in student["derives_from"]


def test_info_json_never_prints_a_bare_nan(tmp_path):
    card = Card(tmp_path, "finetune", metrics={"dev loss": float("nan"), "nested": [float("inf"), 1.0]})
    facts = json.loads(card_json(card))  # json.loads accepts NaN: check the text too
    assert facts["metrics"] == {"dev loss": None, "nested": [None, 1.0]}
    assert "NaN" not in card_json(card) and "Infinity" not in card_json(card)


def test_finetune_init_both_draws_the_comparison(toy, capsys):
    root, files = toy
    out = root / "both"
    rc, err = run_cli(["finetune", root / "model" / "ck", *files, "--init", "both", "--seeds", "0", "-o", out, "--quiet",
                       "epochs=1", "batch_size=32", "max_seq_len=24"], capsys)
    assert rc == 0, err
    assert is_png(out / "inits.png")
    assert describe(out / "pretrained-seed0").kind == "finetune"


def test_a_run_shorter_than_its_logging_interval_plots_every_step(tmp_path, capsys):
    text = write_corpus(tmp_path / "train.txt", docs=10)
    run = tmp_path / "run"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", text, "-o", run, "model.hidden_size=32",
                       "model.intermediate_size=64", "model.max_position=64", "tokenizer.vocab_size=120",
                       "tokenizer.min_frequency=1", "train.batch_size=4", "train.seq_len=32", "train.max_steps=3",
                       "train.warmup_steps=1", "train.log_every=10", "train.eval_batches=1", "train.num_threads=1"],
                      capsys)
    assert rc == 0, err
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", "train")] == [1, 2, 3]
    assert is_png(run / "loss.png")
