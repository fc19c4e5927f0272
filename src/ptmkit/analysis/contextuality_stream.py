"""Ethayarajh's statistics over a corpus read once, sentence by sentence, in bounded memory.

Per analysed word and layer the stream keeps the running sum of its occurrences' unit vectors
(exact self-similarity over all occurrences, :func:`~ptmkit.analysis.contextuality.self_similarity_from_sum`)
and its first ``max_occurrences`` occurrence vectors in a float16 memory-mapped file on disk (MEV and
the first principal component); per layer the sum of the sentences' intra-sentence similarities;
and the vectors of one random word from each sentence of a random sample of ``baseline_samples``
sentences (the anisotropy baseline).  Memory: ``words × layers × d`` floats for the sums, whatever
the corpus size; the occurrence file holds ``words × max_occurrences × layers × d`` halves.

Which sentences and which word of each the baseline samples is fixed by ``seed`` and the sentence
index alone, so the same corpus gives the same numbers however it is batched.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ptmkit.analysis import contextuality as C
from ptmkit.errors import PtmError

MIN_COUNT = 5  # Ethayarajh: words with at least 5 occurrences


def select_words(counts: Counter, min_count: int = MIN_COUNT, max_words: int | None = None) -> list[str]:
    """The words analysed: those with at least ``min_count`` occurrences, most frequent first (ties
    by the word), at most ``max_words``.  :class:`PtmError` naming the counts when none qualifies."""
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if not words:
        top = counts.most_common(1)
        most = f"; the most frequent, {top[0][0]!r}, occurs {top[0][1]} times" if top else ""
        raise PtmError(f"no word of the corpus occurs at least {min_count} times ({sum(counts.values())} words, "
                       f"{len(counts)} distinct{most}); self-similarity and MEV need such words: give a larger corpus")
    return words[:max_words] if max_words else words


class ContextualityStream:
    """Feed every sentence once (:meth:`add`), then :meth:`result`.

    words: the analysed words (:func:`select_words`); num_layers: hidden states per word (``L + 1``);
    dim: their width; num_sentences: how many sentences will be fed (the baseline's sample is drawn
    among them); workdir: where the occurrence file lives (a temporary directory)."""

    def __init__(self, words: Sequence[str], num_layers: int, dim: int, num_sentences: int, workdir: Path,
                 max_occurrences: int = 50, baseline_samples: int = 1000, seed: int = 0) -> None:
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.L, self.d, self.K = int(num_layers), int(dim), int(max_occurrences)
        V = len(self.words)
        self.unit_sum = np.zeros((V, self.L, self.d), dtype=np.float64)
        self.count = np.zeros(V, dtype=np.int64)
        self.occ = np.lib.format.open_memmap(Path(workdir) / "occurrences.npy", mode="w+", dtype=np.float16,
                                             shape=(V, self.K, self.L, self.d))
        self.intra_sum = np.zeros(self.L, dtype=np.float64)
        self.sentences = 0
        rng = np.random.default_rng([seed, 17])
        n = min(int(baseline_samples), int(num_sentences))
        self.sampled = set(rng.choice(int(num_sentences), size=n, replace=False).tolist()) if n else set()
        self.seed = seed
        self.baseline: list[np.ndarray] = []

    def add(self, sentence_index: int, words: Sequence[str], layers: np.ndarray) -> None:
        """One sentence: its words ``[W]`` and their vectors ``layers [L + 1, W, d]`` (float32)."""
        if layers.shape[0] != self.L or layers.shape[1] != len(words):
            raise ValueError(f"layers {layers.shape} do not match {self.L} layers x {len(words)} words")
        if not len(words):
            return
        x = layers.astype(np.float64)
        units = C.unit_rows(x)  # [L, W, d]
        if len(words) >= 2:
            centre = C.unit_rows(x.mean(1))  # [L, d]
            self.intra_sum += np.einsum("lwd,ld->lw", units, centre).mean(1)
            self.sentences += 1
        for j, w in enumerate(words):
            i = self.index.get(w)
            if i is None:
                continue
            self.unit_sum[i] += units[:, j]
            if self.count[i] < self.K:
                self.occ[i, self.count[i]] = layers[:, j]
            self.count[i] += 1
        if sentence_index in self.sampled:
            pick = int(np.random.default_rng([self.seed, 29, sentence_index]).integers(len(words)))
            self.baseline.append(layers[:, pick].astype(np.float64))

    def kept(self, min_count: int = MIN_COUNT) -> np.ndarray:
        """Indices of the words fed at least ``min_count`` times (a long sentence's cut tail is not fed)."""
        return np.flatnonzero(self.count >= min_count)

    def result(self, min_count: int = MIN_COUNT) -> dict[str, Any]:
        """Per layer (lists of ``L + 1``): ``self_similarity``, ``intra_sentence``, ``mev`` (means over
        words / sentences), ``anisotropy`` and ``anisotropy_mev`` (the random-occurrence baseline), and
        ``adjusted`` (each minus its baseline); ``words`` (how many) and ``per_word`` self-similarity."""
        keep = self.kept(min_count)
        if not len(keep):
            raise PtmError(f"no analysed word was read {min_count} times (sentences cut at the model's length "
                           f"drop words); give a larger corpus")
        selfsim = C.self_similarity_from_sum(self.unit_sum[keep], self.count[keep, None])  # [V, L]
        mevs = np.array([[C.mev(self.occ[i, :min(self.count[i], self.K), layer].astype(np.float64))
                          for layer in range(self.L)] for i in keep])
        base = np.stack(self.baseline, 1) if len(self.baseline) >= 2 else None  # [L, m, d]
        out: dict[str, Any] = {
            "self_similarity": selfsim.mean(0).tolist(),
            "intra_sentence": (self.intra_sum / max(self.sentences, 1)).tolist(),
            "mev": mevs.mean(0).tolist(),
            "anisotropy": [C.anisotropy(base[k]) if base is not None else float("nan") for k in range(self.L)],
            "anisotropy_mev": [C.mev(base[k]) if base is not None else float("nan") for k in range(self.L)],
            "words": int(len(keep)), "sentences": int(self.sentences), "baseline_samples": len(self.baseline),
            "occurrences_per_word_for_mev": self.K,
        }
        out["adjusted"] = C.adjusted(out, out["anisotropy"], out["anisotropy_mev"])
        out["per_word"] = {self.words[i]: [round(float(v), 4) for v in row] for i, row in zip(keep, selfsim)}
        return out

    def static_vectors(self, layer: int, min_count: int = MIN_COUNT) -> tuple[list[str], np.ndarray]:
        """Each kept word's first principal component at ``layer`` (its stored occurrences): the words
        and ``[V, d]`` float32 vectors (Ethayarajh's static embeddings)."""
        if not 0 <= layer < self.L:
            raise PtmError(f"layer {layer} is outside this model's hidden states 0..{self.L - 1}")
        keep = self.kept(min_count)
        vecs = np.stack([C.first_pc(self.occ[i, :min(self.count[i], self.K), layer].astype(np.float64))
                         for i in keep]) if len(keep) else np.zeros((0, self.d))
        return [self.words[i] for i in keep], vecs.astype(np.float32)


__all__ = ["MIN_COUNT", "ContextualityStream", "select_words"]
