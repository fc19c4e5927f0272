"""The encoder contract: what every architecture (Transformer, LSTM, encoder–decoder, ...) offers.

An encoder is registered by name (``@register("encoder", "transformer")``) with a frozen config
class of its own; presets name it (``model: {encoder: transformer, ...}``) and
:mod:`ptmkit.build` constructs it.  Objectives and task heads see only this interface:

* ``forward(input_ids, attention_mask=None, ..., causal=False, output_hidden_states=False,
  output_attentions=False, head_mask=None, **extras) -> EncoderOutput``.  The attention pattern is
  data given by the caller (``causal=True``, or an explicit ``attn_mask``), never a model-type switch.
* ``max_positions()``: the longest sequence ``forward`` accepts (``max_position`` for learned
  absolute positions), or ``None`` when the encoder sets no limit (relative or no positions, LSTMs).
* Looking into and cutting attention (:mod:`ptmkit.nn.heads`), for the encoders with heads
  (``transformer``, ``encoder_decoder``, ``xlnet``); the others raise :class:`PtmError`:

  - ``output_attentions=True``: ``EncoderOutput.attentions``, one ``[B, heads, T, S]`` tensor per
    layer: the attention probabilities after softmax, masking and the head mask, before dropout
    (HF's ``output_attentions`` in eval mode).  Computing them writes the product out; without the
    flag attention runs on the fused path as before.
  - ``head_mask [num_layers, num_heads]`` (or ``[num_heads]`` for every layer): multiplies each
    head's probabilities (HF semantics; 0 = the head is off).  A float mask of ones with
    ``requires_grad`` gives Michel et al.'s (2019) head importance ``|dL/d mask|``.  Another shape
    is a :class:`PtmError` naming the expected one.
  - ``prune_heads({layer: [head, ...]})``: removes those heads' rows of the q/k/v projections and
    columns of the output projection (smaller matrices: a real speed-up); layers may then differ
    in head count.  The encoder's config records the union in ``pruned_heads``, so a saved pruned
    model is rebuilt at its pruned size.  Heads are always named by their index in the unpruned
    layer: a head mask stays ``[num_layers, num_heads]`` after pruning (pruned heads' entries are
    ignored), a pruned layer's attentions hold its remaining heads in their original order.
* ``input_embeddings()`` / ``output_embeddings()`` for weight tying: an output projection onto
  the vocabulary uses ``output_embeddings()`` (``[V, E]``), never an attribute path.
* ``output_size``: the width of ``last_hidden_state``; ``num_layers`` and ``layer_index(name)``
  declare depth for layer-wise LR decay and gradual unfreezing (0 = embeddings, ``1..L`` = the
  layers, ``L + 1`` = anything on top, such as a pooler).
* ``bind_tokenizer(tokenizer)``: encoders that derive buffers from the vocabulary (a char-CNN's
  spelling table) fill them here; the builder calls it for every encoder.
* ``projections()``: the linear projections by name (``layers.3.attn.q``), each the block of
  output rows of the ``nn.Linear`` that computes it (:mod:`ptmkit.nn.projections`; fused q/k/v
  modules hold several), for methods that adapt chosen projections (LoRA).  Encoders without
  attention layers declare none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.heads import no_heads_error
from ptmkit.nn.host import host_reads_cheap
from ptmkit.nn.projections import Projection


@dataclass
class EncoderOutput:
    """last_hidden_state ``[B, T, H]``; hidden_states: the embedding output then every layer's
    ``[B, T, H]`` (``None`` unless asked for); pooled ``[B, H]`` or ``None``; extras: encoder
    specific tensors (e.g. an encoder–decoder's ``encoder_last_hidden_state``); attentions: per
    layer the attention probabilities ``[B, heads, T, S]`` (``output_attentions=True``, else ``None``).
    The states at padding positions (``attention_mask`` 0) are not defined: an encoder may compute
    them, or skip the padding and leave zeros there (:mod:`ptmkit.nn.packing`); readers mask them."""

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    pooled: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    attentions: tuple[torch.Tensor, ...] | None = None


class Encoder(nn.Module):
    """Base class of registered encoders (see the module docstring for the contract)."""

    name: ClassVar[str]
    config_class: ClassVar[type]

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    # -- weight tying -----------------------------------------------------------------------
    def input_embeddings(self) -> nn.Embedding | None:
        """The token embedding table ``[V, E]``, or ``None`` when tokens are not embedded by id."""
        return None

    def output_embeddings(self) -> torch.Tensor | None:
        """The matrix ``[V, output_size]`` an output softmax ties to, or ``None`` (untied)."""
        emb = self.input_embeddings()
        return emb.weight if emb is not None else None

    # -- shape and depth --------------------------------------------------------------------
    @property
    def output_size(self) -> int:
        raise NotImplementedError

    @property
    def num_layers(self) -> int:
        raise NotImplementedError

    def layer_index(self, name: str) -> int:
        """Depth of the parameter ``name`` (relative to this module): 0 embeddings, ``i + 1``
        for layer ``i``, ``num_layers + 1`` for what sits on top."""
        return self.num_layers + 1

    def max_positions(self) -> int | None:
        """The longest sequence ``forward`` accepts, or ``None`` for no limit (override when
        positions are bounded)."""
        return None

    # -- attention heads --------------------------------------------------------------------
    def prune_heads(self, heads: Mapping[Any, Iterable[int]]) -> None:
        """Remove attention heads ``{layer: [head, ...]}`` (see the module docstring); encoders
        without heads refuse."""
        raise no_heads_error(self.name)

    def check_no_heads(self, output_attentions: bool = False, head_mask: torch.Tensor | None = None) -> None:
        """For encoders without attention: refuse ``output_attentions`` and ``head_mask``."""
        if output_attentions or head_mask is not None:
            raise no_heads_error(self.name)

    def visible_matrix_refusal(self) -> str | None:
        """``None`` when ``forward`` honours per-example ``position_ids [B, T]`` and an explicit
        ``attn_mask [B, 1, T, T]`` (what K-BERT's soft positions and visible matrix are made of),
        else why it cannot (said to the user before anything is trained)."""
        return f"the {self.name} encoder cannot take soft positions and a visible matrix"

    def bind_tokenizer(self, tokenizer: Any) -> None:
        """Derive vocabulary-dependent buffers from ``tokenizer`` (default: nothing to do)."""

    def adapter_sites(self) -> list[nn.Module]:
        """The sub-layers whose outputs ``[..., output_size]`` an adapter may follow (Houlsby et
        al. 2019: each attention and feed-forward sub-layer, before its residual connection).
        Encoders without such sites cannot take adapters."""
        raise PtmError(f"the {type(self).__name__} encoder declares no adapter sites; adapters need a Transformer encoder")

    def projections(self) -> dict[str, Projection]:
        """The encoder's linear projections by name (see the module docstring), each once (a
        shared module under its first layer's name).  Encoders without such projections refuse."""
        raise PtmError(f"the {self.name} encoder declares no named projections for LoRA to adapt; the transformer and "
                       f"encoder_decoder encoders do (or fine-tune this one with bitfit=true or in full)")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> EncoderOutput:
        raise NotImplementedError


def check_token_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """Raise :class:`PtmError` for a non-2-D input or an id outside ``[0, vocab_size)``."""
    if input_ids.dim() != 2:
        raise PtmError(f"input_ids must be [batch, length], got shape {tuple(input_ids.shape)}")
    if not input_ids.numel():
        return
    if not host_reads_cheap(input_ids):
        # reading the range back would stall a GPU's queue every step and break a compiled graph:
        # the check runs on the device instead, asynchronously (a device-side assert names the cause)
        torch._assert_async(((input_ids >= 0) & (input_ids < vocab_size)).all(),
                            f"a token id is outside the model's vocabulary of size {vocab_size} (vocab mismatch)")
        return
    lo, hi = (int(v) for v in torch.aminmax(input_ids))  # one pass over the batch
    if hi >= vocab_size or lo < 0:
        bad = hi if hi >= vocab_size else lo
        raise PtmError(
            f"token id {bad} is outside the model's vocabulary of size {vocab_size}: "
            f"the tokenizer does not match the model (vocab mismatch)"
        )
