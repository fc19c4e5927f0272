"""Cutting a corpus into example spans (computed once per run, so compiled with numba)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _pack_sentences(sentences: np.ndarray, documents: np.ndarray, budget: int, min_len: int) -> np.ndarray:
    n_tokens = sentences[-1] - sentences[0]
    out = np.empty((len(sentences) + n_tokens // budget + 1, 2), dtype=np.int64)
    n = 0
    for d in range(len(documents) - 1):
        start = -1
        end = -1
        for s in range(documents[d], documents[d + 1]):
            a = sentences[s]
            b = sentences[s + 1]
            if b == a:
                continue
            if b - a > budget:
                # A sentence longer than the budget becomes consecutive budget-sized pieces.
                if start >= 0 and end - start >= min_len:
                    out[n, 0] = start
                    out[n, 1] = end
                    n += 1
                start = -1
                p = a
                while p < b:
                    q = min(p + budget, b)
                    if q - p >= min_len:
                        out[n, 0] = p
                        out[n, 1] = q
                        n += 1
                    p = q
                continue
            if start >= 0 and b - start > budget:
                if end - start >= min_len:
                    out[n, 0] = start
                    out[n, 1] = end
                    n += 1
                start = -1
            if start < 0:
                start = a
            end = b
        if start >= 0 and end - start >= min_len:
            out[n, 0] = start
            out[n, 1] = end
            n += 1
    return out[:n].copy()


def pack_sentences(sentences: np.ndarray, documents: np.ndarray, budget: int, min_len: int = 1) -> np.ndarray:
    """Greedily pack whole consecutive sentences of one document into spans of <= ``budget`` tokens.

    sentences: int64 token offsets ``[n_sentences + 1]``; documents: int64 sentence offsets
    ``[n_documents + 1]``.  Spans never cross a document boundary; a sentence longer than the
    budget is split into budget-sized pieces; spans shorter than ``min_len`` are dropped.
    Returns int64 ``[N, 2]`` (start, end) token offsets.
    """
    return _pack_sentences(
        np.ascontiguousarray(sentences, dtype=np.int64),
        np.ascontiguousarray(documents, dtype=np.int64),
        int(budget),
        int(min_len),
    )


@numba.njit(cache=True)
def _pack_across_documents(sentences: np.ndarray, documents: np.ndarray, budget: int) -> np.ndarray:
    n_tokens = sentences[-1] - sentences[0]
    out = np.empty((len(sentences) + n_tokens // budget + 1, 2), dtype=np.int64)
    n = 0
    start = -1
    end = -1
    used = 0  # tokens + document separators in the open span
    for d in range(len(documents) - 1):
        first = True  # the next sentence is the first of document d
        for s in range(documents[d], documents[d + 1]):
            a = sentences[s]
            b = sentences[s + 1]
            if b == a:
                continue
            sep = 1 if (first and start >= 0) else 0
            first = False
            if b - a > budget:
                if start >= 0:
                    out[n, 0] = start
                    out[n, 1] = end
                    n += 1
                start = -1
                p = a
                while p < b:
                    q = min(p + budget, b)
                    out[n, 0] = p
                    out[n, 1] = q
                    n += 1
                    p = q
                continue
            if start >= 0 and used + sep + (b - a) > budget:
                out[n, 0] = start
                out[n, 1] = end
                n += 1
                start = -1
                sep = 0
            if start < 0:
                start = a
                used = 0
            used += sep + (b - a)
            end = b
    if start >= 0:
        out[n, 0] = start
        out[n, 1] = end
        n += 1
    return out[:n].copy()


def pack_across_documents(sentences: np.ndarray, documents: np.ndarray, budget: int) -> np.ndarray:
    """RoBERTa's FULL-SENTENCES: greedily pack whole consecutive sentences into spans of at most
    ``budget`` tokens, continuing into the next document when one ends.

    Every document boundary inside a span costs one token of the budget (the separator the
    collate inserts there).  A sentence longer than the budget becomes budget-sized pieces of
    its own.  Returns int64 ``[N, 2]`` (start, end) token offsets into the token stream.
    """
    return _pack_across_documents(
        np.ascontiguousarray(sentences, dtype=np.int64),
        np.ascontiguousarray(documents, dtype=np.int64),
        int(budget),
    )
