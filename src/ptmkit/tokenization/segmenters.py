"""Word segmenters: where words begin in text that has no spaces between them (Chinese).

A tokenizer's pre-tokenizer decides what a *word* is for whole-word and span masking; for
Chinese it makes every character a word (WordPiece, char) or a whole run of characters one
word (byte-level BPE, unigram).  A segmenter refines that: :func:`get_segmenter` returns a
function ``text -> int64 [n_words]`` of the character offsets where the segmenter's words begin,
and ``Tokenizer.encode_batch_with_word_starts`` then keeps a token as a word start only if it
starts a pre-tokenizer word *and* its first character begins a segmenter word (aligned by the
tokens' character offsets).  Where the two disagree (a token that starts inside a segmenter
word, or a segmenter word that starts inside a token) the token's own boundaries win: a token
is never split, so a word is always a run of whole tokens and the loss stays per token
(per character for the ``char`` kind).

``jieba`` (optional: ``pip install 'ptmkit[zh]'``) is the one bundled segmenter; a jieba **user
dictionary** (``user_dict``: one word per line, optionally followed by a frequency and a POS tag,
as People's Daily's ``dictionary.txt``) adds domain words and names to its vocabulary.  Any
callable with the same contract can be passed instead of a name.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import PtmError, suggest

Segmenter = Callable[[str], np.ndarray]

JIEBA_INSTALL = "pip install 'ptmkit[zh]' (or pip install jieba)"


def _import_jieba() -> Any:
    try:
        import jieba
    except ImportError as exc:
        raise PtmError(f"the jieba word segmenter is not installed: {JIEBA_INSTALL}") from exc
    jieba.setLogLevel(logging.WARNING)  # its dictionary loading notice goes to stderr otherwise
    return jieba


class JiebaSegmenter:
    """jieba's word starts, optionally with a user dictionary.  Picklable (prepare's worker
    processes receive it): the jieba tokenizer is built lazily in each process."""

    def __init__(self, user_dict: str | os.PathLike[str] | None = None) -> None:
        self.user_dict = None if user_dict is None else str(Path(user_dict))
        if self.user_dict is not None and not Path(self.user_dict).is_file():
            raise PtmError(
                f"jieba user dictionary {self.user_dict} does not exist (--user-dict / user_dict): give a text file "
                "with one word per line, optionally followed by a frequency and a POS tag"
            )
        _import_jieba()  # fail now, in the caller, rather than in a worker
        self._tokenizer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"user_dict": self.user_dict, "_tokenizer": None}

    def _jieba(self) -> Any:
        if self._tokenizer is None:
            jieba = _import_jieba()
            if self.user_dict is None:
                self._tokenizer = jieba.dt  # the shared default tokenizer
            else:
                tok = jieba.Tokenizer()
                tok.load_userdict(self.user_dict)
                self._tokenizer = tok
        return self._tokenizer

    def __call__(self, text: str) -> np.ndarray:
        # tokenize yields (word, start, end) character offsets covering the whole text.
        return np.fromiter((start for _, start, _ in self._jieba().tokenize(text)), dtype=np.int64)

    def __repr__(self) -> str:
        return "jieba" if self.user_dict is None else f"jieba(user_dict={self.user_dict})"


SEGMENTERS: dict[str, Callable[..., Segmenter]] = {"jieba": JiebaSegmenter}


def get_segmenter(name: str | Segmenter | None, user_dict: str | os.PathLike[str] | None = None) -> Segmenter | None:
    """The segmenter called ``name`` (``None`` for none; a callable is returned as is);
    ``user_dict``: a jieba user dictionary file (only with ``jieba``)."""
    if user_dict is not None and (name is None or (not callable(name) and name != "jieba")):
        raise PtmError(f"a user dictionary (--user-dict {user_dict}) needs the jieba segmenter: add --segmenter jieba")
    if name is None or callable(name):
        if user_dict is not None and not isinstance(name, JiebaSegmenter):
            raise PtmError("a user dictionary (--user-dict) is a jieba option; give it to the segmenter itself")
        return name
    if name not in SEGMENTERS:
        raise PtmError(f"unknown word segmenter {name!r}{suggest(name, SEGMENTERS)}; segmenters: {', '.join(SEGMENTERS)}")
    return SEGMENTERS[name](user_dict) if user_dict is not None else SEGMENTERS[name]()
