"""Training: the :class:`Trainer` loop, AdamW groups and LR schedules, atomic checkpoints, DDP.

Public names are imported lazily so that ``ptmkit.train.step`` stays cheap to import.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TrainConfig": "ptmkit.train.config",
    "Trainer": "ptmkit.train.trainer",
    "StepOutput": "ptmkit.train.step",
    "BatchSource": "ptmkit.train.step",
    "save_pretrained": "ptmkit.train.checkpoint",
    "load_pretrained": "ptmkit.train.checkpoint",
    "Pretrained": "ptmkit.train.checkpoint",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ptmkit.train' has no attribute {name!r}")
