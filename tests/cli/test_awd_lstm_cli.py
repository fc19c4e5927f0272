"""``ptm pretrain awd-lstm-tiny`` end to end, and continued pre-training (``--init-from``, ULMFiT's
second stage): the weights, tokenizer and config of the first run, a fresh schedule."""

from __future__ import annotations

import json
import random

import pytest
import torch

from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.train.trainer import TrainerCallback, read_metrics
from ptmkit.workflows.pretrain import pretrain

SMALL = [
    "model.embedding_size=24", "model.hidden_size=48", "model.dropout=0.1", "model.dropouth=0.1",
    "model.dropouti=0.1", "model.dropoute=0.0", "model.wdrop=0.1",
    "train.batch_size=8", "train.seq_len=24", "train.max_steps=150", "train.warmup_steps=5", "train.lr=2e-2",
    "train.log_every=1", "train.eval_every=0", "train.save_every=0", "train.eval_fraction=0.05", "train.num_threads=1",
]
WORDS = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()


def write_corpus(path, sentences=300, seed=0):
    """A toy language: sentences built from a few fixed templates, so an LM can learn it fast."""
    rng = random.Random(seed)
    templates = [("the", "cat", "sat", "on", "the", "mat"), ("a", "dog", "ran", "under", "the", "house"),
                 ("the", "big", "red", "dog", "saw", "it"), ("a", "small", "cat", "ran", "quickly", "and", "then", "sat")]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(sentences):
            f.write(" ".join(rng.choice(templates)) + "\n")
    return path


def train_losses(run):
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "train"]


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    root = tmp_path_factory.mktemp("awd")
    text = write_corpus(root / "general.txt")
    run = root / "lm"
    assert main(["pretrain", "awd-lstm-tiny", "--data", str(text), "-o", str(run), *SMALL]) == 0
    return root, run


def test_awd_lstm_tiny_loss_falls(stage1):
    _, run = stage1
    losses = train_losses(run)
    assert len(losses) == 150
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, losses
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["encoder"] == "awd_lstm" and config["objective"]["name"] == "awd_lm"
    records = [r for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "train"]
    assert {"lm_loss", "ar", "tar"} <= set(records[-1])


class Start(TrainerCallback):
    """Keeps the weights the trainer starts from."""

    def on_fit_start(self, trainer) -> None:
        self.state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def test_init_from_continues_from_the_run(stage1):
    root, run = stage1
    task_text = write_corpus(root / "task.txt", sentences=200, seed=1)  # the same language, other text
    start = Start()
    run2 = pretrain("awd-lstm-tiny", task_text, root / "lm-task", ["train.max_steps=3", "train.lr=1e-4"],
                    init_from=run, callbacks=[start], verbose=False)
    source = load_pretrained(run)
    for name, value in source.model.state_dict().items():  # encoder and objective heads
        torch.testing.assert_close(start.state[name], value, msg=name)
    # the run's tokenizer and config (with the overrides), a fresh schedule
    assert (run2 / "data" / "tokenizer.json").read_text() == (run / "data" / "tokenizer.json").read_text()
    c1, c2 = (json.loads((r / "config.json").read_text()) for r in (run, run2))
    assert c2["model"] == c1["model"] and c2["train"]["max_steps"] == 3 and c2["train"]["lr"] == 1e-4
    first, last = train_losses(run), train_losses(run2)
    fresh = sum(first[:3]) / 3
    trained = sum(first[-5:]) / 5
    assert abs(last[0] - trained) < 0.3 * (fresh - trained), (last[0], trained, fresh)


def test_init_from_cli_and_refusals(stage1, capsys):
    root, run = stage1
    text = root / "task.txt" if (root / "task.txt").exists() else write_corpus(root / "task.txt", 200, 1)
    assert main(["pretrain", "awd-lstm-tiny", "--init-from", str(run), "--data", str(text), "-o", str(root / "cli2"),
                 "train.max_steps=2"]) == 0
    assert "weights, tokenizer and config from" in capsys.readouterr().out
    with pytest.raises(PtmError, match=r"encoder 'lstm' \(objective 'bilm'\)"):
        pretrain("elmo-tiny", text, root / "bad1", init_from=run, verbose=False)
    with pytest.raises(PtmError, match="change the model's shape"):
        pretrain("awd-lstm-tiny", text, root / "bad3", ["model.hidden_size=32"], init_from=run, verbose=False)
    assert not (root / "bad1").exists() and not (root / "bad3").exists()
    # the preset names the architecture; the run's sizes (trained with overrides) are kept
    c = json.loads((root / "cli2" / "config.json").read_text())
    assert c["model"]["embedding_size"] == 24


class Killed(Exception):
    """Stands in for SIGKILL: raised from a callback, so nothing after it runs."""


def test_continued_run_resumes_exactly(stage1, tmp_path):
    """A continued run (every dropout on) killed after its first checkpoint and resumed logs the
    uninterrupted losses: the dropout masks come from the RNG states the checkpoints keep."""
    root, run = stage1

    def kill_at_4(trainer, step):
        if step == 4:
            raise Killed

    text = root / "task.txt" if (root / "task.txt").exists() else write_corpus(root / "task.txt", 200, 1)
    over = ["train.max_steps=6", "train.save_every=3", "model.dropoute=0.1", "model.wdrop=0.5"]
    kw = dict(overrides=over, init_from=run, verbose=False)
    pretrain("awd-lstm-tiny", text, tmp_path / "full", **kw)
    with pytest.raises(Killed):
        pretrain("awd-lstm-tiny", text, tmp_path / "cut", callbacks=[kill_at_4], **kw)
    pretrain("awd-lstm-tiny", text, tmp_path / "cut", resume=True, **kw)
    a, b = train_losses(tmp_path / "full"), train_losses(tmp_path / "cut")
    assert len(a) == 6 and b == pytest.approx(a, abs=1e-6)
