"""SenseBERT's and LIBERT's objectives: the supersense loss against a float64 computation of the
paper's formula, the allowed-supersense table for known words, LIBERT's pair batches, both
training through ``ptm pretrain`` and refusing bad lexicons in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import TINY, run_cli, write_corpus
from safetensors.torch import load_file

from ptmkit.objectives.lexicon import read_pairs, read_supersenses, token_words
from ptmkit.objectives.libert import pair_inputs
from ptmkit.objectives.sensebert import allowed_table, sense_loss
from ptmkit.tokenization import Tokenizer
from ptmkit.train.trainer import TrainerCallback
from ptmkit.workflows.pretrain import pretrain

LEXICON = "the\tnoun.artifact\ncat\tnoun.animal\ndog\tnoun.animal\ndog\tnoun.person\nran\tverb.motion\n" \
          "sat\tverb.contact\nhouse\tnoun.artifact\nhouse\tverb.contact\nred\tadj.all\n"
PAIRS = "cat\tdog\ndog\tanimal\ncat\tanimal\nhouse\tbuilding\nran\tmoved\nsat\trested\nbig\tlarge\nsmall\tlittle\n"


def test_the_sense_loss_is_the_papers_formula_in_float64():
    torch.manual_seed(0)
    logits = torch.randn(5, 4, dtype=torch.float64)
    allowed = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0]], dtype=torch.bool)
    got, acc = sense_loss(logits.float(), allowed)
    want = 0.0
    for row, a in zip(logits.tolist(), allowed.tolist()):
        z = sum(math.exp(x) for x in row)
        p = [math.exp(x) / z for x in row]
        allowed_p = [pi for pi, ok in zip(p, a) if ok]
        want += -math.log(sum(allowed_p)) - sum(math.log(pi) for pi in allowed_p) / len(allowed_p)
    assert got.item() == pytest.approx(want / 5, rel=1e-5)
    best = logits.argmax(-1)
    assert acc.item() == pytest.approx(allowed[torch.arange(5), best].double().mean().item())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("lex")
    corpus = write_corpus(root / "corpus.txt", docs=20)
    (root / "lexicon.tsv").write_text(LEXICON)
    (root / "pairs.tsv").write_text(PAIRS)
    tok = Tokenizer.train([corpus], kind="wordpiece", vocab_size=120, min_frequency=1)
    return root, corpus, tok


def test_known_words_get_their_allowed_supersenses(files):
    root, _, tok = files
    senses, names = read_supersenses(root / "lexicon.tsv")
    table = allowed_table(tok, tok.vocab_size, senses, names)
    words = token_words(tok, tok.vocab_size)

    def of(word):
        return {names[s] for s in np.flatnonzero(table[words.index(word)])}

    assert of("dog") == {"noun.animal", "noun.person"} and of("ran") == {"verb.motion"} and of("red") == {"adj.all"}
    assert of("on") == set()  # not in the lexicon
    specials = [i for i, w in enumerate(words) if w is None]
    assert specials and not table[specials].any()  # [CLS], [MASK], word pieces: no sense


def test_libert_pairs_and_their_inputs(files):
    root, _, _ = files
    words, pairs = read_pairs(root / "pairs.tsv")
    assert len(pairs) == 8 and words[pairs[0, 0]] in {"big", "cat", "dog", "house", "ran", "sat", "small"}
    ids, attention, seg = pair_inputs([np.array([5, 6]), np.array([7])], [np.array([8]), np.array([9, 10])], 1, 2, 0)
    assert ids.tolist() == [[1, 5, 6, 2, 8, 2], [1, 7, 2, 9, 10, 2]]
    assert seg.tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]] and attention.all()


SMALL = [a for a in TINY if not a.startswith("train.max_steps")] + ["train.log_every=1", "--quiet"]


@pytest.mark.parametrize("preset, extra, metric", [
    ("sensebert-tiny", "objective.lexicon={root}/lexicon.tsv", "sense_loss"),
    ("libert-tiny", "objective.pairs={root}/pairs.tsv", "lrc_loss"),
])
def test_pretrain_and_resume_exactly(files, tmp_path, capsys, preset, extra, metric):
    root, corpus, _ = files
    base = ["pretrain", preset, "--data", corpus]
    settings = [*SMALL, extra.format(root=root)]
    run, half = tmp_path / "run", tmp_path / "half"
    rc, err = run_cli([*base, "-o", run, *settings, "train.max_steps=4"], capsys)
    assert rc == 0, err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(metric in r and math.isfinite(r[metric]) for r in records)
    # 2 steps resumed to 4 give the weights of 4 steps in one go (masks and pair sampling included)
    assert run_cli([*base, "-o", half, *settings, "train.max_steps=2"], capsys)[0] == 0
    rc, err = run_cli([*base, "-o", half, "--resume", *settings, "train.max_steps=4"], capsys)
    assert rc == 0, err
    a = load_file(str(run / "checkpoints" / "step-0000004" / "model.safetensors"))
    b = load_file(str(half / "checkpoints" / "step-0000004" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_lexicons_are_refused_in_one_line(files, tmp_path, capsys):
    root, corpus, _ = files
    bad = tmp_path / "bad.tsv"
    bad.write_text("dog\tnoun.animal\ncat noun.animal\n")
    other = tmp_path / "other.tsv"
    other.write_text("perro\tnoun.animal\n")
    for preset, setting, fragment in (
        ("sensebert-tiny", f"objective.lexicon={bad}", "bad.tsv:2: expected two tab-separated fields"),
        ("sensebert-tiny", f"objective.lexicon={other}", "no entry of the tokenizer's vocabulary is a word"),
        ("sensebert-tiny", "objective.lexicon=null", "SenseBERT needs objective.lexicon=FILE"),
        ("libert-tiny", f"objective.pairs={tmp_path / 'none.tsv'}", "none.tsv: the word pairs"),
    ):
        rc, err = run_cli(["pretrain", preset, "--data", corpus, "-o", tmp_path / "o", *SMALL, "train.max_steps=2",
                           setting], capsys)
        assert rc == 2 and fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_another_objective_continues_an_mlm_run(files, tmp_path, capsys):
    """``--init-from`` an MLM run with SenseBERT: the encoder and the MLM head are the run's, the
    supersense head starts fresh; an encoder of another kind is still refused."""
    root, corpus, _ = files
    mlm = tmp_path / "mlm"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", mlm, *SMALL, "train.max_steps=2"], capsys)
    assert rc == 0, err

    class Start(TrainerCallback):
        def on_fit_start(self, trainer) -> None:
            self.state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    start = Start()
    run = pretrain("sensebert-tiny", corpus, tmp_path / "sense", [f"objective.lexicon={root}/lexicon.tsv",
                   "train.max_steps=2"], init_from=mlm, callbacks=[start], verbose=False)
    source = load_file(str(mlm / "checkpoints" / "step-0000002" / "model.safetensors"))
    shared = [k for k in source if k.startswith("backbone.") or k.startswith("objective.")]
    assert shared and all(torch.equal(start.state[k], source[k]) for k in shared if k in start.state)
    assert any(k.startswith("objective.sense_head.") for k in start.state)
    assert not any(k.startswith("objective.sense_head.") for k in source)
    config = json.loads((run / "config.json").read_text())
    assert config["objective"]["name"] == "sensebert" and config["model"] == json.loads((mlm / "config.json").read_text())["model"]
    with pytest.raises(Exception, match=r"encoder 'transformer' \(objective 'mlm'\)"):
        pretrain("elmo-tiny", corpus, tmp_path / "bad", init_from=mlm, verbose=False)
