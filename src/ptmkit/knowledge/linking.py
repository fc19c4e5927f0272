"""Entity linking: word spans of a text -> candidate entities of a :class:`KnowledgeGraph`.

The linker of knowledge-enhanced PTMs in its simplest, deterministic form (KnowBert's and
ERNIE-THU's candidate generators are dictionary matches too): at each word, the longest surface
form that starts there wins ("hot dog" before "hot"), spans are taken left to right without
overlap (maximal munch), and a span's candidates come in prior order, so the first is the most
frequent sense.  The last word of a span may be inflected: ``hot dogs``, ``mice``, ``doing``
match ``hot dog``, ``mouse``, ``do`` through the graph's exception lists (WordNet's ``noun.exc``
...) and then WordNet's ``morphy`` detachment rules, each base checked against the rule's part of
speech (:mod:`ptmkit.knowledge.morphy`: ``doing`` is not the noun ``doe``); the words before it
must match exactly (lower-cased), as multi-word lemmas inflect at their head.  A word that is a
lemma itself as well as an inflection (``making``, ``running``, ``lying``, ``saw``) is read as its
base when the base's prior count is more than :data:`INFLECTIONS` times its own: the base's count
pools all its inflected forms, and the gerund ``making`` (7 tags in WordNet's counts) is mostly
the verb ``make`` (508 for its first sense alone), while ``building`` (48) stays a building
rather than ``build`` (123).

A word of :data:`STOP_WORDS`, English function words, is not linked *alone*: WordNet names ``a``
(ångström, vitamin A), ``in`` (inch), ``it`` (information technology), ``i`` (iodine), ``be``
(beryllium), ``who`` (World Health Organization) and ``us`` (United States), so without the list
nearly every sentence links its articles, pronouns and prepositions to these.  A multi-word
surface holding such a word still links (``a cappella``, ``in vitro``, ``give up``).  The list is
the one ERNIE's alignment leaves out too, :data:`ptmkit.knowledge.stopwords.FUNCTION_WORDS`
(determiners, pronouns, prepositions, conjunctions, auxiliaries and modals, a few adverbs, the
clitics of split contractions).  Since linking ignores case, ``US`` and ``IT`` are not linked
alone either, nor the main verbs *have* and *do* or the nouns *can*, *will* and *mine*.
``Linker(graph, stop_words=())`` links every word, as before the list; any other collection of
lower-cased words replaces it.

It is vectorised for corpora of millions of words: per chunk, the distinct word types are looked
up once (a Python loop over *types*, cached across chunks, which also flags the stop list's
words), tokens become graph-word ids with one ``np.unique`` (the flags one boolean mask, which
only one-word matches obey), each n-gram length's keys are computed for every position at once (a
polynomial hash of the word ids, exact up to three words, 64-bit beyond) and found with
``np.searchsorted`` in that length's sorted surface keys; only the left-to-right choice among
overlapping matches is sequential, a numba loop.  :func:`link_corpus` streams a text file or a
prepared corpus chunk by chunk, so memory is bounded by the chunk and the output (four bytes a
word).  Measured on 2.05M words of the Penn Treebank and Brown text: see
``benchmarks/bench_entity_linking.py`` and ``docs/knowledge.md``.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from ptmkit import fileio
from ptmkit.data.corpus import Corpus
from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import KnowledgeGraph
from ptmkit.knowledge.morphy import RULES, base_forms, lemma_parts, ranked_bases  # RULES, base_forms: re-exported
from ptmkit.knowledge.stopwords import FUNCTION_WORDS
from ptmkit.tokenization import Tokenizer

log = logging.getLogger(__name__)

# A base's prior count pools about this many forms (a verb's base, -s, -ed and -ing): a word
# that is a lemma itself is read as its base only when the base's count is more than this many
# times its own.
INFLECTIONS = 4
STOP_WORDS = FUNCTION_WORDS  # the default of Linker(stop_words=...): not linked as one-word spans
PRIME = np.uint64(1_000_003)  # > any graph vocabulary here, so keys of up to 3 words are exact
CHUNK_WORDS = 1 << 18  # words per chunk: about 40 MB of fixed-width words with WordNet's width


@dataclass
class Links:
    """Linked spans of one word sequence: ``starts``/``ends`` int64 ``[M]`` (word offsets, end
    exclusive), ``surfaces`` int64 ``[M]`` (surface ids of the graph)."""

    starts: np.ndarray
    ends: np.ndarray
    surfaces: np.ndarray
    graph: KnowledgeGraph

    def __len__(self) -> int:
        return len(self.starts)

    def candidates(self, k: int) -> np.ndarray:
        """Entity ids of span ``k`` (int32, most frequent sense first)."""
        return self.graph.candidates(int(self.surfaces[k]))

    def entity_per_word(self, n_words: int) -> np.ndarray:
        """int32 ``[n_words]``: the first candidate of the span covering each word, ``-1`` elsewhere."""
        out = np.full(n_words, -1, dtype=np.int32)
        first = self.graph.first_candidate(self.surfaces)
        lengths = self.ends - self.starts
        where = np.repeat(self.starts - np.cumsum(np.concatenate([[0], lengths[:-1]])), lengths) + np.arange(lengths.sum())
        out[where] = np.repeat(first, lengths)
        return out


@numba.njit(cache=True)
def _maximal_munch(longest: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``longest`` int32 [T] (0 = no match at t) -> bool [T]: spans chosen left to right, no overlap."""
    chosen = np.zeros(longest.shape[0], dtype=np.bool_)
    t = 0
    while t < longest.shape[0]:
        if longest[t] > 0:
            chosen[t] = True
            t += longest[t]
        else:
            t += 1
    return chosen


