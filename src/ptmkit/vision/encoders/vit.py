"""The Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

The image is cut into ``N = (S / P)^2`` non-overlapping ``P x P`` patches in raster order (row by
row, left to right); each is projected linearly to ``H`` (a ``Conv2d(3, H, kernel=stride=P)``), a
learned ``[CLS]`` vector is put in front, learned position embeddings ``[N + 1, H]`` are added,
and the sequence runs through the text Transformer's own layers
(:func:`~ptmkit.encoders.transformer.build_layers`: pre-LN, GELU, no mask: every patch sees
every other) and a final LayerNorm.

* ``tokens [B, N, H]``: the patch states (the ``[CLS]`` state left out), for the objectives that
  let text attend to image regions.
* ``pooled [B, H]``: the ``[CLS]`` state (``pool: cls``, the paper's) or the mean of the patch
  states (``pool: mean``, as in later ViT variants).

Parameter names: ``patch_embed.{weight [H, 3, P, P], bias}``, ``cls_token [1, 1, H]``,
``position_embeddings [N + 1, H]``, ``layers.{i}.*`` (those of
:class:`~ptmkit.encoders.transformer.TransformerLayer`), ``final_norm.*``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ptmkit.encoders.transformer import build_layers
from ptmkit.encoders.transformer_config import NORMS, TransformerConfig
from ptmkit.errors import PtmError, suggest
from ptmkit.nn.dropout import Dropout
from ptmkit.registry import register
from ptmkit.vision.encoders.base import ImageEncoder, ImageOutput

POOLS = ("cls", "mean")


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 64  # S: the side of the square input
    patch_size: int = 8  # P: S must be a multiple; N = (S / P)^2 patches
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512
    dropout: float = 0.0
    attention_dropout: float = 0.0
    norm: str = "pre"  # "pre" (the paper's, with a final LayerNorm) | "post"
    pool: str = "cls"  # pooled = the [CLS] state ("cls") or the mean of the patch states ("mean")
    init_std: float = 0.02
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("dropout", "attention_dropout", "init_std", "layer_norm_eps"):  # YAML reads "1e-6" as a string
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"vision.{name} must be a number, got {value!r}") from None
        for name in ("image_size", "patch_size", "hidden_size", "num_layers", "num_heads", "intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"vision.{name} must be a positive integer, got {value!r}")
        if self.image_size % self.patch_size:
            raise PtmError(f"vision.image_size={self.image_size} is not divisible by vision.patch_size="
                           f"{self.patch_size}: the ViT cuts the image into whole patches; pick a patch size that "
                           f"divides the image size")
        if self.hidden_size % self.num_heads:
            raise PtmError(f"vision.hidden_size={self.hidden_size} is not divisible by vision.num_heads="
                           f"{self.num_heads}; pick a number of heads that divides the hidden size")
        for name, allowed in (("norm", NORMS), ("pool", POOLS)):
            value = getattr(self, name)
            if value not in allowed:
                raise PtmError(f"vision.{name}={value!r} is not one of {allowed}{suggest(str(value), allowed)}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise PtmError(f"vision.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.init_std <= 0 or self.layer_norm_eps <= 0:
            raise PtmError("vision.init_std and vision.layer_norm_eps must be positive")

    @property
    def num_patches(self) -> int:
        """N = (S / P)^2."""
        return (self.image_size // self.patch_size) ** 2

    def transformer_config(self) -> TransformerConfig:
        """The settings of the Transformer layers (the text-only fields left at their defaults)."""
        return TransformerConfig(
            hidden_size=self.hidden_size, num_layers=self.num_layers, num_heads=self.num_heads,
            intermediate_size=self.intermediate_size, max_position=self.num_patches + 1, type_vocab_size=0,
            norm=self.norm, activation="gelu", layer_norm_eps=self.layer_norm_eps, dropout=self.dropout,
            attention_dropout=self.attention_dropout, embedding_norm=False, pooler=False, init_std=self.init_std,
        )


@register("image_encoder", "vit")
class ViTEncoder(ImageEncoder):
    """Patch embedding, ``[CLS]`` and positions, Transformer layers (see the module docstring)."""

    name = "vit"
    config_class = ViTConfig

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        H, P = config.hidden_size, config.patch_size
        self.patch_embed = nn.Conv2d(3, H, kernel_size=P, stride=P)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, H))
        self.position_embeddings = nn.Parameter(torch.zeros(config.num_patches + 1, H))
        self.dropout = Dropout(config.dropout)
        self.layers = build_layers(config.transformer_config())
        self.final_norm = nn.LayerNorm(H, eps=config.layer_norm_eps) if config.norm == "pre" else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The layers as the text Transformer's (weights ~ N(0, init_std), biases 0, LayerNorm gain 1);
        ``[CLS]`` and positions ~ N(0, init_std); the patch projection ~ N(0, 1 / fan_in) (LeCun
        normal, as the paper's linear patch embedding), bias 0."""
        std = self.config.init_std
        for module in self.layers.modules():
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, std)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        if self.final_norm is not None:
            self.final_norm.weight.fill_(1.0)
            self.final_norm.bias.zero_()
        fan_in = 3 * self.config.patch_size ** 2
        self.patch_embed.weight.normal_(0.0, 1.0 / math.sqrt(fan_in))
        self.patch_embed.bias.zero_()
        self.cls_token.normal_(0.0, std)
        self.position_embeddings.normal_(0.0, std)

    @property
    def output_size(self) -> int:
        return self.config.hidden_size

    @property
    def num_tokens(self) -> int:
        return self.config.num_patches

    def embed(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels ``[B, 3, S, S]`` -> the layers' input ``[B, N + 1, H]``: ``[CLS]`` then the patches
        in raster order, with their position embeddings added."""
        patches = self.patch_embed(pixels)  # [B, H, S/P, S/P]
        patches = patches.flatten(2).transpose(1, 2)  # [B, N, H], row by row
        cls = self.cls_token.expand(patches.shape[0], -1, -1)  # [B, 1, H]
        x = torch.cat([cls, patches], dim=1) + self.position_embeddings  # [B, N + 1, H]
        return self.dropout(x)

    def forward(self, pixels: torch.Tensor) -> ImageOutput:
        """pixels ``[B, 3, S, S]`` (normalised) -> tokens ``[B, N, H]`` (the patch states),
        pooled ``[B, H]`` (the ``[CLS]`` state, or the mean of the patch states with ``pool: mean``)."""
        self.check_pixels(pixels)
        x = self.embed(pixels)
        for layer in self.layers:
            x = layer(x, None, False)  # no mask: every position attends to every other
        if self.final_norm is not None:
            x = self.final_norm(x)
        tokens = x[:, 1:]  # [B, N, H]
        pooled = x[:, 0] if self.config.pool == "cls" else tokens.mean(dim=1)
        return ImageOutput(tokens=tokens, pooled=pooled)


__all__ = ["POOLS", "ViTConfig", "ViTEncoder"]
