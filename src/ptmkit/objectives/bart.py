"""BART: a denoising autoencoder for sequence-to-sequence pre-training (Lewis et al. 2020).

The encoder reads a corrupted document, the decoder reconstructs the original one; the loss is the
token cross-entropy of the reconstruction (teacher forcing: the decoder reads the original shifted
right behind ``decoder_start_token_id``).  An example is a run of whole consecutive sentences of
one document (at most ``seq_len - 2`` tokens); source and target are ``[CLS] tokens [SEP]``
(BART's ``<s> ... </s>``).

Noising functions (the paper's section 2.2), applied in this order, each switched on by config:

* sentence permutation (``sentence_permutation``): the example's sentences, as the corpus records
  them, are shuffled into a uniformly random order;
* token masking (``token_masking`` = the share of tokens): random tokens become ``[MASK]``;
* token deletion (``token_deletion`` = the share): random tokens are removed, so the model must
  find the missing positions;
* text infilling (``text_infilling`` = the share of tokens inside masked spans, 0.3 by default as
  in the paper's best setting): span lengths are drawn from Poisson(``poisson_lambda`` = 3) until
  they cover ``round(share * n)`` tokens (the last one cut to fit); the spans are placed at random
  without overlapping and each is replaced by ONE ``[MASK]``, so the model must also predict how
  many tokens are missing; a zero-length span inserts a ``[MASK]``;
* document rotation (``document_rotation``): a token is chosen uniformly at random and the
  (noised) example is rotated to begin with it.

The defaults are the paper's best combination: text infilling + sentence permutation.

Collation works per example on numpy arrays (a loop over the ``B`` examples of a batch; inside an
example every step is vectorised, never a loop over tokens), then pads the batch in one go:
``input_ids``/``attention_mask`` ``[B, S]`` (the noised source), ``decoder_input_ids`` ``[B, T]``
(the target shifted right) and ``labels`` ``[B, T]`` (the target, -100 at padding).  Zero-length
spans can make a source a few tokens longer than its target (rarely: each non-empty span shortens
it); it is cut to the model's ``max_position`` only.

The loss projects only the ``N`` real target positions onto the vocabulary, through
:func:`ptmkit.nn.linear_ce.linear_cross_entropy` (tied embeddings + ``final_logits_bias``), so the
``[B, T, V]`` logits are never stored.  :func:`greedy_decode` reconstructs with a key/value cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.generation import GenerationConfig, Seq2SeqStepper, decode
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX, target_mask
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.spans import pack_sentences
from ptmkit.registry import register


@dataclass(frozen=True)
class DenoisingConfig:
    text_infilling: float = 0.3  # share of tokens inside masked spans; 0 = off
    poisson_lambda: float = 3.0  # mean span length of text infilling
    token_masking: float = 0.0  # share of tokens replaced by [MASK]; 0 = off
    token_deletion: float = 0.0  # share of tokens deleted; 0 = off
    sentence_permutation: bool = True  # shuffle the example's sentences
    document_rotation: bool = False  # rotate the example to start at a random token

    def __post_init__(self) -> None:
        for name in ("text_infilling", "poisson_lambda", "token_masking", "token_deletion"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"objective.{name} must be a number, got {value!r}") from None
        for name in ("text_infilling", "token_masking", "token_deletion"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise PtmError(f"objective.{name} is a share of the tokens and must be in [0, 1), got {getattr(self, name)}")
        if not self.poisson_lambda > 0:
            raise PtmError(f"objective.poisson_lambda must be positive, got {self.poisson_lambda}")
        for name in ("sentence_permutation", "document_rotation"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"objective.{name} must be true or false, got {getattr(self, name)!r}")


# -- noising functions (one example: 1-D int64 arrays of its tokens, no [CLS]/[SEP]) ----------------
def permute_sentences(x: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x [n]`` with its sentences (``bounds``: offsets ``[k + 1]``, 0 .. n) in a random order."""
    lens = np.diff(bounds)
    if len(lens) < 2:
        return x.copy()
    order = rng.permutation(len(lens))
    lens_out = lens[order]
    out_start = np.cumsum(lens_out) - lens_out  # where each moved sentence begins in the output
    src = np.repeat(bounds[:-1][order] - out_start, lens_out) + np.arange(len(x))
    return x[src]


def mask_tokens(x: np.ndarray, share: float, mask_id: int, rng: np.random.Generator) -> np.ndarray:
    """``x [n]`` with ``round(share * n)`` positions chosen uniformly replaced by ``mask_id``."""
    out = x.copy()
    k = int(round(share * len(x)))
    if k:
        out[rng.choice(len(x), size=k, replace=False)] = mask_id
    return out


