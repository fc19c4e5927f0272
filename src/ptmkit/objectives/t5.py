"""T5's span corruption (Raffel et al. 2020, section 3.1.4 and 3.3.4).

An example is a run of whole consecutive sentences of one document, at most ``seq_len - 1`` tokens
(room for the end token).  A random ``noise_density`` share of its tokens (15 %) is dropped in
spans whose mean length is ``mean_noise_span_length`` (3), with the paper's code:

* ``n_noise = round(n * noise_density)``, clipped to ``[1, n - 1]``;
  ``k = max(1, round(n_noise / mean_noise_span_length))`` spans;
* the ``n_noise`` noise tokens are split into ``k`` non-empty spans, and the ``n - n_noise`` kept
  tokens into ``k`` non-empty runs, each split uniformly at random (a random ``(k - 1)``-subset of
  the ``n_items - 1`` gaps starts a new segment);
* runs and spans alternate, a kept run first: ``kept_0 noise_0 kept_1 noise_1 ... kept_{k-1} noise_{k-1}``.

Each noise span is replaced in the input by one sentinel, ``<extra_id_i>`` for the ``i``-th span,
and the target lists every span behind its sentinel, then the end token::

    input:  kept_0 <extra_id_0> kept_1 <extra_id_1> ... kept_{k-1} <extra_id_{k-1}> [SEP]
    target: <extra_id_0> noise_0 <extra_id_1> noise_1 ... <extra_id_{k-1}> noise_{k-1} [SEP]

so that the input with each sentinel replaced by its span is the original text.  Sentinels are
vocabulary entries: train the tokenizer with ``tokenizer.extra_ids`` (the presets use 100, as T5).
``[SEP]`` is the end token (T5's ``</s>``); the decoder starts from ``model.decoder_start_token_id``,
which is ``[PAD]`` in the presets as in T5.

Batching, the loss (token cross-entropy of the target through the tied output projection, with
T5's ``H^-1/2`` rescaling from the encoder's ``lm_input``), greedy decoding and
:meth:`~ptmkit.objectives.bart.BartDenoising.reconstruct` are BART's (this class subclasses it);
only the noising, the example framing and what ``reconstruct`` shows differ.  Batch keys:
``input_ids``/``attention_mask [B, S]``, ``decoder_input_ids``/``labels [B, T]`` (-100 = padding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.objectives.bart import BartDenoising
from ptmkit.objectives.base import CorpusLike, TokenizerLike
from ptmkit.registry import register


@dataclass(frozen=True)
class SpanCorruptionConfig:
    noise_density: float = 0.15  # share of the tokens dropped
    mean_noise_span_length: float = 3.0

    def __post_init__(self) -> None:
        for name in ("noise_density", "mean_noise_span_length"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"objective.{name} must be a number, got {value!r}") from None
        if not 0.0 < self.noise_density < 1.0:
            raise PtmError(
                f"objective.noise_density is a share of the tokens and must be in (0, 1), got {self.noise_density}"
            )
        if not self.mean_noise_span_length >= 1.0:
            raise PtmError(f"objective.mean_noise_span_length must be at least 1, got {self.mean_noise_span_length}")


def num_noise_spans(n: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """``(noise tokens, noise spans)`` for a sequence of ``n >= 2`` tokens (module docstring)."""
    noise = min(max(int(round(n * noise_density)), 1), n - 1)
    return noise, max(int(round(noise / mean_noise_span_length)), 1)


def random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths ``[num_segments]`` (each >= 1, summing to ``num_items``) of a uniformly random
    split of ``num_items`` items into ``num_segments`` non-empty segments."""
    cuts = np.sort(rng.choice(num_items - 1, size=num_segments - 1, replace=False)) + 1  # segment starts
    return np.diff(np.concatenate([[0], cuts, [num_items]])).astype(np.int64)


def random_spans_noise_mask(n: int, noise_density: float, mean_noise_span_length: float,
                            rng: np.random.Generator) -> np.ndarray:
    """Boolean ``[n]``, True at the noise tokens: alternating kept runs and noise spans, a kept run
    first (T5's ``random_spans_noise_mask``).  ``n < 2`` has nothing to corrupt: all False."""
    if n < 2:
        return np.zeros(n, dtype=bool)
    noise, spans = num_noise_spans(n, noise_density, mean_noise_span_length)
    noise_lengths = random_segmentation(noise, spans, rng)
    kept_lengths = random_segmentation(n - noise, spans, rng)
    interleaved = np.stack([kept_lengths, noise_lengths], axis=1).reshape(-1)  # kept_0 noise_0 kept_1 ...
    return np.repeat(np.tile([False, True], spans), interleaved)


