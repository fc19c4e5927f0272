"""``ptm distil`` on a small transfer set: Tang et al.'s augmentation is on by default below the
threshold for every student kind and off above it (``--augment`` overrides both ways), a plan of
too few optimizer steps is named before training, and the labels-only twins say whether
distillation beat the gold labels alone."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import fine_tuned_toy, task_file_args, toy_sentiment

from ptmkit.cli import main
from ptmkit.compress import small_data
from ptmkit.compress.labels_only import TOLERANCE, verdict, verdict_lines
from ptmkit.train import budget

TRAIN = 160  # toy_sentiment's training sentences: a small transfer set


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("distil-small")
    fine_tuned_toy(root, task, "teacher", epochs=3, layers=2, heads=4)
    return root, task_file_args(task, root)


def distil(teacher, out, capsys, *extra) -> tuple[dict, str]:
    """``ptm distil`` of the toy teacher (one epoch, a 1-layer student unless ``extra`` says
    otherwise): the seed-0 student's results and what the command printed."""
    root, files = teacher
    capsys.readouterr()
    rc = main([str(a) for a in ["distil", root / "teacher", *files, "-o", out, "--layers", "1", "epochs=1", "lr=3e-3",
                                "batch_size=16", "max_seq_len=32", *extra]])
    printed = capsys.readouterr()
    assert rc == 0, printed.err[-2000:]
    return json.loads((out / "student-seed0" / "results.json").read_text()), printed.out


@pytest.mark.parametrize("student", [[], ["--student", "transformer", "student.num_layers=1", "student.hidden_size=16",
                                          "student.num_heads=2", "student.intermediate_size=32"]],
                         ids=["layers", "transformer"])
def test_a_small_transfer_set_is_augmented_by_default_for_any_student(teacher, tmp_path, capsys, caplog, student):
    with caplog.at_level(logging.INFO, logger="ptmkit"):
        result, _ = distil(teacher, tmp_path / "d", capsys, "--labels-only", "off", *student)
    synthetic = json.loads((tmp_path / "d" / "summary.json").read_text())["augment"]["synthetic"]
    # the student sees the gold sentences and the teacher-labelled synthetic ones
    assert synthetic > 5 * TRAIN and result["sizes"]["train"] == TRAIN + synthetic
    assert result["training"]["labelled"] == TRAIN and result["training"]["augment"]["n"] == small_data.AUTO_AUGMENT
    assert f"augmentation: {synthetic} synthetic sentences from {TRAIN} training sentences" in caplog.text
    assert "small transfer set (160 examples, under 2000): 10 synthetic sentences per sentence" in caplog.text


