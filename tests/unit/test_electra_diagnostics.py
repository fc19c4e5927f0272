"""ELECTRA's diagnostics and switches: the detector's ROC AUC / precision / recall, the uniform
generator, the temperature schedule, the generator's output bias, and their trip through the
trainer into the run's metrics log."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import special_ids

from ptmkit.config import from_dict
from ptmkit.data.batches import PretrainBatches
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.electra import ELECTRA, ELECTRAConfig, sampling_temperature
from ptmkit.presets import load_preset
from ptmkit.train.binary_metrics import precision_recall, roc_auc
from ptmkit.train.config import TrainConfig
from ptmkit.train.trainer import Trainer

TOK = special_ids(200)


def corpus(n_sent: int = 300, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    sent = np.concatenate([[0], np.cumsum(rng.integers(3, 21, size=n_sent))]).astype(np.int64)
    tokens = rng.integers(5, 200, size=int(sent[-1])).astype(np.uint16)
    return SimpleNamespace(tokens=tokens, sentences=sent, documents=np.array([0, n_sent], dtype=np.int64))


def model(**kw) -> PretrainModel:
    cfg = TransformerConfig(vocab_size=200, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=64)
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, ELECTRA(ELECTRAConfig(**kw), encoder, TOK))


def brute_force_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 1/2 P(tie), over all pairs."""
    pos, neg = scores[labels], scores[~labels]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_auc_matches_pairs_and_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 500
    labels = rng.random(n) < 0.15
    scores = np.round(rng.normal(size=n) + labels * 0.8, 1)  # rounded: many ties
    got = float(roc_auc(torch.from_numpy(scores), torch.from_numpy(labels)))
    assert got == pytest.approx(brute_force_auc(scores, labels), abs=1e-12)
    sklearn = pytest.importorskip("sklearn.metrics")
    assert got == pytest.approx(sklearn.roc_auc_score(labels, scores), abs=1e-12)


def test_roc_auc_edges_and_precision_recall() -> None:
    y = torch.tensor([0, 0, 1, 1])
    assert float(roc_auc(torch.tensor([0.1, 0.2, 0.3, 0.4]), y)) == 1.0
    assert float(roc_auc(torch.tensor([0.4, 0.3, 0.2, 0.1]), y)) == 0.0
    assert float(roc_auc(torch.full((4,), 0.7), y)) == 0.5  # a constant detector: the base rate only
    assert float(roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([0, 0]))) == 0.5  # one class: undefined
    p, r = precision_recall(torch.tensor([1, 1, 0, 0, 1]).bool(), torch.tensor([1, 0, 1, 0, 1]).bool())
    assert (float(p), float(r)) == pytest.approx((2 / 3, 2 / 3))
    p, r = precision_recall(torch.zeros(3, dtype=torch.bool), torch.tensor([1, 0, 0]).bool())
    assert (float(p), float(r)) == (0.0, 0.0)


def test_forward_metrics_match_a_direct_computation() -> None:
    torch.manual_seed(0)
    m = model().eval()
    c = corpus()
    batch = m.objective.collate(c, m.objective.example_spans(c, 48)[:8], np.random.default_rng(0))
    scores = {}
    hook = m.objective.rtd_head.register_forward_hook(lambda mod, i, o: scores.setdefault("s", o.detach()))
    orig = m.objective.replace_with
    seen = {}

    def spy(*args):
        out = orig(*args)
        seen["replaced"] = out[1]
        return out

    m.objective.replace_with = spy
    out = m(batch)
    hook.remove()
    real = batch["attention_mask"].bool()
    s, y = scores["s"][real].numpy(), (seen["replaced"][real] > 0).numpy()
    assert float(out.metrics["rtd_auc"]) == pytest.approx(brute_force_auc(s, y), abs=1e-6)
    tp = ((s > 0) & y).sum()
    assert float(out.metrics["rtd_precision"]) == pytest.approx(tp / max(1, (s > 0).sum()))
    assert float(out.metrics["rtd_recall"]) == pytest.approx(tp / max(1, y.sum()))
    assert float(out.metrics["replaced"]) == pytest.approx(y.mean())


def test_uniform_generator_has_no_generator_and_replaces_uniformly() -> None:
    m = model(generator="uniform")
    assert not any(".generator." in k or ".mlm_head." in k for k in m.state_dict())
    c = corpus()
    batch = m.objective.collate(c, m.objective.example_spans(c, 48)[:16], np.random.default_rng(0))
    torch.manual_seed(0)
    out = m(batch)
    assert "mlm_loss" not in out.metrics and torch.isfinite(out.loss)
    assert torch.allclose(out.loss, 50.0 * out.metrics["rtd_loss"])
    draws = m.objective.uniform_samples(100_000, torch.device("cpu"))
    assert draws.min() >= 5 and draws.max() <= 199  # ordinary tokens only
    counts = np.bincount(draws.numpy(), minlength=200)[5:]
    assert counts.min() > 0 and counts.std() / counts.mean() < 0.1  # ~uniform over 195 ids
    # Nearly every chosen token is replaced (a 1/195 chance of drawing the original).
    n_chosen = int((batch["mlm_labels"] != -100).sum())
    assert float(out.metrics["replaced"]) * int(batch["attention_mask"].sum()) > 0.95 * n_chosen
    with pytest.raises(PtmError, match="objective.generator"):
        ELECTRAConfig(generator="gan")


