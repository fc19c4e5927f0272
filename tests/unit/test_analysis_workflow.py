"""``ptm analyse`` end to end on tiny models: every analysis of a BERT and its random-init twin on
a small corpus, synthetic trees and tags (files, numbers, figures, vectors ptm vectors reads), the
same numbers from the same command, and the refusals."""

import json

import numpy as np
import pytest
import torch
from conftest import WORDS, run_cli, tiny_checkpoint, write_corpus

from ptmkit.build import build_model
from ptmkit.encoders.lstm import LSTMConfig
from ptmkit.interop.word2vec_format import read_vectors
from ptmkit.pretrained import save_pretrained
from ptmkit.tokenization import Tokenizer
from ptmkit.workflows.analyse import analyse

torch.set_num_threads(1)


def _trees_and_tags(root, n=60, seed=0):
    rng = np.random.default_rng(seed)
    trees, tagged = root / "trees.jsonl", root / "tags.jsonl"
    with open(trees, "w") as ft, open(tagged, "w") as fg:
        for _ in range(n):
            W = int(rng.integers(5, 10))
            words = [str(w) for w in rng.choice(WORDS, size=W)]
            heads = [0] + [int(rng.integers(1, i + 1)) for i in range(1, W)]  # 1-based, root first
            rels = ["root"] + [("det" if w in ("the", "a") else "dep") for w in words[1:]]
            ft.write(json.dumps({"tokens": words, "heads": heads, "relations": rels}) + "\n")
            fg.write(json.dumps({"tokens": words, "tags": ["DET" if w in ("the", "a") else "X" for w in words]}) + "\n")
    return trees, tagged


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyse")
    corpus = write_corpus(root / "corpus.txt", docs=8)
    ck = tiny_checkpoint(root / "bert", corpus.read_text().splitlines()[:60])
    trees, tags = _trees_and_tags(root)
    return root, corpus, ck, trees, tags


def _run(setup, out, **kw):
    root, corpus, ck, trees, tags = setup
    args = dict(what="contextuality,probe,attention,heads", random_twins=True, static_layers=(1, 2), max_sentences=80,
                pos_task=str(tags), trees=str(trees), probe_sentences=(40, 20), probe_epochs=2, attention_sentences=20,
                attention_probe_updates=200,
                progress=False)
    return analyse([ck], corpus, out, **{**args, **kw})


def test_every_analysis_of_a_model_and_its_twin(setup, tmp_path):
    doc = _run(setup, tmp_path / "a")
    out = tmp_path / "a"
    assert {p.name for p in out.iterdir()} >= {"analysis.json", "report.md", "figures", "vectors"}
    assert json.loads((out / "analysis.json").read_text())["models"].keys() == doc["models"].keys()
    (name, twin) = doc["models"]
    assert twin.endswith("(random init)")
    for r in doc["models"].values():
        c = r["contextuality"]
        assert len(c["anisotropy"]) == 3 and len(c["self_similarity"]) == 3 and c["words"] > 5
        assert all(0 < m <= 1 for m in c["mev"])
        pos = r["probe"]["pos"]
        assert len(pos["layers"]) == 3 and {"linear", "mlp"} <= pos["layers"][0].keys()
        assert 0 <= pos["mix"]["expected_layer"] <= 2
        assert len(r["probe"]["structural"]) == 3 and "uuas" in r["probe"]["structural"][0]["distance"]
        assert np.asarray(r["attention"]["stats"]["entropy"]).shape == (2, 4)
        dep = r["attention"]["relations"]["dep"]
        assert dep["best_direction"] in ("dep->head", "head<-dep") and len(dep["accuracy_head_to_dep"]) == 2
        probe = r["attention"]["probe"]
        assert 0 <= probe["uas"] <= 1 and len(probe["weights"]) == 2 * 2 * 4  # both directions of 2 x 4 heads
        assert probe["train_sentences"] == 40 and probe["test_sentences"] == 20 and probe["updates"] == 200
        assert r["probe"]["structural"][0]["root_selectivity"] == pytest.approx(
            r["probe"]["structural"][0]["depth"]["root_accuracy"] - r["probe"]["structural"][0]["depth_control"]["root_accuracy"])
        assert np.asarray(r["heads"]["importance"]).shape == (2, 4)
    words, vecs = read_vectors(out / "vectors" / c["static_vectors"]["1"])
    assert vecs.shape == (c["words"], 32)
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"contextuality.png", "probes.png", "structural.png"} <= figures
    report = (out / "report.md").read_text()
    assert "## Contextuality" in report and "figures/contextuality.png" in report
    assert "## Where each task is solved" in report and "Attention-only probe" in report and "| direction |" in report
    # the same command, the same numbers
    again = _run(setup, tmp_path / "b", random_twins=False)
    assert json.dumps(again["models"][name], sort_keys=True) == json.dumps(doc["models"][name], sort_keys=True)


