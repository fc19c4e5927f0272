"""First generation → second generation: word2vec vectors as a Transformer's initial word embeddings.

A masked LM trained for minutes on a CPU has barely started to organise its word embeddings
(its held-out loss is still near the unigram entropy), while Skip-gram with negative sampling
learns a useful similarity structure from the same text in seconds.  ``skipgram_init`` trains
word2vec on the pre-training corpus *in the model's own token ids* (WordPiece pieces included),
so every row of the embedding matrix gets a vector; the Transformer then starts from them and
its objective refines them in context.  This is the role static vectors played before
contextual encoders (the "first generation" feeding the second), and it is what lets a
few-minute pre-training transfer (see the README's demo results).

The vectors are centred and rescaled to the model's ``init_std``, so the embedding LayerNorm and
the tied output layer see the same scale as with a random initialisation; tokens that never
occur in the training examples keep their random rows.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from ptmkit.errors import PtmError
from ptmkit.objectives.base import CorpusLike
from ptmkit.static.vocab import IdCorpus, Vocab
from ptmkit.static.word2vec import Word2VecConfig, train_on_ids

log = logging.getLogger(__name__)

METHODS = ("none", "skipgram", "cbow")


def corpus_as_ids(corpus: CorpusLike, spans: np.ndarray, vocab_size: int) -> tuple[Vocab, IdCorpus, np.ndarray]:
    """The sentences covered by ``spans [N, 2]`` as a word2vec ``IdCorpus`` over the tokens that occur.

    Returns ``(vocab, id_corpus, token_of)``: ``vocab`` lists the occurring token ids (as strings)
    most frequent first, ``id_corpus.ids`` are indices into it, ``token_of [V']`` maps them back
    to model token ids.
    """
    sent = np.asarray(corpus.sentences, dtype=np.int64)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    # Whole sentences only: a span covers a run of sentences, so keep those it starts.
    first = np.searchsorted(sent, spans[:, 0], side="left")
    last = np.searchsorted(sent, spans[:, 1], side="left")
    # A span may end past the last sentence boundary (a causal LM's block reads one token beyond
    # its inputs), so ``last`` can be len(sent): one extra slot.
    cover = np.zeros(len(sent) + 1, dtype=np.int64)
    np.add.at(cover, first, 1)
    np.add.at(cover, last, -1)
    keep = np.cumsum(cover)[: len(sent) - 1] > 0  # sentence s is inside some span
    starts, ends = sent[:-1][keep], sent[1:][keep]
    lengths = ends - starts
    if lengths.sum() == 0:
        raise PtmError("no training text to train word vectors on")
    index = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
    tokens = np.asarray(corpus.tokens)[index].astype(np.int64)
    counts = np.bincount(tokens, minlength=vocab_size)
    token_of = np.flatnonzero(counts)
    token_of = token_of[np.argsort(-counts[token_of], kind="stable")]  # most frequent first
    remap = np.full(max(vocab_size, int(tokens.max()) + 1), -1, dtype=np.int64)
    remap[token_of] = np.arange(len(token_of))
    vocab = Vocab([str(t) for t in token_of], counts[token_of].astype(np.int64))
    ids = IdCorpus(remap[tokens].astype(np.int32), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    return vocab, ids, token_of


def train_token_vectors(
    corpus: CorpusLike, spans: np.ndarray, vocab_size: int, dim: int, method: str = "skipgram",
    epochs: int = 3, window: int = 5, seed: int = 1, progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """word2vec (negative sampling) over the model's token ids: ``(vectors [V', dim], token_of [V'])``.

    One worker thread, so the vectors are a pure function of the corpus and ``seed`` (Hogwild
    with several threads is not reproducible run to run).
    """
    if method not in METHODS or method == "none":
        raise PtmError(f"init_embeddings must be one of {', '.join(METHODS[1:])}, got {method!r}")
    vocab, ids, token_of = corpus_as_ids(corpus, spans, vocab_size)
    cfg = Word2VecConfig(model=method, loss="ns", dim=dim, window=window, epochs=epochs, min_count=1,
                         seed=seed, workers=1, cache=False)
    vectors, _ = train_on_ids(vocab, ids, cfg, progress=progress)
    return vectors, token_of


def init_word_embeddings(
    weight: torch.Tensor, corpus: CorpusLike, spans: np.ndarray, method: str = "skipgram",
    std: float = 0.02, epochs: int = 3, seed: int = 1, progress: bool = False,
) -> int:
    """Overwrite the rows of ``weight [V, H]`` of every token in the training examples with its
    word2vec vector (centred, scaled to standard deviation ``std``).  Returns the rows set."""
    t0 = time.perf_counter()
    vectors, token_of = train_token_vectors(corpus, spans, weight.shape[0], weight.shape[1], method,
                                            epochs=epochs, seed=seed, progress=progress)
    v = vectors.astype(np.float64)
    v -= v.mean(axis=0)
    v *= std / max(v.std(), 1e-12)
    with torch.no_grad():
        weight[torch.from_numpy(token_of)] = torch.from_numpy(v).to(weight.dtype)
    log.info("initialised %d word embeddings from %s vectors in %.1f s", len(token_of), method, time.perf_counter() - t0)
    return len(token_of)


__all__ = ["METHODS", "corpus_as_ids", "init_word_embeddings", "train_token_vectors"]
