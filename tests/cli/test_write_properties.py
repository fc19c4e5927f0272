"""What every writing ``ptm`` command promises about the file system, checked on one table with a
row per sub-command (and per sub-sub-command: ``tokenizer train``, ``data get``, ...):

  (a) nothing appears outside the declared output (and the data cache ``$PTMKIT_HOME``);
  (b) every file and directory it creates has the mode the umask gives (``0o666 & ~umask`` for a
      file, exec bits aside; ``0o777 & ~umask`` for a directory), under umask 022 and 077;
  (c) every file that was there before (the user's notes, a sibling output, the inputs) keeps
      its SHA-256.

Each row runs tiny, in a fresh tree ``root/`` holding ``in/`` (the inputs, copied there with a
user's file inside each), ``out/`` (the declared output, not there before), ``home/`` (the
cache), ``notes.txt`` and ``out-sibling/keep.txt``; names that come from data are hostile where
a command takes them from data (a model given as ``..`` so its label comes from a resolved path,
class labels ``../up`` and ``a/b``, an output given through ``..`` from a working directory
inside the inputs).  A command that writes nothing is listed in :data:`WRITES_NOTHING` with the
reason, and its row checks that it writes nothing at all.  The table is checked against the
argparse tree of ``ptm``: a new sub-command (or sub-sub-command) without a row fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import TINY, W2V, checksums, tiny_checkpoint, write_corpus

from ptmkit import outputs, paths, registry
from ptmkit.cli import COMMANDS, build_parser, main
from ptmkit.data.sources import base as sources_base

UMASKS = (0o022, 0o077)
LABELS = ("../up", "a/b")  # class labels that would climb out of, or split, a path they became part of
TASK_WORDS = "the film plot was very quite rather story".split()


# ------------------------------------------------------------------ a data recipe without a download


class FakeToy(sources_base.Source):
    """A data set of three small TSV files and a classification task over them, built with no download."""

    name = "fake-toy"
    description = "a tiny classification task written by the test"
    origin = "test"
    tasks = {name: {"type": "classification", "files": ("train.tsv", "dev.tsv", "test.tsv"), "text": "text",
                    "label": "label"} for name in ("toy-task", "../escape")}  # a task name that would climb out

    def build(self, files, work, out):
        for split, n in (("train", 40), ("dev", 16), ("test", 16)):
            (out / f"{split}.tsv").write_text("text\tlabel\n" + "".join(
                f"{' '.join(TASK_WORDS[(i + k) % len(TASK_WORDS)] for k in range(4))} {'good' if i % 2 else 'bad'}"
                f"\t{'pos' if i % 2 else 'neg'}\n" for i in range(n)))
        (out / "notes").mkdir()
        (out / "notes" / "README.txt").write_text("a fake data set\n")


def register_fake(monkeypatch) -> None:
    registry.names("source")  # the real recipes first
    monkeypatch.setitem(registry._REGISTRY["source"], FakeToy.name, FakeToy)


# ------------------------------------------------------------------ the shared inputs, built once


def _task_csv(path: Path, n: int, seed: int) -> Path:
    lines = ["text,label"]
    for i in range(n):
        y = (i + seed) % 2
        words = [TASK_WORDS[(i * 3 + k + seed) % len(TASK_WORDS)] for k in range(4)]
        words.insert(i % 4, "great" if y else "awful")
        lines.append(f"{' '.join(words)},{LABELS[y]}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Inputs every row copies from: a corpus, a tokenizer, task files with hostile labels, a tiny
    pre-trained run, its HF export, a fine-tuning of it, word2vec vectors, a causal LM and a
    fastText classifier."""
    import torch

    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("shared")
    write_corpus(d / "corpus.txt", docs=12)
    assert main(["tokenizer", "train", str(d / "corpus.txt"), "--vocab-size", "120", "--min-frequency", "1",
                 "-o", str(d / "tok.json")]) == 0
    for split, n, seed in (("train", 48, 0), ("dev", 16, 1), ("test", 16, 2)):
        _task_csv(d / f"{split}.csv", n, seed)
    assert main(["pretrain", "bert-tiny", "--data", str(d / "corpus.txt"), "-o", str(d / "run"), *TINY,
                 "model.num_heads=2", "model.max_position=128"]) == 0  # evaluate's protocol reads 128 tokens
    assert main(["export", str(d / "run"), "-o", str(d / "hf")]) == 0
    assert main(["finetune", str(d / "run"), *_task_args(d), "--seeds", "1", "-o", str(d / "ft"), "--quiet",
                 "epochs=1", "max_seq_len=16", "batch_size=8"]) == 0
    assert main(["pretrain", "word2vec", "--data", str(d / "corpus.txt"), "-o", str(d / "w2v"), *W2V]) == 0
    tiny_checkpoint(d / "gpt", (d / "corpus.txt").read_text().splitlines()[:40], layers=1, causal=True)
    labelled = "".join(f"__label__{LABELS[i % 2]} {line}\n"
                       for i, line in enumerate(x for x in (d / "corpus.txt").read_text().splitlines() if x))
    (d / "train.txt").write_text(labelled)
    assert main(["fasttext-classify", "train", "--input", str(d / "train.txt"), "-o", str(d / "clf"), "--dim", "8",
                 "--epoch", "1", "--thread", "1"]) == 0
    (d / "pairs.tsv").write_text("the\ta\t5.0\ncat\tdog\t8.0\nmat\thouse\t3.0\nran\tsat\t4.0\n")
    return d