def test_a_large_transfer_set_is_not_augmented_unless_asked(teacher, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(small_data, "SMALL_TRANSFER_SET", 100)  # the toy's 160 sentences are then plenty
    result, _ = distil(teacher, tmp_path / "large", capsys)
    assert result["sizes"]["train"] == TRAIN and "augment" not in result["training"]
    assert not (tmp_path / "large" / "labels-only-seed0").exists()  # no twin either: it would cost a student
    result, _ = distil(teacher, tmp_path / "on", capsys, "--augment", "on", "--labels-only", "off")
    assert result["sizes"]["train"] > TRAIN and result["training"]["augment"]["n"] == small_data.AUTO_AUGMENT


def test_the_override_turns_augmentation_off_or_sets_its_count(teacher, tmp_path, capsys):
    result, _ = distil(teacher, tmp_path / "off", capsys, "--augment", "off", "--labels-only", "off")
    assert result["sizes"]["train"] == TRAIN and "augment" not in result["training"]
    result, _ = distil(teacher, tmp_path / "two", capsys, "--augment", "2", "--labels-only", "off")
    assert TRAIN < result["sizes"]["train"] <= 3 * TRAIN and result["training"]["augment"]["n"] == 2
    root, files = teacher
    for bad in ("sometimes", "-1"):
        with pytest.raises(SystemExit):
            main([str(a) for a in ["distil", root / "teacher", *files, "-o", tmp_path / "bad", "--augment", bad]])
        assert "--augment" in capsys.readouterr().err


def test_a_resumed_distillation_keeps_the_augmentation_it_started_with(teacher, tmp_path, capsys):
    """A run distilled without augmentation (before ``auto`` existed, or with ``off``) resumes as it
    was, and one distilled with it resumes with it: ``auto`` follows the run in OUT."""
    first, _ = distil(teacher, tmp_path / "d", capsys, "--augment", "off", "--labels-only", "off")
    again, _ = distil(teacher, tmp_path / "d", capsys, "--labels-only", "off", "--resume")
    assert again == first and again["sizes"]["train"] == TRAIN
    first, _ = distil(teacher, tmp_path / "a", capsys, "--augment", "2", "--labels-only", "off")
    again, _ = distil(teacher, tmp_path / "a", capsys, "--labels-only", "off", "--resume")
    assert again == first and again["training"]["augment"]["n"] == 2
    distil(teacher, tmp_path / "a", capsys, "--labels-only", "off", "--resume", "--seeds", "0", "1")  # a seed added
    added = json.loads((tmp_path / "a" / "student-seed1" / "results.json").read_text())
    assert added["training"]["augment"] == first["training"]["augment"]


def test_too_few_optimizer_steps_are_named_before_training(teacher, tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setattr(budget, "_said", set())  # warnings are said once per process: start afresh
    with caplog.at_level(logging.WARNING, logger="ptmkit"):
        distil(teacher, tmp_path / "few", capsys, "--augment", "off", "--labels-only", "off")
    warned = [r for r in caplog.records if "optimizer steps" in r.getMessage()]
    assert len(warned) == 1 and "distillation has 10 optimizer steps" in warned[0].getMessage()
    assert "epochs=20 gives 200" in warned[0].getMessage()


def test_the_labels_only_twins_say_whether_distillation_helped(teacher, tmp_path, capsys):
    result, printed = distil(teacher, tmp_path / "twins", capsys, "--augment", "off", "--seeds", "0", "1")
    summary = json.loads((tmp_path / "twins" / "summary.json").read_text())
    twins = summary["labels_only"]
    assert [r["seed"] for r in twins["runs"]] == [0, 1] and twins["metric"] == "accuracy"
    for seed in (0, 1):
        twin = json.loads((tmp_path / "twins" / f"labels-only-seed{seed}" / "results.json").read_text())
        assert twin["training"]["alpha"] == 1.0 and twin["sizes"]["train"] == TRAIN
    assert twins["better"] == (twins["gain"] > max(TOLERANCE, twins["spread"]))
    assert twins["verdict"][0] in printed and "labels only" in printed  # the table has the twins' row
    card = (tmp_path / "twins" / "README.md").read_text()
    assert "labels-only twin" in card and "student-seed0, student-seed1" in card and "labels-only-seed0," not in card


def test_equal_scores_are_no_better_than_labels_alone():
    same = verdict([0.80, 0.82], [0.80, 0.82])
    assert not same["better"] and same["gain"] == 0.0 and same["margin"] == TOLERANCE
    lines = verdict_lines(same, "accuracy", 0.81, 0.81)
    assert lines[0].startswith("distillation is no better than the labels-only twin") and "--augment" in lines[1]
    assert not verdict([0.803], [0.800])["better"]  # within the tolerance
    assert not verdict([0.90, 0.80, 0.85], [0.80, 0.82, 0.81])["better"]  # a mean gain of 4 points, spread 6
    clear = verdict([0.86, 0.87, 0.86], [0.84, 0.85, 0.845])
    assert clear["better"] and verdict_lines(clear, "accuracy", 0.863, 0.845)[0].startswith("distillation beats")
    assert all(len(line) <= 160 for line in lines)  # printed lines that fit a terminal and a log
    with pytest.raises(ValueError):
        verdict([0.8], [])


def test_general_distillation_refuses_the_small_data_options(tmp_path, capsys):
    """A corpus has no training split to augment and no students to twin: said before anything is read."""
    (tmp_path / "text.txt").write_text("some text\n")
    for option, value in (("--augment", "2"), ("--labels-only", "on")):
        capsys.readouterr()
        rc = main(["distil", str(tmp_path / "teacher"), "--general", "--data", str(tmp_path / "text.txt"), "-o",
                   str(tmp_path / "out"), option, value])
        assert rc == 2 and f"drop {option}" in capsys.readouterr().err and not (tmp_path / "out").exists()
