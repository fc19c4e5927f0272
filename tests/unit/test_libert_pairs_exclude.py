"""LIBERT's ``objective.pairs_exclude``: the word pairs of a task's dev and test splits are left out
of the related pairs, in either order and however the two sides spell a multi-word lemma; the
count is logged; a task that is unknown or not made of word pairs is refused."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from conftest import TINY, run_cli, toy_sentiment, write_corpus

from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.objectives.lexicon import read_pairs
from ptmkit.objectives.libert import LIBERT, LIBERTConfig
from ptmkit.objectives.pair_exclusion import exclude_pairs, task_pairs, term
from ptmkit.tokenization import Tokenizer

# the lexicon writes WordNet's way (lower case, and here one multi-word lemma with "_")
PAIRS = ("cat\tdog\ndog\tcanine\ncat\tanimal\nsandwich\thot_dog\nhouse\tbuilding\nhead_of_state\tleader\n"
         "big\tlarge\nsmall\tlittle\n")


def split(rows: list[tuple[str, str, int]]) -> TaskSplit:
    return TaskSplit([a for a, _, _ in rows], np.array([y for *_, y in rows], dtype=np.int64), [b for _, b, _ in rows])


def hypernym_task() -> TaskData:
    """``lemma: definition`` pairs as wordnet-hypernym writes them (case kept, spaces in lemmas)."""
    train = split([("cat: a small feline", "animal: a living organism", 1), ("big: large in size", "small: little", 0)])
    dev = split([("Dog: a member of the genus Canis", "canine: any of various fissiped mammals", 1),
                 ("building: a structure", "house: a dwelling", 0)])  # reversed: a negative, given away all the same
    test = split([("hot dog: a frankfurter served on a bun", "sandwich: two slices of bread with a filling", 1),
                  ("leader: one who leads", "head of state: the chief public representative of a country", 0)])
    return TaskData("toy-hypernym", [0, 1], train, dev, test)


@pytest.fixture
def pairs_file(tmp_path):
    (tmp_path / "pairs.tsv").write_text(PAIRS)
    return tmp_path / "pairs.tsv"


@pytest.fixture
def lexicon(pairs_file, monkeypatch):
    """The pairs file, with the built-in task ``toy-hypernym`` (any name) read as :func:`hypernym_task`."""
    monkeypatch.setattr("ptmkit.objectives.pair_exclusion.load_task", lambda name: hypernym_task())
    return pairs_file


def test_terms_are_read_as_the_lexicon_writes_words():
    assert term("Head of State: the chief public representative") == "head of state"
    assert term("hot_dog") == "hot dog" and term("dog") == "dog"
    assert term("He nursed his injured back by lying in bed several hours every afternoon") is None


def test_exactly_the_dev_and_test_pairs_are_removed(lexicon):
    words, pairs = read_pairs(lexicon)
    kept = exclude_pairs(words, pairs, task_pairs("toy-hypernym"))
    left = {(words[a], words[b]) for a, b in kept.tolist()}
    # training pairs (cat-animal, big-large is not even a task pair) stay; dev and test pairs go,
    # whichever side the lexicon writes first and whatever the label
    assert left == {("cat", "dog"), ("cat", "animal"), ("big", "large"), ("small", "little")}
    assert kept.tolist() == [p for p in pairs.tolist() if (words[p[0]], words[p[1]]) in left]  # order kept


def tiny_libert(lexicon, tmp_path, **options) -> LIBERT:
    corpus = write_corpus(tmp_path / "corpus.txt", docs=4)
    tok = Tokenizer.train([corpus], kind="wordpiece", vocab_size=120, min_frequency=1)
    encoder = TransformerEncoder(TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1,
                                                   num_heads=2, intermediate_size=32, max_position=32))
    return LIBERT(LIBERTConfig(pairs=str(lexicon), **options), encoder, tok)


def test_libert_logs_how_many_pairs_it_left_out(lexicon, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="ptmkit.objectives.libert"):
        objective = tiny_libert(lexicon, tmp_path, pairs_exclude="toy-hypernym")
    assert len(objective.pairs) == 4
    assert "objective.pairs_exclude=toy-hypernym: removed 4 of 8 related pairs" in caplog.text
    assert len(tiny_libert(lexicon, tmp_path).pairs) == 8  # nothing left out without the option


def test_tasks_that_are_not_word_pairs_are_refused(pairs_file, monkeypatch):
    with pytest.raises(PtmError, match="unknown task 'wordnet-hypernim'.*did you mean"):
        task_pairs("wordnet-hypernim")
    monkeypatch.setattr("ptmkit.objectives.pair_exclusion.load_task", lambda name: toy_sentiment((4, 4, 4)))
    with pytest.raises(PtmError, match="not a sentence-pair classification task"):
        task_pairs("toy-sentiment")
    sentences = split([("He nursed his injured back by lying in bed several hours every afternoon",
                        "He nursed the flowers in his garden and fertilized them regularly", 1)])
    wic = TaskData("toy-wic", [0, 1], sentences, sentences, sentences)
    monkeypatch.setattr("ptmkit.objectives.pair_exclusion.load_task", lambda name: wic)
    with pytest.raises(PtmError, match="pairs_exclude=toy-wic: dev example 1 is not a word pair"):
        task_pairs("toy-wic")
    with pytest.raises(PtmError, match="expected TASK"):
        LIBERTConfig(pairs=str(pairs_file), pairs_exclude="toy-hypernym,")


def test_the_command_line_refuses_an_unknown_task_in_one_line(pairs_file, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", docs=4)
    rc, err = run_cli(["pretrain", "libert-tiny", "--data", corpus, "-o", tmp_path / "run", *TINY, "--quiet",
                       f"objective.pairs={pairs_file}", "objective.pairs_exclude=no-such-task"], capsys)
    assert rc == 2 and "unknown task 'no-such-task'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