def _task_args(d: Path) -> list[str]:
    return [a for split in ("train", "dev", "test") for a in (f"--{split}", str(d / f"{split}.csv"))]


# ------------------------------------------------------------------ the rows


@dataclass
class Ctx:
    root: Path
    shared: Path
    cwd: Path | None = None
    ptms: set[str] = field(default_factory=set)  # files under out/ that ptm wrote before (--overwrite, --resume)

    @property
    def inp(self) -> Path:
        return self.root / "in"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def copy(self, name: str) -> Path:
        """``shared/NAME`` copied into ``in/``; a directory gets a user's file of its own inside."""
        src, dst = self.shared / name, self.inp / name
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
            (dst / "my-notes.md").write_text(f"the user's notes about {name}\n")
        else:
            shutil.copy2(src, dst)
        return dst

    def earlier_output(self, name: str) -> Path:
        """``shared/NAME`` as an earlier output of ptm's in ``out/``, with a user's file beside its files."""
        shutil.copytree(self.shared / name, self.out, symlinks=True)
        self.ptms = {f"out/{k}" for k in checksums(self.out)}
        (self.out / "my-notes.md").write_text("the user's notes, kept in the run directory\n")
        return self.out

    def task_args(self) -> list[str]:
        for split in ("train", "dev", "test"):
            self.copy(f"{split}.csv")
        return _task_args(self.inp)

    def inside(self, *parts: str) -> Path:
        """A working directory below the inputs (made here), so that ``..`` in an argument means something."""
        d = self.inp.joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        self.cwd = d
        return d


@dataclass
class Row:
    id: str
    command: tuple[str, ...]
    build: Callable[[Ctx], list]
    writes: bool = True  # False: the command must write nothing anywhere (WRITES_NOTHING says why)
    marks: tuple = ()
    refuses: str = ""  # the command must refuse (exit 2, this in its message), with nothing outside out/ and home/
    needs: Callable[[], str | None] = field(default=lambda: None)  # a reason to skip, or None


def _pretrain(c: Ctx) -> list:
    corpus = c.copy("corpus.txt").rename(c.inp / "my corpus..txt")
    c.inside("deep", "er")  # the output given as ../../../out: its parent is spelled with ..
    return ["pretrain", "bert-tiny", "--data", corpus, "-o", "../../../out", *TINY, "model.num_heads=2"]


def _pretrain_overwrite(c: Ctx) -> list:
    c.earlier_output("run")
    return ["pretrain", "bert-tiny", "--data", c.copy("corpus.txt"), "-o", c.out, "--overwrite", *TINY,
            "model.num_heads=2"]


