"""K-BERT (Liu et al. 2020): knowledge injected into a sentence at fine-tuning time, so a model
pre-trained on text alone (an imported MiniLM, ptmkit's own BERT) can use a knowledge graph
without being pre-trained again.

Each entity mention in the text gets *branches*: the tokens of a triple's relation and tail,
``Cook [CEO Apple]``, written after the mention (the *sentence tree*).  Flattened, the tree is one
token sequence; two things keep the branches from changing the sentence's meaning ("knowledge
noise"):

* **soft positions**: the trunk (the sentence) keeps consecutive position ids as if no branch
  were there; a branch continues from its mention's last position.  In the paper's example
  ``[CLS] Tim Cook CEO Apple is visiting Beijing capital China is_a City now`` has the soft
  positions ``0 1 2 3 4 3 4 5 6 7 6 7 6``;
* **the visible matrix** ``M [n, n]``: a token sees the tokens of its own branch; the trunk is
  one branch, and a mention belongs both to the trunk and to each of its branches.  So ``Apple``
  is seen by ``CEO`` and ``Cook`` only, and ``Tim`` never sees it.

They reach the encoder as ``position_ids [B, T]`` and ``attn_mask [B, 1, T, T]``
(:mod:`ptmkit.tasks.inputs`); an encoder that cannot honour them says so
(:meth:`ptmkit.encoders.base.Encoder.visible_matrix_refusal`).  ``mode="plain"`` is the
paper's ablation: the same tokens with ordinary positions and full attention, the triples
simply appended as text.

The knowledge is a mapping ``surface form -> [(relation, tail), ...]`` (:class:`Knowledge`):
read from a triples file (``head<TAB>relation<TAB>tail``, K-BERT's own format for CN-DBpedia
and HowNet), or ``wordnet``: WordNet 3.0's most frequent senses with their hypernyms
(:func:`ptmkit.knowledge.lexicons.kbert_triples`).  Mentions are found word by word, longest match first
(multi-word surface forms up to :data:`MAX_NGRAM` words), case-insensitively, with punctuation
around a word ignored.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.knowledge.lexicons import GRAPHS, KBERT_FILE, named_lexicons
from ptmkit.tasks.inputs import EncodedInputs, truncate_pair

log = logging.getLogger(__name__)

MAX_NGRAM = 4  # the longest surface form matched, in words
MODES = ("kbert", "plain")
_STRIP = string.punctuation + "“”‘’«»"


def normalize(word: str) -> str:
    """The lookup form of a word or phrase: lowercased, surrounding punctuation removed."""
    return " ".join(w.strip(_STRIP) for w in word.lower().split()).strip()


@dataclass
class Knowledge:
    """``surface form -> [(relation, tail)]`` in the order they are injected (the first
    ``branches`` of a mention are used)."""

    triples: dict[str, list[tuple[str, str]]]
    source: str = "triples"

    @classmethod
    def read(cls, path: str | Path) -> Knowledge:
        """A triples file: ``head<TAB>relation<TAB>tail`` per line (``#`` comments and blank lines
        skipped); a malformed line is an error naming its line number."""
        path = named_lexicons(str(path))[KBERT_FILE] if str(path) in GRAPHS else Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise PtmError(f"knowledge file {path} does not exist; give a triples file (head<TAB>relation<TAB>tail) "
                           f"or knowledge=wordnet") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PtmError(f"cannot read the knowledge file {path} ({exc}); it must be UTF-8 text") from None
        triples: dict[str, list[tuple[str, str]]] = {}
        for n, line in enumerate(lines, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3 or not all(p.strip() for p in parts):
                raise PtmError(f"{path}:{n}: expected head<TAB>relation<TAB>tail, got {line[:80]!r}")
            head, relation, tail = (p.strip() for p in parts)
            triples.setdefault(normalize(head), []).append((relation.replace("_", " "), tail))
        if not triples:
            raise PtmError(f"the knowledge file {path} holds no triple")
        return cls(triples, str(path))

    def mentions(self, words: Sequence[str]) -> list[tuple[int, int, list[tuple[str, str]]]]:
        """``(first word, last word + 1, triples)`` of each mention, longest match first, left to
        right, non-overlapping."""
        keys = [normalize(w) for w in words]
        out = []
        i = 0
        while i < len(keys):
            for n in range(min(MAX_NGRAM, len(keys) - i), 0, -1):
                found = self.triples.get(" ".join(keys[i : i + n]))
                if found:
                    out.append((i, i + n, found))
                    i += n
                    break
            else:
                i += 1
        return out


@dataclass
class Tree:
    """One flattened sentence tree: ``ids [n]``, soft ``positions [n]`` and each token's
    ``branch [n]`` (-1: the trunk) with ``anchor [n_branches, 2]`` (the token range of the
    mention a branch hangs from)."""

    ids: np.ndarray
    positions: np.ndarray
    branch: np.ndarray
    anchor: np.ndarray

    def visible(self) -> np.ndarray:
        """The visible matrix ``[n, n]`` (True: may attend): same branch (the trunk is one), or a
        branch token and a token of its mention."""
        b = self.branch
        same = b[:, None] == b[None, :]
        n = len(b)
        if not len(self.anchor):
            return same
        idx = np.arange(n)
        ab = self.anchor[np.maximum(b, 0)]  # [n, 2]: the anchor span of each token's branch
        sees_anchor = (b[:, None] >= 0) & (idx[None, :] >= ab[:, :1]) & (idx[None, :] < ab[:, 1:])  # [n, n]
        return same | sees_anchor | sees_anchor.T


def build_tree(words: list[np.ndarray], mentions: list[tuple[int, int, list[np.ndarray]]], start: int = 0,
               budget: int | None = None) -> Tree:
    """The sentence tree of ``words`` (token ids per word) with each mention's branches (token
    ids of ``relation tail``), flattened; soft positions start at ``start``.  Over ``budget``
    tokens, branches are dropped from the last mention backwards, then the sentence is cut."""
    mentions = [m for m in mentions if m[2]]
    while True:
        n = sum(len(w) for w in words) + sum(len(b) for m in mentions for b in m[2])
        if budget is None or n <= budget or not mentions:
            break
        last = mentions[-1]
        mentions = mentions[:-1] + ([(last[0], last[1], last[2][:-1])] if len(last[2]) > 1 else [])
    ids, pos, branch, anchor = [], [], [], []
    at = {m[1] - 1: m for m in mentions}  # branches follow a mention's last word
    word_start = []
    p = start
    for i, w in enumerate(words):
        word_start.append(len(ids))
        ids.extend(w)
        pos.extend(range(p, p + len(w)))
        branch.extend([-1] * len(w))
        p += len(w)
        if i in at:
            first, last, branches = at[i]
            span = (word_start[first], len(ids))
            for b in branches:
                anchor.append(span)
                ids.extend(b)
                pos.extend(range(p, p + len(b)))
                branch.extend([len(anchor) - 1] * len(b))
    tree = Tree(np.asarray(ids, np.int64), np.asarray(pos, np.int64), np.asarray(branch, np.int64),
                np.asarray(anchor, np.int64).reshape(-1, 2))
    if budget is not None and len(tree.ids) > budget:  # no branch left and still too long: cut the sentence
        tree = Tree(tree.ids[:budget], tree.positions[:budget], tree.branch[:budget], tree.anchor)
    return tree


def _after(tree: Tree, start: int) -> int:
    """The soft position after ``tree``'s sentence (its branches do not count)."""
    return int(tree.positions[tree.branch == -1].max(initial=start - 1)) + 1


