"""XLM (Lample & Conneau 2019): masked language modelling over several languages with language
embeddings, and the translation language model (TLM) on parallel sentences.

The data is one prepared corpus per language (``ptm prepare --language XX``) and, for TLM, prepared
translation pairs (``ptm prepare --parallel XX,YY``), joined by ``ptm pretrain --data`` (with
``--data-weights alpha=0.5`` for XLM's language sampling).  Each example comes from one of them:

* **MLM** (from a corpus of one language): ``[CLS] S [SEP]``, S full sentences of that language,
  as :class:`~ptmkit.objectives.mlm.MaskedLM` without next-sentence prediction;
* **TLM** (from a pair): ``[CLS] A [SEP] B [SEP]``, a sentence and its translation.  The masker
  chooses ``mask_prob`` of the maskable tokens of the whole example, so both halves are masked at
  that rate and a masked word may be recovered from its translation.  Positions restart for the
  second half (B's first token has A's first token's position, 1), so the model cannot tell the
  halves apart by position alone (with ``model.positions=relative`` the bias reads the offsets of
  these restarted positions).  A pair longer than ``seq_len`` loses tokens from the end of its
  longer side.

Language embeddings are the encoder's token-type embeddings: every token's type is its
language's index in the tokenizer's languages (``<lang_XX>`` tokens,
:mod:`ptmkit.tokenization.languages`); ``model.type_vocab_size`` must be at least the number of
languages (the preset has room for 8).  ``language_embeddings=false`` leaves every type 0 (XLM-R
drops them).  XLM alternates MLM and TLM batches; here a batch mixes the two kinds of example in
the proportions ``--data-weights`` gives their corpora, which is the same objective in
expectation; a batch's ``tlm`` ``bool [B]`` marks its TLM rows.  Without language embeddings
the corpora need no language and the tokenizer no ``<lang_XX>`` tokens (continued pre-training of
an imported English model on other languages and translation pairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ptmkit.data.parallel import pair_ranges
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.objectives.base import CorpusLike, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.registry import register
from ptmkit.tokenization.languages import language_index


@dataclass(frozen=True)
class XLMConfig(MLMConfig):
    nsp: bool = False  # XLM has no sentence-pair task; TLM's pairs are translations
    tlm: bool = True  # train TLM on the parallel corpora of --data (refused when there are none)
    language_embeddings: bool = True  # token types are language ids (else all 0)


def _pad(rows: np.ndarray, width: int, value: int) -> np.ndarray:
    out = np.full((rows.shape[0], width), value, dtype=rows.dtype)
    out[:, : rows.shape[1]] = rows
    return out


@register("objective", "xlm")
class XLM(MaskedLM):
    name = "xlm"
    config_class = XLMConfig

    def __init__(self, cfg: XLMConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        if cfg.nsp:
            raise PtmError("objective xlm: nsp is not part of XLM (TLM's pairs are translations); set objective.nsp=false")
        super().__init__(cfg, encoder, tokenizer)
        self.languages: tuple[str, ...] = tuple(getattr(tokenizer, "languages", ()))
        if cfg.language_embeddings and not self.languages:
            raise PtmError("objective xlm needs a tokenizer trained on several languages: ptm tokenizer train "
                           "en.txt es.txt --languages en,es -o tok.json, then ptm prepare each with --language")
        types = self.model_cfg.type_vocab_size
        if cfg.language_embeddings and types < len(self.languages):
            raise PtmError(f"objective xlm: {len(self.languages)} languages need model.type_vocab_size >= "
                           f"{len(self.languages)} (the language embeddings), got {types}")
        positions = getattr(getattr(encoder, "config", None), "positions", "absolute")
        if cfg.tlm and positions not in ("absolute", "relative"):
            raise PtmError(f"objective xlm: TLM restarts the positions of the translation, which needs "
                           f"model.positions=absolute or relative (got {positions!r}); or set objective.tlm=false")
        self._members: tuple[int, np.ndarray, np.ndarray] | None = None
        self.seq_len = 512

    # -- data ---------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """A parallel corpus gives one example per pair (its two sentences); another corpus MLM's spans."""
        self.seq_len = seq_len  # TLM's pairs are cut to it in collate
        if corpus.meta.get("parallel"):
            if not self.cfg.tlm:
                raise PtmError(f"{getattr(corpus, 'path', 'a corpus')} holds translation pairs, but objective.tlm=false; "
                               f"drop it from --data or set objective.tlm=true")
            sent = np.asarray(corpus.sentences, dtype=np.int64)
            docs = np.asarray(corpus.documents, dtype=np.int64)
            return np.stack([sent[docs[:-1]], sent[docs[1:]]], axis=1)
        return super().example_spans(corpus, seq_len)

    def member_languages(self, corpus: Any) -> tuple[np.ndarray, np.ndarray]:
        """``starts int64 [M + 1]`` (token offsets of the corpora joined in ``corpus``, or of the corpus
        itself) and ``langs int64 [M, 2]``: a corpus of one language ``(i, -1)``, a parallel corpus
        ``(i, j)`` (language indices); cached per corpus."""
        if self._members is not None and self._members[0] == id(corpus):
            return self._members[1], self._members[2]
        members = getattr(corpus, "members", None) or [corpus]
        starts = np.asarray(corpus.starts if len(members) > 1 else [0, corpus.n_tokens], dtype=np.int64)
        langs = np.full((len(members), 2), -1, dtype=np.int64)
        for m, member in enumerate(members):
            meta = getattr(member, "meta", {})
            where = f"corpus {getattr(member, 'path', m)}"
            if meta.get("parallel"):
                langs[m] = [self._index(c, where) for c in meta["parallel"]]
            elif meta.get("language") or not self.cfg.language_embeddings:
                langs[m, 0] = self._index(meta.get("language"), where)
            else:
                raise PtmError(f"{where} names no language; prepare it with ptm prepare ... --language CODE "
                               f"(one of {', '.join(self.languages)})")
        if self.cfg.tlm and not np.any(langs[:, 1] >= 0):
            raise PtmError("objective xlm trains TLM on translation pairs, but no corpus of --data holds any: add "
                           "one prepared with ptm prepare PAIRS --parallel en,es, or set objective.tlm=false (MLM only)")
        self._members = (id(corpus), starts, langs)
        return starts, langs

    def _index(self, code: str | None, where: str) -> int:
        """The language index a corpus's tokens get as types (0 for all without language embeddings)."""
        return language_index(self.languages, code, where) if self.cfg.language_embeddings else 0

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        starts, langs = self.member_languages(corpus)
        member = np.searchsorted(starts, spans[:, 0], side="right") - 1
        lang = langs[member]  # [B, 2]
        tlm = lang[:, 1] >= 0
        parts = []
        if np.any(~tlm):
            ids, _seg, ws, length = self.single_inputs(corpus, spans[~tlm])
            parts.append((~tlm, ids, ws, length, np.arange(ids.shape[1])[None].repeat(len(ids), 0), length))
        if np.any(tlm):
            ids, ws, length, pos, first = self.pair_layout(corpus, spans[tlm])
            parts.append((tlm, ids, ws, length, pos, first))
        T = max(p[1].shape[1] for p in parts)
        B = len(spans)
        ids = np.full((B, T), self.pad_id, dtype=np.int64)
        positions = np.zeros((B, T), dtype=np.int64)
        first_len = np.zeros(B, dtype=np.int64)  # tokens of the first language: [CLS] A [SEP], or all
        length = np.zeros(B, dtype=np.int64)
        word_starts = None if parts[0][2] is None else np.zeros((B, T), dtype=bool)
        for rows, p_ids, p_ws, p_len, p_pos, p_first in parts:
            ids[rows] = _pad(p_ids, T, self.pad_id)
            positions[rows] = _pad(p_pos, T, 0)
            length[rows], first_len[rows] = p_len, p_first
            if word_starts is not None:
                word_starts[rows] = _pad(p_ws, T, False)
        j = np.arange(T)[None, :]
        types = np.where(j < first_len[:, None], lang[:, :1], np.maximum(lang[:, 1:], 0))
        if not self.cfg.language_embeddings:
            types = np.zeros_like(types)
        batch = {"position_ids": torch.from_numpy(positions), "tlm": torch.from_numpy(tlm)}
        return self.finish_batch(batch, spans, ids, types, word_starts, length, rng)

    def pair_layout(self, corpus: CorpusLike, spans: np.ndarray) -> tuple[np.ndarray, ...]:
        """``[CLS] A [SEP] B [SEP]`` of the pairs whose example spans are ``spans [N, 2]``.  Returns
        ``ids [N, T]``, ``word_starts [N, T] | None``, ``length [N]``, ``positions [N, T]`` (B's part
        restarted at 1) and the length of ``[CLS] A [SEP]`` ``[N]``."""
        doc_first = np.searchsorted(np.asarray(corpus.sentences, dtype=np.int64), spans[:, 0])
        docs = np.searchsorted(np.asarray(corpus.documents, dtype=np.int64), doc_first)
        a0, a1, b0, b1 = pair_ranges(corpus, docs)
        budget = self.seq_len - 3
        la, lb = a1 - a0, b1 - b0
        over = la + lb > budget  # cut the longer side first, keeping at least half the budget each
        keep_a = np.where(over, np.minimum(la, np.maximum(budget // 2, budget - lb)), la)
        keep_b = np.where(over, np.minimum(lb, budget - keep_a), lb)
        ids, _segment, ws, length = self.pair_inputs(corpus, a0, a0 + keep_a, b0, b0 + keep_b)
        first = keep_a + 2
        j = np.arange(ids.shape[1])[None, :]
        positions = np.where(j < first[:, None], j, j - first[:, None] + 1)
        return ids, ws, length, positions, first

    # -- model --------------------------------------------------------------------------------
    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        out = backbone(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"), position_ids=batch.get("position_ids"))
        loss, metrics, n_predictions = self.mlm_loss(out.last_hidden_state, batch, backbone.output_embeddings())
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=n_predictions)

