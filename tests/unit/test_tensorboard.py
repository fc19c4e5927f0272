"""``train.report_to=tensorboard``: the records of ``metrics.jsonl`` as TensorBoard scalars, read
back with TensorBoard's own reader (EventAccumulator) for a 20-step pre-training run and a
fine-tuning run; a missing package is a PtmError naming the extra."""

from __future__ import annotations

import builtins
import json

import pytest
from conftest import TINY, write_corpus

from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.tasks.finetune_config import FinetuneConfig
from ptmkit.train.config import TrainConfig
from ptmkit.train.metrics_log import read_metrics
from ptmkit.train.tensorboard import TENSORBOARD_DIR, reporter, scalars

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def read_events(log_dir) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expected(records) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for rec in records:
        for tag, value in scalars(rec).items():
            out.setdefault(tag, []).append((rec["step"], value))
    return out


def assert_same(events, records):
    want = expected(records)
    assert set(events) == set(want)
    for tag, points in want.items():
        got = events[tag]
        assert [s for s, _ in got] == [s for s, _ in points], tag
        assert [v for _, v in got] == pytest.approx([v for _, v in points], rel=1e-6, abs=1e-12), tag  # float32 events


def test_pretraining_run_writes_the_logged_scalars(tmp_path):
    text = write_corpus(tmp_path / "text.txt", docs=30)
    run = tmp_path / "run"
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), *TINY, "train.max_steps=20",
                 "train.log_every=5", "train.eval_every=10", "train.report_to=tensorboard"]) == 0
    events = read_events(run / TENSORBOARD_DIR)
    records = read_metrics(run / "metrics.jsonl")
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "eval/loss", "eval/ppl"} <= set(events)
    assert [s for s, _ in events["train/loss"]] == [5, 10, 15, 20]
    assert_same(events, records)


def test_finetuning_writes_its_dev_scores_too(tmp_path):
    cfg = FinetuneConfig(report_to="tensorboard")
    assert cfg.train_config(64, seed=1).report_to == "tensorboard"
    text = write_corpus(tmp_path / "text.txt", docs=30)
    run = tmp_path / "run"
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), *TINY]) == 0
    rows = [{"text": f"the cat {'sat' if i % 2 else 'ran'} on the mat", "label": str(i % 2)} for i in range(24)]
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ft"
    assert main(["finetune", str(run), "--train", str(tmp_path / "train.jsonl"), "--dev", str(tmp_path / "dev.jsonl"),
                 "--test", str(tmp_path / "test.jsonl"), "-o", str(out), "--quiet", "epochs=2", "batch_size=8",
                 "max_seq_len=16", "report_to=tensorboard", "num_threads=1"]) == 0
    seed_dir = next(p for p in out.iterdir() if (p / "metrics.jsonl").is_file())
    events = read_events(seed_dir / TENSORBOARD_DIR)
    assert "dev/accuracy" in events and "train/loss" in events
    assert_same(events, read_metrics(seed_dir / "metrics.jsonl"))


def test_bad_value_and_missing_package_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(PtmError, match="report_to.*tensorboard"):
        TrainConfig(report_to="wandb")
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard") or name.startswith("tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(PtmError, match=r"ptmkit\[tensorboard\]"):
        reporter("tensorboard", tmp_path)
    assert not (tmp_path / TENSORBOARD_DIR).exists()
    reporter("none", tmp_path).write({"step": 1, "loss": 1.0})  # report_to=none needs nothing
