"""The one builder: a resolved config (and a tokenizer) -> an encoder, an objective, a model.

Pre-training, loading, fine-tuning, HF import and the tests all construct models here, so a new
encoder or objective needs no edit anywhere else: both are looked up in the registry by name.

A config is a nested dict with the sections ``model`` (``encoder`` = a registered encoder name
plus that encoder's config keys), ``objective`` (``name`` plus that objective's keys),
``tokenizer`` and ``train``; :func:`resolve_config` validates every section and returns the
JSON-ready form a checkpoint's ``config.json`` stores.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Sequence

from ptmkit import registry
from ptmkit.config import from_dict, to_dict
from ptmkit.errors import PtmError
from ptmkit.model_size import check_size
from ptmkit.objectives.base import PretrainModel
from ptmkit.train.config import TrainConfig

DEFAULT_ENCODER = "transformer"


def _model_section(section: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """``(encoder name, config keys)`` of a ``model`` section.

    Configs written before encoders had names describe a Transformer, whose causality was a
    model key; it now belongs to the objective (the CLM objective asks for causal attention).
    """
    if not isinstance(section, dict):
        raise PtmError("the config has no 'model' section; is this a ptmkit config or checkpoint?")
    keys = dict(section)
    name = keys.pop("encoder", None)
    if name is None:
        name = DEFAULT_ENCODER
        keys.pop("causal", None)
    return str(name), keys


def encoder_config(section: dict[str, Any]) -> tuple[str, Any]:
    """``(name, frozen config)`` of the encoder a ``model`` section describes."""
    name, keys = _model_section(section)
    cls = registry.get("encoder", name)
    return name, from_dict(cls.config_class, keys, "model")


def build_encoder(section: dict[str, Any], tokenizer: Any = None):
    """A freshly initialised encoder from a ``model`` section (bound to ``tokenizer`` if given).
    A config whose encoder would be absurdly deep or not fit in memory is refused before building,
    with its estimated size (:func:`ptmkit.model_size.check_size`)."""
    name, cfg = encoder_config(section)
    cls = registry.get("encoder", name)
    check_size(name, cls, cfg)
    encoder = cls(cfg)
    if tokenizer is not None:
        encoder.bind_tokenizer(tokenizer)
    return encoder


def objective_class(section: dict[str, Any]) -> tuple[str, type, dict[str, Any]]:
    """``(name, class, config keys)`` of an ``objective`` section."""
    if not isinstance(section, dict):
        raise PtmError("the config has no 'objective' section")
    keys = dict(section)
    name = keys.pop("name", None)
    if not name:
        raise PtmError("the objective section needs a 'name' (e.g. mlm, clm)")
    return str(name), registry.get("objective", str(name)), keys


def serving_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config a trained model is used with.  An objective whose extra parts serve in training only
    (``Objective.serves_as``: a distillation objective's teacher) becomes the objective it names,
    with the settings that one takes: the student's own MLM or causal LM and its heads."""
    _, cls, keys = objective_class(config.get("objective"))
    target = getattr(cls, "serves_as", None)
    if target is None:
        return config
    fields = {f.name for f in dataclasses.fields(registry.get("objective", target).config_class)}
    return {**config, "objective": {"name": target, **{k: v for k, v in keys.items() if k in fields}}}


def check_pairing(objective: str, cls: type, encoder: str) -> None:
    """An objective declares the encoders it can train (``Objective.encoders``)."""
    allowed = tuple(getattr(cls, "encoders", ()))
    if encoder not in allowed:
        raise PtmError(
            f"objective {objective!r} cannot be used with encoder {encoder!r}: it works with "
            f"{', '.join(repr(a) for a in allowed) or 'no encoder'}; choose a matching preset or set model.encoder"
        )


def build_objective(section: dict[str, Any], encoder: Any, tokenizer: Any):
    """The objective (heads, loss, collate) of an ``objective`` section, for ``encoder``."""
    name, cls, keys = objective_class(section)
    check_pairing(name, cls, encoder.name)
    cfg = from_dict(cls.config_class, keys, "objective")
    return cls(cfg, encoder, tokenizer)


def build_model(config: dict[str, Any], tokenizer: Any):
    """``PretrainModel(encoder, objective)`` freshly initialised from a resolved config."""
    if "objective" not in config:
        raise PtmError("the config has no 'objective' section; is this a ptmkit checkpoint?")
    encoder = build_encoder(config.get("model"), tokenizer)
    return PretrainModel(encoder, build_objective(config["objective"], encoder, tokenizer))


def is_causal(config: dict[str, Any]) -> bool:
    """Whether the model was trained to read left to right (its objective says so), so that
    downstream use must attend causally too.  A model without an objective (static word
    vectors) reads both ways."""
    if config.get("objective") is None:
        return False
    _, cls, _ = objective_class(config.get("objective"))
    return bool(getattr(cls, "causal", False))


def _pinned(overrides: Sequence[str], key: str) -> bool:
    return any(o.partition("=")[0].strip() == key for o in overrides)


def resolve_config(raw: dict[str, Any], tokenizer: Any, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Build every section's config; return the fully resolved, JSON-ready config dict.

    ``model.vocab_size`` follows the tokenizer unless pinned by an override, which must then be
    at least the tokenizer's size; ``train.seq_len`` must fit the encoder's positions.
    """
    raw = copy.deepcopy(raw)
    for section in ("model", "objective", "train"):
        if not isinstance(raw.get(section), dict):
            raise PtmError(f"the config has no {section!r} section")
    name, keys = _model_section(raw["model"])
    vocab = int(tokenizer.vocab_size)
    if _pinned(overrides, "model.vocab_size"):
        if int(keys.get("vocab_size", 0)) < vocab:
            raise PtmError(
                f"model.vocab_size={keys.get('vocab_size')} is smaller than the tokenizer's {vocab} tokens "
                f"(vocab mismatch); drop the override or set model.vocab_size >= {vocab}"
            )
    else:
        keys["vocab_size"] = vocab
    name, model_cfg = encoder_config({"encoder": name, **keys})
    train_cfg = from_dict(TrainConfig, raw["train"], "train")
    max_position = getattr(model_cfg, "max_position", None)
    if max_position is not None and getattr(model_cfg, "positions", "absolute") == "absolute" and train_cfg.seq_len > max_position:
        raise PtmError(
            f"train.seq_len={train_cfg.seq_len} exceeds model.max_position={max_position}; "
            f"lower train.seq_len or raise model.max_position"
        )
    obj_name, cls, obj_keys = objective_class(raw["objective"])
    check_pairing(obj_name, cls, name)
    obj_cfg = from_dict(cls.config_class, obj_keys, "objective")
    resolved = {
        "model": {"encoder": name, **to_dict(model_cfg)},
        "objective": {"name": obj_name, **to_dict(obj_cfg)},
        "tokenizer": dict(raw.get("tokenizer") or {}),
        "train": to_dict(train_cfg),
    }
    return json.loads(json.dumps(resolved))  # tuples -> lists: the form config.json stores
