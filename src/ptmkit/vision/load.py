"""Loading a trained vision–language run, and starting a text tower from a trained text model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptmkit.data.sources.base import dataset_dir, is_ready
from ptmkit.errors import PtmError
from ptmkit.interop import load_hf
from ptmkit.pretrained import load_pretrained
from ptmkit.tokenization import Tokenizer
from ptmkit.train import checkpoint as ckpt
from ptmkit.vision.build import build_vl_model, is_vision_language
from ptmkit.vision.model import VisionLanguageModel


@dataclass
class VLRun:
    """A loaded run: its resolved config, tokenizer, model (eval mode) and checkpoint directory."""

    config: dict[str, Any]
    tokenizer: Tokenizer
    model: VisionLanguageModel
    checkpoint: Path


def load_vl(path: str | Path) -> VLRun:
    """A vision–language run directory (its latest checkpoint) or checkpoint directory."""
    ck = ckpt.resolve_checkpoint(path)
    ckpt.validate_checkpoint(ck)
    config = ckpt.read_config(ck)
    if not is_vision_language(config):
        raise PtmError(f"{path} is not a vision–language run (its config has no vision section); "
                       f"vision–language evaluation needs a run trained with a preset such as clip-tiny")
    tokenizer = Tokenizer.load(ck / ckpt.TOKENIZER_FILE)
    model = build_vl_model(config, tokenizer)
    ckpt.load_model_weights(model, ck)
    return VLRun(config, tokenizer, model.eval(), ck)


def _is_hf(root: Path) -> bool:
    """An HF model directory: its ``config.json`` names a ``model_type`` (a ptmkit one never does)."""
    try:
        return "model_type" in json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def load_text_tower(path: str | Path) -> tuple[Any, Tokenizer, dict[str, Any]]:
    """``(encoder, tokenizer, model section)`` of a ptmkit run / checkpoint or an HF directory (the
    imported MiniLM): the text tower a vision–language run starts from (``text.init``)."""
    root = Path(path)
    if not root.exists() and str(path) == "minilm":  # the fetched recipe by name
        if not is_ready("minilm"):
            raise PtmError("text.init=minilm: the MiniLM weights are not fetched; run `ptm data get minilm` first")
        root = dataset_dir("minilm")
    if not root.exists():
        raise PtmError(f"text.init={path}: no such directory (a ptmkit run or checkpoint, or an HF model directory "
                       f"such as the one `ptm data get minilm` writes)")
    if _is_hf(root):
        pretrained = load_hf(root)
    else:
        pretrained = load_pretrained(root, heads=False)
    model = dict(pretrained.config.get("model") or {})
    if model.get("encoder", "transformer") != "transformer":
        raise PtmError(f"text.init={path} is a {model.get('encoder')!r} model; the text tower must be a transformer")
    return pretrained.backbone, pretrained.tokenizer, model
