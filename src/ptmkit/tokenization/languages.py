"""The languages a multilingual tokenizer was trained on, and XLM's language-balanced sampling.

A tokenizer trained with languages (``ptm tokenizer train en.txt es.txt --languages en,es``) holds
one special token ``<lang_XX>`` per language after its learnt vocabulary, in the order given; a
language's *index* is its place in that order.  The tokens are the tokenizer's record of its
languages (a ``tokenizer.json`` has no other place for it that HF's loaders accept); a language's
index is what the XLM objective feeds the language embeddings, and a prepared corpus names its
language, checked here against the tokenizer.

Language-balanced sampling (Lample & Conneau 2019, XLM; Conneau et al. 2020, XLM-R): with
``p_i`` the share of the text in language ``i``, language ``i`` is drawn with probability
``q_i = p_i^alpha / sum_j p_j^alpha``.  ``alpha = 1`` keeps the natural shares, ``alpha = 0``
gives every language the same share; XLM uses 0.5 for its BPE and its MLM batches, XLM-R 0.3.
A low-resource language is so up-sampled: its words win subword merges and its text fills
batches more often than its size alone would give.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from ptmkit.errors import PtmError

LANGUAGE_TOKEN = "<lang_{}>"
_TOKEN = re.compile(r"<lang_([A-Za-z][A-Za-z0-9_-]*)>")
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,15}")


def check_codes(codes: Sequence[str]) -> tuple[str, ...]:
    """Language codes as given (``en``, ``es``, ``ny``, ``grc``): letters, digits, ``_``, ``-``."""
    out = tuple(c.strip() for c in codes)
    for c in out:
        if not _CODE.fullmatch(c):
            raise PtmError(f"language code {c!r}: use a short code of letters and digits such as en, es, ny, zh-hans")
    return out


def languages_of(vocab: dict[str, int]) -> tuple[str, ...]:
    """The languages a vocabulary (token -> id) records, ordered by their tokens' ids."""
    found = [(i, m.group(1)) for t, i in vocab.items() if (m := _TOKEN.fullmatch(t))]
    return tuple(code for _, code in sorted(found))


def language_index(languages: Sequence[str], code: str, what: str = "") -> int:
    """``code``'s index among a tokenizer's ``languages``; a clear error when the tokenizer was not
    trained on it."""
    if code in languages:
        return list(languages).index(code)
    where = f" ({what})" if what else ""
    if not languages:
        raise PtmError(f"language {code!r}{where}: the tokenizer records no languages; train one with "
                       f"`ptm tokenizer train FILE... --languages en,es,...` (one file or group per language)")
    raise PtmError(f"language {code!r}{where} is not among the tokenizer's training languages "
                   f"({', '.join(languages)}); train the tokenizer on text of {code!r} too, or name one of those")


def check_language(languages: Sequence[str], code: str, what: str = "") -> None:
    """A corpus's language against a tokenizer's: one of them, or anything when the tokenizer records
    none (a monolingual or imported tokenizer, e.g. continued pre-training of an English model on
    other languages): the code is then a label that cannot be checked."""
    check_codes([code])
    if languages:
        language_index(languages, code, what)


def balanced_shares(sizes: Sequence[float], alpha: float) -> np.ndarray:
    """XLM's ``q_i ∝ p_i^alpha`` for the sizes (tokens, words) of each language: float64 [n], sum 1.

    A language of size 0 gets share 0 whatever alpha is."""
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and 0 <= alpha <= 1):
        raise PtmError(f"alpha (language sampling exponent) must lie in [0, 1], got {alpha!r}")
    n = np.asarray(sizes, dtype=np.float64)
    if n.ndim != 1 or not len(n) or np.any(n < 0) or n.sum() <= 0:
        raise PtmError(f"language sizes must be non-negative and not all zero, got {list(sizes)}")
    p = n / n.sum()
    q = np.where(p > 0, p ** alpha, 0.0)
    return q / q.sum()


def language_tokens(codes: Sequence[str]) -> list[str]:
    return [LANGUAGE_TOKEN.format(c) for c in codes]
