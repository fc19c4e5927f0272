"""UniLM: config and presets, the four attention masks against a brute-force construction, the
mask reaching the encoder, the per-example mode mix, segment ids, target-only masking in seq2seq
fine-tuning, learning on a toy corpus, and greedy [MASK]-append decoding against a step-by-step
reference."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from ptmkit import registry
from ptmkit.config import from_dict
from ptmkit.encoders.transformer import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.generation import GenerationConfig, generate_ids
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.unilm import (
    MODES,
    PAPER_MIX,
    SEQ2SEQ,
    UniLM,
    UniLMConfig,
    attention_pattern,
    write_pairs,
)
from ptmkit.presets import load_preset
from ptmkit.workflows.generate import generation_kind

V = 60
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
TOK = SimpleNamespace(vocab_size=V, pad_id=PAD, unk_id=UNK, cls_id=CLS, sep_id=SEP, mask_id=MASK)


def corpus(doc_lines, seed: int = 0) -> SimpleNamespace:
    """Documents given as lists of sentence lengths; ordinary random tokens."""
    lengths = [n for doc in doc_lines for n in doc]
    sent = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    docs = np.concatenate([[0], np.cumsum([len(d) for d in doc_lines])]).astype(np.int64)
    tokens = np.random.default_rng(seed).integers(5, V, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=docs)


def model(seed: int = 0, type_vocab_size: int = 6, dropout: float = 0.0, **kw) -> PretrainModel:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position=64, type_vocab_size=type_vocab_size, dropout=dropout, attention_dropout=dropout)
    enc = TransformerEncoder(cfg)
    kw.setdefault("max_predictions", None)
    return PretrainModel(enc, UniLM(UniLMConfig(**kw), enc, TOK))


# -- config and presets -------------------------------------------------------------------------
def test_registered_presets_and_defaults() -> None:
    assert registry.get("objective", "unilm") is UniLM
    cfg = UniLMConfig()
    assert cfg.modes == MODES and cfg.mix == pytest.approx(PAPER_MIX) and not cfg.nsp
    tiny, base = load_preset("unilm-tiny"), load_preset("unilm-base")
    assert tiny["objective"]["name"] == "unilm" and tiny["model"]["type_vocab_size"] == 6
    assert tiny["model"]["hidden_size"] == 128 and base["model"]["hidden_size"] == 768 and base["model"]["num_layers"] == 12
    built = from_dict(UniLMConfig, {k: v for k, v in tiny["objective"].items() if k != "name"})
    assert built.modes == MODES and built.mix == pytest.approx(PAPER_MIX)
    assert generation_kind({"objective": {"name": "unilm"}}) == "seq2seq" and UniLM.generates_with_heads
    m = model()
    assert {k.split(".")[1] for k in m.state_dict() if k.startswith("objective.")} == {"mlm_head"}


@pytest.mark.parametrize("bad, key", [
    ({"modes": ("bidirectional", "left_to_rigth")}, "left_to_right"),  # suggests the nearest mode
    ({"mix": (0.5, 0.2, 0.2, 0.2)}, "sum"),
    ({"mix": (0.5, 0.5)}, "one per mode"),
    ({"mix": (1.2, -0.2, 0.0, 0.0)}, ">= 0"),
    ({"modes": ("seq2seq", "seq2seq"), "mix": (0.5, 0.5)}, "at most once"),
    ({"nsp": True}, "nsp"),
    ({"target_mask_prob": 0.0}, "target_mask_prob"),
])
def test_bad_config_is_a_ptm_error(bad, key) -> None:
    with pytest.raises(PtmError, match=key):
        UniLMConfig(**bad)


def test_unknown_key_through_from_dict() -> None:
    with pytest.raises(PtmError, match="mix"):
        from_dict(UniLMConfig, {"mixx": [1.0]})


# -- attention masks ----------------------------------------------------------------------------
def brute_force_mask(mode: str, s: int, T: int) -> np.ndarray:
    """The paper's masks as a float matrix (0 = may attend, -inf = blocked), one entry at a time."""
    M = np.full((T, T), -np.inf)
    for i in range(T):
        for j in range(T):
            if mode == "bidirectional":
                ok = True
            elif mode == "left_to_right":
                ok = j <= i
            elif mode == "right_to_left":
                ok = j >= i
            else:  # seq2seq: source sees the source; target sees the source and its own left context
                ok = (j < s) if i < s else (j < s or j <= i)
            if ok:
                M[i, j] = 0.0
    return M