def test_refusals(setup, tmp_path, capsys):
    root, corpus, ck, trees, tags = setup
    rare = tmp_path / "rare.txt"
    rare.write_text("one two three\nfour five six\n")
    rc, err = run_cli(["analyse", ck, "--corpus", rare, "--what", "contextuality", "-o", tmp_path / "o1"], capsys)
    assert rc == 2 and "no word of the corpus occurs at least 5 times (6 words, 6 distinct" in err
    rc, err = run_cli(["analyse", ck, "--corpus", corpus, "--what", "contextuality", "--static-layers", "7",
                       "-o", tmp_path / "o2"], capsys)
    assert rc == 2 and "layer 7 is beyond" in err and "0 (embeddings) .. 2" in err
    rc, err = run_cli(["analyse", ck, "--corpus", corpus, "--what", "syntax", "-o", tmp_path / "o3"], capsys)
    assert rc == 2 and "--what takes" in err
    tok = Tokenizer.load(ck / "tokenizer.json")
    cfg = LSTMConfig(vocab_size=tok.vocab_size, num_layers=1, hidden_size=16, projection_size=8, char_cnn=False)
    config = {"model": {"encoder": "lstm", **cfg.__dict__}, "objective": {"name": "bilm"}, "tokenizer": {"kind": "wordpiece"},
              "train": {}}
    elmo = save_pretrained(tmp_path / "elmo", config, build_model(config, tok), tok)
    rc, err = run_cli(["analyse", elmo, "--corpus", corpus, "--what", "attention", "-o", tmp_path / "o4"], capsys)
    assert rc == 2 and "lstm encoder has no attention heads" in err
    assert not (tmp_path / "o4" / "analysis.json").exists()
    # a tree whose word the model's tokenizer cannot align (a zero-width space): refused, naming the tree
    lines = trees.read_text().splitlines()
    bad = json.loads(lines[45])
    bad["tokens"][1] = "\u200b"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:45] + [json.dumps(bad)] + lines[46:]) + "\n")
    rc, err = run_cli(["analyse", ck, "--corpus", corpus, "--what", "probe", "--pos-task", tags, "--trees", broken,
                       "--probe-sentences", "40,20", "-o", tmp_path / "o5"], capsys)
    assert rc == 2 and "broken.jsonl, test: tree 6" in err and "gives no piece for the word" in err
    assert not (tmp_path / "o5").exists()


def test_a_fine_tuned_model_is_analysed_through_its_fine_tuned_encoder(tmp_path):
    """A fine-tuned run (``OUT/pretrained-seed0``) is a subject: its encoder as the task left it, not
    the checkpoint it started from (SimCSE's anisotropy is measured this way)."""
    from conftest import fine_tuned_toy, toy_sentiment

    from ptmkit.analysis.models import load_subject
    from ptmkit.tasks.saved import load_predictor

    fine_tuned_toy(tmp_path, toy_sentiment())
    run = tmp_path / "run"
    subject = load_subject(run)
    tuned = load_predictor(run).backbone.state_dict()
    start = load_subject(tmp_path / "model" / "ck").backbone.state_dict()
    mine = subject.backbone.state_dict()
    assert subject.model is None and not subject.causal
    assert all(torch.equal(mine[k], tuned[k]) for k in tuned)
    assert any(not torch.equal(mine[k], start[k]) for k in start if k in mine)
