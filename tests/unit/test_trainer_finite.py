"""The Trainer never saves weights holding a NaN or an infinity: a run whose weights or loss turn
non-finite stops with an error naming the step and the last good checkpoint, which is kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.tasks.callbacks import BEST_FILE, DevSelection
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.config import TrainConfig
from ptmkit.train.finite import nonfinite_parameter
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer

V, T = 20, 6


class Toy(nn.Module):
    """Predict ``(x + 1) mod V``; ``poison_at``: after that many training forwards the next one
    writes a NaN into ``out.weight`` (a diverged update); ``nan_loss_at``: forwards whose loss is NaN."""

    def __init__(self, poison_at: int | None = None, nan_loss_at: set[int] = frozenset()) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, 8)
        self.out = nn.Linear(8, V)
        self.calls, self.poison_at, self.nan_loss_at = 0, poison_at, set(nan_loss_at)

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        if self.training:
            self.calls += 1
            if self.poison_at is not None and self.calls > self.poison_at:
                with torch.no_grad():
                    self.out.weight[3, 2] = float("nan")
        logits = self.out(self.emb(batch["input_ids"]))  # [B, T, V]
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), batch["labels"].reshape(-1))
        if self.training and self.calls in self.nan_loss_at:
            loss = loss * float("nan")
        return StepOutput(loss, {}, n_tokens=batch["labels"].numel(), n_predictions=batch["labels"].numel())


class Source:
    steps_per_epoch = 4

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        x = torch.from_numpy(np.random.default_rng([epoch, step]).integers(0, V, size=(4, T)))
        return {"input_ids": x, "labels": (x + 1) % V}

    def eval_batches(self):
        yield self(99, 0)


def cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"batch_size": 4, "lr": 1e-2, "max_steps": 6, "log_every": 1, "eval_batches": 1,
                          "num_threads": 1, **kw})


def saved_steps(run) -> list[int]:
    return [s for s, _ in ckpt.checkpoint_steps(run)]


def all_finite(ck) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(str(ck / ckpt.MODEL_FILE)).values())


def test_nonfinite_parameter_names_the_first():
    model = Toy()
    assert nonfinite_parameter(model) is None
    with torch.no_grad():
        model.out.bias[0] = float("inf")
    assert nonfinite_parameter(model) == "out.bias"
    with torch.no_grad():
        model.emb.weight[1, 1] = float("nan")
    assert nonfinite_parameter(model) == "emb.weight"


def test_nonfinite_weights_are_never_saved(tmp_path):
    """With the guard off (``nan_guard=0``) a NaN update is applied; the next checkpoint is refused
    naming the step and the kept one."""
    run = tmp_path / "run"
    tr = Trainer(Toy(poison_at=3), Source(), cfg(save_every=2, nan_guard=0), run, progress_bar=False)
    with pytest.raises(PtmError) as err:
        tr.fit()
    message = str(err.value)
    assert "after step 4 the weights hold NaN or inf (emb.weight)" in message
    assert "checkpoint step-0000004 was not saved" in message
    assert f"the last good checkpoint {run / 'checkpoints' / 'step-0000002'} is kept" in message
    assert saved_steps(run) == [2] and ckpt.latest_checkpoint(run).name == "step-0000002"
    assert all_finite(ckpt.latest_checkpoint(run))


def test_a_run_ending_on_skipped_steps_is_an_error(tmp_path):
    """Steps 5 and 6 give NaN (skipped, fewer than nan_guard): the final weights gave NaN, so the run
    fails and keeps step 4; the mid-run checkpoint due at step 6 would be the same weights."""
    run = tmp_path / "run"
    tr = Trainer(Toy(nan_loss_at={5, 6}), Source(), cfg(save_every=2, nan_guard=5), run, progress_bar=False)
    with pytest.raises(PtmError, match=r"2 steps up to the last, step 6, had a non-finite loss or gradient, so the "
                                       r"final weights were not saved; the last good checkpoint .*step-0000004 is kept"):
        tr.fit()
    assert saved_steps(run) == [2, 4]


def test_no_checkpoint_during_a_nonfinite_streak(tmp_path):
    """A save due while the last step was skipped is left out; the run recovers and saves later."""
    run = tmp_path / "run"
    tr = Trainer(Toy(nan_loss_at={4}), Source(), cfg(save_every=2, keep_checkpoints=5), run, progress_bar=False)
    tr.fit()
    assert saved_steps(run) == [2, 6]


def test_streak_error_names_the_kept_checkpoint(tmp_path):
    run = tmp_path / "run"
    tr = Trainer(Toy(nan_loss_at={3, 4, 5}), Source(), cfg(save_every=2, nan_guard=3), run, progress_bar=False)
    with pytest.raises(PtmError, match=r"3 consecutive steps .*at step 5.*the last good checkpoint .*step-0000002 is kept"):
        tr.fit()
    assert saved_steps(run) == [2]


def test_a_diverged_final_evaluation_is_an_error(tmp_path):
    """Finite weights whose evaluation loss is NaN (the forward overflows) are not the run's result."""

    class Overflows(Toy):
        def forward(self, batch):
            out = super().forward(batch)
            return out if self.training else StepOutput(out.loss * float("nan"), {}, out.n_tokens, out.n_predictions)

    run = tmp_path / "run"
    with pytest.raises(PtmError, match=r"the evaluation loss after step 6 is nan, so the final weights were not saved; "
                                       r"no checkpoint had been saved yet"):
        Trainer(Overflows(), Source(), cfg(), run, eval_batches=Source(), progress_bar=False).fit()
    assert saved_steps(run) == []


def test_dev_selection_never_keeps_nonfinite_weights(tmp_path):
    """Fine-tuning's best epoch: weights holding NaN are refused, and best.safetensors keeps epoch 1."""
    run = tmp_path / "ft"
    run.mkdir()
    selection = DevSelection(lambda model: {"acc": 1.0 if nonfinite_parameter(model) else 0.5}, "acc", 2, run)
    tr = Trainer(Toy(poison_at=3), Source(), cfg(max_steps=4, nan_guard=0), run, callbacks=[selection],
                 progress_bar=False)
    with pytest.raises(PtmError, match=r"after step 4 the weights hold NaN or inf \(emb.weight\); epoch 2's weights "
                                       r"were not kept as the best"):
        tr.fit()
    assert selection.best_epoch == 1
    assert all(bool(torch.isfinite(t).all()) for t in load_file(str(run / BEST_FILE)).values())
