"""Packed execution of padded batches (ptmkit.nn.packing): the real positions get what the padded
computation gives them, forward and backward, in every Transformer variant that packs; the padding
positions hold zeros; batches with little padding, graphs being traced and switched-off encoders
run every position."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.testing import assert_close

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder
from ptmkit.encoders.encoder_decoder_config import EncoderDecoderConfig
from ptmkit.nn.packing import MIN_PADDING, Packing
from ptmkit.nn.targets import target_mask

V = 50


def batch(B: int = 4, T: int = 11, lengths=(11, 4, 8, 1)) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, V, (B, T), generator=torch.Generator().manual_seed(3))
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, 0), mask


def test_pack_and_pad_round_trip_with_zeros_at_the_padding() -> None:
    _, mask = batch()
    packing = Packing.of(mask)
    assert packing is not None and len(packing.index) == int(mask.sum()) == 24
    x = torch.randn(4, 11, 3)
    packed = packing.pack(x)
    assert packed.shape == (24, 3)
    assert torch.equal(packed, x[mask.bool()])  # row order: example by example, position by position
    back = packing.pad(packed)
    assert torch.equal(back, x * mask[..., None])


def test_little_padding_no_mask_and_traced_graphs_run_every_position() -> None:
    assert Packing.of(None) is None
    mask = torch.ones(2, 100, dtype=torch.long)
    mask[1, 100 - int(MIN_PADDING * 200) + 1:] = 0  # just under MIN_PADDING of the 200 positions
    assert Packing.of(mask) is None
    mask[1, 100 - int(MIN_PADDING * 200):] = 0
    assert Packing.of(mask) is not None
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation; the ONNX export still traces
        torch.jit.trace(lambda m: (seen.append(Packing.of(m)), m.float())[1], mask, check_trace=False)
    assert seen == [None]


TRANSFORMERS = {
    "bert": {},
    "gpt2-causal": {"norm": "pre"},
    "relative": {"positions": "relative"},
    "albert": {"embedding_size": 8, "sharing": "all"},
    "pruned": {"pruned_heads": {0: [1], 1: [0, 2]}},
}


def transformer(**kw) -> TransformerEncoder:
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, hidden_size=24, num_layers=2, num_heads=4, intermediate_size=48,
                            max_position=16, dropout=0.0, attention_dropout=0.0, **kw)
    return TransformerEncoder(cfg)


def outputs(enc, packed: bool, **kw):
    enc.pack_padding = packed
    ids, mask = batch()
    return enc(ids, mask, output_hidden_states=True, output_attentions=True, **kw), mask.bool()


@pytest.mark.parametrize("variant", sorted(TRANSFORMERS))
def test_transformer_real_positions_equal_the_padded_run(variant: str) -> None:
    enc = transformer(**TRANSFORMERS[variant]).eval()
    causal = variant == "gpt2-causal"
    with torch.no_grad():
        got, real = outputs(enc, True, causal=causal)
        ref, _ = outputs(enc, False, causal=causal)
    assert_close(got.last_hidden_state[real], ref.last_hidden_state[real], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(got.last_hidden_state[~real]) == 0
    assert len(got.hidden_states) == len(ref.hidden_states) == 3
    for a, b in zip(got.hidden_states, ref.hidden_states):
        assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)
    for a, b in zip(got.attentions, ref.attentions):  # probabilities of the real queries
        assert_close(a.transpose(1, 2)[real], b.transpose(1, 2)[real], rtol=1e-5, atol=1e-6)
    if got.pooled is not None:
        assert_close(got.pooled, ref.pooled, rtol=1e-5, atol=1e-5)


def test_transformer_gradients_equal_the_padded_run() -> None:
    enc = transformer().train()
    grads = []
    for packed in (True, False):
        enc.zero_grad()
        out, real = outputs(enc, packed, head_mask=torch.ones(2, 4, requires_grad=True))
        (out.last_hidden_state[real].pow(2).sum() + out.pooled.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in enc.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_full_batch_is_not_packed_and_is_unchanged() -> None:
    enc = transformer().eval()
    ids, _ = batch()
    full = torch.ones_like(ids)
    with torch.no_grad():
        a = enc(ids, full).last_hidden_state
        enc.pack_padding = False
        b = enc(ids, full).last_hidden_state
    assert torch.equal(a, b)


@pytest.mark.parametrize("t5", [False, True])
def test_encoder_decoder_encoder_and_decoder_see_the_same_source(t5: bool) -> None:
    torch.manual_seed(0)
    kw = dict(norm="pre", norm_type="rms", bias=False, positions="relative", scale_attention=False) if t5 else {}
    cfg = EncoderDecoderConfig(vocab_size=V, hidden_size=24, encoder_layers=2, decoder_layers=2, num_heads=4,
                               intermediate_size=48, max_position=16, dropout=0.0, attention_dropout=0.0, **kw)
    model = EncoderDecoder(cfg).eval()
    ids, mask = batch()
    real = mask.bool()
    target = torch.randint(5, V, (4, 6), generator=torch.Generator().manual_seed(4))
    got = {}
    for packed in (True, False):
        model.pack_padding = packed
        with torch.no_grad():
            got[packed] = model(ids, mask, decoder_input_ids=target, output_hidden_states=True)
    enc_t, enc_f = (got[p].extras["encoder_last_hidden_state"] for p in (True, False))
    assert_close(enc_t[real], enc_f[real], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(enc_t[~real]) == 0
    assert_close(got[True].last_hidden_state, got[False].last_hidden_state, rtol=1e-5, atol=1e-5)  # the decoder


def test_target_mask_keeps_every_position_up_to_the_last_target() -> None:
    labels = torch.tensor([[7, 8, 9, -100, -100], [7, -100, 9, -100, -100], [-100] * 5, [7, 8, 9, 10, 11]])
    assert target_mask(labels).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [0] * 5, [1] * 5]


def encoder_decoder(t5: bool) -> EncoderDecoder:
    torch.manual_seed(0)
    kw = dict(norm="pre", norm_type="rms", bias=False, positions="relative", scale_attention=False) if t5 else {}
    cfg = EncoderDecoderConfig(vocab_size=V, hidden_size=24, encoder_layers=2, decoder_layers=2, num_heads=4,
                               intermediate_size=48, max_position=16, dropout=0.0, attention_dropout=0.0, **kw)
    return EncoderDecoder(cfg)


@pytest.mark.parametrize("t5", [False, True])
def test_padded_targets_run_the_decoder_packed_with_the_padded_runs_values_and_gradients(t5: bool) -> None:
    """A right-padded target batch (the seq2seq task's and the BART / T5 objectives'): with the
    decoder mask from the labels the decoder runs on the real positions only; their states, the
    cross-attention maps' real rows and every gradient equal the padded run; padded states are 0."""
    model = encoder_decoder(t5)
    ids, mask = batch()
    target, target_real = batch(T=7, lengths=(7, 2, 5, 3))
    labels = target.masked_fill(target_real == 0, -100)
    decoder_mask = target_mask(labels)
    real = decoder_mask.bool()
    runs = {}
    for packed in (True, False):
        model.pack_padding = packed
        model.zero_grad()
        out = model(ids, mask, decoder_input_ids=model.shift_right(labels), decoder_attention_mask=decoder_mask,
                    output_attentions=True, output_hidden_states=True)
        out.last_hidden_state[real].pow(2).sum().backward()
        runs[packed] = out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    (a, ga), (b, gb) = runs[True], runs[False]
    assert_close(a.last_hidden_state[real], b.last_hidden_state[real], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(a.last_hidden_state[~real]) == 0
    for x, y in zip(a.extras["cross_attentions"], b.extras["cross_attentions"]):
        assert_close(x.transpose(1, 2)[real], y.transpose(1, 2)[real], rtol=1e-5, atol=1e-6)
    assert ga.keys() == gb.keys() and any(n.startswith("decoder.layers") for n in ga)
    for name in ga:
        assert_close(ga[name], gb[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_seq2seq_loss_is_the_same_with_the_decoder_packed() -> None:
    """The fine-tuning loss (tasks.seq2seq) over a batch with padded targets, packed or not."""
    from ptmkit.tasks.seq2seq import Seq2SeqModel

    model = Seq2SeqModel(encoder_decoder(t5=True))
    ids, mask = batch()
    target, target_real = batch(T=7, lengths=(7, 2, 5, 3))
    labels = target.masked_fill(target_real == 0, -100)
    b = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": model.backbone.shift_right(labels),
         "labels": labels}
    losses = []
    for packed in (True, False):
        model.backbone.pack_padding = packed
        losses.append(model(b).loss)
    assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-6)
