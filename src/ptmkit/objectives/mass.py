"""MASS: masked sequence to sequence pre-training (Song et al. 2019).

For a sentence ``x`` of ``m`` tokens, MASS masks ONE contiguous fragment ``x[u:v]`` of
``k = round(span_ratio * m)`` tokens (rounded half up, then clipped to ``1 .. m``; the paper's
default and best setting is ``k ~ m / 2``), starting at a position ``u`` drawn uniformly from the
``m - k + 1`` places it fits.  The encoder reads ``x`` with the fragment hidden; the decoder predicts
exactly the fragment, left to right:

    L = - sum_{t = u}^{v - 1}  log P(x_t | x_{u .. t-1}, x with x[u:v] masked)

so the decoder sees the fragment's own prefix but none of the tokens the encoder sees, and must take
them from the encoder.  The two ends of the ratio are the paper's point (section 2.3): ``k = 1`` is
BERT's masked LM (one masked token, predicted from the bidirectional context), ``k = m`` is a
left-to-right LM (GPT) whose "encoder" reads nothing but masks.

Encoder input (as the paper, section 4.1, and BERT): each fragment token independently becomes
``[MASK]`` with probability ``mask_token_ratio`` (0.8), a random ordinary token with
``random_token_ratio`` (0.1), and stays itself otherwise (0.1) (:func:`ptmkit.objectives.masking.corrupt`).
The sequence is ``[CLS] x [SEP]``; [CLS] and [SEP] are never masked.

Decoder input (teacher forcing): the fragment shifted right by one, at the fragment's ORIGINAL
positions.  The decoder's step ``j`` (``0 <= j < k``) predicts ``x[u + j]``, sits at position id
``p_j = 1 + u + j`` (its place in ``[CLS] x [SEP]``, the same numbering as the encoder's positions)
and reads ``x[u + j - 1]``.  For ``j = 0`` that is the token just before the fragment (``[CLS]``
when the fragment starts the sentence): the paper's Figure 1 draws this first input as a mask
symbol, but the authors' released code feeds the preceding token, and ptmkit does the same
(``first_input: previous``, the default); ``first_input: mask`` feeds ``[MASK]`` instead.  The
preceding token is visible to the encoder anyway, so either choice leaks nothing.  (The released
code numbers each decoder input by its own position, ``p_j - 1``; ptmkit numbers it by the position
it predicts, as BART's decoder does: one learned table, indexed consistently in training and
decoding.)  The decoder therefore runs on ``k`` positions, not ``m``: the paper's note that masking
the decoder inputs outside the fragment is equivalent to leaving them out.

Examples: one sentence each (the paper's unit; a sentence longer than ``seq_len - 2`` tokens is cut
into pieces), or with ``pack_sentences: true`` runs of whole consecutive sentences of one document
up to ``seq_len - 2`` tokens, each with one fragment.

Batch keys (example dimension first): ``input_ids [B, S]`` and ``attention_mask [B, S]`` (the
corrupted ``[CLS] x [SEP]``, right-padded), ``decoder_input_ids [B, P]``, ``decoder_position_ids
[B, P]``, ``labels [B, P]`` (the fragment, -100 past an example's ``k``), ``P = max k``.  The loss
projects only the ``sum(k)`` fragment positions onto the vocabulary (tied embeddings +
``final_logits_bias``, through :func:`ptmkit.nn.linear_ce.linear_cross_entropy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX, target_mask
from ptmkit.objectives.base import CorpusLike, Objective, StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.masking import corrupt
from ptmkit.objectives.spans import pack_sentences
from ptmkit.registry import register

FIRST_INPUTS = ("previous", "mask")


@dataclass(frozen=True)
class MASSConfig:
    span_ratio: float = 0.5  # k = round(span_ratio * m) of a sentence's m tokens; in (0, 1]
    mask_token_ratio: float = 0.8  # share of fragment tokens the encoder sees as [MASK]
    random_token_ratio: float = 0.1  # ... as a random ordinary token (the rest stay)
    first_input: str = "previous"  # the decoder's first input: the token before the fragment, or [MASK]
    pack_sentences: bool = False  # examples: one sentence (false, the paper) or runs of sentences

    def __post_init__(self) -> None:
        for name in ("span_ratio", "mask_token_ratio", "random_token_ratio"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"objective.{name} must be a number, got {value!r}") from None
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), float):
                raise PtmError(f"objective.{name} must be a number, got {value!r}")
        if not 0.0 < self.span_ratio <= 1.0:
            raise PtmError(f"objective.span_ratio is the share of a sentence that is masked and must be in (0, 1], "
                           f"got {self.span_ratio} (0.5 is the paper's)")
        if not (0.0 <= self.mask_token_ratio and 0.0 <= self.random_token_ratio
                and self.mask_token_ratio + self.random_token_ratio <= 1.0):
            raise PtmError(
                f"objective.mask_token_ratio ({self.mask_token_ratio}) and objective.random_token_ratio "
                f"({self.random_token_ratio}) must be non-negative with a sum <= 1 (the paper: 0.8 and 0.1)"
            )
        if self.first_input not in FIRST_INPUTS:
            raise PtmError(f"objective.first_input={self.first_input!r} is not one of {FIRST_INPUTS}")
        if not isinstance(self.pack_sentences, bool):
            raise PtmError(f"objective.pack_sentences must be true or false, got {self.pack_sentences!r}")


def span_lengths(m: np.ndarray, ratio: float) -> np.ndarray:
    """Fragment lengths ``k [B]`` of sentences of ``m [B]`` tokens: ``ratio * m`` rounded half up
    (a tolerance absorbs float error: 0.3 * 5 is 1.5), clipped to ``1 .. m`` (at least one token is
    predicted; a sentence of one token has its only token masked)."""
    m = np.asarray(m, dtype=np.int64)
    k = np.floor(ratio * m + 0.5 + 1e-9).astype(np.int64)
    return np.clip(k, 1, np.maximum(m, 1))


def draw_spans(m: np.ndarray, ratio: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One fragment per sentence of ``m [B]`` tokens: starts ``u [B]`` uniform over
    ``0 .. m - k`` and lengths ``k [B]`` (:func:`span_lengths`)."""
    k = span_lengths(m, ratio)
    starts = rng.integers(0, np.maximum(np.asarray(m, dtype=np.int64) - k, 0) + 1)
    return starts.astype(np.int64), k


