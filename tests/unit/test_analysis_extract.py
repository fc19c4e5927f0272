"""Words aligned to pieces through the tokenizer's offsets, and per-layer word vectors streamed
from every encoder family (Transformer, causal Transformer, ELMo's biLSTM, an encoder–decoder's
encoder), checked against the encoder run on each sentence alone."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import WORDS, tiny_checkpoint

from ptmkit.analysis.align import align_sentences
from ptmkit.analysis.extract import word_states
from ptmkit.build import build_encoder
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.tokenization import Tokenizer

torch.set_num_threads(1)
SENTENCES = [["the", "cat", "sat", "quickly"], ["a", "dog", "ran", "under", "the", "red", "house", "slowly", "."],
             ["it", "saw"], ["big", "dog", "and", "small", "cat", "then", "ran", "on", "the", "mat"]]
TEXTS = [" ".join(s) for s in SENTENCES] * 3 + [" ".join(WORDS)]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return load_pretrained(tiny_checkpoint(tmp_path_factory.mktemp("bert"), TEXTS), heads=False)


def test_pieces_go_to_their_words(bert):
    tok = bert.tokenizer
    (a,) = align_sentences(tok, [["quickly", "the", "cat"]], causal=False)
    assert a.ids[0] == tok.cls_id and a.ids[-1] == tok.sep_id
    assert a.word_of[0] == -1 and a.word_of[-1] == -1
    pieces = [tok.encode(w) for w in ("quickly", "the", "cat")]
    assert a.word_of[1:-1].tolist() == [k for k, p in enumerate(pieces) for _ in p]
    assert a.spans[:, 1].tolist() == (1 + np.cumsum([len(p) for p in pieces])).tolist()
    (c,) = align_sentences(tok, [["the", "cat"]], causal=True)
    assert c.word_of[0] == 0 and c.ids[-1] == tok.sep_id  # no [CLS] for a causal model


def test_byte_level_bpe_aligns_with_leading_spaces(tmp_path):
    (tmp_path / "t.txt").write_text("\n".join(TEXTS) + "\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="bpe", vocab_size=300, min_frequency=1)
    (a,) = align_sentences(tok, [SENTENCES[1]], causal=True)
    assert a.words == SENTENCES[1] and len(a.spans) == len(SENTENCES[1])
    assert sorted(set(a.word_of[a.word_of >= 0].tolist())) == list(range(len(SENTENCES[1])))


def test_a_tokenizer_that_cannot_be_aligned_is_refused():
    merged = SimpleNamespace(kind="odd", cls_id=2, sep_id=3,
                             encode_batch_with_offsets=lambda texts: [([7], np.array([[0, len(t)]])) for t in texts])
    with pytest.raises(PtmError, match="makes one piece of the words"):
        align_sentences(merged, [["the", "cat"]], causal=False)
    silent = SimpleNamespace(kind="odd", cls_id=2, sep_id=3,
                             encode_batch_with_offsets=lambda texts: [([7], np.array([[0, 3]])) for t in texts])
    with pytest.raises(PtmError, match="gives no piece for the word 'cat'"):
        align_sentences(silent, [["the", "cat"]], causal=False)


def test_long_sentences_keep_the_words_that_fit(bert):
    (a,) = align_sentences(bert.tokenizer, [SENTENCES[1]], causal=False, max_len=6)
    assert len(a.ids) <= 6 and a.words == SENTENCES[1][:len(a.words)] and len(a.spans) == len(a.words)


def _alone(backbone, tok, sentence, causal, pooling="first", **kw):
    (a,) = align_sentences(tok, [sentence], causal)
    with torch.no_grad():
        out = backbone(torch.from_numpy(a.ids)[None], torch.ones(1, len(a.ids), dtype=torch.long), causal=causal,
                       output_hidden_states=True, **kw)
    h = torch.stack(out.hidden_states, 1)[0].numpy()
    return a, h


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_batched_states_equal_each_sentence_alone(bert, pooling):
    got = list(word_states(bert.backbone, bert.tokenizer, SENTENCES, pooling=pooling, attentions=True, batch_size=3))
    assert [g.index for g in got] == [0, 1, 2, 3]
    for g, sentence in zip(got, SENTENCES):
        a, h = _alone(bert.backbone, bert.tokenizer, sentence, False)
        ref = h[:, a.spans[:, 0]] if pooling == "first" else np.stack([h[:, s:e].mean(1) for s, e in a.spans], 1)
        assert g.layers.shape == (3, len(sentence), 32)
        np.testing.assert_allclose(g.layers, ref, atol=1e-5)
        assert g.attentions.shape == (2, 4, len(a.ids), len(a.ids))
        np.testing.assert_allclose(g.attentions.sum(-1), 1.0, atol=1e-5)


def test_causal_model_reads_left_to_right(tmp_path):
    gpt = load_pretrained(tiny_checkpoint(tmp_path, TEXTS, causal=True), heads=False)
    (g,) = list(word_states(gpt.backbone, gpt.tokenizer, [SENTENCES[0]], causal=True))
    (h,) = list(word_states(gpt.backbone, gpt.tokenizer, [SENTENCES[0][:2]], causal=True))
    np.testing.assert_allclose(g.layers[:, :2], h.layers, atol=1e-5)  # later words change nothing before them


def test_elmo_and_an_encoder_decoder(tmp_path, bert):
    tok = bert.tokenizer
    elmo = build_encoder({"encoder": "lstm", "num_layers": 2, "hidden_size": 16, "projection_size": 8,
                          "char_cnn": False, "dropout": 0.0}, tok)
    (g,) = list(word_states(elmo, tok, [SENTENCES[0]]))
    assert g.layers.shape == (3, 4, 16)
    with pytest.raises(PtmError, match="no attention heads"):
        list(word_states(elmo, tok, [SENTENCES[0]], attentions=True))
    bart = build_encoder({"encoder": "encoder_decoder", "hidden_size": 16, "num_heads": 2, "encoder_layers": 2,
                          "decoder_layers": 1, "intermediate_size": 32, "max_position": 64, "dropout": 0.0}, tok)
    (b,) = list(word_states(bart, tok, [SENTENCES[1]], attentions=True))
    assert b.layers.shape == (3, len(SENTENCES[1]), 16) and b.attentions.shape[:2] == (2, 2)
