"""Adapters (Houlsby et al. 2019): identity at the start, after every attention and feed-forward
sub-layer, and only adapters, layer norms and the head change when fine-tuning with them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.adapters import add_adapters
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune


def test_adapters_start_as_the_identity_and_sit_after_each_sublayer():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=50, hidden_size=16, num_layers=3, num_heads=2, intermediate_size=32, max_position=16)
    enc = TransformerEncoder(cfg).eval()
    ids = torch.randint(5, 50, (2, 7))
    before = enc(ids).last_hidden_state
    adapters = add_adapters(enc, 4)
    assert len(adapters) == 2 * 3  # attention + feed-forward per layer
    assert torch.equal(enc(ids).last_hidden_state, before)  # W_up = 0: the identity
    with torch.no_grad():
        adapters[-1].up.weight.normal_()  # the last layer's feed-forward adapter now acts
    assert not torch.allclose(enc(ids).last_hidden_state, before)
    shared = TransformerEncoder(TransformerConfig(**{**cfg.__dict__, "sharing": "all"}))
    assert len(add_adapters(shared, 4)) == 2  # one shared layer: one pair of sites
    with pytest.raises(PtmError, match="positive"):
        add_adapters(enc, 0)


def _sentences(n, rng):
    """Label 1 iff the sentence holds 'good' (else 'bad'), among filler words."""
    filler = "the a film movie plot actors scene story was is very".split()
    texts, labels = [], []
    for _ in range(n):
        y = int(rng.integers(2))
        words = list(rng.choice(filler, size=int(rng.integers(3, 8))))
        words.insert(int(rng.integers(len(words) + 1)), "good" if y else "bad")
        texts.append(" ".join(words))
        labels.append(y)
    return texts, np.array(labels, dtype=np.int64)


def test_finetuning_with_adapters_changes_only_adapters_norms_and_head(tmp_path):
    from ptmkit.build import build_model
    from ptmkit.data.tasks import TaskData, TaskSplit
    from ptmkit.pretrained import save_pretrained
    from ptmkit.tokenization import Tokenizer

    rng = np.random.default_rng(0)
    task = TaskData("synthetic", [0, 1], *[TaskSplit(*_sentences(n, rng)) for n in (120, 40, 40)])
    (tmp_path / "t.txt").write_text("\n".join(task.train.texts) + "\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="wordpiece", vocab_size=100, min_frequency=1)
    mcfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                             max_position=32, dropout=0.0, attention_dropout=0.0)
    config = {"model": mcfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    pre = load_pretrained(ck)
    import ptmkit.tasks.finetune as ft

    built = {}
    build = ft.task_type_of

    def spy(*args, **kwargs):
        t = build(*args, **kwargs)
        original = t.build
        t.build = lambda backbone: built.setdefault("m", original(backbone))
        return t

    ft.task_type_of = spy
    try:
        r = finetune(pre, task, None, FinetuneConfig(epochs=8, lr=1e-2, batch_size=16, max_seq_len=16, adapter_size=8,
                                                     pooling="mean"),
                     seed=0, progress=False)
    finally:
        ft.task_type_of = build
    model = built["m"]
    ref = dict(pre.backbone.named_parameters())
    changed = {n for n, p in model.backbone.named_parameters() if not torch.equal(p, ref[n])}
    assert changed and all("norm" in n for n in changed)  # only layer norms inside the encoder
    assert any(not torch.equal(a.up.weight, torch.zeros_like(a.up.weight)) for a in model.adapters)
    n_adapters = sum(p.numel() for p in model.adapters.parameters())
    assert n_adapters == 2 * 2 * (2 * 32 * 8 + 8 + 32)
    assert r["trainable_parameters"] < 0.25 * r["num_parameters"]
    assert r["test"]["accuracy"] >= 0.8, r["test"]
    with pytest.raises(PtmError, match="mode=finetune"):
        FinetuneConfig(adapter_size=8, mode="features")
