"""Head masks (gates) of the attention encoders: gradients for head importance (Michel et al. 2019)
against central finite differences in float64, the fused and written-out paths agreeing, bad
shapes, encoders without heads, and ``max_positions``."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.awd_lstm import AWDLSTMConfig, AWDLSTMEncoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
from ptmkit.encoders.static_vectors import StaticVectors, StaticVectorsConfig
from ptmkit.encoders.xlnet import XLNetConfig, XLNetEncoder
from ptmkit.errors import PtmError

V, H, HEADS = 50, 16, 4
BERT = TransformerConfig(vocab_size=V, hidden_size=H, num_layers=2, num_heads=HEADS, intermediate_size=32,
                         max_position=16, dropout=0.0, attention_dropout=0.0)
T5 = EncoderDecoderConfig(vocab_size=V, hidden_size=H, encoder_layers=2, decoder_layers=2, num_heads=HEADS,
                          intermediate_size=32, max_position=16, norm="pre", norm_type="rms", bias=False,
                          positions="relative", relative_buckets=8, relative_max_distance=20, scale_attention=False,
                          embedding_norm=False, init="t5", dropout=0.0)
XLNET = XLNetConfig(vocab_size=V, hidden_size=H, num_layers=2, num_heads=HEADS, intermediate_size=32, dropout=0.0)


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (2, 7), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    return ids, mask


def model(cls: type, cfg, seed: int = 0):
    torch.manual_seed(seed)
    return cls(cfg).double().eval()


def loss_fn(cls: type):
    """A scalar of the encoder's output that depends on every head: a fixed random projection."""
    ids, mask = batch()
    g = torch.Generator().manual_seed(1)
    w = torch.randn(2, 7, H, generator=g, dtype=torch.float64)

    def loss(enc, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        if cls is XLNetEncoder:
            pos = torch.tensor([[1, 4], [0, 3]])
            sees = torch.ones(7, 7, dtype=torch.bool).tril(-1).expand(2, 7, 7)
            out = enc(ids, mask, sees=sees, target_positions=pos, **gates)
            return (out.last_hidden_state * w).sum() + out.extras["query"].sum()
        return (enc(ids, mask, **gates).last_hidden_state * w).sum()

    return loss


CASES = [
    (TransformerEncoder, BERT, {"head_mask": (2, HEADS)}),
    (TransformerEncoder, replace(BERT, norm="pre", positions="relative"), {"head_mask": (2, HEADS)}),
    (EncoderDecoder, T5, {"head_mask": (2, HEADS), "decoder_head_mask": (2, HEADS), "cross_attn_head_mask": (2, HEADS)}),
    (XLNetEncoder, XLNET, {"head_mask": (2, HEADS)}),
]


@pytest.mark.parametrize("cls,cfg,shapes", CASES, ids=["bert", "relative", "t5", "xlnet"])
def test_head_importance_gradient_equals_finite_differences(cls, cfg, shapes) -> None:
    """|dL/d gate| at gate = 1 (Michel et al.): autograd through the gates equals central
    differences of the loss in float64, for every gate of every attention."""
    enc = model(cls, cfg)
    loss = loss_fn(cls)
    gates = {k: torch.ones(s, dtype=torch.float64, requires_grad=True) for k, s in shapes.items()}
    loss(enc, gates).backward()
    eps = 1e-6
    with torch.no_grad():
        for name, gate in gates.items():
            numeric = torch.zeros_like(gate)
            for idx in torch.cartesian_prod(*(torch.arange(n) for n in gate.shape)):
                idx = tuple(idx.tolist())
                up = {k: v.detach().clone() for k, v in gates.items()}
                down = {k: v.detach().clone() for k, v in gates.items()}
                up[name][idx] += eps
                down[name][idx] -= eps
                numeric[idx] = (loss(enc, up) - loss(enc, down)) / (2 * eps)
            assert gate.grad is not None and float(gate.grad.abs().min()) > 0, name  # every head matters
            assert_close(gate.grad, numeric, rtol=1e-6, atol=1e-8, msg=lambda m: f"{name}: {m}")


def test_a_zero_gate_removes_the_head_and_half_a_gate_halves_it() -> None:
    """Gates act on the probabilities: the layer's output is linear in each head's gate, so
    f(0.5) = (f(0) + f(1)) / 2; a [heads] mask applies to every layer."""
    enc = model(TransformerEncoder, BERT)
    ids, mask = batch()

    def attn_out(g: float) -> torch.Tensor:
        gate = torch.ones(HEADS, dtype=torch.float64)
        gate[2] = g
        # the first layer's attention sub-layer: its output is affine in the gates
        x = enc.embeddings(ids)
        return enc.layers[0].attn(x, None, False, gate)

    with torch.no_grad():
        assert_close(attn_out(0.5), (attn_out(0.0) + attn_out(1.0)) / 2)
        every = enc(ids, mask, head_mask=torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64))
        per_layer = enc(ids, mask, head_mask=torch.tensor([[1.0, 1.0, 0.0, 1.0]] * 2, dtype=torch.float64))
    assert_close(every.last_hidden_state, per_layer.last_hidden_state)