def test_temperature_schedule_is_a_function_of_the_step() -> None:
    cfg = ELECTRAConfig(temperature=3.0, temperature_decay_steps=100)
    assert [sampling_temperature(cfg, s) for s in (0, 50, 100, 500)] == [3.0, 2.0, 1.0, 1.0]
    assert sampling_temperature(ELECTRAConfig(temperature=2.0), 10_000) == 2.0
    m = model(temperature=3.0, temperature_decay_steps=100)
    m.objective.at_train_step(25)
    assert m.objective.temperature == 2.5
    with pytest.raises(PtmError, match="temperature_decay_steps"):
        ELECTRAConfig(temperature_decay_steps=-1)
    assert from_dict(ELECTRAConfig, {"temperature": "1.5"}).temperature == 1.5


def test_generator_output_bias_starts_at_zero_as_the_reference() -> None:
    preset = load_preset("electra-tiny")
    assert preset["objective"].get("output_bias", "zeros") == "zeros"
    m = model()
    m.objective.init_from_corpus(corpus(), m.objective.example_spans(corpus(), 48))
    assert torch.count_nonzero(m.objective.mlm_head.bias) == 0
    m = model(output_bias="unigram")  # the switch, off by default
    m.objective.init_from_corpus(corpus(), m.objective.example_spans(corpus(), 48))
    assert torch.count_nonzero(m.objective.mlm_head.bias) > 0
    m = model(generator_output_bias=False)  # no bias at all: logits are the tied decoder's
    assert "objective.mlm_head.bias" not in m.state_dict()
    h = torch.randn(3, m.objective.mlm_head.dense.in_features)
    w = m.backbone.output_embeddings()
    head = m.objective.mlm_head
    torch.testing.assert_close(head(h, w), head.norm(head.act(head.dense(h))) @ w.T)
    with pytest.raises(PtmError, match="generator_output_bias"):
        ELECTRAConfig(generator_output_bias=False, output_bias="unigram")


def test_trainer_logs_detector_metrics_and_drives_the_temperature(tmp_path) -> None:
    torch.manual_seed(0)
    m = model(temperature=2.0, temperature_decay_steps=4)
    c = corpus()
    spans = m.objective.example_spans(c, 48)
    train = PretrainBatches(c, m.objective, spans[:-32], 48, 8, seed=0)
    held = PretrainBatches(c, m.objective, spans[-32:], 48, 8, seed=0)
    cfg = TrainConfig(batch_size=8, seq_len=48, max_steps=6, log_every=1, eval_every=3, device="cpu", lr=1e-3)
    Trainer(m, train, cfg, run_dir=tmp_path, eval_batches=held, progress_bar=False).fit()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_recs = [r for r in records if r["split"] == "train"]
    eval_recs = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in eval_recs] == [3, 6]
    for r in train_recs + eval_recs:
        for key in ("rtd_auc", "rtd_precision", "rtd_recall", "replaced"):
            assert 0.0 <= r[key] <= 1.0, key
    # The record of step s was computed with the temperature after s - 1 completed steps.
    assert [r["temperature"] for r in train_recs] == pytest.approx([2.0, 1.75, 1.5, 1.25, 1.0, 1.0])


def test_a_raised_mask_rate_under_the_presets_cap_is_reported(caplog) -> None:
    c = corpus()
    with caplog.at_level("WARNING"):
        model(mask_prob=0.25, max_predictions=20).objective.example_spans(c, 128)
    assert "objective.max_predictions=20" in caplog.text and ">= 32" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        model(mask_prob=0.25, max_predictions=None).objective.example_spans(c, 128)
        model(max_predictions=20).objective.example_spans(c, 128)  # the preset: 15 % of 126 = 19
    assert "max_predictions" not in caplog.text


def test_resumed_run_continues_the_temperature_and_losses(tmp_path) -> None:
    c = corpus()

    class Stop(Exception):
        pass

    def interrupt(trainer, step):  # after step 3's checkpoint: an interrupted run
        if step == 3:
            raise Stop

    def run(out, max_steps, resume=False, callbacks=()):
        torch.manual_seed(0)
        m = model(temperature=3.0, temperature_decay_steps=4)
        spans = m.objective.example_spans(c, 48)
        cfg = TrainConfig(batch_size=8, seq_len=48, max_steps=max_steps, log_every=1, save_every=3, device="cpu",
                          lr=1e-3, bias_correction=False)
        Trainer(m, PretrainBatches(c, m.objective, spans, 48, 8, seed=0), cfg, run_dir=out, progress_bar=False,
                callbacks=callbacks).fit(resume)
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    straight = run(tmp_path / "a", 6)
    with pytest.raises(Stop):
        run(tmp_path / "b", 6, callbacks=[interrupt])
    resumed = run(tmp_path / "b", 6, resume=True)
    pick = lambda rs: [(r["step"], r["temperature"], r["loss"]) for r in rs if r["split"] == "train"]  # noqa: E731
    assert pick(resumed) == pick(straight)
