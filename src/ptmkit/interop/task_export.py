"""Fine-tuned and compressed task models -> HF transformers task classes (``ptm export TASK_MODEL``).

A task model directory (``task_model.json``, ``best.safetensors``, ``tokenizer.json``; every
fine-tuning run and every compressed model, :mod:`ptmkit.tasks.saved`) exports when an HF class
computes the same function: the encoder through its family's key map (``hf_bert``, ``hf_roberta``,
``hf_albert``, ``hf_electra``, ``hf_gpt2``; each declares ``task_classes`` and ``export_task``) and
the head as one linear layer (:class:`~ptmkit.interop.hf_common.TaskHead`):

=============== ============================================ ==========================================
task type       ptmkit head                                   HF class (``config.json``)
=============== ============================================ ==========================================
classification  ``pooling=cls`` over the encoder's pooler,    ``...ForSequenceClassification``
                ``head=linear``                               (``id2label``, ``single_label_classification``)
regression      the same, one output                          the same with ``num_labels=1``, ``regression``;
                                                              the standardisation folded into the layer
tagging         ``head=linear``, ``crf=false``                ``...ForTokenClassification``: a score vector
                                                              for every piece; ptmkit tags a word by its
                                                              first piece's
span_qa         the start / end layer                         ``...ForQuestionAnswering``: scores for every
                                                              token; ptmkit scores the context only
=============== ============================================ ==========================================

Every one reads the top layer (``mix=last``).  The model is rebuilt from ``task_model.json`` and
its weights alone, so the task's data is not needed.  Refused with a :class:`PtmError` that says
why and what exports: quantized models, pruned attention heads, adapters, other heads, poolings
and mixes, a CRF, encoders no HF family expresses (a BiLSTM student) and task types without an HF
class (multiple choice, multi-task, seq2seq).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from ptmkit import registry
from ptmkit.artefacts import check_vocab, load_state
from ptmkit.build import build_encoder, is_causal
from ptmkit.config import from_dict
from ptmkit.encoders.transformer import TransformerConfig
from ptmkit.errors import PtmError, suggest
from ptmkit.interop.hf_common import TaskHead, check_unpruned, require_transformers
from ptmkit.tasks.callbacks import BEST_FILE
from ptmkit.tasks.classification import SequenceClassifier, classifier_on
from ptmkit.tasks.finetune_config import FinetuneConfig
from ptmkit.tasks.regression import Regressor
from ptmkit.tasks.saved import TASK_MODEL_FILE, TOKENIZER_FILE, TaskModel, is_task_model, read_task_info
from ptmkit.tasks.span_qa import SpanExtractor
from ptmkit.tasks.tagging import Tagging, TokenTagger
from ptmkit.tokenization import Tokenizer
from ptmkit.train.checkpoint import check_safetensors

EXPORTABLE = ("classification and regression with pooling=cls over the encoder's pooler and head=linear; tagging "
              "with head=linear and crf=false; span QA; all with mix=last, no adapters, not quantized, no pruned heads, "
              "on a Transformer encoder")


@dataclass
class TaskEncoder:
    """What the HF families read of a model (as of a ``Pretrained``): a task model's encoder with
    its config, tokenizer and direction; no pre-training heads (``objective`` is ``None``)."""

    config: dict[str, Any]
    tokenizer: Any
    backbone: nn.Module
    causal: bool
    path: Path
    objective: None = field(default=None)


# -- reading the task model, without its data ----------------------------------------------------------
def _refuse(run: Path, reasons: list[str]) -> None:
    if reasons:
        raise PtmError(f"{run} cannot be exported to HF transformers: {'; '.join(reasons)}. What exports: {EXPORTABLE}")


def _early_refusals(info: dict[str, Any], cfg: FinetuneConfig) -> list[str]:
    """What keeps a task model from HF before anything is built (read from ``task_model.json``)."""
    out = []
    quantized = (info.get("compression") or {}).get("quantization")
    if quantized:
        source = (info.get("compression") or {}).get("source")
        out.append("it is quantized (ptm quantize): HF transformers cannot express ptmkit's dynamic int8 tensors; export "
                   f"the float model it was quantized from{f' ({source})' if source else ''} and quantize it in your "
                   f"runtime (torch.ao.quantization.quantize_dynamic, ONNX Runtime, ...)")
    if info.get("task_type") not in _BUILD:
        out.append(f"its task type {info.get('task_type')!r} has no HF task class this export writes")
    if cfg.adapter_size:
        out.append(f"it has adapters (adapter_size={cfg.adapter_size}), layers inside the encoder that HF's encoder "
                   f"classes lack")
    efficient = info.get("parameter_efficient") or {}
    if efficient.get("base") and not efficient.get("merged"):
        hint = ("fine-tune with lora_merge=true to save a plain model" if efficient.get("method") == "lora"
                else "export a model fine-tuned without bitfit")
        out.append(f"it holds only its {efficient.get('method')} weights and head, the encoder being the base checkpoint "
                   f"{(efficient.get('base') or {}).get('path')}: {hint}")
    return out


def _classifier(backbone: nn.Module, info: dict[str, Any], cfg: FinetuneConfig, causal: bool) -> nn.Module:
    return classifier_on(backbone, len(info["labels"]), cfg, causal)


def _regressor(backbone: nn.Module, info: dict[str, Any], cfg: FinetuneConfig, causal: bool) -> nn.Module:
    # the target's mean and sd are buffers: read with the weights
    return Regressor(0.0, 1.0, backbone=backbone, pooling=cfg.pooling, dropout=cfg.dropout, causal=causal,
                     mix=cfg.resolved_mix, head=cfg.head, head_hidden=cfg.head_hidden, frozen=cfg.mode == "features",
                     aux_lm_weight=cfg.aux_lm_weight)


def _tagger(backbone: nn.Module, info: dict[str, Any], cfg: FinetuneConfig, causal: bool) -> nn.Module:
    crf = Tagging.read_options(cfg.task, strict=False).crf
    return TokenTagger(backbone, len(info["labels"]), dropout=cfg.dropout, causal=causal, mix=cfg.resolved_mix,
                       head=cfg.head, head_hidden=cfg.head_hidden, frozen=cfg.mode == "features", crf=crf)


def _span(backbone: nn.Module, info: dict[str, Any], cfg: FinetuneConfig, causal: bool) -> nn.Module:
    return SpanExtractor(backbone, dropout=cfg.dropout, mix=cfg.resolved_mix, frozen=cfg.mode == "features")


# the task types that can export: their models, as each type's ``build`` makes them
_BUILD = {"classification": _classifier, "regression": _regressor, "tagging": _tagger, "span_qa": _span}


def read_task_model(path: str | Path) -> TaskModel:
    """The task model in ``path`` rebuilt from ``task_model.json`` and ``best.safetensors`` alone
    (eval mode; ``task`` and ``task_data`` are ``None``: no data is read).  :class:`PtmError` for a
    model that cannot export, before it is built when ``task_model.json`` tells."""
    run = Path(path)
    if not is_task_model(run):
        raise PtmError(f"{run} is not a fine-tuned model (no {TASK_MODEL_FILE})")
    info = read_task_info(run)
    cfg = from_dict(FinetuneConfig, info["finetune"], "finetune")
    _refuse(run, _early_refusals(info, cfg))
    tokenizer = Tokenizer.load(run / TOKENIZER_FILE)
    config = info["config"]
    check_vocab(run / TOKENIZER_FILE, tokenizer.vocab_size, config["model"], run / TASK_MODEL_FILE)
    backbone = build_encoder(config["model"], tokenizer)
    model = _BUILD[info["task_type"]](backbone, info, cfg, bool(info.get("causal", is_causal(config))))
    check_safetensors(run / BEST_FILE, "fine-tune again")
    load_state(model, load_file(str(run / BEST_FILE)), run / BEST_FILE, what=f"the model {TASK_MODEL_FILE} describes")
    return TaskModel(model.eval(), None, config, tokenizer, cfg, info, None, run)


# -- the head, as HF holds it -------------------------------------------------------------------------
def _common(model: nn.Module, cfg: FinetuneConfig) -> list[str]:
    out = []
    if getattr(model, "mix", None) is not None:
        out.append(f"mix={cfg.mix} reads other layers than the top one, which HF's task classes read (fine-tune with "
                   f"mix=last)")
    head = getattr(model, "head_kind", "linear")
    if head != "linear":
        out.append(f"head={head} puts a task network before the output layer; HF's task classes have the output layer "
                   f"alone (fine-tune with head=linear)")
    return out


def _classification_head(clf: SequenceClassifier, cfg: FinetuneConfig) -> list[str]:
    out = _common(clf, cfg)
    if clf.pooling != "cls":
        given = f" (from pooling={cfg.pooling})" if cfg.pooling != clf.pooling else ""
        out.append(f"pooling={clf.pooling}{given}; HF's ...ForSequenceClassification classes read the pooled [CLS] "
                   f"(fine-tune with pooling=cls on an encoder with a pooler)")
    elif getattr(clf.backbone, "pooler", None) is None:
        out.append("pooling=cls on an encoder without a pooler reads h[CLS] itself; HF's ...ForSequenceClassification "
                   "classes put a pooler (a tanh layer) before the classifier")
    if cfg.symmetric_pairs:
        out.append("symmetric_pairs=true adds the representations of a pair in both orders; an HF model reads one order")
    return out


def task_head(tm: TaskModel) -> TaskHead:
    """``tm``'s head as a :class:`TaskHead`; :class:`PtmError` naming every reason HF cannot hold it."""
    model, cfg, info = tm.model, tm.cfg, tm.info
    kind = info.get("task_type")
    labels = tuple(str(x) for x in info.get("labels") or ())
    dropout = float(model.dropout.p) if isinstance(getattr(model, "dropout", None), nn.Dropout) else 0.1
    if kind == "classification" and isinstance(model, SequenceClassifier):
        _refuse(tm.path, _classification_head(model, cfg))
        layer = model.classifier
        return TaskHead("sequence_classification", layer.weight, layer.bias, labels, "single_label_classification",
                        dropout)
    if kind == "regression" and isinstance(model, Regressor):
        _refuse(tm.path, _classification_head(model.model, cfg))
        # ptmkit predicts mean + sd * (W x + b); HF's one output is that value: W' = sd W, b' = sd b + mean
        sd, mean, layer = model.target_sd.float(), model.target_mean.float(), model.model.classifier
        return TaskHead("sequence_classification", sd * layer.weight, sd * layer.bias + mean, labels[:1], "regression",
                        float(model.model.dropout.p))
    if kind == "tagging" and isinstance(model, TokenTagger):
        reasons = _common(model, cfg)
        if model.crf is not None:
            reasons.append("crf=true decodes a sentence's tags jointly; HF's ...ForTokenClassification score each "
                           "token alone (fine-tune with crf=false)")
        _refuse(tm.path, reasons)
        return TaskHead("token_classification", model.classifier.weight, model.classifier.bias, labels, None, dropout)
    if kind == "span_qa" and isinstance(model, SpanExtractor):
        _refuse(tm.path, _common(model, cfg))
        return TaskHead("question_answering", model.span.weight, model.span.bias, (), None, dropout)
    raise PtmError(f"{tm.path} cannot be exported to HF transformers: a {kind} model ({type(model).__name__}) has no HF "
                   f"task class this export writes. What exports: {EXPORTABLE}")


