"""Parity of ptmkit's BERT with HF transformers, both directions, on tiny random weights."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from conftest import special_ids
from transformers import BertConfig, BertForMaskedLM, BertForPreTraining, BertModel  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop.hf_bert import export_bert, import_bert, to_hf_config  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.mlm import MaskedLM, MLMConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, H, L, HEADS, I, P = 100, 32, 2, 4, 64, 64
TOL = dict(rtol=1e-5, atol=1e-5)


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int) -> None:
    """Make every tensor distinct (LayerNorm gains != 1, biases != 0) so a swapped key shows."""
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Three sequences of length 12; rows 1 and 2 end in padding; two segments."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.zeros(3, 12, dtype=torch.long)
    types[:, 6:] = 1
    types[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def hf_tiny(attn: str = "eager", seed: int = 0) -> BertForPreTraining:
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS, intermediate_size=I,
        max_position_embeddings=P, type_vocab_size=2, attn_implementation=attn,
    )
    model = BertForPreTraining(cfg)
    perturb(model, seed)
    model.tie_weights()
    return model.eval()


def ptm_model(cfg: TransformerConfig, nsp: bool = True) -> PretrainModel:
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, MaskedLM(MLMConfig(nsp=nsp), encoder, special_ids(cfg.vocab_size))).eval()


@torch.no_grad()
def ptm_outputs(model: PretrainModel, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = model.backbone(**batch, output_hidden_states=True)
    obj = model.objective
    res = {
        "hidden": out.hidden_states,
        "mlm": obj.mlm_head(out.last_hidden_state, model.backbone.output_embeddings()),
    }
    if out.pooled is not None:
        res["pooled"] = out.pooled
    if obj.nsp_head is not None:
        res["nsp"] = obj.nsp_head(out.pooled)
    return res


@torch.no_grad()
def hf_outputs(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = model(**batch, output_hidden_states=True)
    pooled = model.bert(**batch).pooler_output
    return {"hidden": out.hidden_states, "mlm": out.prediction_logits, "nsp": out.seq_relationship_logits, "pooled": pooled}


def assert_same(ours: dict, theirs: dict, mask: torch.Tensor, keys=("hidden", "mlm", "pooled", "nsp")) -> None:
    keep = mask.bool()  # HF's outputs at padded positions are not defined: compare real tokens only
    assert len(ours["hidden"]) == len(theirs["hidden"]) == L + 1
    for i, (a, b) in enumerate(zip(ours["hidden"], theirs["hidden"])):
        assert_close(a[keep], b[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    if "mlm" in keys:
        assert_close(ours["mlm"][keep], theirs["mlm"][keep], **TOL)
    for k in ("pooled", "nsp"):
        if k in keys:
            assert_close(ours[k], theirs[k], **TOL)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_import_matches_hf(attn: str) -> None:
    hf = hf_tiny(attn)
    cfg, state, tok = import_bert(hf)
    assert tok is None and cfg.norm == "post" and cfg.layer_norm_eps == 1e-12 and cfg.activation == "gelu"
    model = ptm_model(cfg)
    model.load_state_dict(state, strict=True)  # every backbone and head tensor was imported
    batch = inputs()
    assert_same(ptm_outputs(model, batch), hf_outputs(hf, batch), batch["attention_mask"])


@pytest.mark.parametrize("cls", [BertModel, BertForMaskedLM])
def test_import_from_partial_classes(cls: type) -> None:
    hf_full = hf_tiny()
    hf = cls(hf_full.config)
    hf.load_state_dict(
        {k[len("bert."):] if cls is BertModel else k: v for k, v in hf_full.state_dict().items()}, strict=False
    )
    cfg, state, _ = import_bert(hf.eval())
    assert ("objective.mlm_head.bias" in state) == (cls is BertForMaskedLM)
    assert "objective.nsp_head.weight" not in state
    assert cfg.pooler == (cls is BertModel)  # BertForMaskedLM has no pooler
    batch = inputs(1)
    model = ptm_model(cfg, nsp=False)
    model.load_state_dict(state, strict=False)
    ours = ptm_outputs(model, batch)
    theirs = hf_outputs(hf_full, batch)
    assert_same(ours, theirs, batch["attention_mask"], keys=("hidden", "mlm") if cls is BertForMaskedLM else ("hidden", "pooled"))


def _random_pretrained(cfg: TransformerConfig, nsp: bool = True, seed: int = 3) -> Pretrained:
    torch.manual_seed(seed)
    model = ptm_model(cfg, nsp=nsp)
    perturb(model, seed)
    return Pretrained({"model": {}, "objective": {"name": "mlm"}}, None, model.backbone, model.objective, None, model)


BERT_CFG = TransformerConfig(
    vocab_size=V, hidden_size=H, num_layers=L, num_heads=HEADS, intermediate_size=I, max_position=P,
)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_export_loads_in_hf(tmp_path, attn: str) -> None:
    pre = _random_pretrained(BERT_CFG)
    export_bert(pre, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    batch = inputs(2)
    ours = ptm_outputs(pre.model, batch)
    hf = BertForPreTraining.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    assert_same(ours, hf_outputs(hf, batch), batch["attention_mask"])
    mlm = BertForMaskedLM.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    with torch.no_grad():
        assert_close(mlm(**batch).logits[batch["attention_mask"].bool()], ours["mlm"][batch["attention_mask"].bool()], **TOL)
    base = BertModel.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    with torch.no_grad():
        out = base(**batch)
    assert_close(out.pooler_output, ours["pooled"], **TOL)


def test_export_import_round_trip_is_exact(tmp_path) -> None:
    pre = _random_pretrained(BERT_CFG)
    export_bert(pre, tmp_path / "hf")
    cfg, state, _ = import_bert(tmp_path / "hf")
    assert cfg == BERT_CFG
    original = pre.model.state_dict()
    assert set(state) == set(original)
    for k, v in original.items():
        assert torch.equal(state[k], v), k


def test_round_trip_without_nsp_keeps_pooler_and_mlm(tmp_path) -> None:
    pre = _random_pretrained(BERT_CFG, nsp=False)
    export_bert(pre, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    cfg, state, _ = import_bert(tmp_path / "hf")
    assert cfg.pooler
    original = pre.model.state_dict()
    assert set(state) == set(original)
    for k, v in original.items():
        assert torch.equal(state[k], v), k


def test_export_backbone_only_and_no_segments(tmp_path) -> None:
    cfg = replace(BERT_CFG, type_vocab_size=0, pooler=False, activation="relu", layer_norm_eps=1e-6)
    pre = _random_pretrained(cfg, nsp=False)
    export_bert(pre, tmp_path / "hf", with_heads=False)
    hf = BertModel.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.hidden_act == "relu" and hf.config.layer_norm_eps == 1e-6
    batch = inputs(4)
    batch.pop("token_type_ids")
    ours = ptm_outputs(pre.model, batch)
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True).hidden_states
    keep = batch["attention_mask"].bool()
    for a, b in zip(ours["hidden"], theirs):
        assert_close(a[keep], b[keep], **TOL)


def test_export_refuses_pre_ln_and_existing_dir(tmp_path) -> None:
    with pytest.raises(PtmError, match="post-LN"):
        to_hf_config(replace(BERT_CFG, norm="pre"))
    pre = _random_pretrained(BERT_CFG)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(PtmError, match="not empty"):
        export_bert(pre, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging directory left behind


def test_import_refuses_unsupported(tmp_path) -> None:
    hf = hf_tiny()
    hf.config.position_embedding_type = "relative_key"
    with pytest.raises(PtmError, match="position_embedding_type"):
        import_bert(hf)
    with pytest.raises(PtmError, match="config.json"):
        import_bert(tmp_path)


def test_mlm_loss_and_gradients_match_hf() -> None:
    """Training parity, not only the forward pass: on HF's weights, ptmkit's masked-LM loss (the
    masked rows gathered before the vocabulary projection) and the gradient of every parameter
    equal ``BertForMaskedLM``'s (dense labels, -100 elsewhere), in float64."""
    from ptmkit.interop.hf_bert import state_dict_to_hf

    hf = hf_tiny("eager").double()
    mlm = BertForMaskedLM(hf.config).double()
    mlm.load_state_dict(hf.state_dict(), strict=False)
    mlm.tie_weights()
    mlm.eval()  # no dropout on either side
    cfg, state, _ = import_bert(hf)
    model = ptm_model(cfg, nsp=False).double()
    model.load_state_dict({k: v.double() for k, v in state.items() if not k.startswith("objective.nsp")}, strict=True)
    batch = inputs()
    positions = torch.tensor([[1, 4, 7], [2, 3, 0], [1, 0, 0]])  # [B, P]; padding slots are labelled -100
    labels = torch.tensor([[11, 12, 13], [21, 22, -100], [31, -100, -100]])
    dense = torch.full_like(batch["input_ids"], -100)
    for b, (pos, lab) in enumerate(zip(positions, labels)):
        keep = lab != -100
        dense[b, pos[keep]] = lab[keep]
    ours = model({**batch, "mlm_positions": positions, "mlm_labels": labels}).loss
    theirs = mlm(**batch, labels=dense).loss
    ours.backward()
    theirs.backward()
    assert_close(ours, theirs, rtol=1e-6, atol=1e-9)
    grads = state_dict_to_hf({k: p.grad for k, p in model.named_parameters() if p.grad is not None}, cfg)
    hf_params = dict(mlm.named_parameters())
    compared = 0
    for name, g in grads.items():
        if name.endswith("attention.self.key.bias"):
            continue  # zero in exact arithmetic (softmax ignores a per-row constant): both sides are rounding
        if name in hf_params and hf_params[name].grad is not None:
            assert_close(g.double(), hf_params[name].grad, rtol=1e-5, atol=1e-9, msg=lambda m, n=name: f"{n}: {m}")
            compared += 1
    assert compared >= 12 * L  # every layer's weights, the embeddings and the head
