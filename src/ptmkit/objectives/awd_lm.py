"""The AWD-LSTM language model (Merity, Keskar & Socher 2018): ULMFiT's pre-training objective.

Examples are the ``clm`` objective's contiguous blocks of the sentence stream (every sentence
followed by the separator, :class:`ptmkit.objectives.stream.SentenceStream`): a block of
``T + 1`` stream tokens gives the input ``input_ids [B, T]`` and the next-token targets
``labels [B, T]``.  With ``carry_state`` (default, as the authors' code) the blocks are read as
``batch_size`` parallel streams (``reads_streams``: row ``r`` of step ``s + 1`` continues the text
of row ``r`` of step ``s``) and each block starts from the LSTM states the previous block of its
stream ended with (detached: truncated backpropagation through time), kept per stream in a
:class:`~ptmkit.objectives.carried.StreamState` that the training checkpoints save; a new epoch
starts every stream from zero states.  Without it every block starts from zero states and the
blocks are shuffled.  Evaluation batches and :meth:`lm_log_probs` always start from zero states.
The block length is fixed (no variable-length BPTT).

With ``h_t`` the last layer's output and ``m ⊙ h_t`` the same after the encoder's locked output
dropout (``extras["dropped_output"]``), the decoder is tied to the embedding table
``E [V, E]`` plus a bias ``b [V]`` (``decoder.bias``):

    p(x_{t+1} | x_{<=t}) = softmax(E (m ⊙ h_t) + b)

and the training loss (paper section 4.6) is

    L = CE  +  α · mean((m ⊙ h_t)²)  +  β · mean((h_t - h_{t-1})²)

the activation regularisation (AR, α = 2) on the dropped output and the temporal activation
regularisation (TAR, β = 1) on the raw output, both means over the real (non-padding) entries,
TAR over consecutive real positions ``t - 1, t``.  AR and TAR apply in training only: in
evaluation the loss is the cross-entropy (``exp`` of it is the perplexity).  Metrics:
``lm_loss`` (the cross-entropy), ``ar`` and ``tar`` (the two weighted penalties).

``lm_log_probs(backbone, input_ids)`` scores text left to right (``log p(x_t | x_{<t})``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.log_probs import next_token_log_probs
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.carried import StreamState
from ptmkit.objectives.stream import SentenceStream
from ptmkit.registry import register


@dataclass(frozen=True)
class AWDLMConfig:
    """alpha: the AR weight (2); beta: the TAR weight (1); separator: the separator token after
    every sentence; carry_state: each training block starts from the states the previous block
    of its stream ended with (see the module docstring)."""

    alpha: float = 2.0
    beta: float = 1.0
    separator: bool = True
    carry_state: bool = True

    def __post_init__(self) -> None:
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise PtmError(f"objective.{name} must be a number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        for name in ("separator", "carry_state"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"objective.{name} must be true or false, got {getattr(self, name)!r}")


class Decoder(nn.Module):
    """The softmax's own parameter: ``bias [V]`` (the weight is the tied embedding table)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))


