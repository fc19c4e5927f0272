"""Ownership by manifest, through the CLI: the ways a command could lose a user's file, each
checked with the SHA-256 of every user file before and after.

1. a folder that only looks like ptm output (HF, DeepSpeed, fairseq, an earlier ptm run without
   a marker) is refused by every writing command, with or without --overwrite;
2. a failed command removes only what it created (not a sibling run, not the user's notes);
3. --overwrite removes the files ptm wrote, not files whose names merely look like ptm's;
4. one writer per output directory (a lock naming the holder);
5. resume refuses what it cannot honour (other data, other settings, a shorter budget).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY, W2V, checksums, look_alikes, run_cli, write_corpus

from ptmkit import fileio, outputs
from ptmkit.cli import main
from ptmkit.errors import PtmError


def writing_commands(out: Path, corpus: Path, tok: Path, model: Path) -> list[list]:
    return [
        ["prepare", corpus, "-t", tok, "-o", out, "--workers", "1"],
        ["prepare", corpus, "-t", tok, "-o", out, "--workers", "1", "--overwrite"],
        ["pretrain", "bert-tiny", "--data", corpus, "-o", out, *TINY],
        ["pretrain", "bert-tiny", "--data", corpus, "-o", out, "--overwrite", *TINY],
        ["pretrain", "bert-tiny", "--data", corpus, "-o", out, "--resume", *TINY],
        ["pretrain", "word2vec", "--data", corpus, "-o", out, "--overwrite", *W2V],
        ["finetune", model, "--task", "mr", "-o", out],
        ["finetune", model, "--task", "mr", "-o", out, "--overwrite"],
        ["finetune", model, "--task", "mr", "-o", out, "--resume"],
        ["evaluate", model, "-o", out],
        ["compare", "bert-tiny", "--data", corpus, "--budget", "1e9", "-o", out],
        ["compare", "bert-tiny", "--data", corpus, "--budget", "1e9", "-o", out, "--resume"],
        ["export", model, "--out", out],
        ["import", model.parent / "hf", "--out", out],
        ["fasttext-classify", "train", "--input", corpus, "--out", out, "--overwrite"],
        ["pretrain", "clip-tiny", "--data", corpus.parent, "-o", out, "--overwrite"],  # vision-language route
        ["pretrain", "clip-tiny", "--data", corpus.parent, "-o", out, "--resume"],
        ["pretrain", "--data", corpus.parent, "-o", out, "--resume"],
        ["evaluate", model, "--suite", "vl", "-o", out],
    ]


def test_every_writing_command_refuses_folders_that_only_look_like_ptm_output(tmp_path, tiny_tokenizer, capsys):
    corpus = write_corpus(tmp_path / "in" / "corpus.txt")
    model = tmp_path / "in" / "model"  # never reached: the output is checked first
    model.mkdir()
    (model.parent / "hf").mkdir()
    (model.parent / "hf" / "config.json").write_text('{"model_type": "bert"}')
    folders = look_alikes(tmp_path / "out")
    before = checksums(tmp_path)
    for name, d in folders.items():
        for argv in writing_commands(d, corpus, tiny_tokenizer, model):
            rc, err = run_cli(argv, capsys)
            assert rc == 2, (name, argv, err)
            assert "was not written by ptm" in err, (name, argv, err)
            assert "--overwrite to" not in err and "Traceback" not in err, err
    assert checksums(tmp_path) == before


def test_failure_keeps_a_sibling_run_and_the_users_notes(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    exp = tmp_path / "exp"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", exp / "a", *TINY], capsys)
    assert rc == 0, err
    (exp / "plan.md").write_text("my plan\n")
    before = checksums(exp)
    # fails after its output directory was opened (the corpus is too small for the batch)
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", exp / "b", *TINY, "train.batch_size=100000"], capsys)
    assert rc == 2 and "fewer than train.batch_size" in err, err
    assert checksums(exp) == before and not (exp / "b").exists()


def test_interrupted_prepare_keeps_notes_written_meanwhile(tmp_path, tiny_tokenizer, capsys, monkeypatch):
    from ptmkit.data import prepare as prepare_mod

    corpus = write_corpus(tmp_path / "corpus.txt")
    newproj = tmp_path / "newproj"

    def interrupted(root, *args, **kwargs):
        (newproj / "notes.md").write_text("written while ptm ran\n")
        (root / "tokens.bin").write_bytes(b"\0" * 8)
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_mod, "_write_corpus", interrupted)
    rc = main(["prepare", str(corpus), "-t", str(tiny_tokenizer), "-o", str(newproj / "corpus"), "--workers", "1"])
    assert rc == 130  # interrupted, as a shell reports Ctrl-C
    assert checksums(newproj) == {"notes.md": checksums(newproj)["notes.md"]}
    assert sorted(p.name for p in newproj.iterdir()) == ["notes.md"]


def test_overwrite_removes_ptms_files_not_look_alike_names(tmp_path, tiny_tokenizer, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    prepared = tmp_path / "prepared"
    assert main(["prepare", str(corpus), "-t", str(tiny_tokenizer), "-o", str(prepared), "--workers", "1"]) == 0
    run = tmp_path / "run"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", prepared, "-o", run, *TINY], capsys)
    assert rc == 0, err
    # the user's files, named like ptm's: data/ (ptm wrote none: it trained on a prepared corpus)
    (run / "data").mkdir()
    (run / "data" / "raw.txt").write_text("my raw data\n")
    (run / "random-seed-list.txt").write_text("1 2 3\n")
    (run / "lr-sweep-plan.md").write_text("plan\n")
    (run / "my-seed-analysis").mkdir()
    (run / "my-seed-analysis" / "a.csv").write_text("x\n")
    users = {k: v for k, v in checksums(run).items() if not k.startswith(("checkpoints", ".ptmkit"))
             and k not in ("config.json", "metrics.jsonl", "loss.png", "inputs.json", "README.md")}
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", prepared, "-o", run, "--overwrite", *TINY], capsys)
    assert rc == 0, err
    after = checksums(run)
    assert {k: after.get(k) for k in users} == users
    # and text data, whose prepared copy would go to RUN/data: refused, not written over
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, "--overwrite", *TINY], capsys)
    assert rc == 2 and "data" in err and "was not written by ptm" in err, err
    assert {k: checksums(run).get(k) for k in users} == users


def test_overwrite_of_a_finetune_output_keeps_look_alike_names(tmp_path, capsys, monkeypatch):
    from ptmkit.tasks import finetune as ft

    out = tmp_path / "ft"
    with outputs.writing(out, "finetune", names=["summary.json"]):
        with outputs.writing(out / "pretrained-seed1", "finetune"):
            fileio.atomic_write_text(out / "pretrained-seed1" / "results.json", "{}")
        fileio.atomic_write_text(out / "summary.json", "{}")
    (out / "random-seed-list.txt").write_text("1 2 3\n")
    (out / "lr-sweep-plan.md").write_text("plan\n")
    (out / "my-seed-analysis").mkdir()
    (out / "my-seed-analysis" / "results.json").write_text("{}")
    users = {k: v for k, v in checksums(out).items() if "seed1" not in k and k != "summary.json" and ".ptmkit" not in k}
    with outputs.writing(out, "finetune", overwrite=True, names=["summary.json"]):
        assert sorted(outputs.clean(out)) == ["pretrained-seed1", "summary.json"]
    assert {k: checksums(out).get(k) for k in users} == users
    assert not (out / "pretrained-seed1").exists() and not (out / "summary.json").exists()
    assert ft  # the module that writes these outputs


LOCK_HOLDER = """
import sys, time
from ptmkit import fileio, outputs
with outputs.writing(sys.argv[1], sys.argv[2]):
    print("ready", flush=True)
    time.sleep(60)
