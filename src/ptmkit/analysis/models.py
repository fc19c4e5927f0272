"""The models an analysis reads: a pre-training run or checkpoint (every encoder family), an HF
transformers directory (imported on the fly), and random-init twins of the same architecture."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ptmkit import fileio
from ptmkit.build import build_encoder, build_model, is_causal
from ptmkit.errors import PtmError
from ptmkit.interop import load_hf
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.saved import TASK_MODEL_FILE, load_predictor


@dataclass
class Subject:
    """One model under analysis: ``label``, its encoder (``backbone``), ``tokenizer``, whether it
    reads causally, its ``config`` and, when it has them, the pre-training heads (``model``: the
    ``PretrainModel`` whose loss head importance differentiates; ``None`` otherwise)."""

    label: str
    backbone: nn.Module
    tokenizer: Any
    causal: bool
    config: dict[str, Any]
    model: nn.Module | None
    source: str

    @property
    def encoder_name(self) -> str:
        return str(getattr(self.backbone, "name", type(self.backbone).__name__))


def _is_hf_dir(path: Path) -> bool:
    cfg = path / "config.json"
    if not cfg.is_file():
        return False
    try:
        return "model_type" in json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False


def load_subject(path: str | Path, label: str | None = None) -> Subject:
    """A run / checkpoint directory (with its heads where it has them), an HF directory, or a
    fine-tuned task model (``ptm finetune``'s ``OUT/pretrained-seed0``: its encoder as trained for
    the task, LoRA merged; no pre-training heads)."""
    path = Path(path)
    if not path.exists():
        raise PtmError(f"{path} does not exist: give a pre-training run, a checkpoint, a fine-tuned model or an HF "
                       f"model directory")
    label = label or fileio.path_label(path)
    if (path / TASK_MODEL_FILE).is_file():
        tm = load_predictor(path)  # bound to no data: only its encoder is read
        return Subject(label, tm.backbone, tm.tokenizer, is_causal(tm.config), tm.config, None, str(path))
    if _is_hf_dir(path):
        pre = load_hf(path)
        return Subject(label, pre.backbone, pre.tokenizer, bool(pre.causal), pre.config, pre.model if pre.objective is not None else None,
                       str(path))
    try:
        pre = load_pretrained(path, heads=True)
        model = pre.model
    except PtmError:
        pre = load_pretrained(path, heads=False)  # an imported encoder without pre-training heads
        model = None
    return Subject(label, pre.backbone, pre.tokenizer, bool(pre.causal), pre.config, model, str(path))


def random_twin(subject: Subject, seed: int = 0) -> Subject:
    """The same architecture and tokenizer with freshly initialised weights (``seed``)."""
    torch.manual_seed(seed)
    try:
        model: nn.Module | None = build_model(subject.config, subject.tokenizer).eval()
        backbone = model.backbone
    except PtmError:  # a config without a pre-training objective (an imported encoder)
        model, backbone = None, build_encoder(subject.config.get("model"), subject.tokenizer).eval()
    return Subject(f"{subject.label} (random init)", backbone, subject.tokenizer, subject.causal,
                   subject.config, model, f"random init of {subject.source}")


__all__ = ["Subject", "load_subject", "random_twin"]
