"""The CUDA path: bf16 and fp16 (loss scaling) training, the dense-peak MFU, FSDP over NCCL and
generation on a GPU.  Every test is marked ``cuda`` and skipped where PyTorch sees no GPU
(``benchmarks/gpu_check.sh`` runs them on one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from ptmkit.train import mfu
from ptmkit.train.config import TrainConfig
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer, read_metrics

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class Scaled(nn.Module):
    """A regression whose loss is multiplied by ``scale``: at 1e5 the fp16 gradients times the
    scaler's initial 2^16 overflow, so the scaler must skip steps and lower its scale."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(32, 32)
        self.scale = scale

    def forward(self, batch):
        y = self.lin(batch["x"])
        return StepOutput(self.scale * (y.float() - batch["x"]).square().mean(), {}, batch["x"].shape[0], 1)


class Source:
    steps_per_epoch = 8

    def __call__(self, epoch, step):
        g = torch.Generator().manual_seed(epoch * 100 + step)
        return {"x": torch.randn(64, 32, generator=g)}

    def eval_batches(self):
        yield self(9, 0)


def test_fp16_skips_overflowing_steps_and_keeps_training(tmp_path):
    cfg = TrainConfig(batch_size=64, max_steps=30, log_every=30, lr=1e-3, device="cuda", precision="fp16")
    trainer = Trainer(Scaled(1e5), Source(), cfg, tmp_path, Source())
    result = trainer.fit()
    (row,) = read_metrics(tmp_path / "metrics.jsonl", "train")
    assert row["overflow_skipped"] >= 1 and trainer.strategy.scaler.get_scale() < 2.0**16
    assert torch.isfinite(torch.tensor(result["train_loss"]))
    first = Scaled(1e5).cuda()(Source()(0, 0) | {"x": Source()(0, 0)["x"].cuda()}).loss.item()
    assert result["train_loss"] < first  # the steps that were taken made progress


def test_bf16_step_logs_mfu_against_the_table(tmp_path):
    cfg = TrainConfig(batch_size=64, max_steps=4, log_every=2, device="cuda", precision="bf16")
    trainer = Trainer(Scaled(1.0), Source(), cfg, tmp_path, Source())
    trainer.fit()
    name = torch.cuda.get_device_name()
    assert trainer.peak_flops == mfu.gpu_peak(name, torch.bfloat16)
    if trainer.peak_flops is not None:  # a GPU in the table
        assert all(0 < r["mfu"] < 1 for r in read_metrics(tmp_path / "metrics.jsonl", "train"))


def test_fsdp_pretrain_over_nccl_and_resume_on_one_process(tmp_path):
    """torchrun with one process per GPU (at least one), NCCL, bf16, FSDP and activation
    checkpointing; the sharded checkpoint then resumes without torchrun."""
    import random

    from ptmkit.workflows.pretrain import pretrain

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small and then saw it".split()
    text = tmp_path / "corpus.txt"
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "\n" for _ in range(400)))
    gpus = torch.cuda.device_count()
    settings = ["train.strategy=fsdp", "train.activation_checkpointing=true", "train.precision=bf16",
                f"train.batch_size={8 * gpus}", "train.seq_len=32", "train.save_every=5", "train.log_every=5",
                "train.device=cuda"]
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe), "--nproc_per_node", str(gpus), "--standalone", "-m", "ptmkit.cli", "pretrain", "bert-tiny",
           "--data", str(text), "-o", str(tmp_path / "run"), *settings, "train.max_steps=10"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl", "train")
    assert rows and all("mfu" in r for r in rows)
    pretrain("bert-tiny", text, tmp_path / "run", [*settings, "train.max_steps=15"], resume=True, verbose=False)
    steps = [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl", "train")]
    assert steps == [5, 10, 15]
    assert (tmp_path / "run" / "checkpoints" / "step-0000015" / "model.safetensors").is_file()


def test_cached_generation_on_the_gpu_matches_the_cpu():
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.generation import GenerationConfig, generate_ids

    cfg = TransformerConfig(vocab_size=100, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                            max_position=64, type_vocab_size=0, norm="pre", pooler=False)
    torch.manual_seed(0)
    encoder = TransformerEncoder(cfg).eval()
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
    greedy = GenerationConfig(max_new_tokens=8, greedy=True)
    cpu = generate_ids(encoder, "causal_lm", prompts, greedy)
    gpu = generate_ids(encoder.cuda(), "causal_lm", prompts, greedy)
    assert cpu == gpu and all(len(ids) == 8 for ids in cpu)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "inductor"])
def test_mlm_step_on_the_gpu_equals_the_cpu(compiled):
    """On a GPU the MLM head runs every slot with the unused ones ignored (no host read-back), and
    the vocabulary check is a device-side assert; eager and compiled by inductor, the loss, the
    prediction count and the gradients equal the CPU's gather of the labelled slots (fp32)."""
    import copy

    from conftest import mlm_batch, tiny_mlm

    torch._dynamo.reset()
    cpu = tiny_mlm()
    gpu = copy.deepcopy(cpu).cuda()
    batch = mlm_batch(cpu)
    a = cpu(batch)
    run = torch.compile(gpu) if compiled else gpu
    b = run({k: v.cuda() for k, v in batch.items()})
    a.loss.backward()
    b.loss.backward()
    assert torch.allclose(a.loss, b.loss.cpu(), rtol=1e-5) and int(a.n_predictions) == int(b.n_predictions)
    for (name, p), q in zip(cpu.named_parameters(), gpu.parameters()):
        assert torch.allclose(p.grad, q.grad.cpu(), rtol=1e-4, atol=1e-6), name
    torch._dynamo.reset()


def test_linear_cross_entropy_on_the_gpu_weights_ignored_rows():
    """On a GPU ignored targets stay in the tiles with weight 0 (no host read of their count):
    the loss and gradients equal plain cross-entropy's, in float64."""
    import torch.nn.functional as F

    from ptmkit.nn.linear_ce import linear_cross_entropy

    torch.manual_seed(0)
    h, w, b = (torch.randn(*s, dtype=torch.float64, device="cuda", requires_grad=True) for s in [(37, 5), (101, 5), (101,)])
    t = torch.randint(0, 101, (37,), device="cuda")
    t[[3, 11, 36]] = -100
    loss = linear_cross_entropy(h, w, b, t)
    got = torch.autograd.grad(loss, (h, w, b))
    ref = F.cross_entropy(F.linear(h, w, b), t, ignore_index=-100)
    want = torch.autograd.grad(ref, (h, w, b))
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-12)
