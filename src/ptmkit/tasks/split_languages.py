"""Language embeddings at fine-tuning: every input of a split gets its language's index as token
types, for encoders pre-trained with language embeddings (objective ``xlm``).

XLM (Lample & Conneau 2019) feeds the language embedding of the text's language at fine-tuning
too: a classifier trained on English and tested on Spanish (zero-shot transfer, XNLI) reads the
Spanish test set with the Spanish embedding.  A task says which language each split is in
(a built-in task's spec ``languages: {"train": "en", "dev": "en", "test": "es"}``, carried in
``TaskData.meta["languages"]``); :class:`SplitLanguages` then replaces the token types the task
type builds (segment ids) by the current split's language index, through a forward pre-hook on
the encoder, and the fine-tuning loop switches the split around each prediction.  A model without
language embeddings, or a task without languages, is left as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ptmkit.tokenization.languages import language_index


class SplitLanguages:
    """The hook's state: ``languages`` (split -> language code), the tokenizer's languages, and the
    split whose language is fed now (``train`` unless inside :meth:`split`)."""

    def __init__(self, backbone: nn.Module, languages: dict[str, str], known: tuple[str, ...]) -> None:
        self.index = {split: language_index(known, code, f"the {split} split's language") for split, code in languages.items()}
        self.current = "train"
        self._handle = backbone.register_forward_pre_hook(self._hook, with_kwargs=True)

    @classmethod
    def attach(cls, backbone: nn.Module, config: dict[str, Any], tokenizer: Any, task_data: Any) -> SplitLanguages | None:
        """The hook on ``backbone`` when the model was pre-trained with language embeddings and the
        task names its splits' languages; else ``None``."""
        objective = (config or {}).get("objective") or {}
        languages = (getattr(task_data, "meta", None) or {}).get("languages")
        known = tuple(getattr(tokenizer, "languages", ()))
        if not (objective.get("language_embeddings") and known and languages):
            return None
        return cls(backbone, dict(languages), known)

    def _hook(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        index = self.index.get(self.current)
        if index is None:
            return args, kwargs
        ids = args[0] if args else kwargs["input_ids"]
        return args, {**kwargs, "token_type_ids": torch.full_like(ids, index)}

    @contextlib.contextmanager
    def split(self, name: str) -> Iterator[None]:
        """Feed ``name``'s language inside the block (then the training split's again)."""
        before, self.current = self.current, name
        try:
            yield
        finally:
            self.current = before

    def remove(self) -> None:
        self._handle.remove()


@contextlib.contextmanager
def feeding(languages: SplitLanguages | None, split: str) -> Iterator[None]:
    """:meth:`SplitLanguages.split`, or nothing when there is no hook."""
    if languages is None:
        yield
    else:
        with languages.split(split):
            yield
