"""Huffman tree for hierarchical softmax (Morin & Bengio 2005; word2vec's ``CreateBinaryTree``).

Frequent words get short codes, so the expected number of inner-node updates per prediction is
close to the entropy of the unigram distribution.  The tree is built in O(V) with the classic
two-queue merge over counts sorted in decreasing order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from ptmkit.errors import PtmError


@dataclass
class HuffmanTree:
    """Codes and paths of every word.

    codes: uint8 [V, L] branch taken (0/1) at each inner node from the root down (padded with 0).
    points: int32 [V, L] inner-node index (row of ``syn1``, 0..V-2) from the root down.
    lengths: int32 [V] code length of each word (the padded tail of a row is unused).
    """

    codes: np.ndarray
    points: np.ndarray
    lengths: np.ndarray


@nb.njit(cache=True)
def _merge(counts_desc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent and branch bit of the 2V-1 nodes; nodes 0..V-1 are leaves in decreasing count order."""
    v = counts_desc.shape[0]
    count = np.empty(2 * v, dtype=np.int64)
    count[:v] = counts_desc
    count[v:] = np.iinfo(np.int64).max // 4
    parent = np.zeros(2 * v, dtype=np.int64)
    binary = np.zeros(2 * v, dtype=np.uint8)
    pos1 = v - 1  # smallest not-yet-merged leaf (leaves are in decreasing order)
    pos2 = v  # smallest not-yet-merged inner node (created in increasing order)
    for a in range(v - 1):
        mins = np.empty(2, dtype=np.int64)
        for k in range(2):
            if pos1 >= 0 and count[pos1] < count[pos2]:
                mins[k] = pos1
                pos1 -= 1
            else:
                mins[k] = pos2
                pos2 += 1
        count[v + a] = count[mins[0]] + count[mins[1]]
        parent[mins[0]] = v + a
        parent[mins[1]] = v + a
        binary[mins[1]] = 1
    return parent, binary


@nb.njit(cache=True)
def _paths(parent: np.ndarray, binary: np.ndarray, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    root = 2 * v - 2
    lengths = np.zeros(v, dtype=np.int32)
    for w in range(v):
        node, n = w, 0
        while node != root:
            node = parent[node]
            n += 1
        lengths[w] = n
    width = max(1, lengths.max())
    codes = np.zeros((v, width), dtype=np.uint8)
    points = np.zeros((v, width), dtype=np.int32)
    for w in range(v):
        n = lengths[w]
        node = w
        k = n - 1
        while node != root:  # walk up, fill from the end so row reads root -> leaf
            codes[w, k] = binary[node]
            node = parent[node]
            points[w, k] = node - v
            k -= 1
    return codes, points, lengths


def build_huffman(counts: np.ndarray) -> HuffmanTree:
    """Huffman codes for words with ``counts`` (int [V], any order; V >= 2)."""
    counts = np.asarray(counts, dtype=np.int64)
    v = counts.shape[0]
    if v < 2:
        raise PtmError("hierarchical softmax needs at least 2 words in the vocabulary")
    order = np.argsort(-counts, kind="stable")  # leaves in decreasing count order
    parent, binary = _merge(counts[order])
    codes_s, points_s, lengths_s = _paths(parent, binary, v)
    codes = np.empty_like(codes_s)
    points = np.empty_like(points_s)
    lengths = np.empty_like(lengths_s)
    codes[order], points[order], lengths[order] = codes_s, points_s, lengths_s
    return HuffmanTree(codes, points, lengths)
