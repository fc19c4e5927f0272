"""Permutation language modelling: XLNet's objective (Yang et al. 2019).

For a sampled factorisation order ``z`` of the ``T`` positions, XLNet maximises
``sum_{t > c} log p(x_{z_t} | x_{z_<t})``: *partial prediction* splits ``z`` into a non-target
prefix ``z_<=c`` and the last ``T / K`` positions, the targets (``K = 6``).  The prediction of
``x_{z_t}`` reads the query stream ``g_{z_t}`` (it knows the position ``z_t`` but not the token)
through the tied output layer: ``p(x | ...) = softmax(E g + b)``.

Batches (all randomness from the ``rng`` given to :meth:`collate`, vectorised over the batch):

* targets: n-gram spans as in XLNet's implementation, ``n`` whole words (the corpus's word
  starts; tokens when it records none) with ``n`` in ``1..max_ngram``, ``p(n)`` proportional to
  ``1/n``, until ``round(T / K)`` tokens are chosen (the run selector of
  :mod:`ptmkit.objectives.masking`; a word longer than what is left of the budget ends the
  selection a few tokens short);
* the factorisation order: the non-targets first, as one block (none of them is predicted, and
  as in XLNet's implementation their content streams see one another), then the targets in a
  uniformly random order: ``rank [B, T]`` is -1 for a non-target and ``0..P-1`` for the targets;
* ``sees [B, T, T]`` (bool): ``sees[b, i, j] = rank[j] < max(rank[i], 0)``: a target's query
  stream sees the content of everything before it in the order; a non-target's content stream
  sees the non-target block (the encoder adds each position's own content to the content stream);
* ``target_positions [B, P]`` (the target mapping, as indices) and ``labels [B, P]`` (-100 in
  unused slots, for the shorter final block).

The corpus is read as one stream (sentences each followed by a separator) cut into contiguous
blocks of ``T`` tokens, laid out as parallel streams (``reads_streams``): with ``model.mem_len >
0`` the content-stream inputs of each layer over the previous block of the same stream are kept
as memory (Transformer-XL's segment recurrence, gradients stopped) and carried from step to
step, in the training checkpoint but not in the weights.  Evaluation batches use no memory.

Batch keys: ``input_ids [B, T]``, ``sees [B, T, T]``, ``target_positions [B, P]``,
``labels [B, P]``, ``attention_mask [B, T]`` (only for a shorter final block); training batches
also get ``stream_ids`` / ``stream_steps`` from the batch source.  Parameters: ``lm_bias [V]``
(the output bias; the weight is the tied word embedding matrix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.host import count
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.carried import StreamState
from ptmkit.objectives.masking import ngram_lengths, select_runs
from ptmkit.objectives.stream import SentenceStream
from ptmkit.registry import register


@dataclass(frozen=True)
class PLMConfig:
    partial_k: int = 6  # K: the last 1/K of each factorisation order is predicted
    max_ngram: int = 5  # target spans of 1..max_ngram tokens, p(n) ~ 1/n
    separator: bool = True  # the separator token after every sentence of the stream

    def __post_init__(self) -> None:
        if not isinstance(self.partial_k, int) or isinstance(self.partial_k, bool) or self.partial_k < 1:
            raise PtmError(f"objective.partial_k must be an integer >= 1 (K = 6 in XLNet), got {self.partial_k!r}")
        if not isinstance(self.max_ngram, int) or self.max_ngram < 1:
            raise PtmError(f"objective.max_ngram must be an integer >= 1 (5 in XLNet), got {self.max_ngram!r}")


def factorisation_masks(targets: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``targets [B, T]`` bool -> ``(rank int64 [B, T], sees bool [B, T, T])``: the non-targets
    first (rank -1, one block), then the targets in a uniformly random order (ranks ``0..n_b-1``);
    ``sees[b, i, j] = rank[j] < max(rank[i], 0)``."""
    B, T = targets.shape
    keys = np.where(targets, rng.random((B, T)), -1.0)
    order = np.argsort(keys, axis=1, kind="stable")  # non-targets first, then targets by key
    rank = np.empty((B, T), dtype=np.int64)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(T), (B, T)), axis=1)
    rank = np.where(targets, rank - (T - targets.sum(1, keepdims=True)), -1)
    sees = rank[:, None, :] < np.maximum(rank, 0)[:, :, None]
    return rank, sees


class StreamMemory:
    """Transformer-XL's memory per stream, as :class:`~ptmkit.objectives.carried.StreamState`
    tensors: ``mems [S, L, mem_len, H]`` (right-aligned: the newest state last) and ``filled [S]``
    (how many of the ``mem_len`` slots hold states; fewer after the first blocks)."""

    def __init__(self, mem_len: int) -> None:
        self.mem_len = mem_len
        self.state = StreamState()

    def read(self, ids: torch.Tensor, steps: torch.Tensor, device) -> list[torch.Tensor] | None:
        """Per layer ``[b, m, H]`` for the rows ``ids`` at ``steps``, or ``None`` when they do not
        continue the block the memory was written at (the first block, a new epoch)."""
        got = self.state.read(ids, steps, device)
        if got is None:
            return None
        m = int(got["filled"].min())  # rows of one batch always hold the same number
        return list(got["mems"][:, :, self.mem_len - m :].unbind(1)) if m else None

    def write(self, ids: torch.Tensor, steps: torch.Tensor, new: list[torch.Tensor]) -> None:
        """Store ``new`` (per layer ``[b, m', H]``, ``m' <= mem_len``) for rows ``ids``."""
        block = torch.stack(new, dim=1)  # [b, L, m', H]
        m = block.shape[2]
        padded = block.new_zeros(*block.shape[:2], self.mem_len, block.shape[3])
        padded[:, :, self.mem_len - m :] = block
        self.state.write(ids, steps, {"mems": padded, "filled": torch.full((len(ids),), m, dtype=torch.int64)})

    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.load_state_dict(state)


