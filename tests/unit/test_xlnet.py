"""XLNet: relative shift, two-stream masks, partial prediction, the loss against a float64 direct
computation of the paper's equations, parallel streams and the memory carried across steps."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import special_ids

from ptmkit import registry
from ptmkit.build import build_model
from ptmkit.data.batches import PretrainBatches, split_spans
from ptmkit.encoders.xlnet import XLNetConfig, XLNetEncoder, rel_shift, relative_encodings
from ptmkit.errors import PtmError
from ptmkit.objectives.plm import PermutationLM, PLMConfig, StreamMemory, factorisation_masks

V = 60
TOK = special_ids(V)
MODEL = dict(encoder="xlnet", vocab_size=V, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, mem_len=5)


def model(dropout: float = 0.0, seed: int = 0, **kw):
    torch.manual_seed(seed)
    pm = build_model({"model": {**MODEL, "dropout": dropout, **kw}, "objective": {"name": "plm"}}, TOK)
    with torch.no_grad():  # non-zero biases, so every term of the score is exercised
        g = torch.Generator().manual_seed(seed + 1)
        for p in pm.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return pm.eval()


def corpus(n_sent: int = 120, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 12, size=n_sent)
    sent = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    tokens = rng.integers(5, V, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, n_sent], dtype=np.int64))


# -- config ------------------------------------------------------------------------------------
def test_registration_config_and_presets():
    from ptmkit.presets import load_preset

    assert registry.get("encoder", "xlnet") is XLNetEncoder
    assert registry.get("objective", "plm") is PermutationLM
    assert PLMConfig().partial_k == 6 and PLMConfig().max_ngram == 5
    tiny = load_preset("xlnet-tiny")
    assert tiny["model"]["num_layers"] == 2 and tiny["model"]["hidden_size"] == 128 and tiny["model"]["mem_len"] == 64
    base = load_preset("xlnet-base")
    assert (base["model"]["num_layers"], base["model"]["hidden_size"], base["model"]["num_heads"]) == (12, 768, 12)
    assert base["train"]["seq_len"] == 512 and base["model"]["mem_len"] == 384
    with pytest.raises(PtmError, match="partial_k"):
        PLMConfig(partial_k=0)
    with pytest.raises(PtmError, match="num_heads"):
        XLNetConfig(hidden_size=30, num_heads=4)
    with pytest.raises(PtmError, match="mem_len"):
        XLNetConfig(mem_len=-1)
    with pytest.raises(PtmError, match="cannot be used with encoder"):
        build_model({"model": {"encoder": "transformer", "vocab_size": V, "hidden_size": 16, "num_heads": 2,
                               "num_layers": 1, "intermediate_size": 8}, "objective": {"name": "plm"}}, TOK)


# -- relative positions ------------------------------------------------------------------------
def test_rel_shift_against_a_direct_loop():
    for M, Q in ((0, 5), (3, 4), (7, 1)):
        K = M + Q
        x = torch.randn(2, 3, Q, K + Q)
        out = rel_shift(x, K)
        ref = torch.empty(2, 3, Q, K)
        for i in range(Q):
            for j in range(K):
                dist = (M + i) - j  # query at absolute position M + i, key at j
                ref[:, :, i, j] = x[:, :, i, K - dist]  # row p encodes distance K - p
        torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_relative_encodings_are_sinusoids_of_the_distance():
    R = relative_encodings(6, 4, 8, -1, "cpu", torch.float64)
    assert R.shape == (10, 8)
    for p in range(10):
        d = 6 - p
        expect = [math.sin(d / 10000 ** (2 * k / 8)) for k in range(4)] + [math.cos(d / 10000 ** (2 * k / 8)) for k in range(4)]
        np.testing.assert_allclose(R[p].numpy(), expect, atol=1e-6)
    clamped = relative_encodings(6, 4, 8, 2, "cpu", torch.float32)
    torch.testing.assert_close(clamped[0], clamped[4])  # distances 6 and 2 share one encoding


# -- the two streams ---------------------------------------------------------------------------
def _order():
    targets = np.zeros((1, 8), dtype=bool)
    targets[0, [1, 2, 5]] = True
    rank, sees = factorisation_masks(targets, np.random.default_rng(3))
    return rank[0], torch.from_numpy(sees), torch.tensor([[1, 2, 5]])


@torch.no_grad()
def test_streams_read_exactly_what_the_order_allows():
    """Perturb one input token: the query stream at target ``i`` changes iff the token precedes
    ``i`` in the factorisation order (never its own); the content stream at ``i`` iff it is at or
    before ``i`` (a non-target's content sees the non-target block); memory reaches both."""
    pm = model()
    rank, sees, pos = _order()
    ids = torch.randint(5, V, (1, 8), generator=torch.Generator().manual_seed(0))
    mems = [torch.randn(1, 3, 16) for _ in range(2)]
    base = pm.backbone(ids, sees=sees, target_positions=pos, mems=mems)
    for j in range(8):
        other = ids.clone()
        other[0, j] = 5 + (int(ids[0, j]) - 5 + 7) % (V - 5)
        out = pm.backbone(other, sees=sees, target_positions=pos, mems=mems)
        g_changed = (out.extras["query"] - base.extras["query"]).abs().amax(-1)[0] > 1e-6
        h_changed = (out.last_hidden_state - base.last_hidden_state).abs().amax(-1)[0] > 1e-6
        for p, i in enumerate(pos[0].tolist()):
            assert bool(g_changed[p]) == (rank[j] < rank[i]), (i, j)
            assert i != j or not g_changed[p]  # never its own token
        for i in range(8):
            visible = rank[j] <= rank[i] if rank[i] >= 0 else rank[j] < 0
            assert bool(h_changed[i]) == (visible or i == j), (i, j)
    for layer in range(2):
        moved = [m.clone() for m in mems]
        moved[layer][0, 1] += 1.0
        out = pm.backbone(ids, sees=sees, target_positions=pos, mems=moved)
        assert (out.extras["query"] - base.extras["query"]).abs().amax(-1).min() > 1e-6
        assert (out.last_hidden_state - base.last_hidden_state).abs().amax(-1).min() > 1e-6


def test_factorisation_masks_match_a_loop():
    rng = np.random.default_rng(0)
    targets = rng.random((4, 10)) < 0.3
    rank, sees = factorisation_masks(targets, np.random.default_rng(1))
    for b in range(4):
        n = int(targets[b].sum())
        assert sorted(rank[b][targets[b]].tolist()) == list(range(n))
        assert (rank[b][~targets[b]] == -1).all()
        for i in range(10):
            for j in range(10):
                if targets[b, i]:  # a target sees the non-targets and the targets before it
                    want = (not targets[b, j]) or rank[b, j] < rank[b, i]
                else:  # a non-target sees the non-target block
                    want = not targets[b, j]
                assert sees[b, i, j] == want
        assert not sees[b][targets[b]][:, targets[b]].diagonal().any()


def test_partial_prediction_selects_the_last_1_over_K_as_ngrams():
    c = corpus()
    for K in (6, 4):
        pm = build_model({"model": MODEL, "objective": {"name": "plm", "partial_k": K, "max_ngram": 3}}, TOK)
        obj = pm.objective
        spans = obj.example_spans(c, 24)
        batch = obj.collate(c, spans[:16], np.random.default_rng(K))
        pos, labels, sees = batch["target_positions"].numpy(), batch["labels"].numpy(), batch["sees"].numpy()
        n = round(24 / K)
        assert pos.shape == (16, n) and (labels != -100).all()
        ids = batch["input_ids"].numpy()
        np.testing.assert_array_equal(labels, np.take_along_axis(ids, pos, 1))
        for b in range(16):
            assert len(set(pos[b].tolist())) == n
            targets = np.zeros(24, bool)
            targets[pos[b]] = True
            # the targets are the last n of the order: each sees all 24 - n non-targets
            seen = sees[b][targets].sum(1)
            assert sorted(seen.tolist()) == list(range(24 - n, 24))
        # n-gram spans: the slots list each span's tokens consecutively, ascending
        steps = np.diff(pos, axis=1)
        assert (steps == 1).mean() > 0.3  # spans of several tokens, not isolated tokens


# -- the loss against a float64 direct computation ---------------------------------------------
def _layer_norm(x, ln):
    return F.layer_norm(x, x.shape[-1:], ln.weight.double(), ln.bias.double(), ln.eps)


def direct_query_stream(enc: XLNetEncoder, ids, sees, pos, mems):
    """The paper's equations written out per example, head, query and key, in float64."""
    cfg = enc.config
    B, T = ids.shape
    n, d, H = cfg.num_heads, cfg.head_dim, cfg.hidden_size
    M = mems[0].shape[1]
    out = torch.zeros(B, pos.shape[1], H, dtype=torch.float64)
    for b in range(B):
        h = enc.word_embeddings.weight.double()[ids[b]]
        g = enc.mask_emb.double().expand(pos.shape[1], H)
        for li, layer in enumerate(enc.layers):
            a = layer.attn
            W = {k: getattr(a, k).weight.double() for k in "qkvro"}
            cat = torch.cat([mems[li][b].double(), h])
            k_, v_ = cat @ W["k"].T, cat @ W["v"].T

            def attend(x, i_abs, visible):
                q = x @ W["q"].T
                vec = torch.zeros(H, dtype=torch.float64)
                for head in range(n):
                    sl = slice(head * d, head * d + d)
                    scores = []
                    for j in range(M + T):
                        dist = i_abs - j
                        freq = torch.tensor([10000.0 ** (-2 * k / H) for k in range(H // 2)], dtype=torch.float64)
                        R = torch.cat([torch.sin(dist * freq), torch.cos(dist * freq)])
                        s = (q[sl] + a.r_w_bias.double()[head]) @ k_[j, sl]
                        s = s + (q[sl] + a.r_r_bias.double()[head]) @ (R @ W["r"].T)[sl]
                        scores.append(s / math.sqrt(d) if visible(j) else torch.tensor(-math.inf, dtype=torch.float64))
                    p = torch.softmax(torch.stack(scores), 0)
                    vec[sl] = p @ v_[:, sl]
                return vec @ W["o"].T

            def ffn(x):
                inner = layer.ffn.act(x @ layer.ffn.fc1.weight.double().T + layer.ffn.fc1.bias.double())
                return _layer_norm(x + inner @ layer.ffn.fc2.weight.double().T + layer.ffn.fc2.bias.double(), layer.ffn_norm)

            new_h = torch.stack([
                ffn(_layer_norm(h[i] + attend(h[i], M + i, lambda j, i=i: j < M or bool(sees[b, i, j - M]) or j - M == i), layer.attn_norm))
                for i in range(T)
            ])
            g = torch.stack([
                ffn(_layer_norm(g[p] + attend(g[p], M + t, lambda j, t=t: j < M or bool(sees[b, t, j - M])), layer.attn_norm))
                for p, t in enumerate(pos[b].tolist())
            ])
            h = new_h
        out[b] = g
    return out


@torch.no_grad()
def test_loss_against_a_direct_float64_computation():
    pm = model(seed=5)
    obj = pm.objective
    c = corpus()
    batch = obj.collate(c, obj.example_spans(c, 8)[:2], np.random.default_rng(0))
    mems = [torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    g = direct_query_stream(pm.backbone, batch["input_ids"], batch["sees"], batch["target_positions"], mems)
    logits = g @ pm.backbone.word_embeddings.weight.double().T + obj.lm_bias.double()
    labels = batch["labels"]
    ref = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    ours = pm.backbone(batch["input_ids"], sees=batch["sees"], target_positions=batch["target_positions"], mems=mems)
    torch.testing.assert_close(ours.extras["query"].double(), g, rtol=1e-5, atol=1e-5)
    # the objective's loss (memory from a stream state holding exactly these mems)
    obj.memory.write(torch.tensor([0, 1]), torch.tensor([0, 0]), [m for m in mems])
    out = obj(pm.backbone, {**batch, "stream_ids": torch.tensor([0, 1]), "stream_steps": torch.tensor([1, 1])})
    assert out.n_predictions == labels.numel()
    torch.testing.assert_close(out.loss.double(), ref, rtol=1e-5, atol=1e-6)


# -- streams and memory ------------------------------------------------------------------------
def test_batches_are_parallel_streams_with_continuing_rows():
    pm = build_model({"model": MODEL, "objective": {"name": "plm"}}, TOK)
    obj = pm.objective
    c = corpus(300)
    spans = obj.example_spans(c, 16)
    assert (spans[1:, 0] == spans[:-1, 1]).all()  # consecutive blocks of one stream
    train, held = split_spans(spans, 0.1, seed=0, contiguous=True)
    assert (train[1:, 0] == train[:-1, 1]).all() and held[0, 0] == train[-1, 1]
    src = PretrainBatches(c, obj, train, 16, batch_size=4, seed=0)
    spe = src.steps_per_epoch
    for epoch in (0, 1):
        for s in range(spe - 1):
            a, b = src.global_rows(epoch, s), src.global_rows(epoch, s + 1)
            assert (train[b, 0] == train[a, 1]).all()  # row i continues row i
        batch = src(epoch, 2)
        assert batch["stream_ids"].tolist() == [0, 1, 2, 3] and batch["stream_steps"].tolist() == [2] * 4
    # DDP ranks keep their rows and stream ids
    half = PretrainBatches(c, obj, train, 16, batch_size=4, seed=0, rank=1, world_size=2)(0, 3)
    assert half["stream_ids"].tolist() == [2, 3]
    # objectives that do not read streams keep their shuffled order and batch keys
    mlm = build_model({"model": {"encoder": "transformer", "vocab_size": V, "hidden_size": 16, "num_heads": 2,
                                 "num_layers": 1, "intermediate_size": 8}, "objective": {"name": "mlm"}}, TOK).objective
    shuffled = PretrainBatches(c, mlm, train, 16, batch_size=4, seed=0)
    np.testing.assert_array_equal(shuffled.permutation(0), np.random.default_rng([0, 0]).permutation(len(train)))
    assert "stream_ids" not in shuffled(0, 0)


def test_stream_memory_continues_only_the_next_block():
    mem = StreamMemory(4)
    ids = torch.tensor([0, 1, 2])
    assert mem.read(ids, torch.tensor([0, 0, 0]), "cpu") is None
    first = [torch.randn(3, 3, 2), torch.randn(3, 3, 2)]
    mem.write(ids, torch.zeros(3, dtype=torch.long), first)
    assert mem.read(ids, torch.full((3,), 2), "cpu") is None  # not the next block
    got = mem.read(ids[1:], torch.ones(2, dtype=torch.long), "cpu")
    torch.testing.assert_close(got[1], first[1][1:])
    state = mem.state_dict()
    again = StreamMemory(4)
    again.load_state_dict(state)
    torch.testing.assert_close(again.read(ids, torch.ones(3, dtype=torch.long), "cpu")[0], first[0])


def test_memory_is_carried_state_not_weights():
    pm = model(dropout=0.1)
    pm.train()
    obj = pm.objective
    assert obj.carries_state and "memory" not in " ".join(pm.state_dict())
    c = corpus(300)
    src = PretrainBatches(c, obj, obj.example_spans(c, 16), 16, batch_size=4, seed=0)
    out0 = pm(src(0, 0))
    assert obj.memory.state.values["filled"].tolist() == [5] * 4 and obj.memory.state.step.tolist() == [0] * 4
    out1 = pm(src(0, 1))
    assert torch.isfinite(out0.loss) and torch.isfinite(out1.loss)
    state = obj.carried_state_dict()
    assert state["values"]["mems"].shape == (4, 2, 5, 16)
    no_mem = model(dropout=0.1, mem_len=0)
    assert not no_mem.objective.carries_state


def test_pretrain_cli_loss_falls(tmp_path):
    from ptmkit.cli import main
    from ptmkit.train.trainer import read_metrics

    words = "the a cat dog sat ran on under mat house red big small and then saw it".split()
    rng = np.random.default_rng(0)
    text = tmp_path / "t.txt"
    text.write_text("".join(" ".join(rng.choice(words, 8)) + "\n" for _ in range(400)))
    run = tmp_path / "run"
    rc = main(["pretrain", "xlnet-tiny", "--data", str(text), "-o", str(run),
               "model.hidden_size=32", "model.intermediate_size=64", "model.mem_len=16", "tokenizer.vocab_size=80",
               "train.batch_size=8", "train.seq_len=32", "train.max_steps=24", "train.warmup_steps=4", "train.lr=3e-3",
               "train.log_every=4", "train.eval_every=0", "train.save_every=0", "train.num_threads=1"])
    assert rc == 0
    losses = [r["plm_loss"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.5


def test_plain_forward_serves_fine_tuning():
    """``forward(input_ids, attention_mask)`` is the bidirectional content stream: padding never
    changes a real token's state, and a classifier over it trains (mean pooling, scalar mix)."""
    from ptmkit.tasks.classification import SequenceClassifier

    pm = model()
    ids = torch.randint(5, V, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    full = pm.backbone(ids, mask).last_hidden_state
    alone = pm.backbone(ids[1:, :4]).last_hidden_state
    torch.testing.assert_close(full[1, :4], alone[0], rtol=1e-5, atol=1e-5)
    clf = SequenceClassifier(pm.backbone, num_labels=2, mix="scalar")
    assert clf.pooling == "mean"
    out = clf({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1])})
    out.loss.backward()
    assert pm.backbone.layers[0].attn.q.weight.grad.abs().sum() > 0


def test_trainer_refuses_carried_state_under_ddp(monkeypatch):
    from ptmkit.train import distributed
    from ptmkit.train.config import TrainConfig
    from ptmkit.train.trainer import Trainer

    pm = model()
    source = SimpleNamespace(steps_per_epoch=3)
    monkeypatch.setattr(distributed, "init_distributed", lambda device="auto", group_of_one=False: distributed.DistInfo(0, 2, 0))
    with pytest.raises(PtmError, match="mem_len=0"):
        Trainer(pm, source, TrainConfig(batch_size=4, device="cpu"))
    monkeypatch.undo()
    Trainer(pm, source, TrainConfig(batch_size=4, device="cpu"))  # one process: accepted


def test_targets_are_whole_words_when_the_corpus_records_them():
    c = corpus(200)
    c.word_starts = np.random.default_rng(2).random(len(c.tokens)) < 0.4  # words of ~2.5 tokens
    pm = build_model({"model": MODEL, "objective": {"name": "plm"}}, TOK)
    obj = pm.objective
    spans = obj.example_spans(c, 30)[:8]
    starts = obj.stream.word_starts(c, spans)
    batch = obj.collate(c, spans, np.random.default_rng(0))
    pos, labels = batch["target_positions"].numpy(), batch["labels"].numpy()
    word = np.cumsum(starts, axis=1)  # word index of each position
    for b in range(8):
        chosen = pos[b][labels[b] != -100]
        assert len(chosen) >= 1 and len(chosen) <= 5
        targets = np.zeros(30, bool)
        targets[chosen] = True
        for w in np.unique(word[b][chosen]):
            assert targets[word[b] == w].all()  # no word is predicted in part
