"""Small stand-ins the vision–language objective tests share: an image encoder of flattened 4 x 4
patches, a caption tokenizer and a tiny text Transformer (importable: ``tests/`` is on ``sys.path``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.tokenization import Tokenizer
from ptmkit.vision.encoders.base import ImageEncoder, ImageOutput


@dataclass(frozen=True)
class PatchConfig:
    image_size: int = 16
    width: int = 24


class PatchEncoder(ImageEncoder):
    """4 x 4 patches flattened and projected: tokens ``[B, (S/4)^2, width]``, pooled = their mean;
    ``seen`` counts the images encoded."""

    name = "fake"
    config_class = PatchConfig

    def __init__(self, config: PatchConfig = PatchConfig()) -> None:
        super().__init__(config)
        self.proj = nn.Linear(3 * 16, config.width)
        self.seen = 0

    @property
    def output_size(self) -> int:
        return self.config.width

    @property
    def num_tokens(self) -> int:
        return (self.config.image_size // 4) ** 2

    def forward(self, pixels: torch.Tensor) -> ImageOutput:
        self.check_pixels(pixels)
        self.seen += pixels.shape[0]
        B, g = pixels.shape[0], self.config.image_size // 4
        patches = pixels.unfold(2, 4, 4).unfold(3, 4, 4)  # [B, 3, g, g, 4, 4]
        tokens = self.proj(patches.permute(0, 2, 3, 1, 4, 5).reshape(B, g * g, 3 * 16))
        return ImageOutput(tokens, tokens.mean(dim=1))


def caption_tokenizer(directory: Path, captions: Sequence[str], vocab_size: int = 100) -> Tokenizer:
    """A WordPiece tokenizer learnt from ``captions``."""
    path = Path(directory) / "captions.txt"
    path.write_text("\n".join(captions) + "\n")
    return Tokenizer.train([path], "wordpiece", vocab_size, min_frequency=1)


def tiny_text(vocab_size: int, **changes) -> TransformerEncoder:
    """A 2-layer, 32-wide text Transformer without dropout."""
    keys = dict(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                max_position=32, dropout=0.0, attention_dropout=0.0)
    return TransformerEncoder(TransformerConfig(**{**keys, **changes}))
