"""Tokenizer kinds: training, specials, round trips, word ids, HF parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.tokenization import KINDS, SPECIAL_TOKENS, Tokenizer

TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "A lazy dog sleeps; the quick fox runs away!",
    "Pre-training language models on your own corpus.",
    "我们 喜欢 自然语言处理 和 机器学习",
    "the dog and the fox are friends",
]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "text.txt"
    path.write_text("\n".join(TEXT * 20) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(corpus_file):
    return {kind: Tokenizer.train([corpus_file], kind, 300, min_frequency=1) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_specials_and_round_trip(kind, trained, tmp_path):
    tok = trained[kind]
    assert tok.kind == kind
    ids = [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]
    assert [tok.id_to_token(i) for i in ids] == SPECIAL_TOKENS
    assert tok.special_ids == set(ids)
    text = "the quick fox"
    enc = tok.encode(text)
    assert enc and not set(enc) & tok.special_ids
    assert tok.encode(text, add_special_tokens=True) == [tok.cls_id, *enc, tok.sep_id]
    assert tok.encode_batch([text, "the dog"]) == [enc, tok.encode("the dog")]
    path = tok.save(tmp_path / "tokenizer.json")
    loaded = Tokenizer.load(path)
    assert (loaded.kind, loaded.lowercase, loaded.vocab_size) == (kind, True, tok.vocab_size)
    assert loaded.encode(TEXT[3]) == tok.encode(TEXT[3])
    assert Tokenizer.load(tmp_path).encode(text) == enc  # a directory holding tokenizer.json
    if kind != "word":  # word kind has no punctuation splitting, so only seen words survive
        assert tok.decode(enc) == text


def test_encode_pair_type_ids(trained):
    tok = trained["wordpiece"]
    ids, types = tok.encode_pair("the dog", "a fox")
    a, b = tok.encode("the dog"), tok.encode("a fox")
    assert ids == [tok.cls_id, *a, tok.sep_id, *b, tok.sep_id]
    assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def test_char_kind_chinese_and_spaces(trained):
    tok = trained["char"]
    assert tok.tokenize("自然  语言") == ["自", "然", "\u2581", "语", "言"]  # whitespace run -> one space token
    assert tok.decode(tok.encode("自然  语言")) == "自然 语言"
    assert tok.tokenize("the fox") == ["t", "h", "e", "\u2581", "f", "o", "x"]
    # Latin words group their characters; each CJK character and each space is a word of its own.
    assert tok.word_ids("the fox") == [0, 0, 0, 1, 2, 2, 2]
    assert tok.word_ids("我们 fox") == [0, 1, 2, 3, 3, 3]


def test_bpe_is_byte_level(trained):
    tok = trained["bpe"]
    text = "unseen ü 🙂 symbols"
    ids = tok.encode(text)
    assert tok.unk_id not in ids
    assert tok.decode(ids) == text


def test_wordpiece_word_ids_group_subwords(trained):
    tok = trained["wordpiece"]
    text = "pretraining foxes"
    tokens, words = tok.tokenize(text), tok.word_ids(text)
    assert len(tokens) == len(words)
    for t, w, prev in zip(tokens[1:], words[1:], words[:-1]):
        assert (w == prev) == t.startswith("##")


def test_cased_and_lowercase(corpus_file):
    cased = Tokenizer.train([corpus_file], "word", 300, min_frequency=1, lowercase=False)
    lower = Tokenizer.train([corpus_file], "word", 300, min_frequency=1, lowercase=True)
    assert cased.tokenize("The") == ["The"] and lower.tokenize("The") == ["the"]
    assert not cased.lowercase and lower.lowercase


def test_errors(corpus_file, tmp_path):
    with pytest.raises(PtmError, match="did you mean 'wordpiece'"):
        Tokenizer.train([corpus_file], "wordpeice", 100)
    with pytest.raises(PtmError, match="not found"):
        Tokenizer.train([tmp_path / "missing.txt"], "bpe", 100)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(PtmError, match="empty"):
        Tokenizer.train([empty], "bpe", 100)
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": ')
    with pytest.raises(PtmError, match="not a valid tokenizer.json"):
        Tokenizer.load(bad)


def test_wordpiece_vocab_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = SPECIAL_TOKENS + ["the", "dog", "fox", "run", "##s", "##ning", "un", "##able", ",", ".", "!", "a", "b", "c"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    ours = Tokenizer.from_wordpiece_vocab(path, lowercase=True)
    ref = transformers.BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    for text in ["The dog runs, the fox running!", "Unable dogs ABC", "zebra", "ÀBC dog"]:
        assert ours.encode(text, add_special_tokens=True) == ref(text)["input_ids"]
    assert ours.unk_id == 1 and ours.mask_id == 4


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "char"])
def test_to_transformers(kind, trained):
    tok = trained[kind]
    hf = tok.to_transformers()
    text = "the lazy fox"
    assert hf(text)["input_ids"] == tok.encode(text, add_special_tokens=True)
    assert (hf.pad_token_id, hf.mask_token_id, hf.cls_token_id) == (tok.pad_id, tok.mask_id, tok.cls_id)


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_calling_the_tokenizer_pads_truncates_and_returns_tensors_as_hf_does(kind, trained):
    tok = trained[kind]
    hf = tok.to_transformers()
    texts = ["the lazy fox", "the quick brown fox jumps over the lazy dog again and again"]
    pairs = ["a dog", "the fox"]
    for kwargs in ({}, {"text_pair": pairs}, {"truncation": True, "max_length": 6},
                   {"text_pair": pairs, "truncation": True, "max_length": 7}, {"padding": "max_length", "max_length": 40}):
        ours = tok(texts, return_tensors="pt", **kwargs)
        theirs = hf(texts, return_tensors="pt", padding=kwargs.pop("padding", True), **kwargs)
        for key in ("input_ids", "attention_mask"):
            assert torch.equal(ours[key], theirs[key]), (kwargs, key)
    assert tok("the lazy fox")["input_ids"] == tok.encode("the lazy fox", add_special_tokens=True)  # one text: lists
    arrays = tok(texts, pairs, return_tensors="np")
    assert arrays["token_type_ids"].dtype == np.int64 and arrays["token_type_ids"][0].max() == 1
    with pytest.raises(PtmError, match="padding=True"):
        tok(texts, padding=False, return_tensors="pt")
    with pytest.raises(PtmError, match="max_length"):
        tok(texts, truncation=True)
