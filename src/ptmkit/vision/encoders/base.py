"""The image encoder contract.

An image encoder is registered by name (``@register("image_encoder", "vit")``) with a frozen
config class of its own (fields with defaults; ``image_size`` the side of the square input);
presets name it (``vision: {encoder: vit, ...}``) and :func:`build_image_encoder` constructs it.

* ``forward(pixels [B, 3, S, S] float, normalised) -> ImageOutput``: ``tokens [B, N, D]`` are the
  image's regions as a sequence (a ViT's patch states, a CNN's last feature map cell by cell) for
  the objectives that let text attend to image regions (VisualBERT, ViLBERT, a captioning LM);
  ``pooled [B, D]`` is one vector per image (a ViT's ``[CLS]`` state or mean, a CNN's global
  average) for the dual encoders (CLIP, bag-of-words prediction).
* ``output_size``: ``D``; ``num_tokens``: ``N`` for the configured image size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ptmkit import registry
from ptmkit.config import from_dict
from ptmkit.errors import PtmError


@dataclass
class ImageOutput:
    """tokens ``[B, N, D]`` (regions in raster order); pooled ``[B, D]``."""

    tokens: torch.Tensor
    pooled: torch.Tensor


class ImageEncoder(nn.Module):
    """Base class of registered image encoders (see the module docstring)."""

    name: ClassVar[str]
    config_class: ClassVar[type]

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    @property
    def output_size(self) -> int:
        raise NotImplementedError

    @property
    def num_tokens(self) -> int:
        raise NotImplementedError

    @property
    def image_size(self) -> int:
        return int(self.config.image_size)

    def check_pixels(self, pixels: torch.Tensor) -> None:
        """A :class:`PtmError` unless ``pixels`` is ``[B, 3, S, S]`` with ``S`` the configured size."""
        s = self.image_size
        if pixels.dim() != 4 or tuple(pixels.shape[1:]) != (3, s, s):
            raise PtmError(f"the {self.name} image encoder takes pixels [batch, 3, {s}, {s}], "
                           f"got {tuple(pixels.shape)}; resize the images to {s} x {s} or set vision.image_size")

    def forward(self, pixels: torch.Tensor) -> ImageOutput:
        raise NotImplementedError


def build_image_encoder(section: dict[str, Any]) -> ImageEncoder:
    """``{"encoder": NAME, **config}`` (a preset's ``vision`` section without the data keys) ->
    the encoder; an unknown name or key is a :class:`PtmError` naming the nearest."""
    section = dict(section)
    name = section.pop("encoder", None)
    if name is None:
        raise PtmError("the vision section names no image encoder: set vision.encoder (cnn or vit)")
    cls = registry.get("image_encoder", str(name))
    return cls(from_dict(cls.config_class, section, "vision"))
