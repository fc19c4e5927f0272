"""Exchange models with HF transformers, one file per family, by explicit key maps.

* :mod:`ptmkit.interop.hf_bert`: post-LN encoders <-> ``BertModel`` / ``BertForMaskedLM`` /
  ``BertForPreTraining`` (MLM and NSP heads included).
* :mod:`ptmkit.interop.hf_gpt2`: pre-LN causal models <-> ``GPT2Model`` / ``GPT2LMHeadModel``.

The entry points here pick the family: :func:`export_hf` (``ptm export``) writes an HF directory
from a ptmkit run or checkpoint, :func:`import_hf` (``ptm import``) writes a ptmkit checkpoint
from an HF directory, :func:`load_hf` returns the imported model in memory.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ptmkit.errors import PtmError, suggest

log = logging.getLogger(__name__)

# Export formats: "bert" = BertModel (backbone + pooler), "bert-mlm" = with the MLM head (and the
# NSP head when the objective has one: BertForPreTraining), "gpt2" = GPT2LMHeadModel.
FORMATS = ("bert", "bert-mlm", "gpt2")
IMPORTABLE = ("bert", "gpt2")  # HF model_type values


def infer_format(pretrained: Any) -> str:
    """The export format matching a model: ``gpt2`` for pre-LN causal models (the clm
    objective), ``bert-mlm`` for the mlm objective, ``bert`` for other post-LN encoders."""
    cfg = pretrained.backbone.config
    objective = (pretrained.config.get("objective") or {}).get("name")
    if cfg.norm == "pre" and cfg.causal:
        return "gpt2"
    if cfg.norm == "post" and not cfg.causal:
        return "bert-mlm" if objective == "mlm" else "bert"
    raise PtmError(
        f"no HF format fits a model with norm={cfg.norm!r} and causal={cfg.causal}: BERT is post-LN and "
        f"bidirectional, GPT-2 pre-LN and causal"
    )


def export_hf(pretrained: Any, out_dir: str | Path, format: str | None = None) -> Path:
    """Write ``pretrained`` (a ``Pretrained``, or a run / checkpoint directory) as an HF directory."""
    from ptmkit.interop import hf_bert, hf_gpt2
    from ptmkit.interop.hf_common import require_transformers

    require_transformers()
    if isinstance(pretrained, (str, Path)):
        from ptmkit.train.checkpoint import load_pretrained

        pretrained = load_pretrained(pretrained)
    fmt = format or infer_format(pretrained)
    if fmt not in FORMATS:
        raise PtmError(f"unknown export format {fmt!r}{suggest(fmt, FORMATS)}; formats: {', '.join(FORMATS)}")
    if fmt == "gpt2":
        return hf_gpt2.export_gpt2(pretrained, out_dir)
    if fmt == "bert-mlm" and (pretrained.objective is None or not hasattr(pretrained.objective, "mlm_head")):
        raise PtmError("--format bert-mlm needs a model trained with the mlm objective; use --format bert for the encoder")
    return hf_bert.export_bert(pretrained, out_dir, with_heads=fmt == "bert-mlm")


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
    if model_type not in IMPORTABLE:
        raise PtmError(f"cannot import model_type {model_type!r}; ptmkit imports: {', '.join(IMPORTABLE)}")
    return model_type


def load_hf(hf_dir: str | Path) -> Any:
    """Import an HF BERT or GPT-2 directory as a ``Pretrained`` (eval mode)."""
    from ptmkit.interop import hf_bert, hf_gpt2
    from ptmkit.interop.hf_common import require_transformers

    require_transformers()
    if hf_model_type(hf_dir) == "bert":
        return hf_bert.load_hf_bert(hf_dir)
    return hf_gpt2.load_hf_gpt2(hf_dir)


def import_hf(hf_dir: str | Path, out_dir: str | Path) -> Path:
    """Convert an HF BERT or GPT-2 directory into a ptmkit checkpoint directory ``out_dir``
    (``config.json``, ``model.safetensors``, ``tokenizer.json``) that ``ptm finetune`` reads."""
    from ptmkit import outputs
    from ptmkit.train import checkpoint as ckpt

    out = Path(out_dir)
    outputs.check(out, "checkpoint", inputs=[hf_dir])  # before the slow load
    pretrained = load_hf(hf_dir)
    with outputs.staged(out, "checkpoint", inputs=[hf_dir]) as stage:
        ckpt.write_config(stage, pretrained.config)
        ckpt.write_model(stage, pretrained.model)
        ckpt.write_tokenizer(stage, pretrained.tokenizer)
    log.info("imported %s into %s", hf_dir, out)
    return out


__all__ = ["FORMATS", "export_hf", "hf_model_type", "import_hf", "infer_format", "load_hf"]
