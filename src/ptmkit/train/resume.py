"""What a training checkpoint holds beyond the weights, and how a run resumes from it exactly.

``trainer_state.pt`` carries the step, the optimizer and LR schedule, every rank's RNG streams,
the open logging window, the non-finite-step streak, the wall time used, the callbacks' and the
carried modules' state (an objective's memory) and the fp16 loss scale.  A run under
``train.strategy=fsdp`` keeps its weights and optimizer state in DCP shards instead (see
:mod:`ptmkit.train.sharded_checkpoint`), which load at any world size; the data position is a
function of the step alone (:class:`~ptmkit.train.step.BatchSource`), so no batch is replayed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from ptmkit.config import to_dict
from ptmkit.errors import PtmError
from ptmkit.train import checkpoint as ckpt
from ptmkit.train import distributed as dist
from ptmkit.train import sharded_checkpoint as sharded
from ptmkit.train.metrics_log import METRICS_FILE, truncate_metrics
from ptmkit.train.optim import build_schedule
from ptmkit.train.state import Window, rng_state, set_rng_state

log = logging.getLogger(__name__)


def save(trainer: Any, final: bool = False) -> Path | None:
    """Checkpoint the :class:`~ptmkit.train.trainer.Trainer`'s current step (collective; rank 0 writes all but the shards)."""
    t = trainer
    t.window.reduce(t.device)
    if not t.is_main:
        t.window = Window() if dist.is_distributed() else t.window
    rngs = dist.all_gather_object(rng_state())
    state: dict[str, Any] | None = None
    if t.is_main:
        state = {
            "step": t.step,
            "epoch": t.step // int(t.train_batches.steps_per_epoch),
            "scheduler": t.scheduler.state_dict(),
            "rng": rngs,
            "window": t.window.state_dict(),
            "nan_streak": t.nan_streak,
            "elapsed": t.elapsed + time.perf_counter() - t._t0,
            "world_size": t.dist.world_size,
            "strategy": t.cfg.strategy,
            "train_config": to_dict(t.cfg),
            "callbacks": [cb.state_dict() for cb in t.stateful_callbacks],
            **t.strategy.state_dict(),
        }
        if t.carriers:
            state["carried"] = {name: m.carried_state_dict() for name, m in t.carriers.items()}
    if t.strategy.fsdp:
        return ckpt.save_sharded_checkpoint(t.run_dir, t.step, t.model, t.optimizer, state, t._extra(),
                                            t.cfg.keep_checkpoints, final=final)
    path = None
    if t.is_main:
        state["optimizer"] = t.optimizer.state_dict()
        path = ckpt.save_checkpoint(t.run_dir, t.step, t.model, state, t._extra(), t.cfg.keep_checkpoints)
    dist.barrier()
    return path


def load(trainer: Any, ck: Path) -> None:
    """Restore model, optimizer, schedule, RNG streams, step and log window of ``trainer`` from ``ck``."""
    t = trainer
    ckpt.validate_checkpoint(ck, need_state=True)
    state = ckpt.load_trainer_state(ck)
    if sharded.is_sharded(ck):
        sharded.load_shards(ck, t.model, t.optimizer)
    elif t.strategy.sharded:
        raise PtmError(
            f"{ck} was written with train.strategy={state.get('strategy', 'ddp')} (one weights file); resume it "
            f"with train.strategy=ddp, or start a new run from its weights with train.strategy=fsdp"
        )
    else:
        ckpt.load_model_weights(t.model, ck)
        try:
            t.optimizer.load_state_dict(state["optimizer"])
        except (KeyError, ValueError, RuntimeError) as exc:
            raise PtmError(f"the optimizer state in {ck} does not fit this model/config: {exc}") from exc
    try:
        t.scheduler.load_state_dict(state["scheduler"])
    except (KeyError, ValueError, RuntimeError) as exc:
        raise PtmError(f"the LR schedule state in {ck} does not fit this config: {exc}") from exc
    # The schedule follows the current config (e.g. a raised max_steps); identical otherwise.
    schedule = build_schedule(t.cfg)
    t.scheduler.lr_lambdas = [schedule for _ in t.optimizer.param_groups]
    for g, base in zip(t.optimizer.param_groups, t.scheduler.base_lrs):
        g["lr"] = base * schedule(t.scheduler.last_epoch)
    t.step = int(state["step"])
    t.nan_streak = int(state.get("nan_streak", 0))
    t.elapsed = float(state.get("elapsed", 0.0))
    t.strategy.load_state_dict(state)
    t.window = Window()
    if t.is_main:
        t.window.load_state_dict(state.get("window", {}))
    carried = state.get("carried", {})
    for name, m in t.carriers.items():
        if name not in carried:
            raise PtmError(f"the checkpoint {ck} has no carried state for {name or 'the model'}; it cannot be resumed exactly")
        m.load_carried_state_dict(carried[name])
    for cb, cb_state in zip(t.stateful_callbacks, state.get("callbacks", [])):
        cb.load_state_dict(cb_state)
    rngs = state["rng"]
    set_rng_state(rngs[t.dist.rank] if len(rngs) == t.dist.world_size else rngs[0])
    if len(rngs) != t.dist.world_size:
        log.warning("resuming a %d-process run with %d processes: dropout RNG streams differ", len(rngs), t.dist.world_size)
    if t.is_main and t.run_dir is not None:
        truncate_metrics(t.run_dir / METRICS_FILE, t.step)
