"""``ptm pretrain mass-tiny`` end to end: a falling loss on a toy corpus, greedy fragment
reconstructions from the saved run, and the HF (BART-format) export of the encoder–decoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY_PRETRAIN as TINY
from conftest import write_corpus

from ptmkit.cli import main
from ptmkit.train.trainer import read_metrics

pytest.importorskip("ptmkit.data.batches")

def test_pretrain_mass_tiny_loss_falls_and_reconstructs(tmp_path) -> None:
    from ptmkit.pretrained import load_pretrained

    text = write_corpus(tmp_path / "train.txt", docs=40, sentences=5, lengths=(4, 10))
    run = tmp_path / "run"
    rc = main(["pretrain", "mass-tiny", "--data", str(text), "-o", str(run), "tokenizer.vocab_size=120",
               "tokenizer.min_frequency=1", "train.max_steps=40", "train.eval_every=20", "train.save_every=20", *TINY])
    assert rc == 0
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["encoder"] == "encoder_decoder" and config["objective"]["name"] == "mass"
    rows = read_metrics(run / "metrics.jsonl", "train")
    losses = [r["loss"] for r in rows]
    assert len(losses) == 40 and np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    assert "mass_loss" in rows[0]
    evals = read_metrics(run / "metrics.jsonl", "eval")
    assert [r["step"] for r in evals] == [20, 40] and evals[1]["loss"] < evals[0]["loss"]
    pre = load_pretrained(run)
    shown = pre.objective.reconstruct(pre.backbone, pre.tokenizer, ["the cat sat on the mat", "a dog ran\nthen it saw"])
    assert len(shown) == 2 and shown[0]["original"] == "the cat sat on the mat"
    assert all("[MASK]" in r["noised"] for r in shown)
    assert all(isinstance(r["reconstruction"], str) and r["predicted_span"] for r in shown)
    assert main(["export", str(run), "-o", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "bart"
