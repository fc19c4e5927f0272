"""Word-vector files as an encoder: the same task heads and fine-tuning path as contextual models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders.static_vectors import load_vectors
from ptmkit.interop.word2vec_format import write_word2vec
from ptmkit.tasks.finetune import FinetuneConfig, finetune

WORDS = "the a film movie plot was very good bad great awful".split()


def _task(rng, n):
    texts, labels = [], []
    for _ in range(n):
        y = int(rng.integers(2))
        words = list(rng.choice(WORDS[:7], 4))
        words.insert(int(rng.integers(5)), str(rng.choice(["good", "great"] if y else ["bad", "awful"])))
        texts.append(" ".join(words).capitalize())  # capitalised input: vectors of lowercased text still apply
        labels.append(y)
    return TaskSplit(texts, np.array(labels))


@pytest.fixture()
def vectors(tmp_path):
    rng = np.random.default_rng(0)
    vec = rng.normal(size=(len(WORDS), 8)).astype(np.float32)
    vec[WORDS.index("great")] = vec[WORDS.index("good")] + 0.05  # neighbours, as trained vectors would be
    vec[WORDS.index("awful")] = vec[WORDS.index("bad")] + 0.05
    path = tmp_path / "vectors.bin"
    write_word2vec(path, WORDS, vec, binary=True)
    return path, vec


def test_vectors_become_an_encoder_with_a_word_tokenizer(vectors):
    path, vec = vectors
    pre = load_vectors(path)
    assert pre.config["vectors"]["lowercase"] is True and not pre.causal
    ids = torch.tensor([pre.tokenizer.encode("The GOOD zebra")])
    assert ids[0, 2].item() == pre.tokenizer.unk_id
    out = pre.backbone(ids, output_hidden_states=True)
    assert torch.allclose(out.last_hidden_state[0, 1], torch.from_numpy(vec[WORDS.index("good")]))
    assert out.last_hidden_state[0, 2].abs().sum() == 0  # unknown word: a zero vector
    assert len(out.hidden_states) == 1 and pre.backbone.num_layers == 0


def test_static_vectors_train_a_bilstm_tagger_of_features(vectors, tmp_path):
    """Frozen vectors + a task BiLSTM: words unseen in training ('great', 'awful' appear only in
    dev/test) are classified through their pre-trained neighbours; the table does not change."""
    path, vec = vectors
    rng = np.random.default_rng(1)
    train = _task(rng, 120)
    keep = [i for i, t in enumerate(train.texts) if "great" not in t.lower() and "awful" not in t.lower()]
    train = train.subset(np.array(keep))
    dev, test = _task(rng, 40), _task(rng, 60)
    task = TaskData("toy", [0, 1], train, dev, test)
    cfg = FinetuneConfig(epochs=15, lr=1e-2, batch_size=16, max_seq_len=16, mode="features", head="bilstm", head_hidden=16)
    r = finetune(str(path), task, tmp_path / "run", cfg, seed=0, progress=False)
    assert r["test"]["accuracy"] >= 0.9, r["test"]
    assert r["trainable_parameters"] < r["num_parameters"]
    rand = finetune(str(path), task, None, cfg, init="random", seed=0, progress=False)
    assert rand["test"]["accuracy"] < r["test"]["accuracy"]  # random vectors cannot generalise to the unseen words
