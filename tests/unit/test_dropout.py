"""The hashed-mask dropout and the written-out attention it feeds."""

import math

import pytest
import torch
import torch.nn.functional as F

from ptmkit.nn.attention import attend
from ptmkit.nn.dropout import Dropout, dropout, keep_mask


def test_keep_rate_and_independence():
    p = 0.1
    m = keep_mask((1000, 1000), p, seed=123).float()
    # 1e6 Bernoulli(0.9) draws: sd of the mean 3e-4
    assert abs(m.mean().item() - (1 - p)) < 1.5e-3
    # neighbouring elements (which share nothing but the stream) are uncorrelated
    flat = m.flatten()
    a, b = flat[:-1] - flat.mean(), flat[1:] - flat.mean()
    assert abs((a * b).mean().item() / flat.var().item()) < 5e-3
    # rows are not copies of each other
    assert not torch.equal(m[0], m[1])


def test_mask_is_a_function_of_the_seed():
    assert torch.equal(keep_mask((7, 33), 0.3, 5), keep_mask((7, 33), 0.3, 5))
    assert not torch.equal(keep_mask((7, 33), 0.3, 5), keep_mask((7, 33), 0.3, 6))


@pytest.mark.parametrize("p", [0.0, 0.5, 0.999])
def test_extreme_rates(p):
    m = keep_mask((100_000,), p, seed=1).float().mean().item()
    assert abs(m - (1 - p)) < 0.01


def test_scaling_expectation_and_gradient():
    x = torch.randn(64, 512, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(0)
    y = dropout(x, 0.25)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / 0.75)
    y.backward(torch.ones_like(y))
    # d y / d x = mask / (1 - p): the backward applies the forward's own mask
    assert torch.allclose(x.grad, kept.double() / 0.75)


def test_seeded_runs_repeat_and_advance_the_generator():
    x = torch.randn(32, 100)
    torch.manual_seed(7)
    a, b = dropout(x, 0.1), dropout(x, 0.1)
    torch.manual_seed(7)
    assert torch.equal(dropout(x, 0.1), a)
    assert not torch.equal(a, b)  # each call draws a fresh seed


def test_eval_and_p0_are_identity_and_bad_p_raises():
    x = torch.randn(3, 4)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(1.0)
    d = Dropout(0.2).eval()
    assert d(x) is x


def test_bf16_keeps_dtype():
    x = torch.randn(16, 16).bfloat16()
    y = dropout(x, 0.5)
    assert y.dtype == torch.bfloat16
    kept = y != 0
    assert torch.equal(y[kept], (x[kept].float() * 2).bfloat16())


def _reference(q, k, v, mask, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return torch.softmax(s, -1) @ v.double()


@pytest.mark.parametrize("kind", ["none", "bool", "additive", "causal", "causal-rect", "bool-2d", "additive-2d"])
def test_written_out_attention_matches_sdpa(kind):
    torch.manual_seed(0)
    B, h, T, S, d = 2, 3, 5, 5 if kind != "causal-rect" else 8, 4
    q, k, v = torch.randn(B, h, T, d), torch.randn(B, h, S, d), torch.randn(B, h, S, d)
    mask, causal = None, False
    if kind == "bool":
        mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
        mask[0, ..., 3:] = False
    elif kind == "additive":
        mask = torch.randn(1, h, T, S)
    elif kind == "bool-2d":  # one [T, S] mask for all: added inside the batched product
        mask = torch.rand(T, S) < 0.7
        mask[:, 0] = True
    elif kind == "additive-2d":
        mask = torch.randn(T, S)
    elif kind.startswith("causal"):
        causal = True
    # dropout 1e-9 takes the written-out path and drops nothing (p · 2^24 rounds to 0)
    got = attend(q, k, v, mask, causal, 1e-9, None)
    ref_mask = torch.ones(T, S, dtype=torch.bool).tril() if causal else mask
    ref = _reference(q, k, v, ref_mask, 1 / math.sqrt(d))
    assert torch.allclose(got.double(), ref, atol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    assert torch.allclose(got, sdpa, atol=1e-5)


def test_written_out_causal_attention_under_bf16_autocast():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()  # as the projections hand them over
        got = attend(qb, kb, vb, None, True, 1e-9, None)
    assert got.dtype == torch.bfloat16
    ref = F.scaled_dot_product_attention(qb.float(), kb.float(), vb.float(), is_causal=True)
    assert torch.allclose(got.float(), ref, atol=3e-2)


def test_attention_dropout_rescales_probabilities():
    torch.manual_seed(0)
    q = k = torch.zeros(1, 1, 4, 2)  # uniform attention: every probability 1/4
    v = torch.eye(4).view(1, 1, 4, 4)
    out = attend(q, k, v, None, False, 0.5, None)  # row i = dropped probabilities of query i
    assert set(out.unique().tolist()) <= {0.0, 0.5}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_apply_mask_equals_mask_times_scale(dtype):
    from ptmkit.nn.dropout import apply_mask

    p, seed = 0.1, 99
    x = torch.randn(37, 129).to(dtype)
    x[0, :3] = torch.tensor([float("inf"), float("-inf"), 6.0e4])
    got = apply_mask(x, p, seed)
    keep = keep_mask(x.shape, p, seed)
    # as F.dropout: x · mask · scale in the dtype (bf16 / fp16: in fp32, rounded once to the nearest
    # even), so a dropped inf is NaN
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    ref = (x.to(acc) * (keep.to(acc) * torch.tensor(1 / (1 - p), dtype=acc))).to(dtype)
    assert got.dtype == dtype
    assert torch.allclose(got, ref, rtol=0, atol=0, equal_nan=True)  # bit-equal, NaN where NaN


def test_bf16_nan_stays_nan():
    from ptmkit.nn.dropout import apply_mask

    x = torch.full((1000,), float("nan"), dtype=torch.bfloat16)
    y = apply_mask(x, 0.5, 3)
    assert torch.isnan(y).all()  # kept or dropped (NaN · 0), as F.dropout


def test_non_contiguous_input():
    x = torch.randn(64, 32, dtype=torch.float64).t()  # [32, 64], strides (1, 32)
    torch.manual_seed(1)
    y = dropout(x, 0.3)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / 0.7)
