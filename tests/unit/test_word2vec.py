"""word2vec: Huffman tree, sampling tables, vocabulary, and learning quality against gensim."""

from __future__ import annotations

import heapq
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from ptmkit.errors import PtmError
from ptmkit.static.hogwild import chunk_starts
from ptmkit.static.huffman import HuffmanTree, build_huffman
from ptmkit.static.sampling import keep_probabilities, negative_probs, negative_table
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import encode, load_corpus, vocab_from_counts
from ptmkit.static.word2vec import Word2VecConfig, train_on_ids, train_word2vec

gensim = pytest.importorskip("gensim")
from gensim.models import Word2Vec as GensimWord2Vec  # noqa: E402
from gensim.test.utils import datapath  # noqa: E402

MODES = [("skipgram", "ns"), ("cbow", "ns"), ("skipgram", "hs"), ("cbow", "hs")]


# ----------------------------------------------------------------------------- Huffman


def _heap_huffman_cost(counts: np.ndarray) -> int:
    """Reference: total weighted code length sum(count * depth) of a heap-built Huffman tree."""
    heap = [int(c) for c in counts]
    heapq.heapify(heap)
    cost = 0
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        cost += a + b  # each merge adds one bit to every word below it
        heapq.heappush(heap, a + b)
    return cost


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_huffman_prefix_free_and_optimal(seed):
    rng = np.random.default_rng(seed)
    counts = rng.zipf(1.3, size=300).astype(np.int64)
    rng.shuffle(counts)  # any order is accepted
    tree = build_huffman(counts)
    v = counts.size
    codes = ["".join(str(b) for b in tree.codes[w, : tree.lengths[w]]) for w in range(v)]
    assert len(set(codes)) == v
    srt = sorted(codes)
    assert not any(srt[i + 1].startswith(srt[i]) for i in range(v - 1)), "codes are not prefix-free"
    # optimal: same expected length as the reference heap construction, within the entropy bound
    cost = int((counts * tree.lengths).sum())
    assert cost == _heap_huffman_cost(counts)
    p = counts / counts.sum()
    entropy = float(-(p * np.log2(p)).sum())
    assert entropy <= cost / counts.sum() < entropy + 1
    # points: inner nodes, root first, all paths distinct nodes in range
    assert tree.points[:, 0].tolist() == [tree.points[0, 0]] * v
    assert tree.points.max() <= v - 2 and tree.points.min() >= 0


def test_huffman_frequent_words_have_short_codes():
    counts = np.array([1000, 500, 100, 10, 5, 1])
    tree = build_huffman(counts)
    assert list(tree.lengths) == sorted(tree.lengths)
    assert tree.lengths[0] == 1


# ----------------------------------------------------------------------------- sampling tables


def test_keep_probability_formula():
    counts = np.array([10_000, 1000, 100, 10, 1], dtype=np.int64)
    sample = 1e-3
    total = counts.sum()
    p = keep_probabilities(counts, sample)
    for c, got in zip(counts, p):
        expected = min(1.0, (np.sqrt(c / (sample * total)) + 1) * (sample * total) / c)
        assert got == pytest.approx(expected, rel=1e-6)
    assert p[0] < 1 and p[-1] == 1.0
    assert np.all(keep_probabilities(counts, 0.0) == 1.0)


def test_negative_table_unigram_power():
    counts = np.array([1000, 300, 50, 7, 1, 1, 120], dtype=np.int64)
    expected = counts**0.75 / (counts**0.75).sum()
    np.testing.assert_allclose(negative_probs(counts, 0.75), expected, rtol=1e-12)
    accept, alias = negative_table(counts, 0.75)
    # the alias table encodes the distribution exactly: P(i) = (accept[i] + sum_{j: alias[j]=i} (1-accept[j])) / V
    v = counts.size
    implied = accept.astype(np.float64).copy()
    np.add.at(implied, alias, 1.0 - accept.astype(np.float64))
    np.testing.assert_allclose(implied / v, expected, rtol=1e-5)
    # and the kernel's sampler draws from it
    import numba as nb

    from ptmkit.static.kernels.w2v import draw_negative

    @nb.njit
    def draws(n, accept, alias):
        out = np.zeros(accept.shape[0], np.int64)
        s = np.uint64(7)
        for _ in range(n):
            i, s = draw_negative(s, accept, alias)
            out[i] += 1
        return out

    got = draws(400_000, accept, alias) / 400_000
    np.testing.assert_allclose(got, expected, atol=3e-3)


# ----------------------------------------------------------------------------- vocabulary


