"""ALBERT: config and presets, sentence-order pairs (balanced, really swapped, one document), the
n-gram masker it uses, the SOP loss against a direct computation, learning, the CLI end to end,
and the parameter counts of the paper's Table 1."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import special_ids

from ptmkit import registry
from ptmkit.build import build_encoder
from ptmkit.config import from_dict
from ptmkit.data.corpus import PackedBits
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.albert import ALBERT, ALBERTConfig
from ptmkit.objectives.base import PretrainModel
from ptmkit.presets import load_preset

V = 120
TOK = special_ids(V)


def corpus(n_docs: int = 40, seed: int = 0) -> SimpleNamespace:
    """Documents of 1..5 sentences of 3..15 ordinary tokens; every token starts a word."""
    rng = np.random.default_rng(seed)
    per_doc = rng.integers(1, 6, size=n_docs)
    sent = np.concatenate([[0], np.cumsum(rng.integers(3, 16, size=int(per_doc.sum())))]).astype(np.int64)
    tokens = rng.integers(5, V, size=int(sent[-1])).astype(np.uint16)
    n = len(tokens)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.concatenate([[0], np.cumsum(per_doc)]).astype(np.int64),
                           word_starts=PackedBits(np.packbits(np.ones(n, dtype=bool)), n))


def model_cfg(**kw) -> TransformerConfig:
    base = dict(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64,
                embedding_size=16, sharing="all")
    base.update(kw)
    return TransformerConfig(**base)


def model(cfg: TransformerConfig | None = None, **kw) -> PretrainModel:
    encoder = TransformerEncoder(cfg or model_cfg())
    return PretrainModel(encoder, ALBERT(ALBERTConfig(**kw), encoder, TOK))


def test_registered_preset_and_config() -> None:
    assert registry.get("objective", "albert") is ALBERT
    cfg = ALBERTConfig()
    assert (cfg.nsp, cfg.sop, cfg.masking, cfg.max_ngram) == (False, True, "ngram", 3)
    tiny, base = load_preset("albert-tiny"), load_preset("albert-base")
    assert tiny["objective"]["name"] == "albert" and tiny["model"]["sharing"] == "all"
    assert (base["model"]["embedding_size"], base["model"]["hidden_size"], base["model"]["num_layers"]) == (128, 768, 12)
    assert base["tokenizer"]["vocab_size"] == 30000
    with pytest.raises(PtmError, match="objective.nsp"):
        from_dict(ALBERTConfig, {"nsp": True}, "objective")
    with pytest.raises(PtmError, match="type_vocab_size"):
        model(model_cfg(type_vocab_size=1))
    m = model()
    assert {k for k in m.state_dict() if k.startswith("objective.sop_head")} == {"objective.sop_head.weight", "objective.sop_head.bias"}
    assert m.objective.mlm_head.dense.weight.shape == (16, 32)  # H -> E, decoder tied to [V, E]
    # n-gram law of the masker: p(n) = (1/n) / (1 + 1/2 + 1/3).
    np.testing.assert_allclose(m.objective.masker.probs, [6 / 11, 3 / 11, 2 / 11])


def test_sop_pairs_are_consecutive_segments_swapped_half_the_time() -> None:
    c = corpus(n_docs=600)
    m = model()
    spans = m.objective.example_spans(c, 40)
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    labels = batch["sop_labels"].numpy()
    n = len(labels)
    assert n > 700 and abs(labels.mean() - 0.5) < 3 * 0.5 / np.sqrt(n)  # balanced
    doc_tok = c.sentences[c.documents]
    for b, (st, en) in enumerate(spans):
        assert not ((doc_tok > st) & (doc_tok < en)).any()  # one document
        ids = batch["input_ids"][b].numpy().copy()
        lab = batch["mlm_labels"][b].numpy()
        ids[batch["mlm_positions"][b].numpy()[lab != IGNORE_INDEX]] = lab[lab != IGNORE_INDEX]  # undo the masking
        seg = batch["token_type_ids"][b].numpy()
        length = int(batch["attention_mask"][b].sum())
        assert ids[0] == TOK.cls_id and ids[length - 1] == TOK.sep_id
        first = ids[1 : np.flatnonzero(seg[:length] == 1)[0] - 1]  # [CLS] A [SEP] | B [SEP]
        second = ids[np.flatnonzero(seg[:length] == 1)[0] : length - 1]
        assert len(first) > 0 and len(second) > 0
        text = np.asarray(c.tokens[st:en], dtype=np.int64)
        # Label 0: A then B is the text; label 1: B then A is.
        order = np.concatenate([second, first]) if labels[b] else np.concatenate([first, second])
        assert np.array_equal(order, text), b
        if labels[b]:
            assert not np.array_equal(np.concatenate([first, second]), text)


def test_sop_off_gives_single_texts() -> None:
    c = corpus()
    m = model(sop=False)
    assert m.objective.sop_head is None and m.objective.exported_heads() == ("mlm",)
    batch = m.objective.collate(c, m.objective.example_spans(c, 40), np.random.default_rng(0))
    assert "sop_labels" not in batch and int(batch["token_type_ids"].sum()) == 0


def test_loss_equals_direct_computation() -> None:
    torch.manual_seed(0)
    c = corpus()
    m = model().eval()
    batch = m.objective.collate(c, m.objective.example_spans(c, 40)[:8], np.random.default_rng(1))
    out = m(batch)
    enc = m.backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    # Direct: pooled = tanh(W h_CLS + b), SOP logits = W' pooled + b'; MLM on the masked positions.
    pooled = torch.tanh(enc.last_hidden_state[:, 0] @ m.backbone.pooler.dense.weight.T + m.backbone.pooler.dense.bias)
    sop = F.cross_entropy(pooled @ m.objective.sop_head.weight.T + m.objective.sop_head.bias, batch["sop_labels"])
    losses = []
    for b in range(len(batch["input_ids"])):
        for pos, lab in zip(batch["mlm_positions"][b], batch["mlm_labels"][b]):
            if lab != IGNORE_INDEX:
                h = m.objective.mlm_head(enc.last_hidden_state[b, pos][None], m.backbone.output_embeddings())
                losses.append(F.cross_entropy(h, lab[None]))
    mlm = torch.stack(losses).mean()
    torch.testing.assert_close(out.metrics["sop_loss"], sop)
    torch.testing.assert_close(out.metrics["mlm_loss"], mlm)
    torch.testing.assert_close(out.loss, mlm + sop)


def test_both_losses_fall_on_a_toy_corpus() -> None:
    """Documents of a 4-token then a 14-token sentence: the order shows in how many tokens carry
    segment B, so the SOP loss must fall (from ln 2) along with the MLM loss."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    gen = np.random.default_rng(1)
    n_doc = 200
    tokens = np.tile(np.concatenate([gen.integers(5, 40, size=4), gen.integers(40, 80, size=14)]), n_doc).astype(np.uint16)
    sentences = np.cumsum(np.concatenate([[0], np.tile([4, 14], n_doc)])).astype(np.int64)
    c = SimpleNamespace(tokens=tokens, sentences=sentences, documents=np.arange(0, 2 * n_doc + 1, 2, dtype=np.int64))
    m = model(model_cfg(dropout=0.0, attention_dropout=0.0), mask_prob=0.2)
    spans = m.objective.example_spans(c, 40)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    mlm, sop = [], []
    for _ in range(70):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        mlm.append(out.metrics["mlm_loss"].item())
        sop.append(out.metrics["sop_loss"].item())
    assert np.mean(mlm[-5:]) < 0.6 * np.mean(mlm[:5])
    assert np.mean(sop[-5:]) < 0.5 * np.mean(sop[:5])


