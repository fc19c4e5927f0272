"""Fine-tuning runs through the shared Trainer: exact resume, logs, transfer modes, progress lines."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerEncoder
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.classification import SequenceClassifier
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tokenization import Tokenizer
from ptmkit.train.metrics_log import read_metrics
from ptmkit.train.progress import LineProgress

WORDS = "the a film movie plot actors scene story was is very quite rather".split()


class Killed(Exception):
    pass


def kill_at(step: int):
    def callback(trainer, s):
        if s == step:
            raise Killed

    return callback


@pytest.fixture(scope="module")
def task():
    rng = np.random.default_rng(1)

    def split(n):
        texts, labels = [], []
        for _ in range(n):
            y = int(rng.integers(2))
            words = list(rng.choice(WORDS, size=int(rng.integers(3, 9))))
            words.insert(int(rng.integers(len(words) + 1)), "good" if y else "bad")
            texts.append(" ".join(words))
            labels.append(y)
        return TaskSplit(texts, np.array(labels, dtype=np.int64))

    return TaskData("synthetic", [0, 1], split(96), split(40), split(40))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, task):
    d = tmp_path_factory.mktemp("ckpt")
    (d / "text.txt").write_text("\n".join(task.train.texts) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=120, min_frequency=1)
    config = {
        "model": {"encoder": "transformer", "vocab_size": tok.vocab_size, "hidden_size": 32, "num_layers": 2,
                  "num_heads": 2, "intermediate_size": 64, "max_position": 32},
        "objective": {"name": "mlm", "nsp": False},
        "tokenizer": {"kind": "wordpiece"},
        "train": {},
    }
    torch.manual_seed(0)
    return save_pretrained(d / "ck", config, build_model(config, tok), tok)


CFG = FinetuneConfig(epochs=4, lr=2e-3, batch_size=16, max_seq_len=16, num_threads=1)


def test_killed_finetune_resumes_exactly(tmp_path, task, checkpoint):
    full = finetune(checkpoint, task, tmp_path / "full", CFG, seed=2, progress=False)
    # 6 steps an epoch: killed in epoch 3, after the checkpoint of epoch 2 (step 12)
    with pytest.raises(Killed):
        finetune(checkpoint, task, tmp_path / "cut", CFG, seed=2, progress=False, callbacks=[kill_at(15)])
    assert (tmp_path / "cut" / "checkpoints").is_dir() and not (tmp_path / "cut" / "results.json").exists()
    with pytest.raises(Exception, match="already holds"):  # a plain rerun does not clobber the interrupted run
        finetune(checkpoint, task, tmp_path / "cut", CFG, seed=2, progress=False)
    resumed = finetune(checkpoint, task, tmp_path / "cut", CFG, seed=2, progress=False, resume=True)
    assert resumed["history"] == full["history"] and resumed["best_epoch"] == full["best_epoch"]
    assert resumed["test"] == full["test"] and resumed["dev"] == full["dev"]
    a = read_metrics(tmp_path / "full" / "metrics.jsonl")
    b = read_metrics(tmp_path / "cut" / "metrics.jsonl")
    assert [(r["split"], r["step"]) for r in a] == [(r["split"], r["step"]) for r in b]
    for r, q in zip(a, b):
        assert r["loss"] == pytest.approx(q["loss"], abs=1e-6)
    # a finished run is read back, not retrained; its resume state is gone
    assert not (tmp_path / "cut" / "checkpoints").exists()
    assert finetune(checkpoint, task, tmp_path / "cut", CFG, seed=2, progress=False, resume=True) == json.loads(json.dumps(resumed))
    with pytest.raises(Exception, match="other settings"):
        finetune(checkpoint, task, tmp_path / "cut", CFG, seed=3, progress=False, resume=True)
    # a run written before a setting existed (here: without "adapter_size") ran at its default, and one
    # written while a task type's setting sat among the common ones ("crf"): still the same run
    results = tmp_path / "cut" / "results.json"
    older = json.loads(results.read_text())
    del older["config"]["adapter_size"]
    older["config"]["crf"] = False
    results.write_text(json.dumps(older))
    assert finetune(checkpoint, task, tmp_path / "cut", CFG, seed=2, progress=False, resume=True) == older
    with pytest.raises(Exception, match="other settings"):
        finetune(checkpoint, task, tmp_path / "cut", replace(CFG, task={"crf": True}), seed=2, progress=False, resume=True)


def test_logs_through_the_trainer(tmp_path, task, checkpoint):
    result = finetune(checkpoint, task, tmp_path / "out", CFG, seed=1, progress=False)
    out = tmp_path / "out"
    assert {"results.json", "predictions.jsonl", "metrics.jsonl", "loss.png", "best.safetensors"} <= {p.name for p in out.iterdir()}
    train = read_metrics(out / "metrics.jsonl", "train")
    dev = read_metrics(out / "metrics.jsonl", "dev")
    assert [r["step"] for r in train] == [6, 12, 18, 24] and [r["epoch"] for r in dev] == [1, 2, 3, 4]
    assert [h["train_loss"] for h in result["history"]] == [r["loss"] for r in train]
    assert [h["dev_accuracy"] for h in result["history"]] == [r["accuracy"] for r in dev]


@pytest.mark.parametrize("head", ["linear", "mlp", "bilstm"])
def test_features_mode_trains_only_mix_and_head(tmp_path, task, checkpoint, head):
    pre = load_pretrained(checkpoint, heads=False)
    before = {k: v.clone() for k, v in pre.backbone.state_dict().items()}
    cfg = FinetuneConfig(epochs=20, lr=3e-2, batch_size=16, max_seq_len=16, mode="features", head=head, head_hidden=16,
                         num_threads=1)
    result = finetune(pre, task, None, cfg, seed=0, progress=False)
    assert result["trainable_parameters"] < result["num_parameters"]
    for k, v in pre.backbone.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert result["test"]["accuracy"] > 0.6  # the word 'good'/'bad' is visible in frozen features


def test_scalar_mix_weights_all_layers():
    torch.manual_seed(0)
    from ptmkit.encoders import TransformerConfig

    enc = TransformerEncoder(TransformerConfig(vocab_size=30, hidden_size=8, num_layers=2, num_heads=2,
                                               intermediate_size=16, max_position=16, dropout=0.0, attention_dropout=0.0))
    clf = SequenceClassifier(enc, 2, mix="scalar", pooling="mean").eval()
    ids = torch.randint(5, 30, (2, 6))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        clf.mix.weights.copy_(torch.tensor([0.0, 1.0, 2.0]))
        clf.mix.gamma.fill_(0.5)
    states = enc(ids, output_hidden_states=True).hidden_states
    s = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    expected = 0.5 * sum(w * h for w, h in zip(s, states)).mean(dim=1)
    torch.testing.assert_close(clf.pool(batch), expected)


def test_line_progress_is_sparse():
    stream = io.StringIO()
    bar = LineProgress(1000, desc="train", stream=stream)
    for _ in range(1000):
        bar.set_postfix(loss="1.0")
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 20 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("train: 1000/1000 (100%)") and "eta" in lines[0] and "loss=1.0" in lines[0]


def test_results_json_is_what_finetune_returns(tmp_path, task, checkpoint):
    result = finetune(checkpoint, task, tmp_path / "o", FinetuneConfig(epochs=1, batch_size=32, max_seq_len=16), progress=False)
    assert json.loads((tmp_path / "o" / "results.json").read_text()) == json.loads(json.dumps(result))


def test_python_finetune_refuses_an_output_holding_its_model(tmp_path, task, checkpoint):
    import shutil

    from ptmkit.errors import PtmError

    proj = tmp_path / "proj"
    shutil.copytree(checkpoint, proj / "ck")
    with pytest.raises(PtmError, match="inside"):
        finetune(proj / "ck", task, proj, CFG, progress=False)
    assert sorted(p.name for p in proj.iterdir()) == ["ck"]
