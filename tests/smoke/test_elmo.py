"""ELMo end to end: ``ptm pretrain elmo-tiny`` on a small text (falling loss, a loadable encoder
with its 2L + 1 layers), exact resume after a kill, and ``torchrun`` with 2 processes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ptmkit.cli import main
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.trainer import read_metrics

pytest.importorskip("ptmkit.data.batches")

# elmo-tiny's architecture, shrunk: 48 cells projected to 16, three small filters
SMALL = [
    "model.hidden_size=48", "model.projection_size=16", "model.filters=[[1,8],[2,8],[3,16]]", "model.max_chars=12",
    "train.batch_size=8", "train.seq_len=16", "train.warmup_steps=2", "train.lr=1e-2", "train.num_threads=1",
    "train.eval_batches=2",
]


def write_text(path: Path, docs: int = 20, seed: int = 0) -> Path:
    """Sentences of a small grammar (so that there is something to learn), a blank line between documents."""
    rng = random.Random(seed)
    nouns = "cat dog bird man woman child house tree car city".split()
    verbs = "sees likes finds takes wants has makes".split()
    adjs = "big small red old new happy quiet".split()

    def phrase() -> str:
        return " ".join(["the"] + ([rng.choice(adjs)] if rng.random() < 0.5 else []) + [rng.choice(nouns)])

    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            for _ in range(8):
                f.write(f"{phrase()} {rng.choice(verbs)} {phrase()} .\n")
            f.write("\n")
    return path


def losses(run: Path, split: str = "train") -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(run / "metrics.jsonl", split)]


def test_cli_pretrain_elmo_tiny(tmp_path, capsys) -> None:
    from ptmkit.pretrained import load_pretrained

    text = write_text(tmp_path / "text.txt")
    run = tmp_path / "run"
    rc = main(["pretrain", "elmo-tiny", "--data", str(text), "-o", str(run), *SMALL,
               "train.max_steps=30", "train.log_every=5", "train.eval_every=15", "train.save_every=15"])
    assert rc == 0
    assert "pretrain bilm" in capsys.readouterr().out
    train = read_metrics(run / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == list(range(5, 31, 5))
    # the softmax bias starts at the unigram log-frequencies: the first loss is already the unigram entropy
    assert train[-1]["loss"] < 0.8 * train[0]["loss"], [r["loss"] for r in train]
    for r in train:  # the loss is the mean of the two directions
        assert r["loss"] == pytest.approx(0.5 * (r["forward_loss"] + r["backward_loss"]), rel=1e-5)
    ev = read_metrics(run / "metrics.jsonl", "eval")
    assert [r["step"] for r in ev] == [15, 30] and ev[-1]["loss"] < ev[0]["loss"]
    assert ev[-1]["forward_ppl"] == pytest.approx(np.exp(ev[-1]["forward_loss"]), rel=1e-6) and "backward_ppl" in ev[-1]
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["encoder"] == "lstm" and config["objective"]["name"] == "bilm"
    assert config["tokenizer"]["kind"] == "word"

    # the trained encoder, alone (no heads) and with them, exposes the 2L + 1 layers
    full, enc = load_pretrained(run), load_pretrained(run, heads=False)
    assert enc.backbone.name == "lstm" and enc.objective is None
    ids = torch.tensor([full.tokenizer.encode("the big cat sees the dog .")])
    a = full.backbone(ids, output_hidden_states=True)
    b = enc.backbone(ids, output_hidden_states=True)
    assert len(a.hidden_states) == 3 and a.last_hidden_state.shape == (1, 7, 32)
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(x, y)
    assert torch.equal(enc.backbone.char_cnn.char_ids, full.backbone.char_cnn.char_ids)


def test_cli_refuses_unknown_encoder_and_bad_pairing(tmp_path, capsys) -> None:
    text = write_text(tmp_path / "text.txt", docs=2)
    assert main(["pretrain", "elmo-tiny", "--data", str(text), "-o", str(tmp_path / "a"), "model.encoder=lstn"]) == 2
    assert "unknown encoder 'lstn' (did you mean 'lstm'?)" in capsys.readouterr().err
    assert main(["pretrain", "elmo-tiny", "--data", str(text), "-o", str(tmp_path / "b"), "objective.name=mlm"]) == 2
    assert "objective 'mlm' cannot be used with encoder 'lstm'" in capsys.readouterr().err


class Killed(Exception):
    """Stands in for SIGKILL: raised from a callback, so nothing after it runs."""


def test_resume_matches_uninterrupted(tmp_path) -> None:
    """Killed after its first checkpoint and resumed, elmo-tiny (dropout on) logs the uninterrupted losses."""
    from ptmkit.workflows.pretrain import pretrain

    def kill_at_5(trainer, step):
        if step == 5:
            raise Killed

    text = write_text(tmp_path / "text.txt", docs=12)
    overrides = [*SMALL, "train.grad_accum=2", "train.max_steps=8", "train.log_every=1", "train.save_every=3",
                 "train.eval_every=4"]
    kw = dict(data=text, overrides=overrides, verbose=False)
    pretrain("elmo-tiny", out_dir=tmp_path / "full", **kw)
    with pytest.raises(Killed):
        pretrain("elmo-tiny", out_dir=tmp_path / "cut", callbacks=[kill_at_5], **kw)
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step-0000003"
    pretrain("elmo-tiny", out_dir=tmp_path / "cut", resume=True, **kw)
    a, b = losses(tmp_path / "full"), losses(tmp_path / "cut")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 9))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
    for split in ("train", "eval"):
        full = read_metrics(tmp_path / "full" / "metrics.jsonl", split)
        cut = read_metrics(tmp_path / "cut" / "metrics.jsonl", split)
        assert len(full) == len(cut)
        for r, s in zip(full, cut):
            for key in ("forward_loss", "backward_loss"):
                assert s[key] == pytest.approx(r[key], abs=1e-6)


def torchrun() -> str:
    exe = Path(sys.executable).with_name("torchrun")
    return str(exe) if exe.exists() else "torchrun"


@pytest.mark.slow
def test_ddp_pretrain_cli_matches_single_process(tmp_path) -> None:
    """``torchrun --nproc_per_node 2 -m ptmkit.cli pretrain elmo-tiny``: every block is full, so both
    ranks hold equally many predictions and the curves agree with one process to float rounding."""
    from ptmkit.workflows.pretrain import pretrain

    text = write_text(tmp_path / "text.txt", docs=12)
    overrides = [*SMALL, "model.dropout=0.0", "objective.dropout=0.0", "train.max_steps=6", "train.log_every=1",
                 "train.eval_every=3", "train.save_every=3", "train.device=cpu"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [torchrun(), "--nproc_per_node", "2", "--standalone", "-m", "ptmkit.cli", "pretrain", "elmo-tiny",
           "--data", str(text), "-o", str(tmp_path / "ddp"), *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("final:") == 1  # rank 0 alone reports
    pretrain("elmo-tiny", text, tmp_path / "single", overrides, verbose=False)
    for split in ("train", "eval"):
        ddp = read_metrics(tmp_path / "ddp" / "metrics.jsonl", split)
        ref = read_metrics(tmp_path / "single" / "metrics.jsonl", split)
        assert [r["step"] for r in ddp] == [r["step"] for r in ref] and ref
        np.testing.assert_allclose([r["loss"] for r in ddp], [r["loss"] for r in ref], rtol=1e-4)
    state = torch.load(tmp_path / "ddp" / "checkpoints" / "step-0000006" / "trainer_state.pt", weights_only=False)
    assert state["world_size"] == 2
