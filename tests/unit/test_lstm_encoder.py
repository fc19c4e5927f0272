"""LSTMEncoder: shapes and parameter names, separate directions (no leak of the future into the
forward states or of the past into the backward ones), padding, the character table, errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ptmkit import registry
from ptmkit.encoders import Encoder
from ptmkit.encoders.lstm import (
    BEGIN_OF_WORD,
    END_OF_WORD,
    FIRST_SPECIAL_CHAR,
    NUM_CHARS,
    LSTMConfig,
    LSTMEncoder,
    char_table,
)
from ptmkit.errors import PtmError

WORDS = ["the", "cat", "sat", "on", "mat", "dogs", "ran", "naïve", "a", "supercalifragilistic"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(25)]
V = len(VOCAB)  # 40


def tok(**kw) -> SimpleNamespace:
    base = dict(vocab_size=V, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, id_to_token=lambda i: VOCAB[i])
    base.update(kw)
    return SimpleNamespace(**base)


def cfg(**kw) -> LSTMConfig:
    base = dict(vocab_size=V, num_layers=2, hidden_size=12, projection_size=6, filters=[[1, 4], [2, 4], [3, 8]],
                highway_layers=2, max_chars=10, dropout=0.0)
    base.update(kw)
    return LSTMConfig(**base)


def make(seed: int = 0, **kw) -> LSTMEncoder:
    torch.manual_seed(seed)
    enc = LSTMEncoder(cfg(**kw))
    enc.bind_tokenizer(tok())
    return enc.eval()


def test_registered_shapes_and_layers() -> None:
    assert registry.get("encoder", "lstm") is LSTMEncoder
    enc = make()
    assert isinstance(enc, Encoder) and enc.output_size == 12 and enc.num_layers == 2
    ids = torch.randint(5, V, (3, 7))
    out = enc(ids, output_hidden_states=True)
    assert out.last_hidden_state.shape == (3, 7, 12) and out.pooled is None
    assert len(out.hidden_states) == 3 and all(h.shape == (3, 7, 12) for h in out.hidden_states)  # 2L + 1 = 5 vectors
    x = out.extras["token"]
    assert x.shape == (3, 7, 6)
    torch.testing.assert_close(out.hidden_states[0], torch.cat([x, x], -1))  # layer 0: [x; x]
    torch.testing.assert_close(out.last_hidden_state, torch.cat([out.extras["forward"], out.extras["backward"]], -1))
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    assert enc(ids).hidden_states is None
    uni = make(bidirectional=False)
    out = uni(ids, output_hidden_states=True, causal=True)
    assert uni.output_size == 6 and out.last_hidden_state.shape == (3, 7, 6) and "backward" not in out.extras
    assert uni.backward_layers is None and len(out.hidden_states) == 3


def test_parameter_names_and_depths() -> None:
    enc = make()
    shapes = {n: tuple(p.shape) for n, p in enc.named_parameters()}
    assert shapes["char_cnn.char_embeddings.weight"] == (NUM_CHARS, 16)
    assert shapes["char_cnn.convs.2.weight"] == (8, 16, 3)
    assert shapes["char_cnn.highways.1.transform.weight"] == (16, 16) and shapes["char_cnn.highways.1.gate.weight"] == (16, 16)
    assert shapes["char_cnn.projection.weight"] == (6, 16)
    for direction in ("forward", "backward"):
        assert shapes[f"{direction}_layers.1.weight_ih_l0"] == (48, 6)
        assert shapes[f"{direction}_layers.1.weight_hh_l0"] == (48, 6)
        assert shapes[f"{direction}_layers.1.weight_hr_l0"] == (6, 12)  # the projection P x H
    assert enc.input_embeddings() is None and enc.output_embeddings() is None
    assert dict(enc.named_buffers())["char_cnn.char_ids"].shape == (V, 10)
    depth = {n: enc.layer_index(n) for n in shapes}
    assert depth["char_cnn.convs.0.weight"] == 0 and depth["forward_layers.0.bias_ih_l0"] == 1
    assert depth["backward_layers.1.weight_hr_l0"] == 2
    words = make(char_cnn=False)
    assert words.char_cnn is None and words.input_embeddings().weight.shape == (V, 6)
    assert words.output_embeddings() is words.input_embeddings().weight
    assert words.layer_index("word_embeddings.weight") == 0
    # no projection: P = hidden size
    plain = make(projection_size=None)
    assert plain.output_size == 24 and "forward_layers.0.weight_hr_l0" not in dict(plain.named_parameters())
    # forget-gate bias starts at 1
    H = 12
    assert torch.all(enc.forward_layers[0].bias_ih_l0[H : 2 * H] == 1.0)


@pytest.mark.parametrize("char_cnn", [True, False])
def test_directions_do_not_see_the_other_side(char_cnn: bool) -> None:
    """→h_k depends on t_1..t_k only, ←h_k on t_k..t_N only: changing a later (earlier) token leaves
    the forward (backward) states before (after) it unchanged, in every layer."""
    enc = make(char_cnn=char_cnn)
    ids = torch.randint(5, V, (2, 9))
    k = 4
    later, earlier = ids.clone(), ids.clone()
    later[:, k + 1 :] = torch.randint(5, V, (2, 9 - k - 1))
    earlier[:, :k] = torch.randint(5, V, (2, k))
    assert not torch.equal(later, ids) and not torch.equal(earlier, ids)
    out, out_later, out_earlier = (enc(x, output_hidden_states=True) for x in (ids, later, earlier))
    P = 6
    for j in range(1, 3):
        h, hl, he = out.hidden_states[j], out_later.hidden_states[j], out_earlier.hidden_states[j]
        torch.testing.assert_close(hl[:, : k + 1, :P], h[:, : k + 1, :P], rtol=0, atol=0)  # forward: past only
        torch.testing.assert_close(he[:, k:, P:], h[:, k:, P:], rtol=0, atol=0)  # backward: future only
        assert not torch.allclose(hl[:, k + 1 :, :P], h[:, k + 1 :, :P])  # the changes do reach the rest
        assert not torch.allclose(hl[:, : k + 1, P:], h[:, : k + 1, P:])
        assert not torch.allclose(he[:, :k, P:], h[:, :k, P:])


def test_padding_does_not_change_real_positions() -> None:
    enc = make()
    a = torch.randint(5, V, (1, 5))
    b = torch.randint(5, V, (1, 8))
    padded = torch.cat([torch.cat([a, torch.zeros(1, 3, dtype=torch.long)], 1), b])
    mask = torch.tensor([[1] * 5 + [0] * 3, [1] * 8])
    out = enc(padded, attention_mask=mask, output_hidden_states=True)
    alone_a, alone_b = enc(a, output_hidden_states=True), enc(b, output_hidden_states=True)
    for j in range(3):
        torch.testing.assert_close(out.hidden_states[j][0, :5], alone_a.hidden_states[j][0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out.hidden_states[j][1], alone_b.hidden_states[j][0], rtol=1e-6, atol=1e-6)
        assert torch.all(out.hidden_states[j][0, 5:] == 0)  # padded positions are zero
    # other padding ids do not matter either
    other = padded.clone()
    other[0, 5:] = 7
    torch.testing.assert_close(enc(other, attention_mask=mask).last_hidden_state, out.last_hidden_state)
    # the backward stack starts at the last real token: there it has read that token alone
    single = enc._stack(enc.backward_layers, enc.embed(a[:, -1:]))[-1][0, 0]
    torch.testing.assert_close(out.extras["backward"][0, 4], single, rtol=1e-6, atol=1e-6)


def test_char_table() -> None:
    table = char_table(tok(), V, 10)
    assert table.shape == (V, 10) and table.dtype.name == "int32"
    cat = VOCAB.index("cat")
    assert table[cat].tolist() == [BEGIN_OF_WORD, ord("c") + 1, ord("a") + 1, ord("t") + 1, END_OF_WORD, 0, 0, 0, 0, 0]
    naive = VOCAB.index("naïve")
    assert table[naive, :8].tolist() == [BEGIN_OF_WORD] + [b + 1 for b in "naïve".encode("utf-8")] + [END_OF_WORD]
    long = VOCAB.index("supercalifragilistic")  # cut to max_chars with both marks kept
    assert table[long].tolist() == [BEGIN_OF_WORD] + [b + 1 for b in b"supercal"] + [END_OF_WORD]
    specials = [table[i, :3].tolist() for i in range(5)]  # [PAD] [UNK] [CLS] [SEP] [MASK]: a marker each
    assert specials == [[BEGIN_OF_WORD, FIRST_SPECIAL_CHAR + k, END_OF_WORD] for k in range(5)]
    assert len({tuple(r) for r in table.tolist()}) == V  # every token spelled differently
    # ids past the tokenizer's vocabulary (a larger model.vocab_size) stay padding
    wide = char_table(tok(), V + 3, 10)
    assert not wide[V:].any()
    # the builder binds the tokenizer: the encoder's buffer is the table
    enc = make()
    assert torch.equal(enc.char_cnn.char_ids, torch.from_numpy(table))
    assert "char_cnn.char_ids" in enc.state_dict()  # a checkpoint carries its spelling
    with pytest.raises(PtmError, match="id_to_token"):
        LSTMEncoder(cfg()).bind_tokenizer(SimpleNamespace(vocab_size=V, pad_id=0))


def test_real_tokenizer_table(tmp_path) -> None:
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\nthe dog ran\n")
    tk = Tokenizer.train([text], kind="word", vocab_size=50, min_frequency=1)
    enc = LSTMEncoder(cfg(vocab_size=tk.vocab_size))
    enc.bind_tokenizer(tk)
    row = enc.char_cnn.char_ids[tk.token_to_id("cat")].tolist()
    assert row[:5] == [BEGIN_OF_WORD, ord("c") + 1, ord("a") + 1, ord("t") + 1, END_OF_WORD]
    assert enc.char_cnn.char_ids[tk.sep_id, 1] == FIRST_SPECIAL_CHAR + 3


def test_char_cnn_once_per_distinct_token() -> None:
    """Running the CNN once per distinct id gives the same states as running it at every position."""
    enc = make()
    ids = torch.tensor([[5, 6, 5, 7, 5, 6]])
    fast = enc.embed(ids)
    slow = torch.stack([enc.char_cnn.spell_ids(ids[0, t : t + 1])[0] for t in range(6)])[None]
    torch.testing.assert_close(fast, slow)


def test_errors() -> None:
    enc = make()
    ids = torch.randint(5, V, (2, 4))
    with pytest.raises(PtmError, match="attn_mask"):
        enc(ids, attn_mask=torch.ones(1, 1, 4, 4, dtype=torch.bool))
    with pytest.raises(PtmError, match="bidirectional"):
        enc(ids, causal=True)
    with pytest.raises(PtmError, match="right padding"):
        enc(ids, attention_mask=torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
    with pytest.raises(PtmError, match="vocab"):
        enc(torch.tensor([[V]]))
    # token_type_ids and position_ids do not apply and are ignored
    torch.testing.assert_close(enc(ids, token_type_ids=torch.ones_like(ids), position_ids=ids).last_hidden_state,
                               enc(ids).last_hidden_state)
    with pytest.raises(PtmError, match="max_chars"):
        cfg(max_chars=2)
    with pytest.raises(PtmError, match="filters"):
        cfg(filters=[[3]])
    with pytest.raises(PtmError, match="dropout"):
        cfg(dropout=1.5)
    assert cfg(filters=[[1, 4], [2, 8]]).filters == ((1, 4), (2, 8)) and cfg().num_filters == 16


def test_presets() -> None:
    from ptmkit.build import encoder_config
    from ptmkit.encoders.lstm import ELMO_FILTERS
    from ptmkit.presets import list_presets, load_preset

    assert {"elmo-tiny", "elmo-original"} <= set(list_presets())
    tiny = load_preset("elmo-tiny")
    assert (tiny["model"]["encoder"], tiny["objective"]["name"], tiny["tokenizer"]["kind"]) == ("lstm", "bilm", "word")
    _, small = encoder_config(tiny["model"])
    assert small.char_cnn and small.bidirectional and small.residual and small.highway_layers == 2
    assert [w for w, _ in small.filters] == list(range(1, 8))
    _, paper = encoder_config(load_preset("elmo-original")["model"])
    assert (paper.hidden_size, paper.projection_size, paper.num_layers, paper.filters, paper.max_chars) == (
        4096, 512, 2, ELMO_FILTERS, 50)
    with torch.device("meta"):  # count without allocating
        enc = LSTMEncoder(paper)
    assert abs(enc.num_parameters() / 1e6 - 93.6) < 0.1  # the released ELMo: 93.6M without the softmax
