"""Word alignment: links between the words of a sentence and of its translation, from a similarity
matrix (SimAlign's Argmax and IterMax) or from IBM Model 1, and their scores against gold links.

An alignment of a sentence pair (``m`` source words, ``n`` target words) is a set of links
``(i, j)``: source word ``i`` with target word ``j``, both 0-based.

- :func:`argmax_align` (Jalili Sabet et al. 2020, "SimAlign"): ``(i, j)`` is a link when ``j`` is the
  most similar target word of ``i`` and ``i`` the most similar source word of ``j`` (the intersection
  of the two directions' argmaxes).
- :func:`itermax_align` (ibid., Algorithm 1 "IterMax"): Argmax, then up to ``max_iter - 1`` more
  rounds of Argmax on the similarities reweighted by what is aligned so far: a pair whose two words
  are both aligned already gets weight 0, a pair with one aligned word ``alpha``, a pair of two
  unaligned words 1; the new mutual argmaxes join the alignment (pairs of weight 0 never do).  The
  similarities are taken to be non-negative (cosines of contextual embeddings nearly always are).
  This is the algorithm as the paper states it; SimAlign's code also returns Argmax alone for a
  sentence of at most two words and adds nothing once every word of one side is aligned.
- :func:`ibm_model1` (Brown et al. 1993): ``t(f | e)``, the probability that source word ``e`` (or
  the empty word NULL) is translated as target word ``f``, fitted by EM from a uniform start.  Each
  iteration is a few ``np.bincount`` over the flattened array of every (target token, source
  position) pair of the corpus (``sum_k m_k (l_k + 1)`` entries), no Python loop over words.
  :func:`ibm1_align_all` links each target word to its most probable source position (NULL: no
  link); :func:`symmetrize` joins two directions (intersection, union, grow-diag of Koehn et al. 2003).
- :func:`alignment_scores` (Och & Ney 2003): with sure links ``S`` and possible links ``P ⊇ S``,
  precision ``|A∩P|/|A|``, recall ``|A∩S|/|S|``, ``AER = 1 - (|A∩S| + |A∩P|)/(|A| + |S|)``, each
  count summed over the corpus before dividing.
- :func:`ibm1_baseline` trains both directions on a corpus's text (the test verses' included, as
  unsupervised aligners are) and scores the test links; :func:`dataset_baseline` runs it on a
  ``bible-greek-alignments`` directory (Greek source, English target).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ptmkit.errors import PtmError

Links = set[tuple[int, int]]
NULL = "<NULL>"  # the empty source word of IBM Model 1: id 0 of every source vocabulary


# ---- alignment from a similarity matrix ----------------------------------------------------------

def _similarity(sim: np.ndarray) -> np.ndarray:
    sim = np.asarray(sim, dtype=np.float64)
    if sim.ndim != 2:
        raise PtmError(f"a similarity matrix is [source words, target words]; got shape {sim.shape}")
    return sim


def _mutual_argmax(sim: np.ndarray) -> np.ndarray:
    """``bool [m, n]``: True where the entry is the maximum of its row and of its column (the first
    maximum where there are ties)."""
    mask = np.zeros(sim.shape, dtype=bool)
    if sim.size == 0:
        return mask
    best_j = sim.argmax(axis=1)  # [m]
    best_i = sim.argmax(axis=0)  # [n]
    rows = np.flatnonzero(best_i[best_j] == np.arange(sim.shape[0]))
    mask[rows, best_j[rows]] = True
    return mask


def _links(mask: np.ndarray) -> Links:
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(mask))}


def argmax_align(sim: np.ndarray) -> Links:
    """SimAlign's Argmax on ``sim [m, n]`` (source x target similarities): the mutual argmaxes."""
    return _links(_mutual_argmax(_similarity(sim)))


def itermax_align(sim: np.ndarray, max_iter: int = 2, alpha: float = 0.9) -> Links:
    """SimAlign's IterMax on ``sim [m, n]``: Argmax, then ``max_iter - 1`` rounds that add the mutual
    argmaxes of ``sim * W``, where ``W[i, j]`` is 0 when words ``i`` and ``j`` are both aligned,
    ``alpha`` when one of them is, 1 when neither is (a round that adds nothing ends the search)."""
    sim = _similarity(sim)
    if max_iter < 1 or not 0.0 <= alpha <= 1.0:
        raise PtmError(f"IterMax needs max_iter >= 1 and alpha in [0, 1]; got {max_iter}, {alpha}")
    aligned = _mutual_argmax(sim)
    for _ in range(max_iter - 1):
        row = aligned.any(axis=1)[:, None]
        col = aligned.any(axis=0)[None, :]
        weight = np.where(row & col, 0.0, np.where(row | col, alpha, 1.0))
        new = _mutual_argmax(sim * weight) & (weight > 0) & ~aligned
        if not new.any():
            break
        aligned |= new
    return _links(aligned)


