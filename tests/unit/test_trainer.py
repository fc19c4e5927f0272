"""Trainer, optimizer groups and LR schedules on a toy model (checked against formulas/references)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from ptmkit.config import from_dict
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.train.config import TrainConfig
from ptmkit.train.optim import Schedule, build_optimizer, build_schedule, param_groups
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer, read_metrics, split_batch

V, T = 40, 8


class ToyLM(nn.Module):
    """Predict ``(3 x + 1) mod V`` per token; masked positions have label -100."""

    def __init__(self, hidden: int = 16, dropout: float = 0.1, nan_at: set[int] | None = None) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, V)
        self.calls = 0
        self.nan_at = nan_at or set()

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        h = self.drop(torch.tanh(self.fc(self.norm(self.emb(batch["input_ids"])))))
        logits = self.out(h)
        labels = batch["labels"]
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
        if self.training:
            self.calls += 1
            if self.calls in self.nan_at:
                loss = loss * float("nan")
        keep = labels != -100
        acc = (logits.argmax(-1)[keep] == labels[keep]).float().mean()
        return StepOutput(loss, {"acc": acc}, n_tokens=labels.numel(), n_predictions=int(keep.sum()))


class ToySource:
    """Deterministic batches: a pure function of (seed, epoch, step), rank rows of the global batch."""

    def __init__(self, batch_size: int, n: int = 256, seed: int = 0, mask_p: float = 0.5, rank: int = 0, world_size: int = 1):
        data_rng = np.random.default_rng(1234)
        self.x = data_rng.integers(0, V, size=(n, T))
        self.batch_size, self.seed, self.mask_p = batch_size, seed, mask_p
        self.rank, self.world_size = rank, world_size
        self.steps_per_epoch = n // batch_size

    def _batch(self, idx: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        x = torch.from_numpy(self.x[idx])
        y = (3 * x + 1) % V
        if self.mask_p > 0:
            y = torch.where(torch.from_numpy(rng.random(x.shape) < self.mask_p), -100, y)
        rows = len(idx) // self.world_size
        sl = slice(self.rank * rows, (self.rank + 1) * rows)
        return {"input_ids": x[sl], "labels": y[sl]}

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.x))
        idx = perm[step * self.batch_size : (step + 1) * self.batch_size]
        return self._batch(idx, np.random.default_rng([self.seed, epoch, step]))

    def eval_batches(self):
        rng = np.random.default_rng([self.seed, 99])
        for s in range(0, 64, self.batch_size):
            yield self._batch(np.arange(s, s + self.batch_size), rng)


def cfg(**kw) -> TrainConfig:
    base = dict(batch_size=8, lr=1e-2, max_steps=12, log_every=1, warmup_steps=2, eval_every=6, eval_batches=4, num_threads=1)
    base.update(kw)
    return TrainConfig(**base)


# -- config ---------------------------------------------------------------------------------


def test_unknown_key_names_nearest():
    with pytest.raises(PtmError, match="did you mean 'warmup_steps'"):
        from_dict(TrainConfig, {"warmup_step": 10}, "train")
    c = from_dict(TrainConfig, {"betas": [0.9, 0.98], "lr": 3e-4}, "train")
    assert c.betas == (0.9, 0.98)


@pytest.mark.parametrize(
    "kw", [{"batch_size": 0}, {"schedule": "cosin"}, {"precision": "fp8"}, {"batch_size": 10, "grad_accum": 3}, {"lr": -1.0}]
)
def test_invalid_config(kw):
    with pytest.raises(PtmError):
        TrainConfig(**kw)


# -- schedules ------------------------------------------------------------------------------


def test_schedules_match_formulas():
    w, total = 10, 100
    lin = Schedule("linear", w, total)
    assert lin(0) == pytest.approx(1 / w) and lin(w - 1) == pytest.approx(1.0)
    for s in (10, 40, 99):
        assert lin(s) == pytest.approx((total - s) / (total - w))
    cos = Schedule("cosine", w, total, min_lr_ratio=0.1)
    for s in (10, 55, 100):
        p = (s - w) / (total - w)
        assert cos(s) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
    assert Schedule("constant", w, total)(80) == 1.0
    inv = Schedule("inverse_sqrt", w, total)
    assert inv(w - 1) == pytest.approx(1.0) and inv(39) == pytest.approx(math.sqrt(10 / 40))
    # Howard & Ruder (2018) eq. 3 with T=100, cut_frac=0.1, ratio=32.
    st = Schedule("slanted_triangular", 0, total, cut_frac=0.1, ratio=32)
    cut = 10
    for t in (1, 5, 10, 50, 100):
        p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / 0.1 - 1))
        assert st(t - 1) == pytest.approx((1 + p * 31) / 32)
    assert st(cut - 1) == pytest.approx(1.0)


def test_wsd_warms_up_holds_then_decays_over_its_last_fraction():
    w, total = 10, 100  # decay_fraction 0.1: the last 10 steps, s = 90 .. 99
    wsd = Schedule("wsd", w, total, min_lr_ratio=0.1, decay_fraction=0.1)
    assert wsd(0) == pytest.approx(0.1) and wsd(w - 1) == 1.0  # warmup end
    assert wsd(w) == wsd(50) == wsd(89) == 1.0  # stable at the peak
    assert wsd(90) == 1.0  # decay start: the first decay step still trains at the peak
    assert wsd(95) == pytest.approx(0.1 + 0.9 * 0.5)
    assert wsd(total - 1) == pytest.approx(0.1 + 0.9 / 10)  # the last step; the floor is reached after it
    assert wsd(total) == pytest.approx(0.1)
    p = 5 / 10
    assert Schedule("wsd", w, total, decay_shape="cosine")(95) == pytest.approx(0.5 * (1 + math.cos(math.pi * p)))
    assert Schedule("wsd", w, total, decay_shape="sqrt")(95) == pytest.approx(1 - math.sqrt(p))
    # the decay never starts inside the warmup; the default floor is 0
    short = Schedule("wsd", 8, 10, decay_fraction=0.5)
    assert short(7) == 1.0 and short(9) == pytest.approx(0.5)
    assert build_schedule(TrainConfig(schedule="wsd", max_steps=30))(29) == pytest.approx(1 / 3)


def test_scheduler_drives_optimizer_lr(tmp_path):
    c = cfg(schedule="linear", warmup_steps=3, max_steps=10, eval_every=0)
    tr = Trainer(ToyLM(dropout=0.0), ToySource(8), c, tmp_path)
    tr.fit()
    lrs = [r["lr"] for r in read_metrics(tmp_path / "metrics.jsonl", "train")]
    expect = [c.lr * Schedule("linear", 3, 10)(s) for s in range(10)]
    np.testing.assert_allclose(lrs, expect, rtol=1e-9)


# -- parameter groups -----------------------------------------------------------------------


class TinyEncoder(Encoder):
    """Two "layers"; depth comes from its own declaration (``layer_index``), not from names."""

    name = "tiny"

    def __init__(self) -> None:
        super().__init__(None)
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(10, 4)
        self.embeddings.norm = nn.LayerNorm(4)
        self.layers = nn.ModuleList([nn.Module() for _ in range(2)])
        for layer in self.layers:
            layer.ffn = nn.Linear(4, 4)
            layer.attn_norm = nn.LayerNorm(4)

    @property
    def num_layers(self) -> int:
        return 2

    def layer_index(self, name: str) -> int:
        return 0 if name.startswith("embeddings.") else int(name.split(".")[1]) + 1


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = TinyEncoder()
        self.decoder = nn.Linear(4, 10)
        self.decoder.weight = self.backbone.embeddings.word_embeddings.weight  # tied
        # named like an encoder layer but outside the encoder (as ELECTRA's generator): not a layer
        self.generator = nn.Module()
        self.generator.layers = nn.ModuleList([nn.Linear(4, 4)])


def test_param_groups_no_decay_and_layer_decay():
    m = Tied()
    groups = param_groups(m, weight_decay=0.1, lr=1.0)
    names = {n: g["weight_decay"] for g in groups for n in g["names"]}
    assert names["backbone.embeddings.word_embeddings.weight"] == 0.1
    assert names["backbone.layers.0.ffn.weight"] == 0.1
    for n in ("backbone.embeddings.norm.weight", "backbone.embeddings.norm.bias", "backbone.layers.1.attn_norm.weight",
              "backbone.layers.0.ffn.bias", "decoder.bias"):
        assert names[n] == 0.0
    assert "decoder.weight" not in names  # the tied alias is not a second parameter
    assert sum(len(g["params"]) for g in groups) == len(list(m.parameters()))
    groups = param_groups(m, 0.1, lr=1.0, layer_decay=0.5)
    lr = {n: g["lr"] for g in groups for n in g["names"]}
    assert lr["decoder.bias"] == 1.0 and lr["generator.layers.0.weight"] == 1.0
    assert lr["backbone.layers.1.ffn.weight"] == 0.5 and lr["backbone.layers.0.ffn.weight"] == 0.25
    assert lr["backbone.embeddings.word_embeddings.weight"] == 0.125
    opt = build_optimizer(m, TrainConfig(lr=1e-3, layer_decay=0.5))
    assert isinstance(opt, torch.optim.AdamW)


# -- the loop -------------------------------------------------------------------------------


def test_split_batch():
    b = {"a": torch.arange(10).view(5, 2), "b": torch.arange(5), "s": "x"}
    parts = split_batch(b, 2)
    assert [p["a"].shape[0] for p in parts] == [3, 2] and parts[1]["s"] == "x"
    assert torch.equal(torch.cat([p["b"] for p in parts]), b["b"])


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_grad_accum_equals_full_batch():
    # Every position predicted: the mean of equal-size micro-batch means is the batch mean.
    results = []
    for ga in (1, 2, 4):
        torch.manual_seed(0)
        model = ToyLM(dropout=0.0)
        tr = Trainer(model, ToySource(8, mask_p=0.0), cfg(grad_accum=ga, max_steps=4, eval_every=0), None)
        tr.fit()
        results.append(_params(model))
    torch.testing.assert_close(results[1], results[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(results[2], results[0], atol=1e-6, rtol=1e-5)


def test_fit_logs_evaluates_and_learns(tmp_path):
    torch.manual_seed(0)
    src = ToySource(8)
    tr = Trainer(ToyLM(), src, cfg(max_steps=40, lr=3e-2, log_every=5, eval_every=20), tmp_path, eval_batches=src)
    result = tr.fit()
    train = read_metrics(tmp_path / "metrics.jsonl", "train")
    evals = read_metrics(tmp_path / "metrics.jsonl", "eval")
    assert [r["step"] for r in train] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert [r["step"] for r in evals] == [20, 40]
    assert train[-1]["loss"] < train[0]["loss"] - 0.5
    for r in train:
        assert {"loss", "acc", "lr", "grad_norm", "tokens_per_s", "elapsed"} <= set(r)
    assert evals[-1]["ppl"] == pytest.approx(math.exp(evals[-1]["loss"]))
    assert result["eval_loss"] == evals[-1]["loss"] and result["train_loss"] == train[-1]["loss"]
    assert (tmp_path / "loss.png").stat().st_size > 1000
    assert (tmp_path / "checkpoints" / "step-0000040" / "model.safetensors").exists()


def test_logged_loss_is_token_weighted_window_mean(tmp_path):
    # Reference: the loss of the untouched model on the first batch (all micro-batches pooled).
    torch.manual_seed(0)
    model = ToyLM(dropout=0.0)
    src = ToySource(8, mask_p=0.6)
    batch = src(0, 0)
    with torch.no_grad():
        ref = ToyLM.forward(model, batch).loss.item()
    tr = Trainer(model, src, cfg(max_steps=1, grad_accum=4, eval_every=0), tmp_path)
    tr.fit()
    (rec,) = read_metrics(tmp_path / "metrics.jsonl", "train")
    assert rec["loss"] == pytest.approx(ref, rel=1e-6)


def test_eval_is_token_weighted_and_no_grad(tmp_path):
    torch.manual_seed(0)
    model = ToyLM(dropout=0.5)
    src = ToySource(8)
    tr = Trainer(model, src, cfg(max_steps=1, eval_batches=3), None, eval_batches=src)
    num = den = 0.0
    model.eval()
    with torch.no_grad():
        for i, b in enumerate(src.eval_batches()):
            if i == 3:
                break
            out = model(b)
            num += out.loss.item() * out.n_predictions
            den += out.n_predictions
    model.train()
    rec = tr.evaluate()
    assert rec["loss"] == pytest.approx(num / den, rel=1e-6)
    assert model.training  # restored


def test_nan_guard_skips_then_aborts(tmp_path, caplog):
    torch.manual_seed(0)
    model = ToyLM(dropout=0.0, nan_at={3})
    tr = Trainer(model, ToySource(8), cfg(max_steps=5, eval_every=0, nan_guard=2), tmp_path)
    snapshots = []
    tr.callbacks.append(lambda t, s: snapshots.append(_params(t.model).clone()))
    tr.fit()
    assert torch.equal(snapshots[2], snapshots[1])  # step 3 was skipped
    assert not torch.equal(snapshots[3], snapshots[2])
    assert "non-finite" in caplog.text
    assert any(r.get("skipped") == 1 for r in read_metrics(tmp_path / "metrics.jsonl", "train"))

    model = ToyLM(dropout=0.0, nan_at={2, 3, 4})
    tr = Trainer(model, ToySource(8), cfg(max_steps=6, eval_every=0, nan_guard=3), None)
    with pytest.raises(PtmError, match="3 consecutive"):
        tr.fit()


def test_batch_not_divisible_by_micro_batches():
    with pytest.raises(PtmError):
        Trainer(ToyLM(), ToySource(8), TrainConfig(batch_size=6, grad_accum=4), None)
    with pytest.raises(PtmError, match="fewer examples"):
        Trainer(ToyLM(), ToySource(8, n=4), TrainConfig(batch_size=8), None)


def test_max_seconds_stops_early_then_evaluates_and_saves(tmp_path):
    torch.manual_seed(0)
    src = ToySource(8)

    def slow(trainer, step):  # each step "takes" 0.05 s
        import time

        time.sleep(0.05)

    tr = Trainer(ToyLM(), src, cfg(max_steps=1000, max_seconds=0.3, eval_every=0), tmp_path, eval_batches=src, callbacks=[slow])
    result = tr.fit()
    assert result["stopped_early"] and 2 <= result["step"] < 100
    assert "eval_loss" in result
    assert (tmp_path / "checkpoints" / f"step-{result['step']:07d}").is_dir()
    with pytest.raises(PtmError, match="max_seconds"):
        TrainConfig(max_seconds=-1)