def delete_tokens(x: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """``x [n]`` without ``round(share * n)`` positions chosen uniformly: ``[n - k]``."""
    k = int(round(share * len(x)))
    if not k:
        return x.copy()
    keep = np.ones(len(x), dtype=bool)
    keep[rng.choice(len(x), size=k, replace=False)] = False
    return x[keep]


def infilling_spans(n: int, share: float, poisson_lambda: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Spans to mask in a sequence of ``n`` tokens: ``(starts [k], lengths [k])``, int64.

    ``lengths`` ~ Poisson(``poisson_lambda``) are drawn until they cover ``m = round(share * n)``
    tokens; the last is cut so that they sum to exactly ``m``.  The ``k`` spans and the ``n - m``
    untouched tokens are then arranged in a uniformly random order (a random ``k``-subset of the
    ``n - m + k`` slots), so spans never overlap; ``starts`` (sorted) are the positions in ``x``
    where each span begins (a zero-length span inserts its [MASK] before ``x[start]``).
    """
    m = int(round(share * n))
    if m == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    lengths = np.zeros(0, dtype=np.int64)
    while lengths.sum() < m:  # one draw almost always suffices
        lengths = np.concatenate([lengths, rng.poisson(poisson_lambda, size=int(1.5 * m / poisson_lambda) + 8)])
    total = np.cumsum(lengths)
    k = int(np.searchsorted(total, m)) + 1  # the first k spans reach m
    lengths = lengths[:k].astype(np.int64)
    lengths[-1] -= int(total[k - 1]) - m
    slots = np.sort(rng.choice(n - m + k, size=k, replace=False))
    item_len = np.ones(n - m + k, dtype=np.int64)
    item_len[slots] = lengths
    starts = (np.cumsum(item_len) - item_len)[slots]
    return starts, lengths


def infill(x: np.ndarray, starts: np.ndarray, lengths: np.ndarray, mask_id: int) -> np.ndarray:
    """``x [n]`` with each span ``[start, start + length)`` replaced by one ``mask_id``:
    ``[n - sum(lengths) + k]``."""
    n = len(x)
    if len(starts) == 0:
        return x.copy()
    cover = np.zeros(n + 1, dtype=np.int64)
    np.add.at(cover, starts, 1)
    np.add.at(cover, starts + lengths, -1)
    keep = np.flatnonzero(np.cumsum(cover[:-1]) == 0)
    # order: a span's [MASK] goes before the token at its start (key 2 s), token i has key 2 i + 1
    keys = np.concatenate([2 * keep + 1, 2 * starts])
    ids = np.concatenate([x[keep], np.full(len(starts), mask_id, dtype=x.dtype)])
    return ids[np.argsort(keys, kind="stable")]


def rotate(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x [n]`` rotated to begin at a uniformly chosen token."""
    if len(x) < 2:
        return x.copy()
    return np.roll(x, -int(rng.integers(len(x))))


# -- greedy decoding -----------------------------------------------------------------------------
def greedy_decode(
    encoder: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    max_length: int = 64,
    eos_id: int | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Greedy reconstruction of ``input_ids [B, S]`` by an encoder–decoder (the shared decoding
    loop of :mod:`ptmkit.generation` with ``greedy=True``).

    The decoder starts from ``decoder_start_token_id`` and appends the arg-max token (of the tied
    logits + ``final_logits_bias``) until every sequence has produced ``eos_id`` or ``max_length``
    tokens exist (at most the decoder's ``max_position``); tokens after a sequence's ``eos_id``
    are padding.  Returns the generated ids ``[B, L]`` (the start token not included), as HF
    ``generate`` with greedy settings would (minus its leading start token).  ``use_cache=False``
    reruns the decoder over the whole prefix at each step (the reference the cached path is
    tested against).
    """
    if int(max_length) < 1:
        return torch.zeros(input_ids.shape[0], 0, dtype=torch.long, device=input_ids.device)
    cfg = GenerationConfig(max_new_tokens=int(max_length), greedy=True, use_cache=use_cache)
    with torch.no_grad():
        stepper = Seq2SeqStepper(encoder, input_ids, attention_mask, use_cache)
        return decode(stepper, cfg, eos_id, encoder.config.pad_token_id)


@register("objective", "bart")
class BartDenoising(Objective):
    """BART's denoising autoencoder.  Batch keys: ``input_ids [B, S]``, ``attention_mask [B, S]``,
    ``decoder_input_ids [B, T]``, ``labels [B, T]`` (-100 = padding)."""

    config_class = DenoisingConfig
    encoders = ("encoder_decoder",)
    causal = False
    hf_heads = ("lm",)
    generation = "seq2seq"
    metric = "bart_loss"  # the loss's name in the logged metrics
    reserved = 2  # special tokens around an example's text: [CLS] ... [SEP]

    def __init__(self, cfg: DenoisingConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        model_cfg = encoder.config
        if model_cfg.pad_token_id != self.pad_id:
            raise PtmError(
                f"model.pad_token_id={model_cfg.pad_token_id} is not the tokenizer's [PAD] id {self.pad_id}; "
                f"set model.pad_token_id={self.pad_id}"
            )
        self.bos_id = int(tokenizer.cls_id)
        self.eos_id = int(tokenizer.sep_id)
        self.mask_id = int(tokenizer.mask_id)
        self.start_id = int(model_cfg.decoder_start_token_id)

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Runs of whole sentences of one document, <= ``seq_len - reserved`` tokens (BART: room for
        [CLS], [SEP])."""
        name = type(self).__name__
        if seq_len < self.reserved + 1:
            raise PtmError(f"seq_len={seq_len} is too short for {name} (need at least {self.reserved + 1})")
        if seq_len > self.position_limit:
            raise PtmError(f"seq_len={seq_len} is longer than the model's max_position {self.position_limit}")
        spans = pack_sentences(corpus.sentences, corpus.documents, seq_len - self.reserved, min_len=1)
        if len(spans) == 0:
            raise PtmError(f"the corpus has no usable text for {name} examples (is it empty?)")
        return spans

    def noise(self, x: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One example's tokens ``x [n]`` (sentence offsets ``bounds [k + 1]``) -> the noised
        tokens, by the configured functions in the order of the module docstring."""
        cfg = self.cfg
        if cfg.sentence_permutation:
            x = permute_sentences(x, bounds, rng)
        if cfg.token_masking > 0:
            x = mask_tokens(x, cfg.token_masking, self.mask_id, rng)
        if cfg.token_deletion > 0:
            x = delete_tokens(x, cfg.token_deletion, rng)
        if cfg.text_infilling > 0:
            starts, lengths = infilling_spans(len(x), cfg.text_infilling, cfg.poisson_lambda, rng)
            x = infill(x, starts, lengths, self.mask_id)
        if cfg.document_rotation:
            x = rotate(x, rng)
        return x

    def _pad(self, rows: Sequence[np.ndarray], fill: int, wrap: bool) -> tuple[np.ndarray, np.ndarray]:
        """Right-pad ``rows`` (optionally wrapped as ``[CLS] row [SEP]``) into ``[B, L]`` with
        ``fill``; returns the ids and the lengths ``[B]``."""
        parts = [np.concatenate([[self.bos_id], r, [self.eos_id]]) if wrap else r for r in rows]
        lens = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        out = np.full((len(parts), int(lens.max())), fill, dtype=np.int64)
        rows_idx = np.repeat(np.arange(len(parts)), lens)
        cols = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        out[rows_idx, cols] = np.concatenate(parts).astype(np.int64)
        return out, lens

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        sent = np.asarray(corpus.sentences, dtype=np.int64)
        max_content = self.position_limit - 2
        originals, noised = [], []
        for st, en in spans:  # one example at a time; each noising step is vectorised
            x = np.asarray(corpus.tokens[st:en], dtype=np.int64)
            inner = sent[np.searchsorted(sent, st, side="right") : np.searchsorted(sent, en, side="left")]
            bounds = np.concatenate([[0], inner - st, [en - st]])
            originals.append(x)
            noised.append(self.noise(x, bounds, rng)[:max_content])
        source, src_len = self._pad(noised, self.pad_id, wrap=True)
        target, tgt_len = self._pad(originals, self.pad_id, wrap=True)
        return self.seq2seq_batch(source, src_len, target, tgt_len)

    def seq2seq_batch(self, source: np.ndarray, src_len: np.ndarray, target: np.ndarray,
                      tgt_len: np.ndarray) -> dict[str, torch.Tensor]:
        """Padded sources ``[B, S]`` and targets ``[B, T]`` with their lengths ``[B]`` -> the batch:
        ``input_ids``, ``attention_mask``, ``decoder_input_ids`` (targets shifted right behind the
        decoder start token) and ``labels`` (-100 at padding)."""
        T = target.shape[1]
        real = np.arange(T)[None, :] < tgt_len[:, None]
        labels = np.where(real, target, IGNORE_INDEX)
        decoder_input = np.full_like(target, self.pad_id)
        decoder_input[:, 0] = self.start_id
        decoder_input[:, 1:] = np.where(real[:, 1:], target[:, :-1], self.pad_id)
        attention = (np.arange(source.shape[1])[None, :] < src_len[:, None]).astype(np.int64)
        return {
            "input_ids": torch.from_numpy(source),
            "attention_mask": torch.from_numpy(attention),
            "decoder_input_ids": torch.from_numpy(decoder_input),
            "labels": torch.from_numpy(labels),
        }

    # -- model ------------------------------------------------------------------------------
    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch["attention_mask"]
        labels = batch["labels"]
        out = backbone(batch["input_ids"], attention_mask=attention_mask, decoder_input_ids=batch["decoder_input_ids"],
                       decoder_attention_mask=target_mask(labels))
        real = labels != IGNORE_INDEX
        h = backbone.lm_input(out.last_hidden_state[real])  # [N, H]: only real target positions reach the vocabulary
        loss = linear_cross_entropy(h, backbone.output_embeddings(), backbone.output_bias(), labels[real])
        return StepOutput(
            loss=loss,
            metrics={self.metric: loss.detach()},
            n_tokens=input_tokens(batch),
            n_predictions=int(h.shape[0]),
        )

    # -- generation -------------------------------------------------------------------------
    def generate(self, backbone: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 max_length: int = 64) -> torch.Tensor:
        """Greedy decoding until [SEP] (see :func:`greedy_decode`): ``[B, S] -> [B, L]``."""
        return greedy_decode(backbone, input_ids, attention_mask, max_length, eos_id=self.eos_id)

    def reconstruct(self, backbone: Encoder, tokenizer: Any, texts: Sequence[str], seed: int = 0,
                    max_length: int | None = None) -> list[dict[str, str]]:
        """Noise each text (its lines are its sentences), reconstruct it greedily and decode:
        ``[{"original", "noised", "reconstruction"}]``; shows what the model has learned."""
        rng = np.random.default_rng(seed)
        room = self.position_limit - self.reserved
        originals, sources = [], []
        for text in texts:
            lines = [ln for ln in str(text).splitlines() if ln.strip()] or [""]
            pieces = [np.asarray(tokenizer.encode(ln), dtype=np.int64) for ln in lines]
            x = np.concatenate(pieces)[:room]
            bounds = np.minimum(np.concatenate([[0], np.cumsum([len(p) for p in pieces])]), len(x))
            originals.append(x)
            sources.append(self.make_source(x, bounds, rng))
        source, src_len = self._pad(sources, self.pad_id, wrap=False)
        attention = (np.arange(source.shape[1])[None, :] < src_len[:, None]).astype(np.int64)
        device = backbone.output_embeddings().device
        limit = max_length or int(max(len(x) for x in originals)) + 8
        was_training = backbone.training
        backbone.eval()
        try:
            ids = self.generate(backbone, torch.from_numpy(source).to(device), torch.from_numpy(attention).to(device), limit)
        finally:
            backbone.train(was_training)
        return [self.show(tokenizer, x, source[i, : src_len[i]], ids[i].cpu().numpy()) for i, x in enumerate(originals)]

    def make_source(self, x: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One text's tokens ``x [n]`` (sentence offsets ``bounds``) -> the encoder input shown to
        :meth:`reconstruct`: ``[CLS] noise(x) [SEP]``."""
        noised = self.noise(x, bounds, rng)[: self.position_limit - 2]
        return np.concatenate([[self.bos_id], noised, [self.eos_id]]).astype(np.int64)

    def show(self, tokenizer: Any, x: np.ndarray, source: np.ndarray, generated: np.ndarray) -> dict[str, str]:
        """One :meth:`reconstruct` row from the original ``x``, the encoder input ``source`` (from
        :meth:`make_source`) and the generated ids."""
        src = [int(t) for t in source[1:-1]]
        return {
            "original": tokenizer.decode(x.tolist()),
            "noised": tokenizer.decode(src, skip_special_tokens=False),  # shows the [MASK]s
            "reconstruction": tokenizer.decode([int(t) for t in generated.tolist()]),
        }


__all__ = [
    "BartDenoising", "DenoisingConfig", "delete_tokens", "greedy_decode", "infill", "infilling_spans",
    "mask_tokens", "permute_sentences", "rotate",
]