def test_masks_match_brute_force() -> None:
    T = 9
    modes, sources = [], []
    for m in range(4):
        for s in (2, 4, 7):
            modes.append(m)
            sources.append(s)
    got = attention_pattern(torch.tensor(modes), torch.tensor(sources), T)
    assert got.shape == (len(modes), T, T) and got.dtype == torch.bool
    for b, (m, s) in enumerate(zip(modes, sources)):
        ref = brute_force_mask(MODES[m], s, T) == 0.0
        np.testing.assert_array_equal(got[b].numpy(), ref, err_msg=f"{MODES[m]} s={s}")


def test_the_mask_reaches_the_encoder() -> None:
    """The hidden state at position i under a mode equals the one computed on just the keys that
    mode lets i see (float64 encoder, no dropout): the mask is what the encoder uses."""
    m = model(seed=1).double()
    enc = m.backbone.eval()
    T, s = 8, 3
    ids = torch.randint(5, V, (1, T))
    for mode in range(4):
        pattern = attention_pattern(torch.tensor([mode]), torch.tensor([s]), T)
        h = enc(ids, attn_mask=pattern[:, None]).last_hidden_state
        # Reference: a float additive mask from the brute-force construction.
        ref_mask = torch.from_numpy(brute_force_mask(MODES[mode], s, T))[None, None]
        ref = enc(ids, attn_mask=ref_mask).last_hidden_state
        assert_close(h, ref, rtol=0, atol=1e-10)
    # Left-to-right: position 2 does not change when a later token does.
    pattern = attention_pattern(torch.tensor([1]), torch.tensor([s]), T)[:, None]
    other = ids.clone()
    other[0, 5] = (other[0, 5] - 5 + 1) % (V - 5) + 5
    a, b = enc(ids, attn_mask=pattern).last_hidden_state, enc(other, attn_mask=pattern).last_hidden_state
    assert_close(a[0, :5], b[0, :5], rtol=0, atol=1e-12)
    assert not torch.allclose(a[0, 5:], b[0, 5:])


# -- batches ------------------------------------------------------------------------------------
def test_mode_mix_frequencies_over_many_batches() -> None:
    m = model()
    c = corpus([[6, 5, 7, 4]] * 30)
    spans = m.objective.example_spans(c, 32)
    rng = np.random.default_rng(0)
    modes = np.concatenate([
        m.objective.collate(c, spans[rng.integers(0, len(spans), 32)], rng)["unilm_mode"].numpy() for _ in range(250)
    ])
    freq = np.bincount(modes, minlength=4) / len(modes)
    n = len(modes)
    for k, p in enumerate(PAPER_MIX):
        assert abs(freq[k] - p) < 5 * np.sqrt(p * (1 - p) / n), (MODES[k], freq[k], p)
    # Modes are mixed within a batch, as the paper does.
    one = m.objective.collate(c, spans[:32], np.random.default_rng(1))["unilm_mode"]
    assert len(set(one.tolist())) > 1


def test_a_custom_mix_and_subset_of_modes() -> None:
    m = model(modes=("left_to_right", "seq2seq"), mix=(0.25, 0.75))
    c = corpus([[6, 5, 7, 4]] * 10)
    spans = m.objective.example_spans(c, 32)
    rng = np.random.default_rng(0)
    modes = np.concatenate([m.objective.collate(c, spans, rng)["unilm_mode"].numpy() for _ in range(100)])
    assert set(modes.tolist()) == {1, 3}
    assert abs((modes == 3).mean() - 0.75) < 0.05