def _pretrain_resume(c: Ctx) -> list:
    c.earlier_output("run")
    return ["pretrain", "bert-tiny", "--data", c.copy("corpus.txt"), "-o", c.out, "--resume", *TINY,
            "model.num_heads=2", "model.max_position=128", "train.max_steps=3"]


def _pretrain_static(c: Ctx) -> list:
    corpus = c.copy("corpus.txt").rename(c.inp / "my corpus..txt")
    return ["pretrain", "word2vec", "--data", corpus, "-o", c.out, *W2V]


def _prepare(c: Ctx) -> list:
    corpus = c.copy("corpus.txt").rename(c.inp / "my corpus..txt")
    return ["prepare", corpus, "-t", c.copy("tok.json"), "-o", c.out, "--workers", "1"]


def _finetune(c: Ctx) -> list:
    c.copy("run")
    files = c.task_args()
    c.inside("run", "sub")  # the model given as ..: a path from a working directory inside it
    return ["finetune", "..", *files, "--init", "both", "--seeds", "1", "-o", c.out, "epochs=1", "max_seq_len=16",
            "batch_size=8"]


def _finetune_eval_only(c: Ctx) -> list:
    teacher, files = _teacher(c)
    return ["finetune", teacher, "--eval-only", *files, "-o", c.out]


def _evaluate(c: Ctx) -> list:
    c.copy("run")
    c.inside("run", "sub")  # `cd RUN/sub && ptm evaluate ..`: the label `..` must not become a path
    return ["evaluate", "..", "../", "--suite", "toy-task", "-o", c.out, "--train-size", "16", "--eval-size", "8",
            "--seeds", "1", "--lrs", "1e-3", "--epochs", "1", "--modes", "finetune", "--no-baseline"]


def _evaluate_task_name(c: Ctx) -> list:
    argv = _evaluate(c)
    return [*argv[:3], "--suite", "../escape", *argv[5:]]  # a task name from a data recipe that would climb out


COMPARE_SET = ["model.hidden_size=16", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=32",
               "model.max_position=32", "tokenizer.vocab_size=120", "tokenizer.min_frequency=1", "train.seq_len=16",
               "train.batch_size=4", "train.log_every=1", "train.eval_batches=1", "train.eval_fraction=0.1",
               "train.num_threads=1"]


def _compare(c: Ctx) -> list:
    corpus = c.copy("corpus.txt")
    return ["compare", "a.b+c=bert-tiny", "--data", corpus, "--budget", "20M", "-o", c.out, "--tasks", "toy-task",
            "--set", *COMPARE_SET, "--train-size", "16", "--eval-size", "8", "--seeds", "1", "--lrs", "1e-3",
            "--epochs", "1", "--no-baseline"]


def _compare_label(c: Ctx) -> list:
    argv = _compare(c)
    return [argv[0], "..=bert-tiny", *argv[2:]]  # a contender label of dots names a directory of runs/


def _budget(c: Ctx) -> list:
    corpus = c.copy("corpus.txt")
    return ["budget", "a.b+c=bert-tiny", "--data", corpus, "--budgets", "2e7,3e7", "-o", c.out, "--tasks", "toy-task",
            "--train-size", "16", "--eval-size", "8", "--seeds", "1", "--lrs", "1e-3", "--epochs", "1", *COMPARE_SET]


def _budget_label(c: Ctx) -> list:
    argv = _budget(c)
    return [argv[0], "..=bert-tiny", *argv[2:]]  # a preset label of dots names a directory of runs/


def _teacher(c: Ctx) -> tuple[Path, list[str]]:
    ft = c.copy("ft")
    return ft / "pretrained-seed1", c.task_args()


def _distil(c: Ctx) -> list:
    teacher, files = _teacher(c)
    return ["distil", teacher, *files, "-o", c.out, "--layers", "0", "epochs=1", "max_seq_len=16", "batch_size=8"]


def _distil_general(c: Ctx) -> list:
    return ["distil", c.copy("run"), "--general", "--data", c.copy("corpus.txt"), "-o", c.out, "--layers", "0",
            "train.max_steps=2", "train.batch_size=4", "train.seq_len=32", "train.warmup_steps=1",
            "train.eval_batches=1", "train.num_threads=1"]


