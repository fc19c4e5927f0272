"""The corpus read as one token stream cut into contiguous blocks (language-model examples).

Every sentence is followed by a separator token (when ``separator`` is on), so the stream is
``s_0 s_1 ... s_{N-1}`` with ``N = n_tokens + n_sentences``.  Example ``i`` covers stream
positions ``[i T, i T + T + 1)``: consecutive blocks overlap by one token, so a left-to-right LM
that reads the first ``T`` tokens and predicts the last ``T`` predicts every stream token but the
first exactly once an epoch (and a right-to-left LM, symmetrically, every token but the last).

Spans are in stream coordinates (token offsets plus the number of separators before them);
:meth:`SentenceStream.read` turns them back into token ids.  Used by the ``clm`` and ``bilm``
objectives.
"""

from __future__ import annotations

import numpy as np

from ptmkit.errors import PtmError


class SentenceStream:
    """Sentences of a corpus joined into one stream with ``eos_id`` after each (if ``separator``);
    ``pad_id`` fills the rows of a batch past the end of a shorter span."""

    def __init__(self, separator: bool, eos_id: int, pad_id: int) -> None:
        self.separator = bool(separator)
        self.eos_id = int(eos_id)
        self.pad_id = int(pad_id)
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    def starts(self, corpus) -> np.ndarray:
        """Stream position where each sentence starts, ``int64 [n_sentences + 1]`` (the last entry
        is the stream length); cached per corpus."""
        sent = corpus.sentences
        if self._cache is None or self._cache[0] is not sent:
            sep = 1 if self.separator else 0
            starts = np.asarray(sent, dtype=np.int64) - int(sent[0]) + sep * np.arange(len(sent), dtype=np.int64)
            self._cache = (sent, starts)
        return self._cache[1]

    def length(self, corpus) -> int:
        """Number of stream positions (tokens plus separators)."""
        return int(self.starts(corpus)[-1])

    def block_spans(self, corpus, seq_len: int, what: str = "LM") -> np.ndarray:
        """``int64 [N, 2]``: the full blocks ``[i T, i T + T + 1)`` of the stream (``T = seq_len``;
        the tail shorter than a block is left out)."""
        total = self.length(corpus)
        n = (total - 1) // seq_len
        if n < 1:
            raise PtmError(
                f"the corpus has {total} tokens (with separators), too few for one {what} example of "
                f"seq_len={seq_len} (needs {seq_len + 1}); use a smaller seq_len or more text"
            )
        start = np.arange(n, dtype=np.int64) * seq_len
        return np.stack([start, start + seq_len + 1], axis=1)

    def _locate(self, corpus, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For stream ``spans [B, 2]``: ``inside [B, L]``, ``in_sentence [B, L]`` (a token, not a
        separator) and ``src [B, L]`` (its index in ``corpus.tokens``, clipped)."""
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        starts = self.starts(corpus)
        sent = np.asarray(corpus.sentences, dtype=np.int64)
        L = int((spans[:, 1] - spans[:, 0]).max())
        v = spans[:, :1] + np.arange(L)[None, :]  # stream positions [B, L]
        inside = v < spans[:, 1:]
        k = np.clip(np.searchsorted(starts, v, side="right") - 1, 0, len(sent) - 2)  # sentence of each position
        offset = v - starts[k]
        in_sentence = offset < sent[k + 1] - sent[k]
        src = np.clip(sent[k] + offset, 0, len(corpus.tokens) - 1)
        return inside, in_sentence, src

    def word_starts(self, corpus, spans: np.ndarray) -> np.ndarray | None:
        """``bool [B, L]``: the positions of ``spans`` that begin a word (a separator is a word of
        its own); ``None`` when the corpus records no word starts."""
        bits = getattr(corpus, "word_starts", None)
        if bits is None:
            return None
        inside, in_sentence, src = self._locate(corpus, spans)
        return inside & np.where(in_sentence, np.asarray(bits[src], dtype=bool), True)

    def read(self, corpus, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of stream ``spans [B, 2]``: ``(seq int64 [B, L], inside bool [B, L])`` with ``L``
        the longest span; positions past a span's end hold ``pad_id`` and ``inside = False``."""
        inside, in_sentence, src = self._locate(corpus, spans)
        seq = np.where(in_sentence, np.asarray(corpus.tokens[src], dtype=np.int64), self.eos_id)
        seq = np.where(inside, seq, self.pad_id)
        return seq, inside
