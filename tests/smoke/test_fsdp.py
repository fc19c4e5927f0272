"""FSDP under ``torchrun`` (2 CPU processes, gloo): the same losses as DDP and as one process with
the same global batch, and sharded checkpoints that resume at another world size (2 -> 1, 1 -> 2)
with the losses of an uninterrupted run.

This file is also the worker script: ``torchrun ... test_fsdp.py RUN_DIR STEPS KEY=VALUE...``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.train.checkpoint import resolve_checkpoint
from ptmkit.train.config import TrainConfig
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer, read_metrics

V, T, B, H = 40, 8, 8, 16


class ToyBlocks(nn.Module):
    """Embedding -> 3 residual blocks (a ``layers`` list: FSDP's units) -> output tied to the embedding."""

    def __init__(self, width: int = H) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, width)
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.Tanh())
                                    for _ in range(3))
        self.out = nn.Linear(width, V, bias=False)
        self.out.weight = self.emb.weight  # tied, as an MLM decoder
        # a buffer outside the state dict (as position tables are): every rank must get rank 0's
        self.register_buffer("scale", torch.full((width,), 0.5), persistent=False)

    def forward(self, batch):
        h = self.emb(batch["x"]) * self.scale
        for layer in self.layers:
            h = h + layer(h)
        y = batch["y"]
        loss = nn.functional.cross_entropy(self.out(h).reshape(-1, V), y.reshape(-1))
        return StepOutput(loss, {}, y.numel(), y.numel())


class ToySource:
    steps_per_epoch = 5

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.rank, self.world_size = rank, world_size

    def __call__(self, epoch, step):
        rng = np.random.default_rng([7, epoch, step])
        x = torch.from_numpy(rng.integers(0, V, (B, T)))
        y = (x * 3 + 1) % V
        rows = B // self.world_size
        sl = slice(self.rank * rows, (self.rank + 1) * rows)
        return {"x": x[sl], "y": y[sl]}

    def eval_batches(self):
        # ranks hold different numbers of held-out batches (rank r: r + 1), as small eval sets do
        for i in range(self.rank + 1):
            yield self(50, i)


def train(run_dir: Path, steps: int, overrides: dict, rank: int = 0, world_size: int = 1, resume: bool = False,
          meta: bool = False) -> dict:
    """meta: ranks other than 0 build the model on the meta device (as ``ptm pretrain`` does under FSDP)."""
    cfg = TrainConfig(batch_size=B, grad_accum=2, lr=2e-2, max_steps=steps, warmup_steps=2, log_every=1,
                      save_every=10, eval_every=10, num_threads=1, device="cpu", **overrides)
    src = ToySource(rank, world_size)
    with torch.device("meta") if meta and rank else contextlib.nullcontext():
        model = ToyBlocks()
    return Trainer(model, src, cfg, run_dir, src).fit(resume=resume)


def torchrun(run_dir: Path, steps: int, *settings: str, resume: bool = False) -> None:
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe) if exe.exists() else "torchrun", "--nproc_per_node", "2", "--standalone", __file__,
           str(run_dir), str(steps), *settings, *(["--resume"] if resume else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl", "train")]


def test_fsdp_and_ddp_match_one_process(tmp_path):
    # rank 1 builds the model on the meta device: its shards and its buffer come from rank 0
    torchrun(tmp_path / "fsdp", 20, "strategy=fsdp", "activation_checkpointing=true", "meta=true")
    torchrun(tmp_path / "ddp", 20, "strategy=ddp")
    train(tmp_path / "single", 20, {})
    ref = losses(tmp_path / "single")
    assert len(ref) == 20 and ref[-1] < ref[0]
    np.testing.assert_allclose(losses(tmp_path / "fsdp"), ref, rtol=1e-5)
    # the uneven held-out batches were all evaluated, none waiting on another rank's forward
    assert [r["step"] for r in read_metrics(tmp_path / "fsdp" / "metrics.jsonl", "eval")] == [10, 20]
    np.testing.assert_allclose(losses(tmp_path / "ddp"), ref, rtol=1e-5)
    last = tmp_path / "fsdp" / "checkpoints" / "step-0000020"
    assert (last / "sharded" / ".metadata").is_file() and (last / "model.safetensors").is_file()
    assert not (tmp_path / "fsdp" / "checkpoints" / "step-0000010" / "model.safetensors").exists()  # shards only
    # one process consolidates shards into the file the ranks gathered at the end, tied weights once
    copy = tmp_path / "copy"
    shutil.copytree(last, copy)
    (copy / "model.safetensors").unlink()
    assert resolve_checkpoint(copy) == copy
    gathered, consolidated = load_file(last / "model.safetensors"), load_file(copy / "model.safetensors")
    assert sorted(gathered) == sorted(consolidated) == ["emb.weight"] + [f"layers.{i}.{k}" for i in range(3)
                                                                          for k in ("0.bias", "0.weight", "1.bias", "1.weight")]
    assert all(torch.equal(gathered[k], consolidated[k]) for k in gathered)


def test_sharded_checkpoints_resume_at_another_world_size(tmp_path):
    """Saved by 2 ranks, resumed by 1, and the reverse: the losses of an uninterrupted run.
    (A constant LR: the first half stops at max_steps=10, and the schedule follows max_steps.)"""
    fsdp = {"strategy": "fsdp", "schedule": "constant"}
    train(tmp_path / "whole", 20, fsdp)
    ref = losses(tmp_path / "whole")
    torchrun(tmp_path / "two-one", 10, "strategy=fsdp", "schedule=constant")
    train(tmp_path / "two-one", 20, fsdp, resume=True)
    np.testing.assert_allclose(losses(tmp_path / "two-one"), ref, rtol=1e-5)
    train(tmp_path / "one-two", 10, fsdp)
    torchrun(tmp_path / "one-two", 20, "strategy=fsdp", "schedule=constant", "meta=true", resume=True)
    np.testing.assert_allclose(losses(tmp_path / "one-two"), ref, rtol=1e-5)


def test_lamb_under_fsdp_matches_one_process(tmp_path):
    """LAMB's trust ratio takes the norms of whole tensors, not of each rank's shard."""
    torchrun(tmp_path / "fsdp", 12, "strategy=fsdp", "optimizer=lamb")
    train(tmp_path / "single", 12, {"optimizer": "lamb"})
    ref = losses(tmp_path / "single")
    assert len(ref) == 12 and ref[-1] < ref[0]
    np.testing.assert_allclose(losses(tmp_path / "fsdp"), ref, rtol=1e-5)


def test_resuming_shards_with_another_model_config_is_refused(tmp_path):
    train(tmp_path / "run", 10, {"strategy": "fsdp"})
    cfg = TrainConfig(batch_size=B, max_steps=20, device="cpu", strategy="fsdp")
    trainer = Trainer(ToyBlocks(width=H * 2), ToySource(), cfg, tmp_path / "run")
    with pytest.raises(PtmError, match="does not fit the model built from the config"):
        trainer.fit(resume=True)


if __name__ == "__main__":
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    args = [a for a in sys.argv[3:] if a != "--resume"]
    settings = {k: (v == "true" if v in ("true", "false") else v) for k, v in (a.split("=", 1) for a in args)}
    meta = settings.pop("meta", False)
    train(Path(sys.argv[1]), int(sys.argv[2]), settings, rank, world, resume="--resume" in sys.argv, meta=meta)
    from ptmkit.train.distributed import cleanup

    cleanup()
