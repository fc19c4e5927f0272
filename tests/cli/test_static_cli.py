"""``ptm pretrain`` for the static models (word2vec, fastText, GloVe, SVD-PPMI, NNLM) and ``ptm vectors evaluate``
with named evaluation sets, on tiny data."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from ptmkit import registry
from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.static.presets import list_static_presets, resolve_static
from ptmkit.static.run import parse_overrides, run_static
from ptmkit.static.vectors import WordVectors

# small and fast: one thread, one epoch, every word kept
W2V = ["dim=16", "epochs=1", "min_count=1", "workers=1", "cache=false"]
SETTINGS = {
    "word2vec": W2V,
    "fasttext": ["dim=16", "epochs=1", "min_count=1", "workers=1", "cache=false", "bucket=1000"],
    "glove": ["dim=16", "epochs=2", "min_count=1", "threads=1"],
    "svd-ppmi": ["dim=8", "min_count=1"],
    "nnlm": ["dim=8", "min_count=1", "hidden=16", "order=3", "batch_size=64", "max_steps=20", "eval_every=10",
             "threads=1"],
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it king queen".split()
    path = tmp_path_factory.mktemp("static") / "corpus.txt"
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) + "\n" for _ in range(400)))
    return path


def config_of(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())


def test_help_lists_static_models_and_presets(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ["word2vec", "fasttext", "glove", "svd-ppmi", "nnlm", *registry.names("static"), *list_static_presets()]:
        assert name in out, name
    assert {"word2vec-sg-ns", "word2vec-sg-hs", "word2vec-cbow-ns", "word2vec-cbow-hs"} <= set(list_static_presets())


def test_presets_resolve_and_transformer_presets_do_not():
    assert resolve_static("word2vec-cbow-hs") == ("word2vec", {"model": "cbow", "loss": "hs", "dim": 100, "window": 5,
                                                               "sample": 1e-3, "min_count": 5, "epochs": 5})  # fmt: skip
    assert resolve_static("glove") == ("glove", {})
    assert resolve_static("bert-tiny") is None and resolve_static("no-such-thing") is None
    assert parse_overrides(["config.dim=50", "sample=1e-4", "lowercase=true"]) == {"dim": 50, "sample": 1e-4, "lowercase": True}


@pytest.mark.parametrize("model", list(SETTINGS))
def test_pretrain_routes_static_models(model, corpus, tmp_path, capsys):
    assert model in registry.names("static"), f"{model} is not registered"
    out = tmp_path / model
    assert main(["pretrain", model, "--data", str(corpus), "-o", str(out), *SETTINGS[model]]) == 0
    assert {"vectors.bin", "vocab.txt", "config.json"} <= {p.name for p in out.iterdir()}
    wv = WordVectors.load(out / "vectors.bin")
    dim = int(SETTINGS[model][0].split("=")[1])
    assert wv.dim == dim and "king" in wv and len(wv) == 21
    assert config_of(out)["static"] == model and config_of(out)["dim"] == dim
    assert f"vectors: {out / 'vectors.bin'}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == [model]  # no staging directory left behind


def test_overrides_both_spellings_and_preset(corpus, tmp_path):
    out = tmp_path / "cbow"
    # the override may also come right after --data (argparse hands it to --data first)
    argv = ["pretrain", "word2vec", "--data", str(corpus), "model=cbow", "-o", str(out), "config.loss=hs", *W2V, "config.window=3"]
    assert main(argv) == 0
    cfg = config_of(out)
    assert (cfg["model"], cfg["loss"], cfg["window"], cfg["dim"]) == ("cbow", "hs", 3, 16)
    out = tmp_path / "preset"
    assert main(["pretrain", "word2vec-cbow-hs", "--data", str(corpus), "-o", str(out), *W2V, "negative=2"]) == 0
    cfg = config_of(out)
    assert (cfg["model"], cfg["loss"], cfg["negative"], cfg["sample"]) == ("cbow", "hs", 2, 1e-3)
    assert (cfg["static"], cfg["preset"]) == ("word2vec", "word2vec-cbow-hs")


def test_preset_file(corpus, tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("static: word2vec\nconfig: {model: cbow, dim: 12, epochs: 1, min_count: 1, workers: 1, cache: false}\n")
    assert main(["pretrain", str(preset), "--data", str(corpus), "-o", str(tmp_path / "out")]) == 0
    assert WordVectors.load(tmp_path / "out" / "vectors.bin").dim == 12
    preset.write_text("static: word2vek\nconfig: {}\n")
    assert main(["pretrain", str(preset), "--data", str(corpus), "-o", str(tmp_path / "out2")]) == 2


@pytest.mark.parametrize(
    "override, message",
    [("modle=cbow", "did you mean 'model'"), ("dim=abc", "dim must be int"), ("epochs=2.5", "epochs must be int"),
     ("model=cbo", "model must be 'skipgram' or 'cbow'"), ("train.lr=0.1", "plain config keys"), ("dim", "key=value")],
)  # fmt: skip
def test_bad_overrides_fail_before_training(override, message, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(out), *W2V, override]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_refuses_existing_output_unless_overwrite(corpus, tmp_path, capsys):
    out = tmp_path / "w2v"
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(out), *W2V]) == 0
    before = (out / "vectors.bin").read_bytes()
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(out), *W2V, "dim=8"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "vectors.bin").read_bytes() == before
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(out), *W2V, "dim=8", "--overwrite"]) == 0
    assert WordVectors.load(out / "vectors.bin").dim == 8 and config_of(out)["dim"] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w2v"]
    # options of the Transformer route are refused, not ignored
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(out), "--resume"]) == 2
    assert "static" in capsys.readouterr().err
    assert main(["pretrain", "word2vec", "--data", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "x")]) == 2
    assert "not found" in capsys.readouterr().err


def test_failed_training_keeps_the_old_output(corpus, tmp_path, monkeypatch):
    out = tmp_path / "w2v"
    wv = run_static("word2vec", [corpus], out, {"dim": 8, "epochs": 1, "min_count": 1, "workers": 1, "cache": False}, progress=False)
    assert isinstance(wv, WordVectors) and wv.dim == 8
    before = (out / "vectors.bin").read_bytes()
    entry = registry.get("static", "word2vec")

    def broken(data, cfg, out=None, progress=True):
        Path(out, "vectors.bin").write_bytes(b"partial")
        raise PtmError("the corpus broke half way")

    monkeypatch.setattr(entry, "train", staticmethod(broken))
    with pytest.raises(PtmError, match="half way"):
        run_static("word2vec", [corpus], out, {"dim": 8}, progress=False, overwrite=True)
    assert (out / "vectors.bin").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w2v"]


def test_pretrain_api_routes_static(corpus, tmp_path):
    from ptmkit.workflows.pretrain import pretrain

    out = pretrain("word2vec-sg-ns", corpus, tmp_path / "api", ["dim=8", "epochs=1", "min_count=1", "workers=1"], verbose=False)
    assert WordVectors.load(Path(out) / "vectors.bin").dim == 8


def test_pretrain_nnlm_holds_out_sentences_and_reports_perplexity(corpus, tmp_path):
    from ptmkit.static.nnlm import build_lm_vocab

    out = tmp_path / "nnlm"
    argv = ["pretrain", "nnlm", "--data", str(corpus), "-o", str(out), *SETTINGS["nnlm"], "valid_fraction=0.1",
            "max_steps=60", "lr=0.01", "config.lowercase=true"]
    assert main(argv) == 0
    cfg = config_of(out)
    stats = cfg["stats"]
    assert (cfg["static"], cfg["valid_fraction"], cfg["lowercase"]) == ("nnlm", 0.1, True)
    lines = corpus.read_text().splitlines()
    # the last 10% of the sentences are held out: they are scored, not trained on
    assert stats["valid_sentences"] == 40
    assert stats["valid_words"] == sum(len(line.split()) for line in lines[-40:])
    assert stats["train_words"] == sum(len(line.split()) for line in lines[:-40])
    assert stats["steps"] <= 60 and cfg["valid_ppl"] == stats["valid_ppl"]
    # words drawn uniformly: the best model is the unigram one, perplexity just under 22 (21 words
    # and </s>); an untrained model spreads mass over <unk> too (about 23 outputs)
    assert len(build_lm_vocab([corpus], min_count=1)) == 23
    assert 15 < stats["valid_ppl"] < 22.2
    assert stats["history"][-1][1] < stats["history"][0][1]
    wv = WordVectors.load(out / "vectors.bin")
    assert "<unk>" not in wv and "</s>" not in wv and len(wv) == 21 and wv.dim == 8
    # bad settings fail before training and leave nothing behind
    assert main(["pretrain", "nnlm", "--data", str(corpus), "-o", str(tmp_path / "bad"), "valid_fraction=1.0"]) == 2
    assert main(["pretrain", "nnlm", "--data", str(corpus), "-o", str(tmp_path / "bad"), "hidden=0"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nnlm"]


# ----------------------------------------------------------------------------- ptm vectors evaluate


@pytest.fixture(scope="module")
def eval_vectors(tmp_path_factory):
    """Random vectors over every word of the gensim-eval sets (so that nothing is out of vocabulary
    except the words left out on purpose), in gensim's own KeyedVectors too."""
    from ptmkit.data.sources.base import fetch
    from ptmkit.data.sources.eval_sets import read_analogies, read_pairs

    d = fetch("gensim-eval")
    words = {w for f in ("wordsim353.tsv", "simlex999.txt") for a, b, _ in read_pairs(d / f) for w in (a, b)}
    sections = read_analogies(d / "questions-words.txt")  # a few sections only: gensim's evaluator is slow
    words |= {w for name in ("family", "gram3-comparative", "gram6-nationality-adjective") for q in sections[name] for w in q}
    words = sorted(w for w in words if w.lower() not in ("tiger", "old"))  # a few pairs become out of vocabulary
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(words), 24)).astype(np.float32)
    path = tmp_path_factory.mktemp("eval") / "vectors.bin"
    WordVectors(words, vectors).save(path)
    return path, d


