"""``ptm pretrain t5-tiny`` end to end: a falling loss, reconstructions that fill the sentinels,
the HF export, and an exact resume after a kill."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_PRETRAIN, write_corpus

from ptmkit.cli import main
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.trainer import read_metrics

TINY = [*TINY_PRETRAIN, "tokenizer.vocab_size=120", "tokenizer.min_frequency=1", "tokenizer.extra_ids=20"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """``ptm pretrain t5-tiny --data TEXT``: tokenizer (with sentinels) and corpus made from raw text."""
    root = tmp_path_factory.mktemp("t5")
    text = write_corpus(root / "train.txt", docs=40, sentences=5, lengths=(4, 10))
    run = root / "run"
    rc = main(["pretrain", "t5-tiny", "--data", str(text), "-o", str(run), "train.max_steps=40", "train.eval_every=20",
               "train.save_every=20", *TINY])
    assert rc == 0
    return root, run


def test_pretrain_loss_falls_and_the_model_fills_sentinels(first_run, tmp_path) -> None:
    from ptmkit.pretrained import load_pretrained

    root, run = first_run
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["encoder"] == "encoder_decoder" and config["objective"]["name"] == "t5"
    losses = [r["loss"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert len(losses) == 40 and np.mean(losses[-5:]) < 0.75 * np.mean(losses[:5])
    evals = read_metrics(run / "metrics.jsonl", "eval")
    assert [r["step"] for r in evals] == [20, 40] and evals[1]["loss"] < evals[0]["loss"]
    pre = load_pretrained(run)
    assert len(pre.tokenizer.sentinel_ids) == 20
    texts = ["the cat sat on the mat and then the dog ran under the big red house", "a dog ran\nthen it saw the cat"]
    shown = pre.objective.reconstruct(pre.backbone, pre.tokenizer, texts)
    assert len(shown) == 2 and shown[0]["original"] == texts[0]
    assert "<extra_id_0>" in shown[0]["noised"] and all(isinstance(r["reconstruction"], str) for r in shown)
    assert shown == pre.objective.reconstruct(pre.backbone, pre.tokenizer, texts)  # seeded
    assert main(["export", str(run), "-o", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "t5"


class Killed(Exception):
    """Stands in for SIGKILL: raised from a callback, so nothing after it runs."""


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl", "train")]


def test_resume_matches_uninterrupted(first_run, tmp_path) -> None:
    """Killed after its first checkpoint and resumed, the run's losses equal the uninterrupted
    run's step for step (span corruption, dropout and data order all restored)."""
    from ptmkit.workflows.pretrain import pretrain

    root, run = first_run
    overrides = [*TINY, "train.max_steps=8", "train.save_every=3", "train.eval_every=4"]
    kw = dict(data=run / "data", overrides=overrides, verbose=False)

    def kill_at_5(trainer, step):
        if step == 5:
            raise Killed

    pretrain("t5-tiny", out_dir=tmp_path / "full", **kw)
    with pytest.raises(Killed):
        pretrain("t5-tiny", out_dir=tmp_path / "cut", callbacks=[kill_at_5], **kw)
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step-0000003"
    pretrain("t5-tiny", out_dir=tmp_path / "cut", resume=True, **kw)
    a, b = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 9))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
    full = read_metrics(tmp_path / "full" / "metrics.jsonl", "eval")
    cut = read_metrics(tmp_path / "cut" / "metrics.jsonl", "eval")
    assert [r["step"] for r in full] == [r["step"] for r in cut] == [4, 8]
    np.testing.assert_allclose([r["loss"] for r in cut], [r["loss"] for r in full], rtol=0, atol=1e-6)
