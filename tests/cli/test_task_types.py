"""Task types are registered files: the driver knows none by name, the user's files of every type
load from the CLI (``--type`` or their columns), and a type's own settings reach only it."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from test_finetune_cli import files  # noqa: F401 (a fixture: three CSV splits and a tiny checkpoint)

from ptmkit import registry
from ptmkit.build import build_model
from ptmkit.cli import main
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import Pretrained
from ptmkit.tasks.base import read_task_files, sniff_type, task_type_names
from ptmkit.tasks.classification import Classification
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tokenization import Tokenizer


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_help_lists_every_registered_task_type(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in task_type_names():
        assert name in text, name


def test_files_name_their_type_by_their_columns(tmp_path):
    rows = {
        "tagging": {"tokens": ["a", "b"], "tags": ["X", "Y"]},
        "multiple_choice": {"text": "q", "choices": ["a", "b"], "label": 0},
        "span_qa": {"question": "q?", "context": "an answer", "answers": [{"text": "answer", "start": 3}]},
        "classification": {"text": "t", "label": "pos"},
    }
    for kind, row in rows.items():
        assert sniff_type(write_jsonl(tmp_path / f"{kind}.jsonl", [row])) == kind
    with pytest.raises(PtmError, match="not read from files"):
        read_task_files("multi_task", *[tmp_path / "tagging.jsonl"] * 3)
    with pytest.raises(PtmError, match="unknown task type 'taging'.*tagging"):
        read_task_files("taging", *[tmp_path / "tagging.jsonl"] * 3)


def test_user_files_of_every_type_train_from_the_cli(files, tmp_path, capsys):  # noqa: F811
    ck = str(files / "ck")
    rng = np.random.default_rng(0)
    words = "the film plot was very quite".split()
    for split, n in (("train", 24), ("dev", 8), ("test", 8)):
        choice_rows, reg_rows = [], []
        for _ in range(n):
            y = int(rng.integers(2))
            choice_rows.append({"text": " ".join(rng.choice(words, 3)), "choices": ["great", "awful"], "label": y})
            reg_rows.append({"text": " ".join(rng.choice(words, 3)) + (" great" if y else " awful"), "label": float(y) + 0.5})
        write_jsonl(tmp_path / f"mc-{split}.jsonl", choice_rows)
        write_jsonl(tmp_path / f"reg-{split}.jsonl", reg_rows)
    common = ["--quiet", "epochs=1", "batch_size=8", "max_seq_len=16"]
    rc = main(["finetune", ck, *[f"--{s}={tmp_path / f'mc-{s}.jsonl'}" for s in ("train", "dev", "test")],
               "-o", str(tmp_path / "mc"), *common])
    assert rc == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "mc" / "pretrained-seed0" / "results.json").read_text())["task_type"] == "multiple_choice"
    rc = main(["finetune", ck, *[f"--{s}={tmp_path / f'reg-{s}.jsonl'}" for s in ("train", "dev", "test")],
               "--type", "regression", "-o", str(tmp_path / "reg"), *common])
    assert rc == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "reg" / "pretrained-seed0" / "results.json").read_text())
    assert result["task_type"] == "regression" and "pearson" in result["test"]


def test_a_settings_key_reaches_only_its_own_type(files, tmp_path, capsys):  # noqa: F811
    ck = str(files / "ck")
    splits = [f"--{s}={files / f'{s}.csv'}" for s in ("train", "dev", "test")]
    rc = main(["finetune", ck, *splits, "--text-column", "sentence", "--label-column", "mood", "-o", str(tmp_path / "a"), "max_seq_len=16",
               "crf=true"])
    err = capsys.readouterr().err
    assert rc == 2 and "crf applies to tagging tasks; this is a classification task" in err, err
    rc = main(["finetune", ck, "--task", "mr", "-o", str(tmp_path / "b"), "doc_strid=3"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown config key 'doc_strid'" in err and "doc_stride" in err, err


@dataclass(frozen=True)
class _EchoOptions:
    scale: float = 1.0


def test_a_new_task_type_is_one_registered_class(tmp_path):
    """A type defined here, in one class, trains through the unchanged driver with its own option."""

    @registry.register("task_type", "test-echo")
    class Echo(Classification):
        name = "test-echo"
        options_class = _EchoOptions
        metrics = ("accuracy", "loss")
        seen: list = []

        def build(self, backbone):
            Echo.seen.append(self.options.scale)
            return super().build(backbone)

    texts = [f"word{i % 5} and more" for i in range(24)]
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="wordpiece", vocab_size=60, min_frequency=1)
    mcfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                             max_position=16)
    config = {"model": mcfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    model = build_model(config, tok)
    pre = Pretrained(config, tok, model.backbone, model.objective, None, model)
    split = TaskSplit(texts, np.arange(24) % 2)
    data = EchoData("echo", [0, 1], split, split, split)
    cfg = FinetuneConfig(epochs=1, batch_size=8, max_seq_len=16, task={"scale": 2.5})
    result = finetune(pre, data, None, cfg, progress=False)
    assert result["task_type"] == "test-echo" and Echo.seen == [2.5]
    with pytest.raises(PtmError, match="unknown config key 'scal'"):
        finetune(pre, data, None, FinetuneConfig(epochs=1, batch_size=8, max_seq_len=16, task={"scal": 2}), progress=False)


@dataclass(frozen=True)
class EchoData(TaskData):
    task_type = "test-echo"
