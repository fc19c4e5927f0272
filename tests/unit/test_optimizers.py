"""``train.optimizer=lamb|adafactor``: LAMB against its algorithm written out in float64, Adafactor
against torch's, both through the builder's parameter groups, and their state round-tripping."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.train.config import TrainConfig
from ptmkit.train.optim import Lamb, build_optimizer, no_decay


def lamb_reference(p0, grads, lr, b1, b2, eps, wd):
    """You et al. (2020), Algorithm 2, with the identity as the trust ratio's scaling function."""
    p = p0.double().clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps) + wd * p
        w_norm, r_norm = p.norm(), r.norm()
        ratio = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        p = p - lr * ratio * r
    return p


def test_lamb_is_the_papers_update():
    torch.manual_seed(0)
    shapes = [(6, 4), (4,), (3, 2, 2)]
    p0 = [torch.randn(s) for s in shapes]
    p0[1] = torch.zeros(4)  # ||w|| = 0: the ratio is 1
    grads = [[torch.randn(s) for s in shapes] for _ in range(7)]
    for t in range(7):
        grads[t][2] = torch.zeros(3, 2, 2) if t < 2 else grads[t][2]  # ||update|| = 0 at first (no decay)
    params = [nn.Parameter(p.clone()) for p in p0]
    kw = dict(lr=5e-2, b1=0.9, b2=0.999, eps=1e-6)
    opt = Lamb([{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0.0}],
               lr=kw["lr"], betas=(kw["b1"], kw["b2"]), eps=kw["eps"])
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone()
        opt.step()
    errors = []
    for i, (p, wd) in enumerate(zip(params, (0.1, 0.1, 0.0))):
        want = lamb_reference(p0[i], [step[i] for step in grads], wd=wd, **kw)
        torch.testing.assert_close(p.detach().double(), want, rtol=1e-5, atol=1e-6)
        errors.append(float((p.detach().double() - want).abs().max()))
        assert not torch.equal(p.detach(), p0[i])
    assert max(errors) < 1e-6, errors
    assert [float(opt.state[p]["step"]) for p in params] == [7.0, 7.0, 7.0]


def toy() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))


def step_with(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    torch.manual_seed(seed)
    model(torch.randint(0, 10, (4, 3))).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("name", ["lamb", "adafactor"])
def test_state_dict_round_trips_exactly(name):
    cfg = TrainConfig(optimizer=name, lr=1e-2, weight_decay=0.01)
    model = toy()
    opt = build_optimizer(model, cfg)
    assert sorted(g["weight_decay"] for g in opt.param_groups) == [0.0, 0.01]  # BERT's groups kept
    for seed in range(3):
        step_with(model, opt, seed)
    resumed = copy.deepcopy(model)
    again = build_optimizer(resumed, cfg)
    again.load_state_dict(copy.deepcopy(opt.state_dict()))  # as a checkpoint hands it back
    for seed in range(3, 6):
        step_with(model, opt, seed)
        step_with(resumed, again, seed)
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_adafactor_is_torchs_with_the_builders_groups():
    cfg = TrainConfig(optimizer="adafactor", lr=3e-2, weight_decay=0.1, adafactor_beta2_decay=-0.7,
                      adafactor_eps1=1e-20, adafactor_eps2=2e-3)
    model = toy()
    ours = build_optimizer(model, cfg)
    assert isinstance(ours, torch.optim.Adafactor)
    twin = copy.deepcopy(model)
    named = list(twin.named_parameters())
    theirs = torch.optim.Adafactor(
        [{"params": [p for n, p in named if not no_decay(n, p)], "weight_decay": 0.1},
         {"params": [p for n, p in named if no_decay(n, p)], "weight_decay": 0.0}],
        lr=3e-2, beta2_decay=-0.7, eps=(1e-20, 2e-3))
    for seed in range(5):
        step_with(model, ours, seed)
        step_with(twin, theirs, seed)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)
    assert not torch.equal(next(model.parameters()), next(toy().parameters()))


def test_adamw_stays_the_default():
    model = toy()
    assert type(build_optimizer(model, TrainConfig())) is torch.optim.AdamW
    assert type(build_optimizer(model, TrainConfig(optimizer="lamb"))) is Lamb


@pytest.mark.parametrize("kw, match", [
    ({"optimizer": "lars"}, r"train\.optimizer='lars' is not one of \('adamw', 'lamb', 'adafactor'\)"),
    ({"optimizer": "lam"}, "did you mean 'lamb'"),
    ({"optimizer": "lamb", "bias_correction": False}, "applies to train.optimizer=adamw only"),
    ({"optimizer": "adafactor", "strategy": "fsdp"}, "use train.strategy=ddp, or train.optimizer=adamw or lamb"),
    ({"adafactor_beta2_decay": 0.5}, "adafactor_beta2_decay must be <= 0"),
    ({"adafactor_eps1": "tiny"}, "adafactor_eps1 must be a number or null"),
    ({"schedule": "wds"}, "did you mean 'wsd'"),
    ({"decay_fraction": 0.0}, r"decay_fraction must be in \(0, 1\]"),
    ({"decay_shape": "exp"}, r"is not one of \('linear', 'cosine', 'sqrt'\)"),
])
def test_bad_values_name_the_allowed_ones(kw, match):
    with pytest.raises(PtmError, match=match) as err:
        TrainConfig(**kw)
    assert "\n" not in str(err.value) and len(str(err.value)) <= 200
