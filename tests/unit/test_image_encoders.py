"""The image encoders ``vit`` (Dosovitskiy et al. 2021) and ``cnn`` (a small ResNet): shapes,
construction from a preset's section, refusals, pooling, gradients."""

import pytest
import torch

from ptmkit.encoders.transformer import TransformerLayer
from ptmkit.errors import PtmError
from ptmkit.vision.encoders.base import ImageOutput, build_image_encoder
from ptmkit.vision.encoders.cnn import CNNConfig, CNNEncoder
from ptmkit.vision.encoders.vit import ViTConfig, ViTEncoder

SMALL_VIT = {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 64}
SMALL_CNN = {"channels": (8, 16, 16)}


def pixels(batch, size, seed=0):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("size,patch", [(32, 8), (24, 4), (16, 16)])
def test_vit_shapes(size, patch):
    torch.manual_seed(0)
    enc = ViTEncoder(ViTConfig(image_size=size, patch_size=patch, **SMALL_VIT))
    out = enc(pixels(2, size))
    n = (size // patch) ** 2
    assert isinstance(out, ImageOutput)
    assert out.tokens.shape == (2, n, 32)
    assert out.pooled.shape == (2, 32)
    assert enc.num_tokens == n and enc.output_size == 32
    assert torch.isfinite(out.tokens).all()


def test_vit_reuses_the_text_transformer_layers():
    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=8, **SMALL_VIT))
    assert len(enc.layers) == 2 and all(isinstance(layer, TransformerLayer) for layer in enc.layers)
    assert all(layer.pre_norm for layer in enc.layers) and enc.final_norm is not None


def test_vit_patches_in_raster_order():
    """Patch i of the tokens is the i-th patch read row by row: changing only the pixels of the
    patch at row 1, column 0 (index 2 of a 2 x 2 grid) changes that patch's embedding only."""
    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=8, **SMALL_VIT)).eval()
    x = pixels(1, 16)
    y = x.clone()
    y[:, :, 8:, :8] += 1.0
    a, b = enc.embed(x), enc.embed(y)  # [1, 1 + 4, H]
    changed = (a - b).abs().amax(dim=-1)[0]
    assert changed.nonzero().flatten().tolist() == [1 + 2]


def test_build_image_encoder_vit():
    enc = build_image_encoder({"encoder": "vit", "image_size": 32, "patch_size": 8, **SMALL_VIT})
    assert isinstance(enc, ViTEncoder) and enc.num_tokens == 16
    assert enc(pixels(3, 32)).tokens.shape == (3, 16, 32)


def test_build_image_encoder_cnn_from_a_list():
    enc = build_image_encoder({"encoder": "cnn", "image_size": 32, "channels": [8, 16], "hidden_size": 24})
    assert isinstance(enc, CNNEncoder) and enc.output_size == 24
    assert enc(pixels(2, 32)).tokens.shape == (2, enc.num_tokens, 24)


def test_build_image_encoder_unknown_key_suggests():
    with pytest.raises(PtmError, match="patch_size"):
        build_image_encoder({"encoder": "vit", "image_size": 32, "patch_sise": 8})


def test_build_image_encoder_unknown_name_suggests():
    with pytest.raises(PtmError, match="did you mean 'vit'"):
        build_image_encoder({"encoder": "vitt"})


def test_build_image_encoder_needs_a_name():
    with pytest.raises(PtmError, match="vision.encoder"):
        build_image_encoder({"image_size": 32})


@pytest.mark.parametrize("make", [
    lambda: ViTEncoder(ViTConfig(image_size=16, patch_size=8, **SMALL_VIT)),
    lambda: CNNEncoder(CNNConfig(image_size=16, **SMALL_CNN)),
])
@pytest.mark.parametrize("shape", [(2, 3, 16, 8), (2, 1, 16, 16), (3, 16, 16), (2, 3, 32, 32)])
def test_wrong_pixel_shape_is_refused(make, shape):
    with pytest.raises(PtmError, match=r"pixels \[batch, 3, 16, 16\]"):
        make()(torch.zeros(shape))


