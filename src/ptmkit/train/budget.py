"""Schedules that follow the budget a user gives.

A preset's schedule is written for its own length (``bert-tiny``: 1,000 warm-up steps of
100,000).  A user who asks for 200 steps keeps those 1,000 warm-up steps unless told otherwise,
so the learning rate would climb for the whole run and never decay.  :func:`follow_budget`
scales the preset's warm-up with the steps when ``train.max_steps`` is lowered and
``train.warmup_steps`` is not given (the same share of the run), and :func:`schedule_warnings`
names, before training, the plans that cannot do what their author meant: a warm-up that never
reaches the peak LR, or so many steps that a small corpus is read dozens of times;
:func:`few_steps` names a fine-tuning plan with too few optimizer steps to learn (a small task
at a few epochs and batch 32).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from ptmkit.train.callback import TrainerCallback

log = logging.getLogger(__name__)

MAX_PASSES = 20  # more passes over the corpus than this, and the plan is worth a warning
MIN_FINETUNE_STEPS = 200  # fewer optimizer steps than this, and a fine-tuning plan is worth a warning


def _given(overrides: Sequence[str], key: str) -> bool:
    return any(o.partition("=")[0].strip() == key for o in overrides)


def follow_budget(base_train: dict[str, Any], raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``raw`` with ``train.warmup_steps`` scaled to ``train.max_steps`` when the overrides lower
    the steps of ``base_train`` (the preset's or the source run's train section) and leave the
    warm-up alone: ``round(warmup * max_steps / base max_steps)``, at least 1.  ``raw`` is changed
    in place and returned."""
    train = raw.get("train") or {}
    was_steps, warmup = base_train.get("max_steps"), base_train.get("warmup_steps")
    steps = train.get("max_steps")
    if not (_given(overrides, "train.max_steps") and not _given(overrides, "train.warmup_steps")):
        return raw
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (was_steps, warmup, steps)):
        return raw
    if warmup <= 0 or was_steps <= 0 or steps >= was_steps:
        return raw
    scaled = max(1, round(warmup * steps / was_steps))
    train["warmup_steps"] = scaled
    log.info("train.warmup_steps %d -> %d: %.1f %% of this run's %d steps, as the preset's of its %d "
             "(set train.warmup_steps to choose)", warmup, scaled, 100 * warmup / was_steps, steps, was_steps)
    return raw


def schedule_warnings(max_steps: int, warmup_steps: int, steps_per_epoch: int) -> list[str]:
    """What is wrong with a plan of ``max_steps`` steps (``steps_per_epoch`` per pass over the
    training examples), each a line that names the setting to change."""
    out = []
    if warmup_steps >= max_steps > 0:
        out.append(f"train.warmup_steps={warmup_steps} >= train.max_steps={max_steps}: the learning rate never reaches "
                   f"train.lr before training stops; lower train.warmup_steps")
    passes = max_steps / max(1, steps_per_epoch)
    if passes > MAX_PASSES:
        out.append(f"train.max_steps={max_steps:,} reads the training examples {passes:,.0f} times ({steps_per_epoch:,} "
                   f"steps a pass): it will memorise them; lower train.max_steps or give more text")
    return out


def few_steps(total: int, steps_per_epoch: int, epochs: int, batch_size: int, what: str = "fine-tuning") -> str | None:
    """A warning when a plan of ``what`` (fine-tuning, distillation, ...) has fewer than
    :data:`MIN_FINETUNE_STEPS` optimizer steps, naming the ``epochs`` that would reach that floor;
    ``None`` when it has enough.  (A MiniLM fine-tuned on 500 sentences stayed at the majority class
    after 32 steps.)  The line stays short: a log line of at most 200 characters with its prefix."""
    if total >= MIN_FINETUNE_STEPS:
        return None
    need = -(-MIN_FINETUNE_STEPS // max(1, steps_per_epoch))
    return (f"{what} has {total} optimizer steps ({epochs} epoch(s) of {steps_per_epoch} batches of {batch_size}), "
            f"often too few to learn: epochs={need} gives {need * steps_per_epoch} (or lower batch_size)")


_said: set[str] = set()


def warn_once(line: str | None) -> None:
    """Log ``line`` as a warning the first time it is seen in this process (a plan repeated over
    seeds and learning rates is named once)."""
    if line and line not in _said:
        _said.add(line)
        log.warning(line)





def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class TimeEstimate(TrainerCallback):
    """After ``measured`` steps past the first (which pays for start-up), logs how long the whole
    run will take at the measured pace: the plan's cost said before most of it is spent."""

    def __init__(self, measured: int = 3) -> None:
        self.measured = measured
        self.first: tuple[int, float] | None = None

    def on_step_end(self, trainer, step: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = (step, now)
            return
        done = step - self.first[0]
        if done == self.measured:
            per_step = (now - self.first[1]) / done
            left = trainer.cfg.max_steps - step
            log.info("measured %.2f s per step over steps %d-%d: about %s for the %d steps left (train.max_steps=%d)",
                     per_step, self.first[0] + 1, step, duration(per_step * left), left, trainer.cfg.max_steps)


__all__ = ["MAX_PASSES", "MIN_FINETUNE_STEPS", "TimeEstimate", "duration", "few_steps", "follow_budget", "schedule_warnings",
           "warn_once"]