def _prune(c: Ctx) -> list:
    run, files = _teacher(c)
    return ["prune", run, *files, "--fraction", "0.25", "--curve", "--rounds", "1", "--threads", "1", "-o", c.out]


def _quantize(c: Ctx) -> list:
    run, files = _teacher(c)
    return ["quantize", run, "--int8", *files, "--rounds", "1", "--threads", "1", "-o", c.out]


def _predict(c: Ctx) -> list:
    run, _ = _teacher(c)  # its labels ../up and a/b are values in the output, never path parts
    (c.inp / "new.txt").write_text("the film was great\nthe plot was awful\n")
    return ["predict", run, "--input", c.inp / "new.txt", "-o", c.out / "predictions.jsonl"]


def _encode(c: Ctx) -> list:
    (c.inp / "new.txt").write_text("the film was great\nthe plot was awful\n")
    return ["encode", c.copy("run"), "--input", c.inp / "new.txt", "-o", c.out / "vectors.npy", "--normalize"]


def _encode_sif(c: Ctx) -> list:
    (c.inp / "new.txt").write_text("the film was great\nthe plot was awful\n")
    vectors = next(p for p in c.copy("w2v").iterdir() if p.name.startswith("vectors."))
    return ["encode", vectors, "--input", c.inp / "new.txt", "-o", c.out / "sif.npy"]


def _analyse(c: Ctx) -> list:
    corpus = c.copy("corpus.txt")
    c.copy("run")
    c.inside("run", "sub")  # the model given as ..: its label names files under OUT/vectors
    return ["analyse", "..", "--corpus", corpus, "--what", "contextuality", "--static-layers", "1",
            "--max-sentences", "60", "-o", c.out]


def _analyse_label(c: Ctx) -> list:
    return ["analyse", c.copy("run"), "--label", "../../../escape/x", "--corpus", c.copy("corpus.txt"), "--what",
            "contextuality", "--static-layers", "1", "--max-sentences", "60", "-o", c.out]


def _export_task(c: Ctx) -> list:
    teacher, _ = _teacher(c)  # its labels ../up and a/b go into config.json's id2label
    return ["export", teacher, "-o", c.out]


def _export(c: Ctx) -> list:
    return ["export", c.copy("run"), "-o", c.out]


def _export_onnx(c: Ctx) -> list:
    return ["export", c.copy("run"), "-o", c.out, "--format", "onnx"]


def _no_onnx() -> str | None:
    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    return f"{' and '.join(missing)} not installed (pip install 'ptmkit[onnx]')" if missing else None


def _import(c: Ctx) -> list:
    return ["import", c.copy("hf"), "-o", c.out]


def _tokenizer_train(c: Ctx) -> list:
    return ["tokenizer", "train", c.copy("corpus.txt"), "--vocab-size", "120", "--min-frequency", "1",
            "-o", c.out / "tok.json"]


def _fasttext_train(c: Ctx) -> list:
    return ["fasttext-classify", "train", "--input", c.copy("train.txt"), "-o", c.out, "--dim", "8", "--epoch", "1",
            "--thread", "1"]


def _fasttext_overwrite(c: Ctx) -> list:
    c.earlier_output("clf")
    return [*_fasttext_train(c), "--overwrite"]


def _data_get(c: Ctx) -> list:
    return ["data", "get", FakeToy.name]


def _user_cache() -> Path | None:
    saved = os.environ.pop("PTMKIT_HOME", None)
    try:
        return paths.data_dir()
    finally:
        if saved is not None:
            os.environ["PTMKIT_HOME"] = saved


def _no_demo_data() -> str | None:
    cache = _user_cache()
    missing = [n for n in ("ptb", "mr") if not (cache / n / sources_base.DONE).is_file()]
    return f"the demo's data ({', '.join(missing)}) is not in {cache}, and the test fetches nothing" if missing else None


