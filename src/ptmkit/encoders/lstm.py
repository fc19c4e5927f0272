"""The LSTM encoder: ELMo's biLM (Peters et al. 2018), and uni- or bidirectional LSTM stacks in general.

Token representation ``x_k`` (``[B, T, P]``), either

* word embeddings ``[V, P]`` (``char_cnn=False``), or
* ELMo's character CNN (``char_cnn=True``; Kim et al. 2016, Józefowicz et al. 2016): every token
  is spelled as UTF-8 bytes between begin- and end-of-word marks, ``max_chars`` characters at
  most; 16-dimensional character embeddings; 1-D convolutions of widths 1-7 (``filters`` =
  ``[[width, count], ...]``), each max-pooled over the characters then ReLU; ``highway_layers``
  highway layers (Srivastava et al. 2015); a linear projection to ``P``.  The spelling table
  (token id -> character ids) is built from the tokenizer's vocabulary in :meth:`bind_tokenizer`;
  special tokens (``[PAD]``, ``[SEP]``, ...) are spelled with a marker character of their own.

then ``num_layers`` LSTM layers of ``hidden_size`` cells whose output is projected to
``projection_size`` (``P``; LSTMP, Sak et al. 2014; torch's ``nn.LSTM(proj_size=P)``), with dropout
on every layer's input and, with ``residual``, a residual connection around every layer but the
first (ELMo: from the first layer to the second).

Bidirectional means two *separate* stacks: the forward stack reads ``t_1 .. t_T`` and its
states ``→h_{k,j}`` depend on ``t_1 .. t_k`` only; the backward stack reads each sequence
reversed *within its real length* (padding-aware) and ``←h_{k,j}`` depends on ``t_k .. t_N``
only.  (A multi-layer ``nn.LSTM(bidirectional=True)`` would feed both directions of layer ``j``
into layer ``j + 1``, leaking the future into the forward LM.)

Outputs (``forward``):

* ``last_hidden_state`` ``[B, T, 2P]`` = ``[→h_{k,L}; ←h_{k,L}]`` (``[B, T, P]`` unidirectional);
* ``hidden_states`` (when asked): ``L + 1`` tensors ``[B, T, 2P]``: layer 0 is the token
  representation duplicated ``[x_k; x_k]`` (as in ELMo), layer ``j`` is ``[→h_{k,j}; ←h_{k,j}]``,
  so the paper's ``2L + 1`` representations are all there;
* ``pooled`` ``None``;
* ``extras``: ``token`` ``x_k`` ``[B, T, P]``, ``forward`` ``→h_{k,L}`` and (bidirectional)
  ``backward`` ``←h_{k,L}``, each ``[B, T, P]``, before any dropout.

Padded positions (``attention_mask == 0``, which must be right padding) are zero in every output.
Not implemented from the paper: the cell and projection clipping (±3) of the original code.

Parameter names: ``word_embeddings.weight [V, P]`` (word input) or
``char_cnn.char_embeddings.weight [C, 16]``, ``char_cnn.convs.{k}.{weight [n_k, 16, w_k], bias}``,
``char_cnn.highways.{j}.transform.*`` / ``.gate.*`` ``[F, F]``, ``char_cnn.projection.* [P, F]`` and
the buffer ``char_cnn.char_ids [V, max_chars]`` (int32); ``forward_layers.{j}.*`` and
``backward_layers.{j}.*``: torch LSTM tensors ``weight_ih_l0 [4H, P]``, ``weight_hh_l0 [4H, P]``,
``bias_ih_l0``, ``bias_hh_l0`` ``[4H]`` (gates i, f, g, o), ``weight_hr_l0 [P, H]`` (projection).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder, EncoderOutput, check_token_ids
from ptmkit.errors import PtmError
from ptmkit.registry import register

# Character ids: 0 pads a spelling, byte b is b + 1, then the word marks and one marker per
# special token (the tokenizer attributes below, in this order).
PAD_CHAR = 0
BEGIN_OF_WORD = 257
END_OF_WORD = 258
SPECIAL_ATTRS = ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id", "bos_id", "eos_id")
FIRST_SPECIAL_CHAR = 259
NUM_CHARS = FIRST_SPECIAL_CHAR + len(SPECIAL_ATTRS)

ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


@dataclass(frozen=True)
class LSTMConfig:
    """An (optionally character-based) LSTM stack; the defaults are ELMo's (Peters et al. 2018).

    vocab_size: token ids (set from the tokenizer); num_layers: L LSTM layers per direction;
    hidden_size: LSTM cells; projection_size: P, the width of the token representation and of
    each direction's layer outputs (``None``: no projection, ``P = hidden_size``);
    bidirectional: a backward stack beside the forward one; residual: add each layer's input to
    its output (all layers but the first); dropout: on every LSTM layer's input.
    char_cnn: character CNN input instead of word embeddings; char_embedding_size, filters
    (``[[width, count], ...]``), highway_layers, max_chars (per token, with the two word marks).
    init_std: word embeddings ~ N(0, init_std).
    """

    vocab_size: int = 10000
    num_layers: int = 2
    hidden_size: int = 4096
    projection_size: int | None = 512
    bidirectional: bool = True
    residual: bool = True
    dropout: float = 0.1
    char_cnn: bool = True
    char_embedding_size: int = 16
    filters: tuple[tuple[int, int], ...] = ELMO_FILTERS
    highway_layers: int = 2
    max_chars: int = 50
    init_std: float = 0.1

    def __post_init__(self) -> None:
        for name in ("dropout", "init_std"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"model.{name} must be a number, got {value!r}") from None
        for name in ("vocab_size", "num_layers", "hidden_size", "char_embedding_size", "max_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")
        p = self.projection_size
        if p is not None and (not isinstance(p, int) or isinstance(p, bool) or p <= 0):
            raise PtmError(f"model.projection_size must be a positive integer or null, got {p!r}")
        if not isinstance(self.highway_layers, int) or isinstance(self.highway_layers, bool) or self.highway_layers < 0:
            raise PtmError(f"model.highway_layers must be an integer >= 0, got {self.highway_layers!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise PtmError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if self.init_std <= 0:
            raise PtmError(f"model.init_std must be positive, got {self.init_std!r}")
        try:
            filters = tuple((int(w), int(n)) for w, n in self.filters)
        except (TypeError, ValueError):
            raise PtmError(f"model.filters must be a list of [width, count] pairs, got {self.filters!r}") from None
        if not filters or any(w <= 0 or n <= 0 for w, n in filters):
            raise PtmError(f"model.filters needs at least one [width, count] pair of positive integers, got {self.filters!r}")
        object.__setattr__(self, "filters", filters)
        widest = max(w for w, _ in filters)
        if self.char_cnn and self.max_chars < max(3, widest):
            raise PtmError(
                f"model.max_chars={self.max_chars} is shorter than the widest filter ({widest}) or a one-character "
                f"word with its two marks (3); raise model.max_chars"
            )

    @property
    def token_size(self) -> int:
        """P: the width of the token representation and of each direction's layer outputs."""
        return self.projection_size or self.hidden_size

    @property
    def num_filters(self) -> int:
        """F: the width of the character CNN's output (the sum of the filter counts)."""
        return sum(n for _, n in self.filters)


