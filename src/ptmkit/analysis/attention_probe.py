"""Clark, Khandelwal, Levy & Manning (2019), section 5: the attention-only dependency probe.

Every head's word-level attention map is a feature of a (dependent ``i``, candidate head ``j``)
pair, in both directions (``α_k(i, j)``: ``i`` attends to ``j``; ``α_k(j, i)``: ``j`` attends to
``i``), and the probe learns one weight per map:

    p(j | i) ∝ exp( Σ_k w_k α_k(i, j) + u_k α_k(j, i) ),

a softmax over the candidates: every other word of the sentence and ROOT.  As in Clark et al.'s
code, ROOT's feature for each map is the word's attention to the special tokens before the words
(``[CLS]``) and after them (``[SEP]``), weighted by two learned scalars (``ρ_start``, ``ρ_end``):
``Σ_k w_k (ρ_start α_k(i, start) + ρ_end α_k(i, end))``, transposed maps likewise.  Trained as
Clark et al. train it: Adam (learning rate 0.002) on the cross-entropy of the gold heads, one
sentence per update, the weights starting at 0; they make one pass over the ~40k sentences of the
PTB training set, so a smaller training set is passed over until :data:`UPDATES` updates (the
weights of attention values in [0, 1] must grow large for a sharp softmax: 600 updates of 8
sentences left MiniLM's probe at 0.41 UAS on silver Brown trees where 40,000 reach 0.51).  Scored
by UAS without punctuation.  One change from the code: a word is never its own head candidate
(the code lets the probe learn that).

The positional reference is the right-branching baseline Clark et al. report (each word's head is
the next word, the last word the root).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ptmkit.analysis.attention_stats import word_attention
from ptmkit.analysis.probes import ProbeConfig, fit
from ptmkit.errors import PtmError

ROOT_SLOTS = 2  # the special tokens before the words ([CLS]) and after them ([SEP])
UPDATES = 40_000  # sentence updates, as one pass over PTB's training sentences (Clark et al.)


@dataclass
class AttentionFeatures:
    """One sentence: ``maps [K, W, W]`` (``maps[k, i, j]``: map ``k`` for dependent ``i`` and
    candidate ``j``; the first ``K / 2`` maps are ``α(i, j)``, the rest ``α(j, i)``) and ``root
    [2, K, W]`` (map ``k``'s attention between word ``i`` and the start / end special tokens)."""

    maps: np.ndarray
    root: np.ndarray


def sentence_features(attn: np.ndarray, word_of: np.ndarray, num_words: int) -> AttentionFeatures:
    """The probe's features of one sentence from its token attention ``[layers, heads, T, T]`` and
    ``word_of [T]`` (each token's word, -1 for special tokens): word attention as
    :func:`~ptmkit.analysis.attention_stats.word_attention` forms it, the special tokens before the
    first word taken as one extra word (start) and those after the last word as another (end)."""
    word_of = np.asarray(word_of)
    real = np.flatnonzero(word_of >= 0)
    if len(real) == 0:
        raise PtmError("a sentence without words has no attention features")
    ext = word_of.copy()
    pos = np.arange(len(word_of))
    ext[(word_of < 0) & (pos < real[0])] = num_words
    ext[(word_of < 0) & (pos > real[-1])] = num_words + 1
    ext[ext < 0] = num_words + 1  # a special token between words (none in ptmkit's framing): with the end
    full = word_attention(np.asarray(attn, dtype=np.float64), ext, num_words + 2)
    K = full.shape[0] * full.shape[1]
    full = full.reshape(K, num_words + 2, num_words + 2)
    W = num_words
    maps = np.concatenate([full[:, :W, :W], full[:, :W, :W].transpose(0, 2, 1)])
    root = np.stack([np.concatenate([full[:, :W, W + s], full[:, W + s, :W]]) for s in range(ROOT_SLOTS)])
    return AttentionFeatures(maps.astype(np.float32), root.astype(np.float32))


class AttentionProbe(nn.Module):
    """``w [K]`` over the maps and ``ρ [2]`` over ROOT's two slots; :meth:`forward` gives the logits
    ``[B, W, W + 1]`` of every candidate head (column 0: ROOT, column ``j + 1``: word ``j``)."""

    def __init__(self, num_maps: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_maps))
        self.root = nn.Parameter(torch.ones(ROOT_SLOTS))

    def forward(self, maps: torch.Tensor, root: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """maps ``[B, K, W, W]``, root ``[B, 2, K, W]``, mask ``bool [B, W]`` (real words)."""
        words = torch.einsum("k,bkij->bij", self.weights, maps)
        roots = torch.einsum("k,s,bskw->bw", self.weights, self.root, root)
        logits = torch.cat([roots[..., None], words], -1)
        W = maps.shape[-1]
        allowed = torch.cat([torch.ones_like(mask[:, :1]), mask], 1)[:, None, :].expand(-1, W, -1).clone()
        allowed[:, torch.arange(W), torch.arange(W) + 1] = False  # a word is not its own head
        return logits.masked_fill(~allowed, float("-inf"))


def _batch(features: Sequence[AttentionFeatures], heads: Sequence[np.ndarray] | None = None):
    """Padded tensors of a few sentences: maps, root, mask and (with ``heads``) the gold candidate
    index ``[B, W]`` (0: ROOT, ``h + 1``: word ``h``; -100 on padding)."""
    B, K, W = len(features), features[0].maps.shape[0], max(f.maps.shape[-1] for f in features)
    maps = torch.zeros(B, K, W, W)
    root = torch.zeros(B, ROOT_SLOTS, K, W)
    mask = torch.zeros(B, W, dtype=torch.bool)
    gold = torch.full((B, W), -100, dtype=torch.long)
    for b, f in enumerate(features):
        n = f.maps.shape[-1]
        maps[b, :, :n, :n] = torch.from_numpy(f.maps)
        root[b, :, :, :n] = torch.from_numpy(f.root)
        mask[b, :n] = True
        if heads is not None:
            gold[b, :n] = torch.from_numpy(np.asarray(heads[b], dtype=np.int64) + 1)
    return maps, root, mask, gold


def predict_heads(probe: AttentionProbe, features: Sequence[AttentionFeatures], batch_size: int = 16) -> list[np.ndarray]:
    """Each sentence's predicted heads ``[W]`` (-1: ROOT)."""
    out = []
    with torch.no_grad():
        for start in range(0, len(features), batch_size):
            chunk = features[start:start + batch_size]
            maps, root, mask, _ = _batch(chunk)
            guess = probe(maps, root, mask).argmax(-1) - 1
            out += [guess[b, :f.maps.shape[-1]].numpy() for b, f in enumerate(chunk)]
    return out


def uas(predicted: Sequence[np.ndarray], heads: Sequence[np.ndarray], punct: Sequence[np.ndarray] | None = None) -> float:
    """Unlabelled attachment score: the share of words (punctuation left out) whose head is right."""
    right = total = 0
    for k, (p, h) in enumerate(zip(predicted, heads)):
        keep = ~np.asarray(punct[k], dtype=bool) if punct is not None else np.ones(len(h), dtype=bool)
        right += int((np.asarray(p)[keep] == np.asarray(h)[keep]).sum())
        total += int(keep.sum())
    return right / total if total else float("nan")


def right_branching(heads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Clark et al.'s positional baseline: each word's head is the next word, the last word the root."""
    return [np.append(np.arange(1, len(h)), -1) for h in heads]


def train_attention_probe(train: Sequence[AttentionFeatures], train_heads: Sequence[np.ndarray],
                          test: Sequence[AttentionFeatures], test_heads: Sequence[np.ndarray],
                          test_punct: Sequence[np.ndarray] | None = None,
                          cfg: ProbeConfig = ProbeConfig(epochs=10, lr=2e-3, batch_size=1)) -> dict[str, object]:
    """Train the probe on the training sentences (features and gold heads ``[W]``, -1 at the root)
    and score it: ``uas`` on the test sentences, the right-branching baseline's, ``train_uas``, and
    the learned weights (``weights [K]``, ``root``)."""
    if not train or not test:
        raise PtmError("the attention probe needs training and test sentences; the treebank gave none")
    if any(f.maps.shape[-1] != len(h) for f, h in zip((*train, *test), (*train_heads, *test_heads))):
        raise PtmError("the attention features and the trees differ in sentence length")
    torch.manual_seed(cfg.seed)
    probe = AttentionProbe(train[0].maps.shape[0])
    ce = nn.CrossEntropyLoss(ignore_index=-100)

    def loss(m: AttentionProbe, idx: torch.Tensor) -> torch.Tensor:
        maps, root, mask, gold = _batch([train[i] for i in idx.tolist()], [train_heads[i] for i in idx.tolist()])
        logits = m(maps, root, mask)
        return ce(logits.reshape(-1, logits.shape[-1]), gold.reshape(-1))

    fit(probe, torch.arange(len(train)), loss, cfg)
    return {"uas": uas(predict_heads(probe, test), test_heads, test_punct),
            "right_branching_uas": uas(right_branching(test_heads), test_heads, test_punct),
            "train_uas": uas(predict_heads(probe, train), train_heads),
            "weights": probe.weights.detach().numpy().round(4).tolist(),
            "root": probe.root.detach().numpy().round(4).tolist(),
            "train_sentences": len(train), "test_sentences": len(test), "updates": cfg.epochs * -(-len(train) // cfg.batch_size)}


__all__ = ["UPDATES", "AttentionFeatures", "AttentionProbe", "predict_heads", "right_branching", "sentence_features",
           "train_attention_probe", "uas"]
