"""fastText: n-gram hashing identical to fastText/gensim, learning quality and OOV vectors vs gensim."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ptmkit.errors import PtmError
from ptmkit.static.fasttext import FastTextConfig, FastTextModel, subwords, train_fasttext

gensim = pytest.importorskip("gensim")
from gensim.models import FastText as GensimFastText  # noqa: E402
from gensim.models.fasttext import ft_ngram_hashes  # noqa: E402
from gensim.test.utils import datapath  # noqa: E402


def _topic_corpus(n_topics=8, words_per_topic=12, n_sent=3000, sent_len=10, seed=0):
    """Sentences drawn from one topic each: words of a topic only co-occur with each other."""
    rng = np.random.default_rng(seed)
    vocab = [[f"t{t}w{i}" for i in range(words_per_topic)] for t in range(n_topics)]
    topics = rng.integers(0, n_topics, n_sent)
    picks = rng.integers(0, words_per_topic, (n_sent, sent_len))
    return [[vocab[t][i] for i in row] for t, row in zip(topics, picks)]


def _topic_purity(most_similar, words, k=5) -> float:
    hits = sum(n.split("w")[0] == w.split("w")[0] for w in words for n, _ in most_similar(w, k))
    return hits / (len(words) * k)


def _sim_matrix(get, words):
    m = np.stack([get(w) for w in words]).astype(np.float64)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return (m @ m.T)[np.triu_indices(len(words), 1)]


@pytest.mark.parametrize("min_n,max_n", [(3, 6), (1, 2), (2, 4)])
def test_ngram_hashes_match_gensim(min_n, max_n):
    words = ["hello", "naïve", "東京都", "a", "Straße", "übermäßig", "x", "don't"]
    ptr, idx = subwords(words, min_n, max_n, 2_000_000, 0, with_word=False)
    for i, w in enumerate(words):
        assert sorted(idx[ptr[i] : ptr[i + 1]].tolist()) == sorted(ft_ngram_hashes(w, min_n, max_n, 2_000_000)), w
    ptr, idx = subwords(words, min_n, max_n, 1000, 10, with_word=True)
    assert idx[ptr[:-1]].tolist() == list(range(len(words)))  # own row first
    assert idx[np.setdiff1d(np.arange(idx.size), ptr[:-1])].min() >= 10


@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_learns_planted_topics(model):
    sents = _topic_corpus()
    cfg = FastTextConfig(model=model, dim=24, window=3, epochs=5, min_count=1, sample=0, bucket=5000, workers=2)
    ft = train_fasttext(sents, cfg, progress=False)
    purity = _topic_purity(lambda w, k: ft.wv.most_similar(w, topn=k), ft.words)
    g = GensimFastText(sents, sg=int(model == "skipgram"), vector_size=24, window=3, epochs=5, min_count=1, sample=0,
                       bucket=5000, workers=1, alpha=cfg.start_alpha, min_alpha=cfg.end_alpha)  # fmt: skip
    theirs = _topic_purity(lambda w, k: g.wv.most_similar(w, topn=k), ft.words)
    assert purity >= theirs - 0.1, (purity, theirs)
    assert purity > 0.6


def _lee():
    with open(datapath("lee_background.cor"), encoding="utf-8") as f:
        return [line.lower().split() for line in f]


def test_real_text_and_oov_against_gensim(tmp_path):
    sents = _lee()
    hp = dict(window=5, epochs=5, min_count=5, sample=1e-3)
    cfg = FastTextConfig(dim=32, bucket=20_000, workers=2, alpha=0.025, **hp)
    ft = train_fasttext(sents, cfg, progress=False)
    g = [GensimFastText(sents, sg=1, vector_size=32, bucket=20_000, seed=s, workers=1, alpha=0.025,
                        min_alpha=0.025e-4, **hp) for s in (1, 2)]  # fmt: skip
    words = ft.words[20:220]
    ours = _sim_matrix(ft.wv.__getitem__, words)
    s1, s2 = (_sim_matrix(m.wv.__getitem__, words) for m in g)
    rho_gg, rho_og = stats.spearmanr(s1, s2).statistic, stats.spearmanr(ours, s1).statistic
    assert rho_og >= rho_gg - 0.1, (rho_og, rho_gg)

    # out-of-vocabulary words get vectors close to their morphological relatives
    oov = ["governmentally", "australians'", "bombings,"]
    relatives = ["government", "australians", "bombing"]
    for w, rel in zip(oov, relatives):
        assert w not in ft.key_to_index
        ours_sim = ft.similarity(w, rel)
        theirs_sim = float(g[0].wv.similarity(w, rel))
        unrelated = ft.similarity(w, "the")
        assert ours_sim > unrelated and ours_sim > 0.5, (w, ours_sim, unrelated)
        assert abs(ours_sim - theirs_sim) < 0.25, (w, ours_sim, theirs_sim)
    assert sum(w.startswith("govern") for w, _ in ft.most_similar("governmentally", 5)) >= 2

    # save / load keeps OOV vectors; no overwrite
    out = tmp_path / "ft"
    ft.save(out)
    back = FastTextModel.load(out)
    np.testing.assert_array_equal(back.word_vector("governmentally"), ft.word_vector("governmentally"))
    with pytest.raises(PtmError, match="already holds"):
        ft.save(out)


def test_bad_input(tmp_path):
    sents = _topic_corpus(n_sent=200)
    ft = train_fasttext(sents, FastTextConfig(min_count=1, dim=8, epochs=1, bucket=0, max_n=0), progress=False)
    with pytest.raises(PtmError, match="no character n-grams"):
        ft.word_vector("unknownword")
    with pytest.raises(PtmError, match="min_count"):
        train_fasttext([["a", "b"]], FastTextConfig(), progress=False)
    with pytest.raises(PtmError, match="not a fastText model"):
        FastTextModel.load(tmp_path)
    with pytest.raises(PtmError, match="unknown config key"):
        train_fasttext(sents, {"buckets": 10}, progress=False)
