"""LoRA and BitFit through ``ptm``: a fine-tuned model of small weights scores and predicts on its
base like any other; bad settings, another base and an export of the small weights are each one
line naming the fix."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_cli, task_file_args, tiny_checkpoint, toy_sentiment
from safetensors.torch import load_file, save_file

from ptmkit.cli import main


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("efficient-cli")
    task = toy_sentiment((64, 24, 24))
    files = task_file_args(task, root)
    ck = tiny_checkpoint(root / "model", task.train.texts)
    return root, files, ck


def ptm(*argv) -> int:
    return main([str(a) for a in argv])


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_lora_model_scores_and_predicts_on_its_base_and_is_refused_once_the_base_changed(ws, tmp_path, capsys):
    root, files, ck = ws
    base = tmp_path / "base"
    shutil.copytree(ck, base)
    assert ptm("finetune", base, *files, "-o", tmp_path / "ft", "--quiet", "epochs=1", "batch_size=8",
                 "max_seq_len=16", "lora_rank=2", "lora_targets=q,k,v") == 0
    run = tmp_path / "ft" / "pretrained-seed0"
    assert ptm("finetune", run, "--eval-only", *files, "-o", tmp_path / "eval") == 0
    assert json.loads((tmp_path / "eval" / "results.json").read_text())["test"] == \
        json.loads((run / "results.json").read_text())["test"]
    gold = _jsonl(run / "predictions.jsonl")
    (tmp_path / "in.txt").write_text("".join(r["text"] + "\n" for r in gold))
    assert ptm("predict", run, "--input", tmp_path / "in.txt", "-o", tmp_path / "p.jsonl") == 0
    assert [r["prediction"] for r in _jsonl(tmp_path / "p.jsonl")] == [r["prediction"] for r in gold]

    rc, err = run_cli(["export", run, "-o", tmp_path / "hf"], capsys)
    assert rc == 2 and "lora_merge=true" in err and len(err.strip().splitlines()) == 1

    # pruning and quantizing edit the weights: they start from the merged model and save a plain one
    rc, err = run_cli(["prune", run, *files, "--fraction", "0.25", "--rounds", "1", "--threads", "1",
                       "-o", tmp_path / "pruned"], capsys)
    assert rc == 0, err
    assert ptm("finetune", tmp_path / "pruned", "--eval-only", *files, "-o", tmp_path / "pruned-eval") == 0
    rc, err = run_cli(["quantize", run, "--int8", *files, "--rounds", "1", "-o", tmp_path / "int8"], capsys)
    assert rc == 0, err
    # a distilled student learns every weight: LoRA is not carried over from the teacher
    rc, err = run_cli(["distil", run, *files, "-o", tmp_path / "distil", "--layers", "1", "epochs=1", "batch_size=8",
                       "max_seq_len=16", "--quiet"], capsys)
    assert rc == 0, err
    student = tmp_path / "distil" / "student-seed0"
    info = json.loads((student / "task_model.json").read_text())
    assert info["finetune"]["lora_rank"] == 0 and "parameter_efficient" not in info
    assert ptm("finetune", student, "--eval-only", *files, "-o", tmp_path / "student-eval") == 0

    weights = load_file(str(base / "model.safetensors"))
    key = next(k for k in weights if k.endswith("attn.out.weight"))
    weights[key] = weights[key] * 1.01
    save_file(weights, str(base / "model.safetensors"))
    rc, err = run_cli(["predict", run, "--input", tmp_path / "in.txt", "-o", tmp_path / "q.jsonl"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"on the base {base.resolve()}" in err and "holds other weights" in err


@pytest.mark.parametrize("overrides, message", [
    (["lora_rank=-1"], "lora_rank must be an integer >= 0"),
    (["lora_rank=4", "mode=features"], "mode=features keeps all of it fixed"),
    (["lora_rank=4", "adapter_size=8"], "lora_rank > 0 and adapter_size > 0"),
    (["bitfit=true", "lora_rank=4"], "lora_rank > 0 and bitfit=true"),
    (["lora_alpha=16"], "set lora_rank"),
    (["lora_rank=2", "lora_targets=query"], "pattern 'query' names no projection"),
    (["lora_rank=64"], "lora_rank=64 exceeds the size of layers.0.attn.q"),
    (["bitfit=yes please"], "bitfit must be true or false"),
])
def test_bad_settings_are_one_line(ws, tmp_path, capsys, overrides, message):
    root, files, ck = ws
    rc, err = run_cli(["finetune", ck, *files, "-o", tmp_path / "out", "--quiet", "epochs=1", "max_seq_len=16",
                       *overrides], capsys)
    assert rc == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out" / "pretrained-seed0").exists()