@torch.no_grad()
def greedy_span_decode(
    encoder: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    first_ids: torch.Tensor,
    position_ids: torch.Tensor,
    use_cache: bool = True,
) -> torch.Tensor:
    """Greedy prediction of masked fragments by an ``encoder_decoder`` encoder.

    input_ids / attention_mask ``[B, S]``: the masked source; first_ids ``[B]``: the decoder's first
    input; position_ids ``[B, P]``: the fragment's positions (step ``j`` sits at ``position_ids[:, j]``).
    Each step feeds the previous step's arg-max at the next position.  Returns ``[B, P]``.  With
    ``use_cache=False`` the decoder reruns over the whole prefix each step (the reference for the
    cached path).
    """
    memory = encoder.encode(input_ids, attention_mask).last_hidden_state  # [B, S, H]
    prefix = first_ids[:, None]
    cache = encoder.start_cache(memory, attention_mask) if use_cache else None
    out: list[torch.Tensor] = []
    for j in range(position_ids.shape[1]):
        if use_cache:
            dec = encoder.decode(prefix[:, -1:], cache=cache, position_ids=position_ids[:, j : j + 1])
            cache = dec.extras["cache"]
        else:
            dec = encoder.decode(prefix, memory, attention_mask, position_ids=position_ids[:, : j + 1])
        nxt = encoder.logits(dec.last_hidden_state[:, -1]).argmax(dim=-1)  # [B]
        out.append(nxt)
        prefix = torch.cat([prefix, nxt[:, None]], dim=1)
    return torch.stack(out, dim=1) if out else prefix[:, :0]