def spell(token: str, max_chars: int) -> list[int]:
    """Character ids of an ordinary token: begin-of-word, its UTF-8 bytes + 1 (cut to fit), end-of-word."""
    body = [b + 1 for b in token.encode("utf-8")[: max_chars - 2]]
    return [BEGIN_OF_WORD, *body, END_OF_WORD]


def char_table(tokenizer: Any, vocab_size: int, max_chars: int) -> np.ndarray:
    """``int32 [vocab_size, max_chars]``: the spelling of every token id (0-padded).

    Special tokens (the tokenizer's ``pad_id``, ``unk_id``, ``cls_id``, ``sep_id``, ``mask_id``
    and, if it has them, ``bos_id`` / ``eos_id``) are ``[begin, marker, end]`` with a marker
    character of their own; ids the tokenizer does not have stay all padding.
    """
    if hasattr(tokenizer, "id_to_token"):
        n = min(int(tokenizer.vocab_size), vocab_size)
        tokens = {i: tokenizer.id_to_token(i) for i in range(n)}
    elif hasattr(tokenizer, "get_vocab"):
        tokens = {int(i): t for t, i in tokenizer.get_vocab().items() if int(i) < vocab_size}
    else:
        raise PtmError(
            "the lstm encoder's character CNN spells the tokens of the tokenizer's vocabulary, but this "
            "tokenizer exposes none (no id_to_token / get_vocab); use a ptmkit Tokenizer or model.char_cnn=false"
        )
    table = np.zeros((vocab_size, max_chars), dtype=np.int32)
    for i, token in tokens.items():
        if token is not None:
            ids = spell(token, max_chars)
            table[i, : len(ids)] = ids
    for k, attr in enumerate(SPECIAL_ATTRS):
        i = getattr(tokenizer, attr, None)
        if i is not None and 0 <= int(i) < vocab_size:
            table[int(i)] = 0
            table[int(i), :3] = (BEGIN_OF_WORD, FIRST_SPECIAL_CHAR + k, END_OF_WORD)
    return table


