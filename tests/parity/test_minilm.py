"""Real pretrained weights: all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384) fetched by the ``minilm``
recipe, run by HF transformers and by ptmkit after import, on real sentences."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: nothing may be fetched from a hub

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import AutoTokenizer, BertModel  # noqa: E402

from ptmkit.data.sources.base import fetch  # noqa: E402
from ptmkit.interop.hf_bert import load_hf_bert  # noqa: E402
from ptmkit.tokenization import Tokenizer  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Pre-trained language models learn contextual word representations from raw text!",
    "Naïve café owners don't like unbelievably long words: antidisestablishmentarianism.",
    "北京 is the capital of China, population 21,540,000 (2018).",
]
PAIR = ("A man is playing a guitar.", "Someone plays an instrument on stage.")
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def minilm_dir():
    return fetch("minilm")  # the recipe must work: a failed fetch is a failure, not a skip


@pytest.fixture(scope="module")
def hf_model(minilm_dir):
    return BertModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def hf_tokenizer(minilm_dir):
    return AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def imported(minilm_dir):
    return load_hf_bert(minilm_dir)


def test_token_ids_match_hf(minilm_dir, hf_tokenizer, imported) -> None:
    from_vocab = Tokenizer.from_wordpiece_vocab(minilm_dir / "vocab.txt", lowercase=True)
    for text in SENTENCES:
        expected = hf_tokenizer(text)["input_ids"]
        assert from_vocab.encode(text, add_special_tokens=True) == expected, text
        assert imported.tokenizer.encode(text, add_special_tokens=True) == expected, text
    ids, types = from_vocab.encode_pair(*PAIR)
    enc = hf_tokenizer(*PAIR)
    assert ids == enc["input_ids"] and types == enc["token_type_ids"]
    assert from_vocab.vocab_size == hf_tokenizer.vocab_size == 30522


def test_config_and_heads(imported) -> None:
    cfg = imported.backbone.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size) == (6, 384, 12, 1536)
    assert cfg.norm == "post" and cfg.activation == "gelu" and cfg.layer_norm_eps == 1e-12 and cfg.pooler
    assert imported.config["objective"]["name"] == "mlm" and imported.config["objective"]["nsp"] is False


@torch.no_grad()
def _compare(hf_model, imported, batch) -> None:
    ours = imported.backbone(**batch, output_hidden_states=True)
    theirs = hf_model(**batch, output_hidden_states=True)
    keep = batch["attention_mask"].bool()
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 7
    for i, (a, b) in enumerate(zip(ours.hidden_states, theirs.hidden_states)):
        assert_close(a[keep], b[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    assert_close(ours.pooled, theirs.pooler_output, **TOL)


def test_hidden_states_match_hf(hf_model, hf_tokenizer, imported) -> None:
    enc = hf_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert not bool(enc["attention_mask"].all())  # the batch has padding
    batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    _compare(hf_model, imported, batch)


def test_sentence_pair_matches_hf(hf_model, imported) -> None:
    ids, types = imported.tokenizer.encode_pair(*PAIR)
    batch = {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "token_type_ids": torch.tensor([types]),
    }
    assert 1 in types
    _compare(hf_model, imported, batch)


def test_ptm_import_writes_a_loadable_checkpoint(minilm_dir, hf_model, hf_tokenizer, tmp_path) -> None:
    from ptmkit.cli import main
    from ptmkit.pretrained import load_pretrained

    assert main(["import", str(minilm_dir), "-o", str(tmp_path / "ckpt")]) == 0
    loaded = load_pretrained(tmp_path / "ckpt")
    enc = hf_tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    _compare(hf_model, loaded, {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
