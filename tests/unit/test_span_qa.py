"""Span QA: reading QA files, windows over long contexts, SQuAD's scores, and learning a toy task
through the shared fine-tuning path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.build import build_model
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.span_qa import QAData, QASplit, answer_f1, make_windows, normalize_answer, read_qa, score_answers
from ptmkit.tokenization import Tokenizer

PEOPLE = "john mary peter anna".split()
PLACES = "paris rome london berlin".split()
COLOURS = "red blue green black".split()
FILLER = "then we saw a big old car on the road and it was late".split()
QUESTIONS = {"who": PEOPLE, "where": PLACES, "which colour": COLOURS}


def _split(n, rng):
    """A context of filler words holding one person, one place and one colour at random places;
    the question asks for one of the three kinds (the answer is the word of that kind)."""
    qs, cs, ans = [], [], []
    for _ in range(n):
        words = list(rng.choice(FILLER, int(rng.integers(8, 16))))
        picks = {q: str(rng.choice(kind)) for q, kind in QUESTIONS.items()}
        for w in picks.values():
            words.insert(int(rng.integers(len(words) + 1)), w)
        context = " ".join(words)
        q = str(rng.choice(list(QUESTIONS)))
        start = (" " + context + " ").index(f" {picks[q]} ")
        qs.append(q)
        cs.append(context)
        ans.append([(picks[q], start)])
    return QASplit(qs, cs, ans)


@pytest.fixture(scope="module")
def qa():
    rng = np.random.default_rng(0)
    return QAData("kinds", _split(240, rng), _split(40, rng), _split(40, rng))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, qa):
    d = tmp_path_factory.mktemp("qackpt")
    (d / "text.txt").write_text("\n".join(qa.train.contexts + qa.train.questions) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=80, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=48, num_layers=2, num_heads=2, intermediate_size=96,
                            max_position=64, dropout=0.0, attention_dropout=0.0)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {"kind": "wordpiece"},
              "train": {}}
    return save_pretrained(d / "ck", config, build_model(config, tok), tok), tok


def test_windows_cover_the_context_and_locate_the_answer(qa, checkpoint):
    _, tok = checkpoint
    split = qa.train.subset(np.arange(20))
    win = make_windows(split, tok, max_len=20, doc_stride=6)
    assert len(win) > len(split)  # long contexts were cut
    for i in range(len(split)):
        rows = np.flatnonzero(win.example == i)
        covered = set()
        for r in rows:
            ctx = np.flatnonzero(win.context[r][1:]) + 1
            covered |= {tuple(x) for x in win.offsets[r][ctx]}
            assert len(win.ids[r]) <= 20 and win.ids[r][0] == tok.cls_id
            if win.start[r]:  # the window holds the whole answer: its tokens spell it
                off = win.offsets[r]
                text, start = split.answers[i][0]
                assert split.contexts[i][off[win.start[r], 0] : off[win.end[r], 1]] == text
                assert off[win.start[r], 0] == start
        assert any(win.start[r] for r in rows)  # some window holds it
        all_tokens = {tuple(x) for x in tok.encode_batch_with_offsets([split.contexts[i]])[0][1]}
        assert covered == all_tokens  # no context token falls between windows


def test_squad_normalisation_and_scores():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert answer_f1("the quick fox", "quick brown fox") == pytest.approx(2 * (2 / 2) * (2 / 3) / (1 + 2 / 3))
    assert answer_f1("", "") == 1.0 and answer_f1("a", "b c") == 0.0
    split = QASplit(["q", "q"], ["c", "c"], [[("Paris", 0), ("paris city", 0)], [("blue", 0)]])
    s = score_answers(split, ["paris", "dark blue"])
    assert s["exact_match"] == 0.5 and s["f1"] == pytest.approx((1.0 + 2 / 3) / 2)


def test_read_qa_errors(tmp_path):
    p = tmp_path / "qa.jsonl"
    good = {"question": "q", "context": "the cat sat", "answers": [{"text": "cat", "start": 4}]}
    p.write_text(json.dumps(good) + "\n" + json.dumps({**good, "answers": [{"text": "cat", "start": 0}]}) + "\n")
    with pytest.raises(PtmError, match=r"qa.jsonl:2: the answer 'cat' is not in the context at character 0 \(it occurs at 4\)"):
        read_qa(p)
    p.write_text(json.dumps({**good, "answers": [{"text": "dog", "start": 0}]}) + "\n")
    with pytest.raises(PtmError, match="does not occur in the context"):
        read_qa(p)
    p.write_text("\n")
    with pytest.raises(PtmError, match="empty split"):
        read_qa(p)


def test_finetune_learns_to_point_at_the_answer_across_windows(qa, checkpoint, tmp_path):
    cfg = FinetuneConfig(epochs=8, lr=3e-3, batch_size=16, max_seq_len=16, warmup=0.0, task={"doc_stride": 6})
    r = finetune(load_pretrained(checkpoint[0]), qa, tmp_path / "run", cfg, seed=0, progress=False)
    assert r["task_type"] == "span_qa" and r["select"] == "f1"
    assert r["test"]["exact_match"] >= 0.8, r["test"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and sum(x["prediction"] in x["answers"] for x in rows) >= 32


def test_span_qa_refuses_a_causal_model(qa, tmp_path):
    tok = Tokenizer.train([_write(tmp_path, qa)], kind="wordpiece", vocab_size=80, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position=32, norm="pre", type_vocab_size=0, pooler=False)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "clm"}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    with pytest.raises(PtmError, match="bidirectional encoder"):
        finetune(load_pretrained(ck), qa, None, FinetuneConfig(epochs=1, max_seq_len=24), progress=False)


def _write(tmp_path, qa):
    p = tmp_path / "t.txt"
    p.write_text("\n".join(qa.train.contexts) + "\n")
    return p
