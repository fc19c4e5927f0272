"""``ptm predict`` / ``ptmkit.predict``: a fine-tuned task model on new rows gives the predictions
``ptm finetune --eval-only`` gives on the same rows; bad inputs are one line naming the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_finetune_cli import files  # noqa: F401 (a fixture: three CSV splits and a tiny checkpoint)

import ptmkit
from ptmkit.cli import main


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def classifier(files, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("predict_cls")
    splits = [a for s in ("train", "dev", "test") for a in (f"--{s}", str(files / f"{s}.csv"))]
    cols = ["--text-column", "sentence", "--label-column", "mood"]
    assert main(["finetune", str(files / "ck"), *splits, *cols, "-o", str(d / "ft"), "--quiet", "epochs=2",
                 "batch_size=8", "max_seq_len=16"]) == 0
    assert main(["finetune", str(d / "ft" / "pretrained-seed0"), "--eval-only", *splits, *cols,
                 "-o", str(d / "eval")]) == 0
    return d


@pytest.fixture(scope="module")
def tagger(files, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("predict_tag")
    rng = np.random.default_rng(1)
    words = "the film plot was very quite great awful".split()
    for split, n in (("train", 40), ("dev", 12), ("test", 12)):
        sents = []
        for _ in range(n):
            ws = list(rng.choice(words, int(rng.integers(2, 7))))
            sents.append("\n".join(f"{w}\t{'ADJ' if w in ('great', 'awful', 'quite') else 'X'}" for w in ws))
        (d / f"{split}.conll").write_text("\n\n".join(sents) + "\n")
    splits = [a for s in ("train", "dev", "test") for a in (f"--{s}", str(d / f"{s}.conll"))]
    assert main(["finetune", str(files / "ck"), "--tagging", *splits, "-o", str(d / "ft"), "--quiet", "epochs=2",
                 "batch_size=8", "max_seq_len=16"]) == 0
    assert main(["finetune", str(d / "ft" / "pretrained-seed0"), "--eval-only", "--tagging", *splits,
                 "-o", str(d / "eval")]) == 0
    return d


def test_classification_predictions_are_eval_onlys(files, classifier, tmp_path, capsys):  # noqa: F811
    gold = _jsonl(classifier / "eval" / "predictions.jsonl")
    lines = [r["text"] for r in gold]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    run = classifier / "ft" / "pretrained-seed0"
    assert main(["predict", str(run), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "p.jsonl"),
                 "--chunk-size", "7", "--batch-size", "3"]) == 0
    got = _jsonl(tmp_path / "p.jsonl")
    assert [r["text"] for r in got] == lines
    assert [r["prediction"] for r in got] == [r["prediction"] for r in gold]
    for g, p in zip(gold, got):
        assert p["probabilities"].keys() == g["probabilities"].keys()
        assert max(abs(p["probabilities"][k] - g["probabilities"][k]) for k in g["probabilities"]) <= 2e-6
    # the CSV test file itself, its column named; and the Python function on the same texts
    assert main(["predict", str(run), "--input", str(files / "test.csv"), "--text-column", "sentence",
                 "-o", str(tmp_path / "q.jsonl")]) == 0
    assert [r["prediction"] for r in _jsonl(tmp_path / "q.jsonl")] == [r["prediction"] for r in gold]
    api = ptmkit.predict(run, lines[:5])
    assert [r["prediction"] for r in api] == [r["prediction"] for r in gold[:5]]


def test_classification_reads_stdin_and_writes_stdout(classifier, tmp_path, monkeypatch, capsys):
    import io
    import sys

    run = classifier / "ft" / "pretrained-seed0"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"the film great\nthe plot awful\n")))
    capsys.readouterr()
    assert main(["predict", str(run), "--input", "-", "-o", "-"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["the film great", "the plot awful"]
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-4 for r in rows)


def test_tagging_predictions_are_eval_onlys_in_jsonl_and_conll(tagger, tmp_path):
    gold = _jsonl(tagger / "eval" / "predictions.jsonl")
    (tmp_path / "in.txt").write_text("".join(" ".join(r["tokens"]) + "\n" for r in gold))
    run = tagger / "ft" / "pretrained-seed0"
    assert main(["predict", str(run), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "p.jsonl"),
                 "--chunk-size", "5"]) == 0
    got = _jsonl(tmp_path / "p.jsonl")
    assert [r["tokens"] for r in got] == [r["tokens"] for r in gold]
    assert [r["tags"] for r in got] == [r["predicted"] for r in gold]
    assert main(["predict", str(run), "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "p.conll")]) == 0
    conll = (tmp_path / "p.conll").read_text()
    expected = "".join("".join(f"{w}\t{t}\n" for w, t in zip(r["tokens"], r["predicted"])) + "\n" for r in gold)
    assert conll == expected
    # JSONL rows with token lists, through the Python function
    api = ptmkit.predict(run, [{"tokens": r["tokens"]} for r in gold[:3]] + [gold[3]["tokens"]])
    assert [r["tags"] for r in api] == [r["predicted"] for r in gold[:4]]


def test_bad_inputs_are_one_line_naming_the_fix(classifier, files, tmp_path, capsys):  # noqa: F811
    run = str(classifier / "ft" / "pretrained-seed0")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "cols.csv").write_text("sentence,x\na b,1\n")
    cases = [
        (["predict", run, "--input", str(tmp_path / "cols.csv"), "-o", str(tmp_path / "o1.jsonl")],
         "no column 'text'", "--column text=COLUMN"),
        (["predict", run, "--input", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "o2.jsonl")],
         "holds no rows", "one example per line"),
        (["predict", str(files / "ck"), "--input", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "o3.jsonl")],
         "not a fine-tuned task model", "ptm encode"),
        (["predict", str(classifier / "ft"), "--input", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "o4.jsonl")],
         "not a fine-tuned task model", "pretrained-seed0"),
    ]
    for argv, what, fix in cases:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert what in err and fix in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert not list(tmp_path.glob("o*.jsonl")) and not list(tmp_path.glob(".tmp-*"))
    (tmp_path / "in.txt").write_text("a film\n")
    (tmp_path / "taken.jsonl").write_text("mine\n")
    assert main(["predict", run, "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "taken.jsonl")]) == 2
    assert "--force" in capsys.readouterr().err and (tmp_path / "taken.jsonl").read_text() == "mine\n"
    assert main(["predict", run, "--input", str(tmp_path / "in.txt"), "-o", str(tmp_path / "taken.jsonl"),
                 "--force"]) == 0


def test_a_blank_line_is_a_row_of_its_own(tagger, classifier, tmp_path):
    (tmp_path / "in.txt").write_text("the film\n\nvery great\n")
    got = ptmkit.predict(tagger / "ft" / "pretrained-seed0", ["the film", "", "very great"])
    assert [r["tokens"] for r in got] == [["the", "film"], [], ["very", "great"]] and got[1]["tags"] == []
    assert main(["predict", str(tagger / "ft" / "pretrained-seed0"), "--input", str(tmp_path / "in.txt"),
                 "-o", str(tmp_path / "t.conll")]) == 0
    conll = "".join("".join(f"{w}\t{t}\n" for w, t in zip(r["tokens"], r["tags"])) + "\n" for r in got)
    assert (tmp_path / "t.conll").read_text() == conll  # an empty row: its blank line alone
    got = ptmkit.predict(classifier / "ft" / "pretrained-seed0", ["the film", "", "awful"])
    assert len(got) == 3 and got[1]["text"] == ""
