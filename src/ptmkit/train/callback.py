"""What the Trainer calls back during training: a :class:`TrainerCallback` (hooks at the start,
after every step and at the end, with state saved in every checkpoint) or a plain function."""

from __future__ import annotations

from typing import Any, Callable


class TrainerCallback:
    """A callback with hooks and state, for what a run decides as it goes (fine-tuning's dev-based
    model selection, gradual unfreezing).

    ``on_fit_start(trainer)`` runs once before the first step (after a resume has restored the
    step), ``on_step_end(trainer, step)`` after every optimizer step and *before* that step's
    evaluation and checkpoint, so the checkpoint holds the callback's ``state_dict()``; a resumed
    run hands it back through ``load_state_dict``.  ``on_fit_end(trainer)`` runs after the last step.
    ``trainer`` is the :class:`ptmkit.train.trainer.Trainer` that calls (typed ``Any`` here: the
    Trainer imports this module, not the other way round).
    """

    def on_fit_start(self, trainer: Any) -> None: ...

    def on_step_end(self, trainer: Any, step: int) -> None: ...

    def on_fit_end(self, trainer: Any) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# A plain callable ``callback(trainer, step)`` runs after every optimizer step (after logging,
# evaluation and checkpointing); a TrainerCallback gets the hooks above.
Callback = Callable[[Any, int], None] | TrainerCallback
