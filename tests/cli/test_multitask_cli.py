"""``ptm finetune --tasks A,B``: multi-task fine-tuning from the command line, then a per-task stage."""

import json

import numpy as np
import pytest

from ptmkit.build import build_model
from ptmkit.cli import main
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.pretrained import save_pretrained
from ptmkit.tasks.tagging import TaggingData, TaggingSplit
from ptmkit.tokenization import Tokenizer

WORDS = "the a film plot was very quite".split()


def _tasks():
    rng = np.random.default_rng(0)

    def cls(n):
        rows = [(list(rng.choice(WORDS, 4)), int(rng.integers(2))) for _ in range(n)]
        return TaskSplit([" ".join(w + ["great" if y else "awful"]) for w, y in rows], np.array([y for _, y in rows]))

    def tag(n):
        words = [list(rng.choice(WORDS, 5)) for _ in range(n)]
        return TaggingSplit(words, [["D" if x in ("the", "a") else "W" for x in w] for w in words])

    return {"toy-cls": TaskData("toy-cls", [0, 1], cls(32), cls(12), cls(12)),
            "toy-tag": TaggingData("toy-tag", ["D", "W"], tag(16), tag(8), tag(8))}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("mt_cli")
    (d / "text.txt").write_text(" ".join(WORDS + ["great", "awful"]) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=60, min_frequency=1)
    config = {"model": {"encoder": "transformer", "vocab_size": tok.vocab_size, "hidden_size": 16, "num_layers": 1,
                        "num_heads": 2, "intermediate_size": 32, "max_position": 16},
              "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    return save_pretrained(d / "ck", config, build_model(config, tok), tok)


def test_finetune_cli_tasks_then_after(checkpoint, tmp_path, monkeypatch, capsys):
    tasks = _tasks()
    monkeypatch.setattr("ptmkit.tasks.multitask.load_task", lambda name: tasks[name])
    monkeypatch.setattr("ptmkit.workflows.finetune.load_task", lambda name: tasks[name])
    out = tmp_path / "mt"
    rc = main(["finetune", str(checkpoint), "--tasks", "toy-cls,toy-tag", "-o", str(out), "--quiet",
               "epochs=2", "lr=3e-3", "batch_size=8", "max_seq_len=16", "task_schedule=round_robin"])
    assert rc == 0
    assert "mean over tasks" in capsys.readouterr().out
    run = json.loads((out / "pretrained-seed0" / "results.json").read_text())
    assert run["task"] == "toy-cls+toy-tag" and run["config"]["task"]["task_schedule"] == "round_robin"
    assert {"toy-cls/accuracy", "toy-tag/accuracy", "mean"} <= set(run["test"])
    assert run["sizes"]["train"] == 48
    # the second, per-task stage starts from the multi-task encoder
    rc = main(["finetune", str(checkpoint), "--task", "toy-cls", "--after", str(out / "pretrained-seed0"),
               "-o", str(tmp_path / "stage2"), "--quiet", "epochs=1", "batch_size=8", "max_seq_len=16"])
    assert rc == 0 and (tmp_path / "stage2" / "pretrained-seed0" / "results.json").is_file()
    # --tasks with --task is refused, naming the fix
    rc = main(["finetune", str(checkpoint), "--tasks", "toy-cls,toy-tag", "--task", "toy-cls", "-o", str(tmp_path / "x")])
    assert rc != 0 and "--tasks" in capsys.readouterr().err
