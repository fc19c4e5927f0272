"""Finite or fail: a NaN or an infinity in a hyper-parameter is refused before any work, naming the
key; a run whose loss or weights turn non-finite stops with an error and never saves them; a
vectors file with non-finite values is refused naming the file and the word (or those words are
skipped on request)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import TINY, W2V, write_corpus

from ptmkit.cli import main
from ptmkit.config import from_dict
from ptmkit.errors import PtmError


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


# -- A2: a run that diverges ---------------------------------------------------------------------------
def finite_weights(ck: Path) -> bool:
    from safetensors.torch import load_file

    return all(bool(torch.isfinite(t).all()) for t in load_file(str(ck / "model.safetensors")).values())


def test_diverged_pretraining_fails_and_saves_nothing(corpus, tmp_path, capsys):
    """lr=1e10 on a tiny BERT: step 1 blows the weights up, step 2's loss is NaN; the run ends on
    that step, so its weights are not saved and the fresh run leaves nothing."""
    out = tmp_path / "run"
    rc, output = call(["pretrain", "bert-tiny", "--data", corpus, "-o", out, *TINY, "train.lr=1e10"], capsys)
    assert rc == 2, output
    assert "training diverged: 1 step up to the last, step 2, had a non-finite loss" in output
    assert "no checkpoint had been saved yet" in output and "Traceback" not in output
    assert not out.exists()


def test_diverged_pretraining_keeps_the_last_finite_checkpoint(corpus, tmp_path, capsys):
    from ptmkit.train import checkpoint as ckpt

    out = tmp_path / "run"
    rc, output = call(["pretrain", "bert-tiny", "--data", corpus, "-o", out, *TINY, "train.lr=1e10", "train.max_steps=10",
                       "train.save_every=1", "train.nan_guard=0"], capsys)
    assert rc == 2, output
    assert "after step 2 the weights hold NaN or inf" in output and "checkpoint step-0000002 was not saved" in output
    assert f"the last good checkpoint {out / 'checkpoints' / 'step-0000001'} is kept" in output
    kept = ckpt.checkpoint_steps(out)
    assert [s for s, _ in kept] == [1] and all(finite_weights(ck) for _, ck in kept)


def test_diverged_finetuning_fails(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert call(["pretrain", "bert-tiny", "--data", corpus, "-o", run, *TINY], capsys)[0] == 0
    data = tmp_path / "t.csv"
    data.write_text("text,label\ngood movie,1\nbad film,0\ngreat fun,1\nawful plot,0\n")
    rc, output = call(["finetune", run, "--train", data, "--dev", data, "--test", data, "-o", tmp_path / "ft",
                       "epochs=3", "max_seq_len=32", "lr=1e10"], capsys)
    assert rc == 2 and "training diverged" in output and "Traceback" not in output, output


@pytest.mark.parametrize("argv", [
    ["word2vec", *W2V, "alpha=1e30"],
    ["word2vec", *W2V, "alpha=1e30", "device=torch"],
    ["fasttext", *W2V, "bucket=1000", "alpha=1e30"],
    ["glove", "dim=8", "epochs=1", "min_count=1", "lr=1e30"],
], ids=["word2vec", "word2vec-torch", "fasttext", "glove"])
def test_diverged_static_model_saves_nothing(argv, corpus, tmp_path, capsys):
    out = tmp_path / "vectors"
    rc, output = call(["pretrain", argv[0], "--data", corpus, "-o", out, *argv[1:]], capsys)
    assert rc == 2, output
    assert "training diverged:" in output and "hold NaN or inf (the first: " in output and "nothing was saved" in output
    assert "lower the learning rate (" in output and "=1e+30)" in output and "Traceback" not in output
    assert not out.exists()


# -- A3: vectors files ---------------------------------------------------------------------------------
WORDS = ["the", "cat", "dog", "sat"]
ROWS = [[0.1, 0.2, 0.3], [0.3, float("nan"), 0.1], [0.5, 0.1, 0.2], [float("-inf"), 0.0, 1.0]]


@pytest.fixture(params=["word2vec", "word2vec-binary", "glove"])
def bad_vectors(request, tmp_path) -> tuple[Path, str, str]:
    """A file in each format whose 'cat' holds a NaN and 'sat' an infinity; where 'cat' is."""
    import numpy as np

    from ptmkit.interop.word2vec_format import write_glove, write_word2vec

    path = tmp_path / f"bad.{request.param}"
    vectors = np.array(ROWS, dtype=np.float32)
    if request.param == "glove":
        write_glove(path, WORDS, vectors)
    else:
        write_word2vec(path, WORDS, vectors, binary=request.param == "word2vec-binary")
    where = {"word2vec": "line 3", "word2vec-binary": "vector 2 of 4", "glove": "line 2"}[request.param]
    return path, request.param, where


def test_nonfinite_vectors_are_refused_naming_file_and_word(bad_vectors):
    import numpy as np

    from ptmkit.interop.word2vec_format import read_vectors
    from ptmkit.static.vectors import WordVectors

    path, fmt, where = bad_vectors
    with pytest.raises(PtmError) as err:
        read_vectors(path)
    assert f"{path}: the vector of 'cat' ({where}) holds a non-finite value (nan); 2 of 4 vectors do" in str(err.value)
    assert "--skip-nonfinite" in str(err.value)
    with pytest.raises(PtmError, match="the vector of 'cat'"):
        WordVectors.load(path, format=fmt)
    wv = WordVectors.load(path, skip_nonfinite=True)
    assert wv.words == ["the", "dog"]
    np.testing.assert_array_equal(wv.vectors, np.array([ROWS[0], ROWS[2]], dtype=np.float32))


def test_every_vector_nonfinite_is_an_error_even_when_skipping(tmp_path):
    from ptmkit.interop.word2vec_format import read_vectors

    path = tmp_path / "all.txt"
    path.write_text("a nan 1\nb 1 inf\n")
    with pytest.raises(PtmError, match=r"every one of its 2 vectors holds NaN or inf \(the first: 'a', line 1\)"):
        read_vectors(path, skip_nonfinite=True)


def test_ptm_vectors_refuses_or_skips_nonfinite(bad_vectors, capsys):
    path, _, where = bad_vectors
    rc, output = call(["vectors", "neighbors", path, "the"], capsys)
    assert rc == 2 and f"the vector of 'cat' ({where}) holds a non-finite value" in output, output
    rc, output = call(["vectors", "neighbors", path, "the", "--skip-nonfinite"], capsys)
    assert rc == 0, output
    assert output.startswith("dog\t") and "cat" not in output.split("\n", 1)[0]
