"""RoBERTa: config and presets, FULL-SENTENCES vs DOC-SENTENCES examples, static vs dynamic masks,
learning on a toy corpus, the CLI end to end, the parameter count of roberta-base."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import special_ids

from ptmkit import registry
from ptmkit.build import build_encoder
from ptmkit.config import from_dict
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.roberta import RoBERTa, RoBERTaConfig
from ptmkit.objectives.spans import pack_across_documents
from ptmkit.presets import load_preset

V = 120
TOK = special_ids(V)


def corpus(n_docs: int = 12, seed: int = 0, empty_docs: bool = False) -> SimpleNamespace:
    """Documents of 1..6 sentences of 3..20 ordinary tokens (optionally some empty documents)."""
    rng = np.random.default_rng(seed)
    per_doc = rng.integers(1, 7, size=n_docs)
    if empty_docs:
        per_doc[[2, 3, 7]] = 0
    n_sent = int(per_doc.sum())
    sent = np.concatenate([[0], np.cumsum(rng.integers(3, 21, size=n_sent))]).astype(np.int64)
    docs = np.concatenate([[0], np.cumsum(per_doc)]).astype(np.int64)
    tokens = rng.integers(5, V, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=docs)


def model(cfg: TransformerConfig | None = None, **kw) -> PretrainModel:
    cfg = cfg or TransformerConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                   max_position=64, type_vocab_size=1, pooler=False)
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, RoBERTa(RoBERTaConfig(**kw), encoder, TOK))


def test_registered_preset_and_config() -> None:
    assert registry.get("objective", "roberta") is RoBERTa
    cfg = RoBERTaConfig()
    assert (cfg.nsp, cfg.examples, cfg.mask_schedule, cfg.dupe_factor) == (False, "full_sentences", "dynamic", 10)
    tiny, base = load_preset("roberta-tiny"), load_preset("roberta-base")
    assert tiny["objective"]["name"] == "roberta" and tiny["tokenizer"]["kind"] == "bpe"
    assert tiny["model"]["type_vocab_size"] == 1 and tiny["train"]["betas"] == [0.9, 0.98]
    assert float(tiny["train"]["eps"]) == 1e-6
    assert base["model"]["hidden_size"] == 768 and base["tokenizer"]["vocab_size"] == 50265
    assert base["train"]["seq_len"] == 512
    for bad in ({"nsp": True}, {"examples": "full"}, {"mask_schedule": "fixed"}, {"dupe_factor": 0}, {"mask_seed": -1}):
        with pytest.raises(PtmError):
            from_dict(RoBERTaConfig, bad, "objective")


def test_full_sentences_cross_documents_with_a_separator() -> None:
    c = corpus(empty_docs=True)
    m = model(examples="full_sentences", mask_prob=0.01, mask_token_ratio=0.0, random_token_ratio=0.0)
    seq_len = 40
    spans = m.objective.example_spans(c, seq_len)
    doc_tok = np.unique(c.sentences[c.documents])
    sent_set = set(c.sentences.tolist())
    crossing = 0
    # Consecutive spans tile the whole token stream (nothing skipped, nothing repeated).
    assert spans[0, 0] == 0 and spans[-1, 1] == c.sentences[-1] and np.array_equal(spans[1:, 0], spans[:-1, 1])
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    masked = batch["mlm_positions"].numpy()
    for b, (st, en) in enumerate(spans):
        inner = doc_tok[(doc_tok > st) & (doc_tok < en)]
        crossing += len(inner) > 0
        assert st in sent_set and en in sent_set  # whole sentences (no sentence is longer than the budget)
        length = int(batch["attention_mask"][b].sum())
        assert length == (en - st) + len(inner) + 2 <= seq_len
        ids = batch["input_ids"][b, :length].numpy().copy()
        labels = batch["mlm_labels"][b]
        ids[masked[b][labels.numpy() != IGNORE_INDEX]] = labels[labels != IGNORE_INDEX].numpy()
        # Expected: [CLS] doc-part [SEP] doc-part ... [SEP], a separator before each document start.
        pieces = np.split(np.asarray(c.tokens[st:en], dtype=np.int64), inner - st)
        expected = [TOK.cls_id]
        for i, piece in enumerate(pieces):
            if i:
                expected.append(TOK.sep_id)
            expected.extend(piece.tolist())
        expected.append(TOK.sep_id)
        assert ids.tolist() == expected
    assert crossing > 0  # the corpus has short documents, so examples do cross


def test_doc_sentences_never_cross_documents() -> None:
    c = corpus()
    m = model(examples="doc_sentences")
    spans = m.objective.example_spans(c, 40)
    doc_tok = c.sentences[c.documents]
    for st, en in spans:
        assert not ((doc_tok > st) & (doc_tok < en)).any()
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    lengths = batch["attention_mask"].sum(1).numpy()
    assert np.array_equal(lengths, spans[:, 1] - spans[:, 0] + 2)
    # Fewer, shorter examples than FULL-SENTENCES on the same budget.
    full = model(examples="full_sentences").objective.example_spans(c, 40)
    assert len(full) < len(spans)


def test_pack_across_documents_counts_separators_and_splits_long_sentences() -> None:
    sent = np.array([0, 5, 9, 30, 33, 36], dtype=np.int64)  # sentence 2 is 21 tokens long
    docs = np.array([0, 1, 3, 5], dtype=np.int64)  # documents: [s0], [s1, s2], [s3, s4]
    spans = pack_across_documents(sent, docs, budget=10)
    # s0 (5) + separator + s1 (4) = 10 fits; s2 (21 > 10) becomes pieces of 10, 10 and 1; a span
    # starting at a document start needs no separator, so s3 + s4 = 6 tokens.
    assert spans.tolist() == [[0, 9], [9, 19], [19, 29], [29, 30], [30, 36]]
    # One token less of budget and the separator no longer fits: s0 and s1 are apart.
    assert pack_across_documents(sent, docs, budget=9)[:2].tolist() == [[0, 5], [5, 9]]


def _collate_twice(m, c, spans):
    """The same examples in two epochs (two different batch generators), and in another batch."""
    a = m.objective.collate(c, spans, np.random.default_rng([42, 0, 3, 1]))
    b = m.objective.collate(c, spans, np.random.default_rng([42, 1, 7, 1]))
    return a, b


def test_static_masks_repeat_across_epochs_and_dynamic_masks_do_not() -> None:
    c = corpus(n_docs=30)
    static = model(mask_schedule="static", dupe_factor=1)
    spans = static.objective.example_spans(c, 40)[:16]
    a, b = _collate_twice(static, c, spans)
    for k in ("input_ids", "mlm_positions", "mlm_labels"):
        assert torch.equal(a[k], b[k]), k
    # The mask belongs to the example, not to the batch it falls in.
    alone = static.objective.collate(c, spans[5:6], np.random.default_rng(9))
    used = a["mlm_labels"][5] != IGNORE_INDEX
    assert torch.equal(alone["mlm_positions"][0][alone["mlm_labels"][0] != IGNORE_INDEX], a["mlm_positions"][5][used])
    # Another seed gives other masks.
    other = model(mask_schedule="static", dupe_factor=1, mask_seed=1).objective.collate(c, spans, np.random.default_rng(0))
    assert not torch.equal(other["mlm_positions"], a["mlm_positions"])

    dynamic = model(mask_schedule="dynamic")
    a, b = _collate_twice(dynamic, c, spans)
    assert not torch.equal(a["mlm_positions"], b["mlm_positions"])
    assert torch.equal(a["attention_mask"], b["attention_mask"])  # same examples, new masks


def test_static_masks_come_from_dupe_factor_fixed_copies() -> None:
    c = corpus(n_docs=30)
    m = model(mask_schedule="static", dupe_factor=3)
    spans = m.objective.example_spans(c, 40)[:4]
    seen: list[set] = [set() for _ in spans]
    for epoch in range(40):
        batch = m.objective.collate(c, spans, np.random.default_rng([0, epoch]))
        for i in range(len(spans)):
            seen[i].add(tuple(batch["mlm_positions"][i][batch["mlm_labels"][i] != IGNORE_INDEX].tolist()))
    assert all(len(s) == 3 for s in seen)  # exactly the three fixed masks, each visited


def test_static_masking_keeps_the_masking_rate() -> None:
    """Each example predicts exactly its budget, max(1, round(0.15 n)) of its n ordinary tokens."""
    c = corpus(n_docs=60)
    m = model(mask_schedule="static", dupe_factor=10)
    spans = m.objective.example_spans(c, 40)
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    n_pred = (batch["mlm_labels"] != IGNORE_INDEX).sum(1).numpy()
    expected = np.maximum(1, np.rint(0.15 * (spans[:, 1] - spans[:, 0])))
    assert np.array_equal(n_pred, expected)


def test_loss_falls_on_a_toy_corpus() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = np.random.default_rng(1).integers(5, 40, size=12)
    tokens = np.tile(sentence, 60).astype(np.uint16)
    c = SimpleNamespace(tokens=tokens, sentences=np.arange(0, len(tokens) + 1, 12, dtype=np.int64),
                        documents=np.arange(0, 61, 3, dtype=np.int64))
    cfg = TransformerConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64,
                            type_vocab_size=1, pooler=False, dropout=0.0, attention_dropout=0.0)
    m = model(cfg, mask_prob=0.2)
    spans = m.objective.example_spans(c, 40)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-6)
    losses = []
    for _ in range(40):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.metrics["mlm_loss"].item())
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])


def test_cli_pretrain_roberta_tiny(tmp_path, capsys) -> None:
    from ptmkit.cli import main
    from ptmkit.train.trainer import read_metrics

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()
    text = tmp_path / "train.txt"
    with open(text, "w", encoding="utf-8") as f:
        for _ in range(40):
            for _ in range(rng.randint(1, 4)):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "\n")
            f.write("\n")
    run = tmp_path / "run"
    rc = main([
        "pretrain", "roberta-tiny", "--data", str(text), "-o", str(run),
        "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
        "tokenizer.vocab_size=300", "tokenizer.min_frequency=1",
        "train.batch_size=8", "train.seq_len=48", "train.max_steps=20", "train.warmup_steps=2", "train.lr=3e-3",
        "train.log_every=5", "train.eval_every=20", "train.save_every=20", "train.eval_batches=2", "train.num_threads=1",
    ])
    assert rc == 0
    assert "M parameters" in capsys.readouterr().out
    config = json.loads((run / "config.json").read_text())
    assert config["objective"]["name"] == "roberta" and config["objective"]["examples"] == "full_sentences"
    assert config["tokenizer"]["kind"] == "bpe" and config["train"]["betas"] == [0.9, 0.98]
    train = read_metrics(run / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == [5, 10, 15, 20]
    assert train[-1]["loss"] < train[0]["loss"]


def test_roberta_base_parameter_count() -> None:
    """The paper's RoBERTa-base: about 125M parameters with its 50K BPE vocabulary (no pooler here:
    HF's 124.6M counts one of 0.6M and two extra position rows)."""
    section = dict(load_preset("roberta-base")["model"], vocab_size=50265)
    with torch.device("meta"):
        encoder = build_encoder(section)
    n = sum(p.numel() for p in encoder.parameters())
    assert n == pytest.approx(125e6, rel=0.02)
    assert n == 124645632 - 768 * 768 - 768 - 2 * 768  # HF roberta-base minus its pooler and two position rows
