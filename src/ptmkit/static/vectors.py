"""``WordVectors``: a vocabulary with one vector per word, similarity queries and intrinsic evaluation.

Similarities are cosines computed with one matrix product against the L2-normalised matrix
(cached on first use).  Query semantics and the evaluation protocols follow gensim's
``KeyedVectors`` (``most_similar``, ``most_similar_cosmul``, ``evaluate_word_pairs``,
``evaluate_word_analogies``), so results can be compared number for number.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from ptmkit.errors import PtmError, require_file, suggest
from ptmkit.interop import word2vec_format as w2vf


class UnknownWordError(PtmError, KeyError):
    """A query word is not in the vocabulary."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class WordVectors:
    """Word vectors.

    words: list[str], [V] (index order = row order; frequency order when trained here).
    vectors: float32 [V, D].  counts: optional int64 [V] corpus counts.
    """

    def __init__(self, words: Sequence[str], vectors: np.ndarray, counts: np.ndarray | None = None) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise PtmError(f"{len(words)} words but vectors of shape {tuple(vectors.shape)}")
        self.words = list(words)
        self.vectors = vectors
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)
        self.key_to_index = {w: i for i, w in enumerate(self.words)}
        if len(self.key_to_index) != len(self.words):
            raise PtmError("the vocabulary has duplicate words")
        self._normed: np.ndarray | None = None

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.key_to_index

    def __getitem__(self, word: str) -> np.ndarray:
        return self.vectors[self.index(word)]

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def index(self, word: str) -> int:
        """Row of ``word``; raises :class:`UnknownWordError` (a PtmError and KeyError)."""
        i = self.key_to_index.get(word)
        if i is None:
            hint = suggest(word, self.words[:50_000]) if len(self.words) else ""
            raise UnknownWordError(f"word {word!r} is not in the vocabulary of {len(self)} words{hint}")
        return i

    @property
    def normed(self) -> np.ndarray:
        """float32 [V, D] unit-length rows (computed once)."""
        if self._normed is None:
            self._normed = _unit_rows(self.vectors)
        return self._normed

    # ------------------------------------------------------------------ queries

    def similarity(self, w1: str, w2: str) -> float:
        """Cosine similarity of two words."""
        return float(self.normed[self.index(w1)] @ self.normed[self.index(w2)])

    def _rank(self, scores: np.ndarray, exclude: Iterable[int], topn: int) -> list[tuple[str, float]]:
        scores = scores.copy()
        ex = np.fromiter(exclude, dtype=np.int64)
        ex = ex[ex < scores.shape[0]]
        scores[ex] = -np.inf
        k = min(topn, scores.shape[0] - ex.size)
        if k <= 0:
            return []
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in best]

    @staticmethod
    def _listify(x: str | Sequence[str] | None) -> list[str]:
        if x is None:
            return []
        return [x] if isinstance(x, str) else list(x)

    def most_similar(
        self,
        positive: str | Sequence[str] | None = None,
        negative: str | Sequence[str] | None = None,
        topn: int = 10,
        restrict_vocab: int | None = None,
    ) -> list[tuple[str, float]]:
        """Words closest (cosine) to the normalised mean of +unit(positive) and -unit(negative).

        The query words themselves are excluded; ``restrict_vocab`` searches the first N rows only.
        """
        pos, neg = self._listify(positive), self._listify(negative)
        if not pos and not neg:
            raise PtmError("most_similar needs at least one positive or negative word")
        idx = [self.index(w) for w in pos + neg]
        weights = np.array([1.0] * len(pos) + [-1.0] * len(neg), dtype=np.float32)
        query = _unit_rows((weights[:, None] * self.normed[idx]).mean(axis=0))
        limit = len(self) if restrict_vocab is None else int(restrict_vocab)
        scores = self.normed[:limit] @ query
        return self._rank(scores, idx, topn)

    def most_similar_cosmul(
        self,
        positive: str | Sequence[str] | None = None,
        negative: str | Sequence[str] | None = None,
        topn: int = 10,
        restrict_vocab: int | None = None,
    ) -> list[tuple[str, float]]:
        """3CosMul (Levy & Goldberg 2014): prod((1+cos)/2 of positives) / (prod(... negatives) + 1e-6)."""
        pos, neg = self._listify(positive), self._listify(negative)
        if not pos and not neg:
            raise PtmError("most_similar_cosmul needs at least one positive or negative word")
        limit = len(self) if restrict_vocab is None else int(restrict_vocab)
        m = self.normed[:limit]
        pi = [self.index(w) for w in pos]
        ni = [self.index(w) for w in neg]
        pos_s = (1.0 + m @ self.normed[pi].T) / 2.0 if pi else np.ones((limit, 1), np.float32)
        neg_s = (1.0 + m @ self.normed[ni].T) / 2.0 if ni else np.ones((limit, 1), np.float32)
        scores = pos_s.prod(axis=1) / (neg_s.prod(axis=1) + 1e-6)
        return self._rank(scores, pi + ni, topn)

    def analogy(self, a: str, b: str, c: str, method: str = "3cosadd", topn: int = 1, restrict_vocab: int | None = None):
        """a : b :: c : ?  (e.g. man : king :: woman : queen) -> [(word, score)] * topn."""
        if method == "3cosadd":
            return self.most_similar(positive=[b, c], negative=[a], topn=topn, restrict_vocab=restrict_vocab)
        if method == "3cosmul":
            return self.most_similar_cosmul(positive=[b, c], negative=[a], topn=topn, restrict_vocab=restrict_vocab)
        raise PtmError(f"unknown analogy method {method!r}; use '3cosadd' or '3cosmul'")

    # ------------------------------------------------------------------ evaluation

    def _ok_vocab(self, restrict_vocab: int | None, case_insensitive: bool) -> dict[str, int]:
        """Searchable words -> row; upper-cased keys map to the most frequent casing (as gensim)."""
        limit = len(self) if restrict_vocab is None else min(int(restrict_vocab), len(self))
        keys = self.words[:limit]
        if case_insensitive:
            return {w.upper(): i for i, w in reversed(list(enumerate(keys)))}
        return {w: i for i, w in enumerate(keys)}

    def evaluate_pairs(
        self,
        pairs: str | os.PathLike | Sequence[tuple[str, str, float]],
        restrict_vocab: int = 300_000,
        case_insensitive: bool = True,
        delimiter: str = "\t",
    ) -> dict:
        """Word-similarity benchmark (WordSim-353, SimLex-999 ...): correlation of cosines with gold scores.

        ``pairs``: a file of ``w1<TAB>w2<TAB>score`` lines (``#`` comments and unparsable lines skipped,
        as gensim) or a list of triples.  Pairs with a word outside the first ``restrict_vocab`` words
        are counted in ``n_oov`` and left out.  -> {spearman, pearson, n_pairs, n_oov, oov_ratio}.
        """
        triples = read_pairs(pairs, delimiter) if isinstance(pairs, (str, os.PathLike)) else list(pairs)
        ok = self._ok_vocab(restrict_vocab, case_insensitive)
        gold, a_idx, b_idx, oov = [], [], [], 0
        for a, b, score in triples:
            if case_insensitive:
                a, b = a.upper(), b.upper()
            if a not in ok or b not in ok:
                oov += 1
                continue
            gold.append(float(score))
            a_idx.append(ok[a])
            b_idx.append(ok[b])
        n = len(gold)
        result = {"n_pairs": n, "n_oov": oov, "oov_ratio": oov / max(1, n + oov)}
        if n < 2:
            raise PtmError(f"only {n} word pairs have both words in the vocabulary ({oov} out of vocabulary)")
        model = np.einsum("ij,ij->i", self.normed[a_idx], self.normed[b_idx])
        result["spearman"] = float(stats.spearmanr(gold, model).statistic)
        result["pearson"] = float(stats.pearsonr(gold, model).statistic)
        return result

    def evaluate_analogies(
        self,
        path: str | os.PathLike,
        restrict_vocab: int = 30_000,
        method: str = "3cosadd",
        case_insensitive: bool = True,
        batch_size: int = 1024,
    ) -> dict:
        """Analogy accuracy on a ``questions-words.txt``-style file (``: section`` headers, ``a b c d`` lines).

        Same protocol as gensim's ``evaluate_word_analogies``: questions with a word outside the first
        ``restrict_vocab`` words are skipped (``n_oov``); the answer is the best of the top 5 candidates
        (query rows excluded) whose upper-cased form is not one of a, b, c.
        -> {accuracy, correct, n_questions (answered), n_oov, sections: {name: {accuracy, correct, total}}}.
        """
        if method not in ("3cosadd", "3cosmul"):
            raise PtmError(f"unknown analogy method {method!r}; use '3cosadd' or '3cosmul'")
        sections = read_analogies(path)
        ok = self._ok_vocab(restrict_vocab, case_insensitive)
        limit = len(self) if restrict_vocab is None else min(int(restrict_vocab), len(self))
        m = self.normed[:limit]
        out_sections: dict[str, dict] = {}
        total_correct = total = n_oov = 0
        for name, questions in sections:
            quads = []
            for q in questions:
                q = [w.upper() for w in q] if case_insensitive else q
                if all(w in ok for w in q):
                    quads.append(q)
                else:
                    n_oov += 1
            correct = 0
            for s in range(0, len(quads), batch_size):
                batch = quads[s : s + batch_size]
                ia = np.array([ok[q[0]] for q in batch])
                ib = np.array([ok[q[1]] for q in batch])
                ic = np.array([ok[q[2]] for q in batch])
                if method == "3cosadd":
                    query = _unit_rows((m[ib] + m[ic] - m[ia]) / 3.0)
                    scores = query @ m.T  # [B, limit]
                else:
                    scores = ((1 + m[ib] @ m.T) / 2) * ((1 + m[ic] @ m.T) / 2) / ((1 + m[ia] @ m.T) / 2 + 1e-6)
                rows = np.arange(len(batch))
                for col in (ia, ib, ic):
                    scores[rows, col] = -np.inf
                top = np.argpartition(-scores, 5, axis=1)[:, :5] if limit > 5 else np.argsort(-scores, axis=1)
                top_scores = np.take_along_axis(scores, top, axis=1)
                top = np.take_along_axis(top, np.argsort(-top_scores, axis=1, kind="stable"), axis=1)
                for q, cand in zip(batch, top):
                    ignore = set(q[:3])
                    predicted = None
                    for i in cand:
                        predicted = self.words[i].upper() if case_insensitive else self.words[i]
                        if predicted not in ignore:
                            break
                    correct += predicted == q[3]
            out_sections[name] = {"correct": correct, "total": len(quads), "accuracy": correct / max(1, len(quads))}
            total_correct += correct
            total += len(quads)
        if total == 0:
            raise PtmError(f"no analogy question of {path} has all four words in the first {limit} words")
        return {
            "accuracy": total_correct / total,
            "correct": total_correct,
            "n_questions": total,
            "n_oov": n_oov,
            "oov_ratio": n_oov / (total + n_oov),
            "sections": out_sections,
        }

    # ------------------------------------------------------------------ files

    def save(self, path: str | os.PathLike, format: str = "word2vec-binary", overwrite: bool = False) -> None:
        """Write ``word2vec-binary`` (default), ``word2vec`` (text) or ``glove`` format."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise PtmError(f"{path} exists; pass overwrite=True or choose another path")
        if format == "word2vec-binary":
            w2vf.write_word2vec(path, self.words, self.vectors, binary=True)
        elif format == "word2vec":
            w2vf.write_word2vec(path, self.words, self.vectors, binary=False)
        elif format == "glove":
            w2vf.write_glove(path, self.words, self.vectors)
        else:
            raise PtmError(f"unknown vectors format {format!r}; use one of {', '.join(w2vf.FORMATS)}")

    @classmethod
    def load(cls, path: str | os.PathLike, format: str = "auto", skip_nonfinite: bool = False) -> "WordVectors":
        """Read a word2vec (text or binary) or GloVe file; ``format="auto"`` detects which.  A vector
        holding a NaN or an infinity is an error naming the file and the word, or with
        ``skip_nonfinite`` that word is left out (with a warning)."""
        words, vectors = w2vf.read_vectors(path, format, skip_nonfinite=skip_nonfinite)
        return cls(words, vectors)


def _read_text(path: Path, what: str) -> str:
    require_file(path, what)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PtmError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_pairs(path: str | os.PathLike, delimiter: str = "\t") -> list[tuple[str, str, float]]:
    """``(word1, word2, score)`` triples of a word-similarity file.  ``#`` comments, blank lines and
    one header line are skipped; any other line that is not two words and a number is an error
    naming the file and line (skipping it would quietly score a different benchmark)."""
    path = Path(path)
    out: list[tuple[str, str, float]] = []
    header_skipped = False
    for n, line in enumerate(_read_text(path, "word-pair file").splitlines(), 1):
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split(delimiter)
        if len(parts) != 3:
            parts = line.split()
        try:
            a, b, score = parts
            out.append((a, b, float(score)))
        except ValueError:
            if not out and not header_skipped:
                header_skipped = True  # a header line such as "word1 word2 score"
                continue
            raise PtmError(
                f"word-pair file {path}, line {n}: expected 'word1<TAB>word2<TAB>score' with a numeric score, "
                f"got {line[:80]!r}; fix or remove that line"
            ) from None
    if not out:
        raise PtmError(f"word-pair file {path} holds no 'word1<TAB>word2<TAB>score' lines")
    return out


def read_analogies(path: str | os.PathLike) -> list[tuple[str, list[list[str]]]]:
    """``[(section, [[a, b, c, d], ...]), ...]`` of a ``questions-words.txt``-style file."""
    path = Path(path)
    sections: list[tuple[str, list[list[str]]]] = []
    for n, line in enumerate(_read_text(path, "analogy file").splitlines(), 1):
        if line.startswith(": "):
            sections.append((line[2:].strip(), []))
        elif line.strip():
            words = line.split()
            if len(words) != 4 or not sections:
                raise PtmError(
                    f"analogy file {path}, line {n}: expected ': section' or four words 'a b c d', got {line[:80]!r}"
                )
            sections[-1][1].append(words)
    if not sections:
        raise PtmError(f"analogy file {path} holds no analogy sections (': name' lines)")
    return sections