# ---- scores --------------------------------------------------------------------------------------

def alignment_scores(predicted: Sequence[Iterable], sure: Sequence[Iterable],
                     possible: Sequence[Iterable] | None = None) -> dict[str, float]:
    """Precision, recall, F1 and AER of the predicted links of a corpus (one set per sentence pair).

    ``possible`` (``P``) is taken with the sure links added (``P ∪ S``); without it ``P = S``.
    Returns ``precision``, ``recall``, ``f1``, ``aer`` and the summed counts ``predicted``
    (``|A|``), ``sure`` (``|S|``), ``hits_sure`` (``|A∩S|``), ``hits_possible`` (``|A∩P|``)."""
    if len(predicted) != len(sure) or (possible is not None and len(possible) != len(sure)):
        raise PtmError(f"alignment scores need one link set per sentence pair in each list; got {len(predicted)} "
                       f"predicted, {len(sure)} sure{'' if possible is None else f', {len(possible)} possible'}")
    n_a = n_s = a_s = a_p = 0
    for k, (pred, gold) in enumerate(zip(predicted, sure)):
        a, s = {tuple(x) for x in pred}, {tuple(x) for x in gold}
        p = s | {tuple(x) for x in possible[k]} if possible is not None else s
        n_a, n_s, a_s, a_p = n_a + len(a), n_s + len(s), a_s + len(a & s), a_p + len(a & p)
    precision = a_p / n_a if n_a else 0.0
    recall = a_s / n_s if n_s else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    aer = 1.0 - (a_s + a_p) / (n_a + n_s) if n_a + n_s else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "aer": aer,
            "predicted": n_a, "sure": n_s, "hits_sure": a_s, "hits_possible": a_p}


# ---- IBM Model 1 ---------------------------------------------------------------------------------