def test_vocab_and_encoding(tmp_path):
    text = "a b c a\n\nb a d\nz z\n"
    f = tmp_path / "c.txt"
    f.write_text(text)
    vocab, corpus = load_corpus(f, min_count=2, cache=False)
    assert vocab.words == ["a", "b", "z"]  # d, c below min_count; ties keep first occurrence
    assert vocab.counts.tolist() == [3, 2, 2]
    assert corpus.ids.tolist() == [0, 1, 0, 1, 0, 2, 2]
    assert corpus.sentences.tolist() == [0, 3, 5, 7]
    vocab2, _ = load_corpus(f, min_count=1, max_vocab=2, cache=False)
    assert vocab2.words == ["a", "b"]


def test_long_sentences_are_split_and_cache_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path / "home"))
    f = tmp_path / "c.txt"
    f.write_text(" ".join(["x", "y"] * 25) + "\nx y\n")
    vocab = vocab_from_counts(Counter({"x": 26, "y": 26}), 1)
    corpus = encode(f, vocab, max_sentence_len=20)
    assert np.diff(corpus.sentences).tolist() == [20, 20, 10, 2]
    v1, c1 = load_corpus(f, min_count=1)
    v2, c2 = load_corpus(f, min_count=1)
    assert list((tmp_path / "home").rglob("ids.npy"))
    assert v1.words == v2.words and np.array_equal(c1.ids, c2.ids)


def test_chunks_cover_corpus():
    sentences = np.array([0, 3, 10, 11, 30, 31, 45], dtype=np.int64)
    starts = chunk_starts(sentences, 10)
    assert starts[0] == 0 and starts[-1] == 6 and np.all(np.diff(starts) > 0)


def test_bad_inputs(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(PtmError, match="empty"):
        train_word2vec(empty, Word2VecConfig(cache=False), progress=False)
    rare = tmp_path / "rare.txt"
    rare.write_text("one two three\n")
    with pytest.raises(PtmError, match="min_count"):
        train_word2vec(rare, Word2VecConfig(cache=False), progress=False)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"abc\x00\xff\xfe")
    with pytest.raises(PtmError, match="binary"):
        train_word2vec(binary, Word2VecConfig(cache=False), progress=False)
    with pytest.raises(PtmError, match="does not exist"):
        train_word2vec(tmp_path / "missing.txt", Word2VecConfig(cache=False), progress=False)
    with pytest.raises(PtmError, match="unknown config key"):
        train_word2vec(rare, {"windw": 3}, progress=False)
    with pytest.raises(PtmError):
        train_word2vec(rare, {"model": "glove"}, progress=False)


def test_output_directory_is_not_overwritten(tmp_path):
    sents = _topic_corpus(n_sent=300)
    out = tmp_path / "run"
    wv = train_word2vec(sents, Word2VecConfig(min_count=1, epochs=1, dim=16), out=out, progress=False)
    assert (out / "vectors.bin").exists() and (out / "config.json").exists()
    before = (out / "vectors.bin").read_bytes()
    with pytest.raises(PtmError, match="already holds"):
        train_word2vec(sents, Word2VecConfig(min_count=1, epochs=1, dim=16), out=out, progress=False)
    assert (out / "vectors.bin").read_bytes() == before
    assert WordVectors.load(out / "vectors.bin").words == wv.words


# ----------------------------------------------------------------------------- quality


def _topic_corpus(n_topics=8, words_per_topic=12, n_sent=3000, sent_len=10, seed=0):
    """Sentences drawn from one topic each: words of a topic only co-occur with each other."""
    rng = np.random.default_rng(seed)
    vocab = [[f"t{t}w{i}" for i in range(words_per_topic)] for t in range(n_topics)]
    topics = rng.integers(0, n_topics, n_sent)
    picks = rng.integers(0, words_per_topic, (n_sent, sent_len))
    return [[vocab[t][i] for i in row] for t, row in zip(topics, picks)]


def _topic_purity(most_similar, words, k=5) -> float:
    hits = 0
    for w in words:
        topic = w.split("w")[0]
        hits += sum(n.split("w")[0] == topic for n, _ in most_similar(w, k))
    return hits / (len(words) * k)


