"""UniLM (Dong et al. 2019): one Transformer pre-trained as four language models by the
self-attention mask alone.

Every example is ``[CLS] A [SEP] B [SEP]``, where A and B are consecutive text of one document
(cut at a sentence boundary, as :meth:`MaskedLM.split_spans`).  Tokens are masked as in BERT
(the configured masker of :mod:`ptmkit.objectives.masking`: 15 %, 80/10/10) and every masked
token is predicted by the MLM head (:class:`~ptmkit.objectives.mlm.MLMHead`, decoder tied to the
word embeddings) from the final hidden state at its position, in every mode: the modes differ
only in which keys each query may attend to, ``M[i, j]`` (True = position ``i`` sees ``j``):

===============  ===============================================  ==================
mode             ``M[i, j]``                                      segment ids (A, B)
===============  ===============================================  ==================
bidirectional    every real token                                 0, 1
left_to_right    ``j <= i``                                       2, 2
right_to_left    ``j >= i``                                       3, 3
seq2seq          ``j < s or j <= i``, ``s = len([CLS] A [SEP])``  4, 5
===============  ===============================================  ==================

In seq2seq mode the source ``[CLS] A [SEP]`` attends within itself bidirectionally and the target
``B [SEP]`` attends to the whole source and to its own left context.  The LM modes read the text
as one segment.  The segment ids follow the paper's use of a different segment embedding per
LM objective; they need ``model.type_vocab_size >= 6`` (the ``unilm-*`` presets).  With fewer
segment embeddings (2: a BERT checkpoint) every mode uses 0 for A and 1 for B and the LM modes 0.

Mode mix: the paper mixes the objectives *within* a batch (1/3 bidirectional, 1/6 left-to-right,
1/6 right-to-left, 1/3 seq2seq), so each example draws its own mode from ``objective.mix``
(over ``objective.modes``) with the ``rng`` given to :meth:`collate`; the attention pattern is
therefore per example, ``[B, 1, T, T]``, given to the encoder as its ``attn_mask`` (combined with
the key padding of ``attention_mask``).  The paper's next sentence prediction in the
bidirectional mode is left out (``nsp`` is refused).

Batch keys: ``input_ids``, ``attention_mask``, ``token_type_ids`` ``[B, T]``; ``mlm_positions``,
``mlm_labels`` ``[B, P]``; ``unilm_mode [B]`` (index into :data:`MODES`); ``source_len [B]``
(``s`` above).  The ``[B, 1, T, T]`` mask is built in ``forward`` (:func:`attention_pattern`),
not carried in the batch.  Loss: mean cross-entropy over the masked tokens (``mlm_loss``).

Seq2seq fine-tuning (``objective.seq2seq_finetune=true``): ``ptm pretrain unilm-tiny --init-from
RUN --data pairs.txt -o OUT objective.seq2seq_finetune=true``.  Each document of the corpus is one
(source, target) pair: its first line the source, the following lines the target, and a blank
line between pairs (``ptm prepare`` reads lines as sentences and blank lines as document ends; a
tab would be lost to the tokenizer's whitespace splitting, so a TSV file is converted with
:func:`write_pairs`).  Every example is in seq2seq mode, and only target tokens are masked: a share
``objective.target_mask_prob`` of them (rounded, at least one; the final [SEP] is one of them:
predicting it teaches the model to end); no source token is ever predicted.  A pair longer than ``seq_len - 3`` tokens is
cut, the source losing its beginning and the target its end: the source keeps at least
``min(its length, half the room)``, the target the rest, and a short target leaves its unused
room to the source.

Decoding (:class:`UniLMStepper`): the source ``[CLS] x [SEP]`` is followed by a ``[MASK]``; the
MLM head's logits at the ``[MASK]`` give the next token, which replaces it, and a new ``[MASK]``
is appended, until [SEP] or ``max_new_tokens``.  The objective declares ``generation =
"seq2seq"`` and ``generates_with_heads``, so ``ptm generate RUN "source text"`` and
``ptmkit.generate`` load the MLM head and run this stepper in the one decoding loop of
:mod:`ptmkit.generation` (greedy, sampling, top-k/top-p).  It re-reads the whole sequence each
step (the source attends bidirectionally, so the encoder's causal key/value cache does not
apply; ``use_cache`` is accepted and ignored).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.objectives.base import CorpusLike, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.masking import Masker
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.registry import register

log = logging.getLogger(__name__)

MODES = ("bidirectional", "left_to_right", "right_to_left", "seq2seq")
BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ = range(4)
PAPER_MIX = (1 / 3, 1 / 6, 1 / 6, 1 / 3)
# (segment of A, segment of B) per mode with >= 6 segment embeddings, and with 2..5
SEGMENTS_6 = np.array([[0, 1], [2, 2], [3, 3], [4, 5]], dtype=np.int64)
SEGMENTS_2 = np.array([[0, 1], [0, 0], [0, 0], [0, 1]], dtype=np.int64)


@dataclass(frozen=True)
class UniLMConfig(MLMConfig):
    """MLM keys (masker, ``mask_prob``, ratios, ``max_predictions``) plus:

    modes / mix: the attention modes drawn per example and their probabilities (sum 1).
    seq2seq_finetune: fine-tuning on (source, target) pairs, target-only masking.
    target_mask_prob: share of target tokens masked in fine-tuning."""

    nsp: bool = False
    modes: tuple[str, ...] = MODES
    mix: tuple[float, ...] = PAPER_MIX
    seq2seq_finetune: bool = False
    target_mask_prob: float = 0.7

    def __post_init__(self) -> None:
        if self.nsp:
            raise PtmError("objective.nsp is not part of this UniLM (no next sentence prediction); set objective.nsp=false")
        super().__post_init__()
        modes = tuple(str(m) for m in (self.modes if isinstance(self.modes, (list, tuple)) else (self.modes,)))
        for m in modes:
            if m not in MODES:
                raise PtmError(f"unknown objective.modes entry {m!r}{suggest(m, MODES)}; one of {', '.join(MODES)}")
        if len(set(modes)) != len(modes) or not modes:
            raise PtmError(f"objective.modes must name each mode at most once, got {list(modes)}")
        mix = self.mix if isinstance(self.mix, (list, tuple)) else (self.mix,)
        try:
            mix = tuple(float(p) for p in mix)
        except (TypeError, ValueError):
            raise PtmError(f"objective.mix must be numbers, got {list(mix)}") from None
        if len(mix) != len(modes):
            raise PtmError(f"objective.mix has {len(mix)} entries but objective.modes {len(modes)}; give one per mode")
        if min(mix) < 0 or abs(sum(mix) - 1.0) > 1e-3:
            raise PtmError(
                f"objective.mix must be probabilities >= 0 summing to 1, got {list(mix)} (sum {sum(mix):.4f}); "
                f"the paper's mix over {', '.join(MODES)} is 1/3, 1/6, 1/6, 1/3"
            )
        object.__setattr__(self, "modes", modes)
        object.__setattr__(self, "mix", mix)
        if isinstance(self.target_mask_prob, str):
            object.__setattr__(self, "target_mask_prob", float(self.target_mask_prob))
        if not 0.0 < self.target_mask_prob <= 1.0:
            raise PtmError(f"objective.target_mask_prob must be in (0, 1], got {self.target_mask_prob}")


def attention_pattern(mode: torch.Tensor, source_len: torch.Tensor, length: int) -> torch.Tensor:
    """The self-attention mask of each example: ``bool [B, T, T]``, True where query ``i`` may
    attend to key ``j``.

    mode ``[B]``: index into :data:`MODES`; source_len ``[B]``: ``s``, the length of
    ``[CLS] A [SEP]`` (used by seq2seq).  Padding is not masked here (the encoder hides padded
    keys through ``attention_mask``).  Every mode is ``j < prefix or j <= i`` (bidirectional:
    prefix ``T``; left-to-right: 0; seq2seq: ``s``) except right-to-left, ``j >= i``.
    """
    device = mode.device
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    prefix = torch.where(mode == BIDIRECTIONAL, torch.full_like(source_len, length),
                         torch.where(mode == SEQ2SEQ, source_len, torch.zeros_like(source_len)))
    allowed = (j[None] < prefix[:, None, None]) | (j <= i)[None]
    return torch.where((mode == RIGHT_TO_LEFT)[:, None, None], (j >= i)[None], allowed)


@register("objective", "unilm")
class UniLM(MaskedLM):
    """UniLM's four masked LMs by attention mask (see the module docstring).  Parameters:
    ``mlm_head.*`` (as :class:`MaskedLM`)."""

    config_class = UniLMConfig
    hf_heads = ("mlm",)
    generation = "seq2seq"
    generates_with_heads = True

    def __init__(self, cfg: UniLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        n_seg = int(self.model_cfg.type_vocab_size)
        self.segments = SEGMENTS_6 if n_seg >= 6 else SEGMENTS_2 if n_seg >= 2 else np.zeros((4, 2), np.int64)
        self.mode_index = np.array([MODES.index(m) for m in cfg.modes], dtype=np.int64)
        self.mix = np.asarray(cfg.mix, dtype=np.float64) / sum(cfg.mix)
        # Fine-tuning masks target tokens only, the final [SEP] included (it is the end signal).
        target_unmaskable = np.array(sorted({self.pad_id, self.cls_id, self.mask_id}), dtype=np.int64)
        self.target_masker = Masker(
            "token", mask_id=self.mask_id, random_pool=self._random_pool, unmaskable=target_unmaskable,
            mask_prob=cfg.target_mask_prob, mask_token_ratio=cfg.mask_token_ratio,
            random_token_ratio=cfg.random_token_ratio, max_predictions=None,
        )

    @property
    def sentence_pairs(self) -> bool:
        return True  # every example is [CLS] A [SEP] B [SEP]

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Pre-training: as MLM with pairs.  Fine-tuning: one span per document (a pair) of at
        least two lines; one-line documents are skipped with a warning."""
        if not self.cfg.seq2seq_finetune:
            return super().example_spans(corpus, seq_len)
        if seq_len < 5:
            raise PtmError(f"seq_len={seq_len} is too short for seq2seq pairs (need at least 5)")
        sent = np.asarray(corpus.sentences, dtype=np.int64)
        docs = np.asarray(corpus.documents, dtype=np.int64)
        lines = np.diff(docs)
        ok = lines >= 2
        if not ok.any():
            raise PtmError(
                "objective.seq2seq_finetune=true reads each document as a pair (a source line, then target "
                "lines) but no document has two lines; ptmkit.objectives.unilm.write_pairs converts a "
                "source<TAB>target file"
            )
        if not ok.all():
            log.warning("seq2seq fine-tuning: %d one-line documents are not pairs and are skipped", int((~ok).sum()))
        st, en = sent[docs[:-1][ok]], sent[docs[1:][ok]]
        cut = sent[docs[:-1][ok] + 1]
        # Too long for seq_len: the source keeps min(its length, half the room), the target the rest,
        # and the source takes back what a short target leaves.
        budget = seq_len - 3
        lb = np.minimum(en - cut, budget - np.minimum(cut - st, budget // 2))
        la = np.minimum(cut - st, budget - lb)
        return np.stack([cut - la, cut + lb], axis=1)

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        n = len(spans)
        if self.cfg.seq2seq_finetune:
            st, cut, en = self._pair_cut(corpus, spans)
            mode = np.full(n, SEQ2SEQ, dtype=np.int64)
        else:
            st, cut, en = self.split_spans(corpus, spans, rng)
            mode = self.mode_index[rng.choice(len(self.mode_index), size=n, p=self.mix)]
        ids, segment, word_starts, length = self.pair_inputs(corpus, st, cut, cut, en)
        source_len = cut - st + 2  # [CLS] A [SEP]
        T = ids.shape[1]
        j = np.arange(T)[None, :]
        inside = j < length[:, None]
        seg = np.where(segment == 0, self.segments[mode, 0][:, None], self.segments[mode, 1][:, None])
        segment = np.where(inside, seg, 0)
        if self.cfg.seq2seq_finetune:
            batch = self._finish_target_only(ids, segment, length, source_len, rng)
        else:
            batch = self.finish_batch({}, spans, ids, segment, word_starts, length, rng)
        batch["unilm_mode"] = torch.from_numpy(mode)
        batch["source_len"] = torch.from_numpy(source_len.astype(np.int64))
        return batch

    @staticmethod
    def _pair_cut(corpus: CorpusLike, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A pair's source (the rest of its first line) and target: ``st, cut, en`` ``[B]`` with
        source ``[st, cut)`` and target ``[cut, en)``."""
        sent = np.asarray(corpus.sentences, dtype=np.int64)
        st, en = spans[:, 0], spans[:, 1]
        return st, sent[np.searchsorted(sent, st, side="right")], en

    def _finish_target_only(self, ids, segment, length, source_len, rng) -> dict[str, torch.Tensor]:
        """Mask only target positions (``source_len <= j < length``, the last [SEP] included)."""
        T = ids.shape[1]
        j = np.arange(T)[None, :]
        attention = (j < length[:, None]).astype(np.int64)
        target = ((j >= source_len[:, None]) & (j < length[:, None])).astype(np.int64)
        masked = self.target_masker(ids, target, rng)
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(attention)}
        if self.model_cfg.type_vocab_size > 0:
            batch["token_type_ids"] = torch.from_numpy(segment)
        self.add_predictions(batch, masked)
        return batch

    # -- model ------------------------------------------------------------------------------
    def exported_heads(self) -> tuple[str, ...]:
        return ("mlm",)

    def hidden(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Final hidden states ``[B, T, H]`` under each example's mode mask."""
        ids = batch["input_ids"]
        pattern = attention_pattern(batch["unilm_mode"].to(ids.device), batch["source_len"].to(ids.device), ids.shape[1])
        out = backbone(ids, attention_mask=batch.get("attention_mask"), token_type_ids=batch.get("token_type_ids"),
                       attn_mask=pattern[:, None])
        return out.last_hidden_state

    def stepper(self, backbone: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                use_cache: bool = True) -> "UniLMStepper":
        """Seq2seq decoding from the right-padded sources ``[CLS] x [SEP]`` ``input_ids [B, S]``."""
        return UniLMStepper(self, backbone, input_ids, attention_mask)

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        h = self.hidden(backbone, batch)
        loss, metrics, n_predictions = self.mlm_loss(h, batch, backbone.output_embeddings())
        n_tokens = input_tokens(batch)
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=n_predictions)


class UniLMStepper:
    """A :class:`ptmkit.generation.Stepper` for UniLM's seq2seq decoding.

    input_ids ``[B, S]``: the sources ``[CLS] x [SEP]``, right-padded; attention_mask ``[B, S]``
    (1 = token).  The sequence is ``sources + generated + [MASK]``, read with the seq2seq mask
    (``source_len = S``; padded source keys are hidden by the attention mask) and per-row
    position ids that skip the padding, so a row decodes as it would alone; the logits are the
    MLM head's at the final ``[MASK]``, ``[B, V]``."""

    def __init__(self, objective: UniLM, backbone: Encoder, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor | None = None) -> None:
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise PtmError("every source needs at least one token")
        self.objective, self.backbone = objective, backbone
        B, S = input_ids.shape
        device = input_ids.device
        src_mask = attention_mask.long() if attention_mask is not None else torch.ones_like(input_ids)
        self.batch_size = B
        self.source_len = torch.full((B,), S, dtype=torch.long, device=device)
        self.segments = torch.tensor(objective.segments[SEQ2SEQ], device=device)  # (A, B) ids
        self.ids = torch.cat([input_ids, torch.full((B, 1), objective.mask_id, device=device)], dim=1)
        self.mask = torch.cat([src_mask, torch.ones(B, 1, dtype=torch.long, device=device)], dim=1)
        max_position = backbone.max_positions()
        if max_position is not None and S >= max_position:
            raise PtmError(f"the source has {S} tokens; the model has {max_position} positions")
        self.capacity = max_position - S if max_position is not None else None

    def _logits(self) -> torch.Tensor:
        B, T = self.ids.shape
        S = int(self.source_len[0])
        j = torch.arange(T, device=self.ids.device)[None, :]
        token_types = None
        if self.objective.model_cfg.type_vocab_size > 0:
            token_types = torch.where(j < S, self.segments[0], self.segments[1]).expand(B, T) * self.mask
        mode = torch.full((B,), SEQ2SEQ, dtype=torch.long, device=self.ids.device)
        pattern = attention_pattern(mode, self.source_len, T)
        positions = (self.mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.backbone(self.ids, attention_mask=self.mask, token_type_ids=token_types,
                            position_ids=positions, attn_mask=pattern[:, None])
        return self.objective.mlm_head(out.last_hidden_state[:, -1], self.backbone.output_embeddings())

    def first(self) -> torch.Tensor:
        return self._logits()

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = self.ids.clone()
        ids[:, -1] = tokens  # the prediction replaces its [MASK] ...
        new = torch.full_like(tokens[:, None], self.objective.mask_id)
        self.ids = torch.cat([ids, new], dim=1)  # ... and a new [MASK] asks for the next token
        self.mask = torch.cat([self.mask, torch.ones_like(new)], dim=1)
        return self._logits()


def write_pairs(tsv: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Convert a ``source<TAB>target`` file into the pairs text seq2seq fine-tuning reads (source
    line, target line, blank line).  Lines without a tab, or with an empty side, are an error."""
    out = Path(out)
    lines = []
    for n, line in enumerate(Path(tsv).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        source, tab, target = line.partition("\t")
        if not tab or not source.strip() or not target.strip():
            raise PtmError(f"{tsv}:{n}: expected 'source<TAB>target' with both sides non-empty")
        lines.append(f"{' '.join(source.split())}\n{' '.join(target.split())}\n")
    atomic_write_text(out, "\n".join(lines))
    return out


__all__ = ["MODES", "PAPER_MIX", "UniLM", "UniLMConfig", "UniLMStepper", "attention_pattern", "write_pairs"]
