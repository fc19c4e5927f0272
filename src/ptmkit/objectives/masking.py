"""Maskers: which tokens a masked-LM objective predicts, and how its input hides them.

A masker is two small pieces composed by config (``objective.masking`` and its keys), never a
subclass of an objective:

1. a **unit selector** chooses whole units until the example's budget is met;
2. a **corruption** step rewrites the chosen tokens: ``mask_token_ratio`` of them become
   [MASK], ``random_token_ratio`` a random ordinary token, the rest stay (BERT: 80/10/10),
   decided per token (``corruption=token``) or once per unit (``corruption=span``: every token
   of a span shares the decision, as SpanBERT; each random token is still drawn on its own).

Budget: an example with ``n`` maskable tokens (not [CLS], [SEP], [MASK] or padding) predicts
``max(1, round(mask_prob * n))`` tokens, at most its ``P`` prediction slots (``max_predictions``,
default ``ceil(mask_prob * T)``).

==========  ==================================================================================
masking     units
==========  ==================================================================================
token       single tokens: a uniformly random subset of exactly the budget (BERT)
whole_word  whole words (BERT whole-word masking)
span        runs of whole words, length in words ~ Geometric(``span_p``) clipped at ``max_span``
            (SpanBERT: p = 0.2, at most 10, mean 3.8 words)
ngram       runs of n whole words, p(n) proportional to 1/n for n <= ``max_ngram`` (ALBERT: 3)
units       pre-marked units given as spans by the caller (phrases, entities: ERNIE); the
            tokens outside them form whole words
==========  ==================================================================================

Selection: ``selection=budget`` (above: units are drawn until the example's token budget is
met, BERT's 15% of tokens) or ``selection=bernoulli`` (ERNIE 1.0: every unit is chosen
independently with probability ``mask_prob``, whatever its length, so long units (entities,
phrases) are masked as often as short ones; an example with maskable text but no chosen unit
gets one uniformly chosen unit, so every example predicts something; units that would overflow
its ``P`` slots are dropped whole, latest first).

Words come from the corpus's recorded word starts (``Corpus.word_starts``, see
:mod:`ptmkit.data.prepare`); a corpus without them makes every token a word (with a warning).

Word-run selection (every masking but ``token``), per example: draw a length L in words from
the distribution; choose the run's first word uniformly among the words where L consecutive
free words of one segment fit in the remaining budget (a run never crosses [CLS], [SEP],
[MASK] or padding, nor overlaps an earlier run); take them.  If no run of L words fits, L is
shortened a word at a time (as ALBERT does for its n-grams), so only the last run or two of an
example, where the budget binds, can come out shorter than drawn.  The loop stops when the
budget is met or no free word fits in what is left of it.  A word is masked entirely or not at
all, so an example can fall a token or two short of its budget when only long words remain.

Cost: ``token`` and ``bernoulli`` selection, the laying of pre-marked units over the word starts
and both corruptions are vectorised numpy over the batch.  Word-run
selection loops over the examples and, inside one, over its chosen runs (each step scans the
example's words), compiled with numba and drawing from the same ``np.random.Generator``; no
Python loop runs over tokens.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from ptmkit.errors import PtmError, suggest
from ptmkit.nn.targets import IGNORE_INDEX

log = logging.getLogger(__name__)

MASKINGS = ("token", "whole_word", "span", "ngram", "units")
CORRUPTIONS = ("token", "span")
SELECTIONS = ("budget", "bernoulli")


# ---------------------------------------------------------------------------- length laws
def geometric_lengths(p: float, max_len: int) -> np.ndarray:
    """SpanBERT's span length law over 1..max_len words: ``p (1-p)^(l-1)``, renormalised."""
    lengths = np.arange(1, max_len + 1)
    probs = p * (1.0 - p) ** (lengths - 1)
    return probs / probs.sum()


def ngram_lengths(max_n: int) -> np.ndarray:
    """ALBERT's n-gram law over 1..max_n words: ``p(n)`` proportional to ``1/n``."""
    probs = 1.0 / np.arange(1, max_n + 1)
    return probs / probs.sum()


def length_probs(masking: str, span_p: float = 0.2, max_span: int = 10, max_ngram: int = 3) -> np.ndarray | None:
    """The run-length law (``probs[l - 1]`` = p(l words)) of a masking; ``None`` for ``token``."""
    check_masking(masking)
    if masking == "token":
        return None
    if masking == "span":
        return geometric_lengths(span_p, max_span)
    if masking == "ngram":
        return ngram_lengths(max_ngram)
    return np.ones(1)  # whole_word, units: one unit at a time


