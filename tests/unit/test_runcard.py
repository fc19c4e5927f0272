"""Run cards and ``ptm info`` / ``ptm runs``: the card of a pre-training run, a fine-tuning run, a
static-vectors run, an HF export and an imported HF model, checked against the run's own files
(parameters counted from the weights with safetensors, checksums with hashlib), and the refusals."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import pytest
from conftest import TINY, W2V, run_cli, write_corpus
from safetensors import safe_open

from ptmkit.cli import main
from ptmkit.outputs import Manifest
from ptmkit.runcard import CARD_FILE, describe, runs_table, write_run_card


def parameters(path) -> int:
    with safe_open(str(path), "pt") as f:
        return sum(f.get_tensor(k).numel() for k in f.keys())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A pre-training run, a fine-tuning of it, word2vec vectors and an HF export, made by the CLI."""
    root = tmp_path_factory.mktemp("runs")
    text = write_corpus(root / "text.txt", docs=30)
    argv = ["pretrain", "bert-tiny", "--data", text, "-o", root / "run", *TINY, "train.max_steps=4", "train.log_every=2"]
    saved = sys.argv
    sys.argv = ["ptm", *map(str, argv)]  # the card records the command line of its process
    try:
        assert run_cli(argv, _Quiet())[0] == 0
    finally:
        sys.argv = saved
    rows = [{"text": f"the cat {'sat' if i % 2 else 'ran'} on the mat", "label": str(i % 2)} for i in range(24)]
    for split in ("train", "dev", "test"):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli(["finetune", root / "run", "--train", root / "train.jsonl", "--dev", root / "dev.jsonl",
                    "--test", root / "test.jsonl", "-o", root / "ft", "--quiet", "epochs=1", "batch_size=8",
                    "max_seq_len=16", "num_threads=1"], _Quiet())[0] == 0
    assert run_cli(["pretrain", "word2vec", "--data", text, "-o", root / "w2v", *W2V], _Quiet())[0] == 0
    assert run_cli(["export", root / "run", "-o", root / "hf"], _Quiet())[0] == 0
    return root


class _Quiet:
    def readouterr(self):
        return type("Out", (), {"err": "", "out": ""})()


