"""The element-wise CPU kernels (exp, accumulate, tanh GELU) against float64 and PyTorch."""

import pytest
import torch
import torch.nn.functional as F

from ptmkit.nn import bits
from ptmkit.nn.activations import get_activation
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.pointwise import MIN_KERNEL_ELEMENTS, add_into, exp_into, gelu_tanh
from ptmkit.nn.softmax_ce import softmax_cross_entropy

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def _kernels_on(monkeypatch):
    """The kernels' path whatever this machine's thread count."""
    monkeypatch.setattr(bits, "KERNEL_MAX_THREADS", 1 << 20)


def _ulp_tol(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per element: one rounding in ``dtype`` plus float32 arithmetic error."""
    eps = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -21
    return eps * ref.abs() + 1e-30


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_into_matches_float64_and_may_write_in_place(dtype):
    x = torch.log_softmax(torch.randn(130, 257, dtype=torch.float64) * 5, 1)
    x[0, :4] = torch.tensor([0.0, -0.0, -88.5, -1e4], dtype=torch.float64)  # 1, 1, tiny, ~0
    x32 = x.float()
    out = torch.empty(x.shape, dtype=dtype)
    assert exp_into(x32, out) is out
    ref = x32.double().exp()
    assert torch.all((out.double() - ref).abs() <= _ulp_tol(ref, dtype) + 2e-38)
    assert out[0, 0] == 1 and out[0, 1] == 1
    if dtype == torch.float32:
        y = x32.clone()
        exp_into(y, y)
        assert torch.equal(y, out)


def test_exp_into_keeps_nan_and_takes_pytorch_path_for_other_layouts():
    x = torch.log_softmax(torch.randn(64, 300, generator=torch.Generator().manual_seed(4)), 1)
    x[5, 7] = float("nan")
    out = torch.empty(64, 300, dtype=torch.bfloat16)
    exp_into(x, out)
    assert torch.isnan(out[5, 7]) and torch.isfinite(out).sum() == out.numel() - 1
    strided = torch.empty(300, 64, dtype=torch.bfloat16).T  # not contiguous: PyTorch's exp
    exp_into(x, strided)
    # the two exps differ by an ulp of float32, which can flip a bf16 rounding: one bf16 ulp (2^-7)
    assert torch.allclose(strided.float(), out.float(), rtol=2 ** -7, atol=0, equal_nan=True)
    with pytest.raises(ValueError, match="does not match"):
        exp_into(x, torch.empty(3, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_into_accumulates_exactly_widened_values(dtype):
    g = torch.Generator().manual_seed(0)
    acc = torch.randn(301, 77, generator=g)
    x = torch.randn(301, 77, generator=g).to(dtype)
    expected = acc + x.float()  # float32 + exactly widened x: one rounding, both ways
    assert add_into(acc, x) is acc
    assert torch.equal(acc, expected)
    with pytest.raises(ValueError, match="does not match"):
        add_into(acc, x[:3])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_tanh_forward_and_backward_match_float64(dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(129, 257, generator=g) * 3).to(dtype)  # above MIN_KERNEL_ELEMENTS
    x.view(-1)[:4] = torch.tensor([0.0, -5.0, -20.0, 30.0]).to(dtype)
    assert x.numel() >= MIN_KERNEL_ELEMENTS
    grad = torch.randn(x.shape, generator=g).to(dtype)
    xk = x.clone().requires_grad_()
    y = gelu_tanh(xk)
    y.backward(grad)
    assert y.dtype == dtype and xk.grad.dtype == dtype
    assert y.grad_fn is not None and "GeluTanh" in type(y.grad_fn).__name__  # the kernel ran

    xr = x.double().requires_grad_()
    yr = F.gelu(xr, approximate="tanh")
    yr.backward(grad.double())
    # float32: a few ulp of each value (PyTorch's own kernel is as far); bf16: one rounding
    fwd_tol = 2.0 ** -8 * yr.abs() + 1e-6 if dtype == torch.bfloat16 else 4e-6 * yr.abs() + 1e-7
    assert torch.all((y.detach().double() - yr).abs() <= fwd_tol)
    bwd_tol = 2.0 ** -8 * xr.grad.abs() + 1e-3 if dtype == torch.bfloat16 else 1e-5 * xr.grad.abs() + 1e-5
    assert torch.all((xk.grad.double() - xr.grad).abs() <= bwd_tol)
    assert y[0, 2] == 0 and y[0, 3] == 30  # far tails: exactly 0 and x


def test_gelu_tanh_special_values_as_pytorch():
    x = torch.zeros(MIN_KERNEL_ELEMENTS)
    x[:5] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, -100.0])
    ours, theirs = gelu_tanh(x), F.gelu(x, approximate="tanh")
    assert torch.equal(ours.isnan(), theirs.isnan())
    assert torch.equal(ours[~ours.isnan()], theirs[~theirs.isnan()])


def test_gelu_tanh_small_or_strided_inputs_take_pytorch_path():
    small = torch.randn(10, 10, requires_grad=True)
    assert "GeluTanh" not in type(gelu_tanh(small).grad_fn).__name__
    strided = torch.randn(256, 256).T
    assert torch.allclose(gelu_tanh(strided), F.gelu(strided, approximate="tanh"), atol=1e-6)


def test_gelu_tanh_is_first_order_only_and_the_activation_uses_it():
    x = torch.randn(MIN_KERNEL_ELEMENTS, requires_grad=True)
    (gx,) = torch.autograd.grad(gelu_tanh(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()
    assert get_activation("gelu_tanh") is not F.gelu
    assert torch.equal(get_activation("gelu_tanh")(x.detach()), gelu_tanh(x.detach()))


def test_many_threads_take_pytorch_path_with_the_same_results(monkeypatch):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(MIN_KERNEL_ELEMENTS, generator=g).bfloat16().requires_grad_()
    logits = torch.randn(64, 700, generator=g)
    target = torch.randint(0, 700, (64,), generator=g)
    h, w = torch.randn(40, 16, generator=g), torch.randn(300, 16, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        kernel = (gelu_tanh(x), softmax_cross_entropy(logits, target)[0], linear_cross_entropy(h, w, None, target[:40] % 300))
    monkeypatch.setattr(bits, "KERNEL_MAX_THREADS", 0)  # as if PyTorch ran on more threads than pay off
    assert not bits.kernels_win()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch_path = (gelu_tanh(x), softmax_cross_entropy(logits, target)[0], linear_cross_entropy(h, w, None, target[:40] % 300))
    assert "GeluTanh" in type(kernel[0].grad_fn).__name__ and "GeluTanh" not in type(torch_path[0].grad_fn).__name__
    assert torch.allclose(kernel[0].float(), torch_path[0].float(), rtol=2 ** -7, atol=1e-6)
    assert torch.allclose(kernel[1], torch_path[1], rtol=1e-5)
    assert torch.allclose(kernel[2], torch_path[2], rtol=1e-3)
