"""LIBERT (Lauscher et al. 2020): masked LM plus *lexical relation classification* (LRC) of word
pairs, so that the encoder learns which words are lexically related (synonyms, a hyponym and
its hypernym) beside learning from running text.

Every training step adds ``lrc_batch`` related pairs from a lexical resource and as many
unrelated ones, each read as ``[CLS] w1 [SEP] w2 [SEP]`` (segments 0 / 1); a binary classifier
on the pooled ``[CLS]`` state tells related (1) from unrelated (0).  An unrelated pair keeps
the first word of a related pair and takes its second word from another sampled pair (the
paper's negatives are corrupted constraints).  The loss is ``L_MLM + lrc_weight * L_LRC``.

The pairs come from ``objective.pairs`` (:func:`ptmkit.objectives.lexicon.read_pairs`: one
``word<TAB>word`` per line; ``ptm data get wordnet-kg`` writes WordNet's synonyms and
hypernyms).  ``objective.pairs_exclude=TASK[,TASK...]`` leaves out every pair that is an example of
a built-in task's dev or test split (:mod:`ptmkit.objectives.pair_exclusion`), so that the
model is not fine-tuned and scored on pairs it was told are related.  Which pairs a step reads
is a function of the step's random generator, as the MLM masks are, so a resumed run continues
exactly.

Batch keys: MaskedLM's, plus ``lrc_input_ids``, ``lrc_attention_mask``, ``lrc_token_type_ids``
``[2 * lrc_batch, L]`` and ``lrc_labels [2 * lrc_batch]``.  Metrics: ``lrc_loss``, ``lrc_acc``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import CorpusLike, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.lexicon import read_pairs
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.objectives.pair_exclusion import exclude_pairs, task_names, task_pairs
from ptmkit.registry import register

log = logging.getLogger(__name__)

MAX_WORD_TOKENS = 8  # tokens kept of one word (a multi-word lexicon entry may be longer)


@dataclass(frozen=True)
class LIBERTConfig(MLMConfig):
    nsp: bool = False
    pairs: str | None = None  # word<TAB>word lines of related words (ptmkit.objectives.lexicon)
    lrc_weight: float = 1.0
    lrc_batch: int = 16  # related pairs per step (plus as many unrelated ones)
    pairs_exclude: str | None = None  # TASK[,TASK...]: leave out the pairs of these tasks' dev and test splits

    def __post_init__(self) -> None:
        if isinstance(self.lrc_weight, (str, int)) and not isinstance(self.lrc_weight, bool):
            object.__setattr__(self, "lrc_weight", float(self.lrc_weight))
        if isinstance(self.pairs_exclude, (list, tuple)):  # a YAML list of task names
            object.__setattr__(self, "pairs_exclude", ",".join(map(str, self.pairs_exclude)))
        super().__post_init__()
        if self.pairs_exclude is not None:
            task_names(self.pairs_exclude)  # a malformed list fails before anything is built
        if not self.pairs:
            raise PtmError("LIBERT needs objective.pairs=FILE: related words, one word<TAB>word per line "
                           "(ptm data get wordnet-kg writes WordNet's synonyms and hypernyms)")
        if self.lrc_weight < 0 or self.lrc_batch < 1:
            raise PtmError(f"objective.lrc_weight must be >= 0 and objective.lrc_batch >= 1, got "
                           f"{self.lrc_weight} and {self.lrc_batch}")


def pair_inputs(a: list[np.ndarray], b: list[np.ndarray], cls_id: int, sep_id: int, pad_id: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[CLS] a [SEP] b [SEP]`` per pair, right-padded: ``ids``, ``attention``, ``segments``
    (all ``int64 [N, L]``)."""
    lengths = np.array([len(x) + len(y) + 3 for x, y in zip(a, b)])
    ids = np.full((len(a), int(lengths.max())), pad_id, dtype=np.int64)
    seg = np.zeros_like(ids)
    for r, (x, y) in enumerate(zip(a, b)):  # one row per pair (a few dozen a step)
        row = np.concatenate([[cls_id], x, [sep_id], y, [sep_id]])
        ids[r, : len(row)] = row
        seg[r, len(x) + 2 : len(row)] = 1
    attention = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.int64)
    return ids, attention, seg


