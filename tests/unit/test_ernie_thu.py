"""ERNIE (Tsinghua): dEA's 5/15/80 corruption rates, the token-to-entity alignment (by vocabulary,
or by the links ``ptm prepare --link`` records: multi-word and inflected mentions), the
aggregator's fusion (an entity changes its own token's state, never an unaligned one's), and
training through ``ptm pretrain`` with exact resume and one-line refusals of bad inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import TINY, run_cli, write_corpus
from safetensors.torch import load_file

from ptmkit.data.corpus import Corpus
from ptmkit.encoders.transformer_config import TransformerConfig
from ptmkit.knowledge.corpus_entities import read_entities, word_positions
from ptmkit.knowledge.graph import KnowledgeGraph, surface_table
from ptmkit.objectives.ernie_thu import Aggregator, dea_corruption, token_entities
from ptmkit.objectives.lexicon import read_alignment, token_words
from ptmkit.tokenization import Tokenizer

WORDS = ("cat", "dog", "house", "the", "ran", "sat")
SMALL = [a for a in TINY if not a.startswith("train.max_steps")] + ["train.log_every=1", "--quiet"]


def test_dea_rates_are_5_15_80():
    rng = np.random.default_rng(0)
    targets = rng.integers(-1, 1000, size=(400, 500))  # about 1/1001 unaligned
    inputs = dea_corruption(targets, 1000, 0.05, 0.15, rng)
    aligned = targets >= 0
    n = aligned.sum()
    hidden = (inputs == -1) & aligned
    changed = (inputs != targets) & (inputs >= 0) & aligned
    kept = (inputs == targets) & aligned
    assert abs(hidden.sum() / n - 0.15) < 0.003
    assert abs(changed.sum() / n - 0.05 * 999 / 1000) < 0.002  # a random entity may be the true one
    assert abs(kept.sum() / n - 0.80) < 0.003
    assert (inputs[~aligned] == -1).all()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ernie")
    corpus = write_corpus(root / "corpus.txt", docs=20)
    rng = np.random.default_rng(0)
    names = [f"E_{w}" for w in WORDS] + ["E_unused"]
    vec = rng.normal(size=(len(names), 8)).round(4)
    (root / "vectors.txt").write_text(f"{len(names)} 8\n" + "".join(
        n + " " + " ".join(map(str, v)) + "\n" for n, v in zip(names, vec)))
    (root / "alignment.tsv").write_text("".join(f"{w}\tE_{w}\n" for w in WORDS) + "Cat\tE_dog\nzebra\tE_unused\n")
    tok = Tokenizer.train([corpus], kind="wordpiece", vocab_size=120, min_frequency=1)
    return root, corpus, tok, names


def test_whole_word_tokens_align_to_their_entities(files):
    root, _, tok, names = files
    alignment = read_alignment(root / "alignment.tsv")
    assert alignment["cat"] == "E_cat"  # the first line of a word wins over "Cat"
    table = token_entities(tok, tok.vocab_size, alignment, names)
    words = token_words(tok, tok.vocab_size)
    for w in WORDS:
        if w in words:
            assert names[table[words.index(w)]] == f"E_{w}"
    assert (table[[i for i, w in enumerate(words) if w is None]] == -1).all()  # specials and ##pieces
    assert "E_unused" not in {names[r] for r in table[table >= 0]}


def test_an_entity_changes_its_own_tokens_state_only():
    cfg = TransformerConfig(vocab_size=10, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position=16, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    layer = Aggregator(cfg, entity_dim=8, entity_heads=2).eval()
    w = torch.randn(1, 5, 16)
    e = torch.randn(1, 5, 8)
    aligned = torch.tensor([[0, 1, 0, 1, 0]], dtype=torch.bool)
    token_mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
    entity_mask = aligned[:, None, None, :] | torch.eye(5, dtype=torch.bool)

    def run(e_in):
        return layer(w, e_in * aligned[..., None], token_mask, entity_mask, aligned[..., None].float())

    w1, e1 = run(e)
    e2 = e.clone()
    e2[0, 0] = torch.randn(8)  # position 0 is not aligned: its entity is no input
    assert torch.equal(run(e2)[0], w1)
    e3 = e.clone()
    e3[0, 1] = torch.randn(8)  # an aligned entity: its token changes through the fusion layer
    w3, _ = run(e3)
    assert not torch.allclose(w3[0, 1], w1[0, 1])
    assert (e1[0, [0, 2, 4]] == 0).all()  # unaligned positions carry no entity state
    # no alignment at all: tokens pass through attention and the fusion layer without an entity term
    none = torch.zeros(1, 5, dtype=torch.bool)
    w4, _ = layer(w, torch.zeros(1, 5, 8), token_mask, none[:, None, None, :] | torch.eye(5, dtype=torch.bool),
                  none[..., None].float())
    wt = layer.token_norm(w + layer.token_attention(w, token_mask))
    want = layer.token_out_norm(wt + layer.token_out(layer.act(layer.fuse_token(wt))))
    torch.testing.assert_close(w4, want)


def test_pretrain_and_resume_exactly(files, tmp_path, capsys):
    root, corpus, _, _ = files
    base = ["pretrain", "ernie-thu-tiny", "--data", corpus]
    settings = [*SMALL, f"objective.entities={root}/vectors.txt", f"objective.alignment={root}/alignment.tsv",
                "objective.entity_heads=2"]
    run, half = tmp_path / "run", tmp_path / "half"
    rc, err = run_cli([*base, "-o", run, *settings, "train.max_steps=4"], capsys)
    assert rc == 0, err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("dea_loss" in r and math.isfinite(r["dea_loss"]) and r.get("aligned", 0) > 0 for r in records)
    assert run_cli([*base, "-o", half, *settings, "train.max_steps=2"], capsys)[0] == 0
    rc, err = run_cli([*base, "-o", half, "--resume", *settings, "train.max_steps=4"], capsys)
    assert rc == 0, err
    a = load_file(str(run / "checkpoints" / "step-0000004" / "model.safetensors"))
    b = load_file(str(half / "checkpoints" / "step-0000004" / "model.safetensors"))
    assert any(k.startswith("objective.k_encoder.") for k in a)
    assert not any("entity_table" in k for k in a)  # the frozen KG embeddings are read, never saved
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_inputs_are_refused_in_one_line(files, tmp_path, capsys):
    root, corpus, _, _ = files
    other = tmp_path / "other.tsv"
    other.write_text("perro\tE_dog\n")
    for setting, fragment in (
        (f"objective.entities={tmp_path / 'none'}", "no entity vectors there"),
        ("objective.entities=null", "ERNIE needs objective.entities"),
        (f"objective.alignment={other}", "no entry of the tokenizer's vocabulary is a word aligned"),
        ("objective.dea_mask=0.99", "objective.dea_random and objective.dea_mask"),
        ("objective.entity_heads=3", "objective.entity_heads must divide"),
    ):
        settings = [f"objective.entities={root}/vectors.txt", f"objective.alignment={root}/alignment.tsv", setting]
        rc, err = run_cli(["pretrain", "ernie-thu-tiny", "--data", corpus, "-o", tmp_path / "o", *SMALL,
                           "train.max_steps=2", *settings], capsys)
        assert rc == 2 and fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def toy_graph(root):
    """hot dog (a sausage), dog, house, cat; "a" and "in" name units, as WordNet's do."""
    entities = ["E_hotdog", "E_dog", "E_house", "E_cat", "E_angstrom", "E_inch"]
    surfaces = surface_table([("hot_dog", 0, 1), ("dog", 1, 1), ("house", 2, 1), ("cat", 3, 1), ("a", 4, 1),
                              ("in", 5, 1)])
    graph = KnowledgeGraph(entities, ["_hypernym"], np.array([[0, 0, 1]]), *surfaces)
    graph.save(root / "graph")
    return root / "graph"


