"""A fine-tuned model saves itself (task_model.json + tokenizer + weights) and loads back to the same
predictions; ``ptm finetune RUN --eval-only`` scores it again."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import fine_tuned_toy, run_cli, task_file_args, toy_sentiment

from ptmkit.errors import PtmError
from ptmkit.tasks.saved import load_task_model


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("tm")
    result = fine_tuned_toy(root, task)
    return task, root / "run", result


def test_a_fine_tuned_run_reloads_to_its_own_scores(finetuned):
    task, run, result = finetuned
    assert (run / "task_model.json").is_file() and (run / "tokenizer.json").is_file()
    tm = load_task_model(run, task)
    assert tm.evaluate("dev") == pytest.approx(result["dev"])
    assert tm.evaluate("test") == pytest.approx(result["test"])
    info = json.loads((run / "task_model.json").read_text())
    assert info["config"]["model"]["num_layers"] == 2 and info["task_type"] == "classification"


def test_the_user_task_must_be_given_again_and_must_match(finetuned, tmp_path):
    task, run, _ = finetuned
    with pytest.raises(PtmError, match="give its files again"):
        load_task_model(run)
    with pytest.raises(PtmError, match="not a fine-tuned model"):
        load_task_model(tmp_path)
    with pytest.raises(PtmError, match="holds runs: run"):
        load_task_model(run.parent)


def test_eval_only_scores_a_saved_model_from_files(finetuned, tmp_path, capsys):
    task, run, result = finetuned
    files = task_file_args(task, tmp_path)
    rc, err = run_cli(["finetune", run, "--eval-only", *files, "-o", tmp_path / "scored"], capsys)
    assert rc == 0, err
    scored = json.loads((tmp_path / "scored" / "results.json").read_text())
    assert scored["test"]["accuracy"] == pytest.approx(result["test"]["accuracy"])
    assert (tmp_path / "scored" / "predictions.jsonl").is_file()
