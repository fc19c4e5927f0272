"""WordVectors queries and evaluations, checked number for number against gensim's KeyedVectors."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.errors import PtmError
from ptmkit.static.vectors import WordVectors

gensim = pytest.importorskip("gensim")
from gensim.models import KeyedVectors  # noqa: E402
from gensim.test.utils import datapath  # noqa: E402


def _keyed(wv: WordVectors) -> KeyedVectors:
    kv = KeyedVectors(wv.dim)
    kv.add_vectors(wv.words, wv.vectors)
    return kv


def _random_vectors(words, dim=32, seed=0) -> WordVectors:
    rng = np.random.default_rng(seed)
    return WordVectors(words, rng.standard_normal((len(words), dim)).astype(np.float32))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_most_similar_and_cosmul_match_gensim():
    wv = _random_vectors([f"w{i}" for i in range(500)])
    kv = _keyed(wv)
    for pos, neg in [(["w1"], []), (["w2", "w3"], ["w4"]), ([], ["w5"])]:
        ours = wv.most_similar(positive=pos, negative=neg, topn=7)
        theirs = kv.most_similar(positive=pos, negative=neg, topn=7)
        assert [w for w, _ in ours] == [w for w, _ in theirs]
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], rtol=1e-5, atol=1e-6)
    ours = wv.analogy("w4", "w2", "w3", method="3cosmul", topn=5)
    theirs = kv.most_similar_cosmul(positive=["w2", "w3"], negative=["w4"], topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], rtol=1e-4)
    assert [w for w, _ in wv.most_similar("w1", topn=5, restrict_vocab=100)] == [
        w for w, _ in kv.most_similar("w1", topn=5, restrict_vocab=100)
    ]
    assert wv.similarity("w1", "w9") == pytest.approx(float(kv.similarity("w1", "w9")), abs=1e-6)


def test_king_queen_analogy():
    words = ["man", "woman", "king", "queen", "apple", "car"]
    rng = np.random.default_rng(1)
    base = {w: rng.standard_normal(16) for w in ["man", "king", "apple", "car"]}
    gender = rng.standard_normal(16)
    base["woman"] = base["man"] + gender
    base["queen"] = base["king"] + gender
    wv = WordVectors(words, np.stack([base[w] for w in words]))
    assert wv.analogy("man", "king", "woman")[0][0] == "queen"
    assert wv.analogy("man", "king", "woman", method="3cosmul")[0][0] == "queen"
    with pytest.raises(PtmError, match="method"):
        wv.analogy("man", "king", "woman", method="nope")


def _analogy_vectors() -> WordVectors:
    """Vectors for the words of questions-words.txt with planted offsets in two sections."""
    rng = np.random.default_rng(0)
    dim = 40
    vecs: dict[str, np.ndarray] = {}
    section = None
    offsets = {"capital-common-countries": rng.standard_normal(dim), "family": rng.standard_normal(dim)}
    with open(datapath("questions-words.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith(": "):
                section = line[2:].strip()
                continue
            a, b, c, d = line.split()
            for x, y in ((a, b), (c, d)):
                if x not in vecs:
                    vecs[x] = rng.standard_normal(dim)
                if y not in vecs:
                    off = offsets.get(section)
                    vecs[y] = vecs[x] + off + 0.3 * rng.standard_normal(dim) if off is not None else rng.standard_normal(dim)
    words = list(vecs)
    # lower-case twins placed after the original (less frequent): the upper-cased lookup must pick the original
    twins = [w.lower() for w in words[:60] if w.lower() not in vecs]
    all_words = words + twins
    matrix = np.stack([vecs[w] for w in words] + [rng.standard_normal(dim) for _ in twins]).astype(np.float32)
    return WordVectors(all_words, matrix)


def test_evaluate_analogies_matches_gensim():
    wv = _analogy_vectors()
    kv = _keyed(wv)
    restrict = 700  # leaves some questions out of vocabulary
    ours = wv.evaluate_analogies(datapath("questions-words.txt"), restrict_vocab=restrict)
    score, sections = kv.evaluate_word_analogies(datapath("questions-words.txt"), restrict_vocab=restrict)
    assert ours["accuracy"] == pytest.approx(score)
    for s in sections[:-1]:
        got = ours["sections"][s["section"]]
        assert got["correct"] == len(s["correct"]), s["section"]
        assert got["total"] == len(s["correct"]) + len(s["incorrect"])
    assert ours["sections"]["capital-common-countries"]["accuracy"] > 0.5
    assert ours["n_oov"] > 0 and ours["n_questions"] + ours["n_oov"] == 19544


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_evaluate_analogies_3cosmul_matches_gensim_cosmul(tmp_path):
    """gensim's evaluate_word_analogies only does 3CosAdd: replay its protocol with most_similar_cosmul."""
    wv = _analogy_vectors()
    kv = _keyed(wv)
    lines = open(datapath("questions-words.txt"), encoding="utf-8").read().splitlines()
    subset = tmp_path / "q.txt"  # the first two sections (1012 questions) keep the replay fast
    subset.write_text("\n".join(lines[: lines.index(": currency")]) + "\n")
    # gensim's most_similar_cosmul ignores restrict_vocab, so compare on the whole vocabulary
    ours = wv.evaluate_analogies(subset, restrict_vocab=len(wv), method="3cosmul")
    ok = {w.upper(): i for i, w in reversed(list(enumerate(wv.words)))}
    correct = total = 0
    with open(subset, encoding="utf-8") as f:
        for line in f:
            if line.startswith(": "):
                continue
            a, b, c, expected = line.upper().split()
            if not all(w in ok for w in (a, b, c, expected)):
                continue
            saved, kv.key_to_index = kv.key_to_index, ok
            sims = kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=5)
            kv.key_to_index = saved
            predicted = next((w.upper() for w, _ in sims if w.upper() not in {a, b, c}), None)
            correct += predicted == expected
            total += 1
    assert ours["n_questions"] == total
    assert ours["correct"] == correct


