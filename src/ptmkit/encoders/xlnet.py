"""XLNet (Yang et al. 2019): a post-LN Transformer-XL with two-stream relative attention.

Positions are relative (Transformer-XL, Dai et al. 2019).  For a query at absolute position
``i`` (memory first, so the current segment starts at ``M``) and a key at ``j`` the score of
head ``n`` is ::

    s_ij = ((q_i + u)·k_j  +  (q_i + v)·W_r R_{i-j}  +  (q_i + b_s)·e_{s_ij}) / sqrt(d)

with ``R_d = [sin(d ω); cos(d ω)]`` the sinusoidal embedding of the distance ``d``
(``ω_k = 10000^{-2k/H}``), ``u = r_w_bias``, ``v = r_r_bias``, ``b_s = r_s_bias`` and
``e_s = seg_embed[s]``, ``s_ij = 0`` when tokens ``i`` and ``j`` are in the same segment and 1
otherwise (relative segment encoding; memory counts as segment 0).  The ``(q + v)·W_r R``
term is computed once for every distance in ``[M + T, -T)`` and moved into place by the
*relative shift* (:func:`rel_shift`).

Two streams share every weight:

* the content stream ``h`` starts from the word embeddings; position ``i`` attends to the
  memory and to the positions at or before it in the factorisation order (itself included);
* the query stream ``g`` starts from the learned ``mask_emb`` at the predicted positions only
  (``target_positions [B, P]``); it attends to the memory and to the *content* of the positions
  strictly before it in the order, never its own.  Its top layer predicts the token there.

``forward(input_ids, attention_mask)`` alone is the content stream with full bidirectional
attention (fine-tuning, features).  The permutation machinery is given as extras:
``sees [B, T, T]`` (bool, ``sees[b, i, j]``: ``j`` precedes ``i`` in the factorisation order),
``target_positions [B, P]`` and ``mems`` (one ``[B, M, H]`` tensor per layer: the inputs of that
layer over the previous segment, gradients stopped).  Layers are post-LN as XLNet's:
``h = LN(h + drop(attn))``, ``h = LN(h + drop(fc2(drop(act(fc1 h)))))``.

Parameter names: ``word_embeddings.weight [V, H]``, ``mask_emb [H]``; per layer
``layers.{i}.attn.{q,k,v,r}.weight [H, H]`` (no biases; rows are ``head * d + dim``),
``layers.{i}.attn.o.weight [H, H]``, ``layers.{i}.attn.{r_w_bias,r_r_bias,r_s_bias} [heads, d]``,
``layers.{i}.attn.seg_embed [2, heads, d]``, ``layers.{i}.attn_norm.*``,
``layers.{i}.ffn.fc1.* [I, H]``, ``layers.{i}.ffn.fc2.* [H, I]``, ``layers.{i}.ffn_norm.*``.
:meth:`XLNetEncoder.prune_heads` cuts ``heads`` to ``h'`` in every per-head tensor of a layer
(``[h' d, H]``, ``[H, h' d]``, ``[h', d]``, ``[2, h', d]``); ``output_attentions`` and
``head_mask`` cover both streams (:mod:`ptmkit.nn.heads`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import torch
from torch import nn

from ptmkit.encoders.base import Encoder, EncoderOutput, check_token_ids
from ptmkit.errors import PtmError, suggest
from ptmkit.nn.dropout import Dropout
from ptmkit.nn.feedforward import FeedForward
from ptmkit.nn.heads import (
    PrunableHeads,
    check_heads,
    head_gates,
    keep_columns,
    keep_parameter_heads,
    keep_rows,
    layer_number,
    merge_heads,
)
from ptmkit.registry import register

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class XLNetConfig:
    vocab_size: int = 32000
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1  # embeddings, relative encodings, residual branches, attention probabilities
    init_std: float = 0.02
    mem_len: int = 0  # previous-segment states kept per layer (0 = no recurrence)
    clamp_len: int = -1  # distances beyond this share one encoding (-1: never clamp)
    pad_token_id: int = 0
    # heads removed by prune_heads, {layer: [original head index, ...]}
    pruned_heads: dict[int, tuple[int, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("layer_norm_eps", "dropout", "init_std"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"model.{name} must be a number, got {value!r}") from None
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"model.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise PtmError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads={self.num_heads}; "
                f"pick a number of heads that divides the hidden size"
            )
        if self.hidden_size % 2:
            raise PtmError(f"model.hidden_size={self.hidden_size} must be even (sin/cos relative encodings)")
        if self.activation not in ACTIVATIONS:
            raise PtmError(f"model.activation={self.activation!r} is not one of {ACTIVATIONS}{suggest(self.activation, ACTIVATIONS)}")
        if not 0.0 <= self.dropout < 1.0:
            raise PtmError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.mem_len, int) or self.mem_len < 0:
            raise PtmError(f"model.mem_len must be an integer >= 0, got {self.mem_len!r}")
        if not isinstance(self.clamp_len, int) or self.clamp_len == 0 or self.clamp_len < -1:
            raise PtmError(f"model.clamp_len must be a positive integer or -1 (no clamping), got {self.clamp_len!r}")
        if self.layer_norm_eps <= 0 or self.init_std <= 0:
            raise PtmError("model.layer_norm_eps and model.init_std must be positive")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise PtmError(f"model.pad_token_id={self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        pruned = check_heads(self.pruned_heads, layer_number(self.num_layers, "model.pruned_heads"), self.num_heads,
                             "model.pruned_heads")
        object.__setattr__(self, "pruned_heads", pruned)  # JSON's string keys back to layer numbers

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def relative_encodings(klen: int, qlen: int, hidden_size: int, clamp_len: int, device, dtype) -> torch.Tensor:
    """``R [klen + qlen, H]``: the sinusoidal encodings of the distances ``klen, klen - 1, ...,
    -qlen + 1`` (row ``p`` encodes distance ``klen - p``), clamped to ``±clamp_len`` if > 0."""
    dist = torch.arange(klen, -qlen, -1, device=device, dtype=torch.float32)
    if clamp_len > 0:
        dist = dist.clamp(-clamp_len, clamp_len)
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, hidden_size, 2, device=device, dtype=torch.float32) / hidden_size)
    angle = dist[:, None] * inv_freq[None, :]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1).to(dtype)


def rel_shift(x: torch.Tensor, klen: int) -> torch.Tensor:
    """``x [..., Q, klen + Q]`` (query ``i`` against distance row ``p``, distance ``klen - p``)
    -> ``[..., Q, klen]`` with ``out[..., i, j] = x[..., i, j + Q - i]``, the row of distance
    ``(klen - Q) + i - j``: query ``i`` sits at absolute position ``klen - Q + i``.

    Viewing the ``Q x P`` block as ``P x Q``, dropping its first row and viewing the rest as
    ``Q x (P - 1)`` offsets row ``i`` by ``Q - i`` elements: the shift without a gather."""
    *lead, Q, P = x.shape
    x = x.reshape(*lead, P, Q)[..., 1:, :].reshape(*lead, Q, P - 1)
    return x[..., :klen]


class RelativeAttention(PrunableHeads, nn.Module):
    """Relative multi-head attention shared by the two streams (see the module docstring).
    Pruned to ``h'`` heads: ``q, k, v, r [h' d, H]``, ``o [H, h' d]``, the biases ``[h', d]``,
    ``seg_embed [2, h', d]``."""

    def __init__(self, cfg: XLNetConfig) -> None:
        super().__init__()
        H, n, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        self.num_heads, self.head_dim = n, d
        self.scale = 1.0 / math.sqrt(d)
        self.q = nn.Linear(H, H, bias=False)
        self.k = nn.Linear(H, H, bias=False)
        self.v = nn.Linear(H, H, bias=False)
        self.r = nn.Linear(H, H, bias=False)
        self.o = nn.Linear(H, H, bias=False)
        self.r_w_bias = nn.Parameter(torch.zeros(n, d))  # u: content bias
        self.r_r_bias = nn.Parameter(torch.zeros(n, d))  # v: position bias
        self.r_s_bias = nn.Parameter(torch.zeros(n, d))  # segment bias
        self.seg_embed = nn.Parameter(torch.zeros(2, n, d))  # [same, different]
        self.dropout = Dropout(cfg.dropout)
        self._init_heads(n)

    def _keep(self, local: list[int]) -> None:
        rows = self.rows(local, 1, self.q.weight.device)
        for linear in (self.q, self.k, self.v, self.r):
            keep_rows(linear, rows)
        keep_columns(self.o, rows)
        for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
            setattr(self, name, keep_parameter_heads(getattr(self, name), local, 0))
        self.seg_embed = keep_parameter_heads(self.seg_embed, local, 1)

    def heads(self, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return linear(x).unflatten(-1, (self.num_heads, self.head_dim))  # [..., L, n, d]

    def scores(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        kr: torch.Tensor,
        diff_seg: torch.Tensor | None,
        positions: torch.Tensor | None,
        qlen: int,
    ) -> torch.Tensor:
        """Scaled scores ``[B, n, Lq, K]``.  q ``[B, Lq, n, d]``, k ``[B, K, n, d]``, kr
        ``[K + qlen, n, d]``; diff_seg ``[B, Lq, K]`` (bool) or ``None``; positions ``[B, Lq]``
        (query positions in the segment for a query stream over chosen targets; ``None``: the
        queries are the positions ``0..qlen-1`` in order)."""
        K = k.shape[1]
        ac = torch.einsum("bind,bjnd->bnij", q + self.r_w_bias, k)
        bd = torch.einsum("bind,pnd->bnip", q + self.r_r_bias, kr)  # [B, n, Lq, K + qlen]
        if positions is None:
            bd = rel_shift(bd, K)
        else:  # query p at segment position t: column j + qlen - t (as rel_shift, gathered)
            col = torch.arange(K, device=q.device)[None, None, :] + qlen - positions[:, :, None]
            bd = torch.gather(bd, 3, col[:, None].expand(-1, bd.shape[1], -1, -1))
        score = ac + bd
        if diff_seg is not None:
            ef = torch.einsum("bind,snd->bnis", q + self.r_s_bias, self.seg_embed)  # [B, n, Lq, 2]
            score = score + torch.where(diff_seg[:, None], ef[..., 1:], ef[..., :1])
        return score * self.scale

    def attend(self, score: torch.Tensor, allowed: torch.Tensor | None, v: torch.Tensor,
               head_gate: torch.Tensor | None = None, probs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Softmax over the allowed keys (``allowed [B, Lq, K]`` bool), then ``[B, Lq, H]``.  A
        query that may see no key gets a uniform average (a finite fill, never NaN).
        head_gate ``[heads]`` (the kept heads') multiplies each head's probabilities; probs: a list
        the probabilities ``[B, heads, Lq, K]`` are appended to (gated, before dropout)."""
        if allowed is not None:
            score = score.masked_fill(~allowed[:, None], torch.finfo(score.dtype).min)
        prob = torch.softmax(score, dim=-1)
        if head_gate is not None:
            prob = prob * head_gate.to(prob.dtype)[:, None, None]
        if probs is not None:
            probs.append(prob)
        return self.o(torch.einsum("bnij,bjnd->bind", self.dropout(prob), v).flatten(2))


class XLNetLayer(nn.Module):
    """Relative attention + feed-forward, post-LN, applied to both streams with the same weights."""

    def __init__(self, cfg: XLNetConfig) -> None:
        super().__init__()
        self.attn = RelativeAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.activation)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.dropout(self.ffn.act(self.ffn.fc1(x)))
        return self.ffn_norm(x + self.dropout(self.ffn.fc2(inner)))

    def forward(
        self,
        h: torch.Tensor,
        g: torch.Tensor | None,
        mem: torch.Tensor | None,
        r: torch.Tensor,
        allowed_h: torch.Tensor | None,
        allowed_g: torch.Tensor | None,
        diff_seg: torch.Tensor | None,
        diff_seg_g: torch.Tensor | None,
        target_positions: torch.Tensor | None,
        head_gate: torch.Tensor | None = None,
        probs_h: list[torch.Tensor] | None = None,
        probs_g: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """head_gate ``[num_heads]`` (original heads) gates both streams; probs_h / probs_g: lists
        each stream's attention probabilities are appended to."""
        a = self.attn
        T = h.shape[1]
        gate = a.gate(head_gate)
        cat = h if mem is None else torch.cat([mem, h], dim=1)
        k, v = a.heads(a.k, cat), a.heads(a.v, cat)
        kr = a.heads(a.r, r)
        score = a.scores(a.heads(a.q, h), k, kr, diff_seg, None, T)
        h_out = self.attn_norm(h + self.dropout(a.attend(score, allowed_h, v, gate, probs_h)))
        g_out = None
        if g is not None:
            score = a.scores(a.heads(a.q, g), k, kr, diff_seg_g, target_positions, T)
            g_out = self.feed_forward(self.attn_norm(g + self.dropout(a.attend(score, allowed_g, v, gate, probs_g))))
        return self.feed_forward(h_out), g_out


_LAYER_RE = re.compile(r"^layers\.(\d+)\.")


@register("encoder", "xlnet")
class XLNetEncoder(Encoder):
    """Word embeddings + ``num_layers`` two-stream relative layers (see the module docstring)."""

    name = "xlnet"
    config_class = XLNetConfig

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mask_emb = nn.Parameter(torch.zeros(config.hidden_size))
        self.layers = nn.ModuleList(XLNetLayer(config) for _ in range(config.num_layers))
        self.dropout = Dropout(config.dropout)
        self.reset_parameters()
        self._cut_heads(config.pruned_heads)  # a pruned model's config rebuilds its smaller weights

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Weights, biases u/v/s, segment embeddings and ``mask_emb`` ~ N(0, init_std); Linear
        biases 0; LayerNorm gain 1 (XLNet's initialisation)."""
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.dim() == 1 and ("norm" in name or name.endswith(".bias")):
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.normal_(0.0, std)

    # -- the Encoder contract ---------------------------------------------------------------
    def input_embeddings(self) -> nn.Embedding:
        return self.word_embeddings

    def max_positions(self) -> None:
        """Relative positions (sinusoids of any distance): no limit."""
        return None

    def prune_heads(self, heads: Mapping[int, Iterable[int]]) -> None:
        """Remove attention heads for good: ``{layer: [head, ...]}``, heads by their original
        index; both streams lose them (they share the weights).  ``config.pruned_heads`` records the
        union (see :meth:`TransformerEncoder.prune_heads`)."""
        new = check_heads(heads, layer_number(self.config.num_layers, "prune_heads"), self.config.num_heads,
                          "prune_heads")
        self._cut_heads(new)
        self.config = replace(self.config, pruned_heads=merge_heads(self.config.pruned_heads, new))

    def _cut_heads(self, heads: Mapping[int, Iterable[int]]) -> None:
        for i, layer_heads in heads.items():
            self.layers[i].attn.prune(layer_heads)

    @property
    def output_size(self) -> int:
        return self.config.hidden_size

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    def layer_index(self, name: str) -> int:
        if name.startswith(("word_embeddings.", "mask_emb")):
            return 0
        match = _LAYER_RE.match(name)
        return int(match.group(1)) + 1 if match else self.num_layers + 1

    # -- memory -------------------------------------------------------------------------------
    def update_mems(self, mems: list[torch.Tensor] | None, layer_inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """The next segment's memory: per layer, the last ``mem_len`` states of ``[mems; inputs]``
        (``[B, <=mem_len, H]``), detached (gradients stop at the segment boundary)."""
        M = self.config.mem_len
        out = []
        for i in range(self.num_layers):
            x = layer_inputs[i] if mems is None else torch.cat([mems[i], layer_inputs[i]], dim=1)
            out.append(x[:, -M:].detach() if M > 0 else x[:, :0].detach())
        return out

    # -- forward -----------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        causal: bool = False,
        output_hidden_states: bool = False,
        sees: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        mems: list[torch.Tensor] | None = None,
        output_attentions: bool = False,
        head_mask: torch.Tensor | None = None,
        **_: object,
    ) -> EncoderOutput:
        """input_ids ``[B, T]``; attention_mask ``[B, T]`` (1 = token, 0 = padding: never a key);
        token_type_ids ``[B, T]`` (segments; memory is segment 0); causal: the identity order
        (``sees[i, j] = j < i``); sees ``[B, T, T]`` bool (the factorisation order, see the module
        docstring; ``None``: everyone sees everyone); target_positions ``[B, P]``: run the query
        stream there; mems: per layer ``[B, M, H]``.

        Returns ``last_hidden_state`` = the content stream ``[B, T, H]``; ``extras["query"]`` =
        the query stream ``[B, P, H]`` (with target_positions); ``hidden_states`` = the input of
        every layer then the output (content stream), from which :meth:`update_mems` builds the
        next memory.

        output_attentions: ``attentions`` = the content stream's probabilities per layer
        ``[B, heads, T, M + T]``, and with target_positions ``extras["query_attentions"]`` the
        query stream's ``[B, heads, P, M + T]`` (HF returns the pair per layer, its query stream at
        every position: its rows at target_positions are these); head_mask
        ``[num_layers, num_heads]`` or ``[num_heads]`` gates both streams."""
        check_token_ids(input_ids, self.config.vocab_size)
        gates = head_gates(head_mask, self.config.num_layers, self.config.num_heads)
        B, T = input_ids.shape
        device = input_ids.device
        M = 0 if mems is None else mems[0].shape[1]
        x = self.dropout(self.word_embeddings(input_ids))
        if causal and sees is None:
            sees = torch.ones(T, T, dtype=torch.bool, device=device).tril(-1).expand(B, T, T)
        # Keys: memory (always visible) then the segment.  Query stream: strictly earlier in the
        # order; content stream: that or itself.
        key_ok = None if attention_mask is None else attention_mask.bool()
        allowed_g = None
        if sees is not None:
            allowed_g = sees if key_ok is None else sees & key_ok[:, None, :]
        elif key_ok is not None:
            allowed_g = key_ok[:, None, :].expand(B, T, T)
        allowed_h = None
        if allowed_g is not None:
            allowed_h = allowed_g | torch.eye(T, dtype=torch.bool, device=device)
            if M:
                allowed_h = torch.cat([allowed_h.new_ones(B, T, M), allowed_h], dim=2)
                allowed_g = torch.cat([allowed_g.new_ones(B, T, M), allowed_g], dim=2)
        diff_seg = None
        if token_type_ids is not None:
            keys = token_type_ids if not M else torch.cat([token_type_ids.new_zeros(B, M), token_type_ids], dim=1)
            diff_seg = token_type_ids[:, :, None] != keys[:, None, :]  # [B, T, M + T]
        g = diff_seg_g = None
        if target_positions is not None:
            P = target_positions.shape[1]
            g = self.dropout(self.mask_emb.expand(B, P, -1))
            rows = target_positions[:, :, None]
            if allowed_g is not None:
                allowed_g = torch.gather(allowed_g, 1, rows.expand(-1, -1, allowed_g.shape[2]))
            if diff_seg is not None:
                diff_seg_g = torch.gather(diff_seg, 1, rows.expand(-1, -1, diff_seg.shape[2]))
        r = self.dropout(relative_encodings(M + T, T, self.config.hidden_size, self.config.clamp_len, device, x.dtype))
        hidden = [x]
        probs_h: list[torch.Tensor] | None = [] if output_attentions else None
        probs_g: list[torch.Tensor] | None = [] if output_attentions and g is not None else None
        for i, layer in enumerate(self.layers):
            x, g = layer(x, g, None if mems is None else mems[i], r, allowed_h, allowed_g, diff_seg, diff_seg_g,
                         target_positions, None if gates is None else gates[i], probs_h, probs_g)
            hidden.append(x)
        extras = {}
        if g is not None:
            extras["query"] = self.dropout(g)
        if probs_g is not None:
            extras["query_attentions"] = tuple(probs_g)
        return EncoderOutput(self.dropout(x), tuple(hidden) if output_hidden_states else None, None, extras,
                             tuple(probs_h) if probs_h is not None else None)
