"""Masked language modelling (BERT, Devlin et al. 2019), with optional next sentence prediction.

Masking (dynamic: new in every collate, as RoBERTa): in each example ``round(mask_prob * n)`` of
its ``n`` maskable positions (not [CLS], [SEP], [MASK] or padding) are chosen; of those 80% become
[MASK], 10% a random non-special token, 10% stay unchanged, and all are predicted.  What is chosen
is the masker's (:mod:`ptmkit.objectives.masking`), picked by ``objective.masking``: ``token``
(BERT: uniformly random tokens), ``whole_word`` (BERT whole-word masking), ``span`` (SpanBERT's
geometric spans of whole words), ``ngram`` (ALBERT's n-grams); ``objective.corruption=span``
decides [MASK] / random / kept once per unit instead of per token.

The MLM head runs only on the chosen positions: the batch carries their indices
(``mlm_positions [B, P]``) and labels (``mlm_labels [B, P]``, -100 for unused slots), the
forward gathers those hidden states and only then applies dense + activation + LayerNorm and the
decoder tied to the word embeddings.  For a small model the ``H x V`` vocabulary projection
dominates the cost, so predicting 15% of the positions instead of all of them is the main saving.

With ``nsp=True`` an example is ``[CLS] A [SEP] B [SEP]`` (segments 0 / 1) where A and B are runs
of consecutive sentences; B is A's true continuation half the time (label 0, ``IsNext``, as in
HF transformers) and otherwise comes from another document (label 1) — from a distant position
when the corpus has a single document.  With ``nsp=False`` an example is ``[CLS] S [SEP]`` where S
packs full sentences (RoBERTa's DOC-SENTENCES).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.activations import get_activation
from ptmkit.nn.host import host_reads_cheap
from ptmkit.nn.softmax_ce import softmax_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens, token_counts
from ptmkit.objectives.masking import Masked, Masker, check_options
from ptmkit.objectives.spans import pack_sentences
from ptmkit.registry import register

log = logging.getLogger(__name__)

OUTPUT_BIAS = ("zeros", "unigram")


def cross_entropy_and_accuracy(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of ``logits [N, C]`` against ``target [N]`` and the (detached) top-1
    accuracy, computed in float32 whatever the logits' dtype (under bf16 autocast they arrive in
    bf16); on a CPU in one fused kernel (:mod:`ptmkit.nn.softmax_ce`)."""
    return softmax_cross_entropy(logits, target)