def test_evaluate_pairs_matches_gensim():
    import csv

    words = set()
    with open(datapath("wordsim353.tsv"), encoding="utf-8") as f:
        for row in csv.reader((l for l in f if not l.startswith("#")), delimiter="\t"):
            words.update(row[:2])
    words = sorted(words)[:-30]  # some pairs out of vocabulary
    wv = _random_vectors(words, seed=3)
    kv = _keyed(wv)
    ours = wv.evaluate_pairs(datapath("wordsim353.tsv"))
    pearson, spearman, oov_ratio = kv.evaluate_word_pairs(datapath("wordsim353.tsv"))
    assert ours["spearman"] == pytest.approx(spearman.statistic, abs=1e-6)
    assert ours["pearson"] == pytest.approx(pearson.statistic, abs=1e-6)
    assert 100 * ours["oov_ratio"] == pytest.approx(oov_ratio)
    assert ours["n_oov"] > 0 and ours["n_pairs"] + ours["n_oov"] == 353
    simlex = wv.evaluate_pairs(datapath("simlex999.txt"))
    assert simlex["n_pairs"] + simlex["n_oov"] == 999


def test_unknown_word_and_bad_eval_files(tmp_path):
    wv = _random_vectors(["alpha", "beta", "gamma"])
    with pytest.raises(PtmError, match="'alpah' is not in the vocabulary.*did you mean 'alpha'"):
        wv.most_similar("alpah")
    with pytest.raises(KeyError):
        wv["delta"]
    with pytest.raises(PtmError):
        wv.similarity("alpha", "delta")
    bad = tmp_path / "q.txt"
    bad.write_text(": s\na b c\n")
    with pytest.raises(PtmError, match="four words"):
        wv.evaluate_analogies(bad)
    with pytest.raises(PtmError, match="not found"):
        wv.evaluate_pairs(tmp_path / "missing.tsv")
    with pytest.raises(PtmError, match="only 0 word pairs"):
        wv.evaluate_pairs([("x", "y", 1.0), ("alpha", "zzz", 2.0)])


def test_normed_is_cached_and_unit():
    wv = _random_vectors([f"w{i}" for i in range(10)])
    n = wv.normed
    assert n is wv.normed
    np.testing.assert_allclose(np.linalg.norm(n, axis=1), 1.0, rtol=1e-5)


def test_cli_vectors(tmp_path, capsys):
    from ptmkit.cli import main

    words = ["man", "woman", "king", "queen", "apple", "car"]
    rng = np.random.default_rng(1)
    base = {w: rng.standard_normal(16) for w in ["man", "king", "apple", "car"]}
    gender = rng.standard_normal(16)
    base["woman"], base["queen"] = base["man"] + gender, base["king"] + gender
    path = tmp_path / "v.txt"
    WordVectors(words, np.stack([base[w] for w in words])).save(path, format="word2vec")
    assert main(["vectors", "analogy", str(path), "man", "king", "woman"]) == 0
    assert "man : king :: woman : queen" in capsys.readouterr().out
    assert main(["vectors", "neighbors", str(path), "king", "-n", "2"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert main(["vectors", "similarity", str(path), "king", "queen"]) == 0
    assert abs(float(capsys.readouterr().out) - WordVectors.load(path).similarity("king", "queen")) < 1e-4
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("man\twoman\t8\nking\tqueen\t9\napple\tcar\t1\nman\tzebra\t3\n")
    assert main(["vectors", "evaluate", str(path), "--pairs", str(pairs), "--json"]) == 0
    assert '"n_oov": 1' in capsys.readouterr().out
    assert main(["vectors", "neighbors", str(path), "kingg"]) == 2
    assert "not in the vocabulary" in capsys.readouterr().err
    assert main(["vectors", "evaluate", str(path), "--pairs", "nosuchset"]) == 2
