"""XLNet with memory on: a run killed after a checkpoint and resumed reproduces the losses of the
uninterrupted run step for step (the memory of every stream is restored from the checkpoint)."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.train import checkpoint as ckpt
from ptmkit.train.trainer import read_metrics


class Killed(Exception):
    pass


def kill_at(step: int):
    def callback(trainer, s):
        if s == step:
            raise Killed

    return callback


def test_resume_with_memory_matches_uninterrupted(tmp_path):
    from safetensors import safe_open

    from ptmkit.data.prepare import prepare
    from ptmkit.tokenization import Tokenizer
    from ptmkit.workflows.pretrain import pretrain

    rng = np.random.default_rng(0)
    words = "the a cat dog sat ran on under mat house red big small and then saw it".split()
    text = tmp_path / "t.txt"
    text.write_text("".join(" ".join(rng.choice(words, rng.integers(3, 10))) + "\n" for _ in range(300)))
    tok = Tokenizer.train([text], kind="unigram", vocab_size=60)
    prepare([text], tok, tmp_path / "corpus", progress=False)
    overrides = [
        "model.hidden_size=32", "model.intermediate_size=64", "model.mem_len=12",
        "train.batch_size=4", "train.grad_accum=2", "train.seq_len=16", "train.max_steps=9", "train.warmup_steps=2",
        "train.log_every=1", "train.save_every=4", "train.eval_every=3", "train.eval_batches=2", "train.num_threads=1",
    ]
    kw = dict(data=tmp_path / "corpus", overrides=overrides, verbose=False)
    pretrain("xlnet-tiny", out_dir=tmp_path / "full", **kw)
    with pytest.raises(Killed):
        pretrain("xlnet-tiny", out_dir=tmp_path / "cut", callbacks=[kill_at(6)], **kw)
    ck = ckpt.latest_checkpoint(tmp_path / "cut")
    assert ck.name == "step-0000004"
    state = ckpt.load_trainer_state(ck)
    assert state["carried"]["objective"]["values"]["mems"].shape[:3] == (4, 2, 12)  # streams, layers, mem_len
    with safe_open(str(ck / ckpt.MODEL_FILE), framework="pt") as f:  # the memory is not a weight
        assert not [k for k in f.keys() if "mem" in k and "mask_emb" not in k]
    pretrain("xlnet-tiny", out_dir=tmp_path / "cut", resume=True, **kw)
    a = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "full" / "metrics.jsonl", "train")]
    b = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "cut" / "metrics.jsonl", "train")]
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 10))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
    ea = [r["loss"] for r in read_metrics(tmp_path / "full" / "metrics.jsonl", "eval")]
    eb = [r["loss"] for r in read_metrics(tmp_path / "cut" / "metrics.jsonl", "eval")]
    np.testing.assert_allclose(eb, ea, rtol=0, atol=1e-6)


def test_memory_changes_the_losses(tmp_path):
    """The carried memory is used: without restoring it, a resumed run would differ (checked by
    training the same steps with mem_len=0, which must give other losses from step 2 on)."""
    from ptmkit.workflows.pretrain import pretrain

    rng = np.random.default_rng(1)
    words = "the a cat dog sat ran on under mat house red big small and then saw it".split()
    text = tmp_path / "t.txt"
    text.write_text("".join(" ".join(rng.choice(words, rng.integers(3, 10))) + "\n" for _ in range(200)))
    common = ["model.hidden_size=32", "model.intermediate_size=64", "tokenizer.vocab_size=60", "train.batch_size=4",
              "train.seq_len=16", "train.max_steps=3", "train.log_every=1", "train.eval_every=0",
              "train.warmup_steps=500",  # the preset's: near-zero updates, so step 2 differs by the memory only
              "train.num_threads=1",
              "model.dropout=0.0"]
    pretrain("xlnet-tiny", text, tmp_path / "mem", [*common, "model.mem_len=12"], verbose=False)
    pretrain("xlnet-tiny", text, tmp_path / "nomem", [*common, "model.mem_len=0"], verbose=False)
    a = [r["loss"] for r in read_metrics(tmp_path / "mem" / "metrics.jsonl", "train")]
    b = [r["loss"] for r in read_metrics(tmp_path / "nomem" / "metrics.jsonl", "train")]
    assert a[0] == pytest.approx(b[0], abs=1e-6)  # step 1 has no memory yet
    assert abs(a[1] - b[1]) > 1e-4
