"""Multi-label classification: the scores against scikit-learn and a hand computation, thresholds
chosen on dev, the readers (JSONL lists, delimited CSV) and their refusals, and a tiny fine-tuning
through ``ptm finetune`` read back by ``--eval-only`` and ``ptm predict``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import run_cli
from safetensors.torch import load_file
from sklearn.metrics import accuracy_score, f1_score

from ptmkit.build import build_model
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import save_pretrained
from ptmkit.tasks.base import sniff_type
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.multi_label import choose_thresholds, load_multi_label_files, multi_label_scores, per_label_f1
from ptmkit.tokenization import Tokenizer

# each class has two cue words; a text holds the cues of one to three classes among filler words
CUES = {"animal": ("cat", "dog"), "colour": ("red", "blue"), "food": ("apple", "bread"), "motion": ("ran", "jumped")}
FILLER = "the a on under then and it saw big small".split()


def rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        classes = sorted(rng.choice(list(CUES), size=int(rng.integers(1, 4)), replace=False).tolist())
        words = [str(rng.choice(FILLER)) for _ in range(3)] + [str(rng.choice(CUES[c])) for c in classes]
        out.append({"text": " ".join(words[i] for i in rng.permutation(len(words))), "labels": classes})
    return out


def write_jsonl(path, items):
    path.write_text("".join(json.dumps(r) + "\n" for r in items))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("multilabel")
    for split, n, seed in (("train", 240, 0), ("dev", 60, 1), ("test", 60, 2)):
        write_jsonl(d / f"{split}.jsonl", rows(n, seed))
    (d / "text.txt").write_text("\n".join(r["text"] for r in rows(240, 0)) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=60, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_position=32, dropout=0.0, attention_dropout=0.0)
    config = {"model": {"encoder": "transformer", **cfg.__dict__}, "objective": {"name": "mlm", "nsp": False},
              "tokenizer": {"kind": "wordpiece"}, "train": {}}
    torch.manual_seed(0)
    save_pretrained(d / "ck", config, build_model(config, tok), tok)
    return d


# ---------------------------------------------------------------------------------------- scores


def test_scores_of_a_hand_made_example_match_a_hand_computation_and_sklearn():
    gold = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    pred = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0], [0, 0, 0]])
    s = multi_label_scores(gold, pred)
    # labels 0 and 1: every decision right (F1 1); label 2: one missed, one wrong (TP 0, F1 0)
    assert s["micro_f1"] == pytest.approx(2 * 4 / (2 * 4 + 1 + 1))
    assert s["macro_f1"] == pytest.approx(2 / 3)
    assert s["exact_match"] == pytest.approx(2 / 4)  # rows 3 and 4 (the empty set predicted empty)
    assert s["micro_f1"] == pytest.approx(f1_score(gold, pred, average="micro"))
    assert s["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro"))
    assert s["exact_match"] == pytest.approx(accuracy_score(gold, pred))  # sklearn's subset accuracy
    # a label neither gold nor predicted anywhere is left out of the macro average
    wide_g, wide_p = np.hstack([gold, np.zeros((4, 1), int)]), np.hstack([pred, np.zeros((4, 1), int)])
    assert multi_label_scores(wide_g, wide_p)["macro_f1"] == pytest.approx(2 / 3)
    assert multi_label_scores(wide_g, wide_p)["macro_f1"] == pytest.approx(
        f1_score(wide_g, wide_p, average="macro", labels=[0, 1, 2]))


def test_thresholds_chosen_on_dev_maximise_each_labels_f1_and_beat_half():
    rng = np.random.default_rng(3)
    gold = (rng.random((80, 5)) < 0.3).astype(np.uint8)
    gold[:, 4] = 0  # a label dev never has
    probs = np.clip(rng.random((80, 5)) * 0.5 + 0.25 * gold + rng.normal(0, 0.1, (80, 5)), 0, 1)
    t = choose_thresholds(probs, gold)
    assert t[4] == 0.5
    tuned, half = per_label_f1(gold, probs >= t), per_label_f1(gold, probs >= 0.5)
    assert (tuned >= half - 1e-12).all() and tuned[:4].sum() > half[:4].sum()
    # no threshold at all does better on any label: every distinct probability tried as a cut
    for j in range(4):
        best = max(per_label_f1(gold[:, [j]], probs[:, [j]] >= c)[0] for c in np.unique(probs[:, j]))
        assert tuned[j] == pytest.approx(best)
    assert multi_label_scores(gold, probs >= t)["macro_f1"] >= multi_label_scores(gold, probs >= 0.5)["macro_f1"]
    assert f1_score(gold, probs >= t, average=None, zero_division=0)[:4] == pytest.approx(tuned[:4])
    # the threshold sits between the probabilities it separates, so the same dev predictions follow
    j = 0
    inside = probs[:, j][probs[:, j] >= t[j]].min()
    assert inside > t[j] and not ((probs[:, j] > t[j] - 1e-9) & (probs[:, j] < t[j])).any()


# ---------------------------------------------------------------------------------------- readers


def test_jsonl_lists_and_delimited_csv_read_the_same_sets(files, tmp_path):
    data = load_multi_label_files(files / "train.jsonl", files / "dev.jsonl", files / "test.jsonl")
    assert data.label_names == ["animal", "colour", "food", "motion"] and data.task_type == "multi_label"
    assert data.train.labels.shape == (240, 4)
    first = rows(1, 0)[0]
    assert [n for n, y in zip(data.label_names, data.train.labels[0]) if y] == first["labels"]
    with open(tmp_path / "t.csv", "w") as f:
        f.write("sentence,tags\n" + "".join(f"{r['text']},{'; '.join(r['labels'])}\n" for r in rows(240, 0)))
    csv_data = load_multi_label_files(tmp_path / "t.csv", tmp_path / "t.csv", tmp_path / "t.csv", text_column="sentence",
                                      label_column="tags", delimiter=";")
    assert (csv_data.train.labels == data.train.labels).all() and csv_data.train.texts == data.train.texts
    assert sniff_type(files / "train.jsonl") == "multi_label"


def test_bad_input_is_refused_in_one_line(files, tmp_path, capsys):
    write_jsonl(tmp_path / "nolabel.jsonl", [{"text": "a cat", "labels": ["animal"]}, {"text": "the", "labels": []}])
    with pytest.raises(PtmError, match=r"nolabel.jsonl:2: no label in the 'labels' column"):
        load_multi_label_files(tmp_path / "nolabel.jsonl", files / "dev.jsonl", files / "test.jsonl")
    write_jsonl(tmp_path / "unknown.jsonl", [{"text": "a cat", "labels": ["animal", "plant"]}])
    splits = ["--train", files / "train.jsonl", "--dev", files / "dev.jsonl", "--test", tmp_path / "unknown.jsonl"]
    rc, err = run_cli(["finetune", files / "ck", *splits, "-o", tmp_path / "out", "--quiet"], capsys)
    assert rc != 0 and "unknown.jsonl:1: the label 'plant' never occurs in the training file" in err
    assert len(err.strip().splitlines()) == 1, err
    write_jsonl(tmp_path / "missing.jsonl", [{"text": "a cat"}])
    splits[-1] = tmp_path / "missing.jsonl"
    rc, err = run_cli(["finetune", files / "ck", *splits, "--type", "multi_label", "-o", tmp_path / "o2", "--quiet"],
                      capsys)
    assert rc != 0 and "missing.jsonl: no 'labels' column" in err and len(err.strip().splitlines()) == 1, err


# ------------------------------------------------------------------------------------ fine-tuning


def test_finetune_cli_then_eval_only_and_predict_reproduce_the_scores(files, tmp_path, capsys):
    splits = [a for s in ("train", "dev", "test") for a in (f"--{s}", str(files / f"{s}.jsonl"))]
    out = tmp_path / "ft"
    rc, err = run_cli(["finetune", files / "ck", *splits, "-o", out, "--quiet", "epochs=6", "lr=3e-3",
                       "batch_size=16", "max_seq_len=16", "warmup=0", "pooling=mean"], capsys)
    assert rc == 0, err
    run = out / "pretrained-seed0"
    result = json.loads((run / "results.json").read_text())
    assert result["task_type"] == "multi_label" and result["select"] == "micro_f1"
    assert result["labels"] == ["animal", "colour", "food", "motion"]
    assert result["test"]["micro_f1"] > 0.9 and result["test"]["exact_match"] > 0.6, result["test"]
    thresholds = load_file(str(run / "best.safetensors"))["thresholds"]
    assert thresholds.shape == (4,) and not torch.allclose(thresholds, torch.full((4,), 0.5))  # chosen on dev
    # the predictions file: gold and predicted sets at the saved thresholds, and their scores
    written = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    names = result["labels"]
    gold = np.array([[n in r["labels"] for n in names] for r in written])
    pred = np.array([[n in r["prediction"] for n in names] for r in written])
    assert multi_label_scores(gold, pred) == pytest.approx({k: result["test"][k] for k in ("micro_f1", "macro_f1",
                                                                                         "exact_match")})
    probs = np.array([[r["probabilities"][n] for n in names] for r in written])
    assert (pred == (probs >= thresholds.double().numpy() - 1e-6)).all()
    # --eval-only scores the saved model (its thresholds, not chosen again) the same
    rc, err = run_cli(["finetune", run, "--eval-only", *splits, "-o", tmp_path / "again"], capsys)
    assert rc == 0, err
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["test"] == pytest.approx(result["test"]) and again["dev"] == pytest.approx(result["dev"])
    # ptm predict: the same sets and probabilities from the text alone (a text file and a JSONL)
    test = [json.loads(x) for x in (files / "test.jsonl").read_text().splitlines()]
    (tmp_path / "in.txt").write_text("\n".join(r["text"] for r in test) + "\n")
    rc, err = run_cli(["predict", run, "--input", tmp_path / "in.txt", "-o", tmp_path / "p.jsonl"], capsys)
    assert rc == 0, err
    predicted = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in predicted] == [r["prediction"] for r in written]
    assert predicted[0]["probabilities"] == pytest.approx(written[0]["probabilities"], abs=1e-5)
    assert set(predicted[0]) == {"text", "prediction", "probabilities"}


class Killed(Exception):
    pass


def test_killed_finetune_resumes_exactly_with_the_same_thresholds(files, tmp_path):
    data = load_multi_label_files(files / "train.jsonl", files / "dev.jsonl", files / "test.jsonl")
    cfg = FinetuneConfig(epochs=3, lr=3e-3, batch_size=16, max_seq_len=16, warmup=0.0, pooling="mean")
    full = finetune(files / "ck", data, tmp_path / "full", cfg, seed=1, progress=False)
    steps = -(-len(data.train) // cfg.batch_size)

    def kill(trainer, step):
        if step == steps + 3:  # inside epoch 2, after the checkpoint of epoch 1
            raise Killed

    with pytest.raises(Killed):
        finetune(files / "ck", data, tmp_path / "cut", cfg, seed=1, progress=False, callbacks=[kill])
    resumed = finetune(files / "ck", data, tmp_path / "cut", cfg, seed=1, progress=False, resume=True)
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    saved = [load_file(str(tmp_path / d / "best.safetensors"))["thresholds"] for d in ("full", "cut")]
    assert torch.equal(*saved)


def test_csv_label_sets_with_another_delimiter_through_the_cli(files, tmp_path, capsys):
    for split, n, seed in (("train", 240, 0), ("dev", 60, 1), ("test", 60, 2)):
        lines = "".join(f"{r['text']}\t{';'.join(r['labels'])}\n" for r in rows(n, seed))
        (tmp_path / f"{split}.tsv").write_text("sentence\ttags\n" + lines)
    splits = [a for s in ("train", "dev", "test") for a in (f"--{s}", str(tmp_path / f"{s}.tsv"))]
    argv = ["finetune", files / "ck", *splits, "--type", "multi_label", "--text-column", "sentence", "--label-column",
            "tags", "-o", tmp_path / "out", "--quiet", "epochs=1", "max_seq_len=16"]
    rc, err = run_cli([*argv, "--column", "label_delimiter=;"], capsys)
    argv[argv.index(tmp_path / "out")] = tmp_path / "out2"
    assert rc == 0, err
    result = json.loads((tmp_path / "out" / "pretrained-seed0" / "results.json").read_text())
    assert result["labels"] == ["animal", "colour", "food", "motion"]
    # with the default delimiter (|) every joined set is one label of its own
    rc, err = run_cli(argv, capsys)
    assert rc == 0, err
    labels = json.loads((tmp_path / "out2" / "pretrained-seed0" / "results.json").read_text())["labels"]
    assert "animal;food" in labels and len(labels) > 4