def test_segments_and_source_len() -> None:
    m = model()
    c = corpus([[6, 5, 7, 4]] * 10)
    spans = m.objective.example_spans(c, 32)
    batch = m.objective.collate(c, spans, np.random.default_rng(3))
    ids, seg, att = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    for b in range(len(ids)):
        mode, s, n = int(batch["unilm_mode"][b]), int(batch["source_len"][b]), int(att[b].sum())
        assert ids[b, 0] == CLS and ids[b, s - 1] == SEP and ids[b, n - 1] == SEP
        want_a, want_b = {0: (0, 1), 1: (2, 2), 2: (3, 3), 3: (4, 5)}[mode]
        assert (seg[b, :s] == want_a).all() and (seg[b, s:n] == want_b).all() and (seg[b, n:] == 0).all()
    # two segment embeddings (a BERT checkpoint): A/B = 0/1 for bidirectional and seq2seq, LM modes 0
    m2 = model(type_vocab_size=2)
    batch = m2.objective.collate(c, spans, np.random.default_rng(3))
    assert int(batch["token_type_ids"].max()) <= 1
    lm = (batch["unilm_mode"] == 1) | (batch["unilm_mode"] == 2)
    assert (batch["token_type_ids"][lm] == 0).all()


def test_collate_is_a_function_of_the_rng() -> None:
    m = model()
    c = corpus([[6, 5, 7, 4]] * 10)
    spans = m.objective.example_spans(c, 32)
    a = m.objective.collate(c, spans, np.random.default_rng(7))
    b = m.objective.collate(c, spans, np.random.default_rng(7))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_seq2seq_finetune_masks_only_the_target() -> None:
    m = model(seq2seq_finetune=True, target_mask_prob=0.5)
    # pairs: (source line, target line(s)); a one-line document is skipped
    c = corpus([[5, 4], [7, 3, 2], [6], [4, 6]] * 8)
    spans = m.objective.example_spans(c, 32)
    assert len(spans) == 24
    rng = np.random.default_rng(0)
    sep_predicted = 0
    for _ in range(30):
        batch = m.objective.collate(c, spans, rng)
        assert (batch["unilm_mode"] == SEQ2SEQ).all()
        used = batch["mlm_labels"] != IGNORE_INDEX
        pos, s = batch["mlm_positions"], batch["source_len"][:, None]
        n = batch["attention_mask"].sum(1, keepdim=True)
        assert (pos[used] >= s.expand_as(pos)[used]).all(), "a source token was predicted"
        assert (pos[used] < n.expand_as(pos)[used]).all()
        # about half of each target (tokens + final [SEP]) is predicted
        assert (used.sum(1) == torch.round(0.5 * (n[:, 0] - s[:, 0]).double()).clamp(min=1).long()).all()
        sep_predicted += int((batch["mlm_labels"][used] == SEP).sum())
    assert sep_predicted > 0, "the final [SEP] is never a target"


def test_seq2seq_finetune_cuts_long_pairs() -> None:
    m = model(seq2seq_finetune=True)
    c = corpus([[30, 40], [3, 50], [40, 2]])
    spans = m.objective.example_spans(c, 20)
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    n = batch["attention_mask"].sum(1)
    assert (n <= 20).all() and (batch["source_len"] >= 3).all() and (n - batch["source_len"] >= 2).all()
    # 17 tokens of room: half (8) to a long source, all of a short one; a short target leaves the rest
    assert batch["source_len"].tolist() == [10, 5, 17]


def test_seq2seq_finetune_without_pairs_is_an_error() -> None:
    m = model(seq2seq_finetune=True)
    with pytest.raises(PtmError, match="pair"):
        m.objective.example_spans(corpus([[5], [6]]), 32)


def test_write_pairs(tmp_path) -> None:
    tsv = tmp_path / "p.tsv"
    tsv.write_text("a b\tc d\n\nx\ty  z\n", encoding="utf-8")
    out = write_pairs(tsv, tmp_path / "p.txt")
    assert out.read_text(encoding="utf-8") == "a b\nc d\n\nx\ny z\n"
    tsv.write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(PtmError, match=":1:"):
        write_pairs(tsv, tmp_path / "q.txt")