def _demo(c: Ctx) -> list:
    for name in ("ptb", "mr"):  # the user's cache copied into this test's cache: no download
        shutil.copytree(_user_cache() / name, c.home / "data" / name)
    return ["demo", "--quick", "--threads", "1", "-o", c.out]


# read-only rows: they must write nothing at all, not even in the cache
def _info(c: Ctx) -> list:
    return ["info", c.copy("run")]


def _runs(c: Ctx) -> list:
    c.copy("run")
    c.copy("ft")
    return ["runs", c.inp]


def _generate(c: Ctx) -> list:
    return ["generate", c.copy("gpt") / "ck", "the cat", "-n", "3", "--greedy"]


def _tokenizer_encode(c: Ctx) -> list:
    return ["tokenizer", "encode", "-t", c.copy("tok.json"), "the cat sat", "a dog ran"]


def _fasttext_test(c: Ctx) -> list:
    return ["fasttext-classify", "test", c.copy("clf"), c.copy("train.txt")]


def _fasttext_predict(c: Ctx) -> list:
    return ["fasttext-classify", "predict", c.copy("clf"), c.copy("train.txt"), "-k", "2", "--prob"]


def _vectors(action: str, *extra: str) -> Callable[[Ctx], list]:
    def build(c: Ctx) -> list:
        vectors = next(p for p in c.copy("w2v").iterdir() if p.name.startswith("vectors."))
        more = [a if a != "PAIRS" else c.copy("pairs.tsv") for a in extra]
        return ["vectors", action, vectors, *more]

    return build


def _data_list(c: Ctx) -> list:
    return ["data", "list"]


ROWS = [
    Row("pretrain", ("pretrain",), _pretrain),
    Row("pretrain-overwrite", ("pretrain",), _pretrain_overwrite),
    Row("pretrain-resume", ("pretrain",), _pretrain_resume),
    Row("pretrain-static", ("pretrain",), _pretrain_static),
    Row("prepare", ("prepare",), _prepare),
    Row("finetune", ("finetune",), _finetune),
    Row("finetune-eval-only", ("finetune",), _finetune_eval_only),
    Row("evaluate", ("evaluate",), _evaluate),
    Row("evaluate-task-name", ("evaluate",), _evaluate_task_name, refuses="cannot name a file or directory"),
    Row("compare", ("compare",), _compare),
    Row("compare-label", ("compare",), _compare_label, refuses="not only dots"),
    Row("budget", ("budget",), _budget),
    Row("budget-label", ("budget",), _budget_label, refuses="not only dots"),
    Row("distil", ("distil",), _distil),
    Row("distil-general", ("distil",), _distil_general),
    Row("prune", ("prune",), _prune),
    Row("quantize", ("quantize",), _quantize),
    Row("predict", ("predict",), _predict),
    Row("encode", ("encode",), _encode),
    Row("encode-sif", ("encode",), _encode_sif),
    Row("analyse", ("analyse",), _analyse),
    Row("analyse-label", ("analyse",), _analyse_label),
    Row("export", ("export",), _export),
    Row("export-task", ("export",), _export_task),
    Row("export-onnx", ("export",), _export_onnx, needs=_no_onnx),
    Row("import", ("import",), _import),
    Row("tokenizer-train", ("tokenizer", "train"), _tokenizer_train),
    Row("fasttext-classify-train", ("fasttext-classify", "train"), _fasttext_train),
    Row("fasttext-classify-overwrite", ("fasttext-classify", "train"), _fasttext_overwrite),
    Row("data-get", ("data", "get"), _data_get),
    Row("demo", ("demo",), _demo, needs=_no_demo_data),  # --quick: a few seconds on 2 cores
    # writes nothing (WRITES_NOTHING says why)
    Row("info", ("info",), _info, writes=False),
    Row("runs", ("runs",), _runs, writes=False),
    Row("generate", ("generate",), _generate, writes=False),
    Row("tokenizer-encode", ("tokenizer", "encode"), _tokenizer_encode, writes=False),
    Row("fasttext-classify-test", ("fasttext-classify", "test"), _fasttext_test, writes=False),
    Row("fasttext-classify-predict", ("fasttext-classify", "predict"), _fasttext_predict, writes=False),
    Row("vectors-neighbors", ("vectors", "neighbors"), _vectors("neighbors", "the"), writes=False),
    Row("vectors-analogy", ("vectors", "analogy"), _vectors("analogy", "the", "a", "cat"), writes=False),
    Row("vectors-similarity", ("vectors", "similarity"), _vectors("similarity", "the", "a"), writes=False),
    Row("vectors-evaluate", ("vectors", "evaluate"), _vectors("evaluate", "--pairs", "PAIRS"), writes=False),
    Row("data-list", ("data", "list"), _data_list, writes=False),
]