def _gensim(sents, model, loss, seed=1, **kw):
    return GensimWord2Vec(
        sents, sg=int(model == "skipgram"), hs=int(loss == "hs"), negative=5 if loss == "ns" else 0,
        seed=seed, workers=1, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("model,loss", MODES)
def test_learns_planted_topics(model, loss):
    sents = _topic_corpus()
    cfg = Word2VecConfig(model=model, loss=loss, dim=24, window=3, epochs=5, min_count=1, sample=0, workers=2)
    wv = train_word2vec(sents, cfg, progress=False)
    words = [w for w in wv.words]
    ours = _topic_purity(lambda w, k: wv.most_similar(w, topn=k), words)
    alpha = cfg.start_alpha
    g = _gensim(sents, model, loss, vector_size=24, window=3, epochs=5, min_count=1, sample=0,
                alpha=alpha, min_alpha=alpha * 1e-4)  # fmt: skip
    theirs = _topic_purity(lambda w, k: g.wv.most_similar(w, topn=k), words)
    assert ours > 0.9, (ours, theirs)
    assert ours >= theirs - 0.05, (ours, theirs)


def _lee_sentences():
    with open(datapath("lee_background.cor"), encoding="utf-8") as f:
        return [line.lower().split() for line in f]


def _gensim_tree(g, words: list[str]) -> HuffmanTree:
    code, point = g.wv.expandos["code"], g.wv.expandos["point"]
    rows = [g.wv.key_to_index[w] for w in words]
    width = max(len(code[r]) for r in rows)
    tree = HuffmanTree(
        np.zeros((len(words), width), np.uint8), np.zeros((len(words), width), np.int32), np.zeros(len(words), np.int32)
    )
    for i, r in enumerate(rows):
        n = len(code[r])
        tree.codes[i, :n], tree.points[i, :n], tree.lengths[i] = code[r], point[r], n
    return tree


def _sim_matrix(get, words):
    m = np.stack([get(w) for w in words]).astype(np.float64)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    s = m @ m.T
    return s[np.triu_indices(len(words), 1)]


@pytest.mark.parametrize("model,loss", MODES)
def test_real_text_agrees_with_gensim(model, loss):
    """On real text, our similarity structure agrees with gensim's as well as two gensim seeds agree."""
    sents = _lee_sentences()
    alpha = 0.025 if model == "skipgram" else 0.05
    hp = dict(window=5, epochs=5, min_count=5, sample=1e-3)
    cfg = Word2VecConfig(model=model, loss=loss, dim=32, alpha=alpha, workers=2, **hp)
    g1 = _gensim(sents, model, loss, seed=1, vector_size=32, alpha=alpha, min_alpha=alpha * 1e-4, **hp)
    g2 = _gensim(sents, model, loss, seed=2, vector_size=32, alpha=alpha, min_alpha=alpha * 1e-4, **hp)
    vocab, corpus = load_corpus(sents, cfg.min_count)
    assert set(vocab.words) == set(g1.wv.index_to_key)  # same vocabulary (tie order may differ)
    # HS similarities depend on the tree topology (ties are broken differently): use gensim's tree
    tree = _gensim_tree(g1, vocab.words) if loss == "hs" else None
    wv = WordVectors(vocab.words, train_on_ids(vocab, corpus, cfg, progress=False, tree=tree)[0])
    words = wv.words[20:220]  # frequent content words
    s_ours, s1, s2 = (_sim_matrix(f, words) for f in (wv.__getitem__, g1.wv.__getitem__, g2.wv.__getitem__))
    rho_gg = stats.spearmanr(s1, s2).statistic
    rho_og = stats.spearmanr(s_ours, s1).statistic
    assert rho_og >= rho_gg - 0.08, (rho_og, rho_gg)


# ----------------------------------------------------------------------------- threads


def test_chunks_train_the_same_whichever_thread_runs_them():
    """Each chunk's random stream is seeded by (seed, epoch, chunk): the words kept by subsampling do
    not depend on the number of threads, and one thread reproduces its result exactly."""
    sents = _topic_corpus(n_sent=2000)
    vocab, corpus = load_corpus(sents, 1)
    base = dict(dim=16, epochs=2, min_count=1, sample=1e-3, chunk_words=500)
    one_a, st1 = train_on_ids(vocab, corpus, Word2VecConfig(workers=1, **base), progress=False)
    one_b, _ = train_on_ids(vocab, corpus, Word2VecConfig(workers=1, **base), progress=False)
    _, st2 = train_on_ids(vocab, corpus, Word2VecConfig(workers=3, **base), progress=False)
    np.testing.assert_array_equal(one_a, one_b)
    assert st1["threads"] == 1 and st2["threads"] == 3
    assert 0 < st1["effective_words"] == st2["effective_words"] < 2 * corpus.n_words


def test_worker_errors_reach_the_caller():
    from ptmkit.static.hogwild import run_epochs

    corpus = load_corpus(_topic_corpus(n_sent=200), 1)[1]
    calls = []

    def step(epoch, chunk, *args):
        calls.append(chunk)
        if chunk == 3:
            raise RuntimeError("boom")
        return 1

    with pytest.raises(RuntimeError, match="boom"):
        run_epochs(step, corpus, Word2VecConfig(workers=2, epochs=3, chunk_words=100), False, "test")
    assert len(calls) < 3 * len(chunk_starts(corpus.sentences, 100))  # the others stopped early


@pytest.mark.parametrize("model,loss", MODES)
def test_thread_private_hot_rows_train_the_same_rows(model, loss):
    """``hot_rows``: a thread's private copy of the most-updated output rows, merged every
    ``sync_words``, trains what the shared rows would (alone, up to float32 rounding at the merges):
    a wrong row mapping or a lost merge would show as a large difference."""
    from ptmkit.static.kernels.w2v import exp_table, train_w2v_chunk
    from ptmkit.static.word2vec import init_input_vectors

    vocab, corpus = load_corpus(_lee_sentences(), 5)
    v, dim = len(vocab), 16
    tree = build_huffman(vocab.counts)
    hs, negative = loss == "hs", (5 if loss == "ns" else 0)

    def run(hot: int):
        syn0 = init_input_vectors(v, dim, 1)
        syn1 = np.zeros((v - 1, dim), np.float32)
        syn1neg = np.zeros((v, dim), np.float32)
        kept = train_w2v_chunk(
            syn0, syn1, syn1neg, corpus.ids, corpus.sentences, 0, corpus.n_sentences,
            keep_probabilities(vocab.counts, 1e-3), negative_table(vocab.counts, 0.75),
            tree.codes, tree.points, tree.lengths, exp_table(),
            model == "skipgram", hs, negative, 5, True, 0.025, 0.0001, 0.0, float(corpus.n_words), 1, 0, 0,
            hot, hot, 97,
        )  # fmt: skip
        return syn0, syn1 if hs else syn1neg, kept

    plain, private = run(0), run(40)
    assert plain[2] == private[2]
    touched = np.abs(plain[1]).sum(axis=1) > 0
    assert touched[-40:].all() if hs else touched[:40].all()  # the private rows were trained and merged
    np.testing.assert_allclose(private[1], plain[1], atol=2e-4)
    np.testing.assert_allclose(private[0], plain[0], atol=2e-4)


def test_hot_rows_and_sync_words_are_validated():
    with pytest.raises(ValueError, match="hot_rows"):
        Word2VecConfig(hot_rows=-1)
    with pytest.raises(ValueError, match="sync_words"):
        Word2VecConfig(sync_words=0)


def test_negatives_leave_the_ring_in_the_order_they_were_drawn():
    """The ring only delays the negatives' stream by NEG_RING draws (so their rows can be
    prefetched): out come the pre-drawn words, then the stream's next draws, in order."""
    from ptmkit.static.kernels.w2v import NEG_RING, draw_negative, negative_ring, next_negative

    table = negative_table(np.array([50, 30, 20, 10, 5, 1]), 0.75)
    syn1neg = np.zeros((6, 4), dtype=np.float32)
    ring, state = negative_ring(np.uint64(7), 5, table)
    expected, s = list(ring), state
    for _ in range(2 * NEG_RING):
        t, s = draw_negative(s, table[0], table[1])
        expected.append(t)
    got, pos = [], 0
    for _ in range(3 * NEG_RING):
        t, pos, state = next_negative(ring, pos, state, table[0], table[1], syn1neg, 0)
        got.append(t)
    assert got == expected[: 3 * NEG_RING]
    assert not syn1neg.any()  # prefetching the rows leaves them as they are
    assert len(set(got)) > 3


def test_a_score_of_exactly_max_exp_reads_inside_the_sigmoid_table():
    """Negative sampling skips scores strictly beyond ±MAX_EXP, so f == MAX_EXP looks up entry
    EXP_TABLE_SIZE: the table has it (as word2vec.c's), holding sigmoid(MAX_EXP).  The table is
    handed over as the head of a NaN-filled buffer, so a read past its end would show as NaN."""
    from ptmkit.static.kernels.w2v import EXP_TABLE_SIZE, MAX_EXP, exp_table, ns_update

    tab = exp_table()
    assert tab.shape == (EXP_TABLE_SIZE + 1,)
    assert tab[-1] == np.float32(1.0 / (1.0 + np.exp(-MAX_EXP)))
    guarded = np.full(tab.shape[0] + 8, np.nan, dtype=np.float32)
    guarded[: tab.shape[0]] = tab
    dim, alpha = 4, 0.025
    l1 = np.array([MAX_EXP, 0.0, 0.0, 0.0], dtype=np.float32)
    syn1neg = np.zeros((3, dim), dtype=np.float32)
    syn1neg[1, 0] = 1.0  # l1 · syn1neg[1] == MAX_EXP exactly
    work = np.zeros(dim, dtype=np.float32)
    no_hot, ring = np.empty((0, dim), dtype=np.float32), np.zeros(1, dtype=np.int64)
    ns_update(l1, 1, syn1neg, no_hot, work, 0, alpha, guarded[: tab.shape[0]], ring, 0, np.uint64(1),
              negative_table(np.array([5, 3, 2]), 0.75))  # fmt: skip
    g = (1.0 - tab[-1]) * alpha  # label 1, sigmoid(MAX_EXP)
    np.testing.assert_allclose(work, [g, 0.0, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(syn1neg[1], [1.0 + g * MAX_EXP, 0.0, 0.0, 0.0], rtol=1e-6)