def test_cli_pretrain_albert_tiny(tmp_path, capsys) -> None:
    from ptmkit.cli import main
    from ptmkit.train.trainer import read_metrics

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()
    text = tmp_path / "train.txt"
    with open(text, "w", encoding="utf-8") as f:
        for _ in range(40):
            for _ in range(6):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "\n")
            f.write("\n")
    run = tmp_path / "run"
    rc = main([
        "pretrain", "albert-tiny", "--data", str(text), "-o", str(run),
        "model.hidden_size=32", "model.embedding_size=16", "model.intermediate_size=64", "model.max_position=64",
        "tokenizer.vocab_size=100", "tokenizer.min_frequency=1",
        "train.batch_size=8", "train.seq_len=48", "train.max_steps=20", "train.warmup_steps=2", "train.lr=3e-3",
        "train.log_every=5", "train.eval_every=20", "train.save_every=20", "train.eval_batches=2", "train.num_threads=1",
    ])
    assert rc == 0
    assert "M parameters" in capsys.readouterr().out
    config = json.loads((run / "config.json").read_text())
    assert config["objective"]["name"] == "albert" and config["objective"]["masking"] == "ngram"
    train = read_metrics(run / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == [5, 10, 15, 20]
    assert all({"loss", "mlm_loss", "sop_loss", "sop_acc"} <= set(r) for r in train)
    assert train[-1]["loss"] < train[0]["loss"]


def _count(preset: str, **model) -> int:
    """Encoder parameters of a preset (shared tensors once), built without memory."""
    section = dict(load_preset(preset)["model"], vocab_size=30000, **model)
    with torch.device("meta"):
        encoder = build_encoder(section)
    return sum(p.numel() for p in encoder.parameters())


@pytest.mark.parametrize(
    "preset, model, paper",
    [
        ("bert-base", {}, 108e6),
        ("albert-base", {}, 12e6),
        ("bert-base", dict(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096), 334e6),
        ("albert-base", dict(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096), 18e6),
        ("albert-base", dict(hidden_size=2048, num_layers=24, num_heads=16, intermediate_size=8192), 60e6),
    ],
    ids=["bert-base", "albert-base", "bert-large", "albert-large", "albert-xlarge"],
)
def test_parameter_counts_match_the_paper(preset: str, model: dict, paper: float) -> None:
    """ALBERT Table 1 (30K vocabulary, E = 128 for ALBERT): BERT-base 108M, ALBERT-base 12M,
    BERT-large 334M, ALBERT-large 18M, ALBERT-xlarge 60M."""
    assert _count(preset, **model) == pytest.approx(paper, rel=0.04)
