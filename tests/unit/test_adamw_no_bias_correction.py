"""``train.bias_correction=false``: AdamW without the moments' bias correction, checked against the
update written out in float64, and against torch's AdamW when the correction is put back."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.train.config import TrainConfig
from ptmkit.train.optim import AdamWNoBiasCorrection, build_optimizer


def reference(p0, grads, lr, b1, b2, eps, wd, correct: bool):
    p, m, v = p0.double().clone(), torch.zeros_like(p0, dtype=torch.float64), torch.zeros_like(p0, dtype=torch.float64)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh, vh = (m / (1 - b1**t), v / (1 - b2**t)) if correct else (m, v)
        p = p - lr * (mh / (vh.sqrt() + eps) + wd * p)
    return p


def test_update_is_the_uncorrected_formula() -> None:
    torch.manual_seed(0)
    p0 = torch.randn(5, 3)
    grads = [torch.randn(5, 3) for _ in range(6)]
    w = nn.Parameter(p0.clone())
    opt = AdamWNoBiasCorrection([w], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1)
    for g in grads:
        w.grad = g.clone()
        opt.step()
    want = reference(p0, grads, 1e-2, 0.9, 0.999, 1e-6, 0.1, correct=False)
    torch.testing.assert_close(w.detach().double(), want, rtol=1e-5, atol=1e-6)
    # ... which differs from the corrected update (torch's AdamW) by far more than rounding.
    corrected = reference(p0, grads, 1e-2, 0.9, 0.999, 1e-6, 0.1, correct=True)
    assert (corrected - want).abs().max() > 1e-3
    w2 = nn.Parameter(p0.clone())
    opt2 = torch.optim.AdamW([w2], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1)
    for g in grads:
        w2.grad = g.clone()
        opt2.step()
    torch.testing.assert_close(w2.detach().double(), corrected, rtol=1e-5, atol=1e-6)


def test_config_switch_picks_the_optimizer_and_state_round_trips() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    assert isinstance(build_optimizer(model, TrainConfig()), torch.optim.AdamW)
    opt = build_optimizer(model, TrainConfig(bias_correction=False, weight_decay=0.01))
    assert isinstance(opt, AdamWNoBiasCorrection)
    assert sorted(g["weight_decay"] for g in opt.param_groups) == [0.0, 0.01]  # BERT's groups kept
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    again = build_optimizer(model, TrainConfig(bias_correction=False, weight_decay=0.01))
    again.load_state_dict(opt.state_dict())  # a resumed run continues with the same moments
    for a, b in zip(opt.state.values(), again.state.values()):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"]) and float(a["step"]) == float(b["step"]) == 1.0
    with pytest.raises(PtmError, match="bias_correction"):
        TrainConfig(bias_correction="no")
