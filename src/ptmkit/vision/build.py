"""Building a vision–language model from its config.

A vision–language config has the sections of a text preset (``model``: the text Transformer,
``objective``, ``tokenizer``, ``train``) plus ``vision`` (the image encoder: ``encoder: cnn | vit`` and
its keys), ``augment`` (:class:`~ptmkit.vision.augment.AugmentConfig`), ``text``
(:class:`TextTowerConfig`: start the text tower from a checkpoint or HF directory, and lock it)
and ``data`` (:class:`ImageTextDataConfig`).  The ``vision`` section is what marks it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from torch import nn

from ptmkit import registry
from ptmkit.build import build_encoder, encoder_config
from ptmkit.config import from_dict, to_dict
from ptmkit.errors import PtmError
from ptmkit.train.config import TrainConfig
from ptmkit.vision.augment import AugmentConfig
from ptmkit.vision.encoders.base import build_image_encoder
from ptmkit.vision.model import VisionLanguageModel

SECTIONS = ("vision", "augment", "model", "objective", "tokenizer", "text", "data", "train")


@dataclass(frozen=True)
class TextTowerConfig:
    """init: a ptmkit run / checkpoint or an HF directory whose encoder starts the text tower (its
    tokenizer and ``model`` section then replace the config's); frozen: lock the text tower (LiT)."""

    init: str | None = None
    frozen: bool = False


@dataclass(frozen=True)
class ImageTextDataConfig:
    """styles: the emoji styles trained on; locale: the captions' language; max_len: caption tokens."""

    styles: tuple[str, ...] = ("google",)
    locale: str = "en"
    max_len: int = 32
    tokenizer_locales: tuple[str, ...] = ("en",)


def is_vision_language(raw: Any) -> bool:
    """Whether a config dict (or a preset's) is a vision–language one: it has a ``vision`` section."""
    return isinstance(raw, dict) and isinstance(raw.get("vision"), dict)


def objective_class(section: dict[str, Any]) -> tuple[str, type, dict[str, Any]]:
    """``(name, class, keys)`` of a vision–language ``objective`` section; a text objective there is
    refused naming the ones that fit."""
    keys = dict(section or {})
    name = str(keys.pop("name", "") or "")
    if not name:
        raise PtmError("the objective section needs a 'name' (clip, visualbert, vilbert, caption_lm, bow)")
    if name not in registry.declared("vl_objective") and name in registry.declared("objective"):
        raise PtmError(f"objective {name!r} trains text alone; a config with a vision section needs a vision–language "
                       f"objective: {', '.join(registry.declared('vl_objective'))}")
    return name, registry.get("vl_objective", name), keys


def resolve_vl_config(raw: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """Every section checked and filled with its defaults; the JSON ``config.json`` stores."""
    raw = copy.deepcopy(raw)
    unknown = sorted(set(raw) - set(SECTIONS) - {"base"})
    if unknown:
        raise PtmError(f"unknown section(s) {', '.join(unknown)} in a vision–language config; sections: {', '.join(SECTIONS)}")
    vision = dict(raw["vision"])
    image_name = str(vision.get("encoder", ""))
    image_cls = registry.get("image_encoder", image_name) if image_name else None
    if image_cls is None:
        raise PtmError("the vision section names no image encoder: set vision.encoder (cnn or vit)")
    vision_cfg = from_dict(image_cls.config_class, {k: v for k, v in vision.items() if k != "encoder"}, "vision")
    obj_name, cls, obj_keys = objective_class(raw.get("objective") or {})
    if image_name not in cls.image_encoders:
        raise PtmError(f"objective {obj_name!r} trains the image encoders {', '.join(cls.image_encoders)}, not {image_name!r}")
    resolved: dict[str, Any] = {
        "vision": {"encoder": image_name, **to_dict(vision_cfg)},
        "augment": to_dict(from_dict(AugmentConfig, raw.get("augment"), "augment")),
        "objective": {"name": obj_name, **to_dict(from_dict(cls.config_class, obj_keys, "objective"))},
        "text": to_dict(from_dict(TextTowerConfig, raw.get("text"), "text")),
        "data": to_dict(from_dict(ImageTextDataConfig, raw.get("data"), "data")),
        "tokenizer": dict(raw.get("tokenizer") or {}),
        "train": to_dict(from_dict(TrainConfig, raw.get("train"), "train")),
    }
    if cls.text_encoder:
        model = dict(raw.get("model") or {})
        model["vocab_size"] = int(tokenizer.vocab_size)
        name, model_cfg = encoder_config(model)
        if name != "transformer":
            raise PtmError(f"the text tower of a vision–language model is a transformer, not {name!r}")
        resolved["model"] = {"encoder": name, **to_dict(model_cfg)}
    return json.loads(json.dumps(resolved))


def build_vl_model(config: dict[str, Any], tokenizer: Any, text: nn.Module | None = None) -> VisionLanguageModel:
    """The model of a resolved config; ``text``: a text encoder already built (a loaded checkpoint)."""
    image = build_image_encoder(config["vision"])
    name, cls, keys = objective_class(config["objective"])
    if cls.text_encoder and text is None:
        text = build_encoder(config["model"], tokenizer)
    if not cls.text_encoder:
        text = None
    objective = cls(from_dict(cls.config_class, keys, "objective"), image, text, tokenizer)
    frozen = bool((config.get("text") or {}).get("frozen", False))
    return VisionLanguageModel(image, text, objective, frozen_text=frozen)