class Highway(nn.Module):
    """``y = t ⊙ relu(W_H x + b_H) + (1 - t) ⊙ x`` with the transform gate ``t = σ(W_T x + b_T)``,
    ``[..., F] -> [..., F]``; ``b_T`` starts at -2 so that a new layer mostly carries its input."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)
        with torch.no_grad():
            self.gate.bias.fill_(-2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.sigmoid(self.gate(x))
        return t * torch.relu(self.transform(x)) + (1.0 - t) * x


class CharCNN(nn.Module):
    """Token ids ``[B, T]`` -> character-based token representations ``[B, T, P]``.

    The CNN runs once per distinct id of the batch (``torch.unique``), then the results are
    gathered back to the positions: the same values and gradients as running it at every position.
    """

    def __init__(self, cfg: LSTMConfig) -> None:
        super().__init__()
        self.char_embeddings = nn.Embedding(NUM_CHARS, cfg.char_embedding_size, padding_idx=PAD_CHAR)
        self.convs = nn.ModuleList(nn.Conv1d(cfg.char_embedding_size, n, w) for w, n in cfg.filters)
        self.highways = nn.ModuleList(Highway(cfg.num_filters) for _ in range(cfg.highway_layers))
        self.projection = nn.Linear(cfg.num_filters, cfg.token_size)
        # the spelling table, filled by bind_tokenizer (int32: DDP's gloo backend broadcasts no int16)
        self.register_buffer("char_ids", torch.zeros(cfg.vocab_size, cfg.max_chars, dtype=torch.int32))
        with torch.no_grad():
            self.char_embeddings.weight.uniform_(-1.0, 1.0)  # as the original code
            self.char_embeddings.weight[PAD_CHAR].zero_()

    def spell_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Character-level representation of token ``ids [U]`` -> ``[U, P]``."""
        chars = self.char_ids[ids].long()  # [U, C]
        x = self.char_embeddings(chars).transpose(1, 2)  # [U, d, C]
        h = torch.cat([torch.relu(conv(x).amax(dim=-1)) for conv in self.convs], dim=-1)  # [U, F]
        for highway in self.highways:
            h = highway(h)
        return self.projection(h)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        uniq, inverse = torch.unique(input_ids, return_inverse=True)
        return self.spell_ids(uniq)[inverse]  # [B, T, P]


def _lstm_layer(cfg: LSTMConfig) -> nn.LSTM:
    P, H = cfg.token_size, cfg.hidden_size
    layer = nn.LSTM(P, H, num_layers=1, batch_first=True, proj_size=P if P != H else 0)
    with torch.no_grad():  # forget-gate bias 1 (Gers et al. 2000; Józefowicz et al. 2015)
        layer.bias_ih_l0[H : 2 * H].fill_(1.0)
        layer.bias_hh_l0[H : 2 * H].zero_()
    return layer


_LAYER_RE = re.compile(r"^(?:forward|backward)_layers\.(\d+)\.")


