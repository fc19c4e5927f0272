"""XLNet <-> HF transformers (``XLNetLMHeadModel``; ``XLNetModel`` directories import too).

The key map (ptmkit name on the left, HF on the right, ``A`` = ``transformer.layer.{i}.rel_attn``,
``F`` = ``transformer.layer.{i}.ff``; ``n`` heads of size ``d``)::

    backbone.word_embeddings                  transformer.word_embedding (= lm_loss.weight, tied)
    backbone.mask_emb [H]                     transformer.mask_emb [1, 1, H]
    backbone.layers.{i}.attn.{q,k,v,r} [nd,H] A.{q,k,v,r} [H, n, d]   (flattened, transposed)
    backbone.layers.{i}.attn.o [H, nd]        A.o [H, n, d]            (flattened)
    backbone.layers.{i}.attn.r_{w,r,s}_bias   A.r_{w,r,s}_bias [n, d]
    backbone.layers.{i}.attn.seg_embed        A.seg_embed [2, n, d]
    backbone.layers.{i}.attn_norm             A.layer_norm
    backbone.layers.{i}.ffn.fc1 / fc2         F.layer_1 / F.layer_2
    backbone.layers.{i}.ffn_norm              F.layer_norm
    objective.lm_bias [V]                     lm_loss.bias

HF's attention computes ``x W`` with ``W [H, n, d]`` by einsum; ptmkit's ``nn.Linear`` holds
``[n d, H]``, the transpose of the flattened tensor (the output projection ``o`` maps back, so
it is the flattened tensor itself).  HF XLNet is bidirectional (``attn_type="bi"``, no
``bi_data``, ``same_length=False``); ``mem_len`` and ``clamp_len`` are the model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ptmkit.config import to_dict
from ptmkit.encoders.xlnet import XLNetConfig
from ptmkit.errors import PtmError
from ptmkit.interop.hf_common import (
    ACT_TO_HF,
    HFFamily,
    activation_from_hf,
    assemble,
    check_tied,
    hf,
    read_hf,
    write_hf_dir,
)
from ptmkit.objectives.plm import PLMConfig
from ptmkit.registry import register

_WB = ("weight", "bias")


def to_hf_config(cfg: XLNetConfig, tokenizer: Any = None) -> Any:
    HFXLNetConfig = hf("XLNetConfig")

    special = {}
    if tokenizer is not None:
        special = dict(bos_token_id=int(tokenizer.cls_id), eos_token_id=int(tokenizer.sep_id))
    return HFXLNetConfig(
        vocab_size=cfg.vocab_size, d_model=cfg.hidden_size, n_layer=cfg.num_layers, n_head=cfg.num_heads,
        d_inner=cfg.intermediate_size, ff_activation=ACT_TO_HF[cfg.activation], untie_r=True, attn_type="bi",
        initializer_range=cfg.init_std, layer_norm_eps=cfg.layer_norm_eps, dropout=cfg.dropout,
        mem_len=cfg.mem_len or None, reuse_len=None, bi_data=False, clamp_len=cfg.clamp_len, same_length=False,
        pad_token_id=cfg.pad_token_id, tie_word_embeddings=True, **special,
    )


def from_hf_config(hf: Any) -> XLNetConfig:
    if getattr(hf, "model_type", "xlnet") != "xlnet":
        raise PtmError(f"expected an XLNet checkpoint (model_type 'xlnet'), got model_type {hf.model_type!r}")
    if hf.attn_type != "bi":
        raise PtmError(f"attn_type={hf.attn_type!r} is not supported; ptmkit's XLNet attends bidirectionally ('bi')")
    if getattr(hf, "bi_data", False) or getattr(hf, "same_length", False):
        raise PtmError("bi_data=true or same_length=true is not supported by ptmkit's XLNet")
    if hf.d_model != hf.n_head * hf.d_head:
        raise PtmError(f"d_head={hf.d_head} x n_head={hf.n_head} != d_model={hf.d_model} is not supported")
    pad = hf.pad_token_id if hf.pad_token_id is not None and 0 <= hf.pad_token_id < hf.vocab_size else 0
    return XLNetConfig(
        vocab_size=hf.vocab_size, hidden_size=hf.d_model, num_layers=hf.n_layer, num_heads=hf.n_head,
        intermediate_size=hf.d_inner, activation=activation_from_hf(hf.ff_activation, "XLNet"),
        layer_norm_eps=float(hf.layer_norm_eps), dropout=float(hf.dropout), init_std=float(hf.initializer_range),
        mem_len=int(hf.mem_len or 0), clamp_len=int(hf.clamp_len) if hf.clamp_len and hf.clamp_len > 0 else -1,
        pad_token_id=int(pad),
    )


# -- key map -------------------------------------------------------------------------------------
def _pairs(cfg: XLNetConfig) -> list[tuple[str, str, str]]:
    """(ptmkit key, HF key, how): ``same``, ``in`` (HF [H, n, d] -> Linear [nd, H]), ``out``
    (HF [H, n, d] -> [H, nd]), ``row`` (HF [1, 1, H] -> [H])."""
    pairs = [("backbone.word_embeddings.weight", "transformer.word_embedding.weight", "same"),
             ("backbone.mask_emb", "transformer.mask_emb", "row")]
    for i in range(cfg.num_layers):
        ours, a, f = f"backbone.layers.{i}", f"transformer.layer.{i}.rel_attn", f"transformer.layer.{i}.ff"
        pairs += [(f"{ours}.attn.{p}.weight", f"{a}.{p}", "in") for p in ("q", "k", "v", "r")]
        pairs.append((f"{ours}.attn.o.weight", f"{a}.o", "out"))
        pairs += [(f"{ours}.attn.{p}", f"{a}.{p}", "same") for p in ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")]
        for x, y in (("attn_norm", f"{a}.layer_norm"), ("ffn.fc1", f"{f}.layer_1"), ("ffn.fc2", f"{f}.layer_2"),
                     ("ffn_norm", f"{f}.layer_norm")):
            pairs += [(f"{ours}.{x}.{p}", f"{y}.{p}", "same") for p in _WB]
    return pairs


def state_dict_to_hf(state: dict[str, torch.Tensor], cfg: XLNetConfig) -> dict[str, torch.Tensor]:
    H, n, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
    out = {}
    for ours, theirs, how in _pairs(cfg):
        t = state[ours].detach()
        if how == "in":
            t = t.t().reshape(H, n, d)
        elif how == "out":
            t = t.reshape(H, n, d)
        elif how == "row":
            t = t.reshape(1, 1, H)
        out[theirs] = t.contiguous().clone()
    if "objective.lm_bias" in state:
        out["lm_loss.bias"] = state["objective.lm_bias"].detach().clone()
    return out


def state_dict_from_hf(hf: dict[str, torch.Tensor], cfg: XLNetConfig) -> dict[str, torch.Tensor]:
    H = cfg.hidden_size
    out = {}
    for ours, theirs, how in _pairs(cfg):
        if theirs not in hf:
            raise PtmError(f"the XLNet checkpoint lacks {theirs}")
        t = hf[theirs].detach().float()
        if how == "in":
            t = t.reshape(H, H).t()
        elif how in ("out", "row"):
            t = t.reshape(H, H) if how == "out" else t.reshape(H)
        out[ours] = t.contiguous().clone()
    if "lm_loss.bias" in hf:
        out["objective.lm_bias"] = hf["lm_loss.bias"].detach().float().clone()
    return out


# -- export / import -----------------------------------------------------------------------------
def problems(pretrained: Any) -> list[str]:
    if not isinstance(pretrained.backbone.config, XLNetConfig):
        return [f"its encoder is not XLNet ({type(pretrained.backbone.config).__name__})"]
    objective = pretrained.objective
    if objective is not None and set(objective.state_dict()) - {"lm_bias"}:
        return ["its objective has parameters XLNetLMHeadModel has no place for"]
    return []


def build_hf_xlnet(pretrained: Any) -> Any:
    """An ``XLNetLMHeadModel`` (eval mode) holding ``pretrained``'s weights; the LM head is tied."""
    XLNetLMHeadModel = hf("XLNetLMHeadModel")

    found = problems(pretrained)
    if found:
        raise PtmError("this model cannot be exported as XLNet: " + "; ".join(found))
    cfg: XLNetConfig = pretrained.backbone.config
    state = {f"backbone.{k}": v for k, v in pretrained.backbone.state_dict().items()}
    if pretrained.objective is not None:
        state.update({f"objective.{k}": v for k, v in pretrained.objective.state_dict().items()})
    model = XLNetLMHeadModel(to_hf_config(cfg, pretrained.tokenizer))
    hf_state = state_dict_to_hf(state, cfg)
    if "lm_loss.bias" not in hf_state:
        hf_state["lm_loss.bias"] = torch.zeros(cfg.vocab_size)
    result = model.load_state_dict(hf_state, strict=False)
    if set(result.missing_keys) - {"lm_loss.weight"} or result.unexpected_keys:
        raise PtmError(f"cannot export as XLNet: unmatched keys {result.missing_keys[:3]} {result.unexpected_keys[:3]}")
    model.tie_weights()
    return model.eval()