# Sub-commands that write no file, with the reason.  (vectors evaluate with a set given by name
# fetches it into the data cache, as any command that reads a built-in data set does: that is
# the cache's write, checked by `data get`; given a file, as here, it writes nothing.)
WRITES_NOTHING = {
    ("info",): "prints a run's card; a card made for a directory without one is printed, not written",
    ("runs",): "lists the runs under a folder",
    ("generate",): "prints the generated text: it has no output option",
    ("tokenizer", "encode"): "prints token ids and tokens",
    ("fasttext-classify", "test"): "prints precision, recall and accuracy",
    ("fasttext-classify", "predict"): "prints the labels of each line",
    ("vectors", "neighbors"): "prints the nearest words",
    ("vectors", "analogy"): "prints the answer of an analogy",
    ("vectors", "similarity"): "prints a cosine similarity",
    ("vectors", "evaluate"): "prints the scores (named sets are fetched into the data cache)",
    ("data", "list"): "prints the data sets and the state of their cached copies",
}


def _leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every runnable command path of ``parser``'s sub-parser tree: ``("tokenizer", "train")``, ``("info",)``."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {prefix}
    found = set()
    for action in subs:
        for name, child in action.choices.items():
            found |= _leaves(child, (*prefix, name))
    return found


# ------------------------------------------------------------------ the checks