@dataclass
class IBMModel1:
    """A fitted IBM Model 1: ``t(f | e)`` for every (source, target) word pair seen in a sentence pair.

    src_words ``[E]`` (sorted, ``NULL`` first: id 0) and tgt_words ``[F]`` (sorted); keys ``[U]``
    (sorted ``e_id * F + f_id`` of the pairs seen) and prob ``[U]`` (their ``t(f | e)``: for each
    ``e`` they sum to 1); log_likelihood: per iteration, ``sum log p(f | e-sentence)`` of the corpus
    before that iteration's update, up to the constant ``-sum m_k log(l_k + 1)``."""

    src_words: np.ndarray
    tgt_words: np.ndarray
    keys: np.ndarray
    prob: np.ndarray
    log_likelihood: list[float] = field(default_factory=list)

    def table(self) -> dict[tuple[str, str], float]:
        """``{(e, f): t(f | e)}`` (``e`` may be ``NULL``), for reading and tests."""
        n_f = len(self.tgt_words)
        return {(str(self.src_words[k // n_f]), str(self.tgt_words[k % n_f])): float(p)
                for k, p in zip(self.keys.tolist(), self.prob)}

    def lookup(self, e_ids: np.ndarray, f_ids: np.ndarray) -> np.ndarray:
        """``t(f | e)`` for arrays of ids (``-1``: a word the model has not seen; then 0)."""
        key = e_ids.astype(np.int64) * len(self.tgt_words) + f_ids
        at = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        found = (self.keys[at] == key) & (e_ids >= 0) & (f_ids >= 0)
        return np.where(found, self.prob[at], 0.0)


def _flatten(sentences: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """``(words [N] str, lengths [K])`` of a list of sentences."""
    lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
    words = np.array([w for s in sentences for w in s], dtype=str)
    return words, lengths


def _encode(words: np.ndarray, vocab: np.ndarray) -> np.ndarray:
    """Ids of ``words`` in the sorted array ``vocab`` (-1 where absent)."""
    if len(vocab) == 0:
        return np.full(len(words), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(vocab, words), len(vocab) - 1)
    return np.where(vocab[at] == words, at, -1).astype(np.int64)


def _grid(src_len: np.ndarray, tgt_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (target token, source position) pair of a corpus, grouped by target token.

    ``src_len, tgt_len [K]``: the words of each sentence pair.  The source side of sentence ``k``
    is NULL followed by its words, flattened over the corpus (``sum (l_k + 1)`` positions); the
    target tokens are flattened too (``T = sum m_k``).  Returns ``(src_at [P], tgt_at [P])``,
    ``P = sum m_k (l_k + 1)``: each target token's entries are contiguous, NULL first."""
    src_span = src_len + 1
    src_start = np.cumsum(src_span) - src_span  # [K]
    sent_of_tgt = np.repeat(np.arange(len(tgt_len)), tgt_len)  # [T]
    reps = src_span[sent_of_tgt]  # [T]
    tgt_at = np.repeat(np.arange(len(sent_of_tgt)), reps)  # [P]
    group_start = np.cumsum(reps) - reps
    within = np.arange(len(tgt_at)) - np.repeat(group_start, reps)
    src_at = np.repeat(src_start[sent_of_tgt], reps) + within
    return src_at, tgt_at


def _with_null(ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The flattened source ids with a NULL (id 0) before each sentence: ``[sum (l_k + 1)]``."""
    starts = np.cumsum(lengths + 1) - (lengths + 1)
    out = np.zeros(int((lengths + 1).sum()), dtype=np.int64)
    keep = np.ones(len(out), dtype=bool)
    keep[starts] = False
    out[keep] = ids
    return out


def ibm_model1(pairs: Sequence[tuple[Sequence[str], Sequence[str]]], iterations: int = 5) -> IBMModel1:
    """Fit ``t(f | e)`` on ``pairs`` of (source words, target words) by ``iterations`` EM steps.

    E-step: each target token ``f`` of sentence ``k`` spreads one count over the source positions
    (NULL included) in proportion to ``t(f | e)``; M-step: ``t(f | e) = c(e, f) / sum_f' c(e, f')``."""
    if iterations < 0:
        raise PtmError(f"IBM Model 1 needs iterations >= 0; got {iterations}")
    src_words, src_len = _flatten([s for s, _ in pairs])
    tgt_words, tgt_len = _flatten([t for _, t in pairs])
    if len(tgt_words) == 0:
        raise PtmError("IBM Model 1 needs at least one sentence pair with target words")
    src_sorted, src_ids = np.unique(src_words, return_inverse=True)
    src_vocab = np.concatenate([np.array([NULL], dtype=str), src_sorted])  # NULL: id 0
    tgt_vocab, tgt_ids = np.unique(tgt_words, return_inverse=True)
    src_at, tgt_at = _grid(src_len, tgt_len)
    e_of = _with_null(src_ids.astype(np.int64) + 1, src_len)[src_at]  # [P]
    keys, pair = np.unique(e_of * len(tgt_vocab) + tgt_ids.astype(np.int64)[tgt_at], return_inverse=True)
    e_of_key = keys // max(len(tgt_vocab), 1)
    prob = np.full(len(keys), 1.0 / max(len(tgt_vocab), 1))
    history = []
    for _ in range(iterations):
        p = prob[pair]
        z = np.bincount(tgt_at, weights=p, minlength=len(tgt_ids))  # [T] sum over source positions
        history.append(float(np.log(z).sum()))
        counts = np.bincount(pair, weights=p / z[tgt_at], minlength=len(keys))  # [U] expected counts
        totals = np.bincount(e_of_key, weights=counts, minlength=len(src_vocab))  # [E]
        prob = counts / totals[e_of_key]
    return IBMModel1(src_vocab, tgt_vocab, keys, prob, history)


def ibm1_align_all(model: IBMModel1, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Links]:
    """Per sentence pair, the links ``(i, j)``: target word ``j`` with its most probable source word
    ``i`` under ``t(f | e)`` (ties: the first; NULL, or only unseen words: no link)."""
    src_words, src_len = _flatten([s for s, _ in pairs])
    tgt_words, tgt_len = _flatten([t for _, t in pairs])
    if len(tgt_words) == 0:
        return [set() for _ in pairs]
    e = _encode(src_words, model.src_words[1:])
    src_ids = _with_null(np.where(e >= 0, e + 1, -1), src_len)
    src_at, tgt_at = _grid(src_len, tgt_len)
    p = model.lookup(src_ids[src_at], _encode(tgt_words, model.tgt_words)[tgt_at])  # [P]
    sent = np.repeat(np.arange(len(pairs)), tgt_len)  # [T] each target token's sentence pair
    span = (src_len + 1)[sent]  # [T] its entries in the grid
    best = np.maximum.reduceat(p, np.cumsum(span) - span)  # [T]
    hit = np.flatnonzero(p == best[tgt_at])
    tokens, first = np.unique(tgt_at[hit], return_index=True)  # every token: its first best entry
    src_pos = src_at[hit[first]] - (np.cumsum(src_len + 1) - (src_len + 1))[sent] - 1  # -1: NULL
    tgt_pos = tokens - (np.cumsum(tgt_len) - tgt_len)[sent]
    ok = (src_pos >= 0) & (best > 0)
    out: list[Links] = [set() for _ in pairs]
    for k, i, j in zip(sent[ok].tolist(), src_pos[ok].tolist(), tgt_pos[ok].tolist()):
        out[k].add((i, j))
    return out


def ibm1_align(model: IBMModel1, src: Sequence[str], tgt: Sequence[str]) -> Links:
    """:func:`ibm1_align_all` of one sentence pair."""
    return ibm1_align_all(model, [(src, tgt)])[0]


NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def symmetrize(forward: Iterable, backward: Iterable, method: str = "intersection") -> Links:
    """Join two directions' links of one sentence pair, both given as ``(source i, target j)``.

    ``intersection``, ``union``, or ``grow-diag`` (Koehn et al. 2003): from the intersection, add
    links of the union next to a link (diagonals included) while one of their two words is
    unaligned, until nothing is added."""
    fwd, bwd = {tuple(x) for x in forward}, {tuple(x) for x in backward}
    if method == "intersection":
        return fwd & bwd
    if method == "union":
        return fwd | bwd
    if method != "grow-diag":
        raise PtmError(f"unknown symmetrisation {method!r}; one of intersection, union, grow-diag")
    union, links = fwd | bwd, fwd & bwd
    src_done, tgt_done = {i for i, _ in links}, {j for _, j in links}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                cand = (i + di, j + dj)
                if cand in union and cand not in links and (cand[0] not in src_done or cand[1] not in tgt_done):
                    links.add(cand)
                    src_done.add(cand[0])
                    tgt_done.add(cand[1])
                    grown = True
    return links


# ---- the baseline --------------------------------------------------------------------------------

def ibm1_baseline(train_pairs: Sequence[tuple[Sequence[str], Sequence[str]]], test_rows: Sequence[dict],
                  iterations: int = 5, lowercase: bool = True, src: str = "grc", tgt: str = "en") -> dict[str, dict]:
    """IBM Model 1 in both directions on ``train_pairs`` + the test rows' text, scored on the test links.

    ``train_pairs``: (source words, target words); ``test_rows``: ``{src: [...], tgt: [...], "links":
    [[i, j], ...]}`` (``i`` a source word); words lower-cased first when ``lowercase``.  Returns
    :func:`alignment_scores` for ``forward`` (each target word's best source word), ``backward``
    (each source word's best target word), ``intersection`` and ``grow-diag``, plus ``sizes``."""
    norm = (lambda ws: [w.lower() for w in ws]) if lowercase else list
    test = [(norm(r[src]), norm(r[tgt])) for r in test_rows]
    corpus = [(norm(s), norm(t)) for s, t in train_pairs] + test
    forward = ibm1_align_all(ibm_model1(corpus, iterations), test)
    backward = [{(i, j) for j, i in links}
                for links in ibm1_align_all(ibm_model1([(t, s) for s, t in corpus], iterations), [(t, s) for s, t in test])]
    gold = [{tuple(x) for x in r["links"]} for r in test_rows]
    joined = {m: [symmetrize(f, b, m) for f, b in zip(forward, backward)] for m in ("intersection", "grow-diag")}
    scores = {"forward": alignment_scores(forward, gold), "backward": alignment_scores(backward, gold)}
    scores.update({m: alignment_scores(links, gold) for m, links in joined.items()})
    scores["sizes"] = {"train_pairs": len(train_pairs), "test_pairs": len(test), "iterations": iterations}
    return scores


def _read_jsonl(path: Path) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError as exc:
        raise PtmError(f"{path} is missing; fetch the data set with `ptm data get bible-greek-alignments`") from exc


def dataset_baseline(root: str | Path, split: str = "test", iterations: int = 5) -> dict[str, dict]:
    """:func:`ibm1_baseline` on a ``bible-greek-alignments`` directory: trained on the ``train``
    parallel text (every training verse) + the ``split`` verses, scored on ``split``'s links."""
    root = Path(root)
    train = _read_jsonl(root / "parallel" / "en-grc.train.jsonl")
    return ibm1_baseline([(r["grc"].split(), r["en"].split()) for r in train], _read_jsonl(root / f"{split}.jsonl"), iterations)