def info(path, capsys) -> tuple[int, str, str]:
    """``ptm info PATH``: its status, stdout and stderr."""
    capsys.readouterr()
    rc = main(["info", str(path)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_pretraining_run_card(runs, capsys):
    card = (runs / "run" / CARD_FILE).read_text()
    rc, out, _ = info(runs / "run", capsys)
    assert rc == 0 and out == card
    weights = runs / "run" / "checkpoints" / (runs / "run" / "checkpoints" / "latest").read_text().strip() / "model.safetensors"
    assert f"| parameters | {parameters(weights):,} (" in card
    assert hashlib.sha256((runs / "text.txt").read_bytes()).hexdigest() in card
    last_eval = [json.loads(x) for x in (runs / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert last_eval["split"] == "eval" and f"| eval loss | {last_eval['loss']:.4g} |" in card
    assert "| made by | `ptm pretrain bert-tiny --data" in card and "train.max_steps=4" in card
    assert "| steps | 4 of train.max_steps=4 |" in card and "| tokenizer | `wordpiece`: WordPiece" in card
    assert CARD_FILE in Manifest.read(runs / "run").files  # ptm's file: --overwrite and clean-up handle it


def test_finetuning_run_card(runs, capsys):
    seed = runs / "ft" / "pretrained-seed0"
    write_run_card(seed)  # what ptmkit.tasks.finetune calls when a run finishes
    results = json.loads((seed / "results.json").read_text())
    rc, out, _ = info(seed, capsys)
    assert rc == 0 and out == (seed / CARD_FILE).read_text()
    assert f"| parameters | {results['num_parameters']:,} (" in out
    assert results["data_sha256"] in out and f"| test accuracy | {results['test']['accuracy']:.4g} |" in out
    assert "fine-tuning run" in out


def test_static_vectors_card(runs, capsys):
    rc, out, _ = info(runs / "w2v", capsys)
    assert rc == 0 and out == (runs / "w2v" / CARD_FILE).read_text()
    n, dim = map(int, (runs / "w2v" / "vectors.bin").open("rb").readline().split()[:2])
    assert f"({n:,} words x {dim} dimensions in vectors.bin)" in out
    assert hashlib.sha256((runs / "text.txt").read_bytes()).hexdigest() in out
    assert CARD_FILE in Manifest.read(runs / "w2v").entries


def test_export_card_is_the_hf_model_card(runs, capsys):
    transformers = pytest.importorskip("transformers")
    card = (runs / "hf" / CARD_FILE).read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    model = transformers.AutoModelForPreTraining.from_pretrained(runs / "hf")  # the card does not disturb loading
    assert f"| parameters | {model.num_parameters():,} |" in card
    assert f"| derives from | `{runs / 'run'}" in card


def test_imported_hf_model_card_made_on_the_fly(runs, tmp_path, capsys):
    """An HF directory without a card (the export's files less its README.md, as one from elsewhere) and
    its import: both cards are made from their files when printed, and nothing is written."""
    transformers = pytest.importorskip("transformers")
    (tmp_path / "hf").mkdir()
    for f in (runs / "hf").iterdir():
        if f.is_file() and not f.name.startswith(".") and f.name != CARD_FILE:
            shutil.copy(f, tmp_path / "hf" / f.name)
    model = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "hf")
    rc, out, _ = info(tmp_path / "hf", capsys)
    assert rc == 0 and "HF model directory" in out and f"| parameters | {model.num_parameters():,} |" in out
    assert not (tmp_path / "hf" / CARD_FILE).exists()  # printed, not written
    assert run_cli(["import", tmp_path / "hf", "-o", tmp_path / "imp"], capsys)[0] == 0
    rc, out, _ = info(tmp_path / "imp", capsys)
    assert rc == 0 and "imported checkpoint" in out and f"| derives from | `{tmp_path / 'hf'}" in out
    assert f"| parameters | {parameters(tmp_path / 'imp' / 'model.safetensors'):,}" in out
    assert not (tmp_path / "imp" / CARD_FILE).exists()


def test_runs_lists_every_run_with_key_metrics(runs, capsys):
    table = runs_table(runs)
    lines = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert set(lines) == {"run", "ft/pretrained-seed0", "w2v", "hf"}
    last_eval = [json.loads(x) for x in (runs / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert f"loss={last_eval['loss']:.4g}" in lines["run"] and "test accuracy=" in lines["ft/pretrained-seed0"]
    assert run_cli(["runs", runs], capsys)[0] == 0


def test_info_refuses_what_is_not_a_run(runs, tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / CARD_FILE).write_text("<!-- ptmkit run card: copied -->\n# my notes\n")
    for folder, expected in [(tmp_path / "notes", "is not a run"), (runs / "ft", "holds 1 fine-tuning run"),
                             (runs / "run" / "data", "is a prepared corpus, not a run"),
                             (tmp_path / "missing", "is not a directory")]:
        rc, _, err = info(folder, capsys)
        assert rc == 2 and expected in err, (folder, err)
    assert run_cli(["runs", tmp_path / "missing"], capsys)[0] == 2


def test_overwrite_replaces_the_card(runs, tmp_path, capsys):
    text = write_corpus(tmp_path / "text.txt", docs=30)
    argv = ["pretrain", "bert-tiny", "--data", text, "-o", tmp_path / "run", *TINY]
    assert run_cli(argv, capsys)[0] == 0
    (tmp_path / "run" / "notes.txt").write_text("mine")
    assert run_cli([*argv, "--overwrite"], capsys)[0] == 0
    assert describe(tmp_path / "run").kind == "run" and (tmp_path / "run" / CARD_FILE).is_file()
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"
