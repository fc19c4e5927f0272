"""Multi-task fine-tuning (MT-DNN): the task schedule, per-task gradients, a tiny run with resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, after_intermediate_task, finetune
from ptmkit.tasks.multitask import MultiTask, MultiTaskBatches, MultiTaskData, MultiTaskModel, MultiTaskOptions
from ptmkit.tasks.tagging import TaggingData, TaggingSplit
from ptmkit.tokenization import Tokenizer

WORDS = "the a film movie plot actors scene story was is very quite rather".split()


class Killed(Exception):
    pass


class Source:
    """A stand-in batch source: ``n`` batches an epoch, each naming (epoch, step)."""

    def __init__(self, n: int) -> None:
        self.steps_per_epoch = n

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        return {"at": torch.tensor([epoch, step])}


@pytest.fixture(scope="module")
def tasks():
    rng = np.random.default_rng(1)

    def sentiment(n):
        texts, labels = [], []
        for _ in range(n):
            y = int(rng.integers(2))
            words = list(rng.choice(WORDS, size=int(rng.integers(3, 8))))
            words.insert(int(rng.integers(len(words) + 1)), "good" if y else "bad")
            texts.append(" ".join(words))
            labels.append(y)
        return TaskSplit(texts, np.array(labels, dtype=np.int64))

    def tags(n):
        words, tags = [], []
        for _ in range(n):
            w = list(rng.choice(WORDS, size=int(rng.integers(3, 8))))
            words.append(w)
            tags.append(["DET" if x in ("the", "a") else "W" for x in w])
        return TaggingSplit(words, tags)

    cls = TaskData("sent", [0, 1], sentiment(48), sentiment(16), sentiment(16))
    tag = TaggingData("det", ["DET", "W"], tags(24), tags(16), tags(16))
    return MultiTaskData({"sent": cls, "det": tag})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tasks):
    d = tmp_path_factory.mktemp("ckpt")
    (d / "text.txt").write_text("\n".join(tasks.tasks["sent"].train.texts) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=100, min_frequency=1)
    config = {
        "model": {"encoder": "transformer", "vocab_size": tok.vocab_size, "hidden_size": 16, "num_layers": 1,
                  "num_heads": 2, "intermediate_size": 32, "max_position": 16},
        "objective": {"name": "mlm", "nsp": False},
        "tokenizer": {"kind": "wordpiece"},
        "train": {},
    }
    torch.manual_seed(0)
    return save_pretrained(d / "ck", config, build_model(config, tok), tok)


def test_proportional_schedule_gives_each_task_its_share_in_a_shuffled_order():
    batches = MultiTaskBatches([Source(5), Source(2), Source(3)], seed=4, schedule="proportional")
    assert batches.steps_per_epoch == 10
    for epoch in (0, 1):
        seen = [(int(b["task"]), *b["at"].tolist()) for b in (batches(epoch, s) for s in range(10))]
        tasks = [t for t, _, _ in seen]
        assert np.bincount(tasks).tolist() == [5, 2, 3]  # batches per task = its dataset's share
        for t, n in enumerate((5, 2, 3)):  # each task's own batches 0..n-1 of this epoch, in order
            assert [(e, s) for u, e, s in seen if u == t] == [(epoch, s) for s in range(n)]
    order0 = [int(batches(0, s)["task"]) for s in range(10)]
    order1 = [int(batches(1, s)["task"]) for s in range(10)]
    assert order0 != order1 and order0 != sorted(order0)  # reshuffled each epoch
    again = MultiTaskBatches([Source(5), Source(2), Source(3)], seed=4, schedule="proportional")
    assert [int(again(1, s)["task"]) for s in reversed(range(10))] == order1[::-1]  # a function of (seed, epoch, step)


def test_round_robin_alternates_strictly_and_smaller_tasks_start_another_pass():
    batches = MultiTaskBatches([Source(3), Source(1)], seed=0, schedule="round_robin")
    assert batches.steps_per_epoch == 6
    seen = [(int(b["task"]), *b["at"].tolist()) for b in (batches(2, s) for s in range(6))]
    assert [t for t, _, _ in seen] == [0, 1, 0, 1, 0, 1]
    assert [(e, s) for t, e, s in seen if t == 0] == [(2, 0), (2, 1), (2, 2)]
    second = [(e, s) for t, e, s in seen if t == 1]
    assert [s for _, s in second] == [0, 0, 0] and len({e for e, _ in second}) == 3  # three differently shuffled passes


def test_schedule_is_validated():
    with pytest.raises(PtmError, match="task_schedule"):
        MultiTaskOptions(task_schedule="random")
    with pytest.raises(PtmError, match="at least two tasks"):
        MultiTaskData({"one": object()})


def test_each_head_gets_gradients_only_from_its_own_tasks_batches(tasks, checkpoint):
    pre = load_pretrained(checkpoint, heads=False)
    cfg = FinetuneConfig(batch_size=8, max_seq_len=16)
    task = MultiTask(tasks, cfg, pre.tokenizer, False, True)
    model = task.build(pre.backbone)
    assert isinstance(model, MultiTaskModel)
    state = model.state_dict()  # the encoder is stored once, at backbone.*
    assert any(k.startswith("backbone.") for k in state) and not any(".backbone." in k for k in state)
    batches = task.batches(task.encode("train"), seed=0)
    for step in range(4):
        batch = batches(0, step)
        model.zero_grad(set_to_none=True)
        model(batch).loss.backward()
        own = model.task_names[int(batch["task"])]
        for name, head in model.heads.items():
            grads = [p.grad for p in head.parameters()]
            if name == own:
                assert all(g is not None for g in grads) and any(float(g.abs().sum()) > 0 for g in grads)
            else:
                assert all(g is None for g in grads), name
        assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in model.backbone.parameters())


def kill_at(step: int):
    def callback(trainer, s):
        if s == step:
            raise Killed

    return callback


CFG = FinetuneConfig(epochs=3, lr=3e-3, batch_size=8, max_seq_len=16, num_threads=1)


@pytest.mark.parametrize("schedule", ["proportional", "round_robin"])
def test_tiny_multitask_run_resumes_exactly_and_feeds_a_second_stage(tmp_path, tasks, checkpoint, schedule):
    cfg = FinetuneConfig(**{**CFG.__dict__, "task": {"task_schedule": schedule}})
    full = finetune(checkpoint, tasks, tmp_path / "full", cfg, seed=1, progress=False)
    assert full["task_type"] == "multi_task" and full["select"] == "mean"
    for split in ("dev", "test"):
        assert {"sent/accuracy", "det/accuracy", "mean"} <= set(full[split])
        assert full[split]["mean"] == pytest.approx((full[split]["sent/accuracy"] + full[split]["det/accuracy"]) / 2)
    assert full["dev"]["det/accuracy"] > 0.6  # the determiner tags are learnable from the word alone
    assert (tmp_path / "full" / "predictions-sent.jsonl").is_file() and (tmp_path / "full" / "predictions-det.jsonl").is_file()
    steps = 6 + 3 if schedule == "proportional" else 2 * 6  # ceil(48/8) + ceil(24/8), or 2 x the larger
    with pytest.raises(Killed):
        finetune(checkpoint, tasks, tmp_path / "cut", cfg, seed=1, progress=False, callbacks=[kill_at(steps + 2)])
    resumed = finetune(checkpoint, tasks, tmp_path / "cut", cfg, seed=1, progress=False, resume=True)
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    # the shared encoder of the selected epoch starts a per-task stage (MT-DNN's fine-tuning step)
    best = load_file(str(tmp_path / "full" / "best.safetensors"))
    pre = after_intermediate_task(load_pretrained(checkpoint, heads=False), tmp_path / "full")
    for k, v in pre.backbone.state_dict().items():
        assert torch.equal(v, best[f"backbone.{k}"])
    if schedule == "proportional":
        single = finetune(pre, tasks.tasks["sent"], None, FinetuneConfig(**{**CFG.__dict__, "epochs": 1}), progress=False)
        assert json.dumps(single["test"])  # the second stage runs on the ordinary single-task path


def test_a_head_that_wraps_its_encoder_deeper_is_shared_too():
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.tasks.classification import SequenceClassifier
    from ptmkit.tasks.regression import Regressor

    enc = TransformerEncoder(TransformerConfig(vocab_size=30, hidden_size=8, num_layers=1, num_heads=2,
                                               intermediate_size=16, max_position=8))
    model = MultiTaskModel(enc, {"sts": Regressor(2.0, 1.0, backbone=enc), "nli": SequenceClassifier(enc, 3)})
    keys = list(model.state_dict())
    assert not any(".backbone." in k for k in keys) and sum(k.startswith("backbone.") for k in keys) > 0
    batch = {"input_ids": torch.randint(5, 30, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.int64),
             "labels": torch.tensor([1.5, 3.0]), "task": torch.tensor(0)}
    model(batch).loss.backward()
    assert all(p.grad is None for p in model.heads["nli"].parameters())
    assert model.heads["sts"].model.classifier.weight.grad is not None
    with pytest.raises(PtmError, match="not built on the shared encoder"):
        MultiTaskModel(enc, {"a": SequenceClassifier(enc, 2), "b": SequenceClassifier(TransformerEncoder(enc.config), 2)})
