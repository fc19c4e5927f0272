"""``ptm prune`` end to end on a tiny fine-tuned run: heads with the curve (importance vs random), the
mask's scores equal the pruned model's, layers kept, magnitude sparsity, the output reloads (and
``--eval-only`` scores it), and the refusals come back as exit status 2 with a message."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import fine_tuned_toy, run_cli, task_file_args, toy_sentiment

from ptmkit.tasks.saved import load_task_model


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("prune-cli")
    fine_tuned_toy(root, task, max_seq_len=24, layers=3, heads=4, hidden=16)
    files = task_file_args(task, root)
    return task, root / "run", files


def prune(argv, capsys, run, files, out):
    rc, err = run_cli(["prune", run, *files, "--rounds", "1", "--threads", "1", "-o", out, *argv], capsys)
    return rc, err


def test_heads_with_curve(run, tmp_path, capsys):
    task, src, files = run
    rc, err = prune(["--fraction", "0.25", "--curve"], capsys, src, files, tmp_path / "heads")
    assert rc == 0, err
    out = tmp_path / "heads"
    res = json.loads((out / "results.json").read_text())
    curve = json.loads((out / "curve.json").read_text())
    assert (out / "curve.png").stat().st_size > 0
    # 12 heads, every layer keeps one: the grid stops at 0.7 (9 of 12 is 0.75); 0.25 is a step of its own
    fractions = [s["fraction"] for s in curve["importance"]]
    assert fractions == [0.0, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7]
    assert [s["fraction"] for s in curve["random"]] == fractions
    assert all("dev" in s and "test" in s for s in curve["importance"] + curve["random"])
    assert curve["importance"][0]["dev"] == res["unpruned"]["dev"]  # nothing masked: the unpruned scores
    assert res["num_heads_pruned"] == 3 and res["compression"]["method"] == "heads"
    assert res["masked_dev"] == pytest.approx(res["dev"])  # removing the heads = masking them
    assert set(res["speed"]) >= {"batch_1", "batch_32", "threads", "seq_len"}
    assert res["num_parameters"]["after"]["encoder"] < res["num_parameters"]["before"]["encoder"]
    tm = load_task_model(out, task)
    pruned = {int(k): list(v) for k, v in res["compression"]["heads_pruned"].items()}
    assert {k: list(v) for k, v in tm.backbone.config.pruned_heads.items()} == pruned
    assert tm.evaluate("test") == pytest.approx(res["test"])
    assert tm.info["derived_from"]["run"] == str(src) and tm.info["compression"]["source"] == str(src)
    rc, err = run_cli(["finetune", out, "--eval-only", *files, "-o", tmp_path / "scored"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "scored" / "results.json").read_text())["test"] == pytest.approx(res["test"])


def test_default_fraction_is_the_largest_step_within_tolerance(run, tmp_path, capsys):
    _, src, files = run
    rc, err = prune(["--order", "random", "--seed", "2", "--tolerance", "0.05"], capsys, src, files, tmp_path / "r")
    assert rc == 0, err
    res = json.loads((tmp_path / "r" / "results.json").read_text())
    within = res["prunable_within_tolerance"]
    assert within["order"] == "random" and res["fraction"] == within["fraction"]
    assert res["dev"]["accuracy"] >= res["unpruned"]["dev"]["accuracy"] - 0.05 - 1e-12
    assert res["compression"]["seed"] == 2 and res["curve"] is None


def test_keep_layers(run, tmp_path, capsys):
    task, src, files = run
    rc, err = prune(["--method", "layers", "--keep-layers", "0,2"], capsys, src, files, tmp_path / "layers")
    assert rc == 0, err
    res = json.loads((tmp_path / "layers" / "results.json").read_text())
    assert res["compression"]["kept_layers"] == [0, 2] and res["compression"]["num_layers"] == 2
    tm = load_task_model(tmp_path / "layers", task)
    assert tm.config["model"]["num_layers"] == 2 and tm.evaluate("dev") == pytest.approx(res["dev"])


def test_magnitude(run, tmp_path, capsys):
    task, src, files = run
    rc, err = prune(["--method", "magnitude", "--fraction", "0.5", "--curve"], capsys, src, files, tmp_path / "mag")
    assert rc == 0, err
    res = json.loads((tmp_path / "mag" / "results.json").read_text())
    assert res["sparsity"]["sparsity"] == pytest.approx(0.5, abs=1e-3)
    assert [s["fraction"] for s in res["curve"]["magnitude"]] == pytest.approx([i / 10 for i in range(10)])
    tm = load_task_model(tmp_path / "mag", task)
    assert tm.evaluate("test") == pytest.approx(res["test"])


@pytest.mark.parametrize("argv, match", [
    (["--fraction", "1.0"], r"--fraction must be in \[0, 1\)"),
    (["--fraction", "-0.2"], r"--fraction must be in \[0, 1\)"),
    (["--fraction", "0.9"], "every layer keeps at least one head"),
    (["--method", "layers"], "needs --keep-layers"),
    (["--method", "layers", "--keep-layers", "0,7"], "layer 7 does not exist"),
    (["--method", "layers", "--keep-layers", "0,2", "--fraction", "0.5"], "apply to --method heads and magnitude"),
    (["--keep-layers", "0"], "goes with --method layers"),
    (["--importance-split", "dev", "--tolerance", "-1"], "--tolerance"),
])
def test_refusals(run, tmp_path, capsys, argv, match):
    _, src, files = run
    rc, err = prune(argv, capsys, src, files, tmp_path / "bad")
    assert rc == 2 and "error:" in err
    assert re.search(match, err), err
    assert not (tmp_path / "bad" / "results.json").exists()
