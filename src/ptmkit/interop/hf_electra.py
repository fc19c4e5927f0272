"""ELECTRA's discriminator <-> HF transformers (``ElectraModel``, ``ElectraForPreTraining``).

The discriminator is a post-LN BERT encoder without a pooler, whose embeddings may be narrower
than its layers (``embedding_size`` E, projected to H after their LayerNorm, as ptmkit's
factorized embeddings).  The key map is BERT's (:mod:`ptmkit.interop.hf_bert`) under the
``electra.`` prefix, plus::

    backbone.embeddings.project (E -> H)     electra.embeddings_project
    objective.rtd_head.dense                 discriminator_predictions.dense
    objective.rtd_head.out                   discriminator_predictions.dense_prediction

Both heads apply the encoder's ``hidden_act`` between the two linear maps, and both give one
replaced-token logit per position.  The generator (``objective.generator*``, ``mlm_head``) is not
exported: HF keeps it as a separate model (``ElectraForMaskedLM``), and the discriminator is what
is fine-tuned.  A pooler (``model.pooler=true``, never trained by ELECTRA) has no place in
``ElectraModel`` and is left out.  An imported directory gives a ``Pretrained`` of the ``electra``
objective whose generator is freshly initialised.

A fine-tuned tagger or span-QA model exports its encoder by this map and its linear head as
``ElectraForTokenClassification`` (``classifier``) or ``ElectraForQuestionAnswering``
(``qa_outputs``).  ``ElectraForSequenceClassification`` reads ``gelu(dense(h[CLS]))`` where
ptmkit's classifier reads the pooler's ``tanh``, so a classifier exports through BERT's family.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ptmkit.config import to_dict
from ptmkit.encoders.transformer import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.interop import hf_bert
from ptmkit.interop.hf_common import (
    ACT_TO_HF,
    HFFamily,
    TaskHead,
    activation_from_hf,
    assemble,
    check_pad,
    export_heads,
    hf,
    read_hf,
    task_model,
    write_hf_dir,
)
from ptmkit.objectives.electra import ELECTRAConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

_WB = ("weight", "bias")
_PROJECT = "electra.embeddings_project"
_HEAD = (("dense", "discriminator_predictions.dense"), ("out", "discriminator_predictions.dense_prediction"))


# -- configs -------------------------------------------------------------------------------------
def problems(model_cfg: Any, causal: bool = False) -> list[str]:
    """What keeps a model from being an ELECTRA discriminator (empty when it is one)."""
    if not isinstance(model_cfg, TransformerConfig):
        return [f"its encoder is not a Transformer ({type(model_cfg).__name__})"]
    out = []
    if model_cfg.norm != "post":
        out.append(f"norm={model_cfg.norm!r} (ELECTRA is post-LN)")
    if causal:
        out.append("its objective reads left to right (ELECTRA attends in both directions)")
    if model_cfg.positions != "absolute" or model_cfg.sharing != "none":
        out.append("relative positions or shared layers (not part of ELECTRA)")
    if not model_cfg.embedding_norm:
        out.append("embedding_norm=false (ELECTRA always normalises the embedding sum)")
    if model_cfg.llama_options():
        out.append(f"{', '.join(model_cfg.llama_options())} (not part of ELECTRA)")
    return out


def to_hf_config(model_cfg: TransformerConfig) -> Any:
    """``TransformerConfig`` -> ``transformers.ElectraConfig``; :class:`PtmError` if ELECTRA cannot express it."""
    ElectraConfig = hf("ElectraConfig")

    found = problems(model_cfg)
    if found:
        raise PtmError("this model cannot be exported as ELECTRA: " + "; ".join(found))
    return ElectraConfig(
        vocab_size=model_cfg.vocab_size,
        embedding_size=model_cfg.embedding_size or model_cfg.hidden_size,
        hidden_size=model_cfg.hidden_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        intermediate_size=model_cfg.intermediate_size,
        hidden_act=ACT_TO_HF[model_cfg.activation],
        hidden_dropout_prob=model_cfg.dropout,
        attention_probs_dropout_prob=model_cfg.attention_dropout,
        max_position_embeddings=model_cfg.max_position,
        type_vocab_size=max(model_cfg.type_vocab_size, 1),  # a model without segments: one zero row
        initializer_range=model_cfg.init_std,
        layer_norm_eps=model_cfg.layer_norm_eps,
        pad_token_id=model_cfg.pad_token_id,
    )


def from_hf_config(hf_cfg: Any) -> TransformerConfig:
    """``transformers.ElectraConfig`` -> ``TransformerConfig`` (no pooler)."""
    if getattr(hf_cfg, "model_type", "electra") != "electra":
        raise PtmError(f"expected an ELECTRA checkpoint (model_type 'electra'), got model_type {hf_cfg.model_type!r}")
    pos = getattr(hf_cfg, "position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        raise PtmError(f"position_embedding_type={pos!r} is not supported; ptmkit's ELECTRA uses absolute positions")
    if getattr(hf_cfg, "is_decoder", False) or getattr(hf_cfg, "add_cross_attention", False):
        raise PtmError("ELECTRA decoders (is_decoder / add_cross_attention) are not supported; import an encoder")
    pad = hf_cfg.pad_token_id if hf_cfg.pad_token_id is not None else 0
    E = int(hf_cfg.embedding_size)
    return TransformerConfig(
        vocab_size=hf_cfg.vocab_size,
        hidden_size=hf_cfg.hidden_size,
        num_layers=hf_cfg.num_hidden_layers,
        num_heads=hf_cfg.num_attention_heads,
        intermediate_size=hf_cfg.intermediate_size,
        max_position=hf_cfg.max_position_embeddings,
        type_vocab_size=hf_cfg.type_vocab_size,
        norm="post",
        activation=activation_from_hf(hf_cfg.hidden_act, "ELECTRA"),
        layer_norm_eps=float(hf_cfg.layer_norm_eps),
        dropout=float(hf_cfg.hidden_dropout_prob),
        attention_dropout=float(hf_cfg.attention_probs_dropout_prob),
        embedding_norm=True,
        embedding_size=None if E == hf_cfg.hidden_size else E,
        pooler=False,
        init_std=float(hf_cfg.initializer_range),
        pad_token_id=int(pad),
    )


# -- key map -------------------------------------------------------------------------------------
def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """``backbone.*`` (and ``objective.rtd_head.*`` when present) -> ``ElectraForPreTraining`` keys."""
    backbone = {k: v for k, v in state.items() if k.startswith("backbone.") and not k.startswith("backbone.pooler.")}
    out = {"electra." + k[len("bert."):]: v for k, v in hf_bert.state_dict_to_hf(backbone, cfg).items() if k.startswith("bert.")}
    if cfg.type_vocab_size == 0:  # one all-zero segment row of the embedding width
        out["electra.embeddings.token_type_embeddings.weight"] = torch.zeros(1, cfg.embedding_size or cfg.hidden_size)
    for p in _WB:
        if f"backbone.embeddings.project.{p}" in state:
            out[f"{_PROJECT}.{p}"] = state[f"backbone.embeddings.project.{p}"].detach().clone()
        for ours, theirs in _HEAD:
            if f"objective.rtd_head.{ours}.{p}" in state:
                out[f"{theirs}.{p}"] = state[f"objective.rtd_head.{ours}.{p}"].detach().clone()
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """``electra.*`` / ``discriminator_predictions.*`` keys (as present) -> PretrainModel keys."""
    bert = {"bert." + k[len("electra."):]: v for k, v in hf.items() if k.startswith("electra.") and not k.startswith(_PROJECT)}
    out = hf_bert.state_dict_from_hf(bert, cfg)
    for p in _WB:
        if f"{_PROJECT}.{p}" in hf:
            out[f"backbone.embeddings.project.{p}"] = hf[f"{_PROJECT}.{p}"].detach().clone().float()
        for ours, theirs in _HEAD:
            if f"{theirs}.{p}" in hf:
                out[f"objective.rtd_head.{ours}.{p}"] = hf[f"{theirs}.{p}"].detach().clone().float()
    return out


# -- export --------------------------------------------------------------------------------------
def build_hf_electra(pretrained: Any, with_head: bool = True) -> tuple[Any, dict[str, torch.Tensor]]:
    """An HF ELECTRA model (eval mode) holding ``pretrained``'s discriminator and the state dict
    to save: ``ElectraForPreTraining`` with the replaced-token head, else ``ElectraModel``."""
    ElectraForPreTraining, ElectraModel = hf("ElectraForPreTraining"), hf("ElectraModel")

    cfg: TransformerConfig = pretrained.backbone.config
    if pretrained.causal:
        raise PtmError("this model cannot be exported as ELECTRA: its objective reads left to right")
    hf_cfg = to_hf_config(cfg)
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    if cfg.pooler:
        log.info("ELECTRA has no pooler; the model's pooler is not exported")
    if with_head and "rtd" in export_heads(pretrained):
        state.update({f"objective.{k}": v for k, v in pretrained.objective.rtd_head.state_dict(prefix="rtd_head.").items()})
    hf_state = state_dict_to_hf(state, cfg)
    if "discriminator_predictions.dense.weight" in hf_state:
        model = ElectraForPreTraining(hf_cfg)
    else:
        model = ElectraModel(hf_cfg)
        hf_state = {k[len("electra."):]: v for k, v in hf_state.items()}
    own = model.state_dict()
    missing = set(own) - set(hf_state)
    if missing:
        raise PtmError(f"cannot export: the model has no weights for {sorted(missing)[:4]}")
    model.load_state_dict({k: v for k, v in hf_state.items() if k in own}, strict=True)
    model.eval()
    return model, hf_state


def export_electra(pretrained: Any, out_dir: str | Path, with_head: bool = True) -> Path:
    """Write ``pretrained``'s discriminator as an HF ELECTRA directory that ``ElectraForPreTraining``
    (with the replaced-token head) or ``ElectraModel`` load with ``from_pretrained``."""
    model, hf_state = build_hf_electra(pretrained, with_head)
    return write_hf_dir(model, pretrained, out_dir, state_dict=hf_state)


# -- fine-tuned task models -----------------------------------------------------------------------
TASK_CLASSES = {"token_classification": "ElectraForTokenClassification", "question_answering": "ElectraForQuestionAnswering"}


def build_hf_electra_task(pretrained: Any, head: TaskHead) -> Any:
    """An HF ``ElectraFor...`` task model (eval mode) holding ``pretrained``'s encoder and ``head``."""
    cfg: TransformerConfig = pretrained.backbone.config
    state = state_dict_to_hf({f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}, cfg)
    state.update(head.tensors("qa_outputs" if head.kind == "question_answering" else "classifier"))
    return task_model(TASK_CLASSES[head.kind], to_hf_config(cfg), head, state)


