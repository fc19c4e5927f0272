"""Loading and saving pre-trained models: ``Pretrained``, ``load_pretrained``, ``save_pretrained``.

``load_pretrained(path)`` accepts a run directory (its latest checkpoint) or a checkpoint
directory, builds the model with :mod:`ptmkit.build` and loads its weights.  Downstream use
(fine-tuning, features) passes ``heads=False``: only the encoder is built and read, so an
objective's pre-training machinery (an ELECTRA generator, an MLM head) is never constructed.

An objective that adds to the encoder's input embeddings in pre-training
(``Objective.adds_input_embeddings``: SenseBERT's supersense embeddings) is built too when the
encoder alone is asked for, and its addition folded into the encoder's word embeddings
(:func:`fold_input_embeddings`): the encoder then computes, alone, what it computed in
pre-training.

A pruned encoder (``prune_heads``) is saved with its ``pruned_heads`` in the config's ``model``
section, so loading rebuilds the smaller attention weights before reading them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ptmkit.artefacts import check_vocab
from ptmkit.build import build_encoder, build_model, is_causal, objective_class, serving_config
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.tokenization import Tokenizer
from ptmkit.train import checkpoint as ckpt


@dataclass
class Pretrained:
    """A loaded pre-trained model: its resolved config, tokenizer, encoder (``backbone``) and
    objective (heads; ``None`` when loaded with ``heads=False``)."""

    config: dict[str, Any]
    tokenizer: Any
    backbone: nn.Module
    objective: nn.Module | None
    path: Path | None = None
    _model: nn.Module | None = field(default=None, repr=False)

    @property
    def model(self) -> nn.Module:
        """The ``PretrainModel`` (encoder + objective) sharing these modules."""
        if self._model is None:
            if self.objective is None:
                raise PtmError("this model was loaded without its pre-training heads (heads=False)")

            self._model = PretrainModel(self.backbone, self.objective)
        return self._model

    @property
    def encoder(self) -> nn.Module:
        return self.backbone

    def prune_heads(self, heads: Any) -> None:
        """Prune the encoder's attention heads (:meth:`ptmkit.encoders.base.Encoder.prune_heads`)
        and record them in ``config["model"]["pruned_heads"]``, so whatever is built or saved from
        this config later (a checkpoint, a fresh encoder of the same shape) has the same heads."""
        self.backbone.prune_heads(heads)
        self.config = with_pruned_heads(self.config, self.backbone)

    @property
    def causal(self) -> bool:
        """Whether the encoder was trained to read left to right (downstream use must too)."""
        return is_causal(self.config)


def with_pruned_heads(config: dict[str, Any], encoder: nn.Module) -> dict[str, Any]:
    """``config`` (not changed) with the encoder's pruned heads in its ``model`` section, JSON-ready
    (``{"layer": [head, ...]}``); unchanged when the encoder keeps no such record."""
    pruned = getattr(getattr(encoder, "config", None), "pruned_heads", None)
    if pruned is None or not isinstance(config.get("model"), dict):
        return config
    if not pruned and not config["model"].get("pruned_heads"):
        return config  # nothing pruned and nothing recorded: the config stays as it was written
    return {**config, "model": {**config["model"], "pruned_heads": {str(k): list(v) for k, v in pruned.items()}}}


def fold_input_embeddings(backbone: nn.Module, objective: nn.Module) -> None:
    """Add ``objective.input_embedding_offsets() [V, H]`` to ``backbone``'s word embeddings, in
    place: afterwards the encoder alone computes what the encoder plus the objective computed.
    Word embeddings tied to an output layer change with them, so the objective's own heads must
    not be used with the folded encoder (they would add the offsets twice)."""
    offsets = objective.input_embedding_offsets()
    if offsets is None:
        return
    table = backbone.input_embeddings().weight
    with torch.no_grad():
        table[: offsets.shape[0]] += offsets.detach().to(table.dtype)


def encoder_for_use(pretrained: Pretrained) -> Pretrained:
    """``pretrained`` without its heads, as downstream use and an export see it: the same object
    when its objective adds nothing to the encoder's input; otherwise a new encoder with the
    objective's input embeddings folded in (``pretrained`` itself is left unchanged)."""
    objective = pretrained.objective
    if objective is None or not getattr(objective, "adds_input_embeddings", False):
        return pretrained
    encoder = build_encoder(pretrained.config.get("model"), pretrained.tokenizer)
    encoder.load_state_dict(pretrained.backbone.state_dict())
    fold_input_embeddings(encoder, objective)
    return Pretrained(pretrained.config, pretrained.tokenizer, encoder.eval(), None, pretrained.path)


