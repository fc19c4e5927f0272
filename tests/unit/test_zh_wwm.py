"""Chinese whole-word masking: jieba words over character tokens, user dictionaries, and the
fallback to single tokens where the segmenter and the tokens disagree."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib

from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.objectives.masking import Masker
from ptmkit.tokenization import Tokenizer
from ptmkit.tokenization.segmenters import JIEBA_INSTALL, get_segmenter

ROOT = Path(__file__).resolve().parents[2]


def fixed(*offsets: int):
    """A segmenter whose words begin at the given character offsets, whatever the text."""
    return lambda text: np.array([o for o in offsets if o < len(text)])


def test_segmenter_and_tokens_disagreeing_fall_back_to_single_tokens() -> None:
    # word-kind tokens 北京 | 大学 | 生 (character offsets 0-2, 3-5, 6-7)
    tok = Tokenizer.from_words(["北京", "大学", "生"])
    text = "北京 大学 生"
    # Agreement: the segmenter's words are whole tokens; 大学 not starting a segmenter word joins 北京.
    _, agree = tok.encode_batch_with_word_starts([text], fixed(0, 6))
    assert agree.tolist() == [True, False, True]
    # Disagreement: a segmenter word begins inside 大学 (at 学, offset 4): 大学 and the token after it
    # become units of their own (token-level masking there), although 生 begins no segmenter word.
    _, cross = tok.encode_batch_with_word_starts([text], fixed(0, 3, 4))
    assert cross.tolist() == [True, True, True]
    # A crossing in the first token only: it is a unit, and the next token starts one.
    _, first = tok.encode_batch_with_word_starts([text], fixed(0, 1))
    assert first.tolist() == [True, True, False]


def test_char_tokens_with_segmenter_words_mask_whole_words_per_character(tmp_path) -> None:
    text = tmp_path / "zh.txt"
    text.write_text("我们在北京大学学习\n中国人民很好\n", encoding="utf-8")
    tok = Tokenizer.train([text], "char", 100, min_frequency=1)
    words = {"我们在北京大学学习": [0, 2, 3, 7], "中国人民很好": [0, 4, 5]}  # 我们/在/北京大学/学习 ...
    corpus = prepare([text], tok, tmp_path / "c", workers=1, progress=False, segmenter=lambda t: np.array(words[t]))
    starts = np.asarray(corpus.word_starts)
    assert starts.astype(int).tolist() == [1, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1]
    # whole-word masking over those starts: a chosen word is masked entirely, one label per character
    ids = np.asarray(corpus.tokens, dtype=np.int64)[None, :].repeat(200, axis=0)
    att = np.ones_like(ids)
    m = Masker("whole_word", mask_id=tok.mask_id, random_pool=np.arange(5, tok.vocab_size),
               unmaskable=np.array([tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id]), mask_prob=0.3)
    out = m(ids.copy(), att, np.random.default_rng(0), np.broadcast_to(starts, ids.shape))
    bounds = np.flatnonzero(np.append(starts, True))
    word_of = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    for b in range(200):
        p = out.positions[b, out.used[b]]
        chosen = np.unique(word_of[p])
        assert np.isin(np.flatnonzero(np.isin(word_of, chosen)), p).all()  # whole words
        assert (out.labels[b, out.used[b]] == ids[b, p]).all()  # per-character labels


def test_user_dict_errors_name_the_path_and_flag(tmp_path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(PtmError, match=r"nope\.txt does not exist \(--user-dict"):
        get_segmenter("jieba", missing)
    with pytest.raises(PtmError, match="--segmenter jieba"):
        get_segmenter(None, tmp_path / "any.txt")


def test_cli_user_dict_missing(tmp_path, capsys) -> None:
    from ptmkit.cli import main

    text = tmp_path / "zh.txt"
    text.write_text("我爱北京\n", encoding="utf-8")
    tok = Tokenizer.train([text], "char", 50, min_frequency=1)
    tok.save(tmp_path / "tok.json")
    rc = main(["prepare", str(text), "-t", str(tmp_path / "tok.json"), "-o", str(tmp_path / "c"),
               "--segmenter", "jieba", "--user-dict", str(tmp_path / "missing-dict.txt")])
    assert rc == 2
    assert "missing-dict.txt" in capsys.readouterr().err


def test_jieba_missing_names_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba -> ImportError
    with pytest.raises(PtmError) as err:
        get_segmenter("jieba")
    assert JIEBA_INSTALL in str(err.value)
    # the extra the message names exists and carries jieba
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "ptmkit[zh]" in JIEBA_INSTALL and any(d.startswith("jieba") for d in extras["zh"])


def test_jieba_user_dict_changes_words(tmp_path) -> None:
    pytest.importorskip("jieba")
    text = tmp_path / "zh.txt"
    text.write_text("我爱鑫淼焱学习\n", encoding="utf-8")
    tok = Tokenizer.train([text], "char", 50, min_frequency=1)
    plain = prepare([text], tok, tmp_path / "plain", workers=1, progress=False, segmenter="jieba")
    ud = tmp_path / "dict.txt"
    ud.write_text("鑫淼焱学 5 nz\n", encoding="utf-8")
    # two workers: the segmenter with its dictionary travels to the worker processes
    with_dict = prepare([text], tok, tmp_path / "ud", workers=2, chunk_bytes=8, progress=False, segmenter="jieba",
                        user_dict=ud)
    # jieba alone: 我 / 爱鑫淼焱 / 学习; with the user word: 我 / 爱 / 鑫淼焱学 / 习
    assert np.asarray(plain.word_starts).astype(int).tolist() == [1, 1, 0, 0, 0, 1, 0]
    assert np.asarray(with_dict.word_starts).astype(int).tolist() == [1, 1, 1, 0, 0, 0, 1]
    assert with_dict.meta["word_segmenter"]["user_dict_sha256"]
    assert plain.meta["word_segmenter"] == "jieba"
