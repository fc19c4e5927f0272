"""Same command, same run: two `ptm pretrain` processes on the same text give the same tokenizer
file and the same losses, step for step (the tokenizer is trained inside the run)."""

from __future__ import annotations

import random
import subprocess
import sys

from ptmkit.train.metrics_log import read_metrics

OVERRIDES = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
    "tokenizer.vocab_size=300", "tokenizer.min_frequency=1",
    "train.batch_size=8", "train.seq_len=32", "train.max_steps=6", "train.warmup_steps=2",
    "train.log_every=1", "train.eval_every=3", "train.save_every=0", "train.eval_batches=2", "train.num_threads=1",
]


def test_same_command_same_tokenizer_and_losses(tmp_path):
    rng = random.Random(0)
    # enough distinct words with tied pair counts that hash-order tie-breaking would show
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) for _ in range(600)) + "\n")
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name
        cmd = [sys.executable, "-m", "ptmkit.cli", "pretrain", "bert-tiny", "--data", str(text), "-o", str(run), *OVERRIDES]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        runs.append(run)
    a, b = runs
    assert (a / "data" / "tokenizer.json").read_bytes() == (b / "data" / "tokenizer.json").read_bytes()
    la = [(r["step"], r["loss"]) for r in read_metrics(a / "metrics.jsonl")]
    lb = [(r["step"], r["loss"]) for r in read_metrics(b / "metrics.jsonl")]
    assert len(la) >= 6 and la == lb