def _adds_input_embeddings(config: dict[str, Any]) -> bool:
    if not isinstance(config.get("objective"), dict):
        return False
    _, cls, _ = objective_class(config["objective"])
    return bool(getattr(cls, "adds_input_embeddings", False))


def save_pretrained(directory: Path | str, config: dict[str, Any], model: nn.Module, tokenizer: Any) -> Path:
    """Write ``config.json``, ``model.safetensors`` and ``tokenizer.json`` into ``directory`` atomically.
    The config's ``pruned_heads`` are taken from the encoder (``model.backbone``, or ``model`` itself),
    so a model pruned after loading is saved with the config that rebuilds it."""
    encoder = model if isinstance(model, Encoder) else getattr(model, "backbone", None)
    if isinstance(encoder, Encoder):
        config = with_pruned_heads(config, encoder)
    directory = Path(directory)
    with ckpt.atomic_dir(directory) as tmp:
        ckpt.write_config(tmp, config)
        ckpt.write_model(tmp, model)
        ckpt.write_tokenizer(tmp, tokenizer)
    return directory


def load_pretrained(path: Path | str, device: str | torch.device = "cpu", heads: bool = True) -> Pretrained:
    """Load a run directory (its latest checkpoint) or a checkpoint directory, in eval mode.

    heads: build and load the objective's heads too (``False``: the encoder alone, for
    downstream use).
    """
    ck = ckpt.resolve_checkpoint(path)
    ckpt.validate_checkpoint(ck)
    config = ckpt.read_config(ck)
    tok_file = ck / ckpt.TOKENIZER_FILE
    if not tok_file.is_file():
        raise PtmError(f"checkpoint {ck} has no {ckpt.TOKENIZER_FILE}")
    tokenizer = Tokenizer.load(tok_file)
    check_vocab(tok_file, tokenizer.vocab_size, config.get("model") or {}, ck / ckpt.CONFIG_FILE)
    encoder_name = (config.get("model") or {}).get("encoder", "transformer")
    try:
        if heads:
            # a distilled model is used as the student it is: its teacher and the training-only
            # parts (a hidden-state projection) are left out
            served = serving_config(config)
            model = build_model(served, tokenizer)
            ckpt.load_model_weights(model, ck, strict=served is config)
            model.to(device).eval()
            config = served
            return Pretrained(config, tokenizer, model.backbone, model.objective, ck, model)
        if _adds_input_embeddings(config):  # the heads are read to fold their input part in, then dropped
            model = build_model(config, tokenizer)
            ckpt.load_model_weights(model, ck)
            fold_input_embeddings(model.backbone, model.objective)
            encoder = model.backbone
        else:
            encoder = build_encoder(config.get("model"), tokenizer)
            ckpt.load_submodule_weights(encoder, ck, "backbone.")
    except PtmError as exc:
        raise PtmError(
            f"checkpoint {ck} cannot be loaded as the {encoder_name!r} encoder its config.json names "
            f"(was the config edited, or written for another architecture?): {exc}"
        ) from exc
    encoder.to(device).eval()
    return Pretrained(config, tokenizer, encoder, None, ck)
