"""``ptm pretrain mass-tiny`` end to end: a falling loss on a toy corpus, greedy fragment
reconstructions from the saved run, and the HF (BART-format) export of the encoder–decoder."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from ptmkit.cli import main
from ptmkit.train.trainer import read_metrics

pytest.importorskip("ptmkit.data.batches")

TINY = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=48", "model.num_heads=2",
    "train.batch_size=8", "train.seq_len=40", "train.warmup_steps=4", "train.lr=3e-3", "train.log_every=1",
    "train.eval_batches=2", "train.num_threads=1", "train.device=cpu",
]


def write_corpus(path: Path, docs: int = 40, seed: int = 0) -> Path:
    rng = random.Random(seed)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            for _ in range(5):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) + "\n")
            f.write("\n")
    return path


def test_pretrain_mass_tiny_loss_falls_and_reconstructs(tmp_path) -> None:
    from ptmkit.pretrained import load_pretrained

    text = write_corpus(tmp_path / "train.txt")
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