def test_evaluate_by_name_matches_gensim(eval_vectors, capsys):
    gensim_models = pytest.importorskip("gensim.models")
    path, d = eval_vectors
    argv = ["vectors", "evaluate", str(path), "--pairs", "wordsim353", "simlex999", "--analogies", "google", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "spearman" in out and "3cosadd" in out and "3cosmul" in out
    results = json.loads(out.strip().splitlines()[-1])
    kv = gensim_models.KeyedVectors.load_word2vec_format(str(path), binary=True)
    for name, fname in (("wordsim353", "wordsim353.tsv"), ("simlex999", "simlex999.txt")):
        (_, _), spearman, oov = kv.evaluate_word_pairs(str(d / fname))
        r = results["pairs"][name]
        assert r["spearman"] == pytest.approx(spearman.statistic, abs=1e-5)
        assert r["oov_ratio"] == pytest.approx(oov / 100, abs=1e-6) and r["n_oov"] > 0
    score, sections = kv.evaluate_word_analogies(str(d / "questions-words.txt"), restrict_vocab=30_000)
    google = results["analogies"]["google"]
    assert google["3cosadd"]["accuracy"] == pytest.approx(score, abs=1e-9) and score > 0
    assert google["3cosadd"]["n_questions"] == len(sections[-1]["correct"]) + len(sections[-1]["incorrect"]) > 1000
    cosmul = WordVectors.load(path).evaluate_analogies(d / "questions-words.txt", method="3cosmul")
    assert google["3cosmul"]["accuracy"] == cosmul["accuracy"] != google["3cosadd"]["accuracy"]


def test_evaluate_names_paths_defaults_and_errors(eval_vectors, tmp_path, capsys, monkeypatch):
    from ptmkit.commands import vectors as vectors_cmd

    path, d = eval_vectors
    assert main(["vectors", "evaluate", str(path), "--pairs", str(d / "wordsim353.tsv"), "rg65x"]) == 2
    assert "did you mean 'rg65'" in capsys.readouterr().err
    assert main(["vectors", "evaluate", str(path), "--pairs", str(d / "wordsim353.tsv"), "--method", "3cosadd"]) == 0
    assert "wordsim353 " in capsys.readouterr().out
    # without --pairs/--analogies: every standard set (here only the gensim-eval ones, to stay small)
    monkeypatch.setattr(vectors_cmd, "PAIR_SETS", {k: v for k, v in vectors_cmd.PAIR_SETS.items() if v[0] == "gensim-eval"})
    monkeypatch.setattr(vectors_cmd, "ANALOGY_SETS", {"google": vectors_cmd.ANALOGY_SETS["google"]})
    assert main(["vectors", "evaluate", str(path), "--sections"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("wordsim353", "simlex999", "google", "capital-common-countries"))
    other = tmp_path / "other.bin"
    WordVectors(["x", "y", "z"], np.eye(3, dtype=np.float32)).save(other)
    assert main(["vectors", "evaluate", str(other), "--pairs", "wordsim353"]) == 2
    assert "no evaluation set" in capsys.readouterr().err
