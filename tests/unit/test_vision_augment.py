"""ptmkit.vision.augment: uint8 images -> normalised pixels, with random crop, colour jitter and
flip when given a generator."""

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.vision.augment import AugmentConfig, random_crop, to_pixels


def images(batch=4, size=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(batch, size, size, 3), dtype=np.uint8)


def test_no_rng_is_the_exact_normalisation():
    imgs = images()
    expected = (imgs.astype(np.float64) / 255.0 - 0.5) / 0.5  # [B, S, S, 3]
    expected = expected.transpose(0, 3, 1, 2)  # [B, 3, S, S]
    got = to_pixels(imgs, AugmentConfig(crop=0.2, jitter=0.4, flip=True), None)
    assert got.dtype == torch.float32 and got.shape == (4, 3, 16, 16)
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected, rtol=0, atol=1e-6)
    assert float(got.min()) >= -1.0 and float(got.max()) <= 1.0


def test_channel_order_is_rgb():
    imgs = np.zeros((1, 4, 4, 3), dtype=np.uint8)
    imgs[..., 0] = 255  # red
    got = to_pixels(imgs)
    assert got[0, 0].eq(1.0).all() and got[0, 1:].eq(-1.0).all()


def test_same_seed_same_pixels_other_seed_differs():
    cfg = AugmentConfig(crop=0.25, jitter=0.4, flip=True)
    imgs = images(8)
    a = to_pixels(imgs, cfg, np.random.default_rng(7))
    b = to_pixels(imgs, cfg, np.random.default_rng(7))
    c = to_pixels(imgs, cfg, np.random.default_rng(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_crop_keeps_the_shape_and_moves_the_image():
    imgs = images(6)
    got = to_pixels(imgs, AugmentConfig(crop=0.25), np.random.default_rng(0))
    assert got.shape == (6, 3, 16, 16)
    assert not torch.equal(got, to_pixels(imgs))


def test_random_crop_is_a_window_of_the_white_padded_image():
    imgs = images(5, 8)
    rng = np.random.default_rng(3)
    out = random_crop(imgs, 2, rng)
    top, left = np.random.default_rng(3).integers(0, 5, size=(2, 5))
    for i in range(5):
        padded = np.full((12, 12, 3), 255, dtype=np.uint8)
        padded[2:10, 2:10] = imgs[i]
        np.testing.assert_array_equal(out[i], padded[top[i]:top[i] + 8, left[i]:left[i] + 8])


def test_no_augmentation_with_rng_equals_the_evaluation_pixels():
    imgs = images()
    rng = np.random.default_rng(0)
    assert torch.equal(to_pixels(imgs, AugmentConfig(), rng), to_pixels(imgs, None, None))
    assert torch.equal(to_pixels(imgs, AugmentConfig(crop=0.01), rng), to_pixels(imgs))  # round(0.16) = 0 pixels


def test_jitter_stays_in_range_and_changes_pixels():
    imgs = images()
    got = to_pixels(imgs, AugmentConfig(jitter=0.5), np.random.default_rng(1))
    assert got.shape == (4, 3, 16, 16)
    assert float(got.min()) >= -1.0 and float(got.max()) <= 1.0
    assert not torch.equal(got, to_pixels(imgs))


def test_flip_mirrors_some_images_exactly():
    imgs = images(16)
    plain = to_pixels(imgs)
    got = to_pixels(imgs, AugmentConfig(flip=True), np.random.default_rng(0))
    flipped = [torch.equal(got[i], plain[i].flip(-1)) for i in range(16)]
    kept = [torch.equal(got[i], plain[i]) for i in range(16)]
    assert all(f or k for f, k in zip(flipped, kept))
    assert any(flipped) and any(kept)


@pytest.mark.parametrize("kwargs", [{"crop": 1.0}, {"crop": -0.1}, {"jitter": "a"}, {"flip": "yes"}])
def test_bad_config_is_refused(kwargs):
    with pytest.raises(PtmError):
        AugmentConfig(**kwargs)


@pytest.mark.parametrize("bad", [np.zeros((2, 8, 8, 3), dtype=np.float32), np.zeros((2, 8, 6, 3), dtype=np.uint8),
                                 np.zeros((8, 8, 3), dtype=np.uint8), np.zeros((2, 8, 8, 4), dtype=np.uint8)])
def test_bad_images_are_refused(bad):
    with pytest.raises(PtmError, match=r"uint8 \[batch, S, S, 3\]"):
        to_pixels(bad)