@register("encoder", "lstm")
class LSTMEncoder(Encoder):
    """Token representation + separate forward and backward LSTM stacks (see the module docstring)."""

    name = "lstm"
    config_class = LSTMConfig

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__(config)
        if config.char_cnn:
            self.char_cnn = CharCNN(config)
            self.word_embeddings = None
        else:
            self.char_cnn = None
            self.word_embeddings = nn.Embedding(config.vocab_size, config.token_size)
            with torch.no_grad():
                self.word_embeddings.weight.normal_(0.0, config.init_std)
        self.dropout = nn.Dropout(config.dropout)
        self.forward_layers = nn.ModuleList(_lstm_layer(config) for _ in range(config.num_layers))
        self.backward_layers = (
            nn.ModuleList(_lstm_layer(config) for _ in range(config.num_layers)) if config.bidirectional else None
        )

    # -- the Encoder contract ---------------------------------------------------------------
    def input_embeddings(self) -> nn.Embedding | None:
        """The word table ``[V, P]``; ``None`` with character input (no table of tokens by id)."""
        return self.word_embeddings

    def output_embeddings(self) -> torch.Tensor | None:
        """The word table ``[V, P]`` (P is one direction's width, which a biLM softmax reads), or ``None``."""
        return self.word_embeddings.weight if self.word_embeddings is not None else None

    @property
    def output_size(self) -> int:
        return self.config.token_size * (2 if self.config.bidirectional else 1)

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    def max_positions(self) -> None:
        """A recurrent network reads any length."""
        return None

    def layer_index(self, name: str) -> int:
        if name.startswith(("word_embeddings.", "char_cnn.")):
            return 0
        match = _LAYER_RE.match(name)
        if match:
            return int(match.group(1)) + 1
        return self.num_layers + 1

    def bind_tokenizer(self, tokenizer: Any) -> None:
        """Fill the character CNN's spelling table from ``tokenizer``'s vocabulary (char input only)."""
        if self.char_cnn is None:
            return
        table = char_table(tokenizer, self.config.vocab_size, self.config.max_chars)
        buf = self.char_cnn.char_ids
        if buf.is_meta:  # shapes only (parameter counting)
            return
        with torch.no_grad():
            buf.copy_(torch.from_numpy(table))

    # -- computation ------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The token representation ``x_k``: ``[B, T] -> [B, T, P]``."""
        if self.char_cnn is not None:
            return self.char_cnn(input_ids)
        return self.word_embeddings(input_ids)

    def _stack(self, layers: nn.ModuleList, x: torch.Tensor) -> list[torch.Tensor]:
        """Run one direction's layers over ``x [B, T, P]`` (already in reading order); every
        layer's output ``[B, T, P]``."""
        states = []
        h = x
        for j, lstm in enumerate(layers):
            with warnings.catch_warnings():  # torch notes that projected LSTMs run without oneDNN
                warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
                out, _ = lstm(self.dropout(h))
            if self.config.residual and j > 0:
                out = out + h
            states.append(out)
            h = out
        return states

    @staticmethod
    def _lengths(attention_mask: torch.Tensor | None, shape: torch.Size) -> torch.Tensor | None:
        """Real lengths ``[B]`` from a right-padded ``attention_mask [B, T]`` (None: all full)."""
        if attention_mask is None:
            return None
        if tuple(attention_mask.shape) != tuple(shape):
            raise PtmError(f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids {tuple(shape)}")
        mask = attention_mask != 0
        if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
            raise PtmError("the lstm encoder needs right padding: attention_mask must be 1s followed by 0s in every row")
        return mask.sum(dim=1)

    @staticmethod
    def reverse_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
        """``[B, T]``: position ``t`` -> ``len - 1 - t`` inside the real length, ``t`` in the padding
        (its own inverse: it reverses each sequence within its length and back)."""
        t = torch.arange(T, device=lengths.device)[None, :]
        n = lengths[:, None]
        return torch.where(t < n, n - 1 - t, t)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        causal: bool = False,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
        **extras: Any,
    ) -> EncoderOutput:
        """input_ids ``[B, T]``; attention_mask ``[B, T]`` (1 = token, 0 = padding; right padding
        only).  ``token_type_ids`` and ``position_ids`` do not apply and are ignored; an explicit
        ``attn_mask`` cannot be honoured by a recurrent network (error); ``causal=True`` asks for
        left-to-right states only, which a bidirectional encoder cannot give in
        ``last_hidden_state`` (error; read ``extras["forward"]``)."""
        self.check_no_heads(output_attentions, head_mask)  # no attention: nothing to return or gate
        if attn_mask is not None:
            raise PtmError("the lstm encoder reads its inputs in order; it cannot take an explicit attn_mask")
        if causal and self.config.bidirectional:
            raise PtmError(
                "causal=True asks for left-to-right states, but this lstm encoder is bidirectional (its backward "
                "direction reads the future); use model.bidirectional=false or the forward states in extras['forward']"
            )
        check_token_ids(input_ids, self.config.vocab_size)
        B, T = input_ids.shape
        lengths = self._lengths(attention_mask, input_ids.shape)
        x = self.embed(input_ids)  # [B, T, P]
        forward_states = self._stack(self.forward_layers, x)
        directions = [forward_states]
        if self.backward_layers is not None:
            if lengths is None:
                backward = self._stack(self.backward_layers, x.flip(1))
                backward_states = [h.flip(1) for h in backward]
            else:
                index = self.reverse_index(lengths, T)[:, :, None].expand(B, T, x.shape[-1])
                backward = self._stack(self.backward_layers, x.gather(1, index))
                backward_states = [h.gather(1, index) for h in backward]
            directions.append(backward_states)
        keep = None if lengths is None else (attention_mask != 0)[:, :, None].to(x.dtype)

        def join(parts: list[torch.Tensor]) -> torch.Tensor:
            h = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
            return h * keep if keep is not None else h

        last = join([d[-1] for d in directions])
        hidden = None
        if output_hidden_states:
            hidden = (join([x] * len(directions)),) + tuple(
                join([d[j] for d in directions]) for j in range(self.config.num_layers)
            )
        out_extras = {"token": join([x]), "forward": join([forward_states[-1]])}
        if self.backward_layers is not None:
            out_extras["backward"] = join([directions[1][-1]])
        return EncoderOutput(last, hidden, None, out_extras)
