"""Schedules that follow the budget (a lowered ``train.max_steps`` scales the preset's warm-up;
plans that cannot reach the peak LR or read a small corpus dozens of times are named before
training) and a ``--resume`` that remembers the run's config."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import write_corpus

from ptmkit.cli import main
from ptmkit.config import apply_overrides
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.budget import few_steps, follow_budget, schedule_warnings, warn_once
from ptmkit.workflows import rundir
from ptmkit.workflows.finetune import parse_overrides

SIZES = ["model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64", "tokenizer.vocab_size=120",
         "tokenizer.min_frequency=1", "train.batch_size=8", "train.seq_len=32", "train.eval_batches=1",
         "train.num_threads=1", "train.log_every=1"]


def test_the_warmup_keeps_its_share_when_the_steps_are_lowered():
    base = {"max_steps": 100_000, "warmup_steps": 1_000}

    def scaled(overrides):
        raw = {"train": {**base, **{o.split("=")[0].split(".")[1]: int(o.split("=")[1]) for o in overrides}}}
        return follow_budget(base, raw, overrides)["train"]["warmup_steps"]

    assert scaled(["train.max_steps=200"]) == 2  # 1 % of the run, as in the preset
    assert scaled(["train.max_steps=20"]) == 1  # never 0: the first step still warms up
    assert scaled(["train.max_steps=200", "train.warmup_steps=50"]) == 50  # given: kept
    assert scaled(["train.max_steps=200000"]) == 1_000  # raised: the preset's warm-up stands
    assert scaled([]) == 1_000


def test_plans_that_miss_their_intent_are_named():
    lines = schedule_warnings(max_steps=200, warmup_steps=1_000, steps_per_epoch=500)
    assert len(lines) == 1 and "never reaches train.lr" in lines[0] and "train.warmup_steps" in lines[0]
    lines = schedule_warnings(max_steps=100_000, warmup_steps=1_000, steps_per_epoch=25)
    assert len(lines) == 1 and "4,000 times" in lines[0] and "train.max_steps" in lines[0]
    assert schedule_warnings(max_steps=400, warmup_steps=40, steps_per_epoch=25) == []
    # a plan of millions of steps still gets log lines of at most 200 characters, the prefix included
    for line in schedule_warnings(max_steps=9_999_999, warmup_steps=99_999_999, steps_per_epoch=9_999):
        assert len("00:00:00 WARNING ptmkit.workflows.pretrain: " + line) <= 200, line


def test_a_short_run_warms_up_for_its_share_and_is_warned(tmp_path, caplog, capsys):
    text = write_corpus(tmp_path / "train.txt", docs=6)
    caplog.set_level(logging.INFO)
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(tmp_path / "r"), *SIZES,
                 "train.max_steps=2", "--quiet"]) == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["train"]["warmup_steps"] == 1  # not bert-tiny's 1,000
    assert "train.warmup_steps 1000 -> 1" in caplog.text
    caplog.clear()
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(tmp_path / "w"), *SIZES,
                 "train.max_steps=2", "train.warmup_steps=5", "--quiet"]) == 0
    assert "never reaches train.lr" in caplog.text


def test_resume_reads_the_runs_config(tmp_path, capsys):
    text = write_corpus(tmp_path / "train.txt", docs=30)
    out = tmp_path / "run"
    first = ["pretrain", "bert-tiny", "--data", str(text), "-o", str(out), *SIZES, "model.num_layers=1",
             "objective.mask_prob=0.2", "train.max_steps=2", "--quiet"]
    assert main(first) == 0
    # neither the preset nor the first run's overrides typed again
    assert main(["pretrain", "--resume", "-o", str(out), "--data", str(text), "train.max_steps=4", "--quiet"]) == 0
    assert ckpt.latest_checkpoint(out).name == "step-0000004"
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["num_layers"] == 1 and config["objective"]["mask_prob"] == 0.2
    # restating a setting is fine; changing one resume cannot change is refused by name
    assert main(["pretrain", "bert-tiny", "--resume", "-o", str(out), "--data", str(text), "model.num_layers=1",
                 "train.max_steps=5", "--quiet"]) == 0
    capsys.readouterr()
    for preset, extra, needle in (([], ["model.num_layers=2"], "cannot resume with model.num_layers=2"),
                                  ([], ["train.lr=0.5"], "cannot resume with train.lr=0.5"),
                                  (["gpt2-tiny"], [], "resume without a preset")):
        rc = main(["pretrain", *preset, "--resume", "-o", str(out), "--data", str(text), *extra, "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert ckpt.latest_checkpoint(out).name == "step-0000005"
    rc = main(["pretrain", "--data", str(text), "-o", str(tmp_path / "none")])
    assert rc == 2 and "name a PRESET" in capsys.readouterr().err


def test_the_help_names_every_setting_resume_may_change(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name.replace("_", "_") in out for name in rundir.RESUMABLE_CHANGES)


def test_a_fine_tuning_plan_with_too_few_steps_is_named_once(caplog):
    line = few_steps(total=32, steps_per_epoch=16, epochs=2, batch_size=32)
    assert "32 optimizer steps" in line and "epochs=13 gives 208" in line
    assert few_steps(total=400, steps_per_epoch=100, epochs=4, batch_size=32) is None
    # even at its widest (four-digit batches, the longest name of what trains) it is one log line of 200 characters
    widest = few_steps(total=199, steps_per_epoch=199, epochs=300, batch_size=1024, what="labels-only training")
    assert len("00:00:00 WARNING ptmkit.train.budget: " + widest) <= 200
    caplog.set_level(logging.WARNING)
    warn_once(line)
    warn_once(line)  # the same plan over seeds and learning rates: said once
    assert caplog.text.count("32 optimizer steps") == 1


def test_one_spelling_of_settings_with_the_bare_form_where_unambiguous():
    raw = {"model": {"vocab_size": 8}, "tokenizer": {"vocab_size": 8}, "train": {"max_steps": 1}}
    assert apply_overrides(raw, ["max_steps=5"])["train"]["max_steps"] == 5  # only train has it
    with pytest.raises(Exception, match="model.vocab_size and tokenizer.vocab_size: say which"):
        apply_overrides(raw, ["vocab_size=5"])
    with pytest.raises(Exception, match="did you mean 'train.max_steps'"):
        apply_overrides(raw, ["max_step=5"])
    assert parse_overrides(["train.epochs=1"]).epochs == 1  # pre-training's spelling in fine-tuning


def test_the_run_says_how_long_it_will_take_after_a_few_steps(tmp_path, caplog):
    text = write_corpus(tmp_path / "train.txt", docs=6)
    caplog.set_level(logging.INFO)
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(tmp_path / "r"), *SIZES,
                 "train.max_steps=6"]) == 0
    line = next(r.getMessage() for r in caplog.records if "s per step over steps" in r.getMessage())
    assert "over steps 2-4" in line and "for the 2 steps left (train.max_steps=6)" in line
