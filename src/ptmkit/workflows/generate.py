"""Generate text with a pre-trained model: the workflow behind ``ptm generate`` and :func:`ptmkit.generate`.

A run (or checkpoint) directory's config says what its objective can generate
(:func:`generation_kind`: a causal LM continues a prompt, an encoder–decoder rewrites it) and
whether decoding needs the objective's heads (UniLM); the model is loaded accordingly, the
prompts are framed as in pre-training, and the one decoding loop of :mod:`ptmkit.generation`
(greedy, sampling, beam search) writes the new tokens.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from ptmkit import registry
from ptmkit.build import objective_class
from ptmkit.devices import resolve_device
from ptmkit.errors import PtmError
from ptmkit.generation import CAUSAL_LM, KINDS, GenerationConfig, generate_ids
from ptmkit.pretrained import load_pretrained
from ptmkit.train import checkpoint as ckpt

__all__ = ["CAUSAL_LM", "GenerationConfig", "decodes_with_heads", "generate", "generation_kind", "load_config",
           "resolve_device"]


def generate(
    model: Any,
    prompts: str | Sequence[str],
    max_new_tokens: int = 32,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    device: str | torch.device = "cpu",
    num_beams: int = 1,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    no_repeat_ngram_size: int = 0,
    num_return_sequences: int = 1,
) -> str | list[str] | list[list[str]]:
    """Generate text with a pre-trained model (a run or checkpoint directory, or a ``Pretrained``).

    A causal LM (clm) continues each prompt, which it reads as the start of a sentence (after the
    separator token that precedes every sentence in pre-training); an encoder–decoder (bart)
    rewrites each prompt (its source ``[CLS] prompt [SEP]``).  Returns the generated text (the
    continuation alone for a causal LM), one string per prompt, or one string for one prompt.
    Generation stops at the end-of-sentence token or after ``max_new_tokens`` tokens.
    ``num_beams > 1``: beam search (see :class:`GenerationConfig` for it and the other options);
    with ``num_return_sequences = R > 1`` each prompt gives a list of ``R`` texts, best first.
    """
    cfg = GenerationConfig(max_new_tokens, greedy, temperature, top_k, top_p, seed, num_beams=num_beams,
                           length_penalty=length_penalty, early_stopping=early_stopping,
                           no_repeat_ngram_size=no_repeat_ngram_size, num_return_sequences=num_return_sequences)
    if isinstance(model, (str, os.PathLike)):
        config = load_config(model)
        kind = generation_kind(config)
        model = load_pretrained(model, device=device, heads=decodes_with_heads(config))
    else:
        kind = generation_kind(model.config)
    objective = None
    if decodes_with_heads(model.config):
        objective = model.objective
        if objective is None:
            raise PtmError("this model generates through its pre-training heads: load it with heads=True")
    single = isinstance(prompts, str)
    texts = [prompts] if single else list(prompts)
    tok = model.tokenizer
    sep = int(tok.sep_id)
    encoded = tok.encode_batch(texts)
    if kind == CAUSAL_LM:
        sources = [[sep, *ids] for ids in encoded]
    else:
        sources = [[int(tok.cls_id), *ids, sep] for ids in encoded]
    new = generate_ids(model.backbone, kind, sources, cfg, eos_id=sep, pad_id=int(tok.pad_id), objective=objective)
    out: list[Any] = [tok.decode(ids) for ids in new]
    R = cfg.num_return_sequences
    if R > 1:
        out = [out[i * R:(i + 1) * R] for i in range(len(texts))]
    return out[0] if single else out


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The run config of a run or checkpoint directory (to check it can generate before loading it)."""
    return ckpt.read_config(ckpt.resolve_checkpoint(path))


def generation_kind(config: dict[str, Any]) -> str:
    """What the model of a run config can generate (``"causal_lm"`` or ``"seq2seq"``), from its
    objective's declaration; :class:`PtmError` naming the objective otherwise."""
    name, cls, _ = objective_class(config.get("objective"))
    kind = getattr(cls, "generation", None)
    if kind in KINDS:
        return kind
    able = [f"{n} ({registry.get('objective', n).generation})" for n in registry.names("objective")
            if getattr(registry.get("objective", n), "generation", None) in KINDS]
    raise PtmError(
        f"the model was pre-trained with the {name!r} objective, which cannot generate text; "
        f"objectives that can: {', '.join(able)}"
    )


def decodes_with_heads(config: dict[str, Any]) -> bool:
    """Whether the objective of a run config generates through its pre-training heads (its
    ``stepper``), so the model must be loaded with them."""
    return bool(getattr(objective_class(config.get("objective"))[1], "generates_with_heads", False))
