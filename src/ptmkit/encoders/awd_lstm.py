"""The AWD-LSTM (Merity, Keskar & Socher 2018), the encoder of ULMFiT (Howard & Ruder 2018).

A word embedding table ``[V, E]`` and ``L`` stacked unidirectional LSTM layers (``H`` cells
each; the last layer has ``E`` cells when ``tie_weights``, so that the LM's softmax can reuse
the embedding table), regularised in four ways (paper section 4; default rates are those of
the authors' code, the PTB preset sets the PTB rates):

* **weight drop** (DropConnect, Wan et al. 2013) on every layer's hidden-to-hidden matrix
  ``W_hh [4H, H]``: one Bernoulli mask of rate ``wdrop`` per forward pass, the same for every
  time step and every sequence of the batch, scaled by ``1 / (1 - wdrop)``.  The masked matrix is
  handed to torch's fused LSTM (:func:`torch.func.functional_call`), so the recurrence runs in
  torch's kernel (cuDNN on a GPU), not in a Python loop over time steps;
* **embedding dropout** (Gal & Ghahramani 2016) of rate ``dropoute``: whole rows of the
  embedding table (word types) are dropped for the forward pass, the kept rows scaled by
  ``1 / (1 - dropoute)``, so every occurrence of a dropped word in the batch is zero;
* **locked (variational) dropout**: one mask per sequence ``[B, 1, D]``, shared by all time
  steps, scaled by ``1 / (1 - p)``: rate ``dropouti`` on the embedded input, ``dropouth``
  between LSTM layers, ``dropout`` on the last layer's output;
* (activation and temporal activation regularisation belong to the LM objective,
  :mod:`ptmkit.objectives.awd_lm`, which reads the outputs below.)

Each sequence starts from zero states unless ``initial_states`` are given (the LM objective
carries them from one block of a stream to the next, as the authors' code does across batches).

Outputs (``forward``):

* ``last_hidden_state`` ``[B, T, E']``: the last layer's output *before* the output dropout
  (``E' = E`` when tied, else ``H``);
* ``hidden_states`` (when asked): ``L + 1`` tensors: the embedded input (after embedding and
  input dropout), then every layer's output (before dropout);
* ``pooled`` ``None``;
* ``extras``: ``dropped_output`` ``[B, T, E']``: the last layer's output after the locked output
  dropout (what the LM's softmax reads and AR penalises); ``final_states``: per layer the
  ``(h, c)`` pair ``[B, H_j]`` after the last time step (of the padded length).

Padded positions (``attention_mask == 0``, right padding) are zero in every output; the
network reads left to right, so padding on the right changes no real position's state.

Parameter names: ``embedding.weight [V, E]``; ``layers.{j}.weight_ih_l0 [4H_j, I_j]``,
``layers.{j}.weight_hh_l0 [4H_j, H_j]``, ``layers.{j}.bias_ih_l0``, ``layers.{j}.bias_hh_l0``
``[4H_j]`` (torch's LSTM tensors; gates i, f, g, o).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ptmkit.encoders.base import Encoder, EncoderOutput, check_token_ids
from ptmkit.errors import PtmError
from ptmkit.registry import register

RATES = ("dropout", "dropouth", "dropouti", "dropoute", "wdrop")


@dataclass(frozen=True)
class AWDLSTMConfig:
    """The AWD-LSTM's sizes and dropout rates.

    vocab_size: V (set from the tokenizer); embedding_size: E; hidden_size: H, the cells of every
    layer but the last; num_layers: L; tie_weights: the last layer has E cells (the LM softmax
    ties to the embeddings), else H.
    Dropout rates (defaults: the authors' code, ``main.py``; the paper's PTB model uses
    dropouti 0.4 and dropouth 0.25, its WikiText-2 model dropouth 0.2, ULMFiT the same rates
    as PTB but dropoute 0.05): dropout on the last layer's output (0.4), dropouth between layers
    (0.3), dropouti on the embedded input (0.65), dropoute of embedding rows (0.1), wdrop on the
    hidden-to-hidden weights (0.5).
    init_range: embeddings ~ U(-init_range, init_range) (0.1, as the authors' code); the LSTM
    keeps torch's U(-1/sqrt(H), 1/sqrt(H)).
    """

    vocab_size: int = 10000
    embedding_size: int = 400
    hidden_size: int = 1150
    num_layers: int = 3
    tie_weights: bool = True
    dropout: float = 0.4
    dropouth: float = 0.3
    dropouti: float = 0.65
    dropoute: float = 0.1
    wdrop: float = 0.5
    init_range: float = 0.1

    def __post_init__(self) -> None:
        for name in (*RATES, "init_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise PtmError(f"model.{name} must be a number, got {value!r}")
            try:
                object.__setattr__(self, name, float(value))
            except ValueError:
                raise PtmError(f"model.{name} must be a number, got {value!r}") from None
        for name in RATES:
            if not 0.0 <= getattr(self, name) < 1.0:
                raise PtmError(f"model.{name} is a dropout rate in [0, 1), got {getattr(self, name)!r}")
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.tie_weights, bool):
            raise PtmError(f"model.tie_weights must be true or false, got {self.tie_weights!r}")
        if self.init_range <= 0:
            raise PtmError(f"model.init_range must be positive, got {self.init_range!r}")

    def layer_sizes(self) -> list[tuple[int, int]]:
        """``(input, cells)`` of every layer."""
        last = self.embedding_size if self.tie_weights else self.hidden_size
        sizes = []
        for j in range(self.num_layers):
            cells = last if j == self.num_layers - 1 else self.hidden_size
            sizes.append((self.embedding_size if j == 0 else self.hidden_size, cells))
        return sizes


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout of ``x [B, T, D]``: one mask ``[B, 1, D]`` per sequence, the same at
    every time step, kept units scaled by ``1 / (1 - p)``."""
    if not training or p == 0.0:
        return x
    mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1.0 - p) / (1.0 - p)
    return x * mask


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """The embedding table ``[V, E]`` with whole rows (word types) dropped at rate ``p`` and the
    kept rows scaled by ``1 / (1 - p)``."""
    if not training or p == 0.0:
        return weight
    mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1.0 - p) / (1.0 - p)
    return weight * mask