def test_indivisible_patch_size_is_refused():
    with pytest.raises(PtmError, match="image_size=30.*patch_size=8"):
        ViTConfig(image_size=30, patch_size=8)
    with pytest.raises(PtmError, match="image_size=30.*patch_size=8"):
        build_image_encoder({"encoder": "vit", "image_size": 30, "patch_size": 8})


def test_bad_vit_settings_are_refused():
    with pytest.raises(PtmError, match="num_heads"):
        ViTConfig(hidden_size=30, num_heads=4)
    with pytest.raises(PtmError, match="did you mean 'mean'"):
        ViTConfig(pool="maen")
    with pytest.raises(PtmError, match="channels"):
        CNNConfig(channels=())
    with pytest.raises(PtmError, match="did you mean 'batch'"):
        CNNConfig(norm="bacth")


@pytest.mark.parametrize("size,channels,stem,side", [(32, (8, 16, 16), 2, 4), (16, (8, 16), 1, 8), (20, (8, 8, 8), 2, 3)])
def test_cnn_shapes(size, channels, stem, side):
    enc = CNNEncoder(CNNConfig(image_size=size, channels=channels, stem_stride=stem))
    out = enc(pixels(2, size))
    assert enc.num_tokens == side * side and enc.output_size == channels[-1]
    assert out.tokens.shape == (2, side * side, channels[-1])
    assert out.pooled.shape == (2, channels[-1])


def test_cnn_default_config_is_a_four_stage_resnet():
    enc = CNNEncoder(CNNConfig())
    assert len(enc.stages) == 4 and enc.output_size == 256 and enc.num_tokens == 16
    assert enc(pixels(1, 64)).tokens.shape == (1, 16, 256)


@pytest.mark.parametrize("hidden", [None, 12])
def test_cnn_pooled_is_the_mean_of_the_tokens(hidden):
    enc = CNNEncoder(CNNConfig(image_size=16, hidden_size=hidden, **SMALL_CNN))
    out = enc(pixels(3, 16))
    torch.testing.assert_close(out.pooled, out.tokens.mean(dim=1))


def test_cnn_batch_norm_variant_runs_in_both_modes():
    enc = CNNEncoder(CNNConfig(image_size=16, norm="batch", **SMALL_CNN))
    assert enc(pixels(4, 16)).pooled.shape == (4, 16)
    assert enc.eval()(pixels(1, 16)).pooled.shape == (1, 16)


def test_cnn_images_are_independent_of_their_batch():
    """GroupNorm (the default) never mixes the images of a batch."""
    enc = CNNEncoder(CNNConfig(image_size=16, **SMALL_CNN))
    x = pixels(3, 16)
    torch.testing.assert_close(enc(x).tokens[1:2], enc(x[1:2]).tokens, atol=1e-5, rtol=1e-5)


def test_vit_mean_pool_is_the_mean_of_the_tokens():
    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=4, pool="mean", **SMALL_VIT))
    out = enc(pixels(2, 16))
    torch.testing.assert_close(out.pooled, out.tokens.mean(dim=1))


def test_vit_cls_pool_is_not_a_patch():
    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=4, **SMALL_VIT))
    out = enc(pixels(2, 16))
    assert not torch.allclose(out.pooled, out.tokens.mean(dim=1))
    assert not any(torch.allclose(out.pooled, out.tokens[:, i]) for i in range(out.tokens.shape[1]))


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_gradient_reaches_the_patch_embedding(pool):
    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=8, pool=pool, **SMALL_VIT))
    enc(pixels(2, 16)).pooled.square().sum().backward()
    for p in (enc.patch_embed.weight, enc.cls_token, enc.position_embeddings):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_gradient_reaches_the_cnn_stem():
    enc = CNNEncoder(CNNConfig(image_size=16, hidden_size=8, **SMALL_CNN))
    enc(pixels(2, 16)).pooled.square().sum().backward()
    assert enc.stem[0].weight.grad is not None and enc.stem[0].weight.grad.abs().sum() > 0


def test_vit_is_deterministic_in_eval_with_dropout():
    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=8, dropout=0.1, attention_dropout=0.1, **SMALL_VIT)).eval()
    x = pixels(2, 16)
    torch.testing.assert_close(enc(x).tokens, enc(x).tokens)