def activation_penalties(raw: torch.Tensor, dropped: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean((m ⊙ h)²), mean((h_t - h_{t-1})²))`` over the real entries of ``raw`` / ``dropped``
    ``[B, T, D]`` (``mask [B, T]``: 1 = real, ``None``: all real), unweighted."""
    D = raw.shape[-1]
    if mask is None:
        ar = dropped.float().pow(2).mean()
        tar = (raw[:, 1:] - raw[:, :-1]).float().pow(2).mean() if raw.shape[1] > 1 else raw.new_zeros(())
        return ar, tar
    m = mask.to(raw.dtype)
    ar = (dropped.float().pow(2) * m[:, :, None]).sum() / (m.sum() * D).clamp(min=1.0)
    pair = m[:, 1:] * m[:, :-1]  # both positions real
    tar = ((raw[:, 1:] - raw[:, :-1]).float().pow(2) * pair[:, :, None]).sum() / (pair.sum() * D).clamp(min=1.0)
    return ar, tar


@register("objective", "awd_lm")
class AWDLanguageModel(Objective):
    """Next-token LM with a tied decoder, AR and TAR.  Batch keys: ``input_ids [B, T]``,
    ``labels [B, T]`` (-100 = not predicted), ``attention_mask [B, T]`` when a block is short."""

    config_class = AWDLMConfig
    perplexity = "lm_loss"  # the training loss adds AR and TAR
    encoders = ("awd_lstm",)
    causal = True
    hf_heads = ()

    def __init__(self, cfg: AWDLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        if encoder.output_embeddings() is None:
            raise PtmError("the awd_lm objective ties its decoder to the embeddings: set model.tie_weights=true")
        self.decoder = Decoder(int(encoder.config.vocab_size))
        eos = getattr(tokenizer, "eos_id", None)
        self.eos_id = int(eos if eos is not None else tokenizer.sep_id)
        self.stream = SentenceStream(cfg.separator, self.eos_id, self.pad_id)
        self.states = StreamState()

    @property  # type: ignore[override]
    def reads_streams(self) -> bool:
        """Training batches as parallel streams when the states are carried."""
        return self.cfg.carry_state

    carried_state_switch = "objective.carry_state=false"

    @property
    def carries_state(self) -> bool:
        return self.cfg.carry_state

    def carried_state_dict(self) -> dict[str, Any]:
        return self.states.state_dict()

    def load_carried_state_dict(self, state: dict[str, Any]) -> None:
        self.states.load_state_dict(state)

    def _read_states(self, batch: dict[str, torch.Tensor], n_layers: int, device) -> list | None:
        """The carried ``(h, c)`` per layer for a training batch's streams, or ``None`` (zeros)."""
        got = self.states.read(batch["stream_ids"], batch["stream_steps"], device)
        if got is None:
            return None
        return [(got[f"h{j}"], got[f"c{j}"]) for j in range(n_layers)]

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        return self.stream.block_spans(corpus, seq_len, "LM")

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        seq, inside = self.stream.read(corpus, spans)
        labels = np.where(inside[:, 1:], seq[:, 1:], IGNORE_INDEX)
        batch = {"input_ids": torch.from_numpy(np.ascontiguousarray(seq[:, :-1])), "labels": torch.from_numpy(labels)}
        if not inside[:, :-1].all():
            batch["attention_mask"] = torch.from_numpy(inside[:, :-1].astype(np.int64))
        return batch

    # -- model ------------------------------------------------------------------------------
    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch.get("attention_mask")
        # carried states: training batches of parallel streams, every block full (a short final
        # block ends its stream, so nothing is read after it)
        carry = self.carries_state and self.training and "stream_ids" in batch
        initial = self._read_states(batch, backbone.num_layers, batch["input_ids"].device) if carry else None
        out = backbone(batch["input_ids"], attention_mask=attention_mask, causal=True, initial_states=initial)
        if carry and attention_mask is None:
            finals = out.extras["final_states"]
            values = {f"{k}{j}": pair[i] for j, pair in enumerate(finals) for i, k in enumerate("hc")}
            self.states.write(batch["stream_ids"], batch["stream_steps"], values)
        dropped = out.extras["dropped_output"]
        labels = batch["labels"]
        ce = linear_cross_entropy(dropped.flatten(0, 1), backbone.output_embeddings(), self.decoder.bias, labels.flatten())
        metrics = {"lm_loss": ce.detach()}
        loss = ce
        if self.training:
            ar, tar = activation_penalties(out.last_hidden_state, dropped, attention_mask)
            ar, tar = self.cfg.alpha * ar, self.cfg.beta * tar
            loss = ce + ar + tar
            metrics.update(ar=ar.detach(), tar=tar.detach())
        n_pred = int((labels != IGNORE_INDEX).sum())
        n_tokens = input_tokens(batch)
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=n_pred)

    def lm_log_probs(self, backbone: Encoder, input_ids: torch.Tensor) -> torch.Tensor:
        """``log p(x_t | x_{<t})`` for ``t = 1 .. T-1`` of ``input_ids [B, T]`` -> ``[B, T - 1]``
        (each row read from zero states; in the modules' current mode: call ``eval()`` to score)."""
        out = backbone(input_ids, causal=True)
        h = out.extras["dropped_output"][:, :-1]
        return next_token_log_probs(h, backbone.output_embeddings(), self.decoder.bias, input_ids[:, 1:])

