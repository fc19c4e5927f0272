"""Head importance of a pre-trained model (Michel et al. 2019) with respect to its own
pre-training loss on the analysis corpus, through :func:`ptmkit.compress.importance.head_importance`:
the corpus's first sentences are prepared with the model's tokenizer, cut into the objective's
examples and collated by the objective (its masking drawn from a generator seeded per batch), and
``|dL/dξ_h|`` is averaged over those batches and normalised per layer."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.analysis.corpus_text import sentences
from ptmkit.analysis.models import Subject
from ptmkit.compress.importance import head_importance, head_shape
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError


def check_importance(subject: Subject) -> None:
    """:class:`PtmError` before any slow work for a model without heads or without a loss."""
    head_shape(subject.backbone)
    if subject.model is None:
        raise PtmError(f"head importance of {subject.label} needs its pre-training heads (the loss it differentiates); "
                       f"{subject.source} has only an encoder (an imported model without its LM head): leave "
                       f"'heads' out of --what for it")


def importance(subject: Subject, corpus: str | Path, sentences_used: int = 2000, batches: int = 8,
               batch_size: int = 8, seq_len: int = 128, seed: int = 0) -> dict[str, Any]:
    """``importance [layers][heads]`` (per-layer normalised) and what it was measured on."""
    check_importance(subject)
    objective = subject.model.objective
    limit = subject.backbone.max_positions() or seq_len
    seq_len = min(seq_len, int(limit))
    with tempfile.TemporaryDirectory(prefix="ptm-importance-") as tmp:
        text = Path(tmp) / "text.txt"
        with open(text, "w", encoding="utf-8") as f:
            f.writelines(" ".join(s) + "\n" for s in sentences(corpus, sentences_used))
        corp = prepare([text], subject.tokenizer, Path(tmp) / "corpus", workers=1, progress=False)
        spans = np.asarray(objective.example_spans(corp, seq_len))[: batches * batch_size]
        if not len(spans):
            raise PtmError(f"the corpus gives no {seq_len}-token example for {subject.label}'s objective")
        collated = [objective.collate(corp, spans[i:i + batch_size], np.random.default_rng([seed, i]))
                    for i in range(0, len(spans), batch_size)]
        scores = head_importance(subject.model, collated)
    return {"importance": scores.tolist(), "batches": len(collated), "examples": int(len(spans)),
            "seq_len": seq_len, "loss": type(objective).__name__}


__all__ = ["check_importance", "importance"]