@dataclass(frozen=True)
class MLMConfig:
    mask_prob: float = 0.15
    mask_token_ratio: float = 0.8  # of the chosen positions: share replaced by [MASK]
    random_token_ratio: float = 0.1  # share replaced by a random token; the rest is kept
    nsp: bool = True
    max_predictions: int | None = None  # per example; None = ceil(mask_prob * seq_len)
    # "zeros" (BERT) or "unigram": the decoder bias starts at the log unigram distribution of the
    # training text, so the model does not spend its first steps learning token frequencies.
    output_bias: str = "zeros"
    masking: str = "token"  # token | whole_word | span | ngram (ptmkit.objectives.masking)
    corruption: str = "token"  # token | span: [MASK] / random / kept decided per token or per unit
    span_p: float = 0.2  # masking=span: span length in words ~ Geometric(span_p) ...
    max_span: int = 10  # ... clipped at max_span words
    max_ngram: int = 3  # masking=ngram: n <= max_ngram words, p(n) ~ 1/n
    # An objective whose collate supplies pre-marked units (ERNIE) may use masking=units.
    provides_units: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for name in ("mask_prob", "mask_token_ratio", "random_token_ratio", "span_p"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, float(value))
        if not 0.0 < self.mask_prob < 1.0:
            raise PtmError(f"objective.mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.mask_token_ratio < 0 or self.random_token_ratio < 0 or self.mask_token_ratio + self.random_token_ratio > 1:
            raise PtmError(
                "objective.mask_token_ratio and objective.random_token_ratio must be >= 0 and sum to <= 1 "
                f"(got {self.mask_token_ratio} and {self.random_token_ratio})"
            )
        if self.max_predictions is not None and self.max_predictions < 1:
            raise PtmError(f"objective.max_predictions must be >= 1 or null, got {self.max_predictions}")
        if self.output_bias not in OUTPUT_BIAS:
            raise PtmError(f"objective.output_bias must be one of {', '.join(OUTPUT_BIAS)}, got {self.output_bias!r}")
        check_options(self.masking, self.corruption, self.span_p, self.max_span, self.max_ngram)
        if self.masking == "units" and not self.provides_units:
            raise PtmError(
                "objective.masking=units needs pre-marked phrases or entities, which a plain corpus does not "
                "record; use whole_word, span or ngram (an objective that provides units can use the masker directly)"
            )


class MLMHead(nn.Module):
    """``h [N, H] -> logits [N, V]``: dense + activation + LayerNorm, then the decoder tied to the
    word embeddings plus its own bias.  Parameters: ``dense.*``, ``norm.*``, ``bias [V]``.

    cfg: a Transformer config (``hidden_size``, ``vocab_size``, ``activation``, ``layer_norm_eps``,
    ``init_std``).  out_size: width of the word embeddings when it differs from
    ``cfg.hidden_size`` (factorized embeddings as ALBERT's; a smaller generator predicting
    through a larger model's embeddings, as ELECTRA's)."""

    def __init__(self, cfg, out_size: int | None = None) -> None:
        super().__init__()
        out_size = out_size or cfg.hidden_size
        self.dense = nn.Linear(cfg.hidden_size, out_size)
        self.norm = nn.LayerNorm(out_size, eps=cfg.layer_norm_eps)
        self.act = get_activation(cfg.activation)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        with torch.no_grad():
            self.dense.weight.normal_(0.0, cfg.init_std)
            self.dense.bias.zero_()

    def forward(self, h: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(self.act(self.dense(h))), decoder_weight, self.bias)


@register("objective", "mlm")
class MaskedLM(Objective):
    """BERT's masked LM (+ NSP).  Batch keys: ``input_ids``, ``attention_mask``,
    ``token_type_ids`` (when the model has segments), ``mlm_positions [B, P]``,
    ``mlm_labels [B, P]``, and ``nsp_labels [B]`` with NSP."""

    config_class = MLMConfig
    hf_heads = ("mlm", "nsp")
    perplexity = "mlm_loss"  # the loss adds NSP / SOP / SBO terms in the subclasses that have them

    def __init__(self, cfg: MLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        model_cfg = encoder.config
        self.cls_id = int(tokenizer.cls_id)
        self.sep_id = int(tokenizer.sep_id)
        self.mask_id = int(tokenizer.mask_id)
        self.unk_id = int(tokenizer.unk_id)
        # Positions holding these are never chosen for prediction.
        self._unmaskable = np.array(sorted({self.pad_id, self.cls_id, self.sep_id, self.mask_id}), dtype=np.int64)
        # Random replacements come from the ordinary vocabulary only.
        specials = {self.pad_id, self.cls_id, self.sep_id, self.mask_id, self.unk_id}
        specials |= {int(i) for i in getattr(tokenizer, "special_ids", ()) or ()}
        self._random_pool = np.setdiff1d(np.arange(self.vocab_size, dtype=np.int64), np.array(sorted(specials)))
        if len(self._random_pool) == 0:
            raise PtmError("the tokenizer has no ordinary tokens to use as random MLM replacements")
        self.masker = Masker.from_config(cfg, self.mask_id, self._random_pool, self._unmaskable)
        if cfg.nsp and model_cfg.type_vocab_size < 2:
            raise PtmError(
                f"next sentence prediction needs segment embeddings (model.type_vocab_size >= 2, got "
                f"{model_cfg.type_vocab_size}); set objective.nsp=false or model.type_vocab_size=2"
            )
        self.mlm_head = MLMHead(model_cfg, out_size=encoder.output_embeddings().shape[1])
        self.nsp_head = nn.Linear(model_cfg.hidden_size, 2) if cfg.nsp else None
        if self.nsp_head is not None:
            with torch.no_grad():
                self.nsp_head.weight.normal_(0.0, model_cfg.init_std)
                self.nsp_head.bias.zero_()

    def init_from_corpus(self, corpus: CorpusLike, spans: np.ndarray) -> None:
        """``output_bias="unigram"``: decoder bias = log of the add-one smoothed frequencies of the
        predictable tokens in the training examples (specials never are targets: -inf-like)."""
        if self.cfg.output_bias != "unigram":
            return
        counts = token_counts(corpus, spans, self.vocab_size).astype(np.float64) + 1.0
        counts[self._unmaskable[self._unmaskable < self.vocab_size]] = 0.0
        logp = np.full(self.mlm_head.bias.shape[0], -30.0)
        logp[: self.vocab_size] = np.log(np.maximum(counts / counts.sum(), 1e-13))
        with torch.no_grad():
            self.mlm_head.bias.copy_(torch.from_numpy(logp))

    # -- data -------------------------------------------------------------------------------
    @property
    def sentence_pairs(self) -> bool:
        """Whether an example is a pair ``[CLS] A [SEP] B [SEP]`` (NSP; ALBERT's SOP) rather
        than one text ``[CLS] S [SEP]``."""
        return bool(self.cfg.nsp)

    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Pairs: runs of whole sentences of one document, <= ``seq_len - 3`` tokens (room for
        [CLS] A [SEP] B [SEP]) and >= 2 tokens (A and B each get one); otherwise <= ``seq_len - 2``."""
        pairs = self.sentence_pairs
        budget = seq_len - (3 if pairs else 2)
        if budget < 2:
            raise PtmError(f"seq_len={seq_len} is too short for MLM (need at least {(5 if pairs else 4)})")
        cap, wanted = self.cfg.max_predictions, round(self.cfg.mask_prob * budget)
        if cap is not None and cap < wanted:  # e.g. a raised mask_prob under a preset's cap
            log.warning(
                "objective.max_predictions=%d masks %d of %d tokens (%.1f %%, not mask_prob=%.1f %%); set it to "
                "null or >= %d", cap, cap, budget, 100.0 * cap / budget, 100.0 * self.cfg.mask_prob, wanted,
            )
        spans = pack_sentences(corpus.sentences, corpus.documents, budget, min_len=2 if pairs else 1)
        if len(spans) == 0:
            raise PtmError("the corpus has no usable text for MLM examples (is it empty?)")
        return spans

    @staticmethod
    def split_spans(corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """Cut each span ``[st, en)`` (>= 2 tokens) in two: ``st, cut, en`` ``[B]`` with
        ``st < cut < en``; the cut is a uniformly chosen sentence boundary inside the span, or a
        uniformly chosen token boundary when the span is one sentence."""
        sent = np.asarray(corpus.sentences, dtype=np.int64)
        n_sent = len(sent) - 1
        st, en = spans[:, 0].astype(np.int64), spans[:, 1].astype(np.int64)
        lo = np.searchsorted(sent, st, side="right")
        hi = np.searchsorted(sent, en, side="left")
        n_inner = hi - lo
        u = rng.random(len(st))
        inner = sent[np.minimum(lo + (u * n_inner).astype(np.int64), n_sent)]
        mid = st + 1 + (u * (en - st - 1)).astype(np.int64)
        return st, np.where(n_inner > 0, inner, mid), en

    def _nsp_segments(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """Choose (A, B) token ranges for each span.  Returns ``a0, a1, b0, b1, label`` ``[B]``."""
        sent = np.asarray(corpus.sentences, dtype=np.int64)
        docs = np.asarray(corpus.documents, dtype=np.int64)
        n_sent = len(sent) - 1
        total = int(sent[-1])
        # A ends at a sentence boundary inside the span, or mid-sentence if there is none.
        st, cut, en = self.split_spans(corpus, spans, rng)
        n = len(st)
        is_next = rng.random(n) < 0.5
        target = en - cut  # random B gets the length the true B would have

        doc_tok = sent[docs]  # token offset of each document start, [n_docs + 1]
        doc_len = np.diff(doc_tok)
        nonempty = np.flatnonzero(doc_len > 0)
        u_doc, u_sent = rng.random(n), rng.random(n)
        if len(nonempty) > 1:
            # Another (non-empty) document, then a random sentence start inside it.
            own = np.searchsorted(doc_tok, st, side="right") - 1
            own_rank = np.searchsorted(nonempty, own)
            pick = (u_doc * (len(nonempty) - 1)).astype(np.int64)
            other = nonempty[pick + (pick >= own_rank)]
            s = docs[other] + (u_sent * (docs[other + 1] - docs[other])).astype(np.int64)
            d_end = doc_tok[other + 1]
            rb0 = np.minimum(sent[s], d_end - 1)
        else:
            # One document: a sentence away from the span by at least the span's own length.
            s_first = np.searchsorted(sent, st, side="right") - 1
            s_last = np.searchsorted(sent, en, side="left")
            gap = np.maximum(s_last - s_first, 1)
            ex_lo = np.maximum(s_first - gap, 0)
            ex_hi = np.minimum(s_last + gap, n_sent)
            free = n_sent - (ex_hi - ex_lo)
            ok = free > 0
            r = (u_sent * np.maximum(free, 1)).astype(np.int64)
            r = np.where(r >= ex_lo, r + (ex_hi - ex_lo), r)
            # Tiny corpora with no distant sentence: any position outside the span.
            outside = total - (en - st)
            pos = (u_doc * np.maximum(outside, 1)).astype(np.int64)
            pos = np.where(pos >= st, pos + (en - st), pos)
            rb0 = np.where(ok, sent[np.minimum(r, n_sent - 1)], np.minimum(pos, total - 1))
            d_end = np.full(n, total, dtype=np.int64)
        rb1 = np.minimum(rb0 + target, d_end)
        b0 = np.where(is_next, cut, rb0)
        b1 = np.where(is_next, en, rb1)
        return st, cut, b0, b1, (~is_next).astype(np.int64)

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        batch: dict[str, torch.Tensor] = {}
        if self.cfg.nsp:
            a0, a1, b0, b1, nsp_labels = self._nsp_segments(corpus, spans, rng)
            layout = self.pair_inputs(corpus, a0, a1, b0, b1)
            batch["nsp_labels"] = torch.from_numpy(nsp_labels)
        else:
            layout = self.single_inputs(corpus, spans)
        return self.finish_batch(batch, spans, *layout, rng)

    def pair_inputs(self, corpus: CorpusLike, a0, a1, b0, b1) -> tuple[np.ndarray, ...]:
        """``[CLS] A [SEP] B [SEP]`` from token ranges ``[a0, a1)``, ``[b0, b1)`` ``[B]``.
        Returns ``ids [B, T]`` (padded), ``segment [B, T]`` (0 for [CLS] A [SEP], 1 for B [SEP]),
        ``word_starts [B, T] | None`` and ``length [B]``."""
        tokens = corpus.tokens
        n = len(a0)
        la, lb = a1 - a0, b1 - b0
        T = int((la + lb).max()) + 3
        j = np.arange(T)[None, :]
        in_a = (j >= 1) & (j <= la[:, None])
        b_first = la[:, None] + 2
        in_b = (j >= b_first) & (j < b_first + lb[:, None])
        src = np.where(in_a, a0[:, None] + j - 1, b0[:, None] + j - b_first)
        ids = np.where(in_a | in_b, np.asarray(tokens[np.clip(src, 0, len(tokens) - 1)], dtype=np.int64), self.pad_id)
        word_starts = self.masker.word_starts(corpus, src, in_a | in_b)
        ids[:, 0] = self.cls_id
        ids[np.arange(n), la + 1] = self.sep_id
        ids[np.arange(n), la + lb + 2] = self.sep_id
        length = la + lb + 3
        segment = ((j >= b_first) & (j < length[:, None])).astype(np.int64)
        return ids, segment, word_starts, length

    def single_inputs(self, corpus: CorpusLike, spans: np.ndarray) -> tuple[np.ndarray, ...]:
        """``[CLS] S [SEP]`` from the token spans ``[B, 2]``; returns as :meth:`pair_inputs`."""
        tokens = corpus.tokens
        st, en = spans[:, 0], spans[:, 1]
        n = len(st)
        ls = en - st
        T = int(ls.max()) + 2
        j = np.arange(T)[None, :]
        inside = (j >= 1) & (j <= ls[:, None])
        src = np.clip(st[:, None] + j - 1, 0, len(tokens) - 1)
        ids = np.where(inside, np.asarray(tokens[src], dtype=np.int64), self.pad_id)
        word_starts = self.masker.word_starts(corpus, src, inside)
        ids[:, 0] = self.cls_id
        ids[np.arange(n), ls + 1] = self.sep_id
        return ids, np.zeros_like(ids), word_starts, ls + 2

    def finish_batch(
        self, batch: dict[str, torch.Tensor], spans: np.ndarray, ids: np.ndarray,
        segment: np.ndarray, word_starts: np.ndarray | None, length: np.ndarray, rng: np.random.Generator,
    ) -> dict[str, torch.Tensor]:
        """Mask the laid-out examples and add the model inputs and predictions to ``batch``."""
        attention = (np.arange(ids.shape[1])[None, :] < length[:, None]).astype(np.int64)
        masked = self.choose_predictions(ids, attention, rng, word_starts, spans)
        batch["input_ids"] = torch.from_numpy(ids)
        batch["attention_mask"] = torch.from_numpy(attention)
        if self.model_cfg.type_vocab_size > 0:
            batch["token_type_ids"] = torch.from_numpy(segment)
        self.add_predictions(batch, masked)
        return batch

    def choose_predictions(
        self, ids: np.ndarray, attention: np.ndarray, rng: np.random.Generator, word_starts: np.ndarray | None,
        spans: np.ndarray,
    ) -> Masked:
        """Run the masker on the batch (in place on ``ids``); ``spans [B, 2]`` name the examples
        for a schedule that fixes each example's masks (RoBERTa's static baseline)."""
        return self.masker(ids, attention, rng, word_starts)

    def add_predictions(self, batch: dict[str, torch.Tensor], masked: Masked) -> None:
        """Put what the heads need from the masker into the batch: ``mlm_positions [B, P]`` and
        ``mlm_labels [B, P]`` (an objective with a span head adds the span boundaries)."""
        batch["mlm_positions"] = torch.from_numpy(masked.positions)
        batch["mlm_labels"] = torch.from_numpy(masked.labels)

    def mask_tokens(
        self, ids: np.ndarray, attention: np.ndarray, rng: np.random.Generator, word_starts: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Choose and corrupt the positions to predict, in place on ``ids [B, T]``, with this
        objective's masker (``word_starts [B, T]`` for the word-level maskers).

        Returns ``positions [B, P]`` (0 in unused slots) and ``labels [B, P]`` (the original
        token, or -100 in unused slots).
        """
        masked = self.masker(ids, attention, rng, word_starts)
        return masked.positions, masked.labels

    # -- model ------------------------------------------------------------------------------
    def exported_heads(self) -> tuple[str, ...]:
        return ("mlm", "nsp") if self.nsp_head is not None else ("mlm",)

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch.get("attention_mask")
        out = backbone(batch["input_ids"], attention_mask=attention_mask, token_type_ids=batch.get("token_type_ids"))
        loss, metrics, n_predictions = self.mlm_loss(out.last_hidden_state, batch, backbone.output_embeddings())
        if self.nsp_head is not None and "nsp_labels" in batch:
            loss = loss + self.pair_loss("nsp", self.nsp_head, out, batch["nsp_labels"], metrics)
        n_tokens = input_tokens(batch)
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=n_predictions)

    def mlm_loss(
        self, h: torch.Tensor, batch: dict[str, torch.Tensor], decoder_weight: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], int | torch.Tensor]:
        """``(loss, metrics, N)``: cross-entropy of the MLM head on the N chosen positions of
        ``h [B, T, H]`` (gathered first, so the ``H x V`` projection runs on those rows only).

        On a CPU the N labelled slots of ``mlm_labels [B, P]`` are picked out (an int N).  On a GPU,
        and inside a compiled graph, all B x P slots go through the head with the unused ones
        ignored (N a 0-d tensor): fixed shapes, and no read-back of N that would stall the GPU's
        queue or break the graph, for a few more rows (P is the most any example predicts)."""
        labels, positions = batch["mlm_labels"], batch["mlm_positions"]
        if host_reads_cheap(h):
            rows, slots = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
            target = labels[rows, slots]
            chosen, n = h[rows, positions[rows, slots]], int(target.numel())  # [N, H]
        else:
            target = labels.flatten()
            chosen = h.gather(1, positions[..., None].expand(-1, -1, h.shape[-1])).flatten(0, 1)  # [B * P, H]
            n = (target != IGNORE_INDEX).sum()
        logits = self.mlm_head(chosen, decoder_weight)  # [N or B * P, V]
        loss, acc = cross_entropy_and_accuracy(logits, target)
        metrics = {"mlm_loss": loss.detach(), "mlm_acc": acc}
        return loss, metrics, n

    @staticmethod
    def pair_loss(name: str, head: nn.Module, out, labels: torch.Tensor, metrics: dict[str, torch.Tensor]) -> torch.Tensor:
        """A binary sentence-pair head (NSP, SOP) on the pooled output (``h[CLS]`` without a
        pooler): returns its loss and adds ``<name>_loss`` / ``<name>_acc`` to ``metrics``."""
        pooled = out.pooled if out.pooled is not None else out.last_hidden_state[:, 0]
        logits = head(pooled)  # [B, 2]
        loss, metrics[f"{name}_acc"] = cross_entropy_and_accuracy(logits, labels)
        metrics[f"{name}_loss"] = loss.detach()
        return loss
