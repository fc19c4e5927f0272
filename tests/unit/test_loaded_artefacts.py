"""Every artefact ptm loads is checked against the shape its record declares: a tiny real artefact
of each kind, made through ptm's own API or CLI, is corrupted (a matrix with a row or column
fewer, a vocabulary cut short, a config edited) and loading it is a one-line error naming the file
(through the CLI: exit status 2, no traceback)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import W2V, fine_tuned_toy, run_cli, tiny_checkpoint, toy_sentiment, write_corpus
from safetensors.torch import load_file, save_file

from ptmkit.artefacts import check_shape, load_npy
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.static.fasttext import FastTextConfig, FastTextModel, train_fasttext
from ptmkit.tasks.saved import load_task_model


def one_line(exc: pytest.ExceptionInfo, *fragments: str) -> str:
    message = str(exc.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def cli_refuses(argv, capsys, *fragments: str) -> str:
    rc, err = run_cli(argv, capsys)
    assert rc == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def test_check_shape_and_load_npy(tmp_path):
    check_shape("f.npy", "m", (3, 8), (3, None))
    with pytest.raises(PtmError, match=r"f.npy: m has shape \[2, 8\], expected \[3, \*\] \(3 words\)"):
        check_shape("f.npy", "m", (2, 8), (3, None), "3 words")
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float64))
    with pytest.raises(PtmError, match="a.npy: the matrix is float64, expected float32"):
        load_npy(tmp_path / "a.npy", (2, 3))
    (tmp_path / "b.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(PtmError, match="b.npy cannot be read"):
        load_npy(tmp_path / "b.npy", (2, 3))


# ---------------------------------------------------------------- fastText classifier (CLI)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    root = tmp_path_factory.mktemp("ftc")
    lines = [f"__label__{'red' if i % 2 else 'blue'} {'red' if i % 2 else 'blue'}{i % 5} w{i % 3}" for i in range(60)]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    (root / "q.txt").write_text("red1 w2\nblue4\n")
    from ptmkit.cli import main

    for loss in ("softmax", "hs"):
        assert main(["fasttext-classify", "train", "--input", str(root / "train.txt"), "-o", str(root / loss),
                     "--dim", "6", "--epoch", "2", "--thread", "1", "--loss", loss, "--wordNgrams", "2",
                     "--bucket", "50"]) == 0
    return root


@pytest.mark.parametrize("loss", ["softmax", "hs"])
@pytest.mark.parametrize("damage", ["input_row", "input_col", "output_row", "output_col", "words", "labels"])
def test_a_fasttext_classifier_of_the_wrong_shape_is_refused(classifier, tmp_path, capsys, loss, damage):
    import shutil

    model = shutil.copytree(classifier / loss, tmp_path / "model")
    emb, wo = np.load(model / "input.npy"), np.load(model / "output.npy")
    meta = json.loads((model / "classifier.json").read_text())
    file = {"input_row": "input.npy", "input_col": "input.npy", "output_row": "output.npy", "output_col": "output.npy",
            "words": "input.npy", "labels": "output.npy"}[damage]
    if damage == "input_row":
        np.save(model / "input.npy", emb[:-1])
    elif damage == "input_col":
        np.save(model / "input.npy", emb[:, :-1])
    elif damage == "output_row":
        np.save(model / "output.npy", wo[:-1])
    elif damage == "output_col":
        np.save(model / "output.npy", wo[:, :-1])
    elif damage == "words":
        meta["words"] = meta["words"][:-1]
    else:
        meta["labels"], meta["label_counts"] = meta["labels"] + ["green"], meta["label_counts"] + [1]
    (model / "classifier.json").write_text(json.dumps(meta))
    for argv in (["fasttext-classify", "predict", model, classifier / "q.txt"],
                 ["fasttext-classify", "test", model, classifier / "train.txt"]):
        cli_refuses(argv, capsys, str(model / file))


def test_a_fasttext_classifier_with_a_damaged_record_is_refused(classifier, tmp_path, capsys):
    import shutil

    model = shutil.copytree(classifier / "softmax", tmp_path / "model")
    text = (model / "classifier.json").read_text()
    (model / "classifier.json").write_text(text[: len(text) // 2])
    cli_refuses(["fasttext-classify", "predict", model, classifier / "q.txt"], capsys, str(model / "classifier.json"),
                "cannot be read")
    meta = json.loads(text)
    meta["label_counts"] = meta["label_counts"][:-1]
    (model / "classifier.json").write_text(json.dumps(meta))
    cli_refuses(["fasttext-classify", "predict", model, classifier / "q.txt"], capsys, "label_counts has shape [1]")


# ---------------------------------------------------------------- fastText model, static vectors


def test_a_fasttext_model_of_the_wrong_shape_is_refused(tmp_path):
    sents = [["the", "cat", "sat"], ["a", "dog", "ran"]] * 20
    train_fasttext(sents, FastTextConfig(min_count=1, dim=6, epochs=1, bucket=30, workers=1, cache=False),
                   out=tmp_path / "ft", progress=False)
    for name, damage in {
        "input.npy": lambda d: np.save(d / "input.npy", np.load(d / "input.npy")[:-1]),
        "counts.npy": lambda d: np.save(d / "counts.npy", np.load(d / "counts.npy")[1:]),
        "words.txt": lambda d: (d / "words.txt").write_text("\n".join((d / "words.txt").read_text().split("\n")[1:])),
        "fasttext.json": lambda d: (d / "fasttext.json").write_text('{"min_n": 3, "max_n": 6, "bucket": 30, "dim": 7}'),
    }.items():
        import shutil

        d = shutil.copytree(tmp_path / "ft", tmp_path / f"bad-{name}")
        damage(d)
        FastTextModel.load(tmp_path / "ft")  # the original still loads
        with pytest.raises(PtmError) as exc:
            FastTextModel.load(d)
        blamed = {"words.txt": "counts.npy", "fasttext.json": "input.npy"}.get(name, name)
        one_line(exc, str(d / blamed), "words.txt" if name == "words.txt" else "")


def test_static_vectors_cut_short_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus.txt")
    assert run_cli(["pretrain", "word2vec", "--data", "corpus.txt", "-o", "w2v", *W2V], capsys)[0] == 0
    vectors = tmp_path / "w2v" / "vectors.bin"
    data = vectors.read_bytes()
    vectors.write_bytes(data[: len(data) - 20])  # the last vector loses 5 of its 8 floats
    cli_refuses(["vectors", "neighbors", vectors, "the"], capsys, str(vectors), "truncated")
    v, d = (int(x) for x in data.split(b"\n", 1)[0].split())
    vectors.write_bytes(f"{v + 1} {d}".encode() + data[data.index(b"\n"):])  # the header announces one more
    cli_refuses(["vectors", "neighbors", vectors, "the"], capsys, str(vectors))


# ---------------------------------------------------------------- checkpoints and task models


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.set_num_threads(1)
    return tiny_checkpoint(tmp_path_factory.mktemp("ck"), ["the cat sat on the mat", "a dog ran under the house"] * 5)


def _copy(src, dst):
    import shutil

    return shutil.copytree(src, dst)


def test_a_checkpoint_whose_weights_do_not_fit_its_config_is_refused(checkpoint, tmp_path):
    ck = _copy(checkpoint, tmp_path / "ck")
    config = json.loads((ck / "config.json").read_text())
    config["model"]["intermediate_size"] = 48
    (ck / "config.json").write_text(json.dumps(config))
    for heads in (True, False):
        with pytest.raises(PtmError) as exc:
            load_pretrained(ck, heads=heads)
        one_line(exc, str(ck / "model.safetensors"), "first mismatching tensor", "[64] in the file", "[48] in the model")


def test_a_checkpoint_with_a_tensor_cut_short_is_refused(checkpoint, tmp_path):
    ck = _copy(checkpoint, tmp_path / "ck")
    state = load_file(str(ck / "model.safetensors"))
    name = next(k for k in state if k.endswith("word_embeddings.weight"))
    state[name] = state[name][:-1].clone()
    save_file(state, str(ck / "model.safetensors"))
    with pytest.raises(PtmError) as exc:
        load_pretrained(ck)
    one_line(exc, str(ck / "model.safetensors"), name)


def test_a_tokenizer_larger_than_the_embedding_is_refused(checkpoint, tmp_path):
    ck = _copy(checkpoint, tmp_path / "ck")
    config = json.loads((ck / "config.json").read_text())
    config["model"]["vocab_size"] -= 1
    (ck / "config.json").write_text(json.dumps(config))
    with pytest.raises(PtmError) as exc:
        load_pretrained(ck)
    one_line(exc, str(ck / "tokenizer.json"), "model.vocab_size", str(ck / "config.json"))


@pytest.fixture(scope="module")
def task_run(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment((48, 16, 16))
    root = tmp_path_factory.mktemp("task")
    fine_tuned_toy(root, task, epochs=1)
    return task, root / "run"


def test_a_task_model_whose_weights_do_not_fit_its_record_is_refused(task_run, tmp_path):
    task, run = task_run
    load_task_model(run, task)
    bad = _copy(run, tmp_path / "run")
    state = load_file(str(bad / "best.safetensors"))
    name = next(k for k in state if k.endswith("weight") and state[k].dim() == 2)
    state[name] = state[name][:, :-1].clone()
    save_file(state, str(bad / "best.safetensors"))
    with pytest.raises(PtmError) as exc:
        load_task_model(bad, task)
    one_line(exc, str(bad / "best.safetensors"), name, "task_model.json")
    bad = _copy(run, tmp_path / "run2")
    info = json.loads((bad / "task_model.json").read_text())
    info["config"]["model"]["hidden_size"] = 16
    info["config"]["model"]["intermediate_size"] = 32
    (bad / "task_model.json").write_text(json.dumps(info))
    with pytest.raises(PtmError) as exc:
        load_task_model(bad, task)
    one_line(exc, str(bad / "best.safetensors"), "first mismatching tensor")
    bad = _copy(run, tmp_path / "run3")
    (bad / "task_model.json").write_text((run / "task_model.json").read_text()[:40])
    with pytest.raises(PtmError) as exc:
        load_task_model(bad, task)
    one_line(exc, str(bad / "task_model.json"))
