"""Config pieces the static models share.

- :func:`as_config`: what a model's ``train(data, cfg, ...)`` accepts as ``cfg`` (None, a dict of
  config keys, or the config itself; a NaN or an infinity in it is refused, naming the key);
- the checks and the learning-rate schedule of the word2vec family (word2vec and fastText
  train the same Skip-gram / CBOW objectives with the same schedule).
"""

from __future__ import annotations

from typing import Any, TypeVar

from ptmkit.config import check_finite, from_dict

T = TypeVar("T")

ARCHITECTURES = ("skipgram", "cbow")


def as_config(cls: type[T], cfg: T | dict[str, Any] | None) -> T:
    """``cls()`` for None, ``from_dict(cls, cfg)`` for a dict (unknown keys are errors), else ``cfg``
    (checked for NaN and infinite values, as ``from_dict`` checks a dict's)."""
    if cfg is None:
        return cls()
    if isinstance(cfg, dict):
        return from_dict(cls, cfg)
    check_finite(cfg)
    return cfg


def check_architecture(model: str) -> None:
    """``model`` must be "skipgram" or "cbow" (ValueError, which ``from_dict`` reports as PtmError)."""
    if model not in ARCHITECTURES:
        raise ValueError(f"model must be 'skipgram' or 'cbow', got {model!r}")


def check_at_least_one(cfg: object, names: tuple[str, ...]) -> None:
    """Every field of ``cfg`` in ``names`` must be >= 1 (ValueError naming the first that is not)."""
    for name in names:
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")


def check_hot_rows(cfg: object) -> None:
    """``hot_rows`` >= 0 and ``sync_words`` None or >= 1 (ValueError otherwise)."""
    if cfg.hot_rows < 0:
        raise ValueError(f"hot_rows must be >= 0 (0 = plain Hogwild), got {cfg.hot_rows}")
    if cfg.sync_words is not None and cfg.sync_words < 1:
        raise ValueError(f"sync_words must be >= 1 (or None: 64 for hs, 1024 for ns), got {cfg.sync_words}")


def sync_interval(sync_words: int | None, hs: bool) -> int:
    """Words between merges of the thread-private hot rows: ``sync_words``, or by default 64 for
    hierarchical softmax (every update writes the root) and 1024 for negative sampling."""
    return sync_words or (64 if hs else 1024)


class AlphaSchedule:
    """The word2vec family's learning rate: linear from ``start_alpha`` to ``end_alpha``.

    For a config with the fields ``model``, ``alpha`` and ``min_alpha`` (None: the defaults of
    word2vec.c, 0.025 for Skip-gram and 0.05 for CBOW, and ``start_alpha * 1e-4``).
    """

    model: str
    alpha: float | None
    min_alpha: float | None

    @property
    def start_alpha(self) -> float:
        return self.alpha if self.alpha is not None else (0.025 if self.model == "skipgram" else 0.05)

    @property
    def end_alpha(self) -> float:
        return self.min_alpha if self.min_alpha is not None else self.start_alpha * 1e-4


__all__ = ["ARCHITECTURES", "AlphaSchedule", "as_config", "check_architecture", "check_at_least_one"]
