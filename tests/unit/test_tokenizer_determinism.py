"""Tokenizer training is deterministic across processes; the subword trainers match HF's algorithms."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import pre_tokenizers, trainers

from ptmkit.tokenization import KINDS, SPECIAL_TOKENS, Tokenizer
from ptmkit.tokenization import kinds as K
from ptmkit.tokenization.merges import train_merges
from ptmkit.tokenization.unigram import train_unigram

SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "un", "der", "ing", "pre", "ta", "es", "co", "ver", "ly"]


def _text(n_lines: int = 1500, seed: int = 0) -> str:
    """PTB-like text: Zipf-distributed words made of shared syllables (many equal pair counts)."""
    rng = random.Random(seed)
    vocab = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(1500)})
    weights = [1.0 / (r + 1) for r in range(len(vocab))]
    lines = []
    for _ in range(n_lines):
        words = rng.choices(vocab, weights, k=rng.randint(4, 14))
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        lines.append(" ".join(words) + rng.choice([" .", " ,", "", " N"]))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("det") / "text.txt"
    path.write_text(_text(), encoding="utf-8")
    return path


TRAIN_ALL = """
import sys
from ptmkit.tokenization import KINDS, Tokenizer
for kind in KINDS:
    Tokenizer.train([sys.argv[1]], kind, 400).save(f"{sys.argv[2]}/{kind}.json")
"""


def test_same_tokenizer_json_in_separate_processes(text_file, tmp_path):
    """HF's own trainers give a different vocabulary per process (hash-map order); ours must not."""
    env = dict(os.environ, PYTHONHASHSEED="random")
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        out.mkdir()
        runs.append((out, subprocess.Popen([sys.executable, "-c", TRAIN_ALL, str(text_file), str(out)], env=env,
                                           stderr=subprocess.PIPE, text=True)))
    for _, proc in runs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    for kind in KINDS:
        a, b = ((out / f"{kind}.json").read_bytes() for out, _ in runs)
        assert a == b, f"{kind}: the two processes trained different tokenizers"


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_vocab_size_is_the_one_asked(kind, text_file):
    tok = Tokenizer.train([text_file], kind, 300)
    assert tok.vocab_size == 300
    assert [tok.id_to_token(i) for i in range(len(SPECIAL_TOKENS))] == SPECIAL_TOKENS


def test_bpe_equals_hf_bpe_trainer(text_file):
    """With the byte-level alphabet every id is fixed before training, so HF's BPE trainer is
    deterministic too, and ours follows the same algorithm: the files are identical."""
    ours = Tokenizer.train([text_file], "bpe", 500)
    hf = K.build("bpe", lowercase=True)
    hf.train([str(text_file)], trainers.BpeTrainer(
        vocab_size=500, min_frequency=2, show_progress=False, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    K.add_post_processor(hf)
    assert ours.to_json() == hf.to_str()


def test_wordpiece_close_to_hf_trainer(text_file):
    """HF's WordPiece trainer differs from run to run in tie-breaks only: same structure, and
    nearly the same vocabulary."""
    ours = json.loads(Tokenizer.train([text_file], "wordpiece", 400).to_json())
    hf = K.build("wordpiece", lowercase=True)
    hf.train([str(text_file)], trainers.WordPieceTrainer(
        vocab_size=400, min_frequency=2, show_progress=False, special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##"))
    K.add_post_processor(hf)
    theirs = json.loads(hf.to_str())
    ours_vocab, their_vocab = ours["model"].pop("vocab"), theirs["model"].pop("vocab")
    assert ours == theirs
    assert len(ours_vocab) == len(their_vocab) and len(set(ours_vocab) & set(their_vocab)) >= 0.95 * len(their_vocab)


def test_merge_ties_break_by_the_smaller_pair():
    # "c d" and "a b" occur twice each: the pair with the smaller ids (a, ##b) is merged first.
    vocab, merges = train_merges(["cd", "ab", "x"], np.array([2, 2, 1]), 100, 1, ["[S]"], prefix="##")
    assert list(vocab) == ["[S]", "a", "b", "c", "d", "x", "##b", "##d", "ab", "cd"]
    assert merges == [("a", "##b"), ("c", "##d")]
    # "a a a" merges left to right: (a a) a, then the pair (aa, a); min_frequency stops merging
    vocab, merges = train_merges(["aaa"], np.array([3]), 100, 1, [])
    assert merges == [("a", "a"), ("aa", "a")]
    assert train_merges(["aaa"], np.array([3]), 100, 7, [])[1] == []  # (a, a) occurs 6 times


def test_unigram_keeps_every_character_and_scores_best_first():
    words = ["\u2581low", "\u2581lower", "\u2581newest", "\u2581widest", "\u2581new"]
    pieces = train_unigram(words, np.array([5, 2, 6, 3, 4]), 30, n_special=5)
    tokens = [p for p, _ in pieces]
    assert len(tokens) == len(set(tokens)) <= 25
    assert set("".join(words)) <= set(tokens)
    scores = [s for _, s in pieces]
    assert scores == sorted(scores, reverse=True)
