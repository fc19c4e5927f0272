"""The training loop: one explicit loop for every model whose ``forward(batch) -> StepOutput``.

Per optimizer step ``g`` (0-based): the batch is ``train_batches(g // steps_per_epoch,
g % steps_per_epoch)`` (a pure function, so resuming jumps to the exact data position);
this rank's rows are split into ``grad_accum`` micro-batches, each loss is scaled by
``1 / grad_accum`` and back-propagated (under DDP gradients are all-reduced only on the last
micro-batch), then gradients are clipped, AdamW steps and the LR schedule advances.

Logged losses are token-weighted: each micro-batch loss is weighted by its ``n_predictions``
and the sums are all-reduced over ranks, so a DDP run logs the same loss as one process
seeing the whole global batch.  (The *gradient* is the mean of the per-rank means, as in
every DDP implementation; when ranks hold different numbers of predicted positions this
differs slightly from the global mean, so DDP and single-process loss curves agree to a
small tolerance rather than exactly.)

A sub-module whose ``carries_state`` is true (an objective's memory of the previous segment,
see :class:`ptmkit.objectives.base.Objective`) keeps state from one step to the next: its
``carried_state_dict()`` goes into every checkpoint's ``trainer_state.pt`` under ``carried`` and
is handed back on resume, so the resumed run continues step for step; it is not in the weights.
Such a run is refused under DDP (each rank would hold only its rows' state).

A sub-module with an ``at_train_step(step)`` method is told the number of completed optimizer
steps before every training step and evaluation (a schedule inside the model, such as ELECTRA's
sampling temperature): a function of the step alone, so a resumed run is exact.

A step whose loss or gradient is not finite is skipped (the weights stay as they were);
``train.nan_guard`` such steps in a row stop the run with an error.  No checkpoint is written with
a NaN or an infinity in its weights (one ``isfinite`` reduction per parameter before each save):
the run stops with an error naming the step and the last good checkpoint, which is kept.

``train.precision=bf16`` runs the forward pass under ``torch.autocast`` in bfloat16 on CUDA and
on CPU alike; the weights, their gradients and the optimizer state stay float32 (autocast casts
per operation), and the loss is reduced in float32.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from ptmkit import outputs
from ptmkit.config import check_finite, to_dict
from ptmkit.errors import PtmError
from ptmkit.flops import counter as flop_counter
from ptmkit.train import checkpoint as ckpt
from ptmkit.train import distributed as dist
from ptmkit.train import mfu, resume, sharding
from ptmkit.train.callback import Callback, TrainerCallback
from ptmkit.train.config import TrainConfig
from ptmkit.train.finite import ADVICE, nonfinite_on_any_rank
from ptmkit.train.heap import keep_freed_memory
from ptmkit.train.metrics_log import (
    LOSS_PLOT,
    METRICS_FILE,
    MetricsLog,
    plot_losses,
    read_metrics,
)
from ptmkit.train.optim import build_optimizer, build_scheduler
from ptmkit.train.precision import autocast, cpu_has_native_bf16, warn_if_emulated
from ptmkit.train.progress import progress
from ptmkit.train.state import Window, seed_everything, split_batch, to_device
from ptmkit.train.step import BatchSource
from ptmkit.train.strategy import Strategy

log = logging.getLogger(__name__)


__all__ = ["LOSS_PLOT", "METRICS_FILE", "Callback", "Trainer", "TrainerCallback", "plot_losses", "read_metrics",
           "cpu_has_native_bf16", "seed_everything", "split_batch"]


class Trainer:
    """Train ``model`` on ``train_batches`` as ``cfg`` says; write logs and checkpoints to ``run_dir``.

    model: an ``nn.Module`` with ``forward(batch) -> StepOutput``.
    train_batches: a :class:`~ptmkit.train.step.BatchSource` (this rank's rows of each global batch).
    eval_batches: a source whose ``eval_batches()`` yields evaluation batches (``None``: no evaluation).
    checkpoint_extra: ``callable(dir)`` or ``{"config": dict, "tokenizer": Tokenizer}``, written into
        each checkpoint next to the weights.
    callbacks: :class:`TrainerCallback` objects, or plain ``callback(trainer, step)`` functions
        called after every optimizer step (after logging, eval, save).
    desc: the progress bar's label; progress_bar: show it (on the main rank).
    """

    def __init__(
        self,
        model: nn.Module,
        train_batches: BatchSource,
        cfg: TrainConfig,
        run_dir: Path | str | None = None,
        eval_batches: BatchSource | None = None,
        checkpoint_extra: ckpt.Extra = None,
        callbacks: Iterable[Callback] = (),
        desc: str = "train",
        progress_bar: bool = True,
    ) -> None:
        check_finite(cfg, "train")  # a TrainConfig built directly, not through from_dict
        self.cfg = cfg
        self.desc = desc
        self.progress_bar = progress_bar
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.train_batches = train_batches
        self.eval_source = eval_batches
        self.checkpoint_extra = checkpoint_extra
        self.callbacks = list(callbacks)
        self.dist = dist.init_distributed(cfg.device, group_of_one=cfg.strategy == "fsdp")
        self.device = dist.resolve_device(cfg.device, self.dist)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        if self.device.type == "cpu":
            keep_freed_memory()  # no page faults for each step's activations (ptmkit.train.heap)
        if cfg.batch_size % (self.dist.world_size * cfg.grad_accum):
            raise PtmError(
                f"train.batch_size={cfg.batch_size} must be divisible by world_size x grad_accum = "
                f"{self.dist.world_size} x {cfg.grad_accum}"
            )
        if int(getattr(train_batches, "steps_per_epoch", 0)) <= 0:
            raise PtmError("the training data yields no batch: it has fewer examples than train.batch_size")
        self.strategy = Strategy(cfg, self.device, self.dist)  # DDP / FSDP, checkpointing, compile, fp16
        # a model built on the meta device (an FSDP rank other than 0) gets its memory when sharded
        self.model = model if sharding.on_meta(model) else model.to(self.device)
        # Modules that carry state from one step to the next (an objective's memory): saved in
        # the training checkpoint, restored on resume, never part of the weights.
        self.carriers = {name: m for name, m in self.model.named_modules() if getattr(m, "carries_state", False) is True}
        if self.carriers and self.dist.world_size > 1:
            switches = sorted({getattr(m, "carried_state_switch", "") for m in self.carriers.values()} - {""})
            raise PtmError(
                f"{', '.join(sorted(n or 'the model' for n in self.carriers))} carries state across steps (a memory), "
                f"which is not supported with {self.dist.world_size} processes (train.strategy={cfg.strategy}); "
                f"train on one process, or switch the memory off"
                + (f" ({', '.join(switches)})" if switches else "")
            )
        self.strategy.prepare(self.model)  # before the optimizer: FSDP replaces the parameters by shards
        # Modules that follow the optimizer step (a schedule inside the model).
        self.step_listeners = [m for m in self.model.modules() if callable(getattr(m, "at_train_step", None))]
        self.optimizer = build_optimizer(self.model, cfg)
        self.scheduler = build_scheduler(self.optimizer, cfg)
        self.ddp_model = self.train_model = self.model  # the DDP wrapper and the compiled module, set in fit()
        self.flops_per_step: float | None = None  # this rank's, counted during the first step of fit()
        self.peak_flops: float | None = None
        self.step = 0
        self.window = Window()
        self.nan_streak = 0
        self.elapsed = 0.0
        self.last_train: dict[str, Any] = {}
        self.last_eval: dict[str, Any] = {}
        self.stopped_early = False
        self.metrics_log = MetricsLog(self.run_dir, cfg.report_to, self.is_main)  # metrics.jsonl (+ TensorBoard)
        if cfg.precision == "bf16" and self.device.type not in ("cuda", "cpu"):
            log.warning("train.precision=bf16 is supported on CUDA and CPU; training in fp32 on %s", self.device)
        warn_if_emulated(cfg.precision, self.device)

    # -- helpers ----------------------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.cfg.precision, self.device)

    def _tell_step(self) -> None:
        for m in self.step_listeners:
            m.at_train_step(self.step)

    def _write(self, record: dict[str, Any]) -> None:
        if self.run_dir is None or not self.is_main:
            return
        self.metrics_log.write(record)

    def write_record(self, record: dict[str, Any]) -> None:
        """Append a record (e.g. a callback's dev scores) to the run's metrics file (main rank)."""
        self._write(record)

    @property
    def stateful_callbacks(self) -> list[TrainerCallback]:
        return [cb for cb in self.callbacks if isinstance(cb, TrainerCallback)]

    def _lr(self) -> float:
        return max(g["lr"] for g in self.optimizer.param_groups)

    # -- one optimizer step -----------------------------------------------------------------
    def train_step(self) -> None:
        """Run optimizer step number ``self.step + 1`` on global batch ``self.step``."""
        cfg = self.cfg
        self._tell_step()
        spe = int(self.train_batches.steps_per_epoch)
        batch = self.train_batches(self.step // spe, self.step % spe)
        micro = split_batch(batch, cfg.grad_accum)
        finite = True
        loss_sum = 0.0
        outs = []
        # the first step of a run counts its FLOPs (eagerly: the counter sees what runs)
        counting = self.flops_per_step is None
        forward_model = self.ddp_model if counting else self.train_model
        with flop_counter() if counting else contextlib.nullcontext() as fc:
            for i, mb in enumerate(micro):
                mb = to_device(mb, self.device)
                with self.strategy.sync(forward_model, self.model, last=i == len(micro) - 1):
                    with self._autocast():
                        out = forward_model(mb)
                    self.strategy.backward(out.loss.float() / cfg.grad_accum)
                value = float(out.loss.detach())
                finite = finite and math.isfinite(value)
                outs.append((out, value))
                loss_sum += value
        if counting:
            self.flops_per_step = float(fc.get_total_flops())
        self.strategy.unscale(self.optimizer)
        grad_norm = self.strategy.grad_norm(self.model)
        # under fp16 an overflowing gradient is the loss scaler's to skip, not a divergence
        finite = finite and (math.isfinite(grad_norm) or self.strategy.scaler is not None)
        if dist.is_distributed():  # every rank must take the same decision
            flag = torch.tensor([0.0 if finite else 1.0], device=self.device if self.device.type == "cuda" else "cpu")
            finite = float(dist.all_reduce_sum(flag)) == 0.0
        lr = self._lr()
        if finite or cfg.nan_guard == 0:
            if not self.strategy.step(self.optimizer):
                self.window.overflow += 1
            self.nan_streak = 0
            for out, value in outs:
                self.window.add(out, value)
            self.window.grad_norm += grad_norm
            self.window.steps += 1
        else:
            self.strategy.skip()
            self.nan_streak += 1
            self.window.skipped += 1
            log.warning(
                "step %d: non-finite loss or gradient (loss %.4g, grad norm %.4g); step skipped (%d in a row)",
                self.step + 1, loss_sum / len(micro), grad_norm, self.nan_streak,
            )
            if self.nan_streak >= cfg.nan_guard:
                bad = nonfinite_on_any_rank(self.model, self.device)
                weights = f"; the weights themselves hold NaN or inf ({bad})" if bad else ""
                raise PtmError(
                    f"training diverged: {self.nan_streak} consecutive steps had a non-finite loss or gradient "
                    f"(at step {self.step + 1}, train.nan_guard={cfg.nan_guard}){weights}; {self._last_good()}; {ADVICE}"
                )
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        self._step_lr = lr

    # -- finite weights ---------------------------------------------------------------------
    def _last_good(self) -> str:
        """What the run keeps: every checkpoint was checked for finite weights when it was saved."""
        if self.run_dir is None:
            return "no checkpoint is written (no run directory)"
        ck = ckpt.latest_checkpoint(self.run_dir)
        return f"the last good checkpoint {ck} is kept" if ck is not None else "no checkpoint had been saved yet"

    def _require_finite_end(self, final_eval: dict[str, Any] | None) -> None:
        """A run that ends on skipped non-finite steps, or whose final evaluation loss is not finite,
        has weights that give NaN or inf: an error, so they are never saved as its result."""
        if self.nan_streak:
            raise PtmError(
                f"training diverged: {_steps(self.nan_streak)} up to the last, step {self.step}, had a non-finite "
                f"loss or gradient, so the final weights were not saved; {self._last_good()}; {ADVICE}"
            )
        loss = (final_eval or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            raise PtmError(
                f"training diverged: the evaluation loss after step {self.step} is {loss}, so the final weights "
                f"were not saved; {self._last_good()}; {ADVICE}"
            )

    def require_finite_weights(self, action: str) -> None:
        """Raise :class:`PtmError` (on every rank) when a weight is NaN or infinite, saying that
        ``action`` (e.g. "checkpoint step-0000004 was not saved") and which checkpoint is kept."""
        bad = nonfinite_on_any_rank(self.model, self.device)
        if bad is not None:
            raise PtmError(
                f"training diverged: after step {self.step} the weights hold NaN or inf ({bad}); {action}; "
                f"{self._last_good()}; {ADVICE}"
            )

    # -- logging ----------------------------------------------------------------------------
    def flush_log(self, window_start: float) -> dict[str, Any] | None:
        """Average the window over steps and ranks, write it, start a new window (all ranks call)."""
        w = self.window
        w.reduce(self.device)
        now = time.perf_counter()
        if w.steps == 0 and w.skipped == 0:
            return None
        record: dict[str, Any] = {"step": self.step, "split": "train"}
        spe = int(self.train_batches.steps_per_epoch)
        record["epoch"] = round(self.step / spe, 4)
        if w.weight > 0:
            record["loss"] = w.loss / w.weight
            for k in sorted(w.metrics):
                record[k] = w.metrics[k] / w.weight
        record["lr"] = getattr(self, "_step_lr", self._lr())
        record["grad_norm"] = w.grad_norm / max(1, w.steps)
        record["tokens_per_s"] = w.tokens / max(1e-9, now - window_start)
        if self.flops_per_step and self.peak_flops:  # this rank's FLOPs over this rank's device
            achieved = (w.steps + w.skipped) * self.flops_per_step / max(1e-9, now - window_start)
            self.peak_flops = mfu.checked_peak(self.peak_flops, achieved, self.device, mfu.training_dtype(self.cfg.precision))
            record["mfu"] = achieved / self.peak_flops
        if w.overflow:
            record["overflow_skipped"] = w.overflow
        record["elapsed"] = self.elapsed + now - self._t0
        if w.skipped:
            record["skipped"] = w.skipped
        self._write(record)
        self.last_train = record
        self.window = Window()
        return record

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Token-weighted mean loss and metrics over at most ``cfg.eval_batches`` batches, and ``ppl``:
        the exponential of what the objective's ``perplexity`` names (the loss itself by default)."""
        if self.eval_source is None:
            return {}
        model = self.model
        self._tell_step()
        was_training = model.training
        model.eval()
        w = Window()
        batches = list(itertools.islice(self.eval_source.eval_batches(), self.cfg.eval_batches))
        counted = len(batches)
        if self.strategy.sharded:
            # every FSDP forward gathers weights from all ranks, so all run as many: a rank with
            # fewer held-out batches repeats its last one, uncounted
            most = int(dist.all_reduce_max(torch.tensor(counted, device=self.device)))
            if counted == 0 and most:
                raise PtmError(f"rank {self.dist.rank} has no held-out batch while others have {most}: FSDP evaluates "
                               "on every rank at once; hold out more text (train.eval_fraction) or use fewer ranks")
            batches += batches[-1:] * (most - counted)
        try:
            for i, batch in enumerate(batches):
                with self._autocast():
                    out = model(to_device(batch, self.device))
                if i < counted:
                    w.add(out, float(out.loss.detach().float()))
        finally:
            model.train(was_training)
        # Each rank may hold different (or the same) eval rows; a weighted mean of sums is right either way.
        w.reduce(self.device)
        if w.weight == 0:
            return {}
        loss = w.loss / w.weight
        record: dict[str, Any] = {"step": self.step, "split": "eval", "loss": loss}
        for k in sorted(w.metrics):
            record[k] = w.metrics[k] / w.weight
        # ppl only of a mean token negative log-likelihood: the objective names which quantity is one
        objective = getattr(self.model, "objective", None)
        ppl_of = getattr(objective, "perplexity", "loss")
        if ppl_of in record:
            record["ppl"] = _exp(record[ppl_of])
        for k in getattr(objective, "perplexities", ()):
            if k in record:
                record[k.removesuffix("_loss") + "_ppl"] = _exp(record[k])
        self._write(record)
        self.last_eval = record
        return record

    # -- checkpoints ------------------------------------------------------------------------
    def _extra(self) -> ckpt.Extra:
        if self.checkpoint_extra is not None:
            return self.checkpoint_extra
        return {"config": {"train": to_dict(self.cfg)}}

    def save(self, final: bool = False) -> Path | None:
        """Checkpoint the current step (collective; see :mod:`ptmkit.train.resume`).  Weights holding
        a NaN or an infinity are never written: :class:`PtmError` naming the last good checkpoint."""
        if self.run_dir is None:
            return None
        self.require_finite_weights(f"checkpoint {ckpt.step_name(self.step)} was not saved")
        return resume.save(self, final)

    def load(self, ck: Path) -> None:
        """Restore model, optimizer, scheduler, RNG states, step and log window from ``ck``."""
        resume.load(self, ck)

    # -- the loop ---------------------------------------------------------------------------
    def _over_budget(self) -> bool:
        """Has training used ``cfg.max_seconds``?  Every rank must take the same decision."""
        over = self.elapsed + time.perf_counter() - self._t0 >= self.cfg.max_seconds
        if dist.is_distributed():
            flag = torch.tensor([1.0 if over else 0.0], device=self.device if self.device.type == "cuda" else "cpu")
            over = float(dist.all_reduce_sum(flag)) > 0
        return over

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train to ``cfg.max_steps``; return the last train log and final eval (``eval_*`` keys)."""
        cfg = self.cfg
        # measured before the clock starts (a CPU's matmul probe takes a fraction of a second, once)
        self.peak_flops = mfu.peak_flops(self.device, mfu.training_dtype(cfg.precision))
        self._t0 = time.perf_counter()
        if self.run_dir is not None and self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            ckpt.clean_stale(self.run_dir)
        dist.barrier()
        ck = ckpt.latest_checkpoint(self.run_dir) if (resume and self.run_dir is not None) else None
        if ck is not None:
            self.load(ck)
            if self.is_main:
                log.info("resumed from %s (step %d)", ck, self.step)
        else:
            if resume:  # a fresh start here would silently discard what the caller meant to continue
                raise PtmError(f"nothing to resume: no checkpoint in {self.run_dir}; drop --resume to start a new run")
            elif self.is_main and self.run_dir is not None and (self.run_dir / METRICS_FILE).exists():
                outputs.discard(self.run_dir / METRICS_FILE)
            seed_everything(cfg.seed + self.dist.rank)
        for cb in self.stateful_callbacks:
            cb.on_fit_start(self)
        self.ddp_model = self.strategy.wrap(self.model)
        self.train_model = self.strategy.compiled(self.ddp_model)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        start = self.step
        bar = progress(cfg.max_steps, start, desc=self.desc, disable=not (self.is_main and self.progress_bar))
        window_start = time.perf_counter()
        # a run shorter than its logging interval logs every step, so its loss.png shows a curve
        log_every = cfg.log_every if cfg.log_every <= cfg.max_steps else 1
        try:
            while self.step < cfg.max_steps:
                self.train_step()
                step = self.step
                if log_every and step % log_every == 0:
                    rec = self.flush_log(window_start)
                    window_start = time.perf_counter()
                    if rec is not None and "loss" in rec:
                        extra = {"mfu": f"{rec['mfu']:.1%}"} if "mfu" in rec else {}
                        bar.set_postfix(loss=f"{rec['loss']:.4f}", tok_s=f"{rec['tokens_per_s']:.0f}", **extra, refresh=False)
                bar.update(1)
                for cb in self.stateful_callbacks:
                    cb.on_step_end(self, step)
                if step < cfg.max_steps:
                    if cfg.eval_every and step % cfg.eval_every == 0:
                        self.evaluate()
                    if cfg.save_every and step % cfg.save_every == 0:
                        if self.nan_streak:  # these weights just gave a non-finite loss: keep the last good ones
                            log.warning("step %d: checkpoint not saved after a non-finite step", step)
                        else:
                            self.save()
                for cb in self.callbacks:
                    if not isinstance(cb, TrainerCallback):
                        cb(self, step)
                if cfg.max_seconds and self._over_budget():
                    log.info("train.max_seconds=%g reached at step %d; stopping", cfg.max_seconds, self.step)
                    self.stopped_early = True
                    break
            if self.window.steps or self.window.skipped:
                self.flush_log(window_start)
            if self.step > start or self.run_dir is None or not (self.run_dir / METRICS_FILE).exists():
                final_eval = self.evaluate()
            else:  # resumed a finished run: report its final evaluation instead of repeating it
                done = read_metrics(self.run_dir / METRICS_FILE, "eval")
                final_eval = done[-1] if done else self.evaluate()
            if self.step > start:
                self._require_finite_end(final_eval)
            if self.step > start or ckpt.latest_checkpoint(self.run_dir or Path("/nonexistent")) is None:
                self.save(final=True)
            for cb in self.stateful_callbacks:
                cb.on_fit_end(self)
        finally:
            bar.close()
            self.metrics_log.close()
            self.ddp_model = self.train_model = self.model
        if self.is_main and self.run_dir is not None:
            plot_losses(self.run_dir / METRICS_FILE, self.run_dir / LOSS_PLOT)
        result: dict[str, Any] = {"step": self.step}
        if self.stopped_early:
            result["stopped_early"] = True
        if "loss" in self.last_train:
            result["train_loss"] = self.last_train["loss"]
        for k, v in (final_eval or {}).items():
            if k not in ("step", "split"):
                result[f"eval_{k}"] = v
        return result


def _steps(n: int) -> str:
    return "1 step" if n == 1 else f"{n} steps"


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else float("inf")