def _special(tok: int, position: int) -> Tree:
    return Tree(np.array([tok], np.int64), np.array([position], np.int64), np.array([-1], np.int64),
                np.zeros((0, 2), np.int64))


def join(trees: list[Tree]) -> Tree:
    """Concatenate trees (branch ids and anchors renumbered)."""
    ids, pos, branch, anchor = [], [], [], []
    offset, n_branches = 0, 0
    for t in trees:
        ids.append(t.ids)
        pos.append(t.positions)
        branch.append(np.where(t.branch >= 0, t.branch + n_branches, -1))
        anchor.append(t.anchor + offset)
        offset += len(t.ids)
        n_branches += len(t.anchor)
    return Tree(np.concatenate(ids), np.concatenate(pos), np.concatenate(branch), np.concatenate(anchor).reshape(-1, 2))


class Injector:
    """Encodes a classification split with injected knowledge (``mode`` ``kbert`` or ``plain``),
    up to ``branches`` triples per mention, in ``max_len`` tokens with BERT's special tokens."""

    def __init__(self, knowledge: Knowledge, tokenizer, mode: str = "kbert", branches: int = 2) -> None:
        if mode not in MODES:
            raise PtmError(f"knowledge_mode must be one of {', '.join(MODES)}, got {mode!r}")
        if branches < 1:
            raise PtmError(f"knowledge_branches must be >= 1, got {branches}")
        self.knowledge, self.tokenizer, self.mode, self.branches = knowledge, tokenizer, mode, branches
        self.mentions_found = 0

    def _tree_parts(self, text: str) -> tuple[list[np.ndarray], list[tuple[int, int, list[np.ndarray]]]]:
        words = text.split()
        found = self.knowledge.mentions(words)
        self.mentions_found += len(found)
        pieces = [f"{rel} {tail}" for _, _, triples in found for rel, tail in triples[: self.branches]]
        encoded = self.tokenizer.encode_batch(words + pieces) if words or pieces else []
        word_ids = [np.asarray(e, np.int64) for e in encoded[: len(words)]]
        branch_ids = iter(np.asarray(e, np.int64) for e in encoded[len(words):])
        mentions = [(a, b, [next(branch_ids) for _ in triples[: self.branches]]) for a, b, triples in found]
        return word_ids, mentions

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None, max_len: int) -> EncodedInputs:
        """``[CLS] tree(a) [SEP] (tree(b) [SEP])`` per example; soft positions run on across the
        pair; token types 0 up to the first ``[SEP]``, then 1."""
        cls_id, sep_id = self.tokenizer.cls_id, self.tokenizer.sep_id
        budget = max_len - (3 if pairs is not None else 2)
        if budget < 1 + (pairs is not None):
            raise PtmError(f"max_seq_len={max_len} leaves no room for text after the special tokens")
        ids, types, positions, visible = [], [], [], []
        self.mentions_found = 0
        for i, text in enumerate(texts):
            a_words, a_mentions = self._tree_parts(text)
            if pairs is None:
                a = build_tree(a_words, a_mentions, 1, budget)
                parts = [_special(cls_id, 0), a, _special(sep_id, _after(a, 1))]
                first = len(a.ids) + 2
            else:
                b_words, b_mentions = self._tree_parts(pairs[i])
                la = sum(len(w) for w in a_words) + sum(len(x) for m in a_mentions for x in m[2])
                lb = sum(len(w) for w in b_words) + sum(len(x) for m in b_mentions for x in m[2])
                ka, kb = truncate_pair(la, lb, budget)
                a = build_tree(a_words, a_mentions, 1, ka)
                sep_a = _after(a, 1)
                b = build_tree(b_words, b_mentions, sep_a + 1, kb)
                parts = [_special(cls_id, 0), a, _special(sep_id, sep_a), b,
                         _special(sep_id, _after(b, sep_a + 1))]
                first = len(a.ids) + 2
            tree = join(parts)
            ids.append(tree.ids)
            t = np.zeros(len(tree.ids), np.int64)
            t[first:] = 1
            types.append(t)
            if self.mode == "kbert":
                positions.append(tree.positions)
                visible.append(tree.visible())
        if self.mentions_found == 0 and len(texts):
            log.warning("the knowledge (%s) matched no word of %d texts, nothing injected: are its surface forms "
                        "words of the task's language and case?", self.knowledge.source, len(texts))
        kbert = self.mode == "kbert"
        return EncodedInputs(ids, types, positions=positions if kbert else None, visible=visible if kbert else None)


__all__ = ["Injector", "Knowledge", "MAX_NGRAM", "MODES", "Tree", "build_tree", "join", "normalize"]
