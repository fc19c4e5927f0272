"""ULMFiT's classifier fine-tuning on the AWD-LSTM: concat pooling, discriminative LRs, the slanted
triangular schedule against the paper's formula, gradual unfreezing from the top, the recipe."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ptmkit.build import build_model, resolve_config
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.callbacks import StagedFreezing
from ptmkit.tasks.classification import SequenceClassifier, concat_pool
from ptmkit.tasks.finetune import RECIPES, FinetuneConfig, _lowest_trainable, build_classifier, finetune, recipe_config
from ptmkit.tokenization import Tokenizer
from ptmkit.train.optim import build_schedule, param_groups, parameter_depths
from ptmkit.train.trainer import TrainerCallback
from ptmkit.workflows.finetune import parse_overrides

WORDS = "the a film movie plot actors scene story was is very quite rather".split()


@pytest.fixture(scope="module")
def task():
    rng = np.random.default_rng(0)

    def sentences(n):
        texts, labels = [], []
        for _ in range(n):
            y = int(rng.integers(2))
            words = list(rng.choice(WORDS, size=int(rng.integers(3, 9))))
            words.insert(int(rng.integers(len(words) + 1)), "good" if y else "bad")
            texts.append(" ".join(words))
            labels.append(y)
        return texts, np.array(labels, dtype=np.int64)

    return TaskData("synthetic", [0, 1], *[TaskSplit(*sentences(n)) for n in (160, 60, 60)])


@pytest.fixture(scope="module")
def awd(tmp_path_factory, task):
    d = tmp_path_factory.mktemp("awd")
    (d / "text.txt").write_text("\n".join(task.train.texts) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="word", vocab_size=100, min_frequency=1)
    raw = {"model": {"encoder": "awd_lstm", "embedding_size": 16, "hidden_size": 24, "num_layers": 3, "dropout": 0.1,
                     "dropouth": 0.1, "dropouti": 0.1, "dropoute": 0.0, "wdrop": 0.1},
           "objective": {"name": "awd_lm"}, "tokenizer": {"kind": "word"}, "train": {}}
    config = resolve_config(raw, tok)
    return load_pretrained(save_pretrained(d / "ck", config, build_model(config, tok), tok), heads=False)


def test_concat_pool_is_last_max_mean_and_ignores_padding():
    torch.manual_seed(0)
    h = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    pooled = concat_pool(h, mask)
    for i, n in enumerate((5, 2)):
        real = h[i, :n]
        expected = torch.cat([real[-1], real.max(dim=0).values, real.mean(dim=0)])
        torch.testing.assert_close(pooled[i], expected)
    # padding with large values changes nothing
    h2 = h.clone()
    h2[1, 2:] = 100.0
    torch.testing.assert_close(concat_pool(h2, mask), pooled)


def test_classifier_with_concat_pooling_ignores_padding(awd):
    clf = SequenceClassifier(awd.backbone, 2, pooling="concat", causal=True, head="mlp", head_hidden=50).eval()
    assert clf.hidden.in_features == 3 * awd.backbone.output_size
    ids = torch.tensor([[5, 6, 7, 3]])
    short = clf.logits({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    padded_ids = torch.tensor([[5, 6, 7, 3, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    torch.testing.assert_close(clf.logits({"input_ids": padded_ids, "attention_mask": mask}), short)


def test_discriminative_lrs_divide_by_2_6_per_layer(awd):
    cfg = recipe_config("ulmfit")
    clf = build_classifier(awd, 2, cfg, "pretrained", 0)
    groups = param_groups(clf, 0.0, 0.01, cfg.layer_decay)
    lr_by_name = {n: g["lr"] for g in groups for n in g["names"]}
    assert math.isclose(lr_by_name["classifier.weight"], 0.01)
    for j in range(3):  # layer 3 (top) gets lr / 2.6, layer 1 lr / 2.6^3
        assert math.isclose(lr_by_name[f"backbone.layers.{j}.weight_hh_l0"], 0.01 / 2.6 ** (3 - j), rel_tol=1e-9)
    assert math.isclose(lr_by_name["backbone.embedding.weight"], 0.01 / 2.6 ** 4, rel_tol=1e-9)


@pytest.mark.parametrize("total", [100, 1000, 1003])
def test_slanted_triangular_matches_the_paper(total):
    """Howard & Ruder (2018), eq. 3, cut_frac 0.1, ratio 32: the fine-tuning schedule (warmup=0.1)."""
    cfg = recipe_config("ulmfit", epochs=1)
    train = cfg.train_config(n_train=total * cfg.batch_size, seed=0)
    assert train.max_steps == total and train.stlr_ratio == 32.0
    schedule = build_schedule(train)
    cut = math.floor(total * 0.1)
    for t in range(1, total + 1):
        p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / 0.1 - 1))
        paper = (1 + p * 31) / 32
        tol = 1.0 / cut if total % 10 else 1e-12  # round(0.1 T) vs floor(0.1 T) moves the peak by < 1 step
        assert abs(schedule(t - 1) - paper) <= tol, (t, schedule(t - 1), paper)
    assert max(schedule(s) for s in range(total)) == pytest.approx(1.0)
    assert schedule(total - 1) == pytest.approx(1 / 32, abs=1.0 / cut)


def test_gradual_unfreezing_one_group_per_epoch_from_the_top(awd):
    cfg = recipe_config("ulmfit")
    clf = build_classifier(awd, 2, cfg, "pretrained", 0)
    depths, L = parameter_depths(clf)
    freezing = StagedFreezing(depths, _lowest_trainable(clf, cfg), steps_per_epoch=1)

    def trainable(epoch):
        freezing.apply(clf, epoch)
        return {n for n, p in clf.named_parameters() if p.requires_grad}

    head = {n for n in depths if not n.startswith("backbone.")}
    assert trainable(1) == head
    assert trainable(2) == head | {n for n in depths if n.startswith("backbone.layers.2.")}
    assert trainable(3) - trainable(2) == {n for n in depths if n.startswith("backbone.layers.1.")}
    assert trainable(4) - trainable(3) == {n for n in depths if n.startswith("backbone.layers.0.")}
    assert trainable(5) == set(depths) and trainable(9) == set(depths)


def test_recipe_switch_and_overrides():
    cfg = parse_overrides(["epochs=3", "lr=3e-3"], "ulmfit")
    assert (cfg.pooling, cfg.head, cfg.head_hidden, cfg.schedule, cfg.gradual_unfreeze) == ("concat", "mlp", 50, "slanted_triangular", True)
    assert math.isclose(cfg.layer_decay, 1 / 2.6) and tuple(cfg.betas) == (0.7, 0.99)
    assert cfg.epochs == 3 and cfg.lr == 3e-3
    assert parse_overrides([], None) == FinetuneConfig()
    assert set(RECIPES) == {"ulmfit"}
    with pytest.raises(PtmError, match="ulmfit"):
        recipe_config("ulmfti")


class Snapshots(TrainerCallback):
    """The classifier's weights at the end of every epoch, and the optimizer's LRs at step 1."""

    def __init__(self, steps_per_epoch: int) -> None:
        self.steps_per_epoch = steps_per_epoch
        self.states = [None]
        self.lrs = None

    def on_fit_start(self, trainer) -> None:
        self.states[0] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    def on_step_end(self, trainer, step: int) -> None:
        if step == 1:
            self.lrs = sorted({g["lr"] for g in trainer.optimizer.param_groups})
        if step % self.steps_per_epoch == 0:
            self.states.append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})


def test_ulmfit_recipe_through_the_trainer(task, awd):
    """One run of the recipe: epoch e changes only the head and the top e - 1 layers."""
    cfg = recipe_config("ulmfit", epochs=5, batch_size=32)
    snaps = Snapshots(steps_per_epoch=5)
    result = finetune(awd, task, None, cfg, seed=0, progress=False, callbacks=(snaps,))
    assert len(result["history"]) == 5 and result["config"]["pooling"] == "concat"

    def changed(epoch):
        a, b = snaps.states[epoch - 1], snaps.states[epoch]
        def group(k):
            parts = k.split(".")
            return ".".join(parts[1:3]) if k.startswith("backbone.layers.") else parts[1] if parts[0] == "backbone" else parts[0]

        return {group(k) for k in a if not torch.equal(a[k], b[k])}

    assert changed(1) == {"hidden", "classifier"}  # the head (hidden layer + output layer) only
    assert changed(2) == {"hidden", "classifier", "layers.2"}
    assert changed(3) == {"hidden", "classifier", "layers.2", "layers.1"}
    assert changed(4) == {"hidden", "classifier", "layers.2", "layers.1", "layers.0"}
    assert changed(5) == {"hidden", "classifier", "layers.2", "layers.1", "layers.0", "embedding"}
    # the scheduled LRs at step 1 keep the discriminative ratios 2.6 between depths
    ratios = [b / a for a, b in zip(snaps.lrs, snaps.lrs[1:])]
    assert all(math.isclose(r, 2.6, rel_tol=1e-6) for r in ratios) and len(snaps.lrs) == 5
