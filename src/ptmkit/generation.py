"""Text generation: one decoding loop for decoder-only LMs (GPT, GPT-2) and encoder–decoders (BART).

At each step the model gives next-token logits ``[B, V]`` and the loop picks one token per row:

* greedy: the arg-max;
* sampling: from ``softmax(logits / temperature)`` restricted to the ``top_k`` most likely tokens
  (Fan et al. 2018) and then to the nucleus, the smallest set of most likely tokens whose
  probability reaches ``top_p`` (Holtzman et al. 2020); all draws come from one seeded
  ``torch.Generator``, so a seed gives the same text every time;
* beam search (``num_beams > 1``, :mod:`ptmkit.beam_search`): the ``num_beams`` best hypotheses
  per prompt, scored ``sum log p / length ** length_penalty``, with HF transformers' stopping
  rules (``early_stopping``); the stepper's rows become ``prompts x beams`` and its cache follows
  the chosen hypotheses (``expand``, ``reorder``).

``no_repeat_ngram_size = n`` (any of them) bans every token that would repeat an n-gram of the
row's sequence (the prompt of a causal LM, or the decoder's start token, included).

A row that has produced ``eos_id`` is finished: its later tokens are ``pad_id`` and the loop ends
when every row is finished or ``max_new_tokens`` tokens exist.

The model side is a *stepper* with two calls, ``first() -> logits [B, V]`` (read the prompts)
and ``step(tokens [B]) -> logits [B, V]`` (append one token per row):

* :class:`CausalLMStepper`: a causal Transformer with a tied LM head.  Prompts of different
  lengths are left-padded, and each row's position ids count only its real tokens, so a row
  gets the same tokens in a batch as alone.  With the key/value cache each step runs the model
  on one position; ``use_cache=False`` re-runs the whole sequence (the reference it is tested
  against).
* :class:`Seq2SeqStepper`: an encoder–decoder (``encode`` once, then ``decode`` with its
  :class:`~ptmkit.encoders.encoder_decoder.DecoderCache`, one position a step), the decoder
  starting from ``decoder_start_token_id``.

* an objective's own stepper (``Objective.stepper``) when it decodes through its heads
  (``Objective.generates_with_heads``): UniLM reads the source, the tokens so far and a trailing
  [MASK] with a bidirectional encoder and predicts the [MASK] with its MLM head.

Which pre-trained models can generate is declared by their objective (``Objective.generation``:
``"causal_lm"``, ``"seq2seq"`` or ``None``); :func:`ptmkit.workflows.generate.generate` is the
entry point for a run directory or a loaded :class:`~ptmkit.pretrained.Pretrained`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Protocol, Sequence

import torch

from ptmkit.beam_search import beam_search
from ptmkit.errors import PtmError
from ptmkit.nn.fast_linear import linear
from ptmkit.nn.kv_cache import select_rows
from ptmkit.nn.ngram_ban import ban_repeated_ngrams

CAUSAL_LM = "causal_lm"
SEQ2SEQ = "seq2seq"
KINDS = (CAUSAL_LM, SEQ2SEQ)


@dataclass(frozen=True)
class GenerationConfig:
    """max_new_tokens: tokens to generate per prompt (fewer when every row reaches ``eos_id``).
    greedy: take the arg-max (``temperature``, ``top_k`` and ``top_p`` are then unused).
    temperature: > 0; logits are divided by it before sampling (< 1 sharpens, > 1 flattens).
    top_k: sample among the ``k`` most likely tokens only; 0 = all.
    top_p: sample from the nucleus of probability ``top_p``, in (0, 1]; 1 = all.
    seed: of the sampling generator.  use_cache: decode with the key/value cache.
    num_beams: 1 = greedy or sampling as above; k > 1 = beam search with k beams (deterministic:
    ``greedy`` is then irrelevant and ``temperature``, ``top_k``, ``top_p`` must keep their
    defaults, since beams are not sampled).
    length_penalty: beam search scores a finished hypothesis ``sum log p / length ** length_penalty``
    (> 0 favours longer outputs, < 0 shorter ones; 0 = the plain sum).
    early_stopping: beam search stops for a prompt when ``True``: ``num_beams`` hypotheses have
    finished; ``False``: no running hypothesis can beat the worst finished one at its current
    length; ``"never"``: ... nor at the longest length (HF transformers' rules).
    no_repeat_ngram_size: n > 0 bans tokens that would repeat an n-gram of the sequence; 0 = off.
    num_return_sequences: beam search returns this many hypotheses per prompt (<= num_beams),
    best first."""

    max_new_tokens: int = 32
    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    use_cache: bool = True
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    no_repeat_ngram_size: int = 0
    num_return_sequences: int = 1

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "top_k", "seed", "num_beams", "no_repeat_ngram_size", "num_return_sequences"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise PtmError(f"{name} must be an integer, got {value!r}")
        for name in ("temperature", "top_p", "length_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise PtmError(f"{name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        self._check_search()
        if self.max_new_tokens < 1:
            raise PtmError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.temperature > 0:
            raise PtmError(f"temperature must be > 0, got {self.temperature} (use greedy decoding for the arg-max)")
        if self.top_k < 0:
            raise PtmError(f"top_k must be >= 0 (0 = no top-k filtering), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise PtmError(f"top_p must be in (0, 1] (1 = no nucleus filtering), got {self.top_p}")

    def _check_search(self) -> None:
        if self.num_beams < 1:
            raise PtmError(f"num_beams must be >= 1 (1 = no beam search), got {self.num_beams}")
        if self.no_repeat_ngram_size < 0:
            raise PtmError(f"no_repeat_ngram_size must be >= 0 (0 = off), got {self.no_repeat_ngram_size}")
        if not (self.early_stopping is True or self.early_stopping is False or self.early_stopping == "never"):
            raise PtmError(f"early_stopping must be True, False or 'never', got {self.early_stopping!r}")
        if not 1 <= self.num_return_sequences <= self.num_beams:
            raise PtmError(
                f"num_return_sequences must be between 1 and num_beams={self.num_beams} (beam search returns its "
                f"best hypotheses), got {self.num_return_sequences}"
            )
        if self.num_beams == 1:
            unused = ([f"length_penalty={self.length_penalty}"] if self.length_penalty != 1.0 else []) + (
                [f"early_stopping={self.early_stopping!r}"] if self.early_stopping is not False else [])
            if unused:
                raise PtmError(f"{', '.join(unused)} only apply to beam search: set num_beams > 1, or leave them out")
            return
        defaults = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
        sampling = [f"{name}={getattr(self, name)}" for name, default in defaults.items() if getattr(self, name) != default]
        if sampling:
            raise PtmError(
                f"beam search (num_beams={self.num_beams}) does not sample, so {', '.join(sampling)} would be "
                f"ignored: leave them out, or sample with num_beams=1"
            )


# -- choosing the next token ---------------------------------------------------------------------
def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``logits [B, V]`` with every token below the ``k``-th largest logit of its row set to
    ``-inf`` (ties with the ``k``-th are kept); ``k = 0`` or ``k >= V`` keeps all."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # [B, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """``logits [B, V]`` restricted to the nucleus: the most likely tokens, in order, up to and
    including the first whose cumulative probability reaches ``p`` (at least one token); the
    others set to ``-inf``.  ``p = 1`` keeps all."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass of the more likely tokens
    drop_sorted = before >= p  # the first token (before = 0 < p) always stays
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def next_token_probs(logits: torch.Tensor, cfg: GenerationConfig) -> torch.Tensor:
    """The sampling distribution ``[B, V]``: temperature, then top-k, then top-p, then softmax."""
    logits = logits.float() / cfg.temperature
    return filter_top_p(filter_top_k(logits, cfg.top_k), cfg.top_p).softmax(dim=-1)


def choose(logits: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``logits [B, V]``: ``[B]`` int64."""
    if cfg.greedy:
        return logits.argmax(dim=-1)
    return torch.multinomial(next_token_probs(logits, cfg), 1, generator=generator)[:, 0]


# -- the model side ------------------------------------------------------------------------------
class Stepper(Protocol):
    batch_size: int
    capacity: int | None  # the most tokens it can generate (position limit), None = unbounded

    def first(self) -> torch.Tensor: ...

    def step(self, tokens: torch.Tensor) -> torch.Tensor: ...


class BeamStepper(Stepper, Protocol):
    """A stepper beam search can drive: its rows can be copied and reordered between steps."""

    def history(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens before the generated ones, ``ids [B, T0]`` and ``valid [B, T0]`` bool (the
        n-grams of ``no_repeat_ngram_size`` include them)."""
        ...

    def expand(self, k: int) -> None:
        """After ``first``: every row becomes ``k`` consecutive copies (``batch_size`` x ``k``)."""
        ...

    def reorder(self, rows: torch.Tensor) -> None:
        """Row ``i`` takes the state of row ``rows[i]`` (``rows [N]``, each among the copies of the
        same prompt): the next ``step`` continues those rows."""
        ...


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> ``input_ids [B, T]`` left-padded with ``pad_id`` and ``attention_mask [B, T]``."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    T = int(lengths.max())
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.arange(T)[None, :] >= (T - lengths)[:, None]  # [B, T]
    ids[mask] = torch.tensor([t for p in prompts for t in p], dtype=torch.long)
    return ids.to(device), mask.long().to(device)


def lm_logits(backbone: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Hidden states ``[..., H]`` -> vocabulary logits ``[..., V]`` through the tied output layer
    (oneDNN's product when decoding on CPU: half MKL's time at 8 rows of GPT-2's vocabulary)."""
    bias_of = getattr(backbone, "output_bias", None)
    return linear(hidden.contiguous(), backbone.output_embeddings(), bias_of() if bias_of is not None else None)


class CausalLMStepper:
    """A causal Transformer (``forward(..., causal=True, cache=...)``) over left-padded prompts
    ``input_ids [B, T]`` / ``attention_mask [B, T]`` (1 = token)."""

    def __init__(self, backbone: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 use_cache: bool = True) -> None:
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise PtmError("every prompt needs at least one token")
        self.backbone = backbone
        self.ids = input_ids
        self.mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        if not bool(self.mask[:, -1].all()):
            raise PtmError("prompts must be left-padded: the last position of every row is a real token")
        self.use_cache = use_cache
        self.batch_size = input_ids.shape[0]
        self.prompt = (input_ids, self.mask.bool())
        positions = backbone.max_positions()
        self.capacity = positions - input_ids.shape[1] if positions is not None else None
        self.padded = not bool(self.mask.all())
        self.cache = None
        self.next_pos = self.mask.sum(dim=1, keepdim=True) if self.padded else None  # [B, 1]

    def _positions(self, mask: torch.Tensor) -> torch.Tensor | None:
        """Each row's positions counted over its real tokens only (left padding shifts nothing)."""
        return (mask.cumsum(dim=1) - 1).clamp(min=0) if self.padded else None

    def _last_logits(self, out: Any) -> torch.Tensor:
        return lm_logits(self.backbone, out.last_hidden_state[:, -1])

    def first(self) -> torch.Tensor:
        mask = self.mask if self.padded else None
        if not self.use_cache:
            return self._last_logits(self.backbone(self.ids, attention_mask=mask, position_ids=self._positions(self.mask), causal=True))
        out = self.backbone(self.ids, attention_mask=mask, position_ids=self._positions(self.mask), causal=True,
                            cache=self.backbone.start_cache())
        self.cache = out.extras["cache"]
        return self._last_logits(out)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens[:, None]
        if not self.use_cache:
            self.ids = torch.cat([self.ids, tokens], dim=1)
            self.mask = torch.cat([self.mask, torch.ones_like(tokens)], dim=1)
            mask = self.mask if self.padded else None
            return self._last_logits(self.backbone(self.ids, attention_mask=mask, position_ids=self._positions(self.mask), causal=True))
        out = self.backbone(tokens, position_ids=self.next_pos, causal=True, cache=self.cache)
        if self.next_pos is not None:
            self.next_pos = self.next_pos + 1
        self.cache = out.extras["cache"]
        return self._last_logits(out)

    def history(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.prompt

    def expand(self, k: int) -> None:
        self.reorder(torch.arange(self.batch_size, device=self.ids.device).repeat_interleave(k))

    def reorder(self, rows: torch.Tensor) -> None:
        if self.cache is not None:
            self.cache = self.cache.select(rows)
        if self.next_pos is not None:
            self.next_pos = self.next_pos.index_select(0, rows)
        if not self.use_cache:  # the sequences are re-read every step
            self.ids, self.mask = self.ids.index_select(0, rows), self.mask.index_select(0, rows)
        self.batch_size = rows.shape[0]


class Seq2SeqStepper:
    """An encoder–decoder (``encode``, ``start_cache``, ``decode``, ``logits``) reading the sources
    ``input_ids [B, S]`` / ``attention_mask [B, S]``; the decoder starts from
    ``config.decoder_start_token_id``."""

    def __init__(self, encoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 use_cache: bool = True) -> None:
        self.encoder = encoder
        self.attention_mask = attention_mask
        self.use_cache = use_cache
        self.batch_size = input_ids.shape[0]
        self.capacity = encoder.max_positions()  # decoder positions: the start token and L - 1 generated
        self.memory = encoder.encode(input_ids, attention_mask).last_hidden_state  # [B, S, H]
        self.prefix = torch.full((self.batch_size, 1), encoder.config.decoder_start_token_id, dtype=torch.long,
                                 device=input_ids.device)
        self.cache = encoder.start_cache(self.memory, attention_mask) if use_cache else None

    def _run(self, new: torch.Tensor) -> torch.Tensor:
        if self.use_cache:
            dec = self.encoder.decode(new, cache=self.cache)
            self.cache = dec.extras["cache"]
        else:
            dec = self.encoder.decode(self.prefix, self.memory, self.attention_mask)
        return self.encoder.logits(dec.last_hidden_state[:, -1])

    def first(self) -> torch.Tensor:
        return self._run(self.prefix)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens[:, None]
        self.prefix = torch.cat([self.prefix, tokens], dim=1)
        return self._run(tokens)

    def history(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.prefix[:, :1], torch.ones_like(self.prefix[:, :1], dtype=torch.bool)  # the start token

    def expand(self, k: int) -> None:
        """The encoder ran once; its states (with the cache: their cross-attention keys and values)
        are copied to the ``k`` rows of each source."""
        rows = torch.arange(self.batch_size, device=self.prefix.device).repeat_interleave(k)
        self.prefix = self.prefix.index_select(0, rows)
        if self.use_cache:
            c = self.cache
            self.cache = replace(c, self_kv=select_rows(c.self_kv, rows), cross_kv=select_rows(c.cross_kv, rows),
                                 cross_mask=c.cross_mask.index_select(0, rows) if c.cross_mask is not None else None)
        else:
            self.memory = self.memory.index_select(0, rows)
            if self.attention_mask is not None:
                self.attention_mask = self.attention_mask.index_select(0, rows)
        self.batch_size = rows.shape[0]

    def reorder(self, rows: torch.Tensor) -> None:
        """Rows move among the copies of one source, whose encoder states are equal: only the
        decoder's own state (its inputs, its self-attention cache) is gathered."""
        self.prefix = self.prefix.index_select(0, rows)
        if self.use_cache:
            self.cache = replace(self.cache, self_kv=select_rows(self.cache.self_kv, rows))


# -- the loop ------------------------------------------------------------------------------------
@torch.no_grad()
def decode(stepper: Stepper, cfg: GenerationConfig, eos_id: int | None = None, pad_id: int = 0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Generate up to ``cfg.max_new_tokens`` tokens per row: ``[B, L]`` int64 (``L <= max_new_tokens``);
    a row's tokens after its ``eos_id`` are ``pad_id``.  ``generator`` defaults to one seeded with
    ``cfg.seed`` on the logits' device.  With ``cfg.num_beams > 1`` (beam search, a
    :class:`BeamStepper`): ``[B * num_return_sequences, L]``, each prompt's hypotheses best first."""
    steps = cfg.max_new_tokens if stepper.capacity is None else min(cfg.max_new_tokens, stepper.capacity)
    if cfg.num_beams > 1:
        return _beam_decode(stepper, cfg, steps, eos_id, pad_id)
    history = getattr(stepper, "history", None)
    seq, valid = history() if cfg.no_repeat_ngram_size > 0 and history is not None else (None, None)
    logits = stepper.first()
    if generator is None and not cfg.greedy:
        generator = torch.Generator(device=logits.device).manual_seed(cfg.seed)
    done = torch.zeros(stepper.batch_size, dtype=torch.bool, device=logits.device)
    if cfg.no_repeat_ngram_size > 0 and seq is None:  # only the generated tokens
        seq = torch.zeros(stepper.batch_size, 0, dtype=torch.long, device=logits.device)
        valid = torch.ones_like(seq, dtype=torch.bool)
    out: list[torch.Tensor] = []
    for i in range(steps):  # one step per generated position; each step is vectorised over the batch
        if seq is not None:
            logits = ban_repeated_ngrams(logits, seq, cfg.no_repeat_ngram_size, valid)
        nxt = choose(logits, cfg, generator)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        out.append(nxt)
        if seq is not None:
            seq = torch.cat([seq, nxt[:, None]], dim=1)
            valid = torch.cat([valid, torch.ones_like(done[:, None])], dim=1)
        if eos_id is not None:
            done = done | (nxt == eos_id)
            if bool(done.all()):
                break
        if i + 1 < steps:
            logits = stepper.step(nxt)
    return torch.stack(out, dim=1) if out else torch.zeros(stepper.batch_size, 0, dtype=torch.long, device=logits.device)


def _beam_decode(stepper: Any, cfg: GenerationConfig, steps: int, eos_id: int | None, pad_id: int) -> torch.Tensor:
    """Beam search: ``[B * R, L]``, prompt ``b``'s ``R = num_return_sequences`` hypotheses at rows
    ``b*R .. b*R + R - 1``, best first, ``pad_id`` after each one's end."""
    missing = [m for m in ("expand", "reorder") if not callable(getattr(stepper, m, None))]
    if missing:
        raise PtmError(
            f"beam search needs a decoder whose rows can be copied and reordered ({', '.join(missing)}), and "
            f"{type(stepper).__name__} has none: decode it with num_beams=1"
        )
    if steps < 1:
        return torch.zeros(stepper.batch_size * cfg.num_return_sequences, 0, dtype=torch.long)
    history = getattr(stepper, "history", None)
    hyp = beam_search(stepper, steps, cfg.num_beams, length_penalty=cfg.length_penalty,
                      early_stopping=cfg.early_stopping, no_repeat_ngram_size=cfg.no_repeat_ngram_size,
                      num_return_sequences=cfg.num_return_sequences, eos_id=eos_id, pad_id=pad_id,
                      history=history() if history is not None else None)
    return hyp.tokens.flatten(0, 1)


def _check_context(lengths: list[int], max_new_tokens: int, max_position: int | None) -> None:
    if max_position is None:
        return
    longest = max(lengths)
    if longest > max_position:
        raise PtmError(
            f"the prompt has {longest} tokens, more than the model's context of {max_position} positions; "
            f"shorten the prompt"
        )
    if longest + max_new_tokens > max_position:
        raise PtmError(
            f"the prompt has {longest} tokens and max_new_tokens={max_new_tokens}: {longest + max_new_tokens} positions, "
            f"more than the model's context of {max_position}; use max_new_tokens <= {max_position - longest} "
            f"or a shorter prompt"
        )


@torch.no_grad()
def generate_ids(backbone: Any, kind: str, prompts: Sequence[Sequence[int]], cfg: GenerationConfig,
                 eos_id: int | None = None, pad_id: int = 0, objective: Any = None) -> list[list[int]]:
    """Generate for token-id prompts: per prompt the new ids, cut after ``eos_id`` (which is kept);
    with beam search and ``num_return_sequences = R``, ``R`` lists per prompt, best first (prompt
    ``i``'s at ``i*R .. i*R + R - 1``).

    ``kind="causal_lm"``: the prompts are the text to continue (left-padded together);
    ``kind="seq2seq"``: they are the encoder's sources (right-padded) and the decoder writes the output.
    objective: an objective that decodes through its heads (``generates_with_heads``); its
    ``stepper(backbone, input_ids, attention_mask, use_cache)`` replaces the kind's stepper.
    """
    if kind not in KINDS:
        raise PtmError(f"generation kind must be one of {KINDS}, got {kind!r}")
    if not prompts:
        return []
    lengths = [len(p) for p in prompts]
    if min(lengths) == 0:
        raise PtmError("every prompt needs at least one token")
    device = backbone.output_embeddings().device
    positions = backbone.max_positions()
    was_training = backbone.training
    heads_training = objective.training if objective is not None else False
    backbone.eval()
    if objective is not None:
        objective.eval()
    try:
        if kind == CAUSAL_LM:
            if getattr(backbone.config, "positions", "absolute") != "absolute":
                positions = None
            _check_context(lengths, cfg.max_new_tokens, positions)
            ids, mask = left_pad(prompts, pad_id, device)
            stepper: Stepper = (CausalLMStepper(backbone, ids, mask, cfg.use_cache) if objective is None
                                else objective.stepper(backbone, ids, mask, cfg.use_cache))
        else:
            if positions is not None and max(lengths) > positions:
                raise PtmError(f"the source has {max(lengths)} tokens, more than the model's {positions} positions")
            ids, mask = left_pad([list(p)[::-1] for p in prompts], pad_id, device)  # right padding: flip twice
            ids, mask = ids.flip(1), mask.flip(1)
            stepper = (Seq2SeqStepper(backbone, ids, mask, cfg.use_cache) if objective is None
                       else objective.stepper(backbone, ids, mask, cfg.use_cache))
        out = decode(stepper, cfg, eos_id, pad_id).tolist()
    finally:
        backbone.train(was_training)
        if objective is not None:
            objective.train(heads_training)
    if eos_id is not None:
        out = [row[: row.index(eos_id) + 1] if eos_id in row else row for row in out]
    return out


__all__ = [
    "CAUSAL_LM", "SEQ2SEQ", "BeamStepper", "CausalLMStepper", "GenerationConfig", "Seq2SeqStepper", "choose", "decode",
    "filter_top_k", "filter_top_p", "generate_ids", "left_pad", "next_token_probs",
]
