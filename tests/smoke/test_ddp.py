"""DDP under ``torchrun`` (2 CPU processes, gloo) matches one process with the same global batch.

This file is also the worker script: ``torchrun ... test_ddp.py RUN_DIR`` trains the toy model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ptmkit.train.config import TrainConfig
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer, read_metrics

V, T, B = 32, 8, 8


class ToyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, 16)
        self.norm = nn.LayerNorm(16)
        self.out = nn.Linear(16, V)

    def forward(self, batch):
        logits = self.out(torch.tanh(self.norm(self.emb(batch["x"]))))
        y = batch["y"]
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        return StepOutput(loss, {}, y.numel(), y.numel())


class ToySource:
    """Collates the whole global batch, keeps this rank's rows (as ``PretrainBatches`` does)."""

    steps_per_epoch = 4

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.rank, self.world_size = rank, world_size

    def __call__(self, epoch, step):
        rng = np.random.default_rng([5, epoch, step])
        x = torch.from_numpy(rng.integers(0, V, (B, T)))
        y = (x * 3 + 1) % V
        rows = B // self.world_size
        sl = slice(self.rank * rows, (self.rank + 1) * rows)
        return {"x": x[sl], "y": y[sl]}

    def eval_batches(self):
        yield self(50, 0)


def train(run_dir: Path, rank: int = 0, world_size: int = 1) -> dict:
    cfg = TrainConfig(batch_size=B, grad_accum=2, lr=3e-2, max_steps=10, warmup_steps=2, log_every=1,
                      save_every=5, eval_every=5, num_threads=1, device="cpu")
    src = ToySource(rank, world_size)
    return Trainer(ToyLM(), src, cfg, run_dir, src).fit()


def torchrun() -> str:
    exe = Path(sys.executable).with_name("torchrun")
    return str(exe) if exe.exists() else "torchrun"


@pytest.mark.slow
def test_ddp_matches_single_process(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [torchrun(), "--nproc_per_node", "2", "--standalone", __file__, str(tmp_path / "ddp")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    single = train(tmp_path / "single")
    ddp = read_metrics(tmp_path / "ddp" / "metrics.jsonl", "train")
    ref = read_metrics(tmp_path / "single" / "metrics.jsonl", "train")
    assert [r["step"] for r in ddp] == list(range(1, 11))  # rank 0 alone wrote the log
    np.testing.assert_allclose([r["loss"] for r in ddp], [r["loss"] for r in ref], rtol=1e-5)
    np.testing.assert_allclose([r["grad_norm"] for r in ddp], [r["grad_norm"] for r in ref], rtol=1e-4)
    assert ref[-1]["loss"] < ref[0]["loss"]
    (ev,) = [r for r in read_metrics(tmp_path / "ddp" / "metrics.jsonl", "eval") if r["step"] == 10]
    assert abs(ev["loss"] - single["eval_loss"]) < 1e-5
    assert (tmp_path / "ddp" / "checkpoints" / "step-0000010" / "trainer_state.pt").exists()
    state = torch.load(tmp_path / "ddp" / "checkpoints" / "step-0000010" / "trainer_state.pt", weights_only=False)
    assert len(state["rng"]) == 2 and state["world_size"] == 2
    json.loads((tmp_path / "ddp" / "checkpoints" / "step-0000010" / "config.json").read_text())


def test_ddp_pretrain_cli_matches_single_process(tmp_path):
    """``torchrun -m ptmkit.cli pretrain gpt2-tiny``: every position is predicted and every block is
    full, so both ranks hold equally many predictions and the curves agree to float rounding."""
    import random

    pytest.importorskip("ptmkit.data.batches")
    from ptmkit.data.prepare import prepare
    from ptmkit.tokenization import Tokenizer
    from ptmkit.workflows.pretrain import pretrain

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()
    text = tmp_path / "corpus.txt"
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "\n" for _ in range(200)))
    tok = Tokenizer.train([text], kind="bpe", vocab_size=80, min_frequency=1, lowercase=False)
    prepare([text], tok, tmp_path / "corpus", progress=False)
    overrides = [
        "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=32", "model.dropout=0.0",
        "model.attention_dropout=0.0", "train.batch_size=8", "train.seq_len=16", "train.max_steps=10",
        "train.warmup_steps=2", "train.log_every=1", "train.eval_every=5", "train.save_every=5",
        "train.eval_batches=2", "train.num_threads=1", "train.device=cpu", "train.lr=3e-3",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [torchrun(), "--nproc_per_node", "2", "--standalone", "-m", "ptmkit.cli", "pretrain", "gpt2-tiny",
           "--data", str(tmp_path / "corpus"), "-o", str(tmp_path / "ddp"), *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("final:") == 1  # rank 0 alone reports
    pretrain("gpt2-tiny", tmp_path / "corpus", tmp_path / "single", overrides, verbose=False)
    for split in ("train", "eval"):
        ddp = read_metrics(tmp_path / "ddp" / "metrics.jsonl", split)
        ref = read_metrics(tmp_path / "single" / "metrics.jsonl", split)
        assert [r["step"] for r in ddp] == [r["step"] for r in ref] and ref
        np.testing.assert_allclose([r["loss"] for r in ddp], [r["loss"] for r in ref], rtol=1e-4)
    train = read_metrics(tmp_path / "single" / "metrics.jsonl", "train")
    assert train[-1]["loss"] < train[0]["loss"]
    state = torch.load(tmp_path / "ddp" / "checkpoints" / "step-0000010" / "trainer_state.pt", weights_only=False)
    assert len(state["rng"]) == 2 and state["world_size"] == 2  # each rank's dropout stream is kept


if __name__ == "__main__":
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    train(Path(sys.argv[1]), rank, world)
    from ptmkit.train.distributed import cleanup

    cleanup()
