"""Token tagging: reading tagged files, first-piece alignment, the tagger with a softmax or a CRF
through the shared fine-tuning path, word-level scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.build import build_model
from ptmkit.encoders import TransformerConfig
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.tagging import (
    TaggingData,
    TaggingSplit,
    collate_words,
    encode_words,
    load_tagging_files,
    read_tagged,
    score_tags,
)
from ptmkit.tokenization import Tokenizer

FILLER = "we saw met visited called the a and then later today".split()
NAMES = "smith jones brown".split()
PLACES = ["paris", "rome", "new york", "los angeles"]


def _sentence(rng):
    """Names follow 'mr' (PER), places follow 'in' (LOC, two words for 'new york'); the same
    word is O elsewhere, so a tagger must read the context."""
    words, tags = [], []
    for _ in range(int(rng.integers(2, 5))):
        r = rng.random()
        if r < 0.3:
            words += ["mr", str(rng.choice(NAMES))]
            tags += ["O", "B-PER"]
        elif r < 0.6:
            place = str(rng.choice(PLACES)).split()
            words += ["in", *place]
            tags += ["O", "B-LOC"] + ["I-LOC"] * (len(place) - 1)
        else:
            w = str(rng.choice(FILLER + NAMES[:1]))  # 'smith' also occurs as a plain word (O)
            words.append(w)
            tags.append("O")
    return words, tags


def _split(n, rng):
    pairs = [_sentence(rng) for _ in range(n)]
    return TaggingSplit([p[0] for p in pairs], [p[1] for p in pairs])


@pytest.fixture(scope="module")
def ner():
    rng = np.random.default_rng(0)
    train, dev, test = (_split(n, rng) for n in (160, 40, 40))
    names = sorted({t for s in train.tags for t in s})
    return TaggingData("toy-ner", names, train, dev, test)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, ner):
    d = tmp_path_factory.mktemp("tagckpt")
    (d / "text.txt").write_text("\n".join(" ".join(w) for w in ner.train.words) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=120, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_position=64, dropout=0.0, attention_dropout=0.0)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {"kind": "wordpiece"},
              "train": {}}
    return save_pretrained(d / "ck", config, build_model(config, tok), tok)


class _Pieces:
    """A tokenizer stub: each word is as many pieces as it has characters (ids 10+)."""

    cls_id, sep_id, unk_id, pad_id = 2, 3, 1, 0

    def encode_batch(self, words):
        return [[10 + (ord(c) % 50) for c in w] for w in words]


def test_first_pieces_carry_the_labels_and_truncation_is_recorded():
    enc = encode_words([["ab", "c", "", "def"]], [np.array([1, 2, 3, 4])], _Pieces(), max_len=6, causal=False)
    # [CLS] a b c [UNK](empty word) d | cut: budget 4 pieces
    assert enc.ids[0].tolist()[0] == 2 and enc.ids[0].tolist()[-1] == 3 and len(enc.ids[0]) == 6
    assert enc.word_pos[0].tolist() == [1, 3, 4, -1]  # 'def' starts beyond the budget
    assert enc.ids[0][4] == 1  # the empty word reads as [UNK]
    causal = encode_words([["ab", "c"]], [np.array([1, 2])], _Pieces(), max_len=8, causal=True)
    assert causal.word_pos[0].tolist() == [0, 2] and causal.ids[0].tolist()[-1] == 3
    batch = collate_words(enc, np.array([0]), pad_id=0)
    assert batch["word_pos"].tolist() == [[1, 3, 4]] and batch["labels"].tolist() == [[1, 2, 3]]
    assert batch["word_mask"].tolist() == [[True, True, True]]


def test_reading_tagged_files_and_their_errors(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"tokens": ["a", "b"], "tags": ["X", "Y"]}) + "\n")
    (tmp_path / "b.conll").write_text("a\tX\nb\tY\n\nc Z\n")
    assert read_tagged(tmp_path / "a.jsonl").tags == [["X", "Y"]]
    assert read_tagged(tmp_path / "b.conll").words == [["a", "b"], ["c"]]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"tokens": ["a"], "tags": ["X"]}) + "\n"
                                        + json.dumps({"tokens": ["a", "b"], "tags": ["X"]}) + "\n")
    with pytest.raises(PtmError, match=r"bad.jsonl:2: 2 tokens but 1 tags"):
        read_tagged(tmp_path / "bad.jsonl")
    (tmp_path / "bad.conll").write_text("a X\nlonely\n")
    with pytest.raises(PtmError, match=r"bad.conll:2: .*without a tag"):
        read_tagged(tmp_path / "bad.conll")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(PtmError, match="empty split"):
        read_tagged(tmp_path / "empty.jsonl")
    (tmp_path / "dev.conll").write_text("a X\nb NEW\n")
    data = load_tagging_files(tmp_path / "b.conll", tmp_path / "dev.conll", tmp_path / "b.conll")
    assert data.meta["unknown_tags"]["dev"] == {"NEW": 1}  # counted, not hidden
    assert data.label_ids(data.dev)[0].tolist() == [0, -100]


def test_scores_are_word_accuracy_and_chunk_f1():
    data = TaggingData("t", ["B-PER", "I-PER", "O"], TaggingSplit([], []), TaggingSplit([], []),
                       TaggingSplit([["mr", "john", "smith", "ran"]], [["O", "B-PER", "I-PER", "O"]]))
    s = score_tags(data, data.test, [np.array([2, 0, 0, 2])])  # two one-word names instead of one
    assert s["accuracy"] == 0.75 and s["precision"] == 0.0 and s["recall"] == 0.0 and s["f1"] == 0.0
    seg = TaggingData("s", ["B", "E", "M", "S"], TaggingSplit([], []), TaggingSplit([], []),
                      TaggingSplit([list("abcd")], [["B", "E", "S", "S"]]))
    s = score_tags(seg, seg.test, [np.array([0, 1, 0, 1])])  # words ab|cd vs gold ab|c|d
    assert s["precision"] == 0.5 and s["recall"] == pytest.approx(1 / 3) and s["accuracy"] == 0.5
    pos = TaggingData("p", ["NOUN", "VERB"], TaggingSplit([], []), TaggingSplit([], []), TaggingSplit([["a"]], [["NOUN"]]))
    assert "f1" not in score_tags(pos, pos.test, [np.array([0])]) and not pos.chunked


@pytest.mark.parametrize("crf", [False, True])
def test_tagger_learns_context_dependent_tags(ner, checkpoint, crf, tmp_path):
    cfg = FinetuneConfig(epochs=12, lr=3e-3, batch_size=16, max_seq_len=32, task={"crf": crf}, select="f1", warmup=0.0)
    r = finetune(load_pretrained(checkpoint), ner, tmp_path / "run", cfg, seed=0, progress=False)
    assert r["task_type"] == "tagging" and r["test"]["words"] == sum(map(len, ner.test.words))
    assert r["test"]["f1"] >= 0.9 and r["test"]["accuracy"] >= 0.95, r["test"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(ner.test) and all(len(x["predicted"]) == len(x["tokens"]) for x in rows)


def test_crf_transitions_learn_the_tag_grammar(ner, checkpoint):
    """I-LOC never follows O in the data, and always follows B-LOC: the CRF's transition scores
    learn that order (they start uniform in [-0.1, 0.1])."""
    cfg = FinetuneConfig(epochs=6, lr=3e-3, batch_size=16, max_seq_len=32, task={"crf": True}, select="f1", warmup=0.0)
    captured = {}
    import ptmkit.tasks.tagging as tt

    build = tt.Tagging.build

    def capture(self, backbone):
        captured["m"] = build(self, backbone)
        return captured["m"]

    tt.Tagging.build = capture
    try:
        finetune(load_pretrained(checkpoint), ner, None, cfg, seed=0, progress=False)
    finally:
        tt.Tagging.build = build
    crf = captured["m"].crf
    names = ner.label_names
    A = crf.transitions.detach()
    o, b, i = names.index("O"), names.index("B-LOC"), names.index("I-LOC")
    assert A[o, i] < A[b, i] - 0.1 and A[i, i] < A[b, i]


def test_tagging_rejects_settings_that_do_not_apply(ner, checkpoint):
    with pytest.raises(PtmError, match="select='macro_f1' is not a metric"):
        finetune(load_pretrained(checkpoint), ner, None, FinetuneConfig(select="macro_f1", epochs=1, max_seq_len=32), progress=False)
    pos = TaggingData("pos", ["NOUN", "VERB"], ner.train, ner.dev, ner.test)
    with pytest.raises(PtmError, match="do not mark chunks"):
        finetune(load_pretrained(checkpoint), pos, None, FinetuneConfig(select="f1", epochs=1, max_seq_len=32), progress=False)