def check_masking(masking: str) -> None:
    if masking not in MASKINGS:
        raise PtmError(f"unknown masker {masking!r}{suggest(masking, MASKINGS)}; maskers: {', '.join(MASKINGS)}")


def check_options(masking: str, corruption: str, span_p: float, max_span: int, max_ngram: int) -> None:
    """Raise :class:`PtmError` for an unknown masker or corruption name (with the nearest
    suggestion) or a parameter out of range; messages name the ``objective.*`` keys."""
    check_masking(masking)
    if corruption not in CORRUPTIONS:
        raise PtmError(
            f"unknown corruption {corruption!r}{suggest(corruption, CORRUPTIONS)}; corruptions: {', '.join(CORRUPTIONS)}"
        )
    if not 0.0 < span_p <= 1.0:
        raise PtmError(f"objective.span_p must be in (0, 1], got {span_p}")
    if max_span < 1 or max_ngram < 1:
        raise PtmError(f"objective.max_span and objective.max_ngram must be >= 1 (got {max_span}, {max_ngram})")


# ---------------------------------------------------------------------------- result
@dataclass
class Masked:
    """The predictions of a batch, ``[B, P]`` each (``P`` slots per example).

    positions: the token positions to predict (0 in unused slots); labels: their original
    tokens (-100 in unused slots); span_start / span_end: the first and last position
    (inclusive) of the unit each slot belongs to (= positions for token masking; 0 unused);
    span_id: the unit's index within its example, in the order the units were chosen.
    """

    positions: np.ndarray
    labels: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    span_id: np.ndarray

    @property
    def used(self) -> np.ndarray:
        return self.labels != IGNORE_INDEX


