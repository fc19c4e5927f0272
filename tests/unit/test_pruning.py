"""Pruning a task model: head importance against finite differences (float64), the head-mask hook,
mask vs physical removal, the iterative path (importance re-estimated, random order seeded), layers
kept against running them by hand (scalar and chosen-layer mixes too), magnitude pruning, a pruned
model saved and reloaded, and the refusals (every head of a layer, fractions, layer indices)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import tiny_checkpoint, toy_sentiment
from torch.nn import functional as F
from torch.testing import assert_close

from ptmkit.compress.importance import head_importance, head_mask_injected, head_shape, split_batches
from ptmkit.compress.pruning import (
    check_fraction,
    fractions_to,
    head_pruning_path,
    heads_of,
    keep_layers,
    magnitude_prune,
    mask_more,
    prunable_within,
    prune_heads,
)
from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.scalar_mix import ScalarMix
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.base import task_type_of
from ptmkit.tasks.classification import SequenceClassifier
from ptmkit.tasks.finetune_config import FinetuneConfig
from ptmkit.tasks.multitask import MultiTaskData
from ptmkit.tasks.saved import load_task_model, save_task_model
from ptmkit.tasks.tagging import TaggingData, TaggingSplit

L, H = 3, 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    data = toy_sentiment()
    root = tmp_path_factory.mktemp("prune")
    pre = load_pretrained(tiny_checkpoint(root / "model", data.train.texts, layers=L, heads=H, hidden=16), heads=False)
    return data, pre, root


def task_model(setup, mix: str = "auto", dtype=torch.float64):
    """A classifier on a copy of the tiny encoder, weights spread out (so that heads differ), eval mode."""
    data, pre, _ = setup
    cfg = FinetuneConfig(batch_size=20, eval_batch_size=32, max_seq_len=24, mix=mix)
    task = task_type_of(data, cfg, pre.tokenizer, False, True)
    torch.manual_seed(0)
    model = task.build(copy.deepcopy(pre.backbone))
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return task, model.to(dtype).eval(), cfg


def cls_loss(model: SequenceClassifier, batch, head_mask=None) -> torch.Tensor:
    """The classifier's loss written out (BERT pooling: the pooler's [CLS] vector), the mask passed directly."""
    out = model.backbone(batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch.get("token_type_ids"), head_mask=head_mask)
    return F.cross_entropy(model.classifier(out.pooled), batch["labels"])


def test_dev_batches_carry_the_dev_labels(setup):
    data = setup[0]
    task, _, _ = task_model(setup)
    batches = split_batches(task, "dev", 20)
    assert len(batches) == 3 and sum(len(b["labels"]) for b in batches) == len(data.dev)
    assert sorted(torch.cat([b["labels"] for b in batches]).tolist()) == sorted(data.dev.labels.tolist())


def test_the_hook_passes_the_mask_to_the_encoder(setup):
    task, model, _ = task_model(setup)
    batch = split_batches(task, "dev", 20)[0]
    mask = torch.rand(L, H, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with head_mask_injected(model.backbone, mask):
            hooked = model(batch).loss
        # the classifier takes its cross-entropy in float32: compare at that precision
        assert_close(hooked, cls_loss(model, batch, mask).float())
        assert_close(model(batch).loss, cls_loss(model, batch).float())  # the hook is gone afterwards
    assert model.pooling == "cls"


def test_head_importance_matches_finite_differences(setup):
    task, model, _ = task_model(setup)
    batches = split_batches(task, "dev", 20)
    eps = 1e-5
    ref = np.zeros((L, H))
    with torch.no_grad():
        for batch in batches:
            for layer in range(L):
                for head in range(H):
                    plus, minus = torch.ones(L, H, dtype=torch.float64), torch.ones(L, H, dtype=torch.float64)
                    plus[layer, head] += eps
                    minus[layer, head] -= eps
                    grad = (cls_loss(model, batch, plus) - cls_loss(model, batch, minus)) / (2 * eps)
                    ref[layer, head] += abs(float(grad)) / len(batches)
    raw = head_importance(model, batches, normalize_layers=False)
    # the model's loss goes through a float32 cross-entropy; the encoder and the gates are float64
    np.testing.assert_allclose(raw.numpy(), ref, rtol=1e-5)
    per_layer = ref / np.linalg.norm(ref, axis=1, keepdims=True)  # Michel et al.'s per-layer L2 normalisation
    np.testing.assert_allclose(head_importance(model, batches).numpy(), per_layer, rtol=1e-5)
    glob = head_importance(model, batches, normalize_global=True).numpy()
    np.testing.assert_allclose(glob, (per_layer - per_layer.min()) / (per_layer.max() - per_layer.min()), rtol=1e-5,
                               atol=1e-7)
    assert all(p.grad is None for p in model.parameters())  # only the gates were differentiated


def test_masked_and_removed_heads_give_the_same_outputs(setup):
    task, model, _ = task_model(setup)
    batch = split_batches(task, "test", 32)[0]
    heads = {0: [1, 3], 1: [0], 2: [0, 1, 2]}
    mask = torch.ones(L, H, dtype=torch.float64)
    for layer, hs in heads.items():
        mask[layer, hs] = 0.0
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    with torch.no_grad():
        with head_mask_injected(model.backbone, mask):
            ref = model.logits(batch)
        assert_close(pruned.logits(batch), ref, rtol=1e-12, atol=1e-12)
    assert pruned.backbone.layers[2].attn.qkv.weight.shape[0] == 3 * 1 * (16 // H)  # the weights did shrink
    assert head_importance(pruned, [batch])[2, [0, 1, 2]].eq(0).all()  # removed heads score 0


def test_importance_path_reestimates_and_nests(setup):
    task, model, _ = task_model(setup)
    batches = split_batches(task, "dev", 20)
    seen = []
    path = head_pruning_path(model, [0.0, 0.25, 0.5, 0.75], "importance", batches,
                             score=lambda m: seen.append(m.clone()) or {"masked": int((m == 0).sum())})
    assert [s["heads_masked"] for s in path] == [0, 3, 6, 9] == [s["masked"] for s in path]
    masks = [m for m in seen]
    for a, b in zip(masks, masks[1:]):
        assert bool((b <= a).all())  # a masked head stays masked
    assert bool((masks[-1].sum(dim=1) == 1).all())  # 9 of 12: every layer keeps exactly one head
    # each step takes the least important heads under the mask so far, re-estimated
    for before, after in zip(masks[:-1], masks[1:]):
        scores = head_importance(model, batches, before)
        expected = mask_more(before, 3, scores)
        assert torch.equal(after, expected)
    first = head_importance(model, batches).flatten().argsort()[:3].tolist()
    assert sorted(first) == sorted(layer * H + h for layer, hs in heads_of(masks[1]).items() for h in hs)


def test_random_order_is_seeded(setup):
    _, model, _ = task_model(setup)
    a = head_pruning_path(model, fractions_to(0.5), "random", seed=3)
    b = head_pruning_path(model, fractions_to(0.5), "random", seed=3)
    c = head_pruning_path(model, fractions_to(0.5), "random", seed=4)
    assert a == b and a != c
    assert fractions_to(0.5) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5] and fractions_to(0.25) == [0.0, 0.1, 0.2, 0.25]


def test_every_head_of_a_layer_is_refused(setup):
    task, model, _ = task_model(setup)
    with pytest.raises(PtmError, match="every head of layer 1"):
        prune_heads(model, {1: [0, 1, 2, 3]})
    prune_heads(model, {1: [0, 1]})
    with pytest.raises(PtmError, match="every head of layer 1"):  # with the heads pruned before
        prune_heads(model, {1: [2, 3]})
    with pytest.raises(PtmError, match="at most 9"):
        head_pruning_path(model, [0.8], "random")
    with pytest.raises(PtmError, match="layer 5 does not exist"):
        prune_heads(model, {5: [0]})
    with pytest.raises(PtmError, match="no head 7"):
        prune_heads(model, {0: [7]})
    # the path skips a layer's last head: 3 masked in layer 0 ranked first, the 4th goes elsewhere
    scores = torch.tensor([[0.0, 0.1, 0.2, 0.3], [1, 1, 1, 1], [2, 2, 2, 2]])
    assert mask_more(torch.ones(L, H), 4, scores)[0].tolist() == [0, 0, 0, 1]


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan"), True, "0.3"])
def test_fractions_outside_0_1_are_refused(bad):
    with pytest.raises(PtmError, match=r"\[0, 1\)"):
        check_fraction(bad)


def by_hand(model: SequenceClassifier, batch, layers):
    """Hidden states of the encoder run through ``layers`` only, in order: [embeddings, ...]."""
    enc = model.backbone
    x = enc.embeddings(batch["input_ids"], batch.get("token_type_ids"))
    mask, is_causal = enc._mask(batch["attention_mask"], None, False, x.shape[1], x.dtype, x.device)
    states = [x]
    for i in layers:
        states.append(enc.layers[i](states[-1], mask, is_causal))
    return states


def test_kept_layers_equal_running_them_by_hand(setup):
    task, model, cfg = task_model(setup)
    batch = split_batches(task, "test", 32)[0]
    prune_heads(model, {2: [1]})
    kept = copy.deepcopy(model)
    assert keep_layers(kept, [0, 2], cfg.mix) == cfg.mix
    enc = kept.backbone
    assert enc.num_layers == 2 and enc.config.num_layers == 2 and enc.config.pruned_heads == {1: (1,)}
    with torch.no_grad():
        top = by_hand(model, batch, [0, 2])[-1]
        real = batch["attention_mask"].bool()  # the encoder packs the padded batch: its padding states are zeros
        got = enc(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        assert_close(got[real], top[real], rtol=1e-12, atol=1e-12)
        assert_close(kept.logits(batch), model.classifier(model.backbone.pooler(top)), rtol=1e-12, atol=1e-12)
    assert enc.layer_index("layers.1.ffn.fc1.weight") == 2 and enc.layer_index("pooler.dense.weight") == 3


def test_a_scalar_mix_keeps_the_weights_of_the_kept_layers(setup):
    task, model, cfg = task_model(setup, mix="scalar")
    batch = split_batches(task, "test", 32)[0]
    with torch.no_grad():
        model.mix.weights.copy_(torch.tensor([0.3, -0.2, 0.5, 0.1]))
    kept = copy.deepcopy(model)
    keep_layers(kept, [1, 2], cfg.mix)
    assert kept.mix.weights.tolist() == pytest.approx([0.3, 0.5, 0.1])
    with torch.no_grad():
        states = by_hand(model, batch, [1, 2])
        mixed = ScalarMix(3).double()
        mixed.weights.copy_(torch.tensor([0.3, 0.5, 0.1]))
        mixed.gamma.copy_(model.mix.gamma)
        hidden = mixed(states)
        m = batch["attention_mask"].to(hidden.dtype)[..., None]
        pooled = (hidden * m).sum(1) / m.sum(1)  # mean pooling (a mix of layers does not read the pooler)
        assert_close(kept.logits(batch), model.classifier(pooled), rtol=1e-12, atol=1e-12)


def test_a_chosen_layer_is_renumbered_or_refused(setup):
    _, model, cfg = task_model(setup, mix="layer:2")  # hidden state 2: the output of layer 1
    with pytest.raises(PtmError, match="removes; keep that layer"):
        keep_layers(copy.deepcopy(model), [0, 2], cfg.mix)
    kept = copy.deepcopy(model)
    assert keep_layers(kept, [1, 2], cfg.mix) == "layer:1"
    assert kept.mix.index == 1 and kept.mix.num_states == 3


@pytest.mark.parametrize("layers, match", [([3], "layer 3 does not exist"), ([], "at least one layer"),
                                           ([2, 0], "increasing order"), ([1, 1], "each once"),
                                           ([-1], "does not exist")])
def test_bad_layer_lists_are_refused(setup, layers, match):
    _, model, cfg = task_model(setup)
    with pytest.raises(PtmError, match=match):
        keep_layers(model, layers, cfg.mix)
    assert model.backbone.num_layers == L  # nothing changed


def test_encoders_without_heads_or_layer_cutting_are_refused():
    lstm = SequenceClassifier(LSTMEncoder(LSTMConfig(vocab_size=30, num_layers=2, hidden_size=8, projection_size=None,
                                                     char_cnn=False)), 2)
    with pytest.raises(PtmError, match="cuts layers out of a transformer encoder"):
        keep_layers(lstm, [0], "last")
    with pytest.raises(PtmError, match="no attention heads"):
        head_shape(lstm.backbone)


def test_magnitude_pruning_zeroes_the_smallest_weights_globally(setup):
    _, model, _ = task_model(setup)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    linear = [k for k in before if k.startswith("backbone.") and k.endswith(".weight")
              and model.get_submodule(k[: -len(".weight")]).__class__.__name__ == "Linear"]
    n = sum(before[k].numel() for k in linear)
    result = magnitude_prune(model, 0.6)
    after = model.state_dict()
    assert set(after) == set(before)  # permanent: no weight_orig / weight_mask left
    assert result["zeros"] == round(0.6 * n) and result["sparsity"] == pytest.approx(0.6, abs=1 / n)
    zeroed = torch.cat([before[k][after[k] == 0].abs() for k in linear])
    kept = torch.cat([before[k][after[k] != 0].abs() for k in linear])
    assert zeroed.max() <= kept.min()  # one global threshold over all matrices
    for k in before:
        if k not in linear:  # biases, embeddings, norms, the task head
            assert torch.equal(before[k], after[k]), k
    with pytest.raises(PtmError, match="sparsity"):
        magnitude_prune(model, 1.2)


def test_prunable_within_tolerance():
    path = [{"fraction": f, "dev": {"accuracy": a, "loss": 1 - a}} for f, a in
            [(0.0, 0.80), (0.1, 0.795), (0.2, 0.78), (0.3, 0.791), (0.4, 0.70)]]
    assert prunable_within(path, lambda s: s["dev"]["accuracy"], 0.80, 0.01) == 0.3
    assert prunable_within(path, lambda s: s["dev"]["loss"], 0.20, 0.01, lower_is_better=True) == pytest.approx(0.3)
    assert prunable_within(path, lambda s: s["dev"]["accuracy"], 0.80, 0.0) == 0.0


def test_a_pruned_model_reloads_to_the_same_outputs(setup, tmp_path):
    data, pre, _ = setup
    task, model, cfg = task_model(setup, dtype=torch.float32)
    prune_heads(model, {0: [0, 2], 2: [3]})
    keep_layers(model, [0, 2], cfg.mix)
    save_task_model(tmp_path / "pruned", model, task, pre.config, pre.tokenizer, cfg,
                    derived_from={"run": "x"}, compression={"method": "heads"})
    tm = load_task_model(tmp_path / "pruned", data)
    assert tm.config["model"]["num_layers"] == 2 and tm.backbone.config.pruned_heads == {0: (0, 2), 1: (3,)}
    batch = split_batches(task, "test", 32)[0]
    with torch.no_grad():
        assert_close(tm.model.logits(batch), model.logits(batch), rtol=0, atol=0)
    assert tm.evaluate("test") == task.score("test", task.predict_split(model, "test", task.encode("test"), "cpu"))


def test_importance_for_tagging_and_multi_task_models(setup):
    """The hook reaches the encoder whatever the task model: a CRF tagger, and MT-DNN's shared encoder."""
    data, pre, _ = setup

    def tagged(split):
        return TaggingSplit([t.split() for t in split.texts],
                            [["POS" if w == "good" else "NEG" if w == "bad" else "O" for w in t.split()]
                             for t in split.texts])

    tags = TaggingData("toy-tags", ["NEG", "O", "POS"], tagged(data.train), tagged(data.dev), tagged(data.test))
    cfg = FinetuneConfig(batch_size=30, max_seq_len=24, task={"crf": True})
    for task_data in (tags, MultiTaskData({"sentiment": data, "tags": tags}, "both")):
        task = task_type_of(task_data, cfg, pre.tokenizer, False, True)
        torch.manual_seed(0)
        model = task.build(copy.deepcopy(pre.backbone)).double().eval()
        batches = split_batches(task, "dev")
        assert sum(len(b["input_ids"]) for b in batches) == len(data.dev) * (2 if task.name == "multi_task" else 1)
        importance = head_importance(model, batches)
        assert importance.shape == (L, H) and torch.isfinite(importance).all() and (importance > 0).all()
        assert_close(importance.norm(dim=1), torch.ones(L, dtype=torch.float64))
        path = head_pruning_path(model, [0.0, 0.25], "importance", batches)
        assert path[-1]["heads_masked"] == 3