# -- the family ---------------------------------------------------------------------------------------
def _families() -> list[Any]:
    return [registry.get("hf_family", name)() for name in registry.names("hf_family")]


def _family(encoder: TaskEncoder, head: TaskHead, format: str | None, run: Path) -> Any:
    """The family given by ``format`` (any of its formats), else the one the pre-training objective
    prefers when it can hold the model, else the first family that claims the encoder and can."""
    fams = _families()
    what = head.kind.replace("_", " ")
    if format is not None:
        known = [f for fam in fams for f in fam.formats]
        fam = next((fam for fam in fams if format in fam.formats), None)
        if fam is None:
            raise PtmError(f"unknown export format {format!r}{suggest(format, known)}; formats: {', '.join(known)}")
        if head.kind not in fam.task_classes:
            names = [n for n in registry.names("hf_family") if head.kind in registry.get("hf_family", n).task_classes]
            raise PtmError(f"--format {format}: this export writes no {what} class of its family; the families that "
                           f"have one: {', '.join(names)} (or leave --format out to pick one)")
        found = fam.task_problems(encoder, head)
        if found:
            raise PtmError(f"{run} cannot be exported as {fam.task_classes[head.kind]}: {'; '.join(found)}")
        return fam
    objective = (encoder.config.get("objective") or {}).get("name")
    preferred = getattr(registry.get("objective", objective), "hf_family", None) if objective else None
    ordered = [f for f in fams if preferred and type(f) is registry.get("hf_family", preferred)]
    ordered += [f for f in fams if f.format_for(encoder) is not None and f not in ordered]
    for fam in ordered:
        if head.kind in fam.task_classes and not fam.task_problems(encoder, head):
            return fam
    reasons = [f"{name}: {'; '.join(fam.task_problems(encoder, head))}" for name, fam in
               zip(registry.names("hf_family"), fams) if head.kind in fam.task_classes]
    raise PtmError(f"{run} cannot be exported to HF transformers: no HF family holds its encoder with a {what} head "
                   f"({' | '.join(reasons)})")


