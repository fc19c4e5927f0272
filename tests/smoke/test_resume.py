"""Resuming after a kill reproduces the uninterrupted run's losses step for step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ptmkit.train import checkpoint as ckpt
from ptmkit.train.config import TrainConfig
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer, read_metrics

V, T = 32, 8


class Killed(Exception):
    """Stands in for SIGKILL: raised from a callback, so nothing after it runs."""


def kill_at(step: int):
    def callback(trainer, s):
        if s == step:
            raise Killed

    return callback


class ToyLM(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(V, 16)
        self.drop = nn.Dropout(0.2)  # its RNG stream must be restored too
        self.out = nn.Linear(16, V)

    def forward(self, batch):
        logits = self.out(self.drop(torch.tanh(self.emb(batch["x"]))))
        y = batch["y"]
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-100)
        return StepOutput(loss, {"n": (y != -100).float().mean()}, y.numel(), int((y != -100).sum()))


class ToySource:
    steps_per_epoch = 5  # several epochs in a run: the resumed position crosses an epoch boundary

    def __call__(self, epoch, step):
        rng = np.random.default_rng([7, epoch, step])
        x = torch.from_numpy(rng.integers(0, V, (8, T)))
        y = torch.where(torch.from_numpy(rng.random((8, T)) < 0.3), -100, (x * 5 + 2) % V)
        return {"x": x, "y": y}

    def eval_batches(self):
        for i in range(2):
            yield self(99, i)


def _run(run_dir, resume=False, callbacks=(), model_seed=0, **settings):
    cfg = TrainConfig(batch_size=8, grad_accum=2, lr=5e-2, max_steps=14, warmup_steps=3, log_every=1,
                      save_every=4, eval_every=5, keep_checkpoints=2, seed=3, num_threads=1, **settings)
    return Trainer(ToyLM(model_seed), ToySource(), cfg, run_dir, ToySource(), callbacks=callbacks).fit(resume=resume)


def _losses(run_dir, split="train"):
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl", split)]


@pytest.mark.parametrize("settings", [
    {},
    {"optimizer": "lamb", "schedule": "wsd", "decay_fraction": 0.5},  # the decay starts at step 7, before the cut
    {"optimizer": "adafactor"},
], ids=["adamw", "lamb-wsd", "adafactor"])
def test_resume_matches_uninterrupted_toy(tmp_path, settings):
    full = _run(tmp_path / "full", **settings)
    with pytest.raises(Killed):
        _run(tmp_path / "cut", callbacks=[kill_at(10)], **settings)  # checkpoint at 8, steps 9-10 logged then lost
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step-0000008"
    resumed = _run(tmp_path / "cut", resume=True, model_seed=123, **settings)  # other init: weights must come from disk
    a, b = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 15))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
    np.testing.assert_allclose([l for _, l in _losses(tmp_path / "cut", "eval")],
                               [l for _, l in _losses(tmp_path / "full", "eval")], atol=1e-6)
    assert resumed["eval_loss"] == pytest.approx(full["eval_loss"], abs=1e-6)


def test_resume_without_checkpoint_is_an_error(tmp_path):
    from ptmkit.errors import PtmError

    with pytest.raises(PtmError, match="nothing to resume"):
        _run(tmp_path / "empty", resume=True)
    assert not ckpt.checkpoint_steps(tmp_path / "empty")


def _write_corpus(path, docs=24):
    import random

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            for _ in range(6):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "\n")
            f.write("\n")
    return path


def test_resume_matches_uninterrupted_bert_mlm(tmp_path):
    """The real pipeline: bert-tiny (MLM + NSP, dropout on), killed after its first checkpoint."""
    pytest.importorskip("ptmkit.data.batches")
    from ptmkit.data.prepare import prepare
    from ptmkit.tokenization import Tokenizer
    from ptmkit.workflows.pretrain import pretrain

    text = _write_corpus(tmp_path / "corpus.txt")
    tok = Tokenizer.train([text], kind="wordpiece", vocab_size=100, min_frequency=1)
    prepare([text], tok, tmp_path / "corpus", progress=False)
    overrides = [
        "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
        "train.batch_size=8", "train.grad_accum=2", "train.seq_len=32", "train.max_steps=8", "train.warmup_steps=2",
        "train.log_every=1", "train.save_every=3", "train.eval_every=4", "train.eval_batches=2", "train.num_threads=1",
    ]
    kw = dict(data=tmp_path / "corpus", overrides=overrides, verbose=False)
    pretrain("bert-tiny", out_dir=tmp_path / "full", **kw)
    with pytest.raises(Killed):
        pretrain("bert-tiny", out_dir=tmp_path / "cut", callbacks=[kill_at(5)], **kw)
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step-0000003"
    pretrain("bert-tiny", out_dir=tmp_path / "cut", resume=True, **kw)
    a, b = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 9))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
    for split in ("train", "eval"):
        full = read_metrics(tmp_path / "full" / "metrics.jsonl", split)
        cut = read_metrics(tmp_path / "cut" / "metrics.jsonl", split)
        for r, s in zip(full, cut):
            for key in ("mlm_loss", "nsp_loss", "mlm_acc"):
                assert s[key] == pytest.approx(r[key], abs=1e-6)
