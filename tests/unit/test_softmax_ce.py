"""The fused softmax cross-entropy kernel against PyTorch's loss in float64."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ptmkit.nn import bits
from ptmkit.nn.bits import bf16_to_f32, exp_f32, f32_to_bf16
from ptmkit.nn.softmax_ce import softmax_cross_entropy, softmax_nll_
from ptmkit.nn.targets import IGNORE_INDEX


@pytest.fixture(autouse=True)
def _kernels_on(monkeypatch):
    """The kernel's path whatever this machine's thread count."""
    monkeypatch.setattr(bits, "KERNEL_MAX_THREADS", 1 << 20)


def _case(dtype, N=96, C=700, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(N, C, generator=g) * 4).to(dtype)
    target = torch.randint(0, C, (N,), generator=g)
    target[[3, 50]] = IGNORE_INDEX
    target[7] = int(logits[7].float().argmax())  # at least one row right
    return logits, target


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_accuracy_and_gradient_match_float64(dtype):
    logits, target = _case(dtype)
    x = logits.clone().requires_grad_()
    loss, acc = softmax_cross_entropy(x, target)
    loss.backward()

    ref_x = logits.double().requires_grad_()
    ref = F.cross_entropy(ref_x, target, ignore_index=IGNORE_INDEX)
    ref.backward()
    assert loss.dtype == torch.float32 and acc.dtype == torch.float32
    assert abs(loss.item() - ref.item()) < 1e-5 * ref.item()
    valid = target != IGNORE_INDEX  # accuracy over the rows that have a target
    assert acc.item() == pytest.approx((logits.float().argmax(-1) == target)[valid].float().mean().item())
    assert acc.item() > 0
    assert x.grad.dtype == dtype
    # float32: a few ulp of the largest gradient; bf16: one rounding of each element
    tol = 1e-7 if dtype == torch.float32 else 2 ** -8 * ref_x.grad.abs().max().item()
    assert (x.grad.double() - ref_x.grad).abs().max().item() <= tol
    assert torch.all(x.grad[3] == 0) and torch.all(x.grad[50] == 0)  # ignored rows


def test_incoming_gradient_scales_and_bf16_matches_pytorch_path():
    logits, target = _case(torch.bfloat16, seed=1)
    x = logits.clone().requires_grad_()
    loss, _ = softmax_cross_entropy(x, target)
    (3.0 * loss).backward()
    y = logits.clone().requires_grad_()
    (3.0 * F.cross_entropy(y.float(), target)).backward()  # what autocast code did before
    assert torch.allclose(x.grad.float(), y.grad.float(), rtol=2 ** -7, atol=1e-9)


def test_argmax_ties_take_the_first_index_as_torch():
    logits = torch.zeros(64, 600)
    logits[:, [5, 9]] = 2.0  # a tie: torch.argmax answers 5
    target = torch.full((64,), 9)
    target[:32] = 5
    _, acc = softmax_cross_entropy(logits, target)
    assert acc.item() == 0.5


def test_nan_logit_gives_nan_loss_and_all_ignored_gives_nan():
    logits, target = _case(torch.float32)
    logits[10, 20] = float("nan")
    loss, _ = softmax_cross_entropy(logits, target)
    assert math.isnan(loss.item())
    loss, acc = softmax_cross_entropy(_case(torch.float32)[0], torch.full((96,), IGNORE_INDEX))
    assert math.isnan(loss.item()) and acc.item() == 0.0  # as F.cross_entropy


def test_large_logits_do_not_overflow():
    logits, target = _case(torch.float32)
    logits = logits + 1e4  # exp(1e4) overflows float32: the row maximum is subtracted first
    loss, _ = softmax_cross_entropy(logits, target)
    ref = F.cross_entropy(logits.double(), target, ignore_index=IGNORE_INDEX)
    assert abs(loss.item() - ref.item()) < 1e-3


def test_bad_target_and_shape_raise():
    logits, target = _case(torch.float32)
    target[0] = 700
    with pytest.raises(IndexError, match="700 is out of bounds for 700 classes"):
        softmax_cross_entropy(logits, target)
    with pytest.raises(ValueError, match=r"logits \[N, C\] and target \[N\]"):
        softmax_cross_entropy(logits, target[:5])


def test_small_inputs_take_the_pytorch_path_with_the_same_result():
    logits = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)  # float64: PyTorch's path
    target = torch.tensor([0, 1, 1, IGNORE_INDEX])
    loss, _ = softmax_cross_entropy(logits, target)
    assert loss.item() == pytest.approx(F.cross_entropy(logits, target).item())


def test_exp_and_bf16_helpers():
    x = np.linspace(-87, 0, 200_001, dtype=np.float32)

    import numba

    @numba.njit
    def run(a):
        out = np.empty_like(a)
        for i in range(a.size):
            out[i] = exp_f32(a[i])
        return out

    rel = np.abs(run(x).astype(np.float64) / np.exp(x.astype(np.float64)) - 1)
    assert rel.max() < 3e-7  # about 2 ulp
    v = torch.randn(10_000).bfloat16()
    bits = v.view(torch.int16).numpy().view(np.uint16)

    @numba.njit
    def round_trip(b):
        out = np.empty_like(b)
        for i in range(b.size):
            out[i] = f32_to_bf16(bf16_to_f32(b[i]))
        return out

    assert np.array_equal(round_trip(bits), bits)
    f = torch.randn(10_000)

    @numba.njit
    def narrow_all(a):
        out = np.empty(a.size, np.uint16)
        for i in range(a.size):
            out[i] = f32_to_bf16(a[i])
        return out

    got = torch.from_numpy(narrow_all(f.numpy()).view(np.int16)).view(torch.bfloat16)
    assert torch.equal(got, f.bfloat16())  # round to nearest even, as PyTorch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_nll_in_place_matches_float64(dtype):
    logits, target = _case(dtype, seed=3)
    target[[3, 50]] = 0  # no ignored rows here
    logits[5, 11] = float("nan")
    z = logits.clone()
    nll = softmax_nll_(z, target)
    ref_logp = torch.log_softmax(logits.double(), 1)
    ref_nll = -ref_logp.gather(1, target[:, None]).squeeze(1)
    ok = torch.arange(len(target)) != 5
    assert nll.dtype == torch.float32 and torch.isnan(nll[5]) and torch.isnan(z[5]).all()
    assert torch.all((nll[ok].double() - ref_nll[ok]).abs() <= 1e-5 * ref_nll[ok].abs() + 1e-6)
    p = ref_logp[ok].exp()
    # bf16: one rounding; float32: exp of (z - lse) with lse good to an ulp of |lse| ~ 20: 5e-6 relative
    tol = 2 ** -8 * p + 1e-12 if dtype == torch.bfloat16 else 5e-6 * p + 1e-12
    assert z.dtype == dtype and torch.all((z[ok].double() - p).abs() <= tol)
    strided = logits.T.contiguous().T  # not contiguous: PyTorch's path, the same answer
    nll_t = softmax_nll_(strided, target)
    assert torch.allclose(nll_t[ok], nll[ok], rtol=1e-5)
    assert torch.allclose(strided[ok].float(), z[ok].float(), rtol=2 ** -7, atol=1e-9)


def test_softmax_nll_rejects_bad_and_ignored_targets():
    z = torch.randn(4, 9)
    with pytest.raises(IndexError, match="out of bounds"):
        softmax_nll_(z, torch.tensor([0, 1, 9, 2]))
    with pytest.raises(IndexError, match="ignored"):
        softmax_nll_(z, torch.tensor([0, 1, IGNORE_INDEX, 2]))
