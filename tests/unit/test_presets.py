"""Presets: every bundled preset builds, and the named sizes have the papers' parameter counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ptmkit.build import build_model, encoder_config
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.presets import list_presets, load_preset

TRAIN_KEYS = {"batch_size", "seq_len", "lr", "warmup_steps", "max_steps", "weight_decay", "schedule",
              "clip_norm", "grad_accum", "eval_every", "save_every", "log_every", "seed"}
EXPECTED = {"bert-tiny", "bert-mini", "bert-small", "bert-base", "gpt2-tiny", "gpt2-small", "electra-tiny",
            "llama-tiny"}


def build(name: str) -> PretrainModel:
    data = load_preset(name)
    _, cfg = encoder_config(data["model"])
    tok = SimpleNamespace(vocab_size=cfg.vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    with torch.device("meta"):  # count parameters without allocating them
        return build_model(data, tok)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_sections(name: str) -> None:
    data = load_preset(name)
    assert set(data) == {"model", "objective", "tokenizer", "train"}
    assert set(data["train"]) <= TRAIN_KEYS and data["train"]["schedule"] in {"linear", "cosine"}
    assert data["tokenizer"]["kind"] in {"wordpiece", "bpe", "unigram", "char", "word"}
    assert data["tokenizer"]["vocab_size"] == data["model"]["vocab_size"]
    assert data["train"]["seq_len"] <= data["model"]["max_position"]
    assert isinstance(data["train"]["lr"], float)
    build(name)


@pytest.mark.parametrize(
    "name, millions, tol",
    [("bert-tiny", 4.4, 0.05), ("bert-mini", 11.3, 0.05), ("bert-small", 29.1, 0.05), ("bert-base", 110.1, 0.05),
     ("gpt2-small", 124.4, 0.05)],
)
def test_parameter_counts(name: str, millions: float, tol: float) -> None:
    model = build(name)
    # the published counts include the pre-training heads (BERT: MLM transform + bias, NSP)
    n = sum(p.numel() for p in model.parameters())
    assert abs(n / 1e6 - millions) < tol, n


def test_model_shapes() -> None:
    _, base = encoder_config(load_preset("bert-base")["model"])
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    assert base.layer_norm_eps == 1e-12 and base.norm == "post" and base.type_vocab_size == 2
    _, gpt = encoder_config(load_preset("gpt2-small")["model"])
    assert (gpt.vocab_size, gpt.max_position, gpt.norm, gpt.activation) == (50257, 1024, "pre", "gelu_tanh")
    assert load_preset("gpt2-small")["objective"]["name"] == "clm"  # which makes the attention causal
    assert gpt.scaled_residual_init and gpt.layer_norm_eps == 1e-5
    assert list_presets() == sorted(list_presets()) and EXPECTED <= set(list_presets())


def test_unknown_preset_suggests(tmp_path) -> None:
    with pytest.raises(PtmError, match="did you mean 'bert-base'"):
        load_preset("bert-bse")
    with pytest.raises(PtmError, match="does not exist"):
        load_preset(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("modle: {}\nobjective: {name: mlm}\n")
    with pytest.raises(PtmError, match="did you mean 'model'"):
        load_preset(str(bad))
    good = tmp_path / "mine.yaml"
    good.write_text("model: {hidden_size: 64}\nobjective: {name: clm}\n")
    assert load_preset(str(good))["model"] == {"hidden_size": 64}