def export_task_hf(task_model: str | Path | TaskModel, out_dir: str | Path, format: str | None = None) -> Path:
    """Write a fine-tuned or compressed task model (a directory, or a loaded :class:`TaskModel`) as an
    HF directory (``config.json`` with the labels, ``model.safetensors``, the tokenizer files) that
    ``AutoModelFor{SequenceClassification,TokenClassification,QuestionAnswering}.from_pretrained``
    loads and that gives the task model's logits.  ``format``: any format of the family to use
    (``bert``, ``roberta``, ...); default the family the pre-training objective prefers, else the
    first that can hold the model."""
    require_transformers()
    tm = task_model if isinstance(task_model, TaskModel) else read_task_model(task_model)
    if isinstance(task_model, TaskModel):  # read_task_model has checked a directory
        _refuse(tm.path, _early_refusals(tm.info, tm.cfg))
    backbone = tm.backbone
    if not isinstance(getattr(backbone, "config", None), TransformerConfig):
        raise PtmError(f"{tm.path} cannot be exported to HF transformers: its encoder is {backbone.name!r}, and HF's "
                       f"task classes hold Transformer encoders; distil into a Transformer student (ptm distil "
                       f"--layers ...) to export")
    check_unpruned(backbone)
    head = task_head(tm)
    causal = bool(tm.info.get("causal", is_causal(tm.config)))  # the direction the task model reads in
    encoder = TaskEncoder(tm.config, tm.tokenizer, backbone, causal, tm.path)
    fam = _family(encoder, head, format, tm.path)
    with torch.no_grad():
        return fam.export_task(encoder, head, out_dir)


__all__ = ["EXPORTABLE", "TaskEncoder", "export_task_hf", "read_task_model", "task_head"]
