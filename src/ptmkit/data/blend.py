"""Pre-training on several prepared corpora at once, examples drawn in proportion to weights.

``ptm pretrain --data A B C`` with prepared corpora (each a plain corpus or a sharded set) reads
them as one :class:`~ptmkit.data.corpus.ShardedCorpus` (:func:`join_corpora`; they must share one
tokenizer).  Each corpus gives its own examples (:func:`member_spans`: the objective's spans of
that corpus alone, so no example runs from one corpus into the next), and held-out examples are
taken from each corpus alike.

Without weights an epoch is every training example of every corpus once, shuffled together
(:class:`~ptmkit.data.batches.PretrainBatches` over all spans).  With weights ``w`` (``--data-weights
0.7,0.3``), :class:`BlendedBatches` makes each epoch of weighted shares: an epoch has as many
examples as the corpora have together (less the last partial batch), ``E``, of which corpus ``i``
fills ``round(E * w_i / sum(w))`` (largest remainders, so the shares add up to ``E`` exactly).  A
corpus walks through its own examples in a fresh random order per pass, continuing in the next
epoch where it stopped: a corpus whose share exceeds its size repeats examples (it is
up-sampled, every example once per pass), one whose share is smaller sees the rest of its pass
in the next epochs before any example repeats.  The epoch's examples are then shuffled together.
So the proportions hold exactly within every epoch, and like every batch source the batch of
(epoch, step) is a pure function of the seed: a resumed run continues exactly.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ptmkit.data.batches import PretrainBatches
from ptmkit.data.corpus import Corpus, ShardedCorpus
from ptmkit.errors import PtmError
from ptmkit.tokenization.languages import balanced_shares

BLEND_STREAM = 555_555  # the rng stream of each corpus's passes (never a real epoch)


def join_corpora(paths: Sequence[str | os.PathLike[str]]) -> Corpus:
    """The prepared corpora in ``paths`` read as one (a single path: that corpus as it is).

    They must share one tokenizer (the same ``tokenizer.json``, compared by hash and then by
    content): token ids of another tokenizer would mean other words."""
    members = [Corpus.open(p) for p in paths]
    if len(members) == 1:
        return members[0]
    first = members[0]
    for other in members[1:]:
        if other.meta.get("tokenizer_sha256") == first.meta.get("tokenizer_sha256"):
            continue
        if other.load_tokenizer().to_json() != first.load_tokenizer().to_json():
            raise PtmError(
                f"the corpora {first.path} and {other.path} were prepared with different tokenizers; prepare every "
                f"corpus with one tokenizer: ptm prepare FILES -t {first.tokenizer_path} -o DIR"
            )
    meta = {k: v for k, v in first.meta.items() if k not in ("shards", "sources", "shard_tokens")}
    meta.update(n_tokens=sum(m.n_tokens for m in members), n_sentences=sum(m.n_sentences for m in members),
                n_documents=sum(m.n_documents for m in members), members=[str(m.path) for m in members])
    return ShardedCorpus.concat(members, first.path, meta)


def member_spans(objective: Any, corpus: Corpus, seq_len: int) -> list[np.ndarray]:
    """The objective's example spans ``int64 [N_i, 2]`` of each corpus joined in ``corpus`` (token
    offsets of the join), or of ``corpus`` itself when it is no join."""
    members = getattr(corpus, "members", None)
    if not members:
        return [objective.example_spans(corpus, seq_len)]
    return [np.asarray(objective.example_spans(m, seq_len), dtype=np.int64).reshape(-1, 2) + int(corpus.starts[i])
            for i, m in enumerate(members)]


def parse_weights(weights: str | Sequence[float], n: int, sizes: Sequence[int] | None = None) -> np.ndarray:
    """``0.7,0.3`` (or a sequence of numbers) for ``n`` corpora -> float64 [n], summing to 1.

    ``alpha=A`` (or ``alpha:A``): XLM's language-balanced shares ``q_i ∝ p_i^A`` of the corpora's
    ``sizes`` (tokens; :func:`~ptmkit.tokenization.languages.balanced_shares`)."""
    if isinstance(weights, str) and weights.replace(" ", "").startswith(("alpha=", "alpha:")):
        value = weights.replace(" ", "")[6:]
        try:
            alpha = float(value)
        except ValueError:
            raise PtmError(f"--data-weights alpha=A takes a number in [0, 1] (XLM: 0.5), got {value!r}") from None
        if sizes is None or len(sizes) != n:
            raise ValueError("alpha weights need the size of each corpus")
        return balanced_shares(sizes, alpha)
    items = weights.split(",") if isinstance(weights, str) else list(weights)
    try:
        w = np.array([float(x) for x in items], dtype=np.float64)
    except (TypeError, ValueError):
        raise PtmError(f"--data-weights: expected numbers separated by commas (0.7,0.3), got {weights!r}") from None
    if len(w) != n:
        raise PtmError(f"--data-weights gives {len(w)} weight(s) for {n} corpora; give one per --data corpus, in order")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise PtmError(f"--data-weights must be finite, not negative, and not all zero; got {weights!r}")
    return w / w.sum()


def shares(weights: np.ndarray, total: int) -> np.ndarray:
    """``int64 [n]`` summing to ``total``, as close to ``weights * total`` as whole numbers get
    (largest remainders; ties to the earlier corpus)."""
    exact = np.asarray(weights, dtype=np.float64) * total
    counts = np.floor(exact).astype(np.int64)
    rest = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:rest]] += 1
    return counts


class BlendedBatches(PretrainBatches):
    """:class:`PretrainBatches` whose epochs are weighted shares of several corpora (see the
    module docstring).  spans: int64 [N, 2], the corpora's training spans one after another;
    sizes: how many of them each corpus has; weights: one per corpus."""

    def __init__(self, corpus: Any, objective: Any, spans: np.ndarray, sizes: Sequence[int],
                 weights: str | Sequence[float], seq_len: int, batch_size: int, seed: int, rank: int = 0,
                 world_size: int = 1) -> None:
        super().__init__(corpus, objective, spans, seq_len, batch_size, seed, rank, world_size)
        if self.streams:
            raise PtmError(
                f"--data-weights shuffles the corpora's examples together, but the objective "
                f"{getattr(objective, 'name', type(objective).__name__)!r} reads its corpus as parallel streams; "
                f"train it on one corpus, or join the corpora without weights"
            )
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if self.sizes.sum() != len(self.spans):
            raise ValueError(f"sizes add up to {int(self.sizes.sum())}, not the {len(self.spans)} spans")
        self.weights = parse_weights(weights, len(self.sizes))
        empty = [i for i in range(len(self.sizes)) if self.weights[i] > 0 and self.sizes[i] == 0]
        if empty:
            raise PtmError(f"corpus {empty[0] + 1} of --data has a weight but no training example "
                           f"(fewer tokens than one example?); give it weight 0 or more text")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.counts = shares(self.weights, self.steps_per_epoch * self.batch_size)  # examples per epoch

    def permutation(self, epoch: int) -> np.ndarray:
        """Indices into ``spans`` of the ``E`` examples of ``epoch``, in their order (cached)."""
        if self._perm_epoch != epoch:
            chosen = [self.offsets[i] + self._stream(i, epoch * int(c), (epoch + 1) * int(c))
                      for i, c in enumerate(self.counts) if c > 0]
            picked = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
            self._perm = picked[np.random.default_rng([self.seed, epoch]).permutation(len(picked))]
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def _stream(self, i: int, lo: int, hi: int) -> np.ndarray:
        """Positions ``lo..hi-1`` of corpus ``i``'s endless walk: pass ``p`` is a fresh permutation
        of its examples, drawn from ``[seed, BLEND_STREAM, i, p]``."""
        n = int(self.sizes[i])
        out = []
        for p in range(lo // n, math.ceil(hi / n)):
            order = np.random.default_rng([self.seed, BLEND_STREAM, i, p]).permutation(n)
            a, b = max(lo - p * n, 0), min(hi - p * n, n)
            out.append(order[a:b])
        return np.concatenate(out).astype(np.int64)

    def epoch_shares(self, epoch: int) -> np.ndarray:
        """How many examples of each corpus ``epoch`` holds (``int64 [n]``)."""
        which = np.searchsorted(self.offsets, self.permutation(epoch), side="right") - 1
        return np.bincount(which, minlength=len(self.sizes))


def training_batches(corpus: Any, objective: Any, spans: np.ndarray, sizes: Sequence[int],
                     weights: str | Sequence[float] | None, **common: Any) -> PretrainBatches:
    """The training batch source: every example once per epoch, or with ``weights`` the weighted
    shares of :class:`BlendedBatches`."""
    if weights is None:
        return PretrainBatches(corpus, objective, spans, **common)
    return BlendedBatches(corpus, objective, spans, sizes, weights, **common)


__all__ = ["BlendedBatches", "join_corpora", "member_spans", "parse_weights", "shares", "training_batches"]
