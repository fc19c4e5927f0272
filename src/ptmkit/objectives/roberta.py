"""RoBERTa (Liu et al. 2019): BERT's masked LM without NSP, trained longer on more data.

The model and loss are BERT's MLM (:class:`~ptmkit.objectives.mlm.MaskedLM`: 15 % of the tokens,
80/10/10, the head on the chosen positions only); RoBERTa changes how the training data is made:

* **No NSP**: an example is one text ``<s> S </s>`` (here ``[CLS] S [SEP]``).
* **Example construction** (``objective.examples``, Section 4.2 of the paper):

  - ``full_sentences`` (the paper's choice, the default): whole consecutive sentences packed up to
    ``seq_len - 2`` tokens, crossing document boundaries; where one document ends and the next
    begins the collate inserts an extra separator ``[SEP]`` (one token of the budget).
  - ``doc_sentences``: the same, but an example never crosses a document boundary.

* **Dynamic masking** (``objective.mask_schedule=dynamic``, the default): a new mask every time an
  example is seen (drawn from the batch generator).  ``static`` is BERT's original scheme as
  RoBERTa's baseline: each example has ``dupe_factor`` fixed masks (the paper duplicates the
  data 10 times); every visit uses one of them, chosen by the batch generator.  Mask ``k`` of
  the example with token span ``[st, en)`` is drawn from ``default_rng([mask_seed, st, en, k])``,
  so it is the same in every epoch, after a resume and whatever the batch it falls in; with
  ``dupe_factor=1`` an example always has the same mask (original BERT).  Over 40 epochs with
  ``dupe_factor=10`` each mask is seen about 4 times, as in the paper's static baseline.

Batch keys are MLM's: ``input_ids``, ``attention_mask``, ``token_type_ids`` (when the model has
segment embeddings; all 0), ``mlm_positions [B, P]``, ``mlm_labels [B, P]``.  Parameters:
``mlm_head.*`` (decoder tied to the word embeddings).  HF export: ``RobertaForMaskedLM``
(:mod:`ptmkit.interop.hf_roberta`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import CorpusLike
from ptmkit.objectives.masking import Masked
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.objectives.spans import pack_across_documents
from ptmkit.registry import register

EXAMPLES = ("full_sentences", "doc_sentences")
SCHEDULES = ("dynamic", "static")


@dataclass(frozen=True)
class RoBERTaConfig(MLMConfig):
    nsp: bool = False
    examples: str = "full_sentences"  # full_sentences | doc_sentences
    mask_schedule: str = "dynamic"  # dynamic | static
    dupe_factor: int = 10  # static: fixed masks per example
    mask_seed: int = 0  # static: the masks are a function of (mask_seed, example span, copy)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.nsp:
            raise PtmError("RoBERTa has no next sentence prediction; set objective.nsp=false (or use objective.name=mlm)")
        if self.examples not in EXAMPLES:
            raise PtmError(f"objective.examples must be one of {', '.join(EXAMPLES)}, got {self.examples!r}")
        if self.mask_schedule not in SCHEDULES:
            raise PtmError(f"objective.mask_schedule must be one of {', '.join(SCHEDULES)}, got {self.mask_schedule!r}")
        if not isinstance(self.dupe_factor, int) or self.dupe_factor < 1:
            raise PtmError(f"objective.dupe_factor must be an integer >= 1, got {self.dupe_factor!r}")
        if not isinstance(self.mask_seed, int) or self.mask_seed < 0:
            raise PtmError(f"objective.mask_seed must be an integer >= 0, got {self.mask_seed!r}")


@register("objective", "roberta")
class RoBERTa(MaskedLM):
    """MLM on FULL-SENTENCES / DOC-SENTENCES examples with a dynamic or static mask schedule."""

    config_class = RoBERTaConfig
    hf_heads = ("mlm",)
    hf_family = "roberta"

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """``doc_sentences``: MLM's packing (never across documents).  ``full_sentences``: runs of
        whole sentences across documents, <= ``seq_len - 2`` tokens counting one separator per
        document boundary inside the run."""
        if self.cfg.examples == "doc_sentences":
            return super().example_spans(corpus, seq_len)
        budget = seq_len - 2
        if budget < 2:
            raise PtmError(f"seq_len={seq_len} is too short for MLM (need at least 4)")
        spans = pack_across_documents(corpus.sentences, corpus.documents, budget)
        if len(spans) == 0:
            raise PtmError("the corpus has no usable text for MLM examples (is it empty?)")
        return spans

    def single_inputs(self, corpus: CorpusLike, spans: np.ndarray) -> tuple[np.ndarray, ...]:
        """``[CLS] S [SEP]`` where S is the span's tokens with a ``[SEP]`` before the first token
        of every document that starts inside the span (FULL-SENTENCES)."""
        if self.cfg.examples == "doc_sentences":
            return super().single_inputs(corpus, spans)
        tokens = corpus.tokens
        st, en = spans[:, 0], spans[:, 1]
        n, ls = len(st), en - st
        doc_tok = np.unique(np.asarray(corpus.sentences, dtype=np.int64)[np.asarray(corpus.documents, dtype=np.int64)])
        i = np.arange(int(ls.max()))[None, :]
        valid = i < ls[:, None]
        src = np.minimum(st[:, None] + i, len(tokens) - 1)  # [B, Lmax] token offsets
        # Separators before token p: document starts b with st < b <= p.
        k = np.searchsorted(doc_tok, src, side="right") - np.searchsorted(doc_tok, st, side="right")[:, None]
        n_sep = np.where(valid, k, 0).max(axis=1)
        length = ls + n_sep + 2
        T = int(length.max())
        col = 1 + i + k  # where token p lands
        rows = np.broadcast_to(np.arange(n)[:, None], src.shape)
        r, c, p = rows[valid], col[valid], src[valid]
        ids = np.full((n, T), self.pad_id, dtype=np.int64)
        ids[r, c] = np.asarray(tokens[p], dtype=np.int64)
        starts_doc = np.isin(p, doc_tok) & (p > st[r])
        ids[r[starts_doc], c[starts_doc] - 1] = self.sep_id
        ids[:, 0] = self.cls_id
        ids[np.arange(n), length - 1] = self.sep_id
        grid_src = np.zeros((n, T), dtype=np.int64)
        grid_in = np.zeros((n, T), dtype=bool)
        grid_src[r, c], grid_in[r, c] = p, True
        word_starts = self.masker.word_starts(corpus, grid_src, grid_in)
        return ids, np.zeros_like(ids), word_starts, length

    def choose_predictions(
        self, ids: np.ndarray, attention: np.ndarray, rng: np.random.Generator, word_starts: np.ndarray | None,
        spans: np.ndarray,
    ) -> Masked:
        """Dynamic: the masker on the whole batch.  Static: each example masked on its own from
        its copy's generator (a loop over the examples, not the tokens), on its unpadded tokens
        so that the batch it falls in cannot change its mask."""
        if self.cfg.mask_schedule == "dynamic":
            return super().choose_predictions(ids, attention, rng, word_starts, spans)
        copy = rng.integers(0, self.cfg.dupe_factor, size=len(ids))
        length = attention.sum(axis=1)
        parts = []
        for b in range(len(ids)):
            L = int(length[b])
            own = np.random.default_rng([self.cfg.mask_seed, int(spans[b, 0]), int(spans[b, 1]), int(copy[b])])
            ws = word_starts[b : b + 1, :L] if word_starts is not None else None
            parts.append(self.masker(ids[b : b + 1, :L], attention[b : b + 1, :L], own, ws))  # in place on ids
        P = max(m.positions.shape[1] for m in parts)

        def stack(field: str, fill: int) -> np.ndarray:
            out = np.full((len(parts), P), fill, dtype=np.int64)
            for b, m in enumerate(parts):
                v = getattr(m, field)
                out[b, : v.shape[1]] = v[0]
            return out

        return Masked(
            positions=stack("positions", 0), labels=stack("labels", IGNORE_INDEX), span_start=stack("span_start", 0),
            span_end=stack("span_end", 0), span_id=stack("span_id", 0),
        )