def test_prepare_records_entity_links_beside_the_word_starts(tmp_path, capsys):
    graph = toy_graph(tmp_path)
    text = tmp_path / "t.txt"
    text.write_text("a cat ate hot dogs in the house\nthe dog sat\n")
    tok = Tokenizer.train([text], kind="wordpiece", vocab_size=60, min_frequency=1)
    tok.save(tmp_path / "tok.json")
    rc, err = run_cli(["prepare", text, "-t", tmp_path / "tok.json", "-o", tmp_path / "c", "--link", graph], capsys)
    assert rc == 0, err
    corpus = Corpus.open(tmp_path / "c")
    links, names = read_entities(corpus)
    words = [tok.decode([int(t)]).strip() for t in corpus.tokens]
    starts = word_positions(corpus)
    by_word = {}
    for k, p in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else corpus.n_tokens
        by_word.setdefault("".join(w.replace("##", "") for w in words[p:end]), []).append(
            names[links[p]] if links[p] >= 0 else None)
    assert by_word["hot"] == ["E_hotdog"] and by_word["dogs"] == ["E_hotdog"]  # a multi-word, inflected mention
    assert by_word["cat"] == ["E_cat"] and by_word["dog"] == ["E_dog"] and by_word["house"] == ["E_house"]
    assert by_word["a"] == [None] and by_word["in"] == [None] and by_word["the"] == [None, None]
    assert (links[~np.isin(np.arange(corpus.n_tokens), starts)] == -1).all()  # word pieces carry none
    rc, err = run_cli(["prepare", text, "-t", tmp_path / "tok.json", "-o", tmp_path / "d", "--link", tmp_path / "no"],
                      capsys)
    assert rc == 2 and "--link" in err and not (tmp_path / "d").exists()


def test_ernie_trains_on_the_corpus_links(files, tmp_path, capsys):
    root, corpus_text, _, _ = files
    graph = toy_graph(tmp_path)
    tok = Tokenizer.train([corpus_text], kind="wordpiece", vocab_size=120, min_frequency=1)
    tok.save(tmp_path / "tok.json")
    assert run_cli(["prepare", corpus_text, "-t", tmp_path / "tok.json", "-o", tmp_path / "c", "--link", graph],
                   capsys)[0] == 0
    vec = np.random.default_rng(0).normal(size=(6, 4)).round(3)
    (tmp_path / "v.txt").write_text("6 4\n" + "".join(
        f"{n} " + " ".join(map(str, v)) + "\n" for n, v in zip(["E_hotdog", "E_dog", "E_house", "E_cat", "E_x", "E_y"], vec)))
    run = tmp_path / "run"
    rc, err = run_cli(["pretrain", "ernie-thu-tiny", "--data", tmp_path / "c", "-o", run, *SMALL, "train.max_steps=3",
                       f"objective.entities={tmp_path}/v.txt", "objective.alignment=corpus"], capsys)
    assert rc == 0, err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("aligned", 0) > 0 and "dea_loss" in r for r in records)
    rc, err = run_cli(["pretrain", "ernie-thu-tiny", "--data", corpus_text, "-o", tmp_path / "o", *SMALL,
                       "train.max_steps=2", f"objective.entities={tmp_path}/v.txt", "objective.alignment=corpus"], capsys)
    assert rc == 2 and "prepare it with `ptm prepare" in err and len(err.strip().splitlines()) == 1, err
