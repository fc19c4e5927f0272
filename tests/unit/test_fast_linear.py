"""Linear layers without autograd through oneDNN (``ptmkit.nn.fast_linear``): the product and its
fused activation against a float64 reference, and the default route (``nn.Linear`` bit for bit)
wherever a gradient, autocast, a tracer, a hook or another module type is involved."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.flops import counter
from ptmkit.nn import fast_linear
from ptmkit.nn.activations import get_activation
from ptmkit.nn.fast_linear import applies, linear, project
from ptmkit.nn.feedforward import FeedForward

pytestmark = pytest.mark.skipif(not fast_linear._ONEDNN, reason="this PyTorch build has no oneDNN")


def layer(i: int = 48, o: int = 80, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(i, o)


class Projection(nn.Module):
    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.lin = lin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(self.lin, x)


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh", "relu"])
def test_the_fused_product_matches_float64(activation):
    lin = layer()
    x = torch.randn(3, 7, 48, generator=torch.Generator().manual_seed(1))
    act = get_activation(activation) if activation else None
    ref = F.linear(x.double(), lin.weight.double(), lin.bias.double())
    ref = {None: ref, "gelu": F.gelu(ref), "relu": F.relu(ref), "gelu_tanh": F.gelu(ref, approximate="tanh")}[activation]
    with torch.inference_mode():
        assert applies(x, lin.weight)
        got = project(lin, x, activation, act)
    assert got.dtype == torch.float32 and got.shape == (3, 7, 80)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_bfloat16_within_one_rounding():
    lin = layer().to(torch.bfloat16)
    x = torch.randn(5, 48).to(torch.bfloat16)
    ref = F.gelu(F.linear(x.double(), lin.weight.double(), lin.bias.double()))
    with torch.no_grad():
        got = linear(x, lin.weight, lin.bias, "gelu", F.gelu)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), ref, rtol=1.6e-2, atol=1e-2)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
def test_the_default_route_wherever_it_must_stay():
    lin = layer()
    x = torch.randn(4, 48)
    assert not applies(x, lin.weight)  # gradients enabled: training keeps nn.Linear, bit for bit
    assert torch.equal(project(lin, x, "gelu", F.gelu), F.gelu(lin(x)))
    with torch.no_grad():
        assert not applies(x.double(), lin.weight.double())  # float64
        assert not applies(x[:, ::2], lin.weight[:, ::2])  # not contiguous
        assert not applies(x[:0], lin.weight)  # no rows
        with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast decides the dtype of the product
            assert not applies(x, lin.weight)
            assert project(lin, x).dtype == torch.bfloat16
        traced = torch.jit.trace(Projection(lin), x)  # as ONNX export traces
        assert "mkldnn" not in str(traced.graph)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.ao's deprecation of quantized tensors
def test_modules_that_are_not_plain_linear_layers_are_called():
    lin = layer()
    seen = []
    lin.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    quantized = torch.ao.quantization.quantize_dynamic(nn.Sequential(layer()), {nn.Linear}, dtype=torch.qint8)[0]
    x = torch.randn(2, 48)
    with torch.inference_mode():
        project(lin, x)
        assert seen == [(2, 80)]
        torch.testing.assert_close(project(quantized, x), quantized(x), rtol=0, atol=0)


def test_an_encoder_without_autograd_matches_its_training_route():
    cfg = TransformerConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position=16, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = TransformerEncoder(cfg).eval()
    ffn = FeedForward(32, 64, "gelu")
    ids = torch.randint(5, 50, (3, 16))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    with_grad = model(ids, attention_mask=mask).last_hidden_state
    x = torch.randn(3, 16, 32)
    ffn_grad = ffn(x)
    with torch.inference_mode():
        fast = model(ids, attention_mask=mask).last_hidden_state
        ffn_fast = ffn(x)
    torch.testing.assert_close(fast, with_grad.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ffn_fast, ffn_grad.detach(), rtol=1e-5, atol=1e-5)


def test_the_flop_counter_counts_the_onednn_route_as_the_default_one():
    lin = layer()
    x = torch.randn(3, 7, 48)
    with counter() as fc:
        lin(x)
    default = fc.get_total_flops()
    with torch.inference_mode(), counter() as fc:
        project(lin, x, "gelu", F.gelu)
    assert fc.get_total_flops() == default == 2 * 21 * 48 * 80
