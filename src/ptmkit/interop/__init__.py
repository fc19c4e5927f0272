"""Exchange models with HF transformers, one file per family, by explicit key maps.

Each family (:class:`ptmkit.interop.hf_common.HFFamily`, registered as ``hf_family``) lives in
its own file with its key map and config conversion: ``hf_bert`` (BERT), ``hf_gpt2`` (GPT-2), ...
The entry points here ask the families, never name them: :func:`export_hf` (``ptm export``)
writes an HF directory from a ptmkit run or checkpoint, or from a fine-tuned task model
(:func:`export_task_hf`, :mod:`ptmkit.interop.task_export`), :func:`import_hf` (``ptm import``) writes
a ptmkit checkpoint from an HF directory, :func:`load_hf` returns the imported model in memory.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ptmkit import outputs, registry
from ptmkit.errors import PtmError, suggest
from ptmkit.interop.hf_common import check_unpruned, require_transformers
from ptmkit.interop.task_export import export_task_hf
from ptmkit.pretrained import encoder_for_use, load_pretrained
from ptmkit.tasks.saved import TaskModel, is_task_model
from ptmkit.train import checkpoint as ckpt

log = logging.getLogger(__name__)


def families() -> list[Any]:
    """One instance of every registered HF family, in name order."""
    return [registry.get("hf_family", name)() for name in registry.names("hf_family")]


def formats() -> tuple[str, ...]:
    """Every export format some family writes (``bert``, ``bert-mlm``, ``gpt2``, ...)."""
    return tuple(f for fam in families() for f in fam.formats)


def importable() -> tuple[str, ...]:
    """Every HF ``model_type`` some family imports."""
    return tuple(t for fam in families() for t in fam.model_types)


def infer_format(pretrained: Any) -> str:
    """The export format of the family the model's objective prefers (``Objective.hf_family``)
    when it can express ``pretrained``, else of the first family that can."""
    name = (pretrained.config.get("objective") or {}).get("name")
    preferred = getattr(registry.get("objective", name), "hf_family", None) if name else None
    if preferred is not None:
        fmt = registry.get("hf_family", preferred)().format_for(pretrained)
        if fmt is not None:
            return fmt
    for fam in families():
        fmt = fam.format_for(pretrained)
        if fmt is not None:
            return fmt
    raise PtmError(
        f"no HF format fits this model (encoder {pretrained.backbone.name!r}, objective "
        f"{(pretrained.config.get('objective') or {}).get('name')!r}); formats: {', '.join(formats())}"
    )


def _family_of_format(fmt: str) -> Any:
    for fam in families():
        if fmt in fam.formats:
            return fam
    known = formats()
    raise PtmError(f"unknown export format {fmt!r}{suggest(fmt, known)}; formats: {', '.join(known)}")


def export_hf(pretrained: Any, out_dir: str | Path, format: str | None = None) -> Path:
    """Write ``pretrained`` (a ``Pretrained``, or a run / checkpoint directory) as an HF directory.
    A fine-tuned or compressed task model (its directory, or a loaded ``TaskModel``) is written
    as the HF task class of its head (:func:`export_task_hf`)."""
    require_transformers()
    if isinstance(pretrained, TaskModel) or (isinstance(pretrained, (str, Path)) and is_task_model(pretrained)):
        return export_task_hf(pretrained, out_dir, format)
    if isinstance(pretrained, (str, Path)):
        pretrained = load_pretrained(pretrained)
    pretrained = encoder_for_use(pretrained)  # an objective's input embeddings (SenseBERT) folded in
    check_unpruned(pretrained.backbone)
    fmt = format or infer_format(pretrained)
    try:
        return _family_of_format(fmt).export(pretrained, out_dir, fmt)
    except PtmError as exc:  # a family names its own limits; which others fit is asked of each of them
        fits = fitting_formats(pretrained)
        if not fits or fmt in fits:
            raise
        raise PtmError(f"{exc}; formats that fit this model: {', '.join(fits)}") from exc


def fitting_formats(pretrained: Any) -> list[str]:
    """The export format of every family that can express ``pretrained`` (each family's own
    ``format_for``), in family order."""
    return [fmt for fam in families() if (fmt := fam.format_for(pretrained)) is not None]


def hf_model_type(hf_dir: str | Path) -> str:
    """``model_type`` of an HF model directory (``PtmError`` when it is not one ptmkit imports)."""
    path = Path(hf_dir) / "config.json"
    if not path.is_file():
        raise PtmError(f"{hf_dir} is not an HF transformers model directory (no config.json)")
    try:
        model_type = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    except json.JSONDecodeError as exc:
        raise PtmError(f"{path} is not valid JSON ({exc})") from exc
    if model_type is None:
        raise PtmError(
            f"{path} has no model_type, so it is not an HF transformers model directory "
            f"(a ptmkit checkpoint is used as it is, without import)"
        )
    if model_type not in importable():
        raise PtmError(f"cannot import model_type {model_type!r}; ptmkit imports: {', '.join(importable())}")
    return model_type


def load_hf(hf_dir: str | Path) -> Any:
    """Import an HF directory (any family's ``model_type``) as a ``Pretrained`` (eval mode)."""
    require_transformers()
    model_type = hf_model_type(hf_dir)
    fam = next(f for f in families() if model_type in f.model_types)
    return fam.load(hf_dir)


def import_hf(hf_dir: str | Path, out_dir: str | Path) -> Path:
    """Convert an HF directory into a ptmkit checkpoint directory ``out_dir``
    (``config.json``, ``model.safetensors``, ``tokenizer.json``) that ``ptm finetune`` reads."""
    out = Path(out_dir)
    outputs.check(out, "checkpoint", inputs=[hf_dir])  # before the slow load
    pretrained = load_hf(hf_dir)
    with outputs.staged(out, "checkpoint", inputs=[hf_dir]) as stage:
        ckpt.write_config(stage, pretrained.config)
        ckpt.write_model(stage, pretrained.model)
        ckpt.write_tokenizer(stage, pretrained.tokenizer)
    log.debug("imported %s into %s", hf_dir, out)  # debug: `ptm import` says so itself, a path a line
    return out


__all__ = ["export_hf", "export_task_hf", "families", "formats", "hf_model_type", "import_hf", "importable", "infer_format",
           "is_task_model", "load_hf"]
