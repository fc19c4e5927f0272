"""From uint8 images to an image encoder's pixels, with random augmentation in training.

:func:`to_pixels` maps images ``uint8 [B, S, S, 3]`` (RGB, as :mod:`ptmkit.vision.images` reads
them) to ``float32 [B, 3, S, S]``: scaled to ``[0, 1]``, then normalised per channel with mean
0.5 and standard deviation 0.5 (:data:`MEAN`, :data:`STD`), so the pixels lie in ``[-1, 1]``.

Given a ``numpy.random.Generator`` (training) it first applies, in this order:

* ``crop > 0``: a padded random crop, the translation part of a random-resized crop (no
  rescaling): the image is padded on every side by ``round(crop * S)`` white (255) pixels and a
  random ``S x S`` window of the padded image is taken, one offset per image;
* ``jitter > 0``: colour jitter: per image a brightness, a contrast and a saturation factor, each
  uniform in ``[1 - jitter, 1 + jitter]``, applied in that order on ``[0, 1]`` values (brightness
  scales the values; contrast moves them towards or away from the image's mean grey level;
  saturation towards or away from each pixel's grey level, ITU-R 601 luma), clipped to ``[0, 1]``;
* ``flip``: a horizontal flip with probability 0.5 per image; off by default, since an emoji and
  its mirror image need not mean the same thing.

Without a generator (evaluation) nothing random happens.  The draws come only from the generator
given, in a fixed order, so the same generator state gives the same pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ptmkit.errors import PtmError

MEAN = 0.5  # every channel
STD = 0.5
LUMA = (0.299, 0.587, 0.114)  # ITU-R 601 weights of R, G, B


@dataclass(frozen=True)
class AugmentConfig:
    crop: float = 0.0  # padding of the random crop, a fraction of the image side (0 = off)
    jitter: float = 0.0  # colour jitter strength: factors in [1 - jitter, 1 + jitter] (0 = off)
    flip: bool = False  # horizontal flip with probability 0.5

    def __post_init__(self) -> None:
        for name in ("crop", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise PtmError(f"augment.{name} must be a number in [0, 1), got {value!r}")
            try:
                value = float(value)
            except ValueError:
                raise PtmError(f"augment.{name} must be a number in [0, 1), got {value!r}") from None
            if not 0.0 <= value < 1.0:
                raise PtmError(f"augment.{name} must be in [0, 1) (0 = off), got {value!r}")
            object.__setattr__(self, name, value)
        if not isinstance(self.flip, bool):
            raise PtmError(f"augment.flip must be true or false, got {self.flip!r}")


def check_images(images: np.ndarray) -> None:
    """A :class:`PtmError` unless ``images`` is a uint8 array ``[B, S, S, 3]``."""
    if (not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4
            or images.shape[3] != 3 or images.shape[1] != images.shape[2]):
        shape = getattr(images, "shape", None)
        dtype = getattr(images, "dtype", type(images).__name__)
        raise PtmError(f"images must be uint8 [batch, S, S, 3] (square RGB), got {dtype} {shape}")


def random_crop(images: np.ndarray, pad: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 ``[B, S, S, 3]`` -> ``[B, S, S, 3]``: each image padded by ``pad`` white pixels per side,
    then an ``S x S`` window at a random offset in ``[0, 2 pad]`` per axis (drawn rows first)."""
    B, S = images.shape[0], images.shape[1]
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=255)
    top, left = rng.integers(0, 2 * pad + 1, size=(2, B))
    rows = top[:, None] + np.arange(S)  # [B, S]
    cols = left[:, None] + np.arange(S)  # [B, S]
    return padded[np.arange(B)[:, None, None], rows[:, :, None], cols[:, None, :]]  # [B, S, S, 3]


def colour_jitter(x: torch.Tensor, jitter: float, rng: np.random.Generator) -> torch.Tensor:
    """x ``[B, 3, S, S]`` in ``[0, 1]`` -> the same shape: per image brightness, contrast and
    saturation factors uniform in ``[1 - jitter, 1 + jitter]`` (drawn as one ``[3, B]`` array)."""
    B = x.shape[0]
    factors = torch.from_numpy(rng.uniform(1.0 - jitter, 1.0 + jitter, size=(3, B)).astype(np.float32))
    brightness, contrast, saturation = (f.view(B, 1, 1, 1) for f in factors)
    luma = torch.tensor(LUMA, dtype=x.dtype).view(1, 3, 1, 1)
    x = (x * brightness).clamp(0.0, 1.0)
    grey = (x * luma).sum(dim=1, keepdim=True)  # [B, 1, S, S]
    mean = grey.mean(dim=(2, 3), keepdim=True)  # [B, 1, 1, 1]
    x = ((x - mean) * contrast + mean).clamp(0.0, 1.0)
    grey = (x * luma).sum(dim=1, keepdim=True)
    return ((x - grey) * saturation + grey).clamp(0.0, 1.0)


def to_pixels(images: np.ndarray, cfg: AugmentConfig | None = None,
              rng: np.random.Generator | None = None) -> torch.Tensor:
    """images uint8 ``[B, S, S, 3]`` -> pixels float32 ``[B, 3, S, S]``, ``(x / 255 - 0.5) / 0.5``
    after the augmentations ``cfg`` asks for when ``rng`` is given (see the module docstring);
    ``rng=None``: deterministic, no augmentation."""
    check_images(images)
    cfg = cfg or AugmentConfig()
    S = images.shape[1]
    pad = int(round(cfg.crop * S))
    if rng is not None and pad > 0:
        images = random_crop(images, pad, rng)
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).to(torch.float32) / 255.0  # [B, 3, S, S]
    if rng is not None and cfg.jitter > 0:
        x = colour_jitter(x, cfg.jitter, rng)
    if rng is not None and cfg.flip:
        flip = torch.from_numpy(rng.random(x.shape[0]) < 0.5)
        x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
    return ((x - MEAN) / STD).contiguous()


__all__ = ["LUMA", "MEAN", "STD", "AugmentConfig", "check_images", "colour_jitter", "random_crop", "to_pixels"]