@pytest.mark.parametrize("training", [False, True])
def test_fused_and_written_out_paths_agree_with_gates(training: bool) -> None:
    """Without output_attentions the fused path gates each head's output; asking for the
    probabilities writes the product out and gates them: the same hidden states (with dropout,
    the CPU path writes the product out either way and draws the same mask from the same seed)."""
    cfg = replace(BERT, attention_dropout=0.2) if training else BERT
    enc = model(TransformerEncoder, cfg).train(training)
    ids, mask = batch(2)
    gate = torch.rand(2, HEADS, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(7)
    fused = enc(ids, mask, head_mask=gate)
    torch.manual_seed(7)
    written = enc(ids, mask, head_mask=gate, output_attentions=True)
    assert_close(fused.last_hidden_state, written.last_hidden_state)
    probs = written.attentions[0]
    full = enc(ids, mask, output_attentions=True).attentions[0] if not training else None
    if full is not None:  # the returned probabilities carry the gate
        assert_close(probs, full * gate[0][None, :, None, None])


def test_bool_head_mask_reads_as_zero_one() -> None:
    enc = model(TransformerEncoder, BERT)
    ids, mask = batch()
    keep = torch.tensor([[True, False, True, True], [True, True, True, False]])
    with torch.no_grad():
        assert_close(enc(ids, mask, head_mask=keep).last_hidden_state,
                     enc(ids, mask, head_mask=keep.double()).last_hidden_state)


@pytest.mark.parametrize("cls,cfg,arg", [
    (TransformerEncoder, BERT, "head_mask"),
    (XLNetEncoder, XLNET, "head_mask"),
    (EncoderDecoder, T5, "head_mask"),
    (EncoderDecoder, replace(T5, decoder_layers=3), "decoder_head_mask"),
    (EncoderDecoder, replace(T5, decoder_layers=3), "cross_attn_head_mask"),
])
def test_head_mask_of_the_wrong_shape_names_both_shapes(cls, cfg, arg: str) -> None:
    enc = model(cls, cfg)
    ids, mask = batch()
    layers = 3 if arg != "head_mask" else 2
    with pytest.raises(PtmError, match=rf"{arg} has shape \[3, 5\]; expected \[{layers}, {HEADS}\].*or \[{HEADS}\]"):
        enc(ids, mask, **{arg: torch.ones(3, 5)})
    with pytest.raises(PtmError, match=rf"{arg} has shape \[2, 2, {HEADS}\]"):
        enc(ids, mask, **{arg: torch.ones(2, 2, HEADS)})
    with pytest.raises(PtmError, match=f"{arg} must be a tensor"):
        enc(ids, mask, **{arg: [[1.0] * HEADS] * layers})


NO_HEADS = [
    ("lstm", lambda: LSTMEncoder(LSTMConfig(vocab_size=V, char_cnn=False, hidden_size=8, projection_size=8,
                                            num_layers=1))),
    ("awd_lstm", lambda: AWDLSTMEncoder(AWDLSTMConfig(vocab_size=V, embedding_size=8, hidden_size=8, num_layers=2))),
    ("static_vectors", lambda: StaticVectors(StaticVectorsConfig(vocab_size=V, dim=8))),
]


@pytest.mark.parametrize("name,make", NO_HEADS, ids=[n for n, _ in NO_HEADS])
def test_encoders_without_heads_refuse_clearly(name: str, make) -> None:
    enc = make()
    ids, mask = batch()
    enc(ids, mask)  # plain use is unchanged
    for kwargs in ({"output_attentions": True}, {"head_mask": torch.ones(1, 1)}):
        with pytest.raises(PtmError, match=f"the {name} encoder has no attention heads"):
            enc(ids, mask, **kwargs)
    with pytest.raises(PtmError, match=f"the {name} encoder has no attention heads"):
        enc.prune_heads({0: [0]})
    assert enc.max_positions() is None


def test_max_positions() -> None:
    assert TransformerEncoder(BERT).max_positions() == 16
    assert TransformerEncoder(replace(BERT, positions="relative")).max_positions() is None
    assert TransformerEncoder(replace(BERT, positions="none")).max_positions() is None
    assert EncoderDecoder(replace(T5, positions="absolute", bias=True, init="normal")).max_positions() == 16
    assert EncoderDecoder(T5).max_positions() == 16  # relative, but encode / decode enforce the limit
    assert XLNetEncoder(XLNET).max_positions() is None
    # the limit is the one forward enforces
    enc = TransformerEncoder(BERT)
    enc(torch.ones(1, enc.max_positions(), dtype=torch.long))
    with pytest.raises(PtmError, match="max_position"):
        enc(torch.ones(1, enc.max_positions() + 1, dtype=torch.long))
    ed = EncoderDecoder(T5)
    with pytest.raises(PtmError, match="max_position"):
        ed(torch.ones(1, ed.max_positions() + 1, dtype=torch.long))