def span_corrupt(x: np.ndarray, noise: np.ndarray, sentinel_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(input, target)`` of tokens ``x [n]`` and its noise mask ``[n]`` (without the end token):
    the input keeps the kept tokens with one sentinel in place of each noise span, the target holds
    each noise span behind its sentinel (span ``i`` -> ``sentinel_ids[i]``).  ``sentinel_ids`` needs
    one id per noise span."""
    first = noise & ~np.concatenate([[False], noise[:-1]])  # [n] the first token of each noise span
    span = np.cumsum(first) - 1  # [n] which span a noise token belongs to
    sentinel = sentinel_ids[np.maximum(span, 0)]  # [n]
    inputs = np.where(first, sentinel, x)[~noise | first]
    # target: sentinel i sorts just before the first token of span i (keys 2 p and 2 p + 1)
    keys = np.concatenate([2 * np.flatnonzero(first), 2 * np.flatnonzero(noise) + 1])
    ids = np.concatenate([sentinel[first], x[noise]])
    return inputs, ids[np.argsort(keys, kind="stable")].astype(np.int64)


def fill_sentinels(inputs: np.ndarray, target: np.ndarray, sentinel_ids: np.ndarray) -> np.ndarray:
    """Undo :func:`span_corrupt`: ``inputs`` with each sentinel replaced by the tokens that follow
    the same sentinel in ``target`` (up to the next sentinel; none if the target lacks it)."""
    sentinel_ids = np.asarray(sentinel_ids, dtype=np.int64)
    is_sent = np.isin(target, sentinel_ids)
    marks = np.flatnonzero(is_sent)
    ends = np.concatenate([marks[1:], [len(target)]])
    spans = {int(target[m]): target[m + 1 : e] for m, e in zip(marks, ends)}  # one entry per span
    pieces = []
    start = 0
    for pos in np.flatnonzero(np.isin(inputs, sentinel_ids)):  # one step per span, not per token
        pieces += [inputs[start:pos], spans.get(int(inputs[pos]), inputs[:0])]
        start = pos + 1
    pieces.append(inputs[start:])
    return np.concatenate(pieces).astype(np.int64)


@register("objective", "t5")
class SpanCorruption(BartDenoising):
    """T5's span-corruption objective (see the module docstring) on the ``encoder_decoder`` encoder."""

    config_class = SpanCorruptionConfig
    metric = "t5_loss"
    reserved = 1  # the end token after the text

    def __init__(self, cfg: SpanCorruptionConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        self.sentinel_ids = np.asarray(tuple(getattr(tokenizer, "sentinel_ids", ()) or ()), dtype=np.int64)
        if len(self.sentinel_ids) == 0:
            raise PtmError(
                "T5 span corruption replaces each span with a sentinel token <extra_id_i>, and the tokenizer has "
                "none; train it with sentinels: tokenizer.extra_ids=100 (the t5 presets do)"
            )

    def _check_sentinels(self, n: int) -> None:
        """Enough sentinels for the spans of an ``n``-token example."""
        if n < 2:
            return
        spans = num_noise_spans(n, self.cfg.noise_density, self.cfg.mean_noise_span_length)[1]
        if spans > len(self.sentinel_ids):
            raise PtmError(
                f"examples of {n} tokens get {spans} noise spans but the tokenizer has {len(self.sentinel_ids)} "
                f"sentinel tokens; raise tokenizer.extra_ids to at least {spans}, or lower train.seq_len"
            )

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Runs of whole sentences of one document, <= ``seq_len - 1`` tokens (room for [SEP])."""
        self._check_sentinels(seq_len - self.reserved)
        return super().example_spans(corpus, seq_len)

    def corrupt(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One example's tokens ``x [n]`` -> ``(input, target)``, each ending in [SEP]."""
        cfg = self.cfg
        self._check_sentinels(len(x))
        noise = random_spans_noise_mask(len(x), cfg.noise_density, cfg.mean_noise_span_length, rng)
        inputs, target = span_corrupt(x, noise, self.sentinel_ids)
        end = np.array([self.eos_id], dtype=np.int64)
        return np.concatenate([inputs, end]), np.concatenate([target, end])

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        room = self.position_limit - self.reserved
        sources, targets = [], []
        for st, en in spans:  # one example at a time; each step inside is vectorised
            inputs, target = self.corrupt(np.asarray(corpus.tokens[st:en], dtype=np.int64)[:room], rng)
            sources.append(inputs)
            targets.append(target)
        source, src_len = self._pad(sources, self.pad_id, wrap=False)
        target, tgt_len = self._pad(targets, self.pad_id, wrap=False)
        return self.seq2seq_batch(source, src_len, target, tgt_len)

    # -- reconstruction ---------------------------------------------------------------------
    def make_source(self, x: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The corrupted input ``kept_0 <extra_id_0> ... [SEP]`` of a text's tokens ``x``."""
        del bounds  # T5 does not look at sentences
        return self.corrupt(x, rng)[0]

    def show(self, tokenizer: Any, x: np.ndarray, source: np.ndarray, generated: np.ndarray) -> dict[str, str]:
        """``noised``: the input with its sentinels; ``reconstruction``: the input with each
        sentinel replaced by what the model generated behind it."""
        ends = np.flatnonzero(generated == self.eos_id)
        generated = generated[: ends[0]] if len(ends) else generated  # what follows [SEP] is padding
        filled = fill_sentinels(source[:-1], generated, self.sentinel_ids)
        return {
            "original": tokenizer.decode(x.tolist()),
            "noised": tokenizer.decode([int(t) for t in source[:-1]], skip_special_tokens=False),
            "reconstruction": tokenizer.decode(filled.tolist()),
        }


__all__ = [
    "SpanCorruption", "SpanCorruptionConfig", "fill_sentinels", "num_noise_spans", "random_segmentation",
    "random_spans_noise_mask", "span_corrupt",
]
