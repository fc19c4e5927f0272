"""Tang et al. (2019)'s augmentation for distillation: each rule on a fixed seed, the unigram draw of
POS-guided replacement, the tag lexicon (never downloaded), and ``ptm distil --augment`` end to end."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from conftest import fine_tuned_toy, run_cli, task_file_args, tiny_checkpoint, toy_sentiment

from ptmkit.compress import augment as aug
from ptmkit.errors import PtmError

LEXICON = {"good": "ADJ", "bad": "ADJ", "nice": "ADJ", "film": "NOUN", "movie": "NOUN", "plot": "NOUN",
           "is": "VERB", "was": "VERB", "seems": "VERB"}
TEXTS = ["the film is good", "a movie was bad", "the plot seems nice and the film was good",
         "this is a long sentence of eleven words that we cut now"]
NONE = dict(p_mask=0.0, p_pos=0.0, p_ng=0.0)


def test_masking_every_word():
    out = aug.augment(TEXTS, 3, seed=0, mask_token="[MASK]", **{**NONE, "p_mask": 1.0})
    # every word masked: one sentence of masks per distinct length, the rest dropped as repeats
    assert sorted(out) == sorted({" ".join(["[MASK]"] * len(t.split())) for t in TEXTS})
    with pytest.raises(PtmError, match="no mask token"):
        aug.augment(TEXTS, 1, mask_token=None)


def test_ngram_sampling_keeps_a_contiguous_piece_of_one_to_five_words():
    words = TEXTS[3].split()
    rules = aug.Rules(aug.AugmentSettings(p_mask=0.0, p_pos=0.0, p_ng=1.0, max_ngram=5), "[MASK]", None)
    pieces = aug.variants(words, 200, np.random.default_rng(0), rules)
    assert {len(p) for p in pieces} == {1, 2, 3, 4, 5}
    for p in pieces:
        assert any(words[i:i + len(p)] == p for i in range(len(words) - len(p) + 1))
    # through augment: every output is such a piece, and a sentence no longer than n is kept whole (a repeat)
    for s in aug.augment(TEXTS, 20, seed=1, **{**NONE, "p_ng": 1.0}):
        w = s.split()
        assert 1 <= len(w) <= 5 and any(" ".join(t.split()[i:i + len(w)]) == s for t in TEXTS for i in range(12))


def test_pos_replacement_draws_another_word_of_the_same_tag():
    sampler = aug.PosSampler(TEXTS, LEXICON)
    rules = aug.Rules(aug.AugmentSettings(p_mask=0.0, p_pos=1.0, p_ng=0.0, max_ngram=5), "[MASK]", sampler)
    rng = np.random.default_rng(0)
    for text in TEXTS[:3]:
        words = text.split()
        for version in aug.variants(words, 20, rng, rules):
            assert len(version) == len(words)
            for old, new in zip(words, version):
                if old in LEXICON:
                    assert new != old and LEXICON[new] == LEXICON[old]
                else:
                    assert new == old  # no tag: left alone
    # a tag with one word in the sentences has nothing to swap it with
    assert aug.PosSampler(["one film here"], LEXICON).draw("film", 0.5) is None


def test_pos_replacement_follows_the_unigram_counts_without_the_word_itself():
    texts = ["nice"] + ["good"] * 3 + ["Great"] * 4 + ["great"] * 2
    sampler = aug.PosSampler(texts, {"nice": "ADJ", "good": "ADJ", "great": "ADJ"})
    grid = (np.arange(7000) + 0.5) / 7000  # inverse-CDF draws over an even grid: exact shares
    drawn = [sampler.draw("good", u) for u in grid]
    assert drawn.count("Great") == 6000 and drawn.count("nice") == 1000  # 6 : 1, case folded, commonest form
    drawn = [sampler.draw("GREAT", u) for u in grid[::7]]
    assert drawn.count("good") == 750 and drawn.count("nice") == 250


def test_nothing_applied_gives_only_repeats_and_seeds_reproduce():
    assert aug.augment(TEXTS, 5, seed=0, **NONE) == []
    a = aug.augment(TEXTS, 4, seed=3, lexicon=LEXICON)
    assert a == aug.augment(TEXTS, 4, seed=3, lexicon=LEXICON)
    assert a != aug.augment(TEXTS, 4, seed=4, lexicon=LEXICON)
    originals = {" ".join(t.split()) for t in TEXTS}
    assert len(set(a)) == len(a) and not originals & set(a) and len(a) <= 4 * len(TEXTS)
    with pytest.raises(PtmError, match="p_mask \\+ p_pos must be <= 1"):
        aug.augment(TEXTS, 1, p_mask=0.6, p_pos=0.6)


def test_the_tag_lexicon_is_never_downloaded(tmp_path, monkeypatch, caplog):
    from ptmkit.data.sources import base

    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path))
    monkeypatch.setattr(base, "fetch", lambda *a, **k: pytest.fail("the lexicon fetched brown-pos"))
    with caplog.at_level(logging.WARNING, logger="ptmkit.compress.augment"):
        assert aug.tag_lexicon() is None
    assert "skips POS-guided word replacement" in caplog.text


def test_the_tag_lexicon_holds_each_words_commonest_brown_tag():
    from ptmkit.data.sources.base import is_ready

    if not is_ready("brown-pos"):
        pytest.skip("brown-pos is not in the local data cache")
    lexicon = aug.tag_lexicon()
    assert lexicon["the"] == "DET" and lexicon["house"] == "NOUN" and lexicon["quickly"] == "ADV"
    assert all(w == w.lower() for w in list(lexicon)[:1000])


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("augment")
    fine_tuned_toy(root, task, "teacher", layers=2, heads=4)
    return root, task_file_args(task, root)


def test_distil_with_augment_trains_on_the_synthetic_sentences(teacher, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(aug, "tag_lexicon", lambda: {"good": "ADJ", "bad": "ADJ", "movie": "NOUN", "plot": "NOUN",
                                                     "story": "NOUN", "scene": "NOUN", "actors": "NOUN"})
    root, files = teacher
    rc, err = run_cli(["distil", root / "teacher", *files, "-o", tmp_path / "d", "--layers", "1", "epochs=1",
                       "lr=3e-3", "batch_size=16", "max_seq_len=32", "--quiet", "--augment", "2",
                       "--augment-seed", "7", "--labels-only", "off"], capsys)
    assert rc == 0, err
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    record = summary["augment"]
    assert record["n"] == 2 and record["seed"] == 7 and record["lexicon"] == "brown-pos"
    assert (record["p_mask"], record["p_pos"], record["p_ng"], record["max_ngram"]) == (0.1, 0.1, 0.25, 5)
    assert 0 < record["synthetic"] <= 2 * 160
    result = json.loads((tmp_path / "d" / "student-seed0" / "results.json").read_text())
    assert result["sizes"]["train"] == 160 + record["synthetic"]
    assert result["training"]["labelled"] == 160  # the synthetic sentences count in the soft term only
    assert result["training"]["augment"] == record and result["compression"]["augment"] == record


def test_augment_is_refused_for_a_tagging_task(tmp_path, capsys):
    rng = np.random.default_rng(0)
    vocab = {"the": "DET", "a": "DET", "cat": "NOUN", "dog": "NOUN", "ran": "VERB", "sat": "VERB"}
    files, sentences = [], []
    for split, n in (("train", 24), ("dev", 6), ("test", 6)):
        rows = [[str(w) for w in rng.choice(list(vocab), size=int(rng.integers(2, 6)))] for _ in range(n)]
        sentences += [" ".join(r) for r in rows]
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"tokens": r, "tags": [vocab[w] for w in r]}) + "\n" for r in rows))
        files += [f"--{split}", path]
    ck = tiny_checkpoint(tmp_path / "model", sentences, layers=1, heads=2)
    rc, err = run_cli(["finetune", ck, *files, "-o", tmp_path / "tagger", "epochs=1", "batch_size=8",
                       "max_seq_len=16", "--quiet"], capsys)
    assert rc == 0, err
    rc, err = run_cli(["distil", tmp_path / "tagger" / "pretrained-seed0", *files, "-o", tmp_path / "d",
                       "--augment", "2", "--quiet"], capsys)
    assert rc == 2 and "--augment makes synthetic sentences for single-sentence classification tasks" in err
    assert "tagging" in err