# ---------------------------------------------------------------------------- selectors
def select_tokens(candidate: np.ndarray, budget: np.ndarray, n_slots: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``budget[b]`` uniformly random candidates per row (vectorised).  Returns ``positions,
    used, span_id, span_start, span_end`` ``[B, P]``."""
    B, T = candidate.shape
    # A uniformly random subset per row: sort random keys, non-candidates last.
    keys = rng.random((B, T))
    keys[~candidate] = 2.0
    positions = np.argsort(keys, axis=1)[:, :n_slots]
    slots = np.broadcast_to(np.arange(n_slots), positions.shape)
    used = slots < budget[:, None]
    return positions, used, slots.copy(), positions, positions


@numba.njit(cache=True)
def _select_runs(unit_start, candidate, budget, cum_probs, n_slots, rng):  # pragma: no cover - compiled
    B, T = candidate.shape
    positions = np.zeros((B, n_slots), np.int64)
    span_id = np.zeros((B, n_slots), np.int64)
    first = np.zeros((B, n_slots), np.int64)
    last = np.zeros((B, n_slots), np.int64)
    n_used = np.zeros(B, np.int64)
    wstart = np.empty(T + 1, np.int64)
    wlen = np.empty(T + 1, np.int64)
    joined = np.zeros(T + 1, np.bool_)  # word w and word w + 1 are adjacent (same segment)
    free = np.zeros(T + 1, np.bool_)
    run = np.zeros(T + 1, np.int64)  # free words from w on, within its segment
    max_len = cum_probs.shape[0]
    for b in range(B):
        nw = 0
        for t in range(T):
            if candidate[b, t]:
                if unit_start[b, t] or t == 0 or not candidate[b, t - 1]:
                    wstart[nw] = t
                    wlen[nw] = 1
                    nw += 1
                else:
                    wlen[nw - 1] += 1
        for w in range(nw):
            free[w] = True
            joined[w] = w + 1 < nw and wstart[w] + wlen[w] == wstart[w + 1]
        remaining = min(budget[b], n_slots)
        slot = 0
        n_spans = 0
        while remaining > 0:
            u = rng.random()
            length = 1
            while length < max_len and u >= cum_probs[length - 1]:
                length += 1
            for w in range(nw - 1, -1, -1):
                if not free[w]:
                    run[w] = 0
                elif joined[w]:
                    run[w] = 1 + run[w + 1]
                else:
                    run[w] = 1
            count = 0
            while length >= 1:
                count = 0
                for w in range(nw):
                    if run[w] >= length and wstart[w + length - 1] + wlen[w + length - 1] - wstart[w] <= remaining:
                        count += 1
                if count > 0:
                    break
                length -= 1
            if count == 0:
                break
            j = min(int(rng.random() * count), count - 1)
            a = 0
            for w in range(nw):
                if run[w] >= length and wstart[w + length - 1] + wlen[w + length - 1] - wstart[w] <= remaining:
                    if j == 0:
                        a = w
                        break
                    j -= 1
            s = wstart[a]
            e = wstart[a + length - 1] + wlen[a + length - 1]
            for w in range(a, a + length):
                free[w] = False
            for t in range(s, e):
                positions[b, slot] = t
                span_id[b, slot] = n_spans
                first[b, slot] = s
                last[b, slot] = e - 1
                slot += 1
            remaining -= e - s
            n_spans += 1
        n_used[b] = slot
    return positions, span_id, first, last, n_used


def select_runs(
    candidate: np.ndarray,
    word_starts: np.ndarray | None,
    budget: np.ndarray,
    n_slots: int,
    probs: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, ...]:
    """Runs of whole words with lengths from ``probs`` (see the module docstring); per example
    in numba.  ``word_starts [B, T]`` (``None``: every token is a word).  Returns ``positions,
    used, span_id, span_start, span_end`` ``[B, P]``; a unit's slots are consecutive and its
    positions ascend."""
    candidate = np.ascontiguousarray(candidate, dtype=np.bool_)
    starts = np.ones_like(candidate) if word_starts is None else np.ascontiguousarray(word_starts, dtype=np.bool_)
    cum = np.cumsum(np.asarray(probs, dtype=np.float64))
    cum[-1] = 1.0
    positions, span_id, first, last, n_used = _select_runs(
        starts, candidate, np.asarray(budget, dtype=np.int64), cum, int(n_slots), rng
    )
    used = np.arange(n_slots)[None, :] < n_used[:, None]
    return positions, used, span_id, first, last


def select_bernoulli(
    candidate: np.ndarray, unit_starts: np.ndarray | None, p: float, n_slots: int, rng: np.random.Generator
) -> tuple[np.ndarray, ...]:
    """Every unit chosen independently with probability ``p`` (ERNIE 1.0), vectorised.

    A unit is a run of candidates from a start in ``unit_starts [B, T]`` (``None``: every token)
    to the next start or non-candidate.  A row with candidates but no chosen unit gets one
    uniformly chosen unit; units past the ``n_slots`` tokens a row can hold are dropped whole.
    Returns ``positions, used, span_id, span_start, span_end`` ``[B, P]`` (positions ascend)."""
    B, T = candidate.shape
    cand = np.asarray(candidate, dtype=bool)
    starts = np.ones_like(cand) if unit_starts is None else np.asarray(unit_starts, dtype=bool)
    prev = np.zeros_like(cand)
    prev[:, 1:] = cand[:, :-1]
    start = cand & (starts | ~prev)
    uid = np.cumsum(start.ravel()).reshape(B, T) - 1  # global unit index of each token
    n_units = int(start.sum())
    unit_row = np.nonzero(start)[0]  # [U], ascending
    chosen = rng.random(n_units) < p
    # Rows with units but none chosen: one uniformly chosen unit (so every example predicts).
    per_row = np.bincount(unit_row, minlength=B)
    first_unit = np.cumsum(per_row) - per_row
    n_chosen = np.bincount(unit_row, weights=chosen, minlength=B)
    pick = first_unit + np.minimum((rng.random(B) * per_row).astype(np.int64), np.maximum(per_row - 1, 0))
    fill = (per_row > 0) & (n_chosen == 0)
    chosen[pick[fill]] = True
    take = cand & chosen[np.clip(uid, 0, max(n_units - 1, 0))] if n_units else np.zeros_like(cand)
    # Drop whole units that end past the row's slots.
    rank = np.cumsum(take, axis=1)
    unit_end_rank = np.zeros(max(n_units, 1), np.int64)
    np.maximum.at(unit_end_rank, uid[take], rank[take])
    take &= unit_end_rank[np.clip(uid, 0, max(n_units - 1, 0))] <= n_slots
    # The chosen positions first, in ascending order.
    order = np.argsort(~take, axis=1, kind="stable")[:, :n_slots]
    if order.shape[1] < n_slots:
        order = np.pad(order, ((0, 0), (0, n_slots - order.shape[1])))
    rows = np.arange(B)[:, None]
    used = take[rows, order]
    positions = np.where(used, order, 0)
    # Unit boundaries and each unit's index (in order of position) within its row.
    unit_first = np.flatnonzero(start.ravel()) % T if n_units else np.zeros(1, np.int64)
    unit_last = np.zeros(max(n_units, 1), np.int64)
    j = np.broadcast_to(np.arange(T), (B, T))
    np.maximum.at(unit_last, uid[cand], j[cand])
    u = np.clip(uid[rows, positions], 0, max(n_units - 1, 0))
    new_unit = used & np.concatenate([np.ones((B, 1), bool), u[:, 1:] != u[:, :-1]], axis=1)
    span_id = np.where(used, np.cumsum(new_unit, axis=1) - 1, 0)
    return positions, used, span_id, unit_first[u], unit_last[u]


def mark_units(word_starts: np.ndarray | None, shape: tuple[int, int], units: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """Word starts with pre-marked units laid over them (vectorised): each span becomes one unit.

    ``units``: one ``[n, 2]`` array of ``(start, end)`` positions (end exclusive) per example, or
    one ``int [N, 3]`` array of ``(example, start, end)`` rows.  Overlapping units merge into one."""
    B, T = shape
    starts = np.ones(shape, dtype=bool) if word_starts is None else np.array(word_starts, dtype=bool)
    if isinstance(units, np.ndarray) and units.ndim == 2 and units.shape[1] == 3:
        rows = units.astype(np.int64)
    else:
        if len(units) != B:
            raise PtmError(f"units: expected one span list per example ({B}), got {len(units)}")
        parts = [np.asarray(sp, dtype=np.int64).reshape(-1, 2) for sp in units]
        example = np.repeat(np.arange(B), [len(sp) for sp in parts])
        rows = np.column_stack([example, np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)])
    b, s, e = rows[:, 0], np.maximum(rows[:, 1], 0), np.minimum(rows[:, 2], T)
    keep = e > s
    b, s, e = b[keep], s[keep], e[keep]
    # Interior positions (s, e) of each unit: +1 at s + 1, -1 at e, summed along the row.
    depth = np.zeros((B, T + 1), np.int64)
    np.add.at(depth, (b, s + 1), 1)
    np.add.at(depth, (b, e), -1)
    interior = np.cumsum(depth, axis=1)[:, :T] > 0
    starts[b, s] = True
    after = e < T
    starts[b[after], e[after]] = True
    starts &= ~interior
    return starts


# ---------------------------------------------------------------------------- corruption
def corrupt(
    ids: np.ndarray,
    positions: np.ndarray,
    used: np.ndarray,
    span_id: np.ndarray,
    rng: np.random.Generator,
    mask_id: int,
    random_pool: np.ndarray,
    mask_token_ratio: float,
    random_token_ratio: float,
    per_span: bool = False,
) -> np.ndarray:
    """Rewrite the chosen tokens of ``ids [B, T]`` in place; return their original ids as
    labels ``[B, P]`` (-100 in unused slots).  ``per_span``: one draw per unit decides
    [MASK] / random / kept for all its tokens."""
    B, P = positions.shape
    rows = np.arange(B)[:, None]
    labels = np.where(used, ids[rows, positions], IGNORE_INDEX).astype(np.int64)
    u = rng.random((B, P))
    if per_span:
        u = u[rows, span_id]  # unit j of a row uses draw j (a row has at most P units)
    to_mask = used & (u < mask_token_ratio)
    to_random = used & (u >= mask_token_ratio) & (u < mask_token_ratio + random_token_ratio)
    random_ids = random_pool[rng.integers(0, len(random_pool), size=(B, P))]
    new = np.where(to_mask, mask_id, np.where(to_random, random_ids, labels))
    r, c = np.nonzero(used)
    ids[r, positions[r, c]] = new[r, c]
    return labels


# ---------------------------------------------------------------------------- masker
class Masker:
    """A unit selector + a corruption step (see the module docstring).

    ``masker(ids, attention, rng, word_starts=None, units=None) -> Masked`` corrupts ``ids
    [B, T]`` in place.  ``unmaskable``: token ids never chosen (specials); ``random_pool``: the
    ids random replacements come from.
    """

    def __init__(
        self,
        masking: str = "token",
        *,
        mask_id: int,
        random_pool: np.ndarray,
        unmaskable: np.ndarray,
        mask_prob: float = 0.15,
        mask_token_ratio: float = 0.8,
        random_token_ratio: float = 0.1,
        max_predictions: int | None = None,
        corruption: str = "token",
        span_p: float = 0.2,
        max_span: int = 10,
        max_ngram: int = 3,
        selection: str = "budget",
    ) -> None:
        check_options(masking, corruption, span_p, max_span, max_ngram)
        if selection not in SELECTIONS:
            raise PtmError(f"unknown objective.selection {selection!r}{suggest(selection, SELECTIONS)}; one of {', '.join(SELECTIONS)}")
        if selection == "bernoulli" and masking in ("span", "ngram"):
            raise PtmError(f"objective.selection=bernoulli chooses single units (token, whole_word, units), not masking={masking}")
        self.selection = selection
        self.masking = masking
        self.corruption = corruption
        self.probs = length_probs(masking, span_p, max_span, max_ngram)
        self.mask_id = int(mask_id)
        self.random_pool = np.asarray(random_pool, dtype=np.int64)
        self.unmaskable = np.asarray(unmaskable, dtype=np.int64)
        self.mask_prob = float(mask_prob)
        self.mask_token_ratio = float(mask_token_ratio)
        self.random_token_ratio = float(random_token_ratio)
        self.max_predictions = max_predictions
        self._warned = False

    @classmethod
    def from_config(cls, cfg: Any, mask_id: int, random_pool: np.ndarray, unmaskable: np.ndarray) -> "Masker":
        """From an objective config with ``mask_prob``, the two ratios, ``max_predictions`` and
        optionally ``masking``, ``corruption``, ``span_p``, ``max_span``, ``max_ngram``."""
        return cls(
            getattr(cfg, "masking", "token"),
            mask_id=mask_id,
            random_pool=random_pool,
            unmaskable=unmaskable,
            mask_prob=cfg.mask_prob,
            mask_token_ratio=cfg.mask_token_ratio,
            random_token_ratio=cfg.random_token_ratio,
            max_predictions=cfg.max_predictions,
            corruption=getattr(cfg, "corruption", "token"),
            span_p=getattr(cfg, "span_p", 0.2),
            max_span=getattr(cfg, "max_span", 10),
            max_ngram=getattr(cfg, "max_ngram", 3),
            selection=getattr(cfg, "selection", "budget"),
        )

    @property
    def needs_word_starts(self) -> bool:
        return self.masking != "token"

    def word_starts(self, corpus: Any, src: np.ndarray, inside: np.ndarray) -> np.ndarray | None:
        """The word starts of a batch gathered from ``corpus`` at token indices ``src [B, T]``
        (``inside``: real text positions); ``None`` when this masker does not use them or the
        corpus has none recorded (then every token counts as a word, with a warning)."""
        if not self.needs_word_starts:
            return None
        bits = getattr(corpus, "word_starts", None)
        if bits is None:
            if not self._warned:
                self._warned = True
                log.warning(
                    "masking=%s: this corpus records no word starts, so each token is masked as a word; re-run "
                    "`ptm prepare` to mask whole words",
                    self.masking,
                )
            return None
        return np.where(inside, bits[np.clip(src, 0, len(bits) - 1)], False)

    def budget(self, candidate: np.ndarray) -> tuple[np.ndarray, int]:
        """``(tokens to predict per row [B], slots P)``."""
        T = candidate.shape[1]
        n_cand = candidate.sum(axis=1)
        P = self.max_predictions or max(1, math.ceil(self.mask_prob * T))
        if self.selection == "bernoulli" and not self.max_predictions:
            # Per-unit draws spread the token count: room for twice the mean, so few units are dropped.
            P = max(1, math.ceil(2 * self.mask_prob * T) + 4)
        k = np.where(n_cand > 0, np.maximum(1, np.rint(n_cand * self.mask_prob)), 0).astype(np.int64)
        P = min(P, T)
        return np.minimum(k, P), P

    def __call__(
        self,
        ids: np.ndarray,
        attention: np.ndarray,
        rng: np.random.Generator,
        word_starts: np.ndarray | None = None,
        units: Sequence[np.ndarray] | np.ndarray | None = None,
    ) -> Masked:
        candidate = (attention > 0) & ~np.isin(ids, self.unmaskable)
        budget, P = self.budget(candidate)
        if self.masking == "units":
            if units is None:
                raise PtmError("masking=units needs the pre-marked units (phrases, entities) of each example")
            word_starts = mark_units(word_starts, ids.shape, units)
        if self.selection == "bernoulli":
            starts = None if self.masking == "token" else word_starts
            positions, used, span_id, first, last = select_bernoulli(candidate, starts, self.mask_prob, P, rng)
        elif self.masking == "token":
            positions, used, span_id, first, last = select_tokens(candidate, budget, P, rng)
        else:
            positions, used, span_id, first, last = select_runs(candidate, word_starts, budget, P, self.probs, rng)
        labels = corrupt(
            ids, positions, used, span_id, rng, self.mask_id, self.random_pool,
            self.mask_token_ratio, self.random_token_ratio, per_span=self.corruption == "span",
        )
        zero = np.zeros_like(positions)
        return Masked(
            positions=np.where(used, positions, zero).astype(np.int64),
            labels=labels,
            span_start=np.where(used, first, zero).astype(np.int64),
            span_end=np.where(used, last, zero).astype(np.int64),
            span_id=np.where(used, span_id, zero).astype(np.int64),
        )