class Linker:
    """A graph's surface forms prepared for matching: its word vocabulary and, per span length
    ``n``, the sorted keys of its ``n``-word surfaces with their surface ids.  ``stop_words``: words
    never linked as a one-word span (default :data:`STOP_WORDS`; ``()`` links every word)."""

    def __init__(self, graph: KnowledgeGraph, stop_words: Iterable[str] = STOP_WORDS) -> None:
        self.graph = graph
        self.stop_words = frozenset(w.lower() for w in stop_words)
        split = [s.split(" ") for s in graph.surfaces]
        self.vocab: dict[str, int] = {}
        for words in split:
            for w in words:
                self.vocab.setdefault(w, len(self.vocab))
        if len(self.vocab) >= int(PRIME):
            raise PtmError(f"the graph's surfaces use {len(self.vocab)} distinct words; linking keys hold at most {int(PRIME) - 1}")
        self.max_len = max((len(w) for w in split), default=0)
        self.tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        lengths = np.array([len(w) for w in split], dtype=np.int64)
        for n in range(1, self.max_len + 1):
            ids = np.nonzero(lengths == n)[0]
            if not len(ids):
                continue
            words = np.array([[self.vocab[w] for w in split[i]] for i in ids], dtype=np.int64).reshape(-1, n)
            keys = self._keys(words)
            order = np.argsort(keys, kind="stable")
            if len(np.unique(keys)) != len(keys):
                raise PtmError(f"two {n}-word surface forms of the graph share a linking key; report this graph")
            self.tables[n] = (keys[order], ids[order])
        # word type -> (graph word id, base-form id, stop, the base wins over the word itself), -1 = none
        self._types: dict[str, tuple[int, int, int, int]] = {}
        self.single = set(s for s in graph.surfaces if " " not in s)
        self.lemmas = lemma_parts(graph)  # one-word surface -> {part of speech: prior count}
        # Words are held in fixed-width arrays of this width: a longer word is cut to it and can
        # match nothing (a rule strips at most 4 characters and adds at most 2, so no base form of
        # a word this long is as short as the longest graph word), and one long token cannot
        # widen the whole chunk's array.
        self.width = max([len(w) for w in self.vocab] + [len(w) for w in graph.exceptions] + [0]) + 6

    @staticmethod
    def _keys(words: np.ndarray) -> np.ndarray:
        """int64 ``[K, n]`` graph-word ids -> uint64 ``[K]`` keys (polynomial in ``PRIME``, wrapping)."""
        key = np.zeros(len(words), dtype=np.uint64)
        for j in range(words.shape[1]):
            key = key * PRIME + (words[:, j].astype(np.uint64) + np.uint64(1))
        return key

    def _type_ids(self, word: str) -> tuple[int, int, int, int]:
        hit = self._types.get(word)
        if hit is None and len(word) >= self.width:
            return -1, -1, 0, 0  # cut to the width: longer than any word a graph word can come from
        if hit is None:
            exact = self.vocab.get(word, -1)
            base, wins = -1, 0
            found = [(b, c) for b, c in ranked_bases(word, self.graph.exceptions, self.lemmas)
                     if b in self.vocab and b != word]
            preferred = [(b, c) for b, c in found if b in self.single]  # a base that is itself a surface
            if found:
                name, count = (preferred or found)[0]
                base = self.vocab[name]
                # a word that is a lemma too (making, lying): the base wins when it is far more frequent
                own = sum(self.lemmas.get(word, {}).values())
                wins = int(word in self.single and bool(preferred) and count > INFLECTIONS * own)
            hit = self._types[word] = (exact, base, int(word in self.stop_words), wins)
        return hit

    def word_ids(self, words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Lower-cased words (str array ``[T]``) -> ``(exact, base, stop, base_wins)``: int64 ``[T]``
        graph-word ids, bool ``[T]`` the words of the stop list and bool ``[T]`` the words read
        as their base rather than as themselves."""
        types, inverse = np.unique(words, return_inverse=True)
        return self.type_ids(types, inverse)

    def type_ids(self, types: Iterable[str], inverse: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Distinct lower-cased words ``[U]`` and each word's index among them ``[T]`` -> ``(exact,
        base, stop, base_wins)`` as :meth:`word_ids` (the lookups are per distinct word)."""
        table = np.array([self._type_ids(str(w)) for w in types], dtype=np.int64).reshape(-1, 4)
        return table[inverse, 0], table[inverse, 1], table[inverse, 2].astype(bool), table[inverse, 3].astype(bool)

    def link_ids(self, exact: np.ndarray, base: np.ndarray, segment: np.ndarray | None = None,
                 stop: np.ndarray | None = None, base_wins: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Spans over graph-word ids ``[T]`` (``segment [T]``: spans never cross a change of it,
        e.g. a line; ``stop`` bool ``[T]``: words never linked as a one-word span; ``base_wins``
        bool ``[T]``: a span ending there prefers the word's base to the word itself, which
        otherwise wins) -> ``(starts [M], lengths [M], surfaces [M])`` as int64 arrays."""
        if base_wins is not None:  # the reading tried last wins a tie: put the preferred one there
            base, last_exact = np.where(base_wins, exact, base), np.where(base_wins, base, exact)
        else:
            last_exact = exact
        t_len = len(exact)
        longest = np.zeros(t_len, dtype=np.int32)
        surface = np.full(t_len, -1, dtype=np.int64)
        prefix = np.zeros(t_len, dtype=np.uint64)  # key of the exact words t .. t+n-2
        prefix_ok = np.ones(t_len, dtype=bool)
        for n in range(1, self.max_len + 1):
            m = t_len - n + 1
            if m <= 0:
                break
            last = np.arange(n - 1, t_len)
            ok = prefix_ok[:m]
            if segment is not None and n > 1:
                ok = ok & (segment[:m] == segment[n - 1 :])
            if stop is not None and n == 1:
                ok = ok & ~stop
            if n in self.tables:
                keys, ids = self.tables[n]
                for last_ids in (base[last], last_exact[last]):  # written last, so it wins a tie
                    valid = ok & (last_ids >= 0)
                    key = prefix[:m] * PRIME + (last_ids.astype(np.uint64) + np.uint64(1))
                    pos = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
                    hit = np.nonzero(valid & (keys[pos] == key))[0]
                    longest[hit] = n  # longer n comes later and overwrites
                    surface[hit] = ids[pos[hit]]
            # extend the exact prefix by the word at t+n-1 for the next length
            prefix = prefix[:m] * PRIME + (np.maximum(exact[last], 0).astype(np.uint64) + np.uint64(1))
            prefix_ok = prefix_ok[:m] & (exact[last] >= 0)
            if segment is not None and n > 1:
                prefix_ok &= segment[:m] == segment[n - 1 :]
        starts = np.nonzero(_maximal_munch(longest))[0]
        return starts, longest[starts].astype(np.int64), surface[starts]

    def link(self, words: Iterable[str], segment: np.ndarray | None = None) -> Links:
        """Link a word sequence (any case); see the module docstring."""
        arr = np.array([w.lower() for w in words], dtype=f"<U{self.width}")
        return self.link_typed(*np.unique(arr, return_inverse=True), segment)

    def link_typed(self, types: Iterable[str], inverse: np.ndarray, segment: np.ndarray | None = None) -> Links:
        """Link words given as distinct lower-cased words and each word's index among them."""
        if not len(inverse):
            empty = np.zeros(0, dtype=np.int64)
            return Links(empty, empty, empty, self.graph)
        exact, base, stop, base_wins = self.type_ids(types, inverse)
        starts, lengths, surfaces = self.link_ids(exact, base, segment, stop, base_wins)
        return Links(starts, starts + lengths, surfaces, self.graph)


def link(words: Iterable[str], graph: KnowledgeGraph | Linker) -> Links:
    """Candidate entities per word span of ``words`` (longest surface first, most frequent sense
    first, no function word alone); build a :class:`Linker` once and pass it for repeated calls
    (or to choose its ``stop_words``)."""
    linker = graph if isinstance(graph, Linker) else Linker(graph)
    return linker.link(words)


@dataclass
class CorpusLinks:
    """``entities``: int32 ``[n_words]``, the most frequent sense of the span covering each word
    (``-1``: none); ``spans``: spans linked; ``linked_words``: words inside a span; ``warnings``:
    how many chunks linked nothing (a graph whose surface forms do not fit the text)."""

    entities: np.ndarray
    spans: int
    linked_words: int
    warnings: int

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``entities`` as a ``.npy`` file (atomically, through :mod:`ptmkit.fileio`)."""
        buf = io.BytesIO()
        np.save(buf, self.entities, allow_pickle=False)
        return fileio.atomic_write_bytes(path, buf.getvalue())


def _text_chunks(path: Path, chunk_words: int) -> Iterator[tuple[list[str], list[int]]]:
    """``(words, line lengths)`` of a text file (lower-cased), about ``chunk_words`` words at a time."""
    words: list[str] = []
    lengths: list[int] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.lower().split()
            words.extend(parts)
            lengths.append(len(parts))
            if len(words) >= chunk_words:
                yield words, lengths
                words, lengths = [], []
    if words:
        yield words, lengths


def _corpus_chunks(path: Path, chunk_words: int) -> Iterator[tuple[list[str], np.ndarray, np.ndarray]]:
    """``(distinct words, each word's index among them, sentence lengths in words)`` of a prepared
    corpus: each distinct token sequence decoded once (a word's ids hashed with ``np.add.reduceat``),
    no string made per word."""
    corpus = Corpus.open(path)
    if corpus.word_starts is None:
        raise PtmError(f"{path} was prepared before word starts were recorded; prepare it again with `ptm prepare`")
    tokenizer = Tokenizer.load(Path(path) / "tokenizer.json")
    sentences = np.asarray(corpus.sentences)
    s = 0
    while s < len(sentences) - 1:
        e = int(np.searchsorted(sentences, sentences[s] + 4 * chunk_words, side="right")) - 1
        e = max(e, s + 1)
        lo, hi = int(sentences[s]), int(sentences[e])
        ids = np.asarray(corpus.tokens[lo:hi], dtype=np.int64)
        starts_mask = np.asarray(corpus.word_starts[lo:hi], dtype=bool)
        bounds = sentences[s : e + 1] - lo
        starts_mask[bounds[:-1][bounds[:-1] < len(ids)]] = True  # a sentence starts a word
        word_start = np.nonzero(starts_mask)[0]
        pos = np.arange(len(ids)) - np.repeat(word_start, np.diff(np.append(word_start, len(ids))))
        term = (ids.astype(np.uint64) + np.uint64(1)) * (PRIME ** pos.astype(np.uint64))
        keys = np.add.reduceat(term, word_start) if len(word_start) else np.zeros(0, dtype=np.uint64)
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        ends = np.append(word_start[1:], len(ids))
        texts = [tokenizer.decode(ids[word_start[i] : ends[i]].tolist()).strip().lower() for i in first]
        yield texts, inverse, np.diff(np.searchsorted(word_start, bounds))
        s = e


def link_corpus(source: str | os.PathLike | Iterable[str], graph: KnowledgeGraph | Linker,
                chunk_words: int = CHUNK_WORDS) -> CorpusLinks:
    """Link every word of a text file (whitespace words, spans within a line), a prepared corpus
    directory (its words decoded; spans within a sentence) or an iterable of lines; returns
    per-word entity ids aligned with the words.  A graph is linked with the default stop list;
    pass a :class:`Linker` to choose another.  Memory: one chunk plus four bytes a word."""
    linker = graph if isinstance(graph, Linker) else Linker(graph)
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        chunks = _corpus_chunks(Path(source), chunk_words)
    else:
        if isinstance(source, (str, os.PathLike)):
            if not Path(source).is_file():
                raise PtmError(f"{source} not found: give a text file or a corpus prepared by `ptm prepare`")
            texts = _text_chunks(Path(source), chunk_words)
        else:
            lines = [str(line).lower().split() for line in source]
            texts = iter([([w for ws in lines for w in ws], [len(ws) for ws in lines])])
        chunks = (np.unique(np.array(words, dtype=f"<U{linker.width}"), return_inverse=True) + (np.asarray(lengths),)
                  for words, lengths in texts)
    parts, spans, linked, empty = [], 0, 0, 0
    for types, inverse, lengths in chunks:
        segment = np.repeat(np.arange(len(lengths)), lengths)
        result = linker.link_typed(types, inverse, segment)
        parts.append(result.entity_per_word(len(inverse)))
        spans += len(result)
        linked += int((result.ends - result.starts).sum())
        empty += len(result) == 0 and len(inverse) > 0
    if empty:
        log.warning("the graph's surface forms matched nothing in %d chunk(s) of the text: are the graph and "
                    "the text in one language, tokenised alike?", empty)
    entities = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return CorpusLinks(entities, spans, linked, empty)


__all__ = ["INFLECTIONS", "RULES", "STOP_WORDS", "CorpusLinks", "Linker", "Links", "base_forms", "link", "link_corpus"]
