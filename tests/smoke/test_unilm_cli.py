"""``ptm pretrain unilm-tiny`` end to end: 50 steps with a falling loss, then seq2seq fine-tuning
of that run on (source, target) pairs (``--init-from RUN objective.seq2seq_finetune=true``) and
decoding with the fine-tuned model (API and ``ptm generate``); an interrupted run resumes exactly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import TINY_PRETRAIN, WORDS, write_corpus

from ptmkit.cli import main
from ptmkit.objectives.unilm import write_pairs
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.trainer import read_metrics
from ptmkit.workflows.generate import generate

TINY = [*TINY_PRETRAIN, "train.batch_size=16"]


def test_pretrain_then_seq2seq_finetune_and_generate(tmp_path, capsys) -> None:
    text = write_corpus(tmp_path / "train.txt", docs=40, sentences=5, lengths=(4, 10))
    run = tmp_path / "run"
    rc = main(["pretrain", "unilm-tiny", "--data", str(text), "-o", str(run), "tokenizer.vocab_size=120",
               "tokenizer.min_frequency=1", "train.max_steps=50", "train.eval_every=50", "train.save_every=50", *TINY])
    assert rc == 0
    config = json.loads((run / "config.json").read_text())
    assert config["objective"]["name"] == "unilm" and config["model"]["type_vocab_size"] == 6
    losses = [r["loss"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert len(losses) == 50 and np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])

    # Fine-tune on pairs (target = the source's words reversed) given as a TSV file.
    rng = random.Random(1)
    rows = []
    for _ in range(60):
        src = [rng.choice(WORDS) for _ in range(rng.randint(2, 4))]
        rows.append(" ".join(src) + "\t" + " ".join(reversed(src)))
    (tmp_path / "pairs.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    pairs = write_pairs(tmp_path / "pairs.tsv", tmp_path / "pairs.txt")
    tuned = tmp_path / "tuned"
    rc = main(["pretrain", "unilm-tiny", "--init-from", str(run), "--data", str(pairs), "-o", str(tuned),
               "objective.seq2seq_finetune=true", "train.max_steps=20", "train.eval_every=20", "train.save_every=20",
               *TINY[4:]])
    assert rc == 0
    tuned_losses = [r["loss"] for r in read_metrics(tuned / "metrics.jsonl", "train")]
    assert len(tuned_losses) == 20 and np.mean(tuned_losses[-5:]) < np.mean(tuned_losses[:5])
    out = generate(tuned, ["the cat sat", "a dog"], max_new_tokens=6, greedy=True)
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    assert main(["generate", str(tuned), "the cat sat", "--greedy", "-n", "6"]) == 0
    assert f"the cat sat => {out[0]}" in capsys.readouterr().out


class Killed(Exception):
    """Stands in for SIGKILL: raised from a callback, so nothing after it runs."""


def test_resume_matches_uninterrupted(tmp_path) -> None:
    """Killed after its first checkpoint and resumed, the run's losses equal the uninterrupted
    run's step for step (modes, masks, dropout and data order all restored)."""
    from ptmkit.workflows.pretrain import pretrain

    text = write_corpus(tmp_path / "train.txt", docs=20, sentences=5, lengths=(4, 10))
    overrides = [*TINY, "tokenizer.vocab_size=120", "tokenizer.min_frequency=1", "train.max_steps=6",
                 "train.save_every=3", "train.eval_every=6"]

    def kill_at_4(trainer, step):
        if step == 4:
            raise Killed

    pretrain("unilm-tiny", data=text, out_dir=tmp_path / "full", overrides=overrides, verbose=False)
    with pytest.raises(Killed):
        pretrain("unilm-tiny", data=text, out_dir=tmp_path / "cut", overrides=overrides, callbacks=[kill_at_4],
                 verbose=False)
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step-0000003"
    pretrain("unilm-tiny", data=text, out_dir=tmp_path / "cut", overrides=overrides, resume=True, verbose=False)
    a = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "full" / "metrics.jsonl", "train")]
    b = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "cut" / "metrics.jsonl", "train")]
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 7))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