class WeightDropLSTM(nn.LSTM):
    """One LSTM layer (batch first) whose hidden-to-hidden matrix ``weight_hh_l0 [4H, H]`` is
    dropped with :meth:`recurrent_weight` (DropConnect) once per call of ``forward``."""

    def __init__(self, input_size: int, hidden_size: int, wdrop: float) -> None:
        super().__init__(input_size, hidden_size, num_layers=1, batch_first=True)
        self.wdrop = wdrop

    def recurrent_weight(self) -> torch.Tensor:
        """``W_hh`` for one forward pass: in training each entry is kept with probability
        ``1 - wdrop`` and scaled by ``1 / (1 - wdrop)``; in evaluation the matrix itself."""
        if not self.training or self.wdrop == 0.0:
            return self.weight_hh_l0
        return F.dropout(self.weight_hh_l0, self.wdrop, training=True)

    def forward(self, x: torch.Tensor, weight_hh: torch.Tensor | None = None,  # type: ignore[override]
                state: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x [B, T, I] -> (outputs [B, T, H], (h_T, c_T) [B, H] each)`` from ``state`` (``(h_0, c_0)``,
        ``[B, H]`` each; default zeros), with ``weight_hh`` (default: a fresh :meth:`recurrent_weight`)
        at every time step."""
        w = self.recurrent_weight() if weight_hh is None else weight_hh
        if w is self.weight_hh_l0:
            hx = None if state is None else (state[0][None].contiguous(), state[1][None].contiguous())
            out, (h, c) = super().forward(x, hx)
            return out, (h[0], c[0])
        # The fused kernel with the masked matrix swapped in for this call only; inside the call
        # ``self.weight_hh_l0`` is ``w``, so the branch above runs the plain LSTM.  (cuDNN notes
        # that the swapped-in weights are not one contiguous buffer: expected, once per call.)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
            return functional_call(self, {"weight_hh_l0": w}, (x, w, state), strict=False, tie_weights=False)


_LAYER_RE = re.compile(r"^layers\.(\d+)\.")


@register("encoder", "awd_lstm")
class AWDLSTMEncoder(Encoder):
    """Embedding -> L weight-dropped LSTM layers with locked dropout (see the module docstring)."""

    name = "awd_lstm"
    config_class = AWDLSTMConfig

    def __init__(self, config: AWDLSTMConfig) -> None:
        super().__init__(config)
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        with torch.no_grad():
            self.embedding.weight.uniform_(-config.init_range, config.init_range)
        self.layers = nn.ModuleList(WeightDropLSTM(i, h, config.wdrop) for i, h in config.layer_sizes())

    # -- the Encoder contract ---------------------------------------------------------------
    def input_embeddings(self) -> nn.Embedding:
        return self.embedding

    def output_embeddings(self) -> torch.Tensor | None:
        """The embedding table ``[V, E]`` when the last layer has ``E`` cells (tied), else ``None``."""
        return self.embedding.weight if self.output_size == self.config.embedding_size else None

    @property
    def output_size(self) -> int:
        return self.config.layer_sizes()[-1][1]

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    def max_positions(self) -> None:
        """A recurrent network reads any length."""
        return None

    def layer_index(self, name: str) -> int:
        if name.startswith("embedding."):
            return 0
        match = _LAYER_RE.match(name)
        if match:
            return int(match.group(1)) + 1
        return self.num_layers + 1

    # -- computation ------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        causal: bool = False,
        output_hidden_states: bool = False,
        initial_states: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
        **extras: Any,
    ) -> EncoderOutput:
        """input_ids ``[B, T]``; attention_mask ``[B, T]`` (right padding); initial_states: per layer
        ``(h_0, c_0)`` ``[B, H_j]`` each (default zeros).  The network reads left to right whatever
        ``causal`` says; ``token_type_ids`` / ``position_ids`` do not apply; an explicit
        ``attn_mask`` cannot be honoured by a recurrent network (error)."""
        self.check_no_heads(output_attentions, head_mask)  # no attention: nothing to return or gate
        if attn_mask is not None:
            raise PtmError("the awd_lstm encoder reads its inputs in order; it cannot take an explicit attn_mask")
        check_token_ids(input_ids, self.config.vocab_size)
        cfg = self.config
        keep = None
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(input_ids.shape):
                raise PtmError(f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids {tuple(input_ids.shape)}")
            mask = attention_mask != 0
            if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
                raise PtmError("the awd_lstm encoder needs right padding: attention_mask must be 1s followed by 0s")
            keep = mask[:, :, None].to(self.embedding.weight.dtype)
        table = embedding_dropout(self.embedding.weight, cfg.dropoute, self.training)
        x = locked_dropout(F.embedding(input_ids, table), cfg.dropouti, self.training)  # [B, T, E]
        if initial_states is not None and len(initial_states) != len(self.layers):
            raise PtmError(f"initial_states has {len(initial_states)} layers, the encoder {len(self.layers)}")
        states = [x]
        finals = []
        h = x
        for j, layer in enumerate(self.layers):
            h, final = layer(h, state=None if initial_states is None else initial_states[j])  # [B, T, H_j]
            states.append(h)
            finals.append(final)
            if j < len(self.layers) - 1:
                h = locked_dropout(h, cfg.dropouth, self.training)
        last = states[-1]
        dropped = locked_dropout(last, cfg.dropout, self.training)
        if keep is not None:
            states = [s * keep for s in states]
            last, dropped = states[-1], dropped * keep
        hidden = tuple(states) if output_hidden_states else None
        return EncoderOutput(last, hidden, None, {"dropped_output": dropped, "final_states": finals})
