"""Static word vectors (word2vec, GloVe, fastText files) as an encoder, so that first-generation
embeddings go through the same task heads and fine-tuning path as contextual encoders.

The encoder is a single embedding table ``[V, d]`` over a ``word`` tokenizer built from the
vectors' vocabulary (:meth:`ptmkit.tokenization.Tokenizer.from_words`): ``forward`` returns the
vectors of the input words (``last_hidden_state [B, T, d]``, ``hidden_states`` = that one layer),
nothing contextual.  In ``mode=features`` the table stays fixed and the task network (``bilstm``:
the classic BiLSTM over pre-trained embeddings) does the work; ``mode=finetune`` trains the
vectors too.  Special tokens and words outside the file are zero vectors.

Parameter: ``embeddings.weight [V, d]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder, EncoderOutput
from ptmkit.errors import PtmError
from ptmkit.interop.word2vec_format import read_vectors
from ptmkit.pretrained import Pretrained
from ptmkit.registry import register
from ptmkit.tokenization import Tokenizer


@dataclass(frozen=True)
class StaticVectorsConfig:
    vocab_size: int = 5
    dim: int = 100
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")


@register("encoder", "static_vectors")
class StaticVectors(Encoder):
    name = "static_vectors"
    config_class = StaticVectorsConfig

    def __init__(self, config: StaticVectorsConfig) -> None:
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_token_id)
        nn.init.normal_(self.embeddings.weight, std=0.1)  # a random baseline; files overwrite it
        with torch.no_grad():
            self.embeddings.weight[config.pad_token_id].zero_()

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings

    @property
    def output_size(self) -> int:
        return self.config.dim

    @property
    def num_layers(self) -> int:
        return 0

    def layer_index(self, name: str) -> int:
        return 0

    def max_positions(self) -> None:
        """Tokens are looked up one by one: any length."""
        return None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                head_mask: torch.Tensor | None = None, **_: Any) -> EncoderOutput:
        self.check_no_heads(output_attentions, head_mask)  # no attention: nothing to return or gate
        h = self.embeddings(input_ids)  # [B, T, d]
        return EncoderOutput(h, (h,) if output_hidden_states else None, None, {})


def load_vectors(path: str | Path, lowercase: bool | None = None):
    """A ``Pretrained`` (config, word tokenizer, ``StaticVectors`` encoder) from a word2vec / GloVe
    / fastText text or binary file.  ``lowercase=None``: lowercase the input when the file has no
    capitalised word (vectors trained on lowercased text)."""
    words, vectors = read_vectors(path)
    if lowercase is None:
        lowercase = not any(w != w.lower() for w in words)
    keep = [i for i, w in enumerate(words) if not (lowercase and w != w.lower())]  # a cased word is unreachable
    words = [words[i] for i in keep]
    tokenizer = Tokenizer.from_words(words, lowercase=lowercase)
    config = {"model": {"encoder": "static_vectors", "vocab_size": tokenizer.vocab_size, "dim": int(vectors.shape[1]),
                        "pad_token_id": tokenizer.pad_id},
              "vectors": {"file": str(path), "words": len(words), "lowercase": lowercase}}
    encoder = StaticVectors(StaticVectorsConfig(tokenizer.vocab_size, int(vectors.shape[1]), tokenizer.pad_id))
    table = np.zeros((tokenizer.vocab_size, vectors.shape[1]), dtype=np.float32)
    table[tokenizer.vocab_size - len(words) :] = vectors[keep]
    with torch.no_grad():
        encoder.embeddings.weight.copy_(torch.from_numpy(table))
    return Pretrained(config, tokenizer, encoder.eval(), None, Path(path))
