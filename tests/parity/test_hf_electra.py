"""ELECTRA's discriminator imported from HF ``ElectraForPreTraining`` (weights made by HF, with
factorized embeddings) computes the same hidden states and replaced-token logits; which models the
``electra`` family claims."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from conftest import special_ids
from transformers import ElectraConfig, ElectraForPreTraining  # noqa: E402

from ptmkit.build import build_model  # noqa: E402
from ptmkit.config import to_dict  # noqa: E402
from ptmkit.encoders import TransformerConfig  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop import infer_format  # noqa: E402
from ptmkit.interop.hf_electra import import_electra, to_hf_config  # noqa: E402
from ptmkit.objectives.electra import ELECTRAConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V = 100
TOK = special_ids(V)


@torch.no_grad()
def test_hf_discriminator_imports_with_the_same_logits() -> None:
    torch.manual_seed(0)
    hf_cfg = ElectraConfig(vocab_size=V, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=40, type_vocab_size=2, attn_implementation="eager")
    hf = ElectraForPreTraining(hf_cfg).eval()
    g = torch.Generator().manual_seed(1)
    for p in hf.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))
    cfg, state, _ = import_electra(hf)
    assert cfg.embedding_size == 16 and not cfg.pooler
    config = {"model": {"encoder": "transformer", **to_dict(cfg)}, "objective": {"name": "electra", **to_dict(ELECTRAConfig())}}
    model = build_model(config, TOK).eval()
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys
    assert all(k.startswith(("objective.generator.", "objective.mlm_head.")) for k in result.missing_keys)
    ids = torch.randint(5, V, (2, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[mask == 0] = 0
    types = (torch.arange(10) >= 5).long().expand(2, -1) * mask
    theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    h = model.backbone(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    keep = mask.bool()
    assert_close(model.objective.rtd_head(h)[keep], theirs.logits[keep], rtol=1e-5, atol=1e-5)


def test_family_claims_electra_models_only() -> None:
    small = dict(vocab_size=V, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64, max_position=32)
    for objective, fmt in (({"name": "electra"}, "electra"), ({"name": "mlm", "nsp": False}, "bert-mlm")):
        config = {"model": {"encoder": "transformer", **small}, "objective": objective}
        pm = build_model(config, TOK)
        assert infer_format(Pretrained(config, None, pm.backbone, pm.objective, None, pm)) == fmt
    with pytest.raises(PtmError, match="post-LN"):
        to_hf_config(TransformerConfig(**small, norm="pre"))
