"""Word segmenters: where words begin in text that has no spaces between them (Chinese).

A tokenizer's pre-tokenizer decides what a *word* is for whole-word and span masking; for
Chinese it makes every character a word (WordPiece, char) or a whole run of characters one
word (byte-level BPE, unigram).  A segmenter refines that: :func:`get_segmenter` returns a
function ``text -> int64 [n_words]`` of the character offsets where the segmenter's words begin,
and ``Tokenizer.encode_batch_with_word_starts`` then keeps a token as a word start only if it
starts a pre-tokenizer word *and* its first character begins a segmenter word (aligned by the
tokens' character offsets).

``jieba`` (optional: ``pip install 'ptmkit[zh]'``) is the one bundled segmenter; any callable
with the same contract can be passed instead of a name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ptmkit.errors import PtmError, suggest

Segmenter = Callable[[str], np.ndarray]


def _jieba() -> Segmenter:
    try:
        import jieba
    except ImportError as exc:
        raise PtmError("the jieba word segmenter is not installed: pip install 'ptmkit[zh]' (or pip install jieba)") from exc
    jieba.setLogLevel(logging.WARNING)  # its dictionary loading notice goes to stderr otherwise

    def segment(text: str) -> np.ndarray:
        # jieba.tokenize yields (word, start, end) character offsets covering the whole text.
        return np.fromiter((start for _, start, _ in jieba.tokenize(text)), dtype=np.int64)

    return segment


SEGMENTERS: dict[str, Callable[[], Segmenter]] = {"jieba": _jieba}


def get_segmenter(name: str | Segmenter | None) -> Segmenter | None:
    """The segmenter called ``name`` (``None`` for none; a callable is returned as is)."""
    if name is None or callable(name):
        return name
    if name not in SEGMENTERS:
        raise PtmError(f"unknown word segmenter {name!r}{suggest(name, SEGMENTERS)}; segmenters: {', '.join(SEGMENTERS)}")
    return SEGMENTERS[name]()
