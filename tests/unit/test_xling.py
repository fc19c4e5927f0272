"""Cross-lingual measures: retrieval P@1 with centering, lexicon induction, per-layer word and
sentence vectors with each text's language as token types, and the suite's table."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ptmkit.analysis import xling as X
from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides
from ptmkit.errors import PtmError
from ptmkit.presets import load_preset
from ptmkit.tokenization import Tokenizer
from ptmkit.workflows.xling import render, words_of


def test_retrieval_finds_translations_and_centering_removes_the_language_offset():
    rng = np.random.default_rng(0)
    source = rng.normal(size=(50, 16))
    assert X.retrieval_p1(source, source.copy()) == 1.0
    shuffled = source[rng.permutation(50)]
    assert X.retrieval_p1(source, shuffled) < 0.2
    # by hand: targets = sources + (-3, 0), a language offset.  Raw cosine sends (1, 0) to (-3, 1)
    # (cos -0.95 beats -1); centered, both sides are (±0.5, ∓0.5) and every pair is found
    src = np.array([[1.0, 0.0], [0.0, 1.0]])
    tgt = src + np.array([-3.0, 0.0])
    assert X.retrieval_p1(src, tgt) == 0.5
    assert X.retrieval_p1(src, tgt, center=True) == 1.0


def test_lexicon_p1_counts_any_gold_translation():
    source_words = ["house", "dog", "sea"]
    target_words = ["casa", "perro", "mar", "hogar"]
    source = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    target = np.array([[0.1, 1.0], [0.0, 1.0], [1.0, 0.9], [1.0, 0.05]])
    gold = {"house": {"casa", "hogar"}, "dog": {"perro"}, "sea": {"mar"}, "cat": {"gato"}}
    p1, n = X.bli_p1(source_words, source, target_words, target, gold)
    # house -> hogar (a gold translation), dog -> perro, sea -> mar; "cat" has no vector
    assert (p1, n) == (1.0, 3)
    gold["house"] = {"casa"}
    assert X.bli_p1(source_words, source, target_words, target, gold) == (pytest.approx(2 / 3), 3)


@pytest.fixture(scope="module")
def subject(tmp_path_factory):
    root = tmp_path_factory.mktemp("xling")
    (root / "en.txt").write_text("the house is big\nthe dog runs\n" * 20, encoding="utf-8")
    (root / "es.txt").write_text("la casa es grande\nel perro corre\n" * 20, encoding="utf-8")
    tok = Tokenizer.train([root / "en.txt", root / "es.txt"], "wordpiece", 80, languages=["en", "es"])
    raw = apply_overrides(load_preset("xlm-tiny"), ["model.dropout=0", "model.attention_dropout=0"])
    config = resolve_config(raw, tok)
    torch.manual_seed(0)
    model = build_model(config, tok)
    return SimpleNamespace(backbone=model.backbone, tokenizer=tok, causal=False, config=config)


def test_language_types_follow_the_models_training(subject):
    assert X.language_types(subject, "es") == 1
    plain = SimpleNamespace(**{**subject.__dict__, "config": {"objective": {"name": "xlm", "language_embeddings": False}}})
    assert X.language_types(plain, "es") is None
    with pytest.raises(PtmError, match="not among the tokenizer's training languages"):
        X.language_types(subject, "ny")


def test_word_and_sentence_vectors_match_the_encoder(subject):
    sentences = [["la", "casa", "es", "grande"], ["el", "perro", "corre"]]
    got = list(X.word_vectors(subject, sentences, "es"))
    tok = subject.tokenizer
    for words, (vectors, sentence) in zip(sentences, got):
        ids = tok.encode(" ".join(words), add_special_tokens=True)
        with torch.no_grad():
            out = subject.backbone(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long),
                                   token_type_ids=torch.ones(1, len(ids), dtype=torch.long), output_hidden_states=True)
        hidden = torch.stack(out.hidden_states, 0)[:, 0].numpy()  # [L + 1, T, d]
        np.testing.assert_allclose(sentence, hidden[:, 1:-1].mean(1), atol=1e-5)
        word_ids = tok.word_ids(" ".join(words))  # piece -> word, pieces without [CLS] and [SEP]
        for w in range(len(words)):
            pieces = [t + 1 for t, k in enumerate(word_ids) if k == w]  # + 1: [CLS]
            np.testing.assert_allclose(vectors[:, w], hidden[:, pieces].mean(1), atol=1e-5)


def test_contextual_averages_average_over_occurrences(subject):
    sentences = [["la", "casa", "es", "grande"], ["el", "perro", "corre"], ["la", "casa"]]
    words, vectors = X.contextual_averages(subject, sentences, "es", ["casa", "gato", "perro"])
    assert words == ["casa", "perro"]
    per = [v for v, _ in X.word_vectors(subject, sentences, "es")]
    np.testing.assert_allclose(vectors[0], (per[0][:, 1] + per[2][:, 1]) / 2, atol=1e-5)
    np.testing.assert_allclose(vectors[1], per[1][:, 1], atol=1e-5)


def test_words_of_cuts_punctuation():
    assert words_of("And God said, Let there be light.") == ["And", "God", "said", ",", "Let", "there", "be", "light", "."]


def test_table_gives_best_layer_and_centering_gain():
    results = {"models": {"m": {
        "retrieval": {"en-es": {"pairs": 3, "en->es": [0.1, 0.2, 0.1], "en->es/centered": [0.2, 0.5, 0.3],
                                "es->en": [0.1, 0.1, 0.1], "es->en/centered": [0.1, 0.3, 0.2]},
                      "en-grc": {"skipped": "the tokenizer was not trained on grc"}},
        "lexicon": {"embedding/centered": 0.05, "contextual/centered": [0.01, 0.07, 0.02]},
        "alignment": {"argmax": [{"aer": 0.9}, {"aer": 0.6}, {"aer": 0.7}]}}},
        "ibm_model1": {"forward": {"aer": 0.55}}}
    table = render(results)
    assert "| m | 0.500 @1 (+0.300) | 0.300 @1 (+0.200) | 0.050 | 0.070 @1 | 0.600 @1 |" in table
    assert "en->grc" not in table and "forward 0.550" in table
