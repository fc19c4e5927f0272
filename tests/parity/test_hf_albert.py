"""Parity of ptmkit's ALBERT with HF ``AlbertForPreTraining`` (MLM and SOP logits), both
directions, on tiny random weights: factorized embeddings, shared or unshared layers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from conftest import special_ids
from transformers import AlbertConfig, AlbertForMaskedLM, AlbertForPreTraining, AlbertModel  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop import infer_format  # noqa: E402
from ptmkit.interop.hf_albert import export_albert, import_albert, to_hf_config  # noqa: E402
from ptmkit.objectives.albert import ALBERT, ALBERTConfig  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, E, H, L, HEADS, I, P = 100, 16, 32, 3, 4, 64, 64
TOL = dict(rtol=1e-5, atol=1e-5)
TOK = special_ids(V)


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.zeros(3, 12, dtype=torch.long)
    types[:, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}


def hf_tiny(groups: int = 1, seed: int = 0) -> AlbertForPreTraining:
    torch.manual_seed(seed)
    cfg = AlbertConfig(vocab_size=V, embedding_size=E, hidden_size=H, num_hidden_layers=L, num_hidden_groups=groups,
                       num_attention_heads=HEADS, intermediate_size=I, max_position_embeddings=P, type_vocab_size=2,
                       attn_implementation="eager")
    model = AlbertForPreTraining(cfg)
    perturb(model, seed)
    model.tie_weights()
    return model.eval()


@torch.no_grad()
def ours_out(model: PretrainModel, batch) -> dict:
    out = model.backbone(**batch, output_hidden_states=True)
    res = {"hidden": out.hidden_states, "mlm": model.objective.mlm_head(out.last_hidden_state, model.backbone.output_embeddings())}
    if model.objective.sop_head is not None:
        res["sop"] = model.objective.sop_head(out.pooled)
    return res


def assert_same(ours: dict, theirs, batch, sop: bool = True) -> None:
    keep = batch["attention_mask"].bool()
    assert len(ours["hidden"]) == len(theirs.hidden_states) == L + 1
    for i, (a, b) in enumerate(zip(ours["hidden"], theirs.hidden_states)):
        assert_close(a[keep], b[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    logits = theirs.prediction_logits if hasattr(theirs, "prediction_logits") else theirs.logits
    assert_close(ours["mlm"][keep], logits[keep], **TOL)
    if sop:
        assert_close(ours["sop"], theirs.sop_logits, **TOL)


@pytest.mark.parametrize("groups", [1, L], ids=["shared", "unshared"])
def test_import_matches_hf(groups: int) -> None:
    hf = hf_tiny(groups)
    cfg, state, tok = import_albert(hf)
    assert tok is None and cfg.embedding_size == E and cfg.sharing == ("all" if groups == 1 else "none")
    assert cfg.activation == "gelu_tanh"  # HF ALBERT's default gelu_new
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, ALBERT(ALBERTConfig(), encoder, TOK)).eval()
    model.load_state_dict(state, strict=True)  # every backbone and head tensor was imported
    if groups == 1:
        assert all(layer is model.backbone.layers[0] for layer in model.backbone.layers)
    batch = inputs()
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True)
    assert_same(ours_out(model, batch), theirs, batch)


def _pretrained(cfg: TransformerConfig, sop: bool = True, seed: int = 3) -> Pretrained:
    torch.manual_seed(seed)
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, ALBERT(ALBERTConfig(sop=sop), encoder, TOK))
    perturb(model, seed)
    return Pretrained({"model": {}, "objective": {"name": "albert"}}, None, model.backbone, model.objective, None, model.eval())


CFG = TransformerConfig(vocab_size=V, hidden_size=H, num_layers=L, num_heads=HEADS, intermediate_size=I, max_position=P,
                        embedding_size=E, sharing="all", activation="gelu_tanh")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_export_loads_in_hf(tmp_path, attn: str) -> None:
    pre = _pretrained(CFG)
    assert infer_format(pre) == "albert-pretraining"
    export_albert(pre, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["AlbertForPreTraining"] and config["num_hidden_groups"] == 1
    batch = inputs(2)
    hf = AlbertForPreTraining.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True)
    ours = ours_out(pre.model, batch)
    assert_same(ours, theirs, batch)
    mlm = AlbertForMaskedLM.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        assert_close(mlm(**batch).logits[keep], ours["mlm"][keep], **TOL)


@pytest.mark.parametrize(
    "cfg",
    [CFG, replace(CFG, sharing="none"), replace(CFG, embedding_size=None), replace(CFG, pooler=False)],
    ids=["shared", "unshared", "no-factorization", "no-pooler"],
)
def test_round_trip_is_exact(tmp_path, cfg: TransformerConfig) -> None:
    pre = _pretrained(cfg)
    export_albert(pre, tmp_path / "hf")
    arch = json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"]
    # Without a pooler the SOP head (which then reads h[CLS]) has no HF form.
    assert arch == (["AlbertForPreTraining"] if cfg.pooler else ["AlbertForMaskedLM"])
    back, state, _ = import_albert(tmp_path / "hf")
    assert back == cfg
    original = pre.model.state_dict()
    expected = set(original) if cfg.pooler else {k for k in original if not k.startswith("objective.sop_head.")}
    assert set(state) == expected
    for k in expected:
        assert torch.equal(state[k], original[k]), k


def test_backbone_only_export(tmp_path) -> None:
    pre = _pretrained(CFG, sop=False)
    assert infer_format(pre) == "albert-pretraining"
    export_albert(pre, tmp_path / "hf", with_heads=False)
    hf = AlbertModel.from_pretrained(tmp_path / "hf").eval()
    batch = inputs(4)
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True)
    keep = batch["attention_mask"].bool()
    ours = pre.backbone(**batch, output_hidden_states=True)
    for a, b in zip(ours.hidden_states, theirs.hidden_states):
        assert_close(a[keep], b[keep], **TOL)
    assert_close(ours.pooled, theirs.pooler_output, **TOL)


def test_refuses_what_albert_cannot_express() -> None:
    with pytest.raises(PtmError, match="sharing='attention'"):
        to_hf_config(replace(CFG, sharing="attention"))
    with pytest.raises(PtmError, match="post-LN"):
        to_hf_config(replace(CFG, norm="pre"))
    hf = hf_tiny(groups=1)
    hf.config.inner_group_num = 2
    with pytest.raises(PtmError, match="inner_group_num"):
        import_albert(hf)
    torch.manual_seed(0)  # E = H with a learned mapping: ptmkit has no projection to hold it
    square = AlbertForPreTraining(AlbertConfig(vocab_size=V, embedding_size=H, hidden_size=H, num_hidden_layers=1,
                                               num_attention_heads=HEADS, intermediate_size=I)).eval()
    with pytest.raises(PtmError, match="factorized"):
        import_albert(square)
