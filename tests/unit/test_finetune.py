"""Fine-tuning: inputs, pooling, a learnable synthetic task, model selection and outputs."""

import json

import numpy as np
import pytest
import torch

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.classification import SequenceClassifier, collate, encode_inputs
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tokenization import Tokenizer
from ptmkit.workflows.finetune import run_seeds
from ptmkit.workflows.report import format_table
from ptmkit.workflows.report import summarize_inits as summarize

WORDS = "the a film movie plot actors scene story was is very quite rather".split()


def _sentences(n, rng):
    """Label 1 iff the sentence contains 'good' (else 'bad'); the rest is filler."""
    texts, labels = [], []
    for _ in range(n):
        y = int(rng.integers(2))
        words = list(rng.choice(WORDS, size=int(rng.integers(3, 9))))
        words.insert(int(rng.integers(len(words) + 1)), "good" if y else "bad")
        texts.append(" ".join(words))
        labels.append(y)
    return texts, np.array(labels, dtype=np.int64)


@pytest.fixture(scope="module")
def task():
    rng = np.random.default_rng(0)
    splits = [TaskSplit(*_sentences(n, rng)) for n in (160, 60, 60)]
    return TaskData("synthetic", [0, 1], *splits)


def _tiny_config(vocab, causal=False):
    return TransformerConfig(
        vocab_size=vocab, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position=32,
        norm="pre" if causal else "post", type_vocab_size=0 if causal else 2, pooler=not causal,
        dropout=0.0, attention_dropout=0.0,
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, task):
    d = tmp_path_factory.mktemp("ckpt")
    (d / "text.txt").write_text("\n".join(task.train.texts) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=200, min_frequency=1)
    cfg = _tiny_config(tok.vocab_size)
    config = {
        "model": cfg.__dict__.copy(),
        "objective": {"name": "mlm", "nsp": False},
        "tokenizer": {"kind": "wordpiece"},
        "train": {},
    }
    return save_pretrained(d / "ck", config, build_model(config, tok), tok)


def test_encode_inputs_bert_and_gpt():
    enc = encode_inputs([[10, 11, 12]], None, max_len=4, cls_id=2, sep_id=3, causal=False)
    assert enc.ids[0].tolist() == [2, 10, 11, 3] and enc.types[0].tolist() == [0, 0, 0, 0]
    enc = encode_inputs([[10, 11]], [[20, 21, 22, 23]], max_len=7, cls_id=2, sep_id=3, causal=False)
    # longest-first truncation: budget 4 tokens, b is cut first
    assert enc.ids[0].tolist() == [2, 10, 11, 3, 20, 21, 3]
    assert enc.types[0].tolist() == [0, 0, 0, 0, 1, 1, 1]
    enc = encode_inputs([[10, 11, 12]], None, max_len=8, cls_id=2, sep_id=3, causal=True)
    assert enc.ids[0].tolist() == [10, 11, 12, 3]
    with pytest.raises(PtmError):
        encode_inputs([[1]], None, max_len=1, cls_id=2, sep_id=3, causal=False)


