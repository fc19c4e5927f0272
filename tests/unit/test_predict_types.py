"""``ptmkit.predict`` on every task type it runs (regression, sentence pairs, multiple choice, span
QA, seq2seq, and an int8-quantized classifier): the predictions equal the task type's own
prediction of the same rows (what ``ptm finetune --eval-only`` writes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_checkpoint
from test_seq2seq import tiny_model, write_pairs

import ptmkit
from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.base import read_task_files
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.saved import load_task_model
from ptmkit.tokenization import Tokenizer

WORDS = "the film plot was very quite story great awful".split()
CFG = FinetuneConfig(epochs=1, lr=3e-3, batch_size=8, max_seq_len=32)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _files(d, name, make):
    rng = np.random.default_rng(0)
    return [_write(d / f"{name}-{s}.jsonl", [make(rng) for _ in range(n)]) for s, n in (("train", 24), ("dev", 8),
                                                                                         ("test", 10))]


def _sentence(rng, k=4):
    return " ".join(rng.choice(WORDS, k))


MAKERS = {
    "regression": lambda rng: {"text": _sentence(rng), "label": float(rng.normal())},
    "classification": lambda rng: {"text": _sentence(rng), "text_pair": _sentence(rng, 3),
                                   "label": ["same", "other"][int(rng.integers(2))]},
    "multiple_choice": lambda rng: {"text": _sentence(rng), "choices": [_sentence(rng, 2) for _ in range(int(rng.integers(2, 4)))],
                                    "label": 0},
    "span_qa": lambda rng: {"question": "what was it ?", "context": "the film was great and the plot was awful",
                            "answers": [{"text": "great", "start": 13}]},
}
ROW_KEYS = {"regression": ("text",), "classification": ("text", "text_pair"), "multiple_choice": ("text", "choices"),
            "span_qa": ("question", "context")}


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("types") / "bert", [" ".join(WORDS)] * 8, layers=1)


@pytest.mark.parametrize("kind", list(MAKERS))
def test_predict_gives_the_task_types_own_predictions(kind, ck, tmp_path):
    files = _files(tmp_path, kind, MAKERS[kind])
    data = read_task_files(kind, *files, **({"text_pair": "text_pair"} if kind == "classification" else {}))
    finetune(load_pretrained(ck, heads=False), data, tmp_path / "run", CFG, seed=0, progress=False)
    gold = load_task_model(tmp_path / "run", data).predict("test")
    rows = [json.loads(line) for line in files[2].read_text().splitlines()]
    got = ptmkit.predict(tmp_path / "run", [{k: r[k] for k in ROW_KEYS[kind]} for r in rows], chunk_size=4)
    assert len(got) == len(rows)
    if kind == "regression":
        assert np.allclose([r["prediction"] for r in got], gold, atol=2e-6)
    elif kind == "classification":
        assert [r["prediction"] for r in got] == [data.label_names[int(p.argmax())] for p in gold]
        assert [r["text_pair"] for r in got] == [r["text_pair"] for r in rows]
        assert np.allclose([list(r["probabilities"].values()) for r in got], gold, atol=2e-6)
    elif kind == "multiple_choice":
        assert [r["prediction"] for r in got] == [int(p.argmax()) for p in gold]
        for r, p in zip(got, gold):
            assert np.allclose(r["probabilities"], p, atol=2e-6) and r["answer"] == r["choices"][r["prediction"]]
    else:
        assert [r["answer"] for r in got] == list(gold)
        assert all(r["score"] is None or np.isfinite(r["score"]) for r in got)


def test_seq2seq_predictions_are_the_greedy_outputs(tmp_path):
    files = [write_pairs(tmp_path / f"{s}.jsonl", n, i) for i, (s, n) in enumerate((("train", 32), ("dev", 8),
                                                                                      ("test", 8)))]
    (tmp_path / "text.txt").write_text(" ".join(json.loads(line)["source"] for line in files[0].read_text().splitlines()))
    tok = Tokenizer.train([tmp_path / "text.txt"], kind="word", vocab_size=64, min_frequency=1)
    data = read_task_files("seq2seq", *files)
    finetune(tiny_model(tok), data, tmp_path / "run", FinetuneConfig(epochs=1, lr=3e-3, batch_size=8, max_seq_len=16,
                                                                    task={"max_target_len": 16}), seed=0, progress=False)
    gold = load_task_model(tmp_path / "run", data).predict("test")[0]
    sources = [json.loads(line)["source"] for line in files[2].read_text().splitlines()]
    got = ptmkit.predict(tmp_path / "run", sources)
    assert [r["prediction"] for r in got] == gold and [r["source"] for r in got] == sources


def test_an_int8_model_predicts_through_the_same_loader(ck, tmp_path, capsys):
    files = _files(tmp_path, "cls", lambda rng: {"text": _sentence(rng), "label": ["a", "b"][int(rng.integers(2))]})
    data = read_task_files("classification", *files)
    finetune(load_pretrained(ck, heads=False), data, tmp_path / "run", CFG, seed=0, progress=False)
    assert main(["quantize", str(tmp_path / "run"), "--int8", "--train", str(files[0]), "--dev", str(files[1]),
                 "--test", str(files[2]), "--rounds", "1", "--threads", "1", "-o", str(tmp_path / "int8")]) == 0
    gold = load_task_model(tmp_path / "int8", data).predict("test")
    texts = [json.loads(line)["text"] for line in files[2].read_text().splitlines()]
    got = ptmkit.predict(tmp_path / "int8", texts)
    assert np.allclose([list(r["probabilities"].values()) for r in got], gold, atol=2e-6)


def test_rows_without_the_tasks_columns_are_refused(ck, tmp_path, capsys):
    files = _files(tmp_path, "mc", MAKERS["multiple_choice"])
    finetune(load_pretrained(ck, heads=False), read_task_files("multiple_choice", *files), tmp_path / "run", CFG, seed=0,
             progress=False)
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "run"), "--input", str(files[2]), "-o", "-", "--input-format", "text"]) == 2
    assert "multiple_choice model reads tables with the columns text, choices" in capsys.readouterr().err
    with pytest.raises(PtmError, match="no 'choices'"):
        ptmkit.predict(tmp_path / "run", [{"text": "a"}])
    with pytest.raises(PtmError, match="give dicts"):
        ptmkit.predict(tmp_path / "run", ["just a text"])
