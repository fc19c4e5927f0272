"""Beam search over a decoding stepper (:mod:`ptmkit.generation`), with HF transformers' semantics.

Each prompt keeps ``k = num_beams`` running hypotheses; the ``B`` prompts' ``B * k`` hypotheses
are the rows of one batch (prompt ``b``'s at rows ``b*k .. b*k + k - 1``).  The stepper reads the
prompts once (``first``), copies each prompt's state to its ``k`` rows (``expand``) and, after
every step, gathers the rows of the hypotheses that go on (``reorder``: the key/value cache
follows its hypothesis).

One step, per prompt:

1. every running hypothesis ``h`` and token ``w`` give a candidate of score
   ``score(h) + log p(w | h)`` (log-probabilities in float32; tokens that would repeat an n-gram
   get ``-inf``); at the first step only beam 0 is live (the others start at ``-1e9``);
2. the ``2k`` best candidates are kept: however many of them end, ``k`` can go on;
3. the ``k`` best candidates that do not end (``eos_id``, or the last step) are the next running
   hypotheses;
4. candidates among the ``k`` best that end are scored ``sum log p / length ** length_penalty``
   (``length`` = generated tokens, ``eos_id`` included) and compete with the finished
   hypotheses for the ``k`` places of the finished list.

A prompt stops accepting finished hypotheses when its best running hypothesis can no longer
beat its worst finished one (``early_stopping=False``: judged at the current length;
``"never"``: at the longest possible length when ``length_penalty > 0``), or, with
``early_stopping=True``, as soon as ``k`` hypotheses have finished.  The loop ends when no prompt
accepts any more, or after the last step.  Out-of-range scores are ``-1e9`` sums as in HF, so
ties and the order of hypotheses come out as HF's do.

Every step is vectorised over the ``B * k`` rows and the ``B * 2k`` candidates; the only Python
loop is the one over steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ptmkit.nn.ngram_ban import ban_repeated_ngrams

OUT = -1.0e9  # the score of a place that holds nothing (HF's value, so equal sums tie alike)


@dataclass
class BeamHypotheses:
    """The finished hypotheses of each prompt, best first.

    tokens ``[B, R, L]`` int64 (``L`` = the longest; ``pad_id`` after a hypothesis's end);
    scores ``[B, R]`` float32 (``sum log p / length ** length_penalty``); lengths ``[B, R]``."""

    tokens: torch.Tensor
    scores: torch.Tensor
    lengths: torch.Tensor


def _take(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``t [B, K, ...]`` at the places ``index [B, J]`` of each row: ``[B, J, ...]``."""
    return t.gather(1, index.view(*index.shape, *([1] * (t.dim() - 2))).expand(*index.shape, *t.shape[2:]))


@torch.no_grad()
def beam_search(stepper: Any, steps: int, num_beams: int, *, length_penalty: float = 1.0,
                early_stopping: bool | str = False, no_repeat_ngram_size: int = 0, num_return_sequences: int = 1,
                eos_id: int | None = None, pad_id: int = 0,
                history: tuple[torch.Tensor, torch.Tensor] | None = None) -> BeamHypotheses:
    """Search ``steps`` (>= 1) new tokens per prompt with ``num_beams`` beams; the
    ``num_return_sequences`` best finished hypotheses per prompt.

    stepper: ``first() -> [B, V]``, ``expand(k)``, ``reorder(rows [B*k])``, ``step(tokens [B*k]) ->
    [B*k, V]``.  history: the tokens before the generated ones, ``ids [B, T0]`` and ``valid
    [B, T0]`` (the prompt of a causal LM, the decoder's start token), which n-grams include."""
    k = num_beams
    logits = stepper.first()  # [B, V]: the prompts are read once, then copied to their beams
    B, V = logits.shape
    device = logits.device
    stepper.expand(k)
    logits = logits.repeat_interleave(k, dim=0)  # [B*k, V]
    keep = 2 * k  # candidates kept per prompt: even when k of them end, k others go on
    among_best = torch.arange(keep, device=device) < k  # [2k]: only these may finish
    first_row = torch.arange(B, device=device)[:, None] * k  # [B, 1]: a prompt's first row
    if history is not None and no_repeat_ngram_size > 0:
        past_ids, past_valid = (h.repeat_interleave(k, dim=0) for h in history)
    else:
        past_ids = torch.zeros(B * k, 0, dtype=torch.long, device=device)
        past_valid = torch.ones(B * k, 0, dtype=torch.bool, device=device)

    run_tokens = torch.zeros(B, k, 0, dtype=torch.long, device=device)
    run_scores = torch.zeros(B, k, device=device)
    run_scores[:, 1:] = OUT  # the beams are copies: only beam 0's candidates count at first
    fin_tokens = torch.full((B, k, steps), pad_id, dtype=torch.long, device=device)
    fin_scores = torch.full((B, k), OUT, device=device)
    fin_lengths = torch.zeros(B, k, dtype=torch.long, device=device)
    fin_real = torch.zeros(B, k, dtype=torch.bool, device=device)  # the place holds a finished hypothesis
    improvable = torch.ones(B, 1, dtype=torch.bool, device=device)  # a running hypothesis may still win

    for n in range(1, steps + 1):  # n: the length of the hypotheses after this step
        logp = F.log_softmax(logits.float(), dim=-1)  # [B*k, V]
        if no_repeat_ngram_size > 0:
            seq = torch.cat([past_ids, run_tokens.reshape(B * k, n - 1)], dim=1)
            valid = torch.cat([past_valid, past_valid.new_ones(B * k, n - 1)], dim=1)
            logp = ban_repeated_ngrams(logp, seq, no_repeat_ngram_size, valid)
        total = (logp.view(B, k, V) + run_scores[:, :, None]).view(B, k * V)
        cand_scores, cand = total.topk(keep, dim=1)  # [B, 2k], best first
        parent, token = cand // V, cand % V
        cand_tokens = torch.cat([_take(run_tokens, parent), token[:, :, None]], dim=2)  # [B, 2k, n]
        if n == steps:
            ends = torch.ones_like(token, dtype=torch.bool)
        elif eos_id is not None:
            ends = token == eos_id
        else:
            ends = torch.zeros_like(token, dtype=torch.bool)

        # the k best candidates that do not end go on
        going = cand_scores + ends.float() * OUT
        best = going.topk(k, dim=1).indices  # [B, k]
        run_scores, run_tokens, run_parent = going.gather(1, best), _take(cand_tokens, best), parent.gather(1, best)

        # candidates among the k best that end compete for the finished places
        finishing = ends & among_best
        scored = cand_scores / (n ** length_penalty)
        if early_stopping is True:  # a prompt with k finished hypotheses takes no more
            scored += fin_real.all(dim=1, keepdim=True).float() * OUT
        scored += (~improvable).float() * OUT
        scored += (~finishing).float() * OUT
        all_scores = torch.cat([fin_scores, scored], dim=1)  # [B, 3k]
        winners = all_scores.topk(k, dim=1).indices
        fin_scores = all_scores.gather(1, winners)
        fin_real = torch.cat([fin_real, finishing], dim=1).gather(1, winners)
        fin_lengths = torch.cat([fin_lengths, torch.full_like(cand, n)], dim=1).gather(1, winners)
        padded = F.pad(cand_tokens, (0, steps - n), value=pad_id)  # [B, 2k, steps]
        fin_tokens = _take(torch.cat([fin_tokens, padded], dim=1), winners)

        # could a running hypothesis still beat the worst finished one?  (sticky: once no, no)
        hoped = steps if early_stopping == "never" and length_penalty > 0.0 else n
        best_running = run_scores[:, :1] / (hoped ** length_penalty)
        worst_finished = torch.where(fin_real, fin_scores.min(dim=1, keepdim=True).values, OUT)
        improvable = improvable & (best_running > worst_finished).any(dim=1, keepdim=True)
        searching = improvable.any()
        if early_stopping is True:
            searching = searching & ~fin_real.all()
        if n == steps or not bool(searching):  # one host synchronisation per step
            break
        stepper.reorder((run_parent + first_row).view(-1))  # each row continues its parent's past
        logits = stepper.step(run_tokens[:, :, -1].reshape(-1))

    R = num_return_sequences
    lengths = fin_lengths[:, :R]
    L = int(lengths.max())
    return BeamHypotheses(fin_tokens[:, :R, :L], fin_scores[:, :R], lengths)


__all__ = ["BeamHypotheses", "beam_search"]