def test_collate_pads_right():
    enc = encode_inputs([[5], [5, 6, 7]], None, max_len=8, cls_id=2, sep_id=3, causal=False)
    b = collate(enc, np.array([0, 1]), pad_id=0, labels=np.array([1, 0]))
    assert b["input_ids"].tolist() == [[2, 5, 3, 0, 0], [2, 5, 6, 7, 3]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert b["labels"].tolist() == [1, 0]


def test_pooling_cls_and_last_token():
    torch.manual_seed(0)
    bert = SequenceClassifier(TransformerEncoder(_tiny_config(40)), 3).eval()
    gpt = SequenceClassifier(TransformerEncoder(_tiny_config(40, causal=True)), 3, causal=True).eval()
    assert bert.pooling == "cls" and gpt.pooling == "last"
    ids = torch.tensor([[2, 7, 8, 3, 0, 0], [2, 7, 8, 9, 10, 3]])
    mask = (torch.arange(6)[None] < torch.tensor([[4], [6]])).long()
    batch = {"input_ids": ids, "attention_mask": mask}
    out = bert.backbone(ids, attention_mask=mask)
    torch.testing.assert_close(bert.pool(batch), out.pooled)
    out = gpt.backbone(ids, attention_mask=mask, causal=True)
    torch.testing.assert_close(gpt.pool(batch), out.last_hidden_state[[0, 1], [3, 5]])
    # causal: the pooled state of row 0 must not depend on its padding
    ids2 = ids.clone()
    ids2[0, 4:] = 9
    torch.testing.assert_close(gpt.pool({"input_ids": ids2, "attention_mask": mask})[0], gpt.pool(batch)[0])
    step = bert({**batch, "labels": torch.tensor([0, 2])})
    assert step.loss.ndim == 0 and set(step.metrics) == {"accuracy"} and step.n_predictions == 2


def test_finetune_learns_and_writes_outputs(tmp_path, task, checkpoint):
    cfg = FinetuneConfig(epochs=10, lr=3e-3, batch_size=16, max_seq_len=16, warmup=0.1)
    result = finetune(checkpoint, task, tmp_path / "out", cfg, init="pretrained", seed=1, progress=False)
    assert result["test"]["accuracy"] >= 0.9  # 'good' vs 'bad' is easy to learn
    # the selected epoch is the best dev epoch, and its dev score is reproduced by the kept weights
    dev_acc = [h["dev_accuracy"] for h in result["history"]]
    assert result["best_epoch"] == int(np.argmax(dev_acc)) + 1
    assert result["dev"]["accuracy"] == pytest.approx(max(dev_acc))
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["test"] == result["test"]
    preds = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == len(task.test)
    assert set(preds[0]) == {"text", "label", "prediction", "probabilities"}
    assert sum(preds[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    acc = np.mean([p["label"] == p["prediction"] for p in preds])
    assert acc == pytest.approx(result["test"]["accuracy"])
    # existing outputs are never overwritten
    with pytest.raises(PtmError, match="already holds"):
        finetune(checkpoint, task, tmp_path / "out", cfg, seed=1, progress=False)


def test_random_init_uses_same_tokenizer_and_architecture(task, checkpoint):
    pre = load_pretrained(checkpoint)
    cfg = FinetuneConfig(epochs=1, lr=1e-3, batch_size=32, max_seq_len=16)
    a = finetune(pre, task, None, cfg, init="random", seed=3, progress=False)
    b = finetune(pre, task, None, cfg, init="random", seed=3, progress=False)
    assert a["test"] == b["test"]  # deterministic for a seed
    assert a["num_parameters"] == finetune(pre, task, None, cfg, init="pretrained", seed=3, progress=False)["num_parameters"]
    # the caller's pre-trained backbone is not modified by fine-tuning
    fresh = load_pretrained(checkpoint)
    for (n, p), (_, q) in zip(pre.backbone.state_dict().items(), fresh.backbone.state_dict().items()):
        torch.testing.assert_close(p, q, msg=n)


def test_run_seeds_summary_table(tmp_path, task, checkpoint):
    cfg = FinetuneConfig(epochs=1, lr=1e-3, batch_size=32, max_seq_len=16)
    results = run_seeds(checkpoint, task, tmp_path, cfg, ["pretrained", "random"], [0, 1], progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pretrained-seed0", "pretrained-seed1", "random-seed0", "random-seed1"]
    summary = summarize(results)
    accs = [r["test"]["accuracy"] for r in results if r["init"] == "random"]
    assert summary["random"]["test_accuracy"]["mean"] == pytest.approx(np.mean(accs))
    assert summary["random"]["test_accuracy"]["sd"] == pytest.approx(np.std(accs, ddof=1))
    table = format_table(summary)
    assert "pretrained" in table and "±" in table and "s1:" in table


def test_config_validation():
    with pytest.raises(PtmError):
        FinetuneConfig(lr=0)
    with pytest.raises(PtmError):
        FinetuneConfig(pooling="max")
    with pytest.raises(PtmError):
        FinetuneConfig(warmup=1.5)


def test_lr_grid_keeps_best_dev(task, checkpoint):
    cfg = FinetuneConfig(epochs=1, lr=1e-3, batch_size=32, max_seq_len=16)
    results = run_seeds(checkpoint, task, None, cfg, ["random"], [0], progress=False, lrs=[1e-5, 3e-3])
    (r,) = results
    devs = [c["dev"]["accuracy"] for c in r["lr_search"]]
    assert [c["lr"] for c in r["lr_search"]] == [1e-5, 3e-3]
    assert r["dev"]["accuracy"] == max(devs) and r["config"]["lr"] == r["lr_search"][int(np.argmax(devs))]["lr"]


@pytest.fixture()
def captured(monkeypatch):
    """The classifier each ``finetune`` call trains (holding the selected epoch's weights after it)."""
    import ptmkit.tasks.classification as ft

    models = []
    build = ft.classifier_on

    def capture(*args, **kwargs):
        models.append(build(*args, **kwargs))
        return models[-1]

    monkeypatch.setattr(ft, "classifier_on", capture)
    return models


def _changed(clf, pre):
    """Names of the backbone parameters that differ from the pre-trained ones."""
    before = dict(pre.backbone.named_parameters())
    return {n for n, p in clf.backbone.named_parameters() if not torch.equal(p, before[n])}


def test_freeze_embeddings_keeps_pretrained_embeddings(task, checkpoint, captured):
    pre = load_pretrained(checkpoint)
    cfg = FinetuneConfig(epochs=10, lr=3e-3, batch_size=16, max_seq_len=16, freeze_embeddings=True)
    result = finetune(pre, task, None, cfg, seed=1, progress=False)
    changed = _changed(captured[-1], pre)
    assert changed and not any(n.startswith("embeddings.") for n in changed)
    assert any(n.startswith("layers.0.") for n in changed)
    assert result["test"]["accuracy"] >= 0.8  # the layers above still learn the task


def test_gradual_unfreeze_trains_the_head_first(task, checkpoint, captured):
    pre = load_pretrained(checkpoint)  # one layer: epoch 1 head + pooler, epoch 2 + layer 0, epoch 3 + embeddings
    finetune(pre, task, None, FinetuneConfig(epochs=1, lr=3e-3, batch_size=16, max_seq_len=16, gradual_unfreeze=True),
             seed=1, progress=False)
    assert _changed(captured[-1], pre) <= {n for n, _ in pre.backbone.named_parameters() if n.startswith("pooler.")}
    finetune(pre, task, None, FinetuneConfig(epochs=2, lr=3e-3, batch_size=16, max_seq_len=16, gradual_unfreeze=True,
                                             select="loss"), seed=1, progress=False)
    changed = _changed(captured[-1], pre)
    assert not any(n.startswith("embeddings.") for n in changed)
    finetune(pre, task, None, FinetuneConfig(epochs=3, lr=3e-3, batch_size=16, max_seq_len=16, gradual_unfreeze=True),
             seed=1, progress=False)
    assert captured[-1] is not None


def test_layer_decay_scales_lrs_by_depth(task, checkpoint, monkeypatch):
    groups_seen = []
    adamw = torch.optim.AdamW

    def spy(groups, **kwargs):
        groups_seen.extend(groups)
        return adamw(groups, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    pre = load_pretrained(checkpoint)
    finetune(pre, task, None, FinetuneConfig(epochs=1, lr=1e-3, batch_size=32, max_seq_len=16, layer_decay=0.5),
             seed=0, progress=False)
    # one layer (L = 1): classifier/pooler 1e-3, layers.0 5e-4, embeddings 2.5e-4 (peak LRs)
    count: dict[float, int] = {}
    for g in groups_seen:
        lr = round(g["initial_lr"], 12)
        count[lr] = count.get(lr, 0) + len(g["params"])
    assert set(count) == {1e-3, 5e-4, 2.5e-4}
    assert count[2.5e-4] == sum(1 for n, _ in pre.backbone.named_parameters() if n.startswith("embeddings."))
    with pytest.raises(PtmError, match="layer_decay"):
        FinetuneConfig(layer_decay=0)
