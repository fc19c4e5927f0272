"""Bad task data: each mistake is refused with a message naming the file (and line) and the fix,
or, where the run can go on, counted in the scores rather than hidden."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.data.tasks import TaskData, TaskSplit, load_files
from ptmkit.errors import PtmError
from ptmkit.tasks.finetune import FinetuneConfig, check_splits, finetune
from ptmkit.tasks.multiple_choice import read_choices
from ptmkit.tasks.multitask import MultiTaskData
from ptmkit.tasks.regression import load_regression_files
from ptmkit.tasks.span_qa import read_qa
from ptmkit.tasks.tagging import load_tagging_files, read_tagged, score_tags


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_unseen_dev_label_names_the_label_and_the_file(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", [{"text": "a", "label": "pos"}, {"text": "b", "label": "neg"}])
    test = _jsonl(tmp_path / "test.jsonl", [{"text": "c", "label": "pos"}, {"text": "d", "label": "mixed"}])
    with pytest.raises(PtmError, match=r"test.jsonl: label\(s\) mixed do not occur in the training file .*known labels: neg, pos"):
        load_files(train, train, test)


def test_unseen_dev_tags_are_counted_in_the_scores(tmp_path):
    (tmp_path / "train.conll").write_text("a X\nb Y\n")
    (tmp_path / "dev.conll").write_text("a X\nb NEW\n\nb NEW\n")
    data = load_tagging_files(tmp_path / "train.conll", tmp_path / "dev.conll", tmp_path / "train.conll")
    assert data.meta["unknown_tags"]["dev"] == {"NEW": 2}
    # the best possible prediction still misses the two NEW words, and the scores say why
    scores = score_tags(data, data.dev, [np.array([0, 1]), np.array([1])])
    assert scores["unknown_tags"] == 2 and scores["accuracy"] == pytest.approx(1 / 3)


def test_tagging_length_mismatch_names_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["X", "Y"]}) + "\n\n"
                 + json.dumps({"tokens": ["a", "b", "c"], "tags": ["X", "Y"]}) + "\n")
    with pytest.raises(PtmError, match=r"t.jsonl:3: 3 tokens but 2 tags"):
        read_tagged(p)


def test_qa_answer_outside_its_context(tmp_path):
    p = _jsonl(tmp_path / "qa.jsonl", [{"question": "who?", "context": "the cat sat", "answers": [{"text": "cat", "start": 4}]},
                                       {"question": "what?", "context": "the cat sat", "answers": [{"text": "mat", "start": 8}]}])
    with pytest.raises(PtmError, match=r"qa.jsonl:2: .*'mat'"):
        read_qa(p)


def test_empty_splits_in_every_reader(tmp_path):
    (tmp_path / "empty.csv").write_text("text,label\n")
    (tmp_path / "empty.jsonl").write_text("\n")
    good = _jsonl(tmp_path / "good.jsonl", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    with pytest.raises(PtmError, match=r"empty.csv has no rows \(an empty split\)"):
        load_files(good, tmp_path / "empty.csv", good)
    with pytest.raises(PtmError, match=r"empty.jsonl has no rows \(an empty split\)"):
        load_regression_files(good, good, tmp_path / "empty.jsonl")
    for reader in (read_tagged, read_qa, read_choices):
        with pytest.raises(PtmError, match="empty split"):
            reader(tmp_path / "empty.jsonl")


def test_empty_split_built_in_python_is_refused_before_training():
    full = TaskSplit(["a", "b"], np.array([0, 1]))
    empty = TaskSplit([], np.array([], dtype=np.int64))
    with pytest.raises(PtmError, match="task t: the dev split is empty"):
        check_splits(TaskData("t", [0, 1], full, empty, full))
    with pytest.raises(PtmError, match="task u: the train split is empty"):
        check_splits(MultiTaskData({"t": TaskData("t", [0, 1], full, full, full), "u": TaskData("u", [0, 1], empty, full, full)}))
    with pytest.raises(PtmError, match="the test split is empty"):  # before the model is even loaded
        finetune("no-such-model", TaskData("t", [0, 1], full, full, empty), None, FinetuneConfig(), progress=False)
