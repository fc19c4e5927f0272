"""Tang et al. (2019)'s data augmentation for distillation: synthetic sentences for the teacher to label.

"Distilling Task-Specific Knowledge from BERT into Simple Neural Networks", section 3.3.  For each
training sentence, ``n`` times: go over its words; draw ``x ~ U[0, 1)`` per word; if
``x < p_mask`` the word becomes the tokenizer's mask token (``[MASK]``), else if
``x < p_mask + p_pos`` it becomes another word of the same part of speech (the two rules exclude
each other); then, with probability ``p_ng``, keep only a random n-gram of the result, ``n``
uniform in ``1 .. max_ngram`` (the whole sentence when it is not longer).  Synthetic sentences equal
to a training sentence or to an earlier synthetic one are dropped.

Words are the whitespace-separated tokens of a sentence.  A word's part of speech is its most
frequent tag in a tag lexicon (:func:`tag_lexicon`: the built-in ``brown-pos`` task, read from the
local data cache only; without it the POS rule is skipped, with a logged note).  As in the paper,
the replacement is drawn from the unigram distribution of the training sentences' words,
renormalised over the words of that tag, and never the word itself; a word without a tag, or
whose tag has no other word in the training sentences, is left alone.  Lexicon look-ups and the
unigram counts ignore case; a replacement is written in its most frequent form in the sentences.

The draws come from ``numpy.random.Generator(PCG64(seed))`` in a fixed order per sentence, so the
same sentences, lexicon, settings and seed give the same synthetic set.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ptmkit.compress.small_data import AUTO_AUGMENT, SMALL_TRANSFER_SET, is_small, requested
from ptmkit.data.sources.base import check_cache, is_ready
from ptmkit.data.tasks import TaskData, builtin_tasks, load_task
from ptmkit.errors import PtmError

log = logging.getLogger(__name__)

LEXICON_TASK = "brown-pos"


@dataclass(frozen=True)
class AugmentSettings:
    """n: synthetic sentences per training sentence (0: off); seed: of the generator; p_mask /
    p_pos / p_ng: the probabilities of the three rules (the paper's 0.1, 0.1, 0.25); max_ngram:
    the longest n-gram kept (the paper's 5)."""

    n: int = 0
    seed: int = 0
    p_mask: float = 0.1
    p_pos: float = 0.1
    p_ng: float = 0.25
    max_ngram: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.n, (int, np.integer)) or self.n < 0:
            raise PtmError(f"--augment takes the number of synthetic sentences per training sentence (0: off), got {self.n!r}")
        for name in ("p_mask", "p_pos", "p_ng"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise PtmError(f"augmentation {name} is a probability: give 0..1, got {getattr(self, name)}")
        if self.p_mask + self.p_pos > 1.0:
            raise PtmError(f"masking and POS replacement exclude each other per word: p_mask + p_pos must be <= 1, "
                           f"got {self.p_mask} + {self.p_pos}")
        if self.max_ngram < 1:
            raise PtmError(f"max_ngram must be >= 1, got {self.max_ngram}")


def tag_lexicon(task: str = LEXICON_TASK) -> dict[str, str] | None:
    """``{lowercased word: its most frequent tag}`` over every split of the built-in tagging task
    ``task``, or ``None`` (with a logged note) when the task's data is not in the local cache: this
    never downloads."""
    source = builtin_tasks().get(task, (None,))[0]
    if source is None or not is_ready(source) or check_cache(source):
        log.warning("%s is not in the local data cache (`ptm data get %s` fetches it): the augmentation skips "
                    "POS-guided word replacement", task, source or task)
        return None
    data = load_task(task)
    pairs: Counter[tuple[str, str]] = Counter()
    for split in (data.train, data.dev, data.test):
        for words, tags in zip(split.words, split.tags):
            pairs.update(zip((w.lower() for w in words), tags))
    best: dict[str, tuple[int, str]] = {}
    for (word, tag), count in pairs.items():
        if word not in best or count > best[word][0]:
            best[word] = (count, tag)
    return {word: tag for word, (_, tag) in best.items()}


class PosSampler:
    """Draws another word of a word's tag from the unigram counts of ``texts`` renormalised per tag.

    Per tag: the words of that tag seen in ``texts`` (lowercased), their cumulative counts ``cum``
    (int64) and their most frequent surface forms."""

    def __init__(self, texts: Iterable[str], lexicon: Mapping[str, str]) -> None:
        lexicon = {w.lower(): t for w, t in lexicon.items()}
        counts: Counter[str] = Counter()
        forms: dict[str, Counter[str]] = {}
        for text in texts:
            for w in text.split():
                key = w.lower()
                if key in lexicon:
                    counts[key] += 1
                    forms.setdefault(key, Counter())[w] += 1
        by_tag: dict[str, list[str]] = {}
        for key in sorted(counts):  # sorted: the tables do not depend on the order of the sentences
            by_tag.setdefault(lexicon[key], []).append(key)
        self.forms: dict[str, list[str]] = {}
        self.cum: dict[str, np.ndarray] = {}
        self.index: dict[str, tuple[str, int, int]] = {}  # word -> (tag, position in its tag, count)
        for tag, keys in by_tag.items():
            self.forms[tag] = [forms[k].most_common(1)[0][0] for k in keys]
            self.cum[tag] = np.cumsum([counts[k] for k in keys], dtype=np.int64)
            for j, k in enumerate(keys):
                self.index[k] = (tag, j, counts[k])

    def draw(self, word: str, u: float) -> str | None:
        """Another word of ``word``'s tag for the uniform draw ``u`` in [0, 1), or ``None`` (no tag,
        or no other word of its tag).  Inverse-CDF sampling over the tag's counts with ``word``'s
        own count taken out, exactly in integers."""
        entry = self.index.get(word.lower())
        if entry is None:
            return None
        tag, j, own = entry
        cum = self.cum[tag]
        rest = int(cum[-1]) - own
        if rest <= 0:
            return None
        v = int(u * rest)  # 0 .. rest - 1 over the other words' counts
        before = int(cum[j]) - own
        if v >= before:
            v += own  # skip the word's own interval
        k = int(np.searchsorted(cum, v, side="right"))
        return self.forms[tag][k]


@dataclass(frozen=True)
class Rules:
    """What :func:`variants` applies: the settings' probabilities and n-gram length, the mask token
    (``None``: no masking) and the POS sampler (``None``: no replacement)."""

    settings: AugmentSettings
    mask_token: str | None
    sampler: PosSampler | None


def variants(words: Sequence[str], n: int, rng: np.random.Generator, rules: Rules) -> list[list[str]]:
    """``n`` synthetic versions of one sentence's ``words`` (duplicates kept).

    Draws, in this order: ``x [n, L]`` (which rule each word gets), ``u [n, L]`` (the replacement
    of a POS-replaced word), whether each version is cut to an n-gram ``[n]``, the n-gram lengths
    ``[n]`` and their starts ``[n]``."""
    length, p = len(words), rules.settings
    x = rng.random((n, length))
    u = rng.random((n, length))
    cut = rng.random(n) < p.p_ng
    sizes = rng.integers(1, p.max_ngram + 1, size=n)
    starts = rng.random(n)
    masked = x < p.p_mask if rules.mask_token is not None else np.zeros_like(x, dtype=bool)
    swapped = (x >= p.p_mask) & (x < p.p_mask + p.p_pos) if rules.sampler is not None \
        else np.zeros_like(x, dtype=bool)
    out = []
    for k in range(n):
        w = list(words)
        for i in np.flatnonzero(masked[k]):
            w[i] = rules.mask_token
        for i in np.flatnonzero(swapped[k]):
            w[i] = rules.sampler.draw(words[i], float(u[k, i])) or w[i]
        size = int(sizes[k])
        if cut[k] and size < length:
            s = int(starts[k] * (length - size + 1))
            w = w[s:s + size]
        out.append(w)
    return out


def augment(texts: Sequence[str], n: int, seed: int = 0, mask_token: str | None = "[MASK]",
            lexicon: Mapping[str, str] | None = None, p_mask: float = 0.1, p_pos: float = 0.1, p_ng: float = 0.25,
            max_ngram: int = 5) -> list[str]:
    """Up to ``n`` synthetic sentences per sentence of ``texts`` (words joined by single spaces), in
    the order of ``texts``, without a sentence of ``texts`` or a repeat.

    mask_token: what a masked word becomes (``None`` refuses ``p_mask > 0``); lexicon:
    ``{word: tag}`` for the POS rule (``None``: the rule is skipped)."""
    settings = AugmentSettings(n, seed, p_mask, p_pos, p_ng, max_ngram)  # checks the values
    if mask_token is None and p_mask > 0:
        raise PtmError("the tokenizer has no mask token, which the masking rule puts in place of words: give p_mask=0")
    sampler = PosSampler(texts, lexicon) if lexicon is not None and p_pos > 0 else None
    rules = Rules(settings, mask_token, sampler)
    rng = np.random.Generator(np.random.PCG64(seed))
    seen = {" ".join(t.split()) for t in texts}
    out: list[str] = []
    for text in texts:
        words = text.split()
        if not words or n == 0:
            continue
        for w in variants(words, n, rng, rules):
            s = " ".join(w)
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def mask_token_of(tokenizer: Any) -> str:
    """The text of ``tokenizer``'s mask token (``[MASK]``), which it encodes back to the mask id."""
    mask_id = getattr(tokenizer, "mask_id", None)
    token = tokenizer.id_to_token(mask_id) if mask_id is not None else None
    if token is None:
        raise PtmError("the teacher's tokenizer has no mask token, which --augment puts in place of words; "
                       "distil without --augment or give the teacher a tokenizer with [MASK]")
    return token


def check_task(data: Any) -> None:
    """Refuse tasks other than single-sentence classification (the synthetic sentences are texts
    of one sentence each, labelled by the teacher)."""

    if not isinstance(data, TaskData) or data.is_pair:
        kind = "classification with sentence pairs" if isinstance(data, TaskData) \
            else getattr(data, "task_type", type(data).__name__)
        raise PtmError(f"--augment makes synthetic sentences for single-sentence classification tasks; this task is "
                       f"{kind}: distil without --augment")


def synthetic_sentences(teacher: Any, settings: AugmentSettings) -> tuple[list[str], dict[str, Any]]:
    """The synthetic sentences of the teacher's training split and the record of how they were made
    (the settings, ``lexicon``: the tag lexicon's task or ``None``, ``synthetic``: their number)."""
    data = teacher.task_data
    check_task(data)
    mask = mask_token_of(teacher.tokenizer) if settings.p_mask > 0 else None
    lexicon = tag_lexicon() if settings.p_pos > 0 else None
    texts = augment(data.train.texts, mask_token=mask, lexicon=lexicon, **asdict(settings))
    log.info("augmentation: %d synthetic sentences from %d training sentences", len(texts), len(data.train))
    record = {**asdict(settings), "lexicon": LEXICON_TASK if lexicon is not None else None, "synthetic": len(texts)}
    return texts, record


def _unaugmentable(data: Any, tokenizer: Any, replacing: bool) -> str | None:
    """Why the augmentation cannot serve this distillation, or ``None`` when it can."""
    if replacing:
        return "module replacing trains on the task's own data"
    if not isinstance(data, TaskData) or data.is_pair:
        kind = "sentence pairs" if isinstance(data, TaskData) else getattr(data, "task_type", type(data).__name__)
        return f"it serves single-sentence classification, and this task is {kind}"
    if getattr(tokenizer, "mask_id", None) is None:
        return "the tokenizer has no mask token"
    return None


def augment_count(mode: int | str, size: int, data: Any, tokenizer: Any, replacing: bool = False) -> int:
    """Synthetic sentences per training sentence for ``--augment MODE`` on a transfer set of
    ``size`` examples: ``auto`` gives :data:`AUTO_AUGMENT` when the set is small and the task can be
    augmented (else 0, with the reason logged); anything else what it asks for (:func:`requested`)."""
    if mode != "auto":
        return requested(mode)
    if not is_small(size):
        return 0
    why = _unaugmentable(data, tokenizer, replacing)
    if why is not None:
        log.info("small transfer set (%d examples, under %d), not augmented: %s", size, SMALL_TRANSFER_SET, why)
        return 0
    log.info("small transfer set (%d examples, under %d): %d synthetic sentences per sentence (Tang et al. 2019; "
             "--augment off or N to choose)", size, SMALL_TRANSFER_SET, AUTO_AUGMENT)
    return AUTO_AUGMENT


__all__ = ["AugmentSettings", "PosSampler", "Rules", "augment", "augment_count", "check_task", "mask_token_of",
           "synthetic_sentences", "tag_lexicon", "variants"]
