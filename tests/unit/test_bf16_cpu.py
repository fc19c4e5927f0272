"""``train.precision=bf16`` on CPU: autocast runs the matmuls in bfloat16 while the weights, their
gradients and the optimizer state stay float32, and the loss matches float32 training."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import special_ids
from torch import nn

from ptmkit.data.batches import PretrainBatches
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.clm import CausalLM, CLMConfig
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.train.config import TrainConfig
from ptmkit.train.trainer import Trainer

TOK = special_ids(300)


def corpus(n_sent: int = 300, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    sent = np.concatenate([[0], np.cumsum(rng.integers(3, 21, size=n_sent))]).astype(np.int64)
    tokens = rng.integers(5, 300, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, n_sent], dtype=np.int64))


def build(kind: str) -> PretrainModel:
    torch.manual_seed(0)
    norm = "pre" if kind == "clm" else "post"
    enc = TransformerEncoder(TransformerConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=4,
                                               intermediate_size=128, max_position=64, norm=norm))
    obj = CausalLM(CLMConfig(), enc, TOK) if kind == "clm" else MaskedLM(MLMConfig(nsp=False), enc, TOK)
    return PretrainModel(enc, obj)


def train(kind: str, precision: str, steps: int = 3) -> tuple[PretrainModel, Trainer, list[float]]:
    model = build(kind)
    c = corpus()
    spans = model.objective.example_spans(c, 48)
    batches = PretrainBatches(c, model.objective, spans, 48, 16, seed=0)
    cfg = TrainConfig(batch_size=16, seq_len=48, lr=1e-3, max_steps=steps, log_every=1, device="cpu",
                      precision=precision, seed=0)
    trainer = Trainer(model, batches, cfg, progress_bar=False)
    losses = []
    for _ in range(steps):
        trainer.train_step()
        losses.append(trainer.window.loss / trainer.window.weight)
        trainer.window = type(trainer.window)()
    return model, trainer, losses


@pytest.mark.parametrize("kind", ["mlm", "clm"])  # clm: the tiled linear + cross-entropy path
def test_bf16_cpu_step_matches_fp32_and_keeps_fp32_state(kind: str) -> None:
    model32, _, loss32 = train(kind, "fp32")
    model16, trainer, loss16 = train(kind, "bf16")
    # bfloat16 keeps 8 bits of mantissa: the losses agree to a few parts in a thousand, not exactly.
    np.testing.assert_allclose(loss16, loss32, rtol=2e-2)
    assert loss16 != loss32  # autocast did change the arithmetic
    for p in model16.parameters():
        assert p.dtype == torch.float32
    for state in trainer.optimizer.state.values():
        assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == torch.float32
    # The weights moved as in fp32 training, up to bf16 rounding of the gradients.
    for (name, a), b in zip(model16.named_parameters(), model32.parameters()):
        assert torch.allclose(a, b, atol=5e-3), name


def test_bf16_cpu_runs_matmuls_in_bf16_and_returns_fp32_loss() -> None:
    model = build("mlm")
    c = corpus()
    spans = model.objective.example_spans(c, 48)
    batch = PretrainBatches(c, model.objective, spans, 48, 8, seed=0)(0, 0)
    seen = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
             for m in model.modules() if isinstance(m, nn.Linear)]
    cfg = TrainConfig(batch_size=8, seq_len=48, max_steps=1, device="cpu", precision="bf16")
    trainer = Trainer(model, PretrainBatches(c, model.objective, spans, 48, 8, seed=0), cfg, progress_bar=False)
    with trainer._autocast():
        out = model(batch)
    for h in hooks:
        h.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert out.loss.dtype == torch.float32


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path) -> None:
    from ptmkit.train.trainer import cpu_has_native_bf16

    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512bw avx512_vnni\n")
    assert cpu_has_native_bf16(str(f)) is False
    f.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n")
    assert cpu_has_native_bf16(str(f)) is True
    f.write_text("flags\t\t: fpu amx_tile amx_bf16\n")
    assert cpu_has_native_bf16(str(f)) is True
    assert cpu_has_native_bf16(str(tmp_path / "missing")) is None
