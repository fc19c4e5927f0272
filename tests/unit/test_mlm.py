"""MLM (+NSP) objective: masking statistics, NSP pairs, sparse head, learning, tied gradients."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import special_ids

from ptmkit import registry
from ptmkit.config import from_dict
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.mlm import MaskedLM, MLMConfig

TOK = special_ids(200)
SPECIAL = {0, 1, 2, 3, 4}


def corpus(n_sent: int = 600, docs: tuple[int, ...] | None = (0, 150, 300, 600), seed: int = 0) -> SimpleNamespace:
    """Random sentences of 3..20 ordinary tokens; ``docs`` = sentence offsets of documents."""
    rng = np.random.default_rng(seed)
    sent = np.concatenate([[0], np.cumsum(rng.integers(3, 21, size=n_sent))]).astype(np.int64)
    tokens = rng.integers(5, 200, size=int(sent[-1])).astype(np.uint16)
    documents = np.array(docs if docs is not None else (0, n_sent), dtype=np.int64)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=documents)


def model_cfg(**kw) -> TransformerConfig:
    base = dict(vocab_size=200, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)
    base.update(kw)
    return TransformerConfig(**base)


def objective(**kw) -> MaskedLM:
    return MaskedLM(MLMConfig(**kw), TransformerEncoder(model_cfg()), TOK)


def test_registered_and_config() -> None:
    assert registry.get("objective", "mlm") is MaskedLM
    cfg = from_dict(MaskedLM.config_class, {"mask_prob": 0.15, "nsp": False})
    assert cfg.mask_token_ratio == 0.8 and cfg.random_token_ratio == 0.1
    with pytest.raises(PtmError, match="mask_pro"):
        from_dict(MaskedLM.config_class, {"mask_probb": 0.2})
    with pytest.raises(PtmError, match="type_vocab_size"):
        MaskedLM(MLMConfig(nsp=True), TransformerEncoder(model_cfg(type_vocab_size=0)), TOK)
    with pytest.raises(PtmError, match="vocab"):
        MaskedLM(MLMConfig(), TransformerEncoder(model_cfg(vocab_size=100)), TOK)


@pytest.mark.parametrize("nsp", [True, False])
def test_masking_statistics(nsp: bool) -> None:
    obj = objective(nsp=nsp)
    c = corpus()
    spans = obj.example_spans(c, 64)
    rng = np.random.default_rng(1)
    chosen = replaced_mask = replaced_random = kept = candidates = 0
    for _ in range(4):
        idx = rng.integers(0, len(spans), size=256)
        original = obj.collate(c, spans[idx], np.random.default_rng(100 + _))  # same rng -> same batch
        batch = obj.collate(c, spans[idx], np.random.default_rng(100 + _))
        ids, labels, pos = batch["input_ids"].numpy(), batch["mlm_labels"].numpy(), batch["mlm_positions"].numpy()
        assert np.array_equal(ids, original["input_ids"].numpy())  # deterministic given the rng
        used = labels != -100
        rows = np.nonzero(used)[0]
        p = pos[used]
        # rebuild the uncorrupted text from the labels
        clean = ids.copy()
        clean[rows, p] = labels[used]
        attention = batch["attention_mask"].numpy().astype(bool)
        cand = attention & ~np.isin(clean, [0, 2, 3, 4])
        assert not np.isin(clean[rows, p], list(SPECIAL - {1})).any()  # specials and padding never chosen
        assert attention[rows, p].all()
        # each position at most once per row
        assert all(len(set(pos[r][used[r]])) == used[r].sum() for r in range(len(pos)))
        candidates += cand.sum()
        chosen += used.sum()
        new = ids[rows, p]
        replaced_mask += (new == 4).sum()
        kept += (new == labels[used]).sum()
        random = (new != 4) & (new != labels[used])
        replaced_random += random.sum()
        assert not np.isin(new[random], list(SPECIAL)).any()  # random tokens are ordinary tokens
        # corruption only at chosen positions
        other = np.ones_like(ids, dtype=bool)
        other[rows, p] = False
        assert np.array_equal(ids[other], clean[other])
    assert abs(chosen / candidates - 0.15) < 0.01
    # kept also counts random draws equal to the original (p = 1/195), so compare with that in mind
    assert abs(replaced_mask / chosen - 0.8) < 0.02
    assert abs(replaced_random / chosen - 0.1) < 0.015
    assert abs(kept / chosen - 0.1) < 0.015


def test_nsp_pairs_multi_document() -> None:
    obj = objective(nsp=True)
    c = corpus()
    spans = obj.example_spans(c, 64)
    assert (spans[:, 1] - spans[:, 0] <= 61).all() and (spans[:, 1] - spans[:, 0] >= 2).all()
    doc_tok = c.sentences[c.documents]
    # spans never cross documents
    assert np.array_equal(np.searchsorted(doc_tok, spans[:, 0], "right"), np.searchsorted(doc_tok, spans[:, 1] - 1, "right"))
    rng = np.random.default_rng(3)
    a0, a1, b0, b1, label = obj._nsp_segments(c, spans[rng.integers(0, len(spans), 4000)], rng)
    assert abs(label.mean() - 0.5) < 0.03
    assert ((a1 > a0) & (b1 > b0)).all()
    nxt = label == 0
    assert (b0[nxt] == a1[nxt]).all()  # true continuation
    doc_a = np.searchsorted(doc_tok, a0, "right")
    doc_b = np.searchsorted(doc_tok, b0, "right")
    assert (doc_a[~nxt] != doc_b[~nxt]).all()  # negatives from another document
    assert (np.searchsorted(doc_tok, b1 - 1, "right") == doc_b).all()  # B stays inside its document
    assert ((a1 - a0) + (b1 - b0) <= 61).all()


def test_nsp_single_document_and_batch_layout() -> None:
    obj = objective(nsp=True)
    c = corpus(docs=None)
    spans = obj.example_spans(c, 64)
    rng = np.random.default_rng(5)
    a0, a1, b0, b1, label = obj._nsp_segments(c, spans[rng.integers(0, len(spans), 2000)], rng)
    assert abs(label.mean() - 0.5) < 0.04
    neg = label == 1
    assert ((b0[neg] >= a1[neg] + (a1 - a0)[neg]) | (b1[neg] <= a0[neg])).all()  # away from A

    batch = obj.collate(c, spans[:16], np.random.default_rng(0))
    ids, seg, att = batch["input_ids"].numpy(), batch["token_type_ids"].numpy(), batch["attention_mask"].numpy()
    labels, pos = batch["mlm_labels"].numpy(), batch["mlm_positions"].numpy()
    used = labels != -100
    ids[np.nonzero(used)[0], pos[used]] = labels[used]
    for r in range(16):
        n = att[r].sum()
        assert att[r, :n].all() and not att[r, n:].any() and (ids[r, n:] == 0).all()
        row = ids[r, :n]
        seps = np.flatnonzero(row == 3)
        assert row[0] == 2 and len(seps) == 2 and seps[1] == n - 1
        assert (seg[r, : seps[0] + 1] == 0).all() and (seg[r, seps[0] + 1 : n] == 1).all() and (seg[r, n:] == 0).all()
    assert batch["nsp_labels"].shape == (16,)


def test_full_sentence_packing_without_nsp() -> None:
    obj = objective(nsp=False)
    c = corpus()
    spans = obj.example_spans(c, 64)
    assert (spans[:, 1] - spans[:, 0] <= 62).all()
    assert np.isin(spans[:, 0], c.sentences).all() and np.isin(spans[:, 1], c.sentences).all()  # whole sentences
    # every sentence is used exactly once, in order
    assert np.array_equal(spans[1:, 0], spans[:-1, 1]) and spans[0, 0] == 0 and spans[-1, 1] == c.sentences[-1]
    batch = obj.collate(c, spans[:4], np.random.default_rng(0))
    assert "nsp_labels" not in batch and int(batch["token_type_ids"].sum()) == 0
    ids, labels, pos = batch["input_ids"].numpy(), batch["mlm_labels"].numpy(), batch["mlm_positions"].numpy()
    used = labels != -100
    ids[np.nonzero(used)[0], pos[used]] = labels[used]
    s, e = spans[0]
    assert np.array_equal(ids[0, 1 : 1 + e - s], c.tokens[s:e]) and ids[0, e - s + 1] == 3


def test_sparse_head_equals_dense_head_on_chosen_positions() -> None:
    torch.manual_seed(0)
    obj = objective(nsp=True)
    backbone = TransformerEncoder(model_cfg()).eval()
    obj.eval()
    c = corpus()
    batch = obj.collate(c, obj.example_spans(c, 64)[:8], np.random.default_rng(0))
    out = obj(backbone, batch)
    h = backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    logits = obj.mlm_head(h.last_hidden_state, backbone.output_embeddings())  # all positions
    labels = batch["mlm_labels"]
    used = labels != -100
    rows = torch.nonzero(used)[:, 0]
    chosen = logits[rows, batch["mlm_positions"][used]]
    mlm = F.cross_entropy(chosen, labels[used])
    nsp = F.cross_entropy(obj.nsp_head(h.pooled), batch["nsp_labels"])
    torch.testing.assert_close(out.metrics["mlm_loss"], mlm)
    torch.testing.assert_close(out.loss, mlm + nsp)
    assert out.n_predictions == int(used.sum()) and out.n_tokens == int(batch["attention_mask"].sum())
    assert set(out.metrics) == {"mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc"}


def test_state_dict_keys_and_tied_gradient() -> None:
    torch.manual_seed(0)
    obj = objective(nsp=True)
    model = PretrainModel(TransformerEncoder(model_cfg()), obj)
    keys = set(model.state_dict())
    assert {"objective.mlm_head.dense.weight", "objective.mlm_head.norm.weight", "objective.mlm_head.bias",
            "objective.nsp_head.weight", "backbone.embeddings.word_embeddings.weight"} <= keys
    assert not any("decoder" in k for k in keys)  # the decoder is the word-embedding matrix
    c = corpus()
    batch = obj.collate(c, obj.example_spans(c, 64)[:4], np.random.default_rng(0))
    model(batch).loss.backward()
    grad = model.backbone.embeddings.word_embeddings.weight.grad
    absent = sorted(set(range(5, 200)) - set(batch["input_ids"].unique().tolist()))
    assert absent and grad[absent].abs().sum() > 0  # reached only through the tied decoder


def test_loss_falls_on_repeated_corpus() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = rng.integers(5, 40, size=12)
    tokens = np.tile(sentence, 40).astype(np.uint16)
    c = SimpleNamespace(tokens=tokens, sentences=np.arange(0, len(tokens) + 1, 12, dtype=np.int64),
                        documents=np.array([0, 20, 40], dtype=np.int64))
    tok = special_ids(40)
    cfg = model_cfg(vocab_size=40, dropout=0.0, attention_dropout=0.0)
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, MaskedLM(MLMConfig(nsp=True), encoder, tok))
    spans = model.objective.example_spans(c, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _step in range(30):
        batch = model.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng)
        out = model(batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.metrics["mlm_loss"].item())
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])


def test_unigram_output_bias_is_log_frequency_of_training_tokens() -> None:
    from ptmkit.objectives.base import token_counts

    c = corpus()
    spans = np.array([[0, 40], [30, 70], [500, 520]])  # overlapping tokens 30..39 count once
    counts = token_counts(c, spans, 200)
    expected = np.bincount(np.concatenate([c.tokens[0:70], c.tokens[500:520]]).astype(np.int64), minlength=200)
    np.testing.assert_array_equal(counts, expected)

    zeros = objective(nsp=False)
    zeros.init_from_corpus(c, spans)  # default: BERT's zero bias, untouched
    assert torch.count_nonzero(zeros.mlm_head.bias) == 0

    obj = objective(nsp=False, output_bias="unigram")
    obj.init_from_corpus(c, spans)
    bias = obj.mlm_head.bias.detach().double().numpy()
    smoothed = (expected + 1.0)
    smoothed[[0, 2, 3, 4]] = 0.0  # [PAD] [CLS] [SEP] [MASK] are never predicted
    ordinary = np.array([i for i in range(200) if i not in (0, 2, 3, 4)])
    np.testing.assert_allclose(bias[ordinary], np.log(smoothed[ordinary] / smoothed.sum()), rtol=1e-6)
    assert np.exp(bias[ordinary]).sum() == pytest.approx(1.0, abs=1e-5)
    assert (bias[[0, 2, 3, 4]] < -25).all()
    with pytest.raises(PtmError, match="output_bias"):
        MLMConfig(output_bias="log")