@register("objective", "libert")
class LIBERT(MaskedLM):
    """MLM + lexical relation classification (see the module docstring)."""

    config_class = LIBERTConfig
    hf_heads = ("mlm",)

    def __init__(self, cfg: LIBERTConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        if encoder.config.type_vocab_size < 2:
            raise PtmError("LIBERT reads word pairs as two segments: it needs model.type_vocab_size >= 2")
        words, self.pairs = read_pairs(cfg.pairs)
        if cfg.pairs_exclude:
            self.pairs = self._without_task_pairs(words, self.pairs, cfg)
        encoded = tokenizer.encode_batch([w.replace("_", " ") for w in words])
        self.word_ids = [np.asarray(e[:MAX_WORD_TOKENS], dtype=np.int64) for e in encoded]
        empty = [w for w, e in zip(words, self.word_ids) if not len(e)]
        if empty:
            raise PtmError(f"objective.pairs={cfg.pairs}: the tokenizer makes no token of {empty[:3]}")
        self.lrc_head = nn.Linear(encoder.config.hidden_size, 2)
        with torch.no_grad():
            self.lrc_head.weight.normal_(0.0, encoder.config.init_std)
            self.lrc_head.bias.zero_()

    @staticmethod
    def _without_task_pairs(words: list[str], pairs: np.ndarray, cfg: LIBERTConfig) -> np.ndarray:
        """``pairs`` int64 ``[P, 2]`` less the dev and test pairs of ``cfg.pairs_exclude``'s tasks."""
        excluded: set[tuple[str, str]] = set()
        for name in task_names(cfg.pairs_exclude or ""):
            excluded |= task_pairs(name)
        kept = exclude_pairs(words, pairs, excluded)
        log.info("objective.pairs_exclude=%s: removed %d of %d related pairs (the tasks' dev and test splits "
                 "hold %d word pairs)", cfg.pairs_exclude, len(pairs) - len(kept), len(pairs), len(excluded))
        if not len(kept):
            raise PtmError(f"objective.pairs_exclude={cfg.pairs_exclude} removes every pair of objective.pairs="
                           f"{cfg.pairs}: LIBERT has no related pair left to learn from")
        return kept

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        batch = super().collate(corpus, spans, rng)
        k = self.cfg.lrc_batch
        chosen = self.pairs[rng.integers(0, len(self.pairs), size=k)]  # [k, 2] related
        other = self.pairs[rng.integers(0, len(self.pairs), size=k), 1]  # a second word from another pair
        first = np.concatenate([chosen[:, 0], chosen[:, 0]])
        second = np.concatenate([chosen[:, 1], other])
        ids, attention, seg = pair_inputs([self.word_ids[i] for i in first], [self.word_ids[i] for i in second],
                                          self.cls_id, self.sep_id, self.pad_id)
        labels = np.concatenate([np.ones(k, np.int64), (second[k:] == chosen[:, 1]).astype(np.int64)])
        batch.update(lrc_input_ids=torch.from_numpy(ids), lrc_attention_mask=torch.from_numpy(attention),
                     lrc_token_type_ids=torch.from_numpy(seg), lrc_labels=torch.from_numpy(labels))
        return batch

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        out = backbone(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"))
        loss, metrics, n_predictions = self.mlm_loss(out.last_hidden_state, batch, backbone.output_embeddings())
        if "lrc_labels" in batch:
            pairs = backbone(batch["lrc_input_ids"], attention_mask=batch["lrc_attention_mask"],
                             token_type_ids=batch["lrc_token_type_ids"])
            loss = loss + self.cfg.lrc_weight * self.pair_loss("lrc", self.lrc_head, pairs, batch["lrc_labels"], metrics)
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=n_predictions)


__all__ = ["LIBERT", "LIBERTConfig", "pair_inputs"]