# -- import --------------------------------------------------------------------------------------
def import_electra(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[TransformerConfig, dict[str, torch.Tensor], Any]:
    """An HF ELECTRA discriminator directory or model -> ``(TransformerConfig, PretrainModel state
    dict, tokenizer)`` (``objective.rtd_head.*`` when the checkpoint has the head)."""
    ElectraForPreTraining = hf("ElectraForPreTraining")

    hf_model, present, tokenizer, _ = read_hf(ElectraForPreTraining, hf_dir_or_model, tokenizer)
    hf_state = {(k if k.startswith(("electra.", "discriminator_predictions.")) else f"electra.{k}"): v
                for k, v in present.items() if not k.startswith("generator_")}
    cfg = from_hf_config(hf_model.config)
    check_pad(cfg.pad_token_id, tokenizer)
    head = [f"{theirs}.{p}" for _, theirs in _HEAD for p in _WB]
    if not all(k in hf_state for k in head):  # a partial head is no head
        hf_state = {k: v for k, v in hf_state.items() if not k.startswith("discriminator_predictions.")}
    return cfg, state_dict_from_hf(hf_state, cfg), tokenizer


def load_hf_electra(hf_dir: str | Path) -> Any:
    """Import an HF ELECTRA directory as a ready ``Pretrained`` (backbone + ``electra`` objective,
    the generator freshly initialised)."""
    cfg, state, tokenizer = import_electra(hf_dir)
    return assemble(cfg, {"name": "electra", **to_dict(ELECTRAConfig())}, state, tokenizer, source=str(hf_dir))


@register("hf_family", "electra")
class ElectraFamily(HFFamily):
    """Post-LN bidirectional Transformers <-> ``ElectraModel`` / ``ElectraForPreTraining``.  Chosen
    by default for models of the ``electra`` objective (``Objective.hf_family``)."""

    formats = ("electra",)
    model_types = ("electra",)

    def format_for(self, pretrained: Any) -> str | None:
        # Only a model with a replaced-token head is an ELECTRA; other encoders export as BERT.
        if "rtd" not in export_heads(pretrained) or problems(pretrained.backbone.config, pretrained.causal):
            return None
        return "electra"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        return export_electra(pretrained, out_dir)

    def load(self, hf_dir: str | Path) -> Any:
        return load_hf_electra(hf_dir)

    task_classes = TASK_CLASSES

    def task_problems(self, pretrained: Any, head: TaskHead) -> list[str]:
        return problems(pretrained.backbone.config, pretrained.causal)

    def export_task(self, pretrained: Any, head: TaskHead, out_dir: str | Path) -> Path:
        return write_hf_dir(build_hf_electra_task(pretrained, head), pretrained, out_dir)
