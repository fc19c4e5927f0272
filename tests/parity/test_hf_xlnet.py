"""Parity of ptmkit's XLNet with HF ``XLNetLMHeadModel`` on the same (perturbed random) weights:
the content stream, the two-stream forward with a permutation mask and target mapping, and the
forward with memory (and the memory it returns), both directions of the key map."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")

from conftest import special_ids

from ptmkit.build import build_model  # noqa: E402
from ptmkit.interop.hf_xlnet import build_hf_xlnet, import_xlnet  # noqa: E402
from ptmkit.objectives.plm import factorisation_masks  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V = 100
TOL = dict(rtol=1e-5, atol=1e-5)
TOK = special_ids(V)
MODEL = dict(encoder="xlnet", vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, mem_len=8)


@torch.no_grad()
def pretrained(seed: int = 0, **model) -> Pretrained:
    config = {"model": {**MODEL, **model}, "objective": {"name": "plm"}}
    torch.manual_seed(seed)
    pm = build_model(config, TOK)
    g = torch.Generator().manual_seed(seed + 1)
    for p in pm.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))
    return Pretrained(config, None, pm.backbone, pm.objective, None, pm.eval())


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    types = torch.zeros(3, 12, dtype=torch.long)
    types[:, 6:] = 1
    return ids, mask, types * mask


def two_stream(seed: int = 0):
    """A factorisation order per row (targets last, random order) and its target mapping."""
    pos = torch.tensor([[2, 3, 6], [0, 7, 8], [1, 2, 4]])
    targets = np.zeros((3, 12), dtype=bool)
    np.put_along_axis(targets, pos.numpy(), True, axis=1)
    _, sees = factorisation_masks(targets, np.random.default_rng(seed))
    return torch.from_numpy(sees), pos


@torch.no_grad()
def test_content_stream_matches_hf():
    pre = pretrained()
    hf = build_hf_xlnet(pre)
    ids, mask, types = batch()
    theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    ours = pre.backbone(ids, mask, token_type_ids=types, output_hidden_states=True)
    keep = mask.bool()
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 3
    for a, b in zip(ours.hidden_states, theirs.hidden_states):
        assert_close(a[keep], b[keep], **TOL)
    assert_close(pre.objective.logits(pre.backbone, ours.last_hidden_state)[keep], theirs.logits[keep], **TOL)


@torch.no_grad()
def test_two_stream_and_memory_match_hf():
    pre = pretrained(seed=4, clamp_len=5)
    hf = build_hf_xlnet(pre)
    ids, mask, types = batch(1)
    sees, pos = two_stream()
    mapping = torch.nn.functional.one_hot(pos, 12).float()
    perm_mask = (~sees).float()  # HF: 1 = may not attend
    theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, perm_mask=perm_mask,
                target_mapping=mapping, use_mems=True)
    ours = pre.backbone(ids, mask, token_type_ids=types, sees=sees, target_positions=pos, output_hidden_states=True)
    assert_close(pre.objective.logits(pre.backbone, ours.extras["query"]), theirs.logits, **TOL)
    mems = pre.backbone.update_mems(None, ours.hidden_states)
    for a, b in zip(mems, theirs.mems):
        assert a.shape == (3, 8, 32)
        assert_close(a, b.transpose(0, 1), **TOL)
    # The next segment reads that memory (keys and values of 8 earlier positions).
    ids2, _, _ = batch(2)
    theirs2 = hf(input_ids=ids2, token_type_ids=types, perm_mask=perm_mask, target_mapping=mapping,
                 mems=theirs.mems, use_mems=True)
    ours2 = pre.backbone(ids2, token_type_ids=types, sees=sees, target_positions=pos, mems=mems, output_hidden_states=True)
    assert_close(pre.objective.logits(pre.backbone, ours2.extras["query"]), theirs2.logits, **TOL)
    for a, b in zip(pre.backbone.update_mems(mems, ours2.hidden_states), theirs2.mems):
        assert_close(a, b.transpose(0, 1), **TOL)
    # The memory matters: without it the query stream differs.
    alone = pre.backbone(ids2, token_type_ids=types, sees=sees, target_positions=pos)
    assert (alone.extras["query"] - ours2.extras["query"]).abs().max() > 1e-3


@torch.no_grad()
def test_import_restores_every_tensor():
    pre = pretrained(seed=7)
    hf = build_hf_xlnet(pre)
    cfg, state, _ = import_xlnet(hf)
    assert cfg == pre.backbone.config
    mine = pre.model.state_dict()
    assert set(state) == set(mine)
    for k in mine:
        assert torch.equal(state[k], mine[k]), k


@torch.no_grad()
def test_lm_log_probs_is_the_identity_order():
    """``lm_log_probs`` = HF's query stream with ``perm_mask[i, j] = j >= i`` predicting every position."""
    pre = pretrained(seed=2, mem_len=0)
    hf = build_hf_xlnet(pre)
    ids, _, _ = batch(3)
    T = ids.shape[1]
    perm = torch.ones(T, T).triu().expand(3, T, T)
    mapping = torch.eye(T)[1:].expand(3, T - 1, T)
    logits = hf(input_ids=ids, perm_mask=perm, target_mapping=mapping).logits
    expected = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert_close(pre.objective.lm_log_probs(pre.backbone, ids), expected, **TOL)


def test_directory_round_trip_with_tokenizer(tmp_path):
    """``export_hf`` writes an ``XLNetLMHeadModel`` directory; ``load_hf`` reads back every tensor."""
    from ptmkit.interop import export_hf, load_hf
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("a b c d e f g\n" * 20)
    tok = Tokenizer.train([text], "unigram", 40)
    assert tok.vocab_size <= V
    pre = pretrained(seed=9)
    pre = Pretrained(pre.config, tok, pre.backbone, pre.objective, None, pre.model)
    export_hf(pre, tmp_path / "hf")
    back = load_hf(tmp_path / "hf")
    assert back.config["objective"]["name"] == "plm" and back.config["model"]["encoder"] == "xlnet"
    mine, theirs = pre.model.state_dict(), back.model.state_dict()
    assert set(mine) == set(theirs)
    for k in mine:
        assert torch.equal(mine[k], theirs[k]), k