def _listing(root: Path) -> dict[str, os.stat_result]:
    """Every entry under ``root`` (not following links): relative path -> its lstat."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p.lstat()
    return out


def _under(rel: str, top: str) -> bool:
    return rel == top or rel.startswith(top + "/")


def _params():
    for row in ROWS:
        for mask in UMASKS:
            yield pytest.param(row, mask, id=f"{row.id}-umask{mask:03o}", marks=row.marks)


@pytest.mark.parametrize("row,umask", list(_params()))
def test_writes_stay_in_the_output_with_the_umasks_modes_and_keep_the_users_files(row, umask, shared, tmp_path,
                                                                                  monkeypatch, capsys):
    reason = row.needs()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "root"
    ctx = Ctx(root, shared)
    for d in (ctx.inp, ctx.home, root / "out-sibling"):
        d.mkdir(parents=True)
    (root / "notes.txt").write_text("the user's notes\n")
    (root / "out-sibling" / "keep.txt").write_text("an earlier output the user keeps\n")
    (ctx.inp / "README.md").write_text("the user's inputs\n")
    monkeypatch.setenv("PTMKIT_HOME", str(ctx.home))
    monkeypatch.delenv("PTMKIT_PRIVATE", raising=False)
    monkeypatch.setattr(sources_base, "SETTLED_NS", 0)
    register_fake(monkeypatch)
    argv = [str(a) for a in row.build(ctx)]
    before = _listing(root)
    sums = {k: v for k, v in checksums(root).items() if not _under(k, "home") and k not in ctx.ptms}
    if ctx.cwd is not None:
        monkeypatch.chdir(ctx.cwd)
    capsys.readouterr()
    old = os.umask(umask)
    try:
        rc = main(argv)
    finally:
        os.umask(old)
    err = capsys.readouterr().err
    if row.refuses:
        assert rc == 2 and row.refuses in err and "Traceback" not in err, f"ptm {' '.join(argv)}: {rc}\n{err[-3000:]}"
    else:
        assert rc == 0, f"ptm {' '.join(argv)} (in {ctx.cwd or os.getcwd()}) failed with {rc}:\n{err[-3000:]}"

    after = _listing(root)
    created = sorted(rel for rel, st in after.items()  # new, or replaced (another inode)
                     if rel not in before or (before[rel].st_ino, before[rel].st_dev) != (st.st_ino, st.st_dev))
    if row.writes and not row.refuses:
        assert any(_under(rel, "out") or _under(rel, "home") for rel in created), f"ptm {' '.join(argv)} wrote no output"
    problems = []
    allowed = ("out", "home") if row.writes and not row.refuses else ()  # a refusal writes nothing at all
    outside = [rel for rel in created if not any(_under(rel, top) for top in allowed)]
    if outside:
        what = ("written by a refusal" if row.refuses else "written outside out/ and home/" if row.writes
                else "written by a command that writes nothing")
        problems.append(f"(a) {what}: {outside}")
    fmode, dmode = 0o666 & ~umask, 0o777 & ~umask
    wrong = []
    for rel in created:
        st = after[rel]
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            if mode != dmode:
                wrong.append(f"{rel}/ {mode:03o} (want {dmode:03o})")
        elif mode & ~0o111 != fmode:
            wrong.append(f"{rel} {mode:03o} (want {fmode:03o})")
    if wrong:
        problems.append(f"(b) modes under umask {umask:03o}: {wrong}")
    now = checksums(root)
    changed = sorted(k for k, v in sums.items() if now.get(k) != v)
    if changed:
        problems.append(f"(c) files that were there before, changed or gone: {changed}")
    if not row.writes:
        changed_home = sorted(k for k in set(before) ^ set(after) if _under(k, "home"))
        if changed_home:
            problems.append(f"(a) the cache changed: {changed_home}")
    if row.writes and not row.refuses:  # (d) every file under ptm's entries was recorded when written
        for rel in after:
            if Path(rel).name in (outputs.JOURNAL, outputs.LOCK):
                problems.append(f"(d) bookkeeping left behind: {rel}")
            if Path(rel).name != outputs.MARKER:
                continue
            m = json.loads((root / rel).read_text())
            top = Path(rel).parent
            unrecorded = [f for f in m["foreign"] if (top / f).as_posix() not in before]
            if "open" in m or unrecorded:
                problems.append(f"(d) {rel}: {'left open; ' if 'open' in m else ''}written but not recorded: "
                                f"{unrecorded[:5]}")
    print(f"ptm {' '.join(argv)} created:", *created, sep="\n  ")
    assert not problems, f"ptm {' '.join(argv)}:\n" + "\n".join(problems)


def test_the_table_covers_every_sub_command():
    """Every runnable ``ptm`` command (sub-sub-commands included) has a writing row or is listed in
    WRITES_NOTHING with a reason, and the table names no command ptm lacks."""
    parser = build_parser()
    leaves = _leaves(parser)
    top = {c[0] for c in leaves}
    assert top == {name.rstrip("_").replace("_", "-") for name in COMMANDS}, "COMMANDS and the parser disagree"
    rows = {r.command for r in ROWS}
    writing = {r.command for r in ROWS if r.writes}
    assert not rows - leaves, f"rows for commands ptm does not have: {sorted(rows - leaves)}"
    assert not set(WRITES_NOTHING) - leaves, f"WRITES_NOTHING lists commands ptm lacks: {sorted(set(WRITES_NOTHING) - leaves)}"
    uncovered = sorted(leaves - writing - set(WRITES_NOTHING))
    assert not uncovered, f"commands with neither a row nor a WRITES_NOTHING reason: {uncovered}"
    both = sorted(writing & set(WRITES_NOTHING))
    assert not both, f"commands both writing and in WRITES_NOTHING: {both}"
    assert all(reason.strip() for reason in WRITES_NOTHING.values())
    quiet = sorted({r.command for r in ROWS if not r.writes} - set(WRITES_NOTHING))
    assert not quiet, f"rows that expect no writes for commands not in WRITES_NOTHING: {quiet}"
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))
    # the demo keeps its row only while it has a tiny mode
    demo = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["demo"]
    assert "--quick" in demo._option_string_actions

