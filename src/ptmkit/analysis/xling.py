"""Cross-lingual measures of a multilingual encoder, per layer: parallel sentence retrieval, bilingual
lexicon induction and word alignment.

* **Retrieval** (Libovický et al. 2020; Pires et al. 2019): each sentence is the mean of its
  tokens' states at a layer (special tokens left out); for every source sentence the nearest
  target sentence by cosine is retrieved among all targets of the set; P@1 is the share that
  finds its own translation.  *Centering* subtracts each language's mean vector (over the set)
  first, which removes the language identity that dominates the representations' geometry
  (Libovický et al.: "language-neutral" after centering).
* **Bilingual lexicon induction** (BLI): a word's vector is either its embedding-layer vector (the
  mean of its pieces' input embeddings, no context) or the average of its contextual vectors
  (each occurrence's mean over its pieces at a layer) over a text; each source word of a gold
  dictionary retrieves its nearest target word among all target words that have a vector; P@1
  counts a hit when the retrieved word is any of its gold translations.
* **Word alignment** (SimAlign, Jalili Sabet et al. 2020): the cosine similarities of the two
  sentences' word vectors at a layer, aligned by Argmax or IterMax
  (:mod:`ptmkit.analysis.word_alignment`), scored by AER against gold links.

Inputs carry each text's language: a model trained with language embeddings (objective ``xlm``)
gets that language's index as token types (:func:`language_types`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ptmkit.analysis.align import align_sentences
from ptmkit.analysis.extract import max_length, padded
from ptmkit.tokenization.languages import language_index


def language_types(subject: Any, language: str) -> int | None:
    """The token type a text in ``language`` gets: its language index where the model was trained
    with language embeddings (``objective.language_embeddings``), else ``None`` (the default types)."""
    objective = (getattr(subject, "config", None) or {}).get("objective") or {}
    languages = tuple(getattr(subject.tokenizer, "languages", ()))
    if not objective.get("language_embeddings") or not languages:
        return None
    return language_index(languages, language, "the evaluation text")


def word_vectors(subject: Any, sentences: Sequence[Sequence[str]], language: str,
                 batch_size: int = 32) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """For each sentence (a non-empty list of words), in order: ``words [L + 1, W, d]`` (each
    word's mean over its pieces, per layer; the embedding output is layer 0) and ``sentence
    [L + 1, d]`` (the mean over its non-special tokens), float32."""
    backbone, tok = subject.backbone, subject.tokenizer
    backbone.eval()
    limit = max_length(backbone)
    types = language_types(subject, language)
    device = next(backbone.parameters()).device
    for lo in range(0, len(sentences), batch_size):
        aligned = align_sentences(tok, sentences[lo: lo + batch_size], subject.causal, limit)
        ids, mask = padded(aligned, tok.pad_id)
        extra = {} if types is None else {"token_type_ids": torch.full_like(ids, types).to(device)}
        with torch.no_grad():
            out = backbone(ids.to(device), mask.to(device), causal=subject.causal, output_hidden_states=True, **extra)
        hidden = torch.stack(out.hidden_states, 1).float().cpu().numpy()  # [B, L + 1, T, d]
        for r, a in enumerate(aligned):
            owner = a.word_of
            inside = np.flatnonzero(owner >= 0)
            states = hidden[r][:, inside]  # [L + 1, n, d]
            words = owner[inside]
            sums = np.zeros((states.shape[0], len(a.words), states.shape[2]), dtype=np.float64)
            np.add.at(sums, (slice(None), words), states)
            counts = np.bincount(words, minlength=len(a.words))[None, :, None]
            yield (sums / np.maximum(counts, 1)).astype(np.float32), states.mean(1).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def retrieval_p1(source: np.ndarray, target: np.ndarray, center: bool = False) -> float:
    """P@1 of retrieving ``target[i]`` for ``source[i]`` (``[n, d]`` each) by cosine among all
    targets; ``center`` subtracts each side's mean first."""
    if center:
        source, target = source - source.mean(0), target - target.mean(0)
    sim = _unit(source.astype(np.float64)) @ _unit(target.astype(np.float64)).T
    return float(np.mean(sim.argmax(1) == np.arange(len(source))))


def bli_p1(source_words: Sequence[str], source: np.ndarray, target_words: Sequence[str], target: np.ndarray,
           gold: dict[str, set[str]], center: bool = False) -> tuple[float, int]:
    """P@1 of lexicon induction: each source word (of ``gold`` and ``source_words``, vectors ``source
    [n, d]``) retrieves its nearest of ``target_words`` (``target [m, d]``) by cosine; a hit when it
    is one of its gold translations.  Returns ``(P@1, number of source words tested)``."""
    if center:
        source, target = source - source.mean(0), target - target.mean(0)
    have = set(target_words)
    rows = [i for i, w in enumerate(source_words) if gold.get(w, set()) & have]
    if not rows:
        return float("nan"), 0
    sim = _unit(source[rows].astype(np.float64)) @ _unit(target.astype(np.float64)).T
    best = sim.argmax(1)
    hits = [target_words[b] in gold[source_words[i]] for i, b in zip(rows, best)]
    return float(np.mean(hits)), len(rows)


def embedding_vectors(subject: Any, words: Sequence[str]) -> np.ndarray:
    """``[n, E]``: each word's mean input embedding over its pieces (no context)."""
    table = subject.backbone.input_embeddings().weight.detach().float().cpu().numpy()
    tok = subject.tokenizer
    out = np.zeros((len(words), table.shape[1]), dtype=np.float32)
    for k, ids in enumerate(tok.encode_batch(list(words))):
        if ids:
            out[k] = table[ids].mean(0)
    return out


def contextual_averages(subject: Any, sentences: Sequence[Sequence[str]], language: str,
                        vocabulary: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The words of ``vocabulary`` that occur in ``sentences`` and their average contextual vectors
    ``[n, L + 1, d]`` over all their occurrences."""
    index = {w: i for i, w in enumerate(vocabulary)}
    sums: np.ndarray | None = None
    counts = np.zeros(len(index), dtype=np.int64)
    for words, (vectors, _) in zip(sentences, word_vectors(subject, sentences, language)):
        ids = np.array([index.get(w, -1) for w in words[: vectors.shape[1]]], dtype=np.int64)
        keep = np.flatnonzero(ids >= 0)
        if sums is None:
            sums = np.zeros((len(index), *vectors.shape[::2]), dtype=np.float64)  # [V, L + 1, d]
        np.add.at(sums, ids[keep], vectors[:, keep].transpose(1, 0, 2))
        counts += np.bincount(ids[keep], minlength=len(index))
    found = np.flatnonzero(counts > 0)
    if sums is None or not len(found):
        return [], np.zeros((0, 0, 0), np.float32)
    return [vocabulary[i] for i in found], (sums[found] / counts[found, None, None]).astype(np.float32)


__all__ = ["bli_p1", "contextual_averages", "embedding_vectors", "language_types", "retrieval_p1", "word_vectors"]
