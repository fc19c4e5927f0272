"""Bad inputs through the CLI, one row per case: each ends with the expected exit status, a
message the user can act on, no traceback, and nothing written or removed anywhere."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from conftest import TINY, W2V, write_corpus

from ptmkit.cli import main

TASK = ["--train", "t.csv", "--dev", "t.csv", "--test", "t.csv", "-o", "ft", "epochs=1", "max_seq_len=32"]


def call(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse errors
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A workspace with the inputs the rows misuse: text, a tokenizer, a BERT run trained on the
    text, a word2vec run, HF exports (one truncated, one with a wrong config), bad files."""
    import os

    ws = tmp_path_factory.mktemp("bad-inputs")
    old = os.getcwd()
    os.chdir(ws)
    try:
        write_corpus(ws / "corpus.txt")
        write_corpus(ws / "other.txt", seed=1)
        assert main(["tokenizer", "train", "corpus.txt", "--vocab-size", "120", "--min-frequency", "1", "-o", "tok.json"]) == 0
        assert main(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", "run", *TINY]) == 0
        assert main(["pretrain", "word2vec", "--data", "corpus.txt", "-o", "w2v", *W2V]) == 0
        assert main(["export", "run", "-o", "hf"]) == 0
    finally:
        os.chdir(old)
    # the run's tokenizer with two tokens' ids swapped: same vocabulary size, other meaning
    tok = json.loads((ws / "run" / "data" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = [w for w in vocab if not w.startswith("[")][:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (ws / "other-tok.json").write_text(json.dumps(tok))
    assert main(["prepare", str(ws / "corpus.txt"), "-t", str(ws / "other-tok.json"), "-o", str(ws / "other-corpus"),
                 "--workers", "1"]) == 0
    shutil.copytree(ws / "hf", ws / "hf-truncated")
    weights = ws / "hf-truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    shutil.copytree(ws / "hf", ws / "hf-mismatch")
    config = json.loads((ws / "hf-mismatch" / "config.json").read_text())
    config["intermediate_size"] = 48
    (ws / "hf-mismatch" / "config.json").write_text(json.dumps(config))
    (ws / "foreign").mkdir()
    (ws / "foreign" / "config.json").write_text('{"model_type": "bert"}\n')
    (ws / "mine").mkdir()
    write_corpus(ws / "mine" / "in.txt")
    (ws / "t.csv").write_text("text,label\ngood movie,1\nbad film,0\n")
    (ws / "empty.csv").write_text("text,label\n,1\n,0\n ,1\n")
    (ws / "blank.txt").write_text("\n  \n\n")
    (ws / "binary.json").write_bytes(bytes(range(256)) * 8)
    (ws / "badpairs.txt").write_text("cat\tdog\t5.0\nking\tqueen\thigh\n")
    (ws / "badq.txt").write_text(": family\nking queen\n")
    (ws / "badvec.txt").write_text("the 0.1 0.2\ncat 0.3 abc\n")
    # a fetched data set whose file was truncated afterwards
    ptb = ws / "home" / "data" / "ptb"
    ptb.mkdir(parents=True)
    (ptb / "train.txt").write_text("the cat\n")
    (ptb / "DONE").write_text(json.dumps({"origin": "test", "files": {"train.txt": {"bytes": 999, "sha256": "0" * 64}}}))
    return ws


def snapshot(root: Path) -> dict[str, str]:
    """Every file (with its SHA-256) and directory under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@dataclass
class Case:
    argv: list[str]
    fragments: tuple[str, ...]
    rc: int = 2
    cwd: str = "."
    home: str = "home"  # PTMKIT_HOME, relative to the workspace
    needs_no_cuda: bool = False
    marks: list = field(default_factory=list)


CASES = {
    # ownership of output directories
    "foreign-output-dir": Case(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", "foreign", *TINY],
                               ("foreign is not empty", "was not written by ptm")),
    "other-kind-of-output": Case(["prepare", "corpus.txt", "-t", "tok.json", "-o", "run", "--overwrite"],
                                 ("run holds a pre-training run", "not a prepared corpus")),
    "own-output-without-overwrite": Case(["pretrain", "word2vec", "--data", "corpus.txt", "-o", "w2v", *W2V],
                                         ("already holds a static word-vectors run", "pass --overwrite")),
    "input-inside-output": Case(["prepare", "mine/in.txt", "-t", "tok.json", "-o", "mine", "--overwrite"],
                                ("input mine/in.txt lies inside the output directory mine",)),
    "finetune-into-its-model": Case(["finetune", "run", *TASK[:-4], "-o", "run", "max_seq_len=32"],
                                    ("input run lies inside the output directory run",)),
    "overwrite-with-a-bad-config-keeps-the-run": Case(
        ["pretrain", "bert-tiny", "--data", "other-corpus", "-o", "run", "--overwrite", *TINY, "model.vocab_size=10"],
        ("vocab mismatch",)),
    # --resume
    "resume-without-checkpoint": Case(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", "fresh", "--resume", *TINY],
                                      ("nothing to resume", "drop --resume")),
    "resume-with-other-tokenizer": Case(["pretrain", "bert-tiny", "--data", "other-corpus", "-o", "run", "--resume", *TINY],
                                        ("different tokenizer",)),
    "resume-with-other-text": Case(["pretrain", "bert-tiny", "--data", "other.txt", "-o", "run", "--resume", *TINY],
                                   ("cannot resume", "other.txt", "same text")),
    # silent wrong results
    "finetune-on-empty-texts": Case(["finetune", "run", "--train", "empty.csv", *TASK[2:]],
                                    ("3 of 3 rows have an empty 'text' column", "--text-column")),
    "train-size-zero": Case(["finetune", "run", *TASK, "--train-size", "0"], ("--train-size must be a positive",)),
    "train-size-too-large": Case(["finetune", "run", *TASK, "--train-size", "999"],
                                 ("--train-size 999 exceeds the 2 training examples",)),
    "tokenizer-without-text": Case(["tokenizer", "train", "blank.txt", "-o", "new-tok.json"], ("no text to train a tokenizer",)),
    "damaged-data-cache": Case(["data", "list"], ("ptb", "damaged: train.txt has 8 bytes, 999 when fetched",
                                                  "ptm data get ptb"), rc=0),
    "restrict-vocab-zero": Case(["vectors", "neighbors", "w2v/vectors.bin", "cat", "--restrict-vocab", "0"],
                                ("--restrict-vocab: must be a positive integer",)),
    "negative-n": Case(["vectors", "neighbors", "w2v/vectors.bin", "cat", "-n", "-3"], ("-n: must be a positive integer",)),
    # no tracebacks
    "output-dot-holding-the-input": Case(["pretrain", "word2vec", "--data", "in.txt", "-o", ".", *W2V],
                                         ("lies inside the output directory .",), cwd="mine"),
    "output-dot-not-ptms": Case(["prepare", "../corpus.txt", "-t", "../tok.json", "-o", "."],
                                (". is not empty", "was not written by ptm"), cwd="mine"),
    "unwritable-output": Case(["prepare", "corpus.txt", "-t", "tok.json", "-o", "t.csv/corpus"],
                              ("could not write t.csv/corpus", "choose another path")),
    "unwritable-ptmkit-home": Case(["data", "get", "ptb"], ("cannot create the data cache", "set PTMKIT_HOME"),
                                   home="t.csv"),
    "cuda-without-gpu": Case(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", "cuda-run", *TINY, "train.device=cuda"],
                             ("train.device=cuda but PyTorch sees no CUDA GPU", "train.device=cpu"), needs_no_cuda=True),
    "binary-tokenizer": Case(["prepare", "corpus.txt", "-t", "binary.json", "-o", "c"],
                             ("binary.json is not a tokenizer.json", "binary file")),
    "vectors-run-to-export": Case(["export", "w2v", "-o", "hf2"], ("w2v is a static-vectors run", "use `ptm vectors`")),
    "vectors-run-to-finetune": Case(["finetune", "w2v", *TASK], ("w2v is a static-vectors run", "use `ptm vectors`")),
    "truncated-hf-safetensors": Case(["import", "hf-truncated", "-o", "ck"],
                                     ("model.safetensors is truncated", "download or copy it again")),
    "hf-config-shape-mismatch": Case(["import", "hf-mismatch", "-o", "ck"],
                                     ("do not match its config.json", "dense.weight: (", "in the weights", "from config.json")),
    # clearer messages
    "malformed-pairs-file": Case(["vectors", "evaluate", "w2v/vectors.bin", "--pairs", "badpairs.txt"],
                                 ("word-pair file badpairs.txt, line 2",)),
    "malformed-analogy-file": Case(["vectors", "evaluate", "w2v/vectors.bin", "--analogies", "badq.txt"],
                                   ("analogy file badq.txt, line 2",)),
    "non-numeric-vector-value": Case(["vectors", "neighbors", "badvec.txt", "cat"], ("line 2 (word 'cat'): 'abc' is not a number",)),
    "directory-for-text-file": Case(["prepare", "mine", "-t", "tok.json", "-o", "c"], ("input file mine is a directory",)),
    "directory-for-vectors-file": Case(["vectors", "neighbors", "w2v", "cat"], ("vectors file w2v is a directory",)),
    "directory-for-task-file": Case(["finetune", "run", "--train", "mine", *TASK[2:]], ("data file mine is a directory",)),
    "failed-finetune-leaves-nothing": Case(["finetune", "run", *TASK[:-1], "max_seq_len=999"],
                                           ("max_seq_len=999 exceeds the model's max_position=64",)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, ws, capsys, monkeypatch):
    case = CASES[name]
    if case.needs_no_cuda and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    monkeypatch.chdir(ws / case.cwd)
    monkeypatch.setenv("PTMKIT_HOME", str(ws / case.home))
    before = snapshot(ws)
    rc, output = call(case.argv, capsys)
    assert rc == case.rc, output
    for fragment in case.fragments:
        assert fragment in output, output
    assert "Traceback" not in output
    assert snapshot(ws) == before  # nothing written, nothing removed


def test_full_disk_while_saving_keeps_the_previous_checkpoint(ws, capsys, monkeypatch, tmp_path):
    """A save that fails for lack of space names the checkpoint, keeps the previous one intact and
    exits with 2; --resume then continues from the kept checkpoint."""
    import errno

    from ptmkit.train import checkpoint as ckpt

    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    kept = ckpt.latest_checkpoint(run)
    before = snapshot(kept)

    def full(directory, model):
        (Path(directory) / ckpt.MODEL_FILE).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "write_model", full)
    monkeypatch.chdir(ws)
    rc, output = call(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", run, "--resume", *TINY, "train.max_steps=3"],
                      capsys)
    assert rc == 2, output
    assert "saving checkpoint step-0000003 failed" in output and "No space left on device" in output
    assert f"the previous checkpoint {kept} is intact" in output and "Traceback" not in output
    assert snapshot(kept) == before and ckpt.latest_checkpoint(run) == kept
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")] == []
    monkeypatch.undo()
    monkeypatch.chdir(ws)
    rc, output = call(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", run, "--resume", *TINY, "train.max_steps=3"],
                      capsys)
    assert rc == 0, output
    assert ckpt.latest_checkpoint(run).name == "step-0000003"


def test_damaged_data_cache_is_fetched_again(tmp_path, monkeypatch, capsys):
    """``ptm data get`` verifies every recorded checksum and fetches a damaged copy again."""
    from ptmkit import registry
    from ptmkit.data.sources import base

    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path))
    builds = []

    class Fake(base.Source):
        name, description, origin = "fake-set", "a data set built locally", "this test"

        def build(self, files, work, out):
            builds.append(1)
            (out / "train.txt").write_text("the cat sat\n")

    registry.names("source")  # imports the real recipes first
    monkeypatch.setitem(registry._REGISTRY["source"], "fake-set", Fake)
    assert call(["data", "get", "fake-set"], capsys)[0] == 0 and len(builds) == 1
    assert call(["data", "get", "fake-set"], capsys)[0] == 0 and len(builds) == 1  # intact: not fetched again
    data = tmp_path / "data" / "fake-set" / "train.txt"
    data.write_text("the dog sat\n")  # same size, other content: only the checksum tells
    # listing hashes a file only when its stat differs from the record: here its ctime moved
    assert "damaged: train.txt has changed since it was fetched" in call(["data", "list"], capsys)[1]
    rc, output = call(["data", "get", "fake-set"], capsys)
    assert rc == 0 and "damaged" in output and "changed since it was fetched" in output and len(builds) == 2
    assert data.read_text() == "the cat sat\n"
    data.write_text("the cat\n")  # truncated: listed as damaged, fetched again on use
    assert "damaged: train.txt has 8 bytes, 12 when fetched" in call(["data", "list"], capsys)[1]
    assert base.fetch("fake-set") and len(builds) == 3 and data.read_text() == "the cat sat\n"