"""


def test_one_writer_per_output_directory(tmp_path, tiny_tokenizer, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    for kind, argv in (("run", ["pretrain", "bert-tiny", "--data", corpus, *TINY]),
                       ("corpus", ["prepare", corpus, "-t", tiny_tokenizer, "--workers", "1", "--overwrite"])):
        out = tmp_path / kind
        proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(out), kind], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            before = checksums(out)
            rc, err = run_cli([*argv, "-o", out], capsys)
            assert rc == 2 and f"being written by another ptm process (PID {proc.pid}" in err, err
            assert checksums(out) == before
        finally:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------ resume


@pytest.fixture(scope="module")
def step5(tmp_path_factory):
    root = tmp_path_factory.mktemp("step5")
    corpus = write_corpus(root / "corpus.txt", docs=30)
    run = root / "run"
    assert main(["pretrain", "bert-tiny", "--data", str(corpus), "-o", str(run), *TINY, "train.max_steps=5",
                 "train.save_every=5"]) == 0
    return corpus, run


def test_resume_refuses_a_shorter_budget_other_data_and_a_corrupt_config(step5, tmp_path, tiny_tokenizer, capsys):
    corpus, run = step5
    before = checksums(run)
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, "--resume", *TINY, "train.max_steps=2"], capsys)
    assert rc == 2 and "train.max_steps: 5 in the run, 2 now" in err, err
    assert checksums(run) == before
    other = write_corpus(tmp_path / "corpus.txt", docs=30)  # same name, other text
    other.write_text(other.read_text().replace("cat", "dog"))
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", other, "-o", run, "--resume", *TINY, "train.max_steps=6"], capsys)
    assert rc == 2 and "cannot resume" in err and "Traceback" not in err, err
    assert checksums(run) == before
    saved = (run / "config.json").read_text()
    try:
        (run / "config.json").write_text("{not json")
        rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, "--resume", *TINY, "train.max_steps=6"], capsys)
        assert rc == 2 and "config.json is unreadable" in err and "cp " in err, err
    finally:
        (run / "config.json").write_text(saved)


def test_resume_on_another_prepared_corpus_with_the_same_tokenizer_is_refused(tmp_path, tiny_tokenizer, capsys):
    a = write_corpus(tmp_path / "a.txt", docs=30)
    b = tmp_path / "b.txt"
    b.write_text(a.read_text().replace("the", "a"))
    for name, text in (("ca", a), ("cb", b)):
        assert main(["prepare", str(text), "-t", str(tiny_tokenizer), "-o", str(tmp_path / name), "--workers", "1"]) == 0
    run = tmp_path / "run"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", tmp_path / "ca", "-o", run, *TINY], capsys)
    assert rc == 0, err
    before = checksums(run)
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", tmp_path / "cb", "-o", run, "--resume", *TINY,
                       "train.max_steps=3"], capsys)
    assert rc == 2 and "the data differ from those the run was trained on" in err and "data.0" in err, err
    assert checksums(run) == before


def test_finetune_resume_refuses_other_settings_and_other_data(tmp_path):
    """An interrupted fine-tuning resumed with another LR, or on another training file, is refused."""
    import numpy as np

    from ptmkit.build import build_model
    from ptmkit.data.tasks import TaskData, TaskSplit
    from ptmkit.encoders import TransformerConfig
    from ptmkit.pretrained import save_pretrained
    from ptmkit.tasks.finetune import FinetuneConfig, finetune
    from ptmkit.tokenization import Tokenizer

    text = write_corpus(tmp_path / "text.txt")
    tok = Tokenizer.train([text], kind="wordpiece", vocab_size=100, min_frequency=1)
    mcfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                             intermediate_size=64, max_position=32)
    config = {"model": mcfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    model = tmp_path / "ck"
    save_pretrained(model, config, build_model(config, tok), tok)
    rng = np.random.default_rng(0)

    def split(n):
        return TaskSplit([f"the cat sat on the mat {i}" for i in range(n)], rng.integers(0, 2, n))

    data = TaskData("toy", [0, 1], split(16), split(8), split(8))
    cfg = FinetuneConfig(epochs=2, batch_size=8, lr=1e-3, max_seq_len=32)

    def stop(trainer, step):  # after the first epoch's checkpoint
        if step == 3:
            raise KeyboardInterrupt

    out = tmp_path / "ft"
    with pytest.raises(KeyboardInterrupt):
        finetune(str(model), data, out, cfg, callbacks=(stop,), progress=False)
    assert (out / "checkpoints" / "latest").is_file()
    before = checksums(out)
    with pytest.raises(PtmError, match=r"interrupted run with other settings \(config.lr: 0.001 in the run, 0.05 now"):
        finetune(str(model), data, out, FinetuneConfig(epochs=2, batch_size=8, lr=0.05, max_seq_len=32), resume=True, progress=False)
    test_as_train = TaskData("toy", [0, 1], data.test, data.dev, data.test)
    with pytest.raises(PtmError, match=r"data \(SHA-256 of the task's examples\)"):
        finetune(str(model), test_as_train, out, cfg, resume=True, progress=False)
    assert checksums(out) == before
    result = finetune(str(model), data, out, cfg, resume=True, progress=False)
    assert result["data_sha256"] and json.loads((out / "results.json").read_text())["best_epoch"] >= 1


def test_compare_resume_refuses_other_settings(tmp_path):
    from ptmkit.workflows.rundir import SETTINGS, check_settings

    out = tmp_path / "cmp"
    out.mkdir()
    settings = {"data": [{"name": "a.txt", "bytes": 3, "sha256": "0" * 64}], "budget": {"flops": 1e12, "minutes": None}}
    check_settings(out, settings, resume=False)
    assert json.loads((out / SETTINGS).read_text()) == settings
    check_settings(out, settings, resume=True)
    other = {**settings, "budget": {"flops": 2e12, "minutes": None}}
    with pytest.raises(PtmError, match=r"budget.flops: 1000000000000.0 in the run, 2000000000000.0 now"):
        check_settings(out, other, resume=True)
    # tasks may be added after the recorded ones (and are recorded); dropped or reordered ones are refused
    with_tasks = {**settings, "tasks": ["mr", "sst2"]}
    (out / SETTINGS).write_text(json.dumps(with_tasks))
    more = {**settings, "tasks": ["mr", "sst2", "wordnet-wic"]}
    check_settings(out, more, resume=True)
    assert json.loads((out / SETTINGS).read_text()) == more
    for tasks in (["mr"], ["sst2", "mr", "wordnet-wic"], ["wordnet-wic", "mr", "sst2"]):
        with pytest.raises(PtmError, match="tasks may be added after the recorded ones"):
            check_settings(out, {**settings, "tasks": tasks}, resume=True)
    with pytest.raises(PtmError, match="budget.flops"):  # an added task does not excuse another change
        check_settings(out, {**other, "tasks": ["mr", "sst2", "wordnet-wic", "wordnet-wsd"]}, resume=True)
