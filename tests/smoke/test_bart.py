"""``ptm pretrain bart-tiny`` end to end: a falling loss, exact resume after a kill, DDP under
torchrun, greedy reconstructions and the HF export of the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_PRETRAIN as TINY
from conftest import write_corpus

from ptmkit.cli import main
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.trainer import read_metrics

pytest.importorskip("ptmkit.data.batches")

@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """``ptm pretrain bart-tiny --data TEXT``: tokenizer and corpus made from raw text."""
    root = tmp_path_factory.mktemp("bart")
    text = write_corpus(root / "train.txt", docs=40, sentences=5, lengths=(4, 10))
    run = root / "run"
    rc = main(["pretrain", "bart-tiny", "--data", str(text), "-o", str(run), "tokenizer.vocab_size=120",
               "tokenizer.min_frequency=1", "train.max_steps=40", "train.eval_every=20", "train.save_every=20", *TINY])
    assert rc == 0
    return root, run


def test_pretrain_loss_falls_and_the_model_reconstructs(first_run, tmp_path) -> None:
    from ptmkit.pretrained import load_pretrained

    root, run = first_run
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["encoder"] == "encoder_decoder" and config["objective"]["name"] == "bart"
    losses = [r["loss"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert len(losses) == 40 and np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    evals = read_metrics(run / "metrics.jsonl", "eval")
    assert [r["step"] for r in evals] == [20, 40] and evals[1]["loss"] < evals[0]["loss"]
    pre = load_pretrained(run)
    shown = pre.objective.reconstruct(pre.backbone, pre.tokenizer, ["the cat sat on the mat", "a dog ran\nthen it saw"])
    assert len(shown) == 2 and shown[0]["original"] == "the cat sat on the mat"
    assert "[MASK]" in shown[0]["noised"] + shown[1]["noised"] and all(isinstance(r["reconstruction"], str) for r in shown)
    assert main(["export", str(run), "-o", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "bart"


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl", "train")]


class Killed(Exception):
    """Stands in for SIGKILL: raised from a callback, so nothing after it runs."""


def test_resume_matches_uninterrupted(first_run, tmp_path) -> None:
    """Killed after its first checkpoint and resumed, the run's losses equal the uninterrupted
    run's step for step (noising, dropout and data order all restored)."""
    from ptmkit.workflows.pretrain import pretrain

    root, run = first_run
    overrides = [*TINY, "train.max_steps=8", "train.save_every=3", "train.eval_every=4"]
    kw = dict(data=run / "data", overrides=overrides, verbose=False)

    def kill_at_5(trainer, step):
        if step == 5:
            raise Killed

    pretrain("bart-tiny", out_dir=tmp_path / "full", **kw)
    with pytest.raises(Killed):
        pretrain("bart-tiny", out_dir=tmp_path / "cut", callbacks=[kill_at_5], **kw)
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step-0000003"
    pretrain("bart-tiny", out_dir=tmp_path / "cut", resume=True, **kw)
    a, b = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 9))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
    full = read_metrics(tmp_path / "full" / "metrics.jsonl", "eval")
    cut = read_metrics(tmp_path / "cut" / "metrics.jsonl", "eval")
    assert [r["step"] for r in full] == [r["step"] for r in cut] == [4, 8]
    np.testing.assert_allclose([r["loss"] for r in cut], [r["loss"] for r in full], rtol=0, atol=1e-6)


def torchrun() -> str:
    exe = Path(sys.executable).with_name("torchrun")
    return str(exe) if exe.exists() else "torchrun"


def test_ddp_pretrain_under_torchrun(first_run, tmp_path) -> None:
    """Two processes (gloo) train the same global batches.  The first step's loss, logged over
    both ranks before any update, equals one process's; after that the runs differ by float
    rounding and by DDP averaging the two ranks' mean losses (their target counts differ a little)."""
    from ptmkit.workflows.pretrain import pretrain

    root, run = first_run
    overrides = [*TINY, "train.max_steps=6", "train.save_every=6", "train.eval_every=6", "model.dropout=0.0"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [torchrun(), "--nproc_per_node", "2", "--standalone", "-m", "ptmkit.cli", "pretrain", "bart-tiny",
           "--data", str(run / "data"), "-o", str(tmp_path / "ddp"), *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("final:") == 1  # rank 0 alone reports
    pretrain("bart-tiny", run / "data", tmp_path / "single", overrides, verbose=False)
    ddp, ref = _losses(tmp_path / "ddp"), _losses(tmp_path / "single")
    assert [s for s, _ in ddp] == [s for s, _ in ref] == list(range(1, 7))
    assert ddp[0][1] == pytest.approx(ref[0][1], rel=1e-5)
    np.testing.assert_allclose([l for _, l in ddp], [l for _, l in ref], rtol=2e-2)
    assert ddp[-1][1] < ddp[0][1]
    state = ckpt.latest_checkpoint(tmp_path / "ddp") / ckpt.STATE_FILE
    import torch

    saved = torch.load(state, weights_only=False)
    assert len(saved["rng"]) == 2 and saved["world_size"] == 2
