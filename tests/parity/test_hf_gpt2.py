"""Parity of ptmkit's GPT-2 with HF transformers, both directions, on tiny random weights."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from conftest import special_ids
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop.hf_gpt2 import export_gpt2, import_gpt2, to_hf_config  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.clm import CausalLM, CLMConfig  # noqa: E402
from ptmkit.objectives.mlm import MaskedLM, MLMConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, H, L, HEADS, P = 100, 32, 2, 4, 64
TOL = dict(rtol=1e-5, atol=1e-5)


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Three sequences of length 12, rows 1 and 2 right-padded."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def hf_tiny(attn: str = "eager", seed: int = 0, n_inner: int | None = None) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=V, n_positions=P, n_embd=H, n_layer=L, n_head=HEADS, n_inner=n_inner,
        bos_token_id=3, eos_token_id=3, attn_implementation=attn,
    )
    model = GPT2LMHeadModel(cfg)
    perturb(model, seed)
    model.tie_weights()
    return model.eval()


def ptm_model(cfg: TransformerConfig) -> PretrainModel:
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, CausalLM(CLMConfig(), encoder, special_ids(cfg.vocab_size))).eval()


@torch.no_grad()
def ptm_outputs(model: PretrainModel, batch: dict[str, torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    out = model.backbone(**batch, causal=True, output_hidden_states=True)
    return out.hidden_states, F.linear(out.last_hidden_state, model.backbone.output_embeddings())


@torch.no_grad()
def hf_outputs(model: GPT2LMHeadModel, batch: dict[str, torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    out = model(**batch, output_hidden_states=True)
    return out.hidden_states, out.logits


def assert_same(ours, theirs, mask: torch.Tensor) -> None:
    keep = mask.bool()  # padded positions are undefined in HF: compare real tokens only
    assert len(ours[0]) == len(theirs[0]) == L + 1
    for i, (a, b) in enumerate(zip(ours[0], theirs[0])):
        assert_close(a[keep], b[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    assert_close(ours[1][keep], theirs[1][keep], **TOL)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_import_matches_hf(attn: str) -> None:
    hf = hf_tiny(attn)
    cfg, state, tok = import_gpt2(hf)
    assert tok is None
    assert (cfg.norm, cfg.activation, cfg.layer_norm_eps, cfg.intermediate_size) == ("pre", "gelu_tanh", 1e-5, 4 * H)
    model = ptm_model(cfg)
    model.load_state_dict(state, strict=True)
    batch = inputs()
    assert_same(ptm_outputs(model, batch), hf_outputs(hf, batch), batch["attention_mask"])


def test_import_gpt2model_and_n_inner() -> None:
    full = hf_tiny(n_inner=48)
    base = GPT2Model(full.config)
    base.load_state_dict({k[len("transformer."):]: v for k, v in full.state_dict().items() if k.startswith("transformer.")})
    cfg, state, _ = import_gpt2(base.eval())
    assert cfg.intermediate_size == 48
    model = ptm_model(cfg)
    model.load_state_dict(state, strict=True)
    batch = inputs(1)
    assert_same(ptm_outputs(model, batch), hf_outputs(full, batch), batch["attention_mask"])


GPT2_CFG = TransformerConfig(
    vocab_size=V, hidden_size=H, num_layers=L, num_heads=HEADS, intermediate_size=4 * H, max_position=P,
    type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
    embedding_norm=False, pooler=False, scaled_residual_init=True,
)


def _random_pretrained(cfg: TransformerConfig = GPT2_CFG, seed: int = 3) -> Pretrained:
    torch.manual_seed(seed)
    model = ptm_model(cfg)
    perturb(model, seed)
    return Pretrained({"model": {}, "objective": {"name": "clm"}}, None, model.backbone, model.objective, None, model)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_export_loads_in_hf(tmp_path, attn: str) -> None:
    pre = _random_pretrained()
    export_gpt2(pre, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied after loading
    batch = inputs(2)
    ours = ptm_outputs(pre.model, batch)
    assert_same(ours, hf_outputs(hf, batch), batch["attention_mask"])
    base = GPT2Model.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    with torch.no_grad():
        last = base(**batch).last_hidden_state
    keep = batch["attention_mask"].bool()
    assert_close(last[keep], ours[0][-1][keep], **TOL)


def test_export_import_round_trip_is_exact(tmp_path) -> None:
    pre = _random_pretrained(replace(GPT2_CFG, activation="relu", intermediate_size=40))
    export_gpt2(pre, tmp_path / "hf")
    cfg, state, _ = import_gpt2(tmp_path / "hf")
    assert cfg == replace(GPT2_CFG, activation="relu", intermediate_size=40)
    original = pre.model.state_dict()
    assert set(state) == set(original)
    for k, v in original.items():
        assert torch.equal(state[k], v), k


def test_export_refuses_what_gpt2_cannot_express(tmp_path) -> None:
    with pytest.raises(PtmError, match="pre-LN"):
        to_hf_config(replace(GPT2_CFG, norm="post"))
    with pytest.raises(PtmError, match="segment"):
        to_hf_config(replace(GPT2_CFG, type_vocab_size=2))
    # An MLM-trained pre-LN model has heads GPT-2 cannot hold.
    encoder = TransformerEncoder(GPT2_CFG)
    model = PretrainModel(encoder, MaskedLM(MLMConfig(nsp=False), encoder, special_ids(V)))
    pre = Pretrained({"objective": {"name": "mlm"}}, None, model.backbone, model.objective, None, model)
    with pytest.raises(PtmError):
        export_gpt2(pre, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_import_refuses_untied_and_unsupported() -> None:
    hf = hf_tiny()
    hf.config.tie_word_embeddings = False
    hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone() + 1.0)
    with pytest.raises(PtmError, match="tied"):
        import_gpt2(hf)
    hf = hf_tiny()
    hf.config.scale_attn_by_inverse_layer_idx = True
    with pytest.raises(PtmError, match="inverse_layer_idx"):
        import_gpt2(hf)


def test_load_needs_a_tokenizer_with_ptmkit_specials(tmp_path) -> None:
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import models

    from ptmkit.interop.hf_gpt2 import load_hf_gpt2

    hf_tiny().save_pretrained(tmp_path / "hf")
    with pytest.raises(PtmError, match="no tokenizer"):
        load_hf_gpt2(tmp_path / "hf")
    # GPT-2's own vocabulary has <|endoftext|> but none of [PAD] [UNK] [CLS] [SEP] [MASK].
    RawTokenizer(models.BPE({"<|endoftext|>": 0, "a": 1, "b": 2}, [])).save(str(tmp_path / "hf" / "tokenizer.json"))
    with pytest.raises(PtmError, match="special tokens"):
        load_hf_gpt2(tmp_path / "hf")
