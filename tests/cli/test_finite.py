"""Finite or fail: a NaN or an infinity in a hyper-parameter is refused before any work, naming the
key; a run whose loss or weights turn non-finite stops with an error and never saves them; a
vectors file with non-finite values is refused naming the file and the word (or those words are
skipped on request)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from ptmkit.cli import main
from ptmkit.config import from_dict
from ptmkit.errors import PtmError

TINY = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
    "tokenizer.vocab_size=200", "tokenizer.min_frequency=1",
    "train.batch_size=4", "train.seq_len=32", "train.max_steps=2", "train.eval_batches=1", "train.num_threads=1",
]
W2V = ["dim=8", "epochs=1", "min_count=1", "workers=1", "cache=false"]


def write_corpus(path: Path, docs: int = 20) -> Path:
    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small and then saw it king queen".split()
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            for _ in range(6):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "\n")
            f.write("\n")
    return path


def call(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse errors
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("finite") / "corpus.txt")


# -- A1: hyper-parameters ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, fragment", [
    (["pretrain", "bert-tiny", *TINY, "train.lr=nan"], "train.lr=nan is not a finite number"),
    (["pretrain", "bert-tiny", *TINY, "train.lr=inf"], "train.lr=inf is not a finite number"),
    (["pretrain", "bert-tiny", *TINY, "train.max_seconds=.inf"], "train.max_seconds=inf is not a finite number"),
    (["pretrain", "bert-tiny", *TINY, "train.betas=[0.9, .nan]"], "train.betas=(0.9, nan) holds a number that is not finite"),
    (["pretrain", "word2vec", *W2V, "alpha=nan"], "alpha=nan is not a finite number"),
    (["pretrain", "glove", "dim=8", "epochs=1", "min_count=1", "x_max=-inf"], "x_max=-inf is not a finite number"),
], ids=["lr-nan", "lr-inf", "max-seconds-inf", "betas-nan", "word2vec-alpha-nan", "glove-x-max-inf"])
def test_nonfinite_hyper_parameter_is_refused(argv, fragment, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    rc, output = call([*argv[:2], "--data", corpus, "-o", out, *argv[2:]], capsys)
    assert rc == 2, output
    assert fragment in output and "Traceback" not in output, output
    assert not out.exists()


@pytest.mark.parametrize("lr", ["nan", "inf", "-1"])
def test_fasttext_classify_refuses_a_nonfinite_lr(lr, tmp_path, capsys):
    data = tmp_path / "train.txt"
    data.write_text("__label__a good movie\n__label__b bad film\n")
    rc, output = call(["fasttext-classify", "train", "--input", data, "-o", tmp_path / "clf", "--lr", lr], capsys)
    assert rc == 2 and f"argument --lr: must be a finite number > 0, got {lr}" in output, output
    assert not (tmp_path / "clf").exists()


def test_configs_built_in_python_are_checked_too():
    """The API paths: a value a config converts itself, a static config given as an object, a
    TrainConfig handed to the Trainer, fastText's classifier config."""
    from ptmkit.objectives.electra import ELECTRAConfig
    from ptmkit.static.configs import as_config
    from ptmkit.static.fasttext_classify import ClassifierConfig, train_classifier
    from ptmkit.static.word2vec import Word2VecConfig
    from ptmkit.train.config import TrainConfig
    from ptmkit.train.trainer import Trainer

    with pytest.raises(PtmError, match=r"objective\.temperature=nan is not a finite number"):
        from_dict(ELECTRAConfig, {"temperature": "nan"}, "objective")  # the class turns the string into a float
    with pytest.raises(PtmError, match=r"^alpha=nan is not a finite number"):
        as_config(Word2VecConfig, Word2VecConfig(alpha=math.nan))
    with pytest.raises(PtmError, match=r"train\.lr=inf is not a finite number"):
        Trainer(None, None, TrainConfig(lr=math.inf))  # refused before the model is looked at
    with pytest.raises(PtmError, match=r"^lr=nan is not a finite number"):
        train_classifier("unread.txt", ClassifierConfig(lr=math.nan))
    assert from_dict(TrainConfig, {"lr": 3e-4, "betas": [0.9, 0.98]}, "train").betas == (0.9, 0.98)  # finite: as before
