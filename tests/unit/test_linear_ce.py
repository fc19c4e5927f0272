"""Fused output projection + cross-entropy (``ptmkit.nn.linear_ce``) against plain autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ptmkit.nn.linear_ce import GPU_TILE_LOGITS, TILE_LOGITS, default_tiles, linear_cross_entropy, target_log_probs

V = 101  # a prime: every slice size below leaves a ragged last slice


def inputs(bias: bool, ignored: bool, dtype=torch.float64):
    torch.manual_seed(0)
    h = torch.randn(37, 5, dtype=dtype, requires_grad=True)
    w = torch.randn(V, 5, dtype=dtype, requires_grad=True)
    b = torch.randn(V, dtype=dtype, requires_grad=True) if bias else None
    t = torch.randint(0, V, (37,))
    t[:6] = 7  # repeated targets: the one-hot gradient must accumulate
    if ignored:
        t[[3, 11, 12, 36]] = -100
    return h, w, b, t


@pytest.fixture(params=["drop", "weight"])
def ignored_rows(request, monkeypatch):
    """How ignored targets are handled: dropped before the tiles (CPU, eager), or kept with weight
    0 (GPU and compiled graphs, taken here by pretending to be compiling)."""
    if request.param == "weight":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    return request.param


def grads(loss, params):
    (3.0 * loss).backward()  # an incoming gradient other than 1
    out = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("ignored", [False, True])
@pytest.mark.parametrize("tile", [(None, None), (1, 7), (16, 7), (101, 10), (500, 1000), (32, 37), (256, None)])
def test_matches_float64_autograd(bias, ignored, tile, ignored_rows):
    vocab_slice, chunk_rows = tile  # several slices and/or row chunks, ragged last ones
    h, w, b, t = inputs(bias, ignored)
    params = [p for p in (h, w, b) if p is not None]
    loss = linear_cross_entropy(h, w, b, t, vocab_slice=vocab_slice, chunk_rows=chunk_rows)
    got = grads(loss, params)
    logits = F.linear(h, w, b)
    ref = F.cross_entropy(logits, t, ignore_index=-100)
    want = grads(ref, params)
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-12)
    with torch.no_grad():  # the forward-only path
        again = linear_cross_entropy(h, w, b, t, vocab_slice=vocab_slice, chunk_rows=chunk_rows)
        torch.testing.assert_close(again, ref.detach(), rtol=0, atol=1e-12)
    keep = t != -100
    lp = target_log_probs(h[keep], w, b, t[keep], vocab_slice=vocab_slice, chunk_rows=chunk_rows)
    want_lp = torch.log_softmax(logits, 1)[keep.nonzero().squeeze(1), t[keep]]
    torch.testing.assert_close(lp, want_lp.detach(), rtol=0, atol=1e-12)


def test_every_target_ignored_gives_zero_loss_and_zero_gradients(ignored_rows):
    h, w, b, t = inputs(bias=True, ignored=False)
    loss = linear_cross_entropy(h, w, b, torch.full_like(t, -100))
    loss.backward()
    assert loss.item() == 0.0
    assert all(p.grad is not None and not p.grad.any() for p in (h, w, b))


def test_half_precision_accumulates_in_float32(ignored_rows):
    h, w, b, t = inputs(bias=True, ignored=True, dtype=torch.float32)
    ref = F.cross_entropy(F.linear(h, w, b), t, ignore_index=-100)
    hb, wb, bb = (p.detach().bfloat16().requires_grad_() for p in (h, w, b))
    loss = linear_cross_entropy(hb, wb, bb, t, vocab_slice=16, chunk_rows=8)
    loss.backward()
    assert loss.dtype == torch.float32 and hb.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, ref, rtol=2e-2, atol=2e-2)
    want = torch.autograd.grad(ref, h)[0]
    torch.testing.assert_close(hb.grad.float(), want, rtol=5e-2, atol=5e-2)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # matmuls in bf16, float32 softmax and gradients
        loss = linear_cross_entropy(h, w, b, t)
    loss.backward()
    assert loss.dtype == torch.float32 and w.grad.dtype == torch.float32
    with torch.no_grad():  # the same bf16 operands as the explicit bf16 call
        assert torch.equal(loss, linear_cross_entropy(hb, wb, bb, t))


def test_default_tiles_take_the_whole_vocabulary_or_the_given_slice():
    assert default_tiles(8000) == (TILE_LOGITS // 8000, 8000)  # one pass: no recomputed matmul
    assert default_tiles(17_715, 256) == (TILE_LOGITS // 256, 256)  # NNLM: a batch of 512 is one chunk
    assert default_tiles(100, 256) == (TILE_LOGITS // 100, 100)
    # a GPU takes GPT-2's 50,257 words for a batch of 32 x 128 tokens in one chunk
    assert default_tiles(50_257, device="cuda") == (GPU_TILE_LOGITS // 50_257, 50_257)
    assert GPU_TILE_LOGITS // 50_257 >= 32 * 128


@pytest.mark.parametrize("bias", [False, True])
def test_bf16_whole_vocabulary_path_matches_float64_on_the_same_operands(bias):
    """Half precision with one slice: the probabilities are formed in place in bf16 (one
    rounding) and the products accumulated in float32, chunk by chunk."""
    h, w, b, t = inputs(bias=bias, ignored=True, dtype=torch.float32)
    hb, wb = h.detach().bfloat16(), w.detach().bfloat16()
    bb = b.detach().bfloat16() if bias else None
    x, v = hb.clone().requires_grad_(), wb.clone().requires_grad_()
    c = bb.clone().requires_grad_() if bias else None
    loss = linear_cross_entropy(x, v, c, t, chunk_rows=5)  # several chunks, whole vocabulary
    loss.backward()
    x64, v64 = hb.double().requires_grad_(), wb.double().requires_grad_()
    c64 = bb.double().requires_grad_() if bias else None
    z64 = F.linear(x64, v64, c64)
    z64 = z64 + (z64.bfloat16().double() - z64).detach()  # the product's output is rounded to bf16
    ref = F.cross_entropy(z64, t, ignore_index=-100)
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-5 * ref.item()
    for got, want in [(x.grad, x64.grad), (v.grad, v64.grad)] + ([(c.grad, c64.grad)] if bias else []):
        # bf16 probabilities (2^-9 relative each) and a bf16 result: about 2^-7 of the largest entry
        assert (got.double() - want).abs().max() <= 2 ** -7 * want.abs().max()


def test_a_compiled_loss_has_no_graph_break_and_matches_float64():
    """Inside ``torch.compile`` the ignored rows stay in the tiles with weight 0: no host read of
    their count, so the loss traces as one graph (``fullgraph``) and gives the eager values."""
    h, w, b, t = inputs(bias=True, ignored=True)
    params = [h, w, b]
    torch._dynamo.reset()
    compiled = torch.compile(linear_cross_entropy, backend="aot_eager", fullgraph=True)
    loss = compiled(h, w, b, t)
    got = grads(loss, params)
    ref = F.cross_entropy(F.linear(h, w, b), t, ignore_index=-100)
    want = grads(ref, params)
    torch._dynamo.reset()
    torch.testing.assert_close(loss, ref, rtol=0, atol=1e-12)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-12)
