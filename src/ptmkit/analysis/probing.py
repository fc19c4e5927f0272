"""Probing one model's frozen layers: part of speech, dependency relation labels and the
structural probe, each beside its control task (Hewitt & Liang: selectivity = task - control) and
with Tenney et al.'s expected layer and center of gravity.

Per layer ``k`` (0 = embeddings): a linear and a one-hidden-layer probe on the task and on its
control; the scalar-mix probe over all layers (expected layer) and the cumulative probes on
layers ``0..k`` (center of gravity) use the linear probe.  Relation labels are read from the
dependent's and its head's vectors side by side ``[h_dep; h_head]``; their control gives every
dependent word type a random label.  The structural probe's control is the control tree of
:func:`ptmkit.analysis.controls.control_tree`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ptmkit.analysis import controls
from ptmkit.analysis.extract import word_states
from ptmkit.analysis.layer_weights import cumulative_scores, train_mix_probe
from ptmkit.analysis.models import Subject
from ptmkit.analysis.probes import ProbeConfig, train_probe
from ptmkit.analysis.structural import train_structural
from ptmkit.analysis.treebank import Tree


def features(subject: Subject, sentences: Sequence[Sequence[str]], pooling: str = "first",
             batch_size: int = 16) -> list[np.ndarray]:
    """Per sentence ``[L + 1, W', d]`` float32 (``W' <= W``: a sentence longer than the model keeps
    its first words)."""
    out: list[np.ndarray] = [np.zeros((0, 0, 0), np.float32)] * len(sentences)
    for s in word_states(subject.backbone, subject.tokenizer, sentences, subject.causal, pooling,
                         batch_size=batch_size):
        out[s.index] = s.layers
    return out


def _flat(feats: list[np.ndarray], labels: Sequence[Sequence[Any]]) -> tuple[np.ndarray, list[Any]]:
    xs, ys = [], []
    for f, lab in zip(feats, labels):
        n = f.shape[1] if f.size else 0
        xs.append(np.moveaxis(f[:, :n], 1, 0))
        ys.extend(lab[:n])
    return np.concatenate(xs), ys


def _ids(labels: Sequence[Any], names: list[Any]) -> np.ndarray:
    index = {n: i for i, n in enumerate(names)}
    return np.array([index[x] for x in labels], dtype=np.int64)


def tagging_probes(x_train: np.ndarray, y_train: list, c_train: list, x_test: np.ndarray, y_test: list, c_test: list,
                   cfg: ProbeConfig, hidden: int) -> dict[str, Any]:
    """Per layer linear / MLP accuracy on the task and the control, the selectivity, and Tenney's
    statistics.  x: ``[N, L + 1, d]``; y / c: task / control labels (test labels unseen in training
    count as errors)."""
    names = sorted(set(y_train) | set(y_test))
    cnames = sorted(set(c_train) | set(c_test))
    yt, ys, ct, cs = _ids(y_train, names), _ids(y_test, names), _ids(c_train, cnames), _ids(c_test, cnames)
    layers = []
    for k in range(x_train.shape[1]):
        row: dict[str, Any] = {}
        for kind, h in (("linear", 0), ("mlp", hidden)):
            c = ProbeConfig(**{**cfg.__dict__, "hidden": h})
            task = train_probe(x_train[:, k], yt, x_test[:, k], ys, len(names), c)["accuracy"]
            ctl = train_probe(x_train[:, k], ct, x_test[:, k], cs, len(cnames), c)["accuracy"]
            row[kind] = {"task": task, "control": ctl, "selectivity": controls.selectivity(task, ctl)}
        layers.append(row)
    mix = train_mix_probe(x_train, yt, x_test, ys, len(names), cfg)
    cum = cumulative_scores(x_train, yt, x_test, ys, len(names), cfg)
    majority = float(np.mean(ys == np.bincount(yt, minlength=len(names)).argmax()))
    return {"layers": layers, "mix": mix, "cumulative": cum, "labels": len(names), "train_words": len(yt),
            "test_words": len(ys), "majority_baseline": majority}


def pos_probe(subject: Subject, train: Any, test: Any, cfg: ProbeConfig, hidden: int = 256,
              pooling: str = "first", seed: int = 0) -> dict[str, Any]:
    """Part-of-speech probes on ``train`` / ``test`` (``TaggingSplit``: words and gold tags)."""
    control = controls.control_labels(list(train.words) + list(test.words), list(train.tags) + list(test.tags), seed)
    ctl = lambda split: [[control[w] for w in s] for s in split.words]  # noqa: E731
    ft, fs = features(subject, train.words, pooling), features(subject, test.words, pooling)
    xt, yt = _flat(ft, train.tags)
    xs, ys = _flat(fs, test.tags)
    return tagging_probes(xt, yt, _kept(ft, ctl(train)), xs, ys, _kept(fs, ctl(test)), cfg, hidden)


def _kept(feats: list[np.ndarray], labels: Sequence[Sequence[Any]]) -> list[Any]:
    """The labels of the words :func:`features` kept, flattened as :func:`_flat` flattens them."""
    return [x for f, lab in zip(feats, labels) for x in lab[:f.shape[1] if f.size else 0]]


def _arcs(feats: list[np.ndarray], trees: Sequence[Tree], control: dict[str, str]) -> tuple[np.ndarray, list, list]:
    """``[h_dep; h_head]`` per non-root arc ``[A, L + 1, 2d]``, relation and control labels."""
    xs, ys, cs = [], [], []
    for f, t in zip(feats, trees):
        n = f.shape[1] if f.size else 0
        for i in range(n):
            h = int(t.heads[i])
            if h < 0 or h >= n:
                continue
            xs.append(np.concatenate([f[:, i], f[:, h]], -1))
            ys.append(t.relations[i])
            cs.append(control[t.words[i]])
    return np.stack(xs), ys, cs


def dependency_probes(subject: Subject, train: Sequence[Tree], test: Sequence[Tree], cfg: ProbeConfig,
                      hidden: int = 256, rank: int = 32, pooling: str = "first", seed: int = 0,
                      structural_cfg: ProbeConfig | None = None) -> dict[str, Any]:
    """Relation-label probes (with control) and, per layer, the distance and depth probes on the
    gold trees and on the control trees: UUAS, DSpr., root accuracy, NSpr., and selectivities."""
    everything = [t.words for t in (*train, *test)]
    rel_control = controls.control_labels(everything, [t.relations for t in (*train, *test)], seed)
    ftrain, ftest = features(subject, [t.words for t in train], pooling), features(subject, [t.words for t in test], pooling)
    xt, yt, ct = _arcs(ftrain, train, rel_control)
    xs, ys, cs = _arcs(ftest, test, rel_control)
    relations = tagging_probes(xt, yt, ct, xs, ys, cs, cfg, hidden)
    sides, ranks = controls.control_sides(everything, seed), controls.control_ranks(everything, seed)

    def usable(feats: list[np.ndarray], trees: Sequence[Tree]) -> tuple[list[np.ndarray], list[Tree]]:
        pairs = [(f, t.cut(f.shape[1])) for f, t in zip(feats, trees) if f.size and f.shape[1] >= 2]
        return [f for f, t in pairs if t is not None], [t for f, t in pairs if t is not None]

    ftrain, train_t = usable(ftrain, train)
    ftest, test_t = usable(ftest, test)
    scfg = structural_cfg or ProbeConfig(epochs=30, lr=1e-3, batch_size=20, seed=seed)
    gold = lambda ts: [t.heads for t in ts]  # noqa: E731
    ctrl = lambda ts: [controls.control_tree(t.words, sides, ranks) for t in ts]  # noqa: E731
    punct = [t.punct for t in test_t]
    layers = []
    for k in range(ftrain[0].shape[0]):
        tr, te = [f[k] for f in ftrain], [f[k] for f in ftest]
        dist = train_structural("distance", tr, gold(train_t), te, gold(test_t), punct, rank, scfg)
        dctl = train_structural("distance", tr, ctrl(train_t), te, ctrl(test_t), None, rank, scfg)
        depth = train_structural("depth", tr, gold(train_t), te, gold(test_t), punct, rank, scfg)
        pctl = train_structural("depth", tr, ctrl(train_t), te, ctrl(test_t), None, rank, scfg)
        layers.append({"distance": dist, "distance_control": dctl, "depth": depth, "depth_control": pctl,
                       "uuas_selectivity": dist["uuas"] - dctl["uuas"],
                       "root_selectivity": depth["root_accuracy"] - pctl["root_accuracy"]})
    return {"relations": relations, "structural": layers, "train_sentences": len(train_t),
            "test_sentences": len(test_t), "rank": rank}


__all__ = ["dependency_probes", "features", "pos_probe", "tagging_probes"]