def import_xlnet(hf_dir_or_model: str | Path | Any, tokenizer: Any = None) -> tuple[XLNetConfig, dict[str, torch.Tensor], Any]:
    """An HF XLNet directory or model -> ``(XLNetConfig, PretrainModel state dict, tokenizer)``."""
    XLNetLMHeadModel = hf("XLNetLMHeadModel")

    hf_model, present, tokenizer, hf_dir = read_hf(XLNetLMHeadModel, hf_dir_or_model, tokenizer)
    present = {(k if k.startswith(("transformer.", "lm_loss.")) else f"transformer.{k}"): v for k, v in present.items()}
    cfg = from_hf_config(hf_model.config)
    check_tied(present.get("lm_loss.weight"), present["transformer.word_embedding.weight"], "lm_loss")
    return cfg, state_dict_from_hf(present, cfg), tokenizer


def objective_section() -> dict[str, Any]:
    return {"name": "plm", **to_dict(PLMConfig())}


@register("hf_family", "xlnet")
class XLNetFamily(HFFamily):
    """ptmkit's XLNet encoder with the plm objective <-> ``XLNetLMHeadModel``."""

    formats = ("xlnet",)
    model_types = ("xlnet",)

    def format_for(self, pretrained: Any) -> str | None:
        return None if problems(pretrained) else "xlnet"

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        return write_hf_dir(build_hf_xlnet(pretrained), pretrained, out_dir)

    def load(self, hf_dir: str | Path) -> Any:
        cfg, state, tokenizer = import_xlnet(hf_dir)
        return assemble(cfg, objective_section(), state, tokenizer, source=str(hf_dir))
