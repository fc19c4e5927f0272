"""``ptm finetune`` end to end on user files (CSV) with a tiny checkpoint."""

import json

import numpy as np
import pytest

from ptmkit.build import build_model
from ptmkit.cli import main
from ptmkit.encoders import TransformerConfig
from ptmkit.pretrained import save_pretrained
from ptmkit.tokenization import Tokenizer


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ft_cli")
    rng = np.random.default_rng(0)
    words = "the film plot was very quite".split()
    for split, n in (("train", 80), ("dev", 30), ("test", 30)):
        lines = ["sentence,mood"]
        for _ in range(n):
            y = ["sad", "happy"][int(rng.integers(2))]
            w = list(rng.choice(words, 4)) + ["great" if y == "happy" else "awful"]
            lines.append(f"{' '.join(w)},{y}")
        (d / f"{split}.csv").write_text("\n".join(lines) + "\n")
    text = d / "text.txt"
    text.write_text("\n".join(line.split(",")[0] for line in (d / "train.csv").read_text().splitlines()[1:]) + "\n")
    tok = Tokenizer.train([text], kind="wordpiece", vocab_size=100, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                            intermediate_size=64, max_position=32)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    save_pretrained(d / "ck", config, build_model(config, tok), tok)
    return d


def test_finetune_cli_csv_both_inits(files, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main([
        "finetune", str(files / "ck"), "--train", str(files / "train.csv"), "--dev", str(files / "dev.csv"),
        "--test", str(files / "test.csv"), "--text-column", "sentence", "--label-column", "mood",
        "--init", "both", "--seeds", "1", "2", "--train-size", "60", "-o", str(out), "--quiet",
        "epochs=2", "lr=1e-3", "max_seq_len=16",
    ])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "test accuracy (mean ± sd)" in printed and "random" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["summary"]) == {"pretrained", "random"}
    run = json.loads((out / "random-seed2" / "results.json").read_text())
    assert run["sizes"]["train"] == 60 and run["config"]["epochs"] == 2 and run["labels"] == ["happy", "sad"]
    pred = json.loads((out / "pretrained-seed1" / "predictions.jsonl").read_text().splitlines()[0])
    assert pred["label"] in ("happy", "sad") and set(pred["probabilities"]) == {"happy", "sad"}


def test_finetune_cli_errors(files, tmp_path, capsys):
    ck = str(files / "ck")
    # missing column: exit 2 with the available columns named
    rc = main(["finetune", ck, "--train", str(files / "train.csv"), "--dev", str(files / "dev.csv"),
               "--test", str(files / "test.csv"), "-o", str(tmp_path / "a")])
    assert rc == 2 and "available columns: sentence, mood" in capsys.readouterr().err
    # unknown setting: the nearest key is suggested
    rc = main(["finetune", ck, "--task", "mr", "-o", str(tmp_path / "b"), "learning_rate=1"])
    assert rc == 2 and "unknown config key" in capsys.readouterr().err
    # no task at all
    rc = main(["finetune", ck, "-o", str(tmp_path / "c")])
    assert rc == 2 and "--task mr" in capsys.readouterr().err
    # a non-empty output directory is never overwritten
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("x")
    rc = main(["finetune", ck, "--train", str(files / "train.csv"), "--dev", str(files / "dev.csv"),
               "--test", str(files / "test.csv"), "--text-column", "sentence", "--label-column", "mood",
               "-o", str(tmp_path / "d")])
    assert rc == 2 and "not empty" in capsys.readouterr().err
    assert (tmp_path / "d" / "keep.txt").read_text() == "x"
    # a missing checkpoint
    rc = main(["finetune", str(tmp_path / "nope"), "--task", "mr", "-o", str(tmp_path / "e")])
    assert rc == 2


def test_finetune_cli_tagging_files_with_crf(files, tmp_path, capsys):
    """--tagging reads CoNLL-style files; a CRF tagger trains, and the summary reports chunk F1."""
    rng = np.random.default_rng(1)
    for split, n in (("train", 60), ("dev", 20), ("test", 20)):
        lines = []
        for _ in range(n):
            for w in rng.choice("the film plot was very quite".split(), 3):
                lines.append(f"{w} O")
            lines += ["great B-POS", "film I-POS", ""]
        (tmp_path / f"{split}.conll").write_text("\n".join(lines))
    out = tmp_path / "out"
    rc = main(["finetune", str(files / "ck"), "--tagging", "--train", str(tmp_path / "train.conll"),
               "--dev", str(tmp_path / "dev.conll"), "--test", str(tmp_path / "test.conll"), "-o", str(out),
               "epochs=3", "lr=3e-3", "max_seq_len=32", "crf=true", "select=f1"])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert "test_f1" in json.dumps(summary)
    (tmp_path / "bad.conll").write_text("the O\nfilm\n")
    rc = main(["finetune", str(files / "ck"), "--tagging", "--train", str(tmp_path / "bad.conll"),
               "--dev", str(tmp_path / "dev.conll"), "--test", str(tmp_path / "test.conll"), "-o", str(tmp_path / "o2")])
    assert rc == 2 and "bad.conll:2" in capsys.readouterr().err


def test_two_stage_finetuning_starts_from_the_intermediate_encoder(files, tmp_path, capsys):
    """--after RUN: the target task starts from the encoder an intermediate fine-tuning selected."""
    import torch
    from safetensors.torch import load_file

    from ptmkit.pretrained import load_pretrained
    from ptmkit.tasks.finetune import after_intermediate_task

    first = tmp_path / "first"
    args = ["--train", str(files / "train.csv"), "--dev", str(files / "dev.csv"), "--test", str(files / "test.csv"),
            "--text-column", "sentence", "--label-column", "mood", "epochs=2", "max_seq_len=16"]
    assert main(["finetune", str(files / "ck"), "-o", str(first), *args]) == 0
    run = first / "pretrained-seed0"  # the default seed
    tuned = {k[len("backbone."):]: v for k, v in load_file(str(run / "best.safetensors")).items() if k.startswith("backbone.")}
    pre = load_pretrained(files / "ck", heads=False)
    staged = after_intermediate_task(pre, run)
    for name, p in staged.backbone.named_parameters():
        assert torch.equal(p, tuned[name]), name
    assert any(not torch.equal(p, dict(pre.backbone.named_parameters())[n]) for n, p in staged.backbone.named_parameters())
    assert main(["finetune", str(files / "ck"), "--after", str(run), "-o", str(tmp_path / "second"), *args]) == 0
    capsys.readouterr()
    assert main(["finetune", str(files / "ck"), "--after", str(first), "-o", str(tmp_path / "third"), *args]) == 2
    assert "finished fine-tuning run" in capsys.readouterr().err
