"""Parity of ptmkit's RoBERTa with HF ``RobertaForMaskedLM``, both directions, on tiny random
weights; RoBERTa's position numbering (from ``pad_token_id + 1``, ``P + pad + 1`` table rows)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop import infer_format  # noqa: E402
from ptmkit.interop.hf_roberta import export_roberta, import_roberta  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.mlm import MaskedLM, MLMConfig  # noqa: E402
from ptmkit.objectives.roberta import RoBERTa, RoBERTaConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, H, L, HEADS, I = 100, 32, 2, 4, 64
TOL = dict(rtol=1e-5, atol=1e-5)
# RoBERTa's own special ids: <s> 0, <pad> 1, </s> 2, <unk> 3; <mask> at 4 here.
TOK = SimpleNamespace(vocab_size=V, pad_id=1, unk_id=3, cls_id=0, sep_id=2, mask_id=4)


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def inputs(seed: int = 0, pad: int = 1) -> dict[str, torch.Tensor]:
    """Three sequences of length 12, rows 1 and 2 right-padded with ``pad``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 12), generator=g)
    ids[:, 0] = 0
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = pad
    return {"input_ids": ids, "attention_mask": mask}


def hf_tiny(seed: int = 0) -> RobertaForMaskedLM:
    """The real RoBERTa layout: pad 1, 512 + 2 position rows, one segment."""
    torch.manual_seed(seed)
    cfg = RobertaConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS, intermediate_size=I,
                        max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                        attn_implementation="eager")
    model = RobertaForMaskedLM(cfg)
    perturb(model, seed)
    model.tie_weights()
    return model.eval()


@torch.no_grad()
def ours_out(model: PretrainModel, batch: dict[str, torch.Tensor]) -> tuple:
    out = model.backbone(**batch, output_hidden_states=True)
    return out.hidden_states, model.objective.mlm_head(out.last_hidden_state, model.backbone.output_embeddings())


def assert_same(ours: tuple, theirs, batch) -> None:
    keep = batch["attention_mask"].bool()
    assert len(ours[0]) == len(theirs.hidden_states) == L + 1
    for i, (a, b) in enumerate(zip(ours[0], theirs.hidden_states)):
        assert_close(a[keep], b[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    assert_close(ours[1][keep], theirs.logits[keep], **TOL)


def test_import_matches_hf_with_positions_from_pad_plus_one() -> None:
    hf = hf_tiny()
    cfg, state, tok = import_roberta(hf)
    assert tok is None and cfg.max_position == 512 and cfg.pad_token_id == 1 and cfg.type_vocab_size == 1
    assert cfg.layer_norm_eps == 1e-12 and not cfg.pooler  # RobertaForMaskedLM has no pooler
    # ptmkit's position t is HF's row pad + 1 + t.
    assert torch.equal(state["backbone.embeddings.position_embeddings.weight"], hf.roberta.embeddings.position_embeddings.weight[2:])
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, RoBERTa(RoBERTaConfig(), encoder, TOK)).eval()
    model.load_state_dict(state, strict=True)  # every backbone and head tensor was imported
    batch = inputs()
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True)
    assert_same(ours_out(model, batch), theirs, batch)


def _pretrained(cfg: TransformerConfig, objective: str = "roberta", seed: int = 3) -> Pretrained:
    torch.manual_seed(seed)
    encoder = TransformerEncoder(cfg)
    obj = RoBERTa(RoBERTaConfig(), encoder, TOK) if objective == "roberta" else MaskedLM(MLMConfig(nsp=False), encoder, TOK)
    model = PretrainModel(encoder, obj)
    perturb(model, seed)
    return Pretrained({"model": {}, "objective": {"name": objective}}, None, model.backbone, model.objective, None, model.eval())


CFG = TransformerConfig(vocab_size=V, hidden_size=H, num_layers=L, num_heads=HEADS, intermediate_size=I, max_position=40,
                        type_vocab_size=1, pooler=False, layer_norm_eps=1e-5, pad_token_id=1)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_export_loads_in_hf(tmp_path, attn: str) -> None:
    pre = _pretrained(CFG)
    export_roberta(pre, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["RobertaForMaskedLM"] and config["max_position_embeddings"] == 42
    hf = RobertaForMaskedLM.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    batch = inputs(2)
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True)
    assert_same(ours_out(pre.model, batch), theirs, batch)
    # The longest sequence the model takes (40 positions) uses HF's last row.
    long = {"input_ids": torch.randint(5, V, (1, 40)), "attention_mask": torch.ones(1, 40, dtype=torch.long)}
    with torch.no_grad():
        assert_close(pre.backbone(**long).last_hidden_state, hf(**long, output_hidden_states=True).hidden_states[-1], **TOL)


def test_round_trip_is_exact_and_keeps_a_pooler(tmp_path) -> None:
    for cfg in (CFG, TransformerConfig(**{**CFG.__dict__, "pooler": True, "pad_token_id": 0, "type_vocab_size": 2})):
        pre = _pretrained(cfg)
        out = tmp_path / f"hf-{cfg.pad_token_id}"
        export_roberta(pre, out)
        back, state, _ = import_roberta(out)
        assert back == cfg
        original = pre.model.state_dict()
        assert set(state) == set(original)
        for k, v in original.items():
            assert torch.equal(state[k], v), k


def test_backbone_only_export_and_default_format(tmp_path) -> None:
    pre = _pretrained(CFG)
    assert infer_format(pre) == "roberta-mlm"  # the roberta objective asks for its family
    assert infer_format(_pretrained(CFG, objective="mlm")) == "bert-mlm"  # plain MLM stays BERT
    export_roberta(pre, tmp_path / "hf", with_heads=False)
    hf = RobertaModel.from_pretrained(tmp_path / "hf").eval()
    batch = inputs(4)
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True).hidden_states
    keep = batch["attention_mask"].bool()
    for a, b in zip(ours_out(pre.model, batch)[0], theirs):
        assert_close(a[keep], b[keep], **TOL)


def test_refuses_what_roberta_cannot_express() -> None:
    from ptmkit.interop.hf_roberta import to_hf_config

    with pytest.raises(PtmError, match="post-LN"):
        to_hf_config(TransformerConfig(**{**CFG.__dict__, "norm": "pre"}))
    with pytest.raises(PtmError, match="shared layers"):
        to_hf_config(TransformerConfig(**{**CFG.__dict__, "sharing": "all"}))
    hf = hf_tiny()
    hf.config.max_position_embeddings = 2
    with pytest.raises(PtmError, match="no positions"):
        import_roberta(hf)
