"""A small residual CNN (a ResNet in miniature: He et al. 2016, "Deep Residual Learning for Image
Recognition"), the convolutional image tower of CLIP's comparisons (Radford et al. 2021).

* stem: ``conv3x3(3 -> C_0, stride stem_stride)``-norm-ReLU;
* stage ``i`` (one per entry of ``channels``): ``blocks`` basic residual blocks
  ``y = ReLU(x' + norm(conv3x3(ReLU(norm(conv3x3(x))))))``; the first block of every stage but
  the first halves the resolution (its first convolution has stride 2) and widens ``C_{i-1} ->
  C_i``, its shortcut ``x'`` then a ``conv1x1(stride 2)``-norm; otherwise ``x' = x``;
* the last feature map ``[B, D, h, w]`` (``D = channels[-1]``) read cell by cell in raster order
  is ``tokens [B, h * w, D]``, projected by a linear layer to ``hidden_size`` when that is set;
  ``pooled [B, D]`` is their mean (global average pooling).

Each 3x3 convolution with stride 2 and padding 1 maps a side ``s`` to ``ceil(s / 2)``, so any image
size works: 64 pixels with the defaults (stem stride 2, four stages) give a 4 x 4 map, 16 tokens.

``norm``: ``"group"`` (GroupNorm, Wu & He 2018; up to 8 groups) by default: it computes the same
in training and evaluation and does not mix the images of a batch, which a contrastive objective
would otherwise exploit through batch statistics; ``"batch"`` is the original BatchNorm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.errors import PtmError, suggest
from ptmkit.registry import register
from ptmkit.vision.encoders.base import ImageEncoder, ImageOutput

NORMS = ("group", "batch")


@dataclass(frozen=True)
class CNNConfig:
    image_size: int = 64  # S: the side of the square input
    channels: tuple[int, ...] = (32, 64, 128, 256)  # the width of each stage; the resolution halves between stages
    blocks: int = 1  # residual blocks per stage
    stem_stride: int = 2  # 1 or 2: the stem's downsampling
    hidden_size: int | None = None  # D: None = channels[-1]; else the tokens are projected to it
    norm: str = "group"  # "group" (GroupNorm) | "batch" (BatchNorm)

    def __post_init__(self) -> None:
        if isinstance(self.channels, list):
            object.__setattr__(self, "channels", tuple(self.channels))
        for name in ("image_size", "blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"vision.{name} must be a positive integer, got {value!r}")
        if (not isinstance(self.channels, tuple) or not self.channels
                or any(not isinstance(c, int) or isinstance(c, bool) or c <= 0 for c in self.channels)):
            raise PtmError(f"vision.channels must be a non-empty list of positive integers (one per stage), "
                           f"got {self.channels!r}")
        if self.stem_stride not in (1, 2) or isinstance(self.stem_stride, bool):
            raise PtmError(f"vision.stem_stride must be 1 or 2, got {self.stem_stride!r}")
        if self.hidden_size is not None and (not isinstance(self.hidden_size, int) or isinstance(self.hidden_size, bool)
                                             or self.hidden_size <= 0):
            raise PtmError(f"vision.hidden_size must be a positive integer or null, got {self.hidden_size!r}")
        if self.norm not in NORMS:
            raise PtmError(f"vision.norm={self.norm!r} is not one of {NORMS}{suggest(str(self.norm), NORMS)}")

    @property
    def feature_side(self) -> int:
        """The side of the last feature map: ``ceil(s / 2)`` at each stride-2 step."""
        side = self.image_size
        for _ in range(int(self.stem_stride == 2) + len(self.channels) - 1):
            side = (side + 1) // 2
        return side


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    return nn.GroupNorm(math.gcd(8, channels), channels)


class ResidualBlock(nn.Module):
    """``[B, C_in, s, s] -> [B, C_out, s', s']`` (``s' = ceil(s / stride)``): two conv3x3-norm, ReLU
    between and after, and a shortcut (identity, or conv1x1-norm when the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = _norm(norm, c_out)
        self.shortcut = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), _norm(norm, c_out))
                         if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        return torch.relu(h + self.shortcut(x))


@register("image_encoder", "cnn")
class CNNEncoder(ImageEncoder):
    """Stem, residual stages, tokens = the last feature map's cells (see the module docstring)."""

    name = "cnn"
    config_class = CNNConfig

    def __init__(self, config: CNNConfig) -> None:
        super().__init__(config)
        ch = config.channels
        self.stem = nn.Sequential(nn.Conv2d(3, ch[0], 3, stride=config.stem_stride, padding=1, bias=False),
                                  _norm(config.norm, ch[0]), nn.ReLU())
        blocks: list[nn.Module] = []
        c_in = ch[0]
        for i, c in enumerate(ch):
            for j in range(config.blocks):
                blocks.append(ResidualBlock(c_in, c, 2 if i > 0 and j == 0 else 1, config.norm))
                c_in = c
        self.stages = nn.Sequential(*blocks)
        self.project = (nn.Linear(ch[-1], config.hidden_size)
                        if config.hidden_size is not None and config.hidden_size != ch[-1] else None)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Convolutions: He normal (fan out, for ReLU); norms: gain 1, bias 0; the projection:
        PyTorch's default."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, (nn.BatchNorm2d, nn.GroupNorm)):
                module.weight.fill_(1.0)
                module.bias.zero_()

    @property
    def output_size(self) -> int:
        return self.config.hidden_size or self.config.channels[-1]

    @property
    def num_tokens(self) -> int:
        return self.config.feature_side ** 2

    def forward(self, pixels: torch.Tensor) -> ImageOutput:
        """pixels ``[B, 3, S, S]`` (normalised) -> tokens ``[B, h * w, D]`` (the last feature map's
        cells in raster order), pooled ``[B, D]`` (their mean: global average pooling)."""
        self.check_pixels(pixels)
        features = self.stages(self.stem(pixels))  # [B, C, h, w]
        tokens = features.flatten(2).transpose(1, 2)  # [B, h * w, C], row by row
        if self.project is not None:
            tokens = self.project(tokens)  # [B, h * w, D]
        return ImageOutput(tokens=tokens, pooled=tokens.mean(dim=1))


__all__ = ["CNNConfig", "CNNEncoder", "ResidualBlock"]
