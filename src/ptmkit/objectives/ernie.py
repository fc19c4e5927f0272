"""ERNIE 1.0 (Sun et al. 2019): masked LM with knowledge masking (phrases and entities).

ERNIE (Baidu) keeps BERT's model and masked-LM loss but changes *what* is masked: besides
basic-level units (a character, or a word), whole **phrases** and whole **entities** are masked
together, so a name or a fixed expression has to be recovered from its context rather than from
its own remaining characters.  Here one masker does all three levels at once:

* units are the corpus's words (jieba words for Chinese, from ``ptm prepare --segmenter
  jieba``; characters where none were recorded), with phrases and entities found in each batch
  (:mod:`ptmkit.objectives.knowledge_units`) laid over them as single units by the ``units``
  masker (:func:`ptmkit.objectives.masking.mark_units`; overlapping units merge);
* every unit is chosen independently with probability ``mask_prob`` (0.15;
  ``selection=bernoulli``), and each token of a chosen unit becomes [MASK] / a random token /
  stays with 80/10/10 (``corruption=token``); the loss is per token, on the chosen tokens.

Entities: ``entities`` names a dictionary file of entity strings or a BIO-tagged JSONL file
(People's Daily's ``dictionary.txt`` or ``ner/train.jsonl``).  Phrases: word n-grams with high PMI
in the training corpus (``phrases=true``), counted once per corpus at its first batch, which
is a deterministic function of the corpus, so a resumed run masks exactly as the original did.
The paper trains in stages (basic-level, then phrase-level, then entity-level masking); here the
three levels are mixed in one stage (a schedule could switch ``phrases`` / ``entities`` between
runs with ``ptm pretrain --init-from``).

Batch keys: MaskedLM's (``input_ids``, ``attention_mask``, ``token_type_ids``, ``mlm_positions``,
``mlm_labels``).  No NSP (``nsp=false``; ERNIE's dialogue language model is not included).
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import CorpusLike, TokenizerLike
from ptmkit.objectives.knowledge_units import ENTITY_TAGS, EntityTable, PhraseTable, read_entities
from ptmkit.objectives.masking import Masked
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.registry import register
from ptmkit.tokenization.kinds import SPACE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ERNIEConfig(MLMConfig):
    nsp: bool = False
    masking: str = "units"
    selection: str = "bernoulli"  # each unit w.p. mask_prob (budget: BERT's token budget instead)
    entities: str | None = None  # dictionary file of entity strings, or a BIO-tagged .jsonl
    entity_tags: tuple[str, ...] = ENTITY_TAGS  # dictionary lines with a third field: keep these tags
    max_entity_tokens: int = 16
    phrases: bool = True  # high-PMI word n-grams of the training corpus
    phrase_max_words: int = 3
    phrase_min_count: int = 5
    phrase_min_pmi: float = 3.0  # natural log
    max_phrases: int = 50_000  # per n-gram length
    provides_units: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name in ("phrase_min_pmi",):
            if isinstance(getattr(self, name), (str, int)) and not isinstance(getattr(self, name), bool):
                object.__setattr__(self, name, float(getattr(self, name)))
        if isinstance(self.entity_tags, (list, str)):
            object.__setattr__(self, "entity_tags", tuple([self.entity_tags] if isinstance(self.entity_tags, str) else self.entity_tags))
        super().__post_init__()
        if self.nsp:
            raise PtmError("objective.nsp is not part of this ERNIE objective (single segments); set objective.nsp=false")
        if self.masking not in ("units", "whole_word"):
            raise PtmError(f"ERNIE masks whole units: objective.masking must be units or whole_word, got {self.masking!r}")
        if self.selection not in ("bernoulli", "budget"):
            raise PtmError(f"objective.selection must be bernoulli or budget, got {self.selection!r}")
        if self.phrase_max_words < 2:
            raise PtmError(f"objective.phrase_max_words must be >= 2, got {self.phrase_max_words}")
        if self.phrase_min_count < 1 or self.max_phrases < 0 or self.max_entity_tokens < 1:
            raise PtmError("objective.phrase_min_count and objective.max_entity_tokens must be >= 1, objective.max_phrases >= 0")


def punctuation_ids(tokenizer: Any, vocab_size: int) -> np.ndarray | None:
    """bool ``[V]``: tokens made only of punctuation, symbols or spaces (and specials), which no
    phrase may contain; ``None`` when the tokenizer cannot name its tokens."""
    id_to_token = getattr(tokenizer, "id_to_token", None)
    if id_to_token is None:
        return None
    out = np.zeros(vocab_size, dtype=bool)
    for i in range(vocab_size):  # once per vocabulary entry, when the objective is built
        tok = id_to_token(i)
        if tok is None:
            continue
        text = tok.removeprefix("##").replace(SPACE, " ")
        out[i] = not text.strip() or all(unicodedata.category(c)[0] in "PSZ" for c in text) or (
            tok.startswith("[") and tok.endswith("]"))
    return out


@register("objective", "ernie")
class ERNIE(MaskedLM):
    """MLM whose masked units are words, phrases and entities (see the module docstring)."""

    config_class = ERNIEConfig
    hf_heads = ("mlm",)

    def __init__(self, cfg: ERNIEConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        self.entity_table: EntityTable | None = None
        if cfg.entities:
            names = read_entities(cfg.entities, cfg.entity_tags)
            self.entity_table = EntityTable.from_strings(names, tokenizer, cfg.max_entity_tokens)
            if len(self.entity_table) == 0:
                log.warning("objective.entities=%s: no entity tokenizes to known tokens; no entity units", cfg.entities)
        self._phrases: dict[Any, PhraseTable] = {}
        self._blocked = punctuation_ids(tokenizer, self.vocab_size)

    def phrase_table(self, corpus: CorpusLike) -> PhraseTable | None:
        """The corpus's high-PMI phrases, counted at its first use (deterministic)."""
        if not self.cfg.phrases:
            return None
        key = str(getattr(corpus, "path", id(corpus)))
        if key not in self._phrases:
            bits = getattr(corpus, "word_starts", None)
            self._phrases[key] = PhraseTable.from_corpus(
                np.asarray(corpus.tokens), None if bits is None else np.asarray(bits), np.asarray(corpus.sentences),
                self.cfg.phrase_max_words, self.cfg.phrase_min_count, self.cfg.phrase_min_pmi, self.cfg.max_phrases,
                self._blocked,
            )
            log.info("ERNIE phrases of %s: %s", key, {n: len(v) for n, v in self._phrases[key].by_length.items()})
        return self._phrases[key]

    def init_from_corpus(self, corpus: CorpusLike, spans: np.ndarray) -> None:
        super().init_from_corpus(corpus, spans)
        self.phrase_table(corpus)  # count the phrases now rather than in the first step

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator):
        self._corpus = corpus  # the phrase table of this corpus, for choose_predictions
        try:
            return super().collate(corpus, spans, rng)
        finally:
            self._corpus = None

    def find_units(self, ids: np.ndarray, attention: np.ndarray, word_starts: np.ndarray | None,
                   phrases: PhraseTable | None) -> np.ndarray:
        """``int64 [N, 3]`` ``(example, start, end)``: every entity and phrase in the batch."""
        candidate = (attention > 0) & ~np.isin(ids, self._unmaskable)
        found = [np.zeros((0, 3), np.int64)]
        if phrases is not None:
            found.append(phrases.find(ids, word_starts, candidate))
        if self.entity_table is not None:
            found.append(self.entity_table.find(ids, candidate))
        return np.concatenate(found)

    def choose_predictions(
        self, ids: np.ndarray, attention: np.ndarray, rng: np.random.Generator, word_starts: np.ndarray | None,
        spans: np.ndarray,
    ) -> Masked:
        if self.cfg.masking == "whole_word":  # words only: BERT-wwm with ERNIE's per-unit selection
            return self.masker(ids, attention, rng, word_starts)
        corpus = getattr(self, "_corpus", None)
        phrases = self.phrase_table(corpus) if corpus is not None else None
        units = self.find_units(ids, attention, word_starts, phrases)
        return self.masker(ids, attention, rng, word_starts, units=units)
