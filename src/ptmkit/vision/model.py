"""The model a vision–language run trains: an image encoder, a text encoder (or none) and the
objective that joins them.  State-dict keys start with ``image.``, ``text.`` and ``objective.``."""

from __future__ import annotations

import torch
from torch import nn

from ptmkit.train.step import StepOutput


class VisionLanguageModel(nn.Module):
    """``forward(batch) -> StepOutput`` for the Trainer; ``score(pixels, ids, mask) -> [N, M]`` for
    retrieval.  ``frozen_text``: the text tower is locked (LiT, Zhai et al. 2022): no gradients, and
    kept in eval mode (no dropout) while the rest trains."""

    def __init__(self, image: nn.Module, text: nn.Module | None, objective: nn.Module, frozen_text: bool = False) -> None:
        super().__init__()
        self.image, self.text, self.objective = image, text, objective
        self.frozen_text = frozen_text and text is not None
        if self.frozen_text:
            self.text.requires_grad_(False)

    def train(self, mode: bool = True) -> "VisionLanguageModel":
        super().train(mode)
        if self.frozen_text:
            self.text.eval()
        return self

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        return self.objective(self.image, self.text, batch)

    @torch.no_grad()
    def score(self, pixels: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[N, M]``: image ``i`` against text ``j``, higher = a better match."""
        return self.objective.score(self.image, self.text, pixels, input_ids, attention_mask)