@register("objective", "mass")
class MASS(Objective):
    """MASS (see the module docstring).  Batch keys: ``input_ids``, ``attention_mask`` ``[B, S]``;
    ``decoder_input_ids``, ``decoder_position_ids``, ``labels`` ``[B, P]``."""

    config_class = MASSConfig
    encoders = ("encoder_decoder",)
    causal = False
    hf_heads = ("lm",)  # the tied LM head is the backbone's own; MASS adds no parameters

    def __init__(self, cfg: MASSConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        if encoder.config.pad_token_id != self.pad_id:
            raise PtmError(
                f"model.pad_token_id={encoder.config.pad_token_id} is not the tokenizer's [PAD] id {self.pad_id}; "
                f"set model.pad_token_id={self.pad_id}"
            )
        self.cls_id = int(tokenizer.cls_id)
        self.sep_id = int(tokenizer.sep_id)
        self.mask_id = int(tokenizer.mask_id)
        specials = {self.pad_id, self.cls_id, self.sep_id, self.mask_id, int(tokenizer.unk_id)}
        specials |= {int(i) for i in getattr(tokenizer, "special_ids", ()) or ()}
        self._random_pool = np.setdiff1d(np.arange(self.vocab_size, dtype=np.int64), np.array(sorted(specials)))
        if len(self._random_pool) == 0:
            raise PtmError("the tokenizer has no ordinary tokens to use as random replacements")

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Sentences (or, with ``pack_sentences``, runs of sentences) of <= ``seq_len - 2`` tokens."""
        if seq_len < 3:
            raise PtmError(f"seq_len={seq_len} is too short for MASS (need at least 3: [CLS], a token, [SEP])")
        if seq_len > self.position_limit:
            raise PtmError(f"seq_len={seq_len} is longer than the model's max_position {self.position_limit}")
        sentences = np.asarray(corpus.sentences, dtype=np.int64)
        # every sentence its own "document": the packer then keeps sentences apart (and cuts long ones)
        documents = np.asarray(corpus.documents, dtype=np.int64) if self.cfg.pack_sentences \
            else np.arange(len(sentences), dtype=np.int64)
        spans = pack_sentences(sentences, documents, seq_len - 2, min_len=1)
        if len(spans) == 0:
            raise PtmError("the corpus has no usable text for MASS examples (is it empty?)")
        return spans

    def build(self, x: np.ndarray, lengths: np.ndarray, rng: np.random.Generator,
              corruption: bool = True) -> dict[str, np.ndarray]:
        """Sentences ``x [B, M]`` (right-padded; ``lengths [B]`` real tokens, each >= 1) -> the MASS
        arrays of the module docstring, plus ``span_start`` and ``span_length`` ``[B]`` (in ``x``).

        corruption: the 80/10/10 replacement of training; ``False`` masks every fragment token
        (what :meth:`reconstruct` shows).  Randomness: the starts, then the corruption, from ``rng``.
        """
        B, M = x.shape
        lengths = np.asarray(lengths, dtype=np.int64)
        if B and int(lengths.min()) < 1:
            raise PtmError("every MASS example needs at least one token")
        rows = np.arange(B)[:, None]
        cols = np.arange(M)[None, :]
        source = np.full((B, M + 2), self.pad_id, dtype=np.int64)
        source[:, 0] = self.cls_id
        source[:, 1 : M + 1] = np.where(cols < lengths[:, None], x, self.pad_id)
        source[np.arange(B), lengths + 1] = self.sep_id
        original = source.copy()
        starts, k = draw_spans(lengths, self.cfg.span_ratio, rng)
        P = int(k.max()) if B else 0
        used = np.arange(P)[None, :] < k[:, None]  # [B, P]
        positions = np.where(used, 1 + starts[:, None] + np.arange(P)[None, :], 0)  # in [CLS] x [SEP]
        if corruption:
            labels = corrupt(source, positions, used, np.zeros((B, P), dtype=np.int64), rng, self.mask_id,
                             self._random_pool, self.cfg.mask_token_ratio, self.cfg.random_token_ratio)
        else:
            labels = np.where(used, original[rows, positions], IGNORE_INDEX)
            source[rows, positions] = np.where(used, self.mask_id, source[rows, positions])
        decoder_input = np.where(used, original[rows, np.maximum(positions - 1, 0)], self.pad_id)
        if self.cfg.first_input == "mask" and P:
            decoder_input[:, 0] = self.mask_id
        attention = (np.arange(M + 2)[None, :] < (lengths + 2)[:, None]).astype(np.int64)
        return {
            "input_ids": source, "attention_mask": attention, "decoder_input_ids": decoder_input,
            "decoder_position_ids": positions, "labels": labels, "span_start": starts, "span_length": k,
        }

    @staticmethod
    def gather(corpus: CorpusLike, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The examples ``spans [B, 2]`` as right-padded token ids ``[B, M]`` (padding: each row's
        first token, never read) and their lengths ``[B]``."""
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        lengths = spans[:, 1] - spans[:, 0]
        M = int(lengths.max())
        idx = spans[:, :1] + np.arange(M)[None, :]
        inside = np.arange(M)[None, :] < lengths[:, None]
        return np.asarray(corpus.tokens)[np.where(inside, idx, spans[:, :1])].astype(np.int64), lengths

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        x, lengths = self.gather(corpus, spans)
        arrays = self.build(x, lengths, rng)
        keys = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_position_ids", "labels")
        return {key: torch.from_numpy(np.ascontiguousarray(arrays[key])) for key in keys}

    # -- model ------------------------------------------------------------------------------
    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        attention_mask = batch["attention_mask"]
        labels = batch["labels"]
        out = backbone(batch["input_ids"], attention_mask=attention_mask, decoder_input_ids=batch["decoder_input_ids"],
                       decoder_attention_mask=target_mask(labels), decoder_position_ids=batch["decoder_position_ids"])
        real = labels != IGNORE_INDEX
        h = out.last_hidden_state[real]  # [N, H]: only the fragment's positions reach the vocabulary
        loss = linear_cross_entropy(h, backbone.output_embeddings(), backbone.output_bias(), labels[real])
        return StepOutput(
            loss=loss,
            metrics={"mass_loss": loss.detach()},
            n_tokens=input_tokens(batch),
            n_predictions=int(h.shape[0]),
        )

    # -- generation -------------------------------------------------------------------------
    def reconstruct(self, backbone: Encoder, tokenizer: Any, texts: Sequence[str], seed: int = 0,
                    max_length: int | None = None) -> list[dict[str, str]]:
        """Mask one fragment of each text (``span_ratio`` of its tokens, every one ``[MASK]``, no
        random or kept tokens so the display shows what is hidden) and predict it greedily at its
        positions (:func:`greedy_span_decode`).  A text's lines are joined into one sentence; at most
        ``max_length`` tokens of it are read (default: what the model's positions allow).

        Returns ``[{"original", "noised", "reconstruction", "masked_span", "predicted_span"}]``: the
        reconstruction is the original with the fragment replaced by the prediction, so it reads like
        BART's full reconstruction.
        """
        limit = self.position_limit - 2
        if max_length is not None:
            limit = max(1, min(limit, int(max_length)))
        rows_ = []
        for text in texts:
            line = " ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())
            ids = np.asarray(tokenizer.encode(line), dtype=np.int64)[:limit]
            rows_.append(ids if len(ids) else np.array([int(tokenizer.unk_id)], dtype=np.int64))
        lengths = np.array([len(r) for r in rows_], dtype=np.int64)
        x = np.full((len(rows_), int(lengths.max())), self.pad_id, dtype=np.int64)
        for i, r in enumerate(rows_):
            x[i, : len(r)] = r
        arrays = self.build(x, lengths, np.random.default_rng(seed), corruption=False)
        k, u = arrays["span_length"], arrays["span_start"]
        positions = arrays["decoder_position_ids"]
        used = np.arange(positions.shape[1])[None, :] < k[:, None]
        # steps past an example's fragment run at a valid position; causal attention hides them
        positions = np.where(used, positions, positions[:, :1])
        device = backbone.output_embeddings().device
        as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        was_training = backbone.training
        backbone.eval()
        try:
            pred = greedy_span_decode(backbone, as_t(arrays["input_ids"]), as_t(arrays["attention_mask"]),
                                      as_t(arrays["decoder_input_ids"][:, 0]), as_t(positions)).cpu().numpy()
        finally:
            backbone.train(was_training)
        results = []
        for i, r in enumerate(rows_):
            a, n = int(u[i]), int(k[i])
            filled = np.concatenate([r[:a], pred[i, :n], r[a + n :]])
            src = arrays["input_ids"][i, 1 : lengths[i] + 1]
            results.append({
                "original": tokenizer.decode(r.tolist()),
                "noised": tokenizer.decode(src.tolist(), skip_special_tokens=False),  # shows the [MASK]s
                "reconstruction": tokenizer.decode(filled.tolist()),
                "masked_span": tokenizer.decode(r[a : a + n].tolist()),
                "predicted_span": tokenizer.decode(pred[i, :n].tolist()),
            })
        return results


__all__ = ["MASS", "MASSConfig", "draw_spans", "greedy_span_decode", "span_lengths"]