# -- training -----------------------------------------------------------------------------------
def test_loss_equals_mlm_head_on_the_masked_positions() -> None:
    m = model(seed=2)
    m.eval()
    c = corpus([[6, 5, 7, 4]] * 6)
    spans = m.objective.example_spans(c, 32)
    batch = m.objective.collate(c, spans, np.random.default_rng(0))
    out = m(batch)
    h = m.objective.hidden(m.backbone, batch)
    terms = []
    for b in range(len(spans)):
        for slot in range(batch["mlm_labels"].shape[1]):
            label = int(batch["mlm_labels"][b, slot])
            if label != IGNORE_INDEX:
                logits = m.objective.mlm_head(h[b, batch["mlm_positions"][b, slot]][None], m.backbone.output_embeddings())
                terms.append(-torch.log_softmax(logits[0].double(), -1)[label])
    assert_close(out.loss.double(), torch.stack(terms).mean(), rtol=1e-5, atol=1e-6)
    assert out.n_predictions == len(terms)


def test_50_steps_loss_falls_on_a_toy_corpus() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sentence = np.random.default_rng(1).integers(5, 25, size=10)
    c = SimpleNamespace(tokens=np.tile(sentence, 80).astype(np.uint16),
                        sentences=np.arange(0, 10 * 80 + 1, 10, dtype=np.int64), documents=np.array([0, 80]))
    m = model(seed=0)
    spans = m.objective.example_spans(c, 24)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 16)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


# -- decoding -----------------------------------------------------------------------------------
def reference_greedy(m: PretrainModel, source: list[int], steps: int) -> list[int]:
    """One source alone, the whole sequence rebuilt each step: [CLS] x [SEP] y_<t [MASK], seq2seq
    mask, segments 4 / 5, arg-max of the MLM head at the [MASK]."""
    out: list[int] = []
    S = len(source)
    for _ in range(steps):
        ids = torch.tensor([source + out + [MASK]])
        T = ids.shape[1]
        seg = torch.tensor([[4] * S + [5] * (T - S)])
        pattern = torch.from_numpy(brute_force_mask("seq2seq", S, T))[None, None]
        h = m.backbone(ids, token_type_ids=seg, attn_mask=pattern).last_hidden_state
        logits = m.objective.mlm_head(h[0, -1][None], m.backbone.output_embeddings())
        nxt = int(logits.argmax(-1))
        out.append(nxt)
        if nxt == SEP:
            break
    return out


def test_greedy_decoding_matches_step_by_step_reference() -> None:
    m = model(seed=3)
    m.eval()
    with torch.no_grad():  # sharper logits than the 0.02 init, so the arg-max is not a near tie
        for p in m.parameters():
            p.add_(0.2 * torch.randn_like(p))
        m.objective.mlm_head.bias[SEP] += 3.0  # some rows reach [SEP] early
    sources = [[CLS, 7, 8, 9, SEP], [CLS, 11, SEP], [CLS, 20, 21, 22, 23, 24, SEP]]
    got = generate_ids(m.backbone, generation_kind({"objective": {"name": "unilm"}}), sources,
                       GenerationConfig(max_new_tokens=6, greedy=True), eos_id=SEP, pad_id=PAD, objective=m.objective)
    with torch.no_grad():
        want = [reference_greedy(m, s, 6) for s in sources]
    assert got == want
    assert any(row[-1] == SEP for row in got)


def test_learns_to_copy_and_ends_at_sep() -> None:
    """Seq2seq fine-tuning from scratch on copy pairs (target = source): greedy decoding writes
    the source back and stops at [SEP]."""
    torch.manual_seed(0)
    gen = np.random.default_rng(0)
    docs, toks = [], []
    for _ in range(200):
        src = gen.integers(5, 12, size=3)
        toks += [src, src]
        docs.append([3, 3])
    c = SimpleNamespace(tokens=np.concatenate(toks).astype(np.uint16),
                        sentences=np.arange(0, 6 * 200 + 1, 3, dtype=np.int64),
                        documents=np.arange(0, 401, 2, dtype=np.int64))
    m = model(seed=0, seq2seq_finetune=True, target_mask_prob=0.7)
    spans = m.objective.example_spans(c, 16)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(150):
        out = m(m.objective.collate(c, spans[rng.integers(0, len(spans), 32)], rng))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    sources = [[CLS, 5, 9, 7, SEP], [CLS, 11, 6, 8, SEP]]
    got = generate_ids(m.backbone, "seq2seq", sources, GenerationConfig(max_new_tokens=8, greedy=True), eos_id=SEP,
                       pad_id=PAD, objective=m.objective)
    assert got == [[5, 9, 7, SEP], [11, 6, 8, SEP]]