@register("objective", "plm")
class PermutationLM(Objective):
    """XLNet's permutation LM with partial prediction (see the module docstring)."""

    config_class = PLMConfig
    encoders = ("xlnet",)
    hf_heads = ("lm",)
    reads_streams = True

    def __init__(self, cfg: PLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        eos = getattr(tokenizer, "eos_id", None)
        self.eos_id = int(eos if eos is not None else tokenizer.sep_id)
        self.stream = SentenceStream(cfg.separator, self.eos_id, self.pad_id)
        self.lm_bias = nn.Parameter(torch.zeros(int(encoder.config.vocab_size)))
        self.memory = StreamMemory(int(getattr(encoder.config, "mem_len", 0)))
        self._ngram_probs = ngram_lengths(cfg.max_ngram)

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Consecutive blocks ``[i T, (i + 1) T)`` of the stream, in stream order."""
        total = self.stream.length(corpus)
        n = total // seq_len
        if n < 1:
            raise PtmError(
                f"the corpus has {total} tokens (with separators), too few for one XLNet example of "
                f"seq_len={seq_len}; use a smaller seq_len or more text"
            )
        start = np.arange(n, dtype=np.int64) * seq_len
        return np.stack([start, start + seq_len], axis=1)

    def n_predict(self, lengths: np.ndarray) -> np.ndarray:
        """Targets per example: ``round(length / K)``, at least 1."""
        return np.maximum(1, np.rint(lengths / self.cfg.partial_k).astype(np.int64))

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        seq, inside = self.stream.read(corpus, spans)
        budget = np.minimum(self.n_predict(inside.sum(1)), inside.sum(1))
        n_slots = int(budget.max())
        starts = self.stream.word_starts(corpus, spans)  # n-grams of whole words where recorded
        positions, used, *_ = select_runs(inside, starts, budget, n_slots, self._ngram_probs, rng)
        targets = np.zeros_like(inside)  # unused slots point at position 0: mark only the used ones
        rows = np.broadcast_to(np.arange(len(seq))[:, None], positions.shape)
        targets[rows[used], positions[used]] = True
        _, sees = factorisation_masks(targets, rng)
        labels = np.where(used, np.take_along_axis(seq, positions, axis=1), IGNORE_INDEX)
        batch = {
            "input_ids": torch.from_numpy(np.ascontiguousarray(seq)),
            "sees": torch.from_numpy(sees),
            "target_positions": torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)),
            "labels": torch.from_numpy(labels.astype(np.int64)),
        }
        if not inside.all():
            batch["attention_mask"] = torch.from_numpy(inside.astype(np.int64))
        return batch

    # -- model ------------------------------------------------------------------------------
    carried_state_switch = "model.mem_len=0"

    @property
    def carries_state(self) -> bool:
        return self.memory.mem_len > 0

    def carried_state_dict(self) -> dict[str, Any]:
        return self.memory.state_dict()

    def load_carried_state_dict(self, state: dict[str, Any]) -> None:
        self.memory.load_state_dict(state)

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        ids = batch["input_ids"]
        recur = self.carries_state and "stream_ids" in batch
        mems = self.memory.read(batch["stream_ids"], batch["stream_steps"], ids.device) if recur else None
        out = backbone(
            ids, attention_mask=batch.get("attention_mask"), token_type_ids=batch.get("token_type_ids"),
            sees=batch["sees"], target_positions=batch["target_positions"], mems=mems, output_hidden_states=recur,
        )
        if recur:
            self.memory.write(batch["stream_ids"], batch["stream_steps"], backbone.update_mems(mems, out.hidden_states))
        labels = batch["labels"]
        g = out.extras["query"]
        loss = linear_cross_entropy(g.flatten(0, 1), backbone.output_embeddings(), self.lm_bias, labels.flatten())
        n_tokens = input_tokens(batch)
        return StepOutput(loss=loss, metrics={"plm_loss": loss.detach()}, n_tokens=n_tokens,
                          n_predictions=count((labels != IGNORE_INDEX).sum()))

    def logits(self, backbone: Encoder, query: torch.Tensor) -> torch.Tensor:
        """The tied output layer: ``query [..., H] -> [..., V]``."""
        return nn.functional.linear(query, backbone.output_embeddings(), self.lm_bias)

    @torch.no_grad()
    def lm_log_probs(self, backbone: Encoder, input_ids: torch.Tensor) -> torch.Tensor:
        """``log p(x_t | x_<t)`` for ``t = 1..T-1``, ``[B, T-1]``: the natural (identity) order,
        the query stream at every predicted position (no memory)."""
        B, T = input_ids.shape
        targets = torch.arange(1, T, device=input_ids.device).expand(B, T - 1)
        out = backbone(input_ids, causal=True, target_positions=targets)
        logp = torch.log_softmax(self.logits(backbone, out.extras["query"]).float(), dim=-1)
        return logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
